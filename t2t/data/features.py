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
the held-back example, and start the next batch with it. ``add`` places an example (first fit, a numpy compare
over the rows); ``flush`` writes all of them into the batch's arrays at once (``fill``: numpy scatters over every
token of the batch, never a Python loop per token or per example).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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

    def part_sizes(self, lengths: Mapping[str, int]) -> tuple[int, ...]:
        """The sizes of ``parts`` for an example whose ``inputs`` and ``targets`` have ``lengths``."""
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


class Placed:
    """Where a batch's examples went: row, segment number (1, 2, … within the row) and start in each stream."""

    def __init__(self):
        self.rows: list[int] = []
        self.segments: list[int] = []
        self.starts: list[tuple[int, ...]] = []
        self.parts: list[tuple[np.ndarray, ...]] = []
        self.examples: list[Example] = []

    def __len__(self) -> int:
        return len(self.rows)

    def append(self, row: int, segment: int, starts: tuple[int, ...], parts: tuple[np.ndarray, ...],
               example: Example) -> None:
        self.rows.append(row)
        self.segments.append(segment)
        self.starts.append(starts)
        self.parts.append(parts)
        self.examples.append(example)

    def tokens(self, stream: int) -> Tokens:
        parts = [p[stream] for p in self.parts]
        sizes = np.fromiter((p.size for p in parts), np.int64, len(parts))
        example = np.repeat(np.arange(len(parts)), sizes)
        position = np.arange(example.size) - (np.cumsum(sizes) - sizes)[example]
        starts = np.fromiter((s[stream] for s in self.starts), np.int64, len(parts))
        values = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        return Tokens(values, np.asarray(self.rows, np.int64)[example], starts[example] + position, position, example)


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
    arrays[f"{stream}_segment_ids"][tokens.row, tokens.column] = np.asarray(placed.segments, np.int64)[tokens.example]
    arrays[f"{stream}_positions"][tokens.row, tokens.column] = tokens.position


class EncDecFeatureConverter(FeatureConverter):
    """Encoder-decoder features (t5x's ``EncDecFeatureConverter``)."""

    def lengths(self) -> tuple[int, ...]:
        return self.input_length, self.target_length

    def parts(self, example: Example) -> tuple[np.ndarray, ...]:
        return _ids(example, "inputs")[:self.input_length], _ids(example, "targets")[:self.target_length]

    def part_sizes(self, lengths: Mapping[str, int]) -> tuple[int, ...]:
        return min(lengths["inputs"], self.input_length), min(lengths["targets"], self.target_length)

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

    def part_sizes(self, lengths: Mapping[str, int]) -> tuple[int, ...]:
        return (min(lengths["inputs"], self.input_length) + min(lengths["targets"], self.target_length),)

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

    ``add`` is ``place`` then ``attach``: ``place(sizes)`` reserves room for an example of ``sizes`` tokens per
    stream (``converter.part_sizes``) and says which row it went to, and ``attach(example)`` gives that example's
    tokens. A process that keeps only some rows of the batch attaches only theirs; the others stay empty.
    """

    def __init__(self, converter: FeatureConverter, batch_size: int | None):
        if batch_size is not None and (not isinstance(batch_size, (int, np.integer)) or batch_size < 1):
            raise T2TError(f"batch_size must be a positive integer, got {batch_size!r}; pass the number of "
                           f"rows per batch.")
        self.converter = converter
        self.batch_size = None if batch_size is None else int(batch_size)
        self.capacity = tuple(int(n) for n in converter.lengths())
        self._reset()

    def _reset(self) -> None:
        # tokens used in each row, one array per stream (columns apart: two 1-d compares beat one 2-d reduce)
        self._used = [np.zeros(self.batch_size or 16, dtype=np.int64) for _ in self.capacity]
        self._examples_in_row: list[int] = []  # one entry per row in use
        self._placed = Placed()
        self._reserved: tuple[int, int, tuple[int, ...], tuple[int, ...]] | None = None

    def __len__(self) -> int:
        return sum(self._examples_in_row)

    @property
    def rows_used(self) -> int:
        return len(self._examples_in_row)

    def add(self, example: Example) -> bool:
        parts = self.converter.parts(example)
        if self.place(tuple(p.size for p in parts)) is None:
            return False
        self._keep(parts, example)
        return True

    def place(self, sizes: tuple[int, ...]) -> int | None:
        """Reserve room for an example of ``sizes`` tokens per stream: its row, or None (nothing changed) when
        it does not fit."""
        row = self._first_fit(sizes) if self.converter.pack else -1
        if row < 0:
            if self.batch_size is not None and self.rows_used >= self.batch_size:
                return None
            row = self._new_row()
        starts = tuple(int(used[row]) for used in self._used)
        for used, size in zip(self._used, sizes):
            used[row] += size
        self._examples_in_row[row] += 1
        self._reserved = row, self._examples_in_row[row], starts, tuple(sizes)
        return row

    def attach(self, example: Example) -> None:
        """The tokens of the example just placed, which must have the sizes it was placed with."""
        parts = self.converter.parts(example)
        sizes = tuple(p.size for p in parts)
        if sizes != self._reserved[3]:
            raise T2TError(f"an example of {sizes} tokens per stream was placed as {self._reserved[3]}; a token "
                           f"preprocessor's output_lengths does not match what it produces: fix it or remove it.")
        self._keep(parts, example)

    def _keep(self, parts: tuple[np.ndarray, ...], example: Example) -> None:
        row, segment, starts, _ = self._reserved
        self._placed.append(row, segment, starts, parts, example)
        self._reserved = None

    def _first_fit(self, sizes: tuple[int, ...]) -> int:
        """The first row with room for ``sizes`` tokens in every stream, or -1."""
        if not self.rows_used:
            return -1
        fits = None
        for used, capacity, size in zip(self._used, self.capacity, sizes):
            room = used[:self.rows_used] <= capacity - size
            fits = room if fits is None else fits & room
        row = int(fits.argmax())
        return row if fits[row] else -1

    def _new_row(self) -> int:
        if self.rows_used == self._used[0].size:  # only without a batch size: grow
            self._used = [np.concatenate([used, np.zeros_like(used)]) for used in self._used]
        self._examples_in_row.append(0)
        return self.rows_used - 1

    def flush(self) -> dict[str, torch.Tensor]:
        """The batch so far (padded to ``batch_size`` rows) as ``torch.LongTensor``s; the packer is emptied."""
        rows = self.batch_size if self.batch_size is not None else max(self.rows_used, 1)
        arrays = self.converter.allocate(rows)
        if len(self._placed):
            self.converter.fill(arrays, self._placed)
        self._reset()
        return {k: torch.from_numpy(v) for k, v in arrays.items()}
