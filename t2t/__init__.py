"""t2t: T5-style text-to-text transfer learning in PyTorch.

The public surface (see DESIGN.md)::

    import t2t
    model = t2t.from_hf("path/to/hf_t5_dir")          # or a hub id
    t2t.to_hf(model, "out_dir")
    vocab = t2t.SentencePieceVocabulary(path, extra_ids=100)
    t2t.T5, t2t.ModelConfig
    t2t.preprocessors.span_corruption(...), t2t.metrics.accuracy(...)
"""

from t2t import metrics, preprocessors
from t2t.checkpoint import from_hf, load_model, to_hf
from t2t.errors import T2TError
from t2t.model import T5, ModelConfig
from t2t.vocab import SentencePieceVocabulary

__version__ = "0.1.0"

__all__ = ["from_hf", "to_hf", "load_model", "T5", "ModelConfig", "SentencePieceVocabulary", "T2TError",
           "preprocessors", "metrics"]
