"""Objectives of the T5 paper on token ids: t5's arithmetic, Table 3's shapes, exact restoration."""

from math import comb

import numpy as np
import pytest

from t2t.data import objectives as ob
from t2t.errors import T2TError

# Table 3's sentence at word level: ids 3.. for the words, sentinels from the end of a 100-id vocabulary.
WORDS = "Thank you for inviting me to your party last week .".split()
VOCAB = 100
X, Y, Z = VOCAB - 1, VOCAB - 2, VOCAB - 3  # <extra_id_0>, <extra_id_1>, <extra_id_2>
M = ob.mask_token_id(VOCAB)                # BERT/MASS mask token: t5's sentinel_id = <extra_id_0>
ID = {w: i + 3 for i, w in enumerate(WORDS)}
TOKENS = np.array([ID[w] for w in WORDS])
NAMES = {**{v: k for k, v in ID.items()}, X: "<X>", Y: "<Y>", Z: "<Z>"}


def words(ids) -> str:
    return " ".join(NAMES.get(int(i), f"#{int(i)}") for i in ids)


def mask_of(*noise_words: str) -> np.ndarray:
    return np.isin(np.arange(len(WORDS)), [WORDS.index(w) for w in noise_words])


# --- t5's length arithmetic ---------------------------------------------------------------------------------

# (inputs_length, noise_density, mean_noise_span_length) → (tokens_length, targets_length), computed with
# t5.data.preprocessors.random_spans_helper's arithmetic (EOS counted in both lengths)
T5_SPAN_LENGTHS = [
    ((512, 0.15, 3.0), (568, 114)),   # the paper's pre-training setting
    ((128, 0.15, 3.0), (141, 29)),
    ((114, 0.15, 3.0), (126, 26)),
    ((512, 0.25, 10.0), (660, 182)),
    ((512, 0.5, 3.0), (766, 512)),    # density 0.5: t5 shaves a token so the targets length is the round 512
    ((256, 0.5, 1.0), (254, 256)),    # ... and here even below the inputs length
    # where t5's int(round(...)) differs from truncation: int(...) would give (71, 13) and (137, 31)
    ((64, 0.15, 5.0), (72, 14)),      # 72 * 0.15 = 10.8 noise tokens → 11 (truncated: 10)
    ((128, 0.15, 2.0), (138, 32)),    # 138 * 0.15 = 20.7 → 21 noise tokens, 21 / 2 = 10.5 → 10 spans
    # two tokens per span in the inputs: t5 shaves at density 0.5 only when the targets outgrow the inputs
    # length of the raw length it found (170 here), not the requested 114
    ((114, 0.5, 1.0, 2, 2), (113, 169)),
]


@pytest.mark.parametrize("args, lengths", T5_SPAN_LENGTHS)
def test_random_spans_helper_matches_t5(args, lengths):
    assert ob.random_spans_helper(*args) == lengths


def t5_random_spans_helper(inputs_length, noise_density, mean_noise_span_length, extra_inputs, extra_targets):
    """t5.data.preprocessors.random_spans_helper restated from its definition: grow the raw length from
    ``inputs_length - 1`` while the next one's inputs still fit, rebind the inputs length to the one found,
    and at density 0.5 take one token off when the targets come out longer than those inputs."""
    def inputs_and_targets(raw_length):
        noise = int(round(raw_length * noise_density))
        spans = int(round(noise / mean_noise_span_length))
        return raw_length - noise + spans * extra_inputs + 1, noise + spans * extra_targets + 1

    raw_length = inputs_length - 1
    while inputs_and_targets(raw_length + 1)[0] <= inputs_length:
        raw_length += 1
    inputs_length, targets_length = inputs_and_targets(raw_length)
    if noise_density == 0.5 and targets_length > inputs_length:
        return raw_length - 1, targets_length - 1
    return raw_length, targets_length


