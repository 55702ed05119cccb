"""t2t-predict's input lines, its output file, and t2t-show --raw (what predict --task reads)."""

import errno
import io
import json
import os
import sys
from types import SimpleNamespace

import pytest
import torch

from t2t.checkpoints import durable
from t2t.checkpoints import native as checkpoint
from t2t.cli import predict_main, show_main
from t2t.errors import T2TError
from t2t.data.show import show_raw
from t2t.data.task import get_task
from t2t.evaluation.predict import input_text, reference_fields
from t2t.models.t5 import T5, ModelConfig

# T5's vocabulary (32,100 ids) needs 32,128 embedding rows; everything else as small as it gets
TINY_T5_VOCAB = ModelConfig(vocab_size=32128, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2,
                            dropout_rate=0.0)


@pytest.fixture
def model_dir(tmp_path, t5_vocab_path):
    torch.manual_seed(0)
    checkpoint.save_checkpoint(tmp_path / "model", 1, T5(TINY_T5_VOCAB))
    return tmp_path / "model"


def run_predict(capsys, *argv, stdin: bytes | None = None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(stdin)))
    code = predict_main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_stsb_needs_no_gold_label(model_dir, capsys, tmp_path):
    """The target field may be absent: a prediction needs no label."""
    row = {"sentence1": "A man is playing a flute.", "sentence2": "A man plays the flute.", "idx": 3}
    lines = tmp_path / "in.jsonl"
    lines.write_text(json.dumps(row) + "\n")
    code, out, err = run_predict(capsys, "--checkpoint", str(model_dir), "--task", "stsb", "--input", str(lines),
                                 "--max-length", "3")
    assert code == 0, err
    assert len(out.splitlines()) == 1
    task = get_task("stsb")
    assert input_text(json.dumps(row), 1, task, reference_fields(task, None)) == \
        task.preprocess({**row, "label": 5.0})["inputs"]


@pytest.mark.parametrize("line, message", [
    ("{}", "input line 1 is an empty JSON object; with --task give one object of the task's raw fields"),
    ('{"sentence1": "a"}', "input line 1 has no field 'sentence2', which task glue_rte_v002's inputs are made from"),
    ('{"sentence1": 5, "sentence2": "b"}', "input line 1: field 'sentence1' must be a string, as in task "
                                           "glue_rte_v002's data, got 5"),
    ('{"sentence1": "a", "sentence2": "b", "label": "yes"}', "input line 1: field 'label' must be a number"),
    ('{"sentence1": "a", "sentence2": "b", "premise": "c"}', "input line 1 has field 'premise', which task "
                                                             "glue_rte_v002's data does not have"),
])
def test_task_fields_are_checked_line_by_line(line, message, capsys, tmp_path, data_dir):
    """Checked before any model loads: the checkpoint here does not exist."""
    lines = tmp_path / "in.jsonl"
    lines.write_text(line + "\n")
    code, out, err = run_predict(capsys, "--checkpoint", str(tmp_path / "none"), "--task", "rte", "--input",
                                 str(lines))
    assert code == 2 and out == ""
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err


def test_a_second_line_is_named(capsys, tmp_path, data_dir):
    lines = tmp_path / "in.jsonl"
    lines.write_text('{"sentence1": "a", "sentence2": "b"}\n{"sentence1": "a", "sentence2": null}\n')
    code, _, err = run_predict(capsys, "--checkpoint", str(tmp_path / "none"), "--task", "rte", "--input",
                               str(lines))
    assert code == 2 and err.startswith("error: input line 2"), err


def test_invalid_utf8_on_stdin_names_the_line(capsys, tmp_path, monkeypatch):
    code, _, err = run_predict(capsys, "--checkpoint", str(tmp_path / "none"),
                               stdin=b"fine\nstill fine\nbad \xff byte\n", monkeypatch=monkeypatch)
    assert code == 2
    assert err == ("error: input line 3 of stdin is not UTF-8 (byte 0xff at column 5); convert the input to "
                   "UTF-8.\n")


def test_output_is_replaced_whole_or_not_at_all(model_dir, capsys, tmp_path, monkeypatch):
    """A full disk while writing --output leaves the previous file as it was, and says why."""
    output = tmp_path / "predictions.txt"
    output.write_text("previous good line\n" * 100)
    real_write = durable.write_file

    def full_disk(path, data):
        real_write(path, bytes(data)[:10])  # part of it got out, then the disk was full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(durable, "write_file", full_disk)
    lines = tmp_path / "in.txt"
    lines.write_text("stsb sentence1: a sentence2: b\n")
    code, _, err = run_predict(capsys, "--checkpoint", str(model_dir), "--input", str(lines), "--output",
                               str(output), "--max-length", "2")
    assert code == 2 and "No space left on device" in err and str(output) in err, err
    assert output.read_text() == "previous good line\n" * 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model", "predictions.txt"]


def test_show_raw_prints_the_source_fields(capsys, data_dir):
    assert show_main(["--task", "rte", "--raw", "-n", "2", "--data-dir", str(data_dir)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 2 and set(rows[0]) == {"sentence1", "sentence2", "label", "idx"}
    first = next(get_task("rte").raw_examples("validation", data_dir))
    assert rows[0] == json.loads(json.dumps(first))
    with pytest.raises(T2TError, match="is a mixture"):
        list(show_raw("glue_v002"))
