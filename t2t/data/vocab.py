"""The vocabulary interface, its SentencePiece implementation with T5's sentinel ids, the loader that
dispatches on a vocabulary's kind, and SentencePiece's trainer (behind ``t2t-vocab``).

:class:`Vocabulary` is what the data pipeline, the model's special ids and a run folder need (seqio's
``Vocabulary``): ``encode``, ``decode``, ``vocab_size``, ``pad_id``, ``eos_id``, ``unk_id`` and sentinel ids
counted from the end. A run folder records its vocabulary as ``vocab.json`` (``{"kind": "sentencepiece",
"file": "spiece.model", "extra_ids": 100}``) beside the files the kind writes, and :func:`load_vocabulary`
reads such a record back through the kind's class in :data:`VOCABULARY_KINDS`. A new kind is one module with
a subclass plus one :func:`register_vocabulary` line: ByT5's bytes are t2t.data.byte_vocab (``--vocab byte``).

``SentencePieceVocabulary`` follows ``seqio.SentencePieceVocabulary`` (names and behaviour):

- ids: pad 0, eos 1, unk 2 (checked on load), then the model's pieces, then ``extra_ids`` sentinels
  numbered from the end: ``<extra_id_0>`` is ``vocab_size - 1``, ``<extra_id_1>`` is ``vocab_size - 2``, ...
- the sentinels are added to the SentencePiece model as user-defined pieces ``"▁<extra_id_N>"``, exactly as
  seqio does. So, as in seqio (and Hugging Face's T5 tokenizer), ``encode("a <extra_id_3> b")`` yields the
  sentinel id, and ``decode`` renders sentinel ids as ``<extra_id_N>``. Like seqio, a sentinel is only
  recognised at a word start ("jam <extra_id_0>ly" works, "ja<extra_id_0>m" does not).
- ``encode`` adds no EOS. ``decode`` keeps the ids before the first EOS, drops pad, and renders ids outside
  ``[0, vocab_size)`` (e.g. the 28 never-trained rows 32100..32127 of T5's 32128-row embedding) as unk,
  which SentencePiece prints as " ⁇ " -- what seqio does; it never raises for an out-of-range id.

The object pickles with the model's bytes (worker processes need not see the file) and compares and hashes
by content (model bytes + extra_ids), so two copies of one model at different paths are equal.
"""

from __future__ import annotations

import codecs
import errno
import hashlib
import io
import json
import logging
import os
import shutil
import struct
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import sentencepiece as spm

from t2t import durable
from t2t.data.sources import resolve_data_dir
from t2t.errors import T2TError
from t2t.registry import Registry

logger = logging.getLogger(__name__)

PAD_ID, EOS_ID, UNK_ID = 0, 1, 2
DEFAULT_EXTRA_IDS = 100
HUB_REPO, HUB_FILENAME = "google-t5/t5-small", "spiece.model"
DATA_DIR_VOCAB = Path("vocab") / "t5_spiece.model"
RECORD_FILE = "vocab.json"  # how a run folder records its vocabulary: its kind and that kind's fields

_USER_DEFINED = 4  # sentencepiece.ModelProto.SentencePiece.Type.USER_DEFINED


