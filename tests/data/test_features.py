"""Feature converters: exact tensors for hand-made examples (seqio's documented examples where they exist)."""

import numpy as np
import pytest
import torch

from t2t.data.features import (
    DecoderOnlyLMFeatureConverter,
    EncDecFeatureConverter,
    Packer,
    PrefixLMFeatureConverter,
    get_converter,
    segments_and_starts,
)
from t2t.errors import T2TError

A = {"inputs": np.array([7, 8, 5, 1]), "targets": np.array([3, 9, 1])}
B = {"inputs": np.array([8, 4, 9, 3, 1]), "targets": np.array([4, 1])}


def as_lists(batch):
    assert all(v.dtype == torch.int64 for v in batch.values())
    return {k: v.tolist() for k, v in batch.items()}


def test_enc_dec_unpacked_pads_with_zero_and_shifts_the_row():
    out = as_lists(EncDecFeatureConverter(10, 7).convert([A, B], batch_size=3))
    assert out == {
        "encoder_input_tokens": [[7, 8, 5, 1, 0, 0, 0, 0, 0, 0], [8, 4, 9, 3, 1, 0, 0, 0, 0, 0], [0] * 10],
        "decoder_target_tokens": [[3, 9, 1, 0, 0, 0, 0], [4, 1, 0, 0, 0, 0, 0], [0] * 7],
        # seqio / HF _shift_right: the whole row moves right, so the EOS lands on the first padding slot
        "decoder_input_tokens": [[0, 3, 9, 1, 0, 0, 0], [0, 4, 1, 0, 0, 0, 0], [0] * 7],
        "decoder_loss_weights": [[1, 1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0], [0] * 7],
    }


def test_enc_dec_packed_matches_seqio_docstring_example():
    out = as_lists(EncDecFeatureConverter(10, 7, pack=True).convert([A, B], batch_size=1))
    assert out == {
        "encoder_input_tokens": [[7, 8, 5, 1, 8, 4, 9, 3, 1, 0]],
        "encoder_segment_ids": [[1, 1, 1, 1, 2, 2, 2, 2, 2, 0]],
        "encoder_positions": [[0, 1, 2, 3, 0, 1, 2, 3, 4, 0]],
        "decoder_target_tokens": [[3, 9, 1, 4, 1, 0, 0]],
        "decoder_input_tokens": [[0, 3, 9, 0, 4, 0, 0]],   # 0 at each segment start
        "decoder_loss_weights": [[1, 1, 1, 1, 1, 0, 0]],
        "decoder_segment_ids": [[1, 1, 1, 2, 2, 0, 0]],
        "decoder_positions": [[0, 1, 2, 0, 1, 0, 0]],
    }


def test_packing_is_first_fit_and_segments_restart_per_row():
    conv = EncDecFeatureConverter(6, 4, pack=True)
    ex = [{"inputs": np.arange(1, n + 1), "targets": np.arange(10, 10 + m)} for n, m in
          [(4, 2), (3, 2), (2, 1), (1, 1)]]
    # (4,2) row 0; (3,2) no room in row 0 (4+3 > 6) → row 1; (2,1) fits row 0; (1,1) fits row 1 (3+1, 2+1)
    out = as_lists(conv.convert(ex, batch_size=2))
    assert out["encoder_segment_ids"] == [[1, 1, 1, 1, 2, 2], [1, 1, 1, 2, 0, 0]]
    assert out["encoder_positions"] == [[0, 1, 2, 3, 0, 1], [0, 1, 2, 0, 0, 0]]
    assert out["encoder_input_tokens"] == [[1, 2, 3, 4, 1, 2], [1, 2, 3, 1, 0, 0]]
    assert out["decoder_target_tokens"] == [[10, 11, 10, 0], [10, 11, 10, 0]]
    assert out["decoder_input_tokens"] == [[0, 10, 0, 0], [0, 10, 0, 0]]
    assert out["decoder_segment_ids"] == [[1, 1, 2, 0], [1, 1, 2, 0]]
    assert out["decoder_positions"] == [[0, 1, 0, 0], [0, 1, 0, 0]]
    assert out["decoder_loss_weights"] == [[1, 1, 1, 0], [1, 1, 1, 0]]


def test_packer_reports_overflow_without_changing_the_batch():
    packer = EncDecFeatureConverter(10, 7, pack=True).packer(batch_size=1)
    assert packer.add(A) and packer.add(B)
    big = {"inputs": np.array([5, 1]), "targets": np.array([6, 6, 6, 1])}  # decoder has 2 free slots only
    assert not packer.add(big)
    assert len(packer) == 2
    out = as_lists(packer.flush())
    assert out["encoder_input_tokens"] == [[7, 8, 5, 1, 8, 4, 9, 3, 1, 0]]
    assert len(packer) == 0
    assert packer.add(big)  # the held-back example starts the next batch
    assert as_lists(packer.flush())["decoder_target_tokens"] == [[6, 6, 6, 1, 0, 0, 0]]


