"""The data path: tasks and mixtures (task.py), sources, the vocabulary, text preprocessors, objectives,
Winograd forms, tokenized splits, mixing rates, feature converters and the training-batch pipeline."""

from t2t.data import ul2  # noqa: F401  (registers UL2's mixture of denoisers as the objective "ul2")
from t2t.data.byte_vocab import ByteVocabulary  # registers the "byte" vocabulary kind (--vocab byte)
from t2t.data.sources import (
           CsvFiles,
           DataFiles,
           GeneratorSource,
           HFDataset,
           InMemorySource,
           JsonlFiles,
           Source,
           TextFiles,
           TsvFiles,
)
from t2t.data.task import Feature, Mixture, Task, get_mixture, get_task, register_mixture, register_task
from t2t.data.vocab import SentencePieceVocabulary, load_vocabulary

__all__ = ["Task", "Mixture", "Feature", "register_task", "register_mixture", "get_task", "get_mixture",
           "Source", "HFDataset", "DataFiles", "JsonlFiles", "CsvFiles", "TsvFiles", "TextFiles",
           "InMemorySource", "GeneratorSource", "SentencePieceVocabulary", "ByteVocabulary", "load_vocabulary"]
