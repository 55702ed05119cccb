"""Transfer methods (T5 §3.5.1): adapters, gradual unfreezing, freezing by name — what trains, and what not."""

import json
import shutil

import pytest
import torch

import t2t
from t2t import config
from t2t.checkpoints import native as checkpoint
from t2t.checkpoints.loading import load_model
from t2t.errors import T2TError
from t2t.evaluation import metrics
from t2t.models.t5 import T5, ModelConfig
from t2t.testing import in_memory_task, temporarily_registered, tiny_vocabulary
from t2t.training.train import TrainConfig, train
from t2t.training.transfer import TransferConfig, prepare_transfer

TASK = "test_transfer_copy"
TINY = dict(vocab_size=512, d_model=32, d_kv=8, d_ff=64, num_layers=3, num_decoder_layers=2, num_heads=4,
            dropout_rate=0.0)
WORDS = "the cat sat on a mat while dogs ran in parks and birds sang songs at dawn".split()


@pytest.fixture
def copy_task(tmp_path, monkeypatch):
    vocab = tiny_vocabulary()
    monkeypatch.setenv("T2T_VOCAB", str(vocab.path))
    rows = [{"inputs": "copy: " + " ".join(WORDS[i:i + 4]), "targets": " ".join(WORDS[i:i + 4])}
            for i in range(len(WORDS) - 4)]
    (tmp_path / "tiny.json").write_text(json.dumps(TINY))
    with temporarily_registered(in_memory_task(TASK, {"train": rows, "validation": rows[:4]})):
        yield tmp_path


def run(tmp_path, name, steps=6, save_every=None, init_from=None, **transfer) -> list[dict]:
    cfg = config.from_dict(TrainConfig, dict(
        mixture=TASK, model=str(tmp_path / "tiny.json"), init_from=init_from, output_dir=str(tmp_path / name),
        train_steps=steps,
        batch_size=4, input_length=16, target_length=8, pack=False, log_every=1, save_every=save_every or steps,
        keep_checkpoints=steps, seed=0, optimizer={"name": "adamw", "learning_rate": 1e-2},
        transfer=transfer))
    return train(cfg)


def weights(path) -> dict[str, torch.Tensor]:
    return load_model(path).state_dict()


def tiny_model(**changes) -> T5:
    torch.manual_seed(0)
    return T5(ModelConfig(**{**TINY, **changes}))


def test_adapters_train_only_adapters_and_layer_norms(copy_task, caplog):
    base, adapted = copy_task / "base", copy_task / "adapted"
    run(copy_task, "base", steps=2)
    caplog.set_level("INFO")
    assert len(run(copy_task, "adapted", steps=6, init_from=str(base), adapter_dim=4)) == 6
    before, after = weights(base), weights(adapted)
    adapter_names = {n for n in after if ".adapter." in n}
    # one adapter (wi, wo) after each of the 3 encoder and 2 decoder feed-forward networks
    assert len(adapter_names) == 2 * (3 + 2)
    for name, value in before.items():
        if "layer_norm" in name:
            assert not torch.equal(value, after[name]), f"{name} should train"
        else:
            assert torch.equal(value, after[name]), f"{name} changed but only adapters and norms train"
    for name in adapter_names:
        assert not torch.equal(after[name], tiny_model(adapter_dim=4).state_dict()[name])
    # 2·d_model·d per adapter, plus the norms: 2 per encoder block, 3 per decoder block, 2 final ones
    d, a = TINY["d_model"], 4
    n_norms = 3 * 2 + 2 * 3 + 2
    expected = (3 + 2) * 2 * d * a + n_norms * d
    assert f"trainable parameters: {expected:,} of " in caplog.text


