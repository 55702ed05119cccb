"""UL2's mixture of denoisers (t2t.data.ul2): the paper's mixture, each denoiser at its share with its mode token
and its span statistics, chunks that no denoiser overflows, packing, the registered tasks and exact resume."""

import collections
import json
import math

import numpy as np
import pytest

import t2t
from t2t import config
from t2t.data import objectives as ob
from t2t.data import ul2
from t2t.data.pipeline import build_train_batches
from t2t.data.task import get_task
from t2t.data.vocab import SentencePieceVocabulary, train_vocabulary
from t2t.errors import T2TError
from t2t.tasks import c4 as c4_module
from t2t.testing import TINY_TEXT, TINY_VOCAB_PIECES, tiny_vocabulary
from t2t.training import train as train_module
from t2t.training.train import TrainConfig, train

TINY_MODEL = dict(vocab_size=512, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, dropout_rate=0.1)

DRAWS = 10_000
LENGTHS = {"inputs": 512, "targets": 512}  # the paper's (UL2 20B trains 512/512)
SENTINELS = 100
STATS_LENGTH = 564  # the R-denoiser (μ=3, r=.15)'s text at 512/512 with T5's vocabulary: under 100 spans for all


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    """A small SentencePiece vocabulary that can spell the mode tokens (the tiny test one has no ``[``)."""
    text = TINY_TEXT + "\n[NLU] [NLG] [S2S]" * 20
    model = train_vocabulary(iter([text]), tmp_path_factory.mktemp("ul2_vocab") / "spm", vocab_size=TINY_VOCAB_PIECES,
                             num_threads=1, character_coverage=1.0)
    return SentencePieceVocabulary(model, SENTINELS)


#: §3.1.2's final mixture as (kind, mode token, μ, r), equal shares: what the draws below are read against
PAPER = [("R", "[NLU]", 3.0, 0.15), ("R", "[NLU]", 8.0, 0.15), ("S", "[S2S]", None, 0.25), ("X", "[NLG]", 3.0, 0.5),
         ("X", "[NLG]", 8.0, 0.5), ("X", "[NLG]", 64.0, 0.15), ("X", "[NLG]", 64.0, 0.5)]


def test_the_mixture_is_the_papers():
    """R (μ=3, r=.15), (μ=8, r=.15); S (r=.25); X (μ=3, r=.5), (μ=8, r=.5), (μ=64, r=.15), (μ=64, r=.5);
    R speaks [NLU], X [NLG], S [S2S]; equal shares."""
    got = [(d.kind, d.mode, d.mean_noise_span_length, d.noise_density) for d in ul2.UL2_DENOISERS]
    assert got == PAPER and {d.share for d in ul2.UL2_DENOISERS} == {1.0}
    assert t2t.get_objective("mixture_of_denoisers").func is ul2.ul2


def paper_counts(length: int, mean_span: float, rate: float) -> tuple[int, int]:
    """(noise tokens, noise spans) of a span denoiser on ``length`` tokens: round(L·r), round(that / μ)."""
    noise = round(length * rate)
    return noise, max(1, round(noise / mean_span))


@pytest.fixture(scope="module")
def draws(vocab):
    """10,000 UL2 examples of one text of 564 tokens, each read back from its output alone:
    the mode token at the start of the inputs says R, X or S; a span denoiser's numbers of noise tokens and of
    spans, which t5's mask fixes for each (μ, r) at one length, say which one."""
    length = STATS_LENGTH
    tokens = np.random.default_rng(0).integers(3, vocab.vocab_size - SENTINELS, size=length)
    modes = {m: np.asarray(vocab.encode(m)) for m in (ul2.R_MODE, ul2.X_MODE, ul2.S_MODE)}
    by_counts = {(mode, paper_counts(length, mean, rate)): i for i, (kind, mode, mean, rate) in enumerate(PAPER)
                 if kind != "S"}
    assert len(by_counts) == 6  # the six span denoisers are told apart by their counts
    rng, seen = np.random.default_rng(1), collections.defaultdict(list)
    for _ in range(DRAWS):
        out = ul2.ul2(tokens, vocab_size=vocab.vocab_size, rng=rng, vocab=vocab)
        mode = next(m for m, ids in modes.items() if np.array_equal(out["inputs"][:ids.size], ids))
        inputs, targets = out["inputs"][modes[mode].size:], out["targets"]
        if mode == ul2.S_MODE:
            np.testing.assert_array_equal(np.concatenate([inputs, targets]), tokens)  # a prefix and its rest
            seen[2].append(targets.size)
            continue
        spans = int(np.sum(targets >= vocab.vocab_size - SENTINELS))
        index = by_counts[(mode, (targets.size - spans, spans))]
        if len(seen[index]) < 100:  # the first draws of each: the text comes back whole
            np.testing.assert_array_equal(ob.restore_from_span_corruption(inputs, targets, vocab.vocab_size), tokens)
        seen[index].append((targets.size - spans, spans))
    return {"length": length, "seen": seen}


