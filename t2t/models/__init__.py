"""The network: T5 (t5.py), its settings and presets (presets.py), CPU kernels applied by a setting
(kernels.py), decoding (decoding.py) and where it runs: devices, threads, processes (distributed.py)."""

from t2t.models.presets import ModelConfig, resolve_model_config
from t2t.models.t5 import T5

__all__ = ["T5", "ModelConfig", "resolve_model_config"]