def test_trained_only_checkpoint_is_small_loads_complete_and_resumes(copy_task):
    base = str(copy_task / "base")
    run(copy_task, "base", steps=2)
    full = run(copy_task, "full", steps=4, init_from=base, adapter_dim=4)
    run(copy_task, "slim", steps=2, save_every=2, init_from=base, adapter_dim=4, save_trained_only=True)
    slim = run(copy_task, "slim", steps=4, save_every=2, init_from=base, adapter_dim=4, save_trained_only=True)
    assert [r["loss"] for r in slim] == [r["loss"] for r in full]  # resumed from a trained-only checkpoint
    size = lambda name: (checkpoint.latest_checkpoint(copy_task / name) / "model.safetensors").stat().st_size
    assert size("slim") < 0.2 * size("full")
    tokens = torch.randint(3, 500, (2, 7))
    slim_model, full_model = load_model(copy_task / "slim"), load_model(copy_task / "full")
    assert torch.equal(slim_model(tokens, tokens), full_model(tokens, tokens))


def test_a_resumed_trained_only_run_keeps_the_base_it_started_from(copy_task):
    base = str(copy_task / "base")
    run(copy_task, "base", steps=2)
    run(copy_task, "slim", steps=2, init_from=base, adapter_dim=4, save_trained_only=True)
    run(copy_task, "base", steps=4)  # the base trains on: its latest checkpoint is now step 4
    run(copy_task, "slim", steps=4, init_from=base, adapter_dim=4, save_trained_only=True)
    bases = {json.loads((folder / "base.json").read_text())["base"]
             for folder in checkpoint.list_checkpoints(copy_task / "slim")}
    assert bases == {str((copy_task / "base" / "step_00000002").resolve())}


def test_trained_only_checkpoint_names_a_missing_base(copy_task):
    run(copy_task, "base", steps=2)
    run(copy_task, "slim", steps=2, init_from=str(copy_task / "base"), adapter_dim=4, save_trained_only=True)
    (copy_task / "base").rename(copy_task / "moved")
    with pytest.raises(T2TError, match="holds only trained parameters and its base .* is gone"):
        load_model(copy_task / "slim")


def test_adapter_starts_near_identity():
    plain = tiny_model()
    adapted = tiny_model()
    prepare_transfer(adapted, TransferConfig(adapter_dim=8), train_steps=10)
    tokens = torch.randint(3, 500, (2, 7))
    assert adapted.config.adapter_dim == 8
    torch.testing.assert_close(adapted(tokens, tokens), plain(tokens, tokens), atol=0.05, rtol=0)
    assert not torch.equal(adapted(tokens, tokens), plain(tokens, tokens))  # the adapter is in the path


def test_a_model_with_adapters_is_not_exported_to_hugging_face(tmp_path):
    model = tiny_model()
    prepare_transfer(model, TransferConfig(adapter_dim=4), train_steps=10)
    with pytest.raises(T2TError, match="no adapter layers"):
        t2t.to_hf(model, tmp_path / "hf")


def test_frozen_parameters_are_unchanged_and_have_no_optimizer_state(copy_task):
    run(copy_task, "frozen", steps=4, freeze=["encoder.*", "shared.weight"])
    folder = checkpoint.latest_checkpoint(copy_task / "frozen")
    after = weights(folder)
    init = tiny_model().state_dict()  # the same seed and model as the run's initialisation
    for name, value in after.items():
        frozen = name.startswith("encoder.") or name == "shared.weight"
        assert torch.equal(value, init[name]) == frozen, name
    state = checkpoint.read_optimizer_state(folder)
    n_trainable = sum(1 for n in after if not (n.startswith("encoder.") or n == "shared.weight"))
    assert len(state["state"]) == n_trainable
    assert len(state["param_groups"][0]["params"]) == n_trainable


