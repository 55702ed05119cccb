"""Fault injection: what a kill, a flipped byte, a full disk or a second writer leaves behind, and resuming.

A run is stopped inside a child process at one of its *fault points* (a training step, a metrics line,
each checkpoint file, each rename; a checkpoint file is cut off halfway before the kill) chosen with a
seeded ``random.Random``, so every "random" moment is reproducible. The child signals itself, so no
assertion depends on timing; the only wait is on a line the child prints.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import json
import logging
import os
import random
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_checkpoint import logits_of, tiny_model, trained_optimizer
from test_train import TASK, TINY_MODEL, copy_task_module_text, settings

from t2t import config, durable
from t2t.checkpoints import native as checkpoint
from t2t.checkpoints.loading import load_model
from t2t.data.task import TASKS, load_modules
from t2t.errors import T2TError
from t2t.evaluation.evaluate import EvalConfig, evaluate, evaluate_checkpoints
from t2t.testing import tiny_vocabulary
from t2t.training import progress
from t2t.training import train as train_module
from t2t.training.progress import MetricsLog, read_metrics
from t2t.training.train import TrainConfig, train

pytestmark = pytest.mark.integration  # training runs, CLIs and subprocesses

STEPS, SAVE_EVERY = 6, 3


class FaultPoints:
    """Numbers the moments at which a run can be stopped and acts at number ``at``: ``kill`` (SIGKILL),
    ``term`` (SIGTERM) or ``pause`` (print "paused", then wait for the test to kill it). ``only`` limits the
    points to one kind (e.g. ``train_step``)."""

    def __init__(self, at: int | None = None, action: str = "kill", only: str | None = None):
        self.at, self.action, self.only, self.counts = at, action, only, collections.Counter()

    def install(self, setattr_) -> None:
        for owner, name in [(train_module, "train_step"), (progress, "append_line"),
                            (checkpoint, "save_file"), (os, "replace")]:
            setattr_(owner, name, self._wrap(name, getattr(owner, name)))
        real_write = durable.write_file

        def write_file(path, data, *args):
            if self._reached("write_file"):  # a kill in the middle of writing a checkpoint file
                real_write(path, bytes(data)[: len(data) // 2], *args)
                self._act()
            return real_write(path, data, *args)
        setattr_(durable, "write_file", write_file)

    def _wrap(self, name, real):
        def at_fault_point(*args, **kwargs):
            if self._reached(name):
                self._act()
            return real(*args, **kwargs)
        return at_fault_point

    def _reached(self, name: str) -> bool:
        self.counts.update([name, "all"])
        return self.only in (None, name) and self.counts[self.only or "all"] == self.at

    def _act(self) -> None:
        if self.action == "pause":
            print("paused", flush=True)
            sys.stdin.readline()  # the test kills this process instead of answering
        os.kill(os.getpid(), signal.SIGTERM if self.action == "term" else signal.SIGKILL)


def child_main() -> None:
    """Run ``train`` with the fault points of ``sys.argv[1]`` (JSON) installed; exit as ``t2t-train`` does."""
    spec = json.loads(sys.argv[1])
    sys.exit(run_scenario(spec))


def forking_main() -> None:
    """Run each scenario of ``sys.argv[1]`` in a fork of this process, which has imported what a run needs
    but run no torch operation (so forking is safe), then print {name: exit status} as JSON: one start-up
    for all scenarios."""
    import matplotlib.pyplot  # noqa: F401
    import torch._dynamo  # noqa: F401  (the optimizers import it on first use)

    scenarios = json.loads(sys.argv[1])
    load_modules(next(iter(scenarios.values()))["settings"]["modules"])
    statuses = {}
    for name, spec in scenarios.items():
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = run_scenario(spec)
            finally:
                os._exit(code)
        statuses[name] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    print(json.dumps(statuses))


def run_scenario(spec: dict) -> int:
    from t2t.cli.common import run_cli

    if spec.get("stderr"):
        os.dup2(os.open(spec["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666), 2)
    torch.set_num_threads(spec["threads"])
    if spec.get("file_size_limit"):
        resource.setrlimit(resource.RLIMIT_FSIZE, (spec["file_size_limit"],) * 2)
    FaultPoints(spec.get("at"), spec.get("action", "kill"), spec.get("only")).install(setattr)
    cfg = config.from_dict(TrainConfig, spec["settings"])
    code = run_cli(lambda argv: train(cfg), resumable=True)([])
    sys.stderr.flush()
    return code


def child_spec(cfg: TrainConfig, **spec) -> dict:
    return {"settings": config.to_dict(cfg), "threads": torch.get_num_threads(), **spec}


def start_child(main: str, argument: dict) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    return subprocess.Popen([sys.executable, "-c", f"import test_faults; test_faults.{main}()",
                             json.dumps(argument)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def curve(run_dir: Path) -> list[tuple]:
    """What must match between runs: step, loss and learning rate of every logged step."""
    return [(r["step"], r["loss"], r["learning_rate"]) for r in read_metrics(run_dir / "metrics.jsonl")]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The copy task of tests/test_train.py, an uninterrupted run (its curve) and how many fault points
    that run passes."""
    folder = tmp_path_factory.mktemp("faults")
    task = {"module": str(folder / "copy_task.py"), "model": str(folder / "tiny.yaml")}
    Path(task["module"]).write_text(copy_task_module_text())
    Path(task["model"]).write_text(json.dumps(TINY_MODEL))

    def cfg(out: Path, **changes) -> TrainConfig:
        return settings(task, out, **{"train_steps": STEPS, "save_every": SAVE_EVERY, **changes})

    with pytest.MonkeyPatch.context() as env:
        env.setenv("T2T_VOCAB", str(tiny_vocabulary().path))
        points = FaultPoints()
        with pytest.MonkeyPatch.context() as hooks:
            points.install(hooks.setattr)
            train(cfg(folder / "straight"))
        yield {"curve": curve(folder / "straight"), "points": points.counts, "cfg": cfg, "folder": folder}
    TASKS.unregister(TASK)


