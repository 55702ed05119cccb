"""The in-domain pre-training task of the pre-training study (docs/study.md; T5 §3.4.1, Table 8): span
corruption over the GLUE tasks' own training inputs, without their labels, together with the generic corpus.

Load it with ``t2t-train --module examples/study_tasks.py --task glue_inputs_and_corpus_span_corruption``.
Each training example's text fields (CoLA's and SST-2's sentence, MRPC's, STS-B's and RTE's sentence pair)
become one document; then the corpus's paragraphs follow, and the pipeline chunks and shuffles them all as
it does ``corpus_span_corruption`` (the generic condition), with the same objective and settings. Validation
inputs are not used.
"""

from __future__ import annotations

from collections.abc import Iterator

from t2t import Source, register_task
from t2t.tasks.glue import GlueSource
from t2t.tasks.text_files import CORPUS_FOLDER, TextFolderSource, unsupervised_task

STUDY_GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "rte")


class UnlabelledInputsAndCorpus(Source):
    """``{"text": ...}``: each GLUE training example's text fields joined by a space, then the corpus."""

    splits = ("train",)

    def __init__(self, configs=STUDY_GLUE_TASKS, corpus: str = CORPUS_FOLDER):
        self.glue = [GlueSource(config) for config in configs]
        self.corpus = TextFolderSource(corpus)

    def load(self, split: str, data_dir=None) -> Iterator[dict]:
        for source in self.glue:
            for row in source.load(split, data_dir):
                yield {"text": " ".join(value for value in row.values() if isinstance(value, str))}
        yield from self.corpus.load(split, data_dir)

    def describe(self) -> str:
        return f"the training inputs of GLUE {', '.join(s.config for s in self.glue)}, then {self.corpus.describe()}"


register_task(unsupervised_task("glue_inputs_and_corpus_span_corruption", UnlabelledInputsAndCorpus()))
