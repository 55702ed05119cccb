"""Hugging Face T5: conversion from and to ``transformers``' T5, mT5 and UMT5 ``…ForConditionalGeneration`` folders.

``from_hf(folder_or_hub_id)`` reads a folder (config.json + model.safetensors / pytorch_model.bin, sharded
or not; T5 1.0, T5 1.1, Flan-T5, mT5 and UMT5 configs as transformers 4 and 5 write them), ``to_hf(model,
out_dir)`` writes one that ``transformers`` 4 and 5 load with no missing or unexpected keys (docs/family.md). The key map is the table in t2t/model.py's docstring. ``transformers`` itself
is never imported here; files are read with t2t.checkpoints.native's readers (every failure one T2TError naming
the file, never code executed).
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any, Mapping

import torch
from safetensors.torch import save_file

from t2t import config as config_lib
from t2t import durable
from t2t.checkpoints.files import (
    assign_weights,
    check_state_dict,
    read_json,
    read_safetensors,
    torch_load,
    write_text,
    write_with,
)
from t2t.checkpoints.native import CONFIG_FILE, MODEL_FILE
from t2t.data.byte_vocab import ByteVocabulary
from t2t.data.vocab import SPM_UNIGRAM, SentencePieceVocabulary, Vocabulary, load_vocabulary, sentencepiece_spec
from t2t.errors import T2TError, error_summary
from t2t.hub import hub_failure
from t2t.models.decoding import ALPHA
from t2t.models.t5 import T5, ModelConfig

logger = logging.getLogger(__name__)

#: The Hugging Face model types t2t converts, each with the transformers class that reads it. mT5 (Xue et al.
#: 2021) is T5 1.1 under another name; UMT5 (Chung et al. 2023) is T5 1.1 with a relative position bias in every
#: layer (``ModelConfig.relative_attention_per_layer``).
HF_ARCHITECTURES = {"t5": "T5ForConditionalGeneration", "mt5": "MT5ForConditionalGeneration",
                    "umt5": "UMT5ForConditionalGeneration"}
HF_MODEL_TYPES = tuple(HF_ARCHITECTURES)
_HF_DENSE = "DenseReluDense"
_STACK_BIAS = re.compile(r"(encoder|decoder)\.relative_attention_bias\.weight")


def hf_key(key: str) -> str:
    """Our state-dict key → Hugging Face ``T5ForConditionalGeneration``'s (t2t/model.py's table)."""
    m = _STACK_BIAS.fullmatch(key)
    if m:
        return _layer_bias_key(m[1], 0)
    m = re.fullmatch(r"(encoder|decoder)\.blocks\.(\d+)\.(self_attn|cross_attn|ff)\.(.+)", key)
    if not m:
        return key  # shared.weight, {s}.final_layer_norm.weight, lm_head.weight
    stack, i, part, rest = m.groups()
    if part == "self_attn":
        layer, module = 0, "SelfAttention"
    elif part == "cross_attn":
        layer, module = 1, "EncDecAttention"
    else:
        layer, module = (2 if stack == "decoder" else 1), _HF_DENSE
    if rest.startswith("layer_norm."):
        return f"{stack}.block.{i}.layer.{layer}.{rest}"
    return f"{stack}.block.{i}.layer.{layer}.{module}.{rest}"


def _layer_bias_key(stack: str, i: int) -> str:
    """Where HF keeps layer ``i``'s position bias table (T5: layer 0's is the stack's; UMT5: every layer's)."""
    return f"{stack}.block.{i}.layer.0.SelfAttention.relative_attention_bias.weight"


def hf_state_dict(state: Mapping[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Our state dict under Hugging Face's names. A stack's per-layer bias table ([buckets, L·H], see
    t2t.models.t5.Stack) becomes UMT5's one [buckets, H] table per layer."""
    out = {}
    for key, tensor in state.items():
        m = _STACK_BIAS.fullmatch(key)
        if m and cfg.relative_attention_per_layer:
            for i, table in enumerate(tensor.split(cfg.num_heads, dim=1)):
                out[_layer_bias_key(m[1], i)] = table
        else:
            out[hf_key(key)] = tensor
    return out


def _state_dict_from_hf(hf: Mapping[str, torch.Tensor], model: T5) -> dict[str, torch.Tensor]:
    """The inverse of ``hf_state_dict`` for ``model``'s keys (``hf`` checked against them already)."""
    weights = {}
    for key in model.state_dict():
        m = _STACK_BIAS.fullmatch(key)
        if m and model.config.relative_attention_per_layer:
            layers = len(getattr(model, m[1]).blocks)
            weights[key] = torch.cat([hf[_layer_bias_key(m[1], i)] for i in range(layers)], dim=1)
        else:
            weights[key] = hf[hf_key(key)]
    return weights


