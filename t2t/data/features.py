"""Feature converters: task features ({"inputs", "targets"} id arrays, EOS appended) → model features.

seqio's idea with t5x's names (see docs/internals.md, "Model features"). Three architectures (T5 §3.2):

- ``EncDecFeatureConverter``: inputs → encoder, targets → decoder.
- ``DecoderOnlyLMFeatureConverter``: one decoder sequence ``inputs + targets``, loss on every token.
- ``PrefixLMFeatureConverter``: the same sequence, loss on the targets only, and
  ``decoder_causal_attention`` = 1 on the prefix (the inputs and the first target position, i.e. every
  position whose *input* token belongs to the prefix) where a prefix LM attends bidirectionally.

All three take ``(input_length, target_length, pack=False, start_id=0)``; ``start_id`` is the model's
``decoder_start_id`` (T5's is 0, the pad id). The decoder-only ones use one row of
``input_length + target_length`` tokens (seqio's convention). Examples longer than their feature length are
truncated (seqio's ``trim_and_pad``).

Unpacked: one example per row, zero padded; ``decoder_input_tokens`` is the whole row shifted right with a
leading start id (so the final EOS lands on the first padding slot, as in seqio and Hugging Face's ``_shift_right``;
its loss weight is 0). Packed: examples are placed first-fit into the batch's rows; segment ids 1, 2, … per
example (0 = padding), positions restart at 0, and the shift restarts with the start id at every segment start.

Streaming, resumable batches use ``Packer``: ``add(example)`` places an example or returns False without
changing anything when it does not fit, so the caller can emit the batch, remember the stream position of
the held-back example, and start the next batch with it. ``place_many`` places a run of examples of known sizes
(first fit: where each would go now, from one numpy compare over the run and the rows, then a scan in Python past
the rows that the examples before it filled); ``flush`` writes all of them into the batch's arrays at once
(``fill``: numpy scatters over every token of the batch, never a Python loop per token or per example).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from t2t.errors import T2TError

Example = Mapping[str, np.ndarray | Sequence[int]]

ENC_DEC_KEYS = ("encoder_input_tokens", "decoder_input_tokens", "decoder_target_tokens", "decoder_loss_weights")
PACKED_ENC_DEC_KEYS = ("encoder_segment_ids", "decoder_segment_ids", "encoder_positions", "decoder_positions")


def _ids(example: Example, key: str) -> np.ndarray:
    try:
        value = example[key]
    except KeyError:
        raise T2TError(f"example has no {key!r} feature (keys: {sorted(example)}); tokenize the task so "
                       f"that every example has 'inputs' and 'targets'.") from None
    ids = np.asarray(value, dtype=np.int64)
    if ids.ndim != 1:
        raise T2TError(f"feature {key!r} must be a 1-d array of token ids, got shape {ids.shape}; pass one "
                       f"example's ids, not a batch.")
    return ids


class FeatureConverter:
    """Shared machinery; subclasses say how one example occupies its rows (encoder, decoder)."""

    def __init__(self, input_length: int, target_length: int, pack: bool = False, start_id: int = 0):
        for name, value in (("input_length", input_length), ("target_length", target_length)):
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise T2TError(f"{name} must be a positive integer, got {value!r}; pass a sequence length "
                               f"such as 512.")
        self.input_length = int(input_length)
        self.target_length = int(target_length)
        self.pack = bool(pack)
        self.start_id = int(start_id)

    # -- per architecture
    def lengths(self) -> tuple[int, ...]:
        """Row length of each stream."""
        raise NotImplementedError

    def parts(self, example: Example) -> tuple[np.ndarray, ...]:
        """The (truncated) token arrays this example puts into each stream."""
        raise NotImplementedError

    def part_sizes(self, lengths: Mapping[str, int | np.ndarray]) -> tuple[int | np.ndarray, ...]:
        """The sizes of ``parts`` for an example whose ``inputs`` and ``targets`` have ``lengths`` (or, elementwise,
        for arrays of such lengths)."""
        raise NotImplementedError

    def fill(self, arrays: dict[str, np.ndarray], placed: "Placed") -> None:
        """Write every placed example into the batch's ``arrays`` (numpy over the whole batch at once)."""
        raise NotImplementedError

    def allocate(self, rows: int) -> dict[str, np.ndarray]:
        raise NotImplementedError

    # -- shared
    def packer(self, batch_size: int | None) -> "Packer":
        return Packer(self, batch_size)

    def convert(self, examples: Sequence[Example], batch_size: int | None = None) -> dict[str, torch.Tensor]:
        """All ``examples`` as one batch of ``batch_size`` rows (default: as many as needed).

        Raises T2TError when they do not fit into ``batch_size`` rows."""
        packer = Packer(self, batch_size)
        for i, example in enumerate(examples):
            if not packer.add(example):
                raise T2TError(f"examples {i}..{len(examples) - 1} do not fit into a batch of {batch_size} rows "
                               f"(pack={self.pack}); pass a larger batch_size or fewer examples.")
        return packer.flush()


