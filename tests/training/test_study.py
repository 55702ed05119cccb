"""t2t-study: a 1 × 1 intermediate-task grid end to end, resumed, and the table's arithmetic."""

import csv
import json
import logging
import math
import re
import textwrap

import pytest

from t2t.checkpoints import native as checkpoint
from t2t.checkpoints import run as run_lib
from t2t.cli import study_main
from t2t.errors import T2TError
from t2t.evaluation.results import best_checkpoints, task_score
from t2t.testing import tiny_vocabulary
from t2t.training.study import StudyConfig, rows

pytestmark = pytest.mark.integration  # training runs, CLIs and subprocesses

TASKS_MODULE = textwrap.dedent("""
    from t2t.evaluation import metrics
    from t2t.data.sources import InMemorySource
    from t2t.data.task import Task, register_task
    WORDS = "the cat sat on a mat while dogs ran in parks and birds sang songs at dawn".split()
    rows = [{"text": " ".join(WORDS[i:i + 3])} for i in range(len(WORDS) - 3)]
    for name, prefix in (("study_copy", "copy: "), ("study_echo", "echo: ")):
        register_task(Task(name=name, source=InMemorySource({"train": rows, "validation": rows[:4]}),
                           preprocessors=[lambda ex, p=prefix: {"inputs": p + ex["text"], "targets": ex["text"]}],
                           metric_fns=[metrics.sequence_accuracy, metrics.accuracy]))
""")
TINY = dict(vocab_size=512, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2, dropout_rate=0.0)


def test_one_by_one_grid_writes_table_and_heat_map_and_resumes(tmp_path, monkeypatch, capsys, caplog):
    caplog.set_level(logging.INFO)
    monkeypatch.setenv("T2T_VOCAB", str(tiny_vocabulary().path))
    (tmp_path / "tasks.py").write_text(TASKS_MODULE)
    (tmp_path / "tiny.json").write_text(json.dumps(TINY))
    out = tmp_path / "study"
    argv = ["--intermediates", "study_echo", "--targets", "study_copy", "--intermediate-steps", "2",
            "--target-steps", "3", "--output-dir", str(out), "--jobs", "2",
            "--train-args", f"--model {tmp_path / 'tiny.json'} --module {tmp_path / 'tasks.py'} --batch-size 2 "
                            "--set input_length=16 --set target_length=8 --set pack=false --log-every 1",
            "--eval-args", f"--module {tmp_path / 'tasks.py'} --max-examples 2"]
    assert study_main(argv) == 0
    assert re.search(r"study_echo → study_copy: [\d.]+ \(1 of 1 cells done\)", caplog.text)
    cell = out / "study_echo" / "study_copy"
    result = json.loads((cell / "study_result.json").read_text())
    assert result["score"] == pytest.approx((result["metrics"]["sequence_accuracy"] +
                                             result["metrics"]["accuracy"]) / 2)
    with open(out / "results.csv") as f:
        table = list(csv.reader(f))
    assert table == [["row", "study_copy"], ["study_echo", f"{result['score']:.2f}"]]
    assert "| study_echo |" in (out / "results.md").read_text()
    assert (out / "heatmap.png").stat().st_size > 1000
    # the target run starts from the intermediate run and trained with the divided cores
    settings = checkpoint.read_settings(cell)
    assert settings["init_from"] == str(out / "intermediate" / "study_echo")
    assert settings["threads"] >= 1 and settings["train_steps"] == 3
    # a second invocation reads the finished cell back and runs nothing
    log_size = (cell / "train.log").stat().st_size
    assert study_main(argv) == 0
    assert (cell / "train.log").stat().st_size == log_size
    assert f"| study_echo | {result['score']:.2f} |" in capsys.readouterr().out


def test_task_score_is_the_mean_of_the_metrics_or_the_chosen_one():
    assert task_score({"f1": 80.0, "accuracy": 70.0}) == 75.0
    assert task_score({"f1": 80.0, "accuracy": 70.0}, "f1") == 80.0
    assert math.isnan(task_score({"pearson_corrcoef": None}))
    with pytest.raises(T2TError, match="reports f1, accuracy, not 'mcc'"):
        task_score({"f1": 80.0, "accuracy": 70.0}, "mcc")


def test_best_checkpoint_is_chosen_per_task():
    per_step = {100: {"rte": {"accuracy": 60.0}, "mrpc": {"f1": 80.0, "accuracy": 70.0}},
                200: {"rte": {"accuracy": 55.0}, "mrpc": {"f1": 82.0, "accuracy": 74.0}},
                300: {"rte": {"accuracy": 60.0}, "mrpc": {"f1": float("nan"), "accuracy": 90.0}}}
    best = best_checkpoints(per_step)
    assert (best["rte"]["step"], best["rte"]["score"]) == (100, 60.0)  # the earlier of a tie
    assert (best["mrpc"]["step"], best["mrpc"]["score"]) == (200, 78.0)  # an undefined score never wins


