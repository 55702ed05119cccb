"""Settings: files and flags override dataclass fields; unknown keys and wrong types are clear errors."""

from dataclasses import dataclass, field
from typing import Literal

import pytest

from t2t import config
from t2t.errors import T2TError


@dataclass
class Inner:
    rate: float = 0.1
    name: Literal["a", "b"] = "a"


@dataclass
class Outer:
    steps: int = 10
    path: str | None = None
    items: list[str] = field(default_factory=list)
    inner: Inner = field(default_factory=Inner)


def test_files_then_overrides_win(tmp_path):
    file = tmp_path / "c.yaml"
    file.write_text("steps: 20\ninner:\n  rate: 1e-3\n")
    cfg = config.load(Outer, [file], ["inner.name=b", "items=[x, y]"])
    assert cfg == Outer(steps=20, items=["x", "y"], inner=Inner(rate=1e-3, name="b"))


def test_unknown_key_names_the_key_and_the_known_ones():
    with pytest.raises(T2TError, match=r"unknown setting inner\.rat for Inner; known settings: name, rate"):
        config.from_dict(Outer, {"inner": {"rat": 1}})


def test_unknown_keys_that_yaml_read_as_numbers_beside_names_are_named_too(tmp_path):
    file = tmp_path / "c.yaml"
    file.write_text("steps: 2\n1: a\nfoo: b\n")  # keys 1 (an int) and "foo": sorting them raised a TypeError
    with pytest.raises(T2TError, match=r"unknown setting 1 for Outer"):
        config.load(Outer, [file], [])


@pytest.mark.parametrize("data, message", [
    ({"steps": "ten"}, "setting steps must be of type int, got 'ten'"),
    ({"steps": True}, "setting steps must be of type int"),
    ({"inner": {"name": "c"}}, "setting inner.name must be one of 'a', 'b'"),
    ({"items": {"x": 1}}, r"setting items must be a list of str: one value, or several as \[v1, v2\] \(--set "
                          r"items='\[v1, v2\]', or items: \[v1, v2\] in a file\), got \{'x': 1\}"),
    ({"items": 3}, r"setting items must be a list of str: one value, or several as \[v1, v2\].*got 3\."),
    ({"items": ["x", 3]}, r"setting items\[1\] must be of type str, got 3"),
])
def test_wrong_types_are_rejected(data, message):
    with pytest.raises(T2TError, match=message):
        config.from_dict(Outer, data)


@pytest.mark.parametrize("hint, name", [
    (int, "int"), (str | None, "str | None"), (list[str], "list[str]"), (tuple[float, float], "tuple[float, float]"),
    (Literal["a", "b"], "Literal['a', 'b']"),
])
def test_type_name_writes_a_type_as_settings_files_do(hint, name):
    """On Python 3.10 ``list[str]`` passes ``isinstance(..., type)``: its name alone read ``list``."""
    assert config.type_name(hint) == name


def test_one_value_for_a_list_setting_is_a_one_element_list():
    assert config.load(Outer, overrides=["items=x"]).items == ["x"]
    from t2t.training.train import TrainConfig
    cfg = config.load(TrainConfig, overrides=["transfer.freeze=encoder.*", "transfer.unfreeze=gradual",
                                               "transfer.unfreeze_steps=4"])
    assert (cfg.transfer.freeze, cfg.transfer.unfreeze_steps) == (["encoder.*"], [4])
    with pytest.raises(T2TError, match=r"setting optimizer.adam_betas must be a list of 2 values, \[float, float\]"):
        config.load(TrainConfig, overrides=["optimizer.adam_betas=0.9"])  # a pair stays a pair


def test_files_then_flags_then_overrides(tmp_path):
    file = tmp_path / "c.yaml"
    file.write_text("steps: 20\npath: from-file\ninner:\n  rate: 0.5\n")
    cfg = config.load(Outer, [file], ["path=from-set"], base={"steps": 5, "items": ["run"]},
                      given={"path": "from-flag", "inner.rate": 0.25, "steps": 30})
    assert cfg == Outer(steps=30, path="from-set", items=["run"], inner=Inner(rate=0.25))


def test_override_values_yaml_cannot_read_are_text_unless_meant_as_a_list():
    assert config.parse_overrides(["transfer.freeze=*.bias", "a=*"]) == {"transfer": {"freeze": "*.bias"}, "a": "*"}
    with pytest.raises(T2TError, match=r"setting x=\[a, is not a valid YAML list or mapping .*write it as \[a, b\]"):
        config.parse_overrides(["x=[a,"])


