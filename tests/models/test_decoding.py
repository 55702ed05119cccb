"""Decoding: greedy and beam search against transformers on the same weights, KV cache, sampling, scoring."""

import pytest
import torch
import torch.nn.functional as F

from t2t.models import decoding
from t2t.models.t5 import T5, ModelConfig

pytest.importorskip("transformers")
from test_model import TINY, hf_pair  # noqa: E402


def ragged_inputs(seed=0, B=4, S=20, V=128):
    g = torch.Generator().manual_seed(seed)
    enc = torch.randint(2, V, (B, S), generator=g)
    for row in range(1, B):
        enc[row, S - 3 * row:] = 0  # ragged: different padding per row
    return enc


def hf_new_tokens(hf, enc, n, **kwargs):
    out = hf.generate(input_ids=enc, attention_mask=(enc != 0).long(), max_new_tokens=n, pad_token_id=0, **kwargs)
    return pad_after_eos(out[:, 1:])  # drop the start token


def pad_after_eos(ids):
    """transformers' beam search fills finished rows with EOS when pad_token_id is 0 (``0 or eos``); ours pads."""
    after = (ids == 1).long().cumsum(1) - (ids == 1).long() > 0
    return ids.masked_fill(after, 0)


# (seed, EOS boost) chosen so that some rows end early and others run to the limit
EOS_CASES = [("relu", True, 0, 7.0), ("gated-gelu", False, 1, 2.0)]


@pytest.mark.parametrize("ff,tied,seed,boost", EOS_CASES)
def test_greedy_matches_transformers(ff, tied, seed, boost):
    hf, ours = hf_pair(ff, tied, seed=seed, eos_boost=boost)
    enc = ragged_inputs(B=6)
    expected = hf_new_tokens(hf, enc, 24, do_sample=False, num_beams=1)
    got = ours.generate(enc, max_new_tokens=24)
    assert got.shape[1] <= 24
    assert torch.equal(got, expected)
    assert (got == 1).any(), "test should exercise EOS"


@pytest.mark.parametrize("vocab", [1000, 32128])  # 32128 = 251 blocks of 128: the CPU's block search
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_choice_is_argmax_first_index_on_ties(vocab, dtype):
    logits = torch.randn(16, vocab, generator=torch.Generator().manual_seed(0)).round()  # many exact ties
    logits[:, 10] = logits[:, 20] = 99.0                # ties in one block
    logits[1:3, 10] = logits[1:3, 20] = 0.0
    logits[1, 600] = logits[1, 300] = 99.0              # ties in different blocks: the first block's
    logits[2, 131] = logits[2, 129] = 99.0              # the first within a later block
    logits[3, :] = float("-inf")
    logits[4, 700] = float("nan"); logits[4, 900] = float("nan")  # NaN is the maximum, as in max and argmax
    logits[5, 600] = float("inf")
    logits[6, 10] = logits[6, 20] = 0.0; logits[6, vocab - 1] = 99.0
    logits = logits.to(dtype)
    expected = torch.tensor([10, 300, 129, 0, 700, 600, vocab - 1] + [10] * 9)
    assert torch.equal(logits.argmax(-1), expected)  # the reference itself, on the planted rows
    assert torch.equal(decoding._greedy_choice(logits), expected)


def test_greedy_stops_early_and_pads_after_eos():
    hf, ours = hf_pair(eos_boost=10.0)
    enc = ragged_inputs(B=6)[[0, 1, 3]]  # rows that reach EOS after a few tokens with these weights
    got = ours.generate(enc, max_new_tokens=40)
    assert 1 < got.shape[1] < 40  # every row produced EOS, so decoding stopped
    for row in got.tolist():
        assert 1 in row
        assert all(t == 0 for t in row[row.index(1) + 1:])


def test_kv_cache_equals_full_forward_greedy():
    torch.manual_seed(0)
    model = T5(ModelConfig(**TINY)).eval()
    enc = ragged_inputs(seed=3)
    got = model.generate(enc, max_new_tokens=12)
    dec = torch.zeros(enc.shape[0], 1, dtype=torch.long)
    with torch.no_grad():
        for _ in range(got.shape[1]):
            dec = torch.cat([dec, model(enc, dec)[:, -1].argmax(-1, keepdim=True)], 1)
    expected = dec[:, 1:]
    done = torch.zeros(enc.shape[0], dtype=torch.bool)
    for t in range(expected.shape[1]):  # the full-forward reference has no EOS handling: pad after EOS
        expected[done, t] = 0
        done |= expected[:, t] == 1
    assert torch.equal(got, expected)


