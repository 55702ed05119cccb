"""The vocabulary interface as a run folder uses it: a run records its vocabulary's kind in vocab.json and every
tool reads it back through that kind; a kind is one class plus one registration line (here, in this file)."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from t2t import config
from t2t.checkpoints import run as run_lib
from t2t.checkpoints.hf import to_hf
from t2t.checkpoints.loading import load_model
from t2t.data.sources import InMemorySource
from t2t.data.task import TASKS, Task, register_task
from t2t.data.vocab import VOCABULARY_KINDS, SentencePieceVocabulary, Vocabulary, load_vocabulary, register_vocabulary
from t2t.errors import T2TError
from t2t.evaluation import metrics
from t2t.evaluation.evaluate import EvalConfig, evaluate
from t2t.testing import tiny_vocabulary
from t2t.training.train import TrainConfig, train

TASK = "test_vocabulary_kinds_copy"
ROWS = [{"text": t} for t in ["the cat sat", "a dog ran", "birds sing", "rain falls", "the sun rises"]]
TINY_MODEL = dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, dropout_rate=0.0)  # sized by the vocabulary


class CharVocabulary(Vocabulary):
    """A toy kind: one id per character of ``alphabet`` after pad, eos and unk, then the sentinels. vocab.json
    holds all of it (no file beside it)."""

    kind = "test_chars"

    def __init__(self, alphabet: str, extra_ids: int = 0, path: Path = Path("<chars>")):
        self.alphabet, self.extra_ids, self.path = alphabet, extra_ids, Path(path)

    @property
    def vocab_size(self) -> int:
        return 3 + len(self.alphabet) + self.extra_ids

    @property
    def sha256(self) -> str:
        return hashlib.sha256(f"{self.alphabet}/{self.extra_ids}".encode()).hexdigest()

    def encode(self, text: str) -> list[int]:
        return [3 + self.alphabet.index(c) if c in self.alphabet else self.unk_id for c in text]

    def decode(self, ids) -> str:
        ids = list(ids)
        ids = ids[:ids.index(self.eos_id)] if self.eos_id in ids else ids
        return "".join(self.alphabet[i - 3] if 3 <= i < 3 + len(self.alphabet) else "?"
                       for i in ids if i != self.pad_id)

    def record(self) -> dict:
        return {"alphabet": self.alphabet, "extra_ids": self.extra_ids}

    @classmethod
    def from_record(cls, file: Path, record: dict) -> "CharVocabulary":
        return cls(record["alphabet"], record["extra_ids"], file)


@pytest.fixture
def chars(tmp_path, monkeypatch):
    """The toy kind registered, a copy task, and the user's char vocabulary file (a .json record)."""
    register_vocabulary(CharVocabulary)
    register_task(Task(name=TASK, source=InMemorySource({"train": ROWS, "validation": ROWS[:3]}),
                       preprocessors=[lambda ex: {"inputs": "copy: " + ex["text"], "targets": ex["text"]}],
                       metric_fns=[metrics.sequence_accuracy]))
    monkeypatch.delenv("T2T_VOCAB", raising=False)
    (tmp_path / "no-data").mkdir()
    monkeypatch.setenv("T2T_DATA_DIR", str(tmp_path / "no-data"))
    src = tmp_path / "src"
    src.mkdir()
    (src / "chars.json").write_text(json.dumps({"kind": "test_chars", "alphabet": "abcdefghijklmnopqrstuvwxyz :",
                                                "extra_ids": 2}))
    yield src / "chars.json"
    VOCABULARY_KINDS.unregister("test_chars")
    TASKS.unregister(TASK)


def settings(out: Path, vocab) -> TrainConfig:
    return config.from_dict(TrainConfig, dict(
        mixture=TASK, model=TINY_MODEL, vocab=str(vocab), output_dir=str(out), train_steps=2, batch_size=2,
        input_length=32, target_length=16, pack=False, log_every=1, save_every=2, seed=1,
        optimizer={"name": "adamw", "learning_rate": 1e-2}))


