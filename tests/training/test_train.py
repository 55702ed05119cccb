"""The training loop: recorded losses, exact resume, gradient accumulation and DDP equivalence."""

import json
import logging
import math
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from t2t import config
from t2t.checkpoints import native as checkpoint
from t2t.checkpoints.loading import load_model
from t2t.data.task import TASKS
from t2t.errors import T2TError
from t2t.models.t5 import T5, ModelConfig, resolve_model_config
from t2t.testing import tiny_vocabulary
from t2t.training import train as train_module
from t2t.training.adafactor import SHARDED_TORCH_FLOOR
from t2t.training.progress import ProgressBar
from t2t.training.train import TrainConfig, train

pytestmark = pytest.mark.integration  # training runs, CLIs and subprocesses

TASK = "test_train_copy"
TINY_MODEL = dict(vocab_size=512, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, dropout_rate=0.1)

SENTENCES = [
    "the cat sat on the mat", "a dog ran in the park", "birds sing in the morning",
    "rain falls on the hills", "the river runs to the sea", "children play in the garden",
    "the sun rises in the east", "snow covers the quiet town", "the old man reads a book",
    "ships sail across the ocean", "the baker makes fresh bread", "music fills the small room",
]


def copy_task_module_text() -> str:
    """Source of a user module registering the copy task (so torchrun workers register it too)."""
    return textwrap.dedent(f"""
        from t2t.evaluation import metrics
        from t2t.data.sources import InMemorySource
        from t2t.data.task import Task, register_task
        SENTENCES = {SENTENCES!r}
        rows = [{{"text": s, "idx": i}} for i, s in enumerate(SENTENCES)]
        register_task(Task(
            name={TASK!r},
            source=InMemorySource({{"train": rows, "validation": rows[:4]}}),
            preprocessors=[lambda ex: {{"inputs": "copy: " + ex["text"], "targets": ex["text"]}}],
            metric_fns=[metrics.sequence_accuracy],
        ))
    """)


@pytest.fixture
def copy_task(tmp_path, monkeypatch):
    vocab = tiny_vocabulary()
    module = tmp_path / "copy_task.py"
    module.write_text(copy_task_module_text())
    model_file = tmp_path / "tiny.yaml"
    model_file.write_text(json.dumps(TINY_MODEL))
    monkeypatch.setenv("T2T_VOCAB", str(vocab.path))
    yield {"module": str(module), "model": str(model_file), "vocab": vocab}
    TASKS.unregister(TASK)


def settings(copy_task, out, optimizer: dict | None = None, **changes) -> TrainConfig:
    base = dict(mixture=TASK, model=copy_task["model"], modules=[copy_task["module"]], output_dir=str(out),
                train_steps=6, batch_size=4, input_length=16, target_length=16, pack=False, log_every=1,
                save_every=3, seed=1)
    base.update(changes)
    optimizer = {"name": "adamw", "learning_rate": 1e-2, **(optimizer or {})}
    return config.from_dict(TrainConfig, {**base, "optimizer": optimizer})


def losses(records):
    return [r["loss"] for r in records]


def test_losses_are_recorded_and_fall(copy_task, tmp_path, monkeypatch):
    shown = []  # the records as the loop made them, before any file was written or read
    monkeypatch.setattr(ProgressBar, "show", lambda self, record: shown.append(dict(record)))
    records = train(settings(copy_task, tmp_path / "run", train_steps=12, save_every=12))
    assert [r["step"] for r in shown] == list(range(1, 13))
    first, last = shown[0]["loss"], shown[-1]["loss"]
    assert abs(first - math.log(TINY_MODEL["vocab_size"])) < 1.0  # ≈ uniform at init
    assert last < first - 1.0, losses(shown)
    assert all(r["tokens_per_second"] > 0 for r in shown)
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert logged == shown and records == shown
    assert (tmp_path / "run" / "metrics.png").stat().st_size > 1000
    saved = checkpoint.read_settings(tmp_path / "run")
    assert (saved["mixture"], saved["train_steps"], saved["optimizer"]["name"]) == (TASK, 12, "adamw")


