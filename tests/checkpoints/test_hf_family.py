"""The T5 family against transformers: T5 1.0, T5 1.1, Flan-T5, mT5 and UMT5, both directions.

Each family's random tiny model is converted transformers → t2t (``from_hf`` of a folder ``save_pretrained``
wrote, its config also rewritten as the other transformers major version writes it) and t2t → transformers
(``to_hf``, loaded by the family's own class), and must give transformers' logits on padded sequences longer
than ``relative_attention_max_distance``, its greedy decodes and its 4-beam decodes. One test per family does
the same at its smallest published size's shapes (d_model, d_ff, heads, vocabulary) with one layer, and the
presets are checked against the configurations published on the hub. Runs under transformers 4.57 and 5.24.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="HF parity tests need transformers (pip install -e '.[hf]' or '.[test]')")

from test_hf_parity import (  # noqa: E402
    TINY,
    as_written_by,
    assert_same_ids,
    assert_same_logits,
    batch,
    hf_greedy,
    hf_logits,
    padded_inputs,
    t2t_logits,
    with_likely_eos,
)

import t2t  # noqa: E402
from t2t.checkpoints import hf as hf_lib  # noqa: E402
from t2t.checkpoints.loading import load_model  # noqa: E402
from t2t.checkpoints.native import save_checkpoint  # noqa: E402
from t2t.errors import T2TError  # noqa: E402
from t2t.models import decoding  # noqa: E402
from t2t.models.presets import resolve_model_config  # noqa: E402
from t2t.models.t5 import T5, ModelConfig  # noqa: E402

transformers.logging.set_verbosity_error()

GATED = dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False)
FAMILY_TINY = {**TINY, "num_decoder_layers": 2}  # transformers' generate needs as many encoder as decoder layers
NEW_TOKENS = 20


@dataclass(frozen=True)
class Family:
    model_type: str   # Hugging Face's
    layout: dict      # config fields beyond the shapes (their t2t names are the same)
    hub_keys: dict    # further keys the published config.json files carry, which t2t must read past
    preset: str       # the smallest published size's preset

    @property
    def scaled(self) -> bool:  # T5 1.0's rescaled, tied output layer
        return self.layout["tie_word_embeddings"]

    def hf_classes(self):
        prefix = {"t5": "T5", "mt5": "MT5", "umt5": "UMT5"}[self.model_type]
        return getattr(transformers, f"{prefix}Config"), getattr(transformers, f"{prefix}ForConditionalGeneration")

    def model_config(self, **shapes) -> ModelConfig:
        return ModelConfig(**shapes, **self.layout, relative_attention_per_layer=self.model_type == "umt5")


FAMILIES = {
    "t5_1_0": Family("t5", dict(feed_forward_proj="relu", tie_word_embeddings=True), {}, "t5-small"),
    "t5_1_1": Family("t5", GATED, {}, "t5.1.1-small"),
    "flan_t5": Family("t5", GATED, {"n_positions": 512, "output_past": True, "dense_act_fn": "gelu_new",
                                    "is_gated_act": True}, "flan-t5-small"),
    "mt5": Family("mt5", GATED, {"tokenizer_class": "T5Tokenizer"}, "mt5-small"),
    "umt5": Family("umt5", GATED, {"scalable_attention": True, "tokenizer_class": "T5Tokenizer"}, "umt5-small"),
    "byt5": Family("t5", GATED, {"tokenizer_class": "ByT5Tokenizer"}, "byt5-small"),  # 384 ids, deeper encoder
}

# The configurations published on the hub (google/<name>/config.json), shapes and layout fields only
PUBLISHED = {
    "t5-small": dict(model_type="t5", vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
                     feed_forward_proj="relu"),
    "t5.1.1-small": dict(model_type="t5", vocab_size=32128, d_model=512, d_kv=64, d_ff=1024, num_layers=8,
                         num_heads=6, feed_forward_proj="gated-gelu", tie_word_embeddings=False),
    **{f"flan-t5-{size}": dict(model_type="t5", vocab_size=32128, d_model=d, d_kv=64, d_ff=ff, num_layers=n,
                               num_heads=h, feed_forward_proj="gated-gelu", tie_word_embeddings=False)
       for size, (d, ff, h, n) in {"small": (512, 1024, 6, 8), "base": (768, 2048, 12, 12),
                                   "large": (1024, 2816, 16, 24), "xl": (2048, 5120, 32, 24),
                                   "xxl": (4096, 10240, 64, 24)}.items()},
    **{f"mt5-{size}": dict(model_type="mt5", vocab_size=250112, d_model=d, d_kv=64, d_ff=ff, num_layers=n,
                           num_heads=h, feed_forward_proj="gated-gelu", tie_word_embeddings=False)
       for size, (d, ff, h, n) in {"small": (512, 1024, 6, 8), "base": (768, 2048, 12, 12),
                                   "large": (1024, 2816, 16, 24), "xl": (2048, 5120, 32, 24),
                                   "xxl": (4096, 10240, 64, 24)}.items()},
    **{f"umt5-{size}": dict(model_type="umt5", vocab_size=256384, d_model=d, d_kv=64, d_ff=ff, num_layers=n,
                            num_heads=h, feed_forward_proj="gated-gelu", tie_word_embeddings=False)
       for size, (d, ff, h, n) in {"small": (512, 1024, 6, 8), "base": (768, 2048, 12, 12),
                                   "xl": (2048, 5120, 32, 24), "xxl": (4096, 10240, 64, 24)}.items()},
}


@pytest.fixture(params=sorted(FAMILIES))
def family(request) -> Family:
    return FAMILIES[request.param]


def random_hf(family: Family, seed: int, **config):
    """A random transformers model of ``family``; an untied output layer gets its own tensor (transformers 5
    would otherwise share the embedding's)."""
    config_class, model_class = family.hf_classes()
    torch.manual_seed(seed)
    hf = model_class(config_class(**{**FAMILY_TINY, **family.layout, **config}, decoder_start_token_id=0,
                                  pad_token_id=0, eos_token_id=1)).eval()
    if not config.get("tie_word_embeddings", family.layout["tie_word_embeddings"]):
        hf.lm_head.weight = torch.nn.Parameter(torch.randn(hf.config.vocab_size, hf.config.d_model))
    return hf


def save(hf, folder: Path, hub_keys: dict) -> Path:
    hf.save_pretrained(folder)
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **hub_keys}, indent=2))
    return folder


