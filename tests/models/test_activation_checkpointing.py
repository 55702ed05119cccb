"""Activation checkpointing (``activation_checkpointing: true``) trains the model it trains without: the blocks'
recomputation in the backward pass draws the dropout masks their forward drew, in every architecture, with
the plain and the tuned CPU dropout, under FSDP and compiled; 20 training steps log the same losses.

Tolerance: eager recomputation runs the same kernels on the same inputs in the same order as the forward
pass did, so losses and gradients agree bitwise (asserted exactly); a mask drawn afresh in the
recomputation changes gradients by far more than rounding (tens of percent of some entries), and fails.
"""

import pytest
import torch
from test_train import copy_task, losses, settings  # noqa: F401 (copy_task is a fixture)

from t2t.models import checkpointing
from t2t.models.dropout import row_generators
from t2t.models.t5 import T5, ModelConfig
from t2t.training.train import train

TINY = dict(vocab_size=512, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, dropout_rate=0.1)
ARCHITECTURES = ["encoder_decoder", "shared_encoder_decoder", "decoder_only", "prefix_lm"]
ROWS = 4


def batch(architecture: str) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    tokens = lambda n: torch.randint(2, 500, (ROWS, n), generator=g)
    if architecture in ("decoder_only", "prefix_lm"):
        features = dict(decoder_input_tokens=tokens(24), decoder_target_tokens=tokens(24))
        if architecture == "prefix_lm":
            features["decoder_causal_attention"] = (torch.arange(24) < 10).long().expand(ROWS, 24)
        return features
    return dict(encoder_input_tokens=tokens(16), decoder_input_tokens=tokens(8), decoder_target_tokens=tokens(8))


def loss_and_grads(model: T5, features: dict, checkpointed: bool, loss_fn=None):
    """One training forward (row-seeded dropout, as the trainer draws it) and backward."""
    checkpointing.enable(model, checkpointed)
    model.zero_grad()
    loss_fn = loss_fn or (lambda b: model.loss_sums(b)[0])
    with row_generators([11 + row for row in range(ROWS)]):
        loss = loss_fn(features)
    loss.backward()  # outside row_generators, as in train_step: the recomputation runs here
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("kernels", ["plain", "auto"])
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_checkpointed_blocks_give_the_same_loss_and_gradients(architecture, kernels):
    torch.manual_seed(0)
    model = T5(ModelConfig(**TINY, architecture=architecture, kernels=kernels)).train()
    features = batch(architecture)
    loss, grads = loss_and_grads(model, features, checkpointed=False)
    loss_ckpt, grads_ckpt = loss_and_grads(model, features, checkpointed=True)
    assert torch.equal(loss, loss_ckpt)
    assert grads.keys() == grads_ckpt.keys()
    for name in grads:
        assert torch.equal(grads[name], grads_ckpt[name]), name


def test_checkpointing_keeps_only_the_blocks_inputs():
    """The point of it: the blocks' intermediate tensors are not kept for the backward pass."""
    torch.manual_seed(0)
    model = T5(ModelConfig(**TINY)).train()
    features = batch("encoder_decoder")

    def saved_bytes(checkpointed: bool) -> int:
        checkpointing.enable(model, checkpointed)
        total = 0

        def pack(t):
            nonlocal total
            total += t.numel() * t.element_size()
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), row_generators(list(range(ROWS))):
            model.loss_sums(features)
        return total
    assert saved_bytes(True) < 0.6 * saved_bytes(False)


def test_evaluation_and_no_grad_run_the_blocks_plainly(monkeypatch):
    """Checkpointing is for the backward pass: in eval mode and under no_grad the blocks run as they are."""
    calls = []
    monkeypatch.setattr("t2t.models.t5.checkpointed", lambda block, *args: calls.append(block) or block(*args))
    model = T5(ModelConfig(**TINY))
    checkpointing.enable(model)
    features = batch("encoder_decoder")
    model.eval().loss_sums(features)
    with torch.no_grad():
        model.train().loss_sums(features)
    assert calls == []
    model.train().loss_sums(features)
    assert len(calls) == 4  # 2 encoder + 2 decoder blocks


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_checkpointed_blocks_under_fsdp_give_the_same_gradients():
    """FSDP gathers a block's weights again for its recomputation (one process here: the hooks, not the
    sharding, are what checkpointing meets)."""
    from t2t.models import distributed
    from t2t.training.train import TrainingObjective
    torch.manual_seed(0)
    model = T5(ModelConfig(**TINY))
    features = batch("encoder_decoder")
    features["decoder_loss_weights"] = torch.ones_like(features["decoder_target_tokens"])
    torch.distributed.init_process_group("gloo", rank=0, world_size=1, store=torch.distributed.HashStore())
    try:
        wrapped = distributed.wrap_model(TrainingObjective(model), "fsdp", torch.device("cpu")).train()
        full = lambda grads: {k: v.full_tensor() for k, v in grads.items()}
        loss, grads = loss_and_grads(model, features, False, loss_fn=wrapped)
        loss_ckpt, grads_ckpt = loss_and_grads(model, features, True, loss_fn=wrapped)
    finally:
        torch.distributed.destroy_process_group()
    assert torch.equal(loss, loss_ckpt)
    grads, grads_ckpt = full(grads), full(grads_ckpt)
    for name in grads:
        assert torch.equal(grads[name], grads_ckpt[name]), name


@pytest.mark.integration  # compiling takes seconds on 2 cores
def test_a_compiled_checkpointed_block_keeps_the_eager_dropout_masks():
    """Compiled, the masks are kept from the forward pass (selective checkpointing): recomputed in the backward
    graph they would be drawn without the step's row generators. Compiled CPU kernels round differently from
    eager ones, so the comparison is a compiled block with and without checkpointing (one block: the same
    graph a model's blocks make, in a fraction of the compile time)."""
    torch.manual_seed(0)
    block = T5(ModelConfig(**TINY)).train().encoder.blocks[0]
    x = torch.randn(ROWS, 16, TINY["d_model"], requires_grad=True)
    run = torch.compile(lambda x, on: checkpointing.checkpointed(block, x, None) if on else block(x, None),
                        fullgraph=True)

    def grads(on: bool):
        block.zero_grad()
        x.grad = None
        with row_generators([11 + row for row in range(ROWS)]):
            y = run(x, on)
        y.square().sum().backward()
        return y.detach(), [x.grad, *(p.grad for p in block.parameters())]
    y, expected = grads(False)
    y_ckpt, found = grads(True)
    torch.testing.assert_close(y_ckpt, y, rtol=1e-6, atol=1e-6)
    for a, b in zip(found, expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.integration
def test_twenty_training_steps_log_the_losses_of_the_run_without_it(copy_task, tmp_path):
    """The issue's check: t5-tiny, dropout 0.1, fp32, 20 steps; equal losses (see the module doc)."""
    run = lambda name, **on: losses(train(settings(copy_task, tmp_path / name, model="t5-tiny", dropout_rate=0.1,
                                                   train_steps=20, save_every=20, **on)))
    plain = run("plain")
    assert run("checkpointed", activation_checkpointing=True) == plain
    assert plain[-1] < plain[0]  # it trained
