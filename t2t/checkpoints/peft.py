"""A LoRA model as a PEFT adapter folder: ``adapter_config.json`` and ``adapter_model.safetensors`` as peft
writes them, plus the base model they apply to as a Hugging Face T5 folder in ``base/``, so that

    base = AutoModelForSeq2SeqLM.from_pretrained("OUT/base")
    model = PeftModel.from_pretrained(base, "OUT")

computes what t2t computes. The base is the run's own weights without the LoRA updates (whatever the run was
initialised from), so the folder needs nothing else. The adapter's config is peft's own ``LoraConfig``
(the ``lora`` extra), so its fields are the ones the installed peft reads.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from t2t import durable
from t2t.checkpoints.files import write_with
from t2t.checkpoints.hf import hf_key, to_hf
from t2t.errors import T2TError
from t2t.extras import import_extra
from t2t.models.lora import drop_lora
from t2t.models.t5 import T5

ADAPTER_WEIGHTS = "adapter_model.safetensors"
BASE_DIR = "base"
_PEFT_PREFIX = "base_model.model."  # peft's name for the wrapped transformers model in a saved adapter


def to_peft(model: T5, out_dir: str | os.PathLike, vocabulary: Any = None) -> Path:
    """Write ``model``'s LoRA layers as a PEFT adapter folder ``out_dir`` and its base (the weights without
    the updates) as ``out_dir/base``, with ``vocabulary``'s tokenizer files (see ``to_hf``). Leaves
    ``model`` without its LoRA layers. Written whole beside ``out_dir``, then renamed into place."""
    cfg = model.config
    if not cfg.lora_rank:
        raise T2TError("this model has no LoRA layers, so there is no PEFT adapter to write; export it with "
                       "--to hf, or fine-tune with --set transfer.lora_rank=8.")
    peft = import_extra("peft", "lora", "writing a PEFT adapter")
    out = Path(out_dir)
    if out.is_symlink() or (out.exists() and not (out / ADAPTER_WEIGHTS).is_file()):
        raise T2TError(f"{out} exists and is not a PEFT adapter an earlier export wrote; choose a new folder.")
    adapter = peft.LoraConfig(task_type="SEQ_2_SEQ_LM", r=cfg.lora_rank, lora_alpha=cfg.lora_alpha,
                              target_modules=list(cfg.lora_targets), lora_dropout=0.0, bias="none",
                              base_model_name_or_path=str((out / BASE_DIR).resolve()))
    tensors = peft_tensors(model)
    drop_lora(model, merge=False)

    def fill(folder: Path) -> None:
        adapter.save_pretrained(str(folder))
        write_with(folder / ADAPTER_WEIGHTS, lambda p: save_file(tensors, p, {"format": "pt"}))
        to_hf(model, folder / BASE_DIR, vocabulary=vocabulary)

    return durable.publish_folder(out, fill, f"the PEFT adapter {out}")


def peft_tensors(model: T5) -> dict[str, torch.Tensor]:
    """The LoRA updates under the names peft saves them with: ``….SelfAttention.q.lora_A.weight``."""
    tensors = {}
    for name, tensor in model.state_dict().items():
        layer, _, part = name.rpartition(".")
        if part in ("lora_A", "lora_B"):
            hf_layer = hf_key(f"{layer}.weight").removesuffix(".weight")
            tensors[f"{_PEFT_PREFIX}{hf_layer}.{part}.weight"] = tensor.detach().to("cpu").contiguous()
    return tensors