@pytest.mark.parametrize("density, span", [(0.5, 1.0), (0.5, 3.0), (0.15, 3.0)])
@pytest.mark.parametrize("extra_inputs, extra_targets", [(1, 1), (2, 2), (2, 1), (1, 2)])
def test_random_spans_helper_matches_t5_over_every_length(density, span, extra_inputs, extra_targets):
    for inputs_length in range(2, 2049):
        args = (inputs_length, density, span, extra_inputs, extra_targets)
        assert ob.random_spans_helper(*args) == t5_random_spans_helper(*args), args


def test_random_spans_helper_gives_the_longest_raw_length_that_fits():
    # 568 tokens: the mask has 85 noise tokens in 28 spans, so the inputs are 483 + 28 sentinels (+ EOS = 512);
    # one token more would not fit
    mask = ob.random_spans_noise_mask(568, 0.15, 3.0, np.random.default_rng(0))
    assert mask.sum() == 85 and (mask & ~np.concatenate(([False], mask[:-1]))).sum() == 28
    for length, fits in [(568, True), (569, False)]:
        out = ob.span_corruption(np.arange(3, 3 + length), vocab_size=32100, rng=np.random.default_rng(0))
        assert (len(out["inputs"]) + 1 <= 512) == fits


@pytest.mark.parametrize("seed", range(50))
def test_span_corruption_fills_512_and_114_exactly(seed):
    tokens_length, targets_length = ob.random_spans_helper(512, 0.15, 3.0)
    rng = np.random.default_rng(seed)
    tokens = rng.integers(3, 32000, size=tokens_length)
    out = ob.span_corruption(tokens, vocab_size=32100, rng=rng)
    # the pipeline appends one EOS to each feature afterwards
    assert len(out["inputs"]) + 1 == 512
    assert len(out["targets"]) + 1 == targets_length == 114
    sentinels_in = out["inputs"][out["inputs"] >= 32000]
    sentinels_out = out["targets"][out["targets"] >= 32000]
    np.testing.assert_array_equal(sentinels_in, 32099 - np.arange(28))
    np.testing.assert_array_equal(sentinels_out, 32099 - np.arange(28))
    assert out["targets"][0] == 32099  # targets open with a sentinel and end with noise (no closing one)
    assert out["targets"][-1] < 32000 and out["inputs"][-1] == 32099 - 27
    np.testing.assert_array_equal(ob.restore_from_span_corruption(out["inputs"], out["targets"], 32100), tokens)


@pytest.mark.parametrize("length", [1, 2, 3, 5, 11, 20, 100, 568, 1000])
@pytest.mark.parametrize("density,span", [(0.15, 3.0), (0.1, 2.0), (0.5, 3.0), (0.25, 10.0), (0.5, 1.0)])
def test_noise_mask_counts_follow_t5_rounding(length, density, span):
    mask = ob.random_spans_noise_mask(length, density, span, np.random.default_rng(length))
    assert mask.shape == (length,) and mask.dtype == bool
    full = max(length, 2)
    noise = min(max(int(np.round(np.float32(full) * np.float32(density))), 1), full - 1)
    spans = max(min(int(np.round(np.float32(noise) / np.float32(span))), noise, full - noise), 1)
    if length >= 2:
        assert mask.sum() == noise
        starts = mask & ~np.concatenate(([False], mask[:-1]))
        assert starts.sum() == spans
        assert not mask[0] and mask[-1]  # kept span first, noise span last
    else:
        assert not mask.any()


def test_rounding_is_half_to_even_like_tf_round():
    # 10 tokens at 25% → 2.5 noise tokens → 2 (half to even), 14 tokens at 25% → 3.5 → 4
    assert ob.random_spans_noise_mask(10, 0.25, 1.0, np.random.default_rng(0)).sum() == 2
    assert ob.random_spans_noise_mask(14, 0.25, 1.0, np.random.default_rng(0)).sum() == 4


