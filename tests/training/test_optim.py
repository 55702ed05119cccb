"""Optimizers and schedules as the T5 paper used them."""

import copy
import math

import numpy as np
import pytest
import torch

from t2t.errors import T2TError
from t2t.training.adafactor import Adafactor
from t2t.training.optim import (
    ADAFACTOR_EPSILON1,
    OptimizerConfig,
    build_optimizer,
    build_scheduler,
    learning_rate_factor,
)


def test_rsqrt_schedule_is_t5s_inverse_square_root():
    cfg = OptimizerConfig(learning_rate=0.01, schedule="rsqrt")
    for step in (0, 99, 9_999, 10_000, 65_535, 524_287):
        lr = cfg.learning_rate * learning_rate_factor(step, cfg, total_steps=524_288)
        assert lr == pytest.approx(1 / math.sqrt(max(step + 1, 10_000)))


@pytest.mark.parametrize("schedule, expected_end", [("constant", 1.0), ("linear", 0.0), ("cosine", 0.0)])
def test_warmup_then_decay(schedule, expected_end):
    cfg = OptimizerConfig(schedule=schedule, warmup_steps=10)
    factors = [learning_rate_factor(s, cfg, total_steps=100) for s in range(100)]
    assert factors[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert factors[-1] == pytest.approx(expected_end, abs=1e-12)
    assert all(a >= b for a, b in zip(factors[10:], factors[11:]))


def mesh_tf_adafactor_step(param, grad, row, col, step, lr):
    """One step of T5's Adafactor (Shazeer & Stern 2018 as configured by T5) in NumPy, for comparison."""
    decay = 1.0 - step ** -0.8
    squared = grad ** 2 + 1e-30                                              # epsilon1
    row[:] = decay * row + (1 - decay) * squared.mean(axis=1)
    col[:] = decay * col + (1 - decay) * squared.mean(axis=0)
    estimate = np.outer(row / row.mean(), col)
    update = grad / np.sqrt(estimate)
    update /= max(1.0, np.sqrt((update ** 2).mean()) / 1.0)                 # update clipping, d = 1
    scale = max(1e-3, np.sqrt((param ** 2).mean()))                          # parameter scaling
    return param - min(lr, step ** -0.5) * scale * update


def test_adafactor_matches_t5s_update_rule():
    rng = np.random.default_rng(0)
    param0 = rng.normal(size=(256, 128)).astype(np.float64)
    model = torch.nn.Linear(128, 256, bias=False).double()
    model.weight.data = torch.tensor(param0)
    optimizer = build_optimizer(model, OptimizerConfig(name="adafactor", learning_rate=0.01))
    param, row, col = param0.copy(), np.zeros(256), np.zeros(128)
    for step in range(1, 6):
        grad = rng.normal(size=(256, 128))
        model.weight.grad = torch.tensor(grad)
        optimizer.step()
        param = mesh_tf_adafactor_step(param, grad, row, col, step, lr=0.01)
        np.testing.assert_allclose(model.weight.detach().numpy(), param, rtol=1e-10, atol=1e-12)


def test_adafactor_takes_t5s_step_on_tiny_float32_gradients():
    """Rows whose gradients are ~1e-9 (a tied output layer's rows for the tokens no target of the batch is)
    get T5's full, normalised step: Mesh TF adds epsilon1 = 1e-30 to g², where torch's default epsilon1
    (the float32 eps) floors the estimate at 1.4e-14 and shrinks their step ~100-fold. The tolerance is a
    hundredth of one step (lr 1e-3 × RMS(param) 1), far above float32 rounding of params near 1."""
    rng = np.random.default_rng(0)
    param0 = rng.normal(size=(256, 128)).astype(np.float32)
    model = torch.nn.Linear(128, 256, bias=False)
    model.weight.data = torch.tensor(param0)
    optimizer = build_optimizer(model, OptimizerConfig(name="adafactor", learning_rate=1e-3))
    param, row, col = param0.astype(np.float64), np.zeros(256), np.zeros(128)
    scale = np.where(np.arange(256) % 2 == 0, 1e-2, 1e-9)[:, None]  # every other row: tiny gradients
    for step in range(1, 4):
        grad = (rng.normal(size=(256, 128)) * scale).astype(np.float32)
        model.weight.grad = torch.tensor(grad)
        optimizer.step()
        param = mesh_tf_adafactor_step(param, grad.astype(np.float64), row, col, step, lr=1e-3)
        np.testing.assert_allclose(model.weight.detach().numpy(), param, rtol=0, atol=1e-5)


def test_adafactor_leaves_rows_without_gradient_where_they_are():
    """An untied embedding's rows for tokens no batch holds get exactly zero gradients, so their second-moment
    rows are 0 (and a matrix no batch reaches is 0 throughout): the estimate is floored at epsilon1², the
    update is 0 × a large finite number, and those rows stay put while the others move."""
    torch.manual_seed(0)
    embedding, unused = torch.nn.Parameter(torch.randn(6, 4)), torch.nn.Parameter(torch.randn(3, 5))
    start = [embedding.detach().clone(), unused.detach().clone()]
    optimizer = build_optimizer(torch.nn.ParameterList([embedding, unused]), OptimizerConfig(learning_rate=0.01))
    for _ in range(3):
        grad = torch.randn(6, 4)
        grad[[1, 4]] = 0.0
        embedding.grad, unused.grad = grad, torch.zeros(3, 5)
        optimizer.step()
    moved = (embedding.detach() - start[0]).abs().amax(dim=1)
    assert torch.isfinite(embedding).all() and torch.equal(unused.detach(), start[1])
    assert (moved[[1, 4]] == 0).all() and (moved[[0, 2, 3, 5]] > 1e-3).all()


def adafactor_pair(weight_decay: float):
    """torch's Adafactor and t2t's, each over its own copy of a matrix and a vector."""
    torch.manual_seed(0)
    start = [torch.randn(48, 32), torch.randn(32)]
    settings = dict(lr=0.01, beta2_decay=-0.8, d=1.0, eps=(ADAFACTOR_EPSILON1, 1e-3), weight_decay=weight_decay)
    theirs = [torch.nn.Parameter(p.clone()) for p in start]
    ours = [torch.nn.Parameter(p.clone()) for p in start]
    return (theirs, torch.optim.Adafactor(theirs, foreach=False, **settings)), (ours, Adafactor(ours, **settings))


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_adafactor_takes_torchs_step_from_torchs_state(weight_decay):
    """From the same parameters, gradients and state (torch's, loaded into t2t's each step), t2t's step lands
    where torch's does up to float32 rounding: its scale differs from torch's float64 one by a few units in the
    last place, so each entry may differ by one spacing of the parameter plus 8 float32 eps of its update."""
    (theirs, torch_adafactor), (ours, adafactor) = adafactor_pair(weight_decay)
    generator = torch.Generator().manual_seed(1)
    for _ in range(5):
        adafactor.load_state_dict(copy.deepcopy(torch_adafactor.state_dict()))  # not sharing its tensors
        before = [p.detach().clone() for p in theirs]
        for a, b in zip(theirs, ours):
            b.data.copy_(a.data)
            a.grad = torch.randn(a.shape, generator=generator)
            b.grad = a.grad.clone()
        torch_adafactor.step()
        adafactor.step()
        for a, b, start in zip(theirs, ours, before):
            expected, got = a.detach().numpy(), b.detach().numpy()
            bound = np.spacing(np.abs(expected)) + 8 * np.finfo(np.float32).eps * np.abs(expected - start.numpy())
            assert (np.abs(got - expected) <= bound).all()
    assert all(s["step"].item() == 5 for s in adafactor.state.values())


def test_adafactor_step_reads_nothing_back_from_the_parameters():
    """On a GPU each value read back to the host waits for the device; t2t's step reads only its step counts
    (CPU tensors, as in torch). Every read of a tensor's value as a Python number is recorded."""
    (_, _), (ours, adafactor) = adafactor_pair(weight_decay=0.1)
    reads = []
    originals = {name: getattr(torch.Tensor, name) for name in ("item", "__float__", "__bool__", "__int__", "tolist")}

    def recording(name):
        def read(tensor, *args):
            reads.append(tensor)
            return originals[name](tensor, *args)
        return read

    for p in ours:
        p.grad = torch.randn(p.shape)
    try:
        for name in originals:
            setattr(torch.Tensor, name, recording(name))
        adafactor.step()
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
    steps = [state["step"] for state in adafactor.state.values()]
    assert len(reads) == len(steps) and all(any(r is s for s in steps) for r in reads)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_adafactor_step_never_waits_for_the_gpu():
    model = torch.nn.Linear(32, 48).cuda()
    optimizer = build_optimizer(model, OptimizerConfig(name="adafactor", weight_decay=0.1))
    for _ in range(2):
        model(torch.randn(4, 32, device="cuda")).square().sum().backward()
        torch.cuda.set_sync_debug_mode("error")  # any synchronizing call raises
        try:
            optimizer.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        optimizer.zero_grad()


def test_scheduler_drives_the_optimizer_learning_rate():
    model = torch.nn.Linear(2, 2)
    cfg = OptimizerConfig(name="adamw", learning_rate=0.1, schedule="linear", warmup_steps=2)
    optimizer = build_optimizer(model, cfg)
    scheduler = build_scheduler(optimizer, cfg, total_steps=4)
    lrs = []
    for _ in range(4):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs == pytest.approx([0.05, 0.1, 0.05, 0.0])


@pytest.mark.parametrize("rate", [math.inf, math.nan, -1.0])
def test_a_learning_rate_that_is_not_a_finite_positive_number_is_refused(rate):
    with pytest.raises(T2TError, match=r"setting learning_rate must be (a finite number )?> 0"):
        OptimizerConfig(learning_rate=rate)


@pytest.mark.parametrize("settings, message", [
    (dict(adam_betas=(0.9, 0.98)), r"optimizer.adam_betas \(0.9, 0.98\) is only read when optimizer.name is adamw, "
                                   r"and it is adafactor"),
    (dict(adam_eps=1e-6), "optimizer.adam_eps 1e-06 is only read when optimizer.name is adamw"),
    (dict(name="adamw", schedule="linear", rsqrt_offset=100),
     "optimizer.rsqrt_offset 100 is only read when optimizer.schedule is rsqrt, and it is linear"),
])
def test_a_setting_the_optimizer_or_schedule_never_reads_is_refused(settings, message):
    with pytest.raises(T2TError, match=message):
        OptimizerConfig(**settings)
    OptimizerConfig(**{**settings, "name": "adamw", "schedule": "rsqrt"})  # where it is read, it is taken