def hf_model_type(hf: Mapping[str, Any], path: Path | str = CONFIG_FILE) -> str:
    """The config's ``model_type``, or the one its ``architectures`` names (some early UMT5 configs on the hub
    have only that); anything but T5, mT5 and UMT5 is a T2TError."""
    model_type = hf.get("model_type")
    if model_type is None:
        named = {arch: kind for kind, arch in HF_ARCHITECTURES.items()}
        kinds = [named[a] for a in hf.get("architectures") or () if a in named]
        model_type = kinds[0] if kinds else None
    if model_type not in HF_MODEL_TYPES:
        raise T2TError(f"{path} describes a {model_type!r} model, but t2t converts only T5 models "
                       f"(model_type 't5', 'mt5' or 'umt5').")
    return model_type


def rescales_output(hf: Mapping[str, Any], model_type: str) -> bool:
    """Whether transformers, in the version that wrote the config ``hf``, multiplies the decoder output by
    d_model**-0.5 before the output layer (T5 1.0's tied output layer; docs/family.md has the rule).

    transformers 4 rescales where ``tie_word_embeddings`` is true, its default true for T5 and UMT5 and false
    for mT5. transformers 5 ties the output layer to the embedding unless the weights hold a different
    ``lm_head.weight``, and keeps the rescale apart: T5 and UMT5 write ``scale_decoder_outputs``, and MT5 never
    rescales (it writes ``tie_word_embeddings: true`` for every model, which 4 would read as a rescale)."""
    if model_type == "mt5":
        return _written_by_transformers_4(hf) and bool(hf.get("tie_word_embeddings", False))
    return bool(hf.get("scale_decoder_outputs", hf.get("tie_word_embeddings", True)))


def _written_by_transformers_4(hf: Mapping[str, Any]) -> bool:
    """Whether the config says a transformers older than 5 wrote it (one without a version: hand-written or
    older still, read as 4)."""
    major = str(hf.get("transformers_version", "")).split(".")[0]
    return not major.isdigit() or int(major) < 5


def model_config_from_hf(hf: Mapping[str, Any], path: Path | str = CONFIG_FILE) -> ModelConfig:
    """Map a Hugging Face T5, mT5 or UMT5 ``config.json`` onto ModelConfig; anything t2t cannot run is a
    T2TError. t2t's ``tie_word_embeddings`` is T5 1.0's pair, a shared and rescaled output layer: it is true
    where transformers rescales (``rescales_output``); an output layer transformers shares without the
    rescale loads as a separate ``lm_head`` holding the embedding's values (``_weights_from_hf``)."""
    model_type = hf_model_type(hf, path)
    proj = hf.get("feed_forward_proj", "relu")
    if proj not in ("relu", "gated-gelu"):
        raise T2TError(f"{path} uses feed_forward_proj {proj!r}, but t2t supports only 'relu' (T5 1.0) and "
                       f"'gated-gelu' (T5 1.1).")
    if hf.get("is_encoder_decoder") is False or hf.get("is_decoder"):
        raise T2TError(f"{path} is not an encoder-decoder T5 config; t2t converts only "
                       f"{', '.join(HF_ARCHITECTURES.values())} checkpoints.")
    fields = {
        "vocab_size": hf.get("vocab_size", 32128), "d_model": hf.get("d_model", 512), "d_kv": hf.get("d_kv", 64),
        "d_ff": hf.get("d_ff", 2048), "num_layers": hf.get("num_layers", 6),
        "num_decoder_layers": hf.get("num_decoder_layers"), "num_heads": hf.get("num_heads", 8),
        "relative_attention_num_buckets": hf.get("relative_attention_num_buckets", 32),
        "relative_attention_max_distance": hf.get("relative_attention_max_distance", 128),
        "relative_attention_per_layer": model_type == "umt5",
        "dropout_rate": hf.get("dropout_rate", 0.1), "layer_norm_epsilon": hf.get("layer_norm_epsilon", 1e-6),
        "feed_forward_proj": proj, "tie_word_embeddings": rescales_output(hf, model_type),
        "pad_id": hf.get("pad_token_id", 0) if hf.get("pad_token_id") is not None else 0,
        "eos_id": hf.get("eos_token_id", 1) if isinstance(hf.get("eos_token_id", 1), int) else 1,
        "decoder_start_id": hf.get("decoder_start_token_id", 0) if hf.get("decoder_start_token_id") is not None
        else 0,
    }
    if fields["num_decoder_layers"] == fields["num_layers"]:
        fields["num_decoder_layers"] = None  # transformers writes the default out; t2t's default says "the same"
    try:
        return config_lib.from_dict(ModelConfig, fields)
    except T2TError as e:
        raise T2TError(f"Hugging Face config {path} cannot be mapped onto t2t's ModelConfig: "
                       f"{str(e).rstrip('.')}.") from None


