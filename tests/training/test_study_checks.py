"""t2t-study before and around its runs: task checks before the first run, a killed run's sentence, the
default training arguments for the machine's memory, and the heat map's title and colour scale."""

import sys
import textwrap

import numpy as np
import pytest

from t2t.checkpoints.native import save_checkpoint
from t2t.cli import study_main
from t2t.errors import T2TError
from t2t.models.t5 import T5, resolve_model_config
from t2t.training import study
from t2t.training.study import GB, SMALL_TRAIN_ARGS, StudyConfig, heatmap_figure, run_tool, train_args_for_machine
from t2t.training.train import TrainConfig

TASKS_MODULE = textwrap.dedent("""
    from t2t.data.sources import InMemorySource, JsonlFiles
    from t2t.data.task import Mixture, Task, register_mixture, register_task
    rows = [{"inputs": "copy: a b", "targets": "a b"}]
    register_task(Task(name="check_full", source=InMemorySource({"train": rows, "validation": rows})))
    register_task(Task(name="check_train_only", source=InMemorySource({"train": rows})))
    register_task(Task(name="check_no_train", source=InMemorySource({"validation": rows})))
    register_task(Task(name="check_missing", source=JsonlFiles({"train": "/nonexistent/train.jsonl"})))
    register_mixture(Mixture(name="check_mix", tasks=[("check_full", 1.0), ("check_missing", 1.0)]))
""")


def test_every_task_is_checked_before_the_first_run_in_one_sentence(tmp_path, capsys):
    (tmp_path / "tasks.py").write_text(TASKS_MODULE)
    out = tmp_path / "study"
    argv = ["--intermediates", "none,check_no_train,check_mix,check_full", "--output-dir", str(out),
            "--targets", "check_full,check_train_only,check_nope",
            "--train-args", f"--module {tmp_path / 'tasks.py'} --config cpu-smoke"]
    assert study_main(argv) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: the study cannot run: check_no_train has no train split; check_mix has no "
                            "train data for check_missing; check_train_only has no validation split; ")
    assert "unknown task or mixture 'check_nope'" in error and error.count("\n") == 1
    assert not (out / "intermediate").exists()  # no run started

    # the mixture's member without train data is skipped with --skip-unavailable, as t2t-train skips it
    argv[-1] = f"--module {tmp_path / 'tasks.py'} --config cpu-smoke --skip-unavailable"
    argv[1], argv[5] = "check_mix", "check_full,check_nope"
    assert study_main(argv) == 2
    error = capsys.readouterr().err
    assert "check_mix has no" not in error and "check_nope" in error


def test_study_arguments_are_lists_or_shell_strings_and_leave_the_studys_own_flags_alone():
    assert StudyConfig(targets=["rte"], methods={"a": "--set x=1", "b": ["--set", "y=2"]}).methods == {
        "a": ["--set", "x=1"], "b": ["--set", "y=2"]}
    with pytest.raises(T2TError, match=r"study method a must be t2t-train arguments, as a list \(\[--set, x=1\]\) "
                                       r"or one string; got 3"):
        StudyConfig(targets=["rte"], methods={"a": 3})
    for where in ({"train_args": ["--output-dir", "x"]}, {"eval_args": ["--checkpoint=x"]},
                  {"methods": {"a": "--train-steps 5"}}):
        with pytest.raises(T2TError, match=r"which the study sets for each run itself; leave it out"):
            StudyConfig(targets=["rte"], **where)


def test_a_study_folder_that_cannot_be_made_is_one_sentence(tmp_path, capsys):
    (tmp_path / "tasks.py").write_text(TASKS_MODULE)
    (tmp_path / "file").write_text("not a folder")
    argv = ["--intermediates", "none", "--targets", "check_full", "--output-dir", str(tmp_path / "file" / "study"),
            "--train-args", f"--module {tmp_path / 'tasks.py'} --config cpu-smoke"]
    assert study_main(argv) == 2
    assert capsys.readouterr().err == (f"error: cannot create the study folder {tmp_path / 'file' / 'study'} (Not a "
                                       f"directory); choose a writable --output-dir.\n")


def test_a_run_killed_by_a_signal_says_so_not_its_last_log_line(tmp_path, monkeypatch):
    killed = tmp_path / "python"
    killed.write_text("#!/bin/sh\necho 'step 3: loss 2.1'\nkill -9 $$\n")  # what the OOM killer leaves
    killed.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(killed))
    with pytest.raises(T2TError, match=r"^t2t-train --task rte was killed \(signal 9\), probably out of memory; "
                                       r"see .*train.log"):
        run_tool("t2t-train", ["--task", "rte"], 1, tmp_path / "train.log")
    killed.write_text("#!/bin/sh\necho 'error: no such task'\nexit 2\n")
    with pytest.raises(T2TError, match=r"^t2t-train --task rte failed \(error: no such task\)"):
        run_tool("t2t-train", ["--task", "rte"], 1, tmp_path / "train.log")


