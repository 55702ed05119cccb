"""Where raw examples come from: Hugging Face datasets (hub or local), data files, Python data, a benchmark's
official files with the hub as fallback (``LocalOrHub``; GLUE's and SuperGLUE's readers live with their tasks).

Every source has ``splits`` (a tuple, empty when only the dataset itself knows), ``load(split, data_dir)``
returning an iterable of raw example dicts in source order, ``num_examples(split)`` (a declared size or
None, never reads data), ``locate(split, index, data_dir)`` (the file and line of an example, for errors, where
the source can tell), ``streaming`` and ``describe()``. Hub and file sources go through ``datasets``
(``load_dataset`` / ``load_from_disk``) so its Arrow cache and streaming do the work.

Relative file paths are resolved against the data dir: ``--data-dir`` / ``data_dir=``, else ``$T2T_DATA_DIR``.
Data that cannot be found raises :class:`DataNotFoundError` (a ``T2TError``), so a mixture can tell
"missing" (skippable with ``skip_unavailable``) from "broken" (always an error).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from t2t.errors import T2TError
from t2t.hub import hub_failure

PathLike = str | os.PathLike


class DataNotFoundError(T2TError):
    """The data for a split is not available: absent locally and on the hub, or out of reach (offline mode,
    no network). A mixture may skip it (``skip_unavailable``)."""


class HubUnreachableError(DataNotFoundError):
    """The hub could not be reached (no network, DNS, timeout): the data may exist, it could not be fetched."""


def resolve_data_dir(data_dir: PathLike | None = None) -> Path | None:
    """``data_dir`` if given, else ``$T2T_DATA_DIR``, else None; a folder named but absent is an error."""
    value = data_dir if data_dir is not None else os.environ.get("T2T_DATA_DIR") or None
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.is_dir():
        given = "--data-dir" if data_dir is not None else "T2T_DATA_DIR"
        what = "is not a folder" if path.exists() else "does not exist"
        raise T2TError(f"data dir {path} ({given}) {what}; check the path.")
    return path


def _error_with_type(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200]}" if text else type(error).__name__


# hub.hub_failure's answer → (error class, reason, the fix when it is not the caller's)
_HUB_FAILURES = {
    "gated": (T2TError, "the dataset is gated", "accept its conditions on its hub page and log in (hf auth login)"),
    "refused": (T2TError, "the hub refused access (HTTP 401/403)", "log in (hf auth login) or check your token"),
    "rate_limited": (T2TError, "the hub is rate-limiting requests (HTTP 429)",
                     "wait and retry, or log in for a higher limit"),
    "offline": (DataNotFoundError, "offline mode is on (HF_HUB_OFFLINE) and there is no cached copy", None),
    "unreachable": (HubUnreachableError, "the hub could not be reached (no network?)", None),
}


class Source:
    """Base class: subclasses set ``splits`` and implement ``load``."""

    splits: tuple[str, ...] = ()
    streaming: bool = False

    def load(self, split: str, data_dir: PathLike | None = None) -> Iterable[dict]:
        raise NotImplementedError

    def num_examples(self, split: str) -> int | None:
        sizes = getattr(self, "sizes", None) or {}
        return sizes.get(split)

    def locate(self, split: str, index: int, data_dir: PathLike | None = None) -> str | None:
        """Where example ``index`` of ``split`` (counting from 0 in source order) is written, such as
        ``"jsonl file F, line 3"``, for an error about it to name; None where the source cannot tell."""
        return None

    def describe(self) -> str:
        return type(self).__name__

    def stamp(self, split: str, data_dir: PathLike | None = None) -> str:
        """What ``split`` is read from, as text that changes when the data does: the description, and the
        size and modification time of each local file the split is read from (t2t.data.cache compares it)."""
        files = self.files_read(split, data_dir)
        stats = [f"{path} {path.stat().st_size} {path.stat().st_mtime_ns}" for path in files]
        return "\n".join([self.describe(), str(resolve_data_dir(data_dir)), *stats])

    def files_read(self, split: str, data_dir: PathLike | None = None) -> list[Path]:
        """The local files ``split`` is read from (none for data from the hub or in memory)."""
        return []


# ------------------------------------------------------------------------------------------ Hugging Face

def _load_dataset(path: str, what: str, fix: str = "check the name and the files, or use a local copy",
                  **kwargs):
    """``datasets.load_dataset``; a failure is one sentence, and "missing" (DataNotFoundError, skippable)
    only when the data is absent or offline mode forbids fetching it: refused access and rate limits are
    errors to fix, the hub out of reach is HubUnreachableError."""
    import datasets
    try:
        return datasets.load_dataset(path, **kwargs)
    except Exception as e:  # datasets raises many types
        failure = hub_failure(e, offline=datasets.config.HF_HUB_OFFLINE)
        told = e.__cause__ if isinstance(e, datasets.exceptions.DatasetGenerationError) and e.__cause__ else e
        cls, reason, own_fix = _HUB_FAILURES.get(failure, (T2TError, _error_with_type(told), None))
        if failure == "not_found":
            cls, reason = DataNotFoundError, f"not found ({_error_with_type(e)})"
        raise cls(f"could not load {what} with datasets.load_dataset: {reason}; {own_fix or fix}.") from None


class HFDataset(Source):
    """A dataset on the Hugging Face hub (``path="nyu-mll/glue", name="stsb"``) or a local dataset folder /
    loading script that ``datasets.load_dataset`` understands. ``split_map`` renames t2t split names to the
    dataset's; ``streaming=True`` reads without downloading everything (an ``IterableDataset``)."""

    def __init__(self, path: str, name: str | None = None, *, splits: Sequence[str] = (),
                 split_map: Mapping[str, str] | None = None, streaming: bool = False,
                 revision: str | None = None, sizes: Mapping[str, int] | None = None, **load_kwargs):
        self.path, self.name = path, name
        self.splits = tuple(splits)
        self.split_map = dict(split_map or {})
        self.streaming = streaming
        self.revision = revision
        self.sizes = dict(sizes or {})
        self.load_kwargs = load_kwargs

    def load(self, split, data_dir=None):
        hf_split = self.split_map.get(split, split)
        return _load_dataset(self.path, f"{self.describe()} split {hf_split!r}", name=self.name,
                             split=hf_split, streaming=self.streaming, revision=self.revision, **self.load_kwargs)

    def describe(self):
        return f"Hugging Face dataset {self.path}" + (f" ({self.name})" if self.name else "")


