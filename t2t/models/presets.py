"""The network's settings (``ModelConfig``) and the presets that name them (``configs/models/*.yaml``).

Kept apart from the network (t5.py) so that the model file reads as the network alone; a preset may refine
another preset (``configs/models/t5-base-prefix-lm.yaml`` names ``t5-base``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from t2t import config as config_lib
from t2t.errors import T2TError

#: T5 §3.2.1 / Figure 4: two stacks; one stack of weights run as encoder and as decoder (the decoder pass adds
#: its cross-attention); one causal stack over inputs + targets; the same with the input prefix fully visible.
Architecture = Literal["encoder_decoder", "shared_encoder_decoder", "decoder_only", "prefix_lm"]


@dataclass
class ModelConfig:
    vocab_size: int = 32128
    d_model: int = 512
    d_kv: int = 64
    d_ff: int = 2048
    num_layers: int = 6
    num_decoder_layers: int | None = None  # None: same as num_layers
    num_heads: int = 8
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    # one relative position bias per layer rather than one per stack shared by its layers (UMT5, Chung et al.
    # 2023; transformers' UMT5 keeps relative_attention_bias in every layer's self-attention)
    relative_attention_per_layer: bool = False
    dropout_rate: float = 0.1
    layer_norm_epsilon: float = 1e-6
    feed_forward_proj: Literal["relu", "gated-gelu"] = "relu"
    tie_word_embeddings: bool = True
    pad_id: int = 0
    eos_id: int = 1
    decoder_start_id: int = 0
    adapter_dim: int = 0  # inner size of the adapter after every feed-forward network (§3.5.1); 0: none
    # LoRA (t2t.models.lora) on the linear layers named in lora_targets: rank 0 none (transfer.lora_rank);
    # the update is scaled by lora_alpha / lora_rank
    lora_rank: int = 0
    lora_alpha: float = 0.0
    lora_targets: list[str] = field(default_factory=lambda: ["q", "v"])
    architecture: Architecture = "encoder_decoder"
    # the attention kernel: "sdpa" (a dense bias tensor per stack) or "flex" (FlexAttention: the relative
    # position bias looked up inside the kernel, masks as block masks; no attention-probability dropout, and
    # on the CPU forward only: it serves training on CUDA; t2t's evaluation takes SDPA, T5.dense_attention)
    attention: Literal["sdpa", "flex"] = "sdpa"
    # the CPU kernels (t2t.models.kernels): "auto" tuned ones where they were measured to pay, "plain" PyTorch's
    # own nn.Linear, ReLU and SDPA everywhere (the same results to rounding; dropout masks differ between the two)
    kernels: Literal["auto", "plain"] = "auto"

    def __post_init__(self):
        config_lib.check(self, positive=("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers",
                                         "num_heads", "relative_attention_num_buckets",
                                         "relative_attention_max_distance", "layer_norm_epsilon"),
                         non_negative=("pad_id", "eos_id", "decoder_start_id", "adapter_dim", "lora_rank",
                                       "lora_alpha"),
                         fraction=("dropout_rate",))
        for name in ("pad_id", "eos_id", "decoder_start_id"):
            if getattr(self, name) >= self.vocab_size:
                raise config_lib.SettingError(name, f"< vocab_size ({self.vocab_size})", getattr(self, name))
        exact = self.relative_attention_num_buckets // 2  # the decoder's exact-distance buckets
        if self.relative_attention_max_distance <= exact:  # the log-spaced buckets would divide by log(1) or less
            raise config_lib.SettingError("relative_attention_max_distance",
                                          f"> relative_attention_num_buckets // 2 ({exact})",
                                          self.relative_attention_max_distance)

    @property
    def decoder_layers(self) -> int:
        return self.num_layers if self.num_decoder_layers is None else self.num_decoder_layers

    @property
    def has_encoder(self) -> bool:
        return self.architecture in ("encoder_decoder", "shared_encoder_decoder")


#: fields that choose how the network computes, not what it is: a model loaded from weights (``--init-from``,
#: a resumed checkpoint) takes them from the settings rather than comparing them with the weights' config
COMPUTE_FIELDS = frozenset({"attention", "kernels"})


def resolve_model_config(setting: str | Path | Mapping) -> ModelConfig:
    """The ``model`` setting: a preset name or file, or ``{"preset": name, <field>: value, …}`` whose fields
    override the preset's (``--set model.num_layers=3``); without a preset the fields override the defaults.
    A preset file may itself name a ``preset`` it refines (``configs/models/t5-base-prefix-lm.yaml``)."""
    return config_lib.from_dict(ModelConfig, _model_fields(setting, ()), "model")


def _model_fields(setting: str | Path | Mapping, seen: tuple[Path, ...]) -> dict:
    fields = dict(setting) if isinstance(setting, Mapping) else {config_lib.PRESET: setting}
    preset = fields.pop(config_lib.PRESET, None)
    if preset is None:
        return fields
    path = config_lib.find_config(preset, "models")
    if path.resolve() in seen:
        raise T2TError(f"model preset {path} names itself as its preset (through {seen[-1]}); break the cycle.")
    preset_fields = {k: v for k, v in config_lib.read_config_file(path).items() if k != PRESET_VOCAB}
    return config_lib.merge(_model_fields(preset_fields, seen + (path.resolve(),)), fields)


#: a preset file's ``vocab:`` (``byte`` in configs/models/byt5-*.yaml): the vocabulary its model was made for,
#: which t2t-train reads when the run names none (not a ModelConfig field: the network never sees it)
PRESET_VOCAB = "vocab"


def preset_vocabulary(setting: str | Path | Mapping | None) -> str | None:
    """The vocabulary the ``model`` setting's preset file names (or a preset it refines), None for none."""
    preset = setting.get(config_lib.PRESET) if isinstance(setting, Mapping) else setting
    seen: set[Path] = set()
    while preset is not None:
        path = config_lib.find_config(preset, "models")
        if path.resolve() in seen:
            return None  # a cycle: resolve_model_config says so
        seen.add(path.resolve())
        fields = config_lib.read_config_file(path)
        if PRESET_VOCAB in fields:
            if not isinstance(fields[PRESET_VOCAB], str):
                raise T2TError(f"model preset {path} has vocab {fields[PRESET_VOCAB]!r}, not a vocabulary name or "
                               f"path; write e.g. vocab: byte.")
            return fields[PRESET_VOCAB]
        preset = fields.get(config_lib.PRESET)
    return None