def test_each_denoiser_is_drawn_at_its_share(draws):
    """Within 3 standard errors of 1/7 over 10,000 draws (and only from the mode tokens and counts above)."""
    p = 1 / len(PAPER)
    tolerance = 3 * math.sqrt(p * (1 - p) / DRAWS)
    shares = {i: len(v) / DRAWS for i, v in draws["seen"].items()}
    assert sum(len(v) for v in draws["seen"].values()) == DRAWS
    assert all(abs(shares.get(i, 0.0) - p) <= tolerance for i in range(7)), (shares, tolerance)


def test_span_denoisers_corrupt_at_their_rate_in_spans_of_their_mean_length(draws):
    """Every draw of a span denoiser has round(L·r) noise tokens in round(L·r/μ) spans (t5's mask fixes the
    counts), so its corruption rate is r within 0.5/L and its mean span length μ within 0.5·μ/spans (the
    rounding of the span count is all that separates them)."""
    length = draws["length"]
    for index, (kind, _, mean, rate) in enumerate(PAPER):
        if kind == "S":
            continue
        (noise, spans), = set(draws["seen"][index])
        assert (noise, spans) == paper_counts(length, mean, rate)
        assert abs(noise / length - rate) <= 0.5 / length + 1e-12, (mean, rate)
        assert abs(noise / spans - mean) <= 0.5 * mean / spans + 1e-12, (mean, rate)


def test_the_s_denoiser_makes_its_last_quarter_the_targets(draws):
    """The S-denoiser's one span ends the text; its share of the chunk is r = 0.25 on average (within 3
    standard errors of its draws) and varies from draw to draw, between 1 token and half the chunk."""
    length = draws["length"]
    shares = np.array(draws["seen"][2]) / length
    tolerance = 3 * shares.std() / math.sqrt(shares.size)
    assert abs(shares.mean() - 0.25) <= tolerance + 0.5 / length, (shares.mean(), tolerance)
    assert shares.min() * length == 1 and shares.max() * length <= 2 * round(length / 4) - 1
    assert shares.max() > 0.45


class EdgeRng:
    """A stand-in generator for one denoiser: draws the lowest or highest integer allowed (the S-denoiser's
    shortest and longest targets), and t5's random span placement from a real generator."""

    def __init__(self, highest: bool):
        self.highest, self.real = highest, np.random.default_rng(0)

    def choice(self, n, *args, **kwargs):
        return self.real.choice(n, *args, **kwargs)

    def integers(self, low, high=None, *args, **kwargs):
        if kwargs.get("size") is not None or args:
            return self.real.integers(low, high, *args, **kwargs)
        return high - 1 if self.highest else low


def overflows(vocab, lengths: dict, length: int, denoisers=ul2.UL2_DENOISERS, **window) -> bool:
    """Whether a denoiser, at either edge of its draws, makes a ``length``-token chunk into more than ``lengths``
    (mode token and EOS counted); ``window`` passes the run's lengths to the objective."""
    tokens = np.random.default_rng(length).integers(3, 300, size=length)
    for d in denoisers:
        for highest in (False, True):
            out = ul2.ul2(tokens, vocab_size=vocab.vocab_size, rng=EdgeRng(highest), vocab=vocab, denoisers=[d],
                          **window)
            if out["inputs"].size + 1 > lengths["inputs"] or out["targets"].size + 1 > lengths["targets"]:
                return True
    return False