def model_config_to_hf(cfg: ModelConfig, model_type: str = "t5") -> dict:
    """ModelConfig → the config.json of a Hugging Face ``model_type`` model (``check_model_type`` first).
    transformers 4.57 and 5.24 read it alike: ``tie_word_embeddings`` false with an ``lm_head.weight`` in the
    weights is a separate, unscaled output layer in both, true without one T5 1.0's shared, rescaled one."""
    gated = cfg.feed_forward_proj == "gated-gelu"
    return {
        "architectures": [HF_ARCHITECTURES[model_type]],
        "model_type": model_type,
        "vocab_size": cfg.vocab_size,
        "d_model": cfg.d_model,
        "d_kv": cfg.d_kv,
        "d_ff": cfg.d_ff,
        "num_layers": cfg.num_layers,
        "num_decoder_layers": cfg.decoder_layers,
        "num_heads": cfg.num_heads,
        "relative_attention_num_buckets": cfg.relative_attention_num_buckets,
        "relative_attention_max_distance": cfg.relative_attention_max_distance,
        "dropout_rate": cfg.dropout_rate,
        "layer_norm_epsilon": cfg.layer_norm_epsilon,
        "initializer_factor": 1.0,
        "feed_forward_proj": cfg.feed_forward_proj,
        "dense_act_fn": "gelu_new" if gated else "relu",
        "is_gated_act": gated,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "is_encoder_decoder": True,
        "use_cache": True,
        "pad_token_id": cfg.pad_id,
        "eos_token_id": cfg.eos_id,
        "decoder_start_token_id": cfg.decoder_start_id,
        "dtype": "float32",
        "torch_dtype": "float32",
    }


def check_model_type(cfg: ModelConfig, model_type: str | None) -> str:
    """The Hugging Face model type to write ``cfg`` as: ``model_type``, or by default ``umt5`` for a position bias
    in every layer and ``t5`` otherwise; one that cannot hold ``cfg`` is a T2TError."""
    if model_type is None:
        return "umt5" if cfg.relative_attention_per_layer else "t5"
    if model_type not in HF_ARCHITECTURES:
        raise T2TError(f"model_type {model_type!r} is not one t2t writes; choose 't5', 'mt5' or 'umt5'.")
    if cfg.relative_attention_per_layer != (model_type == "umt5"):
        has = "a position bias in every layer" if cfg.relative_attention_per_layer else "one position bias a stack"
        fits = "'umt5'" if cfg.relative_attention_per_layer else "'t5' or 'mt5'"
        raise T2TError(f"the model has {has}, which Hugging Face's {model_type!r} does not hold; export it with "
                       f"model_type {fits}.")
    if model_type == "mt5" and cfg.tie_word_embeddings:
        raise T2TError("transformers 5's MT5 never rescales its output layer, so a model with T5 1.0's tied, "
                       "rescaled output layer cannot be an 'mt5'; export it with model_type 't5'.")
    return model_type


def from_hf(dir_or_hub_id: str | os.PathLike) -> T5:
    """A t2t model from a Hugging Face T5, mT5 or UMT5 folder (config.json + safetensors or pytorch_model.bin)
    or hub id, in eval mode as transformers' ``from_pretrained`` returns it (training sets train mode itself)."""
    path = Path(dir_or_hub_id)
    if path.is_dir():
        return from_hf_folder(path).eval()
    if path.exists():
        raise T2TError(f"{path} is a file; pass the Hugging Face model folder that holds config.json.")
    return from_hf_folder(download_from_hub(str(dir_or_hub_id))).eval()


def from_hf_folder(folder: Path) -> T5:
    cfg_path = folder / CONFIG_FILE
    if not cfg_path.is_file():
        raise T2TError(f"{folder} has no config.json, so it is not a Hugging Face T5 folder; pass the folder "
                       f"that save_pretrained wrote.")
    cfg = model_config_from_hf(read_json(cfg_path, "Hugging Face config"), cfg_path)
    hf_weights, weights_path = _read_hf_weights(folder)
    model = T5.from_config(cfg, device="meta")
    weights = _weights_from_hf(hf_weights, model, cfg, weights_path)
    return assign_weights(model, weights)


