"""Mixing rates (T5 §3.5.2) and the deterministic, resumable mixture sampler.

Rates — each returns a function of the task, for ``Mixture(name, [(task, rate), ...])``:

- ``rate_num_examples(maximum=K, temperature=T, scale=1.0)``: examples-proportional mixing,
  ``min(scale * num_train_examples, K) ** (1 / T)`` (t5's ``rate_num_examples``; K=None: no limit);
- ``rate_unsupervised(value=1e6)``: a fixed rate for an unsupervised task whose size is unknown or huge;
- equal mixing: give every task the same number (or ``rate_equal()``).

Sampling — ``MixtureSampler``: global position ``p`` picks a task with a draw that depends only on
``(seed, p)``; the chosen task's counter ``c`` then names its example ``c``: epoch ``c // N``, the
``(c % N)``-th entry of that epoch's seeded permutation (``epoch_permutation``). The stream is therefore a
pure function of the seed and the position, and its state is just ``{position, counters}``. Rank ``r`` of ``W``
takes positions ``r, r+W, …`` but advances the counters over every position, so the ranks together see
exactly the examples one process would.
"""

from __future__ import annotations

import hashlib
import math
from typing import Iterable, Iterator, Mapping, Sequence

import numpy as np

from t2t.data.batched_rng import first_uniforms
from t2t.errors import T2TError

# ------------------------------------------------------------------------------------------ rates

def rate_num_examples(maximum: float | None = None, temperature: float = 1.0, scale: float = 1.0,
                      split: str = "train", num_examples: float | None = None):
    """Examples-proportional rate with an artificial limit ``maximum`` (K) and a ``temperature`` (T).

    The size is the task's ``split`` size (0 for a task without that split), or ``num_examples`` when given
    (t5 writes GLUE's and SuperGLUE's down as constants). ``with_rate_options`` makes the same rate with
    another K and T.
    """
    if maximum is not None and maximum <= 0:
        raise T2TError(f"rate_num_examples: maximum must be positive or None, got {maximum!r}.")
    if temperature <= 0:
        raise T2TError(f"rate_num_examples: temperature must be positive, got {temperature!r}.")

    def rate(task, data_dir=None) -> float:
        if num_examples is None and task.splits and split not in task.splits:
            return 0.0  # an evaluation-only member (MNLI matched, AX): never sampled
        size = num_examples if num_examples is not None else task.num_input_examples(split, data_dir=data_dir)
        value = scale * size
        if maximum is not None:
            value = min(value, maximum)
        if temperature != 1.0:
            value = value ** (1.0 / temperature)
        return float(value)

    rate.takes_data_dir = True
    rate.options = {"maximum": maximum, "temperature": temperature, "scale": scale, "split": split,
                    "num_examples": num_examples}
    size = "" if num_examples is None else f", num_examples={num_examples:g}"
    rate.__name__ = f"rate_num_examples(maximum={maximum}, temperature={temperature}, scale={scale}{size})"
    return rate


def with_rate_options(rate, maximum: float | None = None, temperature: float | None = None):
    """``rate`` with the limit K and temperature T of §3.5.2 set (None keeps the rate's own), when it is an
    examples-proportional rate (``rate_num_examples``); any other rate (a number, ``rate_unsupervised``) as is."""
    if not is_proportional(rate) or (maximum is None and temperature is None):
        return rate
    changed = dict(rate.options)
    if maximum is not None:
        changed["maximum"] = maximum
    if temperature is not None:
        changed["temperature"] = temperature
    return rate_num_examples(**changed)


def proportional_rates(sizes: Mapping[str, float]) -> list[tuple[str, object]]:
    """``(task, rate)`` pairs of an examples-proportional mixture whose sizes are written down (t5's GLUE and
    SuperGLUE weight mappings): ``rate_num_examples(num_examples=size)``, so K and T apply; a size of 0 (an
    evaluation-only member) stays the number 0."""
    return [(name, rate_num_examples(num_examples=size) if size > 0 else 0.0) for name, size in sizes.items()]


def is_proportional(rate) -> bool:
    """Whether ``rate`` is examples-proportional (made by ``rate_num_examples``), so that K and T apply."""
    return getattr(rate, "options", None) is not None


