"""Checkpoints: t2t's own format, and conversion from and to Hugging Face's T5.

Our format (one directory per saved step, inside a run directory)::

    runs/x/step_00000100/
        model.safetensors     the model's state dict (the tied embedding is one tensor: ``lm_head`` only
                              exists in untied configs, see t2t.model)
        config.json           the ModelConfig
        optimizer.pt          the optimizer's state dict (``torch.load(weights_only=True)``)
        trainer_state.json    whatever JSON-able state the trainer passes (step, scheduler, data stream …)
        rng.pt                torch / CUDA / numpy / python RNG states, as tensors, lists and numbers
        train_config.yaml     the resolved training settings (when given)

Writes are atomic: everything goes into a ``.tmp-step_…`` folder inside the run directory, every file and
the folder are fsynced, and one ``os.replace`` gives it its final name. ``latest_checkpoint`` only looks at
final names, so a crash at any moment leaves either the new checkpoint complete or the old ones untouched.
Older checkpoints beyond the last ``keep_last`` are deleted only after the new one is in place (renamed to
a ``.trash-`` name first, so a half-deleted folder never looks like a checkpoint).

Loading never executes code from a file: weights come from safetensors (or a Hugging Face
``pytorch_model.bin`` through ``torch.load(weights_only=True)``), ``.pt`` files are loaded with
``weights_only=True``, settings are JSON/YAML. Every bad file — missing, truncated, garbage, or weights
that do not match the config — is one :class:`~t2t.errors.T2TError` naming the file.

Hugging Face: ``from_hf(folder_or_hub_id)`` reads a ``T5ForConditionalGeneration`` folder (config.json +
model.safetensors / pytorch_model.bin, sharded or not; T5 1.0 and 1.1 configs), ``to_hf(model, out_dir)``
writes one that ``transformers`` loads with no missing or unexpected keys. The key map is the table in
t2t/model.py's docstring. ``transformers`` itself is never imported here.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch
import yaml
from safetensors import safe_open
from safetensors.torch import save_file

from t2t import config as config_lib
from t2t.errors import T2TError
from t2t.model import T5, ModelConfig

log = logging.getLogger(__name__)

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
OPTIMIZER_FILE = "optimizer.pt"
TRAINER_STATE_FILE = "trainer_state.json"
RNG_FILE = "rng.pt"
SETTINGS_FILE = "train_config.yaml"
REQUIRED_FILES = (MODEL_FILE, CONFIG_FILE, TRAINER_STATE_FILE)

_STEP_DIR = re.compile(r"^step_(\d{8,})$")
_TMP_PREFIX = ".tmp-"
_TRASH_PREFIX = ".trash-"


def checkpoint_name(step: int) -> str:
    """``step_00000100`` for step 100."""
    return f"step_{step:08d}"


# ----------------------------------------------------------------------------------------------------------
# Saving


def save_checkpoint(run_dir: str | os.PathLike, step: int, model: T5, *, model_state: Mapping | None = None,
                    optimizer: torch.optim.Optimizer | None = None, optimizer_state: dict | None = None,
                    trainer_state: Mapping[str, Any] | None = None, settings: Mapping[str, Any] | None = None,
                    save_rng: bool = True, keep_last: int | None = 3) -> Path:
    """Write ``run_dir/step_{step:08d}/`` atomically and return its path.

    ``optimizer`` (an optimizer) or ``optimizer_state`` (its state dict, e.g. gathered from FSDP shards) is
    saved as optimizer.pt; ``model_state`` replaces ``model.state_dict()`` where the module holds only a
    shard (the full state gathered from FSDP); ``trainer_state`` (JSON-able; ``step`` is filled in) as trainer_state.json;
    ``settings`` (the resolved training settings) as train_config.yaml. ``keep_last`` keeps the newest K
    checkpoints (None or < 1: keep all); older ones are deleted after the new one is in place.
    """
    if optimizer is not None and optimizer_state is not None:
        raise ValueError("pass either optimizer or optimizer_state, not both")
    if optimizer is not None:
        optimizer_state = optimizer.state_dict()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    _remove_stray_temp_dirs(run_dir)
    final = run_dir / checkpoint_name(step)
    tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{final.name}-", dir=run_dir))
    try:
        _write_model_files(tmp, model, model_state)
        state = {"step": step, **dict(trainer_state or {})}
        _write_text(tmp / TRAINER_STATE_FILE, json.dumps(state, indent=2, sort_keys=True))
        if optimizer_state is not None:
            _write_file(tmp / OPTIMIZER_FILE, lambda p: torch.save(optimizer_state, p))
        if save_rng:
            _write_file(tmp / RNG_FILE, lambda p: torch.save(get_rng_state(), p))
        if settings is not None:
            _write_text(tmp / SETTINGS_FILE, yaml.safe_dump(_plain(settings), sort_keys=False))
        _fsync_dir(tmp)
        if final.exists():  # saving the same step again: move the old copy out of the way first
            os.replace(final, run_dir / f"{_TRASH_PREFIX}{final.name}-{os.getpid()}")
        os.replace(tmp, final)
        _fsync_dir(run_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _remove_trash(run_dir)
    if keep_last is not None and keep_last >= 1:
        prune_checkpoints(run_dir, keep_last, keep=final)
    return final


def prune_checkpoints(run_dir: str | os.PathLike, keep_last: int, keep: Path | None = None) -> list[Path]:
    """Delete all but the ``keep_last`` newest checkpoints (never ``keep``); returns the deleted paths."""
    deleted = []
    for path in list_checkpoints(run_dir)[:-keep_last]:
        if keep is not None and path.resolve() == Path(keep).resolve():
            continue
        trash = path.with_name(f"{_TRASH_PREFIX}{path.name}")
        os.replace(path, trash)  # atomic: the checkpoint disappears whole, then its files go
        shutil.rmtree(trash, ignore_errors=True)
        deleted.append(path)
    return deleted


def _write_model_files(folder: Path, model: T5, state: Mapping | None = None) -> None:
    """model.safetensors + config.json (the model's own part of a checkpoint)."""
    state = model.state_dict() if state is None else state
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state.items()}
    _write_file(folder / MODEL_FILE, lambda p: save_file(tensors, p, {"format": "pt"}))
    _write_text(folder / CONFIG_FILE, json.dumps(config_lib.to_dict(model.config), indent=2))


