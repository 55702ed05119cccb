"""LoRA (Hu et al. 2021): only the low-rank updates train, runs resume exactly, trained-only checkpoints load on
their base, and both exports (folded into the weights; a PEFT adapter) compute t2t's logits in transformers."""

import pytest
import torch
from test_transfer import TINY, copy_task, run, tiny_model, weights  # noqa: F401 (copy_task: a fixture)

from t2t.checkpoints import native as checkpoint
from t2t.checkpoints.loading import load_model
from t2t.errors import T2TError
from t2t.models import lora
from t2t.training.transfer import TransferConfig, prepare_transfer

TOKENS = torch.randint(3, 500, (2, 7), generator=torch.Generator().manual_seed(0))


def with_random_updates(model):
    """``model`` with LoRA on q and v whose B is random (a fresh one is zero: no update to see)."""
    prepare_transfer(model, TransferConfig(lora_rank=4, lora_alpha=8), train_steps=1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, lora.LoRALinear):
                module.lora_B.normal_(generator=torch.Generator().manual_seed(1))
    return model.eval()


def test_a_new_lora_layer_is_its_base_and_only_the_updates_take_gradients():
    base = tiny_model().eval()
    model = tiny_model()
    schedule = prepare_transfer(model, TransferConfig(lora_rank=4), train_steps=1)
    model.eval()
    torch.testing.assert_close(model(TOKENS, TOKENS), base(TOKENS, TOKENS))  # B starts at zero
    model(TOKENS, TOKENS).sum().backward()
    trained = {name for name, p in model.named_parameters() if p.grad is not None}
    # q and v of every attention: 3 encoder self, 2 decoder self and 2 decoder cross attentions
    assert trained == {n for n, _ in model.named_parameters() if n.endswith((".lora_A", ".lora_B"))}
    assert len(trained) == 2 * 2 * (3 + 2 + 2) and trained == schedule.trainable_names(0)


def test_decoding_multiplies_by_the_updated_weights():
    """Decoding concatenates q|k|v once per call instead of calling the modules: it must see the updates."""
    model = with_random_updates(tiny_model())
    logits, tokens = model(TOKENS, TOKENS), model.generate(TOKENS, max_new_tokens=6)
    assert (logits - tiny_model().eval()(TOKENS, TOKENS)).abs().max() > 1e-2  # the updates matter
    lora.drop_lora(model, merge=True)
    assert not any(isinstance(m, lora.LoRALinear) for m in model.modules())
    # x·(W + sBA) against x·W + s·(x·A)·B: the same sums in another order, so float32 rounding of the largest
    # terms, each about 1e-7 of the logits' scale, summed over the layers
    scale = logits.abs().max()
    torch.testing.assert_close(model(TOKENS, TOKENS), logits, rtol=0, atol=1e-5 * float(scale.detach()))
    assert torch.equal(model.generate(TOKENS, max_new_tokens=6), tokens)


def test_lora_trains_only_its_updates_and_resumes_exactly(copy_task):  # noqa: F811
    run(copy_task, "base", steps=2)
    base = str(copy_task / "base")
    lora_settings = dict(init_from=base, lora_rank=4, lora_dropout=0.1, lora_targets=["q", "v", "wo"])
    straight = run(copy_task, "straight", steps=6, **lora_settings)
    run(copy_task, "resumed", steps=3, **lora_settings)
    resumed = run(copy_task, "resumed", steps=6, **lora_settings)
    assert [r["loss"] for r in resumed] == [r["loss"] for r in straight]
    assert straight[-1]["loss"] < straight[0]["loss"]
    before, after = weights(base), weights(copy_task / "straight")
    assert set(after) - set(before) == {n for n in after if n.endswith((".lora_A", ".lora_B"))}
    for name, value in before.items():
        assert torch.equal(value, after[name]), f"{name} changed, but only the LoRA updates train"
    assert all(not torch.equal(after[n], torch.zeros_like(after[n])) for n in after if n.endswith(".lora_B"))


