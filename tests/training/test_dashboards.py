"""TensorBoard, W&B (offline) and MLflow (a file store) hold metrics.jsonl's history step for step, read back
with each one's own reader, for a run that never stopped, one stopped by an error and one killed with -9
between checkpoints, both then resumed; the settings go in once; a missing package or a lost MLflow store is
one sentence."""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_train import TASK, TINY_MODEL, copy_task_module_text, settings

from t2t import config
from t2t.data.task import TASKS
from t2t.errors import T2TError
from t2t.testing import tiny_vocabulary
from t2t.training import train as train_module
from t2t.training.dashboards import mlflow_logger, tensorboard_logger, wandb_logger
from t2t.training.loggers import LoggedRun
from t2t.training.progress import read_metrics
from t2t.training.train import TrainConfig, train

pytest.importorskip("tensorboard", reason="the tensorboard logger needs t2t[tensorboard]")
pytest.importorskip("wandb", reason="the wandb logger needs t2t[wandb]")
pytest.importorskip("mlflow", reason="the mlflow logger needs t2t[mlflow]")

pytestmark = pytest.mark.integration  # training runs and subprocesses

DASHBOARDS = ["jsonl", "tensorboard", "wandb", "mlflow"]
STEPS, SAVE_EVERY = 6, 3


# ----------------------------------------------------------------------------------------------------------
# Each dashboard's history as {key: [(step, value)]}, read with its own reader


