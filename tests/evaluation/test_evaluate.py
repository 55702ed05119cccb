"""Evaluation: which members in-training eval scores; t2t-eval's result files, table and missing members."""

import json

import pytest

from t2t.errors import T2TError
from t2t.evaluation.evaluate import validation_metrics


def test_in_training_eval_leaves_out_members_dropped_for_missing_train_data(data_dir, t5_vocab_path):
    """QNLI has a local validation split but no train split: a --skip-unavailable run never trained it."""
    import torch

    from t2t.data.vocab import SentencePieceVocabulary
    from t2t.models.t5 import T5, resolve_model_config
    torch.manual_seed(0)
    model = T5(resolve_model_config("t5-tiny"))
    vocab = SentencePieceVocabulary(t5_vocab_path)
    trained = validation_metrics(model, "glue_v002", vocab, data_dir=data_dir, max_examples=2, batch_size=2,
                                 trained_only=True)
    tasks = {key.split("/")[1] for key in trained if key.count("/") == 2}
    assert tasks == {"glue_cola_v002", "glue_sst2_v002", "glue_mrpc_v002", "glue_stsb_v002", "glue_rte_v002"}
    # the paper's average needs all nine tasks: one over the five here is named apart (t5's compute_avg_glue)
    assert "eval/glue_average" not in trained
    assert trained["eval/glue_partial_average"] == pytest.approx(
        (trained["eval/glue_cola_v002/matthews_corrcoef"] + trained["eval/glue_sst2_v002/accuracy"]
         + (trained["eval/glue_mrpc_v002/f1"] + trained["eval/glue_mrpc_v002/accuracy"]) / 2
         + (trained["eval/glue_stsb_v002/pearson_corrcoef"] + trained["eval/glue_stsb_v002/spearman_corrcoef"]) / 2
         + trained["eval/glue_rte_v002/accuracy"]) / 5, nan_ok=True)


# ------------------------------------------------------------------ t2t-eval on a tiny model and a tiny GLUE

STSB_DEV = "sentence1\tsentence2\tscore\nA man plays.\tA man is playing.\t4.6\nA cat.\tA dog runs.\t0.4\n" \
           "Two kids.\tTwo children.\t3.8\n"
RTE_DEV = "index\tsentence1\tsentence2\tlabel\n0\tIt rains.\tIt is wet.\tentailment\n" \
          "1\tIt is dry.\tIt rains.\tnot_entailment\n"