def rate_unsupervised(value: float = 1e6):
    """A fixed rate for an unsupervised task (t5's ``rate_unsupervised``, default 1e6)."""

    def rate(task) -> float:
        return float(value)

    rate.__name__ = f"rate_unsupervised({value})"
    rate.fixed = True
    return rate


def rate_equal(value: float = 1.0):
    """Equal mixing: the same rate for every task."""
    return rate_unsupervised(value)


FIXED = "fixed"  # what describe_rate calls a number or rate_unsupervised: the same value whatever the data


def describe_rate(rate) -> str:
    """A rate's strategy as a user would write it, for listings (``t2t-tasks``): ``"examples-proportional,
    K=2^19, temperature 2.0"`` (per-task sizes and scales are the values, not the strategy), ``FIXED`` for a
    number or ``rate_unsupervised``, else the function's name."""
    if is_proportional(rate):
        options = rate.options
        parts = ["examples-proportional"]
        if options["maximum"] is not None:
            parts.append(f"K={format_limit(options['maximum'])}")
        if options["temperature"] != 1.0:
            parts.append(f"temperature {float(options['temperature'])}")
        if options["split"] != "train":
            parts.append(f"sizes of split {options['split']!r}")
        return ", ".join(parts)
    if not callable(rate) or getattr(rate, "fixed", False):
        return FIXED
    return getattr(rate, "__name__", repr(rate))


def format_limit(maximum: float) -> str:
    """K as the paper writes it: a power of two as ``2^19``, any other limit as a plain number."""
    exponent = math.log2(maximum)
    return f"2^{int(exponent)}" if exponent == int(exponent) and exponent >= 8 else f"{maximum:g}"


def normalize_rates(rates: Mapping[str, float]) -> dict[str, float]:
    """Rates as probabilities; tasks with rate 0 are dropped (they are in a mixture for evaluation only)."""
    positive = {name: float(r) for name, r in rates.items() if r > 0}
    total = sum(positive.values())
    if not positive or not math.isfinite(total):
        raise T2TError(f"the mixing rates {dict(rates)} leave nothing to sample; give at least one task a "
                       f"positive, finite rate.")
    return {name: r / total for name, r in positive.items()}


# ------------------------------------------------------------------------------------------ seeded draws

def stable_hash(text: str) -> int:
    """A process-independent 63-bit hash (Python's ``hash`` of a str changes between runs)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little") >> 1


_MIX, _PERM, _DRAW, _BUFFER = 1, 2, 3, 4  # stream tags so the different draws never share a seed


def position_uniforms(seed: int, start: int, count: int) -> np.ndarray:
    """The uniform numbers in [0, 1) that pick the tasks at global positions ``start … start + count - 1``:
    position ``p``'s is ``np.random.default_rng([_MIX, seed, p]).random()``, all computed together."""
    return first_uniforms([_MIX, int(seed)], np.arange(start, start + count, dtype=np.int64))


def epoch_permutation(seed: int, task_name: str, epoch: int, n: int) -> np.ndarray:
    """The order in which a task's ``n`` examples are drawn in ``epoch``."""
    return np.random.default_rng([_PERM, int(seed), stable_hash(task_name), int(epoch)]).permutation(n)


def buffer_rng(seed: int, task_name: str, epoch: int) -> np.random.Generator:
    """The generator that shuffles a streaming task's ``epoch`` in its buffer (``shuffled_in_buffer``)."""
    return np.random.default_rng([_BUFFER, int(seed), stable_hash(task_name), int(epoch)])


def shuffled_in_buffer(items: Iterable, size: int, rng: np.random.Generator) -> Iterator:
    """tf.data's ``shuffle(size)``, which seqio applies to every task it trains on: each item out is drawn
    uniformly from a buffer holding the next ``size`` items of ``items``, then refilled from it."""
    buffer: list = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        i = int(rng.integers(size))
        yield buffer[i]
        buffer[i] = item
    yield from (buffer[i] for i in rng.permutation(len(buffer)))


def draw_rng(seed: int, task_name: str, epoch: int, index: int) -> np.random.Generator:
    """The generator handed to a task's random token preprocessors for one draw."""
    return np.random.default_rng([_DRAW, int(seed), stable_hash(task_name), int(epoch), int(index)])