def _weights_from_hf(hf: dict[str, torch.Tensor], model: T5, cfg: ModelConfig,
                     path: Path) -> dict[str, torch.Tensor]:
    """HF state dict → ours, checked key by key (messages use the file's HF names). The output layer is as
    the weights say: an ``lm_head.weight`` different from ``shared.weight`` is a separate layer."""
    hf = dict(hf)
    if "shared.weight" not in hf:  # some exports keep only the stacks' (tied) copies
        for alias in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
            if alias in hf:
                hf["shared.weight"] = hf[alias]
                break
    for tied in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                 # an unused weight old transformers versions saved (HF ignores it on load too)
                 "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight"):
        hf.pop(tied, None)
    lm_head = hf.pop("lm_head.weight", None)
    if not cfg.tie_word_embeddings:
        # a separate output layer. transformers >= 5 ties it to the embedding (without T5 1.0's rescale)
        # and then saves no lm_head.weight, or one sharing the embedding's storage (.bin): our lm_head is
        # its own copy, so it trains on its own and safetensors can save both.
        if lm_head is None:
            lm_head = hf.get("shared.weight")
        if lm_head is not None:
            hf["lm_head.weight"] = lm_head.clone()
    check_state_dict(hf, {k: tuple(v.shape) for k, v in hf_state_dict(model.state_dict(), cfg).items()}, path,
                     "its config.json")
    shared = hf["shared.weight"]
    if cfg.tie_word_embeddings and lm_head is not None and not (
            lm_head.shape == shared.shape and torch.equal(lm_head, shared)):
        raise T2TError(f"{path} has an lm_head.weight different from shared.weight while its config ties them "
                       f"(T5 1.0 style, rescaled output layer); set tie_word_embeddings false in config.json if "
                       f"this is a T5 1.1 model.")
    return _state_dict_from_hf(hf, model)


def _read_hf_weights(folder: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """The state dict in a HF folder: model.safetensors, pytorch_model.bin, or their sharded forms."""
    for single, index, reader in (
            ("model.safetensors", "model.safetensors.index.json", read_safetensors),
            ("pytorch_model.bin", "pytorch_model.bin.index.json", lambda p: torch_load(p, "weights"))):
        if (folder / single).is_file():
            return _as_tensor_dict(reader(folder / single), folder / single), folder / single
        if (folder / index).is_file():
            weight_map = read_json(folder / index, "weights index").get("weight_map")
            if not isinstance(weight_map, dict):
                raise T2TError(f"weights index {folder / index} has no weight_map; the file is corrupt.")
            tensors: dict[str, torch.Tensor] = {}
            for shard in sorted(set(weight_map.values())):
                tensors.update(_as_tensor_dict(reader(folder / shard), folder / shard))
            return tensors, folder / index
    raise T2TError(f"{folder} has no model.safetensors or pytorch_model.bin (nor a sharded index); the "
                   f"Hugging Face folder is incomplete.")


def _as_tensor_dict(obj: Any, path: Path) -> dict[str, torch.Tensor]:
    if isinstance(obj, Mapping) and "state_dict" in obj and isinstance(obj["state_dict"], Mapping):
        obj = obj["state_dict"]
    if not isinstance(obj, Mapping) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise T2TError(f"weights file {path} does not hold a state dict of tensors; pass the file "
                       f"save_pretrained wrote.")
    return dict(obj)


VOCAB_FILE = "spiece.model"
_HF_PATTERNS = ["config.json", "*.safetensors", "model.safetensors.index.json", VOCAB_FILE,
                "tokenizer_config.json", "special_tokens_map.json"]
_HF_BIN_PATTERNS = ["pytorch_model*.bin", "pytorch_model.bin.index.json"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")  # "name" or "owner/name"


def download_from_hub(repo_id: str) -> Path:
    """``huggingface_hub.snapshot_download`` of a T5 repo's config and weights (safetensors, else .bin),
    for a name that does not exist locally and is not path-looking (see ``_path_looking``)."""
    reason = _path_looking(repo_id)
    if reason:
        raise T2TError(f"{repo_id} does not exist; check the path (it is read as a local path, not a Hugging "
                       f"Face hub id, because {reason}).")
    if not _HUB_ID.match(repo_id) or ".." in repo_id:
        raise T2TError(f"{repo_id} does not exist locally and is not a Hugging Face hub id; check the path.")
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=_HF_PATTERNS))
        if not any(folder.glob("*.safetensors")):
            folder = Path(snapshot_download(repo_id, allow_patterns=_HF_PATTERNS + _HF_BIN_PATTERNS))
    except Exception as e:  # huggingface_hub's errors differ across versions: told apart by class name
        raise _hub_error(repo_id, e) from None
    return folder


