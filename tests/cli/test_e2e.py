"""The main job end to end through the CLIs, on the real GLUE files (through T2T_DATA_DIR)."""

import json
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration  # training runs, CLIs and subprocesses

SMALL = ["--model", "t5-tiny", "--batch-size", "8", "--log-every", "4", "--save-every", "12",
         "--set", "input_length=64", "--set", "target_length=8", "--set", "optimizer.name=adamw",
         "--set", "optimizer.learning_rate=3e-3", "--set", "dropout_rate=0.1"]


def cli(name: str, *args: str, env=None) -> subprocess.CompletedProcess:
    code = f"import sys; from t2t.cli import {name}; sys.exit({name}())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=900,
                          env=env)


def losses(run_dir):
    return [json.loads(line)["loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_train_eval_resume_on_glue(data_dir, tmp_path):
    common = ["--mixture", "glue_v002", "--skip-unavailable", "--data-dir", str(data_dir), *SMALL]
    straight = cli("train_main", *common, "--output-dir", str(tmp_path / "straight"), "--train-steps", "24")
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert "skipping glue_qqp_v002" in straight.stderr  # QQP, MNLI and the QNLI train split are not on disk

    first = cli("train_main", *common, "--output-dir", str(tmp_path / "resumed"), "--train-steps", "12")
    again = cli("train_main", *common, "--output-dir", str(tmp_path / "resumed"), "--train-steps", "24")
    assert first.returncode == 0 and again.returncode == 0, again.stderr[-3000:]
    assert "resumed from" in again.stderr
    assert losses(tmp_path / "resumed") == losses(tmp_path / "straight")
    assert losses(tmp_path / "straight")[-1] < losses(tmp_path / "straight")[0]

    evaluation = cli("eval_main", "--task", "stsb", "--checkpoint", str(tmp_path / "straight"),
                     "--data-dir", str(data_dir), "--max-examples", "64", "--output-dir", str(tmp_path / "eval"))
    assert evaluation.returncode == 0, evaluation.stderr[-3000:]
    metrics = json.loads((tmp_path / "eval" / "validation" / "glue_stsb_v002.metrics.json").read_text())
    assert set(metrics["metrics"]) == {"pearson_corrcoef", "spearman_corrcoef"} and metrics["step"] == 24
    predictions = (tmp_path / "eval" / "validation" / "glue_stsb_v002.predictions.jsonl").read_text().splitlines()
    assert len(predictions) == 64
    assert json.loads(predictions[0])["targets"] == "5.0"  # the first STS-B dev row, rounded as T5 does
    assert "glue_stsb_v002" in evaluation.stdout and "pearson_corrcoef" in evaluation.stdout


def assert_one_sentence_error(run: subprocess.CompletedProcess, *fragments: str):
    assert run.returncode == 2, run.stderr[-3000:]
    lines = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr[-3000:]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_misspelt_task_is_one_clear_sentence(tmp_path):
    run = cli("train_main", "--task", "glue_stsbb_v002", "--model", "t5-tiny", "--output-dir", str(tmp_path))
    assert_one_sentence_error(run, "unknown task", "glue_stsb_v002")
    run = cli("eval_main", "--task", "sstt2", "--checkpoint", str(tmp_path))
    assert_one_sentence_error(run, "sst2")


def test_damaged_tsv_row_names_file_and_line(data_dir, tmp_path):
    glue = tmp_path / "glue"
    shutil.copytree(data_dir / "glue" / "RTE", glue / "RTE")
    shutil.copytree(data_dir / "vocab", tmp_path / "vocab")
    train = glue / "RTE" / "train.tsv"
    lines = train.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[5] = lines[5].replace("\t", " ", 1)  # one field too few on line 6
    train.write_text("".join(lines), encoding="utf-8")
    run = cli("train_main", "--task", "rte", "--data-dir", str(tmp_path), *SMALL, "--train-steps", "2",
              "--output-dir", str(tmp_path / "run"))
    assert_one_sentence_error(run, str(train), "line 6")


def test_missing_data_without_skip_lists_what_is_missing(data_dir, tmp_path):
    run = cli("train_main", "--mixture", "glue_v002", "--data-dir", str(data_dir), *SMALL,
              "--train-steps", "2", "--output-dir", str(tmp_path / "run"))
    assert_one_sentence_error(run, "glue_qqp_v002", "glue_mnli_v002", "--skip-unavailable")
