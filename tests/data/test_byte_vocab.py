"""ByT5's byte vocabulary: seqio's ids (pad 0, eos 1, unk 2, bytes + 3, 125 sentinels from the top), transformers'
ByT5Tokenizer ids on real text, decoding back to the same strings, and its record in a run folder."""

import json
import pickle
from pathlib import Path

import pytest

from t2t.checkpoints import run as run_lib
from t2t.checkpoints.hf import to_hf
from t2t.checkpoints.loading import own_vocabulary
from t2t.data.byte_vocab import ByteVocabulary
from t2t.data.vocab import load_vocabulary, read_vocabulary
from t2t.errors import T2TError
from t2t.models.t5 import T5

transformers = pytest.importorskip("transformers", reason="the comparison is with transformers' ByT5Tokenizer")

TEXTS = ["", "a", "Zoë's café, naïve façade", "日本語のテキスト", "emoji 😀👍🏽 and ZWJ 👩‍👩‍👧", "tab\there\nnewline",
         "\x00 nul byte", "  leading and trailing spaces  ", "1 < 2 > 0 <extra_id_x> <extra_id_>"]


@pytest.fixture(scope="module")
def bare():
    """transformers' ByT5Tokenizer as ``ByT5Tokenizer()`` makes it (no config file)."""
    return transformers.ByT5Tokenizer()


@pytest.fixture(scope="module")
def export_folder(tmp_path_factory):
    """What to_hf (t2t-export) writes for a tiny model with the byte vocabulary."""
    folder = tmp_path_factory.mktemp("byt5") / "hf"
    model = T5.from_config({"preset": "byt5-small", "d_model": 8, "d_kv": 4, "d_ff": 8, "num_layers": 1,
                            "num_decoder_layers": 1, "num_heads": 2}, device="cpu")
    to_hf(model, folder, vocabulary="byte")
    return folder


@pytest.fixture(scope="module")
def exported(export_folder):
    """transformers' tokenizer as AutoTokenizer reads t2t-export's folder."""
    return transformers.AutoTokenizer.from_pretrained(export_folder)


def test_ids_are_seqio_bytes_plus_three_with_125_sentinels_from_the_top():
    vocab = load_vocabulary("byte")
    assert isinstance(vocab, ByteVocabulary) and vocab.kind == "byte"
    assert (vocab.pad_id, vocab.eos_id, vocab.unk_id, vocab.extra_ids, vocab.vocab_size) == (0, 1, 2, 125, 384)
    assert vocab.encode("A\x00\xff") == [65 + 3, 0 + 3, 0xC3 + 3, 0xBF + 3]  # "ÿ" is two UTF-8 bytes
    assert vocab.encode("😀") == [b + 3 for b in "😀".encode()] == [243, 162, 155, 131]
    assert (vocab.sentinel_id(0), vocab.sentinel_id(124)) == (383, 259)
    assert ByteVocabulary(extra_ids=0).vocab_size == 259


def test_sentinels_written_in_the_text_are_their_ids_and_other_tags_stay_bytes():
    vocab = ByteVocabulary()
    assert vocab.encode("a <extra_id_0> b<extra_id_124>") == [100, 35, 383, 35, 101, 259]
    for text in ["<extra_id_125>", "<extra_id_01>", "<extra_id_-1>", "</s>", "<pad>", "<unk>"]:
        assert vocab.encode(text) == [b + 3 for b in text.encode()], text  # not a token: its bytes, as seqio
    assert ByteVocabulary(extra_ids=2).encode("<extra_id_2><extra_id_1>") == [b + 3 for b in b"<extra_id_2>"] + [259]


def test_decode_stops_at_eos_drops_pad_unk_and_broken_utf8_and_writes_sentinels():
    vocab = ByteVocabulary()
    assert vocab.decode([0, 100, 2, 101, 1, 102]) == "ab"
    assert vocab.decode([100, 383, 101, 259]) == "a<extra_id_0>b<extra_id_124>"
    assert vocab.decode([100, 384, 9999, -5, 101]) == "ab"  # outside the vocabulary: dropped, as seqio
    assert vocab.decode([0xC3 + 3, 100, 0xC3 + 3, 0xA9 + 3, 0xE2 + 3]) == "aé"  # bytes not valid UTF-8 vanish
    import torch
    assert vocab.decode_batch(torch.tensor([[100, 1, 0], [101, 102, 1]])) == ["a", "bc"]


@pytest.mark.parametrize("text", TEXTS)
def test_encode_and_decode_agree_with_byt5_tokenizer(bare, exported, text):
    vocab = ByteVocabulary()
    ids = vocab.encode(text)
    assert bare(text).input_ids == exported(text).input_ids == ids + [vocab.eos_id]
    assert vocab.decode(ids) == bare.decode(ids) == exported.decode(ids) == text


