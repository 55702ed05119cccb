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
the held-back example, and start the next batch with it. Packing is numpy slicing per example, never a
Python loop per token.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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

    def fill(self, arrays: dict[str, np.ndarray], row: int, starts: tuple[int, ...], segment: int,
             parts: tuple[np.ndarray, ...], example: Example) -> None:
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


def _fill_decoder_inputs(arrays: dict, row: int, start: int, sequence: np.ndarray, pack: bool, start_id: int) -> None:
    """Decoder inputs for one example at ``start``: packed rows restart the shift (``start_id`` first) per
    example; unpacked rows shift the whole target row right behind ``start_id``, so EOS lands on the first
    padding slot."""
    dec_in = arrays["decoder_input_tokens"][row]
    if not pack:
        dec_in[0] = start_id
        dec_in[1:] = arrays["decoder_target_tokens"][row][:-1]
    elif sequence.size:
        dec_in[start] = start_id
        dec_in[start + 1:start + sequence.size] = sequence[:-1]


class EncDecFeatureConverter(FeatureConverter):
    """Encoder-decoder features (t5x's ``EncDecFeatureConverter``)."""

    def lengths(self) -> tuple[int, ...]:
        return self.input_length, self.target_length

    def parts(self, example: Example) -> tuple[np.ndarray, ...]:
        return _ids(example, "inputs")[:self.input_length], _ids(example, "targets")[:self.target_length]

    def allocate(self, rows: int) -> dict[str, np.ndarray]:
        s, t = self.input_length, self.target_length
        keys = ENC_DEC_KEYS + (PACKED_ENC_DEC_KEYS if self.pack else ())
        return {k: np.zeros((rows, s if k.startswith("encoder") else t), dtype=np.int64) for k in keys}

    def fill(self, arrays, row, starts, segment, parts, example) -> None:
        (inputs, targets), (e0, d0) = parts, starts
        e1, d1 = e0 + inputs.size, d0 + targets.size
        arrays["encoder_input_tokens"][row, e0:e1] = inputs
        arrays["decoder_target_tokens"][row, d0:d1] = targets
        arrays["decoder_loss_weights"][row, d0:d1] = 1
        _fill_decoder_inputs(arrays, row, d0, targets, self.pack, self.start_id)
        if self.pack:
            arrays["encoder_segment_ids"][row, e0:e1] = segment
            arrays["decoder_segment_ids"][row, d0:d1] = segment
            arrays["encoder_positions"][row, e0:e1] = np.arange(inputs.size)
            arrays["decoder_positions"][row, d0:d1] = np.arange(targets.size)


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

    def allocate(self, rows: int) -> dict[str, np.ndarray]:
        keys = ["decoder_input_tokens", "decoder_target_tokens", "decoder_loss_weights"]
        if self.loss_on_targets_only:
            keys.append("decoder_causal_attention")
        if self.pack:
            keys += ["decoder_segment_ids", "decoder_positions"]
        return {k: np.zeros((rows, self.lengths()[0]), dtype=np.int64) for k in keys}

    def fill(self, arrays, row, starts, segment, parts, example) -> None:
        (sequence,), (d0,) = parts, starts
        d1 = d0 + sequence.size
        arrays["decoder_target_tokens"][row, d0:d1] = sequence
        if self.loss_on_targets_only:
            n_inputs = min(_ids(example, "inputs").size, self.input_length)
            arrays["decoder_loss_weights"][row, d0 + n_inputs:d1] = 1
            # the prefix: every position whose input token is an input token, i.e. n_inputs + 1 positions
            # (seqio); packed rows stop at the example's end.
            end = min(d0 + n_inputs + 1, d1 if self.pack else arrays["decoder_causal_attention"].shape[1])
            arrays["decoder_causal_attention"][row, d0:end] = 1
        else:
            arrays["decoder_loss_weights"][row, d0:d1] = 1
        _fill_decoder_inputs(arrays, row, d0, sequence, self.pack, self.start_id)
        if self.pack:
            arrays["decoder_segment_ids"][row, d0:d1] = segment
            arrays["decoder_positions"][row, d0:d1] = np.arange(sequence.size)


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
        self.rows_used = 0
        # tokens used in each row, one array per stream (columns apart: two 1-d compares beat one 2-d reduce)
        self._used = [np.zeros(self.batch_size or 16, dtype=np.int64) for _ in self.capacity]
        self._placed: list[tuple[int, tuple[int, ...], tuple[np.ndarray, ...], Example]] = []

    def __len__(self) -> int:
        return len(self._placed)

    def add(self, example: Example) -> bool:
        parts = self.converter.parts(example)
        row = self._first_fit([p.size for p in parts]) if self.converter.pack else -1
        if row < 0:
            if self.batch_size is not None and self.rows_used >= self.batch_size:
                return False
            row = self._new_row()
        starts = tuple(int(used[row]) for used in self._used)
        for used, part in zip(self._used, parts):
            used[row] += part.size
        self._placed.append((row, starts, parts, example))
        return True

    def _first_fit(self, sizes: list[int]) -> int:
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
        self.rows_used += 1
        return self.rows_used - 1

    def flush(self) -> dict[str, torch.Tensor]:
        """The batch so far (padded to ``batch_size`` rows) as ``torch.LongTensor``s; the packer is emptied."""
        rows = self.batch_size if self.batch_size is not None else max(self.rows_used, 1)
        arrays = self.converter.allocate(rows)
        segment = [0] * rows
        for row, starts, parts, example in self._placed:
            segment[row] += 1
            self.converter.fill(arrays, row, starts, segment[row], parts, example)
        self._reset()
        return {k: torch.from_numpy(v) for k, v in arrays.items()}
