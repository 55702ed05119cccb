"""Fine-tuning from a pre-trained run (``init_from``) against transformers' T5 (issue 23).

A tiny T5 1.0 (tied, rescaled output layer) is pre-trained for a few steps with t2t (Adafactor at 0.01, no
dropout: ``study-pretrain``'s optimizer), which grows its weights and leaves an optimizer state, a step
and a schedule in the run. ``t2t-train``'s ``train`` then fine-tunes from that run as ``study-finetune``
does (Adafactor, constant 1e-3; dropout 0 so that the runs can be compared exactly), and transformers'
``T5ForConditionalGeneration``, loaded from the same weights exported with ``to_hf``, is fine-tuned on the
same batches (``build_train_batches``, unpacked) with the same optimizer built by
``t2t.training.optim`` over its parameters, and again with transformers' own Adafactor. The losses must
agree step by step to float rounding: only the order of fp32 operations differs (kernels, where the
rescale and the masks are applied), a relative 1e-7 or so per step that grows slowly; 1e-5 over the few
steps here leaves room for any CPU and is far below what a fault shows (an optimizer state or step
carried over from pre-training changes Adafactor's second-moment decay and the first fine-tuning update,
a missing output-layer rescale or a wrong weight changes the first loss by far more).
"""

from __future__ import annotations

import logging

import pytest
import torch

from t2t import config
from t2t.checkpoints import native
from t2t.checkpoints import run as run_lib
from t2t.checkpoints.hf import to_hf
from t2t.checkpoints.loading import load_model
from t2t.data.pipeline import build_train_batches
from t2t.models.t5 import T5, resolve_model_config
from t2t.testing import in_memory_task, temporarily_registered, tiny_vocabulary
from t2t.training.optim import build_optimizer, build_scheduler
from t2t.training.train import TrainConfig, build_model, train

transformers = pytest.importorskip(
    "transformers", reason="the parity test needs transformers (pip install -e '.[hf]' or '.[test]')")
transformers.logging.set_verbosity_error()
logging.getLogger("transformers").setLevel(logging.ERROR)

TASK = "test_init_from_parity_sentiment"
MODEL = dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, feed_forward_proj="relu",
             tie_word_embeddings=True)
SENTENCES = [
    ("the film was wonderful", "positive"), ("the ending felt rushed", "negative"),
    ("the music was bright and warm", "positive"), ("a long and slightly dull story", "negative"),
    ("everything grows better here", "positive"), ("the roads were closed and damaged", "negative"),
    ("a very patient and charming cat", "positive"), ("the old ferry was slower", "negative"),
]
FINETUNE_STEPS = 6
RTOL = 1e-5


@pytest.fixture
def sentiment_task():
    rows = [{"inputs": f"sentiment: {text}", "targets": label} for text, label in SENTENCES]
    with temporarily_registered(in_memory_task(TASK, {"train": rows})):
        yield


def settings(out, **changes) -> TrainConfig:
    base = dict(mixture=TASK, model=MODEL, vocab=str(tiny_vocabulary().path), output_dir=str(out),
                batch_size=4, input_length=16, target_length=4, pack=False, log_every=1, seed=0,
                dropout_rate=0.0, optimizer={"name": "adafactor", "learning_rate": 1e-3})
    return config.from_dict(TrainConfig, {**base, **changes})


def transformers_adafactor(model, cfg: TrainConfig):
    """transformers' port of the Mesh TF Adafactor (epsilon1 = 1e-30 added to g²) as T5 fine-tuned."""
    return transformers.optimization.Adafactor(model.parameters(), lr=cfg.optimizer.learning_rate,
                                               scale_parameter=True, relative_step=False, warmup_init=False,
                                               clip_threshold=1.0, decay_rate=-0.8, beta1=None)


OPTIMIZERS = {"t2t_optimizer": lambda model, cfg: build_optimizer(model, cfg.optimizer),
              "transformers_adafactor": transformers_adafactor}


def hf_finetuning_losses(pretrained, cfg: TrainConfig, export_dir, make_optimizer) -> list[float]:
    """transformers' T5 from ``pretrained``'s weights, trained as ``train`` trains (batches, schedule) with
    the optimizer ``make_optimizer(model, cfg)`` for ``cfg.train_steps``; the mean loss per target token of
    each step."""
    to_hf(load_model(pretrained), export_dir)
    model = transformers.T5ForConditionalGeneration.from_pretrained(export_dir, dropout_rate=0.0).train()
    assert model.lm_head.weight is model.shared.weight  # tied: the optimizer sees one tensor, as in t2t
    optimizer = make_optimizer(model, cfg)
    scheduler = build_scheduler(optimizer, cfg.optimizer, cfg.train_steps)
    batches = iter(build_train_batches(cfg.mixture, vocab=tiny_vocabulary(), batch_size=cfg.batch_size,
                                       input_length=cfg.input_length, target_length=cfg.target_length,
                                       pack=cfg.pack, seed=cfg.seed))
    losses = []
    for _ in range(cfg.train_steps):
        batch = next(batches)
        encoder = batch["encoder_input_tokens"]
        labels = batch["decoder_target_tokens"].masked_fill(batch["decoder_loss_weights"] == 0, -100)
        loss = model(input_ids=encoder, attention_mask=(encoder != 0).long(),
                     decoder_input_ids=batch["decoder_input_tokens"], labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        losses.append(loss.item())
    return losses


@pytest.mark.integration  # two training runs end to end
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_init_from_fine_tuning_matches_transformers_t5_step_by_step(sentiment_task, tmp_path, optimizer):
    """With t2t's optimizer on transformers' model, and with transformers' own Adafactor (so t2t's
    optimizer is checked against an independent port of T5's)."""
    pretrained = tmp_path / "pretrain"
    train(settings(pretrained, train_steps=3, seed=1, optimizer={"name": "adafactor", "learning_rate": 1e-2}))
    cfg = settings(tmp_path / "finetune", init_from=str(pretrained), train_steps=FINETUNE_STEPS)
    ours = [record["loss"] for record in train(cfg)]
    theirs = hf_finetuning_losses(pretrained, cfg, tmp_path / "hf", OPTIMIZERS[optimizer])
    assert len(ours) == len(theirs) == FINETUNE_STEPS
    assert theirs[-1] < theirs[0]  # the comparison covers weights that moved
    assert ours == pytest.approx(theirs, rel=RTOL)


def test_init_from_loads_every_weight_and_takes_the_runs_dropout_rate(tmp_path):
    """A model pre-trained without dropout (``study-pretrain``) fine-tunes at the run's ``dropout_rate``
    (``study-finetune``: 0.1, T5's) in every dropout of the network, with its weights as saved."""
    pretrained = T5(resolve_model_config({**MODEL, "vocab_size": 512, "dropout_rate": 0.0}))
    native.save_checkpoint(tmp_path / "pretrain", 3, pretrained)
    cfg = settings(tmp_path / "finetune", init_from=str(tmp_path / "pretrain"), dropout_rate=0.1)
    saved = pretrained.state_dict()
    pinned = build_model(cfg, tiny_vocabulary(), init_from=run_lib.pinned_checkpoint(cfg.init_from))  # as train
    for model in (pinned, build_model(cfg, tiny_vocabulary())):  # cfg.init_from alone loads it too
        assert {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)} == {0.1}
        assert model.config.dropout_rate == 0.1
        assert model.state_dict().keys() == saved.keys()
        assert all(torch.equal(value, saved[name]) for name, value in model.state_dict().items())
