"""The network: presets and parameter counts, parity with transformers' T5 on copied weights, packing, loss."""

import re

import pytest
import torch
import torch.nn.functional as F

from t2t import config as config_lib
from t2t.errors import T2TError
from t2t.models.presets import ModelConfig, resolve_model_config
from t2t.models.t5 import T5, relative_position_bucket

transformers = pytest.importorskip("transformers")

TINY = dict(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, dropout_rate=0.0)


# ---- HF pair: a random transformers T5 and the same weights in ours ------------------------------------


def _hf_to_ours(state: dict, tied: bool) -> dict:
    """HF key → ours, written independently of t2t.checkpoints.hf (the table in t2t/models/t5.py's docstring)."""
    rules = [
        (r"(encoder|decoder)\.block\.0\.layer\.0\.SelfAttention\.relative_attention_bias", r"\1.relative_attention_bias"),
        (r"\.block\.(\d+)\.layer\.0\.SelfAttention\.", r".blocks.\1.self_attn."),
        (r"\.block\.(\d+)\.layer\.0\.layer_norm", r".blocks.\1.self_attn.layer_norm"),
        (r"decoder\.block\.(\d+)\.layer\.1\.EncDecAttention\.", r"decoder.blocks.\1.cross_attn."),
        (r"decoder\.block\.(\d+)\.layer\.1\.layer_norm", r"decoder.blocks.\1.cross_attn.layer_norm"),
        (r"decoder\.block\.(\d+)\.layer\.2\.", r"decoder.blocks.\1.layer.FF."),
        (r"encoder\.block\.(\d+)\.layer\.1\.", r"encoder.blocks.\1.layer.FF."),
        (r"layer\.FF\.DenseReluDense\.", "ff."),
        (r"layer\.FF\.layer_norm", "ff.layer_norm"),
    ]
    out = {}
    for key, value in state.items():
        if key.endswith("embed_tokens.weight") or (tied and key == "lm_head.weight"):
            continue
        for pattern, repl in rules:
            key = re.sub(pattern, repl, key)
        out[key] = value
    return out