def hf_beams(hf, enc: torch.Tensor) -> torch.Tensor:
    """transformers' 4-beam search with T5's alpha as its length penalty and the canonical stop ("never"); it
    fills a finished row with EOS where t2t pads it, so the ids after a row's first EOS become padding."""
    ids = hf_greedy(hf, enc, NEW_TOKENS, num_beams=4, length_penalty=0.6, early_stopping="never")
    eos = (ids == 1).long()
    return ids.masked_fill(eos.cumsum(1) - eos > 0, 0)


def t2t_beams(model: T5, enc: torch.Tensor) -> torch.Tensor:
    """t2t's 4-beam search under transformers' length penalty (length ** alpha), which otherwise differs from
    T5's ((5 + length) / 6) ** alpha (tests/checkpoints/test_export.py compares the two)."""
    return decoding.beam_search(model, enc, NEW_TOKENS, num_beams=4, length_penalty=lambda n: n ** 0.6)


def assert_same_outputs(model: T5, hf, enc_dec_seed: int) -> None:
    """Logits on long padded rows, greedy decodes (some end at EOS, some run on) and 4-beam decodes."""
    enc, dec = batch(seed=enc_dec_seed)
    assert_same_logits(t2t_logits(model, enc, dec), hf_logits(hf, enc, dec), dec)
    inputs = padded_inputs(seed=enc_dec_seed + 1)
    theirs = hf_greedy(hf, inputs, NEW_TOKENS)
    stopped = (theirs == 1).any(1)
    assert stopped.any() and not stopped.all(), "the greedy decodes should stop early on some rows only"
    with torch.no_grad():
        assert_same_ids(model.generate(inputs, max_new_tokens=NEW_TOKENS), theirs)
        assert_same_ids(t2t_beams(model, inputs), hf_beams(hf, inputs))