@pytest.fixture
def small_glue(tmp_path):
    """A data dir with only STS-B and RTE validation files, and a random t5-tiny run saved at step 7."""
    import torch

    from t2t.checkpoints.native import save_checkpoint
    from t2t.models.t5 import T5, resolve_model_config
    from t2t.testing import tiny_vocabulary
    for folder, text in (("STS-B", STSB_DEV), ("RTE", RTE_DEV)):
        (tmp_path / "data" / "glue" / folder).mkdir(parents=True)
        (tmp_path / "data" / "glue" / folder / "dev.tsv").write_text(text)
    vocab = tiny_vocabulary()
    torch.manual_seed(0)
    cfg = resolve_model_config("t5-tiny")
    cfg.vocab_size = -(-vocab.vocab_size // 128) * 128
    save_checkpoint(tmp_path / "run", 7, T5(cfg))
    return tmp_path


def eval_config(root, name, **fields):
    from t2t.evaluation.evaluate import EvalConfig
    from t2t.testing import tiny_vocabulary
    return EvalConfig(mixture=name, checkpoint=str(root / "run"), vocab=str(tiny_vocabulary().path),
                      data_dir=str(root / "data"), batch_size=4, device="cpu", **fields)


def test_each_task_writes_its_own_results_stamped_with_the_step(small_glue, capsys):
    from t2t.evaluation.evaluate import evaluate
    evaluate(eval_config(small_glue, "stsb"))
    table = capsys.readouterr().out
    assert "GLUE average" not in table  # one task is reported as that task
    # the random model predicts one constant score: the table says so instead of n/a
    assert "pearson_corrcoef   predictions constant: correlation undefined" in table
    out = small_glue / "run" / "eval" / "validation"
    assert f"wrote glue_stsb_v002.metrics.json and glue_stsb_v002.predictions.jsonl to {out}\n" in table
    stsb = json.loads((out / "glue_stsb_v002.metrics.json").read_text())
    assert stsb["step"] == 7 and stsb["split"] == "validation" and stsb["evaluated_at"]
    assert stsb["settings"] == {"max_examples": None, "input_length": 512, "max_length": None, "beam_size": 1,
                                "temperature": 0.0, "top_k": 0, "seed": 0, "precision": "fp32",
                                "rank_classification": False}
    assert stsb["metrics"] == {"pearson_corrcoef": None, "spearman_corrcoef": None}
    assert stsb["undefined"]["spearman_corrcoef"] == "predictions constant: correlation undefined"
    assert len((out / "glue_stsb_v002.predictions.jsonl").read_text().splitlines()) == stsb["num_examples"] == 3

    evaluate(eval_config(small_glue, "rte"))
    assert json.loads((out / "glue_stsb_v002.metrics.json").read_text()) == stsb  # not overwritten
    assert json.loads((out / "glue_rte_v002.metrics.json").read_text())["task"] == "glue_rte_v002"
    assert sorted(p.name for p in out.iterdir()) == [
        "glue_rte_v002.metrics.json", "glue_rte_v002.predictions.jsonl",
        "glue_stsb_v002.metrics.json", "glue_stsb_v002.predictions.jsonl"]


def test_result_files_say_how_the_predictions_were_made(small_glue):
    """A subset decoded by beam search in bf16 overwrote the full greedy evaluation's files, and nothing in
    them told the two apart."""
    from t2t.evaluation.evaluate import evaluate
    evaluate(eval_config(small_glue, "glue_v002", skip_unavailable=True, max_examples=2, beam_size=2,
                         max_length=5, precision="bf16"))
    out = small_glue / "run" / "eval" / "validation"
    stsb = json.loads((out / "glue_stsb_v002.metrics.json").read_text())
    summary = json.loads((out / "glue_v002_proportional.summary.json").read_text())
    assert stsb["settings"] == summary["settings"] == {
        "max_examples": 2, "input_length": 512, "max_length": 5, "beam_size": 2, "temperature": 0.0, "top_k": 0,
        "seed": 0, "precision": "bf16", "rank_classification": False}
    assert stsb["num_examples"] == 2 and stsb["stats"]["max_new_tokens"] == 5


def test_a_mixture_with_missing_members_is_one_error_listing_them_all(small_glue):
    from t2t.evaluation.evaluate import evaluate
    with pytest.raises(T2TError) as error:
        evaluate(eval_config(small_glue, "glue_v002", output_dir=str(small_glue / "never")))
    message = str(error.value)
    assert "validation data is missing for 7 task(s) of 'glue_v002_proportional'" in message
    for name in ("cola", "sst2", "mrpc", "qqp", "mnli_matched", "mnli_mismatched", "qnli"):
        assert f"glue_{name}_v002" in message
    assert "stsb" not in message and "rte_" not in message and "--skip-unavailable" in message
    assert not (small_glue / "never").exists()  # found out before anything was written


def test_a_mixture_summary_lists_this_evaluations_tasks_and_the_average(small_glue, capsys):
    from t2t.evaluation.evaluate import evaluate
    evaluate(eval_config(small_glue, "glue_v002", skip_unavailable=True))
    table = capsys.readouterr().out
    assert "GLUE average over glue_stsb_v002, glue_rte_v002; not evaluated: glue_cola_v002" in table
    out = small_glue / "run" / "eval" / "validation"
    assert (f"wrote glue_stsb_v002.metrics.json, glue_stsb_v002.predictions.jsonl, glue_rte_v002.metrics.json, "
            f"glue_rte_v002.predictions.jsonl and glue_v002_proportional.summary.json to {out}\n") in table
    summary = json.loads((out / "glue_v002_proportional.summary.json").read_text())
    assert set(summary["tasks"]) == {"glue_stsb_v002", "glue_rte_v002"} and summary["step"] == 7
    assert summary["benchmarks"]["glue"]["tasks"] == ["glue_stsb_v002", "glue_rte_v002"]
    assert summary["benchmarks"]["glue"]["value"] is None  # STS-B's correlations are undefined
    assert set(summary["skipped"]) == {f"glue_{n}_v002" for n in (
        "cola", "sst2", "mrpc", "qqp", "mnli_matched", "mnli_mismatched", "qnli")}


def test_an_unwritable_output_dir_stops_before_anything_is_loaded(small_glue):
    from t2t.evaluation.evaluate import evaluate
    (small_glue / "taken").write_text("a file")
    cfg = eval_config(small_glue, "rte", output_dir=str(small_glue / "taken"))
    cfg.checkpoint = str(small_glue / "no-such-run")  # loading it would fail: the output dir is checked first
    with pytest.raises(T2TError, match="is a file; pass --output-dir a folder"):
        evaluate(cfg)


def test_all_checkpoints_reports_each_task_at_its_best_step(small_glue, capsys):
    """Three checkpoints of different weights: each is evaluated, and best.json names the best per task."""
    import torch

    from t2t.checkpoints.loading import load_model
    from t2t.checkpoints.native import save_checkpoint
    from t2t.evaluation.evaluate import evaluate_checkpoints
    model = load_model(small_glue / "run")
    for step in (9, 11):
        with torch.no_grad():
            model.shared.weight.mul_(0.5)
        save_checkpoint(small_glue / "run", step, model, keep_last=None)
    best = evaluate_checkpoints(eval_config(small_glue, "glue_v002", skip_unavailable=True, all_checkpoints=True))
    per_step = {}
    for step in (7, 9, 11):
        per_step[step] = {}
        for task in ("glue_stsb_v002", "glue_rte_v002"):
            path = small_glue / "run" / "eval" / f"step_{step:08d}" / "validation" / f"{task}.metrics.json"
            per_step[step][task] = json.loads(path.read_text())["metrics"]
    for task in ("glue_stsb_v002", "glue_rte_v002"):
        scores = {step: sum(m.values()) / len(m) for step, m in ((s, per_step[s][task]) for s in per_step)
                  if None not in m.values()}
        if scores:
            assert best[task]["score"] == pytest.approx(max(scores.values()))
            assert best[task]["step"] == min(s for s, v in scores.items() if v == max(scores.values()))
    saved = json.loads((small_glue / "run" / "eval" / "best.validation.json").read_text())
    assert {task: b["step"] for task, b in saved["tasks"].items()} == {task: b["step"] for task, b in best.items()}
    assert saved["run"] == str(small_glue / "run") and saved["settings"]["max_examples"] is None
    png = small_glue / "run" / "eval" / "checkpoints.validation.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "best step" in capsys.readouterr().out


def test_the_checkpoints_figure_draws_each_task_against_step_with_its_best_marked():
    from t2t.evaluation.evaluate import checkpoints_figure
    from t2t.evaluation.results import best_checkpoints
    per_step = {7: {"rte": {"accuracy": 50.0}, "mrpc": {"f1": 60.0, "accuracy": 70.0}},
                9: {"rte": {"accuracy": 70.0}, "mrpc": {"f1": None, "accuracy": 75.0}},
                11: {"rte": {"accuracy": 60.0}, "mrpc": {"f1": 80.0, "accuracy": 90.0}}}
    rte, mrpc = checkpoints_figure(per_step, best_checkpoints(per_step)).axes[:2]
    assert rte.get_title() == "rte: accuracy"
    assert mrpc.get_title() == "mrpc: mean of f1, accuracy (undefined at 1 of 3 steps)"
    curve, star = rte.lines
    assert list(curve.get_xdata()) == [7, 9, 11] and list(curve.get_ydata()) == [50.0, 70.0, 60.0]
    assert (list(star.get_xdata()), list(star.get_ydata())) == ([9], [70.0])
    assert [t.get_text() for t in rte.get_legend().get_texts()] == ["best: 70.00 at step 9"]
    assert list(mrpc.lines[0].get_xdata()) == [7, 11] and list(mrpc.lines[1].get_xdata()) == [11]


def test_all_checkpoints_needs_a_run_dir(tmp_path):
    from t2t.evaluation.evaluate import EvalConfig, evaluate_checkpoints
    (tmp_path / "empty").mkdir()
    with pytest.raises(T2TError, match="holds no step_\\* checkpoints"):
        evaluate_checkpoints(EvalConfig(mixture="stsb", checkpoint=str(tmp_path / "empty"), all_checkpoints=True))
