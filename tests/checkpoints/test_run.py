"""The run directory as the source of truth: what training copies into it, and evaluation and resuming
taking the run's vocabulary, modules, data dir and settings."""

import dataclasses
import errno
import json
import logging
import os
import pickle
import re
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from test_checkpoint import rewrite_checksums

from t2t import config, durable
from t2t.checkpoints import native as checkpoint
from t2t.checkpoints import run as run_lib
from t2t.checkpoints.loading import load_model
from t2t.data.task import TASKS, get_task
from t2t.data.tokenized import clear_cache
from t2t.data.vocab import SentencePieceVocabulary, train_vocabulary
from t2t.errors import T2TError
from t2t.evaluation.evaluate import EvalConfig, evaluate
from t2t.testing import TINY_TEXT, TINY_VOCAB_PIECES, tiny_vocabulary
from t2t.training.train import TrainConfig, train

TASK = "test_run_copy"
TINY_MODEL = dict(vocab_size=512, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, dropout_rate=0.0)
MODULE = textwrap.dedent(f"""
    from t2t.evaluation import metrics
    from t2t.data.sources import InMemorySource
    from t2t.data.task import Task, register_task
    rows = [{{"text": t}} for t in ["the cat sat", "a dog ran", "birds sing", "rain falls", "the sun rises"]]
    register_task(Task(
        name={TASK!r}, source=InMemorySource({{"train": rows, "validation": rows[:3]}}),
        preprocessors=[lambda ex: {{"inputs": "copy: " + ex["text"], "targets": ex["text"]}}],
        metric_fns=[metrics.sequence_accuracy]))
""")


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """A vocabulary and a task module in their own folder (deleted later to show the run does not need
    them), and an environment with no default vocabulary or data dir to fall back to."""
    src = tmp_path / "src"
    src.mkdir()
    vocab = src / "my.model"
    shutil.copyfile(tiny_vocabulary().path, vocab)
    module = src / "copy_task.py"
    module.write_text(MODULE)
    model = src / "tiny.yaml"
    model.write_text(json.dumps(TINY_MODEL))
    (tmp_path / "no-data").mkdir()
    monkeypatch.delenv("T2T_VOCAB", raising=False)
    monkeypatch.setenv("T2T_DATA_DIR", str(tmp_path / "no-data"))
    yield SimpleNamespace(src=src, vocab=str(vocab), module=str(module), model=str(model))
    if TASK in TASKS:
        TASKS.unregister(TASK)


def settings(setup, out, **changes) -> TrainConfig:
    base = dict(mixture=TASK, model=setup.model, modules=[setup.module], vocab=setup.vocab, output_dir=str(out),
                train_steps=2, batch_size=2, input_length=32, target_length=16, pack=False, log_every=1,
                save_every=2, seed=1)
    base.update(changes)
    return config.from_dict(TrainConfig, {**base, "optimizer": {"name": "adamw", "learning_rate": 1e-2}})


def run_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "t2t.checkpoints.run"]


def forget_sources(setup) -> None:
    """As in a new process on another machine: the task unregistered; its module, model file and vocabulary
    gone."""
    TASKS.unregister(TASK)
    shutil.rmtree(setup.src)


def test_training_copies_the_vocabulary_and_modules_into_the_run(setup, tmp_path):
    train(settings(setup, tmp_path / "run"))
    run = run_lib.open_run(tmp_path / "run")
    assert (tmp_path / "run" / "spiece.model").read_bytes() == (setup.src / "my.model").read_bytes()
    assert (tmp_path / "run" / "modules" / "copy_task.py").read_text() == MODULE
    assert run.settings["vocab"] == setup.vocab and run.settings["data_dir"] == str(tmp_path / "no-data")
    assert run.vocab == str(tmp_path / "run" / "vocab.json")
    assert run.modules == [str(tmp_path / "run" / "modules" / "copy_task.py")]
    assert run_lib.open_run(run.checkpoint).path == tmp_path / "run"  # one step folder names its run


def test_evaluation_of_a_moved_run_uses_its_own_vocabulary_and_modules(setup, tmp_path):
    train(settings(setup, tmp_path / "run", train_steps=4))
    explicit = evaluate(EvalConfig(mixture=TASK, checkpoint=str(tmp_path / "run"), vocab=setup.vocab,
                                   modules=[setup.module], output_dir=str(tmp_path / "explicit")))
    forget_sources(setup)
    shutil.move(tmp_path / "run", tmp_path / "moved")
    own = evaluate(EvalConfig(mixture=TASK, checkpoint=str(tmp_path / "moved"), output_dir=str(tmp_path / "own"),
                              trust_modules=True))
    assert own == explicit
    assert ((tmp_path / "own" / "validation" / f"{TASK}.predictions.jsonl").read_text()
            == (tmp_path / "explicit" / "validation" / f"{TASK}.predictions.jsonl").read_text())


def test_a_flag_that_overrides_a_run_setting_says_so_in_one_line(setup, tmp_path, caplog):
    train(settings(setup, tmp_path / "run"))
    run = run_lib.open_run(tmp_path / "run")
    other = tmp_path / "other-data"
    other.mkdir()
    with caplog.at_level(logging.INFO, logger="t2t.checkpoints.run"):
        cfg = run_lib.with_run_locations(EvalConfig(data_dir=str(other), vocab=setup.vocab), run)
    assert cfg.data_dir == str(other) and cfg.vocab == run.vocab  # the same vocabulary file is no override
    assert cfg.modules == run.modules
    assert run_lines(caplog) == [
        f"--data-dir {other} overrides the run's {tmp_path / 'no-data'}"]


def test_resume_without_vocab_keeps_the_runs_vocabulary(setup, tmp_path):
    straight = train(settings(setup, tmp_path / "straight", train_steps=4, save_every=4))
    train(settings(setup, tmp_path / "resumed"))
    forget_sources(setup)
    resumed = train(settings(setup, tmp_path / "resumed", train_steps=4, save_every=4, vocab=None, modules=[]))
    assert [r["loss"] for r in resumed] == [r["loss"] for r in straight]
    assert checkpoint.read_settings(tmp_path / "resumed")["vocab"] == str(tmp_path / "resumed" / "spiece.model")