# ----------------------------------------------------------------------------------------------------------
# transformers → t2t


def test_from_hf_gives_transformers_outputs(tmp_path, family):
    hf = with_likely_eos(random_hf(family, seed=40), padded_inputs(seed=42), NEW_TOKENS)
    model = t2t.from_hf(save(hf, tmp_path / "hf", family.hub_keys))
    assert model.config == family.model_config(**{**FAMILY_TINY, "num_decoder_layers": None})
    assert_same_outputs(model, hf, enc_dec_seed=41)


@pytest.mark.parametrize("writer", ["4.x", "5.x"])
def test_from_hf_reads_configs_as_either_transformers_writes_them(tmp_path, family, writer):
    """The same weights under the config.json each major version writes (tests/models/test_hf_parity.py's
    table): the output layer is rescaled exactly where the writing version rescales it."""
    if writer == "5.x" and family.model_type == "mt5" and family.scaled:
        pytest.skip("transformers 5 has no rescaled mT5")
    hf = random_hf(family, seed=43)
    folder = save(hf, tmp_path / "hf", family.hub_keys)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(as_written_by(config, writer, family.scaled)))
    enc, dec = batch(seed=44)
    assert_same_logits(t2t_logits(t2t.from_hf(folder), enc, dec), hf_logits(hf, enc, dec), dec)


@pytest.mark.parametrize("model_type,tie", [("mt5", None), ("mt5", True), ("umt5", True), ("umt5", None)])
def test_from_hf_of_configs_left_at_transformers_defaults(tmp_path, model_type, tie):
    """Models made with transformers' own defaults, saved as the installed version saves them. A random MT5 of
    transformers 5 shares its output layer with the embedding without T5 1.0's rescale, though its
    config.json says tie_word_embeddings: true; read as a T5 config it loaded with logits off by
    sqrt(d_model)."""
    config_class, model_class = FAMILIES[model_type].hf_classes()
    torch.manual_seed(45)
    extra = {} if tie is None else {"tie_word_embeddings": tie}
    hf = model_class(config_class(**FAMILY_TINY, feed_forward_proj="gated-gelu", **extra)).eval()
    hf.save_pretrained(tmp_path / "hf")
    enc, dec = batch(seed=46)
    assert_same_logits(t2t_logits(t2t.from_hf(tmp_path / "hf"), enc, dec), hf_logits(hf, enc, dec), dec)


def test_a_config_without_model_type_is_read_from_its_architectures(tmp_path):
    """Some UMT5 configs on the hub (google/umt5-xl's first upload) name the class but no model_type."""
    hf = random_hf(FAMILIES["umt5"], seed=47)
    folder = save(hf, tmp_path / "hf", {})
    config = json.loads((folder / "config.json").read_text())
    del config["model_type"]
    (folder / "config.json").write_text(json.dumps(config))
    model = t2t.from_hf(folder)
    assert model.config.relative_attention_per_layer
    enc, dec = batch(seed=48)
    assert_same_logits(t2t_logits(model, enc, dec), hf_logits(hf, enc, dec), dec)
    loaded = load_model(folder)  # what --init-from and --checkpoint take
    assert torch.equal(t2t_logits(loaded, enc, dec), t2t_logits(model, enc, dec))


# ----------------------------------------------------------------------------------------------------------
# t2t → transformers


