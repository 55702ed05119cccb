"""SentencePieceVocabulary, load_vocabulary, train_vocabulary and testing.tiny_vocabulary."""

import errno
import os
import pickle
import resource
import shutil
import signal

import numpy as np
import pytest
import sentencepiece as spm
import torch

import t2t.data.vocab as vocab_module
from t2t.data.vocab import SentencePieceVocabulary, load_vocabulary, train_vocabulary
from t2t.errors import T2TError
from t2t.testing import TINY_TEXT, TINY_VOCAB_PIECES, tiny_vocabulary

FOX = "The quick brown fox jumps over the lazy dog."
FOX_IDS = [37, 1704, 4216, 3, 20400, 4418, 7, 147, 8, 19743, 1782, 5]


@pytest.fixture
def tiny():
    return tiny_vocabulary()


@pytest.fixture
def t5_vocab(t5_vocab_path):
    return SentencePieceVocabulary(t5_vocab_path)


@pytest.fixture
def no_vocab_env(monkeypatch):
    monkeypatch.delenv("T2T_VOCAB", raising=False)
    monkeypatch.delenv("T2T_DATA_DIR", raising=False)


# -- T5's real model (T2T_DATA_DIR) -------------------------------------------------------------------------


def test_t5_encode_decode_known_ids(t5_vocab):
    assert t5_vocab.vocab_size == 32100
    assert t5_vocab.encode(FOX) == FOX_IDS
    assert t5_vocab.decode(FOX_IDS) == FOX
    assert t5_vocab.decode(FOX_IDS + [1]) == FOX


def test_t5_sentinels(t5_vocab):
    assert t5_vocab.sentinel_id(0) == 32099 == t5_vocab.vocab_size - 1
    assert t5_vocab.sentinel_id(99) == 32000
    assert t5_vocab.decode([32099]) == "<extra_id_0>"
    assert t5_vocab.decode([37, 1704, 32099, 1782, 32098]) == "The quick <extra_id_0> dog <extra_id_1>"
    # as seqio (and HF's T5 tokenizer): sentinel text at a word start encodes to the sentinel id
    assert t5_vocab.encode("Hello <extra_id_3> world <extra_id_0>") == [8774, 32096, 296, 32099]


def test_t5_decode_stops_at_eos_drops_pad_and_tolerates_padding_rows(t5_vocab):
    assert t5_vocab.decode([0] + FOX_IDS + [1, 37, 1704]) == FOX
    assert t5_vocab.decode([1] + FOX_IDS) == ""
    assert t5_vocab.decode(FOX_IDS + [0, 0, 0]) == FOX
    # ids of the model's never-trained embedding rows (32100..32127) and beyond decode as unk, not a crash
    assert t5_vocab.decode([37, 32100, 32127, 10**6]) == t5_vocab.decode([37, 2, 2, 2])


def test_t5_batch_equals_single(t5_vocab):
    texts = [FOX, "", "translate English to German: That is good.", "cola sentence: The course is jumping well."]
    batch = t5_vocab.encode_batch(texts)
    assert batch == [t5_vocab.encode(t) for t in texts]
    rows = [ids + [1, 5, 5] for ids in batch]
    assert t5_vocab.decode_batch(rows) == [t5_vocab.decode(r) for r in rows] == texts


def test_load_vocabulary_from_data_dir(data_dir, t5_vocab_path, monkeypatch):
    monkeypatch.delenv("T2T_VOCAB", raising=False)
    assert load_vocabulary(data_dir=data_dir) == SentencePieceVocabulary(t5_vocab_path)


def test_real_corpus_latin1_files_are_detected(data_dir):
    files = sorted(p for p in (data_dir / "corpus").rglob("*.txt") if p.is_file())
    latin1 = [p for p in files if vocab_module._file_encoding(p) == "latin-1"]
    assert latin1, "the corpus is documented to contain Latin-1 files"
    for path in latin1:
        with pytest.raises(UnicodeDecodeError):
            path.read_text(encoding="utf-8")


# -- the tiny vocabulary (no data needed) -------------------------------------------------------------------


