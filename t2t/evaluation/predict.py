"""Prediction: decode input strings with a trained model (``t2t-predict``).

Inputs are strings, or with a task the raw fields of one example each (a JSON object), which go through
the task's text preprocessors to make its ``inputs`` string. Either way the string is tokenized as the
task pipeline does (EOS appended), cut to ``input_length`` and decoded as evaluation does
(t2t.evaluation.evaluate.trim_inputs, decode_in_batches), so the strings predicted for a task's examples are the ones
``t2t-eval`` scores.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable, Literal

import numpy as np

from t2t.models import distributed
from t2t.errors import T2TError
from t2t.evaluation.evaluate import (DecodingConfig, decode_in_batches, load_model_and_vocabulary, trim_inputs,
                          with_run_settings)
from t2t.data.task import Task, get_task_or_mixture, load_modules
from t2t.checkpoints.run import find_run

DEFAULT_MAX_LENGTH = 128  # decoded tokens when neither --max-length nor the run's target_length says


@dataclass
class PredictConfig(DecodingConfig):
    checkpoint: str = ""              # a run's output dir (latest checkpoint), one checkpoint, or a HF T5
    task: str | None = None           # inputs are JSON objects of this task's raw fields
    vocab: str | None = None          # default: the run's vocabulary, else $T2T_VOCAB, DATA_DIR/vocab, the hub
    data_dir: str | None = None       # default: the run's data dir, else $T2T_DATA_DIR
    modules: list[str] = field(default_factory=list)   # default: the run's modules
    device: str = "auto"              # auto, cpu, cuda or cuda:N
    precision: Literal["fp32", "bf16"] = "fp32"  # bf16: autocast (see TrainConfig.precision)


def predict(cfg: PredictConfig, lines: Iterable[str]) -> list[str]:
    """The decoded string for each input line, in order."""
    if not cfg.checkpoint:
        raise T2TError("no model given; pass --checkpoint (a run's output dir, a checkpoint, or a HF T5).")
    cfg = with_run_settings(cfg)
    load_modules(cfg.modules)
    task = get_task_or_mixture(cfg.task) if cfg.task else None
    if task is not None and not isinstance(task, Task):
        raise T2TError(f"{cfg.task!r} is a mixture; pass one of its tasks to --task.")
    device = distributed.pick_device(cfg.device)
    model, vocab = load_model_and_vocabulary(cfg.checkpoint, cfg.vocab, cfg.data_dir)
    inputs = [encode_input(line, number, task, vocab) for number, line in enumerate(lines, 1)]
    if not inputs:
        return []
    inputs, _ = trim_inputs(inputs, cfg.input_length, vocab.eos_id)
    texts, _ = decode_in_batches(model.to(device), inputs, vocab, cfg, max_new_tokens=max_length(cfg),
                                 device=device, precision=cfg.precision, desc="predict")
    return texts


def encode_input(line: str, number: int, task: Task | None, vocab) -> np.ndarray:
    """Token ids of one input line (a string, or a task's raw fields as JSON), EOS appended."""
    if task is None:
        return np.asarray(vocab.encode(line) + [vocab.eos_id], dtype=np.int64)
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as e:
        raise T2TError(f"input line {number} is not JSON ({e.msg}); with --task give one JSON object of the "
                       f"task's raw fields per line.") from None
    if not isinstance(raw, dict):
        raise T2TError(f"input line {number} is not a JSON object; with --task give one object of the task's "
                       f"raw fields per line (see t2t-show --task {task.name}).")
    try:
        text = task.preprocess(raw)["inputs"]
    except KeyError as e:
        raise T2TError(f"input line {number} has no field {e.args[0]!r}, which task {task.name}'s preprocessing "
                       f"reads; give the task's raw fields (see t2t-show --task {task.name}).") from None
    feature = task.output_features["inputs"]
    feature_vocab = feature.vocabulary or vocab
    ids = feature_vocab.encode(text)
    return np.asarray(ids + [feature_vocab.eos_id] if feature.add_eos else ids, dtype=np.int64)


def max_length(cfg: PredictConfig) -> int:
    """--max-length, else the run's target length, else DEFAULT_MAX_LENGTH."""
    if cfg.max_length:
        return cfg.max_length
    run = find_run(cfg.checkpoint)
    return (run.settings.get("target_length") if run else None) or DEFAULT_MAX_LENGTH