def hub_vocabulary(repo_id: str) -> str | None:
    """The vocabulary of hub repo ``repo_id`` as :func:`folder_vocabulary` finds it, fetching only the files it
    reads (or huggingface_hub's cached copies); None where there is none or it cannot be fetched: loading the
    model then says why, or the repo has no vocabulary of its own."""
    if _path_looking(repo_id) or not _HUB_ID.match(repo_id) or ".." in repo_id:
        return None
    from huggingface_hub import hf_hub_download

    for name in (VOCAB_FILE, *BYT5_MARKERS):
        try:
            path = Path(hf_hub_download(repo_id, name))
        except Exception:  # offline, not found, no such file: the model's own loading reports the first two
            continue
        if name == VOCAB_FILE:
            return str(path)
        if _names_byt5_tokenizer(path):
            return ByteVocabulary.kind
    return None


BYT5_MARKERS = ("tokenizer_config.json", CONFIG_FILE)  # where a ByT5 folder names its tokenizer class


def folder_vocabulary(folder: Path) -> str | None:
    """The vocabulary a Hugging Face folder ships: its ``spiece.model``, or ``byte`` where its tokenizer or model
    config names ``ByT5Tokenizer`` (google/byt5-* and t2t-export's ByT5 folders), a tokenizer without a file;
    None for neither."""
    if (folder / VOCAB_FILE).is_file():
        return str(folder / VOCAB_FILE)
    return ByteVocabulary.kind if any(_names_byt5_tokenizer(folder / name) for name in BYT5_MARKERS) else None


def _names_byt5_tokenizer(path: Path) -> bool:
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):  # absent or unreadable: the model's own loading names a broken config.json
        return False
    return isinstance(config, dict) and config.get("tokenizer_class") == "ByT5Tokenizer"


def _path_looking(name: str) -> str | None:
    """Why a name that does not exist can only be meant as a local path, or None if it may be a hub id.

    Hub ids are ``name`` or ``owner/name``. A path is what starts with ``./``, ``../``, ``/`` or ``~``, has
    more than one ``/``, or has a first component that exists here (``runs/glue-smal`` when ``runs/`` is a
    folder in the working directory), so a typo in a run path never starts a download.
    """
    for start in ("./", "../", "/", "~"):
        if name.startswith(start):
            return f"it starts with {start!r}"
    if name.count("/") > 1:
        return "it has more than one '/'"
    first = name.split("/")[0]
    if "/" in name and Path(first).exists():
        return f"{first!r} exists here"
    return None


# hub.hub_failure's answer → the sentence for a model that could not be downloaded
_HUB_ERRORS = {
    "gated": "hub model {repo_id} is gated; accept its terms on huggingface.co and log in (hf auth login, or set "
             "HF_TOKEN).",
    "not_found": "{repo_id} is neither a local path nor a model on the Hugging Face hub (a private one needs hf "
                 "auth login); check the path or the hub id.",
    "refused": "the Hugging Face hub refused to serve {repo_id} (HTTP {status}); log in with hf auth login or set "
               "HF_TOKEN.",
    "rate_limited": "the Hugging Face hub is rate-limiting downloads (HTTP 429 for {repo_id}); wait a few minutes "
                    "and retry, or log in for a higher limit.",
    "offline": "{repo_id} is not a local path, and it cannot be downloaded because the Hugging Face hub is "
               "unreachable (HF_HUB_OFFLINE is set) and the model is not in the local cache; connect, or pass a "
               "local folder.",
    "unreachable": "{repo_id} is not a local path, and it cannot be downloaded because the Hugging Face hub is "
                   "unreachable (no connection) and the model is not in the local cache; connect, or pass a "
                   "local folder.",
    "other": "{repo_id} is not a local path and could not be downloaded from the Hugging Face hub ({error}); "
             "check the hub id and the network.",
}


def _hub_error(repo_id: str, e: Exception) -> T2TError:
    """One sentence for a failed hub download: not found, gated, refused, rate-limited, offline, other."""
    from huggingface_hub import constants

    failure = hub_failure(e, offline=constants.HF_HUB_OFFLINE)
    status = getattr(getattr(e, "response", None), "status_code", None)
    error = f"{type(e).__name__}: {error_summary(e)}"
    return T2TError(_HUB_ERRORS[failure].format(repo_id=repo_id, status=status, error=error))