def test_gradual_unfreezing_changes_exactly_the_scheduled_blocks(copy_task):
    # 3 encoder and 2 decoder blocks, one more opened every 2 steps: checkpoints after steps 2, 4, 6
    run(copy_task, "gradual", steps=6, save_every=2, unfreeze="gradual", unfreeze_every=2)
    folders = checkpoint.list_checkpoints(copy_task / "gradual")
    states = [tiny_model().state_dict()] + [weights(f) for f in folders]
    always = {"shared.weight", "encoder.final_layer_norm.weight", "decoder.final_layer_norm.weight"}
    open_in_episode = [
        always | {"encoder.blocks.2.", "decoder.blocks.1."},
        {"encoder.blocks.1.", "decoder.blocks.0.", "decoder.relative_attention_bias.weight"},
        {"encoder.blocks.0.", "encoder.relative_attention_bias.weight"},
    ]
    opened: set[str] = set()
    for episode, (start, end) in enumerate(zip(states, states[1:])):
        opened |= open_in_episode[episode]
        for name in start:
            trains = any(name.startswith(prefix) for prefix in opened)
            assert (not torch.equal(start[name], end[name])) == trains, (episode, name)


@pytest.mark.parametrize("architecture", ["decoder_only", "shared_encoder_decoder"])
def test_one_stack_models_unfreeze_their_stack_from_the_top(architecture):
    model = tiny_model(architecture=architecture, num_decoder_layers=None)
    schedule = prepare_transfer(model, TransferConfig(unfreeze="gradual", unfreeze_every=5), train_steps=15)
    top, bottom = "decoder.blocks.2.self_attn.q.weight", "decoder.blocks.0.self_attn.q.weight"
    assert top in schedule.trainable_names(0) and bottom not in schedule.trainable_names(9)
    assert bottom in schedule.trainable_names(10)


def test_explicit_unfreezing_steps_must_name_every_block():
    with pytest.raises(T2TError, match="one step per block"):
        prepare_transfer(tiny_model(), TransferConfig(unfreeze="gradual", unfreeze_steps=[0, 5]), 10)


def test_a_freeze_pattern_that_matches_nothing_is_an_error():
    with pytest.raises(T2TError, match="'encoder.block.*' matches no parameter"):
        prepare_transfer(tiny_model(), TransferConfig(freeze=["encoder.block.*"]), 10)


def test_transfer_settings_are_checked():
    with pytest.raises(T2TError, match="setting transfer.unfreeze must be one of 'none', 'gradual'"):
        config.from_dict(TrainConfig, {"transfer": {"unfreeze": "slowly"}})
    with pytest.raises(T2TError, match="setting transfer.adapter_dim must be >= 0, got -1"):
        config.from_dict(TrainConfig, {"transfer": {"adapter_dim": -1}})
    with pytest.raises(T2TError, match="setting transfer.unfreeze_steps must be in increasing order"):
        config.from_dict(TrainConfig, {"transfer": {"unfreeze": "gradual", "unfreeze_steps": [0, 9, 5]}})
    with pytest.raises(T2TError, match="transfer.unfreeze_every is only read with transfer.unfreeze=gradual, and "
                                       "it is none"):
        config.from_dict(TrainConfig, {"transfer": {"unfreeze_every": 5}})
    with pytest.raises(T2TError, match="transfer.unfreeze_steps is only read with transfer.unfreeze=gradual"):
        config.from_dict(TrainConfig, {"transfer": {"unfreeze_steps": [3, 6]}})
    with pytest.raises(T2TError, match="unfreeze_every and transfer.unfreeze_steps both say when blocks open"):
        config.from_dict(TrainConfig, {"transfer": {"unfreeze": "gradual", "unfreeze_every": 5,
                                                    "unfreeze_steps": [3, 6]}})