def jsonl_history(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    history: dict[str, list] = {}
    for record in read_metrics(run_dir / "metrics.jsonl"):
        for key, value in record.items():
            if key != "step":
                history.setdefault(key, []).append((record["step"], math.nan if value is None else value))
    return history


def tensorboard_history(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={SCALARS: 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def wandb_records(run_dir: Path) -> list[list[dict]]:
    """Each offline start's records (``wandb leet inspect --json``, W&B's reader of its .wandb logs), in the order
    the starts began."""
    starts = []
    for path in (run_dir / "wandb").glob("offline-run-*/run-*.wandb"):
        shown = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(path)],
                               capture_output=True, text=True, timeout=120, check=True)
        starts.append([json.loads(line) for line in shown.stdout.splitlines() if line.startswith("{")])
    return sorted(starts, key=lambda records: next(r["run"]["start_time"] for r in records if r["type"] == "run"))


def wandb_history(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    history: dict[str, list] = {}
    for records in wandb_records(run_dir):
        for record in records:
            if record["type"] == "history":
                for key, value in record["history"]["item"].items():
                    if not key.startswith("_"):
                        history.setdefault(key, []).append((record["history"]["step"]["num"], float(value)))
    return history


def mlflow_run(run_dir: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=str(run_dir / "mlruns"))
    (run,) = client.search_runs(["0"])  # one MLflow run, however often training started
    return client, run


def mlflow_history(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    client, run = mlflow_run(run_dir)
    return {key: [(m.step, m.value) for m in sorted(client.get_metric_history(run.info.run_id, key),
                                                       key=lambda m: (m.step, m.timestamp))]
            for key in run.data.metrics}


def as_float32(history: dict) -> dict:
    """TensorBoard stores scalars as float32."""
    return {key: [(step, float(np.float32(value))) for step, value in points] for key, points in history.items()}


def same(history: dict, expected: dict) -> bool:
    """Equal step for step, NaN equal to NaN (an undefined metric)."""
    def normal(points):
        return [(step, "nan" if math.isnan(value) else value) for step, value in points]
    return history.keys() == expected.keys() and all(normal(history[k]) == normal(expected[k]) for k in expected)


def check_dashboards(run_dir: Path) -> None:
    expected = jsonl_history(run_dir)
    assert [step for step, _ in expected["loss"]] == list(range(1, STEPS + 1))
    assert [step for step, _ in expected[f"eval/{TASK}/sequence_accuracy"]] == [3, 6]
    assert same(tensorboard_history(run_dir), as_float32(expected))
    assert same(wandb_history(run_dir), expected)
    assert same(mlflow_history(run_dir), expected)


# ----------------------------------------------------------------------------------------------------------
# Runs


def step_of(train_step, *args, **kwargs) -> int:
    """The step a ``train_step`` call makes the next one from (0 for the first)."""
    return inspect.signature(train_step).bind(*args, **kwargs).arguments["step"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The copy task of test_train.py logged to every dashboard: {"cfg": settings for a run folder, "folder"}."""
    folder = tmp_path_factory.mktemp("dashboards")
    task = {"module": str(folder / "copy_task.py"), "model": str(folder / "tiny.yaml")}
    Path(task["module"]).write_text(copy_task_module_text())
    Path(task["model"]).write_text(json.dumps(TINY_MODEL))

    def cfg(out: Path, **changes):
        return settings(task, out, **{"train_steps": STEPS, "save_every": SAVE_EVERY, "eval_every": SAVE_EVERY,
                                      "eval_max_examples": 4, "loggers": DASHBOARDS, **changes})

    with pytest.MonkeyPatch.context() as env:
        env.setenv("T2T_VOCAB", str(tiny_vocabulary().path))
        env.setenv("WANDB_MODE", "offline")
        env.setenv("WANDB_SILENT", "true")
        env.delenv("MLFLOW_TRACKING_URI", raising=False)
        env.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
        yield {"cfg": cfg, "folder": folder}
    TASKS.unregister(TASK)


def test_an_uninterrupted_run_logs_the_same_history_to_every_dashboard(runs):
    run_dir = runs["folder"] / "straight"
    train(runs["cfg"](run_dir))
    check_dashboards(run_dir)
    _, run = mlflow_run(run_dir)
    assert run.info.status == "FINISHED"


def test_a_run_stopped_by_an_error_then_resumed_logs_each_step_once(runs, monkeypatch):
    """Stopped entering step 5: step 4 reached TensorBoard (its writer was closed) and metrics.jsonl, and none
    of the held-back dashboards; the resumed run logs 4 to 6 again, and every dashboard holds each step once."""
    run_dir = runs["folder"] / "stopped"
    real_step = train_module.train_step

    def crash_entering_step_5(*args, **kwargs):
        if step_of(real_step, *args, **kwargs) == SAVE_EVERY + 1:
            raise KeyboardInterrupt
        return real_step(*args, **kwargs)
    monkeypatch.setattr(train_module, "train_step", crash_entering_step_5)
    with pytest.raises(KeyboardInterrupt):
        train(runs["cfg"](run_dir))
    monkeypatch.undo()
    assert [step for step, _ in tensorboard_history(run_dir)["loss"]] == [1, 2, 3, 4]  # 4 is there to purge
    assert [step for step, _ in wandb_history(run_dir)["loss"]] == [1, 2, 3]
    assert [step for step, _ in mlflow_history(run_dir)["loss"]] == [1, 2, 3]
    assert mlflow_run(run_dir)[1].info.status == "FAILED"

    train(runs["cfg"](run_dir))
    check_dashboards(run_dir)
    assert mlflow_run(run_dir)[1].info.status == "FINISHED"
    starts = wandb_records(run_dir)
    assert len(starts) == 2 and {r["run"]["run_id"] for rs in starts for r in rs if r["type"] == "run"} == \
        {json.loads((run_dir / "wandb_run.json").read_text())["id"]}  # two starts of one W&B run


def killed_child() -> None:
    """Train per ``sys.argv[1]`` (TrainConfig as JSON) and SIGKILL this process entering step 5, between the
    checkpoints at 3 and 6, once W&B has written the records sent at checkpoint 3 to its offline file (W&B
    writes it every ``x_transaction_log_flush_interval``: what it has not written by a kill is W&B's loss,
    not something a logger can recover)."""
    cfg = config.from_dict(TrainConfig, json.loads(sys.argv[1]))
    real_step = train_module.train_step

    def kill_entering_step_5(*args, **kwargs):
        if step_of(real_step, *args, **kwargs) == SAVE_EVERY + 1:
            deadline = time.monotonic() + 120
            while 3 not in [step for step, _ in wandb_history(Path(cfg.output_dir)).get("loss", [])]:
                assert time.monotonic() < deadline, "W&B never wrote the records of checkpoint 3"
                time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGKILL)
        return real_step(*args, **kwargs)
    train_module.train_step = kill_entering_step_5
    train(cfg)


def test_a_run_killed_between_checkpoints_then_resumed_logs_each_step_once(runs, monkeypatch):
    run_dir = runs["folder"] / "killed"
    monkeypatch.delenv("WANDB_SERVICE", raising=False)  # the child starts its own W&B service, as a new process does
    monkeypatch.setenv("WANDB__TRANSACTION_LOG_FLUSH_INTERVAL", "0.2")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    child = subprocess.run([sys.executable, "-c", "import test_dashboards; test_dashboards.killed_child()",
                            json.dumps(config.to_dict(runs["cfg"](run_dir)))], env=env, capture_output=True,
                           text=True, timeout=600)
    assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")] == [1, 2, 3, 4]
    train(runs["cfg"](run_dir))
    check_dashboards(run_dir)


def test_the_settings_go_to_each_dashboard_once(runs):
    run_dir = runs["folder"] / "stopped"  # started twice
    from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={TENSORS: 0})
    events.Reload()
    (text,) = events.Tensors("settings/text_summary")
    shown = json.loads(text.tensor_proto.string_val[0].decode().strip("`\n"))
    assert (shown["mixture"], shown["optimizer"]["learning_rate"], shown["model"]["d_model"]) == (TASK, 1e-2, 32)

    starts = wandb_records(run_dir)
    configs = [r["run"]["config"]["update"] for rs in starts for r in rs if r["type"] == "run"]
    updates = [r["config"]["update"] for rs in starts for r in rs if r["type"] == "config"]
    logged = [{k: v for k, v in c.items() if k != "_wandb"} for c in configs + updates]
    assert [c["optimizer"]["learning_rate"] for c in logged if c] == [1e-2]  # once, by the first start

    params = mlflow_run(run_dir)[1].data.params
    assert (params["mixture"], params["optimizer.learning_rate"], params["loggers"]) == \
        (TASK, "0.01", json.dumps(DASHBOARDS))


# ----------------------------------------------------------------------------------------------------------
# Refusals


@pytest.mark.parametrize("kind", ["tensorboard", "wandb", "mlflow"])
def test_a_missing_package_is_one_sentence_before_training(runs, monkeypatch, kind):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name == kind else
                        real_find_spec(name, *args))
    message = rf"^the {kind} logger needs {kind}, which is not installed; pip install 't2t\[{kind}\]', or leave " \
              rf"{kind} out of loggers\.$"
    with pytest.raises(T2TError, match=message):
        train(runs["cfg"](runs["folder"] / f"without_{kind}", loggers=["jsonl", kind]))
    assert not (runs["folder"] / f"without_{kind}" / "vocab.json").exists()  # before the run was recorded


def test_mlflow_logs_to_the_users_tracking_uri_and_a_lost_store_is_one_sentence(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    store = tmp_path / "shared_store"
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", str(store))
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "glue")
    (tmp_path / "run").mkdir()
    logger = mlflow_logger.MlflowLogger(LoggedRun(tmp_path / "run", start_step=0, train_steps=2))
    logger.log({"step": 1, "loss": 2.5})
    logger.flush()
    logger.close()
    client = MlflowClient(tracking_uri=str(store))
    (run,) = client.search_runs([client.get_experiment_by_name("glue").experiment_id])
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss")] == [(1, 2.5)]
    assert not (tmp_path / "run" / "mlruns").exists()

    monkeypatch.setenv("MLFLOW_TRACKING_URI", str(tmp_path / "another_store"))
    with pytest.raises(T2TError, match=rf"^the MLflow run {run.info.run_id} that .* is not in the tracking store "
                                       rf".*another_store \(it was logged to .*shared_store\); set "
                                       rf"MLFLOW_TRACKING_URI to that store, or delete .*mlflow_run.json to start "
                                       rf"a new MLflow run\.$"):
        mlflow_logger.MlflowLogger(LoggedRun(tmp_path / "run", start_step=1, train_steps=2))


def test_a_damaged_dashboard_run_file_is_one_sentence(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    (tmp_path / wandb_logger.RUN_FILE).write_text("{not json")
    with pytest.raises(T2TError, match=r"^cannot read .*wandb_run.json .*; it names the dashboard run this run "
                                       r"logs to, so delete it to start a new dashboard run, or restore it"):
        wandb_logger.WandbLogger(LoggedRun(tmp_path, start_step=3, train_steps=6))


def test_dashboards_plot_a_records_numbers_only(tmp_path):
    logger = tensorboard_logger.TensorBoardLogger(LoggedRun(tmp_path, start_step=0, train_steps=1))
    logger.log({"step": 1, "loss": 0.5, "best/step": 1, "note": "a string", "undefined": None})
    logger.close()
    assert tensorboard_history(tmp_path) == {"loss": [(1, 0.5)], "best/step": [(1, 1.0)]}


def test_wandb_without_a_login_or_offline_mode_is_one_sentence(tmp_path, monkeypatch):
    import wandb

    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_SERVICE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc key
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    wandb.teardown()  # W&B reads its environment once per process
    try:
        with pytest.raises(T2TError, match=r"^W&B could not start a run \(.*\); run `wandb login`, or set "
                                           r"WANDB_MODE=offline to log under .*wandb and `wandb sync` it later\.$"):
            wandb_logger.WandbLogger(LoggedRun(tmp_path, start_step=0, train_steps=6))
    finally:
        wandb.teardown()
    assert not (tmp_path / wandb_logger.RUN_FILE).exists()
