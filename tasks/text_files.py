"""Unsupervised tasks over a folder of plain-text files (the T5 objectives on your own corpus).

``text_files_task(name, folder, objective="span_corruption")`` builds (and registers) a task that:

1. reads every text file under ``folder`` recursively, in sorted path order (``TextFolderSource``);
   a relative ``folder`` is taken from the data dir at load time (``--data-dir`` / ``$T2T_DATA_DIR``);
2. decodes each file as UTF-8 (a BOM is dropped), falling back to Latin-1 for that file alone when it is not
   valid UTF-8 (the shared corpus has Latin-1 Gutenberg and State-of-the-Union files);
3. yields one example per paragraph (blank-line separated; ``unit="line"`` for one per line, ``"file"`` for
   one per file), with whitespace collapsed to single spaces (T5's SentencePiece model has no newline);
4. tokenizes it as ``targets`` (``inputs`` empty, t5's ``rekey``), concatenates the whole split and cuts it
   into chunks of ``tokens_length_for(objective, input_length)`` tokens -- 568 for span corruption at 512
   (``concat_and_split``; cached with the tokens by the pipeline, so later epochs do not tokenize again);
   prefix LM and deshuffling cut each paragraph (unit) on its own instead, as t5 does, so that no example
   spans two;
5. applies the objective to every chunk on every draw (``denoise``), so each epoch sees fresh noise.

Which files are read: names ending in one of ``suffixes`` (default ``.txt`` and ``.raw``, the raw WikiText
release), except documentation: any file whose name (case-insensitively) starts with ``readme``, ``license``,
``licence`` or ``copying``, or has ``_readme`` in it (``SOURCE_README.txt``), and hidden files/folders
(starting with ``.``). ``TextFolderSource.files`` lists them, so the rule is easy to check.

Registered here: ``corpus_span_corruption`` (alias ``corpus``) over ``<data dir>/corpus`` and, for the
objectives comparison of T5 §3.3 (Tables 3-5), ``corpus_<objective>`` for every other objective of
``t2t.data.objectives.PAPER_OBJECTIVES``: ``corpus_prefix_lm``, ``corpus_bert_style``,
``corpus_mass_style``, ``corpus_deshuffling``, ``corpus_iid_noise_replace_spans``, ``corpus_iid_noise_drop``,
``corpus_random_spans`` and ``corpus_full_lm`` (Table 2's LM objective: the text, each document ended by EOS, cut
into chunks of ``target_length`` tokens, each the whole target, no inputs; for decoder-only models).
The whole-text targets of BERT-style, MASS-style and deshuffling need ``target_length >= input_length``.
``corpus_ul2`` is UL2's mixture of denoisers (``t2t.data.ul2``) over the same folder, 512/512 by default; its
chunks are as long as the longest text a denoiser takes at the run's lengths (999 tokens at 512/512 with T5's
vocabulary), and each draw corrupts a window of its denoiser's own length.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from t2t import Feature, Source, T2TError, Task, preprocessors, register_task
from t2t.data.sources import DataNotFoundError, resolve_data_dir
from t2t.data.task import default_output_features

DEFAULT_SUFFIXES = (".txt", ".raw")
_DOC_FILE = re.compile(r"^(readme|license|licence|copying)|_readme", re.IGNORECASE)
UNITS = ("paragraph", "line", "file")


def is_documentation(name: str) -> bool:
    """Whether a file name is a README/licence file that is not part of the corpus."""
    return bool(_DOC_FILE.search(name))


def read_text(path: Path) -> str:
    """The file's text: UTF-8 (BOM dropped), or Latin-1 when the bytes are not valid UTF-8."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def split_text(text: str, unit: str = "paragraph") -> Iterator[str]:
    """Paragraphs (blank-line separated), lines or the whole text, whitespace collapsed; empty ones dropped."""
    if unit == "paragraph":
        pieces = re.split(r"\n[ \t\r\f\v]*\n", text.replace("\r\n", "\n").replace("\r", "\n"))
    elif unit == "line":
        pieces = text.splitlines()
    else:
        pieces = [text]
    for piece in pieces:
        piece = " ".join(piece.split())
        if piece:
            yield piece


