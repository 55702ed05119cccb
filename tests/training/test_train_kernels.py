"""Training with plain PyTorch kernels (``model.kernels: plain``) keeps the loop's guarantees: exact resume, and
a step's losses independent of how its batch is split (each row's dropout masks from its own seed)."""

import pytest
from test_train import PACKED, copy_task, losses, settings  # noqa: F401 (copy_task: a fixture)

from t2t.checkpoints import run as run_lib
from t2t.errors import T2TError
from t2t.models import dropout, kernels
from t2t.training.train import train

pytestmark = pytest.mark.integration

def plain_settings(copy_task, out, **changes):  # noqa: F811
    return settings(copy_task, out, model={"preset": copy_task["model"], "kernels": "plain"}, **changes)


def test_a_plain_run_resumes_exactly_with_torchs_modules(copy_task, tmp_path, monkeypatch):  # noqa: F811
    built = []
    monkeypatch.setattr(kernels, "apply", lambda model, kind, apply=kernels.apply: built.append(kind) or
                        apply(model, kind))
    straight = train(plain_settings(copy_task, tmp_path / "straight"))
    stopped = train(plain_settings(copy_task, tmp_path / "resumed", train_steps=3))
    resumed = train(plain_settings(copy_task, tmp_path / "resumed"))
    assert set(built) == {"plain"}
    assert losses(stopped) == losses(straight)[:3]
    assert losses(resumed) == losses(straight)


def test_a_plain_runs_micro_batches_draw_the_whole_batchs_masks(copy_task, tmp_path, monkeypatch):  # noqa: F811
    drawn = []
    monkeypatch.setattr(dropout, "active_row_generators",
                        lambda kind, make, active=dropout.active_row_generators: drawn.append(kind) or
                        active(kind, make))
    whole = train(plain_settings(copy_task, tmp_path / "whole", **PACKED))
    accumulated = train(plain_settings(copy_task, tmp_path / "accum", grad_accum_steps=2, **PACKED))
    assert set(drawn) == {"torch"}  # the plain Dropout's generators, not the tuned one's
    assert losses(accumulated) == pytest.approx(losses(whole), rel=1e-5)


def recorded_kernels(run_dir) -> str:
    """The kernels a run's latest checkpoint records its model trained with."""
    return run_lib.open_run(run_dir).settings["model"]["kernels"]


def test_init_from_takes_the_kernels_given_and_still_refuses_a_changed_model(copy_task, tmp_path):  # noqa: F811
    train(settings(copy_task, tmp_path / "base", train_steps=3))  # trained with the default, auto
    built = []
    applied = kernels.apply
    kernels.apply = lambda model, kind: built.append(kind) or applied(model, kind)
    try:
        train(settings(copy_task, tmp_path / "tuned", train_steps=3, init_from=str(tmp_path / "base"),
                       model={"kernels": "plain"}))
    finally:
        kernels.apply = applied
    assert built[-1] == "plain" and recorded_kernels(tmp_path / "tuned") == "plain"
    with pytest.raises(T2TError, match=r"model.d_ff = 128 differs from the model loaded"):
        train(settings(copy_task, tmp_path / "other", train_steps=3, init_from=str(tmp_path / "base"),
                       model={"kernels": "plain", "d_ff": 128}))


def test_a_resumed_run_changes_kernels_only_when_allowed(copy_task, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    train(settings(copy_task, run, train_steps=3))
    with pytest.raises(T2TError, match=r"model.kernels auto → plain.*--allow-changed-settings"):
        train(plain_settings(copy_task, run))
    train(plain_settings(copy_task, run), allow_changed_settings=True)
    assert recorded_kernels(run) == "plain"