# ---------------------------------------------------------------------------------------------------------
# Adding sentinel pieces without protobuf: a serialized ModelProto followed by more encoded fields parses as
# the merged message, and repeated fields are appended in order. ModelProto.pieces is field 1; a
# SentencePiece message has piece (1, string), score (2, float) and type (3, enum).


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _length_delimited(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _user_defined_piece(piece: str) -> bytes:
    message = (
        _length_delimited(1, piece.encode("utf-8"))
        + _varint(2 << 3 | 5) + struct.pack("<f", 0.0)
        + _varint(3 << 3 | 0) + _varint(_USER_DEFINED)
    )
    return _length_delimited(1, message)


def _with_sentinels(model_bytes: bytes, extra_ids: int) -> bytes:
    """The model with ``▁<extra_id_{n-1}>`` .. ``▁<extra_id_0>`` appended, so <extra_id_0> gets the last id."""
    return model_bytes + b"".join(_user_defined_piece(f"▁<extra_id_{i}>") for i in reversed(range(extra_ids)))


# ---------------------------------------------------------------------------------------------------------
# Reading a ModelProto's settings without protobuf (what an exported tokenizer.json needs): trainer_spec is
# field 2 (model_type 3, byte_fallback 35), normalizer_spec field 3 (precompiled_charsmap 2, add_dummy_prefix 3,
# remove_extra_whitespaces 4).

SPM_UNIGRAM = 1
_SPM_FIELDS = {2: {3: "model_type", 35: "byte_fallback"},
               3: {2: "precompiled_charsmap", 3: "add_dummy_prefix", 4: "remove_extra_whitespaces"}}
_SPM_DEFAULTS = {"model_type": SPM_UNIGRAM, "byte_fallback": 0, "precompiled_charsmap": b"",
                 "add_dummy_prefix": 1, "remove_extra_whitespaces": 1}


def sentencepiece_spec(model_bytes: bytes) -> dict[str, Any]:
    """The settings of a serialized SentencePiece model that tokenizer.json needs (protobuf's defaults where
    a field is absent). The bytes were already loaded by SentencePiece, so they are well formed."""
    spec = dict(_SPM_DEFAULTS)
    for field, message in _proto_fields(model_bytes):
        names = _SPM_FIELDS.get(field, {})
        spec.update((names[f], v) for f, v in _proto_fields(message) if f in names)
    return spec


def _proto_fields(buffer: bytes) -> Iterator[tuple[int, Any]]:
    """(field number, value) of each field of a protobuf message: an int or the bytes of a length field."""
    i = 0
    while i < len(buffer):
        key, i = _read_varint(buffer, i)
        wire = key & 7
        if wire == 0:
            value, i = _read_varint(buffer, i)
        elif wire == 2:
            size, i = _read_varint(buffer, i)
            value, i = buffer[i:i + size], i + size
        else:  # fixed 64 (1) or fixed 32 (5) bits: scores, floats
            size = 8 if wire == 1 else 4
            value, i = buffer[i:i + size], i + size
        yield key >> 3, value


def _read_varint(buffer: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buffer[i]
        value |= (byte & 0x7F) << shift
        shift, i = shift + 7, i + 1
        if not byte & 0x80:
            return value, i

# ---------------------------------------------------------------------------------------------------------


class Vocabulary(ABC):
    """What t2t needs of a vocabulary, with seqio's names: ids pad 0, eos 1, unk 2 as T5 uses them, and
    ``extra_ids`` sentinels numbered from the end (``<extra_id_0>`` is ``vocab_size - 1``).

    A kind also says how a run folder keeps it (``record``, ``file_bytes``, ``from_record``), so a moved run
    reads its own vocabulary, and ``sha256`` names its contents, so results say which vocabulary made them."""

    kind: ClassVar[str]  # its name in vocab.json and VOCABULARY_KINDS
    path: Path           # where it was read from (messages and the recorded settings name it)
    extra_ids: int = 0

    pad_id = property(lambda self: PAD_ID, doc="0, also the decoder's start id in T5.")
    eos_id = property(lambda self: EOS_ID, doc="1, appended to every tokenized feature.")
    unk_id = property(lambda self: UNK_ID, doc="2, what an id outside the vocabulary decodes as.")

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """All ids, sentinels included; a model's embedding may have more rows."""

    @property
    @abstractmethod
    def sha256(self) -> str:
        """The sha256 of what defines the vocabulary, equal for two copies of one vocabulary."""

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, without EOS."""

    @abstractmethod
    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` up to the first EOS, pad dropped."""

    @abstractmethod
    def record(self) -> dict[str, Any]:
        """Its fields of a run folder's vocab.json (JSON values, ``kind`` added by the run); a kind that keeps a
        file beside it names it as ``file`` and gives its contents in :meth:`file_bytes`."""

    def file_bytes(self) -> bytes | None:
        """The contents of the file ``record`` names (None: vocab.json holds all of the vocabulary)."""
        return None

    @classmethod
    @abstractmethod
    def from_record(cls, file: Path, record: dict[str, Any]) -> Vocabulary:
        """The vocabulary that ``file`` (a run's vocab.json, or any .json the user wrote) records as ``record``;
        a file it names lies beside it (:func:`recorded_file`)."""

    @classmethod
    def named(cls) -> Vocabulary | None:
        """The vocabulary the kind's bare name stands for (``--vocab byte``), for a kind that needs no file;
        None (the default): the kind is read from a file."""
        return None

    def encode_batch(self, texts: Iterable[str]) -> list[list[int]]:
        return [self.encode(text) for text in texts]

    def decode_batch(self, rows: Iterable[Iterable[int]]) -> list[str]:
        return [self.decode(row) for row in (rows.tolist() if hasattr(rows, "tolist") else rows)]

    def sentinel_id(self, i: int) -> int:
        """The id of ``<extra_id_i>``: ``vocab_size - 1 - i``."""
        if not 0 <= i < self.extra_ids:
            raise ValueError(f"sentinel {i} is out of range for a vocabulary with {self.extra_ids} extra ids")
        return self.vocab_size - 1 - i


VOCABULARY_KINDS: Registry[type[Vocabulary]] = Registry("vocabulary kind")


def register_vocabulary(cls: type[Vocabulary]) -> type[Vocabulary]:
    """Make ``cls`` readable from the vocab.json of the runs it trains (under ``cls.kind``)."""
    return VOCABULARY_KINDS.register(cls.kind, cls)


# ---------------------------------------------------------------------------------------------------------


class SentencePieceVocabulary(Vocabulary):
    """A SentencePiece model plus ``extra_ids`` sentinel ids, with seqio's names and semantics."""

    kind = "sentencepiece"
    FILE = "spiece.model"  # its name in a run folder (and Hugging Face's)

    def __init__(self, path: str | os.PathLike, extra_ids: int = DEFAULT_EXTRA_IDS):
        path = Path(path)
        try:
            model_bytes = path.read_bytes()
        except OSError as error:
            reason = "does not exist" if isinstance(error, FileNotFoundError) else f"cannot be read ({error.strerror})"
            raise T2TError(
                f"SentencePiece model {path} {reason}; pass the path of a .model file (or train one with t2t-vocab)."
            ) from None
        self._setup(path, model_bytes, extra_ids)

    @classmethod
    def from_bytes(
        cls, model_bytes: bytes, extra_ids: int = DEFAULT_EXTRA_IDS, path: str | os.PathLike = "<bytes>"
    ) -> SentencePieceVocabulary:
        """A vocabulary from a serialized SentencePiece model (``path`` is only a label here)."""
        vocab = cls.__new__(cls)
        vocab._setup(Path(path), bytes(model_bytes), extra_ids)
        return vocab

    def _setup(self, path: Path, model_bytes: bytes, extra_ids: int) -> None:
        if isinstance(extra_ids, bool) or not isinstance(extra_ids, int) or extra_ids < 0:
            raise T2TError(f"extra_ids must be a non-negative integer, got {extra_ids!r}; T5 uses 100.")
        self.path = path
        self.extra_ids = extra_ids
        self._model_bytes = model_bytes
        self._digest = hashlib.sha256(model_bytes).hexdigest()
        processor = spm.SentencePieceProcessor()
        try:
            if not model_bytes:
                raise RuntimeError("the file is empty")
            processor.LoadFromSerializedProto(_with_sentinels(model_bytes, extra_ids))
        except (RuntimeError, OSError, ValueError) as error:
            raise T2TError(
                f"{path} is not a valid SentencePiece model ({str(error).strip() or type(error).__name__}); "
                "pass the .model file that SentencePiece or t2t-vocab wrote."
            ) from None
        ids = (processor.pad_id(), processor.eos_id(), processor.unk_id())
        if ids != (PAD_ID, EOS_ID, UNK_ID):
            raise T2TError(
                f"{path} has pad/eos/unk ids {ids[0]}/{ids[1]}/{ids[2]} but T5 models need 0/1/2; retrain it "
                "with t2t-vocab (or SentencePiece with --pad_id=0 --eos_id=1 --unk_id=2 --bos_id=-1)."
            )
        self._sp = processor
        self._vocab_size = processor.get_piece_size()  # pieces + extra_ids

    # -- seqio's names -----------------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """Pieces + extra_ids (32100 for T5's model); the model's embedding may have more rows (32128)."""
        return self._vocab_size

    @property
    def base_vocab_size(self) -> int:
        """The SentencePiece model's own pieces (pad, eos and unk included), without the sentinels."""
        return self._vocab_size - self.extra_ids

    @property
    def sha256(self) -> str:
        """The sha256 of the SentencePiece model's bytes (what results have always recorded)."""
        return self._digest

    @property
    def tokenizer(self) -> spm.SentencePieceProcessor:
        """The underlying SentencePiece processor (sentinels included as user-defined pieces)."""
        return self._sp

    @property
    def model_bytes(self) -> bytes:
        """The serialized SentencePiece model as read from ``path`` (without the sentinel pieces)."""
        return self._model_bytes

    def record(self) -> dict[str, Any]:
        return {"file": self.FILE, "extra_ids": self.extra_ids}

    def file_bytes(self) -> bytes:
        return self._model_bytes

    @classmethod
    def from_record(cls, file: Path, record: dict[str, Any]) -> SentencePieceVocabulary:
        return cls(recorded_file(file, record), record_field(file, record, "extra_ids", int))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, without EOS."""
        return self._sp.encode(text, out_type=int)

    def encode_batch(self, texts: Iterable[str]) -> list[list[int]]:
        """``[encode(t) for t in texts]``, computed by SentencePiece's multi-threaded batch encoder."""
        texts = list(texts)
        return self._sp.encode(texts, out_type=int) if texts else []

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` up to the first EOS; pad dropped, sentinels as ``<extra_id_N>``, unknown ids as unk."""
        return self._sp.decode(self._clean(ids))

    def decode_batch(self, rows: Iterable[Iterable[int]]) -> list[str]:
        """``[decode(r) for r in rows]``, computed by SentencePiece's multi-threaded batch decoder."""
        if hasattr(rows, "tolist"):  # numpy array / torch tensor: one conversion instead of per-element
            rows = rows.tolist()
        cleaned = [self._clean(row) for row in rows]
        return self._sp.decode(cleaned) if cleaned else []

    def _clean(self, ids: Iterable[int]) -> list[int]:
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        out = []
        size = self._vocab_size
        for i in ids:
            i = int(i)
            if i == EOS_ID:
                break
            if i == PAD_ID:
                continue
            out.append(i if 0 <= i < size else UNK_ID)
        return out

    # -- identity, pickling ------------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SentencePieceVocabulary):
            return NotImplemented
        return self._digest == other._digest and self.extra_ids == other.extra_ids

    def __hash__(self) -> int:
        return hash((self._digest, self.extra_ids))

    def __reduce__(self):
        return (restore_vocabulary, (str(self.path), self._model_bytes, self.extra_ids))

    def __repr__(self) -> str:
        return (
            f"SentencePieceVocabulary(path={str(self.path)!r}, extra_ids={self.extra_ids}, "
            f"vocab_size={self._vocab_size}, sha256={self._digest[:12]})"
        )


def restore_vocabulary(path: str, model_bytes: bytes, extra_ids: int) -> SentencePieceVocabulary:
    return SentencePieceVocabulary.from_bytes(model_bytes, extra_ids, path)


register_vocabulary(SentencePieceVocabulary)


# ---------------------------------------------------------------------------------------------------------


def record_field(file: Path, record: dict[str, Any], key: str, kind: type) -> Any:
    """Field ``key`` of vocabulary record ``file``, which must be a ``kind`` (one sentence if it is not)."""
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise T2TError(f"vocabulary record {file} has {key} {value!r}, which must be of type {kind.__name__}; the "
                       f"file was edited or is corrupt, so restore it from a copy.")
    return value


def recorded_file(file: Path, record: dict[str, Any]) -> Path:
    """The file vocabulary record ``file`` names (``file``): a name beside it, never a path out of its folder."""
    name = record_field(file, record, "file", str)
    if name in ("", ".", "..") or Path(name).name != name or "\\" in name:
        raise T2TError(f"vocabulary record {file} names the file {name!r}, not a file beside it; the file was "
                       f"edited or is corrupt, so restore it from a copy.")
    return Path(file).parent / name


def named_vocabulary(name: str | os.PathLike) -> Vocabulary | None:
    """The vocabulary a kind's bare name stands for (``byte``: ByT5's), None for anything else (a path). The
    name wins over a file of that name in the working directory; ``./byte`` reads the file."""
    name = os.fspath(name)
    cls = VOCABULARY_KINDS.get(name) if isinstance(name, str) and name in VOCABULARY_KINDS else None
    return cls.named() if cls is not None else None


def read_vocabulary(path: str | os.PathLike, extra_ids: int = DEFAULT_EXTRA_IDS) -> Vocabulary:
    """The vocabulary at ``path``: a kind's name (:func:`named_vocabulary`), a .json vocabulary record (a run's
    vocab.json; any registered kind), else a SentencePiece model with ``extra_ids`` sentinels."""
    named = named_vocabulary(path)
    if named is not None:
        return named
    path = Path(path)
    if path.suffix != ".json":
        return SentencePieceVocabulary(path, extra_ids)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        reason = "does not exist" if isinstance(e, FileNotFoundError) else f"cannot be read ({e})"
        raise T2TError(f"vocabulary record {path} {reason}; pass a run's {RECORD_FILE} or a SentencePiece .model "
                       f"file.") from None
    kind = record.get("kind") if isinstance(record, dict) else None
    if not isinstance(kind, str) or kind not in VOCABULARY_KINDS:
        raise T2TError(f"vocabulary record {path} is of kind {kind!r}, which is not registered (the registered kinds "
                       f"are {', '.join(VOCABULARY_KINDS.names())}); pass the --module that registers it, or "
                       f"restore the file from a copy.")
    return VOCABULARY_KINDS.get(kind).from_record(path, record)


def load_vocabulary(
    path: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    extra_ids: int = DEFAULT_EXTRA_IDS,
) -> Vocabulary:
    """The vocabulary from the first of: ``path`` (--vocab: ``byte``, a run's vocab.json or a SentencePiece
    model, see :func:`read_vocabulary`), ``$T2T_VOCAB``,
    ``<data_dir or $T2T_DATA_DIR>/vocab/t5_spiece.model``, or T5's ``spiece.model`` from the Hugging Face hub
    (``google-t5/t5-small``, through huggingface_hub's cache, so it also works offline once cached).

    An explicit ``path`` or ``$T2T_VOCAB`` that does not exist is an error (never silently skipped); a data
    dir without ``vocab/t5_spiece.model`` falls through to the hub.
    """
    if path is not None:
        return read_vocabulary(path, extra_ids)
    env_path = os.environ.get("T2T_VOCAB")
    if env_path:
        if not Path(env_path).is_file() and named_vocabulary(env_path) is None:
            raise T2TError(
                f"T2T_VOCAB points to {env_path}, which is not a file; set it to a SentencePiece .model file "
                f"or to byte (ByT5's bytes)."
            )
        return read_vocabulary(env_path, extra_ids)
    root = resolve_data_dir(data_dir)  # a data dir that does not exist is named here, not blamed on the vocabulary
    if root is not None:
        candidate = root / DATA_DIR_VOCAB
        if candidate.is_file():
            return SentencePieceVocabulary(candidate, extra_ids)
    import huggingface_hub

    try:
        downloaded = huggingface_hub.hf_hub_download(HUB_REPO, HUB_FILENAME)
    except Exception as error:  # offline, no cache, hub error: all end the same way for the user
        raise T2TError(
            f"no vocabulary given and T5's {HUB_FILENAME} could not be fetched from the Hugging Face hub "
            f"({type(error).__name__}); pass --vocab PATH or set T2T_VOCAB to a SentencePiece .model file."
        ) from error
    return SentencePieceVocabulary(downloaded, extra_ids)


# ---------------------------------------------------------------------------------------------------------


def _file_encoding(path: Path) -> str:
    """'utf-8-sig' if the whole file is valid UTF-8 (a BOM is dropped), else 'latin-1' (which decodes any bytes)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    with open(path, "rb") as handle:
        try:
            while chunk := handle.read(1 << 20):
                decoder.decode(chunk)
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            logger.info("%s is not valid UTF-8; reading it as Latin-1", path)
            return "latin-1"
    return "utf-8-sig"


def _file_lines(paths: Sequence[Path]) -> Iterator[str]:
    for path in paths:
        with open(path, encoding=_file_encoding(path), newline=None) as handle:
            for line in handle:
                line = line.strip()
                if line:
                    yield line


def _text_lines(texts: Iterable[str]) -> Iterator[str]:
    for text in texts:
        if not isinstance(text, str):
            raise T2TError(
                f"train_vocabulary got a non-string ({type(text).__name__}) among its texts; "
                "pass strings or file paths."
            )
        for line in text.splitlines():
            line = line.strip()
            if line:
                yield line


def train_vocabulary(
    inputs: str | os.PathLike | Sequence[str | os.PathLike] | Iterable[str],
    model_prefix: str | os.PathLike,
    vocab_size: int = 8000,
    model_type: str = "unigram",
    *,
    character_coverage: float = 0.9995,
    input_sentence_size: int = 2_000_000,
    num_threads: int | None = None,
    seed: int = 0,
    verbose: bool = False,
    **options,
) -> Path:
    """Train a SentencePiece model with T5's conventions and return the ``<model_prefix>.model`` path.

    ``inputs`` is a text file, a list/tuple of text files, or any other iterable of strings (a generator,
    ``iter(list_of_texts)``, a dataset column) whose lines are the training text. A list or tuple is always
    read as file paths. Files are read as UTF-8 and, where a file is not valid UTF-8, as Latin-1 (whole file).

    Conventions as T5's own ``spiece.model``: pad 0, eos 1, unk 2, no bos, ``nmt_nfkc`` normalisation,
    character_coverage 0.9995, pieces at most 16 characters, no byte fallback (T5's model has none; pass
    ``byte_fallback=True`` to change it). ``vocab_size`` counts SentencePiece pieces only; the
    ``SentencePieceVocabulary`` built from the result adds ``extra_ids`` sentinels on top.
    At most ``input_sentence_size`` lines (a uniform sample when there are more) are used, which bounds
    memory for large corpora. ``options`` pass through to ``SentencePieceTrainer.train``.

    SentencePiece trains in memory; ``<model_prefix>.vocab`` and ``.model`` are then each written whole under a
    temporary name beside them and renamed over the old ones (``write_vocabulary_files``), so a full disk
    leaves an earlier vocabulary at ``model_prefix`` as it was.
    """
    if vocab_size < 4:
        raise T2TError(f"vocab_size must be at least 4 (pad, eos and unk take 3 of the pieces), got {vocab_size}.")
    lines = _training_lines(inputs)  # checked before anything is written
    prefix = Path(model_prefix)
    try:
        prefix.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise T2TError(f"cannot create the folder of {prefix} ({e.strerror or e}); choose a writable place for the "
                       f"vocabulary (t2t-vocab's --output).") from None
    settings = dict(
        vocab_size=vocab_size,
        model_type=model_type,
        pad_id=PAD_ID,
        eos_id=EOS_ID,
        unk_id=UNK_ID,
        bos_id=-1,
        normalization_rule_name="nmt_nfkc",
        character_coverage=character_coverage,
        max_sentencepiece_length=16,
        byte_fallback=False,
        input_sentence_size=input_sentence_size,
        shuffle_input_sentence=True,
        num_threads=num_threads or os.cpu_count() or 1,
        minloglevel=0 if verbose else 2,
    )
    spm.set_random_generator_seed(seed)
    model = _train_sentencepiece(lines, {**settings, **options})
    return write_vocabulary_files(model, prefix)


def write_vocabulary_files(model: bytes, model_prefix: str | os.PathLike) -> Path:
    """``<model_prefix>.vocab`` (each piece and its score, as SentencePiece lists them) and ``.model`` from a
    serialized model; returns the ``.model`` path.

    SentencePiece writes straight to ``<prefix>.model`` and does not check the writes (onto a full device it
    reports success), so a full disk tore the earlier vocabulary there. Each file is written whole and fsynced
    under a temporary name in the same folder, then renamed over the old one, ``.model`` last; a failure
    removes the temporary files and names the folder's disk.
    """
    prefix = Path(model_prefix)
    files = {Path(f"{prefix}.vocab"): vocab_listing(model).encode("utf-8"), Path(f"{prefix}.model"): model}
    temporary = {path: path.with_name(f".{path.name}.{os.getpid()}.tmp") for path in files}
    try:
        for path, data in files.items():
            temporary[path].unlink(missing_ok=True)  # ours: a link left at that name goes, not what it names
            durable.write_file(temporary[path], data)
        for path, tmp in temporary.items():
            os.replace(tmp, path)
    except OSError as e:
        for tmp in temporary.values():
            tmp.unlink(missing_ok=True)
        raise _write_failure(e, prefix) from None
    return Path(f"{prefix}.model")


def vocab_listing(model: bytes) -> str:
    """The ``.vocab`` file SentencePiece writes beside a model: one ``piece<TAB>score`` line per piece, the
    score printed with six significant digits as its C++ code prints a float."""
    processor = spm.SentencePieceProcessor(model_proto=model)
    return "".join(f"{processor.id_to_piece(i)}\t{processor.get_score(i):g}\n"
                   for i in range(processor.get_piece_size()))


def _write_failure(e: OSError, prefix: Path) -> T2TError:
    """One sentence for a vocabulary that could not be written: the folder, its disk, the fix."""
    folder = prefix.parent.resolve()
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        try:
            free = f", {shutil.disk_usage(folder).free:,} bytes free"
        except OSError:
            free = ""
        fix = (f"the disk holding {folder} is full{free}; free space on it or write the vocabulary to a folder "
               f"on another disk (t2t-vocab's --output)")
    elif e.errno == errno.EFBIG:
        fix = "raise the file-size limit (ulimit -f) or write the vocabulary elsewhere (t2t-vocab's --output)"
    else:
        fix = f"make {folder} writable or write the vocabulary elsewhere (t2t-vocab's --output)"
    return T2TError(f"cannot write the vocabulary {prefix}.model ({e.strerror or e}): {fix}; any earlier "
                    f"vocabulary there is unchanged.")


def _training_lines(inputs) -> Iterator[str]:
    """The lines of ``train_vocabulary``'s ``inputs``: a file, a list or tuple of files, or strings."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    if not isinstance(inputs, (list, tuple)):
        return _text_lines(inputs)
    paths = [Path(p) for p in inputs]
    if not paths:
        raise T2TError("train_vocabulary got no input files; pass at least one text file.")
    for path in paths:
        if not path.is_file():
            raise T2TError(f"vocabulary training file {path} does not exist; pass existing text files.")
    return _file_lines(paths)


def _train_sentencepiece(lines: Iterator[str], settings: dict) -> bytes:
    """The serialized model ``SentencePieceTrainer.train`` makes of ``lines`` in memory (it writes no file),
    its failures as one-sentence T2TErrors."""
    counted = _Counting(lines)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(sentence_iterator=counted, model_writer=model, **settings)
    except RuntimeError as error:
        if counted.error is not None:
            raise counted.error from None
        if counted.count == 0:
            raise T2TError("train_vocabulary got no text (every input is empty); pass non-empty text files.") from None
        # too small for the text's characters, or too large for its words
        fix = ("raise vocab_size or lower character_coverage" if "smaller than required_chars" in str(error)
               else "lower vocab_size or give it more text")
        raise T2TError(f"SentencePiece could not train a {settings['vocab_size']}-piece {settings['model_type']} "
                       f"vocabulary ({str(error).strip()}); {fix}.") from None
    if counted.error is not None:  # reading the input failed part way: do not return a model of half the text
        raise counted.error
    return model.getvalue()


class _Counting:
    """Iterator wrapper that counts lines (to tell 'no text at all' from other training failures) and keeps
    an exception raised while reading the input, so that it reaches the caller unwrapped by SentencePiece."""

    def __init__(self, lines: Iterator[str]):
        self._lines, self.count, self.error = lines, 0, None

    def __iter__(self):
        return self

    def __next__(self) -> str:
        try:
            line = next(self._lines)
        except StopIteration:
            raise
        except Exception as error:  # re-raised by train_vocabulary once SentencePiece has returned
            self.error = error
            raise StopIteration from None
        self.count += 1
        return line
