"""Which parameters a fine-tuning run trains: the transfer methods of T5 §3.5.1 and jiant-style freezing.

- Adapter layers (§3.5.1, after Houlsby et al. 2019): a dense-ReLU-dense block of inner size ``d`` after
  every feed-forward network, inside its residual branch and with a skip of its own, initialised near the
  identity; only the adapters and the layer norms are trained (``transfer.adapter_dim``).
- Gradual unfreezing (§3.5.1): training starts with the top block of the encoder and of the decoder
  (with their final layer norms) and unfreezes one more block of each, from the top, every ``k`` steps;
  the shared embedding and output layer are trained throughout (``transfer.unfreeze=gradual``).
- Freezing by name (``transfer.freeze``): glob patterns over the checkpoint's parameter names
  (``encoder.*``); frozen parameters get no gradient and no optimizer state.
- LoRA (Hu et al. 2021; ``transfer.lora_rank``): a trained low-rank update beside the frozen linear layers
  named in ``transfer.lora_targets`` (q and v, as the paper's §7.1); only the updates train
  (t2t.models.lora).

``prepare_transfer`` applies the settings to a model before its optimizer is built; the returned
:class:`TrainableSchedule` says, step by step, which parameters take gradients.
"""

from __future__ import annotations

import fnmatch
import logging
from dataclasses import dataclass, field
from typing import Literal

import torch

from t2t import config
from t2t.errors import T2TError
from t2t.models.lora import add_lora, set_lora_dropout
from t2t.models.t5 import T5, add_adapters

log = logging.getLogger(__name__)

ADAPTER_TRAINED = ("*.adapter.*", "*layer_norm.*")  # §3.5.1: "only the adapter layer and layer normalization"
LORA_TRAINED = ("*.lora_A", "*.lora_B")  # LoRA §4.1: the pre-trained weights are frozen


@dataclass
class TransferConfig:
    adapter_dim: int = 0               # adapters' inner size d (§3.5.1); 0: no adapters
    freeze: list[str] = field(default_factory=list)  # glob patterns over parameter names, e.g. 'encoder.*'
    unfreeze: Literal["none", "gradual"] = "none"  # gradual: §3.5.1's gradual unfreezing
    unfreeze_every: int = 0            # gradual: steps between unfreezing one more block (0: train_steps / layers)
    unfreeze_steps: list[int] = field(default_factory=list)  # gradual: explicit steps at which each block opens
    save_trained_only: bool = False    # checkpoints hold the trained parameters and a reference to init_from
    lora_rank: int = 0                 # LoRA's rank r (Hu et al. 2021); 0: no LoRA
    lora_alpha: float | None = None    # the update is scaled by lora_alpha / lora_rank (None: alpha = rank)
    lora_dropout: float = 0.0          # dropout on the LoRA updates' inputs (peft's lora_dropout)
    lora_targets: list[str] = field(default_factory=lambda: ["q", "v"])  # linear layers given LoRA, by name

    def __post_init__(self):
        config.check(self, non_negative=("adapter_dim", "unfreeze_every", "unfreeze_steps", "lora_rank"),
                     positive=("lora_alpha",), fraction=("lora_dropout",))
        if self.lora_rank and self.adapter_dim:
            raise T2TError("transfer.lora_rank and transfer.adapter_dim are two transfer methods that each train "
                           "only their own layers; choose one.")
        if self.unfreeze_steps != sorted(self.unfreeze_steps):
            raise config.SettingError("unfreeze_steps", "in increasing order", self.unfreeze_steps)
        given = config.given(self, ("unfreeze_every", "unfreeze_steps"))
        if given and self.unfreeze != "gradual":
            raise T2TError(f"transfer.{given[0]} is only read with transfer.unfreeze=gradual, and it is "
                           f"{self.unfreeze}; set transfer.unfreeze=gradual or leave transfer.{given[0]} out.")
        if len(given) == 2:
            raise T2TError("transfer.unfreeze_every and transfer.unfreeze_steps both say when blocks open; set one.")


class TrainableSchedule:
    """Which parameters take gradients at each step: the fixed set left by freezing, narrowed by gradual
    unfreezing's episodes."""

    def __init__(self, model: T5, frozen: set[str], episodes: list[tuple[int, set[str]]]):
        self.model = model
        self.frozen = frozen          # never trained in this run
        self.episodes = episodes      # (first step, names that open then), in step order
        self._opened: int | None = None  # episodes open at the last apply

    def trained_names(self) -> set[str]:
        """The parameters that train at some step of the run."""
        return {name for name, _ in self.model.named_parameters()} - self.frozen

    def trainable_names(self, step: int) -> set[str]:
        closed = set(self.frozen)
        for start, names in self.episodes:
            if step < start:
                closed |= names
        return {name for name, _ in self.model.named_parameters()} - closed

    def apply(self, step: int) -> None:
        """Set ``requires_grad`` for ``step`` (0-based: the step about to be taken); a no-op (called every
        step) unless an episode starts at ``step`` or this is the first call. Each episode that opens after
        the first call is logged in one line."""
        opened = sum(start <= step for start, _ in self.episodes)
        if opened == self._opened:
            return
        newly = [] if self._opened is None else [names for _, names in self.episodes[self._opened:opened]]
        self._opened = opened
        trainable = self.trainable_names(step)
        for name, param in self.model.named_parameters():
            param.requires_grad_(name in trainable)
        for names in newly:
            log.info("step %d: unfreezing %s; %s", step + 1, ", ".join(block_names(names)),
                     describe_trainable(self.model))


