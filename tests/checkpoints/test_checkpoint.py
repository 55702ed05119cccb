"""Native checkpoints: round trip, atomic writes, keep-last-K, and one T2TError per bad file."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from t2t.checkpoints import hf, t5x
from t2t.checkpoints import native as checkpoint
from t2t.checkpoints.loading import load_model
from t2t.checkpoints.native import latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from t2t.errors import T2TError
from t2t.models import distributed
from t2t.models.t5 import T5, ModelConfig

TINY = dict(vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=2, num_decoder_layers=1, num_heads=4,
            relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.0)


def tiny_model(seed: int = 0, **overrides) -> T5:
    torch.manual_seed(seed)
    return T5(ModelConfig(**{**TINY, **overrides})).eval()


def logits_of(model: T5) -> torch.Tensor:
    enc = torch.tensor([[5, 6, 7, 8, 1], [9, 10, 1, 0, 0]])
    dec = torch.tensor([[0, 11, 12], [0, 13, 14]])
    with torch.no_grad():
        return model(enc, dec)


def trained_optimizer(model: T5, kind: str = "adamw") -> torch.optim.Optimizer:
    if kind == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    else:
        opt = torch.optim.Adafactor(model.parameters(), lr=1e-2, beta2_decay=-0.8, foreach=False)
    model.train()
    enc = torch.tensor([[5, 6, 7, 1]])
    dec = torch.tensor([[0, 11, 12]])
    model(enc, dec).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    model.eval()
    return opt


def assert_one_sentence_naming(error: pytest.ExceptionInfo, path: Path) -> str:
    message = str(error.value)
    assert str(path) in message, message
    assert "\n" not in message and "Traceback" not in message, message
    return message


# ----------------------------------------------------------------------------------------------------------
# Round trip


@pytest.mark.parametrize("optimizer_kind", ["adamw", "adafactor"])
def test_round_trip_restores_weights_optimizer_trainer_state_and_settings(tmp_path, optimizer_kind):
    model = tiny_model()
    opt = trained_optimizer(model, optimizer_kind)
    trainer_state = {"scheduler": {"last_epoch": 3, "base_lrs": [0.001]}, "data": {"position": 12, "seed": 0},
                     "loss": 2.5}
    settings = {"model": "t5-tiny", "optimizer": {"name": optimizer_kind, "adam_betas": (0.9, 0.999)}}
    path = save_checkpoint(tmp_path / "run", 100, model, optimizer=opt, trainer_state=trainer_state,
                           settings=settings)
    assert path == tmp_path / "run" / "step_00000100"
    assert sorted(p.name for p in path.iterdir()) == sorted(
        ["model.safetensors", "config.json", "optimizer.pt", "trainer_state.json", "rng.pt", "train_config.yaml",
         "checksums.sha256"])

    # read back as resuming reads it: the model, then the trainer and optimizer states
    fresh = load_model(path)
    fresh_opt = (torch.optim.AdamW(fresh.parameters(), lr=1e-3) if optimizer_kind == "adamw" else
                 torch.optim.Adafactor(fresh.parameters(), lr=1e-2, beta2_decay=-0.8, foreach=False))
    distributed.load_optimizer_state(fresh, fresh_opt, checkpoint.read_optimizer_state(path))
    state = load_checkpoint(path)
    assert state == {"step": 100, **trainer_state}
    for (k, a), (_, b) in zip(model.state_dict().items(), fresh.state_dict().items()):
        assert torch.equal(a, b), k
    saved, loaded = opt.state_dict(), fresh_opt.state_dict()
    assert saved["param_groups"] == loaded["param_groups"]
    for i, param_state in saved["state"].items():
        for name, value in param_state.items():
            other = loaded["state"][i][name]
            assert torch.equal(value, other) if torch.is_tensor(value) else value == other
    assert checkpoint.read_settings(path) == {"model": "t5-tiny",
                                              "optimizer": {"name": optimizer_kind, "adam_betas": [0.9, 0.999]}}


def test_rng_states_are_restored(tmp_path):
    model = tiny_model()
    torch.manual_seed(123)
    np.random.seed(456)
    random.seed(789)
    np.random.normal()  # leaves a cached gaussian in numpy's legacy state
    random.gauss(0, 1)  # and in Python's
    path = save_checkpoint(tmp_path, 1, model)
    expected = (torch.rand(3), np.random.normal(), np.random.rand(3), random.gauss(0, 1),
                [random.random() for _ in range(3)])
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    np.random.normal(), random.gauss(0, 1)  # different cached gaussians, which the load must replace
    load_checkpoint(path)
    got = (torch.rand(3), np.random.normal(), np.random.rand(3), random.gauss(0, 1),
           [random.random() for _ in range(3)])
    assert torch.equal(expected[0], got[0])
    np.testing.assert_array_equal(expected[2], got[2])
    assert (expected[1], *expected[3:]) == (got[1], *got[3:])
    # the RNG file loads without unpickling any Python object
    assert torch.load(path / "rng.pt", weights_only=True)["numpy"]["bit_generator"] == "MT19937"


def test_load_model_from_checkpoint_and_run_dir_gives_the_same_logits(tmp_path):
    model = tiny_model()
    save_checkpoint(tmp_path / "run", 10, model)
    save_checkpoint(tmp_path / "run", 20, tiny_model(seed=3))
    from_dir = load_model(tmp_path / "run" / "step_00000010")
    assert torch.equal(logits_of(from_dir), logits_of(model))
    assert from_dir.config == model.config
    from_run = load_model(tmp_path / "run")  # latest: step 20
    assert torch.equal(logits_of(from_run), logits_of(tiny_model(seed=3)))
    assert all(p.device.type == "cpu" and p.dtype == torch.float32 for p in from_run.parameters())


def test_untied_gated_model_round_trips(tmp_path):
    model = tiny_model(feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    path = save_checkpoint(tmp_path, 5, model)
    assert torch.equal(logits_of(load_model(path)), logits_of(model))


def test_tied_embedding_is_stored_once(tmp_path):
    from safetensors import safe_open

    path = save_checkpoint(tmp_path, 1, tiny_model())
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert "shared.weight" in keys and "lm_head.weight" not in keys


def test_optimizer_state_dict_can_be_passed_directly(tmp_path):
    model = tiny_model()
    opt = trained_optimizer(model)
    path = save_checkpoint(tmp_path, 7, model, optimizer_state=opt.state_dict(), trainer_state={"x": 1})
    assert load_checkpoint(path) == {"step": 7, "x": 1}
    assert checkpoint.read_optimizer_state(path)["state"][0]["step"] == opt.state_dict()["state"][0]["step"]


# ----------------------------------------------------------------------------------------------------------
# Finding, keeping, atomicity


def test_keep_last_k_deletes_only_older_checkpoints(tmp_path):
    model = tiny_model()
    for step in (100, 200, 300, 400, 500):
        save_checkpoint(tmp_path, step, model, keep_last=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_00000400", "step_00000500"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000400", "step_00000500"]
    for step in (600, 700):
        save_checkpoint(tmp_path, step, model, keep_last=None)
    assert len(list_checkpoints(tmp_path)) == 4


def test_steps_are_ordered_numerically_beyond_eight_digits(tmp_path):
    model = tiny_model()
    save_checkpoint(tmp_path, 99_999_999, model)
    save_checkpoint(tmp_path, 100_000_000, model)
    assert latest_checkpoint(tmp_path).name == "step_100000000"


def test_saving_the_same_step_again_replaces_it(tmp_path):
    save_checkpoint(tmp_path, 100, tiny_model(seed=0), trainer_state={"v": 1})
    path = save_checkpoint(tmp_path, 100, tiny_model(seed=1), trainer_state={"v": 2})
    assert load_checkpoint(path)["v"] == 2
    assert torch.equal(logits_of(load_model(path)), logits_of(tiny_model(seed=1)))
    assert [p.name for p in tmp_path.iterdir()] == ["step_00000100"]


class _Killed(BaseException):
    """Stands for kill -9 at one instruction (tests/test_faults.py kills real processes)."""


def test_a_kill_while_saving_the_same_step_again_leaves_that_step_loadable(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, 100, tiny_model(seed=0), trainer_state={"v": 1})
    real_replace = os.replace

    def killed_before_publishing(src, dst):
        if Path(src).name.startswith(".tmp-"):
            raise _Killed()  # the old copy has been moved aside, the new one not yet renamed
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", killed_before_publishing)
    with pytest.raises(_Killed):
        save_checkpoint(tmp_path, 100, tiny_model(seed=1), trainer_state={"v": 2})
    monkeypatch.undo()
    assert load_checkpoint(tmp_path)["v"] == 1  # readers take the moved-aside copy
    assert torch.equal(logits_of(load_model(tmp_path)), logits_of(tiny_model(seed=0)))
    save_checkpoint(tmp_path, 50, tiny_model())  # the next save puts it back under its name
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_00000050", "step_00000100"]
    assert load_checkpoint(tmp_path / "step_00000100")["v"] == 1


def test_checkpoints_respect_the_umask(tmp_path):
    previous = os.umask(0o027)
    try:
        model = tiny_model()
        path = save_checkpoint(tmp_path, 1, model, optimizer=trained_optimizer(model), settings={"a": 1})
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == 0o750
    assert {p.name: p.stat().st_mode & 0o777 for p in path.iterdir()} == {
        p.name: 0o640 for p in path.iterdir()}
    assert {p.name for p in path.iterdir()} >= {"model.safetensors", "optimizer.pt", "checksums.sha256"}


def test_a_failing_trainer_state_leaves_no_checkpoint(tmp_path):
    save_checkpoint(tmp_path, 1, tiny_model())
    with pytest.raises(TypeError):  # not JSON-able: a programming error, raised as such
        save_checkpoint(tmp_path, 2, tiny_model(), trainer_state={"bad": object()})
    assert [p.name for p in tmp_path.iterdir()] == ["step_00000001"]


def test_stray_temp_and_incomplete_dirs_are_ignored_and_cleaned(tmp_path):
    model = tiny_model()
    save_checkpoint(tmp_path, 100, model)
    # what a hard crash (power loss) mid-write leaves behind: a temp dir with partial files …
    stray = tmp_path / ".tmp-step_00000200-abc123"
    stray.mkdir()
    (stray / "model.safetensors").write_bytes(b"\x00" * 5)
    (stray / "config.json").write_text("{")
    # … a half-deleted old checkpoint, and a folder someone made by hand
    trash = tmp_path / ".trash-step_00000050"
    trash.mkdir()
    (tmp_path / "step_00000300").mkdir()
    (tmp_path / "step_00000300" / "config.json").write_text("{}")
    (tmp_path / "step_000004").mkdir()  # not a checkpoint name
    (tmp_path / "notes.txt").write_text("hi")

    latest = latest_checkpoint(tmp_path)
    assert latest.name == "step_00000100"
    assert torch.equal(logits_of(load_model(tmp_path)), logits_of(model))

    save_checkpoint(tmp_path, 400, model)
    assert not stray.exists() and not trash.exists()
    assert latest_checkpoint(tmp_path).name == "step_00000400"


def test_latest_checkpoint_of_missing_or_empty_run_dir_is_none(tmp_path):
    assert latest_checkpoint(tmp_path / "nope") is None
    assert latest_checkpoint(tmp_path) is None


# ----------------------------------------------------------------------------------------------------------
# Bad files → one T2TError naming the file


@pytest.fixture
def saved(tmp_path) -> Path:
    """A checkpoint without checksums.sha256, read with ``verify=False``, so that each reader meets the
    damaged file itself; tests/training/test_faults.py checks the checksums."""
    model = tiny_model()
    path = save_checkpoint(tmp_path / "run", 100, model, optimizer=trained_optimizer(model),
                           trainer_state={"data": {"position": 3}})
    (path / "checksums.sha256").unlink()
    return path


def test_truncated_safetensors(saved):
    file = saved / "model.safetensors"
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])
    with pytest.raises(T2TError) as e:
        load_model(saved, verify=False)
    assert "truncated or corrupt" in assert_one_sentence_naming(e, file)


def test_garbage_safetensors_header(saved):
    file = saved / "model.safetensors"
    file.write_bytes(b"this is not a safetensors file at all")
    with pytest.raises(T2TError) as e:
        load_model(saved, verify=False)
    assert_one_sentence_naming(e, file)


@pytest.mark.parametrize("name", ["config.json", "trainer_state.json"])
def test_garbage_json(saved, name):
    (saved / name).write_text('{"d_model": 16,,')
    with pytest.raises(T2TError) as e:
        load_model(saved, verify=False) if name == "config.json" else load_checkpoint(saved, verify=False)
    assert "not valid JSON" in assert_one_sentence_naming(e, saved / name)


def test_config_with_unknown_field(saved):
    cfg = json.loads((saved / "config.json").read_text())
    cfg["d_modle"] = 16
    (saved / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(T2TError) as e:
        load_model(saved, verify=False)
    assert "d_modle" in assert_one_sentence_naming(e, saved / "config.json")


def test_missing_weights_file(saved):
    (saved / "model.safetensors").unlink()
    assert latest_checkpoint(saved.parent) is None  # an incomplete folder is never "latest"
    with pytest.raises(T2TError) as e:
        load_model(saved, verify=False)
    assert_one_sentence_naming(e, saved / "model.safetensors")


def test_missing_optimizer_file(saved):
    (saved / "optimizer.pt").unlink()
    with pytest.raises(T2TError) as e:
        checkpoint.read_optimizer_state(saved, verify=False)
    assert_one_sentence_naming(e, saved / "optimizer.pt")


def test_config_does_not_match_weights(saved):
    cfg = json.loads((saved / "config.json").read_text())
    cfg["d_ff"] = 48
    (saved / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(T2TError) as e:
        load_model(saved, verify=False)
    message = assert_one_sentence_naming(e, saved / "model.safetensors")
    assert "does not match its config" in message
    assert "encoder.blocks.0.ff.wi.weight has shape [32, 16], expected [48, 16]" in message
    assert "and " in message  # more problems than are listed


def test_missing_and_unexpected_keys(saved):
    cfg = json.loads((saved / "config.json").read_text())
    cfg["num_layers"] = 3
    cfg["feed_forward_proj"] = "gated-gelu"
    (saved / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(T2TError) as e:
        load_model(saved, verify=False)
    message = assert_one_sentence_naming(e, saved / "model.safetensors")
    assert "is missing" in message


def test_optimizer_state_for_another_optimizer(saved):
    other = torch.nn.Linear(3, 3)
    with pytest.raises(T2TError, match="the saved optimizer state does not fit this optimizer .*; resume with the "
                                       "same optimizer settings") as e:
        distributed.load_optimizer_state(other, torch.optim.AdamW(other.parameters()),
                                         checkpoint.read_optimizer_state(saved, verify=False))
    assert "\n" not in str(e.value)


class _PickleBomb:
    """Unpickling this runs code (here: writes a marker file)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('pwned')",))