def test_unpacked_packer_takes_batch_size_examples():
    packer = Packer(EncDecFeatureConverter(4, 4), batch_size=2)
    assert packer.add(A) and packer.add(B) and not packer.add(A)
    with pytest.raises(T2TError, match="batch_size"):
        EncDecFeatureConverter(4, 4).convert([A, B, A], batch_size=2)


def test_long_examples_are_truncated():
    out = as_lists(EncDecFeatureConverter(3, 2).convert([A]))
    assert out["encoder_input_tokens"] == [[7, 8, 5]]
    assert out["decoder_target_tokens"] == [[3, 9]]
    assert out["decoder_input_tokens"] == [[0, 3]]


def test_batch_size_none_uses_as_many_rows_as_needed():
    out = EncDecFeatureConverter(5, 3, pack=True).convert([A, B, A])
    assert out["encoder_input_tokens"].shape == (3, 5)
    out = EncDecFeatureConverter(10, 7, pack=True).convert([A, B])
    assert out["encoder_input_tokens"].shape == (1, 10)
    # past the packer's first allocation of 16 rows: each pair A, B still shares one row
    out = EncDecFeatureConverter(10, 7, pack=True).convert([A, B] * 30)
    assert out["encoder_input_tokens"].shape == (30, 10)
    assert out["encoder_segment_ids"][29].tolist() == [1] * 4 + [2] * 5 + [0]


def test_decoder_only_lm_concatenates_and_weights_everything():
    out = as_lists(DecoderOnlyLMFeatureConverter(5, 4).convert([{"inputs": [9, 4, 6, 1], "targets": [3, 9, 1]}]))
    assert out == {
        "decoder_target_tokens": [[9, 4, 6, 1, 3, 9, 1, 0, 0]],
        "decoder_input_tokens": [[0, 9, 4, 6, 1, 3, 9, 1, 0]],
        "decoder_loss_weights": [[1, 1, 1, 1, 1, 1, 1, 0, 0]],
    }


def test_prefix_lm_unpacked_matches_seqio():
    out = as_lists(PrefixLMFeatureConverter(5, 4).convert([{"inputs": [9, 4, 6, 1], "targets": [3, 9, 1]}]))
    assert out == {
        "decoder_target_tokens": [[9, 4, 6, 1, 3, 9, 1, 0, 0]],
        "decoder_input_tokens": [[0, 9, 4, 6, 1, 3, 9, 1, 0]],
        "decoder_loss_weights": [[0, 0, 0, 0, 1, 1, 1, 0, 0]],
        "decoder_causal_attention": [[1, 1, 1, 1, 1, 0, 0, 0, 0]],
    }


def test_prefix_lm_packed_matches_seqio_docstring_example():
    out = as_lists(PrefixLMFeatureConverter(7, 8, pack=True).convert([A, B], batch_size=1))
    assert out == {
        "decoder_target_tokens": [[7, 8, 5, 1, 3, 9, 1, 8, 4, 9, 3, 1, 4, 1, 0]],
        "decoder_input_tokens": [[0, 7, 8, 5, 1, 3, 9, 0, 8, 4, 9, 3, 1, 4, 0]],
        "decoder_loss_weights": [[0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0]],
        "decoder_positions": [[0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6, 0]],
        "decoder_segment_ids": [[1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 0]],
        "decoder_causal_attention": [[1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0]],
    }


def test_get_converter_and_bad_settings():
    assert isinstance(get_converter("prefix_lm", 4, 4, pack=True), PrefixLMFeatureConverter)
    with pytest.raises(T2TError, match="architecture"):
        get_converter("encoder_only", 4, 4)
    with pytest.raises(T2TError, match="input_length"):
        EncDecFeatureConverter(0, 4)
    with pytest.raises(T2TError, match="batch_size"):
        Packer(EncDecFeatureConverter(4, 4), batch_size=0)
    with pytest.raises(T2TError, match="'targets'"):
        EncDecFeatureConverter(4, 4).convert([{"inputs": [1]}])


def test_packing_thousands_of_examples_places_every_token_once():
    # (its speed is measured by benchmarks/bench_pipeline.py, not asserted here: timings make CI flaky)
    rng = np.random.default_rng(0)
    examples = [{"inputs": rng.integers(3, 100, size=rng.integers(20, 200)),
                 "targets": rng.integers(3, 100, size=rng.integers(2, 30))} for _ in range(2000)]
    packer = EncDecFeatureConverter(512, 128, pack=True).packer(batch_size=8)
    batches = []
    for ex in examples:
        if not packer.add(ex):
            batches.append(packer.flush())
            assert packer.add(ex)
    batches.append(packer.flush())
    placed = sum(int((b["decoder_segment_ids"].max(dim=1).values).sum()) for b in batches)
    assert placed == 2000
    for key, feature in [("encoder_input_tokens", "inputs"), ("decoder_target_tokens", "targets")]:
        assert sum(int(b[key].count_nonzero()) for b in batches) == sum(len(ex[feature]) for ex in examples)


