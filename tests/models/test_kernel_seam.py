"""The seam between the plain network and the CPU kernels: ``model.kernels`` picks them, ``kernels.apply`` swaps
them both ways without touching the weights, a private operator that fails falls back to F.linear with one
log line, and FlexAttention missing from torch is one sentence."""

import logging
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from t2t import config as config_lib
from t2t.errors import T2TError
from t2t.models import dropout, flex, kernels
from t2t.models.presets import ModelConfig
from t2t.models.t5 import T5, add_adapters

TINY = dict(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)


def module_types(model: nn.Module) -> set[type]:
    return {type(m) for m in model.modules()}


def test_plain_models_hold_pytorchs_own_modules_and_functions():
    model = T5(ModelConfig(**TINY, kernels="plain"))
    assert {nn.Linear, nn.ReLU, dropout.Dropout} <= module_types(model)
    assert not module_types(model) & set(kernels.TUNED_MODULES.values())
    attention = model.encoder.blocks[0].self_attn
    assert attention.linear is F.linear and attention.sdpa is F.scaled_dot_product_attention
    assert model.linear is F.linear


def test_apply_swaps_both_ways_and_keeps_the_weights():
    model = T5(ModelConfig(**TINY, kernels="plain"))
    weights = {name: p for name, p in model.named_parameters()}
    kernels.apply(model, "auto")
    assert set(kernels.TUNED_MODULES.values()) <= module_types(model)
    assert not module_types(model) & {nn.Linear, nn.ReLU, dropout.Dropout}
    assert model.encoder.blocks[0].self_attn.sdpa is kernels.sdpa and model.linear is kernels.linear
    assert {name: p for name, p in model.named_parameters()} == weights  # the same tensors, not copies
    kernels.apply(model, "plain")
    assert not module_types(model) & set(kernels.TUNED_MODULES.values())
    assert model.linear is F.linear
    assert {name: p for name, p in model.named_parameters()} == weights


def test_adapters_added_later_get_the_models_kernels():
    model = T5(ModelConfig(**TINY))
    add_adapters(model, 4)
    assert type(model.encoder.blocks[0].ff.adapter.wi) is kernels.Linear


def test_an_unknown_kernels_setting_is_one_sentence():
    with pytest.raises(T2TError, match=r"unknown kernels 'fast'; use one of auto, plain\.$"):
        kernels.apply(nn.Linear(2, 2), "fast")
    with pytest.raises(T2TError, match="model.kernels"):
        config_lib.from_dict(ModelConfig, {**TINY, "kernels": "fast"}, "model")


@pytest.fixture
def flags(monkeypatch):
    """Every flag ``kernels.give_up`` clears, restored after the test."""
    for flag in ("HAS_ONEDNN", "CAN_PACK", "PACKS_BF16", "ONEDNN_UNPACKED", "PACKED_BY_MKL"):
        monkeypatch.setattr(kernels, flag, getattr(kernels, flag))


def test_a_private_operator_that_fails_leaves_f_linear_with_one_log_line(monkeypatch, caplog, flags):
    def broken(*args):
        raise RuntimeError("no kernel for this CPU\nmore detail")

    for flag in ("HAS_ONEDNN", "ONEDNN_UNPACKED", "CAN_PACK"):
        monkeypatch.setattr(kernels, flag, True)
    monkeypatch.setattr(kernels, "_onednn_product", broken)
    x, w = torch.randn(3, 8), torch.randn(5, 8)
    with caplog.at_level(logging.WARNING, logger="t2t.models.kernels"):
        first = kernels.linear(x.requires_grad_(True), w)
        second = kernels.linear(x, w)
    torch.testing.assert_close(first, F.linear(x, w))
    torch.testing.assert_close(second, F.linear(x, w))
    assert caplog.text.count("failed on this torch (no kernel for this CPU)") == 1
    assert not kernels.ONEDNN_UNPACKED and not kernels.CAN_PACK


def test_packing_that_fails_leaves_f_linear_with_one_log_line(monkeypatch, caplog, flags):
    def broken(*args):
        raise RuntimeError("cannot reorder")

    monkeypatch.setattr(kernels, "CAN_PACK", True)
    monkeypatch.setattr(kernels, "_by_packed_weight", broken)
    x, w = torch.randn(3, 8), torch.randn(5, 8)
    with caplog.at_level(logging.WARNING, logger="t2t.models.kernels"), torch.no_grad():
        with kernels.packed_weights({}):
            got = [kernels.linear(x, w) for _ in range(2)]
    for y in got:
        torch.testing.assert_close(y, F.linear(x, w))
    assert caplog.text.count("cannot reorder") == 1


def test_flex_attention_on_a_torch_older_than_its_proved_one_is_one_sentence(monkeypatch):
    monkeypatch.setattr(flex, "FLEX_TORCH_FLOOR", (99, 0))
    with pytest.raises(T2TError, match=r"model.attention=flex needs torch 99.0 or newer, and this is torch"):
        T5(ModelConfig(**TINY, attention="flex"))
    T5(ModelConfig(**TINY))  # sdpa needs nothing of it


def test_the_network_and_decoding_hold_no_hardware_branch_and_private_operators_live_in_kernels_alone():
    package = Path(kernels.__file__).resolve().parents[1]
    for module in ("models/t5.py", "models/decoding.py"):
        source = (package / module).read_text()
        for needle in ("torch.ops.", "is_compiling", "os.environ", "AuthenticAMD", "GenuineIntel", "cpuinfo",
                       "_is_amx", "mkldnn", "mkl."):
            assert needle not in source, f"{needle} in {module}"
    users = {str(path.relative_to(package)) for path in package.rglob("*.py")
             if re.search(r"torch\.ops\.(mkldnn|mkl)\b", path.read_text())}
    assert users == {"models/kernels.py"}
