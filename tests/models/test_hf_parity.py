"""Hugging Face conversion: ``t2t.from_hf`` / ``t2t.to_hf`` against transformers' own T5.

Random tiny ``T5ForConditionalGeneration`` models (T5 1.0: ReLU, tied and rescaled output layer; T5 1.1:
gated-GELU, separate ``lm_head``) are saved with ``save_pretrained`` (and as a legacy ``pytorch_model.bin``)
and loaded through t2t; logits must agree on padded sequences longer than ``relative_attention_max_distance``
(so the far, logarithmic buckets are used) and greedy decodes must equal ``generate``'s.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

transformers = pytest.importorskip(
    "transformers", reason="HF parity tests need transformers (pip install -e '.[hf]' or '.[test]')")

import t2t  # noqa: E402
from t2t.checkpoints import native as checkpoint  # noqa: E402
from t2t.checkpoints.files import read_safetensors  # noqa: E402
from t2t.checkpoints.loading import load_model  # noqa: E402
from t2t.errors import T2TError  # noqa: E402
from t2t.models import kernels  # noqa: E402
from t2t.models.t5 import T5, ModelConfig  # noqa: E402

transformers.logging.set_verbosity_error()
logging.getLogger("transformers").setLevel(logging.ERROR)

VOCAB = 160
TINY = dict(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=3, num_heads=4,
            relative_attention_num_buckets=32, relative_attention_max_distance=128, dropout_rate=0.0)
STYLES = {"t5_1_0": dict(feed_forward_proj="relu", tie_word_embeddings=True),
          "t5_1_1": dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False)}


def random_hf_model(style: str, seed: int = 0, **overrides):
    """A random transformers T5 in eval mode; T5 1.1 gets its own ``lm_head`` (transformers >= 5 would
    otherwise share the embedding's tensor)."""
    torch.manual_seed(seed)
    cfg = transformers.T5Config(**{**TINY, **overrides}, **STYLES[style], decoder_start_token_id=0, pad_token_id=0,
                                eos_token_id=1)
    model = transformers.T5ForConditionalGeneration(cfg).eval()
    if not STYLES[style]["tie_word_embeddings"]:
        model.lm_head.weight = torch.nn.Parameter(torch.randn(VOCAB, TINY["d_model"]))
    return model


def hf_greedy(hf, enc: torch.Tensor, max_new_tokens: int, **kwargs) -> torch.Tensor:
    """transformers' decode of ``enc`` (greedy unless ``kwargs`` say otherwise), without the start token."""
    with torch.no_grad():
        return hf.generate(input_ids=enc, attention_mask=(enc != 0).long(), max_new_tokens=max_new_tokens,
                           do_sample=False, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                           **{"num_beams": 1, **kwargs})[:, 1:]


def with_likely_eos(hf, enc: torch.Tensor, max_new_tokens: int):
    """``hf`` with its output row for EOS scaled until its greedy decodes of ``enc`` end at EOS on some rows
    and run to ``max_new_tokens`` on others, so that a decoding test sees early stops and padding. The factor
    is searched, not fixed: random models differ between transformers 4 and 5 (their initialisation), and a
    factor that makes one stop makes the other never stop; a negative one serves where the decoder's states
    point away from the row."""
    row = hf.get_output_embeddings().weight[1]
    original = row.detach().clone()
    for factor in (1.0, 2.0, -2.0, 4.0, -4.0, 1.5, -1.5, 3.0, -3.0, 6.0, -6.0, 8.0, -8.0, 12.0, -12.0):
        with torch.no_grad():
            row.copy_(original * factor)
        ids = hf_greedy(hf, enc, max_new_tokens)
        stopped = (ids == 1).any(1)
        if stopped.any() and not stopped.all():
            return hf
    raise AssertionError("no EOS factor gives both early stops and full-length decodes; change the seed")


def batch(seed: int = 1, enc_len: int = 200, dec_len: int = 150):
    """Two rows; the second one padded (encoder: 120 real tokens, decoder: 90)."""
    g = torch.Generator().manual_seed(seed)
    enc = torch.randint(2, VOCAB, (2, enc_len), generator=g)
    dec = torch.randint(2, VOCAB, (2, dec_len), generator=g)
    dec[:, 0] = 0  # the decoder's first input is the start id (= pad id)
    enc[1, 120:] = 0
    dec[1, 90:] = 0
    return enc, dec


def hf_logits(model, enc, dec) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=enc, attention_mask=(enc != 0).long(), decoder_input_ids=dec,
                     decoder_attention_mask=torch.ones_like(dec)).logits


