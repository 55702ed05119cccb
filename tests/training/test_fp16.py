"""precision: fp16 — autocast with dynamic loss scaling: it follows fp32, skips and logs a step whose gradients
overflow, resumes exactly (the scaler's state is in the checkpoint), and keeps T5's feed-forward overflow finite
where transformers' fp16 turns it into NaN.

Tolerance for following fp32 (50 steps of t5-tiny, T5 1.0 and 1.1, AdamW at 1e-2): the first step's loss is
the same weights' loss, so it differs only by rounding. Each per-token loss comes out of products rounded to
fp16's 11 significant bits and accumulated in fp32, and the mean over the batch averages their errors, so it
stays within fp16's unit roundoff, 2^-11 ≈ 4.9e-4, of the fp32 loss (measured: 2.6e-5 and 3.0e-5; bf16's
8 bits gave 5.7e-5 and 6.8e-4, so the bound tells the two apart). After that the runs' weights differ, and a
tiny model at this rate amplifies any difference in the weights, so later steps are held to what bf16 training, the precision T5 trained in, does: a mean relative difference
at most 1.25 times bf16's (measured on T5 1.0: 2.6% against 2.5%). A skipped step, an fp16 forward that
overflowed, or a scale applied twice is far outside both.
"""

import json
import logging
import math

import pytest
import torch
from test_train import copy_task, losses, settings  # noqa: F401 (copy_task is a fixture)

from t2t.checkpoints import native as checkpoint
from t2t.errors import T2TError
from t2t.models import distributed
from t2t.models.t5 import T5, ModelConfig
from t2t.training import precision
from t2t.training.train import train

T5_1_1 = {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False}


def run(copy_task, out, model: dict, **changes) -> list[dict]:
    return train(settings(copy_task, out, model={"preset": "t5-tiny", **model}, **changes))


@pytest.mark.integration  # a training run
@pytest.mark.parametrize("version, model", [("1.0", {}), ("1.1", T5_1_1)])
def test_fp16_follows_the_fp32_losses(copy_task, tmp_path, version, model):
    records = {p: run(copy_task, tmp_path / p, model, train_steps=50, save_every=50, precision=p)
               for p in ("fp32", "fp16", "bf16")}
    runs = {p: losses(r) for p, r in records.items()}
    stray = {p: [abs(a - b) / b for a, b in zip(runs[p], runs["fp32"])] for p in ("fp16", "bf16")}
    mean = {p: sum(v) / len(v) for p, v in stray.items()}
    assert all(math.isfinite(x) for x in runs["fp16"])
    assert sum(r["skipped_steps"] for r in records["fp16"]) == 0
    assert stray["fp16"][0] <= 2 ** -11, stray["fp16"][0]
    assert mean["fp16"] <= 1.25 * mean["bf16"], (mean, stray["fp16"][0], stray["bf16"][0])
    assert runs["fp16"][-1] < runs["fp16"][0] - 1.0  # it trained


def inject_inf_at(monkeypatch, bad_step: int) -> None:
    """An inf in one gradient at 0-based step ``bad_step``, just before the scaler looks at them."""
    step = precision.LossScaling.step

    def step_with_inf(self, optimizer, at):
        if at == bad_step:
            optimizer.param_groups[0]["params"][0].grad.view(-1)[0] = math.inf
        step(self, optimizer, at)
    monkeypatch.setattr(precision.LossScaling, "step", step_with_inf)


@pytest.mark.integration  # a training run
def test_an_overflowing_step_is_skipped_logged_and_counted(copy_task, tmp_path, monkeypatch, caplog):
    inject_inf_at(monkeypatch, 2)
    with caplog.at_level(logging.WARNING, logger="t2t.training.precision"):
        records = run(copy_task, tmp_path / "run", {}, train_steps=5, save_every=5, precision="fp16")
    assert [r["skipped_steps"] for r in records] == [0, 0, 1, 0, 0]
    assert [r["loss_scale"] for r in records] == [2048.0, 2048.0, 1024.0, 1024.0, 1024.0]
    assert "step 3 skipped: fp16 gradients overflowed at loss scale 2048, now 1024" in caplog.text
    assert all(math.isfinite(r["loss"]) for r in records)
    optimizer_state = checkpoint.read_optimizer_state(checkpoint.latest_checkpoint(tmp_path / "run"))
    assert {int(s["step"]) for s in optimizer_state["state"].values()} == {4}  # AdamW stepped 4 times in 5


