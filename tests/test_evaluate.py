"""Evaluation helpers: the paper's GLUE average, strict-JSON metrics, which members in-training eval scores."""

import json

import numpy as np
import pytest

from t2t.evaluate import glue_average, jsonable, validation_metrics


def test_glue_average_counts_a_task_with_two_metrics_once():
    results = {"glue_mrpc_v002": {"f1": 80.0, "accuracy": 70.0}, "glue_cola_v002": {"matthews_corrcoef": 40.0},
               "glue_mnli_matched_v002": {"accuracy": 60.0}, "glue_mnli_mismatched_v002": {"accuracy": 62.0},
               "glue_ax_v002": {"matthews_corrcoef": 1.0}, "my_task": {"accuracy": 0.0}}
    assert glue_average(results) == pytest.approx((75.0 + 40.0 + 61.0) / 3)
    assert glue_average({"my_task": {"accuracy": 1.0}}) is None


def test_undefined_metrics_are_written_as_null():
    summary = {"tasks": {"glue_stsb_v002": {"pearson_corrcoef": float("nan"), "n": np.int64(3)}}}
    text = json.dumps(jsonable(summary), allow_nan=False)
    assert json.loads(text) == {"tasks": {"glue_stsb_v002": {"pearson_corrcoef": None, "n": 3}}}


def test_in_training_eval_leaves_out_members_dropped_for_missing_train_data(data_dir, t5_vocab_path):
    """QNLI has a local validation split but no train split: a --skip-unavailable run never trained it."""
    import torch
    from t2t.model import T5, load_model_config
    from t2t.vocab import SentencePieceVocabulary
    torch.manual_seed(0)
    model = T5(load_model_config("t5-tiny"))
    vocab = SentencePieceVocabulary(t5_vocab_path)
    trained = validation_metrics(model, "glue_v002", vocab, data_dir=data_dir, max_examples=2, batch_size=2,
                                 trained_only=True)
    tasks = {key.split("/")[1] for key in trained if key.count("/") == 2}
    assert tasks == {"glue_cola_v002", "glue_sst2_v002", "glue_mrpc_v002", "glue_stsb_v002", "glue_rte_v002"}
    assert "eval/glue_average" in trained


def test_undefined_metrics_print_as_n_a_with_a_footnote():
    from t2t.evaluate import format_table
    table = format_table({"glue_stsb_v002": {"pearson_corrcoef": float("nan"), "spearman_corrcoef": 12.345}}, None)
    assert "pearson_corrcoef   n/a" in table and "12.35" in table and table.endswith("(an undertrained model)")