def resume_and_compare(straight, run_dir: Path) -> None:
    train(straight["cfg"](run_dir))  # the same command again
    assert curve(run_dir) == straight["curve"]
    assert checkpoint.latest_checkpoint(run_dir).name == checkpoint.checkpoint_name(STEPS)


@pytest.fixture(scope="module")
def stopped(straight) -> dict[str, dict]:
    """Runs stopped at seeded random fault points, between checkpoints, and by a file-size limit (all in
    one child process that forks one process per run): {name: exit status, run dir, stderr}."""
    cfg, points, folder = straight["cfg"], straight["points"], straight["folder"]
    train(cfg(folder / "file_size_limit", train_steps=SAVE_EVERY))  # the next save will not fit
    limit = (folder / "file_size_limit" / checkpoint.checkpoint_name(SAVE_EVERY) / "model.safetensors").stat().st_size
    scenarios = {
        "random_point_1": dict(at=random.Random(1).randint(1, points["all"])),
        "random_point_2": dict(at=random.Random(2).randint(1, points["all"])),
        "inside_a_checkpoint_file": dict(at=random.Random(3).randint(1, points["write_file"]), only="write_file"),
        "term_between_checkpoints": dict(at=SAVE_EVERY + 2, only="train_step", action="term"),
        "kill_between_checkpoints": dict(at=SAVE_EVERY + 2, only="train_step"),
        "file_size_limit": dict(file_size_limit=limit // 2),
    }
    specs = {name: child_spec(cfg(folder / name), stderr=str(folder / f"{name}.stderr"), **spec)
             for name, spec in scenarios.items()}
    parent = start_child("forking_main", specs)
    out, err = parent.communicate(timeout=600)
    assert parent.returncode == 0, err[-3000:]
    statuses = json.loads(out.splitlines()[-1])
    return {name: {"status": statuses[name], "run_dir": folder / name,
                   "stderr": (folder / f"{name}.stderr").read_text()} for name in scenarios}


# ----------------------------------------------------------------------------------------------------------
# Kills


@pytest.mark.parametrize("name", ["random_point_1", "random_point_2", "inside_a_checkpoint_file"])
def test_a_kill_at_a_random_point_then_resume_gives_the_uninterrupted_losses(straight, stopped, name):
    run = stopped[name]
    assert run["status"] == -signal.SIGKILL, run["stderr"][-2000:]
    resume_and_compare(straight, run["run_dir"])


@pytest.mark.parametrize("name, status", [("term_between_checkpoints", -signal.SIGTERM),
                                          ("kill_between_checkpoints", -signal.SIGKILL)])
def test_a_stop_between_checkpoints_then_resume_gives_the_uninterrupted_losses(straight, stopped, name, status):
    run = stopped[name]
    assert run["status"] == status, run["stderr"][-2000:]
    assert [r[0] for r in curve(run["run_dir"])] == [1, 2, 3, 4]  # stopped entering step 5, saved at 3
    resume_and_compare(straight, run["run_dir"])


def test_a_second_writer_is_refused_while_the_first_is_saving(straight, tmp_path):
    """The second run stops with the first one's pid and touches nothing (not even the first one's
    half-written temp folder); once the first is killed (-9: no clean-up) its lock is free again."""
    run_dir = tmp_path / "run"
    first = start_child("child_main", child_spec(straight["cfg"](run_dir), at=1, action="pause", only="save_file"))
    try:
        assert first.stdout.readline() == "paused\n", first.stderr.read()[-2000:]
        in_progress = sorted(p.name for p in run_dir.iterdir())
        assert ".tmp-step_00000003" in in_progress
        with pytest.raises(T2TError, match=f"in use by another t2t-train \\(pid {first.pid}\\)"):
            train(straight["cfg"](run_dir))
        assert sorted(p.name for p in run_dir.iterdir()) == in_progress
    finally:
        first.kill()
        first.communicate()
    resume_and_compare(straight, run_dir)


# ----------------------------------------------------------------------------------------------------------
# Damaged files


def flip_bytes(path: Path) -> None:
    """Invert 4 bytes in the middle of the file (inside the tensor data: headers are small)."""
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 4):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_flipped_bytes_name_the_newest_checkpoint_that_verifies(straight, tmp_path):
    run_dir = tmp_path / "run"
    train(straight["cfg"](run_dir))
    corrupt = run_dir / checkpoint.checkpoint_name(STEPS)
    flip_bytes(corrupt / "model.safetensors")
    for load in (lambda: train(straight["cfg"](run_dir, train_steps=STEPS + 1)),
                 lambda: load_model(run_dir)):
        with pytest.raises(T2TError) as e:
            load()
        message = str(e.value)
        assert f"{corrupt / 'model.safetensors'} does not match the checksum" in message, message
        assert f"newest checkpoint that verifies is {run_dir / checkpoint.checkpoint_name(SAVE_EVERY)}: move " \
               f"{corrupt.name} out of {run_dir} and run the same command again to resume from step {SAVE_EVERY}" \
               in message, message
        assert "\n" not in message
    assert load_model(run_dir, verify=False) is not None  # the skip for very large models
    corrupt.rename(tmp_path / "aside")  # following the advice resumes from step 3 and continues exactly
    resume_and_compare(straight, run_dir)