def test_z_loss_adds_its_term_to_the_logged_loss(copy_task, tmp_path):
    """The first step's loss is the initial model's: CE + z_loss · mean log(Z)², linear in z_loss."""
    first = {z: losses(train(settings(copy_task, tmp_path / f"z{z}", train_steps=1, z_loss=z)))[0]
             for z in (0.0, 0.01, 0.02)}
    assert first[0.01] > first[0.0]
    assert (first[0.02] - first[0.0]) / (first[0.01] - first[0.0]) == pytest.approx(2, rel=1e-3)
    with pytest.raises(T2TError, match="z_loss"):
        settings(copy_task, tmp_path / "negative", z_loss=-1e-4)


def test_an_empty_output_dir_is_refused(copy_task):
    with pytest.raises(T2TError, match=r"output_dir is empty, which would write the run into the working directory"):
        settings(copy_task, " ")


def test_the_share_of_time_spent_waiting_for_data_is_logged(copy_task, tmp_path, monkeypatch, capsys):
    """Each logged window (one step here) says which share of its time the step waited for its batch: with
    batches that take 0.5 s to make, a share that is at least those 0.5 s of the window's time (on an idle
    machine most of it; a loaded one can stretch the tiny step past them); the plain progress line shows it."""
    from t2t.data.pipeline import TrainBatches

    make = TrainBatches.next_batch
    monkeypatch.setattr(TrainBatches, "next_batch", lambda self: time.sleep(0.5) or make(self))
    records = train(settings(copy_task, tmp_path / "run", train_steps=3, save_every=3, batches_ahead=0))
    waited = [r["data_wait_share"] / r["steps_per_second"] for r in records]  # seconds, one step a window
    assert all(w >= 0.5 - 1e-6 for w in waited) and all(r["data_wait_share"] <= 1 for r in records), waited
    shown = [line for line in capsys.readouterr().err.splitlines() if line.startswith("step 3:")]
    assert shown and f"data wait {records[-1]['data_wait_share']:.1%}" in shown[0]


def test_a_compiled_run_logs_its_compile_time_once_and_leaves_it_out_of_tokens_per_second(copy_task, tmp_path,
                                                                                         monkeypatch, caplog):
    """compile: true compiles on the step's first call; here a stand-in for torch.compile makes that call take
    a second longer (the real one: test_compiled_training.py). The first window's time is that of its steps,
    not a second more (a ratio of rates failed on a loaded machine, where the tiny steps' times vary)."""
    def slow_first_call(objective, **options):
        forward, calls = objective.forward, []

        def slow_once(batch):
            if not calls:
                calls.append(time.sleep(1.0))
            return forward(batch)

        objective.forward = slow_once
        return objective

    monkeypatch.setattr(torch, "compile", slow_first_call)
    with caplog.at_level(logging.INFO, logger="t2t.training.train"):
        records = train(settings(copy_task, tmp_path / "run", train_steps=4, log_every=2, save_every=4,
                                 compile=True))
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("compiled the training step")]
    assert len(logged) == 1 and records[0]["compile_seconds"] >= 1.0 and "compile_seconds" not in records[1]
    # each window is log_every = 2 steps; with the compile second counted, the first would be a second longer
    window_seconds = [2 / record["steps_per_second"] for record in records[:2]]
    assert window_seconds[0] < window_seconds[1] + 0.5 * records[0]["compile_seconds"]


def test_evaluation_runs_on_its_own_schedule(copy_task, tmp_path):
    """--eval-every need not be a multiple of --log-every: an evaluation step is always logged."""
    records = train(settings(copy_task, tmp_path / "run", train_steps=4, log_every=3, eval_every=2,
                             eval_max_examples=2))
    assert [r["step"] for r in records] == [2, 3, 4]
    evaluated = [r["step"] for r in records if f"eval/{TASK}/sequence_accuracy" in r]
    assert evaluated == [2, 4]


