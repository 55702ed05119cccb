"""The preprocessed cache (t2t-cache): written in shards, read back as the source's own tokenized examples, so a
run trained from it logs an uncached run's losses; a stale or damaged cache is refused in one sentence."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from t2t import config
from t2t.data import cache
from t2t.data.task import TASKS
from t2t.data.tokenized import clear_cache, iter_tokenized
from t2t.errors import T2TError
from t2t.evaluation import metrics
from t2t.testing import in_memory_task, temporarily_registered, tiny_vocabulary
from t2t.training.train import TrainConfig, train

TASK = "test_cache_copy"
WORDS = "the cat sat on a mat while dogs ran in parks and birds sang songs at dawn".split()
ROWS = [{"text": " ".join(WORDS[i:i + 3 + i % 4]), "idx": i, "meta": {"n": i, "tag": ["a", i]}}
        for i in range(len(WORDS) - 4)]
LENGTHS = {"inputs": 16, "targets": 16}


def copy(example):
    return {**example, "inputs": "copy: " + example["text"], "targets": example["text"]}


def shout(example):
    return {**example, "inputs": "COPY: " + example["text"], "targets": example["text"]}


def copy_task(preprocessor=copy):
    return in_memory_task(TASK, {"train": ROWS, "validation": ROWS[:5]}, preprocessors=[preprocessor],
                          metric_fns=[metrics.sequence_accuracy])


@pytest.fixture
def vocab(monkeypatch):
    vocab = tiny_vocabulary()
    monkeypatch.setenv("T2T_VOCAB", str(vocab.path))
    clear_cache()
    yield vocab
    clear_cache()


def write(task, vocab, out, num_shards=1, splits=("train", "validation")):
    for split in splits:
        made_from = cache.fingerprint(task, split, vocab, None, LENGTHS)
        for shard in range(num_shards):
            cache.write_shard(task, split, iter_tokenized(task, split, vocab, None, LENGTHS), made_from, out,
                              num_shards, shard)


def read(task, vocab, out, split="train"):
    with cache.reading_cache(out):
        return list(iter_tokenized(task, split, vocab, None, LENGTHS))


def same_examples(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(
        list(x) == list(y) and all(np.array_equal(x[k], y[k]) if isinstance(x[k], np.ndarray) else x[k] == y[k]
                                   for k in x) for x, y in zip(a, b))


@pytest.mark.parametrize("num_shards", [1, 3, 20])
def test_shards_read_back_as_the_sources_examples_in_order(vocab, tmp_path, num_shards):
    task = copy_task()
    write(task, vocab, tmp_path, num_shards, splits=("train",))
    expected = list(iter_tokenized(task, "train", vocab, None, LENGTHS))
    got = read(task, vocab, tmp_path)
    assert same_examples(got, expected)  # keys in order, token ids, nested fields
    assert got[0]["inputs"].dtype == expected[0]["inputs"].dtype == np.int32
    counts = [json.loads(p.read_text())["examples"] for p in sorted((tmp_path / TASK / "train").glob("shard-*.json"))]
    assert len(counts) == num_shards and sum(counts) == len(ROWS)


def test_a_stale_or_damaged_cache_is_refused(vocab, tmp_path):
    write(copy_task(), vocab, tmp_path, num_shards=2)
    with pytest.raises(T2TError, match="is stale: the task's preprocessors or features changed since"):
        read(copy_task(shout), vocab, tmp_path)
    with pytest.raises(T2TError, match="is stale: it was tokenized with another vocabulary"):
        read(copy_task(), tiny_vocabulary(vocab_size=300), tmp_path)
    with pytest.raises(T2TError, match="split 'test' of task 'test_cache_copy' is not in the cache"):
        read(copy_task(), vocab, tmp_path, split="test")
    with pytest.raises(T2TError, match="holds another version of this split"):
        write(copy_task(shout), vocab, tmp_path, num_shards=2)
    shard = tmp_path / TASK / "train" / "shard-00001-of-00002.parquet"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(T2TError, match="does not match its recorded sha256"):
        read(copy_task(), vocab, tmp_path)
    os.remove(shard.with_suffix(".json"))
    with pytest.raises(T2TError, match="lacks shard-00001-of-00002"):
        read(copy_task(), vocab, tmp_path)


def test_a_changed_data_file_makes_the_cache_stale(vocab, tmp_path):
    from t2t.data.sources import DataFiles
    from t2t.data.task import Task
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    task = Task(name=TASK, source=DataFiles({"train": str(data)}, "jsonl"), preprocessors=[copy])
    write(task, vocab, tmp_path / "cache", splits=("train",))
    assert len(read(task, vocab, tmp_path / "cache")) == len(ROWS)
    data.write_text("".join(json.dumps(row) + "\n" for row in ROWS[:-1]))
    with pytest.raises(T2TError, match="the task's data files changed since"):
        read(task, vocab, tmp_path / "cache")


@pytest.mark.integration
def test_training_from_the_cache_logs_the_uncached_losses(vocab, tmp_path):
    task = copy_task()
    write(task, vocab, tmp_path / "cache", num_shards=2)
    settings = dict(mixture=TASK, model={"vocab_size": 512, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2,
                                         "num_heads": 4, "dropout_rate": 0.1},
                    train_steps=4, batch_size=4, input_length=16, target_length=16, log_every=1, eval_every=4,
                    save_every=4, seed=3, optimizer={"name": "adamw", "learning_rate": 1e-2})
    with temporarily_registered(task):
        plain = train(config.from_dict(TrainConfig, {**settings, "output_dir": str(tmp_path / "plain")}))
        cached = train(config.from_dict(TrainConfig, {**settings, "output_dir": str(tmp_path / "cached"),
                                                      "cache_dir": str(tmp_path / "cache")}))
        assert [r["loss"] for r in cached] == [r["loss"] for r in plain]
        assert [r.get("test_cache_copy/sequence_accuracy") for r in cached] == \
            [r.get("test_cache_copy/sequence_accuracy") for r in plain]
        with pytest.raises(T2TError, match="is not in the cache"):
            train(config.from_dict(TrainConfig, {**settings, "output_dir": str(tmp_path / "missing"),
                                                 "cache_dir": str(tmp_path / "empty")}))
    assert TASK not in TASKS


def command(main: str, *args: str) -> list[str]:
    return [sys.executable, "-c", f"import sys; from t2t.cli import {main}; sys.exit({main}())", *args]


@pytest.mark.integration
@pytest.mark.real_data
def test_t2t_cache_of_rte_in_two_processes_then_training_from_it(tmp_path, data_dir):
    """Two t2t-cache processes write a shard each; training from the cache logs the uncached run's losses."""
    out = tmp_path / "cache"
    env = {**os.environ, "T2T_DATA_DIR": str(data_dir)}
    writers = [subprocess.Popen(command("cache_main", "--task", "rte", "--output", str(out), "--num-shards", "2",
                                        "--shard", str(i)), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for i in range(2)]
    for writer in writers:
        stdout, stderr = writer.communicate(timeout=600)
        assert writer.returncode == 0, stderr
        assert "glue_rte_v002 train: shard" in stdout
    runs = {}
    for name, extra in (("plain", []), ("cached", ["--cache-dir", str(out)])):
        subprocess.run(command("train_main", "--task", "rte", "--config", "cpu-smoke", "--train-steps", "3",
                               "--log-every", "1", "--eval-every", "0", "--set", "input_length=128", "--set",
                               "target_length=8", "--output-dir", str(tmp_path / name), *extra),
                       env=env, check=True, capture_output=True, text=True, timeout=600)
        runs[name] = [json.loads(line)["loss"] for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()
                      if '"loss"' in line]
    assert len(runs["plain"]) == 3 and runs["cached"] == runs["plain"]


def test_missing_data_writes_nothing(vocab, tmp_path):
    """A split whose data turns out missing when read leaves no cache.json behind (readers would take it for a
    cache whose shards are missing)."""
    from t2t.data.sources import DataNotFoundError

    def unavailable():
        raise DataNotFoundError("no data here")
        yield

    task = copy_task()
    made_from = cache.fingerprint(task, "train", vocab, None, LENGTHS)
    with pytest.raises(DataNotFoundError, match="no data here"):
        cache.write_shard(task, "train", unavailable(), made_from, tmp_path)
    assert not (tmp_path / TASK / "train" / cache.MANIFEST).exists()