GENERATION_FILE = "generation_config.json"
BEAM_SEARCH_FILE = "t5_beam_search.json"  # GenerationConfig.from_pretrained(folder, BEAM_SEARCH_FILE)
T5_BEAMS = 4  # the T5 paper's beam search (translation, summaries): 4 beams, length penalty alpha 0.6
TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_FILES = (VOCAB_FILE, TOKENIZER_JSON, "tokenizer_config.json")
_EXPORT_FILES = {MODEL_FILE, CONFIG_FILE, GENERATION_FILE, BEAM_SEARCH_FILE, *TOKENIZER_FILES}


def to_hf(model: T5, out_dir: str | os.PathLike, vocabulary: Any = None, model_type: str | None = None) -> Path:
    """Write ``model`` as a Hugging Face T5 folder (config.json, generation_config.json, t5_beam_search.json,
    model.safetensors)
    loadable by ``transformers.T5ForConditionalGeneration.from_pretrained(out_dir)``; with ``vocabulary`` (a
    SentencePieceVocabulary or ByteVocabulary, a .model path, ``byte`` or a run's vocab.json of those kinds)
    also the tokenizer files ``AutoTokenizer`` reads (T5's, or ByT5's ``ByT5Tokenizer``).

    ``out_dir`` is new, or holds only files an earlier export wrote: other weight files beside ours could
    be what a loader picks up. The export is written whole in a new folder beside it, then swapped in
    (``durable.publish_folder``): a failure (a full disk) leaves the earlier export as it was, files are never written
    through a symbolic link planted in ``out_dir``, and no file of an earlier export (its tokenizer, for
    another vocabulary) stays beside the new one.

    ``model_type`` (``t5``, ``mt5`` or ``umt5``; default ``umt5`` for a model with a position bias in every layer,
    ``t5`` otherwise) names the transformers class the config.json is for (``check_model_type``)."""
    model_type = check_model_type(model.config, model_type)
    if model.config.adapter_dim:
        raise T2TError("Hugging Face's T5 has no adapter layers, so a model with adapters cannot be exported; "
                       "fine-tune without transfer.adapter_dim to export.")
    if model.config.lora_rank:
        raise T2TError("Hugging Face's T5 has no LoRA layers; fold them into the weights first "
                       "(t2t.models.lora.drop_lora(model, merge=True), as t2t-export --to hf does), or write a "
                       "PEFT adapter (t2t.checkpoints.peft.to_peft, t2t-export --to peft).")
    if model.config.architecture != "encoder_decoder":
        raise T2TError(f"Hugging Face's T5 is an encoder_decoder, so a {model.config.architecture} model cannot be "
                       f"exported; export encoder_decoder models only.")
    vocabulary = _checked_vocabulary(vocabulary, model.config) if vocabulary is not None else None
    out = _export_dir(Path(out_dir))
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in hf_state_dict(model.state_dict(), model.config).items()}

    def fill(new: Path) -> None:
        write_with(new / MODEL_FILE, lambda p: save_file(tensors, p, {"format": "pt"}))
        write_text(new / CONFIG_FILE, json.dumps(model_config_to_hf(model.config, model_type), indent=2))
        write_text(new / GENERATION_FILE, json.dumps(generation_config(model.config), indent=2))
        write_text(new / BEAM_SEARCH_FILE, json.dumps(beam_search_config(model.config), indent=2))
        if vocabulary is not None:
            _write_tokenizer(vocabulary, new)

    return durable.publish_folder(out, fill, f"the Hugging Face export {out}")


def generation_config(cfg: ModelConfig) -> dict:
    """The special ids ``generate`` needs: transformers' default decode is then greedy, as ``t2t-predict``'s."""
    return {"decoder_start_token_id": cfg.decoder_start_id, "eos_token_id": cfg.eos_id, "pad_token_id": cfg.pad_id}


def beam_search_config(cfg: ModelConfig) -> dict:
    """T5's beam search as transformers can say it, for ``t2t-predict --beam-size 4``: 4 beams, ``length_penalty``
    T5's alpha (0.6) and ``early_stopping`` "never", the search t2t runs (t2t.models.decoding.beam_search).

    It is a file of its own, not the defaults of generation_config.json: transformers refuses a length penalty
    without beams, and beams by default would make transformers' plain ``generate()`` differ from t2t's greedy
    default. transformers' penalty is ``length ** length_penalty`` where T5's is ``((5 + length) / 6) ** alpha``,
    so where the two rank a short hypothesis against a longer one differently the decodes can differ
    (``t5_length_penalty`` says where)."""
    return {**generation_config(cfg), "num_beams": T5_BEAMS, "length_penalty": ALPHA, "early_stopping": "never"}


