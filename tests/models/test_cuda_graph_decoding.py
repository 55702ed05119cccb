"""Decoding replays its step as a CUDA graph on a CUDA device (``cuda_graph``, on by default), eager or compiled,
and gives what the plain step gives: the same logits at every position, the same tokens of greedy decoding, beam
search (its cache reordered in place) and seeded sampling, in fp32 and under bf16 autocast, for an
encoder-decoder and a decoder-only model. CUDA only
(benchmarks/run_gpu.sh runs this file on a GPU); on the CPU ``cuda_graph`` changes nothing, which every other
decoding test checks by leaving it at its default."""

import pytest
import torch
from test_compiled_decoding import TINY, inputs  # the same tiny model and ragged rows, on CUDA

from t2t.models import kernels
from t2t.models.decoding import decoding_step
from t2t.models.t5 import T5, ModelConfig

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")

ARCHITECTURES = ["encoder_decoder", "decoder_only"]


def model_and_inputs(architecture: str) -> tuple[T5, torch.Tensor]:
    torch.manual_seed(0)
    return T5(ModelConfig(**TINY, architecture=architecture)).eval().cuda(), inputs()


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_a_graphed_step_gives_the_plain_steps_logits_at_every_position(architecture, compile):
    model, x = model_and_inputs(architecture)
    fed = torch.randint(3, 96, (3, 10), generator=torch.Generator().manual_seed(3)).cuda()
    logits = {}
    with torch.no_grad():
        for kind, step in {"plain": model.decode_step,
                           "graphed": decoding_step(model, compile=compile, cuda_graph=True)}.items():
            cache, _ = model.begin_decoding(x, fed.shape[1] + 1)
            logits[kind] = torch.stack([step(fed[:, t], cache).clone() for t in range(fed.shape[1])])
    torch.testing.assert_close(logits["graphed"], logits["plain"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("beams", [1, 3])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_graphed_greedy_decoding_and_beam_search_give_the_plain_tokens(architecture, compile, precision, beams):
    model, x = model_and_inputs(architecture)
    with kernels.autocast(precision, x.device):
        plain = model.generate(x, max_new_tokens=12, min_new_tokens=3, num_beams=beams, cuda_graph=False)
        graphed = model.generate(x, max_new_tokens=12, min_new_tokens=3, num_beams=beams, compile=compile)
    assert torch.equal(graphed, plain)


def test_a_graphed_step_refuses_a_cache_whose_buffers_were_replaced():
    model, x = model_and_inputs("encoder_decoder")
    step = decoding_step(model, cuda_graph=True)
    with torch.no_grad():
        cache, _ = model.begin_decoding(x, 4, num_beams=2)
        tokens = torch.full((x.shape[0] * 2,), 5, device=x.device)
        step(tokens, cache)
        cache.reorder(torch.arange(x.shape[0] * 2, device=x.device).flip(0))  # new buffers, as before in-place
        with pytest.raises(RuntimeError, match="buffers were replaced after its CUDA graph was captured"):
            step(tokens, cache)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_graphed_sampling_draws_the_plain_samples(architecture):
    model, x = model_and_inputs(architecture)
    samples = {graph: model.generate(x, max_new_tokens=12, temperature=1.0, top_k=20, cuda_graph=graph,
                                     generator=torch.Generator("cuda").manual_seed(5)) for graph in (False, True)}
    assert torch.equal(samples[True], samples[False])
