"""A task's split as token ids: tokenize the text examples, run the tokenized stage, cache, append EOS.

    text examples (source order) ─ tokenize (vocab.encode_batch) ─ tokenized_preprocessors ─► cache
    cache ─► ``eval_examples`` (EOS appended, for ``task.examples``) or the trainer's draws (``t2t.data.pipeline``)

Caching: tokenized examples live in an in-memory cache per (task, split, vocabulary, data dir[, sequence
lengths when the task has a tokenized stage]), so the second epoch and every evaluation reuse them. The
sources already keep their raw rows in ``datasets``' Arrow cache; the token cache is in memory because its key
is a live vocabulary object (not something ``datasets`` can fingerprint reliably), because in-memory and
generator sources have no files to cache beside, and because GLUE-sized splits take seconds to tokenize and
megabytes to hold. Streaming sources (``source.streaming``) are never cached (``t2t.data.pipeline`` reads them
afresh each epoch through ``iter_tokenized``).

This module knows tasks only through their attributes (``TokenizableTask``), so ``t2t.data.task`` can import it
(``Task.examples``) without a cycle.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence

import numpy as np

from t2t.data import cache
from t2t.data.sources import resolve_data_dir
from t2t.errors import T2TError


class TokenizableTask(Protocol):
    """What this module reads of a ``t2t.data.task.Task``."""

    name: str
    output_features: Mapping[str, Any]
    tokenized_preprocessors: Sequence[Callable]

    def text_examples(self, split: str, data_dir=None) -> Iterator[dict]: ...

    def check_split(self, split: str) -> None: ...


TOKENIZE_CHUNK = 1024

_CACHE: dict[tuple, tuple[TokenizableTask, list[dict]]] = {}


def clear_cache() -> None:
    """Forget every cached tokenized split."""
    _CACHE.clear()


def _feature_vocab(task: TokenizableTask, key: str, vocab):
    feature_vocab = task.output_features[key].vocabulary or vocab
    if feature_vocab is None:
        raise T2TError(f"task {task.name!r} needs a vocabulary to tokenize {key!r}; pass vocab= (or --vocab).")
    return feature_vocab


def _tokenize_chunk(task: TokenizableTask, chunk: list[dict], vocab, first: int = 0) -> list[dict]:
    """``chunk`` (examples ``first``, ``first + 1``, … of the split) with each text feature tokenized."""
    out = [dict(ex) for ex in chunk]
    for key in task.output_features:
        have = [i for i, ex in enumerate(chunk) if key in ex]
        if not have:
            continue
        if len(have) != len(chunk):
            raise T2TError(f"task {task.name!r}: some examples have {key!r} and some do not; make the text "
                           f"preprocessors give every example the same fields.")
        texts = [ex[key] for ex in chunk]
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                missing = " (a field missing from a data file reads as None)" if text is None else ""
                raise T2TError(f"task {task.name!r}: feature {key!r} of example {first + i} (counting from 0 in "
                               f"the data's order) must be a string after the text preprocessors, got "
                               f"{type(text).__name__}{missing}; fix that example or make the preprocessors "
                               f"return text.")
        ids = _feature_vocab(task, key, vocab).encode_batch(texts)
        for ex, text, row in zip(out, texts, ids):
            ex[f"{key}_pretokenized"] = text
            ex[key] = np.asarray(row, dtype=np.int32)
    for key, feature in task.output_features.items():
        if feature.required and out and key not in out[0]:
            raise T2TError(f"task {task.name!r}: the text preprocessors give no {key!r} field; add a "
                           f"preprocessor that sets it or mark the feature required=False.")
    return out


def iter_tokenized(task: TokenizableTask, split: str, vocab, data_dir=None,
                   sequence_length: Mapping[str, int] | None = None) -> Iterator[dict]:
    """Tokenized examples in source order, through the task's tokenized (deterministic) stage; lazy. Inside
    ``t2t.data.cache.reading_cache`` they come from the preprocessed cache instead."""
    cache_dir = cache.active_cache()
    if cache_dir is not None:
        return cache.cached_examples(task, split, vocab, data_dir, sequence_length, cache_dir)

    def tokenized() -> Iterator[dict]:
        chunk: list[dict] = []
        first = 0
        for example in task.text_examples(split, data_dir):
            chunk.append(example)
            if len(chunk) == TOKENIZE_CHUNK:
                yield from _tokenize_chunk(task, chunk, vocab, first)
                first, chunk = first + len(chunk), []
        if chunk:
            yield from _tokenize_chunk(task, chunk, vocab, first)

    stream: Any = tokenized()
    if task.tokenized_preprocessors:
        if sequence_length is None:
            raise T2TError(f"task {task.name!r} has a tokenized stage that needs the sequence lengths; pass "
                           f"sequence_length={{'inputs': ..., 'targets': ...}}.")
        for fn in task.tokenized_preprocessors:
            stream = fn(stream, vocab=vocab, sequence_length=dict(sequence_length))
    return iter(stream)


def tokenized_split(task: TokenizableTask, split: str, vocab, data_dir=None,
                    sequence_length: Mapping[str, int] | None = None) -> list[dict]:
    """The whole split tokenized (cached; see the module docstring). Token ids carry no EOS yet."""
    lengths = tuple(sorted(sequence_length.items())) if (task.tokenized_preprocessors and sequence_length) else None
    key = (id(task), split, vocab, str(resolve_data_dir(data_dir)), lengths, cache.active_cache())
    if key not in _CACHE:
        rows = list(iter_tokenized(task, split, vocab, data_dir, sequence_length))
        if not rows:
            raise T2TError(f"split {split!r} of task {task.name!r} has no examples after its tokenized "
                           f"preprocessors; check the data and the preprocessors.")
        _CACHE[key] = (task, rows)  # the task is kept alive so its id() is not reused while cached
    return _CACHE[key][1]


def eos_id(task: TokenizableTask, key: str, vocab) -> int:
    """The EOS id of feature ``key``'s vocabulary (the run's ``vocab`` unless the feature has its own)."""
    return int(_feature_vocab(task, key, vocab).eos_id)


def eval_examples(task: TokenizableTask, split: str, vocab, data_dir=None,
                  sequence_length: Mapping[str, int] | None = None, max_examples: int | None = None) -> list[dict]:
    """``task.examples``: source order, EOS appended (no trimming, no random preprocessors); with
    ``max_examples`` only the first ones are read and tokenized (not cached)."""
    task.check_split(split)
    if max_examples is None:
        rows = tokenized_split(task, split, vocab, data_dir, sequence_length)
    else:
        rows = itertools.islice(iter_tokenized(task, split, vocab, data_dir, sequence_length), max_examples)
    out = []
    for cached in rows:
        example = dict(cached)
        for key, feature in task.output_features.items():
            if key in example:
                ids = np.asarray(example[key], dtype=np.int64)
                if feature.add_eos:
                    ids = np.append(ids, eos_id(task, key, vocab))
                example[key] = ids
        out.append(example)
    return out


def trim_and_append_eos(task: TokenizableTask, features: Mapping[str, Any], sequence_length: Mapping[str, int],
                        vocab) -> tuple[dict, bool]:
    """T5's ``append_eos_after_trim``: features cut to their length, keeping room for EOS, which comes last.

    Returns the model-ready ``{"inputs", "targets"}`` (int64; a missing optional feature is empty) and
    whether anything was cut."""
    out, trimmed = {}, False
    for key, feature in task.output_features.items():
        if key not in features:
            if feature.required:
                raise T2TError(f"task {task.name!r}: an example has no {key!r} after the token preprocessors; "
                               f"make them return it.")
            out[key] = np.zeros(0, np.int64)
            continue
        ids = np.asarray(features[key])
        n = _kept_tokens(ids.size, int(sequence_length[key]), feature.add_eos)
        trimmed |= n < ids.size
        if feature.add_eos:  # one int64 copy of what is kept, EOS written after it (a draw's hot path)
            out[key] = np.empty(n + 1, np.int64)
            out[key][:n], out[key][n] = ids[:n], eos_id(task, key, vocab)
        else:
            out[key] = ids[:n].astype(np.int64)
    return out, trimmed


def _kept_tokens(size: int, length: int, add_eos: bool) -> int:
    """How many of a feature's ``size`` tokens fit in ``length`` (one slot is EOS's when it is appended)."""
    return min(size, length - 1) if add_eos else min(size, length)


def trimmed_lengths(task: TokenizableTask, lengths: Mapping[str, int], sequence_length: Mapping[str, int]
                    ) -> dict[str, int] | None:
    """The lengths ``trim_and_append_eos`` gives features of ``lengths`` (None where it would refuse them: a
    required feature missing)."""
    out = {}
    for key, feature in task.output_features.items():
        if key not in lengths:
            if feature.required:
                return None
            out[key] = 0
            continue
        out[key] = _kept_tokens(lengths[key], int(sequence_length[key]), feature.add_eos) + int(feature.add_eos)
    return out
