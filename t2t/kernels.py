"""Matrix multiplications for the model's linear layers, routed to the fastest fp32 CPU kernel.

On the CPU, ``F.linear`` runs MKL's sgemm, which is tuned for Intel CPUs; oneDNN (which PyTorch ships for
its CPU convolutions and bf16 matmuls) is fast on others too. On a 2-core AMD EPYC (Zen 4) oneDNN measured
157 GFLOP/s at 2048³ against MKL's 97, and 1.1–2× MKL's rate at the t5-small shapes for ``x @ W.T`` (the
forward pass, up to 2× on the output layer) and ``grad @ W`` (the input gradient), about the same for
``grad.T @ x`` (the weight gradient, so that one stays on MKL). On an Intel Xeon the two are equal
(≈340 GFLOP/s), so the routing is neutral there (numbers: benchmarks/README.md, "Model"). Both are IEEE
fp32 kernels (no reduced-precision accumulation), so results agree with ``F.linear`` to rounding.

``linear`` takes that path only for fp32 CPU tensors with autocast off and outside ``torch.compile``
(inductor cannot lower the oneDNN op; compiled code gets ``F.linear``); everything else (CUDA, bf16, meta
tensors) is plain ``F.linear``.

``autocast`` is the compute-precision switch of training and evaluation: bf16 autocast on CUDA and on the
CPU alike. On CPUs with bf16 instructions (AMX, AVX512-BF16) oneDNN's bf16 GEMMs make a t5-small training
step 1.5–1.6× and greedy decoding 2× faster than fp32 (benchmarks/README.md, Intel Xeon with AMX); elsewhere
bf16 is emulated and slower.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

HAS_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def onednn_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` by oneDNN; ``weight`` may be a strided view (e.g. a transpose)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")


class _CpuLinear(torch.autograd.Function):
    """``x @ weight.T`` with the forward and input-gradient GEMMs on oneDNN, the weight gradient on MKL."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return onednn_linear(x, weight)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_x = onednn_linear(grad, weight.t()) if ctx.needs_input_grad[0] else None
        grad_w = None
        if ctx.needs_input_grad[1]:
            grad_w = grad.reshape(-1, grad.shape[-1]).t() @ x.reshape(-1, x.shape[-1])
        return grad_x, grad_w


def _use_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (HAS_ONEDNN and x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32
            and not torch.is_autocast_enabled("cpu") and not torch.compiler.is_compiling())


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast on ``device`` for ``precision == "bf16"``; nothing for fp32."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``F.linear(x, weight)`` without bias, on the faster kernel where there is one (see the module doc)."""
    if _use_onednn(x, weight):
        return _CpuLinear.apply(x, weight)
    return F.linear(x, weight)


class Linear(nn.Linear):
    """``nn.Linear`` without bias (same parameters and state-dict keys) whose product goes through ``linear``."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight)