def test_tiny_id_conventions(tiny):
    sp = tiny.tokenizer
    assert (tiny.pad_id, tiny.eos_id, tiny.unk_id) == (0, 1, 2)
    assert (sp.pad_id(), sp.eos_id(), sp.unk_id(), sp.bos_id()) == (0, 1, 2, -1)
    assert sp.is_control(0) and sp.is_control(1) and sp.is_unknown(2)
    assert tiny.vocab_size == TINY_VOCAB_PIECES + 100 == tiny.base_vocab_size + tiny.extra_ids
    assert tiny.sentinel_id(0) == tiny.vocab_size - 1
    assert [sp.id_to_piece(tiny.sentinel_id(i)) for i in (0, 1, 99)] == [
        "▁<extra_id_0>", "▁<extra_id_1>", "▁<extra_id_99>"
    ]
    with pytest.raises(ValueError):
        tiny.sentinel_id(100)


def test_tiny_roundtrip_and_sentinels(tiny):
    text = "The baker opened her shop at six o'clock."
    ids = tiny.encode(text)
    assert ids and all(3 <= i < tiny.base_vocab_size for i in ids)  # no EOS, no specials, no sentinels
    assert tiny.decode(ids) == text
    s0, s1 = tiny.sentinel_id(0), tiny.sentinel_id(1)
    assert tiny.encode("the <extra_id_0> shop <extra_id_1>") == tiny.encode("the") + [s0] + tiny.encode(
        "shop"
    ) + [s1]
    assert tiny.decode(tiny.encode("the") + [s0]) == "the <extra_id_0>"


def test_tiny_decode_cleaning(tiny):
    ids = tiny.encode("a small dog")
    assert tiny.decode([0, *ids, 1, *tiny.encode("ignored")]) == "a small dog"
    assert tiny.decode([*ids, 0, 0]) == "a small dog"
    assert tiny.decode([]) == ""
    unk = tiny.decode([2])
    assert tiny.decode([*ids, tiny.vocab_size, tiny.vocab_size + 27, -1]) == tiny.decode([*ids, 2, 2, 2])
    assert unk.strip() == "⁇"


def test_tiny_batch_and_array_inputs(tiny):
    texts = ["a small dog", "", TINY_TEXT.splitlines()[0], "Is the sentence acceptable? yes"]
    rows = tiny.encode_batch(texts)
    assert rows == [tiny.encode(t) for t in texts]
    assert tiny.encode_batch([]) == [] and tiny.decode_batch([]) == []
    width = max(map(len, rows)) + 1
    padded = np.zeros((len(rows), width), dtype=np.int64)
    for r, ids in enumerate(rows):
        padded[r, : len(ids) + 1] = ids + [1]
    expected = [tiny.decode(r) for r in rows]
    assert tiny.decode_batch(padded) == expected
    assert tiny.decode_batch(torch.from_numpy(padded)) == expected
    assert [tiny.decode(torch.from_numpy(row)) for row in padded] == expected


def test_pickle_equality_and_hash(tiny, tmp_path):
    clone = pickle.loads(pickle.dumps(tiny))
    assert clone == tiny and hash(clone) == hash(tiny)
    assert clone.path == tiny.path and clone.vocab_size == tiny.vocab_size
    assert clone.encode(TINY_TEXT) == tiny.encode(TINY_TEXT)
    copy = tmp_path / "copy.model"
    shutil.copyfile(tiny.path, copy)
    other = SentencePieceVocabulary(copy)
    assert other == tiny and hash(other) == hash(tiny) and len({other, tiny}) == 1
    assert SentencePieceVocabulary(copy, extra_ids=10) != tiny
    copy.unlink()  # the pickle carries the model itself, not just the path
    assert pickle.loads(pickle.dumps(other)).encode("a dog") == tiny.encode("a dog")


def test_no_extra_ids(tiny):
    plain = SentencePieceVocabulary(tiny.path, extra_ids=0)
    assert plain.vocab_size == TINY_VOCAB_PIECES
    assert plain.decode([TINY_VOCAB_PIECES]) == tiny.decode([2])
    with pytest.raises(T2TError, match="extra_ids"):
        SentencePieceVocabulary(tiny.path, extra_ids=-1)


def test_tiny_vocabulary_is_cached_and_sized():
    assert tiny_vocabulary() is tiny_vocabulary()
    assert tiny_vocabulary(100).vocab_size == 200
    with pytest.raises(T2TError, match="vocab_size"):
        tiny_vocabulary(5000)