def test_to_hf_gives_t2t_outputs_in_the_familys_own_class(tmp_path, family):
    torch.manual_seed(50)
    model = T5(family.model_config(**FAMILY_TINY)).eval()
    config_class, model_class = family.hf_classes()
    out = t2t.to_hf(model, tmp_path / "out", model_type=family.model_type)
    loaded, info = model_class.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    assert json.loads((out / "config.json").read_text())["architectures"] == [model_class.__name__]
    hf = with_likely_eos(loaded.eval(), padded_inputs(seed=52), NEW_TOKENS)
    with torch.no_grad():  # the same EOS row in ours
        output_layer = model.shared if model.lm_head is None else model.lm_head
        output_layer.weight[1] = hf.get_output_embeddings().weight[1]
    assert_same_outputs(model, hf, enc_dec_seed=51)


def test_t2t_export_writes_the_model_type_asked_for(tmp_path):
    from t2t.cli.export import export_main
    from t2t.testing import tiny_vocabulary
    torch.manual_seed(53)
    vocab = tiny_vocabulary()  # 484 ids
    save_checkpoint(tmp_path / "run", 1, T5(FAMILIES["mt5"].model_config(**{**FAMILY_TINY, "vocab_size": 512})))
    assert export_main(["--checkpoint", str(tmp_path / "run"), "--to", "hf", "--model-type", "mt5",
                        "--vocab", str(vocab.path), str(tmp_path / "out")]) == 0
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["model_type"] == "mt5" and config["architectures"] == ["MT5ForConditionalGeneration"]


@pytest.mark.parametrize("layout,model_type,needle", [
    (dict(relative_attention_per_layer=True), "t5", "export it with model_type 'umt5'"),
    (dict(relative_attention_per_layer=True), "mt5", "export it with model_type 'umt5'"),
    ({}, "umt5", "export it with model_type 't5' or 'mt5'"),
    (dict(tie_word_embeddings=True), "mt5", "export it with model_type 't5'"),
    ({}, "bart", "choose 't5', 'mt5' or 'umt5'"),
])
def test_to_hf_refuses_a_model_type_that_cannot_hold_the_model(tmp_path, layout, model_type, needle):
    model = T5(ModelConfig(**{**FAMILY_TINY, **GATED, **layout}))
    with pytest.raises(T2TError) as e:
        t2t.to_hf(model, tmp_path / "out", model_type=model_type)
    assert needle in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------------------------------------
# published sizes


def test_presets_are_the_published_configurations():
    """Each preset is what from_hf makes of the configuration published for that model, and builds (on the
    meta device: shapes without memory) with one position-bias table per layer exactly for UMT5."""
    for name, published in PUBLISHED.items():
        assert resolve_model_config(name) == hf_lib.model_config_from_hf(published), name
        model = T5.from_config(name, device="meta")
        heads = model.config.num_heads * (model.config.num_layers if name.startswith("umt5") else 1)
        assert model.encoder.relative_attention_bias.weight.shape == (32, heads), name
    shipped = {p.stem for p in (Path(__file__).parents[2] / "configs" / "models").glob("*.yaml")}
    assert {n for n in shipped if n.startswith(("mt5-", "umt5-", "flan-t5-"))} <= set(PUBLISHED)


def test_a_published_size_converts_both_ways(tmp_path, family):
    """The smallest published size's shapes and vocabulary with one layer a stack: t2t → to_hf → transformers
    (its logits) → save_pretrained → from_hf (the same logits again)."""
    cfg = resolve_model_config({"preset": family.preset, "num_layers": 1, "dropout_rate": 0.0})
    torch.manual_seed(60)
    model = T5(cfg).eval()
    out = t2t.to_hf(model, tmp_path / "out", model_type=family.model_type)
    _, model_class = family.hf_classes()
    hf = model_class.from_pretrained(out).eval()
    g = torch.Generator().manual_seed(61)
    enc = torch.randint(2, cfg.vocab_size, (2, 150), generator=g)
    dec = torch.randint(2, cfg.vocab_size, (2, 100), generator=g)
    enc[1, 120:], dec[:, 0], dec[1, 90:] = 0, 0, 0
    expected = t2t_logits(model, enc, dec)
    assert_same_logits(hf_logits(hf, enc, dec), expected, dec)
    hf.save_pretrained(tmp_path / "resaved")
    del hf, model
    assert_same_logits(t2t_logits(t2t.from_hf(tmp_path / "resaved"), enc, dec), expected, dec)