def test_same_seed_same_output_and_fresh_noise_otherwise():
    tokens = np.arange(3, 3 + 568)
    a = ob.span_corruption(tokens, vocab_size=32100, rng=np.random.default_rng(7))
    b = ob.span_corruption(tokens, vocab_size=32100, rng=np.random.default_rng(7))
    c = ob.span_corruption(tokens, vocab_size=32100, rng=np.random.default_rng(8))
    np.testing.assert_array_equal(a["inputs"], b["inputs"])
    np.testing.assert_array_equal(a["targets"], b["targets"])
    assert not np.array_equal(a["inputs"], c["inputs"])


def test_span_lengths_are_uniform_compositions_with_mean_three():
    """Noise span lengths pooled over many masks: mean ≈ 3 and the distribution of a uniform random
    composition of 85 tokens into 28 spans, P(len = j) = C(n-j-1, k-2) / C(n-1, k-1)."""
    rng = np.random.default_rng(0)
    lengths = []
    for _ in range(400):
        mask = ob.random_spans_noise_mask(568, 0.15, 3.0, rng).astype(np.int8)
        edges = np.flatnonzero(np.diff(np.concatenate(([0], mask, [0]))))
        lengths.append(edges[1::2] - edges[0::2])
    lengths = np.concatenate(lengths)
    assert lengths.size == 400 * 28
    assert abs(lengths.mean() - 3.0) < 0.05
    n, k = 85, 28
    for j in range(1, 7):
        expected = comb(n - j - 1, k - 2) / comb(n - 1, k - 1)
        assert abs(np.mean(lengths == j) - expected) < 0.02, j
    # every position (but the first, always kept) is noise about 15% of the time
    hits = np.zeros(568)
    for _ in range(400):
        hits += ob.random_spans_noise_mask(568, 0.15, 3.0, rng)
    assert hits[0] == 0 and 0.10 < hits[1:-1].mean() / 400 < 0.20


def test_other_rates_and_span_lengths_of_table_7():
    rng = np.random.default_rng(1)
    tokens = rng.integers(3, 31000, size=1000)  # below every sentinel, even beyond <extra_id_99>
    for density, span in [(0.1, 2.0), (0.25, 3.0), (0.5, 3.0), (0.15, 10.0)]:
        out = ob.random_spans(tokens, vocab_size=32100, rng=rng, noise_density=density, mean_noise_span_length=span)
        noise = int(np.round(1000 * density))
        spans = int(np.round(noise / span))
        assert len(out["inputs"]) == 1000 - noise + spans
        assert len(out["targets"]) == noise + spans
        # 50% noise gives 167 spans: as in t5 the sentinel ids run on below <extra_id_99>
        restored = ob.restore_from_span_corruption(out["inputs"], out["targets"], 32100, num_sentinels=max(spans, 100))
        np.testing.assert_array_equal(restored, tokens)


def test_bad_settings_are_t2t_errors():
    with pytest.raises(T2TError, match="noise_density"):
        ob.span_corruption(TOKENS, vocab_size=VOCAB, rng=np.random.default_rng(0), noise_density=1.5)
    with pytest.raises(T2TError, match="mean_noise_span_length"):
        ob.random_spans_helper(512, 0.15, 0.0)
    with pytest.raises(T2TError, match="1-d"):
        ob.span_corruption(np.zeros((2, 3)), vocab_size=VOCAB, rng=np.random.default_rng(0))


# --- Table 3: the paper's rows, with the paper's choice of corrupted words --------------------------------

def test_table3_random_spans_row():
    mask = mask_of("for", "inviting", "me", "your", "party", "last")
    assert words(ob.noise_span_to_unique_sentinel(TOKENS, mask, VOCAB)) == "Thank you <X> to <Y> week ."
    assert words(ob.nonnoise_span_to_unique_sentinel(TOKENS, mask, VOCAB)) == \
        "<X> for inviting me <Y> your party last <Z>"