def _write_text(path: Path, text: str) -> None:
    _write_file(path, lambda p: Path(p).write_text(text))


def _write_file(path: Path, write: Callable[[str], Any]) -> None:
    """``write(path)``, then fsync the file so that a later rename publishes complete contents."""
    write(str(path))
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # not supported on this platform
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove_stray_temp_dirs(run_dir: Path) -> None:
    """Leftovers of a save that crashed (one writer per run dir, so none is in progress now)."""
    for path in run_dir.glob(f"{_TMP_PREFIX}step_*"):
        shutil.rmtree(path, ignore_errors=True)
    _remove_trash(run_dir)


def _remove_trash(run_dir: Path) -> None:
    for path in run_dir.glob(f"{_TRASH_PREFIX}step_*"):
        shutil.rmtree(path, ignore_errors=True)


def _plain(obj: Any) -> Any:
    """Settings as YAML-safe builtins (tuples → lists, paths → strings)."""
    return json.loads(json.dumps(obj, default=str))


# ----------------------------------------------------------------------------------------------------------
# Finding checkpoints


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """The complete checkpoints in ``run_dir``, oldest step first (temp and trash folders are ignored)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = []
    for path in run_dir.iterdir():
        match = _STEP_DIR.match(path.name)
        if not match or not path.is_dir():
            continue
        missing = [name for name in REQUIRED_FILES if not (path / name).is_file()]
        if missing:
            log.warning("ignoring %s: it has no %s", path, ", ".join(missing))
            continue
        found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint in ``run_dir``, or None."""
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


# ----------------------------------------------------------------------------------------------------------
# Loading


def load_checkpoint(path: str | os.PathLike, model: T5 | None = None,
                    optimizer: torch.optim.Optimizer | None = None, restore_rng: bool = True) -> dict:
    """Load checkpoint ``path`` (a step folder, or a run dir: its latest) into ``model`` and ``optimizer``.

    Returns the trainer state (``step`` and whatever the trainer saved). ``model`` must have the
    checkpoint's architecture (any mismatch is a T2TError naming the file); the RNG states are restored
    when ``restore_rng`` and rng.pt exists.
    """
    path = _resolve_checkpoint_dir(Path(path))
    state = _read_json(path / TRAINER_STATE_FILE, "trainer state")
    if model is not None:
        weights = _read_safetensors(path / MODEL_FILE)
        _check_state_dict(weights, _expected_shapes(model), path / MODEL_FILE, "the model")
        model.load_state_dict(weights)
    if optimizer is not None:
        opt_path = path / OPTIMIZER_FILE
        opt_state = _torch_load(opt_path, "optimizer state")
        try:
            optimizer.load_state_dict(opt_state)
        except (ValueError, KeyError, RuntimeError, TypeError) as e:
            raise T2TError(f"optimizer state {opt_path} does not fit this optimizer ({_first_line(e)}); "
                           f"resume with the same optimizer settings or start a new run dir.") from None
    if restore_rng and (path / RNG_FILE).is_file():
        set_rng_state(_torch_load(path / RNG_FILE, "RNG state"), path / RNG_FILE)
    return state


