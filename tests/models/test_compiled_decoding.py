"""Decoding with compile=True (the static-shape decoding step through torch.compile) gives the tokens of the
eager step, for greedy and beam search, and for an encoder-decoder and a decoder-only model, with one graph
for batches of every size; on the GPU where there is one (benchmarks/run_gpu.sh runs this file there)."""

import pytest
import torch

from t2t.evaluation.evaluate import DecodingConfig, evaluate_task
from t2t.models import decoding, kernels
from t2t.models.decoding import decoding_step
from t2t.models.t5 import T5, ModelConfig
from t2t.testing import in_memory_task, tiny_vocabulary

pytestmark = pytest.mark.integration  # torch.compile takes tens of seconds on 2 cores

TINY = dict(vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, dropout_rate=0.0)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def inputs() -> torch.Tensor:
    tokens = torch.randint(3, 96, (3, 11), generator=torch.Generator().manual_seed(2))
    tokens[1, 7:] = 0  # ragged rows
    return tokens.to(DEVICE)


@pytest.mark.parametrize("architecture", ["encoder_decoder", "decoder_only"])
def test_compiled_steps_give_the_eager_logits_at_every_position(architecture):
    torch.manual_seed(0)
    model = T5(ModelConfig(**TINY, architecture=architecture)).eval().to(DEVICE)
    x, fed = inputs(), torch.randint(3, 96, (3, 10), generator=torch.Generator().manual_seed(3)).to(DEVICE)
    steps = {"eager": decoding_step(model), "compiled": decoding_step(model, compile=True)}
    logits, packed = {}, {}
    with torch.no_grad():
        for kind, step in steps.items():
            cache, _ = model.begin_decoding(x, fed.shape[1] + 1)
            logits[kind] = torch.stack([step(fed[:, t], cache) for t in range(fed.shape[1])])  # [T, B, V]
            packed[kind] = len(cache.weight_copies)
    torch.testing.assert_close(logits["compiled"], logits["eager"], rtol=1e-5, atol=1e-5)
    if DEVICE == "cpu" and kernels.CAN_PACK:  # both multiply by weights packed once per call (kernels.packed_weights)
        assert packed["compiled"] == packed["eager"] > 0


@pytest.mark.skipif(DEVICE != "cpu" or not kernels.PACKS_BF16, reason="bf16 packed copies are made on CPUs with bf16")
def test_compiled_bf16_steps_multiply_by_bf16_copies_packed_once_and_give_the_eager_logits():
    """Under bf16 autocast the compiled step multiplies by bf16 copies of the weights packed once per call, not
    by weights cast at every step; the eager step keeps autocast's cache of cast weights. The two may differ by
    bf16 roundings (fused element-wise work rounds less): a few bf16 units of the logits, where a wrong or
    stale weight moves them by their whole scale."""
    torch.manual_seed(0)
    model = T5(ModelConfig(**TINY)).eval()
    x, fed = inputs(), torch.randint(3, 96, (3, 6), generator=torch.Generator().manual_seed(3))
    logits, copies = {}, {}
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for kind, step in {"eager": decoding_step(model), "compiled": decoding_step(model, compile=True)}.items():
            cache, _ = model.begin_decoding(x, fed.shape[1] + 1)
            logits[kind] = torch.stack([step(fed[:, t], cache) for t in range(fed.shape[1])]).float()
            copies[kind] = {packed.dtype for _, packed in cache.weight_copies.values()}
    assert copies == {"eager": set(), "compiled": {torch.bfloat16}}
    scale = logits["eager"].abs().max()
    torch.testing.assert_close(logits["compiled"], logits["eager"], rtol=0, atol=2.0 ** -5 * scale)


@pytest.mark.parametrize("architecture", ["encoder_decoder", "decoder_only"])
def test_compiled_greedy_and_beam_search_give_the_eager_tokens(architecture):
    torch.manual_seed(0)
    model = T5(ModelConfig(**TINY, architecture=architecture)).eval().to(DEVICE)
    x = inputs()
    for kwargs in ({}, {"num_beams": 3}):
        eager = model.generate(x, max_new_tokens=12, cuda_graph=False, **kwargs)
        compiled = model.generate(x, max_new_tokens=12, compile=True, **kwargs)
        assert torch.equal(compiled, eager), kwargs