class TextFolderSource(Source):
    """Every text file under ``folder`` (recursively, sorted), one ``{"text", "file"}`` example per unit.

    Only a ``train`` split: held-out data for an unsupervised corpus is a second folder / task."""

    splits = ("train",)

    def __init__(self, folder: str | os.PathLike, *, suffixes: Sequence[str] = DEFAULT_SUFFIXES,
                 unit: str = "paragraph"):
        if unit not in UNITS:
            raise T2TError(f"unknown text unit {unit!r}; use one of {', '.join(UNITS)}.")
        self.folder = Path(folder)
        self.suffixes = tuple(s.lower() for s in suffixes)
        self.unit = unit

    def root(self, data_dir: str | os.PathLike | None = None) -> Path:
        if self.folder.is_absolute():
            return self.folder
        base = resolve_data_dir(data_dir)
        if base is None:
            raise DataNotFoundError(f"text folder {self.folder} is relative but no data dir is set; pass "
                                    f"--data-dir or set T2T_DATA_DIR.")
        return base / self.folder

    def files(self, data_dir: str | os.PathLike | None = None) -> list[Path]:
        """The corpus files in reading order (sorted relative paths), documentation files left out."""
        root = self.root(data_dir)
        if not root.is_dir():
            raise DataNotFoundError(f"text folder {root} does not exist; create it or pass the right --data-dir.")
        found = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for name in filenames:
                if (not name.startswith(".") and name.lower().endswith(self.suffixes)
                        and not is_documentation(name)):
                    found.append(Path(dirpath) / name)
        found.sort(key=lambda p: p.relative_to(root).as_posix())
        if not found:
            raise DataNotFoundError(f"text folder {root} has no {'/'.join(self.suffixes)} files; add some or "
                                    f"point the task at another folder.")
        return found

    def load(self, split: str, data_dir: str | os.PathLike | None = None) -> Iterator[dict]:
        if split not in self.splits:
            raise T2TError(f"{self.describe()} has only a 'train' split, not {split!r}; make another task "
                           f"for held-out text.")
        root = self.root(data_dir)
        files = self.files(data_dir)  # errors surface here, not on first iteration
        return self._examples(root, files)

    def _examples(self, root: Path, files: list[Path]) -> Iterator[dict]:
        for path in files:
            name = path.relative_to(root).as_posix()
            for piece in split_text(read_text(path), self.unit):
                yield {"text": piece, "file": name}

    def available(self, split: str, data_dir: str | os.PathLike | None = None) -> bool:
        try:
            return split in self.splits and bool(self.files(data_dir))
        except DataNotFoundError:
            return False

    def describe(self) -> str:
        return f"text files under {self.folder}"


def split_into_chunks(examples, *, vocab, sequence_length, length, docs_per_group: int | None):
    """``concat_and_split`` of the ``targets`` text into chunks of ``length(sequence_length, vocab=vocab)``
    tokens: the objective's ``chunk_length`` for this run's lengths and vocabulary (UL2's depends on how many
    ids its mode tokens take)."""
    return preprocessors.concat_and_split(examples, vocab=vocab, sequence_length=sequence_length,
                                          length=length(sequence_length, vocab=vocab), feature_key="targets",
                                          docs_per_group=docs_per_group)


def unsupervised_task(name: str, source: Source, objective: str | preprocessors.Objective = "span_corruption",
                      *, docs_per_group: int | None = None, description: str = "",
                      sequence_length: dict[str, int] | None = None, **objective_options) -> Task:
    """A Task that turns ``source``'s ``{"text": ...}`` examples into ``objective`` training examples
    (t5's rekey → tokenize → reduce_concat_tokens + split_tokens → objective). ``objective`` is a registered
    name (``t2t.register_objective``) or a function; ``objective_options`` are its options. The objectives of
    ``t2t.preprocessors.PER_DOCUMENT_OBJECTIVES`` (prefix LM, deshuffling) split each document on its own, as t5
    does: ``docs_per_group`` is 1 for them. ``sequence_length`` is the task's default training lengths."""
    objective, objective_options = preprocessors.objective_and_options(objective, **objective_options)
    if objective in preprocessors.PER_DOCUMENT_OBJECTIVES:
        docs_per_group = 1
    split = functools.partial(split_into_chunks, docs_per_group=docs_per_group,
                              length=functools.partial(preprocessors.chunk_length, objective=objective,
                                                       **objective_options))
    features, tokenized_preprocessors = default_output_features(), (split,)
    if objective is preprocessors.full_lm:
        # t5's full_lm: no inputs (not even an EOS), and EOS only at the end of each document, before the text
        # is concatenated and cut, never at the end of a piece
        features = {"inputs": Feature(add_eos=False, required=False), "targets": Feature(add_eos=False)}
        tokenized_preprocessors = (preprocessors.append_eos, split)
    return Task(
        name=name,
        source=source,
        output_features=features,
        preprocessors=(functools.partial(preprocessors.rekey, key_map={"inputs": None, "targets": "text"}),),
        tokenized_preprocessors=tokenized_preprocessors,
        token_preprocessors=(functools.partial(preprocessors.denoise, objective=objective, **objective_options),),
        description=description or f"{objective.__name__} over {source.describe()}",
        sequence_length=sequence_length,
    )


def text_files_task(name: str, folder: str | os.PathLike,
                    objective: str | preprocessors.Objective = "span_corruption", *,
                    suffixes: Sequence[str] = DEFAULT_SUFFIXES, unit: str = "paragraph", register: bool = True,
                    aliases: Sequence[str] = (), **objective_options) -> Task:
    """A task applying ``objective`` to the text files under ``folder`` (see the module docstring);
    registered under ``name`` (and ``aliases``) unless ``register=False``."""
    task = unsupervised_task(name, TextFolderSource(folder, suffixes=suffixes, unit=unit), objective,
                             **objective_options)
    return register_task(task, aliases=aliases) if register else task


CORPUS_FOLDER = "corpus"

text_files_task("corpus_span_corruption", CORPUS_FOLDER, "span_corruption", aliases=("corpus",))
for _name in preprocessors.PAPER_OBJECTIVES:
    if _name != "span_corruption":
        text_files_task(f"corpus_{_name}", CORPUS_FOLDER, _name)

#: UL2's lengths: the paper trains its mixture of denoisers at 512/512 (the X-denoisers' targets are long).
UL2_SEQUENCE_LENGTH = {"inputs": 512, "targets": 512}
text_files_task("corpus_ul2", CORPUS_FOLDER, "ul2", sequence_length=UL2_SEQUENCE_LENGTH)