def read_optimizer_state(path: str | os.PathLike) -> dict:
    """The optimizer state dict saved in checkpoint ``path`` (read with ``weights_only=True``)."""
    return _torch_load(_resolve_checkpoint_dir(Path(path)) / OPTIMIZER_FILE, "optimizer state")


def read_settings(path: str | os.PathLike) -> dict | None:
    """The resolved training settings saved beside checkpoint ``path`` (None if there are none)."""
    file = _resolve_checkpoint_dir(Path(path)) / SETTINGS_FILE
    return config_lib.read_config_file(file) if file.is_file() else None


def load_model(path_or_id: str | os.PathLike) -> T5:
    """A model from one of our checkpoints, a run dir (its latest checkpoint), a Hugging Face T5 folder,
    or a Hugging Face hub id."""
    path = Path(path_or_id)
    if path.is_dir():
        if (path / CONFIG_FILE).is_file():
            if "model_type" in _read_json(path / CONFIG_FILE, "model config"):
                return _from_hf_folder(path)
            return _load_native_model(path)
        latest = latest_checkpoint(path)
        if latest is not None:
            return _load_native_model(latest)
        raise T2TError(f"{path} is neither a t2t checkpoint, a run dir with checkpoints, nor a Hugging Face "
                       f"T5 folder (it has no config.json and no step_* checkpoint).")
    if path.exists():
        raise T2TError(f"{path} is a file; pass a checkpoint folder, a run dir, a Hugging Face T5 folder or "
                       f"a hub id.")
    return _from_hf_folder(_download_from_hub(str(path_or_id)))


def _resolve_checkpoint_dir(path: Path) -> Path:
    if not path.is_dir():
        raise T2TError(f"checkpoint {path} does not exist; pass a step_* folder or a run dir.")
    if _STEP_DIR.match(path.name) or (path / TRAINER_STATE_FILE).exists():
        return path
    latest = latest_checkpoint(path)
    if latest is None:
        raise T2TError(f"{path} holds no complete step_* checkpoint; pass a checkpoint folder or a run dir.")
    return latest


def _load_native_model(path: Path) -> T5:
    cfg = _read_model_config(path / CONFIG_FILE)
    weights = _read_safetensors(path / MODEL_FILE)
    model = T5.from_config(cfg, device="meta")
    _check_state_dict(weights, _expected_shapes(model), path / MODEL_FILE, "its config")
    return _assign_weights(model, weights)


def _read_model_config(path: Path) -> ModelConfig:
    data = _read_json(path, "model config")
    try:
        return config_lib.from_dict(ModelConfig, data)
    except T2TError as e:
        raise T2TError(f"model config {path} is invalid: {str(e).rstrip('.')}.") from None


def _assign_weights(model: T5, weights: dict[str, torch.Tensor]) -> T5:
    """Give a meta-device model the (checked) weights, as float32 tensors."""
    dtype = torch.get_default_dtype()
    model.load_state_dict({k: v.to(dtype) for k, v in weights.items()}, assign=True)
    return model