class Tokens(NamedTuple):
    """One stream's tokens of a whole batch, concatenated in placement order, and where each one goes."""

    values: np.ndarray
    row: np.ndarray
    column: np.ndarray
    position: np.ndarray  # within its example
    example: np.ndarray  # index into the placed examples

    def last_of_example(self) -> np.ndarray:
        """Whether each token is its example's last."""
        last = np.ones(self.example.size, dtype=bool)
        last[:-1] = self.example[1:] != self.example[:-1]
        return last


@dataclass(frozen=True)
class Placed:
    """Where a batch's examples went: row, segment number (1, 2, … within the row) and start in each stream
    (arrays, one entry or row per example), with each example's parts per stream."""

    rows: np.ndarray
    segments: np.ndarray
    starts: np.ndarray  # [examples, streams]
    parts: list[tuple[np.ndarray, ...]]
    examples: list[Example]

    def tokens(self, stream: int) -> Tokens:
        parts = [p[stream] for p in self.parts]
        sizes = np.fromiter((p.size for p in parts), np.int64, len(parts))
        example = np.repeat(np.arange(len(parts)), sizes)
        position = np.arange(example.size) - (np.cumsum(sizes) - sizes)[example]
        values = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        return Tokens(values, self.rows[example], self.starts[example, stream] + position, position, example)


