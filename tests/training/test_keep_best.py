"""keep_best and early_stopping: which evaluation is best, when a run stops, and runs that keep and stop.

The rules are unit-tested on scripted evaluations; two training runs (an in-memory task, and RTE from
T2T_DATA_DIR) prove the whole path: the best step's checkpoint survives rotation, the run stops when its
patience runs out, and t2t-eval on RUN:best scores exactly what training recorded.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from t2t import config
from t2t.checkpoints import best as best_record
from t2t.checkpoints.hf import from_hf
from t2t.checkpoints.loading import load_model
from t2t.checkpoints.native import checkpoint_name, list_checkpoints
from t2t.cli import eval_main, export_main, predict_main, train_main
from t2t.cli import train as train_cli
from t2t.data.task import TASKS
from t2t.errors import T2TError
from t2t.testing import tiny_vocabulary
from t2t.training.keep_best import BestWatch, EarlyStoppingConfig, check_keep_best, find_metric, higher_is_better
from t2t.training.progress import read_metrics
from t2t.training.train import TrainConfig, train

TASK = "test_keep_best_copy"
TINY_MODEL = dict(vocab_size=512, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, dropout_rate=0.0)
RTE = "eval/glue_rte_v002/accuracy"


# ----------------------------------------------------------------------------------------------------------
# The rules, on scripted evaluations


def watch(tmp_path, keep_best="accuracy", patience=0, min_delta=0.0) -> BestWatch:
    return BestWatch(tmp_path, keep_best, EarlyStoppingConfig(patience, min_delta), {"mixture": "rte"})


def judge(w: BestWatch, values, metric=RTE, first_step=1) -> list[dict]:
    return [w.observe(step, {"step": step, metric: value}) for step, value in enumerate(values, first_step)]


def test_the_best_is_the_highest_and_the_earliest_of_a_tie(tmp_path):
    w = watch(tmp_path)
    gains = judge(w, [50.0, 62.5, 62.5, 55.0])
    assert [g["best/step"] for g in gains] == [1, 2, 2, 2] and gains[-1]["best/value"] == 62.5
    assert [w.wants_checkpoint(step) for step in (1, 2, 3, 4)] == [False, True, False, False]
    assert w.record_for(2)["metric"] == RTE and w.record_for(3) is None


def test_a_loss_like_metric_is_better_lower(tmp_path):
    assert higher_is_better("eval/glue_average") and higher_is_better(RTE)
    assert not higher_is_better("eval/my_task/mean_edit") and not higher_is_better("eval/my_task/loss")
    w = watch(tmp_path, keep_best="mean_edit")
    gains = judge(w, [4.0, 3.0, 3.5], metric="eval/my_task/mean_edit")
    assert gains[-1]["best/step"] == 2 and w.record_for(2)["higher_is_better"] is False


def test_an_undefined_value_is_never_best_and_counts_against_the_patience(tmp_path):
    w = watch(tmp_path, patience=2)
    gains = judge(w, [math.nan, 40.0, math.nan, math.nan])
    assert gains[0] == {} and gains[1]["best/step"] == 2
    assert "early_stopped" not in gains[2] and gains[3]["early_stopped"] is True and w.stopped_at == 4


def test_patience_counts_evaluations_that_do_not_beat_the_best_by_more_than_min_delta(tmp_path):
    """transformers' EarlyStoppingCallback: an improvement of at most min_delta still moves the best, but
    counts against the patience; one beyond it resets the count."""
    w = watch(tmp_path, patience=2, min_delta=1.0)
    gains = judge(w, [50.0, 50.5, 52.0, 51.0, 52.9])
    assert [g["best/step"] for g in gains] == [1, 2, 3, 3, 5]
    assert [w.without_improvement for w in [w]] == [2] and w.stopped_at == 5
    assert ["early_stopped" in g for g in gains] == [False, False, False, False, True]
    assert w.wants_checkpoint(5)  # both the new best and the step the run stops at


def test_without_patience_a_run_never_stops(tmp_path):
    w = watch(tmp_path)
    judge(w, [50.0] + [40.0] * 20)
    assert w.stopped_at is None and w.without_improvement == 20


def test_a_resumed_watch_compares_with_the_recorded_best_and_keeps_counting(tmp_path):
    (tmp_path / checkpoint_name(4)).mkdir()
    best_record.write_best(tmp_path, {"keep_best": "accuracy", "metric": RTE, "higher_is_better": True, "step": 4,
                                      "value": 70.0})
    w = watch(tmp_path, patience=3)
    w.resume({"metric": RTE, "evaluations_without_improvement": 1})
    gains = judge(w, [65.0, 68.0], first_step=6)
    assert gains[-1]["early_stopped"] is True and gains[-1]["best/step"] == 4  # 1 + 2 evaluations: patience 3
    assert w.record_for(6) is None and w.record_for(7) is None


def test_a_resumed_watch_warns_when_the_recorded_best_was_scored_otherwise(tmp_path, caplog):
    (tmp_path / checkpoint_name(4)).mkdir()
    best_record.write_best(tmp_path, {"keep_best": "accuracy", "metric": RTE, "higher_is_better": True, "step": 4,
                                      "value": 70.0, "evaluation": {"mixture": "rte", "max_examples": 64}})
    with caplog.at_level(logging.WARNING, logger="t2t.training.keep_best"):
        BestWatch(tmp_path, "accuracy", EarlyStoppingConfig(), {"mixture": "rte", "max_examples": 64})
        assert not caplog.records
        BestWatch(tmp_path, "accuracy", EarlyStoppingConfig(), {"mixture": "rte", "max_examples": 256})
    assert "the recorded best (step 4) was scored with {'mixture': 'rte', 'max_examples': 64}" in caplog.text


def test_a_resumed_watch_naming_another_metric_starts_afresh(tmp_path, caplog):
    (tmp_path / checkpoint_name(4)).mkdir()
    best_record.write_best(tmp_path, {"keep_best": "glue_average", "metric": "eval/glue_average",
                                      "higher_is_better": True, "step": 4, "value": 90.0})
    w = watch(tmp_path, patience=3)
    w.resume({"metric": "eval/glue_average", "evaluations_without_improvement": 2})
    with caplog.at_level(logging.INFO, logger="t2t.training.keep_best"):
        gains = judge(w, [10.0], first_step=6)
    assert gains[0]["best/step"] == 6 and w.without_improvement == 0
    assert "the best starts afresh" in caplog.text


@pytest.mark.parametrize("given, found", [
    ("accuracy", RTE), ("eval/glue_rte_v002/accuracy", RTE), ("rte/accuracy", RTE),
    ("glue_rte_v002/accuracy", RTE), ("glue_average", "eval/glue_average")])
def test_keep_best_names_a_logged_metric_in_the_ways_users_write_it(given, found):
    record = {"step": 3, "loss": 1.0, RTE: 60.0, "eval/glue_average": 60.0}
    assert find_metric(given, record) == found


def test_an_unknown_or_ambiguous_keep_best_is_one_sentence_listing_the_names():
    record = {"step": 3, RTE: 60.0, "eval/glue_mrpc_v002/accuracy": 70.0, "eval/glue_mrpc_v002/f1": 71.0}
    with pytest.raises(T2TError) as error:
        find_metric("acc", record)
    assert str(error.value) == ("keep_best acc is not among the metrics the evaluation reports (glue_rte_v002/accuracy, "
                                "glue_mrpc_v002/accuracy, glue_mrpc_v002/f1); set --set keep_best=<one of them> and "
                                "run the same command again (it resumes).")
    with pytest.raises(T2TError, match=r"reported by several tasks \(glue_rte_v002/accuracy, "
                                       r"glue_mrpc_v002/accuracy\); name one as --set keep_best=<task>/accuracy"):
        find_metric("accuracy", record)


def test_what_an_evaluation_cannot_report_is_refused_before_training():
    check_keep_best("glue_average", "glue_v002")
    check_keep_best("rte/accuracy", "rte")
    check_keep_best("accuracy", "rte")  # metric names are known once the metrics have run
    with pytest.raises(T2TError, match=r"keep_best glue_average is not an average the evaluation of rte reports "
                                       r"\(it reports no benchmark average\)"):
        check_keep_best("glue_average", "rte")
    with pytest.raises(T2TError, match=r"names a task the evaluation of rte does not score \(it scores "
                                       r"glue_rte_v002\)"):
        check_keep_best("mrpc/f1", "rte")


@pytest.mark.parametrize("settings, message", [
    (dict(keep_best="accuracy"), r"keep_best is set but eval_every is 0"),
    (dict(early_stopping={"patience": 3}), r"early_stopping.patience is set but eval_every is 0"),
    (dict(eval_every=2, early_stopping={"patience": 3}), r"keep_best is not set; set --set keep_best=<metric>"),
])
def test_settings_that_cannot_work_are_refused_when_training_starts(settings, message, tmp_path):
    """Not where the settings are built: t2t-train --output-dir RUN --set early_stopping.patience=N builds them
    once without the run's own (its keep_best, its eval_every) to find the run."""
    with pytest.raises(T2TError, match=message):
        train(config.from_dict(TrainConfig, {"mixture": "rte", "output_dir": str(tmp_path / "run"), **settings}))
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_a_negative_patience_or_min_delta_is_refused():
    for field in ("patience", "min_delta"):
        with pytest.raises(T2TError, match=rf"early_stopping.{field}"):
            config.from_dict(TrainConfig, {"mixture": "rte", "early_stopping": {field: -1}})