def _expected_shapes(model: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _check_state_dict(weights: Mapping[str, torch.Tensor], expected: Mapping[str, tuple[int, ...]],
                      file: Path, against: str) -> None:
    """One T2TError listing missing / unexpected keys and wrong shapes."""
    problems = [f"{k} has shape {list(weights[k].shape)}, expected {list(shape)}"
                for k, shape in expected.items() if k in weights and tuple(weights[k].shape) != shape]
    problems += [f"{k} is missing" for k in expected if k not in weights]
    problems += [f"{k} is unexpected" for k in weights if k not in expected]
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise T2TError(f"checkpoint {file} does not match {against}: {shown}.")


# -- reading files, every failure a T2TError naming the file -----------------------------------------------


def _read_json(path: Path, what: str) -> dict:
    try:
        text = path.read_text()
    except OSError as e:
        raise T2TError(f"cannot read {what} {path}: {e.strerror or e}; check that the checkpoint is complete.") from None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise T2TError(f"{what} {path} is not valid JSON ({_first_line(e)}); the file is corrupt.") from None
    if not isinstance(data, dict):
        raise T2TError(f"{what} {path} must hold a JSON object, not {type(data).__name__}; the file is corrupt.")
    return data


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise T2TError(f"weights file {path} is missing; the checkpoint is incomplete.")
    try:
        tensors = {}
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                tensors[key] = f.get_tensor(key)
        return tensors
    except Exception as e:  # safetensors raises its own error types (and OSError) for damaged files
        raise T2TError(f"weights file {path} cannot be read as safetensors ({_first_line(e)}); the file is "
                       f"truncated or corrupt, save or download it again.") from None


def _torch_load(path: Path, what: str) -> Any:
    """``torch.load(weights_only=True)``: tensors and plain containers only, never code."""
    if not path.is_file():
        raise T2TError(f"{what} file {path} is missing; the checkpoint is incomplete.")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # UnpicklingError for disallowed objects, RuntimeError/EOFError for damage
        found = re.search(r"Unsupported (?:global: GLOBAL|class) ([\w.]+)", str(e))
        if found:
            culprit = f" ({found[1]})"
            raise T2TError(f"{what} file {path} refers to Python code{culprit} besides tensors and plain "
                           f"containers, which t2t refuses to unpickle; re-save it as a plain state dict or use "
                           f"a checkpoint from a trusted source.") from None
        reason = re.search(r"WeightsUnpickler error: \s*(.+)", str(e))
        reason = reason[1].splitlines()[0].strip().rstrip(".") if reason else _first_line(e)
        raise T2TError(f"{what} file {path} cannot be read ({reason}); the file is truncated or "
                       f"corrupt.") from None


def _first_line(e: BaseException) -> str:
    """The first sentence of an exception's message (reasons are quoted inside our one sentence)."""
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0].split(". ")[0].rstrip(".")


# ----------------------------------------------------------------------------------------------------------
# RNG states (weights_only-loadable: tensors, lists, numbers, strings)


