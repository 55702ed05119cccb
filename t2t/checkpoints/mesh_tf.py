"""Checkpoints of the original ``t5`` library (Mesh TensorFlow) → a t2t model (optional: TensorFlow,
``pip install 't2t[tf]'``, imported only when one is read).

Such a checkpoint is TensorFlow's ``model.ckpt-N.index`` + ``model.ckpt-N.data-*-of-*``, usually in a folder
whose text file ``checkpoint`` names the latest one. Variable names follow Mesh TensorFlow's scopes
(mesh_tensorflow/transformer/transformer.py: ``make_layer_stack`` names each layer ``block_NNN/layer_NNN``
or ``block_NNN/<its name>``, the layer's class names the next scope, the norm before it is ``layer_norm``
in the legacy sublayers of the released T5 1.0 checkpoints and ``rms_norm`` in the default ones of T5 1.1
and mT5)::

    shared/embedding                                            [vocab, d_model]  (not transposed)
    encoder/block_000/layer_000/SelfAttention/{q,k,v,o}         [d_model, heads*d_kv] ([heads*d_kv, d_model] for o)
    encoder/block_000/layer_000/SelfAttention/relative_attention_bias   [heads, buckets], first block only
    encoder/block_000/layer_000/{layer_norm,rms_norm}/scale
    encoder/block_000/layer_001/DenseReluDense/{wi,wi_0,wi_1,wo}/kernel   (decoder: layer_001 is
                                                                  EncDecAttention, layer_002 DenseReluDense)
    encoder/{final_layer_norm,rms_norm}/scale
    decoder/logits/kernel                                       [d_model, vocab], T5 1.1's untied output layer

Matrices are stored [in, out] and transposed to PyTorch's [out, in], as transformers' ``load_tf_weights_in_t5``
does. Optimizer slots (``*_slot_vc``, ``*_slot_vr``, ``*_slot_v`` of Adafactor) and ``global_step`` are
skipped; any other unknown variable is refused. The architecture is read off the shapes
(t2t.checkpoints.t5x.config_from_weights): with no ``decoder/logits`` the output layer is the embedding,
rescaled by d_model**-0.5 as Mesh TensorFlow's ``hidden_to_logits`` does (T5 1.0).
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path, PurePosixPath

import numpy as np
import torch

from t2t.checkpoints.t5x import model_from_weights
from t2t.errors import T2TError, error_summary
from t2t.models.t5 import T5

STATE_FILE = "checkpoint"  # TensorFlow's CheckpointState, in protobuf text format
_STATE_HEAD = b"model_checkpoint_path"
INSTALL = "pip install 't2t[tf]'"

_SUBLAYERS = {"encoder": ("self_attn", "ff"), "decoder": ("self_attn", "cross_attn", "ff")}  # layer_NNN in order
_NAMED_SUBLAYERS = {"self_attention": "self_attn", "enc_dec_attention": "cross_attn", "dense_relu_dense": "ff"}
_CLASSES = {"self_attn": "SelfAttention", "cross_attn": "EncDecAttention", "ff": "DenseReluDense"}
_NORMS = ("layer_norm", "rms_norm")
_FINAL_NORMS = ("final_layer_norm", "rms_norm")


def is_mesh_tf_checkpoint(path: Path) -> bool:
    """Whether ``path`` is a TensorFlow checkpoint: a folder whose ``checkpoint`` file is TensorFlow's text
    state (not t5x's msgpack of the same name), a ``model.ckpt-N`` prefix with its ``.index``, or the
    ``.index`` file itself. Nothing is imported to tell."""
    if path.is_dir():
        try:
            with open(path / STATE_FILE, "rb") as f:
                return f.read(len(_STATE_HEAD)) == _STATE_HEAD
        except OSError:
            return False
    return (path.name.endswith(".index") and path.is_file()) or Path(f"{path}.index").is_file()


def from_mesh_tf(path: str | os.PathLike, dropout_rate: float = 0.1) -> T5:
    """A t2t model from a checkpoint of the ``t5`` library: a ``model.ckpt-N`` prefix (or its ``.index``
    file), or the folder whose ``checkpoint`` file names the latest one."""
    prefix = _prefix(Path(path))
    _check_files(prefix)
    reader = _open(prefix)
    weights = {}
    for name in sorted(reader.get_variable_to_shape_map()):
        if name == "global_step" or "_slot_" in name.rsplit("/", 1)[-1]:
            continue
        key = mesh_tf_key(name)
        if key is None:
            raise T2TError(f"TensorFlow checkpoint {prefix} has a variable t2t does not know ({name}); only T5 "
                           f"encoder-decoder checkpoints of the t5 library (Mesh TensorFlow names) can be "
                           f"converted.")
        value = torch.from_numpy(np.asarray(_tensor(reader, prefix, name), dtype=np.float32))
        weights[key] = value.T.contiguous() if value.ndim == 2 and key != "shared.weight" else value
    return model_from_weights(weights, prefix, dropout_rate)


def mesh_tf_key(name: str) -> str | None:
    """A Mesh TensorFlow variable name → t2t's state-dict key (None for a name that is not T5's)."""
    parts = name.split("/")
    if parts == ["shared", "embedding"]:
        return "shared.weight"
    if parts == ["decoder", "logits", "kernel"]:
        return "lm_head.weight"
    stack = parts[0]
    if stack not in _SUBLAYERS:
        return None
    if len(parts) == 3 and parts[1] in _FINAL_NORMS and parts[2] == "scale":
        return f"{stack}.final_layer_norm.weight"
    block = re.fullmatch(r"block_(\d+)", parts[1]) if len(parts) > 3 else None
    part = _sublayer(stack, parts[2]) if block else None
    if part is None:
        return None
    i, rest = int(block[1]), parts[3:]
    if len(rest) == 2 and rest[0] in _NORMS and rest[1] == "scale":
        return f"{stack}.blocks.{i}.{part}.layer_norm.weight"
    if rest[0] != _CLASSES[part]:
        return None
    if part == "ff":
        ok = len(rest) == 3 and rest[1] in ("wi", "wi_0", "wi_1", "wo") and rest[2] == "kernel"
        return f"{stack}.blocks.{i}.ff.{rest[1]}.weight" if ok else None
    if rest[1:] == ["relative_attention_bias"] and part == "self_attn" and i == 0:
        return f"{stack}.relative_attention_bias.weight"
    return f"{stack}.blocks.{i}.{part}.{rest[1]}.weight" if rest[1:] in (["q"], ["k"], ["v"], ["o"]) else None


def _sublayer(stack: str, scope: str) -> str | None:
    numbered = re.fullmatch(r"layer_(\d+)", scope)
    if numbered:
        order = _SUBLAYERS[stack]
        return order[int(numbered[1])] if int(numbered[1]) < len(order) else None
    part = _NAMED_SUBLAYERS.get(scope)
    return part if part in _SUBLAYERS[stack] else None


def _prefix(path: Path) -> Path:
    """The ``model.ckpt-N`` prefix ``path`` stands for. In a folder, the one its state file names, looked for
    in that folder: TensorFlow's Saver records the path it wrote to, often absolute (``gs://…`` for the
    released t5 checkpoints), which a downloaded or moved copy no longer has."""
    if path.name.endswith(".index") and path.is_file():
        return path.with_name(path.name[: -len(".index")])
    if not path.is_dir():
        return path
    try:
        text = (path / STATE_FILE).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise T2TError(f"cannot read TensorFlow checkpoint state {path / STATE_FILE} ({error_summary(e)}); pass "
                       f"the model.ckpt-N prefix instead.") from None
    latest = re.search(r'^model_checkpoint_path:\s*"([^"]+)"', text, re.MULTILINE)
    if not latest:
        raise T2TError(f"TensorFlow checkpoint state {path / STATE_FILE} names no model_checkpoint_path; pass the "
                       f"model.ckpt-N prefix instead.")
    return path / PurePosixPath(latest[1]).name


def _check_files(prefix: Path) -> None:
    """The index and every data shard it was written with (``.data-0000i-of-0000N``), each named if missing."""
    index = Path(f"{prefix}.index")
    if not index.is_file():
        raise T2TError(f"TensorFlow checkpoint {prefix} lacks its index file {index}; the copy is partial, or "
                       f"pass an existing model.ckpt-N prefix.")
    shards = sorted(prefix.parent.glob(f"{glob.escape(prefix.name)}.data-*-of-*"))
    total = int(shards[0].name.rsplit("-of-", 1)[1]) if shards else 1
    for i in range(total):
        shard = Path(f"{prefix}.data-{i:05d}-of-{total:05d}")
        if not shard.is_file():
            raise T2TError(f"TensorFlow checkpoint {prefix} lacks its data file {shard}; the copy is partial, so "
                           f"copy every model.ckpt-N file again.")


def _open(prefix: Path):
    tf = _import_tensorflow()
    try:
        return tf.train.load_checkpoint(str(prefix))
    except Exception as e:  # TensorFlow's OpError kinds, all one failure here: the index cannot be read
        raise T2TError(f"TensorFlow checkpoint {prefix} cannot be read ({error_summary(e)}); its index file is "
                       f"damaged or it is not a TensorFlow checkpoint.") from None


def _tensor(reader, prefix: Path, name: str) -> np.ndarray:
    try:
        return reader.get_tensor(name)
    except Exception as e:  # a truncated or damaged data file: IndexError, OpError, DataLossError …
        raise T2TError(f"variable {name} of TensorFlow checkpoint {prefix} cannot be read ({error_summary(e)}); "
                       f"its data file is truncated or damaged, so copy the checkpoint again.") from None


def _import_tensorflow():
    # TensorFlow's C++ start-up notices would otherwise fill stderr; a level the user set is kept.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError:
        raise T2TError(f"reading checkpoints of the t5 library (Mesh TensorFlow) needs TensorFlow; {INSTALL}.") \
            from None
    return tf