def segments_and_starts(rows: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For examples placed in order into ``rows`` with ``sizes[i]`` tokens per stream: each one's segment number
    in its row (1, 2, …) and where it starts in each stream (the tokens of the row's earlier examples)."""
    order = np.argsort(rows, kind="stable")
    row_starts = np.ones(len(rows), dtype=bool)
    row_starts[1:] = rows[order][1:] != rows[order][:-1]
    first_in_row = np.flatnonzero(row_starts)[np.cumsum(row_starts) - 1]  # per sorted example
    before = np.cumsum(sizes[order], axis=0) - sizes[order]
    segments, starts = np.empty_like(rows), np.empty_like(sizes)
    segments[order] = np.arange(len(rows)) - first_in_row + 1
    starts[order] = before - before[first_in_row]
    return segments, starts


def _fill_decoder_inputs(arrays: dict, tokens: Tokens, placed: Placed, pack: bool, start_id: int) -> None:
    """Decoder inputs: each example's tokens shifted right behind ``start_id`` (packed rows restart the shift
    per example); an unpacked row shifts as a whole, so its last token (EOS) lands on the first padding slot."""
    dec_in = arrays["decoder_input_tokens"]
    shifted = np.empty_like(tokens.values)
    shifted[1:] = tokens.values[:-1]
    shifted[tokens.position == 0] = start_id
    dec_in[tokens.row, tokens.column] = shifted
    if not pack:
        dec_in[placed.rows, 0] = start_id  # also in a row whose example is empty
        spill = tokens.last_of_example() & (tokens.column + 1 < dec_in.shape[1])
        dec_in[tokens.row[spill], tokens.column[spill] + 1] = tokens.values[spill]


def _fill_segments(arrays: dict, stream: str, tokens: Tokens, placed: Placed) -> None:
    arrays[f"{stream}_segment_ids"][tokens.row, tokens.column] = placed.segments[tokens.example]
    arrays[f"{stream}_positions"][tokens.row, tokens.column] = tokens.position


class EncDecFeatureConverter(FeatureConverter):
    """Encoder-decoder features (t5x's ``EncDecFeatureConverter``)."""

    def lengths(self) -> tuple[int, ...]:
        return self.input_length, self.target_length

    def parts(self, example: Example) -> tuple[np.ndarray, ...]:
        return _ids(example, "inputs")[:self.input_length], _ids(example, "targets")[:self.target_length]

    def part_sizes(self, lengths: Mapping[str, int | np.ndarray]) -> tuple[int | np.ndarray, ...]:
        return np.minimum(lengths["inputs"], self.input_length), np.minimum(lengths["targets"], self.target_length)

    def allocate(self, rows: int) -> dict[str, np.ndarray]:
        s, t = self.input_length, self.target_length
        keys = ENC_DEC_KEYS + (PACKED_ENC_DEC_KEYS if self.pack else ())
        return {k: np.zeros((rows, s if k.startswith("encoder") else t), dtype=np.int64) for k in keys}

    def fill(self, arrays, placed) -> None:
        inputs, targets = placed.tokens(0), placed.tokens(1)
        arrays["encoder_input_tokens"][inputs.row, inputs.column] = inputs.values
        arrays["decoder_target_tokens"][targets.row, targets.column] = targets.values
        arrays["decoder_loss_weights"][targets.row, targets.column] = 1
        _fill_decoder_inputs(arrays, targets, placed, self.pack, self.start_id)
        if self.pack:
            _fill_segments(arrays, "encoder", inputs, placed)
            _fill_segments(arrays, "decoder", targets, placed)


class DecoderOnlyLMFeatureConverter(FeatureConverter):
    """Decoder-only language model (T5 §3.2.1 "LM"): ``inputs + targets`` in one sequence, loss on all of
    it; features ``decoder_{input,target}_tokens``, ``decoder_loss_weights`` (+ segment ids / positions)."""

    loss_on_targets_only = False

    def lengths(self) -> tuple[int, ...]:
        return (self.input_length + self.target_length,)

    def parts(self, example: Example) -> tuple[np.ndarray, ...]:
        inputs = _ids(example, "inputs")[:self.input_length]
        targets = _ids(example, "targets")[:self.target_length]
        return (np.concatenate([inputs, targets]),)

    def part_sizes(self, lengths: Mapping[str, int | np.ndarray]) -> tuple[int | np.ndarray, ...]:
        return (np.minimum(lengths["inputs"], self.input_length) + np.minimum(lengths["targets"], self.target_length),)

    def allocate(self, rows: int) -> dict[str, np.ndarray]:
        keys = ["decoder_input_tokens", "decoder_target_tokens", "decoder_loss_weights"]
        if self.loss_on_targets_only:
            keys.append("decoder_causal_attention")
        if self.pack:
            keys += ["decoder_segment_ids", "decoder_positions"]
        return {k: np.zeros((rows, self.lengths()[0]), dtype=np.int64) for k in keys}

    def fill(self, arrays, placed) -> None:
        tokens = placed.tokens(0)
        arrays["decoder_target_tokens"][tokens.row, tokens.column] = tokens.values
        if self.loss_on_targets_only:
            n_inputs = np.array([min(_ids(example, "inputs").size, self.input_length) for example in placed.examples],
                                dtype=np.int64)
            target = tokens.position >= n_inputs[tokens.example]
            arrays["decoder_loss_weights"][tokens.row[target], tokens.column[target]] = 1
            # the prefix: every position whose input token is an input token, i.e. n_inputs + 1 positions
            # (seqio); packed rows stop at the example's end, an unpacked row's prefix may reach into padding.
            causal = arrays["decoder_causal_attention"]
            if self.pack:
                prefix = tokens.position <= n_inputs[tokens.example]
                causal[tokens.row[prefix], tokens.column[prefix]] = 1
            else:
                causal[placed.rows] = np.arange(causal.shape[1]) <= n_inputs[:, None]
        else:
            arrays["decoder_loss_weights"][tokens.row, tokens.column] = 1
        _fill_decoder_inputs(arrays, tokens, placed, self.pack, self.start_id)
        if self.pack:
            _fill_segments(arrays, "decoder", tokens, placed)


class PrefixLMFeatureConverter(DecoderOnlyLMFeatureConverter):
    """Prefix LM (T5 §3.2.1): like the decoder-only LM, but the loss counts only the targets and
    ``decoder_causal_attention`` marks the prefix that is attended to bidirectionally (t5x)."""

    loss_on_targets_only = True


#: each model architecture's features. Both decoder-only models get the prefix LM's: the loss counts only the
#: targets (T5 §3.2.1), and ``decoder_causal_attention`` marks the inputs, which a prefix LM sees fully and a
#: decoder-only LM reads causally (its auxiliary LM loss covers them, see ``T5.loss_sums``).
CONVERTERS: dict[str, type[FeatureConverter]] = {
    "encoder_decoder": EncDecFeatureConverter,
    "shared_encoder_decoder": EncDecFeatureConverter,
    "decoder_only": PrefixLMFeatureConverter,
    "prefix_lm": PrefixLMFeatureConverter,
}


def get_converter(architecture: str, input_length: int, target_length: int, pack: bool = False,
                  start_id: int = 0) -> FeatureConverter:
    """The converter for a model ``architecture`` (``ModelConfig.architecture``) whose decoder starts with
    ``start_id`` (``ModelConfig.decoder_start_id``)."""
    if architecture not in CONVERTERS:
        raise T2TError(f"unknown architecture {architecture!r}; use one of {', '.join(CONVERTERS)}.")
    return CONVERTERS[architecture](input_length, target_length, pack=pack, start_id=start_id)


class Packer:
    """Collects examples into one batch of ``batch_size`` rows (``None``: as many rows as needed).

    ``add(example) -> bool`` places the example (first-fit over the rows when packing, the next free row
    otherwise) or returns False and changes nothing when it does not fit. ``flush()`` returns the batch as
    torch tensors and starts an empty one. ``len(packer)`` is the number of examples placed so far.

    Typical resumable use::

        for position, example in stream:
            if not packer.add(example):
                yield packer.flush(), position      # the batch ends before `position`
                packer.add(example)                 # always fits an empty batch (truncated to the lengths)

    ``add`` is ``place`` then ``attach``. ``place_many(sizes)`` reserves room for a run of examples whose token
    counts per stream are known (``converter.part_sizes``), in order, up to the first that does not fit, and
    says which rows they went to; ``attach(example, placement)`` gives the tokens of the ``placement``-th
    example placed. A process that keeps only some rows of the batch attaches only theirs; the others stay empty.
    """

    def __init__(self, converter: FeatureConverter, batch_size: int | None):
        if batch_size is not None and (not isinstance(batch_size, (int, np.integer)) or batch_size < 1):
            raise T2TError(f"batch_size must be a positive integer, got {batch_size!r}; pass the number of "
                           f"rows per batch.")
        self.converter = converter
        self.batch_size = None if batch_size is None else int(batch_size)
        self.capacity = tuple(int(n) for n in converter.lengths())
        if len(self.capacity) not in (1, 2):
            raise T2TError(f"a packer fills one or two streams per row, not {len(self.capacity)} "
                           f"({type(converter).__name__}.lengths()); give the converter one or two.")
        self._reset()

    def _reset(self) -> None:
        # tokens used in each row, a list per stream; the rows not used yet (all 0) at the end
        self._used = [[0] * (self.batch_size or 0) for _ in self.capacity]
        self.rows_used = 0
        self._rows: list[int] = []  # per example placed: its row and its token count per stream
        self._sizes: list[list[int]] = []
        self._attached: list[tuple[int, tuple[np.ndarray, ...], Example]] = []  # placement, parts, example

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, example: Example) -> bool:
        parts = self.converter.parts(example)
        if self.place(tuple(p.size for p in parts)) is None:
            return False
        self._attached.append((len(self._rows) - 1, parts, example))
        return True

    def place(self, sizes: tuple[int, ...]) -> int | None:
        """Reserve room for one example of ``sizes`` tokens per stream: its row, or None (nothing changed) when
        it does not fit."""
        rows = self.place_many(np.asarray(sizes, dtype=np.int64).reshape(1, len(self.capacity)))
        return rows[0] if rows else None

    def place_many(self, sizes: np.ndarray) -> list[int]:
        """Reserve room for examples of ``sizes[i]`` tokens per stream (one row of ``sizes`` each), in order, up
        to the first that does not fit: the rows of those placed (fewer than ``len(sizes)`` when one did not
        fit; it and those after it are not placed, and nothing changed for them)."""
        if self.batch_size is None:  # room for one new row per example
            for used in self._used:
                used += [0] * (self.rows_used + len(sizes) - len(used))
        first, last = self._used[0], self._used[-1]  # all the streams: one, or the encoder's and the decoder's
        if not self.converter.pack:
            bounds = itertools.repeat(None)
        else:  # one example: scanning the rows from the first costs less than numpy's compare
            bounds = self._first_fits(sizes) if len(sizes) > 1 else [0]
        placed = len(self._rows)
        for bound, example_sizes in zip(bounds, sizes.tolist()):
            row = self.rows_used if bound is None else self._first_fit_from(bound, example_sizes)
            if row == len(first):
                break
            self.rows_used = max(self.rows_used, row + 1)
            first[row] += example_sizes[0]
            if last is not first:
                last[row] += example_sizes[-1]
            self._rows.append(row)
            self._sizes.append(example_sizes)
        return self._rows[placed:]

    def _first_fits(self, sizes: np.ndarray) -> list[int]:
        """Where each example would go now: a lower bound of its row once those before it have been placed, as
        rows only fill; ``_first_fit_from`` moves on from it past the rows they filled (a few compares)."""
        fits = np.ones((len(sizes), len(self._used[0])), dtype=bool)
        for used, capacity, stream_sizes in zip(self._used, self.capacity, sizes.T):
            fits &= np.asarray(used) <= (capacity - stream_sizes)[:, None]
        return fits.argmax(axis=1).tolist()  # 0 where no row fits: the scan then goes through all of them

    def _first_fit_from(self, row: int, sizes: list[int]) -> int:
        """The first row from ``row`` on with room for ``sizes`` tokens per stream, or the number of rows."""
        first, last, rows = self._used[0], self._used[-1], len(self._used[0])
        first_room, last_room = self.capacity[0] - sizes[0], self.capacity[-1] - sizes[-1]
        while row < rows and (first[row] > first_room or last[row] > last_room):
            row += 1
        return row

    def attach(self, example: Example, placement: int = -1) -> None:
        """The tokens of the ``placement``-th example placed (default: the last), which must have the sizes it
        was placed with."""
        parts = self.converter.parts(example)
        sizes = [p.size for p in parts]
        if sizes != self._sizes[placement]:
            raise T2TError(f"an example of {sizes} tokens per stream was placed as {self._sizes[placement]}; a "
                           f"token preprocessor's output_lengths does not match what it produces: fix it or "
                           f"remove it.")
        self._attached.append((placement % len(self._rows), parts, example))

    def flush(self) -> dict[str, torch.Tensor]:
        """The batch so far (padded to ``batch_size`` rows) as ``torch.LongTensor``s; the packer is emptied."""
        rows = self.batch_size if self.batch_size is not None else max(self.rows_used, 1)
        arrays = self.converter.allocate(rows)
        if self._attached:
            self.converter.fill(arrays, self._placed())
        self._reset()
        return {k: torch.from_numpy(v) for k, v in arrays.items()}

    def _placed(self) -> Placed:
        """The attached examples, where they went."""
        rows = np.asarray(self._rows, dtype=np.int64)
        segments, starts = segments_and_starts(rows, np.asarray(self._sizes, dtype=np.int64))
        which = np.fromiter((placement for placement, _, _ in self._attached), np.int64, len(self._attached))
        return Placed(rows[which], segments[which], starts[which], [parts for _, parts, _ in self._attached],
                      [example for _, _, example in self._attached])
