"""t2t.checkpoints.hf without transformers: which names go to the hub, and what a failed download says.

(Conversion against transformers' own T5 is tests/test_hf_parity.py.)
"""

from __future__ import annotations

import re
import types

import pytest

import t2t
from t2t.checkpoints.loading import load_model
from t2t.errors import T2TError

huggingface_hub = pytest.importorskip("huggingface_hub")
hub_errors = pytest.importorskip("huggingface_hub.errors")


@pytest.fixture
def no_download(monkeypatch):
    """Any download attempt fails the test."""
    def fail(repo_id, **kwargs):
        raise AssertionError(f"tried to download {repo_id}")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)


@pytest.mark.parametrize("name,reason", [
    ("runs/glue-smal", "'runs' exists here"),
    ("./glue-small", "starts with './'"),
    ("../glue-small", "starts with '../'"),
    ("~/runs/glue-small", "starts with '~'"),
    ("a/b/c", "more than one '/'"),
])
@pytest.mark.parametrize("load", [load_model, t2t.from_hf], ids=["load_model", "from_hf"])
def test_a_missing_path_looking_name_is_an_error_not_a_download(tmp_path, monkeypatch, no_download, name,
                                                                 reason, load):
    (tmp_path / "runs" / "glue-small").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(T2TError) as e:
        load(name)
    message = str(e.value)
    assert message.startswith(f"{name} does not exist; check the path") and reason in message
    assert "\n" not in message and message.count(". ") == 0


def test_an_absolute_missing_path_is_named(tmp_path, no_download):
    missing = tmp_path / "runs" / "glue-smal"
    with pytest.raises(T2TError, match=f"^{re.escape(str(missing))} does not exist; check the path"):
        load_model(missing)


