"""Rank classification, T5's input trimming, throughput and --max-examples in evaluation; t2t-eval end to end
on the local SQuAD, WMT en-ro and CNN/DM files with a tiny random model."""

import json

import numpy as np
import pytest
import torch

from t2t.checkpoints import native as checkpoint
from t2t.cli import eval_main
from t2t.data.preprocessors import string_label_to_class_id
from t2t.errors import T2TError
from t2t.evaluation.evaluate import DecodingConfig, evaluate_task, trim_inputs
from t2t.evaluation.metrics import accuracy
from t2t.models.t5 import T5, ModelConfig, resolve_model_config
from t2t.testing import in_memory_task, tiny_vocabulary

LABELS = ("yes", "no", "maybe so")
ROWS = [{"inputs": f"question {i}: is {w} a word?", "targets": LABELS[i % 3]}
        for i, w in enumerate(["cat", "the", "blue", "run", "seven", "tree", "of", "sky"])]


def tiny_model(vocab) -> T5:
    torch.manual_seed(0)
    return T5(ModelConfig(vocab_size=vocab.vocab_size, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                          dropout_rate=0.0)).eval()


def hand_log_likelihood(model, vocab, inputs: np.ndarray, choice: str) -> float:
    """log p(choice + EOS | inputs) from the model's logits, token by token."""
    target = vocab.encode(choice) + [vocab.eos_id]
    decoder_input = [0] + target[:-1]
    with torch.no_grad():
        logits = model(torch.as_tensor(inputs)[None], torch.tensor([decoder_input]))[0]
    logp = torch.log_softmax(logits.double(), dim=-1)
    return float(sum(logp[t, token] for t, token in enumerate(target)))


def test_rank_classification_picks_the_argmax_of_hand_computed_scores():
    vocab = tiny_vocabulary()
    model = tiny_model(vocab)
    task = in_memory_task("ranked", {"validation": ROWS}, rank_choices=LABELS, metric_fns=[accuracy],
                          postprocess_fn=lambda text, example=None, is_target=False:
                          string_label_to_class_id(text, label_classes=LABELS))
    metrics, records, stats = evaluate_task(model, task, vocab, "validation",
                                            decoding=DecodingConfig(batch_size=5), rank_classification=True)
    examples = task.examples("validation", vocab)
    expected = [LABELS[int(np.argmax([hand_log_likelihood(model, vocab, ex["inputs"], c) for c in LABELS]))]
                for ex in examples]
    assert [r["prediction"] for r in records] == expected
    assert metrics["accuracy"] == pytest.approx(100 * np.mean([e == r["targets"] for e, r in zip(expected, ROWS)]))
    assert stats["mode"] == "rank_classification" and stats["examples"] == len(ROWS)
    scored = sum(len(vocab.encode(c)) + 1 for c in LABELS) * len(ROWS)
    assert stats["tokens_per_second"] == pytest.approx(scored / stats["seconds"])


def test_rank_classification_with_choices_per_example():
    """Multiple choice (COPA, GPT's and jiant's tasks): each example brings its own candidates."""
    vocab = tiny_vocabulary()
    model = tiny_model(vocab)
    rows = [{"inputs": "premise: the glass fell", "targets": "it broke", "options": ["it broke", "it sang"]},
            {"inputs": "premise: the sun rose", "targets": "it was day", "options": ["it was night", "it was day",
                                                                                      "it rained"]}]
    task = in_memory_task("choices", {"validation": rows}, rank_choices=lambda ex: ex["options"],
                          metric_fns=[accuracy])
    _, records, _ = evaluate_task(model, task, vocab, "validation", rank_classification=True)
    for ex, record in zip(task.examples("validation", vocab), records):
        scores = [hand_log_likelihood(model, vocab, ex["inputs"], c) for c in ex["options"]]
        assert record["prediction"] == ex["options"][int(np.argmax(scores))]


def test_a_task_without_choices_cannot_be_ranked():
    vocab = tiny_vocabulary()
    task = in_memory_task("free_text", {"validation": ROWS}, metric_fns=[accuracy])
    with pytest.raises(T2TError, match="no label strings to rank"):
        evaluate_task(tiny_model(vocab), task, vocab, "validation", rank_classification=True)


def test_inputs_are_trimmed_like_seqio_with_eos_kept_last():
    rows = [np.array([5, 6, 7, 8, 1]), np.array([5, 6, 1]), np.array([9, 9, 9, 1])]
    trimmed, count = trim_inputs(rows, 4, eos_id=1)
    assert [r.tolist() for r in trimmed] == [[5, 6, 7, 1], [5, 6, 1], [9, 9, 9, 1]]
    assert count == 1


