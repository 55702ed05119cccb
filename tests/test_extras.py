"""Optional packages: a missing one is one sentence naming the extra that installs it (t2t.extras)."""

import importlib.util

import pytest

from t2t import extras
from t2t.cli import serve_main
from t2t.errors import T2TError


def without(monkeypatch, missing: str) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name == missing else real(name, *args))


def test_a_missing_package_names_its_extra_and_the_alternative(monkeypatch):
    without(monkeypatch, "peft")
    with pytest.raises(T2TError, match=r"^writing a PEFT adapter needs peft, which is not installed; "
                                       r"pip install 't2t\[lora\]', or export with --to hf\.$"):
        extras.import_extra("peft.tuners", "lora", "writing a PEFT adapter", "export with --to hf")
    assert extras.import_extra("json.decoder", "none", "a test").__name__ == "json.decoder"


def test_t2t_serve_without_its_extra_is_one_line_and_status_2(monkeypatch, capsys, tmp_path):
    without(monkeypatch, "uvicorn")
    assert serve_main(["--checkpoint", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: t2t-serve needs uvicorn, which is not installed; pip install 't2t[serve]'."
