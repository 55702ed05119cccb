"""Unsupervised tasks: text folders (Latin-1 fallback, README rule, chunking, span corruption) and C4.

The stages are run here in the pipeline's order (text preprocessors → tokenize → tokenized preprocessors →
per-draw token preprocessors → EOS) by ``run_task``, so these tests pin the task definitions themselves.
"""


import numpy as np
import pytest

from t2t.data import objectives as ob
from t2t.data import tokenized
from t2t.data.sources import DataNotFoundError
from t2t.data.task import get_task
from t2t.tasks import c4 as c4_module
from t2t.tasks.text_files import TextFolderSource, is_documentation, read_text, split_text, text_files_task
from t2t.testing import tiny_vocabulary

EOS = 1


def tokenize(task, vocab, split="train", data_dir=None):
    for example in task.text_examples(split, data_dir):
        yield {key: np.asarray(vocab.encode(example[key]), dtype=np.int64) for key in ("inputs", "targets")}


def chunks(task, vocab, sequence_length, split="train", data_dir=None):
    stream = tokenize(task, vocab, split, data_dir)
    for fn in task.tokenized_preprocessors:
        stream = fn(stream, vocab=vocab, sequence_length=sequence_length)
    return list(stream)


def draw(task, chunk, vocab, sequence_length, seed):
    features = dict(chunk)
    for fn in task.token_preprocessors:
        features = fn(features, np.random.default_rng(seed), vocab=vocab, sequence_length=sequence_length)
    return {k: np.append(features[k], EOS) for k in ("inputs", "targets")}


@pytest.fixture
def folder(tmp_path):
    """A small corpus: UTF-8 (with BOM and CRLF), Latin-1, nested folders, and files that must be skipped."""
    root = tmp_path / "corpus"
    (root / "b_books").mkdir(parents=True)
    (root / "a_news" / "deep").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "b_books" / "cafe.txt").write_bytes(
        "Le café était fermé.\nIl pleuvait.\n\nDeuxième paragraphe, à côté.\n".encode("latin-1"))
    (root / "a_news" / "deep" / "z.txt").write_bytes(
        "\ufeffThe harbour town woke slowly.\r\nFishermen pulled their boats.\r\n\r\nThe baker opened.\r\n"
        .encode("utf-8"))
    (root / "a_news" / "wiki.raw").write_text(" = Title = \n\n The mayor gave a speech . \n", encoding="utf-8")
    (root / "README.md").write_text("not corpus text")
    (root / "b_books" / "SOURCE_README.txt").write_text("provenance, not corpus text")
    (root / "LICENSE.txt").write_text("licence, not corpus text")
    (root / "notes.json").write_text("{}")
    (root / ".git" / "x.txt").write_text("hidden")
    (root / ".hidden.txt").write_text("hidden")
    return root


def test_documentation_rule():
    for name in ["README.md", "readme.txt", "SOURCE_README.txt", "SOURCE_README.md", "LICENSE.txt", "COPYING"]:
        assert is_documentation(name), name
    for name in ["input.txt", "austen-emma.txt", "wiki.test.raw", "1861-Lincoln.txt", "readers-digest.txt"]:
        assert not is_documentation(name), name


def test_files_sorted_recursive_and_documentation_excluded(folder):
    source = TextFolderSource(folder)
    names = [p.relative_to(folder).as_posix() for p in source.files()]
    assert names == ["a_news/deep/z.txt", "a_news/wiki.raw", "b_books/cafe.txt"]


