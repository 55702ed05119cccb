"""t2t: T5-style text-to-text transfer learning in PyTorch.

The public surface (see DESIGN.md)::

    import t2t
    model = t2t.from_hf("path/to/hf_t5_dir")          # or a hub id
    t2t.to_hf(model, "out_dir")
    vocab = t2t.SentencePieceVocabulary(path, extra_ids=100)
    t2t.T5, t2t.ModelConfig
    t2t.preprocessors.span_corruption(...), t2t.metrics.accuracy(...)

Names are resolved on first use, so ``import t2t`` stays light (no torch/safetensors/sentencepiece until a
name that needs them is touched).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# public name -> (module, attribute or None for the module itself)
_EXPORTS = {
    "from_hf": ("t2t.checkpoint", "from_hf"),
    "to_hf": ("t2t.checkpoint", "to_hf"),
    "load_model": ("t2t.checkpoint", "load_model"),
    "T5": ("t2t.model", "T5"),
    "ModelConfig": ("t2t.model", "ModelConfig"),
    "SentencePieceVocabulary": ("t2t.vocab", "SentencePieceVocabulary"),
    "T2TError": ("t2t.errors", "T2TError"),
    "preprocessors": ("t2t.preprocessors", None),
    "metrics": ("t2t.metrics", None),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 't2t' has no attribute {name!r}")
    module_name, attribute = _EXPORTS[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # for type checkers and IDEs
    from t2t import metrics, preprocessors
    from t2t.checkpoint import from_hf, load_model, to_hf
    from t2t.errors import T2TError
    from t2t.model import T5, ModelConfig
    from t2t.vocab import SentencePieceVocabulary