def get_rng_state() -> dict:
    """torch (CPU and CUDA), numpy's global and python's ``random`` states as tensors and numbers."""
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    py_version, py_state, py_gauss = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {"bit_generator": np_name, "keys": torch.from_numpy(np_keys.astype(np.int64)),
                  "pos": int(np_pos), "has_gauss": int(np_has_gauss), "cached_gaussian": float(np_gauss)},
        "python": {"version": py_version, "state": torch.tensor(py_state, dtype=torch.int64),
                   "gauss_next": py_gauss},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict, path: Path | str = RNG_FILE) -> None:
    try:
        torch.set_rng_state(state["torch"])
        n = state["numpy"]
        np.random.set_state((n["bit_generator"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                             n["cached_gaussian"]))
        p = state["python"]
        random.setstate((p["version"], tuple(int(x) for x in p["state"].tolist()), p["gauss_next"]))
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as e:
        raise T2TError(f"RNG state file {path} is malformed ({_first_line(e)}); delete it to resume without "
                       f"restoring random states.") from None
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


# ----------------------------------------------------------------------------------------------------------
# Hugging Face T5


HF_MODEL_TYPES = ("t5", "mt5")  # mT5 is T5 1.1 under another name
_HF_DENSE = "DenseReluDense"


def hf_key(key: str) -> str:
    """Our state-dict key → Hugging Face ``T5ForConditionalGeneration``'s (t2t/model.py's table)."""
    m = re.fullmatch(r"(encoder|decoder)\.relative_attention_bias\.weight", key)
    if m:
        return f"{m[1]}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
    m = re.fullmatch(r"(encoder|decoder)\.blocks\.(\d+)\.(self_attn|cross_attn|ff)\.(.+)", key)
    if not m:
        return key  # shared.weight, {s}.final_layer_norm.weight, lm_head.weight
    stack, i, part, rest = m.groups()
    if part == "self_attn":
        layer, module = 0, "SelfAttention"
    elif part == "cross_attn":
        layer, module = 1, "EncDecAttention"
    else:
        layer, module = (2 if stack == "decoder" else 1), _HF_DENSE
    if rest.startswith("layer_norm."):
        return f"{stack}.block.{i}.layer.{layer}.{rest}"
    return f"{stack}.block.{i}.layer.{layer}.{module}.{rest}"


def model_config_from_hf(hf: Mapping[str, Any], path: Path | str = CONFIG_FILE) -> ModelConfig:
    """Map a Hugging Face T5 ``config.json`` onto ModelConfig; anything t2t cannot run is a T2TError."""
    model_type = hf.get("model_type")
    if model_type not in HF_MODEL_TYPES:
        raise T2TError(f"{path} describes a {model_type!r} model, but t2t converts only T5 models "
                       f"(model_type 't5' or 'mt5').")
    proj = hf.get("feed_forward_proj", "relu")
    if proj not in ("relu", "gated-gelu"):
        raise T2TError(f"{path} uses feed_forward_proj {proj!r}, but t2t supports only 'relu' (T5 1.0) and "
                       f"'gated-gelu' (T5 1.1).")
    if hf.get("is_encoder_decoder") is False or hf.get("is_decoder"):
        raise T2TError(f"{path} is not an encoder-decoder T5 config; t2t converts only "
                       f"T5ForConditionalGeneration checkpoints.")
    # T5 1.0 ties the output layer to the embedding and rescales by d_model**-0.5; 1.1 does neither.
    # transformers >= 5 writes tie_word_embeddings=true for both and keeps the difference in
    # scale_decoder_outputs, so that field wins where present.
    tied = hf.get("scale_decoder_outputs", hf.get("tie_word_embeddings", True))
    fields = {
        "vocab_size": hf.get("vocab_size", 32128), "d_model": hf.get("d_model", 512), "d_kv": hf.get("d_kv", 64),
        "d_ff": hf.get("d_ff", 2048), "num_layers": hf.get("num_layers", 6),
        "num_decoder_layers": hf.get("num_decoder_layers"), "num_heads": hf.get("num_heads", 8),
        "relative_attention_num_buckets": hf.get("relative_attention_num_buckets", 32),
        "relative_attention_max_distance": hf.get("relative_attention_max_distance", 128),
        "dropout_rate": hf.get("dropout_rate", 0.1), "layer_norm_epsilon": hf.get("layer_norm_epsilon", 1e-6),
        "feed_forward_proj": proj, "tie_word_embeddings": tied,
        "pad_id": hf.get("pad_token_id", 0) if hf.get("pad_token_id") is not None else 0,
        "eos_id": hf.get("eos_token_id", 1) if isinstance(hf.get("eos_token_id", 1), int) else 1,
        "decoder_start_id": hf.get("decoder_start_token_id", 0) if hf.get("decoder_start_token_id") is not None
        else 0,
    }
    try:
        return config_lib.from_dict(ModelConfig, fields)
    except T2TError as e:
        raise T2TError(f"Hugging Face config {path} cannot be mapped onto t2t's ModelConfig: "
                       f"{str(e).rstrip('.')}.") from None


def model_config_to_hf(cfg: ModelConfig) -> dict:
    """ModelConfig → a Hugging Face ``T5ForConditionalGeneration`` config.json."""
    gated = cfg.feed_forward_proj == "gated-gelu"
    return {
        "architectures": ["T5ForConditionalGeneration"],
        "model_type": "t5",
        "vocab_size": cfg.vocab_size,
        "d_model": cfg.d_model,
        "d_kv": cfg.d_kv,
        "d_ff": cfg.d_ff,
        "num_layers": cfg.num_layers,
        "num_decoder_layers": cfg.decoder_layers,
        "num_heads": cfg.num_heads,
        "relative_attention_num_buckets": cfg.relative_attention_num_buckets,
        "relative_attention_max_distance": cfg.relative_attention_max_distance,
        "dropout_rate": cfg.dropout_rate,
        "layer_norm_epsilon": cfg.layer_norm_epsilon,
        "initializer_factor": 1.0,
        "feed_forward_proj": cfg.feed_forward_proj,
        "dense_act_fn": "gelu_new" if gated else "relu",
        "is_gated_act": gated,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "is_encoder_decoder": True,
        "use_cache": True,
        "pad_token_id": cfg.pad_id,
        "eos_token_id": cfg.eos_id,
        "decoder_start_token_id": cfg.decoder_start_id,
        "dtype": "float32",
        "torch_dtype": "float32",
    }


def from_hf(dir_or_hub_id: str | os.PathLike) -> T5:
    """A t2t model from a Hugging Face T5 folder (config.json + safetensors or pytorch_model.bin) or hub id."""
    path = Path(dir_or_hub_id)
    if path.is_dir():
        return _from_hf_folder(path)
    if path.exists():
        raise T2TError(f"{path} is a file; pass the Hugging Face model folder that holds config.json.")
    return _from_hf_folder(_download_from_hub(str(dir_or_hub_id)))


def _from_hf_folder(folder: Path) -> T5:
    cfg_path = folder / CONFIG_FILE
    if not cfg_path.is_file():
        raise T2TError(f"{folder} has no config.json, so it is not a Hugging Face T5 folder; pass the folder "
                       f"that save_pretrained wrote.")
    cfg = model_config_from_hf(_read_json(cfg_path, "Hugging Face config"), cfg_path)
    hf_weights, weights_path = _read_hf_weights(folder)
    model = T5.from_config(cfg, device="meta")
    weights = _weights_from_hf(hf_weights, model, cfg, weights_path)
    return _assign_weights(model, weights)


def _weights_from_hf(hf: dict[str, torch.Tensor], model: T5, cfg: ModelConfig,
                     path: Path) -> dict[str, torch.Tensor]:
    """HF state dict → ours, checked key by key (messages use the file's HF names)."""
    hf = dict(hf)
    if "shared.weight" not in hf:  # some exports keep only the stacks' (tied) copies
        for alias in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
            if alias in hf:
                hf["shared.weight"] = hf[alias]
                break
    for tied in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                 # an unused weight old transformers versions saved (HF ignores it on load too)
                 "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight"):
        hf.pop(tied, None)
    lm_head = hf.pop("lm_head.weight", None)
    if not cfg.tie_word_embeddings:
        # T5 1.1: a separate output layer; transformers >= 5 omits it when it shares the embedding's tensor
        if lm_head is not None:
            hf["lm_head.weight"] = lm_head
        elif "shared.weight" in hf:
            hf["lm_head.weight"] = hf["shared.weight"]
    expected = {hf_key(k): shape for k, shape in _expected_shapes(model).items()}
    _check_state_dict(hf, expected, path, "its config.json")
    shared = hf["shared.weight"]
    if cfg.tie_word_embeddings and lm_head is not None and not (
            lm_head.shape == shared.shape and torch.equal(lm_head, shared)):
        raise T2TError(f"{path} has an lm_head.weight different from shared.weight while its config ties them "
                       f"(T5 1.0 style, rescaled output layer); set tie_word_embeddings false in config.json if "
                       f"this is a T5 1.1 model.")
    ours = {hf_key(k): k for k in model.state_dict()}
    return {ours[k]: v for k, v in hf.items()}


