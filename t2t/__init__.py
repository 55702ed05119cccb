"""t2t: T5-style text-to-text transfer learning in PyTorch.

The public surface (README.md, "From Python"; the layers and seams inside: docs/internals.md)::

    import t2t
    model = t2t.from_hf("path/to/hf_t5_dir")          # or a hub id; t2t.load_model(run), t2t.from_t5x(path)
    t2t.to_hf(model, "out_dir")
    vocab = t2t.SentencePieceVocabulary(path, extra_ids=100)
    t2t.register_task(t2t.Task(name, source=t2t.JsonlFiles(...), preprocessors=[...], metric_fns=[...]))
    t2t.register_objective("my_denoiser", fn)            # then tasks name it; t2t.get_objective(name, **options)
    t2t.preprocessors.span_corruption(...), t2t.metrics.accuracy(...)
"""

import importlib

from t2t.checkpoints.hf import from_hf, to_hf
from t2t.checkpoints.loading import load_model
from t2t.checkpoints.t5x import from_t5x
from t2t.data.mixing import rate_equal, rate_num_examples, rate_unsupervised
from t2t.data.objectives import get_objective, register_objective
from t2t.data.sources import (CsvFiles, DataFiles, GeneratorSource, HFDataset, InMemorySource, JsonlFiles, Source,
                              TextFiles, TsvFiles)
from t2t.data.task import Feature, Mixture, Task, get_mixture, get_task, register_mixture, register_task
from t2t.data.vocab import SentencePieceVocabulary
from t2t.errors import T2TError
from t2t.models.t5 import T5, ModelConfig

__version__ = "0.1.0"

_LAZY_SUBMODULES = ("metrics", "preprocessors")  # metrics imports scipy and scikit-learn (~180 MB, ~1 s)


def __getattr__(name: str):
    """``t2t.metrics`` and ``t2t.preprocessors`` load on first use, so ``import t2t`` stays light."""
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"t2t.{name}")
    raise AttributeError(f"module 't2t' has no attribute {name!r}")


__all__ = ["from_hf", "to_hf", "load_model", "from_t5x", "T5", "ModelConfig", "SentencePieceVocabulary",
           "Task", "Mixture", "Feature", "register_task", "register_mixture", "get_task", "get_mixture",
           "register_objective", "get_objective",
           "Source", "HFDataset", "DataFiles", "JsonlFiles", "CsvFiles", "TsvFiles", "TextFiles", "InMemorySource",
           "GeneratorSource", "rate_num_examples", "rate_unsupervised", "rate_equal", "T2TError", "preprocessors", "metrics"]
