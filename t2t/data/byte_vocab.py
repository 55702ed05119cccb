"""ByT5's byte vocabulary (Xue et al., "ByT5: Towards a token-free future with pre-trained byte-to-byte models",
TACL 2022, §3.1): every UTF-8 byte is a token, with ``seqio.ByteVocabulary``'s ids.

- ids: pad 0, eos 1, unk 2, then byte ``b`` as ``b + 3`` (3..258), then ``extra_ids`` sentinels (ByT5: 125)
  counted from the end as in T5: ``<extra_id_0>`` is ``vocab_size - 1`` (383), ``<extra_id_1>`` 382, ...
  ByT5's 384 ids fill three rows of 128 exactly, so the model's embedding has no unused rows.
- ``encode`` adds no EOS and normalises nothing (the paper's point: no preprocessing at all).
  ``<extra_id_N>`` written in the text (N below ``extra_ids``) is the sentinel's id, as in t2t's SentencePiece
  vocabulary and transformers' ``ByT5Tokenizer``; seqio reads it as its 12 bytes. ``<pad>``, ``</s>`` and
  ``<unk>`` written in the text stay bytes, as in seqio (``ByT5Tokenizer`` makes them ids 0, 1, 2, swallowing
  the spaces around them, so a text quoting "</s>" would end early).
- ``decode`` keeps the ids before the first EOS, writes sentinels as ``<extra_id_N>`` (seqio drops them;
  ``ByT5Tokenizer`` writes them, so a span-corruption target reads as one), drops pad, unk and ids outside the
  vocabulary (seqio: the same; ``ByT5Tokenizer`` fails on an id past its 384), and drops bytes that are not
  valid UTF-8 (both do: ``errors="ignore"``), so a model's half-written character vanishes instead of raising.

transformers numbers the sentinels of a bare ``ByT5Tokenizer()`` upwards (5.x: ``<extra_id_0>`` is 259, the
reverse of T5's; 4.x before its added-tokens rewrite counted from the end as here). The tokenizer that
``t2t-export`` writes (t2t.checkpoints.hf) names each sentinel's id, so ``AutoTokenizer`` reads T5's order.

The vocabulary is all in its record (``{"kind": "byte", "extra_ids": 125}``: no file beside a run's vocab.json),
and ``--vocab byte`` names it (:meth:`ByteVocabulary.named`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from t2t.data.vocab import EOS_ID, Vocabulary, record_field, register_vocabulary
from t2t.errors import T2TError

OFFSET = 3  # pad, eos, unk come before the bytes
BYTES = 256
BYT5_EXTRA_IDS = 125  # ByT5's sentinels: 3 + 256 + 125 = 384 ids
_SENTINEL = re.compile(r"<extra_id_(0|[1-9][0-9]*)>")


class ByteVocabulary(Vocabulary):
    """UTF-8 bytes offset by 3 plus ``extra_ids`` sentinel ids at the top (seqio's ``ByteVocabulary``)."""

    kind = "byte"

    def __init__(self, extra_ids: int = BYT5_EXTRA_IDS, path: str | os.PathLike = kind):
        if isinstance(extra_ids, bool) or not isinstance(extra_ids, int) or extra_ids < 0:
            raise T2TError(f"extra_ids must be a non-negative integer, got {extra_ids!r}; ByT5 uses "
                           f"{BYT5_EXTRA_IDS}.")
        self.extra_ids, self.path = extra_ids, Path(path)

    @classmethod
    def named(cls) -> ByteVocabulary:
        """ByT5's vocabulary (125 sentinels), what ``--vocab byte`` stands for."""
        return cls()

    @property
    def vocab_size(self) -> int:
        """259 + extra_ids (384 for ByT5)."""
        return OFFSET + BYTES + self.extra_ids

    @property
    def sha256(self) -> str:
        """The sha256 of the vocabulary's record, which is all there is to it."""
        return hashlib.sha256(json.dumps({"kind": self.kind, **self.record()}, sort_keys=True).encode()).hexdigest()

    def encode(self, text: str) -> list[int]:
        """Each UTF-8 byte plus 3; ``<extra_id_N>`` in the text as sentinel N; no EOS."""
        ids: list[int] = []
        start = 0
        for match in _SENTINEL.finditer(text) if "<extra_id_" in text else ():
            n = int(match.group(1))
            if n < self.extra_ids:
                ids += _byte_ids(text[start:match.start()])
                ids.append(self.sentinel_id(n))
                start = match.end()
        return ids + _byte_ids(text[start:])

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` up to the first EOS: sentinels as ``<extra_id_N>``; pad, unk, ids outside the
        vocabulary and bytes that are not valid UTF-8 dropped."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        out = bytearray()
        first_sentinel = OFFSET + BYTES
        for i in map(int, ids):
            if i == EOS_ID:
                break
            if OFFSET <= i < first_sentinel:
                out.append(i - OFFSET)
            elif first_sentinel <= i < self.vocab_size:
                out += f"<extra_id_{self.vocab_size - 1 - i}>".encode()
        return out.decode("utf-8", errors="ignore")

    def record(self) -> dict[str, Any]:
        return {"extra_ids": self.extra_ids}

    @classmethod
    def from_record(cls, file: Path, record: dict[str, Any]) -> ByteVocabulary:
        return cls(record_field(file, record, "extra_ids", int), file)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ByteVocabulary):
            return NotImplemented
        return self.extra_ids == other.extra_ids

    def __hash__(self) -> int:
        return hash((self.kind, self.extra_ids))

    def __repr__(self) -> str:
        return f"ByteVocabulary(extra_ids={self.extra_ids}, vocab_size={self.vocab_size}, path={str(self.path)!r})"


def _byte_ids(text: str) -> list[int]:
    return [b + OFFSET for b in text.encode("utf-8")]


register_vocabulary(ByteVocabulary)
