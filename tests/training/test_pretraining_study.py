"""The pre-training study's results (examples/study_summary.py) and its in-domain task (examples/study_tasks.py):
scores read from metrics.jsonl as t2t-train writes it, one CSV row per finished run, the spread criterion."""

import csv
import importlib.util
import itertools
import json
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


def write_run(run: Path, records: list[dict], last_step: int, train_steps: int | None = None) -> None:
    run.mkdir(parents=True)
    (run / f"step_{last_step:08d}").mkdir()
    config = f"seed: 0\ntrain_steps: {train_steps or last_step}\nsave_every: 100\n"
    (run / f"step_{last_step:08d}" / "train_config.yaml").write_text(config)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_task_score_averages_its_metrics_and_counts_an_undefined_correlation_as_zero():
    summary = load("study_summary")
    assert summary.task_score({"eval/glue_mrpc_v002/f1": 80.0, "eval/glue_mrpc_v002/accuracy": 70.0}, "mrpc") == 75.0
    stsb = {"eval/glue_stsb_v002/pearson_corrcoef": None, "eval/glue_stsb_v002/spearman_corrcoef": 40.0}
    assert summary.task_score(stsb, "stsb") == 20.0
    assert summary.task_score({"step": 5, "loss": 1.0}, "stsb") is None  # a training-loss line


def test_results_take_each_finished_runs_best_evaluation_and_skip_unfinished_runs(tmp_path):
    summary = load("study_summary")
    key = "eval/glue_rte_v002/accuracy"
    write_run(summary.finetune_run(tmp_path, "rte", "scratch", 0),
              [{"step": 50, "loss": 0.7}, {"step": 100, key: 52.0}, {"step": 200, key: 58.5}, {"step": 300, key: 55.0}],
              last_step=300)
    # stopped after step 200's checkpoint: its last evaluation is not its final step's
    write_run(summary.finetune_run(tmp_path, "rte", "generic", 0), [{"step": 100, key: 60.0}], last_step=200)
    # stopped at a mid-run checkpoint that was also evaluated: not finished either (its config says 1,500)
    write_run(summary.finetune_run(tmp_path, "rte", "generic", 1), [{"step": 500, key: 61.0}], last_step=500,
              train_steps=1500)
    rows = summary.results(tmp_path, ["rte"], ["scratch", "generic"], [0, 1])
    assert rows == [{"task": "rte", "condition": "scratch", "seed": 0, "score": 58.5}]
    summary.write_csv(rows, tmp_path / "docs" / "results.csv")
    with open(tmp_path / "docs" / "results.csv") as f:
        assert list(csv.reader(f)) == [["task", "condition", "seed", "score"], ["rte", "scratch", "0", "58.5"]]


def test_beating_scratch_means_every_pretrained_seed_above_every_scratch_seed():
    summary = load("study_summary")
    assert summary.beats_scratch([70.0, 71.0, 72.0], [60.0, 65.0, 69.9])
    assert not summary.beats_scratch([70.0, 71.0, 80.0], [60.0, 65.0, 70.5])  # means far apart, ranges overlap
    assert summary.beats_scratch([80.0], [60.0, 61.0]) is None  # one seed: no spread to exceed
    assert summary.beats_scratch([59.0], [60.0]) is False  # already below: more seeds cannot undo it
    assert summary.beats_scratch([], [60.0]) is None
    rows = [{"task": "rte", "condition": c, "seed": s, "score": score}
            for c, scores in (("scratch", [50, 52, 54]), ("generic", [55, 56, 57])) for s, score in enumerate(scores)]
    text = summary.table(rows, ["rte"], ["scratch", "generic"])
    assert "| RTE (acc) | 52.0 ± 2.0 (n=3) | 56.0 ± 1.0 (n=3) | yes |" in text
    assert "on 1 of 1 tasks" in text


def test_the_study_stops_at_a_failed_stage_instead_of_starting_the_queued_runs(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))  # the script imports study_summary from beside it
    study_module = load("pretraining_study")
    study = study_module.Study(tmp_path, study_module.SCALES["smoke"])
    started = []

    def finetune(task: str, condition: str, seed: int) -> None:
        started.append((task, condition, seed))
        raise SystemExit(f"finetune_{task}_{condition}_seed{seed} failed")

    monkeypatch.setattr(study, "make_vocabulary", lambda: None)
    monkeypatch.setattr(study, "pretrain", lambda condition: None)
    monkeypatch.setattr(study, "finetune", finetune)
    with pytest.raises(SystemExit, match="finetune_cola_scratch_seed0 failed"):
        study.run(jobs=1)
    assert started == [("cola", "scratch", 0)]  # the smoke scale's 14 other runs were skipped


@pytest.mark.real_data
def test_the_indomain_source_is_the_glue_training_inputs_then_the_corpus(data_dir):
    tasks = load("study_tasks")
    source = tasks.UnlabelledInputsAndCorpus(configs=("rte",))
    rows = list(source.load("train", data_dir))
    first_rte = next(iter(tasks.GlueSource("rte").load("train", data_dir)))
    assert rows[0] == {"text": f"{first_rte['sentence1']} {first_rte['sentence2']}"}  # no label, no index
    corpus = list(itertools.islice(tasks.TextFolderSource("corpus").load("train", data_dir), 2))
    assert [r["text"] for r in rows[2490:2492]] == [r["text"] for r in corpus]  # RTE has 2,490 training rows