def test_a_trained_only_lora_checkpoint_loads_on_its_base(copy_task):  # noqa: F811
    run(copy_task, "base", steps=2)
    base = str(copy_task / "base")
    run(copy_task, "full", steps=3, init_from=base, lora_rank=4)
    run(copy_task, "slim", steps=3, init_from=base, lora_rank=4, save_trained_only=True)
    size = lambda name: (checkpoint.latest_checkpoint(copy_task / name) / "model.safetensors").stat().st_size
    assert size("slim") < 0.2 * size("full")
    slim, full = load_model(copy_task / "slim"), load_model(copy_task / "full")
    assert torch.equal(slim(TOKENS, TOKENS), full(TOKENS, TOKENS))


def test_lora_settings_are_checked(copy_task):  # noqa: F811
    with pytest.raises(T2TError, match="'query', which is not a linear layer of T5"):
        prepare_transfer(tiny_model(), TransferConfig(lora_rank=4, lora_targets=["query"]), train_steps=1)
    with pytest.raises(T2TError, match="matches no linear layer of this model"):
        prepare_transfer(tiny_model(), TransferConfig(lora_rank=4, lora_targets=["wi_0"]), train_steps=1)
    with pytest.raises(T2TError, match="choose one"):
        TransferConfig(lora_rank=4, adapter_dim=8)
    run(copy_task, "base", steps=2)
    run(copy_task, "lora", steps=2, init_from=str(copy_task / "base"), lora_rank=4)
    with pytest.raises(T2TError, match="already has LoRA of rank 4, alpha 4 on \\['q', 'v'\\], not rank 8"):
        run(copy_task, "again", steps=2, init_from=str(copy_task / "lora"), lora_rank=8)


def test_a_lora_model_is_not_exported_to_hugging_face_unfolded(tmp_path):
    from t2t.checkpoints.hf import to_hf
    with pytest.raises(T2TError, match="has no LoRA layers; fold them into the weights first"):
        to_hf(with_random_updates(tiny_model()), tmp_path / "hf")


@pytest.mark.integration
def test_both_exports_compute_t2ts_logits_in_transformers(copy_task, capsys):  # noqa: F811
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    from t2t.cli.export import export_main
    run(copy_task, "base", steps=2)
    run(copy_task, "lora", steps=4, init_from=str(copy_task / "base"), lora_rank=4, lora_alpha=16,
        lora_targets=["q", "v", "wi"])
    model = load_model(copy_task / "lora").eval()
    expected = model(TOKENS, TOKENS)
    assert export_main(["--checkpoint", str(copy_task / "lora"), "--to", "peft", str(copy_task / "peft")]) == 0
    assert export_main(["--checkpoint", str(copy_task / "lora"), "--to", "hf", str(copy_task / "merged")]) == 0
    assert "folding the LoRA updates into the weights" in capsys.readouterr().out
    hf_base = transformers.T5ForConditionalGeneration.from_pretrained(copy_task / "peft" / "base")
    with_adapter = peft.PeftModel.from_pretrained(hf_base, copy_task / "peft").eval()
    merged = transformers.T5ForConditionalGeneration.from_pretrained(copy_task / "merged").eval()
    decoder_inputs = torch.cat([torch.zeros_like(TOKENS[:, :1]), TOKENS[:, :-1]], 1)
    with torch.no_grad():
        for hf_model in (with_adapter, merged):
            got = hf_model(input_ids=TOKENS, decoder_input_ids=decoder_inputs).logits
            want = model(TOKENS, decoder_inputs)
            torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
    assert expected.shape == want.shape
    base_weights = weights(copy_task / "base")  # the adapter's base is the run's weights without the updates
    exported = transformers.T5ForConditionalGeneration.from_pretrained(copy_task / "peft" / "base").state_dict()
    assert torch.equal(exported["encoder.block.0.layer.0.SelfAttention.q.weight"],
                       base_weights["encoder.blocks.0.self_attn.q.weight"])