class DiskDataset(Source):
    """A dataset saved with ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk`` (relative to the data dir)."""

    def __init__(self, path: PathLike, *, splits: Sequence[str] = (), sizes: Mapping[str, int] | None = None):
        self.path = Path(path)
        self.splits = tuple(splits)
        self.sizes = dict(sizes or {})

    def load(self, split, data_dir=None):
        import datasets
        path = _resolve(self.path, data_dir)
        if not path.exists():
            raise DataNotFoundError(f"no saved dataset at {path}; create it with save_to_disk or pass the right "
                                    f"--data-dir.")
        try:
            ds = datasets.load_from_disk(str(path))
        except Exception as e:
            raise T2TError(f"could not read the saved dataset at {path} ({_error_with_type(e)}); re-save it with "
                           f"save_to_disk.") from None
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise T2TError(f"the saved dataset at {path} has no split {split!r}; it has "
                               f"{', '.join(ds)}.")
            return ds[split]
        if split != "train":
            raise T2TError(f"the saved dataset at {path} is a single Dataset, used as split 'train'; save a "
                           f"DatasetDict to have split {split!r}.")
        return ds

    def describe(self):
        return f"saved dataset {self.path}"

    def files_read(self, split, data_dir=None):
        path = _resolve(self.path, data_dir)
        return sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []


