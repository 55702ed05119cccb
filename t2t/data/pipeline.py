"""From tasks to batches: ``build_train_batches``, the trainer's endless, deterministic, resumable stream.

    tokenized split (``t2t.data.tokenized``: cached, source order)
      ─ per-epoch seeded permutation ─ token_preprocessors(rng per draw) ─ trim, EOS last ─► sampler
    sampler (global positions) ─ features.Packer (pad or pack the global batch) ─ rank r takes rows r, r+W, …
    (a rank draws only its rows' examples when their lengths are known without drawing:
    ``TaskStream.declared_lengths``)

A draw is addressed by (task, count): the cached split is the task's examples *after* its text preprocessors,
one-to-many ones included, so a resumed stream indexes the same expanded list. Streaming sources
(``source.streaming``) are never cached: each epoch reads them again, shuffled in a buffer of
``STREAM_SHUFFLE_BUFFER`` examples seeded by (seed, task, epoch) as seqio shuffles a task (C4 would otherwise
fill a batch with the chunks of one document), and resuming reads the epoch again up to the examples already
drawn.

``clear_cache``, ``eval_examples``, ``iter_tokenized`` and ``tokenized_split`` live in ``t2t.data.tokenized`` and
are importable from here as before.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from typing import Iterator, Mapping

import numpy as np

from t2t.data import cache
from t2t.data.features import Packer, get_converter
from t2t.data.mixing import MixtureSampler, buffer_rng, draw_rng, epoch_permutation, shuffled_in_buffer
from t2t.data.sources import DataNotFoundError
from t2t.data.task import Mixture, Task, get_task, get_task_or_mixture, rate_value
from t2t.data.tokenized import iter_tokenized, tokenized_split, trim_and_append_eos, trimmed_lengths
from t2t.errors import T2TError

log = logging.getLogger(__name__)

_NOT_LOOKED_UP = -2  # TaskStream's mark for an example whose lengths were not asked for yet

# seqio's default shuffle buffer (SHUFFLE_BUFFER_SIZE), for the sources that are read, not held, each epoch
STREAM_SHUFFLE_BUFFER = 1000
STATE_FORMAT = "t2t.data.pipeline/2"  # /1 held one sampler state per rank (each rank packed its own rows)

# ------------------------------------------------------------------------------------------ one task's draws

class TaskStream:
    """The ``count``-th draw of one task: epoch ``count // N``, position ``count % N`` of that epoch's
    seeded permutation; streaming sources are read in order through a seeded shuffle buffer instead (``N``
    learnt at the end of the first pass).

    ``max_tokens`` truncates the data to the longest prefix (in source order) of at most that many tokens
    (inputs and targets before any objective), which then repeats: the data-size study of T5 §3.4.2."""

    def __init__(self, task: Task, split: str, vocab, data_dir, seed: int, sequence_length: Mapping[str, int],
                 max_tokens: int | None = None):
        self.task, self.split, self.vocab, self.data_dir = task, split, vocab, data_dir
        self.seed = int(seed)
        self.sequence_length = dict(sequence_length)
        self.max_tokens = max_tokens
        self.streaming = bool(getattr(task.source, "streaming", False))
        self.trim_warned = False
        self._permutations: dict[int, np.ndarray] = {}  # the last few epochs' (draws look a batch ahead)
        self._epochs_logged = 0
        if self.streaming:
            self.epoch, self.epoch_start, self.shuffle_buffer = 0, 0, STREAM_SHUFFLE_BUFFER
            self._restart()
        else:
            self.data = tokenized_split(task, split, vocab, data_dir, sequence_length)
            if max_tokens is not None:
                self.data = self.data[:len(list(self._within_budget(self.data)))]
            # the lengths of each example's draws (the same every epoch), looked up when first asked for
            self._lengths = {key: np.full(len(self.data), _NOT_LOOKED_UP, np.int32) for key in ("inputs", "targets")}
            self._warn_long_examples()

    def _within_budget(self, examples):
        """``examples`` while their running token count stays within ``max_tokens`` (all without it)."""
        if self.max_tokens is None:
            yield from examples
            return
        used = 0
        for i, example in enumerate(examples):
            used += sum(int(example[k].size) for k in self.task.output_features if k in example)
            if used > self.max_tokens:
                if i == 0:
                    raise T2TError(f"max_tokens {self.max_tokens} is smaller than the first example of task "
                                   f"{self.task.name!r} ({used} tokens); raise max_tokens.")
                return
            yield example

    def _log_repeat(self, epoch: int, examples: int) -> None:
        if self.max_tokens is not None and epoch > 0:
            log.info("task %s: repeat %d of its first %d tokens (%d examples; max_tokens, §3.4.2)",
                     self.task.name, epoch, self.max_tokens, examples)

    # -- streaming bookkeeping
    def _restart(self) -> None:
        stream = self._within_budget(iter_tokenized(self.task, self.split, self.vocab, self.data_dir,
                                                    self.sequence_length))
        self._iter = (shuffled_in_buffer(stream, self.shuffle_buffer, buffer_rng(self.seed, self.task.name, self.epoch))
                      if self.shuffle_buffer > 1 else stream)
        self._next_count = self.epoch_start
        self._last = None

    def state_dict(self) -> dict | None:
        if not self.streaming:
            return None
        return {"epoch": self.epoch, "epoch_start": self.epoch_start, "shuffle_buffer": self.shuffle_buffer}

    def load_state_dict(self, state: Mapping | None) -> None:
        if self.streaming:
            self.epoch, self.epoch_start = int(state["epoch"]), int(state["epoch_start"])
            self.shuffle_buffer = int(state.get("shuffle_buffer", 0))  # runs saved before 11-27 read in order
            self._restart()

    def _streamed(self, count: int) -> tuple[dict, int, int]:
        if count < self._next_count - 1 or count < self.epoch_start:
            raise T2TError(f"task {self.task.name!r}: a streaming source cannot go back to draw {count}; "
                           f"restore the data state instead.")
        while self._next_count <= count:
            try:
                item = next(self._iter)
            except StopIteration:
                if self._next_count == self.epoch_start:
                    raise T2TError(f"split {self.split!r} of task {self.task.name!r} gave no examples; check "
                                   f"the data.") from None
                self.epoch, self.epoch_start = self.epoch + 1, self._next_count
                self._log_repeat(self.epoch, self._next_count // self.epoch)
                self._restart()
                continue
            self._last = item
            self._next_count += 1
        return self._last, self.epoch, count - self.epoch_start

    # -- draws
    def raw(self, count: int) -> tuple[dict, int, int]:
        """``(cached example, epoch, index within the epoch)`` of draw ``count``."""
        if self.streaming:
            return self._streamed(count)
        epoch, index, item = self._locate(count)
        return self.data[item], epoch, index

    def _locate(self, count: int) -> tuple[int, int, int]:
        """``(epoch, index within the epoch, index into the cached data)`` of draw ``count``."""
        epoch, index = divmod(count, len(self.data))
        return epoch, index, int(self._permutation(epoch)[index])

    def _items(self, counts: np.ndarray) -> np.ndarray:
        """The index into the cached data of each of draws ``counts``."""
        epochs, indices = np.divmod(counts, len(self.data))
        items = np.empty_like(counts)
        for epoch in np.unique(epochs).tolist():
            mine = epochs == epoch
            items[mine] = self._permutation(epoch)[indices[mine]]
        return items

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch not in self._permutations:
            if len(self._permutations) == 4:
                del self._permutations[min(self._permutations)]
            self._permutations[epoch] = epoch_permutation(self.seed, self.task.name, epoch, len(self.data))
            if epoch > self._epochs_logged:
                self._epochs_logged = epoch
                self._log_repeat(epoch, len(self.data))
        return self._permutations[epoch]

    def draw(self, count: int) -> dict:
        """Draw ``count`` as model-ready ``{"inputs", "targets"}`` ids (random stage applied, trimmed, EOS)."""
        example, epoch, index = self.raw(count)
        features = {k: example[k] for k in self.task.output_features if k in example}
        if self.task.token_preprocessors:
            rng = draw_rng(self.seed, self.task.name, epoch, index)
            for fn in self.task.token_preprocessors:
                features = fn(features, rng, vocab=self.vocab, sequence_length=self.sequence_length)
        out, trimmed = trim_and_append_eos(self.task, features, self.sequence_length, self.vocab)
        if trimmed and not self.trim_warned:
            self.trim_warned = True
            log.warning("task %s: examples longer than %s are trimmed, EOS kept last (this is the first; further "
                        "trims of this task are not reported)", self.task.name, self.sequence_length)
        return out

    def declared_lengths(self, counts: np.ndarray) -> dict[str, np.ndarray] | None:
        """The lengths of the ``inputs`` and ``targets`` that ``draw`` gives for each of draws ``counts``, without
        drawing them: -1 for an example whose token preprocessors do not declare their output lengths
        (``declared_output_lengths``; trivially known without any). None when the stream cannot tell without
        drawing: a streaming source, or a task without both features."""
        if self.streaming or not {"inputs", "targets"} <= set(self.task.output_features):
            return None
        items = self._items(counts)
        # declared lengths depend on an example's lengths only, so each example's are the same every epoch: kept
        unknown = np.unique(items[self._lengths["inputs"][items] == _NOT_LOOKED_UP])
        found = [self._sizes_of(self.data[item]) or {} for item in unknown.tolist()]
        for key, table in self._lengths.items():
            table[unknown] = [lengths.get(key, -1) for lengths in found]
        return {key: table[items] for key, table in self._lengths.items()}

    def _sizes_of(self, example: dict) -> dict[str, int] | None:
        lengths: dict[str, int] | None = {k: np.size(example[k]) for k in self.task.output_features if k in example}
        for fn in self.task.token_preprocessors:
            lengths = declared_output_lengths(fn, lengths)
            if lengths is None:
                return None
        return trimmed_lengths(self.task, lengths, self.sequence_length)

    def _warn_long_examples(self) -> None:
        if self.task.token_preprocessors:
            return  # lengths change per draw; the first trim is reported by draw()
        too_long = 0
        for example in self.data:
            for key, feature in self.task.output_features.items():
                if key in example and example[key].size + int(feature.add_eos) > self.sequence_length[key]:
                    too_long += 1
                    break
        if too_long:
            self.trim_warned = True
            log.warning("task %s: %d of %d %s examples are longer than %s and will be trimmed, keeping EOS last",
                        self.task.name, too_long, len(self.data), self.split,
                        ", ".join(f"{k}_length={v}" for k, v in self.sequence_length.items()))


def declared_output_lengths(fn, lengths: Mapping[str, int]) -> dict[str, int] | None:
    """The feature lengths token preprocessor ``fn`` gives features of ``lengths``, by its own account: its
    ``output_lengths(lengths, **keyword options)`` (a ``functools.partial``'s keywords are its options), as
    ``t2t.data.objectives.denoise`` declares for objectives whose lengths are not drawn; None when it has none."""
    func, options = fn, {}
    if isinstance(fn, functools.partial):
        if fn.args:
            return None
        func, options = fn.func, fn.keywords
    output_lengths = getattr(func, "output_lengths", None)
    return None if output_lengths is None else output_lengths(dict(lengths), **options)


# ------------------------------------------------------------------------------------------ training batches

@dataclass
class _Peeked:
    position: int
    example: dict


class TrainBatches:
    """An endless, deterministic, resumable iterable of model-feature batches (see ``build_train_batches``)."""

    LOOKAHEAD = 512  # positions whose tasks and declared lengths are looked up together
    _NO_WINDOW = (0, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 0), np.int64))

    def __init__(self, name: str, *, vocab, batch_size: int, input_length: int, target_length: int,
                 pack: bool = True, seed: int = 0, data_dir=None, rank: int = 0, world_size: int = 1,
                 skip_unavailable: bool = False, split: str = "train", architecture: str = "encoder_decoder",
                 max_tokens: int | None = None, mixing_maximum: float | None = None,
                 mixing_temperature: float | None = None, decoder_start_id: int = 0):
        if not isinstance(world_size, int) or world_size < 1 or not isinstance(rank, int) or not 0 <= rank < world_size:
            raise T2TError(f"rank {rank!r} / world_size {world_size!r} are not a valid process layout; rank must "
                           f"be in 0..world_size-1.")
        if not isinstance(batch_size, int) or batch_size < 1 or batch_size % world_size:
            raise T2TError(f"batch size {batch_size!r} must be a positive multiple of the number of processes "
                           f"({world_size}); choose a multiple.")
        self.name, self.seed, self.split = name, int(seed), split
        self.rank, self.world_size = rank, world_size
        self.batch_size = batch_size
        self.pack = bool(pack)
        self.sequence_length = {"inputs": int(input_length), "targets": int(target_length)}
        self.max_tokens = max_tokens
        self.converter = get_converter(architecture, int(input_length), int(target_length), pack=self.pack,
                                       start_id=decoder_start_id)
        item = get_task_or_mixture(name)
        self.name = item.name  # aliases resolved, so a state saved under "stsb" loads under "glue_stsb_v002"
        self.mixing = check_mixing(item, mixing_maximum, mixing_temperature)
        self.streams, rates = self._open_members(item, vocab, data_dir, skip_unavailable)
        self.rates = rates
        self.sampler = MixtureSampler(rates, seed)
        self._peeked: _Peeked | None = None
        self._window = self._NO_WINDOW

    # -- members and their data
    def _open_members(self, item: Task | Mixture, vocab, data_dir, skip_unavailable: bool):
        members = [(item.name, 1.0)] if isinstance(item, Task) else item.task_rates(*self.mixing)
        streams: dict[str, TaskStream] = {}
        rates: dict[str, float] = {}
        missing: list[tuple[str, str]] = []
        present: list[Task] = []
        no_split: list[str] = []
        for member, rate in members:  # first find what is missing, before tokenizing anything
            task = item if isinstance(item, Task) else get_task(member)
            try:
                value = rate_value(rate, task, data_dir)
                if value <= 0:
                    continue  # evaluation-only member (e.g. MNLI matched/mismatched in GLUE)
                if isinstance(item, Mixture) and task.splits and self.split not in task.splits:
                    no_split.append(task.name)  # seqio skips a member without the split, with a warning
                    continue
                task.check_split(self.split)
                if cache.active_cache() is None:
                    iter(task.source.load(self.split, data_dir))  # opens the data (local check or hub load)
                else:  # the cache stands for the data (it is checked against the source's files when read)
                    cache.require_cached(task, self.split, cache.active_cache())
                present.append(task)
                rates[task.name] = value
            except DataNotFoundError as e:
                missing.append((task.name, str(e)))
        if no_split:
            log.warning("%s: leaving out %s: no %s split (evaluation-only tasks)", item.name, ", ".join(no_split),
                        self.split)
        if missing and skip_unavailable:
            for task_name, reason in missing:
                log.warning("skipping %s of %s: its %s data is unavailable (%s)", task_name, item.name, self.split,
                            reason)
            if not rates:
                raise T2TError(f"no member of {item.name!r} has {self.split} data available "
                               f"({', '.join(n for n, _ in missing)}); get the data or pass --data-dir.")
            total = sum(rates.values())
            log.warning("%s: mixing rates renormalised over %s", item.name,
                        ", ".join(f"{n}={r / total:.4f}" for n, r in rates.items()))
        elif missing:
            names = ", ".join(n for n, _ in missing)
            raise T2TError(f"{self.split} data is missing for {len(missing)} task(s) of {item.name!r}: {names} "
                           f"(first: {missing[0][1]}); get the data, or pass skip_unavailable "
                           f"(--skip-unavailable) to train on the rest.")
        for task in present:
            streams[task.name] = TaskStream(task, self.split, vocab, data_dir, self.seed, self.sequence_length,
                                            self.max_tokens)
        return streams, rates

    # -- the global stream of examples (the same on every rank)
    def _peek(self) -> dict:
        position = self.sampler.position
        if self._peeked is None or self._peeked.position != position:
            name = self.sampler.task_at(position)
            self._peeked = _Peeked(position, self.streams[name].draw(self.sampler.counters[name]))
        return self._peeked.example

    def _advance(self) -> None:
        self.sampler.next_task()
        self._peeked = None

    def next_global_batch(self) -> dict:
        """The next batch of all ``batch_size`` rows, packed (or padded) from the global stream, in which this
        rank's rows are filled (all of them in one process): every example is placed, but those whose lengths
        their task declares are drawn only when they land in one of this rank's rows."""
        packer = self.converter.packer(self.batch_size)
        while self._place_declared(packer) and self._place_drawn(packer):
            pass
        return packer.flush()

    def _place_declared(self, packer: Packer) -> bool:
        """Place the examples from the current position on whose lengths their tasks declare, together
        (``Packer.place_many``), drawing those in this rank's rows. True when it stopped at an example whose
        lengths are not declared, False when one did not fit (the batch is done)."""
        while True:
            tasks, counts, sizes = self._lookahead()
            undeclared = np.flatnonzero(sizes[:, 0] < 0)
            declared = int(undeclared[0]) if undeclared.size else len(sizes)
            first = len(packer)
            rows = packer.place_many(sizes[:declared])
            for i, row in enumerate(rows):
                if row % self.world_size == self.rank:
                    stream = self.streams[self.sampler.names[tasks[i]]]
                    packer.attach(stream.draw(int(counts[i])), first + i)
            self.sampler.advance(tasks[:len(rows)])
            if len(rows) < declared:
                return False  # held back: the state points at it
            if declared < len(sizes):
                return True

    def _place_drawn(self, packer: Packer) -> bool:
        """Draw the current example and place it; False when it did not fit (the batch is done)."""
        if not self.pack and packer.rows_used == self.batch_size:
            return False  # full: no need to draw the next one
        if not packer.add(self._peek()):
            return False  # held back: the state still points at it
        self._advance()
        return True

    def _lookahead(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """From the current position on (``LOOKAHEAD`` at a time, kept until passed): each position's task (an
        index into the sampler's names), its draw counter, and its token counts per stream as its task declares
        them (``converter.part_sizes``), -1 where they are not declared."""
        start, tasks, counts, sizes = self._window
        offset = self.sampler.position - start
        if not 0 <= offset < len(tasks):
            tasks, counts = self.sampler.ahead(self.LOOKAHEAD)
            sizes = np.full((len(tasks), len(self.converter.lengths())), -1, np.int64)
            for index, name in enumerate(self.sampler.names):
                mine = np.flatnonzero(tasks == index)
                lengths = self.streams[name].declared_lengths(counts[mine]) if mine.size else None
                if lengths is not None:
                    known = (lengths["inputs"] >= 0) & (lengths["targets"] >= 0)
                    sizes[mine[known]] = np.stack(self.converter.part_sizes(lengths), axis=1)[known]
            self._window, offset = (self.sampler.position, tasks, counts, sizes), 0
        return tasks[offset:], counts[offset:], sizes[offset:]

    def next_batch(self) -> dict:
        """This rank's rows of the next global batch: rows ``rank, rank + W, …`` (see ``global_rows``)."""
        batch = self.next_global_batch()
        if self.world_size == 1:
            return batch
        return {key: value[self.rank::self.world_size].contiguous() for key, value in batch.items()}

    def global_rows(self) -> list[int]:
        """The row index in the global batch of each row ``next_batch`` gives this rank."""
        return list(range(self.rank, self.batch_size, self.world_size))

    def next_examples(self, n: int) -> list[dict]:
        """The next ``n`` examples of the global stream (model-ready ids), advancing it; for inspection and tests."""
        out = []
        for _ in range(n):
            out.append(self._peek())
            self._advance()
        return out

    def __iter__(self) -> Iterator[dict]:
        while True:
            yield self.next_batch()

    # -- resuming
    def state_dict(self) -> dict:
        """JSON-able state of the global stream: the same on every rank, so a run may resume with any number
        of processes."""
        return {"format": STATE_FORMAT, "name": self.name, "seed": self.seed, "split": self.split,
                "pack": self.pack, "batch_size": self.batch_size, "sequence_length": dict(self.sequence_length),
                "sampler": self.sampler.state_dict(),
                "streams": {n: s.state_dict() for n, s in self.streams.items() if s.streaming}}

    def load_state_dict(self, state: Mapping) -> None:
        state = _upgrade_state(state)
        for key, mine in (("name", self.name), ("seed", self.seed), ("split", self.split)):
            if state.get(key) != mine:
                raise T2TError(f"the saved data state has {key}={state.get(key)!r} but this run has {mine!r}; "
                               f"resume with the same {key}.")
        self.sampler.load_state_dict(state["sampler"])
        for name, stream in self.streams.items():
            if stream.streaming:
                stream.load_state_dict(state["streams"][name])
        self._peeked, self._window = None, self._NO_WINDOW


def check_mixing(item: Task | Mixture, maximum: float | None, temperature: float | None) -> tuple:
    """``(maximum, temperature)`` once checked: each > 0 when set, and set only for a mixture with
    examples-proportional rates, the only ones §3.5.2's limit K and temperature T change (t5 applies them
    through ``rate_num_examples``); anywhere else they would be recorded and silently ignored."""
    for key, value in (("mixing_maximum", maximum), ("mixing_temperature", temperature)):
        if value is not None and not value > 0:
            raise T2TError(f"{key} must be > 0, got {value!r}; give a positive number or leave it unset.")
    if (maximum is not None or temperature is not None) and not (isinstance(item, Mixture) and item.proportional()):
        what = "is a task, not a mixture" if isinstance(item, Task) else "has no examples-proportional rates"
        raise T2TError(f"mixing_maximum and mixing_temperature apply to examples-proportional mixing rates "
                       f"(§3.5.2) and {item.name!r} {what}; leave them unset or train a proportional mixture.")
    return maximum, temperature


def _upgrade_state(state) -> Mapping:
    """A saved data state in the current format; a single-process state of format /1 is the same stream."""
    if isinstance(state, Mapping) and state.get("format") == "t2t.data.pipeline/1":
        if state.get("world_size") != 1:
            raise T2TError(f"the saved data state was written by {state.get('world_size')} processes that each "
                           f"packed their own rows (t2t before the global batch); it cannot be continued "
                           f"exactly: start a new output dir.")
        return {**state, **state["ranks"]["0"]}
    if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
        raise T2TError("the saved data state is not a t2t data-stream state; resume from a checkpoint "
                       "written by t2t-train.")
    return state


def build_train_batches(name: str, *, vocab, batch_size: int, input_length: int, target_length: int,
                        pack: bool = True, seed: int = 0, data_dir: str | os.PathLike | None = None, rank: int = 0,
                        world_size: int = 1, skip_unavailable: bool = False, split: str = "train",
                        architecture: str = "encoder_decoder", max_tokens: int | None = None,
                        mixing_maximum: float | None = None, mixing_temperature: float | None = None,
                        decoder_start_id: int = 0) -> TrainBatches:
    """The trainer's data: an endless iterable of model-feature batches of ``batch_size // world_size`` rows.

    Deterministic in ``seed``; ``state_dict()`` / ``load_state_dict()`` resume exactly (also when packing: the
    state points at the example held back for the next batch). Packing comes before sharding, as in T5: every
    rank packs the same global batch of ``batch_size`` rows from the global example stream and takes rows
    ``r, r+W, …`` of it, so W processes see exactly the rows of one. Each rank places every example but draws
    only those of its rows whose lengths are declared (``TrainBatches.next_global_batch``). Mixture members whose
    data cannot be found are an error listing them all, or with ``skip_unavailable`` are dropped with a warning
    and the rates renormalised. ``max_tokens`` trains on a fixed prefix of each task's data, repeated (T5
    §3.4.2; see ``TaskStream``). ``mixing_maximum`` (K) and ``mixing_temperature`` (T) set §3.5.2's limit and
    temperature of a mixture's examples-proportional rates. ``decoder_start_id`` is the model's
    (``ModelConfig.decoder_start_id``, 0 in T5), the first decoder input of every example.
    """
    return TrainBatches(name, vocab=vocab, batch_size=batch_size, input_length=input_length,
                        target_length=target_length, pack=pack, seed=seed, data_dir=data_dir, rank=rank,
                        world_size=world_size, skip_unavailable=skip_unavailable, split=split,
                        architecture=architecture, max_tokens=max_tokens, mixing_maximum=mixing_maximum,
                        mixing_temperature=mixing_temperature, decoder_start_id=decoder_start_id)
