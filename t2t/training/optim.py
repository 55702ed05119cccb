"""Optimizers and learning-rate schedules of the T5 paper (§3.1.2, §3.1.3, §3.7).

Adafactor is ``torch.optim.Adafactor`` (as ``t2t.training.adafactor.Adafactor``, whose step does not wait for
the device), which matches the Mesh TensorFlow Adafactor that T5 used
(factored second moments, decay rate 0.8 via ``beta2_decay=-0.8``, update clipping ``d=1.0``, parameter
scaling ``max(1e-3, RMS(param))``, no momentum) with two differences, both small:

- its step size is ``min(lr_t, 1/sqrt(t))``: with ``lr=0.01`` that *is* T5's pre-training schedule
  ``1/sqrt(max(t, 10^4))``; a fine-tuning rate of 1e-3 stays constant until step 10^6;
- it factors every matrix, where Mesh TF factors only those with both sides >= 128 (here: the relative
  position bias tables of shape [32, heads] are factored too).

Its epsilon1 is set to ``ADAFACTOR_EPSILON1``: torch clamps the second-moment estimate at epsilon1², where
Mesh TF and t5x add epsilon1 = 1e-30 to g²; torch's default (the float32 eps, a floor of 1.4e-14) damps the
step of every entry whose gradient is below ~1e-7, such as a tied output layer's rows for the tokens a
batch never predicts (fine-tuning a 2.4M-parameter model on SST-2, the loss was 5% off T5's rule after
200 steps; issue 23).

AdamW is ``torch.optim.AdamW``. Schedules: constant, inverse square root, linear and cosine decay, each
with an optional linear warm-up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from t2t import config
from t2t.errors import T2TError
from t2t.training.adafactor import Adafactor

ADAFACTOR_EPSILON1 = 1e-15  # torch's floor epsilon1² is Mesh TF's and t5x's epsilon1, 1e-30


@dataclass
class OptimizerConfig:
    name: Literal["adafactor", "adamw"] = "adafactor"  # T5 used Adafactor
    learning_rate: float = 1e-3       # peak rate (T5: 1e-3 constant fine-tuning; 0.01 rsqrt pre-training)
    schedule: Literal["constant", "rsqrt", "linear", "cosine"] = "constant"  # learning-rate schedule after warm-up
    warmup_steps: int = 0             # linear warm-up from 0 over this many steps
    rsqrt_offset: int = 10_000  # rsqrt: lr * sqrt(offset) / sqrt(max(step, offset)), T5's 1/sqrt(max(n, 10^4))
    weight_decay: float = 0.0         # decoupled weight decay (T5: none)
    adam_betas: tuple[float, float] = (0.9, 0.999)  # AdamW only
    adam_eps: float = 1e-8            # AdamW only
    grad_clip_norm: float = 0.0  # 0 disables clipping (T5 relies on Adafactor's update clipping)

    def __post_init__(self):
        config.check(self, positive=("learning_rate", "rsqrt_offset", "adam_eps"),
                     non_negative=("warmup_steps", "weight_decay", "grad_clip_norm"), fraction=("adam_betas",))
        self._refuse_unused()

    def _refuse_unused(self) -> None:
        """A setting that the chosen optimizer or schedule never reads is an error, not a silent no-op."""
        for name, chooser, value in (("adam_betas", "name", "adamw"), ("adam_eps", "name", "adamw"),
                                     ("rsqrt_offset", "schedule", "rsqrt")):
            chosen = getattr(self, chooser)
            if chosen != value and config.given(self, [name]):
                raise T2TError(f"optimizer.{name} {getattr(self, name)!r} is only read when optimizer.{chooser} is "
                               f"{value}, and it is {chosen}; set optimizer.{chooser}={value} or leave "
                               f"optimizer.{name} out.")


def build_optimizer(model: torch.nn.Module, cfg: OptimizerConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.name == "adafactor":
        return Adafactor(params, lr=cfg.learning_rate, beta2_decay=-0.8, d=1.0, eps=(ADAFACTOR_EPSILON1, 1e-3),
                         weight_decay=cfg.weight_decay)
    if cfg.name == "adamw":
        # fused: one kernel over all parameters (on CPU ~2 orders of magnitude faster than foreach here)
        return torch.optim.AdamW(params, lr=cfg.learning_rate, betas=cfg.adam_betas, eps=cfg.adam_eps,
                                 weight_decay=cfg.weight_decay, fused=True)
    raise T2TError(f"unknown optimizer {cfg.name!r}; use adafactor or adamw.")


def learning_rate_factor(step: int, cfg: OptimizerConfig, total_steps: int) -> float:
    """The multiplier on ``cfg.learning_rate`` at ``step`` (0-based)."""
    t = step + 1
    if cfg.warmup_steps and t <= cfg.warmup_steps:
        return t / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    if cfg.schedule == "rsqrt":
        return math.sqrt(cfg.rsqrt_offset) / math.sqrt(max(t, cfg.rsqrt_offset))
    progress = min(1.0, (t - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps))
    if cfg.schedule == "linear":
        return 1.0 - progress
    if cfg.schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise T2TError(f"unknown schedule {cfg.schedule!r}; use constant, rsqrt, linear or cosine.")


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: OptimizerConfig,
                    total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: learning_rate_factor(step, cfg, total_steps))