def test_broken_utf8_decodes_as_byt5_tokenizer_decodes_it(bare):
    ids = [0xC3 + 3, 100, 0xF0 + 3, 0x9F + 3, 0xE2 + 3, 0x82 + 3, 0xAC + 3, 0xE2 + 3]
    assert ByteVocabulary().decode(ids) == bare.decode(ids) == "a€"


def test_the_exported_tokenizer_numbers_sentinels_as_t5_where_a_bare_byt5_tokenizer_counts_up(bare, exported):
    """transformers 5's ByT5Tokenizer() gives <extra_id_0> id 259; the export names T5's 383 for it."""
    text = "x <extra_id_0> y <extra_id_1> z <extra_id_124>"
    ids = ByteVocabulary().encode(text)
    assert ids == exported(text).input_ids[:-1]
    assert [i for i in ids if i >= 259] == [383, 382, 259]
    assert exported.decode(ids) == text and exported.convert_ids_to_tokens(383) == "<extra_id_0>"
    assert bare.convert_tokens_to_ids("<extra_id_0>") == 259  # the difference the export's config removes
    assert type(exported).__name__ == "ByT5Tokenizer" and len(exported) == 384


def test_a_record_reads_back_and_the_name_wins_over_a_file_called_byte(tmp_path, monkeypatch):
    vocab = ByteVocabulary()
    assert vocab.record() == {"extra_ids": 125}
    (tmp_path / "vocab.json").write_text(json.dumps({"kind": "byte", "extra_ids": 125}))
    again = read_vocabulary(tmp_path / "vocab.json")
    assert again == vocab and hash(again) == hash(vocab) and again.sha256 == vocab.sha256
    assert again.path == tmp_path / "vocab.json"
    assert ByteVocabulary(extra_ids=3) != vocab and ByteVocabulary(extra_ids=3).sha256 != vocab.sha256
    assert pickle.loads(pickle.dumps(vocab)) == vocab
    monkeypatch.chdir(tmp_path)
    (tmp_path / "byte").write_bytes(b"not a SentencePiece model")
    assert load_vocabulary("byte") == vocab  # the kind's name, not the file
    with pytest.raises(T2TError, match=r"byte is not a valid SentencePiece model"):
        load_vocabulary("./byte")
    monkeypatch.setenv("T2T_VOCAB", "byte")
    assert load_vocabulary() == vocab


def test_a_run_records_the_byte_vocabulary_by_kind_and_its_name(tmp_path, tiny_spiece):
    run_lib.record_vocabulary(tmp_path, ByteVocabulary())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vocab.json"]  # no file beside the record
    assert json.loads((tmp_path / "vocab.json").read_text()) == {"kind": "byte", "extra_ids": 125}
    assert run_lib.recorded_settings({}, ByteVocabulary().path)["vocab"] == "byte"  # not <cwd>/byte
    assert run_lib.same_vocabulary("byte", tmp_path / "vocab.json")
    assert not run_lib.same_vocabulary("byte", tiny_spiece)