def test_generation_reports_throughput_truncation_and_max_examples():
    vocab = tiny_vocabulary()
    model = tiny_model(vocab)
    task = in_memory_task("generated", {"validation": ROWS}, metric_fns=[accuracy])
    lengths = [len(ex["inputs"]) for ex in task.examples("validation", vocab)[:5]]
    cut = sorted(lengths)[2]
    _, records, stats = evaluate_task(model, task, vocab, "validation", max_examples=5,
                                        decoding=DecodingConfig(input_length=cut))
    assert len(records) == 5 and stats["examples"] == 5
    assert stats["truncated_inputs"] == sum(n > cut for n in lengths) > 0
    assert stats["mode"] == "generation" and stats["examples_per_second"] == pytest.approx(5 / stats["seconds"])


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    torch.manual_seed(0)
    run = tmp_path_factory.mktemp("run")
    checkpoint.save_checkpoint(run, 1, T5(resolve_model_config("t5-tiny")))
    return run


@pytest.mark.parametrize("task, split, metric_names", [
    ("squad_v010_allanswers", "validation", {"em", "f1"}),
    ("wmt16_enro_v003", "test", {"bleu"}),
    ("cnn_dailymail_v002", "test", {"rouge1", "rouge2", "rougeLsum"}),
])
def test_t2t_eval_runs_on_the_local_files(task, split, metric_names, tiny_run, data_dir, tmp_path, capsys):
    code = eval_main(["--task", task, "--split", split, "--checkpoint", str(tiny_run), "--data-dir", str(data_dir),
                      "--max-examples", "2", "--batch-size", "2", "--input-length", "128",
                      "--output-dir", str(tmp_path)])
    assert code == 0
    result = json.loads((tmp_path / split / f"{task}.metrics.json").read_text())
    assert set(result["metrics"]) == metric_names and result["num_examples"] == 2
    assert result["stats"]["examples"] == 2 and result["stats"]["tokens_per_second"] > 0
    out = capsys.readouterr().out
    assert f"{task}: 2 examples (generation)" in out and "examples/s" in out
    if task != "wmt16_enro_v003":  # SQuAD contexts and CNN/DM articles are longer than 128 tokens
        assert result["stats"]["truncated_inputs"] == 2 and "2 inputs truncated to 128 tokens" in out


def test_compile_with_rank_classification_says_that_scoring_is_eager(tiny_run, data_dir, tmp_path, caplog):
    """compile: true compiles the decoding step alone; a setting that does nothing says so."""
    code = eval_main(["--task", "rte", "--checkpoint", str(tiny_run), "--data-dir", str(data_dir), "--max-examples",
                      "2", "--rank-classification", "--set", "compile=true", "--output-dir", str(tmp_path)])
    assert code == 0
    assert "glue_rte_v002 are scored eagerly" in caplog.text


def test_decoding_settings_with_rank_classification_are_refused_where_nothing_is_decoded(tiny_run, data_dir, tmp_path,
                                                                                        capsys):
    common = ["--checkpoint", str(tiny_run), "--data-dir", str(data_dir), "--max-examples", "2",
              "--rank-classification", "--beam-size", "2", "--output-dir", str(tmp_path)]
    assert eval_main(["--task", "rte", *common]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: beam_size is a decoding setting, and with --rank-classification every task of "
                          "'rte' is scored by its label strings") and err.count("\n") == 1, err
    # STS-B has no label strings: GLUE's evaluation decodes it, with the beam asked for
    assert eval_main(["--mixture", "glue_v002", "--skip-unavailable", *common]) == 0
    stsb = json.loads((tmp_path / "validation" / "glue_stsb_v002.metrics.json").read_text())
    assert stsb["stats"]["mode"] == "generation" and stsb["settings"]["beam_size"] == 2


def test_generated_tokens_count_each_row_up_to_its_first_eos():
    from t2t.evaluation.evaluate import generated_tokens
    ids = torch.tensor([[5, 0, 1, 0, 0], [7, 7, 7, 7, 7], [1, 0, 0, 0, 0]])
    assert generated_tokens(ids, eos_id=1) == 3 + 5 + 1


@pytest.mark.parametrize("task", ["rte", "stsb"])
def test_an_unlabelled_split_gives_predictions_and_no_metrics(task, tiny_run, data_dir, tmp_path, capsys):
    """GLUE's test rows have no labels (label -1, target <unk>; STS-B's "-1.0"): t2t-eval --split test
    writes the predictions, says "no labels: no metrics", and no file claims a number (RTE read 100.00 or
    0.00 accuracy for an untrained model)."""
    code = eval_main(["--task", task, "--split", "test", "--checkpoint", str(tiny_run), "--data-dir", str(data_dir),
                      "--max-examples", "3", "--batch-size", "3", "--max-length", "4", "--output-dir",
                      str(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    name = f"glue_{task}_v002"
    assert f"{name}: no labels: no metrics" in out and "accuracy" not in out and "corrcoef" not in out
    result = json.loads((tmp_path / "test" / f"{name}.metrics.json").read_text())
    assert result["metrics"] == {} and result["note"] == "no labels: no metrics"
    records = [json.loads(line) for line in (tmp_path / "test" / f"{name}.predictions.jsonl").read_text().splitlines()]
    assert len(records) == 3 and all(r["target_value"] is None and "prediction" in r for r in records)
