"""build_train_batches / task.examples: determinism, exact resume (also packed), rank sharding, epochs,
trimming, caching, unavailable members — on in-memory tasks and the tiny vocabulary."""

import dataclasses
import functools
import json
import logging

import numpy as np
import pytest
import torch

from t2t import preprocessors
from t2t.data import tokenized
from t2t.data.pipeline import build_train_batches
from t2t.data.sources import GeneratorSource, JsonlFiles
from t2t.data.task import Mixture, Task, get_task
from t2t.errors import T2TError
from t2t.testing import in_memory_task, temporarily_registered, tiny_vocabulary

WORDS = "the harbour town woke slowly on the first cold morning of autumn fishermen pulled their boats".split()


def _rows(n, tag, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        k = int(rng.integers(1, 12))
        rows.append({"inputs": f"{tag} {i} " + " ".join(rng.choice(WORDS, k)), "targets": f"answer {i % 7}"})
    return rows


@pytest.fixture
def vocab():
    return tiny_vocabulary()


@pytest.fixture
def tasks():
    a = in_memory_task("pipe_a", {"train": _rows(23, "alpha", 1)})
    b = in_memory_task("pipe_b", {"train": _rows(61, "beta", 2)})
    mix = Mixture("pipe_mix", [("pipe_a", 1.0), ("pipe_b", 2.0)])
    with temporarily_registered(a, b, mix):
        yield a, b, mix


def _build(vocab, name="pipe_mix", **kw):
    args = dict(vocab=vocab, batch_size=4, input_length=64, target_length=32, pack=True, seed=3)
    args.update(kw)
    return build_train_batches(name, **args)


def _take(batches, n):
    it = iter(batches)
    return [next(it) for _ in range(n)]


def _same(xs, ys):
    return len(xs) == len(ys) and all(x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
                                      for x, y in zip(xs, ys))


def _decoded(vocab, examples):
    return [vocab.decode(e["inputs"]) for e in examples]


@pytest.mark.parametrize("pack", [False, True])
def test_deterministic_and_resumes_exactly(vocab, tasks, pack):
    one, two = _build(vocab, pack=pack), _build(vocab, pack=pack)
    assert _same(_take(one, 5), _take(two, 5))
    state = json.loads(json.dumps(one.state_dict()))  # JSON-able
    expected = _take(one, 30)  # crosses several epochs of pipe_a
    resumed = _build(vocab, pack=pack)
    resumed.load_state_dict(state)
    assert _same(_take(resumed, 30), expected)
    assert not _same(_take(_build(vocab, pack=pack, seed=4), 5), _take(_build(vocab, pack=pack), 5))


def test_packed_state_points_at_the_held_back_example(vocab, tasks):
    batches = _build(vocab, pack=True, target_length=32)
    first = _take(batches, 1)[0]
    n_segments = int(sum(first["encoder_segment_ids"][r].max() for r in range(4)))
    assert batches.state_dict()["sampler"]["position"] == n_segments
    assert n_segments > 4  # several short examples per row


def test_resume_with_random_token_preprocessor(vocab):
    def shuffle_tokens(features, rng, *, vocab, sequence_length):
        return {**features, "inputs": rng.permutation(features["inputs"])}

    task = in_memory_task("pipe_random", {"train": _rows(9, "gamma")}, token_preprocessors=[shuffle_tokens])
    with temporarily_registered(task):
        batches = _build(vocab, "pipe_random", pack=False)
        _take(batches, 2)
        state = batches.state_dict()
        expected = _take(batches, 8)
        resumed = _build(vocab, "pipe_random", pack=False)
        resumed.load_state_dict(state)
        assert _same(_take(resumed, 8), expected)
        # fresh noise per epoch: the same example is shuffled differently the next time it is drawn
        draws = _build(vocab, "pipe_random", pack=False).next_examples(18)
        firsts = {}
        for d in draws:
            key = tuple(sorted(d["inputs"].tolist()))
            firsts.setdefault(key, []).append(d["inputs"].tolist())
        assert any(len(v) == 2 and v[0] != v[1] for v in firsts.values())


def test_each_epoch_is_a_permutation_of_the_task(vocab, tasks):
    batches = _build(vocab, "pipe_a", pack=False)
    epochs = [_decoded(vocab, batches.next_examples(23)) for _ in range(2)]
    expected = sorted(vocab.decode(vocab.encode(r["inputs"])) for r in tasks[0].source.examples["train"])
    assert sorted(epochs[0]) == sorted(epochs[1]) == expected
    assert epochs[0] != epochs[1]


@pytest.mark.parametrize("architecture", ["encoder_decoder", "prefix_lm"])
@pytest.mark.parametrize("pack", [False, True])
def test_rank_batches_are_the_rows_of_one_packed_batch(vocab, tasks, pack, architecture):
    """Packing before sharding (as T5): the ranks' rows are exactly the rows one process packs."""
    single = _take(_build(vocab, pack=pack, batch_size=8, architecture=architecture), 4)
    ranks = [_build(vocab, pack=pack, batch_size=8, rank=r, world_size=2, architecture=architecture) for r in range(2)]
    assert [r.global_rows() for r in ranks] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    for step, (r0, r1) in enumerate(zip(_take(ranks[0], 4), _take(ranks[1], 4))):
        assert r0.keys() == single[step].keys() and r0["decoder_target_tokens"].shape[0] == 4
        for key, value in single[step].items():
            assert torch.equal(value[0::2], r0[key]) and torch.equal(value[1::2], r1[key]), key
    if pack:
        assert int(single[0]["decoder_segment_ids"].max()) > 1  # rows hold several examples


def _text_task(name, objective, token_preprocessors=None):
    from t2t.data.sources import InMemorySource
    from t2t.tasks.text_files import unsupervised_task

    texts = [{"text": " ".join(_rows(1, f"doc {i}", seed=i)[0].values())} for i in range(40)]
    task = unsupervised_task(name, InMemorySource({"train": texts}), objective)
    return task if token_preprocessors is None else dataclasses.replace(task, token_preprocessors=token_preprocessors)


def _count_draws(batches):
    drawn = []
    for stream in batches.streams.values():
        draw = stream.draw
        stream.draw = lambda count, draw=draw: drawn.append(count) or draw(count)
    return drawn


@pytest.mark.parametrize("objective, declared", [(preprocessors.span_corruption, True),
                                                 (preprocessors.prefix_lm, False)])
def test_ranks_draw_only_the_examples_of_their_rows_when_lengths_are_declared(vocab, objective, declared):
    """Every rank places every example of the global batch but, where the task declares its lengths (span
    corruption's are fixed, prefix LM's split point is drawn), draws only those that land in its rows; the rows
    are the same either way."""
    with temporarily_registered(_text_task("pipe_text", objective)):
        build = functools.partial(_build, vocab, name="pipe_text", batch_size=8, input_length=32, target_length=16)
        single = _take(build(), 3)
        ranks = [build(rank=r, world_size=4) for r in range(4)]
        drawn = [_count_draws(r) for r in ranks]
        for step, expected in enumerate(single):
            rows = [r.next_batch() for r in ranks]
            for r, got in enumerate(rows):
                for key, value in expected.items():
                    assert torch.equal(value[r::4], got[key]), (step, r, key)
        placed = sum(int(b["encoder_segment_ids"].max(dim=1).values.sum()) for b in single)
        in_rows = [sum(int(b["encoder_segment_ids"][r::4].max(dim=1).values.sum()) for b in single) for r in range(4)]
        assert sum(in_rows) == placed
        if declared:
            assert [len(d) for d in drawn] == in_rows
        else:  # each rank draws every example it places (and the one held back for the next batch)
            assert all(len(d) >= placed for d in drawn)


@pytest.fixture
def every_kind_of_member(vocab, tasks):
    """A mixture of a cached task without token preprocessors, one whose objective declares its lengths (span
    corruption), one whose objective draws them (prefix LM) and a streaming source."""
    rows = _rows(9, "stream")
    members = [_text_task("pipe_spans", preprocessors.span_corruption),
               _text_task("pipe_prefix", preprocessors.prefix_lm),
               Task("pipe_streamed", GeneratorSource(lambda split: iter(rows), streaming=True))]
    mixture = Mixture("pipe_every_kind", [("pipe_a", 1.0), ("pipe_spans", 1.0), ("pipe_prefix", 1.0),
                                          ("pipe_streamed", 1.0)])
    with temporarily_registered(*members, mixture):
        yield mixture.name


def test_declared_lengths_are_the_lengths_drawn(vocab, every_kind_of_member):
    """What a task stream says of its draws' lengths without drawing them, over three epochs: exact where its
    token preprocessors declare them (or it has none), -1 where they draw them, None for a streaming source."""
    streams = _build(vocab, every_kind_of_member, input_length=24, target_length=12).streams
    for name, expected in [("pipe_a", "drawn"), ("pipe_spans", "drawn"), ("pipe_prefix", -1), ("pipe_streamed", None)]:
        stream = streams[name]
        if expected is None:
            assert stream.declared_lengths(np.arange(5)) is None
            continue
        counts = np.arange(3 * len(stream.data))[::-1].copy()  # epochs out of order, each example three times
        lengths = stream.declared_lengths(counts)
        for key in ("inputs", "targets"):
            drawn = [len(stream.draw(int(c))[key]) for c in counts] if expected == "drawn" else [-1] * len(counts)
            assert lengths[key].tolist() == drawn, (name, key)
        if name == "pipe_spans":
            assert any(len(stream.draw(0)["inputs"]) != len(stream.draw(c)["inputs"]) for c in counts)


def _packed_one_by_one(batches, n):
    """``n`` batches by the definition: the global stream's examples (``next_examples``) added one at a time to a
    packer, the one that does not fit starting the next batch."""
    packer, out, held = batches.converter.packer(batches.batch_size), [], None
    while len(out) < n:
        example = held or batches.next_examples(1)[0]
        held = None
        if not packer.add(example):
            out.append(packer.flush())
            held = example
    return out


@pytest.mark.parametrize("architecture", ["encoder_decoder", "prefix_lm"])
@pytest.mark.parametrize("pack", [True, False])
@pytest.mark.parametrize("lookahead", [512, 5])
def test_batches_are_the_stream_packed_one_example_at_a_time(vocab, every_kind_of_member, pack, architecture,
                                                              lookahead):
    """Examples whose lengths are declared are placed a run at a time from their declared lengths, the others
    drawn first and placed one by one: the batches are those of placing every example in turn (also when the
    positions looked ahead end often, inside batches and at undeclared examples)."""
    build = functools.partial(_build, vocab, every_kind_of_member, batch_size=6, input_length=40, target_length=16,
                              pack=pack, architecture=architecture)
    batches = build()
    batches.LOOKAHEAD = lookahead
    expected = _packed_one_by_one(build(), 12)
    assert _same(_take(batches, 12), expected)
    assert {name: count > 0 for name, count in batches.sampler.counters.items()} == dict.fromkeys(batches.streams, True)


def test_a_token_preprocessor_whose_declared_lengths_are_wrong_is_named(vocab):
    def lying(features, rng, *, vocab, sequence_length):
        return preprocessors.denoise(features, rng, vocab=vocab, sequence_length=sequence_length)

    lying.output_lengths = lambda lengths: {**lengths, "inputs": 3, "targets": 2}
    with temporarily_registered(_text_task("pipe_lying", preprocessors.span_corruption, (lying,))):
        with pytest.raises(T2TError, match="output_lengths"):
            _build(vocab, name="pipe_lying", batch_size=8, input_length=32, target_length=16, rank=0,
                   world_size=2).next_batch()


def test_data_state_is_global_and_resumes_with_another_process_count(vocab, tasks):
    two = [_build(vocab, batch_size=8, rank=r, world_size=2) for r in range(2)]
    for r in two:
        _take(r, 2)
    assert two[0].state_dict() == two[1].state_dict()
    single = _build(vocab, batch_size=8)
    single.load_state_dict(json.loads(json.dumps(two[1].state_dict())))
    expected = _take(_build(vocab, batch_size=8), 3)[2]
    assert _same([next(iter(single))], [expected])
    with pytest.raises(T2TError, match="seed"):
        _build(vocab, seed=9).load_state_dict(two[0].state_dict())


def test_single_process_state_of_the_per_rank_format_still_loads(vocab, tasks):
    batches = _build(vocab)
    _take(batches, 2)
    state = batches.state_dict()
    old = {**{k: v for k, v in state.items() if k not in ("sampler", "streams")}, "format": "t2t.data.pipeline/1",
           "world_size": 1, "ranks": {"0": {"sampler": state["sampler"], "streams": state["streams"]}}}
    resumed = _build(vocab)
    resumed.load_state_dict(old)
    assert _same(_take(resumed, 3), _take(batches, 3))
    with pytest.raises(T2TError, match="2 processes that each packed their own rows"):
        _build(vocab).load_state_dict({**old, "world_size": 2})


def test_bad_layouts(vocab, tasks):
    with pytest.raises(T2TError, match="multiple"):
        _build(vocab, batch_size=5, world_size=2)
    with pytest.raises(T2TError, match="rank"):
        _build(vocab, rank=2, world_size=2)


def test_trimming_keeps_eos_last_and_warns_once_with_count(vocab, caplog):
    rows = [{"inputs": "word " * 80, "targets": "short"}, {"inputs": "tiny", "targets": "short"},
            {"inputs": "word " * 90, "targets": "short"}]
    with temporarily_registered(in_memory_task("pipe_long", {"train": rows})):
        with caplog.at_level(logging.WARNING, logger="t2t.data.pipeline"):
            examples = _build(vocab, "pipe_long", pack=False).next_examples(6)
    warnings = [r.getMessage() for r in caplog.records if "trimmed" in r.getMessage()]
    assert len(warnings) == 1 and "2 of 3 train examples" in warnings[0]
    for e in examples:
        assert len(e["inputs"]) <= 64 and e["inputs"][-1] == vocab.eos_id
    assert sorted(len(e["inputs"]) for e in examples)[-1] == 64


def test_tokenized_once_across_epochs(vocab, monkeypatch):
    calls = []
    original = type(vocab).encode_batch

    def counting(self, texts):
        texts = list(texts)
        calls.append(len(texts))
        return original(self, texts)

    monkeypatch.setattr(type(vocab), "encode_batch", counting)
    tokenized.clear_cache()
    with temporarily_registered(in_memory_task("pipe_cache", {"train": _rows(10, "delta")})):
        batches = _build(vocab, "pipe_cache", pack=False)
        after_build = len(calls)
        batches.next_examples(35)  # three and a half epochs
        assert len(calls) == after_build == 2  # inputs and targets, one batch call each
        from t2t.data.task import get_task
        get_task("pipe_cache").examples("train", vocab)  # evaluation reuses the same cache
        assert len(calls) == 2


def test_missing_members_error_or_skip(vocab, tmp_path, caplog):
    ok = in_memory_task("pipe_ok", {"train": _rows(5, "ok")})
    gone = Task("pipe_gone", JsonlFiles({"train": "gone/train.jsonl"}))
    gone2 = Task("pipe_gone2", JsonlFiles({"train": "gone2/train.jsonl"}))
    mix = Mixture("pipe_partial", [("pipe_ok", 1.0), ("pipe_gone", 5.0), ("pipe_gone2", 1.0)])
    with temporarily_registered(ok, gone, gone2, mix):
        with pytest.raises(T2TError, match=r"missing for 2 task\(s\) of 'pipe_partial': pipe_gone, pipe_gone2"):
            _build(vocab, "pipe_partial", data_dir=tmp_path)
        with caplog.at_level(logging.WARNING, logger="t2t.data.pipeline"):
            batches = _build(vocab, "pipe_partial", data_dir=tmp_path, skip_unavailable=True)
        assert batches.rates == {"pipe_ok": 1.0}
        messages = " ".join(r.getMessage() for r in caplog.records)
        assert "skipping pipe_gone of pipe_partial" in messages and "skipping pipe_gone2" in messages
        assert _take(batches, 1)[0]["encoder_input_tokens"].shape == (4, 64)


def test_zero_rate_members_are_not_loaded(vocab):
    ok = in_memory_task("pipe_ok2", {"train": _rows(5, "ok")})
    eval_only = in_memory_task("pipe_eval_only", {"validation": _rows(2, "ev")})
    with temporarily_registered(ok, eval_only, Mixture("pipe_with_eval", [("pipe_ok2", 1.0), ("pipe_eval_only", 0.0)])):
        assert _build(vocab, "pipe_with_eval").rates == {"pipe_ok2": 1.0}


def test_streaming_source_shuffled_in_its_buffer_per_seed_and_epoch_and_resumable(vocab):
    """seqio shuffles every task it trains on in a buffer of 1000 examples: an epoch of a streaming source is
    its examples in a seeded order (the whole epoch here, being shorter than the buffer), another each epoch
    and seed, and a resumed stream gives what the uninterrupted one does."""
    rows = _rows(7, "stream")
    task = Task("pipe_stream", GeneratorSource(lambda split: iter(rows), streaming=True))
    expected = [vocab.decode(vocab.encode(r["inputs"])) for r in rows]
    with temporarily_registered(task):
        batches = _build(vocab, "pipe_stream", pack=False)
        drawn = _decoded(vocab, batches.next_examples(14))
        state = batches.state_dict()
        more = _decoded(vocab, batches.next_examples(9))
        resumed = _build(vocab, "pipe_stream", pack=False)
        resumed.load_state_dict(state)
        assert _decoded(vocab, resumed.next_examples(9)) == more
        other_seed = _decoded(vocab, _build(vocab, "pipe_stream", pack=False, seed=4).next_examples(7))
    first, second = drawn[:7], drawn[7:]
    assert sorted(first) == sorted(second) == sorted(other_seed) == sorted(expected)
    assert len({tuple(expected), tuple(first), tuple(second), tuple(other_seed)}) == 4


def test_shuffle_buffer_draws_each_item_once_from_the_next_size_items():
    from t2t.data.mixing import shuffled_in_buffer

    out = list(shuffled_in_buffer(range(100), 10, np.random.default_rng(0)))
    assert sorted(out) == list(range(100)) and out != list(range(100))
    assert all(item < position + 10 for position, item in enumerate(out))  # never from beyond the buffer
    assert list(shuffled_in_buffer(range(5), 10, np.random.default_rng(0))) != list(range(5))


def test_a_streaming_run_saved_before_the_shuffle_buffer_resumes_in_source_order(vocab):
    rows = _rows(7, "stream")
    task = Task("pipe_stream_old", GeneratorSource(lambda split: iter(rows), streaming=True))
    with temporarily_registered(task):
        batches = _build(vocab, "pipe_stream_old", pack=False)
        batches.next_examples(3)
        state = batches.state_dict()
        for stream in state["streams"].values():
            del stream["shuffle_buffer"]
        resumed = _build(vocab, "pipe_stream_old", pack=False)
        resumed.load_state_dict(state)
        expected = [vocab.decode(vocab.encode(r["inputs"])) for r in rows]
        assert _decoded(vocab, resumed.next_examples(4)) == expected[3:]


def test_ranks_of_a_streaming_source_keep_the_rows_of_one_process(vocab):
    """A streaming source is read in order by every rank (placing each example) across epochs."""
    rows = _rows(7, "stream")
    task = Task("pipe_stream_ranks", GeneratorSource(lambda split: iter(rows), streaming=True))
    with temporarily_registered(task):
        single = _take(_build(vocab, "pipe_stream_ranks", batch_size=4), 6)
        ranks = [_build(vocab, "pipe_stream_ranks", batch_size=4, rank=r, world_size=2) for r in range(2)]
        for expected in single:
            for r, rank in enumerate(ranks):
                got = rank.next_batch()
                assert all(torch.equal(expected[key][r::2], got[key]) for key in expected)
        assert sum(int(b["encoder_segment_ids"].max(dim=1).values.sum()) for b in single) > 2 * len(rows)


def test_tokenized_stage_gets_vocab_and_lengths(vocab):
    from t2t.data.preprocessors import concat_and_split

    seen = {}

    def chunks(examples, *, vocab, sequence_length):
        seen.update(sequence_length)
        return concat_and_split(examples, vocab=vocab, sequence_length=sequence_length,
                                length=lambda sl: sl["targets"] - 1)

    task = in_memory_task("pipe_chunks", {"train": [{"targets": "word " * 90}, {"targets": "more words"}]},
                          tokenized_preprocessors=[chunks])
    with temporarily_registered(task):
        examples = _build(vocab, "pipe_chunks", pack=False).next_examples(3)
    assert seen == {"inputs": 64, "targets": 32}
    assert all(len(e["targets"]) <= 32 and e["targets"][-1] == vocab.eos_id for e in examples)
    assert all(len(e["inputs"]) == 0 for e in examples)  # optional feature absent → empty


def _expand(ex):
    """One example per word of the target (0 to 3), as ReCoRD gives one per answer."""
    return [{"inputs": f"{ex['inputs']} {word}", "targets": word} for word in ex["targets"].split()[1:]]


@pytest.mark.parametrize("streaming", [False, True])
def test_one_to_many_task_epochs_and_resume(vocab, streaming):
    rows = [{"inputs": f"row {i}", "targets": "w " + " ".join(WORDS[i:i + i % 4])} for i in range(9)]
    expanded = [f"row {i} {w}" for i in range(9) for w in WORDS[i:i + i % 4]]  # 9 rows -> 12 examples
    assert len(expanded) == 12
    source = GeneratorSource(lambda split: iter(rows), streaming=streaming)
    with temporarily_registered(Task("pipe_expand", source, preprocessors=[_expand])):
        batches = _build(vocab, "pipe_expand", pack=False)
        epoch = _decoded(vocab, batches.next_examples(12))
        round_trip = [vocab.decode(vocab.encode(text)) for text in expanded]
        assert sorted(epoch) == sorted(round_trip)
        state = json.loads(json.dumps(batches.state_dict()))
        more = _decoded(vocab, batches.next_examples(17))  # crosses into the third epoch
        resumed = _build(vocab, "pipe_expand", pack=False)
        resumed.load_state_dict(state)
        assert _decoded(vocab, resumed.next_examples(17)) == more
        if not streaming:  # evaluation sees the expanded examples in source order
            evaluated = get_task("pipe_expand").examples("train", vocab)
            assert [e["inputs_pretokenized"] for e in evaluated] == expanded


def _budget_prefix(vocab, rows, max_tokens):
    """The rows (source order) whose inputs+targets tokens, EOS excluded, fit in max_tokens — by hand."""
    kept, used = [], 0
    for row in rows:
        used += len(vocab.encode(row["inputs"])) + len(vocab.encode(row["targets"]))
        if used > max_tokens:
            break
        kept.append(vocab.decode(vocab.encode(row["inputs"])))
    return kept


@pytest.mark.parametrize("streaming", [False, True])
def test_max_tokens_repeats_the_same_prefix_and_resumes(vocab, streaming, caplog):
    rows = _rows(40, "data")
    task = Task("pipe_budget", GeneratorSource(lambda split: iter(rows), streaming=streaming))
    prefix = _budget_prefix(vocab, rows, 120)
    assert 2 < len(prefix) < 20
    with temporarily_registered(task):
        caplog.set_level(logging.INFO)
        batches = _build(vocab, "pipe_budget", pack=False, max_tokens=120)
        n = len(prefix)
        drawn = _decoded(vocab, batches.next_examples(3 * n))
        for epoch in range(3):  # every repeat holds exactly the prefix
            assert sorted(drawn[epoch * n:(epoch + 1) * n]) == sorted(prefix)
        assert "repeat 2 of its first 120 tokens" in caplog.text
        state = batches.state_dict()
        more = _decoded(vocab, batches.next_examples(n + 2))
        resumed = _build(vocab, "pipe_budget", pack=False, max_tokens=120)
        resumed.load_state_dict(state)
        assert _decoded(vocab, resumed.next_examples(n + 2)) == more


def test_max_tokens_below_the_first_example_is_one_sentence(vocab):
    task = in_memory_task("pipe_budget_small", {"train": _rows(5, "data")})
    with temporarily_registered(task), pytest.raises(T2TError, match="max_tokens 2 is smaller than the first example"):
        _build(vocab, "pipe_budget_small", max_tokens=2)