class MixtureSampler:
    """Which task each global position draws from, and how many draws each task has had.

    ``next_task()`` returns the task name for the current position and advances; ``counters[name]`` counts
    that task's draws before the current position. ``ahead(n)`` tells the next ``n`` positions' tasks and draw
    counters without advancing, and ``advance(tasks)`` moves past them. ``state_dict()`` /
    ``load_state_dict()`` save and restore both. With one task the draw is skipped (every position belongs to
    it). Tasks are drawn for a block of ``BLOCK`` positions at once (``position_uniforms``), the same draws as
    one at a time.
    """

    BLOCK = 1024

    def __init__(self, rates: Mapping[str, float], seed: int = 0):
        self.probabilities = normalize_rates(rates)
        self.names: list[str] = list(self.probabilities)
        self.cumulative = np.cumsum([self.probabilities[n] for n in self.names])
        self.cumulative[-1] = 1.0
        self.seed = int(seed)
        self.position = 0
        self.counters = {name: 0 for name in self.names}
        self._block_start, self._block_tasks = -1, np.zeros(0, np.int64)  # task indices of one block

    def task_at(self, position: int) -> str:
        if len(self.names) == 1:
            return self.names[0]
        block = self._load_block(position)
        return self.names[self._block_tasks[position - block]]

    def _task_indices(self, start: int, count: int) -> np.ndarray:
        """The task (an index into ``names``) at positions ``start … start + count - 1``."""
        if len(self.names) == 1:
            return np.zeros(count, np.int64)
        pieces, position, end = [np.zeros(0, np.int64)], start, start + count
        while position < end:
            block = self._load_block(position)
            stop = min(block + self.BLOCK, end)
            pieces.append(self._block_tasks[position - block:stop - block])
            position = stop
        return np.concatenate(pieces)

    def _load_block(self, position: int) -> int:
        """Draw the tasks of the block that holds ``position`` (kept until another block is needed); its start."""
        block = position - position % self.BLOCK
        if block != self._block_start:
            uniforms = position_uniforms(self.seed, block, self.BLOCK)
            self._block_start, self._block_tasks = block, np.searchsorted(self.cumulative, uniforms, side="right")
        return block

    def next_task(self) -> tuple[str, int]:
        """``(task name, that task's draw counter)`` for the current position; then advance."""
        name = self.task_at(self.position)
        count = self.counters[name]
        self.counters[name] = count + 1
        self.position += 1
        return name, count

    def ahead(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The next ``count`` positions without advancing: each one's task (an index into ``names``) and that
        task's draw counter there."""
        tasks = self._task_indices(self.position, count)
        draws = np.empty(count, np.int64)
        for index, name in enumerate(self.names):
            mine = tasks == index
            draws[mine] = self.counters[name] + np.arange(np.count_nonzero(mine))
        return tasks, draws

    def advance(self, tasks: np.ndarray) -> None:
        """Move past the next ``len(tasks)`` positions, whose tasks ``ahead`` gave."""
        for index, count in enumerate(np.bincount(tasks, minlength=len(self.names)).tolist()):
            self.counters[self.names[index]] += count
        self.position += len(tasks)

    def state_dict(self) -> dict:
        return {"position": self.position, "counters": dict(self.counters), "seed": self.seed,
                "tasks": list(self.names)}

    def load_state_dict(self, state: Mapping) -> None:
        if sorted(state.get("tasks", [])) != sorted(self.names) or int(state.get("seed", self.seed)) != self.seed:
            raise T2TError(f"the saved data state is for tasks {state.get('tasks')} with seed {state.get('seed')}, "
                           f"not {self.names} with seed {self.seed}; resume with the same mixture and seed.")
        self.position = int(state["position"])
        self.counters = {name: int(state["counters"][name]) for name in self.names}


def sampled_counts(rates: Mapping[str, float], n: int, seed: int = 0) -> dict[str, int]:
    """How many of the first ``n`` positions each task gets (for checking rates)."""
    sampler = MixtureSampler(rates, seed)
    for _ in range(n):
        sampler.next_task()
    return dict(sampler.counters)


__all__: Sequence[str] = ("rate_num_examples", "with_rate_options", "proportional_rates", "is_proportional",
                          "rate_unsupervised", "rate_equal",
                          "normalize_rates", "MixtureSampler", "epoch_permutation", "draw_rng", "stable_hash")
