"""ByT5 through the CLIs on the real RTE files: t2t-show --vocab byte gives ByT5Tokenizer's ids, t2t-train --model
byt5-small trains and evaluates with the byte vocabulary it implies, the run moved elsewhere still evaluates,
and t2t-export of it loads in transformers with AutoTokenizer and AutoModelForSeq2SeqLM alone."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from t2t.checkpoints import run as run_lib
from t2t.checkpoints.loading import load_model
from t2t.cli.eval import eval_main
from t2t.cli.export import export_main
from t2t.cli.show import show_main
from t2t.data.byte_vocab import ByteVocabulary
from t2t.data.show import show_examples
from t2t.data.vocab import load_vocabulary

transformers = pytest.importorskip("transformers", reason="the comparison is with transformers' ByT5 classes")
pytestmark = [pytest.mark.integration, pytest.mark.real_data]

TINY = ["model.num_layers=2", "model.num_decoder_layers=1", "model.d_model=32", "model.d_ff=64", "model.num_heads=2",
        "model.d_kv=16", "input_length=128", "target_length=16", "eval_max_examples=8"]


def data_root() -> Path:
    root = os.environ.get("T2T_DATA_DIR")
    if not root or not (Path(root) / "glue" / "RTE").is_dir():
        pytest.skip("real-data test: set T2T_DATA_DIR to a folder with glue/RTE")
    return Path(root)


def test_show_tokens_with_the_byte_vocabulary_are_byt5_tokenizer_ids_on_every_rte_row(capsys):
    root = data_root()
    assert show_main(["--task", "rte", "--tokens", "--vocab", "byte", "-n", "100000", "--data-dir", str(root)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 277  # RTE's validation split
    tokenizer = transformers.ByT5Tokenizer()
    for field in ("inputs", "targets"):
        texts = [row[field] for row in rows]
        assert [row[f"{field}_tokens"] for row in rows] == tokenizer(texts).input_ids, field
    assert any(any(ord(c) > 127 for c in row["inputs"]) for row in rows)  # accents: multi-byte characters


@pytest.fixture(scope="module")
def byt5_run(tmp_path_factory):
    """``t2t-train --model byt5-small`` (shrunk with --set) on RTE for 4 steps with an evaluation, no --vocab."""
    root = data_root()
    out = tmp_path_factory.mktemp("byt5") / "run"
    sets = [arg for pair in TINY for arg in ("--set", pair)]
    code = "import sys; from t2t.cli import train_main; sys.exit(train_main())"
    run = subprocess.run([sys.executable, "-c", code, "--task", "rte", "--model", "byt5-small", *sets,
                          "--train-steps", "4", "--batch-size", "4", "--log-every", "2", "--save-every", "4",
                          "--eval-every", "4", "--data-dir", str(root), "--output-dir", str(out)],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "T2T_VOCAB": ""})
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def test_a_byt5_preset_trains_and_evaluates_rte_with_the_byte_vocabulary_it_implies(byt5_run):
    assert json.loads((byt5_run / "vocab.json").read_text()) == {"kind": "byte", "extra_ids": 125}
    assert sorted(p.name for p in byt5_run.iterdir() if "vocab" in p.name or p.suffix == ".model") == ["vocab.json"]
    run = run_lib.open_run(byt5_run)
    assert run.settings["vocab"] == "byte"  # the name, not a path made absolute
    model = run.settings["model"]
    assert (model["vocab_size"], model["num_layers"], model["num_decoder_layers"], model["feed_forward_proj"],
            model["tie_word_embeddings"]) == (384, 2, 1, "gated-gelu", False)
    records = [json.loads(line) for line in (byt5_run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [2, 4]
    assert "eval/glue_rte_v002/accuracy" in records[-1]  # the evaluation ran inside training


def test_the_run_moved_elsewhere_evaluates_the_same_through_its_recorded_vocabulary(byt5_run, tmp_path):
    root = data_root()
    args = ["--task", "rte", "--max-examples", "8", "--max-length", "16", "--data-dir", str(root)]
    assert eval_main([*args, "--checkpoint", str(byt5_run), "--output-dir", str(tmp_path / "before")]) == 0
    moved = tmp_path / "moved"
    shutil.copytree(byt5_run, moved)
    away = byt5_run.with_name("away")  # the original out of the way while the copy evaluates (the fixture's)
    byt5_run.rename(away)
    try:
        assert eval_main([*args, "--checkpoint", str(moved), "--output-dir", str(tmp_path / "after")]) == 0
    finally:
        away.rename(byt5_run)
    name = "validation/glue_rte_v002.predictions.jsonl"
    before, after = ((tmp_path / d / name).read_text() for d in ("before", "after"))
    assert before == after and len(before.splitlines()) == 8
    assert load_vocabulary(run_lib.open_run(moved).vocab) == ByteVocabulary()
    assert run_lib.open_run(moved).vocab == str(moved / "vocab.json")


def test_the_export_loads_as_byt5_in_transformers_with_the_same_ids_and_greedy_decodes(byt5_run, tmp_path):
    root = data_root()
    out = tmp_path / "hf"
    assert export_main(["--checkpoint", str(byt5_run), "--to", "hf", str(out)]) == 0
    assert not (out / "spiece.model").exists() and not (out / "tokenizer.json").exists()
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    assert type(tokenizer).__name__ == "ByT5Tokenizer" and type(hf_model).__name__ == "T5ForConditionalGeneration"
    vocab = ByteVocabulary()
    texts = [row["inputs"][:120] for row in show_examples("rte", n=4, data_dir=root)] + ["a <extra_id_0> b"]
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    assert batch.input_ids.tolist() == [ids + [1] + [0] * (batch.input_ids.shape[1] - len(ids) - 1)
                                        for ids in vocab.encode_batch(texts)]
    model = load_model(byt5_run)
    with torch.no_grad():
        decoder_input = torch.tensor([[0] + vocab.encode("entailment")] * len(texts))
        logits = model(batch.input_ids, decoder_input)
        hf_logits = hf_model(**batch, decoder_input_ids=decoder_input).logits
        assert torch.allclose(logits, hf_logits, atol=1e-4, rtol=0)
        ours = model.generate(batch.input_ids, max_new_tokens=12)
        theirs = hf_model.generate(**batch, max_new_tokens=12, do_sample=False, num_beams=1)
    ours_rows = [[i for i in row if i != 0] for row in ours.tolist()]
    theirs_rows = [[i for i in row[1:] if i != 0] for row in theirs.tolist()]  # after the decoder's start id
    assert ours_rows == theirs_rows
    cut = [row[:row.index(1)] if 1 in row else row for row in theirs_rows]
    assert vocab.decode_batch(ours) == tokenizer.batch_decode(cut)  # sentinels written out by both