# ----------------------------------------------------------------------------------------------------------
# A run on an in-memory task: keeps, stops, resumes, and RUN:best scores the same


MODULE = textwrap.dedent(f"""
    from t2t.data.sources import InMemorySource
    from t2t.data.task import Task, register_task
    SENTENCES = ["the cat sat on the mat", "a dog ran in the park", "birds sing in the morning",
                 "rain falls on the hills", "the river runs to the sea", "children play in the garden",
                 "the sun rises in the east", "snow covers the quiet town"]
    rows = [{{"text": s}} for s in SENTENCES]

    def words_copied(targets, predictions):
        '''Share of each target's words the prediction holds (partial credit that moves while a model learns).'''
        shares = [len(set(t.split()) & set(p.split())) / len(set(t.split())) for t, p in zip(targets, predictions)]
        return {{"words_copied": 100 * sum(shares) / len(shares)}}

    register_task(Task(name={TASK!r}, source=InMemorySource({{"train": rows, "validation": rows[:4]}}),
                       preprocessors=[lambda ex: {{"inputs": "copy: " + ex["text"], "targets": ex["text"]}}],
                       metric_fns=[words_copied]))
""")


def in_memory_settings(folder: Path, **changes) -> TrainConfig:
    model = folder.parent / "tiny.json"
    model.write_text(json.dumps(TINY_MODEL))
    module = folder.parent / "copy_task.py"
    module.write_text(MODULE)
    base = dict(mixture=TASK, model=str(model), modules=[str(module)], output_dir=str(folder), train_steps=24,
                batch_size=4, input_length=16, target_length=16, pack=False, log_every=1, save_every=3,
                keep_checkpoints=1, seed=1, eval_every=1, eval_max_examples=4, eval_batch_size=4,
                keep_best="words_copied", early_stopping={"patience": 2}, loggers=["jsonl"],
                optimizer={"name": "adamw", "learning_rate": 1e-2})
    return config.from_dict(TrainConfig, {**base, **changes})


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """A run that kept its best and stopped early (trained once for the tests below)."""
    folder = tmp_path_factory.mktemp("keep_best") / "run"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("T2T_VOCAB", str(tiny_vocabulary().path))  # for the tests using the run, too
        try:
            yield folder, train(in_memory_settings(folder))
        finally:
            TASKS.unregister(TASK)


