"""Shared fixtures: real public data through T2T_DATA_DIR (skipped without it) and small CPU settings."""

import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(min(2, os.cpu_count() or 1))
# The suite never reaches the network: hub look-ups fail at once instead of retrying for ~24 s each.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def _data_dir() -> Path | None:
    value = os.environ.get("T2T_DATA_DIR")
    return Path(value) if value and Path(value).is_dir() else None


@pytest.fixture
def data_dir() -> Path:
    """Root of the real data copies (glue/, corpus/, vocab/); tests using it skip where it is absent."""
    path = _data_dir()
    if path is None:
        pytest.skip("real-data test: set T2T_DATA_DIR to a folder with glue/, corpus/ and vocab/")
    return path


@pytest.fixture
def t5_vocab_path(data_dir: Path) -> Path:
    path = data_dir / "vocab" / "t5_spiece.model"
    if not path.exists():
        pytest.skip(f"real-data test: {path} is missing")
    return path


REAL_DATA_FIXTURES = {"data_dir", "t5_vocab_path"}


def pytest_collection_modifyitems(items):
    """Tiers for `pytest -m`: ``real_data`` for tests that read T2T_DATA_DIR, ``unit`` for every test not
    marked ``integration`` (modules and tests that run CLIs, subprocesses or training runs say so)."""
    for item in items:
        if REAL_DATA_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.real_data)
        if item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.unit)
