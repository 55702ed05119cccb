"""t2t.kernels: the oneDNN-routed linear layer equals F.linear in value and gradients."""

import pytest
import torch
import torch.nn.functional as F

from t2t import kernels


def _grads(fn, x, w, grad_out):
    x = x.clone().requires_grad_(True)
    w = w.clone().requires_grad_(True)
    y = fn(x, w)
    y.backward(grad_out)
    return y.detach(), x.grad, w.grad


@pytest.mark.parametrize("shape", [(3, 7, 64), (5, 64), (0, 64)])
def test_linear_matches_f_linear_values_and_gradients(shape):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g)
    w = torch.randn(48, 64, generator=g)
    grad_out = torch.randn(*shape[:-1], 48, generator=g)
    ours = _grads(kernels.linear, x, w, grad_out)
    ref = _grads(F.linear, x, w, grad_out)
    for a, b in zip(ours, ref):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not kernels.HAS_ONEDNN, reason="this torch build has no oneDNN")
def test_fp32_cpu_takes_the_onednn_path_and_other_dtypes_do_not():
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(6, 8)
    assert type(kernels.linear(x, w).grad_fn).__name__ == "_CpuLinearBackward"
    assert kernels._use_onednn(x, w)
    assert not kernels._use_onednn(x.double(), w.double())
    assert not kernels._use_onednn(x.bfloat16(), w.bfloat16())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not kernels._use_onednn(x, w)


def test_linear_module_keeps_nn_linear_parameters():
    layer = kernels.Linear(8, 6)
    assert layer.bias is None and list(layer.state_dict()) == ["weight"]
    x = torch.randn(2, 8)
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight))


def test_autocast_is_bf16_on_the_cpu_for_bf16_and_off_for_fp32():
    x, w = torch.randn(4, 8), torch.randn(6, 8)
    with kernels.autocast("bf16", torch.device("cpu")):
        assert kernels.linear(x, w).dtype == torch.bfloat16
    with kernels.autocast("fp32", torch.device("cpu")):
        assert kernels.linear(x, w).dtype == torch.float32