def test_training_evaluates_another_mixture_on_its_schedule(copy_task):
    rows = [{"inputs": "echo: " + w, "targets": w} for w in WORDS]
    with temporarily_registered(in_memory_task("test_transfer_echo", {"validation": rows[:3]},
                                   metric_fns=[metrics.sequence_accuracy])):
        cfg = config.from_dict(TrainConfig, dict(
            mixture=TASK, model=str(copy_task / "tiny.json"), output_dir=str(copy_task / "run"), train_steps=4,
            batch_size=4, input_length=16, target_length=8, pack=False, log_every=1, eval_every=2,
            eval_mixture="test_transfer_echo", eval_batch_size=2))
        records = train(cfg)
    curve = [(r["step"], r["eval/test_transfer_echo/sequence_accuracy"]) for r in records
             if "eval/test_transfer_echo/sequence_accuracy" in r]
    assert [step for step, _ in curve] == [2, 4]
    assert not any(key.startswith(f"eval/{TASK}") for r in records for key in r)
    assert (copy_task / "run" / "metrics.png").stat().st_size > 1000


def test_a_chain_of_runs_records_its_lineage(copy_task):
    from t2t.checkpoints.run import read_lineage
    run(copy_task, "base", steps=2)
    run(copy_task, "middle", steps=2, init_from=str(copy_task / "base"))
    run(copy_task, "target", steps=2, init_from=str(copy_task / "middle"))
    (copy_task / "base").rename(copy_task / "base-moved")  # the chain was copied, not linked
    chain = read_lineage(copy_task / "target")
    assert [(a["run"], a["step"], a["mixture"]) for a in chain] == [
        (str((copy_task / "middle").resolve()), 2, TASK), (str((copy_task / "base").resolve()), 2, TASK)]
    assert chain[0]["checkpoint"] == str((copy_task / "middle" / "step_00000002").resolve())
    assert read_lineage(copy_task / "base-moved") == []


def test_gradual_unfreezing_logs_the_true_trainable_count_and_each_block_that_opens(copy_task, caplog):
    caplog.set_level("INFO", logger="t2t.training")
    run(copy_task, "gradual", steps=6, unfreeze="gradual", unfreeze_every=2)
    lines = [r.getMessage() for r in caplog.records if "trainable parameters" in r.getMessage()]
    model = tiny_model()
    tensors = len(list(model.parameters()))
    top = {n for n, _ in model.named_parameters()
           if n.startswith(("encoder.blocks.2.", "decoder.blocks.1.", "shared.", "encoder.final", "decoder.final"))}
    count = sum(p.numel() for n, p in model.named_parameters() if n in top)
    total = sum(p.numel() for p in model.parameters())
    assert lines[0] == (f"trainable parameters: {count:,} of {total:,} ({100 * count / total:.2f}%; "
                        f"{len(top)} of {tensors} tensors)")
    assert [line.split(";")[0] for line in lines[1:]] == [
        "step 3: unfreezing decoder.blocks.0, encoder.blocks.1", "step 5: unfreezing encoder.blocks.0"]
    assert lines[-1].endswith(f"trainable parameters: {total:,} of {total:,} (100.00%; {tensors} of {tensors} tensors)")


def test_a_trained_only_base_names_the_checkpoint_loaded_while_the_parent_trains_on(copy_task, monkeypatch):
    """The parent saves a newer checkpoint while the child loads it (as a run still training does): the
    child's base.json and lineage.json name the checkpoint whose weights it loaded."""
    from t2t.checkpoints.run import read_lineage
    from t2t.training import train as train_module
    run(copy_task, "base", steps=2)
    loaded, real_load = [], train_module.load_model

    def load_then_parent_saves(path, **kwargs):
        loaded.append(str(path))
        model = real_load(path, **kwargs)
        shutil.copytree(copy_task / "base" / "step_00000002", copy_task / "base" / "step_00000004")
        return model
    monkeypatch.setattr(train_module, "load_model", load_then_parent_saves)
    run(copy_task, "slim", steps=2, init_from=str(copy_task / "base"), adapter_dim=4, save_trained_only=True)
    pinned = str((copy_task / "base" / "step_00000002").resolve())
    assert json.loads((checkpoint.latest_checkpoint(copy_task / "slim") / "base.json").read_text())["base"] == pinned
    assert read_lineage(copy_task / "slim")[0]["checkpoint"] == pinned