class _Shell:
    """Unpickling this would run a shell command (its module, posix, is one torch blocks outright)."""

    def __reduce__(self):
        return (os.system, ("touch pwned",))


class _UserClass:
    """A class of the user's (defined here): unpickling it would import and call code."""

    def __init__(self):
        self.value = 1


@pytest.mark.parametrize("payload", [_PickleBomb, _Shell, _UserClass], ids=["exec", "os.system", "class"])
def test_pickle_that_refers_to_code_is_refused_as_such(saved, tmp_path, payload):
    marker = tmp_path / "pwned.txt"
    torch.save({"state": {}, "param_groups": [], "payload": payload(marker) if payload is _PickleBomb else payload()},
               saved / "optimizer.pt")
    with pytest.raises(T2TError) as e:
        checkpoint.read_optimizer_state(saved, verify=False)
    message = assert_one_sentence_naming(e, saved / "optimizer.pt")
    assert "refers to Python code" in message and "was not loaded" in message, message
    assert "corrupt" not in message, message
    assert not marker.exists() and not Path("pwned").exists()


def test_pickle_bomb_rng_file_is_refused(saved, tmp_path):
    marker = tmp_path / "pwned.txt"
    torch.save(_PickleBomb(marker), saved / "rng.pt")
    with pytest.raises(T2TError) as e:
        load_checkpoint(saved, verify=False)
    assert_one_sentence_naming(e, saved / "rng.pt")
    assert not marker.exists()


