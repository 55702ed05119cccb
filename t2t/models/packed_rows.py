"""Encoding a padded batch without computing its padding: its rows packed side by side.

A batch of inputs of mixed lengths, padded to its longest, spends most of its encoder's work on padding (a
server's batch holds whatever requests arrived together; t2t-predict sorts by length, a server cannot wait
for that). Packing moves the rows into as few rows of the same width as hold them (first fit, longest first),
each token keeping its position within its own row, and lets a token attend only to the tokens of its own
row: T5's attention depends on relative positions only, so each row's encoder output is the one it gets
alone, and the work is the rows' tokens, not the batch's rectangle. The packed rows are as many as
:func:`row_bucket` says, and as wide as the batch or up to twice as wide in steps of ``WIDTH_STEP``, so the
kernels see few shapes (kernel libraries that keep a kernel per shape, as oneDNN does, would otherwise grow
for as long as a server runs); of those widths, the one whose rows hold fewest slots.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ROW_BUCKET = 4   # batches of rows are filled to a multiple of this (powers of two below it)
WIDTH_STEP = 16  # packed rows are the batch's width S, or wider by a multiple of this up to 2S


def row_bucket(count: int) -> int:
    """``count`` rows filled up to 1, 2, or a multiple of ``ROW_BUCKET``."""
    return 1 << (count - 1).bit_length() if count < ROW_BUCKET else -(-count // ROW_BUCKET) * ROW_BUCKET


@dataclass(frozen=True)
class PackedRows:
    tokens: torch.Tensor     # [R, W] the rows' tokens side by side, 0 after them
    positions: torch.Tensor  # [R, W] each token's position in its own row
    segments: torch.Tensor   # [R, W] 1 + the index of the token's row in the batch; 0 after the rows
    source: torch.Tensor     # [N] where each packed token is in the flattened batch [B * S]
    target: torch.Tensor     # [N] and where it is in the flattened packing [R * W]
    batch_shape: tuple[int, int]  # (B, S)

    def allowed(self, pad_id: int) -> torch.Tensor:
        """[R, W, W]: keys of the query's own row that are not padding (the mask the batch had)."""
        same_row = self.segments[:, :, None] == self.segments[:, None, :]
        return same_row & (self.tokens != pad_id)[:, None, :]

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """``packed`` [R, W, ...] back in the batch's layout [B, S, ...], zeros after each row's last token."""
        B, S = self.batch_shape
        out = packed.new_zeros(B * S, *packed.shape[2:])
        out.index_copy_(0, self.source, packed.flatten(0, 1).index_select(0, self.target))
        return out.view(B, S, *packed.shape[2:])


def pack_rows(tokens: torch.Tensor, pad_id: int) -> PackedRows | None:
    """The rows of ``tokens`` [B, S] (each up to its last token that is not ``pad_id``) packed into
    ``row_bucket`` rows of the width that needs the fewest slots; None when that saves no slot."""
    B, S = tokens.shape
    lengths = ((tokens != pad_id).long().cumsum(1).argmax(1) + 1).tolist()  # up to the last non-pad token
    best = fewest_slots(lengths, S, most=B * S - 1)
    if best is None:
        return None
    width, (packed_row, offset, rows) = best
    rows = row_bucket(rows)
    device = tokens.device
    valid = torch.arange(S, device=device) < torch.tensor(lengths, device=device)[:, None]
    row, column = valid.nonzero(as_tuple=True)
    source = row * S + column
    starts = torch.tensor(packed_row, device=device) * width + torch.tensor(offset, device=device)
    target = starts[row] + column

    def packed(values: torch.Tensor) -> torch.Tensor:
        flat = torch.zeros(rows * width, dtype=torch.long, device=device)
        return flat.index_copy_(0, target, values).view(rows, width)

    return PackedRows(packed(tokens.flatten()[source]), packed(column), packed(row + 1), source, target, (B, S))


def fewest_slots(lengths: list[int], S: int, most: int) -> tuple[int, tuple] | None:
    """``(width, first_fit(lengths, width))`` of the width (S to 2S) whose ``row_bucket`` rows hold fewest
    slots (the narrowest of equals), or None where none holds at most ``most``. A width whose rows cannot
    beat the best so far, even filled to the last slot, is not tried: a full batch costs no first fit, and
    one with little padding (t2t-predict's, sorted by length) few."""
    total, best = sum(lengths), None
    for width in range(S, 2 * S + 1, WIDTH_STEP):
        if row_bucket(-(-total // width)) * width > most:
            continue
        fit = first_fit(lengths, width)
        slots = row_bucket(fit[2]) * width
        if slots <= most:
            best, most = (width, fit), slots - 1
    return best


def first_fit(lengths: list[int], width: int) -> tuple[list[int], list[int], int]:
    """Each length's packed row and offset in it (first fit, longest first), and the number of rows."""
    fill: list[int] = []
    packed_row, offset = [0] * len(lengths), [0] * len(lengths)
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        r = next((r for r, used in enumerate(fill) if used + lengths[i] <= width), len(fill))
        if r == len(fill):
            fill.append(0)
        packed_row[i], offset[i] = r, fill[r]
        fill[r] += lengths[i]
    return packed_row, offset, len(fill)
