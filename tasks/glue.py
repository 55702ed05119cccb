"""GLUE, registered the way the ``t5`` library registers it (``t5/data/tasks.py`` + ``glue_utils.py``).

One task per GLUE config, named ``glue_<config>_v002``:

- text: ``<benchmark> key1: value1 key2: value2`` with the text fields sorted by name (``t2t.preprocessors.glue``);
  MNLI's matched/mismatched evaluation tasks and the AX diagnostic use the benchmark name ``mnli``;
  STS-B uses ``t2t.preprocessors.stsb`` (score rounded to the nearest 0.2, one decimal);
- targets: T5's label words (class id = position), ``<unk>`` for unlabeled test rows;
- postprocess: label word → class id (-1 for anything else), STS-B text → float (-1.0 if not a number);
- metrics as ``t5.data.glue_utils.GLUE_METRICS``, and for AX (test only; t5 gives it none) GLUE's R3, the
  three-class Matthews correlation GLUE's leaderboard scores the diagnostic with: reported when the labelled
  ``diagnostic-full.tsv`` is read, while the unlabelled ``diagnostic.tsv`` and the hub's rows give predictions only.

Short aliases: cola, sst2, mrpc, qqp, stsb, mnli, qnli, rte, wnli, ax (and mnli_matched, mnli_mismatched).
Data: ``<data dir>/glue/<CoLA|SST-2|...>/*.tsv`` when present (``GlueSource``, ``read_glue_tsv``: the files of
GLUE's download_glue_data.py read into the hub's rows; for AX ``glue/<diagnostic|AX>/diagnostic-full.tsv``, the
labelled diagnostic with its annotation columns, before ``diagnostic.tsv``), else the hub's ``nyu-mll/glue``.
"""

from __future__ import annotations

import csv
import functools
import os
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from t2t import HFDataset, T2TError, Task, metrics, register_task
from t2t.data.sources import LocalOrHub
from t2t.preprocessors import glue, string_label_to_class_id, string_to_float, stsb

GLUE_HUB_ID = "nyu-mll/glue"

# Label names per HF/TFDS GLUE config (class id = position); stsb is a regression task.
GLUE_LABELS = {
    "cola": ("unacceptable", "acceptable"),
    "sst2": ("negative", "positive"),
    "mrpc": ("not_equivalent", "equivalent"),
    "qqp": ("not_duplicate", "duplicate"),
    "stsb": None,
    "mnli": ("entailment", "neutral", "contradiction"),
    "mnli_matched": ("entailment", "neutral", "contradiction"),
    "mnli_mismatched": ("entailment", "neutral", "contradiction"),
    "qnli": ("entailment", "not_entailment"),
    "rte": ("entailment", "not_entailment"),
    "wnli": ("not_entailment", "entailment"),
    "ax": ("entailment", "neutral", "contradiction"),
}

# Split sizes of HF nyu-mll/glue (== TFDS glue), so listings and rates need no data.
GLUE_SIZES = {
    "cola": {"train": 8551, "validation": 1043, "test": 1063},
    "sst2": {"train": 67349, "validation": 872, "test": 1821},
    "mrpc": {"train": 3668, "validation": 408, "test": 1725},
    "qqp": {"train": 363846, "validation": 40430, "test": 390965},
    "stsb": {"train": 5749, "validation": 1500, "test": 1379},
    "mnli": {"train": 392702, "validation_matched": 9815, "validation_mismatched": 9832,
             "test_matched": 9796, "test_mismatched": 9847},
    "mnli_matched": {"validation": 9815, "test": 9796},
    "mnli_mismatched": {"validation": 9832, "test": 9847},
    "qnli": {"train": 104743, "validation": 5463, "test": 5463},
    "rte": {"train": 2490, "validation": 277, "test": 3000},
    "wnli": {"train": 635, "validation": 71, "test": 146},
    "ax": {"test": 1104},
}

_STD = {"train": "train.tsv", "validation": "dev.tsv", "test": "test.tsv"}
# config → (folder under DIR/glue, {split: file}), as GLUE's download_glue_data.py writes them.
GLUE_FILES = {
    "cola": ("CoLA", _STD), "sst2": ("SST-2", _STD), "mrpc": ("MRPC", _STD), "qqp": ("QQP", _STD),
    "stsb": ("STS-B", _STD), "qnli": ("QNLI", _STD), "rte": ("RTE", _STD), "wnli": ("WNLI", _STD),
    "mnli": ("MNLI", {"train": "train.tsv", "validation_matched": "dev_matched.tsv",
                      "validation_mismatched": "dev_mismatched.tsv", "test_matched": "test_matched.tsv",
                      "test_mismatched": "test_mismatched.tsv"}),
    "mnli_matched": ("MNLI", {"validation": "dev_matched.tsv", "test": "test_matched.tsv"}),
    "mnli_mismatched": ("MNLI", {"validation": "dev_mismatched.tsv", "test": "test_mismatched.tsv"}),
    "ax": ("diagnostic", {"test": "diagnostic.tsv"}),
}
_AX_FOLDERS = ("diagnostic", "AX")
# GLUE's labelled diagnostic: five annotation columns (Lexical Semantics, ..., Domain), Premise, Hypothesis, Label.
AX_LABELLED_FILE = "diagnostic-full.tsv"
_AX_LABELLED_COLUMNS = ({"premise": "Premise", "hypothesis": "Hypothesis"}, "Label")