def t2t_logits(model: T5, enc, dec) -> torch.Tensor:
    with torch.no_grad():
        return model(enc, dec)


def assert_same_logits(ours: torch.Tensor, theirs: torch.Tensor, dec: torch.Tensor) -> None:
    # decoder padding sits at the end and causality hides it from the real positions: compare those
    real = torch.ones_like(dec, dtype=torch.bool)
    real[1, 90:] = False
    a, b = ours[real], theirs[real]
    rel = ((a - b).abs().max() / b.abs().max()).item()
    assert rel < 1e-4, f"relative difference {rel:.2e}"


@pytest.fixture(params=sorted(STYLES))
def style(request) -> str:
    return request.param


# ----------------------------------------------------------------------------------------------------------
# from_hf


@pytest.mark.parametrize("kind", kernels.KINDS)
def test_from_hf_safetensors_same_logits_on_long_padded_sequences(tmp_path, style, kind):
    hf = random_hf_model(style)
    hf.save_pretrained(tmp_path / "hf")
    model = kernels.apply(t2t.from_hf(tmp_path / "hf"), kind)
    assert isinstance(model, t2t.T5)
    assert model.config == ModelConfig(**TINY, **STYLES[style])
    enc, dec = batch()
    assert enc.shape[1] > TINY["relative_attention_max_distance"] < dec.shape[1]
    assert_same_logits(t2t_logits(model.eval(), enc, dec), hf_logits(hf, enc, dec), dec)


def test_from_hf_legacy_pytorch_model_bin(tmp_path, style):
    """What transformers 4.x wrote: pytorch_model.bin with every tied copy (and the unused cross-attention
    bias), config with tie_word_embeddings false for T5 1.1; loaded with weights_only=True."""
    hf = random_hf_model(style, seed=3)
    folder = tmp_path / "hf_bin"
    folder.mkdir()
    state = {k: v.clone() for k, v in hf.state_dict().items()}
    state["encoder.embed_tokens.weight"] = state["shared.weight"].clone()
    state["decoder.embed_tokens.weight"] = state["shared.weight"].clone()
    if STYLES[style]["tie_word_embeddings"]:
        state["lm_head.weight"] = state["shared.weight"].clone()
    state["decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight"] = torch.zeros(32, 4)
    torch.save(state, folder / "pytorch_model.bin")
    legacy_config = {"architectures": ["T5ForConditionalGeneration"], "model_type": "t5", **TINY,
                     **STYLES[style], "n_positions": 512, "decoder_start_token_id": 0, "pad_token_id": 0,
                     "eos_token_id": 1}
    (folder / "config.json").write_text(json.dumps(legacy_config))
    model = t2t.from_hf(folder)
    enc, dec = batch(seed=4)
    assert_same_logits(t2t_logits(model.eval(), enc, dec), hf_logits(hf, enc, dec), dec)


def test_from_hf_sharded_safetensors(tmp_path):
    hf = random_hf_model("t5_1_1", seed=5)
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="30KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    model = t2t.from_hf(tmp_path / "sharded")
    enc, dec = batch(seed=6)
    assert_same_logits(t2t_logits(model.eval(), enc, dec), hf_logits(hf, enc, dec), dec)