def _export_dir(out: Path) -> Path:
    """``out`` checked (a folder an earlier export wrote, or new), with its parent folder made."""
    if out.is_symlink():
        raise T2TError(f"export folder {out} is a symbolic link; pass the folder it names ({out.resolve()}).")
    if out.exists() and not out.is_dir():
        raise T2TError(f"export folder {out} is a file; pass a folder to write the model into.")
    others = sorted(p.name for p in out.iterdir() if p.name not in _EXPORT_FILES) if out.is_dir() else []
    if others:
        shown = ", ".join(others[:3]) + (" …" if len(others) > 3 else "")
        raise T2TError(f"export folder {out} holds files an export does not write ({shown}); choose a new "
                       f"folder or empty it.")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise T2TError(f"cannot create export folder {out}: {e.strerror or e}; choose a writable place.") from None
    return out


def _checked_vocabulary(vocabulary: Any, cfg: ModelConfig) -> SentencePieceVocabulary | ByteVocabulary:
    """The vocabulary to ship (a path or ``byte`` is read as load_vocabulary reads it): SentencePiece (T5's
    tokenizer) and bytes (ByT5's) are the kinds Hugging Face's tokenizers read."""
    if not isinstance(vocabulary, Vocabulary):
        vocabulary = load_vocabulary(vocabulary)
    if not isinstance(vocabulary, (SentencePieceVocabulary, ByteVocabulary)):
        raise T2TError(f"the vocabulary {vocabulary.path} is of kind {vocabulary.kind}, which Hugging Face's T5 "
                       f"tokenizer cannot read; export without a vocabulary, or pass a SentencePiece one with "
                       f"--vocab.")
    if vocabulary.vocab_size > cfg.vocab_size:
        raise T2TError(f"the vocabulary {vocabulary.path} has {vocabulary.vocab_size} ids but the model only "
                       f"{cfg.vocab_size} embeddings; export with the vocabulary the model was trained with.")
    return vocabulary


def _write_tokenizer(vocabulary: SentencePieceVocabulary | ByteVocabulary, out: Path) -> None:
    """The tokenizer files of the vocabulary's kind: :func:`_write_sentencepiece_tokenizer` or
    :func:`_write_byte_tokenizer`."""
    if isinstance(vocabulary, ByteVocabulary):
        _write_byte_tokenizer(vocabulary, out)
    else:
        _write_sentencepiece_tokenizer(vocabulary, out)


def _write_byte_tokenizer(vocabulary: ByteVocabulary, out: Path) -> None:
    """tokenizer_config.json naming transformers' ``ByT5Tokenizer`` (it has no vocabulary file), with each
    special id written out (``added_tokens_decoder``): pad 0, EOS 1 and unk 2 as ByT5Tokenizer makes them
    (spaces around them stripped), and the sentinels counted down from the last id as in t2t and T5, where a
    bare ``ByT5Tokenizer()`` of transformers 5 would number them upwards from 259 (t2t.data.byte_vocab)."""
    special = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
    sentinels = {vocabulary.sentinel_id(i): f"<extra_id_{i}>" for i in range(vocabulary.extra_ids)}
    strip = dict(lstrip=True, rstrip=True)
    tokens = {vocabulary.pad_id: ("<pad>", strip), vocabulary.eos_id: ("</s>", strip),
              vocabulary.unk_id: ("<unk>", strip), **{i: (t, {}) for i, t in sorted(sentinels.items())}}
    decoder = {str(i): {"content": text, "lstrip": False, "rstrip": False, "normalized": False,
                        "single_word": False, "special": True, **flags} for i, (text, flags) in tokens.items()}
    config = {"tokenizer_class": "ByT5Tokenizer", **special, "extra_ids": vocabulary.extra_ids,
              "additional_special_tokens": [f"<extra_id_{i}>" for i in range(vocabulary.extra_ids)],
              "model_input_names": ["input_ids", "attention_mask"], "added_tokens_decoder": decoder}
    write_text(out / "tokenizer_config.json", json.dumps(config, indent=2))