def test_pickle_bomb_hf_pytorch_model_bin_is_refused(tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "t5", **TINY, "num_decoder_layers": 1}))
    marker = tmp_path / "pwned.txt"
    torch.save({"shared.weight": torch.zeros(64, 16), "x": _PickleBomb(marker)}, folder / "pytorch_model.bin")
    with pytest.raises(T2TError) as e:
        load_model(folder)
    assert_one_sentence_naming(e, folder / "pytorch_model.bin")
    assert not marker.exists()


def test_corrupt_rng_file(saved):
    (saved / "rng.pt").write_bytes(b"garbage")
    with pytest.raises(T2TError) as e:
        load_checkpoint(saved, verify=False)
    assert_one_sentence_naming(e, saved / "rng.pt")
    assert load_checkpoint(saved, restore_rng=False, verify=False)["step"] == 100


# ----------------------------------------------------------------------------------------------------------
# load_model's other inputs


def test_load_model_rejects_what_it_cannot_read(tmp_path, monkeypatch):
    with pytest.raises(T2TError, match="neither a t2t checkpoint"):
        load_model(tmp_path)
    (tmp_path / "file.bin").write_bytes(b"x")
    with pytest.raises(T2TError, match="is a file"):
        load_model(tmp_path / "file.bin")
    with pytest.raises(T2TError, match="not a Hugging Face hub id"):
        load_model(str(tmp_path / "missing" / "dir"))

    import huggingface_hub

    def offline(repo_id, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co'")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(T2TError) as e:
        load_model("google-t5/t5-small")
    message = str(e.value)
    assert "google-t5/t5-small" in message and "could not be downloaded" in message and "\n" not in message


def test_load_model_rejects_a_non_t5_hugging_face_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bart", "d_model": 16}))
    with pytest.raises(T2TError) as e:
        load_model(tmp_path)
    assert "'bart'" in assert_one_sentence_naming(e, tmp_path / "config.json")


def test_rng_state_is_weights_only_loadable_without_numpy_globals(tmp_path):
    torch.save(checkpoint.get_rng_state(), tmp_path / "rng.pt")
    state = torch.load(tmp_path / "rng.pt", weights_only=True)
    checkpoint.set_rng_state(state)
    assert isinstance(state["python"]["state"], torch.Tensor)
    assert os.path.getsize(tmp_path / "rng.pt") < 50_000


# ----------------------------------------------------------------------------------------------------------
# t5x msgpack checkpoints (optional: needs msgpack and the t5x test checkpoint)

@pytest.fixture
def t5x_file(data_dir: Path) -> Path:
    pytest.importorskip("msgpack", reason="from_t5x needs msgpack (pip install msgpack)")
    path = data_dir / "checkpoints" / "t5x_test_t5_tiny" / "test_t5_tiny.checkpoint_0"
    if not path.is_file():
        pytest.skip(f"real-data test: the t5x test checkpoint {path} is missing")
    return path


def _t5x_params(file: Path) -> dict:
    import msgpack

    return msgpack.unpackb(file.read_bytes(), ext_hook=t5x._t5x_ext_hook, raw=False)["optimizer"]["target"]


def test_from_t5x_reads_the_architecture_and_transposes_kernels(t5x_file, tmp_path):
    model = t5x.from_t5x(t5x_file)
    assert model.config == ModelConfig(vocab_size=32128, d_model=8, d_kv=3, d_ff=16, num_layers=2,
                                       num_decoder_layers=2, num_heads=4, relative_attention_num_buckets=32,
                                       feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    params = _t5x_params(t5x_file)
    state = model.state_dict()
    assert torch.equal(state["shared.weight"], params["token_embedder"]["embedding"])
    assert torch.equal(state["lm_head.weight"], params["decoder"]["logits_dense"]["kernel"].T)
    assert torch.equal(state["encoder.relative_attention_bias.weight"],
                       params["encoder"]["relpos_bias"]["rel_embedding"].T)
    assert torch.equal(state["decoder.blocks.1.cross_attn.q.weight"],
                       params["decoder"]["layers_1"]["encoder_decoder_attention"]["query"]["kernel"].T)
    assert torch.equal(state["encoder.blocks.0.ff.wo.weight"], params["encoder"]["layers_0"]["mlp"]["wo"]["kernel"].T)
    assert torch.equal(state["decoder.blocks.0.cross_attn.layer_norm.weight"],
                       params["decoder"]["layers_0"]["pre_cross_attention_layer_norm"]["scale"])
    enc = torch.tensor([[5, 6, 7, 1], [8, 1, 0, 0]])
    with torch.no_grad():
        logits = model.eval()(enc, torch.tensor([[0, 3, 4], [0, 5, 6]]))
    assert logits.shape == (2, 3, 32128) and torch.isfinite(logits).all()
    # the folder form (t5x's checkpoint_N/checkpoint) gives the same weights
    folder = tmp_path / "checkpoint_0"
    folder.mkdir()
    shutil.copyfile(t5x_file, folder / "checkpoint")
    from_folder = t5x.from_t5x(folder)
    assert from_folder.config == model.config
    for key, value in model.state_dict().items():
        assert torch.equal(from_folder.state_dict()[key], value), key


def test_from_t5x_damaged_file(t5x_file, tmp_path):
    bad = tmp_path / "checkpoint"
    bad.write_bytes(t5x_file.read_bytes()[:100_000])
    with pytest.raises(T2TError) as e:
        t5x.from_t5x(tmp_path)  # a folder holding a `checkpoint` file
    assert_one_sentence_naming(e, bad)
    with pytest.raises(T2TError) as e:
        t5x.from_t5x(tmp_path / "nope")
    assert "nope" in str(e.value)


def test_load_model_and_init_from_take_a_t5x_file_or_its_folder(t5x_file, t5_vocab_path, tmp_path):
    from t2t import config
    from t2t.testing import in_memory_task, temporarily_registered
    from t2t.training.train import TrainConfig, train

    direct = t5x.from_t5x(t5x_file)
    folder = tmp_path / "checkpoint_0"  # t5x's layout: checkpoint_N/checkpoint
    folder.mkdir()
    shutil.copyfile(t5x_file, folder / "checkpoint")
    for source in (t5x_file, folder, str(folder)):
        loaded = load_model(source)
        assert loaded.config == direct.config
        assert all(torch.equal(value, direct.state_dict()[key]) for key, value in loaded.state_dict().items())

    rows = [{"inputs": "copy: a cat", "targets": "a cat"}] * 4
    settings = config.from_dict(TrainConfig, dict(
        mixture="t5x_copy", init_from=str(t5x_file), vocab=str(t5_vocab_path),
        output_dir=str(tmp_path / "run"), train_steps=1, batch_size=2, input_length=8, target_length=8,
        pack=False, log_every=1, optimizer={"name": "adamw", "learning_rate": 1e-3}))
    with temporarily_registered(in_memory_task("t5x_copy", {"train": rows})):
        train(settings)
    trained = load_model(tmp_path / "run")
    assert trained.config.d_model == 8 and trained.config.vocab_size == 32128
    assert checkpoint.read_settings(tmp_path / "run")["init_from"] == str(t5x_file)
    # a trained-only checkpoint names the file as its base from anywhere
    assert checkpoint.base_reference(os.path.relpath(t5x_file)) == str(t5x_file.resolve())


def test_a_file_that_is_no_t5x_checkpoint_is_one_sentence(tmp_path):
    other = tmp_path / "weights.bin"
    other.write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(T2TError, match=f"{other} is a file but not a t5x checkpoint; pass a checkpoint folder"):
        load_model(other)


def test_from_t5x_without_msgpack(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "msgpack", None)
    with pytest.raises(T2TError, match="pip install msgpack"):
        t5x.from_t5x(tmp_path)


def test_conversion_names_stay_importable_from_t2t_checkpoint():
    from t2t.checkpoints import hf
    from t2t.checkpoints.native import from_hf, from_t5x, hf_key, to_hf

    assert (from_hf, to_hf, hf_key, from_t5x) == (hf.from_hf, hf.to_hf, hf.hf_key, t5x.from_t5x)
    with pytest.raises(AttributeError):
        checkpoint.no_such_name  # noqa: B018 -- the attribute access is what raises


# ----------------------------------------------------------------------------------------------------------
# Checksums cannot be switched off by deleting them; names agree with the steps inside


def rewrite_checksums(folder: Path) -> None:
    from t2t import durable
    files = {p.name: durable.sha256_of(p) for p in folder.iterdir() if p.name != "checksums.sha256"}
    (folder / "checksums.sha256").write_text(durable.format_checksums(files))


@pytest.mark.parametrize("how", ["deleted", "emptied"])
def test_a_checkpoint_without_its_checksums_is_refused_like_a_corrupt_one(tmp_path, how):
    model = tiny_model()
    path = save_checkpoint(tmp_path, 1, model)
    weights = path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0xFF  # damage a weight, then hide it by removing the checksums
    weights.write_bytes(bytes(data))
    (path / "checksums.sha256").unlink() if how == "deleted" else (path / "checksums.sha256").write_text("")
    expected = ("has no checksums.sha256, so its files cannot be verified .*sha256sum .*verify_checkpoints=false"
                if how == "deleted" else "checksum file .*checksums.sha256 is empty or corrupt")
    with pytest.raises(T2TError, match=expected):
        load_model(path)
    with pytest.raises(T2TError, match=expected):
        load_checkpoint(path)
    load_model(path, verify=False)  # the way out, for a user who knows


def test_the_command_a_checkpoint_without_checksums_suggests_works_in_a_shell(tmp_path):
    path = save_checkpoint(tmp_path / "my run", 1, tiny_model())
    (path / "checksums.sha256").unlink()
    with pytest.raises(T2TError, match="if you trust its files, record them with") as error:
        load_model(path)
    subprocess.run(re.search(r"`([^`]*)`", str(error.value))[1], shell=True, check=True, timeout=30)
    load_model(path)


def test_a_file_the_save_did_not_list_is_refused(tmp_path):
    path = save_checkpoint(tmp_path, 1, tiny_model())
    (path / "base.json").write_text(json.dumps({"base": str(tmp_path / "elsewhere")}))
    with pytest.raises(T2TError, match=r"checkpoint file .*base.json is not listed in .*checksums.sha256"):
        load_model(path)


def test_a_checkpoint_folder_renamed_to_another_step_is_refused(tmp_path):
    model = tiny_model()
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, model, keep_last=3)
    os.rename(tmp_path / "step_00000001", tmp_path / "step_00000900")
    message = (rf"checkpoint folder {tmp_path / 'step_00000900'} holds step 1 \(its trainer_state.json\), not 900; "
               rf"move it out of {tmp_path} or give it its own name step_00000001")
    with pytest.raises(T2TError, match=message):
        latest_checkpoint(tmp_path)
    with pytest.raises(T2TError, match=message):
        save_checkpoint(tmp_path, 4, model, keep_last=2)  # rotation refuses to guess which are the newest
    assert {"step_00000002", "step_00000003", "step_00000004"} <= {p.name for p in tmp_path.iterdir()}
    with pytest.raises(T2TError, match=message):
        checkpoint.checkpoint_step(tmp_path / "step_00000900")


@pytest.mark.parametrize("step", ['"abc"', "-1", "1.5", "true", "null"])
def test_a_hand_edited_step_names_the_file_and_key(tmp_path, step):
    path = save_checkpoint(tmp_path, 1, tiny_model())
    state = path / "trainer_state.json"
    state.write_text(state.read_text().replace('"step": 1', f'"step": {step}'))
    with pytest.raises(T2TError, match=rf"trainer state {state} has step .*, not a step number"):
        latest_checkpoint(tmp_path)


@pytest.mark.parametrize("key, value, message", [
    ("num_heads", 0, "num_heads 0, which must be > 0"), ("d_ff", -4, "d_ff -4, which must be > 0"),
    ("eos_id", 10 ** 9, r"eos_id 1000000000, which must be < vocab_size \(64\)"),
    ("eos_id", 1e9, "setting eos_id must be of type int, got 1000000000.0"),
    ("dropout_rate", 1.5, r"dropout_rate 1.5, which must be in \[0, 1\)")])
def test_a_hand_edited_model_config_names_the_file_and_key(tmp_path, key, value, message):
    path = save_checkpoint(tmp_path, 1, tiny_model())
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, key: value}))
    rewrite_checksums(path)
    with pytest.raises(T2TError) as e:
        load_model(path)
    assert re.search(message, assert_one_sentence_naming(e, path / "config.json"))


