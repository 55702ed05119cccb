"""t5x checkpoints → a t2t model: Flax msgpack files, and the TensorStore arrays (zarr, OCDBT) that t5x
and orbax write beside them (t2t.checkpoints.tensorstore_arrays; optional: ``msgpack``, ``tensorstore``).

The architecture is read off the weight shapes; kernels are stored [in, out] and transposed to PyTorch's
[out, in]. Arrays are decoded from their raw bytes, so no code in the file is ever run.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from t2t.checkpoints import tensorstore_arrays
from t2t.checkpoints.files import assign_weights, check_state_dict, expected_shapes
from t2t.checkpoints.tensorstore_arrays import ArrayRef, array_ref
from t2t.errors import T2TError, error_summary
from t2t.models.t5 import T5, ModelConfig

_T5X_LAYER = {  # t5x module path inside a layer → ours (kernels are [in, out]: transposed)
    "attention": "self_attn", "self_attention": "self_attn", "encoder_decoder_attention": "cross_attn",
    "pre_attention_layer_norm": "self_attn.layer_norm", "pre_self_attention_layer_norm": "self_attn.layer_norm",
    "pre_cross_attention_layer_norm": "cross_attn.layer_norm", "pre_mlp_layer_norm": "ff.layer_norm",
    "mlp": "ff",
}
_T5X_PROJ = {"query": "q", "key": "k", "value": "v", "out": "o", "wi": "wi", "wi_0": "wi_0", "wi_1": "wi_1",
             "wo": "wo"}


CHECKPOINT_FILE = "checkpoint"  # t5x's checkpoint_N/checkpoint (orbax's older aggregate file has the name too)
STATE_DIR = "state"  # t5x's orbax layout: checkpoint_N/state/ holds the train state
_MSGPACK_MAPS = {*range(0x80, 0x90), 0xDE, 0xDF}  # fixmap, map 16, map 32


def is_t5x_file(path: Path) -> bool:
    """Whether the file ``path`` starts as a Flax msgpack checkpoint does: a map with an ``optimizer`` key
    (t5x writes ``{version, optimizer}``) or a ``target`` key (orbax's aggregate file of a t5x train state)
    among its first bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as e:
        raise T2TError(f"cannot read {path}: {e.strerror or e}; check that it is readable.") from None
    return bool(head) and head[0] in _MSGPACK_MAPS and (b"optimizer" in head or b"target" in head)


def is_t5x_folder(path: Path) -> bool:
    """Whether the folder ``path`` holds a t5x checkpoint: t5x's ``checkpoint`` msgpack, orbax's
    ``_METADATA`` or OCDBT manifest, or (t5x with orbax) a ``state`` folder holding one of them."""
    folder = path / STATE_DIR if (path / STATE_DIR).is_dir() else path
    return (folder / CHECKPOINT_FILE).is_file() or _is_orbax_folder(folder)


def _is_orbax_folder(folder: Path) -> bool:
    return any((folder / name).is_file() for name in (tensorstore_arrays.METADATA_FILE,
                                                      tensorstore_arrays.OCDBT_MANIFEST))


def from_t5x(path: str | os.PathLike, dropout_rate: float = 0.1) -> T5:
    """A t2t model from a t5x checkpoint: its ``checkpoint`` msgpack file, or the ``checkpoint_N`` folder
    (with t5x's orbax layout, ``checkpoint_N/state``). Arrays may be inline (Flax msgpack) or TensorStore
    arrays beside it: zarr folders named by t5x specs or orbax placeholders, or an OCDBT database (its tree
    in orbax's ``_METADATA``); see t2t.checkpoints.tensorstore_arrays. The architecture is read off the
    weight shapes; T5 1.1-style models (gated-GELU, separate ``logits_dense``) and T5 1.0-style (ReLU
    ``wi``, logits via the embedding) are recognised. ``relative_attention_max_distance`` (not stored) is t5x's
    default 128."""
    try:
        import msgpack  # noqa: F401 -- checked first: every t5x layout but a bare OCDBT one needs it
    except ImportError:
        raise T2TError("reading t5x checkpoints needs the msgpack package; pip install msgpack.") from None
    folder, file = _locate(Path(path))
    source = file or folder
    tree = _read_msgpack(file) if file is not None else tensorstore_arrays.read_orbax_tree(folder)
    where = tensorstore_arrays.storage(folder)
    flat = _flatten_t5x(_parameters(tree), source, where.driver)
    refs = {name: value for name, value in flat.items() if isinstance(value, ArrayRef)}
    if refs:
        flat.update(tensorstore_arrays.read_arrays(folder, refs, where.ocdbt))
    weights = {}
    for name, value in flat.items():
        key = _t5x_key(name)
        if key is None:
            raise T2TError(f"t5x checkpoint {source} has a parameter t2t does not know ({name}); only T5 "
                           f"encoder-decoder checkpoints can be converted.")
        weights[key] = value.T.contiguous() if name.endswith(("/kernel", "/rel_embedding")) else value
    return model_from_weights(weights, source, dropout_rate)


def model_from_weights(weights: dict[str, torch.Tensor], source: Path, dropout_rate: float = 0.1) -> T5:
    """A model whose ModelConfig is read off ``weights`` (t2t's names; see ``config_from_weights``), checked
    against them and given them: the last step of every converter that has no config file to read."""
    cfg = config_from_weights(weights, source, dropout_rate)
    model = T5.from_config(cfg, device="meta")
    check_state_dict(weights, expected_shapes(model), source, "the architecture read off its shapes")
    return assign_weights(model, weights)


def _locate(path: Path) -> tuple[Path, Path | None]:
    """The folder a checkpoint's arrays lie in, and its msgpack file (None where orbax's ``_METADATA`` or
    OCDBT database alone gives the tree). A missing file is reported when it is read."""
    if not path.is_dir():
        return path.parent, path
    folder = path / STATE_DIR if (path / STATE_DIR).is_dir() else path
    file = folder / CHECKPOINT_FILE
    if file.is_file() or not _is_orbax_folder(folder):
        return folder, file
    return folder, None


def _read_msgpack(file: Path) -> dict:
    import msgpack

    try:
        raw = file.read_bytes()
    except OSError as e:
        raise T2TError(f"cannot read t5x checkpoint {file}: {e.strerror or e}; pass the checkpoint file or "
                       f"its folder.") from None
    try:
        tree = msgpack.unpackb(raw, ext_hook=_t5x_ext_hook, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack's own errors, a dtype numpy does not know …
        raise T2TError(f"t5x checkpoint {file} cannot be decoded as a Flax msgpack checkpoint "
                       f"({type(e).__name__}: {error_summary(e)}); the file is corrupt or in another "
                       f"format.") from None
    if not isinstance(tree, dict):
        raise T2TError(f"t5x checkpoint {file} holds a {type(tree).__name__}, not a tree of parameters; the "
                       f"file is corrupt or in another format.")
    return tree


def _parameters(tree: dict) -> dict:
    """The model's parameters in a checkpoint's tree: t5x's ``{version, optimizer: {target, state}}``,
    orbax's ``{target, state}`` (a t5x train state), Flax's ``{params}``, or the parameters themselves."""
    for key in ("optimizer", "target", "params"):
        if isinstance(tree.get(key), dict):
            tree = tree[key]
    return tree


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


def _flatten_t5x(tree: Any, file: Path, driver: str, prefix: str = "") -> dict[str, torch.Tensor | ArrayRef]:
    """``{"encoder/layers_0/mlp/wo/kernel": tensor or ArrayRef}``; ``driver`` is that of orbax placeholders."""
    out = {}
    for key, value in tree.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        ref = array_ref(value, driver)
        if ref is not None:
            out[name] = ref
        elif isinstance(value, dict):
            if "__msgpack_chunked_array__" in value:
                raise T2TError(f"t5x checkpoint {file} stores {name} in chunks, which t2t does not read; "
                               f"convert a smaller checkpoint or restore it with t5x first.")
            out.update(_flatten_t5x(value, file, driver, name))
        elif isinstance(value, (torch.Tensor, ArrayRef)):
            out[name] = value
        else:
            raise T2TError(f"t5x checkpoint {file} holds no array for {name} (got {type(value).__name__}); the "
                           f"file is corrupt or not a t5x checkpoint.")
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


def config_from_weights(weights: dict[str, torch.Tensor], source: Path, dropout_rate: float = 0.1) -> ModelConfig:
    """The ModelConfig that weights in t2t's names imply: sizes from the embedding, the position bias and the
    first layer; gated-GELU where ``wi_0`` exists (T5 1.1), an untied output layer where ``lm_head`` does."""
    try:
        vocab_size, d_model = weights["shared.weight"].shape
        num_buckets, num_heads = weights["encoder.relative_attention_bias.weight"].shape
        inner = weights["encoder.blocks.0.self_attn.q.weight"].shape[0]
        gated = "encoder.blocks.0.ff.wi_0.weight" in weights
        d_ff = weights[f"encoder.blocks.0.ff.{'wi_0' if gated else 'wi'}.weight"].shape[0]
    except KeyError as e:
        raise T2TError(f"checkpoint {source} lacks {e.args[0]} (in t2t's names), so its architecture cannot "
                       f"be read; only T5 encoder-decoder checkpoints can be converted.") from None

    def count(stack: str) -> int:
        return len({k.split(".")[2] for k in weights if k.startswith(f"{stack}.blocks.")})

    return ModelConfig(vocab_size=vocab_size, d_model=d_model, d_kv=inner // num_heads, d_ff=d_ff,
                       num_layers=count("encoder"), num_decoder_layers=count("decoder"), num_heads=num_heads,
                       relative_attention_num_buckets=num_buckets, dropout_rate=dropout_rate,
                       feed_forward_proj="gated-gelu" if gated else "relu",
                       tie_word_embeddings="lm_head.weight" not in weights)