# -- bad files ----------------------------------------------------------------------------------------------


def test_missing_file(tmp_path):
    with pytest.raises(T2TError, match="nope.model does not exist"):
        SentencePieceVocabulary(tmp_path / "nope.model")


@pytest.mark.parametrize("content", [b"", b"this is not a model\n", bytes(range(256)) * 4])
def test_corrupt_file(tmp_path, content):
    path = tmp_path / "broken.model"
    path.write_bytes(content)
    with pytest.raises(T2TError, match="broken.model is not a valid SentencePiece model"):
        SentencePieceVocabulary(path)


def test_truncated_model_file(tiny, tmp_path):
    path = tmp_path / "cut.model"
    path.write_bytes(tiny.path.read_bytes()[:1000])
    with pytest.raises(T2TError, match="cut.model"):
        SentencePieceVocabulary(path)


def test_wrong_special_ids_says_how_to_retrain(tmp_path):
    prefix = tmp_path / "default_ids"  # SentencePiece's own defaults: unk 0, bos 1, eos 2, no pad
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TINY_TEXT.splitlines()), model_prefix=str(prefix), vocab_size=100, minloglevel=2
    )
    with pytest.raises(T2TError, match=r"pad/eos/unk ids -1/2/0 .*t2t-vocab"):
        SentencePieceVocabulary(f"{prefix}.model")


# -- load_vocabulary ----------------------------------------------------------------------------------------


