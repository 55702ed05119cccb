"""Reading and writing the files of a checkpoint, every failure one T2TError naming the file.

Readers never execute code: weights come from safetensors, ``.pt`` files go through
``torch.load(weights_only=True)``. The shape checks compare a state dict with the model it is meant for.
Used by the native format (native.py) and the conversions (hf.py, t5x.py).
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from safetensors import safe_open

from t2t import durable
from t2t.errors import T2TError, error_summary
from t2t.models.t5 import T5


def read_json(path: Path, what: str) -> dict:
    try:
        text = path.read_text()
    except OSError as e:
        raise T2TError(f"cannot read {what} {path}: {e.strerror or e}; check that the checkpoint is complete.") from None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise T2TError(f"{what} {path} is not valid JSON ({error_summary(e)}); the file is corrupt.") from None
    if not isinstance(data, dict):
        raise T2TError(f"{what} {path} must hold a JSON object, not {type(data).__name__}; the file is corrupt.")
    return data


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise T2TError(f"weights file {path} is missing; the checkpoint is incomplete.")
    try:
        tensors = {}
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                tensors[key] = f.get_tensor(key)
        return tensors
    except Exception as e:  # safetensors raises its own error types (and OSError) for damaged files
        raise T2TError(f"weights file {path} cannot be read as safetensors ({error_summary(e)}); the file is "
                       f"truncated or corrupt, save or download it again.") from None


# What torch's weights-only unpickler says when a pickle names a function or class (wordings of torch 2.4-2.13:
# "Unsupported global: GLOBAL m.f was not an allowed global", "Trying to load unsupported GLOBAL posix.system
# whose module posix is blocked", "Trying to call reduce for unrecognized function f", "Can only build ...").
_CODE_REFERENCE = re.compile(r"GLOBAL ([\w.]+)|unrecognized function ([^\s]+)|Can only (?:build|create new object)")


def torch_load(path: Path, what: str) -> Any:
    """``torch.load(weights_only=True)``: tensors and plain containers only, never code."""
    if not path.is_file():
        raise T2TError(f"{what} file {path} is missing; the checkpoint is incomplete.")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # UnpicklingError for disallowed objects, RuntimeError/EOFError for damage
        found = _CODE_REFERENCE.search(str(e))
        if found:
            culprit = found[1] or found[2]
            raise T2TError(f"{what} file {path} refers to Python code{f' ({culprit})' if culprit else ''} "
                           f"besides tensors and plain containers and was not loaded (t2t never unpickles code); "
                           f"re-save it as a plain state dict or use a checkpoint from a trusted source.") from None
        reason = re.search(r"WeightsUnpickler error: \s*(.+)", str(e))
        reason = reason[1].splitlines()[0].strip().rstrip(".") if reason else error_summary(e)
        raise T2TError(f"{what} file {path} cannot be read ({reason}); the file is truncated or "
                       f"corrupt.") from None




def write_text(path: Path, text: str) -> None:
    durable.write_file(path, text.encode())


def write_torch(path: Path, obj: Any) -> None:
    """``torch.save`` through memory: torch's own file writer hides the reason of a failed write (EFBIG …)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    durable.write_file(path, buffer.getbuffer())


def write_with(path: Path, write: Callable[[str], Any]) -> None:
    """``write(path)``, then the user's file mode and an fsync, so that a later rename publishes complete
    contents; a failed write is an OSError (safetensors raises its own error type). ``write`` may follow a
    link at ``path``, so one is refused first."""
    durable.refuse_link(path)
    try:
        write(str(path))
    except Exception as e:
        error = durable.os_error_of(e)
        if error is None:
            raise
        raise error from None
    os.chmod(path, durable.user_mode())  # safetensors creates its files 0600
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def assign_weights(model: T5, weights: dict[str, torch.Tensor]) -> T5:
    """Give a meta-device model the (checked) weights, as float32 tensors."""
    dtype = torch.get_default_dtype()
    model.load_state_dict({k: v.to(dtype) for k, v in weights.items()}, assign=True)
    return model


def expected_shapes(model: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def check_state_dict(weights: Mapping[str, torch.Tensor], expected: Mapping[str, tuple[int, ...]],
                      file: Path, against: str, partial: bool = False) -> None:
    """One T2TError listing missing (unless ``partial``) / unexpected keys and wrong shapes, or naming a
    tensor that is not finite. Every loader (t2t's checkpoints, Hugging Face folders, t5x) checks its weights
    here before the model gets them."""
    problems = [f"{k} has shape {list(weights[k].shape)}, expected {list(shape)}"
                for k, shape in expected.items() if k in weights and tuple(weights[k].shape) != shape]
    problems += [] if partial else [f"{k} is missing" for k in expected if k not in weights]
    problems += [f"{k} is unexpected" for k in weights if k not in expected]
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise T2TError(f"checkpoint {file} does not match {against}: {shown}.")
    check_finite(weights, file)


def check_finite(weights: Mapping[str, torch.Tensor], file: Path) -> None:
    """A NaN or inf weight makes every prediction garbage (accuracy 0.00, exit 0) and every step from it
    diverge: one T2TError naming the first such tensor."""
    for name, tensor in weights.items():
        if tensor.is_floating_point() and not all_finite(tensor):
            raise T2TError(f"checkpoint {file} has non-finite values (NaN or inf) in {name}; the model diverged "
                           f"before it was saved or the file was damaged, so load an earlier checkpoint (or one "
                           f"that trained with a lower learning_rate).")


def all_finite(tensor: torch.Tensor) -> bool:
    """Whether every value is finite. A sum is finite only if each term is, and one reduction costs far less
    than ``isfinite(...).all()`` and its boolean copy of the tensor, so the exact test runs only when the sum
    is not finite (which finite values that overflow float32 also make)."""
    return bool(torch.isfinite(tensor.sum(dtype=torch.float32))) or bool(torch.isfinite(tensor).all())