def test_loaded_models_are_in_eval_mode_so_generating_twice_gives_the_same_tokens(tmp_path):
    """As transformers' from_pretrained: t2t.load_model and t2t.from_hf return models with dropout off (the
    README's example decodes right after loading); training sets train mode itself."""
    model = tiny_model(dropout_rate=0.5).train()
    save_checkpoint(tmp_path / "run", 1, model)
    hf.to_hf(model, tmp_path / "hf")
    tokens = torch.tensor([[5, 6, 7, 8, 1], [9, 10, 11, 1, 0]])
    for loaded in (load_model(tmp_path / "run"), hf.from_hf(tmp_path / "hf")):
        assert not loaded.training and not any(m.training for m in loaded.modules())
        assert loaded.config.dropout_rate == 0.5
        assert torch.equal(loaded.generate(tokens, max_new_tokens=8), loaded.generate(tokens, max_new_tokens=8))


# ----------------------------------------------------------------------------------------------------------
# Weights that are not finite


@pytest.mark.parametrize("where, value", [("t2t checkpoint", float("nan")), ("Hugging Face folder", float("inf"))])
def test_a_non_finite_weight_is_one_sentence_naming_the_tensor_and_file(tmp_path, where, value):
    """A NaN weight with matching checksums evaluated to accuracy 0.00 with exit 0. Every loader (t5x's too)
    checks its weights in files.check_state_dict."""
    model = tiny_model()
    with torch.no_grad():
        model.encoder.blocks[0].self_attn.q.weight[1, 2] = value
    if where == "t2t checkpoint":
        loaded = save_checkpoint(tmp_path / "run", 1, model)  # its checksums match the NaN
        name, file = "encoder.blocks.0.self_attn.q.weight", loaded / "model.safetensors"
    else:
        hf.to_hf(model, tmp_path / "hf")
        loaded = tmp_path / "hf"
        name, file = "encoder.block.0.layer.0.SelfAttention.q.weight", loaded / "model.safetensors"
    with pytest.raises(T2TError) as error:
        load_model(loaded)
    assert str(error.value) == (f"checkpoint {file} has non-finite values (NaN or inf) in {name}; the model "
                                f"diverged before it was saved or the file was damaged, so load an earlier "
                                f"checkpoint (or one that trained with a lower learning_rate).")


