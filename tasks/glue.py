"""GLUE, registered the way the ``t5`` library registers it (``t5/data/tasks.py`` + ``glue_utils.py``).

One task per GLUE config, named ``glue_<config>_v002``:

- text: ``<benchmark> key1: value1 key2: value2`` with the text fields sorted by name (``t2t.preprocessors.glue``);
  MNLI's matched/mismatched evaluation tasks and the AX diagnostic use the benchmark name ``mnli``;
  STS-B uses ``t2t.preprocessors.stsb`` (score rounded to the nearest 0.2, one decimal);
- targets: T5's label words (class id = position), ``<unk>`` for unlabeled test rows;
- postprocess: label word → class id (-1 for anything else), STS-B text → float (-1.0 if not a number);
- metrics as ``t5.data.glue_utils.GLUE_METRICS``; AX is test-only and has none.

Short aliases: cola, sst2, mrpc, qqp, stsb, mnli, qnli, rte, wnli, ax (and mnli_matched, mnli_mismatched).
Data: ``<data dir>/glue/<CoLA|SST-2|...>/*.tsv`` when present, else the hub's ``nyu-mll/glue``.
"""

from __future__ import annotations

import functools

from t2t.evaluation import metrics
from t2t.data.preprocessors import glue, stsb, string_label_to_class_id, string_to_float
from t2t.data.sources import GLUE_LABELS, GlueSource
from t2t.data.task import Task, register_task

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
    "ax": (),  # test set only
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
        description=f"GLUE {config} as in T5" + (" (test only)" if config == "ax" else ""),
    )


for _config in GLUE_CONFIGS:
    register_task(make_glue_task(_config), aliases=(_config,))
