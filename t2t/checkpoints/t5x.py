"""t5x checkpoints: Flax msgpack files → a t2t model (optional, needs ``msgpack``).

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

from t2t.checkpoints.files import assign_weights, check_state_dict, expected_shapes
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


CHECKPOINT_FILE = "checkpoint"  # t5x's checkpoint_N/checkpoint
_MSGPACK_MAPS = {*range(0x80, 0x90), 0xDE, 0xDF}  # fixmap, map 16, map 32


def is_t5x_file(path: Path) -> bool:
    """Whether the file ``path`` starts as a Flax msgpack checkpoint does: a map with an ``optimizer`` key
    among its first (t5x writes ``{version, optimizer}``)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as e:
        raise T2TError(f"cannot read {path}: {e.strerror or e}; check that it is readable.") from None
    return bool(head) and head[0] in _MSGPACK_MAPS and b"optimizer" in head


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
        file = file / CHECKPOINT_FILE
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
                       f"optimizer.target ({type(e).__name__}: {error_summary(e)}); the file is corrupt or in "
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
    check_state_dict(weights, expected_shapes(model), file, "the architecture read off its shapes")
    return assign_weights(model, weights)


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