def prepare_transfer(model: T5, cfg: TransferConfig, train_steps: int) -> TrainableSchedule:
    """Add adapters, freeze by pattern and plan gradual unfreezing.

    Afterwards exactly the parameters that train at some step of the run have ``requires_grad`` (build the
    optimizer over those), and ``schedule.apply(step)`` narrows them to the ones that train at ``step``."""
    if cfg.adapter_dim and not model.config.adapter_dim:
        add_adapters(model, cfg.adapter_dim)
    elif cfg.adapter_dim and cfg.adapter_dim != model.config.adapter_dim:
        raise T2TError(f"the model already has adapters of size {model.config.adapter_dim}, not "
                       f"{cfg.adapter_dim}; set transfer.adapter_dim={model.config.adapter_dim}.")
    if cfg.lora_rank:
        give_lora(model, cfg)
    names = [name for name, _ in model.named_parameters()]
    frozen = set(matching(names, cfg.freeze, "transfer.freeze"))
    if cfg.adapter_dim:
        frozen |= set(names) - set(matching(names, ADAPTER_TRAINED, "adapter"))
    if cfg.lora_rank:
        frozen |= set(names) - set(matching(names, LORA_TRAINED, "lora"))
    episodes = gradual_episodes(model, cfg, train_steps) if cfg.unfreeze == "gradual" else []
    for name, param in model.named_parameters():
        param.requires_grad_(name not in frozen)  # the optimizer is built over these; ``apply`` narrows them
    return TrainableSchedule(model, frozen, episodes)


def give_lora(model: T5, cfg: TransferConfig) -> None:
    """LoRA layers as ``cfg`` asks (a model that has them, resumed or loaded, must have these), with its
    dropout."""
    asked = (cfg.lora_rank, float(cfg.lora_rank if cfg.lora_alpha is None else cfg.lora_alpha), cfg.lora_targets)
    have = (model.config.lora_rank, model.config.lora_alpha, model.config.lora_targets)
    if not have[0]:
        add_lora(model, *asked)
    elif have != asked:
        raise T2TError(f"the model already has LoRA of rank {have[0]}, alpha {have[1]:g} on {have[2]}, not rank "
                       f"{asked[0]}, alpha {asked[1]:g} on {asked[2]}; set transfer.lora_rank, lora_alpha and "
                       f"lora_targets to the model's.")
    set_lora_dropout(model, cfg.lora_dropout)


def matching(names: list[str], patterns, setting: str) -> list[str]:
    """Names matching any glob pattern; a pattern that matches nothing is an error (a typo freezes nothing)."""
    out = []
    for pattern in patterns:
        hits = fnmatch.filter(names, pattern)
        if not hits:
            raise T2TError(f"{setting} pattern {pattern!r} matches no parameter name; names look like "
                           f"'encoder.blocks.0.self_attn.q.weight' (see model.named_parameters()).")
        out += hits
    return out


def gradual_episodes(model: T5, cfg: TransferConfig, train_steps: int) -> list[tuple[int, set[str]]]:
    """Episode n (n = 1 … L−1) opens the n-th block from the top of each stack (one stack in decoder-only
    and shared-stack models); the top blocks, the final layer norms and the shared embedding train from
    step 0. The relative position bias, which every
    block uses, opens with the bottom block (Mesh TF and HF store it in block 0)."""
    stacks = {name: getattr(model, name) for name in ("encoder", "decoder") if hasattr(model, name)}
    depth = max(len(stack.blocks) for stack in stacks.values())
    starts = list(cfg.unfreeze_steps) or [n * (cfg.unfreeze_every or max(1, train_steps // depth))
                                          for n in range(depth)]
    if len(starts) != depth:
        raise T2TError(f"transfer.unfreeze_steps has {len(starts)} steps but the model has {depth} blocks "
                       f"per stack; give one step per block (the first is usually 0).")
    episodes = []
    for n, start in enumerate(starts):
        opened = set()
        for stack_name, stack in stacks.items():
            index = len(stack.blocks) - 1 - n
            if index < 0:
                continue
            opened |= {f"{stack_name}.blocks.{index}.{p}" for p, _ in stack.blocks[index].named_parameters()}
            if index == 0:
                opened.add(f"{stack_name}.relative_attention_bias.weight")
        episodes.append((start, opened))
    return episodes


def block_names(names: set[str]) -> list[str]:
    """The blocks a set of parameter names belongs to (``encoder.blocks.3``), in order."""
    blocks = {".".join(name.split(".")[:3]) for name in names if ".blocks." in name}
    return sorted(blocks, key=lambda b: (b.split(".")[0], int(b.split(".")[2])))


def describe_trainable(model: torch.nn.Module) -> str:
    """One line for the log: how many parameters train now, of how many (and of how many tensors)."""
    params = list(model.parameters())
    total = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    tensors = sum(p.requires_grad for p in params)
    return (f"trainable parameters: {trainable:,} of {total:,} ({100 * trainable / max(total, 1):.2f}%; "
            f"{tensors} of {len(params)} tensors)")