def test_latin1_fallback_bom_crlf_and_paragraphs(folder):
    assert read_text(folder / "b_books" / "cafe.txt").startswith("Le café était fermé.")
    examples = list(TextFolderSource(folder).load("train"))
    assert [e["text"] for e in examples] == [
        "The harbour town woke slowly. Fishermen pulled their boats.",  # BOM dropped, CRLF, lines joined
        "The baker opened.",
        "= Title =",
        "The mayor gave a speech .",
        "Le café était fermé. Il pleuvait.",                            # Latin-1 decoded, not replaced
        "Deuxième paragraphe, à côté.",
    ]
    assert examples[-1]["file"] == "b_books/cafe.txt"
    lines = [e["text"] for e in TextFolderSource(folder, unit="line").load("train")]
    assert lines[:3] == ["The harbour town woke slowly.", "Fishermen pulled their boats.", "The baker opened."]
    assert len(list(TextFolderSource(folder, unit="file").load("train"))) == 3
    assert list(split_text("a\n \nb\n\n\nc")) == ["a", "b", "c"]


def test_relative_folder_resolves_against_data_dir(folder, monkeypatch):
    monkeypatch.delenv("T2T_DATA_DIR", raising=False)
    source = TextFolderSource("corpus")
    assert len(source.files(folder.parent)) == 3
    with pytest.raises(DataNotFoundError, match="data dir"):
        source.files()
    monkeypatch.setenv("T2T_DATA_DIR", str(folder.parent))
    assert len(source.files()) == 3
    with pytest.raises(DataNotFoundError, match="does not exist"):
        TextFolderSource("nowhere").files(folder.parent)
    assert not TextFolderSource("nowhere").available("train", folder.parent)


def test_span_corruption_over_a_folder(folder):
    vocab = tiny_vocabulary()
    task = text_files_task("tmp_span_corruption", folder, register=False)
    sequence_length = {"inputs": 40, "targets": 12}
    tokens_length, targets_length = ob.random_spans_helper(40, 0.15, 3.0)
    pieces = chunks(task, vocab, sequence_length)
    # the whole split is concatenated and cut into tokens_length pieces (the last may be shorter)
    all_tokens = np.concatenate([vocab.encode(e["text"]) for e in TextFolderSource(folder).load("train")])
    np.testing.assert_array_equal(np.concatenate([p["targets"] for p in pieces]), all_tokens)
    assert all(p["targets"].size == tokens_length for p in pieces[:-1]) and len(pieces) >= 2
    for seed in range(20):
        out = draw(task, pieces[0], vocab, sequence_length, seed)
        assert out["inputs"].size == 40 and out["targets"].size == targets_length
        restored = ob.restore_from_span_corruption(out["inputs"], out["targets"], vocab.vocab_size, eos_id=vocab.eos_id)
        np.testing.assert_array_equal(restored, pieces[0]["targets"])
    # fresh noise per draw, the same noise for the same rng
    a, b, c = (draw(task, pieces[0], vocab, sequence_length, s) for s in (1, 1, 2))
    np.testing.assert_array_equal(a["inputs"], b["inputs"])
    assert not np.array_equal(a["inputs"], c["inputs"])


@pytest.mark.parametrize("objective", [ob.prefix_lm, ob.bert_style, ob.deshuffling, ob.iid_noise_drop,
                                       ob.iid_noise_replace_spans, ob.mass_style])
def test_objective_variants_over_a_folder(folder, objective):
    vocab = tiny_vocabulary()
    task = text_files_task("tmp_variant", folder, objective, register=False)
    sequence_length = {"inputs": 24, "targets": 24}
    pieces = chunks(task, vocab, sequence_length)
    assert all(p["targets"].size <= 23 for p in pieces) and max(p["targets"].size for p in pieces) == 23
    out = draw(task, pieces[0], vocab, sequence_length, 0)
    assert out["inputs"][-1] == EOS and out["targets"][-1] == EOS
    assert out["inputs"].size <= 24


@pytest.mark.parametrize("name", ["corpus_prefix_lm", "corpus_deshuffling", "c4_v220_prefix_lm",
                                  "corpus_span_corruption"])