def _read_hf_weights(folder: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """The state dict in a HF folder: model.safetensors, pytorch_model.bin, or their sharded forms."""
    for single, index, reader in (
            ("model.safetensors", "model.safetensors.index.json", _read_safetensors),
            ("pytorch_model.bin", "pytorch_model.bin.index.json", lambda p: _torch_load(p, "weights"))):
        if (folder / single).is_file():
            return _as_tensor_dict(reader(folder / single), folder / single), folder / single
        if (folder / index).is_file():
            weight_map = _read_json(folder / index, "weights index").get("weight_map")
            if not isinstance(weight_map, dict):
                raise T2TError(f"weights index {folder / index} has no weight_map; the file is corrupt.")
            tensors: dict[str, torch.Tensor] = {}
            for shard in sorted(set(weight_map.values())):
                tensors.update(_as_tensor_dict(reader(folder / shard), folder / shard))
            return tensors, folder / index
    raise T2TError(f"{folder} has no model.safetensors or pytorch_model.bin (nor a sharded index); the "
                   f"Hugging Face folder is incomplete.")


def _as_tensor_dict(obj: Any, path: Path) -> dict[str, torch.Tensor]:
    if isinstance(obj, Mapping) and "state_dict" in obj and isinstance(obj["state_dict"], Mapping):
        obj = obj["state_dict"]
    if not isinstance(obj, Mapping) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise T2TError(f"weights file {path} does not hold a state dict of tensors; pass the file "
                       f"save_pretrained wrote.")
    return dict(obj)


_HF_PATTERNS = ["config.json", "*.safetensors", "model.safetensors.index.json", "spiece.model",
                "tokenizer_config.json", "special_tokens_map.json"]
_HF_BIN_PATTERNS = ["pytorch_model*.bin", "pytorch_model.bin.index.json"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def _download_from_hub(repo_id: str) -> Path:
    """``huggingface_hub.snapshot_download`` of a T5 repo's config and weights (safetensors, else .bin)."""
    if not _HUB_ID.match(repo_id) or ".." in repo_id:
        raise T2TError(f"{repo_id} does not exist locally and is not a Hugging Face hub id; check the path.")
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=_HF_PATTERNS))
        if not any(folder.glob("*.safetensors")):
            folder = Path(snapshot_download(repo_id, allow_patterns=_HF_PATTERNS + _HF_BIN_PATTERNS))
    except Exception as e:  # network, unknown repo, gated repo, no disk space … all end the same way
        raise T2TError(f"{repo_id} is not a local folder and could not be downloaded from the Hugging Face hub "
                       f"({type(e).__name__}: {_first_line(e)}); check the path or hub id and the network.") \
            from None
    return folder


