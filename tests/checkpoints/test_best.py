"""A run's best-checkpoint record: rotation never deletes the best, RUN:best names it, links are refused."""

from __future__ import annotations

import json

import pytest
import torch

from t2t.checkpoints import best as best_record
from t2t.checkpoints.native import checkpoint_name, list_checkpoints, prune_checkpoints, save_checkpoint
from t2t.checkpoints.run import checkpoint_path
from t2t.errors import T2TError
from t2t.models.t5 import T5, ModelConfig

TINY = dict(vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2, dropout_rate=0.0)
METRIC = "eval/glue_rte_v002/accuracy"


@pytest.fixture(scope="module")
def model() -> T5:
    torch.manual_seed(0)
    return T5(ModelConfig(**TINY))


def best(value: float) -> dict:
    """A best-checkpoint record as training passes it to save_checkpoint (which fills in the step)."""
    return {"keep_best": "accuracy", "metric": METRIC, "higher_is_better": True, "value": value}


def steps(run_dir) -> list[int]:
    return [int(path.name.split("_")[1]) for path in list_checkpoints(run_dir)]


def test_rotation_keeps_the_best_when_it_is_older_than_the_newest(tmp_path, model):
    for step in (1, 2, 3, 4, 5, 6):
        save_checkpoint(tmp_path, step, model, keep_last=2, best=best(70.0) if step == 2 else None)
    assert steps(tmp_path) == [2, 5, 6]  # the newest two, and beside them the best
    assert best_record.read_best(tmp_path) == {**best(70.0), "step": 2}


def test_a_better_checkpoint_replaces_the_best_and_the_old_one_rotates_away(tmp_path, model):
    save_checkpoint(tmp_path, 1, model, keep_last=1, best=best(60.0))
    save_checkpoint(tmp_path, 2, model, keep_last=1)
    assert steps(tmp_path) == [1, 2]
    save_checkpoint(tmp_path, 3, model, keep_last=1, best=best(65.0))
    assert steps(tmp_path) == [3]  # step 1 is no longer the best, step 2 no longer the newest
    save_checkpoint(tmp_path, 4, model, keep_last=1)
    assert steps(tmp_path) == [3, 4]
    assert best_record.best_step(tmp_path) == 3


def test_pruning_by_hand_never_deletes_the_recorded_best(tmp_path, model):
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, model, keep_last=None)
    best_record.write_best(tmp_path, {**best(50.0), "step": 1})
    deleted = prune_checkpoints(tmp_path, keep_last=1)
    assert [path.name for path in deleted] == [checkpoint_name(2)] and steps(tmp_path) == [1, 3]


def test_run_best_names_the_recorded_step_folder(tmp_path, model):
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, model, keep_last=None, best=best(50.0 + step) if step < 3 else None)
    assert checkpoint_path(f"{tmp_path}:best") == str(tmp_path / checkpoint_name(2))
    assert checkpoint_path(str(tmp_path)) == str(tmp_path)  # anything else is itself
    assert checkpoint_path("google-t5/t5-small") == "google-t5/t5-small"


def test_run_best_without_a_record_says_how_to_get_one(tmp_path, model):
    save_checkpoint(tmp_path, 1, model, keep_last=None)
    with pytest.raises(T2TError) as error:
        checkpoint_path(f"{tmp_path}:best")
    message = str(error.value)
    assert f"run {tmp_path} records no best checkpoint" in message
    assert "train with --set keep_best=<metric>" in message and "\n" not in message
    with pytest.raises(T2TError, match=r"is not a run folder"):
        checkpoint_path(f"{tmp_path / 'missing'}:best")


def test_run_best_whose_checkpoint_is_gone_is_one_sentence(tmp_path, model):
    save_checkpoint(tmp_path, 1, model, keep_last=None)
    best_record.write_best(tmp_path, {**best(50.0), "step": 7})
    with pytest.raises(T2TError, match=r"records step 7 as its best \(eval/glue_rte_v002/accuracy 50\), but "
                                       r"step_00000007 is missing"):
        checkpoint_path(f"{tmp_path}:best")


def test_a_link_planted_as_the_record_is_refused_and_never_written_through(tmp_path, model):
    save_checkpoint(tmp_path, 1, model, keep_last=None)
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere.json"
    elsewhere.write_text(json.dumps({**best(99.0), "step": 1}))
    (tmp_path / best_record.BEST_FILE).symlink_to(elsewhere)
    with pytest.raises(T2TError, match=r"is a symbolic link"):
        checkpoint_path(f"{tmp_path}:best")
    save_checkpoint(tmp_path, 2, model, keep_last=None, best=best(80.0))
    assert not (tmp_path / best_record.BEST_FILE).is_symlink()  # replaced, not followed
    assert json.loads(elsewhere.read_text())["value"] == 99.0
    assert best_record.read_best(tmp_path)["step"] == 2


@pytest.mark.parametrize("record", [[1, 2], {"step": "7"}, {**best(float("nan")), "step": 1}, {"step": 1, "value": 3}],
                         ids=["not-an-object", "step-not-a-number", "nan-value", "no-metric"])
def test_a_damaged_record_is_one_sentence_naming_it(tmp_path, record):
    (tmp_path / best_record.BEST_FILE).write_text(json.dumps(record))
    with pytest.raises(T2TError) as error:
        best_record.read_best(tmp_path)
    assert str(tmp_path / best_record.BEST_FILE) in str(error.value) and "delete it" in str(error.value)
