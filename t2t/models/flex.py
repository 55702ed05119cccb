"""FlexAttention for ``model.attention=flex``: T5's relative position bias added inside the kernel, masks as block
masks (fully masked blocks skipped). torch has had ``torch.nn.attention.flex_attention`` since 2.5, but T5's
bias, looked up by each score's positions, fails to trace on torch 2.7 ("data-dependent operator"), so asking for
flex on a torch older than the oldest one its tests passed on is one sentence (``require_flex_attention``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from t2t.errors import T2TError

FLEX_TORCH_FLOOR = (2, 13)  # tests/models/test_flex_attention.py passed on 2.13 and 2.15, failed on 2.7.1


def require_flex_attention() -> None:
    if torch.__version__ < FLEX_TORCH_FLOOR:
        raise T2TError(f"model.attention=flex needs torch {'.'.join(map(str, FLEX_TORCH_FLOOR))} or newer, and this "
                       f"is torch {torch.__version__.split('+')[0]}; use model.attention=sdpa, or upgrade torch.")


@dataclass(frozen=True)
class FlexBias:
    """What FlexAttention needs in place of a dense bias: which keys each query may attend to (a block mask,
    so fully masked blocks are skipped) and a function adding the position bias to a score (None: no bias)."""

    block_mask: Any  # torch.nn.attention.flex_attention.BlockMask
    score_mod: Callable | None = None


def flex_bias(allowed: torch.Tensor, q_len: int, score_mod: Callable | None = None) -> FlexBias:
    """A FlexBias for ``q_len`` queries from a bool mask ``allowed`` [B, q_len|1, S] (True = may attend)."""
    B, S = allowed.shape[0], allowed.shape[-1]
    allowed = allowed.expand(B, q_len, S)
    shared = B == 1  # one mask for every row (flex still asks it about each row)

    def may_attend(b, h, q, k):
        return allowed[0, q, k] if shared else allowed[b, q, k]

    return FlexBias(create_block_mask(may_attend, B, None, q_len, S, device=allowed.device), score_mod)


# torch 2.11's default forward configuration for T5's score_mod asks a GPU with 227 KB of shared memory for
# 240 KB and fails to compile; with two pipeline stages instead of three it fits, as fast (benchmarks/results/HISTORY.md).
GPU_FLEX_KERNEL_OPTIONS = {"num_stages": 2}


def flex_attention_of(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: FlexBias) -> torch.Tensor:
    """Unscaled attention of ``q`` over ``k``, ``v`` with ``bias``'s mask and position bias."""
    if q.device.type == "cpu" and torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
        raise T2TError(f"model.attention=flex runs forward only on the CPU (torch {torch.__version__.split('+')[0]} "
                       f"has no FlexAttention backward there); train with model.attention=sdpa on the CPU, or "
                       f"on a CUDA device.")
    if q.device.type == "cpu":
        return flex_attention(q, k, v, score_mod=bias.score_mod, block_mask=bias.block_mask, scale=1.0)
    if q.shape[-1] < 16:
        raise T2TError(f"model.attention=flex on a GPU needs model.d_kv of at least 16 (FlexAttention's fused "
                       f"kernel), not {q.shape[-1]}; use model.attention=sdpa for this model.")
    kernel = flex_attention if torch.compiler.is_compiling() else compiled_flex_attention()
    return kernel(q, k, v, score_mod=bias.score_mod, block_mask=bias.block_mask, scale=1.0,
                  kernel_options=GPU_FLEX_KERNEL_OPTIONS)


@functools.cache
def compiled_flex_attention() -> Callable:
    """``flex_attention`` compiled on its own, for eager models on a GPU: uncompiled, it runs a reference
    implementation that materialises every score, the very thing the fused kernel exists to avoid. (Inside
    a compiled model, and on the CPU, where only the forward runs, the plain function is used.) Static
    shapes, as everywhere t2t compiles: with dynamic ones, the second length seen (the decoder's after the
    encoder's) made the lengths symbolic, and torch 2.11 then failed to lower the gradient of a score_mod
    that captures them (T5's distance table, ``Stack.flex_self_attention_bias``)."""
    return torch.compile(flex_attention, dynamic=False)
