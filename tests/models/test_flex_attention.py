"""model.attention=flex (FlexAttention, T5's bias added inside the kernel, masks as block masks) computes what
the SDPA path computes, for every architecture on packed and on padded batches."""

import dataclasses

import numpy as np
import pytest
import torch

from t2t.data.features import get_converter
from t2t.errors import T2TError
from t2t.models.flex import FLEX_TORCH_FLOOR
from t2t.models.t5 import T5, ModelConfig

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"),  # flex_attention warns when not compiled
              pytest.mark.skipif(torch.__version__ < FLEX_TORCH_FLOOR, reason="t2t refuses flex on this torch")]

ARCHITECTURES = ["encoder_decoder", "shared_encoder_decoder", "decoder_only", "prefix_lm"]
TINY = dict(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, dropout_rate=0.0,
            relative_attention_max_distance=20)  # short: the log-spaced buckets are used


def batch_of(architecture: str, pack: bool) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(0)
    lengths = [(30, 9), (7, 3), (12, 20), (3, 4), (25, 11)]  # several per row when packed, padding when not
    examples = [{"inputs": rng.integers(3, 128, n).astype(np.int64), "targets": rng.integers(3, 128, m).astype(np.int64)}
                for n, m in lengths]
    return get_converter(architecture, 48, 24, pack=pack).convert(examples, batch_size=3 if pack else None)


def sdpa_and_flex(architecture: str, **changes) -> tuple[T5, T5]:
    torch.manual_seed(0)
    cfg = ModelConfig(**{**TINY, **changes}, architecture=architecture)
    sdpa = T5(cfg).eval()
    flex = T5(dataclasses.replace(cfg, attention="flex")).eval()
    flex.load_state_dict(sdpa.state_dict())
    return sdpa, flex


@pytest.mark.parametrize("pack", [True, False], ids=["packed", "padded"])
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_flex_logits_equal_sdpa(architecture, pack):
    sdpa, flex = sdpa_and_flex(architecture)
    batch = batch_of(architecture, pack)
    if pack:
        assert batch["decoder_segment_ids"].max() > 1  # rows hold several examples
    scored = batch["decoder_loss_weights"] > 0
    with torch.no_grad():
        expected = sdpa.project(sdpa.hidden_states(batch))[scored]
        got = flex.project(flex.hidden_states(batch))[scored]
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("max_distance", [20, 200], ids=["short", "longer-than-rows"])
def test_flex_bias_holds_for_positions_beyond_the_row(max_distance):
    # positions ten apart reach distances past both the row length and max_distance: the kernel's distance
    # table clamps them, which must give the buckets the SDPA path computes from the distances themselves
    sdpa, flex = sdpa_and_flex("encoder_decoder", relative_attention_max_distance=max_distance)
    batch = batch_of("encoder_decoder", pack=True)
    batch = {k: v * 10 if k.endswith("positions") else v for k, v in batch.items()}
    assert batch["encoder_positions"].max() > max_distance
    scored = batch["decoder_loss_weights"] > 0
    with torch.no_grad():
        expected = sdpa.project(sdpa.hidden_states(batch))[scored]
        got = flex.project(flex.hidden_states(batch))[scored]
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_flex_masks_matter():
    # the same model with the SDPA path on an unpacked reading of a packed batch differs: the comparison
    # above would notice a block mask that let segments see each other
    sdpa, flex = sdpa_and_flex("encoder_decoder")
    batch = batch_of("encoder_decoder", pack=True)
    unmasked = {k: v for k, v in batch.items() if "segment_ids" not in k and "positions" not in k}
    scored = batch["decoder_loss_weights"] > 0
    with torch.no_grad():
        leaky = flex.project(flex.hidden_states(unmasked))[scored]
        expected = sdpa.project(sdpa.hidden_states(batch))[scored]
    assert (leaky - expected).abs().max() > 1e-2


def test_flex_refuses_attention_dropout_in_training():
    cfg = ModelConfig(**{**TINY, "dropout_rate": 0.1}, attention="flex")
    model = T5(cfg).train()
    with pytest.raises(T2TError, match="no attention-probability dropout.*model.attention=sdpa"):
        model.hidden_states(batch_of("encoder_decoder", pack=False))


@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA, FlexAttention trains")
def test_flex_training_on_the_cpu_is_one_sentence():
    model = T5(ModelConfig(**TINY, attention="flex")).train()
    with pytest.raises(T2TError, match="forward only on the CPU.*model.attention=sdpa"):
        model.hidden_states(batch_of("encoder_decoder", pack=False))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="on the GPU alone")
def test_flex_refuses_heads_too_narrow_for_the_gpu_kernel():
    _, flex = sdpa_and_flex("encoder_decoder")  # d_kv 8
    with pytest.raises(T2TError, match="d_kv"):
        flex.cuda().hidden_states({k: v.cuda() for k, v in batch_of("encoder_decoder", pack=False).items()})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlexAttention has no backward on the CPU")
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_flex_gradients_equal_sdpa_on_cuda(architecture):
    sdpa, flex = (m.cuda().train() for m in sdpa_and_flex(architecture, d_kv=16))  # the GPU kernel's least
    batch = {k: v.cuda() for k, v in batch_of(architecture, pack=True).items()}
    grads = []
    for model in (sdpa, flex):
        loss, weight = model.loss_sums(batch)
        grads.append(torch.autograd.grad(loss / weight, list(model.parameters())))
    for expected, got in zip(*grads):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no GPU"))])
def test_evaluation_of_a_flex_model_takes_sdpa_and_gives_its_predictions(device, monkeypatch):
    """Evaluation pads each batch to its own length, and compiled flex makes a graph per shape; evaluation
    runs the SDPA path (T5.dense_attention), the same function, and the model is left as it was."""
    from t2t.evaluation.evaluate import DecodingConfig, evaluate_task
    from t2t.evaluation.metrics import accuracy
    from t2t.models import t5
    from t2t.testing import in_memory_task, tiny_vocabulary
    vocab = tiny_vocabulary()
    sdpa, flex = (m.to(device) for m in sdpa_and_flex("encoder_decoder", vocab_size=vocab.vocab_size, d_kv=16))
    rows = [{"inputs": "word " * n, "targets": ("yes", "no")[n % 2]} for n in (1, 4, 9, 16, 2, 25)]
    task = in_memory_task("lengths", {"validation": rows}, metric_fns=[accuracy], rank_choices=("yes", "no"))
    expected = {rank: evaluate_task(sdpa, task, vocab, "validation", decoding=DecodingConfig(batch_size=2),
                                    device=torch.device(device), rank_classification=rank)[1]
                for rank in (False, True)}

    def flex_kernel(*args):
        raise AssertionError("FlexAttention ran in evaluation")

    monkeypatch.setattr(t5, "flex_attention_of", flex_kernel)
    for rank in (False, True):
        _, records, _ = evaluate_task(flex, task, vocab, "validation", decoding=DecodingConfig(batch_size=2),
                                      device=torch.device(device), rank_classification=rank)
        assert [r["prediction"] for r in records] == [r["prediction"] for r in expected[rank]]
    assert flex.config.attention == "flex"
    with pytest.raises(AssertionError, match="FlexAttention ran"):  # outside evaluation, flex it is
        flex.encode(torch.tensor([[5, 6, 1]], device=device))