def evaluations(records) -> list[tuple[int, float]]:
    return [(r["step"], r[f"eval/{TASK}/words_copied"]) for r in records if f"eval/{TASK}/words_copied" in r]


@pytest.mark.integration
def test_the_best_checkpoint_survives_rotation_and_the_run_stops_when_patience_runs_out(stopped_run):
    folder, records = stopped_run
    scores = evaluations(records)
    best_value = max(value for _, value in scores)
    best_step = min(step for step, value in scores if value == best_value)
    stop_step = records[-1]["step"]
    assert records[-1]["early_stopped"] is True and stop_step < 24  # stopped early
    assert stop_step == best_step + 2  # no improvement in exactly the patience's 2 evaluations after the best
    record = best_record.read_best(folder)
    assert (record["step"], record["value"], record["metric"]) == (best_step, best_value, f"eval/{TASK}/words_copied")
    # with keep_checkpoints 1, the newest and, beside it, the best (saved off the save_every schedule)
    assert [path.name for path in list_checkpoints(folder)] == [checkpoint_name(best_step), checkpoint_name(stop_step)]


@pytest.mark.integration
def test_run_best_scores_exactly_what_training_recorded(stopped_run):
    folder, _ = stopped_run
    record = best_record.read_best(folder)
    assert eval_main(["--checkpoint", f"{folder}:best", "--task", TASK, "--max-examples", "4",
                      "--batch-size", "4"]) == 0
    scored = json.loads((folder / "eval" / checkpoint_name(record["step"]) / "validation" /
                         f"{TASK}.metrics.json").read_text())
    assert scored["metrics"]["words_copied"] == record["value"] and scored["step"] == record["step"]


