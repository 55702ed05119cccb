"""Checkpoints of the original ``t5`` library: random transformers T5 models (T5 1.0 and 1.1) written here by
TensorFlow's v1 Saver under the Mesh TensorFlow variable names the t5 library gives them (with Adafactor
slots and global_step beside them) must load into t2t with the logits of the same weights read from the
Hugging Face folder; a partial checkpoint, a missing extra and an unknown variable are one sentence each.
TensorFlow is imported once, by the module fixture that writes every checkpoint."""

from __future__ import annotations

import dataclasses
import logging
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the reference models are transformers' T5")

import t2t  # noqa: E402
from t2t.checkpoints import mesh_tf  # noqa: E402
from t2t.checkpoints.loading import load_model, own_vocabulary  # noqa: E402
from t2t.errors import T2TError  # noqa: E402

transformers.logging.set_verbosity_error()
logging.getLogger("transformers").setLevel(logging.ERROR)

VOCAB = 512  # fits t2t.testing's tiny vocabulary, for the --init-from run
TINY = dict(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=3, num_heads=4,
            relative_attention_num_buckets=32, relative_attention_max_distance=128, dropout_rate=0.0,
            decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
# How the t5 library names things: released T5 1.0 checkpoints use Mesh TensorFlow's legacy sublayers
# (layer_norm, final_layer_norm); T5 1.1 and mT5 the default ones (rms_norm for both); a gin config may name
# a block's layers (self_attention, enc_dec_attention, dense_relu_dense) instead of numbering them.
LAYOUTS = {
    "t5_1_0": dict(style="relu", norm="layer_norm", final="final_layer_norm", named=False),
    "t5_1_1": dict(style="gated-gelu", norm="rms_norm", final="rms_norm", named=False),
    "t5_1_1_named_layers": dict(style="gated-gelu", norm="rms_norm", final="rms_norm", named=True),
}
SUBLAYERS = {"encoder": [("layer_000", "self_attention", "SelfAttention"), ("layer_001", "dense_relu_dense",
                                                                          "DenseReluDense")],
             "decoder": [("layer_000", "self_attention", "SelfAttention"),
                         ("layer_001", "enc_dec_attention", "EncDecAttention"),
                         ("layer_002", "dense_relu_dense", "DenseReluDense")]}


def random_hf_model(style: str, seed: int) -> "transformers.T5ForConditionalGeneration":
    torch.manual_seed(seed)
    tied = style == "relu"
    model = transformers.T5ForConditionalGeneration(
        transformers.T5Config(**TINY, feed_forward_proj=style, tie_word_embeddings=tied)).eval()
    if not tied:  # transformers >= 5 would otherwise share the embedding's tensor
        with torch.no_grad():
            model.lm_head.weight = torch.nn.Parameter(torch.randn(VOCAB, TINY["d_model"]))
    return model


def mesh_tf_variables(hf: dict, norm: str, final: str, named: bool) -> dict[str, np.ndarray]:
    """transformers' state dict → the t5 library's variables (matrices [in, out], position bias
    [heads, buckets] in the first block of each stack, embedding as it is)."""
    out = {"shared/embedding": hf["shared.weight"]}
    for stack, sublayers in SUBLAYERS.items():
        blocks = len({k.split(".")[2] for k in hf if k.startswith(f"{stack}.block.")})
        for i in range(blocks):
            for j, (numbered, name, cls) in enumerate(sublayers):
                scope, ours = f"{stack}/block_{i:03d}/{name if named else numbered}", f"{stack}.block.{i}.layer.{j}"
                out[f"{scope}/{norm}/scale"] = hf[f"{ours}.layer_norm.weight"]
                if cls == "DenseReluDense":
                    for w in ("wi", "wi_0", "wi_1", "wo"):
                        if f"{ours}.DenseReluDense.{w}.weight" in hf:
                            out[f"{scope}/{cls}/{w}/kernel"] = hf[f"{ours}.DenseReluDense.{w}.weight"].T
                    continue
                for w in "qkvo":
                    out[f"{scope}/{cls}/{w}"] = hf[f"{ours}.{cls}.{w}.weight"].T
                if i == 0 and cls == "SelfAttention":
                    out[f"{scope}/{cls}/relative_attention_bias"] = hf[f"{ours}.{cls}.relative_attention_bias.weight"].T
        out[f"{stack}/{final}/scale"] = hf[f"{stack}.final_layer_norm.weight"]
    if "lm_head.weight" in hf and not torch.equal(hf["lm_head.weight"], hf["shared.weight"]):
        out["decoder/logits/kernel"] = hf["lm_head.weight"].T
    return {k: np.ascontiguousarray(v.numpy()) for k, v in out.items()}


def save_tf_checkpoint(tf, folder: Path, variables: dict[str, np.ndarray], step: int = 1000) -> Path:
    """As the t5 library's estimator saves: tf.compat.v1 Saver, ``model.ckpt-N`` and a ``checkpoint`` file;
    Adafactor's factored second moments (``_slot_vr``/``_slot_vc``, ``_slot_v`` for vectors) beside each."""
    folder.mkdir(parents=True)
    with tf.Graph().as_default():
        for name, value in variables.items():
            tf.compat.v1.Variable(value, name=name)
            if value.ndim == 2:
                tf.compat.v1.Variable(np.ones(value.shape[0], np.float32), name=f"{name}_slot_vr")
                tf.compat.v1.Variable(np.ones(value.shape[1], np.float32), name=f"{name}_slot_vc")
            else:
                tf.compat.v1.Variable(np.ones_like(value), name=f"{name}_slot_v")
        tf.compat.v1.train.get_or_create_global_step()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            return Path(saver.save(session, str(folder / "model.ckpt"), global_step=step))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """{layout: (TF checkpoint folder, HF folder, HF model)}, written with one import of TensorFlow."""
    tf = pytest.importorskip("tensorflow", reason="t5 library checkpoints need pip install 't2t[tf]'")
    root = tmp_path_factory.mktemp("mesh_tf")
    out = {}
    for seed, (layout, how) in enumerate(sorted(LAYOUTS.items())):
        hf = random_hf_model(how["style"], seed)
        hf.save_pretrained(root / layout / "hf")
        variables = mesh_tf_variables(hf.state_dict(), how["norm"], how["final"], how["named"])
        save_tf_checkpoint(tf, root / layout / "tf", variables)
        out[layout] = (root / layout / "tf", root / layout / "hf", hf)
    return out


def batch():
    g = torch.Generator().manual_seed(1)
    enc = torch.randint(2, VOCAB, (2, 40), generator=g)
    dec = torch.randint(2, VOCAB, (2, 30), generator=g)
    dec[:, 0] = 0
    enc[1, 25:] = 0
    return enc, dec


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_t5_library_checkpoints_give_the_logits_of_the_same_weights_from_hf(checkpoints, layout):
    tf_folder, hf_folder, hf = checkpoints[layout]
    from_hf = t2t.from_hf(hf_folder)
    enc, dec = batch()
    with torch.no_grad():
        expected = from_hf(enc, dec)
        theirs = hf(input_ids=enc, attention_mask=(enc != 0).long(), decoder_input_ids=dec).logits
    for source in (tf_folder, tf_folder / "model.ckpt-1000", str(tf_folder / "model.ckpt-1000.index")):
        model = load_model(source)  # through the --init-from dispatch
        assert dataclasses.replace(model.config, dropout_rate=0.0) == from_hf.config, source
        with torch.no_grad():
            logits = model(enc, dec)
        assert (logits - expected).abs().max().item() <= 1e-6, source
    with torch.no_grad():  # and through the public name
        assert (t2t.from_mesh_tf(tf_folder).eval()(enc, dec) - expected).abs().max().item() <= 1e-6
    assert model.config.tie_word_embeddings == (LAYOUTS[layout]["style"] == "relu")
    assert ((logits - theirs).abs().max() / theirs.abs().max()).item() < 1e-4


def test_bfloat16_variables_load_as_float32_of_the_same_values(checkpoints, tmp_path):
    tf = pytest.importorskip("tensorflow")
    hf = checkpoints["t5_1_1"][2]
    variables = mesh_tf_variables(hf.state_dict(), "rms_norm", "rms_norm", False)
    bf16 = {k: v.astype(tf.bfloat16.as_numpy_dtype) for k, v in variables.items()}
    model = mesh_tf.from_mesh_tf(save_tf_checkpoint(tf, tmp_path / "tf", bf16))
    ours, theirs = model.state_dict(), hf.state_dict()
    for key, hf_key in [("shared.weight", "shared.weight"), ("lm_head.weight", "lm_head.weight"),
                        ("decoder.blocks.2.cross_attn.k.weight", "decoder.block.2.layer.1.EncDecAttention.k.weight")]:
        assert ours[key].dtype == torch.float32
        assert torch.equal(ours[key], theirs[hf_key].to(torch.bfloat16).float()), key


@pytest.mark.integration
def test_init_from_a_model_ckpt_prefix_trains_and_names_its_base(checkpoints, tmp_path):
    from t2t import config
    from t2t.checkpoints import native
    from t2t.testing import in_memory_task, temporarily_registered, tiny_vocabulary
    from t2t.training.train import TrainConfig, train

    prefix = str(checkpoints["t5_1_1"][0] / "model.ckpt-1000")
    assert own_vocabulary(prefix) is None  # a t5 library checkpoint carries no vocabulary of its own
    rows = [{"inputs": "copy: a cat", "targets": "a cat"}] * 4
    settings = config.from_dict(TrainConfig, dict(
        mixture="mesh_tf_copy", init_from=prefix, vocab=str(tiny_vocabulary().path), output_dir=str(tmp_path / "run"),
        train_steps=1, batch_size=2, input_length=8, target_length=8, pack=False, log_every=1,
        optimizer={"name": "adamw", "learning_rate": 1e-3}))
    with temporarily_registered(in_memory_task("mesh_tf_copy", {"train": rows})):
        train(settings)
    trained = load_model(tmp_path / "run")
    assert trained.config == load_model(prefix).config
    assert native.read_settings(tmp_path / "run")["init_from"] == prefix


# ----------------------------------------------------------------------------------------------------------
# One sentence each


def one_sentence(error: pytest.ExceptionInfo, *names) -> str:
    message = str(error.value)
    assert "\n" not in message and "Traceback" not in message, message
    for name in names:
        assert str(name) in message, message
    return message


@pytest.fixture
def copied(checkpoints, tmp_path) -> Path:
    return Path(shutil.copytree(checkpoints["t5_1_0"][0], tmp_path / "tf"))


def test_without_tensorflow_the_extra_is_named(monkeypatch, copied):
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    with pytest.raises(T2TError) as e:
        mesh_tf.from_mesh_tf(copied)
    one_sentence(e, "pip install 't2t[tf]'")


def test_a_missing_data_file_or_index_is_named(copied):
    """Also: the copy's state file names the original's absolute path (as the released checkpoints name
    gs://…), yet the files are looked for beside it, so deleting the copy's data file is noticed."""
    data = copied / "model.ckpt-1000.data-00000-of-00001"
    data.unlink()
    with pytest.raises(T2TError) as e:
        load_model(copied)
    one_sentence(e, f"lacks its data file {data}", "partial")
    (copied / "model.ckpt-1000.index").unlink()
    with pytest.raises(T2TError) as e:
        mesh_tf.from_mesh_tf(copied)
    one_sentence(e, f"lacks its index file {copied / 'model.ckpt-1000.index'}")


def test_a_truncated_data_file_is_named(copied):
    data = copied / "model.ckpt-1000.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:1000])
    with pytest.raises(T2TError) as e:
        mesh_tf.from_mesh_tf(copied / "model.ckpt-1000")
    one_sentence(e, f"of TensorFlow checkpoint {copied / 'model.ckpt-1000'} cannot be read", "truncated or damaged")


def test_an_index_that_is_not_a_checkpoint_is_one_sentence(tmp_path):
    (tmp_path / "model.ckpt-5.index").write_bytes(b"not an sstable" * 10)
    (tmp_path / "model.ckpt-5.data-00000-of-00001").write_bytes(b"")
    with pytest.raises(T2TError) as e:
        load_model(tmp_path / "model.ckpt-5")
    one_sentence(e, f"TensorFlow checkpoint {tmp_path / 'model.ckpt-5'} cannot be read", "not a TensorFlow")


def test_a_state_file_naming_no_checkpoint_is_one_sentence(tmp_path):
    (tmp_path / "checkpoint").write_text('model_checkpoint_path_typo: "model.ckpt-1"\n')
    with pytest.raises(T2TError) as e:
        load_model(tmp_path)
    one_sentence(e, tmp_path / "checkpoint", "model_checkpoint_path")


def test_a_variable_that_is_not_t5s_is_refused_by_name(checkpoints, tmp_path):
    tf = pytest.importorskip("tensorflow")
    _, _, hf = checkpoints["t5_1_0"]
    variables = mesh_tf_variables(hf.state_dict(), "layer_norm", "final_layer_norm", False)
    variables["encoder/block_000/layer_000/SelfAttention/q_extra"] = np.zeros((2, 2), np.float32)
    prefix = save_tf_checkpoint(tf, tmp_path / "tf", variables)
    with pytest.raises(T2TError) as e:
        mesh_tf.from_mesh_tf(prefix)
    one_sentence(e, "(encoder/block_000/layer_000/SelfAttention/q_extra)", "t5 library")


@pytest.mark.parametrize("name, key", [
    ("encoder/block_011/layer_001/DenseReluDense/wi_1/kernel", "encoder.blocks.11.ff.wi_1.weight"),
    ("decoder/block_002/layer_001/EncDecAttention/o", "decoder.blocks.2.cross_attn.o.weight"),
    ("decoder/block_002/layer_002/layer_norm/scale", "decoder.blocks.2.ff.layer_norm.weight"),
    ("decoder/block_000/enc_dec_attention/rms_norm/scale", "decoder.blocks.0.cross_attn.layer_norm.weight"),
    ("encoder/final_layer_norm/scale", "encoder.final_layer_norm.weight"),
    ("encoder/block_001/layer_000/SelfAttention/relative_attention_bias", None),  # only the first block has one
    ("encoder/block_000/layer_002/DenseReluDense/wo/kernel", None),  # an encoder block has two layers
    ("encoder/block_000/enc_dec_attention/EncDecAttention/q", None),
    ("encoder/block_000/layer_000/DenseReluDense/wo/kernel", None),  # layer_000 is the attention
    ("encoder/embedding", None),
])
def test_mesh_tf_names(name, key):
    assert mesh_tf.mesh_tf_key(name) == key