def test_resume_continues_exactly(copy_task, tmp_path):
    straight = train(settings(copy_task, tmp_path / "straight"))
    stopped = train(settings(copy_task, tmp_path / "resumed", train_steps=3))
    resumed = train(settings(copy_task, tmp_path / "resumed"))  # same command, more steps: resumes at 3
    assert losses(stopped) == losses(straight)[:3]
    assert losses(resumed) == losses(straight)  # metrics.jsonl reads like a run that never stopped


def curve(records) -> list[tuple]:
    return [(r["step"], r["loss"], r["learning_rate"]) for r in records]


@pytest.mark.parametrize("schedule", [dict(schedule="rsqrt", warmup_steps=2, rsqrt_offset=1),
                                      dict(schedule="linear", warmup_steps=2), dict(schedule="cosine")],
                         ids=["warmup-rsqrt", "linear", "cosine"])
def test_resume_under_a_schedule_gives_the_uninterrupted_losses_and_rates(copy_task, tmp_path, monkeypatch,
                                                                          schedule):
    """Stopped after the checkpoint at step 3 (a crash entering step 5) and run again: the schedule's state
    comes back with the checkpoint, so every step's rate (and so its loss) is the uninterrupted run's."""
    straight = train(settings(copy_task, tmp_path / "straight", optimizer=schedule))
    rates = [r["learning_rate"] for r in straight]
    assert len(set(rates[2:5])) == 3  # the rate changes on every step around the resume: a restart would show
    real_step = train_module.train_step

    def crash_entering_step_5(*args):
        if args[-1] == 4:
            raise KeyboardInterrupt
        return real_step(*args)
    monkeypatch.setattr(train_module, "train_step", crash_entering_step_5)
    with pytest.raises(KeyboardInterrupt):
        train(settings(copy_task, tmp_path / "resumed", optimizer=schedule))
    monkeypatch.undo()
    resumed = train(settings(copy_task, tmp_path / "resumed", optimizer=schedule))
    assert curve(resumed) == curve(straight)


def test_bf16_trains_on_the_cpu_close_to_fp32(copy_task, tmp_path):
    fp32 = train(settings(copy_task, tmp_path / "fp32", dropout_rate=0.0))
    bf16 = train(settings(copy_task, tmp_path / "bf16", dropout_rate=0.0, precision="bf16"))
    assert losses(bf16) != losses(fp32)  # autocast was on
    assert losses(bf16) == pytest.approx(losses(fp32), rel=0.05)


def test_evaluation_during_training_decodes_in_the_run_precision(copy_task, tmp_path, monkeypatch):
    from t2t.evaluation import evaluate
    seen = []
    real = evaluate.evaluate_task
    monkeypatch.setattr(evaluate, "evaluate_task", lambda *a, **kw: seen.append(kw["precision"]) or real(*a, **kw))
    train(settings(copy_task, tmp_path / "run", train_steps=2, eval_every=2, eval_max_examples=2, precision="bf16"))
    assert seen == ["bf16"]


# packed rows of several examples, dropout 0.1: as T5 trains
PACKED = dict(pack=True, input_length=48, target_length=32)


def test_gradient_accumulation_matches_one_big_batch(copy_task, tmp_path):
    """With packing and dropout: the step's global batch is packed once and split, and each row's dropout
    masks come from its global row index, so micro-batches see what the whole batch sees."""
    whole = train(settings(copy_task, tmp_path / "whole", **PACKED))
    accumulated = train(settings(copy_task, tmp_path / "accum", grad_accum_steps=2, **PACKED))
    assert losses(accumulated) == pytest.approx(losses(whole), rel=1e-5)


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_fsdp_shards_every_block_as_its_own_unit():
    from torch.distributed.fsdp import FSDPModule

    from t2t.models import distributed
    from t2t.models.t5 import T5, Block, ModelConfig
    from t2t.training.train import TrainingObjective
    torch.distributed.init_process_group("gloo", rank=0, world_size=1, store=torch.distributed.HashStore())
    try:
        wrapped = distributed.wrap_model(TrainingObjective(T5(ModelConfig(**TINY_MODEL))), "fsdp",
                                         torch.device("cpu"))
        blocks = [m for m in wrapped.modules() if isinstance(m, Block)]
        assert len(blocks) == 4 and all(isinstance(b, FSDPModule) for b in blocks)
        assert isinstance(wrapped, FSDPModule)
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
@pytest.mark.parametrize("parallelism, grad_accum, stop_at, optimizer", [
    ("ddp", 2, None, "adamw"),
    pytest.param("fsdp", 1, 3, "adafactor", marks=pytest.mark.skipif(
        torch.__version__ < SHARDED_TORCH_FLOOR, reason="FSDP with Adafactor is refused on this torch (adafactor.py)"))])