@pytest.mark.integration
def test_predict_export_and_init_from_take_run_best(stopped_run, tmp_path, capsys):
    folder, _ = stopped_run
    best = folder / checkpoint_name(best_record.read_best(folder)["step"])
    capsys.readouterr()
    assert predict_main(["--checkpoint", f"{folder}:best", "--print-config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["checkpoint"] == str(best)
    args = train_cli.parser().parse_args(["--task", TASK, "--init-from", f"{folder}:best",
                                          "--output-dir", str(tmp_path / "next")])
    assert train_cli.settings(args).init_from == str(best)
    assert export_main(["--checkpoint", f"{folder}:best", "--to", "hf", str(tmp_path / "hf")]) == 0
    exported = from_hf(str(tmp_path / "hf")).state_dict()
    kept, latest = load_model(best).state_dict(), load_model(folder).state_dict()
    assert all(torch.equal(exported[k], kept[k]) for k in kept)
    assert not all(torch.equal(exported[k], latest[k]) for k in latest)  # the best, not the newest


@pytest.mark.integration
def test_a_stopped_run_is_done_until_its_patience_is_raised(stopped_run, tmp_path, caplog):
    folder, records = stopped_run
    with caplog.at_level(logging.INFO, logger="t2t.training.train"):
        assert train_main(["--output-dir", str(folder)]) == 0  # the same command again: nothing to train
    assert read_metrics(folder / "metrics.jsonl") == records
    assert "stopped early" in caplog.text and "nothing to train" in caplog.text
    copy = tmp_path / "run"
    shutil.copytree(folder, copy)
    before = best_record.read_best(copy)
    assert train_main(["--output-dir", str(copy), "--set", "early_stopping.patience=3"]) == 0
    resumed = read_metrics(copy / "metrics.jsonl")
    new = resumed[len(records):]
    assert new[0]["step"] == records[-1]["step"] + 1  # continues where it stopped
    after = best_record.read_best(copy)
    if after["step"] == before["step"]:  # no new best: the count went on from 2, so one more evaluation ends it
        assert len(new) == 1 and new[0]["early_stopped"] is True
    else:  # a new best replaced the record, compared with the recorded one
        assert after["value"] > before["value"]


# ----------------------------------------------------------------------------------------------------------
# RTE from T2T_DATA_DIR, through the t2t-eval command


@pytest.mark.integration
def test_rte_run_keeps_its_best_and_t2t_eval_run_best_reproduces_its_score(t5_vocab_path, data_dir, tmp_path):
    folder = tmp_path / "rte"
    cfg = config.from_dict(TrainConfig, dict(
        mixture="rte", model="t5-tiny", vocab=str(t5_vocab_path), data_dir=str(data_dir), output_dir=str(folder),
        train_steps=40, batch_size=8, input_length=128, target_length=8, pack=False, log_every=2, save_every=100,
        keep_checkpoints=1, eval_every=2, eval_max_examples=16, eval_batch_size=16, keep_best="accuracy",
        early_stopping={"patience": 2}, loggers=["jsonl"], seed=0,
        optimizer={"name": "adamw", "learning_rate": 3e-3}))
    records = train(cfg)
    scores = [(r["step"], r[RTE]) for r in records if RTE in r]
    record = best_record.read_best(folder)
    best_value = max(value for _, value in scores)
    assert (record["step"], record["value"]) == (min(s for s, v in scores if v == best_value), best_value)
    assert records[-1].get("early_stopped") is True and records[-1]["step"] == record["step"] + 2 * 2
    assert [p.name for p in list_checkpoints(folder)] == [checkpoint_name(record["step"]),
                                                        checkpoint_name(records[-1]["step"])]
    t2t_eval = Path(sys.executable).parent / "t2t-eval"
    done = subprocess.run([str(t2t_eval), "--checkpoint", f"{folder}:best", "--task", "rte", "--max-examples", "16",
                           "--batch-size", "16"], capture_output=True, text=True,
                          env={**os.environ, "T2T_DATA_DIR": str(data_dir)}, timeout=600)
    assert done.returncode == 0, done.stderr
    scored = json.loads((folder / "eval" / checkpoint_name(record["step"]) / "validation" /
                         "glue_rte_v002.metrics.json").read_text())
    assert scored["metrics"]["accuracy"] == record["value"]
