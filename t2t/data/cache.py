"""A preprocessed cache (seqio's ``cache_tasks_main``): the deterministic part of a task's pipeline (source →
text preprocessors → tokens → its tokenized stage) written once as Parquet shards, read back by training and
evaluation in place of reading and tokenizing the source again.

Layout: ``DIR/<task>/<split>/`` holds ``cache.json`` (what the cache was made from: a fingerprint of the
task's definition, its vocabulary, its source, and the sequence lengths where the task's tokenized stage
reads them) and ``shard-I-of-N.parquet`` with ``shard-I-of-N.json`` (its examples and sha256). Shard ``I``
holds examples ``I, I + N, I + 2N, …`` of the split, so ``N`` machines write a split in parallel
(``t2t-cache --num-shards N --shard I``, a SLURM array or Kubernetes jobs) and a reader interleaves the shards
back into source order. Each example is one row: its token features as int32 lists, everything else as the
example's JSON (exact for the text and numbers preprocessors give). The files are plain Parquet (written with
pyarrow, which ``datasets`` reads them with: ``datasets.load_dataset("parquet", data_files=…)``).

A cache whose fingerprint differs from what the task would make now (a preprocessor's code edited, another
vocabulary, changed data files) or whose shards are missing or damaged is refused in one sentence; nothing
falls back silently. ``reading_cache(DIR)`` makes ``t2t.data.tokenized`` read every task from ``DIR``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import itertools
import json
import logging
import os
import re
from pathlib import Path
from typing import Iterable, Iterator, Mapping

import numpy as np

from t2t import durable
from t2t.data.sources import DataNotFoundError
from t2t.errors import T2TError

log = logging.getLogger(__name__)

MANIFEST = "cache.json"
FORMAT = 1  # the layout above; a reader refuses another
ROWS_PER_GROUP = 1024
_reading: Path | None = None


@contextlib.contextmanager
def reading_cache(cache_dir: str | os.PathLike | None):
    """Inside, tokenized examples come from the cache at ``cache_dir`` (None: from the sources, as usual)."""
    global _reading
    before, _reading = _reading, (Path(cache_dir) if cache_dir else None)
    try:
        yield
    finally:
        _reading = before


def active_cache() -> Path | None:
    return _reading


# ---------------------------------------------------------------------------------------------- fingerprint

def fingerprint(task, split: str, vocab, data_dir, sequence_length: Mapping[str, int] | None) -> dict:
    """What a cached split was made from, to compare with what it would be made from now."""
    lengths = dict(sorted(sequence_length.items())) if task.tokenized_preprocessors and sequence_length else None
    return {"format": FORMAT, "task": task.name, "split": split,
            "definition": _sha256(definition_text(task)),
            "vocabulary": _vocabulary_sha256(task, vocab),
            "source": _sha256(task.source.stamp(split, data_dir)),
            "sequence_length": lengths}


def definition_text(task) -> str:
    """The task's definition as text: its source, output features and the code of its deterministic
    preprocessors (``functools.partial`` arguments included)."""
    features = [(key, f.add_eos, f.required, type(f.vocabulary).__name__) for key, f in task.output_features.items()]
    code = [function_text(fn) for fn in (*task.preprocessors, *task.tokenized_preprocessors)]
    return "\n".join([task.name, task.source.describe(), repr(features), *code])


def function_text(fn) -> str:
    if isinstance(fn, functools.partial):
        arguments = repr((fn.args, sorted(fn.keywords.items())))
        return function_text(fn.func) + re.sub(r" at 0x[0-9a-f]+", "", arguments)  # no addresses: stable per run
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):  # a builtin, or code typed at a prompt
        return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))}"


def _vocabulary_sha256(task, vocab) -> str:
    own = [f.vocabulary.sha256 for f in task.output_features.values() if f.vocabulary is not None]
    return _sha256("\n".join([vocab.sha256 if vocab is not None else "", *own]))


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _changed(recorded: Mapping, current: Mapping) -> str | None:
    """The first difference between two fingerprints, as the part of a sentence that says what changed."""
    reasons = {"format": "it was written by another version of t2t's cache",
               "definition": "the task's preprocessors or features changed since",
               "vocabulary": "it was tokenized with another vocabulary",
               "source": "the task's data files changed since",
               "sequence_length": "its tokenized stage ran at other sequence lengths"}
    return next((reason for key, reason in reasons.items() if recorded.get(key) != current.get(key)), None)


# ---------------------------------------------------------------------------------------------- writing

def shard_name(shard: int, num_shards: int) -> str:
    return f"shard-{shard:05d}-of-{num_shards:05d}"


def write_shard(task, split: str, examples: Iterable[dict], made_from: dict, cache_dir: str | os.PathLike,
                num_shards: int = 1, shard: int = 0) -> int:
    """Write shard ``shard`` of ``num_shards`` of the task's tokenized ``examples`` of ``split`` (all of them,
    in source order; ``t2t.data.tokenized.iter_tokenized``) into ``cache_dir``, recorded as ``made_from`` (its
    ``fingerprint``); returns how many examples the shard holds. Rewriting a shard of the same fingerprint
    replaces it; a cache of another fingerprint is refused."""
    if not 0 <= shard < num_shards:
        raise T2TError(f"--shard {shard} is not one of the {num_shards} shards (0 … {num_shards - 1}); pass "
                       f"--shard between 0 and --num-shards - 1.")
    examples = iter(examples)
    first = next(examples, None)  # reads the source: missing data is told before anything is written
    folder = Path(cache_dir) / task.name / split
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise durable.write_error(e, f"the cache folder {folder}") from None
    _claim(folder, made_from, num_shards)
    name = shard_name(shard, num_shards)
    everything = itertools.chain([] if first is None else [first], examples)
    mine = (example for i, example in enumerate(everything) if i % num_shards == shard)
    count = _write_parquet(folder / f"{name}.parquet", mine, task)
    record = {"examples": count, "sha256": durable.sha256_of(folder / f"{name}.parquet")}
    durable.write_atomic(folder / f"{name}.json", json.dumps(record))
    return count


def _claim(folder: Path, current: dict, num_shards: int) -> None:
    """Record what the cache in ``folder`` is made from, or check that it is what it was made from."""
    manifest = folder / MANIFEST
    wanted = {**current, "num_shards": num_shards}
    if manifest.exists():
        recorded = _read_json(manifest)
        if recorded != wanted:
            why = _changed(recorded, current) or f"it was written in {recorded.get('num_shards')} shards"
            raise T2TError(f"the cache {folder} holds another version of this split ({why}); delete {folder} to "
                           f"write it again, or pass another --output.")
        return
    durable.write_atomic(manifest, json.dumps(wanted, indent=2))


def _write_parquet(path: Path, rows: Iterator[dict], task) -> int:
    """Write ``rows`` to ``path`` (under a temporary name, fsynced, then renamed); returns their number."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    keys = list(task.output_features)
    schema = pa.schema([(key, pa.list_(pa.int32())) for key in keys] + [("example", pa.string())])
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    count, group = 0, []
    try:
        durable.refuse_link(tmp)
        with pq.ParquetWriter(str(tmp), schema) as writer:
            for row in rows:
                group.append(_encoded(row, keys, task))
                count += 1
                if len(group) == ROWS_PER_GROUP:
                    writer.write_table(pa.Table.from_pylist(group, schema))
                    group = []
                    log.info("%s: %d examples written", path.name, count)
            if group or not count:
                writer.write_table(pa.Table.from_pylist(group, schema))
        durable.fsync_file(tmp)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise durable.write_error(e, str(path)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return count


def _encoded(example: dict, keys: list[str], task) -> dict:
    out = {key: (np.asarray(example[key], np.int32).tolist() if key in example else None) for key in keys}
    fields = {k: (None if k in keys else v) for k, v in example.items()}  # the keys in order; tokens apart
    try:
        out["example"] = json.dumps(fields, allow_nan=True)
    except TypeError as e:
        raise T2TError(f"task {task.name!r}: an example has a field JSON cannot hold ({e}); make the "
                       f"preprocessors give text, numbers, lists and dicts to cache it.") from None
    return out


# ---------------------------------------------------------------------------------------------- reading

def cached_examples(task, split: str, vocab, data_dir, sequence_length, cache_dir: Path) -> Iterator[dict]:
    """The task's tokenized ``split`` from the cache in ``cache_dir``, in source order (checked first)."""
    folder = cache_dir / task.name / split
    fix = require_cached(task, split, cache_dir)
    recorded = _read_json(folder / MANIFEST)
    why = _changed(recorded, fingerprint(task, split, vocab, data_dir, sequence_length))
    if why:
        raise T2TError(f"the cache {folder} is stale: {why}; write it again with {fix} (after deleting "
                       f"{folder}), or leave out --cache-dir.")
    num_shards = int(recorded.get("num_shards", 0))
    paths = [_checked_shard(folder, shard_name(i, num_shards), fix) for i in range(num_shards)]
    return _interleaved([_rows(path, task) for path in paths])


def require_cached(task, split: str, cache_dir: Path) -> str:
    """The command that writes the task's ``split`` into ``cache_dir``; a DataNotFoundError (what
    ``--skip-unavailable`` skips) if the cache has no such split."""
    fix = f"t2t-cache --task {task.name} --split {split} --output {cache_dir}"
    if not (cache_dir / task.name / split / MANIFEST).is_file():
        raise DataNotFoundError(f"split {split!r} of task {task.name!r} is not in the cache {cache_dir}; write it "
                                f"with {fix}, or leave out --cache-dir.")
    return fix


def _checked_shard(folder: Path, name: str, fix: str) -> Path:
    record_file, path = folder / f"{name}.json", folder / f"{name}.parquet"
    if not record_file.is_file() or not path.is_file():
        raise T2TError(f"the cache {folder} lacks {name} (a shard not written, or not finished); write it with "
                       f"{fix} --num-shards N --shard I.")
    if durable.sha256_of(path) != _read_json(record_file).get("sha256"):
        raise T2TError(f"{path} does not match its recorded sha256 (damaged or edited); delete it and write the "
                       f"shard again with {fix}.")
    return path


def _rows(path: Path, task) -> Iterator[dict]:
    import pyarrow.parquet as pq
    keys = list(task.output_features)
    for batch in pq.ParquetFile(str(path)).iter_batches(batch_size=ROWS_PER_GROUP):
        columns = {key: _token_lists(batch.column(key)) for key in keys}
        for i, text in enumerate(batch.column("example").to_pylist()):
            example = json.loads(text)
            for key, (values, offsets, present) in columns.items():
                if present[i]:
                    example[key] = values[offsets[i]:offsets[i + 1]].copy()
            yield example


def _token_lists(column) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A list<int32> column as (all values, row offsets, which rows have a list): no Python list per row."""
    values = column.values.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    return values, column.offsets.to_numpy(), column.is_valid().to_numpy(zero_copy_only=False)


def _interleaved(shards: list[Iterator[dict]]) -> Iterator[dict]:
    """Example ``j`` of shard ``i`` is example ``j·N + i`` of the split."""
    while shards:
        for i, shard in enumerate(list(shards)):
            example = next(shard, None)
            if example is None:
                shards = shards[:i]  # a shard ends first only where the split ends
                break
            yield example


def _read_json(path: Path) -> dict:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise T2TError(f"cannot read {path} ({e}); delete the cache folder and write it again.") from None
    if not isinstance(found, dict):
        raise T2TError(f"{path} is not a cache record; delete the cache folder and write it again.")
    return found