def test_two_processes_match_one(copy_task, tmp_path, parallelism, grad_accum, stop_at, optimizer):
    """torchrun with 2 CPU processes (gloo) and the same global batch gives the losses of 1 process, with
    packing and dropout on (the DDP run also accumulates 2 micro-batches); the FSDP run trains with T5's
    Adafactor on sharded weights (torch's own failed there) and is also stopped and resumed (sharded optimizer
    state gathered and scattered again)."""
    one = train(settings(copy_task, tmp_path / "one", optimizer={"name": optimizer}, **PACKED))
    args = ["--task", TASK, "--model", copy_task["model"], "--module", copy_task["module"],
            "--output-dir", str(tmp_path / "two"), "--batch-size", "4", "--seed", "1",
            "--log-every", "1", "--save-every", "3", "--set", "input_length=48", "--set", "target_length=32",
            "--set", "pack=true", "--set", f"grad_accum_steps={grad_accum}", "--set", f"optimizer.name={optimizer}",
            "--set", "optimizer.learning_rate=1e-2", "--set", f"parallelism={parallelism}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for steps in ([stop_at] if stop_at else []) + [6]:
        # --standalone: the rendezvous takes a free port chosen at run time (no fixed port to collide on)
        run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                              "2", "-m", "t2t.cli", *args, "--train-steps", str(steps)],
                             capture_output=True, text=True, env=env, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        assert run.stdout.count("done: step") == 1, run.stdout  # printed by rank 0 only
        # the run's log too (warnings come from every process)
        assert run.stderr.count("trainable parameters") == 1 and run.stderr.count("resumed from") <= 1, run.stderr
    two = [json.loads(line) for line in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert losses(two) == pytest.approx(losses(one), rel=1e-5)
    final_two = load_model(tmp_path / "two").state_dict()
    final_one = load_model(tmp_path / "one").state_dict()
    assert final_two.keys() == final_one.keys()
    torch.manual_seed(1)  # the runs' seed: their initial weights
    init = T5(ModelConfig(**TINY_MODEL)).state_dict()
    norm = lambda weights: torch.cat([w.flatten() for w in weights.values()]).norm()
    assert norm({k: final_one[k] - init[k] for k in init}) < 0.2 * norm(init)  # ``init`` is where the runs started
    for key in final_one:
        moved = (final_one[key] - init[key]).norm()
        # Equal up to the rounding of the gradient all-reduce's summation order. AdamW and Adafactor divide by
        # the root of a second moment, so an element whose gradient is at the level of that rounding can step
        # by up to lr either way (a fixed absolute tolerance is then a property of one CPU's kernels); such
        # elements are few, so per tensor the runs differ by a small fraction of how far training moved the
        # weights (≤ 0.3% seen), whatever the weights' scale, rate and step count; one process's gradients
        # dropped or doubled makes that 35–100% (checked by hand).
        assert (final_two[key] - final_one[key]).norm() <= 0.02 * moved, key


def test_model_field_overrides_are_recorded_and_load_back(copy_task, tmp_path):
    run = tmp_path / "run"
    train(settings(copy_task, run, model={"preset": copy_task["model"], "num_layers": 1}, train_steps=1))
    saved = checkpoint.read_settings(checkpoint.latest_checkpoint(run))
    assert saved["model"]["num_layers"] == 1 and saved["model"]["d_model"] == TINY_MODEL["d_model"]
    assert load_model(run).config == resolve_model_config(saved["model"])
    assert load_model(run).config.num_layers == 1


def test_model_fields_must_match_the_init_from_weights(copy_task, tmp_path):
    run = tmp_path / "run"
    train(settings(copy_task, run, train_steps=1))
    with pytest.raises(T2TError, match=r"model\.num_layers = 1 differs from the model loaded from"):
        train(settings(copy_task, tmp_path / "ft", init_from=str(run), model={"num_layers": 1}))
    train(settings(copy_task, tmp_path / "ok", init_from=str(run), model={"num_layers": 2}, train_steps=1))


def test_a_preset_that_differs_from_the_init_from_model_is_refused(copy_task, tmp_path):
    """--init-from RUN --model t5-tiny: the run's weights fix the model, so the preset would be ignored."""
    run = tmp_path / "run"
    train(settings(copy_task, run, train_steps=1))
    for model in ("t5-tiny", {"preset": "t5-tiny", "dropout_rate": 0.0}):
        with pytest.raises(T2TError, match=rf"model t5-tiny differs from the model loaded from {run} \(d_ff 64, not "
                                           r"\d+\); leave it out to train the loaded model"):
            train(settings(copy_task, tmp_path / "ft", init_from=str(run), model=model))
    train(settings(copy_task, tmp_path / "same", init_from=str(run), model=copy_task["model"], train_steps=1))
    same = {"preset": copy_task["model"], "num_decoder_layers": 2}  # as Hugging Face configs spell the default
    train(settings(copy_task, tmp_path / "spelt", init_from=str(run), model=same, train_steps=1))
    train(settings(copy_task, tmp_path / "none", init_from=str(run), model=None, train_steps=1))


def test_a_model_dropout_rate_given_after_a_recipe_wins_over_the_recipes_dropout_rate(copy_task, tmp_path):
    """A recipe's dropout_rate (cpu-smoke's 0.0) overrides the model's; ``--set model.dropout_rate=0.3`` after
    it is the user's and wins: it trains (other losses than the recipe's) and is recorded."""
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({**config.to_dict(settings(copy_task, tmp_path, train_steps=2)), "dropout_rate": 0.0}))
    as_recipe = train(config.load(TrainConfig, [recipe], [f"output_dir={tmp_path / 'recipe'}"]))
    cfg = config.load(TrainConfig, [recipe], [f"output_dir={tmp_path / 'set'}", "model.dropout_rate=0.3"])
    with_set = train(cfg)
    assert losses(with_set) != losses(as_recipe)
    saved = checkpoint.read_settings(tmp_path / "set")
    assert (saved["dropout_rate"], saved["model"]["dropout_rate"]) == (0.3, 0.3)