def test_a_hugging_face_byt5_folder_or_hub_repo_carries_the_byte_vocabulary(export_folder, tmp_path, monkeypatch):
    assert sorted(p.name for p in export_folder.iterdir() if "token" in p.name or "spiece" in p.name) == [
        "tokenizer_config.json"]
    assert own_vocabulary(export_folder) == "byte"  # t2t-eval --checkpoint <export> reads it as bytes
    hub = tmp_path / "byt5-small"  # google/byt5-*: the tokenizer class named in config.json
    hub.mkdir()
    (hub / "config.json").write_text(json.dumps({"model_type": "t5", "tokenizer_class": "ByT5Tokenizer"}))
    assert own_vocabulary(hub) == "byte"
    import huggingface_hub

    def download(repo_id, filename):
        if not (hub / filename).is_file():
            raise FileNotFoundError(filename)
        return str(hub / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    assert own_vocabulary("google/byt5-small") == "byte"
    (hub / "config.json").write_text(json.dumps({"model_type": "t5"}))
    assert own_vocabulary(hub) is None and own_vocabulary("google/byt5-small") is None


@pytest.fixture
def tiny_spiece():
    from t2t.testing import tiny_vocabulary
    return tiny_vocabulary().path


@pytest.mark.parametrize("record, problem", [
    ({"kind": "byte"}, r"has extra_ids None, which must be of type int"),
    ({"kind": "byte", "extra_ids": "125"}, r"has extra_ids '125', which must be of type int"),
    ({"kind": "byte", "extra_ids": -1}, r"^extra_ids must be a non-negative integer, got -1; ByT5 uses 125"),
])
def test_a_damaged_byte_record_is_one_sentence(tmp_path, record, problem):
    (tmp_path / "vocab.json").write_text(json.dumps(record))
    with pytest.raises(T2TError, match=problem):
        load_vocabulary(tmp_path / "vocab.json")


# -- real text ------------------------------------------------------------------------------------------------

EMOJI = ["😀", "🎉", "👍🏽", "🇩🇪", "🧑‍💻", "✨", "🙂"]


def real_sentences(root: Path, count: int = 2000) -> list[str]:
    """``count`` lines of the local corpus and GLUE dev files, in a fixed order, every fifth with an emoji and
    every seventh with a sentinel written into it (the data have neither)."""
    files = sorted((root / "corpus").rglob("*.txt")) + sorted((root / "corpus").rglob("*.raw"))
    files += sorted((root / "glue").glob("*/dev*.tsv"))
    lines = []
    for file in files:
        text = file.read_bytes().decode("utf-8", errors="replace")  # 9 corpus files are Latin-1: U+FFFD then
        lines += [line for line in text.splitlines()[::7] if len(line.strip()) > 20][:count // len(files) + 30]
    lines = lines[:count]
    out = []
    for i, line in enumerate(lines):
        words = line.split(" ")
        cut = len(words) // 2
        if i % 5 == 0:
            words.insert(cut, EMOJI[i % len(EMOJI)])
        if i % 7 == 0:
            words.insert(cut, f"<extra_id_{i % 125}>")
        out.append(" ".join(words))
    return out


@pytest.mark.real_data
def test_2000_real_sentences_get_byt5_tokenizer_ids_and_decode_back(data_dir, bare, exported):
    sentences = real_sentences(data_dir)
    assert len(sentences) == 2000
    accented = [s for s in sentences if any(0x80 <= ord(c) < 0x10000 for c in s if not 0x2000 <= ord(c) < 0x2100)]
    assert len(accented) >= 20 and sum("<extra_id_" in s for s in sentences) >= 280
    vocab = ByteVocabulary()
    ids = vocab.encode_batch(sentences)
    assert [row + [1] for row in ids] == exported(sentences).input_ids
    plain = [i for i, s in enumerate(sentences) if "<extra_id_" not in s]  # the bare tokenizer numbers sentinels up
    assert [ids[i] + [1] for i in plain] == bare([sentences[i] for i in plain]).input_ids
    assert vocab.decode_batch(ids) == exported.batch_decode(ids) == sentences


def test_the_byt5_presets_have_the_papers_shapes_and_imply_the_byte_vocabulary():
    from t2t.models.presets import preset_vocabulary, resolve_model_config
    published = {"small": (1472, 3584, 12, 4, 6), "base": (1536, 3968, 18, 6, 12), "large": (1536, 3840, 36, 12, 16),
                 "xl": (2560, 6720, 36, 12, 32), "xxl": (4672, 12352, 36, 12, 64)}  # google/byt5-* config.json
    for size, shape in published.items():
        cfg = resolve_model_config(f"byt5-{size}")
        assert (cfg.d_model, cfg.d_ff, cfg.num_layers, cfg.decoder_layers, cfg.num_heads) == shape
        assert (cfg.vocab_size, cfg.d_kv, cfg.feed_forward_proj, cfg.tie_word_embeddings) == (
            384, 64, "gated-gelu", False)
        assert cfg.num_layers == 3 * cfg.decoder_layers
        assert preset_vocabulary({"preset": f"byt5-{size}", "num_layers": 2}) == "byte"
    assert preset_vocabulary("t5.1.1-small") is None and preset_vocabulary(None) is None


def test_a_preset_refining_a_byt5_preset_keeps_its_vocabulary_and_a_bad_one_is_named(tmp_path):
    from t2t.models.presets import preset_vocabulary, resolve_model_config
    (tmp_path / "mine.yaml").write_text("preset: byt5-small\nnum_layers: 3\n")
    assert preset_vocabulary(str(tmp_path / "mine.yaml")) == "byte"
    assert resolve_model_config(str(tmp_path / "mine.yaml")).num_layers == 3  # vocab: is not a model field
    (tmp_path / "bad.yaml").write_text("preset: byt5-small\nvocab: [byte]\n")
    with pytest.raises(T2TError, match=r"^model preset .*bad.yaml has vocab \['byte'\], not a vocabulary name"):
        preset_vocabulary(str(tmp_path / "bad.yaml"))