def test_a_name_given_a_value_and_fields_is_a_preset_or_one_sentence():
    expected = {"model": {"preset": "t5-tiny", "num_layers": 3}}
    assert config.parse_overrides(["model=t5-tiny", "model.num_layers=3"]) == expected
    assert config.parse_overrides(["model.num_layers=3", "model=t5-tiny"]) == expected
    with pytest.raises(T2TError, match=r"setting max_examples was given the value 3 and also the field "
                                       r"max_examples.x; give one or the other"):
        config.parse_overrides(["max_examples=3", "max_examples.x=2"])
    with pytest.raises(T2TError, match=r"setting inner was given fields and also the value 2"):
        config.parse_overrides(["inner.rate=1", "inner=2"])


@pytest.mark.parametrize("betas", ["[0.9]", "[0.9, 0.99, 0.5]"])
def test_a_pair_setting_takes_two_values(betas):
    from t2t.training.train import TrainConfig
    with pytest.raises(T2TError, match=r"setting optimizer.adam_betas must be a list of 2 values, \[float, float\]"):
        config.load(TrainConfig, overrides=[f"optimizer.adam_betas={betas}", "optimizer.name=adamw"])


def test_a_config_file_that_is_not_utf8_is_one_sentence(tmp_path):
    file = tmp_path / "latin1.yaml"
    file.write_bytes("name: caf\u00e9\n".encode("latin-1"))
    with pytest.raises(T2TError, match=rf"config file {file} is not UTF-8 text \(byte 0xe9 at offset 9\); save it"):
        config.read_config_file(file)


def test_override_syntax_error():
    with pytest.raises(T2TError, match="not of the form key=value"):
        config.parse_overrides(["steps"])


def test_bad_yaml_names_the_file(tmp_path):
    file = tmp_path / "bad.yaml"
    file.write_text("steps: [1,\n")
    with pytest.raises(T2TError, match=f"config file {file} is not valid YAML"):
        config.read_config_file(file)


def test_unknown_config_name_lists_the_known_ones():
    with pytest.raises(T2TError, match=r"no recipes config 'pretrian'.*pretrain"):
        config.find_config("pretrian", "recipes")


def test_every_recipe_loads_into_the_training_settings():
    from t2t.training.train import TrainConfig
    names = config.config_names("recipes")
    assert {"pretrain", "finetune", "cpu-smoke"} <= set(names)
    for name in names:
        cfg = config.load(TrainConfig, [config.find_config(name, "recipes")])
        assert cfg.train_steps > 0 and cfg.batch_size > 0


def test_resolved_settings_round_trip():
    from t2t.training.train import TrainConfig
    cfg = config.load(TrainConfig, [config.find_config("pretrain", "recipes")], ["seed=3"])
    assert config.from_dict(TrainConfig, config.to_dict(cfg)) == cfg


def test_a_mapping_over_a_preset_name_refines_the_preset():
    merged = config.merge({"model": "t5-tiny", "steps": 1}, {"model": {"num_layers": 3}})
    assert merged == {"model": {"preset": "t5-tiny", "num_layers": 3}, "steps": 1}
    assert config.merge(merged, {"model": {"preset": "t5-small"}})["model"] == {"preset": "t5-small",
                                                                               "num_layers": 3}


def test_model_fields_override_the_preset_from_the_command_line():
    from t2t.models.t5 import resolve_model_config
    from t2t.training.train import TrainConfig
    cfg = config.load(TrainConfig, ["cpu-smoke"], ["model.num_layers=3", "model.d_ff=96"])
    model = resolve_model_config(cfg.model)
    assert (model.num_layers, model.d_ff, model.d_model) == (3, 96, 64)  # d_model from t5-tiny
    assert resolve_model_config("t5-tiny") == resolve_model_config({"preset": "t5-tiny"})


@pytest.mark.parametrize("setting, message", [
    ({"preset": "t5-tiny", "num_layer": 3}, r"unknown setting model\.num_layer for ModelConfig; known settings: "),
    ({"preset": "t5-tiny", "num_layers": "three"}, r"setting model\.num_layers must be of type int"),
    ({"architecture": "rnn"}, r"setting model\.architecture must be one of 'encoder_decoder'"),
    ({"preset": "t5-tin"}, r"no models config 't5-tin'"),
    # with 32 buckets the decoder's first 16 are exact distances; a max distance of 16 made the others NaN
    ({"preset": "t5-tiny", "relative_attention_max_distance": 16},
     r"setting model\.relative_attention_max_distance must be > relative_attention_num_buckets // 2 \(16\), got 16"),
])
def test_bad_model_settings_are_one_sentence(setting, message):
    from t2t.models.t5 import resolve_model_config
    with pytest.raises(T2TError, match=message):
        resolve_model_config(setting)


