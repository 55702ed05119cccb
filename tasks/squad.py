"""SQuAD v1.1 as the ``t5`` library registers it (``t5/data/tasks.py``: ``squad_v010_allanswers``).

- text: ``"question: <q> context: <c>"`` → the first answer, each punctuation-padded as T5 does
  (``t2t.preprocessors.squad``);
- postprocess: T5's ``qa`` (targets become the list of all answers, predictions stay text);
- metric: SQuAD exact match and F1 with the official v1.1 normalisation, the best over an example's answers.

Alias ``squad``. Data: ``<data dir>/squad/v1.1/{train,dev}-v1.1.json`` (the official files, whose nested
articles → paragraphs → questions are flattened into the hub's rows), else the hub's ``rajpurkar/squad``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from t2t import HFDataset, T2TError, Task, metrics, register_task
from t2t.data.sources import LocalOrHub
from t2t.preprocessors import qa, squad

SQUAD_SIZES = {"train": 87_599, "validation": 10_570}
SQUAD_FILES = {"train": [("squad/v1.1/train-v1.1.json",)], "validation": [("squad/v1.1/dev-v1.1.json",)]}


def read_squad_json(paths: list[Path]) -> Iterator[dict]:
    """Rows of an official SQuAD v1.1 file as ``rajpurkar/squad`` has them: id, title, context, question,
    answers ``{"text": [...], "answer_start": [...]}``, in file order."""
    (path,) = paths
    try:
        articles = json.loads(path.read_text(encoding="utf-8"))["data"]
    except (ValueError, KeyError, TypeError) as e:
        raise T2TError(f"SQuAD file {path} is not the official JSON layout ({type(e).__name__}: {e}); "
                       f"re-download it.") from None
    for article in articles:
        for paragraph in article["paragraphs"]:
            for qa_ in paragraph["qas"]:
                yield {"id": qa_["id"], "title": article["title"], "context": paragraph["context"],
                       "question": qa_["question"],
                       "answers": {"text": [a["text"] for a in qa_["answers"]],
                                   "answer_start": [a["answer_start"] for a in qa_["answers"]]}}


def squad_source(hub_path: str = "rajpurkar/squad") -> LocalOrHub:
    return LocalOrHub("SQuAD v1.1", HFDataset(hub_path), SQUAD_FILES, read_squad_json,
                      splits=("train", "validation"), sizes=SQUAD_SIZES)


def make_squad_task(data_source=None) -> Task:
    return Task(
        name="squad_v010_allanswers",
        source=data_source or squad_source(),
        preprocessors=(squad,),
        postprocess_fn=qa,
        metric_fns=(metrics.squad,),
        sequence_length={"inputs": 512, "targets": 97},  # t5's sequence_lengths/squad_v010_allanswers.gin
        description="SQuAD v1.1 question answering as in T5 (EM/F1, best over all answers)",
    )


register_task(make_squad_task(), aliases=("squad",))