def test_rows_are_intermediate_tasks_or_methods():
    starts = {"none": [], "cola": ["--init-from", "runs/cola"]}
    assert rows(StudyConfig(targets=["rte"], intermediates=["none", "cola"]), starts) == {
        "none": ([], []), "cola": (["--init-from", "runs/cola"], [])}
    methods = {"adapters": ["--set", "transfer.adapter_dim=8"], "all": []}
    assert rows(StudyConfig(targets=["rte"], methods=methods), starts) == {
        "adapters": ([], ["--set", "transfer.adapter_dim=8"]), "all": ([], [])}
    with pytest.raises(T2TError, match="either intermediate tasks or methods"):
        StudyConfig(targets=["rte"], intermediates=["cola"], methods=methods)


def test_every_study_config_loads_and_its_method_settings_resolve():
    from t2t import config
    from t2t.training.train import TrainConfig
    names = config.config_names("studies")
    assert {"sesame-street", "transfer-methods", "multitask-then-finetune"} <= set(names)
    for name in names:
        study = config.load(StudyConfig, [config.find_config(name, "studies")])
        assert study.targets
        for extra in study.methods.values():
            overrides = [value for flag, value in zip(extra[::2], extra[1::2]) if flag == "--set"]
            config.load(TrainConfig, [], overrides)  # each method's --set resolves (raises if not)
    methods = config.load(StudyConfig, [config.find_config("transfer-methods", "studies")]).methods
    frozen = config.load(TrainConfig, [], [methods["frozen_encoder"][1]])
    assert frozen.transfer.freeze == ["encoder.*"]


def test_a_changed_study_redoes_or_refuses_its_cells_and_never_reuses_stale_numbers(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("T2T_VOCAB", str(tiny_vocabulary().path))
    (tmp_path / "tasks.py").write_text(TASKS_MODULE)
    (tmp_path / "tiny.json").write_text(json.dumps(TINY))
    out = tmp_path / "study"

    def argv(target_steps="2", max_examples="2", *extra):
        return ["--targets", "study_copy", "--target-steps", target_steps, "--output-dir", str(out),
                "--train-args", f"--model {tmp_path / 'tiny.json'} --module {tmp_path / 'tasks.py'} --batch-size 2 "
                                "--set input_length=16 --set target_length=8 --set pack=false",
                "--eval-args", f"--module {tmp_path / 'tasks.py'} --max-examples {max_examples}", *extra]
    cell = out / "none" / "study_copy"
    assert study_main(argv()) == 0
    eval_log = (cell / "eval.log").stat().st_size
    # other evaluation arguments: evaluated again
    assert study_main(argv(max_examples="1")) == 0
    result = json.loads((cell / "study_result.json").read_text())
    assert result["eval_args"][-1] == "1" and (cell / "eval.log").stat().st_size > eval_log
    assert json.loads((cell / "study_eval" / "validation" / "study_copy.metrics.json").read_text())[
        "num_examples"] == 1
    # another metric: the score of the recorded metrics
    capsys.readouterr()
    assert study_main(argv("2", "1", "--set", "metric=accuracy")) == 0
    assert f"| none | {result['metrics']['accuracy']:.2f} |" in capsys.readouterr().out
    # a torn result file is made again, not a traceback
    (cell / "study_result.json").write_text('{"row": "none", "tar')
    assert study_main(argv(max_examples="1")) == 0
    assert json.loads((cell / "study_result.json").read_text())["metrics"] == result["metrics"]
    # other training arguments: the trained run is refused, not reused
    capsys.readouterr()
    assert study_main(argv(target_steps="3", max_examples="1")) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: {cell} was trained by t2t-train {' '.join(json.loads((cell / 'study_run.json').read_text())['train_args'])}"
        f", not {' '.join(json.loads((cell / 'study_run.json').read_text())['train_args']).replace('--train-steps 2', '--train-steps 3')}; "
        f"give the changed study a new --output-dir, or delete {cell} to train it again.")


def test_a_cell_evaluates_as_the_users_own_run_and_a_module_planted_in_it_is_refused(tmp_path, monkeypatch, capsys):
    """The study evaluated every cell with --trust-modules, so a module changed in a cell folder ran where plain
    t2t-eval refuses it; now a cell follows t2t's one ownership rule (its own run: no flag needed)."""
    monkeypatch.setenv("T2T_VOCAB", str(tiny_vocabulary().path))
    (tmp_path / "tasks.py").write_text(TASKS_MODULE)
    (tmp_path / "tiny.json").write_text(json.dumps(TINY))
    out = tmp_path / "study"
    argv = ["--targets", "study_copy", "--target-steps", "2", "--output-dir", str(out),
            "--train-args", f"--model {tmp_path / 'tiny.json'} --module {tmp_path / 'tasks.py'} --batch-size 2 "
                            "--set input_length=16 --set target_length=8 --set pack=false",
            "--eval-args", "--max-examples 2"]  # the cell's own copy of tasks.py is what t2t-eval imports
    assert study_main(argv) == 0
    cell = out / "none" / "study_copy"
    marker = tmp_path / "marker"
    copy = cell / "modules" / "tasks.py"
    copy.write_text(f"open({str(marker)!r}, 'w').close()\n" + TASKS_MODULE)
    run_lib.record_checksums(cell)  # checksums that match: only the run's record of what it imported differs
    (cell / "study_result.json").unlink()
    capsys.readouterr()
    assert study_main(argv) == 2
    assert f"and {copy} changed since the run recorded it" in capsys.readouterr().err
    assert not marker.exists()