class DataFiles(Source):
    """JSON lines, CSV, TSV or plain-text files read with the ``datasets`` builders (cached as Arrow).

    ``files`` maps each split to a path, a glob or a list of them; relative paths are taken from the data dir.
    Text files give one example ``{"text": line}`` per line.
    """

    # pandas reads "NA", "null", "None" … as missing values, and a TSV field that starts with a quote as quoted:
    # text data means them as text (a TSV is not quoted: GLUE's, read as TFDS reads it, csv.QUOTE_NONE)
    BUILDERS = {"jsonl": ("json", {}), "json": ("json", {}), "csv": ("csv", {"keep_default_na": False}),
                "tsv": ("csv", {"sep": "\t", "keep_default_na": False, "quoting": csv.QUOTE_NONE}),
                "text": ("text", {})}
    # formats with one example per line, as the builders read them: (header lines, blank lines skipped); a CSV
    # record may span lines, a JSON file is one document, and the text builder splits lines its own way
    ONE_EXAMPLE_PER_LINE = {"jsonl": (0, True), "tsv": (1, True)}

    def __init__(self, files: Mapping[str, PathLike | Sequence[PathLike]], format: str, *,
                 sizes: Mapping[str, int] | None = None, **builder_kwargs):
        if format not in self.BUILDERS:
            raise T2TError(f"unknown data file format {format!r}; use one of {', '.join(self.BUILDERS)}.")
        if isinstance(files, (str, os.PathLike)):
            files = {"train": files}
        self.files = {split: ([p] if isinstance(p, (str, os.PathLike)) else list(p)) for split, p in files.items()}
        self.format = format
        self.splits = tuple(self.files)
        self.sizes = dict(sizes or {})
        self.builder_kwargs = builder_kwargs

    def paths(self, split: str, data_dir: PathLike | None = None) -> list[str]:
        if split not in self.files:
            raise T2TError(f"{self.describe()} has no split {split!r}; it has {', '.join(self.files)}.")
        out = []
        for p in self.files[split]:
            path = _resolve(Path(p), data_dir)
            matches = sorted(path.parent.glob(path.name)) if any(c in path.name for c in "*?[") else [path]
            if not matches or not all(m.is_file() for m in matches):
                where = "" if Path(p).is_absolute() else f" (relative paths are taken from the data dir " \
                                                         f"{resolve_data_dir(data_dir) or 'unset'})"
                raise DataNotFoundError(f"{self.format} file {path} for split {split!r} does not exist{where}; "
                                        f"check the path or pass --data-dir.")
            out += [str(m) for m in matches]
        return out

    def load(self, split, data_dir=None):
        builder, defaults = self.BUILDERS[self.format]
        paths = self.paths(split, data_dir)
        try:
            with _datasets_log_quiet():  # a failure is told below, in one sentence
                rows = _load_dataset(builder, f"{self.format} files {', '.join(paths)}",
                                     data_files={split: paths}, split=split, **{**defaults, **self.builder_kwargs})
        except DataNotFoundError:
            raise
        except T2TError:
            problem = _file_problem(paths, self.format)
            if problem is None:
                raise
            raise T2TError(problem) from None
        return _decoded(rows, paths, self.format)

    def locate(self, split, index, data_dir=None):
        """The file and line of example ``index``, counted in the files as the builder reads them (read only
        when asked: an error is being told)."""
        if self.format not in self.ONE_EXAMPLE_PER_LINE:
            return None
        header_lines, skip_blank = self.ONE_EXAMPLE_PER_LINE[self.format]
        remaining = index
        for path in self.paths(split, data_dir):
            with open(path, "rb") as f:
                for number, line in enumerate(f, 1):
                    if number <= header_lines or (skip_blank and not line.strip()):
                        continue
                    if remaining == 0:
                        return f"{self.format} file {path}, line {number}"
                    remaining -= 1
        return None

    def describe(self):
        shown = "; ".join(f"{s}: {', '.join(map(str, p))}" for s, p in self.files.items())
        return f"{self.format} files ({shown})"

    def files_read(self, split, data_dir=None):
        return [Path(p) for p in self.paths(split, data_dir)]