def test_finite_weights_whose_sum_overflows_are_not_taken_for_non_finite():
    """The check sums each tensor first (fast) and looks at every value only when the sum is not finite."""
    from t2t.checkpoints.files import all_finite
    assert all_finite(torch.full((10,), 3e38)) and all_finite(torch.full((100_000,), 1.0, dtype=torch.float16))
    assert not all_finite(torch.tensor([1.0, float("nan")], dtype=torch.bfloat16))
    assert not all_finite(torch.tensor([float("inf"), -float("inf")]))


# ----------------------------------------------------------------------------------------------------------
# Nothing t2t writes into a folder follows a symbolic link placed there


@pytest.mark.parametrize("target_exists", [True, False])
def test_a_linked_lock_is_refused_and_its_target_left_alone(tmp_path, target_exists):
    """`ln -sf ~/precious.txt RUN/.lock; t2t-train --output-dir RUN` made precious.txt a pid (and a dangling
    link made a new file wherever it pointed)."""
    from t2t import durable
    precious = tmp_path / "precious.txt"
    if target_exists:
        precious.write_text("mine\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".lock").symlink_to(precious)
    with pytest.raises(T2TError) as error:
        with durable.lock_output_dir(tmp_path / "run"):
            pass
    assert re.fullmatch(r"\S+/run/\.lock is a symbolic link, and t2t never writes through a link [^\n]*; delete the "
                        r"link and run the same command again\.", str(error.value))
    assert precious.read_text() == "mine\n" if target_exists else not precious.exists()


def test_an_atomic_write_replaces_links_and_never_writes_through_them(tmp_path):
    """The file's own name and its temporary name (which has the process id in it) may both be links someone
    placed: the file ends up a file of its own, and what the links pointed to is unchanged."""
    from t2t import durable
    precious, other = tmp_path / "precious.txt", tmp_path / "other.txt"
    precious.write_text("mine\n")
    other.write_text("also mine\n")
    (tmp_path / "run").mkdir()
    path = tmp_path / "run" / "lineage.json"
    path.symlink_to(precious)
    (tmp_path / "run" / f".lineage.json.{os.getpid()}.tmp").symlink_to(other)
    durable.write_atomic(path, "[]\n")
    assert not path.is_symlink() and path.read_text() == "[]\n"
    assert precious.read_text() == "mine\n" and other.read_text() == "also mine\n"
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["lineage.json"]


def test_appending_through_a_link_is_one_sentence_naming_it(tmp_path):
    from t2t import durable
    precious = tmp_path / "precious.txt"
    precious.write_text("mine\n")
    (tmp_path / "train.log").symlink_to(precious)
    with pytest.raises(OSError) as error:
        durable.append_line(tmp_path / "train.log", "a line")
    assert str(durable.write_error(error.value, str(tmp_path / "train.log"))).startswith(
        f"{tmp_path / 'train.log'} is a symbolic link, and t2t never writes through a link")
    assert precious.read_text() == "mine\n"