def test_min_new_tokens_forces_length():
    hf, ours = hf_pair(eos_boost=4.0)
    got = ours.generate(ragged_inputs(), max_new_tokens=10, min_new_tokens=10)
    assert got.shape[1] == 10 and not (got[:, :9] == 1).any()


@pytest.mark.parametrize("ff,tied,seed,boost", EOS_CASES)
def test_beam_search_matches_transformers(ff, tied, seed, boost):
    hf, ours = hf_pair(ff, tied, seed=seed, eos_boost=boost)
    enc = ragged_inputs(seed=1, B=5)
    # transformers' penalty is length ** alpha, T5's ((5 + length) / 6) ** alpha: same search, other formula
    expected = hf_new_tokens(hf, enc, 16, do_sample=False, num_beams=4, length_penalty=0.6,
                             early_stopping="never")
    got = decoding.beam_search(ours, enc, 16, num_beams=4, length_penalty=lambda n: n ** 0.6)
    assert torch.equal(got, expected)
    assert (got == 1).any()
    # with alpha = 0 both penalties are 1: T5's default formula gives transformers' result
    expected = hf_new_tokens(hf, enc, 16, do_sample=False, num_beams=4, length_penalty=0.0,
                             early_stopping="never")
    assert torch.equal(ours.generate(enc, max_new_tokens=16, num_beams=4, alpha=0.0), expected)


def test_beam_search_default_is_t5_penalty_and_beats_greedy():
    torch.manual_seed(0)
    model = T5(ModelConfig(**TINY)).eval()
    enc = ragged_inputs(seed=5, B=3)
    beam = model.generate(enc, max_new_tokens=8, num_beams=4, alpha=0.0)
    greedy = model.generate(enc, max_new_tokens=8)
    # with alpha 0 and no EOS reached, beam search maximises the total log-probability: never below greedy,
    # and here strictly above it on the first row (a beam search that fell back to greedy would fail)
    assert not (beam == 1).any() and not (greedy == 1).any()
    beam_score, greedy_score = decoding.score(model, enc, beam), decoding.score(model, enc, greedy)
    assert (beam_score >= greedy_score - 1e-4).all()
    assert beam_score[0] > greedy_score[0] + 1.0 and not torch.equal(beam[0], greedy[0])
    assert decoding.t5_length_penalty(0.6)(1) == 1.0
    assert decoding.t5_length_penalty(0.6)(7) == pytest.approx(2.0 ** 0.6)


@pytest.mark.parametrize("architecture", ["encoder_decoder", "decoder_only"])
def test_a_cache_reordered_in_place_keeps_its_buffers_and_holds_the_reordered_rows(architecture):
    """Beam search reorders in place when the step is a CUDA graph, which reads the buffers it was captured
    with; the rows kept are those of the plain reorder."""
    torch.manual_seed(0)
    model = T5(ModelConfig(**TINY, architecture=architecture)).eval()
    caches = [model.begin_decoding(ragged_inputs(seed=5, B=3), 6, num_beams=2)[0] for _ in range(2)]
    with torch.no_grad():
        for cache in caches:
            model.extend(torch.randint(3, 128, (6, 2), generator=torch.Generator().manual_seed(1)), cache)
    buffers = [*caches[1].self_k, *caches[1].self_v, caches[1].key_valid]
    index = torch.tensor([1, 1, 2, 3, 5, 4])
    caches[0].reorder(index)
    caches[1].reorder(index, in_place=True)
    kept = [*caches[1].self_k, *caches[1].self_v, caches[1].key_valid]
    assert all(a is b for a, b in zip(kept, buffers))
    for plain, in_place in zip([*caches[0].self_k, *caches[0].self_v, caches[0].key_valid], kept):
        assert (plain is None and in_place is None) or torch.equal(in_place, plain)
    assert (architecture == "decoder_only") == (caches[1].key_valid is not None)


