"""Loading a model from wherever it is: one of t2t's checkpoints, a run dir, a Hugging Face T5 folder, a t5x
checkpoint (file or folder, msgpack or TensorStore), a checkpoint of the t5 library (Mesh TensorFlow) or a
hub id. A trained-only checkpoint loads its base first (which may itself be any of these)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from t2t import config as config_lib
from t2t.checkpoints import hf, mesh_tf, t5x
from t2t.checkpoints.files import assign_weights, check_state_dict, expected_shapes, read_json, read_safetensors
from t2t.checkpoints.native import BASE_FILE, CONFIG_FILE, MODEL_FILE, latest_checkpoint, verify_checkpoint
from t2t.checkpoints.run import find_run
from t2t.errors import T2TError
from t2t.models.lora import add_lora
from t2t.models.t5 import T5, ModelConfig, add_adapters


def load_model(path_or_id: str | os.PathLike, verify: bool = True) -> T5:
    """A model from one of our checkpoints, a run dir (its latest checkpoint), a Hugging Face T5 folder,
    a t5x checkpoint (its msgpack file, or the ``checkpoint_N`` folder: msgpack, zarr or OCDBT arrays), a
    t5 library checkpoint (a ``model.ckpt-N`` prefix, or the folder naming it in TensorFlow's ``checkpoint``
    file) or a Hugging Face hub id, in eval mode (dropout off, as transformers' ``from_pretrained`` returns
    models; training sets train mode itself). ``verify`` checks our checkpoints' files against their checksums."""
    return find_and_load(path_or_id, verify).eval()


def own_vocabulary(path_or_id: str | os.PathLike) -> str | None:
    """The vocabulary a checkpoint carries: a t2t run's record (``vocab.json``, or ``spiece.model`` in runs from
    before it; t2t.checkpoints.run.Run.vocab), or the ``spiece.model`` a Hugging Face T5 folder or hub repo
    ships beside its weights (what transformers' tokenizer reads; ``byte`` for ByT5's: hf.folder_vocabulary);
    None for a t5x checkpoint or a folder without one. A model trained on another vocabulary of T5's size
    would otherwise be read with T5's, and every prediction would be wrong without a word."""
    path = Path(path_or_id)
    run = find_run(path)
    if run is not None:
        return run.vocab
    if mesh_tf.is_mesh_tf_checkpoint(path):
        return None
    if not path.exists():
        return hf.hub_vocabulary(str(path_or_id))
    return hf.folder_vocabulary(path) if path.is_dir() and is_hf_folder(path) else None


def is_hf_folder(path: Path) -> bool:
    """A Hugging Face model folder: its config.json names a ``model_type`` or its ``architectures`` (early
    uploads of google/umt5-xl have only those; t2t's checkpoints' config.json has neither)."""
    return (path / CONFIG_FILE).is_file() and is_hf_config(read_json(path / CONFIG_FILE, "model config"))


def is_hf_config(data: dict) -> bool:
    return "model_type" in data or "architectures" in data


def find_and_load(path_or_id: str | os.PathLike, verify: bool) -> T5:
    path = Path(path_or_id)
    if path.is_dir():
        if (path / CONFIG_FILE).is_file():
            if is_hf_folder(path):
                return hf.from_hf_folder(path)
            return load_native_model(path, verify)
        if mesh_tf.is_mesh_tf_checkpoint(path):  # before t5x: TensorFlow's state file is also `checkpoint`
            return mesh_tf.from_mesh_tf(path)
        if t5x.is_t5x_folder(path):
            return t5x.from_t5x(path)
        latest = latest_checkpoint(path)
        if latest is not None:
            return load_native_model(latest, verify)
        raise T2TError(f"{path} is neither a t2t checkpoint, a run dir with checkpoints, a Hugging Face T5 "
                       f"folder, a t5x checkpoint folder nor a TensorFlow one (it has no config.json, no step_* "
                       f"checkpoint, no t5x {t5x.CHECKPOINT_FILE} file or orbax _METADATA, and no TensorFlow "
                       f"{mesh_tf.STATE_FILE} file).")
    if mesh_tf.is_mesh_tf_checkpoint(path):
        return mesh_tf.from_mesh_tf(path)
    if path.is_file() and t5x.is_t5x_file(path):
        return t5x.from_t5x(path)
    if path.exists():
        raise T2TError(f"{path} is a file but not a t5x checkpoint; pass a checkpoint folder, a run dir, a "
                       f"Hugging Face T5 folder, a t5x checkpoint file, a TensorFlow model.ckpt-N prefix or a hub "
                       f"id.")
    return hf.from_hf_folder(hf.download_from_hub(str(path_or_id)))