# ----------------------------------------------------------------------------------------------------------
# fine-tuning Flan-T5: t2t-train --init-from


INIT_TASK = "test_hf_family_flan_init"
SENTIMENT = [{"inputs": f"sentiment: {text}", "targets": label}
             for text, label in [("the film was wonderful", "positive"), ("the ending felt rushed", "negative")] * 4]


def train_from(init_from: str, out: Path, *flags: str) -> int:
    """``t2t-train --init-from init_from`` for two steps of a tiny in-memory task."""
    from t2t.cli import train_main
    from t2t.testing import in_memory_task, temporarily_registered

    with temporarily_registered(in_memory_task(INIT_TASK, {"train": SENTIMENT})):
        return train_main(["--task", INIT_TASK, "--init-from", init_from, "--output-dir", str(out),
                           "--train-steps", "2", "--batch-size", "4", "--set", "input_length=16",
                           "--set", "target_length=4", *flags])


@pytest.mark.integration
def test_t2t_train_init_from_a_local_flan_t5_folder(tmp_path, capsys):
    """The README's Flan-T5 fine-tuning offline: a Flan-T5-shaped folder as save_pretrained writes it, with its
    spiece.model, trains; the run's model is the folder's (frozen weights unchanged, layout kept) and its
    vocabulary is the folder's."""
    from t2t.checkpoints.run import find_run
    from t2t.data.vocab import load_vocabulary
    from t2t.testing import tiny_vocabulary

    vocab = tiny_vocabulary()
    folder = save(random_hf(FAMILIES["flan_t5"], seed=70, vocab_size=512), tmp_path / "flan-t5-tiny",
                  FAMILIES["flan_t5"].hub_keys)
    (folder / "spiece.model").write_bytes(Path(vocab.path).read_bytes())
    assert train_from(str(folder), tmp_path / "run", "--set", "transfer.freeze=[encoder.*]") == 0, \
        capsys.readouterr().err
    trained, start = load_model(tmp_path / "run"), t2t.from_hf(folder)
    assert trained.config.feed_forward_proj == "gated-gelu" and trained.lm_head is not None
    assert (trained.config.vocab_size, trained.config.d_model) == (512, FAMILY_TINY["d_model"])
    before, after = start.state_dict(), trained.state_dict()
    assert all(torch.equal(after[k], before[k]) for k in before if k.startswith("encoder."))
    assert not torch.equal(after["lm_head.weight"], before["lm_head.weight"])  # it trained
    run_vocab = load_vocabulary(find_run(tmp_path / "run").vocab)
    assert run_vocab.encode("the film was wonderful") == vocab.encode("the film was wonderful")


@pytest.mark.parametrize("init_from, needle", [
    ("google/flan-t5-base", "the Hugging Face hub is unreachable (HF_HUB_OFFLINE is set)"),
    ("./models/flan-t5-base", "does not exist; check the path"),
])
def test_t2t_train_init_from_flan_t5_offline_is_one_sentence(tmp_path, monkeypatch, capsys, init_from, needle):
    """The README's ``--init-from google/flan-t5-base`` with the hub out of reach, and a local folder that is
    not there: exit 2 and one line saying why."""
    import huggingface_hub
    from huggingface_hub import errors as hub_errors

    from t2t.testing import tiny_vocabulary

    def offline(repo_id, **kwargs):
        raise hub_errors.LocalEntryNotFoundError("outgoing traffic has been disabled")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)
    assert train_from(init_from, tmp_path / "run", "--vocab", str(tiny_vocabulary().path)) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and init_from in err and len(err.splitlines()) == 1, err


def test_flex_attention_refuses_a_position_bias_per_layer():
    with pytest.raises(T2TError, match=r"relative_attention_per_layer \(UMT5\) runs with model.attention=sdpa"):
        T5(ModelConfig(**FAMILY_TINY, relative_attention_per_layer=True, attention="flex"))
