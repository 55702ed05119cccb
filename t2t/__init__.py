"""t2t: T5-style text-to-text transfer learning in PyTorch.

The public surface (README.md, "From Python"; the layers and seams inside: docs/internals.md)::

    import t2t
    model = t2t.from_hf("path/to/hf_t5_dir")          # or a hub id; t2t.load_model(run), t2t.from_t5x(path),
                                                      # t2t.from_mesh_tf(path) (the t5 library's model.ckpt-N)
    t2t.to_hf(model, "out_dir")
    vocab = t2t.SentencePieceVocabulary(path, extra_ids=100)
    t2t.register_vocabulary(MyVocabulary)               # a t2t.Vocabulary kind, read back from a run's vocab.json
    t2t.register_task(t2t.Task(name, source=t2t.JsonlFiles(...), preprocessors=[...], metric_fns=[...]))
    t2t.register_objective("my_denoiser", fn)            # then tasks name it; t2t.get_objective(name, **options)
    t2t.preprocessors.span_corruption(...), t2t.metrics.accuracy(...)
"""

import importlib

from t2t.errors import T2TError

__version__ = "0.1.0"

# Where each name comes from, imported on first use: ``import t2t`` then stays light, and so does every
# command's start, which installs its Ctrl-C handler before torch (seconds to import) loads (t2t.cli).
_EXPORTS = {
    "t2t.checkpoints.hf": ("from_hf", "to_hf"), "t2t.checkpoints.loading": ("load_model",),
    "t2t.checkpoints.t5x": ("from_t5x",), "t2t.checkpoints.mesh_tf": ("from_mesh_tf",),
    "t2t.data.mixing": ("rate_equal", "rate_num_examples", "rate_unsupervised"),
    "t2t.data.objectives": ("get_objective", "register_objective"),
    "t2t.data.sources": ("CsvFiles", "DataFiles", "GeneratorSource", "HFDataset", "InMemorySource", "JsonlFiles",
                         "Source", "TextFiles", "TsvFiles"),
    "t2t.data.task": ("Feature", "Mixture", "Task", "get_mixture", "get_task", "register_mixture", "register_task"),
    "t2t.data.vocab": ("SentencePieceVocabulary", "Vocabulary", "load_vocabulary", "register_vocabulary"),
    "t2t.models.t5": ("T5", "ModelConfig"),
}
_LAZY_SUBMODULES = ("metrics", "preprocessors")  # metrics imports scipy and scikit-learn (~180 MB, ~1 s)


def __getattr__(name: str):
    """The public names and ``t2t.metrics``, ``t2t.preprocessors`` load on first use (see _EXPORTS)."""
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"t2t.{name}")
    module = next((module for module, names in _EXPORTS.items() if name in names), None)
    if module is None:
        raise AttributeError(f"module 't2t' has no attribute {name!r}")
    globals()[name] = getattr(importlib.import_module(module), name)
    return globals()[name]


__all__ = ["T2TError", *(name for names in _EXPORTS.values() for name in names), *_LAZY_SUBMODULES]