@pytest.mark.parametrize("architecture", ["encoder_decoder", "decoder_only"])
def test_one_graph_decodes_batches_of_every_size(architecture, monkeypatch):
    """Rows, input lengths, decoding lengths and beams vary from one batch to the next (evaluation pads each
    batch to its longest input); with static sizes the second batch below would need a second graph, past
    the limit of one set here, and fail (FailOnRecompileLimitHit, since the step compiles with fullgraph)."""
    torch.manual_seed(0)
    model = T5(ModelConfig(**TINY, architecture=architecture)).eval().to(DEVICE)
    torch.compiler.reset()
    monkeypatch.setattr(kernels, "MAX_GRAPHS", 1)
    for rows, length, new_tokens, beams in [(3, 5, 4, 1), (4, 9, 6, 1), (2, 12, 9, 1), (2, 7, 5, 3)]:
        x = torch.randint(3, 96, (rows, length), generator=torch.Generator().manual_seed(length)).to(DEVICE)
        kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, num_beams=beams)
        assert torch.equal(model.generate(x, compile=True, **kwargs), model.generate(x, cuda_graph=False, **kwargs))


def test_one_graph_decodes_whether_autocast_caches_casts_or_not(monkeypatch):
    """dynamo guards on autocast's cache setting, which a CUDA graph's capture turns off (greedy decoding on a
    GPU) and beam search leaves as it is: the compiled step runs with it off in every call, so that one graph
    serves both (on a GPU, with the limit of one below, beam search after greedy decoding failed)."""
    torch.manual_seed(0)
    model = T5(ModelConfig(**TINY)).eval().to(DEVICE)
    torch.compiler.reset()
    monkeypatch.setattr(kernels, "MAX_GRAPHS", 1)
    x = inputs()
    for cache_enabled in (True, False):
        with torch.autocast(DEVICE, enabled=False, cache_enabled=cache_enabled):
            compiled = model.generate(x, max_new_tokens=5, compile=True, cuda_graph=False)
        assert torch.equal(compiled, model.generate(x, max_new_tokens=5, cuda_graph=False))


def test_a_process_decodes_with_more_models_than_dynamo_allows_graphs_a_function():
    """Each model shape needs its graph (and rows of one another): dynamo's limit, 2 here for speed (8 by
    default), made the third graph fail; the decoding step allows kernels.MAX_GRAPHS. (torch's own
    ``config.patch``, not monkeypatch: pytest 9 undoes a monkeypatch of torch's config module by deleting it.)"""
    torch.compiler.reset()
    with torch._dynamo.config.patch(recompile_limit=2):
        for d_model in (24, 32):
            torch.manual_seed(0)
            model = T5(ModelConfig(**{**TINY, "d_model": d_model})).eval().to(DEVICE)
            for rows in (1, 3):
                x = torch.randint(3, 96, (rows, 7), generator=torch.Generator().manual_seed(rows)).to(DEVICE)
                assert torch.equal(model.generate(x, max_new_tokens=4, compile=True),
                                   model.generate(x, max_new_tokens=4))


def test_compiled_evaluation_predicts_the_eager_strings_over_inputs_of_many_lengths(monkeypatch):
    """``t2t-eval --set compile=true``: ten batches of different input lengths, one graph (it once compiled a
    graph per batch and failed at dynamo's ninth); the compilation is reported apart from the throughput."""
    monkeypatch.setattr(decoding, "_first_compiled_call", [])  # as in a fresh process
    vocab = tiny_vocabulary()
    words = "the cat sat on a mat while seven blue birds sang over tall green trees near old red barns".split()
    rows = [{"inputs": "question: " + " ".join(words[(3 * n + i) % len(words)] for i in range(n)),
             "targets": "yes maybe"} for n in range(1, 21)]
    task = in_memory_task("lengths", {"validation": rows})
    torch.manual_seed(3)  # a seed whose random model does not predict one string for every input
    model = T5(ModelConfig(**{**TINY, "vocab_size": vocab.vocab_size})).eval().to(DEVICE)
    torch.compiler.reset()
    monkeypatch.setattr(kernels, "MAX_GRAPHS", 1)
    predictions, stats = {}, {}
    for compile in (False, True):
        _, records, stats[compile] = evaluate_task(model, task, vocab, "validation", device=torch.device(DEVICE),
                                                   decoding=DecodingConfig(batch_size=2, compile=compile))
        predictions[compile] = [r["prediction"] for r in records]
    lengths = sorted(len(ex["inputs"]) for ex in task.examples("validation", vocab))
    assert len(set(lengths[1::2])) == 10  # batches of 2 by length: each padded to another length
    assert predictions[True] == predictions[False] and len(set(predictions[False])) > 1
    assert "compile_seconds" not in stats[False]
    assert stats[True]["seconds"] < stats[True]["compile_seconds"]  # 20 tiny decodes take less than compiling