_QUIET = {"depth": 0, "level": logging.NOTSET}  # loads in progress inside _datasets_log_quiet, on any thread
_QUIET_LOCK = threading.Lock()


@contextlib.contextmanager
def _datasets_log_quiet():
    """``datasets`` logs a file it fails to read (an error line) before it raises; t2t says it once. Nested
    and concurrent loads (a background thread's) restore the level only when the last one ends."""
    import datasets  # noqa: F401 -- importing it sets its logger's level: first, so that ours holds
    logger = logging.getLogger("datasets")
    with _QUIET_LOCK:
        if _QUIET["depth"] == 0:
            _QUIET["level"] = logger.level
            logger.setLevel(logging.CRITICAL)
        _QUIET["depth"] += 1
    try:
        yield
    finally:
        with _QUIET_LOCK:
            _QUIET["depth"] -= 1
            if _QUIET["depth"] == 0:
                logger.setLevel(_QUIET["level"])


def _decoded(rows: Iterable[dict], paths: list[str], format: str) -> Iterator[dict]:
    """``rows``, with text that is not UTF-8 one sentence naming the file and line. The JSON builder loads such
    bytes unchecked (Arrow validates UTF-8 only when a row is read), so the error comes here, not at load;
    the files are scanned only then, as GLUE's reader does."""
    try:
        yield from rows
    except UnicodeDecodeError as e:
        raise T2TError(_file_problem(paths, format) or f"{format} files {', '.join(paths)} hold text that is not "
                       f"UTF-8 ({e.reason}); save them as UTF-8.") from None


def _file_problem(paths: list[str], format: str) -> str | None:
    """What makes data files that ``datasets`` failed to load (or read) unreadable, found by reading them line
    by line (one sentence naming the file, the line and the fix): a file without examples, a line that is not
    UTF-8, or a JSON-lines line that is not an object. None when none explains the failure."""
    for path in paths:
        empty = True
        with open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    return (f"{format} file {path}, line {number}, is not UTF-8 (byte {raw[e.start]:#04x} at column "
                            f"{e.start + 1}); save the file as UTF-8.")
                empty = empty and not line.strip()
                problem = _json_line_problem(line) if format == "jsonl" and line.strip() else None
                if problem:
                    return f"{format} file {path}, line {number}, {problem}"
        if empty:
            return f"{format} file {path} holds no examples (it is empty); give it examples or leave it out."
    return None


def _json_line_problem(line: str) -> str | None:
    try:
        value = json.loads(line.rstrip("\r\n"))  # columns as in the file
    except json.JSONDecodeError as e:
        return f"is not valid JSON ({e.msg} at column {e.colno}); fix that line."
    if not isinstance(value, dict):
        return (f"is a JSON {type(value).__name__}, not an object ({{\"field\": value, ...}}); make each line one "
                f"example's object.")
    return None


def JsonlFiles(files, **kwargs) -> DataFiles:
    """JSON-lines files, one example object per line."""
    return DataFiles(files, "jsonl", **kwargs)


def CsvFiles(files, **kwargs) -> DataFiles:
    return DataFiles(files, "csv", **kwargs)


def TsvFiles(files, **kwargs) -> DataFiles:
    return DataFiles(files, "tsv", **kwargs)


def TextFiles(files, **kwargs) -> DataFiles:
    """Plain-text files, one ``{"text": line}`` example per line."""
    return DataFiles(files, "text", **kwargs)


# ------------------------------------------------------------------------------------------ Python data

class InMemorySource(Source):
    """Examples held in Python lists: ``InMemorySource({"train": [{...}, ...], "validation": [...]})``."""

    def __init__(self, examples: Mapping[str, Sequence[Mapping]]):
        self.examples = {split: [dict(e) for e in rows] for split, rows in examples.items()}
        self.splits = tuple(self.examples)

    def load(self, split, data_dir=None):
        if split not in self.examples:
            raise T2TError(f"in-memory source has no split {split!r}; it has {', '.join(self.examples)}.")
        return [dict(e) for e in self.examples[split]]

    def num_examples(self, split):
        return len(self.examples[split]) if split in self.examples else None

    def describe(self):
        return "in-memory examples"

    def stamp(self, split, data_dir=None):
        return f"in-memory examples {hashlib.sha256(repr(self.examples.get(split)).encode()).hexdigest()}"