def load_native_model(path: Path, verify: bool = True) -> T5:
    if verify:
        verify_checkpoint(path, [CONFIG_FILE, MODEL_FILE, BASE_FILE])
    cfg = _read_model_config(path / CONFIG_FILE)
    weights = read_safetensors(path / MODEL_FILE)
    if (path / BASE_FILE).is_file():
        return _load_on_base(path, cfg, weights)
    model = T5.from_config(cfg, device="meta")
    check_state_dict(weights, expected_shapes(model), path / MODEL_FILE, "its config")
    return assign_weights(model, weights)


def _load_on_base(path: Path, cfg: ModelConfig, weights: dict[str, torch.Tensor]) -> T5:
    """A trained-only checkpoint: its base model, given adapters or LoRA if it has them, then its tensors."""
    base = read_json(path / BASE_FILE, "base reference")["base"]
    if not Path(base).exists() and Path(base).is_absolute():
        raise T2TError(f"checkpoint {path} holds only trained parameters and its base {base} is gone; put the "
                       f"base back at that path (or edit {path / BASE_FILE}).")
    model = load_model(base)
    if cfg.adapter_dim and not model.config.adapter_dim:
        add_adapters(model, cfg.adapter_dim)
    if cfg.lora_rank and not model.config.lora_rank:
        add_lora(model, cfg.lora_rank, cfg.lora_alpha, cfg.lora_targets)
    if _shape(model.config) != _shape(cfg):
        raise T2TError(f"checkpoint {path} was trained from a base of another shape than {base}; restore "
                       f"that base or pass a complete checkpoint.")
    check_state_dict(weights, expected_shapes(model), path / MODEL_FILE, f"its base {base}", partial=True)
    model.load_state_dict(weights, strict=False)
    return model


def _shape(cfg: ModelConfig) -> dict:
    """A model config without its dropout rate, which a fine-tuning run may change."""
    return {k: v for k, v in config_lib.to_dict(cfg).items() if k != "dropout_rate"}


def _read_model_config(path: Path) -> ModelConfig:
    data = read_json(path, "model config")
    try:
        return config_lib.from_dict(ModelConfig, data)
    except config_lib.SettingError as e:
        raise T2TError(f"model config {path} has {e.key} {e.value!r}, which must be {e.requirement}; the file was "
                       f"edited or is corrupt, so restore it from a copy.") from None
    except T2TError as e:
        raise T2TError(f"model config {path} is invalid: {str(e).rstrip('.')}.") from None


def read_model_config(path_or_id: str | os.PathLike) -> ModelConfig:
    """The ModelConfig of what ``load_model`` loads, read from its config.json where it has one (our
    checkpoints and run dirs, Hugging Face folders) and from the loaded model otherwise (t5x, hub ids)."""
    path = Path(path_or_id)
    if path.is_dir() and not (path / CONFIG_FILE).is_file():
        path = latest_checkpoint(path) or path
    if not (path / CONFIG_FILE).is_file():
        return load_model(path_or_id).config
    data = read_json(path / CONFIG_FILE, "model config")
    return hf.model_config_from_hf(data, path / CONFIG_FILE) if is_hf_config(data) else \
        _read_model_config(path / CONFIG_FILE)