@pytest.mark.parametrize("flags, message", [
    (["--learning-rate", "-0.1"], "setting optimizer.learning_rate must be > 0, got -0.1"),
    (["--learning-rate", "0"], "setting optimizer.learning_rate must be > 0, got 0.0"),
    (["--save-every", "0"], "setting save_every must be > 0, got 0"),
    (["--log-every", "0"], "setting log_every must be > 0, got 0"),
    (["--eval-every", "-5"], "setting eval_every must be >= 0, got -5"),
    (["--batch-size", "0"], "setting batch_size must be > 0, got 0"),
    (["--train-steps", "0"], "setting train_steps must be > 0, got 0"),
    (["--set", "dropout_rate=1.5"], "setting dropout_rate must be in [0, 1), got 1.5"),
    (["--set", "optimizer.adam_betas=[0.9, 1.0]"], "setting optimizer.adam_betas must be in [0, 1)"),
    (["--set", "optimizer.adam_eps=1e-6"], "optimizer.adam_eps 1e-06 is only read when optimizer.name is adamw"),
    (["--set", "optimizer.weight_decay=inf"], "setting optimizer.weight_decay must be a finite number >= 0, got inf"),
    (["--set", "optimizer.learning_rate=.inf"], "setting optimizer.learning_rate must be a finite number > 0, got inf"),
    (["--set", "z_loss=nan"], "setting z_loss must be a finite number >= 0, got nan"),
    (["--eval-mixture", "glue_v002"], "eval_mixture is set but eval_every is 0, so training evaluates nothing"),
    (["--set", "eval_max_examples=64"], "eval_max_examples is set but eval_every is 0"),
])
def test_out_of_range_training_settings_are_one_sentence_at_resolution(flags, message, capsys):
    from t2t.cli import train_main
    # --print-config: a check that let the value pass prints the settings rather than training
    assert train_main(["--task", "rte", "--model", "t5-tiny", "--print-config", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err


def test_settings_built_in_python_are_held_to_the_same_rules():
    from t2t.evaluation.evaluate import EvalConfig
    from t2t.training.optim import OptimizerConfig
    from t2t.training.train import TrainConfig
    with pytest.raises(config.SettingError, match="setting train_steps must be > 0, got -1"):
        TrainConfig(train_steps=-1)
    with pytest.raises(config.SettingError, match="setting learning_rate must be > 0"):
        OptimizerConfig(learning_rate=-1e-3)
    with pytest.raises(config.SettingError, match="setting beam_size must be > 0, got 0"):
        EvalConfig(beam_size=0)
    assert TrainConfig(eval_every=0, keep_checkpoints=0).eval_every == 0  # 0: no evaluation, keep all


def every_float_setting():
    from t2t.evaluation.evaluate import EvalConfig
    from t2t.evaluation.predict import PredictConfig
    from t2t.models.t5 import ModelConfig
    from t2t.training.optim import OptimizerConfig
    from t2t.training.train import TrainConfig
    from t2t.training.transfer import TransferConfig
    classes = [TrainConfig, OptimizerConfig, TransferConfig, ModelConfig, EvalConfig, PredictConfig]
    return [(cls, name) for cls in classes for name in config.float_fields(cls)]


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_every_float_setting_must_be_finite(value):
    """Whatever its range (lm_loss_weight has none; inf passes "> 0"), a float setting is a finite number."""
    settings = every_float_setting()
    assert len(settings) >= 12  # the list is found, not empty: learning_rate, z_loss, temperature, ...
    for cls, name in settings:
        given = (0.9, value) if name == "adam_betas" else value
        with pytest.raises(config.SettingError, match=rf"setting {name} must be a finite number"):
            cls(**{name: given})


def test_eval_settings_are_checked_by_the_cli(capsys):
    from t2t.cli import eval_main
    assert eval_main(["--task", "rte", "--checkpoint", "x", "--batch-size", "-4"]) == 2
    assert capsys.readouterr().err.startswith("error: setting batch_size must be > 0, got -4")


def test_a_model_dropout_rate_given_after_a_recipe_wins_and_one_layer_giving_both_is_refused():
    from t2t.training.train import TrainConfig
    assert config.load(TrainConfig, ["cpu-smoke"]).dropout_rate == 0.0  # the recipe's, over t5-tiny's 0.1
    assert config.load(TrainConfig, ["cpu-smoke"], ["model.dropout_rate=0.3"]).dropout_rate == 0.3
    assert config.load(TrainConfig, ["cpu-smoke"], given={"model.dropout_rate": 0.2}).dropout_rate == 0.2
    assert config.load(TrainConfig, ["cpu-smoke"], ["model.dropout_rate=0.3", "dropout_rate=0.3"]).dropout_rate == 0.3
    with pytest.raises(T2TError, match=r"settings dropout_rate 0\.2 and model\.dropout_rate 0\.3 are given together "
                                       r"and set the same thing; give one of them\."):
        config.load(TrainConfig, ["cpu-smoke"], ["model.dropout_rate=0.3", "dropout_rate=0.2"])
