"""t2t-predict's input lines, its output file, and t2t-show --raw (what predict --task reads)."""

import errno
import io
import json
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from t2t import durable
from t2t.checkpoints import native as checkpoint
from t2t.cli import predict_main, show_main
from t2t.data.show import show_raw
from t2t.data.task import TASKS, get_task
from t2t.errors import T2TError
from t2t.evaluation import predict as predict_module
from t2t.evaluation.predict import input_text, reference_examples
from t2t.models.t5 import T5, ModelConfig
from t2t.testing import in_memory_task, tiny_vocabulary

DOCS = Path(__file__).resolve().parents[2] / "docs" / "tasks.md"

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
    assert input_text(json.dumps(row), 1, task, reference_examples(task, None)) == \
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


@pytest.mark.parametrize("output, message", [
    (".", "--output . is a folder; give a file's path, such as predictions.txt"),
    ("in.txt/predictions.txt", "--output in.txt/predictions.txt cannot be written: in.txt is a file, not a folder"),
])
def test_an_output_that_cannot_be_written_is_refused_before_decoding(output, message, model_dir, capsys, tmp_path,
                                                                     monkeypatch):
    """`--output .` raised a traceback once every line was decoded."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(predict_module, "decode_in_batches", decoding_is_not_reached)
    (tmp_path / "in.txt").write_text("stsb sentence1: a sentence2: b\n")
    code, out, err = run_predict(capsys, "--checkpoint", str(model_dir), "--input", "in.txt", "--output", output)
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_an_output_in_a_folder_without_write_permission_is_refused_before_decoding(model_dir, capsys, tmp_path,
                                                                                   monkeypatch):
    monkeypatch.setattr(predict_module, "decode_in_batches", decoding_is_not_reached)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    (tmp_path / "in.txt").write_text("stsb sentence1: a sentence2: b\n")
    code, _, err = run_predict(capsys, "--checkpoint", str(model_dir), "--input", str(tmp_path / "in.txt"),
                               "--output", str(locked / "new" / "predictions.txt"))
    assert code == 2 and err.startswith(f"error: --output {locked / 'new' / 'predictions.txt'} cannot be written: "
                                        f"folder {locked} is not writable"), err


def decoding_is_not_reached(*args, **kwargs):
    raise AssertionError("decoding started although --output cannot be written")


def test_show_raw_prints_the_source_fields(capsys, data_dir):
    assert show_main(["--task", "rte", "--raw", "-n", "2", "--data-dir", str(data_dir)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 2 and set(rows[0]) == {"sentence1", "sentence2", "label", "idx"}
    first = next(get_task("rte").raw_examples("validation", data_dir))
    assert rows[0] == json.loads(json.dumps(first))
    with pytest.raises(T2TError, match="is a mixture"):
        list(show_raw("glue_v002"))


def docs_custom_task_code() -> str:
    """The custom task of docs/tasks.md, as the docs write it (so the docs cannot drift from what is tested)."""
    section = DOCS.read_text().split("## Custom tasks", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def docs_task_module(tmp_path):
    path = tmp_path / "my_tasks.py"
    path.write_text(docs_custom_task_code())
    yield path
    TASKS.unregister("my_sentiment")


@pytest.fixture
def tiny_run(tmp_path) -> Path:
    """An untrained run folder with t2t.testing's tiny vocabulary (no real data needed)."""
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=512, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2, dropout_rate=0.0)
    checkpoint.save_checkpoint(tmp_path / "run", 1, T5(cfg), settings={"vocab": str(tiny_vocabulary().path)})
    return tmp_path / "run"


def test_docs_custom_task_predicts_without_a_label(docs_task_module, tiny_run, capsys, tmp_path):
    """The README promises `t2t-predict --task my_sentiment` with the label left out: the docs' own
    preprocessor refuses a label it does not know, so the prediction path must not hand it an invented one."""
    data = tmp_path / "data"
    (data / "sentiment").mkdir(parents=True)
    rows = [{"text": "a warm, funny film", "label": "positive"}, {"text": "dull", "label": "negative"}]
    for split in ("train", "validation"):
        (data / "sentiment" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = tmp_path / "in.jsonl"
    lines.write_text('{"text": "a gorgeous, witty film"}\n{"text": "tedious"}\n')
    code, out, err = run_predict(capsys, "--checkpoint", str(tiny_run), "--module", str(docs_task_module),
                                 "--task", "my_sentiment", "--data-dir", str(data), "--input", str(lines),
                                 "--max-length", "3")
    assert code == 0, err
    assert len(out.splitlines()) == 2
    task = get_task("my_sentiment")
    assert input_text('{"text": "tedious"}', 1, task, reference_examples(task, data)) == "sentiment: tedious"


def test_squad_predicts_with_the_answers_left_out(model_dir, capsys, tmp_path, data_dir):
    """SQuAD's rows nest their answers ({"text": [...], "answer_start": [...]}); a question and its context
    are all a prediction needs."""
    row = {"question": "Which team won Super Bowl 50?", "context": "The Denver Broncos won Super Bowl 50."}
    lines = tmp_path / "in.jsonl"
    lines.write_text(json.dumps(row) + "\n")
    code, out, err = run_predict(capsys, "--checkpoint", str(model_dir), "--task", "squad", "--input", str(lines),
                                 "--max-length", "3")
    assert code == 0, err
    assert len(out.splitlines()) == 1
    task = get_task("squad")
    expected = task.preprocess({**row, "answers": {"text": ["Denver Broncos"], "answer_start": [4]}})["inputs"]
    assert input_text(json.dumps(row), 1, task, reference_examples(task, data_dir)) == expected


def nested_task():
    """A task whose inputs come from a nested field (``doc.title``) and a checked one (``query``: not empty),
    and whose targets from a nested one that its preprocessor checks (``gold.words``: at least one), as SQuAD's
    answers."""
    def to_text(example):
        if not example["gold"]["words"] or not example["query"]:
            raise T2TError("an example has no gold words or no query; give both.")
        return {"inputs": f"ask: {example['doc']['title']} {example['query']}", "targets": example["gold"]["words"][0]}
    rows = [{"query": q, "doc": {"title": t}, "gold": {"words": [w], "weights": [1.0]}}
            for q, t, w in [("who?", "Ann", "she"), ("why?", "Bob", "because")]]
    return in_memory_task("nested_fields", {"validation": rows}, preprocessors=[to_text])


def test_left_out_nested_fields_are_filled_unless_the_inputs_read_them():
    task = nested_task()
    reference = reference_examples(task, None)
    line = json.dumps({"query": "when?", "doc": {"title": "Cy"}})
    assert input_text(line, 1, task, reference) == "ask: Cy when?"
    for known in (reference, reference[:1]):  # another example's title, or (one example) an empty one
        with pytest.raises(T2TError, match="^input line 1 has no field 'doc', which task nested_fields's inputs "
                                           "are made from"):
            input_text(json.dumps({"query": "when?"}), 1, task, known)
    with pytest.raises(T2TError, match="^input line 1 has no field 'query'"):  # "" is refused: another example's
        input_text(json.dumps({"doc": {"title": "Cy"}}), 1, task, reference)
    with pytest.raises(T2TError, match="^input line 1: field 'doc' must be an object"):
        input_text(json.dumps({"query": "when?", "doc": "Cy"}), 1, task, reference)