def test_resume_refuses_settings_that_break_continuation_and_lists_them(setup, tmp_path):
    train(settings(setup, tmp_path / "run"))
    changed = settings(setup, tmp_path / "run", train_steps=3, batch_size=4, seed=2)
    changed.optimizer.name = "adafactor"
    with pytest.raises(T2TError, match=r"\(batch_size 2 → 4; optimizer.name adamw → adafactor; seed 1 → 2\); "
                                       r"use the run's settings, or pass --allow-changed-settings"):
        train(changed)
    changed.seed = 1  # the data stream cannot continue with another seed at all (it says so)
    records = train(changed, allow_changed_settings=True)  # the optimizer's state starts afresh
    assert records[-1]["step"] == 3 and checkpoint.read_settings(tmp_path / "run")["batch_size"] == 4


def test_resume_with_a_different_vocabulary_is_refused(setup, tmp_path):
    train(settings(setup, tmp_path / "run"))
    other = tmp_path / "other.model"
    other.write_bytes(tiny_vocabulary(300).path.read_bytes())
    with pytest.raises(T2TError, match=r"vocab .*run/vocab.json → .*other.model"):
        train(settings(setup, tmp_path / "run", train_steps=3, vocab=str(other)))


def test_harmless_changes_go_through_with_a_line(setup, tmp_path, caplog):
    train(settings(setup, tmp_path / "run"))
    with caplog.at_level(logging.INFO, logger="t2t.checkpoints.run"):
        records = train(settings(setup, tmp_path / "run", train_steps=3, log_every=3, activation_checkpointing=True))
    assert records[-1]["step"] == 3
    assert run_lines(caplog) == ["resuming with activation_checkpointing True (the run had False)",
                                 "resuming with log_every 3 (the run had 1)",
                                 "resuming with train_steps 3 (the run had 2)"]


def test_train_steps_below_the_reached_step_says_so(setup, tmp_path, caplog):
    first = train(settings(setup, tmp_path / "run"))
    with caplog.at_level(logging.INFO, logger="t2t.training.train"):
        again = train(settings(setup, tmp_path / "run", train_steps=1))
    assert again == first
    assert any("already at step 2, at or beyond train_steps 1: nothing to train" in r.getMessage()
               for r in caplog.records)


def test_a_trainer_state_without_a_key_is_one_sentence(setup, tmp_path):
    train(settings(setup, tmp_path / "run"))
    state_file = checkpoint.latest_checkpoint(tmp_path / "run") / "trainer_state.json"
    state = json.loads(state_file.read_text())
    del state["data"]
    state_file.write_text(json.dumps(state))
    with pytest.raises(T2TError, match=r"trainer state in .*step_00000002 lacks data, so the run cannot resume"):
        train(settings(setup, tmp_path / "run", train_steps=3, verify_checkpoints=False))  # edited: no checksum


@pytest.mark.parametrize("edit", [{"scheduler": {}}, {"scheduler": "x"}, {"data_fingerprint": {TASK: 3}}])
def test_a_trainer_state_with_values_of_the_wrong_kind_is_one_sentence(setup, tmp_path, edit):
    train(settings(setup, tmp_path / "run"))
    state_file = checkpoint.latest_checkpoint(tmp_path / "run") / "trainer_state.json"
    state_file.write_text(json.dumps({**json.loads(state_file.read_text()), **edit}))
    with pytest.raises(T2TError, match=r"trainer state in .*step_00000002 is not what t2t wrote \(\w+: .*\), so the "
                                       r"run cannot resume from it; resume from an earlier checkpoint"):
        train(settings(setup, tmp_path / "run", train_steps=3, verify_checkpoints=False))  # edited: no checksum


def test_a_run_whose_checkpoints_lost_their_settings_says_so(setup, tmp_path):
    train(settings(setup, tmp_path / "run"))
    for step in (tmp_path / "run").glob("step_*"):
        (step / checkpoint.SETTINGS_FILE).unlink()
    with pytest.raises(T2TError, match=r"no task or mixture given; .*run holds checkpoints without recorded settings "
                                       r"\(train_config.yaml\), so resuming needs the run's own settings again; pass"):
        train(config.from_dict(TrainConfig, {"output_dir": str(tmp_path / "run"), "verify_checkpoints": False}))


def test_a_preset_sizes_its_embedding_from_the_vocabulary(setup, tmp_path):
    train(settings(setup, tmp_path / "run", model="t5-tiny"))
    model = load_model(tmp_path / "run")
    assert tiny_vocabulary().vocab_size == 484 and model.config.vocab_size == 512


def test_embedding_rows_round_up_to_128_as_t5_does():
    assert run_lib.embedding_rows(32100) == 32128
    assert run_lib.embedding_rows(2100) == 2176
    assert run_lib.embedding_rows(512) == 512


@pytest.mark.parametrize("rows, ids, fits", [(32128, 32100, True), (32100, 32100, True), (2176, 2100, True),
                                             (32128, 2100, False), (2048, 2100, False)])
def test_a_vocabulary_that_does_not_match_the_embedding_is_an_error(rows, ids, fits):
    vocab = SimpleNamespace(vocab_size=ids, path="v.model")
    if fits:
        run_lib.check_vocabulary_fits(rows, vocab, "the model")
    else:
        with pytest.raises(T2TError, match=f"the model has {rows} embedding rows but the vocabulary v.model has "
                                           f"{ids} ids; pass the vocabulary the model was trained with"):
            run_lib.check_vocabulary_fits(rows, vocab, "the model")


def test_evaluating_a_run_with_another_vocabulary_is_an_error(setup, tmp_path):
    train(settings(setup, tmp_path / "run"))
    other = tmp_path / "small.model"
    other.write_bytes(tiny_vocabulary(200).path.read_bytes())  # 300 ids: 512 rows are too many for them
    with pytest.raises(T2TError, match="has 512 embedding rows but the vocabulary .*small.model has 300 ids"):
        evaluate(EvalConfig(mixture=TASK, checkpoint=str(tmp_path / "run"), vocab=str(other), trust_modules=True))