def assert_same_ids(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    """Equal decodes, the shorter one padded (0) to the longer one's width."""
    width = max(ours.shape[1], theirs.shape[1])
    ours = torch.nn.functional.pad(ours, (0, width - ours.shape[1]))
    theirs = torch.nn.functional.pad(theirs, (0, width - theirs.shape[1]))
    assert torch.equal(ours, theirs), f"\nours   {ours.tolist()}\ntheirs {theirs.tolist()}"


def padded_inputs(seed: int, rows_lengths=(140, 100, 60, 20, 5, 1)) -> torch.Tensor:
    enc = torch.randint(2, VOCAB, (len(rows_lengths), max(rows_lengths)), generator=torch.Generator().manual_seed(seed))
    for row, length in enumerate(rows_lengths):
        enc[row, length:] = 0
    return enc


@pytest.mark.parametrize("kind", kernels.KINDS)
def test_from_hf_same_greedy_decodes_as_generate(tmp_path, style, kind):
    # EOS made likely, so early stops and padding happen; 2+2 layers because transformers' generate cannot
    # build its cache for fewer encoder than decoder layers (num_hidden_layers is the encoder's count)
    enc = padded_inputs(seed=12)
    hf = with_likely_eos(random_hf_model(style, seed=11, num_decoder_layers=2), enc, 24)
    hf.save_pretrained(tmp_path / "hf")
    model = kernels.apply(t2t.from_hf(tmp_path / "hf").eval(), kind)
    with torch.no_grad():
        ours = model.generate(enc, max_new_tokens=24)
    theirs = hf_greedy(hf, enc, 24)
    assert_same_ids(ours, theirs)
    assert (theirs == 1).any(1).any() and not (theirs == 1).any(1).all()


def test_from_hf_hub_id_goes_through_snapshot_download(tmp_path, monkeypatch, style):
    import huggingface_hub

    hf = random_hf_model(style, seed=13)
    hf.save_pretrained(tmp_path / "snapshot")
    calls = []

    def fake_snapshot_download(repo_id, **kwargs):
        calls.append((repo_id, kwargs))
        return str(tmp_path / "snapshot")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    model = t2t.from_hf("google/t5-tiny-random")
    assert calls[0][0] == "google/t5-tiny-random"
    assert "config.json" in calls[0][1]["allow_patterns"]
    assert not any("bin" in p for p in calls[0][1]["allow_patterns"])  # safetensors only when present
    enc, dec = batch(seed=14)
    assert_same_logits(t2t_logits(model.eval(), enc, dec), hf_logits(hf, enc, dec), dec)
    # load_model takes hub ids too
    assert load_model("google/t5-tiny-random").config == model.config


def test_hub_repo_with_only_pytorch_model_bin_is_downloaded_in_a_second_pass(tmp_path, monkeypatch):
    import huggingface_hub

    hf = random_hf_model("t5_1_0", seed=15)
    folder = tmp_path / "snapshot"
    hf.save_pretrained(folder)
    state = read_safetensors(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    patterns = []

    def fake_snapshot_download(repo_id, allow_patterns=None, **kwargs):
        patterns.append(allow_patterns)
        return str(folder)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    model = t2t.from_hf("someone/t5-bin-only")
    assert len(patterns) == 2 and any("bin" in p for p in patterns[1])
    enc, dec = batch(seed=16)
    assert_same_logits(t2t_logits(model.eval(), enc, dec), hf_logits(hf, enc, dec), dec)


# ----------------------------------------------------------------------------------------------------------
# to_hf


# What save_pretrained writes of one model (checked with transformers 4.57.6 and 5.24.0): the weights hold
# shared.weight, plus lm_head.weight when the output layer is a separate tensor. config.json differs:
#   4.x: tie_word_embeddings is written where it differs from the class's default (T5 and UMT5: true, mT5:
#        false) or from PretrainedConfig's (true), so T5 1.0 has no such key and mT5 always has it; there is
#        no scale_decoder_outputs.
#   5.x: "tie_word_embeddings": true for every model; T5 and UMT5 keep the rescale in "scale_decoder_outputs",
#        MT5 never rescales. A T5 1.1 model created by 5.x shares lm_head with the embedding (unscaled), so
#        only shared.weight is stored.
HF_CASES = [("t5_1_0", "4.x"), ("t5_1_1", "4.x"), ("t5_1_0", "5.x"), ("t5_1_1", "5.x"),
            ("t5_1_1_shared_head", "5.x")]


def as_written_by(config: dict, writer: str, scaled: bool) -> dict:
    """The config.json ``config`` of a model, as transformers ``writer`` ("4.x" or "5.x") writes that model;
    ``scaled``: whether its output is rescaled by d_model**-0.5 (T5 1.0's tied output layer)."""
    config = {k: v for k, v in config.items() if k not in ("tie_word_embeddings", "scale_decoder_outputs")}
    mt5 = config["model_type"] == "mt5"
    if writer == "5.x":
        assert not (mt5 and scaled), "transformers 5's MT5 has no rescaled output layer"
        config.update(tie_word_embeddings=True, transformers_version="5.24.0")
        if not mt5:
            config["scale_decoder_outputs"] = scaled
    else:
        config["transformers_version"] = "4.57.6"
        if mt5 or not scaled:
            config["tie_word_embeddings"] = scaled
    return config


def rewrite_config(folder: Path, writer: str, scaled: bool) -> None:
    """Rewrite ``folder``'s config.json (saved by the installed transformers) as ``writer`` writes it."""
    path = folder / "config.json"
    path.write_text(json.dumps(as_written_by(json.loads(path.read_text()), writer, scaled), indent=2))


def saved_hf_model(folder: Path, style: str, writer: str, seed: int):
    """A random transformers T5 saved with save_pretrained in ``writer``'s format; returns the model. The
    shared-head style is what transformers 5 makes of a T5 1.1 config: the output layer is the embedding
    (not rescaled), and the file has no lm_head.weight."""
    if style == "t5_1_1_shared_head":
        torch.manual_seed(seed)
        hf = transformers.T5ForConditionalGeneration(transformers.T5Config(**TINY, **STYLES["t5_1_1"])).eval()
        hf.lm_head.weight = hf.shared.weight
        hf.save_pretrained(folder)
        state = read_safetensors(folder / "model.safetensors")
        if "lm_head.weight" in state:
            del state["lm_head.weight"]
            save_file(state, str(folder / "model.safetensors"), {"format": "pt"})
    else:
        hf = random_hf_model(style, seed=seed)
        hf.save_pretrained(folder)
    rewrite_config(folder, writer, scaled=style == "t5_1_0")
    return hf


def load_in_transformers(folder: Path):
    loaded, info = transformers.T5ForConditionalGeneration.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    return loaded.eval()


@pytest.mark.parametrize("style,writer", HF_CASES)
def test_round_trip_transformers_to_t2t_to_transformers(tmp_path, style, writer):
    hf = saved_hf_model(tmp_path / "hf", style, writer, seed=22)
    model = t2t.from_hf(tmp_path / "hf").eval()
    assert model.config == ModelConfig(**TINY, **STYLES[style.removesuffix("_shared_head")])
    enc, dec = batch(seed=23)
    expected = hf_logits(hf, enc, dec)
    assert_same_logits(t2t_logits(model, enc, dec), expected, dec)
    out = t2t.to_hf(model, tmp_path / "out")
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "t5" and config["architectures"] == ["T5ForConditionalGeneration"]
    assert (config["decoder_start_token_id"], config["pad_token_id"], config["eos_token_id"]) == (0, 0, 1)
    assert config["is_encoder_decoder"] is True
    assert_same_logits(hf_logits(load_in_transformers(out), enc, dec), expected, dec)
    # the run format too: an untied lm_head is its own tensor, so safetensors saves it beside the embedding
    checkpoint.save_checkpoint(tmp_path / "run", 1, model)
    assert_same_logits(t2t_logits(load_model(tmp_path / "run"), enc, dec), expected, dec)


@pytest.mark.parametrize("style,writer", [case for case in HF_CASES if case[0] in STYLES])
def test_round_trip_t2t_to_transformers_to_t2t(tmp_path, style, writer):
    torch.manual_seed(21)
    model = T5(ModelConfig(**TINY, **STYLES[style])).eval()
    loaded = load_in_transformers(t2t.to_hf(model, tmp_path / "out"))
    enc, dec = batch(seed=24)
    assert_same_logits(t2t_logits(model, enc, dec), hf_logits(loaded, enc, dec), dec)
    loaded.save_pretrained(tmp_path / "resaved")
    rewrite_config(tmp_path / "resaved", writer, scaled=style == "t5_1_0")
    again = t2t.from_hf(tmp_path / "resaved")
    assert again.config == model.config
    for (k, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), k


def test_to_hf_copies_the_vocabulary(tmp_path):
    from t2t.testing import tiny_vocabulary

    vocab = tiny_vocabulary()
    model = T5(ModelConfig(**{**TINY, "vocab_size": vocab.vocab_size}))
    out = t2t.to_hf(model, tmp_path / "out", vocabulary=vocab)
    assert (out / "spiece.model").read_bytes() == Path(vocab.path).read_bytes()
    assert json.loads((out / "tokenizer_config.json").read_text())["extra_ids"] == 100
    pytest.importorskip("google.protobuf", reason="transformers needs protobuf to convert spiece.model into a "
                                                   "T5 tokenizer")
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    text = "the quick brown fox"
    assert tokenizer(text, add_special_tokens=False).input_ids == vocab.encode(text)
    assert tokenizer.convert_tokens_to_ids("<extra_id_0>") == vocab.sentinel_id(0)


# ----------------------------------------------------------------------------------------------------------
# unsupported or damaged Hugging Face folders → one T2TError naming the file


def _write_config(folder: Path, **changes) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps({"model_type": "t5", **TINY, **changes}))
    return path


@pytest.mark.parametrize("changes, needle", [
    ({"model_type": "bart"}, "'bart'"),
    ({"model_type": None}, "None"),
    ({"feed_forward_proj": "gated-silu"}, "gated-silu"),
    ({"d_model": "wide"}, "d_model"),
])
def test_unsupported_configs(tmp_path, changes, needle):
    path = _write_config(tmp_path / "hf", **changes)
    with pytest.raises(T2TError) as e:
        t2t.from_hf(tmp_path / "hf")
    message = str(e.value)
    assert str(path) in message and needle in message and "\n" not in message


def test_weights_that_do_not_match_the_config(tmp_path):
    hf = random_hf_model("t5_1_0", seed=31)
    hf.save_pretrained(tmp_path / "hf")
    _write_config(tmp_path / "hf", d_ff=48, **STYLES["t5_1_0"])
    with pytest.raises(T2TError) as e:
        t2t.from_hf(tmp_path / "hf")
    message = str(e.value)
    assert str(tmp_path / "hf" / "model.safetensors") in message
    assert "encoder.block.0.layer.1.DenseReluDense.wi.weight has shape [64, 32], expected [48, 32]" in message


def test_t5_1_1_weights_under_a_t5_1_0_config(tmp_path):
    hf = random_hf_model("t5_1_1", seed=32)
    hf.save_pretrained(tmp_path / "hf")
    _write_config(tmp_path / "hf", **STYLES["t5_1_0"])
    with pytest.raises(T2TError) as e:
        t2t.from_hf(tmp_path / "hf")
    message = str(e.value)
    assert "model.safetensors" in message and "wi.weight is missing" in message


def test_truncated_hf_safetensors(tmp_path):
    hf = random_hf_model("t5_1_0", seed=33)
    hf.save_pretrained(tmp_path / "hf")
    file = tmp_path / "hf" / "model.safetensors"
    file.write_bytes(file.read_bytes()[:1000])
    with pytest.raises(T2TError) as e:
        t2t.from_hf(tmp_path / "hf")
    assert str(file) in str(e.value)


def test_folder_without_weights_or_config(tmp_path):
    _write_config(tmp_path / "hf")
    with pytest.raises(T2TError, match="has no model.safetensors or pytorch_model.bin"):
        t2t.from_hf(tmp_path / "hf")
    (tmp_path / "empty").mkdir()
    with pytest.raises(T2TError, match="has no config.json"):
        t2t.from_hf(tmp_path / "empty")


def test_untied_output_layer_under_a_tied_config(tmp_path):
    hf = random_hf_model("t5_1_0", seed=34)
    hf.save_pretrained(tmp_path / "hf")
    file = tmp_path / "hf" / "model.safetensors"
    state = read_safetensors(file)
    state["lm_head.weight"] = torch.randn(VOCAB, TINY["d_model"])
    save_file(state, str(file))
    with pytest.raises(T2TError) as e:
        t2t.from_hf(tmp_path / "hf")
    assert str(file) in str(e.value) and "lm_head.weight different from shared.weight" in str(e.value)