def test_a_run_of_another_vocabulary_kind_evaluates_after_a_move_through_its_record(chars, tmp_path):
    train(settings(tmp_path / "run", chars))
    assert json.loads((tmp_path / "run" / "vocab.json").read_text()) == json.loads(chars.read_text())
    assert not (tmp_path / "run" / "spiece.model").exists()
    scored = evaluate(EvalConfig(mixture=TASK, checkpoint=str(tmp_path / "run"), max_length=8,
                                 output_dir=str(tmp_path / "before")))
    shutil.rmtree(chars.parent)
    shutil.move(tmp_path / "run", tmp_path / "moved")
    run = run_lib.open_run(tmp_path / "moved")
    vocab = load_vocabulary(run.vocab)
    assert isinstance(vocab, CharVocabulary) and vocab.sentinel_id(0) == vocab.vocab_size - 1
    assert load_model(tmp_path / "moved").config.vocab_size == run_lib.embedding_rows(vocab.vocab_size)
    assert evaluate(EvalConfig(mixture=TASK, checkpoint=str(tmp_path / "moved"), max_length=8,
                               output_dir=str(tmp_path / "after"))) == scored
    with pytest.raises(T2TError, match=r"^the vocabulary .*moved/vocab.json is of kind test_chars, which Hugging "
                                       r"Face's T5 tokenizer cannot read; export without a vocabulary"):
        to_hf(load_model(tmp_path / "moved"), tmp_path / "hf", vocabulary=vocab)
    VOCABULARY_KINDS.unregister("test_chars")
    with pytest.raises(T2TError, match=r"^vocabulary record .*moved/vocab.json is of kind 'test_chars', which is not "
                                       r"registered \(the registered kinds are byte, sentencepiece\); pass the "
                                       r"--module"):
        load_vocabulary(run.vocab)
    register_vocabulary(CharVocabulary)  # the fixture unregisters it


def test_a_sentencepiece_run_records_its_kind_and_a_run_from_before_the_record_keeps_loading(chars, tmp_path):
    model = tmp_path / "src" / "my.model"
    shutil.copyfile(tiny_vocabulary().path, model)
    train(settings(tmp_path / "run", model))
    record = json.loads((tmp_path / "run" / "vocab.json").read_text())
    assert record == {"kind": "sentencepiece", "file": "spiece.model", "extra_ids": 100}
    assert load_vocabulary(run_lib.open_run(tmp_path / "run").vocab) == SentencePieceVocabulary(model)
    (tmp_path / "run" / "vocab.json").unlink()  # as runs wrote before vocab.json
    run_lib.record_checksums(tmp_path / "run")
    shutil.rmtree(tmp_path / "src")
    run = run_lib.open_run(tmp_path / "run")
    assert run.vocab == str(tmp_path / "run" / "spiece.model")
    assert set(evaluate(EvalConfig(mixture=TASK, checkpoint=str(tmp_path / "run"), max_length=4))) == {TASK}


@pytest.mark.parametrize("record, problem", [
    ({"kind": "sentencepiece", "file": "../my.model", "extra_ids": 100},
     r"names the file '\.\./my\.model', not a file beside it"),
    ({"kind": "sentencepiece", "file": "spiece.model", "extra_ids": "100"},
     r"has extra_ids '100', which must be of type int"),
    ({"file": "spiece.model"}, r"is of kind None, which is not registered"),
    ({"kind": ["sentencepiece"]}, r"is of kind \['sentencepiece'\], which is not registered"),
])
def test_a_hand_edited_vocabulary_record_is_one_sentence_naming_it(tmp_path, record, problem):
    shutil.copyfile(tiny_vocabulary().path, tmp_path / "spiece.model")
    (tmp_path / "vocab.json").write_text(json.dumps(record))
    with pytest.raises(T2TError, match=rf"^vocabulary record {tmp_path / 'vocab.json'} {problem}"):
        load_vocabulary(tmp_path / "vocab.json")