def test_table3_iid_replace_spans_row():
    mask = mask_of("for", "inviting", "last")
    inputs = ob.noise_span_to_unique_sentinel(TOKENS, mask, VOCAB)
    targets = ob.nonnoise_span_to_unique_sentinel(TOKENS, mask, VOCAB)
    assert words(inputs) == "Thank you <X> me to your party <Y> week ."
    assert words(targets) == "<X> for inviting <Y> last <Z>"
    np.testing.assert_array_equal(ob.restore_from_span_corruption(inputs, targets, VOCAB, num_sentinels=3), TOKENS)


def test_table3_iid_drop_tokens_row():
    mask = mask_of("for", "inviting", "last")
    assert words(ob.drop_noise_tokens(TOKENS, mask)) == "Thank you me to your party week ."
    assert words(ob.drop_nonnoise_tokens(TOKENS, mask)) == "for inviting last"


def test_table3_mass_and_bert_style_rows():
    mask = mask_of("for", "inviting", "last")
    mass = ob.noise_token_to_sentinel(TOKENS, mask, VOCAB)
    assert words(mass) == "Thank you <X> <X> me to your party <X> week ."  # <X> is the mask token <M>
    rng = np.random.default_rng(0)
    all_mask = ob.noise_token_to_random_token_or_sentinel(TOKENS, mask, VOCAB, rng, random_prob=0.0)
    np.testing.assert_array_equal(all_mask, mass)
    all_random = ob.noise_token_to_random_token_or_sentinel(TOKENS, mask, VOCAB, rng, random_prob=1.0)
    np.testing.assert_array_equal(all_random[~mask], TOKENS[~mask])
    assert np.all((all_random[mask] >= 3) & (all_random[mask] < VOCAB))


def test_table3_prefix_lm_row():
    mask = np.arange(len(WORDS)) < 4
    assert words(ob.drop_nonnoise_tokens(TOKENS, mask)) == "Thank you for inviting"
    assert words(ob.drop_noise_tokens(TOKENS, mask)) == "me to your party last week ."


# --- each objective with its own random draws: structure, not one random string ---------------------------

@pytest.mark.parametrize("seed", range(20))
def test_span_corruption_on_table3_sentence(seed):
    out = ob.span_corruption(TOKENS, vocab_size=VOCAB, rng=np.random.default_rng(seed))
    # 11 tokens: round(1.65) = 2 noise tokens in round(2/3) → max(…, 1) = 1 span
    assert len(out["inputs"]) == 11 - 2 + 1 and len(out["targets"]) == 2 + 1
    assert list(out["inputs"]).count(X) == 1 and out["targets"][0] == X
    kept = out["inputs"][out["inputs"] != X]
    span = out["targets"][1:]
    assert np.all(np.diff(kept) > 0)          # kept words stay in order (the ids increase along the text)
    assert span[1] == span[0] + 1             # the corrupted span is two consecutive words
    np.testing.assert_array_equal(np.sort(np.concatenate([kept, span])), TOKENS)
    assert out["inputs"][-1] == X and span[-1] == TOKENS[-1]  # t5's mask always ends with noise
    np.testing.assert_array_equal(ob.restore_from_span_corruption(out["inputs"], out["targets"], VOCAB, 3), TOKENS)


@pytest.mark.parametrize("seed", range(30))
def test_iid_noise_replace_spans_structure(seed):
    out = ob.iid_noise_replace_spans(TOKENS, vocab_size=VOCAB, rng=np.random.default_rng(seed), noise_density=0.3)
    sent_in = out["inputs"][out["inputs"] >= VOCAB - 10]
    sent_out = out["targets"][out["targets"] >= VOCAB - 10]
    np.testing.assert_array_equal(sent_in, VOCAB - 1 - np.arange(sent_in.size))
    np.testing.assert_array_equal(sent_out, VOCAB - 1 - np.arange(sent_out.size))
    kept = out["inputs"][out["inputs"] < VOCAB - 10]
    assert np.all(np.isin(kept, TOKENS)) and np.all(np.diff(kept) > 0)  # kept words stay in order
    np.testing.assert_array_equal(ob.restore_from_span_corruption(out["inputs"], out["targets"], VOCAB, 10), TOKENS)