@pytest.mark.parametrize("architecture", ["encoder_decoder", "prefix_lm"])
@pytest.mark.parametrize("pack", [False, True])
def test_the_decoder_start_id_comes_from_the_model(architecture, pack):
    """The first decoder input of every example is the model's decoder_start_id, not a literal 0."""
    examples = [{"inputs": [5, 6, 1], "targets": [7, 1]}, {"inputs": [8, 1], "targets": [9, 10, 1]}]
    batch = get_converter(architecture, 6, 6, pack=pack, start_id=3).convert(examples, batch_size=1 if pack else 2)
    dec_in = batch["decoder_input_tokens"]
    if pack:
        segments = batch["decoder_segment_ids"][0]
        starts = [i for i in range(len(segments)) if segments[i] and (i == 0 or segments[i] != segments[i - 1])]
        assert len(starts) == 2 and all(int(dec_in[0, i]) == 3 for i in starts)
    else:
        assert dec_in[:, 0].tolist() == [3, 3]


def test_training_batches_start_the_decoder_with_the_models_start_id():
    from t2t.data.pipeline import build_train_batches
    from t2t.testing import in_memory_task, registered, tiny_vocabulary
    task = in_memory_task("start_id_task", {"train": [{"inputs": "a b", "targets": "c"}]})
    with registered(task):
        batch = next(iter(build_train_batches(task.name, vocab=tiny_vocabulary(), batch_size=2, input_length=8,
                                              target_length=4, pack=False, decoder_start_id=7)))
    assert batch["decoder_input_tokens"][:, 0].tolist() == [7, 7]


def _first_fit(sizes, capacity, batch_size, pack):
    """The rows of a run of examples placed one by one, and where each starts: the definition, in plain Python."""
    used, rows, starts = [], [], []
    for example in sizes:
        fits = [r for r, u in enumerate(used) if pack and all(a + b <= c for a, b, c in zip(u, example, capacity))]
        if fits:
            row = fits[0]
        elif batch_size is None or len(used) < batch_size:
            row = len(used)
            used.append([0] * len(capacity))
        else:
            break
        rows.append(row)
        starts.append(list(used[row]))
        used[row] = [a + b for a, b in zip(used[row], example)]
    return rows, starts


@pytest.mark.parametrize("architecture", ["encoder_decoder", "prefix_lm"])
@pytest.mark.parametrize("pack", [True, False])
@pytest.mark.parametrize("batch_size", [16, None])
def test_placing_a_run_of_examples_is_first_fit_one_by_one(architecture, pack, batch_size):
    """``place_many`` (bounds for the whole run, then a scan past the rows filled since) places every example
    where plain first fit puts it, stops at the first that does not fit, and the segments and starts written
    follow; placing them one at a time with ``place`` gives the same."""
    converter = get_converter(architecture, 40, 12, pack=pack)
    rng = np.random.default_rng(7)
    lengths = {"inputs": rng.integers(0, 41, 600) ** 2 // 40, "targets": rng.integers(1, 13, 600)}
    sizes = np.stack(converter.part_sizes(lengths), axis=1)  # many small examples, some of a whole row
    rows, starts = _first_fit(sizes.tolist(), converter.lengths(), batch_size, pack)
    assert (len(rows) == 600) == (batch_size is None)  # a bounded batch fills up
    together, one_by_one = Packer(converter, batch_size), Packer(converter, batch_size)
    placed = together.place_many(sizes[:250])
    assert placed + (together.place_many(sizes[250:]) if len(placed) == 250 else []) == rows
    assert [one_by_one.place(tuple(s)) for s in sizes[:len(rows)]] == rows
    if batch_size is not None:
        assert one_by_one.place(tuple(sizes[len(rows)])) is None and len(one_by_one) == len(rows)
    if pack:
        assert len(set(rows)) < len(rows)  # rows hold several examples: the scans were exercised
    examples = [{"inputs": np.full(min(i, 40), 3 + n % 50), "targets": np.full(t, 3 + n % 50)}
                for n, (i, t) in enumerate(zip(lengths["inputs"], lengths["targets"]))][:len(rows)]
    for n, example in enumerate(examples):
        together.attach(example, n)
    batch = together.flush()
    tokens = batch["decoder_target_tokens" if architecture == "prefix_lm" else "encoder_input_tokens"]
    for n, (row, start) in enumerate(zip(rows, starts)):
        size = sizes[n][0]
        assert torch.all(tokens[row, start[0]:start[0] + size] == 3 + n % 50), n
    assert int((tokens != 0).sum()) == int(sizes[:len(rows), 0].sum())


def test_segments_and_starts_follow_the_order_of_placement():
    rows = np.array([0, 1, 0, 2, 1, 0])
    sizes = np.array([[3, 1], [5, 2], [2, 2], [4, 1], [1, 1], [1, 3]])
    segments, starts = segments_and_starts(rows, sizes)
    assert segments.tolist() == [1, 1, 2, 1, 2, 3]
    assert starts.tolist() == [[0, 0], [0, 0], [3, 1], [0, 0], [5, 2], [5, 3]]


def test_a_packer_refuses_more_than_two_streams():
    class ThreeStreams(EncDecFeatureConverter):
        def lengths(self):
            return 4, 4, 4

    with pytest.raises(T2TError, match="one or two streams"):
        Packer(ThreeStreams(4, 4, pack=True), 2)