def test_load_explicit_path_wins(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("T2T_VOCAB", str(tmp_path / "elsewhere.model"))
    assert load_vocabulary(tiny.path) == tiny
    with pytest.raises(T2TError, match="missing.model"):
        load_vocabulary(tmp_path / "missing.model")


def test_a_vocabulary_record_reads_its_kind_with_the_recorded_extra_ids(tiny, tmp_path, monkeypatch):
    """A run's vocab.json (or $T2T_VOCAB naming one) is read through its kind, with its own extra_ids, not
    load_vocabulary's default of 100."""
    shutil.copyfile(tiny.path, tmp_path / "spiece.model")
    (tmp_path / "vocab.json").write_text('{"kind": "sentencepiece", "file": "spiece.model", "extra_ids": 7}')
    loaded = load_vocabulary(tmp_path / "vocab.json")
    assert loaded == SentencePieceVocabulary(tiny.path, extra_ids=7) and loaded.record()["extra_ids"] == 7
    assert loaded.sentinel_id(0) == loaded.vocab_size - 1 == tiny.vocab_size - 100 + 7 - 1
    monkeypatch.setenv("T2T_VOCAB", str(tmp_path / "vocab.json"))
    assert load_vocabulary() == loaded


def test_load_from_env(tiny, tmp_path, monkeypatch, no_vocab_env):
    monkeypatch.setenv("T2T_VOCAB", str(tiny.path))
    monkeypatch.setenv("T2T_DATA_DIR", str(tmp_path))
    assert load_vocabulary() == tiny
    monkeypatch.setenv("T2T_VOCAB", str(tmp_path / "gone.model"))
    with pytest.raises(T2TError, match="T2T_VOCAB .*gone.model"):
        load_vocabulary()


def test_load_from_data_dir(tiny, tmp_path, monkeypatch, no_vocab_env):
    (tmp_path / "vocab").mkdir()
    shutil.copyfile(tiny.path, tmp_path / "vocab" / "t5_spiece.model")
    assert load_vocabulary(data_dir=tmp_path).path == tmp_path / "vocab" / "t5_spiece.model"
    monkeypatch.setenv("T2T_DATA_DIR", str(tmp_path))
    assert load_vocabulary() == tiny


def test_load_from_hub(tiny, tmp_path, monkeypatch, no_vocab_env):
    import huggingface_hub

    calls = []

    def fake_download(repo_id, filename, **kwargs):
        calls.append((repo_id, filename))
        return str(tiny.path)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    assert load_vocabulary(data_dir=tmp_path) == tiny  # a data dir without vocab/ falls through to the hub
    assert calls == [("google-t5/t5-small", "spiece.model")]


def test_load_offline_without_any_vocabulary(monkeypatch, no_vocab_env):
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    def offline(repo_id, filename, **kwargs):
        raise LocalEntryNotFoundError("cannot reach the hub and the file is not in the cache")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(T2TError, match="pass --vocab PATH or set T2T_VOCAB"):
        load_vocabulary()


# -- train_vocabulary ---------------------------------------------------------------------------------------


def test_train_from_utf8_and_latin1_files(tmp_path):
    lines = TINY_TEXT.splitlines()
    utf8 = tmp_path / "a.txt"
    utf8.write_text("\ufeff" + "\n".join(lines[:20]) + "\nThe café served crème brûlée.\n", encoding="utf-8")
    latin1 = tmp_path / "b.txt"
    latin1.write_bytes(("\n".join(lines[20:]) + "\nA naïve résumé from Zürich.\n").encode("latin-1"))
    with pytest.raises(UnicodeDecodeError):
        latin1.read_text(encoding="utf-8")
    model = train_vocabulary([utf8, str(latin1)], tmp_path / "out" / "sp", vocab_size=200, character_coverage=1.0)
    assert model == tmp_path / "out" / "sp.model" and model.is_file()
    vocab = SentencePieceVocabulary(model)
    sp = vocab.tokenizer
    assert vocab.vocab_size == 300
    assert (sp.pad_id(), sp.eos_id(), sp.unk_id(), sp.bos_id()) == (0, 1, 2, -1)
    pieces = {sp.id_to_piece(i) for i in range(sp.get_piece_size())}
    assert {"ï", "é", "ü", "è"} <= set("".join(pieces))  # Latin-1 text was decoded, not replaced
    assert "\ufeff" not in "".join(pieces) and "\ufffd" not in "".join(pieces)
    for text in ["A naïve résumé from Zürich.", "The café served crème brûlée."]:
        assert vocab.decode(vocab.encode(text)) == text


def test_train_from_strings_is_deterministic(tmp_path):
    first = train_vocabulary(iter([TINY_TEXT]), tmp_path / "one", vocab_size=150, num_threads=1)
    lines = (line for line in TINY_TEXT.splitlines())
    second = train_vocabulary(lines, tmp_path / "two", vocab_size=150, num_threads=1)
    a, b = SentencePieceVocabulary(first), SentencePieceVocabulary(second)
    assert a.vocab_size == 250
    assert a.encode(TINY_TEXT) == b.encode(TINY_TEXT)


def test_train_errors(tmp_path):
    with pytest.raises(T2TError, match="missing.txt does not exist"):
        train_vocabulary([tmp_path / "missing.txt"], tmp_path / "m")
    with pytest.raises(T2TError, match="no input files"):
        train_vocabulary([], tmp_path / "m")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(T2TError, match="no text"):
        train_vocabulary(empty, tmp_path / "m", vocab_size=50)
    with pytest.raises(T2TError, match="lower vocab_size"):
        train_vocabulary(iter(["a tiny text"]), tmp_path / "m", vocab_size=5000)
    with pytest.raises(T2TError, match="non-string"):
        train_vocabulary(iter(["words", 3]), tmp_path / "m", vocab_size=50)


def test_a_vocabulary_folder_that_cannot_be_made_is_one_sentence(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(T2TError, match=r"cannot create the folder of .*file/sub/v \(Not a directory\); choose a "
                                       r"writable place for the vocabulary"):
        train_vocabulary(iter([TINY_TEXT]), tmp_path / "file" / "sub" / "v", vocab_size=TINY_VOCAB_PIECES)


@pytest.mark.parametrize("size", [-5, 3])
def test_a_vocabulary_size_below_the_special_pieces_is_one_sentence(tmp_path, size):
    with pytest.raises(T2TError, match=rf"vocab_size must be at least 4 \(pad, eos and unk take 3 of the pieces\), "
                                       rf"got {size}"):
        train_vocabulary(iter([TINY_TEXT]), tmp_path / "v", vocab_size=size)


def test_a_vocabulary_too_small_for_the_texts_characters_says_to_raise_it(tmp_path):
    with pytest.raises(T2TError, match=r"Vocabulary size is smaller than required_chars.*; raise vocab_size or lower "
                                       r"character_coverage\.$"):
        train_vocabulary(iter([TINY_TEXT]), tmp_path / "v", vocab_size=5, character_coverage=1.0)


def test_the_written_files_are_sentencepieces_own(tmp_path):
    """The model trained in memory and the .vocab listing equal what SentencePiece writes itself (its model
    also records the prefix it was written to, the only difference)."""
    settings = dict(vocab_size=TINY_VOCAB_PIECES, model_type="bpe", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                    normalization_rule_name="nmt_nfkc", character_coverage=0.9995, max_sentencepiece_length=16,
                    byte_fallback=False, input_sentence_size=2_000_000, shuffle_input_sentence=True, num_threads=1,
                    minloglevel=2)
    spm.set_random_generator_seed(0)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(TINY_TEXT.splitlines()),
                                   model_prefix=str(tmp_path / "own"), **settings)
    ours = train_vocabulary(iter([TINY_TEXT]), tmp_path / "ours", vocab_size=TINY_VOCAB_PIECES, model_type="bpe",
                            num_threads=1)
    assert (tmp_path / "ours.vocab").read_text(encoding="utf-8") == (tmp_path / "own.vocab").read_text(encoding="utf-8")
    pieces = [[(p.id_to_piece(i), p.get_score(i), p.get_piece_size()) for i in range(p.get_piece_size())]
              for p in (spm.SentencePieceProcessor(model_file=str(f)) for f in (ours, tmp_path / "own.model"))]
    assert pieces[0] == pieces[1]
    assert sorted(f.name for f in tmp_path.iterdir()) == ["ours.model", "ours.vocab", "own.model", "own.vocab"]


@pytest.fixture
def earlier_vocabulary(tmp_path):
    """A vocabulary already at tmp_path/v/sp (.model and .vocab), and its files' bytes."""
    train_vocabulary(iter([TINY_TEXT]), tmp_path / "v" / "sp", vocab_size=TINY_VOCAB_PIECES, num_threads=1)
    return {f.name: f.read_bytes() for f in (tmp_path / "v").iterdir()}


def test_a_full_disk_leaves_the_earlier_vocabulary_whole_and_names_the_disk(tmp_path, earlier_vocabulary,
                                                                         monkeypatch, capsys):
    """The disk fills while the new files are flushed (where ext4/XFS/NFS report ENOSPC for delayed writes):
    SentencePiece wrote straight to sp.model, leaving it torn, and blamed the vocabulary size."""
    from t2t.cli import vocab_main

    def full_disk(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TINY_TEXT + "\nMore text, so that the new vocabulary differs from the earlier one.\n")
    monkeypatch.setattr(os, "fsync", full_disk)
    code = vocab_main([str(corpus), "--output", str(tmp_path / "v" / "sp"), "--vocab-size", "150"])
    err = capsys.readouterr().err
    folder = (tmp_path / "v").resolve()
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: cannot write the vocabulary {tmp_path / 'v' / 'sp'}.model (No space left on "
                          f"device): the disk holding {folder} is full, ")
    assert err.endswith("bytes free; free space on it or write the vocabulary to a folder on another disk "
                        "(t2t-vocab's --output); any earlier vocabulary there is unchanged.\n")
    assert {f.name: f.read_bytes() for f in (tmp_path / "v").iterdir()} == earlier_vocabulary  # no temporary left


def test_a_write_the_kernel_cuts_off_leaves_the_earlier_vocabulary_whole(tmp_path, earlier_vocabulary):
    """A real refusal part way through a file: the file-size limit (ulimit -f) lets 20,000 bytes of the new
    model reach the disk. SentencePiece wrote through it silently and left a truncated sp.model."""
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, limit[1]))
    try:
        with pytest.raises(T2TError) as info:
            train_vocabulary(iter([TINY_TEXT + "\nA different text."]), tmp_path / "v" / "sp", vocab_size=150)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, previous_handler)
    assert str(info.value) == (f"cannot write the vocabulary {tmp_path / 'v' / 'sp'}.model (File too large): raise "
                               f"the file-size limit (ulimit -f) or write the vocabulary elsewhere (t2t-vocab's "
                               f"--output); any earlier vocabulary there is unchanged.")
    assert {f.name: f.read_bytes() for f in (tmp_path / "v").iterdir()} == earlier_vocabulary