@pytest.mark.parametrize("seed", range(10))
def test_iid_noise_drop_structure(seed):
    out = ob.iid_noise_drop(TOKENS, vocab_size=VOCAB, rng=np.random.default_rng(seed), noise_density=0.3)
    assert len(out["inputs"]) + len(out["targets"]) == len(TOKENS)
    merged = np.sort(np.concatenate([out["inputs"], out["targets"]]))
    np.testing.assert_array_equal(merged, TOKENS)  # the ids are increasing, so this shows both keep order
    assert np.all(np.diff(out["inputs"]) > 0) and np.all(np.diff(out["targets"]) > 0)


def test_bert_style_replaces_15_percent_with_90_percent_mask():
    rng = np.random.default_rng(0)
    tokens = np.full(200_000, 50)
    out = ob.bert_style(tokens, vocab_size=32100, rng=rng)
    np.testing.assert_array_equal(out["targets"], tokens)
    changed = out["inputs"] != 50
    masked = out["inputs"] == 32099
    assert abs(changed.mean() - 0.15) < 0.005
    assert abs(masked.sum() / changed.sum() - 0.9) < 0.01  # the rest are random ids (rarely 50 itself)
    assert out["inputs"].min() >= 3
    small = ob.bert_style(TOKENS, vocab_size=VOCAB, rng=np.random.default_rng(3))
    assert len(small["inputs"]) == len(TOKENS)


def test_mass_style_structure():
    out = ob.mass_style(TOKENS, vocab_size=VOCAB, rng=np.random.default_rng(4), noise_density=0.3)
    changed = out["inputs"] != TOKENS
    assert np.all(out["inputs"][changed] == M)
    np.testing.assert_array_equal(out["targets"], TOKENS)


