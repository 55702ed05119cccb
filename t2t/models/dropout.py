"""Dropout whose masks make a training run's losses independent of how its batch is split.

The trainer wraps each step in ``row_generators(seeds)``, one seed per row from (seed, step, the row's index
in the global batch): inside, row ``b`` of every mask comes from its own generator, so a row gets the same
masks whichever process and micro-batch it lands in, and a resumed run draws what the uninterrupted one
drew. Every dropout in the model acts on batch-first tensors. Outside ``row_generators`` (and on devices other
than the CPU, where a draw per row would cost a kernel launch a row) ``Dropout`` is ``nn.Dropout``.

The mask is drawn by the custom op ``t2t::row_keep_mask``, so that compiled code draws the very masks eager
code draws, in the same order: torch.compile cannot trace a ``torch.Generator``, and it would merge two draws
it took for pure. ``t2t.models.kernels`` swaps in a cheaper mask of the same kind.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Callable, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

Generator = TypeVar("Generator")


class RowSeeds:
    """The seeds of one step's rows, and the generators made from them, per kind of generator (made at the
    first draw of that kind, then advanced by every draw)."""

    def __init__(self, seeds: list[int]):
        self.seeds = [int(s) for s in seeds]
        self.generators: dict[str, list] = {}

    def generators_of(self, kind: str, make: Callable[[int], Generator]) -> list[Generator]:
        if kind not in self.generators:
            self.generators[kind] = [make(seed) for seed in self.seeds]
        return self.generators[kind]

    def copy(self) -> "RowSeeds":
        """The same seeds with copies of the generators in their present states: drawing from the copy draws
        what the next draws from this one will."""
        copied = RowSeeds(self.seeds)
        copied.generators = {kind: [_copy_generator(g) for g in gens] for kind, gens in self.generators.items()}
        return copied


def _copy_generator(generator):
    if isinstance(generator, torch.Generator):
        return generator.clone_state()
    return copy.deepcopy(generator)  # numpy's bit generators (t2t.models.kernels)


_active: RowSeeds | None = None


@contextlib.contextmanager
def row_generators(seeds: list[int]):
    """Inside: dropout masks of a batch of ``len(seeds)`` rows draw row ``b`` from a generator seeded with
    ``seeds[b]``."""
    with _activated(RowSeeds(seeds)):
        yield


@contextlib.contextmanager
def _activated(rows: RowSeeds):
    global _active
    outer, _active = _active, rows
    try:
        yield
    finally:
        _active = outer


def replay_contexts() -> tuple[contextlib.AbstractContextManager, contextlib.AbstractContextManager]:
    """``torch.utils.checkpoint``'s ``context_fn`` for a region that draws dropout masks: (around its forward,
    around its recomputation in the backward pass). The recomputation draws the masks the forward drew: its
    generators are copies of the active ones at the region's start (masks depend on nothing else: the count
    of draws a generator made before is its state), active again even though the backward pass runs after
    ``row_generators`` ended. Outside ``row_generators`` (CUDA, inference) dropout draws from torch's generator,
    whose state checkpoint itself saves and restores (``preserve_rng_state``)."""
    if _active is None:
        return contextlib.nullcontext(), contextlib.nullcontext()
    return contextlib.nullcontext(), _replaying(_active.copy())


@contextlib.contextmanager
def _replaying(start: RowSeeds):
    with _activated(start.copy()):  # copied on entry: a second recomputation replays the same draws
        yield


def active_row_generators(kind: str, make: Callable[[int], Generator]) -> list[Generator] | None:
    """The active ``row_generators``' generators of ``kind`` (made by ``make(seed)``), or None outside."""
    return None if _active is None else _active.generators_of(kind, make)


def check_rows(shape: list[int], generators: list) -> None:
    if shape[0] != len(generators):
        raise RuntimeError(f"a dropout mask for {shape[0]} rows inside row_generators for {len(generators)} rows")


def _torch_generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed % (1 << 63))


# Every mask drawn adds one here. The mask op writes it so that torch.compile treats each call as a side
# effect, in program order: it would otherwise merge two draws of the same shape into one mask.
masks_drawn = torch.zeros((), dtype=torch.int64)


@torch.library.custom_op("t2t::row_keep_mask", mutates_args=("counter",))
def row_keep_mask(counter: torch.Tensor, shape: list[int], p: float) -> torch.Tensor:
    """A CPU uint8 mask of ``shape`` keeping each element with probability 1 - ``p``, row ``b`` drawn from the
    active ``row_generators``' ``b``-th torch generator."""
    counter.add_(1)
    generators = active_row_generators("torch", _torch_generator)
    check_rows(shape, generators)
    keep = torch.empty(shape, dtype=torch.uint8)
    for row, generator in zip(keep, generators):
        row.bernoulli_(1.0 - p, generator=generator)
    return keep


@row_keep_mask.register_fake
def _row_keep_mask_shape(counter: torch.Tensor, shape: list[int], p: float) -> torch.Tensor:
    return counter.new_empty(shape, dtype=torch.uint8)


class Dropout(nn.Dropout):
    """``nn.Dropout`` whose CPU masks come from ``row_generators`` when the trainer provides them."""

    def draws_by_row(self, x: torch.Tensor) -> bool:
        """Whether this dropout's mask for ``x`` comes from the row generators (attention then drops its
        probabilities through this module rather than inside SDPA, which draws from torch's generator)."""
        return _active is not None and x.device.type == "cpu"

    def keep_mask(self, shape: torch.Size) -> tuple[torch.Tensor, float]:
        """A uint8 mask of ``shape`` drawn by row, and the scale of the kept values."""
        return row_keep_mask(masks_drawn, list(shape), self.p), 1.0 / (1.0 - self.p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.p >= 1.0 or not self.draws_by_row(x):
            return F.dropout(x, self.p, True)
        keep, scale = self.keep_mask(x.shape)
        return x.mul(scale).mul_(keep)