def test_a_study_without_train_args_trains_what_fits_in_memory(tmp_path, monkeypatch, caplog):
    cfg = StudyConfig(targets=["rte"], jobs=2)
    monkeypatch.setattr(study, "machine_memory", lambda: (200 * GB, "this machine"))
    assert train_args_for_machine(cfg) == []  # t2t-train's defaults: t5-small, about 53 GB a run
    monkeypatch.setattr(study, "machine_memory", lambda: (24 * GB, "this machine"))
    assert train_args_for_machine(cfg) == SMALL_TRAIN_ARGS
    assert ("t2t-train's defaults (batch 128 of 512 + 128 tokens, t5-small) need about 53 GB per run, and this "
            "machine has 24 GB for 2 run(s) side by side; the study trains with --train-args '--config cpu-smoke'"
            ) in caplog.text
    # a study from a model keeps that model, so it says what the defaults need
    save_checkpoint(tmp_path / "base", 1, T5(resolve_model_config("t5-tiny")))
    with pytest.raises(T2TError, match=r"defaults \(batch 128 of 512 \+ 128 tokens, .*base\) need about 11 GB per "
                                       r"run, and this machine has 4 GB .*; pass --train-args with a smaller batch"):
        monkeypatch.setattr(study, "machine_memory", lambda: (4 * GB, "this machine"))
        train_args_for_machine(StudyConfig(targets=["rte"], init_from=str(tmp_path / "base")))


def test_training_memory_matches_measured_peaks():
    """Peaks of AdamW steps of t5-small on CPU above the process's start, measured with ru_maxrss:
    2.4 GB for 4 rows and 4.3 GB for 8 rows of 512 + 128 tokens; the estimate claims 'about' (±15%)."""
    small = resolve_model_config("t5-small")
    for rows, measured in ((4, 2.4), (8, 4.3)):
        estimate = (study.training_memory(small, TrainConfig(batch_size=rows)) - GB / 2) / GB
        assert estimate == pytest.approx(measured, rel=0.15)


def colour_range(fig):
    return fig.axes[0].images[0].get_clim()


def test_heat_map_names_its_metric_and_never_has_a_vanishing_colour_scale(tmp_path):
    same = {"none": {"rte": 50.0, "mrpc": 60.0}, "cola": {"rte": 50.0, "mrpc": 60.0}}
    fig = heatmap_figure(same, ["rte", "mrpc"], None)
    assert fig.axes[0].get_title() == "validation score: mean of each task's metrics"
    assert colour_range(fig) == (-1.0, 1.0)  # equal rows: one pale colour on a ±1 point scale, not ±1e-9
    fig.savefig(tmp_path / "same.png", dpi=100)

    methods = {"adapters": {"rte": 50.0}, "all": {"rte": 50.0}}
    fig = heatmap_figure(methods, ["rte"], "accuracy")
    assert fig.axes[0].get_title() == "validation accuracy" and colour_range(fig) == (49.5, 50.5)
    fig.savefig(tmp_path / "methods.png", dpi=100)

    differ = {"none": {"rte": 50.0, "mrpc": float("nan")}, "cola": {"rte": 54.0, "mrpc": 61.0}}
    assert colour_range(heatmap_figure(differ, ["rte", "mrpc"], "accuracy")) == (-4.0, 4.0)
    assert np.isnan(differ["none"]["mrpc"])


def test_the_study_writes_nothing_through_a_link_placed_in_its_folders(tmp_path, monkeypatch):
    """The study's table files and a run's log are replaced or refused when a link stands in their place;
    the files the links point to are never written."""
    precious = tmp_path / "precious.txt"
    precious.write_text("mine\n")
    out = tmp_path / "study"
    out.mkdir()
    for name in ("results.csv", "results.md", "train.log"):
        (out / name).symlink_to(precious)
    study.write_table({"none": {"rte": 50.0}}, ["rte"], out)
    assert not (out / "results.csv").is_symlink()
    assert (out / "results.csv").read_bytes() == b"row,rte\r\nnone,50.00\r\n"
    assert not (out / "results.md").is_symlink() and "| none | 50.00 |" in (out / "results.md").read_text()
    started = []
    monkeypatch.setattr(study.subprocess, "run", lambda *args, **kwargs: started.append(args))
    with pytest.raises(T2TError, match=rf"^{out / 'train.log'} is a symbolic link, and t2t never writes through"):
        run_tool("t2t-train", ["--task", "rte"], 1, out / "train.log")
    assert not started and precious.read_text() == "mine\n"
