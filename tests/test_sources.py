"""Sources: data files through datasets' builders, saved datasets, hub-style folders, Python data."""

import json

import pytest

from t2t.errors import T2TError
from t2t.sources import (CsvFiles, DataFiles, DataNotFoundError, DiskDataset, GeneratorSource, HFDataset, InMemorySource,
                         JsonlFiles, TextFiles, TsvFiles, resolve_data_dir)

ROWS = [{"text": "a fine film", "label": "positive"}, {"text": "dull", "label": "negative"}]


def _write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_in_source_order_relative_to_data_dir(tmp_path):
    _write_jsonl(tmp_path / "sent" / "train.jsonl", ROWS)
    source = JsonlFiles({"train": "sent/train.jsonl"})
    assert source.splits == ("train",)
    assert [dict(r) for r in source.load("train", tmp_path)] == ROWS


def test_data_dir_from_environment(tmp_path, monkeypatch):
    _write_jsonl(tmp_path / "train.jsonl", ROWS)
    monkeypatch.setenv("T2T_DATA_DIR", str(tmp_path))
    assert resolve_data_dir() == tmp_path
    assert len(list(JsonlFiles({"train": "train.jsonl"}).load("train"))) == 2


def test_csv_tsv_and_text(tmp_path):
    (tmp_path / "a.csv").write_text("text,label\nhello,1\nbye,0\n")
    (tmp_path / "a.tsv").write_text("text\tlabel\nhello, there\t1\n")
    (tmp_path / "a.txt").write_text("line one\nline two\n")
    assert [dict(r) for r in CsvFiles({"train": str(tmp_path / "a.csv")}).load("train")] == [
        {"text": "hello", "label": 1}, {"text": "bye", "label": 0}]
    assert [dict(r) for r in TsvFiles({"train": str(tmp_path / "a.tsv")}).load("train")] == [
        {"text": "hello, there", "label": 1}]
    assert [r["text"] for r in TextFiles({"train": str(tmp_path / "a.txt")}).load("train")] == ["line one", "line two"]


def test_glob_and_several_files(tmp_path):
    _write_jsonl(tmp_path / "part-0.jsonl", ROWS[:1])
    _write_jsonl(tmp_path / "part-1.jsonl", ROWS[1:])
    rows = list(JsonlFiles({"train": str(tmp_path / "part-*.jsonl")}).load("train"))
    assert [r["text"] for r in rows] == ["a fine film", "dull"]


def test_missing_file_is_data_not_found(tmp_path):
    with pytest.raises(DataNotFoundError, match=r"nope\.jsonl.*does not exist"):
        JsonlFiles({"train": "nope.jsonl"}).load("train", tmp_path)


def test_unknown_split_and_format(tmp_path):
    with pytest.raises(T2TError, match="no split 'test'"):
        JsonlFiles({"train": "x.jsonl"}).load("test", tmp_path)
    with pytest.raises(T2TError, match="unknown data file format"):
        DataFiles({"train": "x"}, "xml")


def test_broken_jsonl_is_one_sentence(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"text": \n')
    with pytest.raises(T2TError) as info:
        list(JsonlFiles({"train": str(tmp_path / "bad.jsonl")}).load("train"))
    assert "bad.jsonl" in str(info.value)


def test_saved_dataset(tmp_path):
    import datasets
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS),
                          "validation": datasets.Dataset.from_list(ROWS[:1])}).save_to_disk(str(tmp_path / "ds"))
    source = DiskDataset("ds")
    assert [r["text"] for r in source.load("validation", tmp_path)] == ["a fine film"]
    with pytest.raises(T2TError, match="no split 'test'"):
        source.load("test", tmp_path)
    with pytest.raises(DataNotFoundError):
        DiskDataset("missing").load("train", tmp_path)


def test_hf_dataset_by_path_with_configs(tmp_path):
    """HFDataset goes through datasets.load_dataset(path, name, split) exactly as for a hub id."""
    import datasets
    repo = tmp_path / "repo"
    (repo / "small").mkdir(parents=True)
    datasets.Dataset.from_list(ROWS).to_parquet(str(repo / "small" / "train-00000.parquet"))
    (repo / "README.md").write_text("---\nconfigs:\n- config_name: small\n  data_files:\n  - split: train\n"
                                    "    path: small/train-*\n---\n")
    source = HFDataset(str(repo), "small", splits=("train",))
    assert [dict(r) for r in source.load("train")] == ROWS
    streamed = HFDataset(str(repo), "small", streaming=True)
    assert [dict(r) for r in streamed.load("train")] == ROWS
    with pytest.raises(T2TError, match="could not load"):
        source.load("validation")


def test_hub_id_offline_is_data_not_found(monkeypatch):
    import datasets
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(DataNotFoundError, match="some-user/some-dataset"):
        HFDataset("some-user/some-dataset").load("train")


def test_python_sources():
    memory = InMemorySource({"train": ROWS})
    assert memory.load("train") == ROWS and memory.num_examples("train") == 2
    with pytest.raises(T2TError, match="no split"):
        memory.load("validation")
    calls = []

    def rows(split):
        calls.append(split)
        yield from ROWS

    generated = GeneratorSource(rows, splits=("train",))
    assert list(generated.load("train")) == ROWS and list(generated.load("train")) == ROWS
    assert calls == ["train", "train"]