def test_owner_slash_name_goes_to_the_hub_when_owner_is_not_local(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    asked = []

    def offline(repo_id, **kwargs):
        asked.append(repo_id)
        raise hub_errors.LocalEntryNotFoundError("outgoing traffic has been disabled")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(T2TError):
        load_model("google-t5/t5-small")
    assert asked == ["google-t5/t5-small"]


def _http_error(cls, status: int):
    response = types.SimpleNamespace(status_code=status, headers={}, request=None)
    return cls(f"{status} Client Error", response=response)


@pytest.mark.parametrize("error,offline,expected", [
    (lambda: _http_error(hub_errors.RepositoryNotFoundError, 404), False,
     "is neither a local path nor a model on the Hugging Face hub"),
    (lambda: _http_error(hub_errors.GatedRepoError, 403), False, "is gated; accept its terms"),
    (lambda: _http_error(hub_errors.HfHubHTTPError, 401), False, "refused to serve google-t5/t5-small (HTTP 401)"),
    (lambda: _http_error(hub_errors.HfHubHTTPError, 429), False, "rate-limiting downloads (HTTP 429"),
    (lambda: hub_errors.LocalEntryNotFoundError("traffic disabled"), True, "unreachable (HF_HUB_OFFLINE is set)"),
    (lambda: hub_errors.LocalEntryNotFoundError("ConnectError: Name or service not known"), False,
     "unreachable (no connection)"),
    (lambda: OSError(28, "No space left on device"), False, "could not be downloaded from the Hugging Face hub"),
], ids=["not-found", "gated", "unauthorized", "rate-limit", "offline-mode", "no-network", "other"])
def test_hub_failures_are_told_apart(monkeypatch, error, offline, expected):
    def fail(repo_id, **kwargs):
        raise error()

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", offline)
    with pytest.raises(T2TError) as e:
        t2t.from_hf("google-t5/t5-small")
    message = str(e.value)
    assert expected in message and "google-t5/t5-small" in message and "\n" not in message


def test_a_hub_models_own_vocabulary_is_its_spiece_model_alone(monkeypatch, tmp_path):
    """Only the vocabulary file is fetched (without one, the two configs that may name ByT5's tokenizer, which
    has no file); a repo without one (or the hub out of reach) has none of its own, and a path-looking name is
    never sent to the hub."""
    from t2t.checkpoints.loading import own_vocabulary

    asked = []

    def download(repo_id, filename, **kwargs):
        asked.append((repo_id, filename))
        if repo_id == "owner/no-vocab":
            raise hub_errors.EntryNotFoundError("no spiece.model")
        return str(tmp_path / "spiece.model")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    assert own_vocabulary("owner/model") == str(tmp_path / "spiece.model")
    assert own_vocabulary("owner/no-vocab") is None
    assert own_vocabulary("./runs/missing") is None
    assert asked == [("owner/model", "spiece.model"), ("owner/no-vocab", "spiece.model"),
                     ("owner/no-vocab", "tokenizer_config.json"), ("owner/no-vocab", "config.json")]


# What transformers 4.57.6 and 5.24.0 write into config.json for each model type and tie_word_embeddings
# argument (None: left at the default), and whether that version then rescales the decoder output by
# d_model**-0.5 when it loads the file. t2t must rescale exactly where the writing version does.
WRITTEN = [
    # version, model_type, tie argument, config keys written, rescaled
    ("4.57.6", "t5", None, {}, True),
    ("4.57.6", "t5", False, {"tie_word_embeddings": False}, False),
    ("4.57.6", "umt5", None, {}, True),
    ("4.57.6", "umt5", False, {"tie_word_embeddings": False}, False),
    ("4.57.6", "mt5", None, {"tie_word_embeddings": False}, False),
    ("4.57.6", "mt5", True, {"tie_word_embeddings": True}, True),
    ("5.24.0", "t5", None, {"tie_word_embeddings": True, "scale_decoder_outputs": True}, True),
    ("5.24.0", "t5", False, {"tie_word_embeddings": True, "scale_decoder_outputs": False}, False),
    ("5.24.0", "umt5", False, {"tie_word_embeddings": True, "scale_decoder_outputs": False}, False),
    ("5.24.0", "mt5", None, {"tie_word_embeddings": True}, False),
    ("5.24.0", "mt5", True, {"tie_word_embeddings": True}, False),
    (None, "mt5", None, {}, False),  # a hand-written config: transformers 4's defaults
]


@pytest.mark.parametrize("version,model_type,tie,written,rescaled", WRITTEN)
def test_the_output_rescale_is_the_writing_versions(version, model_type, tie, written, rescaled):
    from t2t.checkpoints.hf import model_config_from_hf, rescales_output

    config = {"model_type": model_type, **written, **({"transformers_version": version} if version else {})}
    assert rescales_output(config, model_type) is rescaled
    assert model_config_from_hf(config).tie_word_embeddings is rescaled  # t2t's tie is T5 1.0's rescaled pair


@pytest.mark.parametrize("config,expected", [
    ({"model_type": "umt5"}, "umt5"),
    ({"architectures": ["UMT5ForConditionalGeneration"]}, "umt5"),
    ({"architectures": ["MT5ForConditionalGeneration"]}, "mt5"),
    ({"model_type": "t5", "architectures": ["MT5ForConditionalGeneration"]}, "t5"),
])
def test_the_model_type_is_the_configs_or_its_architectures(config, expected):
    from t2t.checkpoints.hf import hf_model_type, model_config_from_hf

    assert hf_model_type(config) == expected
    assert model_config_from_hf(config).relative_attention_per_layer is (expected == "umt5")


def test_a_config_naming_no_t5_model_is_one_sentence(tmp_path):
    from t2t.checkpoints.hf import model_config_from_hf

    with pytest.raises(T2TError) as e:
        model_config_from_hf({"architectures": ["BartForConditionalGeneration"]}, tmp_path / "config.json")
    assert str(e.value) == (f"{tmp_path / 'config.json'} describes a None model, but t2t converts only T5 models "
                            f"(model_type 't5', 'mt5' or 'umt5').")