@pytest.mark.parametrize("lengths", [LENGTHS, {"inputs": 512, "targets": 114}, {"inputs": 64, "targets": 64}])
def test_no_draw_overflows_and_each_denoisers_window_is_the_longest_that_fits(vocab, lengths):
    """Each denoiser's window fits the lengths at either edge of its draws, one token more does not; the chunk is
    the longest window, and every chunk up to it (the text's last one is shorter) makes draws that fit whole."""
    windows = []
    for d in ul2.UL2_DENOISERS:
        window = ul2.denoiser_length(d, lengths["inputs"] - 1 - len(vocab.encode(d.mode)), lengths["targets"] - 1)
        assert not any(overflows(vocab, lengths, n, [d]) for n in range(max(window - 2, 1), window + 1)), d
        assert overflows(vocab, lengths, window + 1, [d]), d
        windows.append(window)
    chunk = ob.chunk_length(lengths, objective=ul2.ul2, vocab=vocab)
    assert chunk == max(windows)
    for n in sorted({1, 2, 3, *range(4, chunk, 29), chunk}):
        assert not overflows(vocab, lengths, n, sequence_length=lengths), (lengths, n)


def test_with_t5s_vocabulary_span_denoisers_fill_the_inputs_as_the_appendix_code_cuts(t5_vocab_path):
    """T5's SentencePiece spells [NLU] and [NLG] in 4 pieces, [S2S] in 5 (as the released UL2 is prompted). At
    512/512 each span denoiser's window is what t5's random_spans_helper cuts for the inputs left after the mode
    token (the appendix code's per-denoiser lengths; at r=0.5 t5 shaves one more token), so its draws' inputs
    are exactly 512 with EOS: 564 tokens for (μ=3, r=.15), T5's 568 less [NLU]; the chunk is the longest window,
    999 tokens for (μ=64, r=.5)."""
    vocab = SentencePieceVocabulary(t5_vocab_path, extra_ids=SENTINELS)
    assert [len(vocab.encode(m)) for m in (ul2.R_MODE, ul2.X_MODE, ul2.S_MODE)] == [4, 4, 5]
    chunk = ob.chunk_length(LENGTHS, objective=ul2.ul2, vocab=vocab)
    assert chunk == 999 and ul2.denoiser_length(ul2.UL2_DENOISERS[0], 511 - 4, 511) == 564
    tokens = np.random.default_rng(0).integers(3, 32000, size=chunk)
    for d in ul2.UL2_DENOISERS:
        if d.kind == "S":
            continue
        mode = len(vocab.encode(d.mode))
        window = ul2.denoiser_length(d, 511 - mode, 511)
        helper = ob.random_spans_helper(512 - mode, d.noise_density, d.mean_noise_span_length)[0]
        assert window - helper in ((0, 1) if d.noise_density == 0.5 else (0,)), d
        out = ul2.ul2(tokens, vocab_size=vocab.vocab_size, rng=np.random.default_rng(1), vocab=vocab,
                      sequence_length=LENGTHS, denoisers=[d])
        assert out["inputs"].size + 1 == 512 and out["targets"].size + 1 <= 512, d


def test_lengths_that_fit_no_denoiser_are_one_sentence(vocab):
    with pytest.raises(T2TError, match=r"cannot spell UL2's mode token '\[NLG\]'"):
        ob.chunk_length(LENGTHS, objective=ul2.ul2, vocab=tiny_vocabulary())
    with pytest.raises(T2TError, match="leave no room for one of UL2.s denoisers"):
        ob.chunk_length({"inputs": 8, "targets": 2}, objective=ul2.ul2, vocab=vocab)
    with pytest.raises(T2TError, match="pass the run's vocabulary"):
        ul2.ul2([5, 6, 7], vocab_size=500, rng=np.random.default_rng(0))
    with pytest.raises(T2TError, match="sizes its text chunks from both lengths"):
        ob.chunk_length({"inputs": 512}, objective=ul2.ul2, vocab=vocab)
    with pytest.raises(T2TError, match="a corruption rate between 0 and 1"):
        ul2.Denoiser("[NLG]", 1.5, 3.0)
    with pytest.raises(T2TError, match="non-negative"):
        ul2.ul2([5, 6, 7], vocab_size=500, rng=np.random.default_rng(0), vocab=vocab,
                denoisers=[ul2.Denoiser("[NLU]", 0.15, 3.0, share=-1)])


def test_the_tasks_are_registered_at_the_papers_lengths():
    """c4_ul2 streams C4 as the other C4 tasks do; corpus_ul2 reads the local text folder; both are UL2 at 512/512."""
    for name, streaming in (("c4_ul2", True), ("corpus_ul2", False)):
        task = get_task(name)
        assert task.sequence_length == LENGTHS
        assert bool(getattr(task.source, "streaming", False)) is streaming
        assert task.token_preprocessors[0].keywords["objective"] is ul2.ul2
    assert get_task("c4_ul2").source.describe() == c4_module.c4_v220_span_corruption.source.describe()
    assert get_task("corpus_ul2").source.describe() == get_task("corpus").source.describe()


