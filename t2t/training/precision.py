"""Mixed precision in training: autocast to bf16 or fp16, and fp16's dynamic loss scaling.

fp16 (``precision: fp16``) is for GPUs without bf16 (V100, T4). Weights, optimizer state and the residual
stream stay fp32; autocast runs the products in fp16. fp16's range ends at 65,504, so a loss scaled up keeps
small gradients from flushing to zero, and torch's ``GradScaler`` picks the scale as it goes (Micikevicius et
al. 2018, "Mixed Precision Training", §3.2): a step whose gradients overflow is skipped, no update, and the
scale halves; after 2,000 steps without overflow it doubles. It starts at 2^11 (see ``LossScaling``). A
skipped step is still a step: its batch is consumed and the schedule moves on, so a run's data and dropout
masks stay functions of the step. The scaler's state is part of the checkpoint, so a resumed run skips the
steps the uninterrupted run skips.

The forward pass's own fp16 overflows (T5's feed-forward outputs) are handled in the network, see
``t2t.models.t5.out_projection`` and docs/scale.md.
"""

from __future__ import annotations

import contextlib
import functools
import logging

import torch

from t2t.errors import T2TError
from t2t.models import distributed, kernels
from t2t.models.t5 import FP16_OUT_SCALE

log = logging.getLogger(__name__)


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast to fp16 for ``precision == "fp16"``; bf16 and fp32 as ``kernels.autocast``."""
    if precision != "fp16":
        return kernels.autocast(precision, device)
    if device.type == "cpu":
        _warn_if_fp16_is_emulated()
    return torch.autocast(device.type, dtype=torch.float16)


def check_fp16(precision: str, parallelism: str) -> None:
    """Refuse fp16 where loss scaling cannot work, in one sentence."""
    if precision == "fp16" and parallelism == "fsdp" and distributed.is_distributed():
        raise T2TError("precision=fp16 with parallelism=fsdp is not supported: torch's GradScaler checks only "
                       "this process's shard of the gradients for overflow, so processes would skip different "
                       "steps; use precision=bf16 with fsdp, or parallelism=ddp with fp16.")


@functools.cache
def _warn_if_fp16_is_emulated() -> None:
    """Once a process: fp16 on a CPU without fp16 products (AMX-FP16) computes by conversion, slowly."""
    if not torch.cpu._is_amx_fp16_supported():
        log.warning("precision=fp16 on this CPU, which has no fp16 instructions (AMX-FP16): fp16 is emulated, "
                    "slower than fp32; fp16 is meant for GPUs without bf16 (V100, T4).")


class LossScaling:
    """fp16's dynamic loss scale around the backward pass and the optimizer step; with another precision a
    pass-through (``GradScaler(enabled=False)``)."""

    def __init__(self, precision: str, device: torch.device):
        # the feed-forward output's gradient is 1/FP16_OUT_SCALE times larger inside its fp16 product
        # (t5.out_projection): start that much below torch's 2^16, for the headroom the default gives
        self.scaler = torch.amp.GradScaler(device.type, init_scale=2.0 ** 16 * FP16_OUT_SCALE,
                                           enabled=precision == "fp16")
        self.skipped = 0  # steps skipped since the last ``record``

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """The gradients at their true scale, as clipping needs them (once per step, before ``step``)."""
        self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer, step: int) -> None:
        """``optimizer.step()`` unless the fp16 gradients overflowed (then one console line); the scale updated."""
        if not self.scaler.is_enabled():
            optimizer.step()
            return
        scale = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        if self.scaler.get_scale() < scale:  # the scaler backs off exactly when it found inf or NaN
            self.skipped += 1
            if distributed.is_main():
                log.warning("step %d skipped: fp16 gradients overflowed at loss scale %g, now %g", step + 1,
                            scale, self.scaler.get_scale())

    def record(self) -> dict:
        """Fields for the metrics record (fp16 only): the loss scale, and the steps skipped since the last one."""
        if not self.scaler.is_enabled():
            return {}
        fields, self.skipped = {"loss_scale": self.scaler.get_scale(), "skipped_steps": self.skipped}, 0
        return fields

    def checkpoint_state(self) -> dict:
        """``{"loss_scaling": state}`` for the trainer state of a checkpoint in fp16, else nothing."""
        if not self.scaler.is_enabled():
            return {}
        return {"loss_scaling": {"scaler": self.scaler.state_dict(), "skipped": self.skipped}}

    def load_checkpoint_state(self, trainer_state: dict) -> None:
        """The scale where the checkpoint left it (a run that trained in another precision starts afresh)."""
        state = trainer_state.get("loss_scaling")
        if state is not None and self.scaler.is_enabled():
            self.scaler.load_state_dict(state["scaler"])
            self.skipped = int(state["skipped"])
