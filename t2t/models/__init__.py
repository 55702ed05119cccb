"""The network: T5 (t5.py) with its settings and presets, adapters, attention and dropout kernels
(kernels.py), decoding (decoding.py) and where it runs: devices, threads, processes (distributed.py)."""

from t2t.models.t5 import T5, ModelConfig, resolve_model_config

__all__ = ["T5", "ModelConfig", "resolve_model_config"]