def test_deshuffling_structure():
    out = ob.deshuffling(TOKENS, vocab_size=VOCAB, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(np.sort(out["inputs"]), TOKENS)
    assert not np.array_equal(out["inputs"], TOKENS)
    np.testing.assert_array_equal(out["targets"], TOKENS)


@pytest.mark.parametrize("seed", range(10))
def test_prefix_lm_structure(seed):
    out = ob.prefix_lm(TOKENS, vocab_size=VOCAB, rng=np.random.default_rng(seed))
    assert 1 <= len(out["inputs"]) <= len(TOKENS) - 1
    np.testing.assert_array_equal(np.concatenate([out["inputs"], out["targets"]]), TOKENS)


def test_prefix_split_point_is_uniform():
    rng = np.random.default_rng(0)
    cuts = [len(ob.prefix_lm(np.arange(3, 8), vocab_size=VOCAB, rng=rng)["inputs"]) for _ in range(4000)]
    counts = np.bincount(cuts, minlength=5)
    assert counts[0] == 0 and counts[5:].sum() == 0
    assert np.all(np.abs(counts[1:5] / 4000 - 0.25) < 0.03)


def test_every_objective_is_listed_and_deterministic():
    from t2t.testing import tiny_vocabulary

    for name, fn in ob.OBJECTIVES.items():
        vocab = {"vocab": tiny_vocabulary()} if "vocab" in ob.run_parameters(fn) else {}  # UL2's mode tokens
        a = fn(TOKENS, vocab_size=VOCAB, rng=np.random.default_rng(11), **vocab)
        b = fn(TOKENS, vocab_size=VOCAB, rng=np.random.default_rng(11), **vocab)
        assert set(a) == {"inputs", "targets"}, name
        np.testing.assert_array_equal(a["inputs"], b["inputs"])
        np.testing.assert_array_equal(a["targets"], b["targets"])
        assert a["inputs"].dtype == np.int64 and a["targets"].dtype == np.int64, name


@pytest.mark.parametrize("options", [{}, {"noise_density": 0.5, "mean_noise_span_length": 1.0},
                                     {"noise_density": 0.3, "mean_noise_span_length": 8.0}])
def test_declared_output_lengths_are_the_drawn_ones(options):
    """``OUTPUT_LENGTHS`` lets the pipeline place a draw without drawing it: every length from 0 to 600 (and
    568, span corruption's), whatever the seed, gives the lengths the objective then produces."""
    rng = np.random.default_rng(5)
    for objective, lengths_of in ob.OUTPUT_LENGTHS.items():
        kwargs = options if objective in (ob.random_spans, ob.span_corruption) else {}
        for length in [*range(0, 40), 568, *rng.integers(40, 600, size=30)]:
            tokens = rng.integers(3, 1000, size=length)
            out = objective(tokens, vocab_size=VOCAB, rng=np.random.default_rng(length), **kwargs)
            assert lengths_of(length, **kwargs) == (out["inputs"].size, out["targets"].size), (objective, length)
    lengths = {"targets": 568, "targets_pretokenized": 0}
    assert ob.denoise_output_lengths(lengths) == {"inputs": 512 - 1, "targets": 114 - 1, "targets_pretokenized": 0}
    assert ob.denoise_output_lengths(lengths, objective=ob.prefix_lm) is None  # its split point is drawn
    assert ob.denoise.output_lengths is ob.denoise_output_lengths


def test_tokens_length_for_each_objective():
    assert ob.tokens_length_for(ob.span_corruption, 512) == 568
    assert ob.tokens_length_for(ob.random_spans, 512, 0.5, 3.0) == ob.random_spans_helper(512, 0.5, 3.0)[0]
    assert ob.tokens_length_for(ob.prefix_lm, 512) == 511


def test_denoise_is_the_token_preprocessor_form():
    import functools

    class Vocab:
        vocab_size = VOCAB

    features = {"targets": TOKENS, "targets_pretokenized": "Thank you ..."}
    prep = functools.partial(ob.denoise, objective=ob.span_corruption)
    out = prep(features, np.random.default_rng(0), vocab=Vocab(), sequence_length={"inputs": 512, "targets": 114})
    direct = ob.span_corruption(TOKENS, vocab_size=VOCAB, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(out["inputs"], direct["inputs"])
    np.testing.assert_array_equal(out["targets"], direct["targets"])
    assert out["targets_pretokenized"] == "Thank you ..."
    with pytest.raises(T2TError, match="vocabulary"):
        prep(features, np.random.default_rng(0), vocab=None)
    assert ob.chunk_length({"inputs": 512, "targets": 114}, objective=ob.span_corruption) == 568
    assert ob.chunk_length({"inputs": 512}, objective=ob.bert_style, random_prob=0.1) == 511
    with pytest.raises(T2TError, match="input_length"):
        ob.chunk_length(None, objective=ob.span_corruption)


def test_restoring_span_corruption_strips_the_vocabularys_eos_only_when_told():
    """The EOS to strip is the vocabulary's (``eos_id``), not a literal 1: a text ending in id 1 restores
    whole without it."""
    tokens = np.array([5, 6, 7, 8, 9, 10, 11, 1], dtype=np.int64)
    mask = np.array([0, 0, 1, 1, 0, 0, 0, 1], dtype=bool)
    inputs = ob.noise_span_to_unique_sentinel(tokens, mask, VOCAB)
    targets = ob.nonnoise_span_to_unique_sentinel(tokens, mask, VOCAB)
    np.testing.assert_array_equal(ob.restore_from_span_corruption(inputs, targets, VOCAB, 3), tokens)
    with_eos = np.append(inputs, 4), np.append(targets, 4)
    np.testing.assert_array_equal(ob.restore_from_span_corruption(*with_eos, VOCAB, 3, eos_id=4), tokens)