def test_prefix_lm_and_deshuffling_split_each_document_on_its_own(folder, name):
    """t5's prefix_lm and the paper's prefix_lm.gin / all_permute.gin cut each document into windows of
    input_length - 1 tokens without concatenating documents, so no example spans two; span corruption
    concatenates (reduce_concat_tokens) and its windows cross document boundaries."""
    import dataclasses

    vocab = tiny_vocabulary()
    task = dataclasses.replace(get_task(name), source=TextFolderSource(folder))
    sequence_length = {"inputs": 8, "targets": 8}
    documents = [vocab.encode(e["text"]) for e in TextFolderSource(folder).load("train")]
    pieces = [p["targets"].tolist() for p in chunks(task, vocab, sequence_length)]
    size = ob.random_spans_helper(8, .15, 3.)[0] if name == "corpus_span_corruption" else 7
    per_document = [doc[i:i + size] for doc in documents for i in range(0, len(doc), size)]
    if name == "corpus_span_corruption":
        assert pieces != per_document and sum(pieces, []) == sum(documents, [])
    else:
        assert pieces == per_document and len(pieces) > len(documents)


def test_registered_corpus_tasks():
    task = get_task("corpus")
    assert task.name == "corpus_span_corruption"
    for name in ["corpus_prefix_lm", "corpus_bert_style", "corpus_deshuffling", "corpus_iid_noise_drop",
                 "corpus_iid_noise_replace_spans", "corpus_mass_style", "corpus_random_spans"]:
        assert get_task(name).source.folder.as_posix() == "corpus"


def test_shared_corpus_reads_every_file(data_dir):
    """The shared corpus (~11 MB): 135 text files once the 9 README/SOURCE_README files are left out, the 9
    Latin-1 files decode without replacement characters, and span corruption fills 512/114 exactly."""
    source = get_task("corpus_span_corruption").source
    files = source.files(data_dir)
    assert len(files) == 135 and not any(is_documentation(f.name) for f in files)
    latin1 = [f for f in files if f.name in ("chesterton-ball.txt", "1954-Eisenhower.txt")]
    assert len(latin1) == 2 and all("\ufffd" not in read_text(f) for f in latin1)
    assert "è" in read_text(next(f for f in files if f.name == "chesterton-ball.txt"))
    examples = source.load("train", data_dir)
    first = next(iter(examples))
    assert first["file"] == files[0].relative_to(data_dir / "corpus").as_posix()


def test_shared_corpus_span_corruption_with_t5_vocabulary(data_dir, t5_vocab_path):
    from t2t.data.vocab import SentencePieceVocabulary

    vocab = SentencePieceVocabulary(t5_vocab_path)
    task = get_task("corpus_span_corruption")
    sequence_length = {"inputs": 512, "targets": 114}
    head = task.source.files(data_dir)[:3]  # the first three files keep the test quick
    stream = ({"inputs": np.zeros(0, np.int64), "targets": np.asarray(vocab.encode(text))}
              for path in head for text in split_text(read_text(path)))
    pieces = list(task.tokenized_preprocessors[0](stream, vocab=vocab, sequence_length=sequence_length))
    assert len(pieces) >= 3 and all(p["targets"].size == 568 for p in pieces[:-1])
    for seed, piece in enumerate(pieces[:-1]):
        out = draw(task, piece, vocab, sequence_length, seed)
        assert out["inputs"].size == 512 and out["targets"].size == 114
        assert vocab.decode(out["targets"]).startswith("<extra_id_0>")


# --- C4 -----------------------------------------------------------------------------------------------------