@pytest.mark.integration  # a training run
def test_a_resumed_fp16_run_logs_the_uninterrupted_records(copy_task, tmp_path, monkeypatch):
    """Stopped at step 4, after a skip halved the scale: the resumed steps use the halved scale, as the
    uninterrupted run does (a fresh scaler would log 2048 again, and grow on its own schedule)."""
    inject_inf_at(monkeypatch, 1)
    fp16 = dict(precision="fp16", save_every=4)
    straight = run(copy_task, tmp_path / "straight", {}, train_steps=8, **fp16)
    run(copy_task, tmp_path / "stopped", {}, train_steps=4, **fp16)
    resumed = run(copy_task, tmp_path / "stopped", {}, train_steps=8, **fp16)
    kept = ("step", "loss", "learning_rate", "loss_scale", "skipped_steps")  # not the timings
    key = lambda records: [{k: r[k] for k in kept} for r in records]
    assert key(resumed) == key(straight)
    assert resumed[-1]["loss_scale"] == 1024.0
    saved = json.loads((checkpoint.latest_checkpoint(tmp_path / "stopped") / "trainer_state.json").read_text())
    assert saved["loss_scaling"]["scaler"]["scale"] == 1024.0


def test_fp16_with_fsdp_is_refused_in_one_sentence(monkeypatch):
    monkeypatch.setattr(distributed, "is_distributed", lambda: True)
    with pytest.raises(T2TError, match=r"^precision=fp16 with parallelism=fsdp is not supported: .*; use "
                                       r"precision=bf16 with fsdp, or parallelism=ddp with fp16\.$"):
        precision.check_fp16("fp16", "fsdp")
    precision.check_fp16("fp16", "ddp")
    precision.check_fp16("bf16", "fsdp")


# ----------------------------------------------------------------------------------------------------------
# The forward pass in fp16, against transformers' T5 on the same weights

SHAPE = dict(vocab_size=512, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, dropout_rate=0.0)


def twin_models(shape: dict):
    transformers = pytest.importorskip("transformers")
    from t2t.checkpoints.hf import hf_key
    torch.manual_seed(0)
    hf = transformers.T5ForConditionalGeneration(transformers.T5Config(
        **shape, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)).eval()
    ours = T5(ModelConfig(**shape)).eval()
    state = hf.state_dict()
    ours.load_state_dict({k: state[hf_key(k)] for k in ours.state_dict()})
    return hf, ours


def logits_pair(hf, ours, dtype):
    g = torch.Generator().manual_seed(1)
    enc, dec = torch.randint(2, 500, (4, 32), generator=g), torch.randint(2, 500, (4, 8), generator=g)
    dec[:, 0] = 0
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype or torch.float16, enabled=dtype is not None):
        theirs = hf(input_ids=enc, attention_mask=(enc != 0).long(), decoder_input_ids=dec).logits.float()
        return theirs, ours(enc, dec).float()


@pytest.mark.parametrize("ff", ["relu", "gated-gelu"])
def test_fp16_logits_stray_from_fp32_no_more_than_transformers(ff):
    """benchmarks/bench_precision.py's comparison at a tiny shape: quantiles of |fp16 − fp32| per logit."""
    hf, ours = twin_models({**SHAPE, "feed_forward_proj": ff})
    ref_hf, ref_ours = logits_pair(hf, ours, None)
    fp16_hf, fp16_ours = logits_pair(hf, ours, torch.float16)
    q = torch.tensor([0.5, 0.9, 0.99, 0.999, 1.0])
    ours_error, hf_error = [(a - b).abs().flatten().quantile(q) for a, b in ((fp16_ours, ref_ours), (fp16_hf, ref_hf))]
    assert (ours_error <= hf_error * 1.25).all(), (ours_error, hf_error)
    assert ours_error[-1] < 0.05 * ref_ours.abs().max()


def test_a_feed_forward_output_beyond_fp16s_range_stays_finite():
    """One T5 1.1 feed-forward whose outputs reach ~1e5 (past fp16's 65,504, as t5.1.1-xl's do): transformers'
    fp16 autocast turns the logits into NaN; t2t's stay within fp16 rounding of its fp32 logits."""
    hf, ours = twin_models({**SHAPE, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False})
    with torch.no_grad():
        hf.encoder.block[1].layer[1].DenseReluDense.wo.weight.mul_(1e5)
        ours.encoder.blocks[1].ff.wo.weight.mul_(1e5)
    ref_hf, ref_ours = logits_pair(hf, ours, None)
    fp16_hf, fp16_ours = logits_pair(hf, ours, torch.float16)
    assert torch.isfinite(ref_ours).all() and not torch.isfinite(fp16_hf).all()
    assert torch.isfinite(fp16_ours).all()
    assert (fp16_ours - ref_ours).abs().max() < 0.01 * ref_ours.abs().max()
