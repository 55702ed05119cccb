"""Decoding with compile=True (the static-shape decoding step through torch.compile) gives the tokens of the
eager step, for greedy and beam search, and for an encoder-decoder and a decoder-only model; on the GPU where
there is one (benchmarks/run_gpu.sh runs this file there)."""

import pytest
import torch

from t2t.models import kernels
from t2t.models.decoding import decoding_step
from t2t.models.t5 import T5, ModelConfig

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
            packed[kind] = len(cache.packed_weights)
    torch.testing.assert_close(logits["compiled"], logits["eager"], rtol=1e-5, atol=1e-5)
    if DEVICE == "cpu" and kernels.CAN_PACK:  # both multiply by weights packed once per call (kernels.packed_weights)
        assert packed["compiled"] == packed["eager"] > 0


@pytest.mark.parametrize("architecture", ["encoder_decoder", "decoder_only"])
def test_compiled_greedy_and_beam_search_give_the_eager_tokens(architecture):
    torch.manual_seed(0)
    model = T5(ModelConfig(**TINY, architecture=architecture)).eval().to(DEVICE)
    x = inputs()
    for kwargs in ({}, {"num_beams": 3}):
        eager = model.generate(x, max_new_tokens=12, **kwargs)
        compiled = model.generate(x, max_new_tokens=12, compile=True, **kwargs)
        assert torch.equal(compiled, eager), kwargs