def to_hf(model: T5, out_dir: str | os.PathLike, vocabulary: Any = None) -> Path:
    """Write ``model`` as a Hugging Face T5 folder (config.json + model.safetensors) loadable by
    ``transformers.T5ForConditionalGeneration.from_pretrained(out_dir)``; with ``vocabulary`` (a
    SentencePieceVocabulary or a .model path) its SentencePiece model is copied to spiece.model."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {hf_key(k): v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    tmp = out / f"{_TMP_PREFIX}{MODEL_FILE}"
    _write_file(tmp, lambda p: save_file(tensors, p, {"format": "pt"}))
    os.replace(tmp, out / MODEL_FILE)
    _write_text(out / CONFIG_FILE, json.dumps(model_config_to_hf(model.config), indent=2))
    if vocabulary is not None:
        _copy_vocabulary(vocabulary, out)
    return out


def _copy_vocabulary(vocabulary: Any, out: Path) -> None:
    source = Path(getattr(vocabulary, "path", vocabulary))
    if not source.is_file():
        raise T2TError(f"vocabulary file {source} does not exist; pass a SentencePiece .model file.")
    shutil.copyfile(source, out / "spiece.model")
    extra_ids = getattr(vocabulary, "extra_ids", 100)
    _write_text(out / "tokenizer_config.json", json.dumps(
        {"tokenizer_class": "T5Tokenizer", "extra_ids": extra_ids, "eos_token": "</s>", "unk_token": "<unk>",
         "pad_token": "<pad>", "model_max_length": 512}, indent=2))


# ----------------------------------------------------------------------------------------------------------
# t5x (Flax msgpack checkpoints; optional, needs ``msgpack``)

_T5X_LAYER = {  # t5x module path inside a layer → ours (kernels are [in, out]: transposed)
    "attention": "self_attn", "self_attention": "self_attn", "encoder_decoder_attention": "cross_attn",
    "pre_attention_layer_norm": "self_attn.layer_norm", "pre_self_attention_layer_norm": "self_attn.layer_norm",
    "pre_cross_attention_layer_norm": "cross_attn.layer_norm", "pre_mlp_layer_norm": "ff.layer_norm",
    "mlp": "ff",
}
_T5X_PROJ = {"query": "q", "key": "k", "value": "v", "out": "o", "wi": "wi", "wi_0": "wi_0", "wi_1": "wi_1",
             "wo": "wo"}


def from_t5x(path: str | os.PathLike, dropout_rate: float = 0.1) -> T5:
    """A t2t model from a t5x checkpoint in Flax's msgpack format (a ``checkpoint`` file, or the folder
    holding one). The architecture is read off the weight shapes; T5 1.1-style models (gated-GELU, separate
    ``logits_dense``) and T5 1.0-style (ReLU ``wi``, logits via the embedding) are recognised.
    ``relative_attention_max_distance`` (not stored) is t5x's default 128."""
    try:
        import msgpack
    except ImportError:
        raise T2TError("reading t5x checkpoints needs the msgpack package; pip install msgpack.") from None
    file = Path(path)
    if file.is_dir():
        file = file / "checkpoint"
    try:
        raw = file.read_bytes()
    except OSError as e:
        raise T2TError(f"cannot read t5x checkpoint {file}: {e.strerror or e}; pass the checkpoint file or "
                       f"its folder.") from None
    try:
        tree = msgpack.unpackb(raw, ext_hook=_t5x_ext_hook, raw=False, strict_map_key=False)
        params = tree["optimizer"]["target"]
    except Exception as e:  # msgpack's own errors, a missing key, a dtype numpy does not know …
        raise T2TError(f"t5x checkpoint {file} cannot be decoded as a Flax msgpack checkpoint with "
                       f"optimizer.target ({type(e).__name__}: {_first_line(e)}); the file is corrupt or in "
                       f"another format.") from None
    flat = _flatten_t5x(params, file)
    weights = {}
    for name, value in flat.items():
        key = _t5x_key(name)
        if key is None:
            raise T2TError(f"t5x checkpoint {file} has a parameter t2t does not know ({name}); only T5 "
                           f"encoder-decoder checkpoints can be converted.")
        weights[key] = value.T.contiguous() if name.endswith(("/kernel", "/rel_embedding")) else value
    cfg = _t5x_config(weights, file, dropout_rate)
    model = T5.from_config(cfg, device="meta")
    _check_state_dict(weights, _expected_shapes(model), file, "the architecture read off its shapes")
    return _assign_weights(model, weights)


