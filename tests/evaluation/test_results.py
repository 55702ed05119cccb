"""What evaluation reports: the paper's benchmark averages, reasons for undefined metrics, the table, files."""

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from t2t.errors import T2TError
from t2t.evaluation.results import (
    benchmark_averages,
    format_table,
    jsonable,
    prepare_output_dir,
    undefined_reasons,
    write_atomic,
)


def test_glue_average_is_t5s_a_task_with_two_metrics_counts_as_their_mean():
    results = {"glue_mrpc_v002": {"f1": 80.0, "accuracy": 70.0}, "glue_cola_v002": {"matthews_corrcoef": 40.0},
               "glue_mnli_matched_v002": {"accuracy": 60.0}, "glue_mnli_mismatched_v002": {"accuracy": 62.0},
               "glue_ax_v002": {"matthews_corrcoef": 1.0}, "glue_wnli_v002": {"accuracy": 9.0},
               "my_task": {"accuracy": 0.0}}
    glue = benchmark_averages(results)["glue"]
    # MRPC (80+70)/2, CoLA 40, MNLI (60+62)/2 as one task; AX (no labels in the paper) and WNLI (left out
    # of t5's average) do not count.
    assert glue["value"] == pytest.approx((75.0 + 40.0 + 61.0) / 3)
    assert glue["tasks"] == ["glue_cola_v002", "glue_mrpc_v002", "glue_mnli_matched_v002",
                             "glue_mnli_mismatched_v002"]
    assert glue["missing"] == ["glue_sst2_v002", "glue_stsb_v002", "glue_qqp_v002", "glue_qnli_v002",
                               "glue_rte_v002"]
    assert benchmark_averages({"my_task": {"accuracy": 1.0}}) == {}


def test_constant_predictions_say_why_the_correlation_is_undefined():
    records = [{"target_value": t, "prediction_value": -1.0} for t in (1.0, 2.5, 4.0)]
    metrics = {"pearson_corrcoef": float("nan"), "spearman_corrcoef": float("nan")}
    reasons = undefined_reasons(metrics, records)
    assert reasons == {"pearson_corrcoef": "predictions constant: correlation undefined",
                       "spearman_corrcoef": "predictions constant: correlation undefined"}
    varied = [{"target_value": 3.0, "prediction_value": p} for p in (1.0, 2.0)]
    assert undefined_reasons({"pearson_corrcoef": float("nan")}, varied) == {
        "pearson_corrcoef": "targets constant: correlation undefined"}
    assert undefined_reasons({"pearson_corrcoef": 12.0}, records) == {}

    table = format_table({"glue_stsb_v002": {**metrics, "accuracy": 12.345}}, {"glue_stsb_v002": reasons})
    assert "pearson_corrcoef   predictions constant: correlation undefined" in table
    assert "12.35" in table and "n/a" not in table


def test_the_table_names_the_tasks_behind_an_average():
    results = {"glue_rte_v002": {"accuracy": 50.0}, "glue_cola_v002": {"matthews_corrcoef": 10.0}}
    table = format_table(results, {}, benchmark_averages(results))
    assert re.search(r"\nGLUE average +2 tasks +30\.00\n", table)
    assert "GLUE average over glue_cola_v002, glue_rte_v002; not evaluated: glue_sst2_v002," in table
    assert "GLUE average" not in format_table(results, {}, None)


def test_undefined_metrics_are_written_as_null():
    summary = {"tasks": {"glue_stsb_v002": {"pearson_corrcoef": float("nan"), "n": np.int64(3)}}}
    text = json.dumps(jsonable(summary), allow_nan=False)
    assert json.loads(text) == {"tasks": {"glue_stsb_v002": {"pearson_corrcoef": None, "n": 3}}}


def test_an_output_dir_that_is_a_file_is_one_sentence(tmp_path):
    (tmp_path / "out").write_text("not a folder")
    with pytest.raises(T2TError, match=r"output dir .*out.* is a file; pass --output-dir a folder"):
        prepare_output_dir(tmp_path / "out")
    with pytest.raises(T2TError, match="is a file"):
        prepare_output_dir(tmp_path / "out" / "validation")


def test_a_read_only_output_dir_is_one_sentence(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    if os.access(folder, os.W_OK):  # root ignores permission bits: a folder not even root may write to
        folder = Path("/sys/kernel")
    with pytest.raises(T2TError, match="cannot write to output dir .*; pass a writable --output-dir"):
        prepare_output_dir(folder / "eval")


def test_atomic_writes_replace_whole_files(tmp_path):
    path = tmp_path / "x.metrics.json"
    write_atomic(path, "old\n")
    write_atomic(path, "new\n")
    assert path.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["x.metrics.json"]


def test_mnli_matched_and_mismatched_are_reported_at_one_step_as_t5s_metric_group_max():
    from t2t.evaluation.results import best_checkpoints
    matched, mismatched = "glue_mnli_matched_v002", "glue_mnli_mismatched_v002"
    per_step = {100: {matched: {"accuracy": 80.0}, mismatched: {"accuracy": 70.0}, "glue_rte_v002": {"accuracy": 60.0}},
                200: {matched: {"accuracy": 79.0}, mismatched: {"accuracy": 72.0}, "glue_rte_v002": {"accuracy": 55.0}}}
    best = best_checkpoints(per_step)
    assert {task: (b["step"], b["score"]) for task, b in best.items()} == {
        matched: (200, 79.0), mismatched: (200, 72.0), "glue_rte_v002": (100, 60.0)}  # MNLI's means: 75, 75.5
    assert best_checkpoints({100: {matched: {"accuracy": 80.0}}, 200: {mismatched: {"accuracy": 72.0}}}) == {
        matched: {"step": 100, "score": 80.0, "metrics": {"accuracy": 80.0}},
        mismatched: {"step": 200, "score": 72.0, "metrics": {"accuracy": 72.0}}}  # never evaluated together