def _write_sentencepiece_tokenizer(vocabulary: SentencePieceVocabulary, out: Path) -> None:
    """spiece.model, tokenizer.json and tokenizer_config.json: pad 0, EOS 1, unk 2, and ``extra_ids`` sentinels
    ``<extra_id_N>`` counted down from the last id, as in t2t.

    tokenizer.json (a ``tokenizers`` file, as Hugging Face's own T5 folders have) is what ``AutoTokenizer``
    loads with transformers alone; without it transformers converts spiece.model and needs protobuf. The
    config names ``PreTrainedTokenizerFast`` rather than ``T5Tokenizer``, because transformers 5's T5Tokenizer
    replaces the file's pre-tokenizer with one that puts a "▁" after every sentinel ("<extra_id_0>." gets an
    extra id), while this file encodes as seqio does. It decodes as transformers' own T5 tokenizer does (built
    from the same spiece.model), not as sentencepiece: only the first piece's "▁" is dropped (``[3, 1465]``,
    "▁" "▁positive", is " positive", where sentencepiece and t2t-predict give "positive") and sentinels are
    written without sentencepiece's spaces, so the export reads like Google's T5 folders on the hub. A BPE
    vocabulary has no such file (its merges are not in the .model): its config names ``T5Tokenizer``, which
    converts spiece.model (protobuf needed)."""
    durable.write_file(out / VOCAB_FILE, vocabulary.model_bytes)
    special = {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>", "model_max_length": 512,
               "extra_ids": vocabulary.extra_ids,
               "additional_special_tokens": [f"<extra_id_{i}>" for i in range(vocabulary.extra_ids)]}
    spec = sentencepiece_spec(vocabulary.model_bytes)
    if spec["model_type"] != SPM_UNIGRAM:
        logger.warning("the vocabulary %s is not a unigram model, so the export has no tokenizer.json; "
                       "AutoTokenizer will need sentencepiece and protobuf to read spiece.model", vocabulary.path)
        config = {"tokenizer_class": "T5Tokenizer", "legacy": False, **special}
    else:
        write_text(out / TOKENIZER_JSON, fast_tokenizer(vocabulary, spec).to_str())
        # T5's inputs: transformers 4's generic fast tokenizer would add token_type_ids, which T5 refuses
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_input_names": ["input_ids", "attention_mask"],
                  **special}
    write_text(out / "tokenizer_config.json", json.dumps(config, indent=2))


def fast_tokenizer(vocabulary: SentencePieceVocabulary, spec: Mapping[str, Any]) -> Any:
    """A ``tokenizers.Tokenizer`` that gives ``vocabulary.encode(text) + [EOS]``, sentinels included.

    SentencePiece's unigram model with its scores, its normalisation (the precompiled charsmap, then spaces
    stripped at the end and collapsed), a "▁" prefix at the start of the text only, and the sentinels as special
    tokens. Text between two sentinels keeps its leading space, which becomes the "▁" that seqio's sentinel
    piece ("▁<extra_id_N>", see t2t.data.vocab) leaves for the next word ("<extra_id_0> cat" is "▁cat",
    "<extra_id_0>." is "."), and loses its trailing one, which the sentinel piece takes."""
    try:
        from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
        from tokenizers.models import Unigram
    except ImportError:
        raise T2TError("writing tokenizer.json needs the tokenizers package; pip install 't2t[hf]'.") from None
    sp, base = vocabulary.tokenizer, vocabulary.base_vocab_size
    sentinels = [f"<extra_id_{i}>" for i in reversed(range(vocabulary.extra_ids))]
    pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(base)] + [(s, 0.0) for s in sentinels]
    tokenizer = Tokenizer(Unigram(pieces, unk_id=vocabulary.unk_id, byte_fallback=bool(spec["byte_fallback"])))
    steps = [normalizers.Precompiled(spec["precompiled_charsmap"])] if spec["precompiled_charsmap"] else []
    if spec["remove_extra_whitespaces"]:
        steps += [normalizers.Replace(Regex(" +$"), ""), normalizers.Replace(Regex(" {2,}"), " ")]
    tokenizer.normalizer = normalizers.Sequence(steps)
    prepend = "first" if spec["add_dummy_prefix"] else "never"
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=prepend, split=True)
    metaspace = decoders.Metaspace(replacement="▁", prepend_scheme=prepend, split=True)
    tokenizer.decoder = (decoders.Sequence([decoders.ByteFallback(), metaspace]) if spec["byte_fallback"]
                         else metaspace)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=["$A", "</s>"], pair=["$A", "</s>", "$B", "</s>"], special_tokens=[("</s>", vocabulary.eos_id)])
    specials = [sp.id_to_piece(i) for i in (vocabulary.pad_id, vocabulary.eos_id, vocabulary.unk_id)]
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials + sentinels])
    return tokenizer