# ---------------------------------------------------------------------------------------------------------
# corpus_ul2 in the pipeline and in training (a text folder made here, so this runs without T2T_DATA_DIR)

RUN_LENGTHS = {"input_length": 64, "target_length": 64}
PIPELINE_DRAWS = 3_000


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory):
    """A data dir whose corpus/ holds a few paragraphs of the tiny vocabulary's text (dozens of UL2 chunks)."""
    root = tmp_path_factory.mktemp("ul2_data")
    paragraphs = [line for line in TINY_TEXT.splitlines() if line.strip()]
    for k in range(3):
        (root / "corpus").mkdir(exist_ok=True)
        (root / "corpus" / f"part{k}.txt").write_text("\n\n".join(paragraphs[k::3] * 4))
    return root


def test_corpus_ul2_draws_open_with_each_mode_at_its_share_and_are_never_trimmed(vocab, text_dir):
    """3,000 of the task's draws as the trainer gets them (the pipeline's per-draw rng, trimming, EOS): each opens
    with a mode token, [NLU] on 2/7, [NLG] on 4/7 and [S2S] on 1/7 of them within 3 standard errors, and each
    fits the lengths whole."""
    stream = build_train_batches("corpus_ul2", vocab=vocab, batch_size=8, seed=3, data_dir=text_dir, **RUN_LENGTHS)
    examples = stream.next_examples(PIPELINE_DRAWS)
    modes = {m: vocab.encode(m) for m in (ul2.R_MODE, ul2.X_MODE, ul2.S_MODE)}
    opened = collections.Counter(next(m for m, ids in modes.items() if list(e["inputs"][:len(ids)]) == ids)
                                 for e in examples)
    for mode, share in ((ul2.R_MODE, 2 / 7), (ul2.X_MODE, 4 / 7), (ul2.S_MODE, 1 / 7)):
        error = 3 * math.sqrt(share * (1 - share) / PIPELINE_DRAWS)
        assert abs(opened[mode] / PIPELINE_DRAWS - share) <= error, (mode, opened)
    assert all(e["inputs"].size <= 64 and e["targets"].size <= 64 for e in examples)
    assert not stream.streams["corpus_ul2"].trim_warned


@pytest.mark.integration
def test_a_corpus_ul2_run_stopped_and_resumed_logs_the_uninterrupted_losses(vocab, text_dir, tmp_path, monkeypatch):
    """A tiny model trains corpus_ul2 for 4 steps (checkpoint at 2); a second run dies entering step 4 and is run
    again: its logged steps, losses and rates are the uninterrupted run's (the denoiser of every example,
    drawn from the pipeline's per-draw rng, comes back with the data state)."""
    model = tmp_path / "tiny.json"
    model.write_text(json.dumps(TINY_MODEL))

    def run(out):
        cfg = config.from_dict(TrainConfig, dict(
            mixture="corpus_ul2", model=str(model), vocab=str(vocab.path), data_dir=str(text_dir),
            output_dir=str(tmp_path / out), train_steps=4, save_every=2, log_every=1, batch_size=4, seed=1,
            loggers=["jsonl"],
            optimizer={"name": "adamw", "learning_rate": 1e-2}, **RUN_LENGTHS))
        return [(r["step"], r["loss"], r["learning_rate"]) for r in train(cfg)]

    straight = run("straight")
    real_step, calls = train_module.train_step, []

    def counted_step(*args):  # the steps are counted, not read off the arguments, which may change
        calls.append(len(calls) + 1)
        if calls == [1, 2, 3, 4] and dying:
            raise KeyboardInterrupt  # entering step 4: the checkpoint of step 2 is the last one on disk
        return real_step(*args)

    monkeypatch.setattr(train_module, "train_step", counted_step)
    dying = True
    with pytest.raises(KeyboardInterrupt):
        run("resumed")
    calls.clear()
    dying = False
    assert run("resumed") == straight
    assert len(calls) == 2  # it went on from the checkpoint at step 2: steps 3 and 4 ran again, not 1 to 4
    assert len({loss for _, loss, _ in straight}) == 4
