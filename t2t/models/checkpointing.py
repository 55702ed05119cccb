"""Activation checkpointing of Transformer blocks: a block keeps only its input for the backward pass, and runs
its forward again there to rebuild what its backward reads (Chen et al. 2016, "Training Deep Nets with
Sublinear Memory Cost"; transformers' ``gradient_checkpointing_enable``). Activation memory falls from every
block's intermediate tensors to one block's plus each block's input, for one more forward pass of the blocks.

torch's non-reentrant checkpoint (``use_reentrant=False``): it works where some inputs need no gradient
(the position bias, the encoder output of a frozen encoder), under FSDP's per-block units and inside
torch.compile. The recomputation draws the dropout masks the forward drew (``dropout.replay_contexts``), so
gradients are those of the run without checkpointing, to rounding. Compiled code cannot run those Python
generators in its backward graph, so there the masks (one byte an element) are kept from the forward pass by
selective checkpointing, and the rest is recomputed.
"""

from __future__ import annotations

import functools

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from t2t.models.dropout import replay_contexts


def checkpointed(block: nn.Module, *args) -> torch.Tensor:
    """``block(*args)``, its activations recomputed in the backward pass rather than kept."""
    if torch.compiler.is_compiling():
        return checkpoint(block, *args, use_reentrant=False, context_fn=KEEP_MASKS)
    return checkpoint(block, *args, use_reentrant=False, context_fn=replay_contexts)


def _keep_masks(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    """Selective checkpointing's policy for compiled blocks: keep t2t's dropout masks (``t2t::*keep_mask``
    ops, whose generators live in Python and are gone by the backward pass), recompute the rest."""
    if getattr(op, "namespace", None) == "t2t" and op.name().endswith("keep_mask"):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


KEEP_MASKS = functools.partial(create_selective_checkpoint_contexts, _keep_masks)


def enable(model: nn.Module, on: bool = True) -> None:
    """Checkpoint every block of ``model``'s stacks in training (``TrainConfig.activation_checkpointing``)."""
    for module in model.modules():
        if hasattr(module, "checkpoint_blocks"):
            module.checkpoint_blocks = on