def test_t2t_train_resumes_with_the_runs_settings_when_given_only_the_run(setup, tmp_path, capsys):
    from t2t.cli import train_main
    straight = train(settings(setup, tmp_path / "straight", train_steps=4, save_every=4))
    train(settings(setup, tmp_path / "run"))
    forget_sources(setup)
    assert train_main(["--output-dir", str(tmp_path / "run"), "--train-steps", "4"]) == 0
    resumed = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in resumed] == [r["loss"] for r in straight]
    assert train_main(["--output-dir", str(tmp_path / "run"), "--train-steps", "5", "--batch-size", "4"]) == 2
    capsys.readouterr()
    assert train_main(["--output-dir", str(tmp_path / "run"), "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert (printed["batch_size"], printed["mixture"]) == (2, TASK)
    assert printed["vocab"] == str(tmp_path / "run" / "spiece.model")


def test_t2t_train_refuses_another_model_for_a_resumed_run_and_takes_the_same_one(setup, tmp_path, capsys):
    from t2t.cli import train_main
    train(settings(setup, tmp_path / "run"))
    capsys.readouterr()
    base = ["--output-dir", str(tmp_path / "run"), "--train-steps", "3", "--module", setup.module]
    assert train_main(base + ["--model", "t5-small"]) == 2
    assert re.search(r"resuming .*run with a changed model \(model.d_model 32 → 512;", capsys.readouterr().err)
    assert train_main(base + ["--model", setup.model]) == 0  # the run's own model, given again


@pytest.mark.parametrize("inside", ["step_00000002", "step_00000002/sub"])
def test_a_checkpoint_as_output_dir_is_refused_before_anything_is_written(setup, tmp_path, inside):
    train(settings(setup, tmp_path / "run"))
    before = {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()}
    with pytest.raises(T2TError, match=r"is \(inside\) a checkpoint, whose files a run would overwrite; pass its "
                                       r"run folder to resume that run, or another --output-dir"):
        train(settings(setup, tmp_path / "run" / inside))
    assert {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()} == before


# -- t2t-predict: a run's predictions for any input, with evaluation's decoding


def evaluated_run(setup, tmp_path):
    """A trained run, evaluated with max_length 6; returns its scored predictions.jsonl records."""
    train(settings(setup, tmp_path / "run", train_steps=4))
    evaluate(EvalConfig(mixture=TASK, checkpoint=str(tmp_path / "run"), output_dir=str(tmp_path / "eval"),
                        max_length=6, trust_modules=True))
    return [json.loads(line) for line in (tmp_path / "eval" / "validation" / f"{TASK}.predictions.jsonl").open()]


def test_predict_gives_the_predictions_evaluation_scored(setup, tmp_path, capsys):
    from t2t.cli import predict_main
    scored = evaluated_run(setup, tmp_path)
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("".join(r["inputs"] + "\n" for r in scored))
    assert predict_main(["--checkpoint", str(tmp_path / "run"), "--input", str(inputs), "--max-length", "6",
                         "--output", str(tmp_path / "out.txt"), "--trust-modules"]) == 0
    assert (tmp_path / "out.txt").read_text().splitlines() == [r["prediction"] for r in scored]
    raw = tmp_path / "raw.jsonl"  # the task's raw fields: its preprocessing makes the inputs
    raw.write_text("".join(json.dumps(ex) + "\n" for ex in TASKS.get(TASK).raw_examples("validation")))
    capsys.readouterr()
    assert predict_main(["--checkpoint", str(tmp_path / "run"), "--task", TASK, "--input", str(raw),
                         "--max-length", "6", "--trust-modules"]) == 0
    assert capsys.readouterr().out.splitlines() == [r["prediction"] for r in scored]
    raw.write_text('{"txt": "no text field"}\n')
    assert predict_main(["--checkpoint", str(tmp_path / "run"), "--task", TASK, "--input", str(raw),
                         "--trust-modules"]) == 2
    assert capsys.readouterr().err == (f"error: input line 1 has field 'txt', which task {TASK}'s data does not "
                                       f"have (its fields: text); give the task's raw fields (t2t-show --task "
                                       f"{TASK} --raw prints some).\n")


def test_predict_samples_reproducibly_with_a_seed(setup, tmp_path):
    from t2t.evaluation.predict import PredictConfig, predict
    train(settings(setup, tmp_path / "run"))
    lines = ["copy: the cat sat", "copy: a dog ran", "copy: birds sing", "copy: rain falls"]
    run = str(tmp_path / "run")
    greedy = predict(PredictConfig(checkpoint=run, max_length=8, modules=[setup.module]), lines)
    sampled = predict(PredictConfig(checkpoint=run, max_length=8, temperature=5.0, seed=3, modules=[setup.module]),
                      lines)
    assert predict(PredictConfig(checkpoint=run, max_length=8, temperature=5.0, seed=3, modules=[setup.module]),
                   lines) == sampled
    assert sampled != greedy
    top1 = predict(PredictConfig(checkpoint=run, max_length=8, temperature=5.0, top_k=1, seed=3,
                                 modules=[setup.module]), lines)
    assert top1 == greedy  # sampling from the single most likely token is greedy decoding


def test_predict_says_how_many_inputs_it_cut(setup, tmp_path, caplog):
    from t2t.evaluation.predict import PredictConfig, predict
    train(settings(setup, tmp_path / "run", train_steps=2))
    lines = ["copy: " + "word " * 40, "copy: short", "copy: " + "word " * 9]
    config = PredictConfig(checkpoint=str(tmp_path / "run"), max_length=4, input_length=8, modules=[setup.module])
    assert len(predict(config, lines)) == 3
    assert "2 of 3 inputs are longer than input_length (8 tokens) and were cut to it" in caplog.text
    caplog.clear()
    predict(PredictConfig(checkpoint=str(tmp_path / "run"), max_length=4, modules=[setup.module]), lines)
    assert "were cut" not in caplog.text


def test_a_run_folder_that_cannot_be_written_is_one_sentence(setup, tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(T2TError, match=r"cannot write the run's copy of spiece.model into .*file/run \(.*\); choose "
                                       r"a writable --output-dir"):
        run_lib.record_run(tmp_path / "file" / "run", SentencePieceVocabulary(setup.vocab), [])


def test_settings_added_to_t2t_after_a_run_was_recorded_count_as_their_defaults(tmp_path):
    """A run recorded before a setting existed trained with its default: the same is no difference, another
    value breaks continuation (a z_loss that a recipe now sets, resumed with that recipe)."""
    defaults = config.to_dict(TrainConfig())
    recorded = config.to_dict(TrainConfig(batch_size=8))
    del recorded["z_loss"], recorded["optimizer"]["weight_decay"]  # as if written before they existed
    run = run_lib.Run(tmp_path, tmp_path, recorded)
    run_lib.check_resume(run, config.to_dict(TrainConfig(batch_size=8)), defaults=defaults)
    with pytest.raises(T2TError, match=r"\(batch_size 8 → 16\)"):
        run_lib.check_resume(run, config.to_dict(TrainConfig(batch_size=16)), defaults=defaults)
    with pytest.raises(T2TError, match=r"\(optimizer.weight_decay 0.0 → 0.1; z_loss 0.0 → 0.0001\)"):
        changed = TrainConfig(batch_size=8, z_loss=1e-4)
        changed.optimizer.weight_decay = 0.1
        run_lib.check_resume(run, config.to_dict(changed), defaults=defaults)
    run_lib.check_resume(run, config.to_dict(TrainConfig(batch_size=8, z_loss=1e-4)))  # without defaults: not compared


def test_export_of_a_moved_run_ships_the_runs_own_vocabulary(setup, tmp_path):
    from t2t.cli import export_main
    train(settings(setup, tmp_path / "run"))
    vocab_bytes = (setup.src / "my.model").read_bytes()
    forget_sources(setup)
    shutil.move(tmp_path / "run", tmp_path / "moved")
    assert export_main(["--checkpoint", str(tmp_path / "moved"), "--to", "hf", str(tmp_path / "hf")]) == 0
    assert (tmp_path / "hf" / "spiece.model").read_bytes() == vocab_bytes


def test_resume_compares_the_model_with_the_recorded_one(setup, tmp_path):
    train(settings(setup, tmp_path / "run"))
    assert checkpoint.read_settings(tmp_path / "run")["model"]["vocab_size"] == 512  # recorded in full
    train(settings(setup, tmp_path / "run", train_steps=3))  # the same preset file: no difference
    changed = settings(setup, tmp_path / "run", train_steps=4, model={"preset": setup.model, "num_layers": 3,
                                                                       "d_ff": 128})
    for allow in (False, True):  # the log would say "resuming with model.num_layers 3" and train 2 layers
        with pytest.raises(T2TError, match=r"changed model \(model.d_ff 64 → 128; model.num_layers 2 → 3\): a "
                                           r"run's model is fixed by its checkpoints, so not even "
                                           r"--allow-changed-settings changes it"):
            train(changed, allow_changed_settings=allow)


# -- a run's copies are code and data someone wrote: consent, checksums, modes


ANOTHER_USER = 12345
as_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                             reason="giving a file to another user (os.chown) takes root")


def predict_one(run: Path, *flags: str) -> int:
    """t2t-predict of one input of the run's task (its raw fields), through the command line."""
    from t2t.cli import predict_main
    raw = run.parent / "raw.jsonl"
    raw.write_text('{"text": "the cat sat"}\n')
    return predict_main(["--checkpoint", str(run), "--task", TASK, "--input", str(raw), "--max-length", "4", *flags])


def test_ones_own_run_evaluates_and_predicts_without_trust_modules(setup, tmp_path, capsys):
    """The user's own fresh run: t2t-eval and t2t-predict import its module copy unasked, as resuming does."""
    run = tmp_path / "run"
    train(settings(setup, run))
    forget_sources(setup)
    assert set(evaluate(EvalConfig(mixture=TASK, checkpoint=str(run), max_length=4))) == {TASK}
    TASKS.unregister(TASK)
    capsys.readouterr()
    assert predict_one(run) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


@as_root
@pytest.mark.parametrize("owned_by_another", ["modules/copy_task.py", "checksums.sha256",
                                              "step_00000002/train_config.yaml", "step_00000002/modules.sha256",
                                              "step_00000002/checksums.sha256"])
def test_a_run_whose_files_another_user_owns_imports_its_modules_only_with_consent(setup, tmp_path, capsys,
                                                                                   owned_by_another):
    """Resuming, t2t-eval and t2t-predict follow one rule: a run whose module copies, or the files that say
    what it imports, belong to another user is not the user's own."""
    run = tmp_path / "run"
    train(settings(setup, run))
    own_copy = tmp_path / "mine.py"
    shutil.copyfile(setup.module, own_copy)
    forget_sources(setup)
    os.chown(run / owned_by_another, ANOTHER_USER, -1)
    copy = run / "modules" / "copy_task.py"
    refusal = (rf"^run {run} would import its module files {copy}, code that runs as you, and "
               rf"{run / owned_by_another} belongs to another user \(uid {ANOTHER_USER}\); read them and pass "
               rf"--trust-modules, or pass your own copies with --module\.$")
    with pytest.raises(T2TError, match=refusal):
        evaluate(EvalConfig(mixture=TASK, checkpoint=str(run), output_dir=str(tmp_path / "e")))
    with pytest.raises(T2TError, match=refusal):
        train(settings(setup, run, train_steps=3, vocab=None, modules=[]))
    assert TASK not in TASKS  # nothing was imported
    capsys.readouterr()
    assert predict_one(run) == 2
    assert re.match(refusal.replace("^", "^error: "), capsys.readouterr().err)
    given = evaluate(EvalConfig(mixture=TASK, checkpoint=str(run), output_dir=str(tmp_path / "e"),
                                modules=[str(own_copy)]))
    TASKS.unregister(TASK)
    trusted = evaluate(EvalConfig(mixture=TASK, checkpoint=str(run), output_dir=str(tmp_path / "e"),
                                  trust_modules=True))
    assert given == trusted
    TASKS.unregister(TASK)
    assert predict_one(run, "--trust-modules") == 0


@pytest.mark.parametrize("change", ["module edited", "digest not recorded"])
def test_a_run_whose_module_is_not_what_its_training_imported_needs_consent(setup, tmp_path, change):
    """The run's checksums.sha256 cannot vouch for a module copy (the error of a changed file says how to
    record it again): the checkpoint records the sha256 of each module file its training imported, and a copy
    that differs from it, or a checkpoint without the record, makes the run not the user's own."""
    run = tmp_path / "run"
    train(settings(setup, run))
    forget_sources(setup)
    marker = tmp_path / "marker"
    copy = run / "modules" / "copy_task.py"
    step = run / "step_00000002"
    if change == "module edited":
        copy.write_text(f"open({str(marker)!r}, 'w').close()\n" + MODULE)
        run_lib.record_checksums(run)  # what the suggested `sha256sum ... > checksums.sha256` writes
        reason = rf"{copy} changed since the run recorded it in {step / 'modules.sha256'}"
    else:
        assert durable.parse_checksums((step / "modules.sha256").read_text()) == {
            "copy_task.py": durable.sha256_of(copy)}
        (step / "modules.sha256").unlink()
        rewrite_checksums(step)
        reason = (rf"{step / 'modules.sha256'} records no sha256 of copy_task.py \(runs from before t2t "
                  rf"recorded them\)")
    refusal = rf"would import its module files {copy}, code that runs as you, and {reason}; read them and pass"
    with pytest.raises(T2TError, match=refusal):
        train(settings(setup, run, train_steps=3, vocab=None, modules=[]))
    with pytest.raises(T2TError, match=refusal):
        evaluate(EvalConfig(mixture=TASK, checkpoint=str(run), max_length=4))
    assert not marker.exists() and TASK not in TASKS
    assert train(settings(setup, run, train_steps=3, vocab=None, modules=[]), trust_modules=True)[-1]["step"] == 3
    assert marker.exists() == (change == "module edited")
    TASKS.unregister(TASK)  # resuming with consent recorded the module it imported: the run is the user's own again
    assert set(evaluate(EvalConfig(mixture=TASK, checkpoint=str(run), max_length=4))) == {TASK}


def test_a_checkpoints_settings_file_is_a_recipe_for_t2t_train(setup, tmp_path, capsys):
    """Users start a new run from a checkpoint's train_config.yaml (``--config``): it holds settings only (the
    module digests, which are no setting, sit beside it in modules.sha256)."""
    from t2t.cli import train_main
    train(settings(setup, tmp_path / "run"))
    step = checkpoint.latest_checkpoint(tmp_path / "run")
    capsys.readouterr()
    assert train_main(["--config", str(step / "train_config.yaml"), "--output-dir", str(tmp_path / "again"),
                       "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["mixture"] == TASK and printed["modules"] == [setup.module]
    assert printed["model"] == checkpoint.read_settings(step)["model"]


def test_a_tampered_module_copy_is_refused_before_it_runs(setup, tmp_path):
    train(settings(setup, tmp_path / "run"))
    forget_sources(setup)
    marker = tmp_path / "marker"
    copy = tmp_path / "run" / "modules" / "copy_task.py"
    copy.write_text(f"open({str(marker)!r}, 'w').close()\n" + MODULE)
    with pytest.raises(T2TError, match=rf"run file {copy} does not match its recorded checksum"):
        evaluate(EvalConfig(mixture=TASK, checkpoint=str(tmp_path / "run"), trust_modules=True))
    assert not marker.exists()


def test_resuming_ones_own_run_imports_its_modules_but_not_another_users(setup, tmp_path, monkeypatch):
    train(settings(setup, tmp_path / "run"))
    forget_sources(setup)
    monkeypatch.setattr(os, "getuid", lambda: os.stat(tmp_path).st_uid + 1)  # as another user sees the run
    with pytest.raises(T2TError, match=r"would import its module files .*copy_task.py.* --trust-modules"):
        train(settings(setup, tmp_path / "run", train_steps=3, vocab=None, modules=[]))
    assert train(settings(setup, tmp_path / "run", train_steps=3, vocab=None, modules=[]),
                 trust_modules=True)[-1]["step"] == 3
    monkeypatch.undo()
    TASKS.unregister(TASK)
    assert train(settings(setup, tmp_path / "run", train_steps=4, vocab=None, modules=[]))[-1]["step"] == 4


def test_module_names_another_users_run_recorded_are_imported_only_with_consent(setup, tmp_path, monkeypatch):
    """A name is imported from the user's environment, but the run chose it (a package in the working directory
    answers to it too): another user's run needs --trust-modules or the user's own --module."""
    (tmp_path / "path").mkdir()
    (tmp_path / "path" / "named_copy_task.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path / "path"))
    train(settings(setup, tmp_path / "run", modules=["named_copy_task"]))
    TASKS.unregister(TASK)
    sys.modules.pop("named_copy_task")
    evaluated = EvalConfig(mixture=TASK, checkpoint=str(tmp_path / "run"), max_examples=2, max_length=4)
    monkeypatch.setattr(os, "getuid", lambda: os.stat(tmp_path).st_uid + 1)  # as another user sees the run
    with pytest.raises(T2TError, match=r"would import the modules named_copy_task, and .*train_config.yaml belongs to "
                                       r"another user \(uid \d+\); pass --trust-modules"):
        evaluate(evaluated)
    assert "named_copy_task" not in sys.modules
    assert evaluate(dataclasses.replace(evaluated, trust_modules=True))
    monkeypatch.undo()
    monkeypatch.syspath_prepend(str(tmp_path / "path"))
    assert evaluate(evaluated)  # one's own run names its modules unasked


def other_vocabulary_of_the_same_size(path) -> None:
    """The tiny vocabulary's size with other pieces (BPE instead of unigram on the same text)."""
    prefix = train_vocabulary(iter([TINY_TEXT]), path.parent / "bpe", vocab_size=TINY_VOCAB_PIECES,
                              model_type="bpe", num_threads=1, character_coverage=1.0)
    assert SentencePieceVocabulary(prefix).vocab_size == tiny_vocabulary().vocab_size
    shutil.copyfile(prefix, path)


def test_results_of_another_vocabulary_are_kept_apart_and_say_which_vocabulary_made_them(setup, tmp_path):
    """t2t-eval --vocab of another vocabulary of the same size replaced the run's own result, and no file said
    which vocabulary produced it."""
    run = tmp_path / "run"
    train(settings(setup, run))
    other = tmp_path / "other.model"
    other_vocabulary_of_the_same_size(other)
    own = {"path": str(run / "spiece.model"), "sha256": durable.sha256_of(run / "spiece.model")}
    theirs = {"path": str(other), "sha256": durable.sha256_of(other)}
    evaluate(EvalConfig(mixture=TASK, checkpoint=str(run), max_length=4))
    result = run / "eval" / "validation" / f"{TASK}.metrics.json"
    before = result.read_text()
    evaluate(EvalConfig(mixture=TASK, checkpoint=str(run), max_length=4, vocab=str(other)))
    apart = run / "eval" / f"validation.vocab-{theirs['sha256'][:12]}" / f"{TASK}.metrics.json"
    assert result.read_text() == before and json.loads(before)["vocabulary"] == own
    assert json.loads(apart.read_text())["vocabulary"] == theirs
    evaluate(EvalConfig(mixture=TASK, checkpoint=str(run), max_length=4, vocab=setup.vocab))  # the same bytes
    assert json.loads(result.read_text())["vocabulary"] == own
    # a checkpoint that carries no vocabulary of its own: a result of another one is never replaced
    plain = checkpoint.save_checkpoint(tmp_path / "plain", 2, load_model(run))
    evaluate(EvalConfig(mixture=TASK, checkpoint=str(plain), max_length=4, vocab=setup.vocab))
    kept = tmp_path / "plain" / "eval" / plain.name / "validation" / f"{TASK}.metrics.json"
    with pytest.raises(T2TError, match=rf"^{kept} holds the result of another vocabulary \({setup.vocab}, sha256 "
                                       rf"{own['sha256'][:12]}\) than this evaluation's \({other}, sha256 "
                                       rf"{theirs['sha256'][:12]}\); pass another --output-dir to keep both"):
        evaluate(EvalConfig(mixture=TASK, checkpoint=str(plain), max_length=4, vocab=str(other)))
    assert json.loads(kept.read_text())["vocabulary"] == {**own, "path": setup.vocab}


@pytest.mark.parametrize("damage", ["swapped", "truncated", "checksums deleted"])
def test_a_damaged_run_vocabulary_is_named(setup, tmp_path, damage):
    train(settings(setup, tmp_path / "run"))
    vocab = tmp_path / "run" / "spiece.model"
    if damage == "swapped":
        other_vocabulary_of_the_same_size(vocab)
    elif damage == "truncated":
        vocab.write_bytes(vocab.read_bytes()[:1000])
    else:
        (tmp_path / "run" / "checksums.sha256").unlink()
    expected = (r"run .*run has no checksums.sha256 for its vocab.json, spiece.model, modules/copy_task.py, so they "
                r"cannot be verified .*sha256sum vocab.json spiece.model modules/copy_task.py > checksums.sha256"
                if damage.startswith("c")
                else rf"run file {vocab} does not match its recorded checksum")
    with pytest.raises(T2TError, match=expected):
        evaluate(EvalConfig(mixture=TASK, checkpoint=str(tmp_path / "run"), modules=[setup.module]))
    with pytest.raises(T2TError, match=expected):
        train(settings(setup, tmp_path / "run", train_steps=3, vocab=None))


def test_the_command_a_changed_run_file_suggests_records_it_again(setup, tmp_path):
    train(settings(setup, tmp_path / "run"))
    TASKS.unregister(TASK)
    module = tmp_path / "run" / "modules" / "copy_task.py"
    module.write_text(module.read_text() + "\n# edited by hand\n")
    with pytest.raises(T2TError) as error:
        evaluate(EvalConfig(mixture=TASK, checkpoint=str(tmp_path / "run"), trust_modules=True, max_length=4))
    command = re.search(r"record them again with `(.*)`", str(error.value))[1]
    subprocess.run(command, shell=True, check=True)
    assert evaluate(EvalConfig(mixture=TASK, checkpoint=str(tmp_path / "run"), trust_modules=True, max_length=4))


@pytest.mark.parametrize("gone", [["spiece.model"], ["spiece.model", "modules/copy_task.py"]])
def test_the_command_a_run_with_missing_copies_suggests_works_in_a_shell(tmp_path, gone):
    """With every copy gone the suggestion was `sha256sum  > checksums.sha256`, which reads stdin and records
    "-"; a folder name with a space broke the `cd`."""
    run = tmp_path / "my run"
    (run / "modules").mkdir(parents=True)
    (run / "spiece.model").write_bytes(tiny_vocabulary().path.read_bytes())
    (run / "modules" / "copy_task.py").write_text(MODULE)
    run_lib.record_checksums(run)
    for name in gone:
        (run / name).unlink()
    with pytest.raises(T2TError, match=r"is missing .*if you trust the run's files as they are now") as error:
        run_lib.verify_run_files(run)
    command = re.search(r"`([^`]*)`", str(error.value))[1]
    subprocess.run(command, shell=True, check=True, stdin=subprocess.DEVNULL, timeout=30)
    run_lib.verify_run_files(run)
    assert (run / "checksums.sha256").is_file() == (len(gone) == 1)


def test_training_never_writes_through_links_placed_in_the_run_folder(setup, tmp_path):
    """A link at the run's lock stops training before anything is written; links at the run's copies (even to
    a file with the right contents) are replaced by files of the run's own, their targets untouched."""
    precious = tmp_path / "precious.model"
    precious.write_bytes(Path(setup.vocab).read_bytes())
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").symlink_to(precious)
    with pytest.raises(T2TError, match=rf"^{run / '.lock'} is a symbolic link, and t2t never writes through"):
        train(settings(setup, run))
    assert precious.read_bytes() == Path(setup.vocab).read_bytes() and sorted(os.listdir(run)) == [".lock"]
    (run / ".lock").unlink()
    for name in ("spiece.model", "checksums.sha256", "lineage.json"):
        (run / name).symlink_to(precious)
    run_lib.record_run(run, SentencePieceVocabulary(setup.vocab), [setup.module])
    run_lib.record_lineage(run, "google-t5/t5-small")
    assert not any(p.is_symlink() for p in run.iterdir())
    assert precious.read_bytes() == Path(setup.vocab).read_bytes()
    run_lib.verify_run_files(run)


def test_a_checkpoint_with_a_nan_weight_is_refused_by_evaluation_and_init_from(setup, tmp_path):
    """Its checksums match, so only the weights tell: evaluation said accuracy 0.00 (exit 0) and --init-from
    "diverged at step 1 ... lower learning_rate"; both now name the tensor and the file."""
    from safetensors.torch import load_file, save_file
    train(settings(setup, tmp_path / "run"))
    step = tmp_path / "run" / "step_00000002"
    weights = load_file(step / "model.safetensors")
    weights["decoder.blocks.1.ff.wo.weight"][0, 0] = float("nan")
    save_file(weights, step / "model.safetensors", {"format": "pt"})
    rewrite_checksums(step)
    refusal = (rf"^checkpoint {step / 'model.safetensors'} has non-finite values \(NaN or inf\) in "
               rf"decoder.blocks.1.ff.wo.weight; the model diverged before it was saved")
    with pytest.raises(T2TError, match=refusal):
        evaluate(EvalConfig(mixture=TASK, checkpoint=str(tmp_path / "run"), max_length=4))
    with pytest.raises(T2TError, match=refusal):
        train(settings(setup, tmp_path / "child", init_from=str(tmp_path / "run"), model=None))


def test_a_runs_copies_follow_the_umask(setup, tmp_path):
    old = os.umask(0o022)
    try:
        run_lib.record_run(tmp_path / "run", SentencePieceVocabulary(setup.vocab), [setup.module])
    finally:
        os.umask(old)
    for path in (tmp_path / "run" / "spiece.model", tmp_path / "run" / "vocab.json",
                 tmp_path / "run" / "modules" / "copy_task.py"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_a_full_disk_while_the_vocabulary_is_copied_is_one_sentence(setup, tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(durable, "write_file", lambda path, data: full(None, data))
    with pytest.raises(T2TError, match=r"cannot write .*run/spiece.model \(No space left on device\); free disk "
                                       r"space and run the same command again"):
        run_lib.record_run(tmp_path / "run", SentencePieceVocabulary(setup.vocab), [])
    assert [p.name for p in (tmp_path / "run").iterdir()] == []  # no temporary file left behind


@pytest.mark.parametrize("source, line, what", [
    ("x = 1\nraise ValueError('no rows')\n", 2, r"raised ValueError \(no rows\)"),
    ("x = 1\n\ndef f(:\n", 3, r"has a syntax error \(.*\)"),
    ("import sys\nsys.exit(3)\n", 2, r"called exit\(3\)"),
    ("exit(3)\n", 1, r"called exit\(3\)")])
def test_a_module_that_fails_on_import_is_one_sentence_with_file_and_line(tmp_path, source, line, what):
    from t2t.data.task import load_modules
    module = tmp_path / "broken_tasks.py"
    module.write_text(source)
    with pytest.raises(T2TError, match=rf"^task module {module} {what} at line {line} while it was imported; fix "
                                       rf"it or leave it out of --module\.$"):
        load_modules([str(module)])


# -- hand-edited files: one sentence naming the file and the key


def test_hand_edited_run_settings_name_the_file_and_key(setup, tmp_path, capsys):
    from t2t.cli import train_main
    train(settings(setup, tmp_path / "run"))
    step = checkpoint.latest_checkpoint(tmp_path / "run")
    recorded = yaml.safe_load((step / "train_config.yaml").read_text())
    (step / "train_config.yaml").write_text(yaml.safe_dump({**recorded, "modules": 5}))
    with pytest.raises(T2TError, match=r"train_config.yaml .*checksum"):  # the checksum notices first
        run_lib.open_run(tmp_path / "run")
    rewrite_checksums(step)
    with pytest.raises(T2TError, match=rf"settings file {step / 'train_config.yaml'} has modules 5, not a list"):
        run_lib.open_run(tmp_path / "run")
    (step / "train_config.yaml").write_text(yaml.safe_dump(recorded))
    digests = (step / "modules.sha256").read_text()
    (step / "modules.sha256").write_text("copy_task.py\n")
    rewrite_checksums(step)
    with pytest.raises(T2TError, match=rf"^module record {step / 'modules.sha256'} is not in sha256sum's format "
                                       rf"\(a sha256 and a file name a line\); the file was edited"):
        run_lib.open_run(tmp_path / "run")
    (step / "modules.sha256").write_text(digests)
    (step / "train_config.yaml").write_text(yaml.safe_dump({**recorded, "batch_size": "abc"}))
    rewrite_checksums(step)
    assert train_main(["--output-dir", str(tmp_path / "run"), "--train-steps", "3"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (f"error: the run's settings file {step / 'train_config.yaml'} is invalid: "
                                       f"setting batch_size must be of type int, got 'abc'; restore it from a "
                                       f"copy.")


@pytest.mark.parametrize("chain", ['{"model": "x"}', '[{"run": 5}]', '[{"model": 3}]', "[{"])
def test_a_hand_edited_lineage_names_the_file(tmp_path, chain):
    (tmp_path / "lineage.json").write_text(chain)
    with pytest.raises(T2TError, match=rf"lineage file {tmp_path / 'lineage.json'} (has an invalid entry 0|cannot "
                                       rf"be read).*restore it from a copy or delete it"):
        run_lib.read_lineage(tmp_path)


def test_evaluating_one_checkpoint_writes_beside_the_run_not_inside_the_checkpoint(setup, tmp_path):
    train(settings(setup, tmp_path / "run", train_steps=4, save_every=2))
    step = tmp_path / "run" / "step_00000002"
    evaluate(EvalConfig(mixture=TASK, checkpoint=str(step), modules=[setup.module]))
    result = json.loads((tmp_path / "run" / "eval" / "step_00000002" / "validation" / f"{TASK}.metrics.json")
                        .read_text())
    assert (result["step"], result["checkpoint"]) == (2, str(step))
    assert not (step / "eval").exists()
    evaluate(EvalConfig(mixture=TASK, checkpoint=str(tmp_path / "run"), modules=[setup.module]))
    assert json.loads((tmp_path / "run" / "eval" / "validation" / f"{TASK}.metrics.json").read_text())["step"] == 4



def test_a_schedule_that_decays_over_train_steps_refuses_a_new_train_steps(setup, tmp_path):
    def with_schedule(schedule, **changes):
        cfg = settings(setup, tmp_path / schedule, **changes)
        return dataclasses.replace(cfg, optimizer=dataclasses.replace(cfg.optimizer, schedule=schedule))

    for schedule in ("linear", "cosine"):
        train(with_schedule(schedule))
        with pytest.raises(T2TError, match=rf"train_steps 2 → 4, which the {schedule} schedule decays over\)"):
            train(with_schedule(schedule, train_steps=4))
        assert train(with_schedule(schedule, train_steps=4), allow_changed_settings=True)[-1]["step"] == 4
    train(with_schedule("rsqrt"))
    assert train(with_schedule("rsqrt", train_steps=4))[-1]["step"] == 4  # rsqrt is not a function of it


def test_a_failed_init_from_leaves_no_lineage(setup, tmp_path):
    train(settings(setup, tmp_path / "parent"))
    (checkpoint.latest_checkpoint(tmp_path / "parent") / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(T2TError, match="model.safetensors"):
        train(settings(setup, tmp_path / "child", init_from=str(tmp_path / "parent")))
    assert not (tmp_path / "child" / run_lib.LINEAGE_FILE).exists()
    assert checkpoint.latest_checkpoint(tmp_path / "child") is None


def test_changed_training_data_is_refused_on_resume(setup, tmp_path, monkeypatch, caplog):
    """train.tsv cut from 5 rows to 2 between a run and its resume: the recorded fingerprint (examples read
    and their hash) differs; --allow-changed-settings continues with a warning."""
    train(settings(setup, tmp_path / "run"))
    recorded = json.loads((checkpoint.latest_checkpoint(tmp_path / "run") / "trainer_state.json").read_text())
    assert recorded["data_fingerprint"][TASK]["examples"] == 5
    rows = [{"text": t} for t in ["the cat sat", "a dog ran"]]
    monkeypatch.setitem(get_task(TASK).source.examples, "train", rows)
    clear_cache()
    with pytest.raises(T2TError, match=rf"the training data of {TASK} changed since .*step_00000002 was saved "
                                       r"\(5 examples, sha256 \w+ then, 2 examples, sha256 \w+ now\), so the run "
                                       r"cannot continue exactly"):
        train(settings(setup, tmp_path / "run", train_steps=3))
    with caplog.at_level(logging.WARNING, logger="t2t.checkpoints.run"):
        assert train(settings(setup, tmp_path / "run", train_steps=3), allow_changed_settings=True)[-1]["step"] == 3
    assert "continuing on the new data" in caplog.text


# -- runs written before t2t had subpackages keep working


OLD_PATHS_MODULE = (MODULE.replace("from t2t.evaluation import metrics", "from t2t import metrics")
                    .replace("from t2t.data.sources import", "from t2t.sources import")
                    .replace("from t2t.data.task import", "from t2t.task import"))


def test_a_run_whose_module_imports_the_old_paths_evaluates_once_its_files_are_checksummed(setup, tmp_path):
    """A run folder from before the layout change: its module copy imports t2t.task / t2t.sources /
    t2t.metrics, and it has no run-level checksums.sha256 (older t2t wrote none). Opening it says how to
    record them; once recorded, it evaluates with the user's consent."""
    assert "from t2t.task import Task, register_task" in OLD_PATHS_MODULE
    Path(setup.module).write_text(OLD_PATHS_MODULE)
    train(settings(setup, tmp_path / "run"))
    forget_sources(setup)
    run = tmp_path / "run"
    (run / "checksums.sha256").unlink()
    (run / "vocab.json").unlink()  # older t2t recorded spiece.model alone
    with pytest.raises(T2TError, match=r"sha256sum spiece.model modules/copy_task.py > checksums.sha256"):
        evaluate(EvalConfig(mixture=TASK, checkpoint=str(run), trust_modules=True))
    run_lib.record_checksums(run)  # what the printed sha256sum line writes
    scores = evaluate(EvalConfig(mixture=TASK, checkpoint=str(run), trust_modules=True))
    assert set(scores) == {TASK} and "sequence_accuracy" in scores[TASK]


def test_a_vocabulary_pickled_under_the_old_module_path_loads():
    vocab = tiny_vocabulary()
    old = pickle.dumps(vocab, protocol=0).replace(b"ct2t.data.vocab\nrestore_vocabulary\n",
                                                  b"ct2t.vocab\n_restore\n")
    assert b"ct2t.vocab\n_restore\n" in old
    assert pickle.loads(old) == vocab


def test_the_old_sources_path_still_has_glues_reader():
    """Module files written for t2t before its subpackages imported GLUE's source from t2t.sources."""
    import t2t.tasks.glue
    from t2t.sources import GLUE_LABELS, GlueSource, JsonlFiles, read_glue_tsv
    assert (GlueSource, GLUE_LABELS, read_glue_tsv) == (t2t.tasks.glue.GlueSource, t2t.tasks.glue.GLUE_LABELS,
                                                        t2t.tasks.glue.read_glue_tsv)
    assert JsonlFiles is t2t.JsonlFiles
