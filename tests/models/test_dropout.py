"""t2t.models.dropout: inside row_generators each row's masks are a function of its seed alone, for the plain
Dropout and for the tuned one (t2t.models.kernels), eager and compiled, in the whole model too."""

import pytest
import torch

from t2t.models import kernels
from t2t.models.dropout import Dropout, row_generators
from t2t.models.presets import ModelConfig
from t2t.models.t5 import T5

DROPOUTS = {"plain": Dropout, "auto": kernels.Dropout}


@pytest.mark.parametrize("kind", sorted(DROPOUTS))
def test_each_rows_masks_are_a_function_of_its_seed_alone(kind):
    dropout = DROPOUTS[kind](0.5)
    x = torch.randn(3, 4, 33)
    with row_generators([11, 12, 13]):
        whole = dropout(x)
        second = dropout(x)  # the generators advance: a second mask differs
    with row_generators([12]):
        middle = dropout(x[1:2])
    with row_generators([13, 11]):
        swapped = dropout(x[[2, 0]])
    torch.testing.assert_close(middle, whole[1:2], rtol=0, atol=0)
    torch.testing.assert_close(swapped, whole[[2, 0]], rtol=0, atol=0)
    assert not torch.equal(whole[0] == 0, whole[1] == 0) and not torch.equal(whole == 0, second == 0)
    torch.manual_seed(0)  # torch's generator plays no part inside
    with row_generators([11, 12, 13]):
        assert torch.equal(dropout(x), whole)
    with row_generators([1, 2]), pytest.raises(RuntimeError, match="3 rows"):
        dropout(x)


def test_the_plain_masks_keep_one_minus_p_at_the_exact_scale():
    dropout = Dropout(0.1)
    x = torch.ones(4, 250_000)
    with row_generators([1, 2, 3, 4]):
        y = dropout(x)
    kept = (y != 0).double().mean().item()
    assert abs(kept - 0.9) < 5 * (0.09 / x.numel()) ** 0.5
    assert torch.all(y[y != 0] == torch.tensor(1 / 0.9))


def test_outside_row_generators_and_in_eval_the_plain_dropout_is_torchs():
    dropout, x = Dropout(0.3), torch.randn(4, 50)
    torch.manual_seed(5)
    expected = torch.nn.functional.dropout(x, 0.3, True)
    torch.manual_seed(5)
    assert torch.equal(dropout(x), expected)
    assert dropout.eval()(x) is x


@pytest.mark.parametrize("kind", sorted(DROPOUTS))
def test_compiled_code_draws_the_eager_masks_in_the_eager_order(kind):
    """Two draws of one shape in one graph stay two masks, and the gradients use them."""
    dropout = DROPOUTS[kind](0.3)

    def twice(x):
        return dropout(x) + 2 * dropout(x)

    x, grad_out, results = torch.randn(4, 3, 16), torch.randn(4, 3, 16), []
    for fn in (twice, torch.compile(twice, fullgraph=True)):
        xg = x.clone().requires_grad_(True)
        with row_generators([7, 8, 9, 10]):
            y = fn(xg)
        y.backward(grad_out)
        results.append((y.detach(), xg.grad))
    (eager, eager_grad), (compiled, compiled_grad) = results
    torch.testing.assert_close(compiled, eager, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(compiled_grad, eager_grad, rtol=1e-6, atol=1e-6)
    assert not torch.equal(eager, 3 * dropout(x).detach())


@pytest.mark.parametrize("kind", kernels.KINDS)
def test_a_rows_training_loss_does_not_depend_on_the_rows_beside_it(kind):
    """The model's every dropout, attention probabilities included, draws by row: the loss of rows 0..3 with
    their seeds is the sum of the losses of rows 0..1 and 2..3 with theirs (as a batch split over processes)."""
    torch.manual_seed(0)
    model = T5(ModelConfig(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                           dropout_rate=0.2, kernels=kind)).train()
    g = torch.Generator().manual_seed(1)
    batch = {"encoder_input_tokens": torch.randint(2, 64, (4, 9), generator=g),
             "decoder_input_tokens": torch.randint(2, 64, (4, 5), generator=g),
             "decoder_target_tokens": torch.randint(2, 64, (4, 5), generator=g)}
    seeds = [101, 102, 103, 104]

    def loss(rows):
        with row_generators([seeds[r] for r in rows]):
            return model.loss_sums({k: v[rows] for k, v in batch.items()})[0]

    whole = loss([0, 1, 2, 3])
    torch.testing.assert_close(whole, loss([0, 1]) + loss([2, 3]), rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        assert not torch.allclose(whole, model.eval().loss_sums(batch)[0])  # dropout did act
