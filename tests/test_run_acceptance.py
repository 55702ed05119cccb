"""Issue 13's acceptance test: a run trained with its own vocabulary is evaluated and used for prediction
after it was moved, from another folder, with a data dir that has no vocab/ (real GLUE RTE files)."""

import json
import shutil

import pytest

from t2t.cli import eval_main, predict_main, train_main, vocab_main
from t2t.data.task import get_task

pytestmark = pytest.mark.integration  # training runs, CLIs and subprocesses

CORPUS_SLICE_LINES = 3000  # of one corpus book: a 500-piece vocabulary trains on it in about a second


def test_a_moved_run_evaluates_and_predicts_with_its_own_settings(data_dir, tmp_path, monkeypatch, capsys):
    book = data_dir / "corpus" / "gutenberg_nltk" / "austen-emma.txt"
    (tmp_path / "slice.txt").write_text("".join(book.open(encoding="utf-8").readlines()[:CORPUS_SLICE_LINES]))
    assert vocab_main([str(tmp_path / "slice.txt"), "--output", str(tmp_path / "vocab" / "emma"),
                       "--vocab-size", "500"]) == 0
    vocab = tmp_path / "vocab" / "emma.model"
    assert train_main(["--task", "rte", "--model", "t5-tiny", "--vocab", str(vocab), "--batch-size", "8",
                       "--train-steps", "4", "--save-every", "4", "--set", "input_length=128",
                       "--set", "target_length=8", "--set", "optimizer.name=adamw",
                       "--output-dir", str(tmp_path / "run")]) == 0

    # the run moves; T2T_DATA_DIR becomes a folder with glue/ but no vocab/; we work from another folder
    shutil.move(tmp_path / "run", tmp_path / "moved")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "glue").symlink_to(data_dir / "glue")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    monkeypatch.setenv("T2T_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("T2T_VOCAB", raising=False)
    moved = str(tmp_path / "moved")
    decoding = ["--max-examples", "24", "--max-length", "4"]

    assert eval_main(["--checkpoint", moved, "--task", "rte", *decoding, "--vocab", str(vocab),
                      "--data-dir", str(data_dir), "--output-dir", str(tmp_path / "explicit")]) == 0
    shutil.rmtree(tmp_path / "vocab")  # from here on only the run's copy exists
    assert eval_main(["--checkpoint", moved, "--task", "rte", *decoding, "--output-dir", "own"]) == 0
    own, explicit = tmp_path / "elsewhere" / "own" / "validation", tmp_path / "explicit" / "validation"
    assert json.loads((own / "glue_rte_v002.metrics.json").read_text())["metrics"] == \
        json.loads((explicit / "glue_rte_v002.metrics.json").read_text())["metrics"]
    scored = [json.loads(line)["prediction"] for line in (own / "glue_rte_v002.predictions.jsonl").open()]
    assert scored == [json.loads(line)["prediction"]
                      for line in (explicit / "glue_rte_v002.predictions.jsonl").open()]

    rows = list(get_task("glue_rte_v002").raw_examples("validation", data_dir))[:24]
    (tmp_path / "rte.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    capsys.readouterr()
    assert predict_main(["--checkpoint", moved, "--task", "rte", "--input", str(tmp_path / "rte.jsonl"),
                         "--max-length", "4"]) == 0
    assert capsys.readouterr().out.splitlines() == scored