class GeneratorSource(Source):
    """Examples made by a Python function: ``fn(split) -> iterable of dicts`` (called afresh for each pass)."""

    def __init__(self, fn: Callable[[str], Iterable[Mapping]], splits: Sequence[str] = ("train",),
                 sizes: Mapping[str, int] | None = None, streaming: bool = False):
        self.fn = fn
        self.splits = tuple(splits)
        self.sizes = dict(sizes or {})
        self.streaming = streaming  # True: read afresh each epoch, in order, never held in memory

    def load(self, split, data_dir=None):
        return (dict(e) for e in self.fn(split))

    def describe(self):
        return f"generator {getattr(self.fn, '__name__', repr(self.fn))}"


# ------------------------------------------------------------------------------------------ local files, else hub

class LocalOrHub(Source):
    """A benchmark read from its official download under the data dir when the files are there, else from the hub.

    ``files`` maps each split to candidate file groups relative to the data dir (e.g. ``[("wmt/en-ro/x.en",
    "wmt/en-ro/x.ro")]``); the first group whose files all exist is read with ``read(paths) -> rows``, which
    gives rows in the hub's shape. Splits with no local candidates, or none present, load ``hub`` (an
    :class:`HFDataset`); when that fails too the error names both places.
    """

    def __init__(self, what: str, hub: HFDataset, files: Mapping[str, Sequence[Sequence[PathLike]]],
                 read: Callable[[list[Path]], Iterable[dict]], *, splits: Sequence[str],
                 sizes: Mapping[str, int] | None = None):
        self.what = what
        self.hub = hub
        self.files = {split: [tuple(group) for group in groups] for split, groups in files.items()}
        self.read = read
        self.splits = tuple(splits)
        self.sizes = dict(sizes or {})

    def local_paths(self, split: str, data_dir: PathLike | None = None) -> list[Path] | None:
        """The first complete group of local files for ``split``, or None."""
        root = resolve_data_dir(data_dir)
        if root is None:
            return None
        for group in self.files.get(split, ()):
            paths = [root / p for p in group]
            if all(p.is_file() for p in paths):
                return paths
        return None

    def available(self, split: str, data_dir: PathLike | None = None) -> bool | None:
        """True when the local files exist; None (unknown: the hub may have them) otherwise."""
        return True if self.local_paths(split, data_dir) else None

    def load(self, split, data_dir=None):
        if split not in self.splits:
            raise T2TError(f"{self.what} has no split {split!r}; it has {', '.join(self.splits)}.")
        paths = self.local_paths(split, data_dir)
        if paths:
            return self.read(paths)
        try:
            return self.hub.load(split, data_dir)
        except DataNotFoundError:
            root = resolve_data_dir(data_dir)
            looked = " or ".join(" + ".join(str(root / p if root else p) for p in group)
                                 for group in self.files.get(split, ())) or "no local layout"
            raise DataNotFoundError(
                f"no {self.what} {split} data: not under the data dir ({looked}; data dir {root or 'unset'}) and "
                f"{self.hub.describe()} could not be loaded; put the official files there and pass --data-dir "
                f"(or set T2T_DATA_DIR), or reach the hub.") from None

    def describe(self):
        return f"{self.what} (local files under the data dir or {self.hub.describe()})"

    def files_read(self, split, data_dir=None):
        return self.local_paths(split, data_dir) or []


def _resolve(path: Path, data_dir: PathLike | None) -> Path:
    path = Path(path).expanduser()
    if path.is_absolute():
        return path
    root = resolve_data_dir(data_dir)
    return (root / path) if root is not None else path