# config → {HF field: TSV column name}; the label column is named separately.
_GLUE_COLUMNS = {
    "cola": ({"sentence": "sentence"}, "label"),
    "sst2": ({"sentence": "sentence"}, "label"),
    "mrpc": ({"sentence1": "#1 String", "sentence2": "#2 String"}, "Quality"),
    "qqp": ({"question1": "question1", "question2": "question2"}, "is_duplicate"),
    "stsb": ({"sentence1": "sentence1", "sentence2": "sentence2"}, "score"),
    "mnli": ({"premise": "sentence1", "hypothesis": "sentence2"}, "gold_label"),
    "qnli": ({"question": "question", "sentence": "sentence"}, "label"),
    "rte": ({"sentence1": "sentence1", "sentence2": "sentence2"}, "label"),
    "wnli": ({"sentence1": "sentence1", "sentence2": "sentence2"}, "label"),
    "ax": ({"premise": "sentence1", "hypothesis": "sentence2"}, "label"),
}
_GLUE_COLUMNS["mnli_matched"] = _GLUE_COLUMNS["mnli_mismatched"] = _GLUE_COLUMNS["mnli"]
_COLA_NO_HEADER = ("source", "label", "original_label", "sentence")  # CoLA train/dev have no header line


def read_glue_tsv(path: str | os.PathLike, config: str) -> Iterator[dict]:
    """Rows of one local GLUE TSV as HF ``nyu-mll/glue`` dicts (fields, int label or float score, ``idx``).

    Read with ``csv`` and ``QUOTE_NONE`` (fields may begin with a quote), ``utf-8-sig`` (MRPC has a BOM);
    a row with the wrong number of fields or a label outside the task's label set is an error naming the
    file and line. Unlabeled rows (test files) get ``label = -1``.
    """
    path = Path(path)
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        try:
            yield from _glue_examples(reader, path, config)
        except UnicodeDecodeError as e:
            raise T2TError(f"GLUE file {path} line {_first_non_utf8_line(path)} is not UTF-8 (byte "
                           f"{e.object[e.start]:#04x}); re-download the file or convert it to UTF-8.") from None
        except csv.Error as e:  # e.g. a field over csv's size limit (131,072 characters)
            raise T2TError(f"GLUE file {path} line {reader.line_num} cannot be read as TSV ({e}); fix or "
                           f"re-download the file.") from None


def _first_non_utf8_line(path: Path) -> int:
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return 0


def _glue_examples(reader, path: Path, config: str) -> Iterator[dict]:
    labelled_ax = config == "ax" and path.name == AX_LABELLED_FILE
    fields, label_col = _AX_LABELLED_COLUMNS if labelled_ax else _GLUE_COLUMNS[config]
    labels = GLUE_LABELS[config]
    if config == "cola" and path.name != "test.tsv":
        header = list(_COLA_NO_HEADER)
    else:
        header = next(reader, None)
        if header is None:
            raise T2TError(f"GLUE file {path} is empty; re-download it.")
    missing = [c for c in fields.values() if c not in header]
    if missing:
        raise T2TError(f"GLUE file {path} has no column {missing[0]!r} in its header line ({' / '.join(header)}); "
                       f"re-download it with GLUE's download script.")
    cols = {name: header.index(col) for name, col in fields.items()}
    label_at = header.index(label_col) if label_col in header else None
    idx = 0
    for row in reader:
        if len(row) != len(header):
            raise T2TError(f"GLUE file {path} line {reader.line_num} has {len(row)} tab-separated fields "
                           f"instead of {len(header)}; fix or re-download the file.")
        example = {name: row[i] for name, i in cols.items()}
        example["label"] = -1 if label_at is None else _glue_label(row[label_at], labels, path, reader.line_num)
        example["idx"] = idx
        idx += 1
        yield example


