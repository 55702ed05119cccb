"""Sources: data files through datasets' builders, saved datasets, hub-style folders, Python data."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from t2t.data.sources import (
    CsvFiles,
    DataFiles,
    DataNotFoundError,
    DiskDataset,
    GeneratorSource,
    HFDataset,
    HubUnreachableError,
    InMemorySource,
    JsonlFiles,
    TextFiles,
    TsvFiles,
    resolve_data_dir,
)
from t2t.errors import T2TError
from t2t.tasks.glue import GlueSource, read_glue_tsv

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


def test_locate_gives_the_file_and_line_of_an_example(tmp_path):
    """Counted as the builders read: JSON lines skip blank lines, a TSV also its header; several files in order."""
    (tmp_path / "part-0.jsonl").write_text('{"text": "a"}\n\n   \n{"text": "b"}\n')
    (tmp_path / "part-1.jsonl").write_text('\n{"text": "c"}\n')
    jsonl = JsonlFiles({"train": str(tmp_path / "part-*.jsonl")})
    assert [r["text"] for r in jsonl.load("train")] == ["a", "b", "c"]
    assert [jsonl.locate("train", i) for i in range(4)] == [
        f"jsonl file {tmp_path / 'part-0.jsonl'}, line 1", f"jsonl file {tmp_path / 'part-0.jsonl'}, line 4",
        f"jsonl file {tmp_path / 'part-1.jsonl'}, line 2", None]
    (tmp_path / "a.tsv").write_text("text\tlabel\nhello\t1\n\nbye\t0\n")
    tsv = TsvFiles({"train": str(tmp_path / "a.tsv")})
    assert [r["text"] for r in tsv.load("train")] == ["hello", "bye"]
    assert tsv.locate("train", 1) == f"tsv file {tmp_path / 'a.tsv'}, line 4"
    # a CSV record may span lines, and Python data has no file: neither says where
    (tmp_path / "a.csv").write_text('text,label\n"two\nlines",1\n')
    assert CsvFiles({"train": str(tmp_path / "a.csv")}).locate("train", 0) is None
    assert InMemorySource({"train": ROWS}).locate("train", 0) is None


def test_missing_file_is_data_not_found(tmp_path):
    with pytest.raises(DataNotFoundError, match=r"nope\.jsonl.*does not exist"):
        JsonlFiles({"train": "nope.jsonl"}).load("train", tmp_path)


def test_unknown_split_and_format(tmp_path):
    with pytest.raises(T2TError, match="no split 'test'"):
        JsonlFiles({"train": "x.jsonl"}).load("test", tmp_path)
    with pytest.raises(T2TError, match="unknown data file format"):
        DataFiles({"train": "x"}, "xml")


@pytest.mark.parametrize("content, message", [
    ('{"text": "ok"}\n{"text": \n', r"jsonl file .*bad\.jsonl, line 2, is not valid JSON \(Expecting value at "
                                    r"column 10\); fix that line\.$"),
    ('{"text": "ok"}\n\n["a list"]\n', r"line 3, is a JSON list, not an object"),
    ("", r"jsonl file .*bad\.jsonl holds no examples \(it is empty\)"),
    ("\n  \n", r"holds no examples"),
])
def test_broken_jsonl_names_the_file_and_line_in_one_sentence(content, message, tmp_path, capfd):
    (tmp_path / "bad.jsonl").write_text(content)
    with pytest.raises(T2TError, match=message):
        list(JsonlFiles({"train": str(tmp_path / "bad.jsonl")}).load("train"))
    assert "Failed to" not in capfd.readouterr().err  # datasets' own log line is not printed besides


def test_a_csv_file_datasets_cannot_read_says_why(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(T2TError, match=r"csv file .*empty\.csv holds no examples"):
        list(CsvFiles({"train": str(tmp_path / "empty.csv")}).load("train"))
    (tmp_path / "bad.csv").write_text('a,b\n1,2\n"open quote\n')
    with pytest.raises(T2TError, match=r"bad\.csv with datasets\.load_dataset: ParserError: .*EOF inside string"):
        list(CsvFiles({"train": str(tmp_path / "bad.csv")}).load("train"))


@pytest.mark.parametrize("source, content, where", [
    # datasets reads a JSON-lines file's text unchecked, a TSV's when it loads: the same sentence either way
    (JsonlFiles, b'{"text": "ok"}\n{"text": "caf\xe9"}\n', r"line 2, is not UTF-8 \(byte 0xe9 at column 14\)"),
    (TsvFiles, b"text\tlabel\nok\t1\ncaf\xe9\t1\n", r"line 3, is not UTF-8 \(byte 0xe9 at column 4\)"),
])
def test_a_non_utf8_byte_in_a_data_file_names_file_and_line(source, content, where, tmp_path):
    path = tmp_path / "latin1.data"
    path.write_bytes(content)
    with pytest.raises(T2TError, match=f"file {path}, {where}; save the file as UTF-8\\.$"):
        list(source({"train": str(path)}).load("train"))


def test_text_that_pandas_would_read_as_missing_or_quoted_stays_as_written(tmp_path):
    (tmp_path / "a.tsv").write_text('text\tlabel\nNA\t1\nNone\t0\n"quoted" start\t1\nnull\t0\n')
    assert [r["text"] for r in TsvFiles({"train": str(tmp_path / "a.tsv")}).load("train")] == [
        "NA", "None", '"quoted" start', "null"]
    (tmp_path / "a.csv").write_text('text,label\nNA,1\n"a, b",0\n')
    assert list(CsvFiles({"train": str(tmp_path / "a.csv")}).load("train")) == [{"text": "NA", "label": 1},
                                                                                  {"text": "a, b", "label": 0}]


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


# ------------------------------------------------------------------ hub errors told apart from missing data

def raise_from(error: BaseException, cause: BaseException):
    def load_dataset(*args, **kwargs):
        raise error from cause
    return load_dataset


def http_error(cls, status: int, message: str):
    """A huggingface_hub HTTP error with a response status, whatever HTTP library the installed version uses."""
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.response = SimpleNamespace(status_code=status, headers={})
    return error


@pytest.mark.parametrize("offline", [False, True])
def test_hub_errors_are_told_apart_from_missing_data(monkeypatch, offline):
    import datasets
    from datasets.exceptions import DatasetNotFoundError
    from huggingface_hub.utils import GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", offline)
    source = HFDataset("some-user/some-dataset")
    cases = [  # (raised, raised from) -> (error class, words in the message)
        ((DatasetNotFoundError("Dataset 'some-user/some-dataset' is a gated dataset on the Hub."),
          http_error(GatedRepoError, 403, "403 gated")), (T2TError, "the dataset is gated; accept its conditions")),
        ((http_error(HfHubHTTPError, 429, "429 Too Many Requests"), None), (T2TError, "rate-limiting requests (HTTP 429); wait and retry")),
        ((http_error(HfHubHTTPError, 401, "401 Unauthorized"), None), (T2TError, "refused access")),
        ((DatasetNotFoundError("Dataset 'some-user/some-dataset' doesn't exist on the Hub"),
          http_error(RepositoryNotFoundError, 401, "401 Repository Not Found")), (DataNotFoundError, "not found")),
        ((ConnectionError("Couldn't reach 'some-user/some-dataset' on the Hub (LocalEntryNotFoundError)"),
          LocalEntryNotFoundError("not cached")),
         (DataNotFoundError, "offline mode is on") if offline else (HubUnreachableError, "could not be reached")),
    ]
    for (error, cause), (expected, words) in cases:
        monkeypatch.setattr(datasets, "load_dataset", raise_from(error, cause))
        with pytest.raises(T2TError) as raised:
            source.load("train")
        assert type(raised.value) is expected and words in str(raised.value), (error, str(raised.value))


# ------------------------------------------------------------------ bad files and folders, named

def test_a_data_dir_that_does_not_exist_is_named(tmp_path, monkeypatch):
    from t2t.data.vocab import load_vocabulary
    monkeypatch.delenv("T2T_VOCAB", raising=False)
    with pytest.raises(T2TError, match=f"data dir {tmp_path / 'nope'} \\(--data-dir\\) does not exist"):
        load_vocabulary(data_dir=tmp_path / "nope")
    monkeypatch.setenv("T2T_DATA_DIR", str(tmp_path / "typo"))
    with pytest.raises(T2TError, match="data dir .*typo \\(T2T_DATA_DIR\\) does not exist"):
        GlueSource("rte").load("validation")


def test_a_non_utf8_byte_in_a_glue_file_names_file_and_line(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_bytes(b"index\tsentence1\tsentence2\tlabel\n0\tok\tok\tentailment\n1\tcaf\xe9\tok\tentailment\n")
    with pytest.raises(T2TError, match=f"GLUE file {path} line 3 is not UTF-8 \\(byte 0xe9\\)"):
        list(read_glue_tsv(path, "rte"))


def test_a_field_over_the_csv_limit_names_file_and_line(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_text("index\tsentence1\tsentence2\tlabel\n0\tok\tok\tentailment\n1\t" + "x" * 1_000_000 +
                    "\tok\tentailment\n")
    with pytest.raises(T2TError, match=f"GLUE file {path} line 3 cannot be read as TSV \\(field larger than"):
        list(read_glue_tsv(path, "rte"))


def test_a_dataset_loading_script_never_runs(tmp_path, monkeypatch):
    """datasets 4.0 removed loading scripts; 2.19 ran them and 2.20–3.x ran them when
    HF_DATASETS_TRUST_REMOTE_CODE was set, so t2t requires datasets>=4 (setup.cfg)."""
    import configparser
    from importlib.metadata import version

    from packaging.requirements import Requirement
    requires = configparser.ConfigParser()
    requires.read(Path(__file__).resolve().parents[2] / "setup.cfg")
    floor = next(Requirement(line) for line in requires["options"]["install_requires"].split()
                 if line.startswith("datasets"))
    assert floor.specifier.contains("4.0") and not floor.specifier.contains("3.6.0")
    assert int(version("datasets").split(".")[0]) >= 4

    marker = tmp_path / "script-ran"
    repo = tmp_path / "scripted"
    repo.mkdir()
    (repo / "scripted.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    monkeypatch.setenv("HF_DATASETS_TRUST_REMOTE_CODE", "1")
    with pytest.raises(T2TError, match="could not load"):
        HFDataset(str(repo)).load("train")
    assert not marker.exists()


def test_overlapping_quiet_loads_restore_the_datasets_log_level_once_the_last_ends():
    """A background thread's load may start before the main thread's ends and end after it."""
    import contextlib
    import logging

    from t2t.data.sources import _datasets_log_quiet
    logger = logging.getLogger("datasets")
    before = logger.level
    first, second = contextlib.ExitStack(), contextlib.ExitStack()
    first.enter_context(_datasets_log_quiet())
    second.enter_context(_datasets_log_quiet())
    first.close()
    assert logger.level == logging.CRITICAL  # the second load is still quiet
    second.close()
    assert logger.level == before