def hf_pair(feed_forward_proj="relu", tied=True, seed=0, eos_boost=1.0, kernels="auto", **overrides):
    """(hf_model, our_model) in eval mode with identical weights, copied by this test's own key map (so a
    fault in t2t's conversion code, tested in tests/checkpoints/test_hf.py, cannot hide one in the model)."""
    kw = {**TINY, **overrides}
    torch.manual_seed(seed)
    hf_cfg = transformers.T5Config(**kw, feed_forward_proj=feed_forward_proj, tie_word_embeddings=tied,
                                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    hf = transformers.T5ForConditionalGeneration(hf_cfg).eval()
    with torch.no_grad():  # make EOS a frequent arg-max so early stopping and padding get exercised
        hf.shared.weight[1] *= eos_boost
        if not tied:
            hf.lm_head.weight[1] *= eos_boost
    if not tied:  # transformers 5 ties lm_head to shared whatever the config says (it only drops the rescale)
        hf.lm_head.weight = torch.nn.Parameter(hf.lm_head.weight.detach().clone())
    ours = T5(ModelConfig(**kw, feed_forward_proj=feed_forward_proj, tie_word_embeddings=tied, kernels=kernels))
    ours.load_state_dict(_hf_to_ours(hf.state_dict(), tied), strict=True)
    return hf, ours.eval()


def rel_diff(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


# ---- presets ----------------------------------------------------------------------------------------------

PAPER = {"t5-small": 60e6, "t5-base": 220e6, "t5-large": 770e6, "t5-3b": 2.8e9, "t5-11b": 11e9}
RELEASED = {  # parameter counts of the released checkpoints (google-t5/t5-*, google/t5-v1_1-*)
    "t5-small": 60_506_624, "t5-base": 222_903_552, "t5-large": 737_668_096, "t5-3b": 2_851_598_336,
    "t5-11b": 11_307_321_344, "t5.1.1-small": 76_961_152, "t5.1.1-base": 247_577_856,
    "t5.1.1-large": 783_150_080, "t5.1.1-xl": 2_849_757_184, "t5.1.1-xxl": 11_135_332_352,
}


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_preset_parameter_counts(name):
    with torch.device("meta"):
        model = T5(resolve_model_config(name))
    n = model.num_parameters()
    assert n == RELEASED[name]
    if name in PAPER:  # the paper's rounded sizes (t5-large is 738M; the paper says 770M)
        assert abs(n / PAPER[name] - 1) < 0.05


def test_every_model_config_loads():
    names = config_lib.config_names("models")
    assert {"t5-tiny", "t5-small", "t5.1.1-xxl"} <= set(names)
    for name in names:
        cfg = resolve_model_config(name)
        assert cfg.d_model > 0 and cfg.vocab_size > 0
        if name.startswith("t5"):  # the paper's presets use T5's vocabulary (32,100 ids padded to 32,128)
            assert cfg.vocab_size == 32128


def test_unknown_config_key_is_an_error(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("d_model: 64\nnum_layer: 2\n")
    with pytest.raises(T2TError, match="num_layer"):
        resolve_model_config(path)
    with pytest.raises(T2TError):
        resolve_model_config("t5-nonexistent")


def test_meta_build_and_from_config():
    model = T5.from_config("t5-tiny", device="meta")
    assert next(model.parameters()).device.type == "meta"
    assert T5.from_config(ModelConfig(**TINY)).num_parameters() > 0


def test_init_follows_mesh_tf():
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=64, d_kv=16, d_ff=256, num_layers=2, num_heads=4, vocab_size=4000)
    m = T5(cfg)
    assert abs(m.shared.weight.std().item() - 1.0) < 0.02
    q = m.encoder.blocks[0].self_attn.q.weight
    assert abs(q.std().item() / (64 * 16) ** -0.5 - 1) < 0.1
    assert abs(m.encoder.blocks[0].ff.wo.weight.std().item() / 256 ** -0.5 - 1) < 0.1
    assert torch.all(m.decoder.final_layer_norm.weight == 1)


def test_relative_bias_stored_once_per_stack():
    m = T5(ModelConfig(**TINY))
    keys = [k for k in m.state_dict() if "relative_attention_bias" in k]
    assert keys == ["encoder.relative_attention_bias.weight", "decoder.relative_attention_bias.weight"]


def test_buckets_match_transformers():
    hf_bucket = transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket
    rel = torch.arange(-400, 401)[None, :]
    for bidirectional in (True, False):
        assert torch.equal(relative_position_bucket(rel, bidirectional, 32, 128),
                           hf_bucket(rel, bidirectional=bidirectional, num_buckets=32, max_distance=128))


@pytest.mark.parametrize("bidirectional", [True, False])
def test_position_bias_is_each_pairs_bucket_of_the_table(bidirectional):
    """The bias read through the table over distances is, for every pair of per-row positions (packed rows
    restart them; distances beyond ``max_distance`` included), the table's row of the pair's bucket, and its
    gradient reaches the same rows of the table."""
    stack = T5(ModelConfig(**TINY, relative_attention_num_buckets=8, relative_attention_max_distance=6)).encoder
    generator = torch.Generator().manual_seed(0)
    q_pos = torch.randint(0, 20, (3, 20), generator=generator)
    k_pos = torch.randint(0, 24, (3, 24), generator=generator)
    bias = stack.position_bias(q_pos, k_pos, bidirectional)
    buckets = relative_position_bucket(k_pos[:, None, :] - q_pos[:, :, None], bidirectional, stack.num_buckets, 6)
    expected = stack.relative_attention_bias(buckets).permute(0, 3, 1, 2)
    assert torch.equal(bias, expected)
    weights = torch.randint(-3, 4, bias.shape, generator=generator).float()  # integers: sums exact in any order
    by_distance, = torch.autograd.grad((bias * weights).sum(), stack.relative_attention_bias.weight)
    by_bucket, = torch.autograd.grad((expected * weights).sum(), stack.relative_attention_bias.weight)
    assert torch.equal(by_distance, by_bucket)


# ---- parity with transformers -----------------------------------------------------------------------------


@pytest.mark.parametrize("kernels", ["auto", "plain"])
@pytest.mark.parametrize("ff,tied", [("relu", True), ("gated-gelu", False)])
def test_logits_match_transformers(ff, tied, kernels):
    hf, ours = hf_pair(ff, tied, kernels=kernels)
    g = torch.Generator().manual_seed(1)
    enc = torch.randint(2, 128, (3, 300), generator=g)  # > 128: the log-spaced, far buckets are used
    enc[1, 200:] = 0
    enc[2, 17:] = 0
    dec = torch.randint(2, 128, (3, 150), generator=g)
    dec[:, 0] = 0
    with torch.no_grad():
        expected = hf(input_ids=enc, attention_mask=(enc != 0).long(), decoder_input_ids=dec).logits
        got = ours(enc, dec)
    assert got.shape == (3, 150, 128)
    assert rel_diff(got, expected) < 1e-4


def test_packed_rows_equal_separate_examples():
    torch.manual_seed(0)
    model = T5(ModelConfig(**TINY)).eval()
    g = torch.Generator().manual_seed(2)
    a_in, b_in = torch.randint(2, 128, (1, 140), generator=g), torch.randint(2, 128, (1, 9), generator=g)
    a_tg, b_tg = torch.randint(2, 128, (1, 12), generator=g), torch.randint(2, 128, (1, 5), generator=g)

    def shift(t):
        return torch.cat([torch.zeros_like(t[:, :1]), t[:, :-1]], 1)

    pad_in, pad_tg = torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long)
    enc = torch.cat([a_in, b_in, pad_in], 1)
    dec = torch.cat([shift(a_tg), shift(b_tg), pad_tg], 1)
    seg = lambda n1, n2, n0: torch.tensor([[1] * n1 + [2] * n2 + [0] * n0])  # noqa: E731
    pos = lambda n1, n2, n0: torch.tensor([list(range(n1)) + list(range(n2)) + [0] * n0])  # noqa: E731
    with torch.no_grad():
        packed = model(enc, dec, encoder_segment_ids=seg(140, 9, 3), decoder_segment_ids=seg(12, 5, 2),
                       encoder_positions=pos(140, 9, 3), decoder_positions=pos(12, 5, 2))
        alone_a = model(a_in, shift(a_tg))
        alone_b = model(b_in, shift(b_tg))
    assert rel_diff(packed[:, :12], alone_a) < 1e-5
    assert rel_diff(packed[:, 12:17], alone_b) < 1e-5
    assert torch.isfinite(packed).all()


def padded_batch(seed: int, input_length: int, target_length: int, padded_row: int, padded_from: int) -> dict:
    """Two random rows of model features for TINY, one target row padded from ``padded_from`` on."""
    g = torch.Generator().manual_seed(seed)
    targets = torch.randint(2, 128, (2, target_length), generator=g)
    targets[padded_row, padded_from:] = 0
    return {"encoder_input_tokens": torch.randint(2, 128, (2, input_length), generator=g),
            "decoder_input_tokens": torch.cat([torch.zeros(2, 1, dtype=torch.long), targets[:, :-1]], 1),
            "decoder_target_tokens": targets, "decoder_loss_weights": (targets != 0).long()}


def test_loss_sums_equals_cross_entropy_of_forward():
    torch.manual_seed(0)
    model = T5(ModelConfig(**TINY)).eval()
    batch = padded_batch(3, input_length=11, target_length=7, padded_row=1, padded_from=4)
    targets = batch["decoder_target_tokens"]
    loss, weight = model.loss_sums(batch)
    logits = model(batch["encoder_input_tokens"], batch["decoder_input_tokens"])
    ce = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    assert weight.item() == 11
    assert torch.allclose(loss, (ce * batch["decoder_loss_weights"]).sum(), rtol=1e-5)
    loss.backward()
    assert model.shared.weight.grad is not None and model.encoder.relative_attention_bias.weight.grad is not None


@pytest.mark.parametrize("kernels", ["auto", "plain"])
@pytest.mark.parametrize("ff,tied", [("relu", True), ("gated-gelu", False)])
def test_gradients_match_transformers_with_one_embedding_lookup(ff, tied, kernels):
    """Every parameter's gradient of the training loss is transformers' on the same weights, and the encoder's
    and decoder's tokens are looked up in one call (``T5._embed``: one dense table gradient, not one per stack
    summed)."""
    hf, ours = hf_pair(ff, tied, kernels=kernels)
    batch = padded_batch(4, input_length=13, target_length=6, padded_row=1, padded_from=3)
    lookups = []
    ours.shared.register_forward_hook(lambda module, args, out: lookups.append(args[0].shape))
    ours.loss_sums(batch)[0].backward()
    enc, dec, targets = (batch[k] for k in ("encoder_input_tokens", "decoder_input_tokens", "decoder_target_tokens"))
    logits = hf(input_ids=enc, attention_mask=torch.ones_like(enc), decoder_input_ids=dec).logits
    ce = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    (ce * batch["decoder_loss_weights"]).sum().backward()
    assert lookups == [torch.Size([2 * 13 + 2 * 6])]
    hf_grads = _hf_to_ours({name: p.grad for name, p in hf.named_parameters()}, tied)
    ours_grads = {name: p.grad for name, p in ours.named_parameters()}
    assert ours_grads.keys() == hf_grads.keys()
    for name, grad in ours_grads.items():
        assert rel_diff(grad, hf_grads[name]) < 1e-4, name


def test_z_loss_adds_t5s_log_z_squared_to_each_target_and_its_gradient():
    """mesh-tf's softmax_cross_entropy_with_logits(z_loss): each weighted position adds z_loss · log(Z)²."""
    torch.manual_seed(0)
    model = T5(ModelConfig(**TINY)).eval()
    batch = padded_batch(5, input_length=9, target_length=6, padded_row=0, padded_from=3)
    targets = batch["decoder_target_tokens"]
    logits = model(batch["encoder_input_tokens"], batch["decoder_input_tokens"]).transpose(1, 2)
    weights = batch["decoder_loss_weights"]
    expected = ((F.cross_entropy(logits, targets, reduction="none") + 0.1 * logits.logsumexp(1) ** 2) * weights).sum()
    expected_grad = torch.autograd.grad(expected, model.shared.weight)[0]
    loss, weight = model.loss_sums(batch, z_loss=0.1)
    plain, _ = model.loss_sums(batch)
    assert weight.item() == 9 and loss.item() > plain.item() + 9 * 0.1  # log Z of random logits is far from 0
    assert torch.allclose(loss, expected, rtol=1e-5)
    assert torch.allclose(torch.autograd.grad(loss, model.shared.weight)[0], expected_grad, rtol=1e-4, atol=1e-7)


def test_dropout_only_in_training():
    torch.manual_seed(0)
    model = T5(ModelConfig(**{**TINY, "dropout_rate": 0.1}))
    enc, dec = torch.randint(2, 128, (2, 9)), torch.randint(2, 128, (2, 4))
    model.train()
    assert not torch.equal(model(enc, dec), model(enc, dec))
    model.eval()
    assert torch.equal(model(enc, dec), model(enc, dec))


def test_layer_norm_of_bf16_activations_is_the_fp32_math_of_t5():
    """Under bf16 autocast the norm's input is bf16 and its weight fp32: variance, scaling and output in fp32,
    as transformers' T5LayerNorm computes them, whether or not torch fuses the op."""
    from transformers.models.t5.modeling_t5 import T5LayerNorm

    torch.manual_seed(0)
    ours, theirs = T5(ModelConfig(**TINY)).encoder.final_layer_norm, T5LayerNorm(TINY["d_model"])
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        theirs.weight.copy_(ours.weight)
    x = (torch.randn(3, 5, TINY["d_model"]) * 40).bfloat16()  # T5's residual stream grows large
    out = ours(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, theirs(x), rtol=1.3e-6, atol=1e-5)  # fp32: only the summation order may differ


def test_runs_under_autocast_and_half():
    torch.manual_seed(0)
    model = T5(ModelConfig(**TINY)).eval()
    enc, dec = torch.randint(2, 128, (2, 9)), torch.randint(2, 128, (2, 4))
    enc[0, 5:] = 0
    with torch.no_grad():
        ref = model(enc, dec)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(enc, dec)
        half = model.half()(enc, dec)
    assert torch.isfinite(low).all() and torch.isfinite(half).all()
    assert rel_diff(low.float(), ref) < 0.1
    assert rel_diff(half.float(), ref) < 0.05