def _glue_label(text: str, labels: tuple[str, ...] | None, path: Path, line: int):
    try:
        if labels is None:  # STS-B similarity score, float32 as in HF/TFDS GLUE
            return float(np.float32(text))
        if text in labels:
            return labels.index(text)
        value = int(text)
        if 0 <= value < len(labels):
            return value
    except ValueError:
        pass
    allowed = "a number" if labels is None else f"one of {', '.join(labels)} or 0..{len(labels) - 1}"
    raise T2TError(f"GLUE file {path} line {line} has label {text!r}, expected {allowed}; fix or re-download "
                   f"the file.")


def read_glue_files(paths: list[Path], *, config: str) -> Iterator[dict]:
    """``read_glue_tsv`` for ``LocalOrHub``, which hands over the one file it found."""
    (path,) = paths
    return read_glue_tsv(path, config)


class GlueSource(LocalOrHub):
    """A GLUE config (``cola``, ``sst2``, ..., ``mnli_matched``, ``ax``) read from ``<data dir>/glue/<Task>/*.tsv``
    when the file is there, else from the hub (``nyu-mll/glue``); both give the same dict shape."""

    def __init__(self, config: str, hub_path: str = GLUE_HUB_ID, splits: Sequence[str] | None = None):
        if config not in GLUE_FILES:
            raise T2TError(f"unknown GLUE config {config!r}; use one of {', '.join(GLUE_FILES)}.")
        files = GLUE_FILES[config][1]
        super().__init__(f"GLUE {config}", HFDataset(hub_path, config), glue_local_files(config),
                         functools.partial(read_glue_files, config=config),
                         splits=tuple(splits or files), sizes=GLUE_SIZES[config])  # a subset: WNLI's eval splits
        self.config = config


def glue_local_files(config: str) -> dict[str, list[tuple[str]]]:
    """Candidate files per split under the data dir, in the order tried: AX's labelled diagnostic comes
    before the unlabelled one, so that it is scored whenever it is there."""
    folder, files = GLUE_FILES[config]
    if config != "ax":
        return {split: [(f"glue/{folder}/{name}",)] for split, name in files.items()}
    return {"test": [(f"glue/{f}/{name}",) for name in (AX_LABELLED_FILE, files["test"]) for f in _AX_FOLDERS]}


# t5's GLUE_METRICS; CoLA's Matthews correlation is reported ×100 like every t2t metric.
GLUE_METRICS = {
    "cola": (metrics.matthews_corrcoef,),
    "sst2": (metrics.accuracy,),
    "mrpc": (metrics.f1_score_with_invalid, metrics.accuracy),
    "qqp": (metrics.f1_score_with_invalid, metrics.accuracy),
    "stsb": (metrics.pearson_corrcoef, metrics.spearman_corrcoef),
    "mnli": (metrics.accuracy,),
    "mnli_matched": (metrics.accuracy,),
    "mnli_mismatched": (metrics.accuracy,),
    "qnli": (metrics.accuracy,),
    "rte": (metrics.accuracy,),
    "wnli": (metrics.accuracy,),
    "ax": (metrics.matthews_corrcoef,),  # t5: none (test only); GLUE's R3, scored on the labelled file
}

GLUE_CONFIGS = tuple(GLUE_METRICS)

# t5's models/gin/sequence_lengths/glue_v002_proportional.gin: T5 fine-tuned (and decoded) GLUE at these.
GLUE_SEQUENCE_LENGTH = {"inputs": 512, "targets": 84}


def glue_task_name(config: str) -> str:
    return f"glue_{config}_v002"


def glue_text_preprocessor(config: str):
    """The text preprocessor t5's ``get_glue_text_preprocessor`` picks for a config."""
    if config == "stsb":
        return stsb
    benchmark = "mnli" if "mnli" in config or config == "ax" else config
    return functools.partial(glue, benchmark_name=benchmark, label_names=GLUE_LABELS[config])


def glue_postprocess_fn(config: str):
    if config == "stsb":
        return string_to_float
    return functools.partial(string_label_to_class_id, label_classes=GLUE_LABELS[config])


def make_glue_task(config: str, data_source=None) -> Task:
    """The ``glue_<config>_v002`` task (``data_source`` defaults to the local-TSV-then-hub ``GlueSource``)."""
    return Task(
        name=glue_task_name(config),
        source=data_source or GlueSource(config),
        preprocessors=(glue_text_preprocessor(config),),
        postprocess_fn=glue_postprocess_fn(config),
        metric_fns=GLUE_METRICS[config],
        rank_choices=GLUE_LABELS[config] or (),  # the label words (STS-B is a regression: none)
        sequence_length=GLUE_SEQUENCE_LENGTH,
        description=f"GLUE {config} as in T5" + (" (diagnostic, test only)" if config == "ax" else ""),
    )


for _config in GLUE_CONFIGS:
    register_task(make_glue_task(_config), aliases=(_config,))