def _t5x_ext_hook(code: int, data: bytes):
    """Flax's ext type 1: msgpack(shape, dtype name, raw bytes) → a tensor (no code is ever run)."""
    import msgpack

    if code != 1:
        raise ValueError(f"unknown msgpack ext type {code}")
    shape, dtype, buffer = msgpack.unpackb(data, raw=False)
    if dtype == "bfloat16":
        return torch.frombuffer(bytearray(buffer), dtype=torch.bfloat16).reshape(shape).float()
    array = np.frombuffer(buffer, dtype=np.dtype(dtype))
    if array.dtype.kind not in "fiub":
        raise ValueError(f"unsupported array dtype {dtype}")
    return torch.from_numpy(array.copy()).reshape(shape)


def _flatten_t5x(tree: Any, file: Path, prefix: str = "") -> dict[str, torch.Tensor]:
    out = {}
    for key, value in tree.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, dict):
            if "__msgpack_chunked_array__" in value:
                raise T2TError(f"t5x checkpoint {file} stores {name} in chunks, which t2t does not read; "
                               f"convert a smaller checkpoint or restore it with t5x first.")
            out.update(_flatten_t5x(value, file, name))
        elif isinstance(value, torch.Tensor):
            out[name] = value
        else:
            raise T2TError(f"t5x checkpoint {file} holds no array for {name} (got {type(value).__name__}; "
                           f"tensorstore checkpoints keep arrays in separate files); use a msgpack-only "
                           f"checkpoint.")
    return out


def _t5x_key(name: str) -> str | None:
    parts = name.split("/")
    if name == "token_embedder/embedding":
        return "shared.weight"
    if name == "decoder/logits_dense/kernel":
        return "lm_head.weight"
    stack = parts[0]
    if stack not in ("encoder", "decoder") or len(parts) < 3:
        return None
    if parts[1:] == ["relpos_bias", "rel_embedding"]:
        return f"{stack}.relative_attention_bias.weight"
    if parts[1:] == [f"{stack}_norm", "scale"]:
        return f"{stack}.final_layer_norm.weight"
    m = re.fullmatch(r"layers_(\d+)", parts[1])
    if not m or parts[2] not in _T5X_LAYER:
        return None
    module = _T5X_LAYER[parts[2]]
    if parts[3:] == ["scale"] and module.endswith("layer_norm"):
        return f"{stack}.blocks.{m[1]}.{module}.weight"
    if len(parts) == 5 and parts[4] == "kernel" and parts[3] in _T5X_PROJ:
        return f"{stack}.blocks.{m[1]}.{module}.{_T5X_PROJ[parts[3]]}.weight"
    return None


def _t5x_config(weights: dict[str, torch.Tensor], file: Path, dropout_rate: float) -> ModelConfig:
    try:
        vocab_size, d_model = weights["shared.weight"].shape
        num_buckets, num_heads = weights["encoder.relative_attention_bias.weight"].shape
        inner = weights["encoder.blocks.0.self_attn.q.weight"].shape[0]
        gated = "encoder.blocks.0.ff.wi_0.weight" in weights
        d_ff = weights[f"encoder.blocks.0.ff.{'wi_0' if gated else 'wi'}.weight"].shape[0]
    except KeyError as e:
        raise T2TError(f"t5x checkpoint {file} lacks {e.args[0]} (in t2t's names), so its architecture cannot "
                       f"be read; only T5 encoder-decoder checkpoints can be converted.") from None

    def count(stack: str) -> int:
        return len({k.split(".")[2] for k in weights if k.startswith(f"{stack}.blocks.")})

    return ModelConfig(vocab_size=vocab_size, d_model=d_model, d_kv=inner // num_heads, d_ff=d_ff,
                       num_layers=count("encoder"), num_decoder_layers=count("decoder"), num_heads=num_heads,
                       relative_attention_num_buckets=num_buckets, dropout_rate=dropout_rate,
                       feed_forward_proj="gated-gelu" if gated else "relu",
                       tie_word_embeddings="lm_head.weight" not in weights)