def test_resuming_with_another_init_from_is_refused_and_never_recorded(copy_task, tmp_path, caplog):
    """Resuming loads the run's own checkpoint: another --init-from would be recorded for weights it never
    gave. The run's own (or another spelling of its path), or none, resumes and keeps it."""
    base = tmp_path / "base"
    train(settings(copy_task, base, train_steps=1))
    run = tmp_path / "run"
    train(settings(copy_task, run, init_from=str(base), train_steps=3))
    for other in ("google-t5/t5-small", str(tmp_path)):
        with pytest.raises(T2TError, match=rf"{run} resumes from its own checkpoint step_0*3 \(it started from "
                                           rf"{base}\), so --init-from {other} would not be loaded; leave --init-from "
                                           rf"out to resume the run, or pass another --output-dir"):
            train(settings(copy_task, run, init_from=other, train_steps=6))
    with caplog.at_level(logging.INFO):
        train(settings(copy_task, run, init_from=str(base / ".." / "base"), train_steps=4))
        train(settings(copy_task, run, init_from=None, train_steps=5))
    assert "init_from" not in caplog.text
    assert checkpoint.read_settings(run)["init_from"] == str(base)
    scratch = tmp_path / "scratch"
    train(settings(copy_task, scratch, train_steps=1))
    with pytest.raises(T2TError, match=r"\(it started from scratch\), so --init-from"):
        train(settings(copy_task, scratch, init_from=str(base), train_steps=2))
