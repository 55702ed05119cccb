"""Encoding a padded batch packed side by side (t2t.models.packed_rows): the batch's encoder output, the same
decodes and scores, less work, and few shapes."""

import pytest
import torch
from test_model import TINY

from t2t.models import packed_rows
from t2t.models.packed_rows import ROW_BUCKET, WIDTH_STEP, pack_rows, row_bucket
from t2t.models.t5 import T5, ModelConfig

LENGTHS = [48, 1, 30, 7, 17, 12, 5, 40, 3, 22, 9, 14]  # 48 = S: one row fills the batch's width


def ragged(lengths=LENGTHS, S=48, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.zeros(len(lengths), S, dtype=torch.long)
    for row, n in enumerate(lengths):
        tokens[row, :n] = torch.randint(2, TINY["vocab_size"], (n,), generator=g)
    tokens[2, 10] = 0  # padding inside a row: a key no token may attend to, in the batch and packed
    return tokens


def model(seed=0, **overrides) -> T5:
    torch.manual_seed(seed)
    return T5(ModelConfig(**{**TINY, **overrides})).eval()


def test_packing_puts_each_row_whole_in_fewer_bucketed_rows():
    tokens = ragged()
    packed = pack_rows(tokens, pad_id=0)
    rows, width = packed.tokens.shape
    assert rows * width < tokens.numel()  # less work than the batch's rectangle
    assert rows == row_bucket(rows) and rows < len(LENGTHS)
    assert width in range(48, 97, WIDTH_STEP)
    for b, n in enumerate(LENGTHS):
        where = packed.segments == b + 1
        assert where.sum() == n
        assert torch.equal(packed.tokens[where], tokens[b, :n])        # the row's tokens, in order
        assert torch.equal(packed.positions[where], torch.arange(n))   # at their own positions
        r = where.nonzero()[:, 0]
        assert (r == r[0]).all()                                       # side by side in one packed row


def test_row_buckets():
    assert [row_bucket(n) for n in range(1, 10)] == [1, 2, 4, 4, 8, 8, 8, 8, 12]
    assert all(row_bucket(n) % ROW_BUCKET == 0 for n in range(ROW_BUCKET, 100))


def test_a_batch_without_room_to_save_is_left_as_it_is():
    assert pack_rows(ragged([20, 19, 20, 18], S=20), pad_id=0) is None


@pytest.mark.parametrize("ff", ["relu", "gated-gelu"])
def test_packed_encoding_is_the_batch_encoding(ff):
    m, tokens = model(feed_forward_proj=ff), ragged()
    with torch.no_grad():
        encoded, unpack = m.encode_rows(tokens)
        expected = m.encode(tokens)
    assert encoded.shape[0] * encoded.shape[1] < tokens.numel()
    got = unpack(encoded)
    inside = torch.arange(48) < torch.tensor(LENGTHS)[:, None]  # each row up to its last token
    torch.testing.assert_close(got[inside], expected[inside])  # fp32 to rounding: other GEMM shapes, same sums
    assert (got[~inside] == 0).all()


def decodes(m, tokens):
    with torch.no_grad():
        return (m.generate(tokens, max_new_tokens=6), m.generate(tokens, max_new_tokens=6, num_beams=3),
                m.score(tokens, tokens[:, :5].clamp(min=1)))


def test_decodes_and_scores_do_not_depend_on_packing(monkeypatch):
    m, tokens = model(seed=1), ragged(seed=1)
    greedy, beams, scores = decodes(m, tokens)
    monkeypatch.setattr(packed_rows, "first_fit", lambda lengths, width: (list(range(len(lengths))),
                                                                          [0] * len(lengths), len(lengths)))
    assert pack_rows(tokens, 0) is None  # one row per row: no packing
    unpacked_greedy, unpacked_beams, unpacked_scores = decodes(m, tokens)
    assert torch.equal(greedy, unpacked_greedy) and torch.equal(beams, unpacked_beams)
    torch.testing.assert_close(scores, unpacked_scores)