def test_sampling_is_seeded_and_respects_top_k():
    torch.manual_seed(0)
    model = T5(ModelConfig(**TINY)).eval()
    enc = ragged_inputs(seed=4)

    def run(seed, **kw):
        return model.generate(enc, max_new_tokens=10, temperature=1.0,
                               generator=torch.Generator().manual_seed(seed), **kw)

    assert torch.equal(run(7), run(7))
    assert not torch.equal(run(7), run(8))
    greedy = model.generate(enc, max_new_tokens=10)
    assert torch.equal(run(7, top_k=1), greedy)
    assert torch.equal(run(7, top_p=1e-6), greedy)
    sampled = run(9, top_k=3)
    dec = torch.cat([torch.zeros_like(sampled[:, :1]), sampled[:, :-1]], 1)
    with torch.no_grad():
        top3 = model(enc, dec).topk(3, dim=-1).indices
    valid = sampled != 0
    assert ((top3 == sampled[..., None]).any(-1) | ~valid).all()


@pytest.mark.parametrize("settings, message", [
    (dict(num_beams=3, temperature=0.7), "no beam sampling"),
    (dict(top_k=5), "temperature=0 turns off"),
    (dict(num_beams=2, top_p=0.9), "temperature=0 turns off"),
])
def test_decoding_methods_that_cannot_combine_are_refused(settings, message):
    """Beam search took precedence over temperature, and top_k/top_p went unused without sampling."""
    model = T5(ModelConfig(**TINY)).eval()
    with pytest.raises(ValueError, match=message):
        model.generate(ragged_inputs(seed=4), max_new_tokens=4, **settings)


def test_generate_takes_the_decoding_flags_names():
    """t2t-eval and t2t-predict say --beam-size, --max-length and --seed; model.generate takes them too, as
    aliases of num_beams, max_new_tokens and a seeded generator."""
    torch.manual_seed(0)
    model = T5(ModelConfig(**TINY)).eval()
    enc = ragged_inputs(seed=5, B=3)
    beams = model.generate(enc, max_new_tokens=8, num_beams=4, alpha=0.0)
    assert not torch.equal(beams, model.generate(enc, max_new_tokens=8))  # so the alias below is not ignored
    assert torch.equal(model.generate(enc, max_length=8, beam_size=4, alpha=0.0), beams)
    assert torch.equal(model.generate(enc, max_new_tokens=8, num_beams=4, beam_size=4, alpha=0.0), beams)
    assert model.generate(enc, max_length=3).shape[1] == 3
    sampled = model.generate(enc, max_length=10, temperature=1.0, generator=torch.Generator().manual_seed(7))
    assert torch.equal(model.generate(enc, max_length=10, temperature=1.0, seed=7), sampled)


@pytest.mark.parametrize("settings, message", [
    (dict(num_beams=2, beam_size=4), "num_beams=2 and beam_size=4 set one thing"),
    (dict(max_new_tokens=5, max_length=6), "max_new_tokens=5 and max_length=6 set one thing"),
    (dict(temperature=1.0, seed=1, generator=torch.Generator()), "seed=1 and a generator"),
    (dict(seed=1), "seed=1 seeds sampling, which temperature=0 turns off"),
])
def test_a_setting_given_under_both_names_is_refused(settings, message):
    model = T5(ModelConfig(**TINY)).eval()
    with pytest.raises(ValueError, match=message):
        model.generate(ragged_inputs(seed=4), **settings)


def test_score_equals_sum_of_log_softmax():
    torch.manual_seed(0)
    model = T5(ModelConfig(**TINY)).eval()
    enc = ragged_inputs(seed=6, B=3)
    targets = torch.randint(2, 128, (3, 6))
    targets[0, 3:] = 0
    targets[:, -1] = torch.where(targets[:, -1] == 0, 0, 1)
    dec = torch.cat([torch.zeros_like(targets[:, :1]), targets[:, :-1]], 1)
    with torch.no_grad():
        logp = F.log_softmax(model(enc, dec), -1).gather(-1, targets[..., None])[..., 0]
    expected = (logp * (targets != 0)).sum(1)
    assert torch.allclose(model.score(enc, targets), expected, atol=1e-4)


def test_bf16_decoding_casts_the_fused_qkv_weight_once_per_call_with_autocasts_rounding():
    _, ours = hf_pair()
    enc, tokens = ragged_inputs(B=3), torch.tensor([5, 6, 7])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        cache, _ = ours.begin_decoding(enc, 4)
        assert {w.dtype for w in cache.qkv_weights} == {torch.bfloat16}  # fp32 would be cast at every step
        again, _ = ours.begin_decoding(enc, 4)
        again.qkv_weights = [block.self_attn.qkv_weight() for block in ours.decoder.blocks]  # fp32: autocast casts
        torch.testing.assert_close(ours.decode_step(tokens, cache), ours.decode_step(tokens, again), rtol=0, atol=0)
