"""LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models"): a frozen linear layer plus a
trained low-rank update, ``y = x Wᵀ + (alpha / rank) · B A dropout(x)``, as peft's ``LoraLayer`` computes it.

``A`` starts as peft's does (Kaiming-uniform with a = √5) and ``B`` at zero (§4.1: "so ΔW = BA is zero at the
beginning of training"), so a model given LoRA layers computes what it computed before. The paper adapts the
attention's query and value projections (§7.1); ``targets`` names any of T5's linear layers by their module
names (``q k v o``, ``wi wo``, ``wi_0 wi_1``). ``drop_lora`` folds the updates into the weights for an export
that needs no LoRA code, or leaves them out for the base model of a PEFT adapter (t2t.checkpoints.peft).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from t2t.errors import T2TError
from t2t.models import kernels
from t2t.models.dropout import Dropout

TARGETS = ("q", "k", "v", "o", "wi", "wo", "wi_0", "wi_1")  # T5's linear layers by module name


class LoRALinear(nn.Linear):
    """An ``nn.Linear`` (its ``weight`` the frozen base) with a rank-``rank`` update in ``lora_A`` [rank, in]
    and ``lora_B`` [out, rank]."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        nn.Module.__init__(self)
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight, self.bias = base.weight, base.bias  # shared, not copied
        self.scaling = alpha / rank
        device, dtype = base.weight.device, base.weight.dtype
        self.lora_A = nn.Parameter(torch.empty(rank, self.in_features, device=device, dtype=dtype))
        self.lora_B = nn.Parameter(torch.zeros(self.out_features, rank, device=device, dtype=dtype))
        self.lora_dropout = Dropout(0.0)  # transfer.lora_dropout sets it
        self.reset_lora_parameters()

    @torch.no_grad()
    def reset_lora_parameters(self) -> None:
        if self.lora_A.device.type != "meta":
            nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
            self.lora_B.zero_()

    def delta_weight(self) -> torch.Tensor:
        return (self.lora_B @ self.lora_A) * self.scaling  # [out, in]

    def merged_weight(self) -> torch.Tensor:
        return self.weight + self.delta_weight()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        update = F.linear(F.linear(self.lora_dropout(x), self.lora_A), self.lora_B)
        return F.linear(x, self.weight, self.bias) + update * self.scaling


def weight_of(linear: nn.Linear) -> torch.Tensor:
    """The weight ``linear`` multiplies by (with its LoRA update, if it has one), for code that multiplies by
    weights concatenated (attention's q|k|v in decoding) rather than calling the module."""
    return linear.merged_weight() if isinstance(linear, LoRALinear) else linear.weight


def add_lora(model: nn.Module, rank: int, alpha: float, targets: list[str]) -> list[str]:
    """Replace every ``nn.Linear`` of ``model`` (a T5; its config records the LoRA) whose module name is in
    ``targets`` by a LoRALinear sharing its weight; returns the replaced modules' names. Attention that holds one multiplies by each projection
    separately in training (``fused = False``), where LoRA's dropout acts on the inputs of the update alone."""
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown:
        raise T2TError(f"transfer.lora_targets names {unknown[0]!r}, which is not a linear layer of T5; choose "
                       f"from {', '.join(TARGETS)}.")
    model.config.lora_rank, model.config.lora_alpha, model.config.lora_targets = rank, float(alpha), list(targets)
    replaced = []
    for parent_name, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            if name in targets and isinstance(child, nn.Linear) and not isinstance(child, LoRALinear):
                setattr(parent, name, LoRALinear(child, rank, alpha))
                replaced.append(f"{parent_name}.{name}")
                if hasattr(parent, "fused"):
                    parent.fused = False
    if not replaced:
        raise T2TError(f"transfer.lora_targets {targets} matches no linear layer of this model (a T5 1.1 model "
                       f"has wi_0 and wi_1, not wi); choose from {', '.join(TARGETS)}.")
    kernels.apply(model, model.config.kernels)  # the new dropouts too, so a resumed model draws the same masks
    return replaced


def set_lora_dropout(model: nn.Module, rate: float) -> None:
    for module in model.modules():
        if isinstance(module, LoRALinear):
            module.lora_dropout.p = rate


@torch.no_grad()
def drop_lora(model: nn.Module, merge: bool) -> None:
    """Put plain ``nn.Linear`` layers back in place of ``model``'s LoRA layers, with each update folded into
    its weight (``merge``) or left out (the base model a PEFT adapter applies to); ``model`` is a T5."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, LoRALinear):
                plain = nn.Linear(child.in_features, child.out_features, bias=child.bias is not None,
                                  device="meta")
                weight = child.merged_weight() if merge else child.weight
                plain.weight = nn.Parameter(weight, requires_grad=child.weight.requires_grad)
                plain.bias = child.bias
                setattr(parent, name, plain)
                vars(parent).pop("fused", None)  # attention's own choice again
    model.config.lora_rank = 0