def test_c4_is_t5s_span_corruption_over_streamed_allenai_c4(monkeypatch):
    """The hub is out of reach in tests, so ``datasets.load_dataset`` is replaced by a stand-in that records
    its arguments and yields C4-shaped rows; everything after the source is the real task."""
    import datasets

    calls = []
    rows = [{"text": f"Document number {i}. The harbour town woke slowly on the first cold morning.",
             "timestamp": "2019-04-25T12:57:54Z", "url": f"https://example.com/{i}"} for i in range(300)]

    def fake_load_dataset(path, **kwargs):
        calls.append((path, kwargs))
        return iter(rows)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    task = get_task("c4")
    assert task is c4_module.c4_v220_span_corruption and task.name == "c4_v220_span_corruption"
    vocab = tiny_vocabulary()
    sequence_length = {"inputs": 512, "targets": 114}
    pieces = chunks(task, vocab, sequence_length)
    path, kwargs = calls[0]
    assert path == "allenai/c4" and kwargs["name"] == "en" and kwargs["streaming"] is True
    assert kwargs["split"] == "train"
    # documents are concatenated in groups of 128 (t5's reduce_concat_tokens) and cut into 568 tokens
    per_doc = [len(vocab.encode(r["text"])) for r in rows]
    expected = sum(-(-sum(per_doc[g:g + 128]) // 568) for g in range(0, 300, 128))
    assert len(pieces) == expected
    out = draw(task, pieces[0], vocab, sequence_length, 0)
    assert out["inputs"].size == 512 and out["targets"].size == 114
    np.testing.assert_array_equal(
        ob.restore_from_span_corruption(out["inputs"], out["targets"], vocab.vocab_size, eos_id=vocab.eos_id),
        pieces[0]["targets"])
    assert task.source.num_examples("validation") == 364_608


# --- through the real pipeline (build_train_batches) ---------------------------------------------------------

def test_folder_task_through_build_train_batches(folder):
    """Packed 40/12 batches from a folder task: every segment is a span-corrupted chunk that restores to the
    text, the tokens are cached (epoch 2 does not tokenize again) and epoch 2 draws fresh noise."""
    from t2t.data.pipeline import build_train_batches
    from t2t.testing import temporarily_registered

    vocab = tiny_vocabulary()
    task = text_files_task("tmp_folder_span_corruption", folder, register=False)
    with temporarily_registered(task):
        tokenized.clear_cache()
        batches = build_train_batches(task.name, vocab=vocab, batch_size=2, input_length=40, target_length=12,
                                      pack=True, seed=3)
        n_chunks = len(batches.streams[task.name].data)
        first = batches.next_examples(n_chunks)
        second = batches.next_examples(n_chunks)  # epoch 2: same chunks, fresh noise, no tokenizing
        tokenized.clear_cache()
        batch = next(iter(build_train_batches(task.name, vocab=vocab, batch_size=2, input_length=40,
                                              target_length=12, pack=True, seed=3)))
    chunks_by_text = {}
    for epoch in (first, second):
        for ex in epoch:
            assert ex["inputs"][-1] == EOS and ex["targets"][-1] == EOS
            restored = ob.restore_from_span_corruption(ex["inputs"], ex["targets"], vocab.vocab_size,
                                                       eos_id=vocab.eos_id)
            chunks_by_text.setdefault(tuple(restored), []).append(tuple(ex["inputs"]))
    assert len(chunks_by_text) == n_chunks  # each chunk is drawn once per epoch
    assert all(len(v) == 2 for v in chunks_by_text.values())
    # full chunks (44 tokens, 2 spans) get new noise in epoch 2; a short last chunk with one span cannot,
    # since t5's mask puts a lone noise span at the end
    full = [v for text, v in chunks_by_text.items() if len(text) == ob.random_spans_helper(40, .15, 3.)[0]]
    assert len(full) >= 2 and all(v[0] != v[1] for v in full)
    assert batch["encoder_input_tokens"].shape == (2, 40) and batch["decoder_target_tokens"].shape == (2, 12)
    assert int(batch["encoder_segment_ids"].max()) >= 1


def test_folder_task_tokenizes_once(folder, monkeypatch):
    from t2t.data.pipeline import build_train_batches
    from t2t.testing import temporarily_registered

    vocab = tiny_vocabulary()
    calls = []
    original = type(vocab).encode_batch
    monkeypatch.setattr(type(vocab), "encode_batch", lambda self, texts: calls.append(1) or original(self, texts))
    task = text_files_task("tmp_folder_once", folder, register=False)
    with temporarily_registered(task):
        tokenized.clear_cache()
        batches = build_train_batches(task.name, vocab=vocab, batch_size=2, input_length=40, target_length=12)
        n_chunks = len(batches.streams[task.name].data)
        after_open = len(calls)
        batches.next_examples(5 * n_chunks)  # five epochs
        assert len(calls) == after_open > 0
    tokenized.clear_cache()


def test_shared_corpus_packed_batches(data_dir, t5_vocab_path):
    """corpus_span_corruption on the real corpus with T5's vocabulary: 512/114 packed batches, full chunks
    fill the encoder exactly (one segment per row)."""
    from t2t.data.pipeline import build_train_batches
    from t2t.data.vocab import SentencePieceVocabulary

    vocab = SentencePieceVocabulary(t5_vocab_path)
    batches = build_train_batches("corpus", vocab=vocab, batch_size=8, input_length=512, target_length=114,
                                  pack=True, seed=0, data_dir=data_dir)
    batch = next(iter(batches))
    assert batch["encoder_input_tokens"].shape == (8, 512) and batch["decoder_target_tokens"].shape == (8, 114)
    full = batch["encoder_segment_ids"].max(dim=1).values == 1
    assert full.sum() >= 7  # at most the one short final chunk can share a row
    assert bool((batch["encoder_input_tokens"][full] != 0).all()) and bool((batch["decoder_loss_weights"][full] == 1).all())
    tokenized.clear_cache()


def test_full_lm_marks_document_ends_not_chunk_ends(folder):
    """Table 2's LM objective as t5's ``full_lm``: each document ends in EOS, the text is concatenated and cut
    into chunks of target_length, no EOS is added to a chunk, and there are no inputs (not even EOS); so a
    decoder-only row is the start id followed by the chunk, and the loss covers all of it."""
    from t2t.data.pipeline import build_train_batches
    from t2t.testing import temporarily_registered

    vocab = tiny_vocabulary()
    task = text_files_task("tmp_full_lm", folder, ob.full_lm, register=False)
    documents = [np.append(doc["targets"], EOS) for doc in tokenize(task, vocab)]
    pieces = chunks(task, vocab, {"inputs": 8, "targets": 16})
    assert len(documents) >= 3 and [p["targets"].size for p in pieces[:-1]] == [16] * (len(pieces) - 1)
    assert np.concatenate([p["targets"] for p in pieces]).tolist() == np.concatenate(documents).tolist()
    with temporarily_registered(task):
        tokenized.clear_cache()
        batch = next(iter(build_train_batches(task.name, vocab=vocab, batch_size=2, input_length=8, target_length=16,
                                              pack=False, seed=0, architecture="decoder_only")))
    texts = {tuple(p["targets"]) for p in pieces}
    for row in range(2):
        weights = batch["decoder_loss_weights"][row].tolist()
        n = sum(weights)  # the chunk, then padding: no EOS of its own
        targets = batch["decoder_target_tokens"][row].tolist()
        assert tuple(targets[:n]) in texts and weights == [1] * n + [0] * (len(weights) - n)
        assert not any(targets[n:]) and batch["decoder_input_tokens"][row].tolist()[:n] == [0] + targets[:n - 1]


def test_c4_has_t5s_lm_objectives_for_the_architecture_comparison():
    for name, objective in (("c4_v220_full_lm", ob.full_lm), ("c4_v220_prefix_lm", ob.prefix_lm)):
        task = get_task(name)
        assert task.token_preprocessors[0].keywords["objective"] is objective
        assert task.source.num_examples("validation") == 364_608
    assert get_task("corpus_full_lm").source.folder.as_posix() == "corpus"