def test_no_older_checkpoint_that_verifies_is_said(straight, tmp_path):
    run_dir = tmp_path / "run"
    train(straight["cfg"](run_dir, train_steps=SAVE_EVERY))
    flip_bytes(run_dir / checkpoint.checkpoint_name(SAVE_EVERY) / "optimizer.pt")
    with pytest.raises(T2TError, match="optimizer.pt does not match the checksum.*no older checkpoint in .* "
                                       "verifies"):
        train(straight["cfg"](run_dir))


def test_a_torn_last_metrics_line_is_cut_off_on_resume(straight, tmp_path):
    run_dir = tmp_path / "run"
    train(straight["cfg"](run_dir, train_steps=SAVE_EVERY + 1))
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "loss": 3.')  # what a full disk leaves
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")] == [1, 2, 3, 4]
    resume_and_compare(straight, run_dir)
    assert (run_dir / "metrics.jsonl").read_text().endswith("}\n")


def test_metrics_are_cut_back_to_the_resumed_step_without_rewriting_the_rest(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [f'{{"step":{s},"loss":{1.0 / s}}}\n' for s in range(1, 6)]  # not json.dumps's spacing
    path.write_text("".join(lines) + '{"st')
    log = MetricsLog(path, truncate_after=3)
    assert [r["step"] for r in log.records()] == [1, 2, 3]
    assert path.read_text() == "".join(lines[:3])  # cut off, the lines kept never rewritten
    path.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(T2TError, match="line 2 of .*metrics.jsonl is not a JSON record"):
        MetricsLog(path, truncate_after=3)


@pytest.mark.parametrize("step", ['"abc"', "true", "2.5", "null"])
def test_a_metrics_line_whose_step_is_not_a_number_is_one_sentence_on_resume(tmp_path, step):
    path = tmp_path / "metrics.jsonl"
    path.write_text(f'{{"step": 1}}\n{{"step": {step}, "loss": 1.0}}\n{{"step": 3}}\n')
    with pytest.raises(T2TError, match=r"line 2 of .*metrics.jsonl is not a JSON record with a step number; delete "
                                       r"that line \(or the file\) and run the same command again\."):
        MetricsLog(path, truncate_after=3)


@contextlib.contextmanager
def file_size_limit(size: int):
    """``ulimit -f`` for this process while the body runs (Python ignores SIGXFSZ: writes fail with EFBIG)."""
    previous = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, previous[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, previous)


def test_a_metrics_write_that_fails_leaves_no_partial_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    log.write({"step": 1, "loss": 2.0})
    size = path.stat().st_size
    with file_size_limit(size + 8), pytest.raises(T2TError, match="File too large.*ulimit -f"):
        log.write({"step": 2, "loss": 1.0, "padding": "x" * 100})
    assert log.records() == [{"step": 1, "loss": 2.0}] and path.stat().st_size == size


@pytest.mark.parametrize("damage", ["delete", "rename"])
def test_a_checkpoint_without_its_trainer_state_is_never_silently_restarted(straight, tmp_path, damage):
    """Resuming would start behind the damaged checkpoint (from step 0 here), cut metrics.jsonl back and save
    over it: one sentence naming the checkpoint and the way out instead, and nothing touched."""
    run_dir = tmp_path / "run"
    train(straight["cfg"](run_dir, train_steps=SAVE_EVERY))
    damaged = run_dir / checkpoint.checkpoint_name(SAVE_EVERY)
    state = damaged / "trainer_state.json"
    state.unlink() if damage == "delete" else state.rename(damaged / "trainer_state.json.bak")
    before = {p.name: p.read_bytes() for p in [run_dir / "metrics.jsonl", *damaged.iterdir()]}
    with pytest.raises(T2TError, match=f"checkpoint {damaged} is damaged \\(it has no trainer_state.json\\): "
                                       f"training would restart from step 0 behind it, cut metrics.jsonl back and "
                                       f"save over it; restore the missing file, or move {damaged.name} out of "
                                       f"{run_dir} to resume from step 0"):
        train(straight["cfg"](run_dir))
    assert {p.name: p.read_bytes() for p in [run_dir / "metrics.jsonl", *damaged.iterdir()]} == before
    (damaged / "trainer_state.json.bak").rename(state) if damage == "rename" else damaged.rename(tmp_path / "aside")
    if damage == "rename":  # restored: the run continues exactly
        resume_and_compare(straight, run_dir)


def test_a_damaged_checkpoint_names_the_older_one_to_resume_from(straight, tmp_path):
    run_dir = tmp_path / "run"
    train(straight["cfg"](run_dir))
    (run_dir / checkpoint.checkpoint_name(STEPS) / "trainer_state.json").unlink()
    with pytest.raises(T2TError, match=f"{checkpoint.checkpoint_name(STEPS)} is damaged.*restart from "
                                       f"{checkpoint.checkpoint_name(SAVE_EVERY)} behind it"):
        train(straight["cfg"](run_dir, train_steps=STEPS + 1))
    (run_dir / checkpoint.checkpoint_name(STEPS)).rename(tmp_path / "aside")  # following the advice
    resume_and_compare(straight, run_dir)


# ----------------------------------------------------------------------------------------------------------
# Divergence


def test_a_diverging_run_stops_before_saving_with_the_step_and_the_last_good_checkpoint(straight, tmp_path):
    """AdamW at rate 1e39 makes every weight infinite or NaN in one step: nothing is saved (a NaN checkpoint
    would be the latest, and every resume would fail), and the sentence names the step and what to resume
    from; an fp32 run is not told to use fp32."""
    run_dir = tmp_path / "run"
    with pytest.raises(T2TError) as e:
        train(straight["cfg"](run_dir, train_steps=1, optimizer={"learning_rate": 1e39}))
    assert str(e.value) == ("training diverged at step 1: the weights became NaN or infinite, so nothing of it was "
                            "saved; no checkpoint was saved; lower optimizer.learning_rate (now 1e+39).")
    assert checkpoint.list_checkpoints(run_dir) == []
    train(straight["cfg"](run_dir, train_steps=SAVE_EVERY))
    good = run_dir / checkpoint.checkpoint_name(SAVE_EVERY)
    with pytest.raises(T2TError, match=rf"diverged at step {SAVE_EVERY + 1}: .* the last good checkpoint is {good} "
                                       r"\(to resume from it with a lower rate, pass --allow-changed-settings\)") as e:
        train(straight["cfg"](run_dir, optimizer={"learning_rate": 1e39}), allow_changed_settings=True)
    assert "fp32" not in str(e.value)
    assert checkpoint.list_checkpoints(run_dir) == [good]
    resume_and_compare(straight, run_dir)  # the run's own rate again: the uninterrupted curve


# ----------------------------------------------------------------------------------------------------------
# Full disk, file-size limit, unusable output dir


def test_a_file_size_limit_during_a_checkpoint_is_one_sentence_and_loses_nothing(straight, stopped):
    run = stopped["file_size_limit"]
    assert run["status"] == 2, run["stderr"][-2000:]
    [error] = [line for line in run["stderr"].splitlines() if line.startswith("error:")]  # on a line of its own
    assert f"cannot write checkpoint {run['run_dir'] / checkpoint.checkpoint_name(STEPS)} (File too large); " \
           f"raise the file-size limit (ulimit -f)" in error, error
    saved = run["run_dir"] / checkpoint.checkpoint_name(SAVE_EVERY)
    assert [p.name for p in run["run_dir"].iterdir() if p.name.startswith(("step_", ".tmp"))] == [saved.name]
    checkpoint.verify_checkpoint(saved)
    assert [r[0] for r in curve(run["run_dir"])] == list(range(1, STEPS + 1))  # logged up to the failed save
    resume_and_compare(straight, run["run_dir"])


def test_a_write_that_fails_midway_leaves_the_previous_checkpoint_latest_and_loadable(tmp_path):
    model = tiny_model()
    checkpoint.save_checkpoint(tmp_path, 100, model, optimizer=trained_optimizer(model), keep_last=1)
    expected = logits_of(model)

    other = tiny_model(seed=5)
    optimizer = trained_optimizer(other)
    sizes = {p.name: p.stat().st_size for p in checkpoint.latest_checkpoint(tmp_path).iterdir()}
    assert sizes["optimizer.pt"] == max(sizes.values())
    limit = (sizes["optimizer.pt"] + sorted(sizes.values())[-2]) // 2  # the optimizer state no longer fits
    with file_size_limit(limit), pytest.raises(T2TError, match="File too large.*ulimit -f") as e:
        checkpoint.save_checkpoint(tmp_path, 200, other, optimizer=optimizer, keep_last=1)
    assert str(tmp_path / "step_00000200") in str(e.value) and "\n" not in str(e.value)

    latest = checkpoint.latest_checkpoint(tmp_path)
    assert latest.name == "step_00000100"  # keep_last=1 did not delete it: the new one never landed
    assert torch.equal(logits_of(load_model(latest)), expected)
    assert checkpoint.load_checkpoint(latest)["step"] == 100 and checkpoint.read_optimizer_state(latest)["state"]
    assert [p.name for p in tmp_path.iterdir()] == ["step_00000100"]  # the temp dir was cleaned up


def test_an_output_dir_that_is_a_file_or_read_only_fails_before_training(straight, tmp_path, monkeypatch):
    file = tmp_path / "file"
    file.write_text("x")
    built = []
    monkeypatch.setattr(train_module, "build_model", lambda *a: built.append(1))
    with pytest.raises(T2TError, match=f"output dir {file} is a file"):
        train(straight["cfg"](file))
    with pytest.raises(T2TError, match=f"cannot write to output dir {file / 'run'}"):
        train(straight["cfg"](file / "run"))  # below a file: Not a directory
    if os.geteuid() != 0:  # root writes into read-only folders
        locked = tmp_path / "read_only"
        locked.mkdir(mode=0o555)
        with pytest.raises(T2TError, match="cannot write to output dir .*Permission denied"):
            train(straight["cfg"](locked))
    assert built == []


# ----------------------------------------------------------------------------------------------------------
# A renamed checkpoint, evaluation beside a running t2t-train, a killed study


def test_a_checkpoint_renamed_to_a_higher_step_is_refused_and_rotates_nothing(straight, tmp_path):
    run_dir = tmp_path / "run"
    train(straight["cfg"](run_dir))
    renamed = run_dir / "step_00000900"
    (run_dir / checkpoint.checkpoint_name(SAVE_EVERY)).rename(renamed)
    before = sorted(p.name for p in run_dir.iterdir())
    message = f"checkpoint folder {renamed} holds step {SAVE_EVERY} \\(its trainer_state.json\\), not 900"
    with pytest.raises(T2TError, match=message):
        train(straight["cfg"](run_dir, train_steps=STEPS + SAVE_EVERY))
    with pytest.raises(T2TError, match=message):
        evaluate(EvalConfig(mixture=TASK, checkpoint=str(run_dir), modules=straight["cfg"](run_dir).modules))
    assert sorted(p.name for p in run_dir.iterdir()) == before  # the real newest checkpoint is still there


def eval_config(straight, run_dir: Path, out: Path, **changes) -> EvalConfig:
    return EvalConfig(mixture=TASK, checkpoint=str(run_dir), modules=straight["cfg"](run_dir).modules,
                      max_examples=2, output_dir=str(out), **changes)


def saving_while_loading(monkeypatch, save, before: bool) -> None:
    """Make t2t-eval's first model load race a t2t-train that saves a newer checkpoint and rotates the older
    ones away (``save``), just before the load or just after it: the moments the race can take."""
    from t2t.evaluation import evaluate as evaluate_module
    real, calls = evaluate_module.load_model, []

    def load_model(*args, **kwargs):
        calls.append(args)
        if before and len(calls) == 1:
            save()
        model = real(*args, **kwargs)
        if not before and len(calls) == 1:
            save()
        return model
    monkeypatch.setattr(evaluate_module, "load_model", load_model)


@pytest.mark.parametrize("before", [False, True])
def test_evaluation_beside_a_saving_run_stamps_the_step_it_read(straight, tmp_path, monkeypatch, before):
    run_dir = tmp_path / "run"
    train(straight["cfg"](run_dir, keep_checkpoints=1))
    saving_while_loading(monkeypatch, lambda: train(straight["cfg"](run_dir, keep_checkpoints=1,
                                                                    train_steps=STEPS + SAVE_EVERY)), before)
    evaluate(eval_config(straight, run_dir, tmp_path / "eval"))
    result = json.loads((tmp_path / "eval" / "validation" / f"{TASK}.metrics.json").read_text())
    read = STEPS + SAVE_EVERY if before else STEPS  # before: the pinned one vanished, the newest was read
    assert (result["step"], result["checkpoint"]) == (read, str(run_dir / checkpoint.checkpoint_name(read)))
    monkeypatch.undo()
    evaluate(eval_config(straight, run_dir / checkpoint.checkpoint_name(STEPS + SAVE_EVERY), tmp_path / "again"))
    if before:  # the same checkpoint, the same predictions
        assert ((tmp_path / "again" / "validation" / f"{TASK}.predictions.jsonl").read_text()
                == (tmp_path / "eval" / "validation" / f"{TASK}.predictions.jsonl").read_text())


def test_all_checkpoints_skips_one_that_rotation_deleted_with_a_line(straight, tmp_path, monkeypatch, caplog):
    run_dir = tmp_path / "run"
    train(straight["cfg"](run_dir))  # steps 3 and 6
    saving_while_loading(monkeypatch, lambda: train(straight["cfg"](run_dir, keep_checkpoints=1,
                                                                    train_steps=STEPS + SAVE_EVERY)), before=False)
    with caplog.at_level(logging.WARNING, logger="t2t.evaluation.evaluate"):
        best = evaluate_checkpoints(eval_config(straight, run_dir, tmp_path / "eval", all_checkpoints=True))
    assert best[TASK]["step"] == SAVE_EVERY
    gone = run_dir / checkpoint.checkpoint_name(STEPS)
    assert [r.getMessage() for r in caplog.records if r.name == "t2t.evaluation.evaluate"] == [
        f"skipping {gone}: a running t2t-train deleted it (rotation) before it was read"]


def lock_is_free(lock: Path) -> bool:
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_killing_the_study_ends_its_training_child(straight, tmp_path):
    """kill -9 of t2t-study leaves no t2t-train running (whose lock would stop the study's resume)."""
    folder, out = straight["folder"], tmp_path / "study"
    train_args = (f"--model {folder / 'tiny.yaml'} --module {folder / 'copy_task.py'} --batch-size 2 "
                  "--set input_length=16 --set target_length=8 --set pack=false --save-every 100000")
    code = ("import sys; from t2t.cli import study_main; sys.exit(study_main(sys.argv[1:]))")
    env = {**os.environ, "T2T_VOCAB": str(tiny_vocabulary().path)}
    study = subprocess.Popen([sys.executable, "-c", code, "--targets", TASK, "--target-steps", "1000000",
                              "--output-dir", str(out), "--train-args", train_args], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lock = out / "none" / TASK / durable.LOCK_FILE
    try:
        deadline = time.monotonic() + 120
        while not (lock.is_file() and lock.read_text().strip()) and time.monotonic() < deadline:
            assert study.poll() is None, "the study ended before its t2t-train started"
            time.sleep(0.2)
        assert not lock_is_free(lock), "the study's t2t-train did not start"
    finally:
        study.kill()
        study.wait()
    deadline = time.monotonic() + 30
    while not lock_is_free(lock) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert lock_is_free(lock), f"t2t-train (pid {lock.read_text().strip()}) outlived the killed study"


# ----------------------------------------------------------------------------------------------------------
# Ctrl-C

INTERRUPTED_LINE = r"interrupted(; run the same command again to resume from the last checkpoint)?\."
# The copy task read through a source that presses Ctrl-C on its own process when the training data is read,
# where the KeyboardInterrupt propagates (PROPAGATES), is swallowed by a broad ``except`` (EXCEPT) or lands in a
# ``__del__``, which Python reports as "Exception ignored" and goes on (DEL: a regex object's did so in an
# audit, and t2t-train finished with exit 0).
INTERRUPTING_SOURCE = """
import dataclasses, os, signal, time
from t2t.data.sources import GeneratorSource

def press_ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)  # the handler's KeyboardInterrupt lands here

class Interrupting:
    def __del__(self):
        press_ctrl_c()

def interrupting_rows(split):
    if HOW == "del":
        Interrupting()
    else:
        try:
            press_ctrl_c()
        except KeyboardInterrupt:
            if HOW == "propagates":
                raise
    yield from rows

copy_task = TASKS.get({task!r})
TASKS.unregister({task!r})
register_task(dataclasses.replace(copy_task, source=GeneratorSource(interrupting_rows)))
"""


@pytest.fixture(scope="module")
def tiny_model_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ctrl_c") / "tiny.yaml"
    path.write_text(json.dumps(TINY_MODEL))
    return path


def start_t2t_train(tiny_model_file, tmp_path, module_text: str = "", steps: int = 100_000) -> subprocess.Popen:
    """``t2t-train`` on the copy task as the console script runs it, with ``module_text`` appended to the
    task's module. It prints "started" once train_main has taken Ctrl-C over, its first step: before that,
    Python's start and the import of t2t.cli (milliseconds, no torch) leave Ctrl-C to Python."""
    module = tmp_path / "task_module.py"
    module.write_text(copy_task_module_text() + "from t2t.data.task import TASKS\n" + module_text)
    code = ("import sys, t2t.cli as cli; defer = cli.defer_interrupts; "
            "cli.defer_interrupts = lambda: (defer(), print('started', flush=True)); sys.exit(cli.train_main())")
    args = ["--task", TASK, "--module", str(module), "--model", str(tiny_model_file),
            "--output-dir", str(tmp_path / "run"), "--batch-size", "2", "--set", "input_length=16", "--set",
            "target_length=16", "--set", "pack=false", "--train-steps", str(steps), "--save-every", "100000",
            "--log-every", "100000"]
    env = {**os.environ, "T2T_VOCAB": str(tiny_vocabulary().path), "OMP_NUM_THREADS": "1"}
    # unbuffered: a readline() takes no more than its line, and communicate() reads the rest
    child = subprocess.Popen([sys.executable, "-c", code, *args], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, bufsize=0)
    assert child.stdout.readline() == b"started\n"
    return child


def assert_stopped_by_ctrl_c(child: subprocess.Popen, read_before: bytes = b"") -> None:
    """Exit 130 with the one line that says so last, and nothing like a traceback before it."""
    err = (read_before + child.communicate(timeout=300)[1]).decode()
    assert child.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
    assert re.fullmatch(INTERRUPTED_LINE, err.splitlines()[-1]) and len(re.findall(INTERRUPTED_LINE, err)) == 1, err


@pytest.mark.parametrize("delay", [0.0, 0.5, 1.0])
def test_ctrl_c_right_after_start_is_one_line_and_status_130(tiny_model_file, tmp_path, delay):
    """Within the first second or so the command is still importing its modules and torch."""
    child = start_t2t_train(tiny_model_file, tmp_path)
    time.sleep(delay)
    child.send_signal(signal.SIGINT)
    assert_stopped_by_ctrl_c(child)


@pytest.mark.parametrize("how", ["propagates", "except", "del"])
def test_ctrl_c_while_the_data_loads_stops_the_run_even_if_swallowed(tiny_model_file, tmp_path, how):
    # a few steps: a run that carries on ends soon (exit 0) rather than at the timeout
    child = start_t2t_train(tiny_model_file, tmp_path, f"HOW = {how!r}\n" + INTERRUPTING_SOURCE.format(task=TASK),
                            steps=5)
    assert_stopped_by_ctrl_c(child)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # no step was trained


def test_ctrl_c_during_the_steps_is_one_line_and_status_130(tiny_model_file, tmp_path):
    child = start_t2t_train(tiny_model_file, tmp_path)
    logged = []
    while not logged or not logged[-1].startswith(b"trainable parameters"):  # logged just before the first step
        logged.append(child.stderr.readline())
        assert logged[-1], b"".join(logged).decode()
    time.sleep(0.5)
    child.send_signal(signal.SIGINT)
    assert_stopped_by_ctrl_c(child, b"".join(logged))
