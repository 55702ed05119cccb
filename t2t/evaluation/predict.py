"""Prediction: decode input strings with a trained model (``t2t-predict``).

Inputs are strings, or with a task the raw fields of one example each (a JSON object), which go through
the task's text preprocessors to make its ``inputs`` string. Either way the string is tokenized as the
task pipeline does (EOS appended), cut to ``input_length`` and decoded as evaluation does
(t2t.evaluation.evaluate.trim_inputs, decode_in_batches), so the strings predicted for a task's examples are the ones
``t2t-eval`` scores.
"""

from __future__ import annotations

import itertools
import json
import logging
import numbers
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal

import numpy as np
import torch

from t2t.checkpoints import run as run_lib
from t2t.data.task import PREPROCESSOR_ERRORS, Task, get_task_or_mixture, load_modules
from t2t.errors import T2TError
from t2t.evaluation.evaluate import (
    DecodingConfig,
    decode_in_batches,
    load_model_and_vocabulary,
    pad_rows,
    pinned,
    trim_inputs,
    trusted_run_settings,
)
from t2t.models import distributed, kernels

log = logging.getLogger(__name__)

DEFAULT_MAX_LENGTH = 128  # decoded tokens when neither --max-length nor the run's target_length says
REFERENCE_EXAMPLES = 16  # examples of a task's data that input lines are checked against


@dataclass
class PredictConfig(DecodingConfig):
    checkpoint: str = ""              # a run's output dir (latest checkpoint), one checkpoint, or a HF T5
    task: str | None = None           # inputs are JSON objects of this task's raw fields
    vocab: str | None = None          # .model, vocab.json or byte (default: the run's, $T2T_VOCAB, DATA_DIR/vocab, hub)
    data_dir: str | None = None       # root of local data copies (default: the run's, else $T2T_DATA_DIR)
    modules: list[str] = field(default_factory=list)   # modules or .py files registering tasks (default: the run's)
    device: str = "auto"              # auto, cpu, cuda or cuda:N
    precision: Literal["fp32", "bf16"] = "fp32"  # bf16: autocast (see TrainConfig.precision)
    trust_modules: bool = False       # import the modules of a run not your own (another user's, or changed)
    verify_checkpoints: bool = True   # check the checkpoint's and the run's files against their checksums


def predict(cfg: PredictConfig, lines: Iterable[str]) -> list[str]:
    """The decoded string for each input line, in order (the lines are checked before the model loads)."""
    cfg = run_settings(cfg)
    task = prediction_task(cfg.task)
    reference = reference_examples(task, cfg.data_dir) if task else []
    texts = [input_text(line, number, task, reference) for number, line in enumerate(lines, 1)]
    if not texts:
        return []
    predictor = Predictor.load(cfg)
    decoded, _ = predictor.decode(predictor.encode(texts, task), cfg)
    return decoded


def run_settings(cfg: PredictConfig) -> PredictConfig:
    """``cfg`` with the run's vocabulary, modules and data dir where the user gave none, once the run's modules
    may be imported (t2t.checkpoints.run.require_module_consent), and those modules imported."""
    if not cfg.checkpoint:
        raise T2TError("no model given; pass --checkpoint (a run's output dir, a checkpoint, or a HF T5).")
    given = cfg
    _, cfg = pinned(given.checkpoint, lambda folder: trusted_run_settings(given, folder))
    load_modules(cfg.modules)
    return cfg


def prediction_task(name: str | None) -> Task | None:
    """The task named ``name`` (None for none), which must not be a mixture."""
    task = get_task_or_mixture(name) if name else None
    if task is not None and not isinstance(task, Task):
        raise T2TError(f"{name!r} is a mixture; pass one of its tasks to --task.")
    return task


@dataclass(frozen=True)
class Predictor:
    """A loaded model with its vocabulary, on its device: t2t-predict loads one per command, t2t-serve one per
    process and decodes every request's batch with it, the same way."""
    model: Any
    vocab: Any
    device: Any
    precision: str
    input_length: int
    max_new_tokens: int  # tokens decoded when a request sets no max_length (``max_length``)

    @classmethod
    def load(cls, cfg: PredictConfig) -> "Predictor":
        """The model and vocabulary of ``cfg.checkpoint`` (settings from :func:`run_settings`)."""
        device = distributed.pick_device(cfg.device)
        _, (model, vocab) = pinned(cfg.checkpoint, lambda folder: load_model_and_vocabulary(
            folder, cfg.vocab, cfg.data_dir, cfg.verify_checkpoints))
        return cls(model.to(device).eval(), vocab, device, cfg.precision, cfg.input_length, max_length(cfg))

    def encode(self, texts: list[str], task: Task | None) -> list[np.ndarray]:
        """Token ids of ``texts`` as the task pipeline makes them, cut to ``input_length`` as T5 evaluates."""
        inputs, cut = trim_inputs([encode(text, task, self.vocab) for text in texts], self.input_length,
                                  self.vocab.eos_id)
        if cut:
            log.warning("%d of %d inputs are longer than input_length (%d tokens) and were cut to it, EOS kept "
                        "last (as T5 evaluates); set --input-length to keep more.", cut, len(texts),
                        self.input_length)
        return inputs

    def decode(self, inputs: list[np.ndarray], decoding: DecodingConfig, desc: str = "predict"
               ) -> tuple[list[str], int]:
        """The decoded strings of ``inputs`` in order, and the tokens generated (``decode_in_batches``)."""
        return decode_in_batches(self.model, inputs, self.vocab, decoding,
                                 max_new_tokens=decoding.max_length or self.max_new_tokens, device=self.device,
                                 precision=self.precision, desc=desc)

    @torch.no_grad()
    def score(self, inputs: list[np.ndarray], targets: list[np.ndarray]) -> list[float]:
        """The log-likelihood of each target (ids with EOS) given its input, summed over the target's tokens:
        what rank classification compares (``rank_in_batches``), for one batch."""
        with kernels.autocast(self.precision, self.device), self.model.dense_attention():
            scores = self.model.score(pad_rows(inputs).to(self.device), pad_rows(targets).to(self.device))
        return scores.float().cpu().tolist()

    def encode_targets(self, texts: list[str]) -> list[np.ndarray]:
        """Token ids of target strings as rank classification scores them (EOS appended)."""
        return [np.append(np.asarray(ids, np.int64), self.vocab.eos_id) for ids in self.vocab.encode_batch(texts)]


def reference_examples(task: Task, data_dir) -> list[dict]:
    """The first raw examples (``REFERENCE_EXAMPLES`` at most) of the task's first split with data, which input
    lines are checked against and which give the fields a line leaves out; empty (said in one line) when none
    of its data can be read."""
    for split in task.splits or ("validation", "train", "test"):
        try:
            if task.has_split(split, data_dir=data_dir):
                return list(itertools.islice(task.raw_examples(split, data_dir), REFERENCE_EXAMPLES))
        except T2TError:
            continue
    log.info("no data of task %s found to check the input fields against: the fields are used as given",
             task.name)
    return []


def input_text(line: str, number: int, task: Task | None, reference: list[dict]) -> str:
    """The input string of one line: the line itself, or with a task its raw fields (JSON) preprocessed."""
    if task is None:
        return line
    return prepared_example(parse_fields(line, number, task), f"input line {number}", task, reference)["inputs"]


def prepared_example(raw: dict, where: str, task: Task, reference: list[dict]) -> dict:
    """One example's raw fields, checked against the task's data (``reference``) where there is some, through
    the task's text preprocessing, with each text feature also as ``<feature>_pretokenized`` (as t2t-eval's
    examples have it, which postprocessors read); an error names the example as ``where`` says ("input
    line 3")."""
    if reference:
        raw = checked_fields(raw, where, task, reference)
    example = preprocessed(task, raw, where)
    return {**example, **{f"{key}_pretokenized": example[key] for key in task.output_features if key in example}}


def parse_fields(line: str, number: int, task: Task) -> dict:
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as e:
        raise T2TError(f"input line {number} is not JSON ({e.msg}); with --task give one JSON object of the "
                       f"task's raw fields per line.") from None
    if not isinstance(raw, dict) or not raw:
        what = "an empty JSON object" if isinstance(raw, dict) else "not a JSON object"
        raise T2TError(f"input line {number} is {what}; with --task give one object of the task's raw fields "
                       f"per line (t2t-show --task {task.name} --raw prints some).")
    return raw


def checked_fields(raw: dict, where: str, task: Task, reference: list[dict]) -> dict:
    """``raw`` checked against the fields of the task's data (names, JSON types), with the fields it leaves
    out taken from the data's first example, where the inputs do not depend on them: a prediction needs no
    gold label, and a real one passes whatever checks the task's preprocessors make of it (an invented one,
    such as "", fails a preprocessor that accepts only its label words). A left-out field counts as one the
    inputs are made from when another value of it (an empty one, or another example's) changes them."""
    hint = f"give the task's raw fields (t2t-show --task {task.name} --raw prints some)"
    first = reference[0]
    unknown = sorted(set(raw) - set(first))
    if unknown:
        raise T2TError(f"{where} has field {unknown[0]!r}, which task {task.name}'s data does not "
                       f"have (its fields: {', '.join(first)}); {hint}.")
    for key, value in raw.items():
        if first[key] is not None and json_kind(value) != json_kind(first[key]):
            raise T2TError(f"{where}: field {key!r} must be {json_kind(first[key])}, as in task "
                           f"{task.name}'s data, got {value!r}; {hint}.")
    filled = {**first, **raw}
    inputs = preprocessed(task, filled, where)["inputs"]
    for key in first.keys() - raw.keys():
        if any(inputs_or_none(task, {**filled, key: other}) not in (None, inputs)
               for other in other_values(key, reference)):
            raise T2TError(f"{where} has no field {key!r}, which task {task.name}'s inputs are made "
                           f"from; {hint}.")
    return filled


def other_values(key: str, reference: list[dict]) -> list:
    """Values of field ``key`` to try in place of the first example's: an empty one, and the first other value
    the task's data has (a preprocessor may refuse the empty one: a label word, SQuAD's answers)."""
    first = reference[0][key]
    others = (row[key] for row in reference[1:] if key in row and row[key] != first)
    return [empty_like(first), *itertools.islice(others, 1)]


def inputs_or_none(task: Task, raw: dict) -> str | None:
    """The ``inputs`` string of ``raw``, or None where the task's preprocessing refuses its values."""
    try:
        return task.preprocess(raw)["inputs"]
    except (T2TError, *PREPROCESSOR_ERRORS):
        return None


def json_kind(value) -> str:
    """A value's JSON type, as an error names it."""
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, numbers.Number):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, (list, tuple)) else "an object" if isinstance(value, dict) else "null"


def empty_like(value):
    """An empty value of ``value``'s JSON type (-1 for a number, a label's "unlabelled"); an object keeps its
    keys, each emptied (SQuAD's answers: ``{"text": [], "answer_start": []}``)."""
    if isinstance(value, dict):
        return {key: empty_like(inner) for key, inner in value.items()}
    empty = {"true or false": False, "a number": -1, "a string": "", "a list": []}
    return empty.get(json_kind(value))


def preprocessed(task: Task, raw: dict, where: str) -> dict:
    """The example the task's text preprocessing makes of ``raw``; a failure names the example (``where``)."""
    try:
        return task.preprocess(raw)
    except T2TError as e:
        raise T2TError(f"{where}: {e}") from None
    except KeyError as e:
        raise T2TError(f"{where} has no field {e.args[0]!r}, which task {task.name}'s preprocessing "
                       f"reads; give the task's raw fields (t2t-show --task {task.name} --raw prints some).") from None
    except PREPROCESSOR_ERRORS as e:
        raise T2TError(f"{where}: task {task.name}'s preprocessing cannot read its fields ({e}); "
                       f"give the task's raw fields with their types (t2t-show --task {task.name} --raw prints "
                       f"some).") from None


def encode(text: str, task: Task | None, vocab) -> np.ndarray:
    """Token ids of an input string as the task's ``inputs`` feature tokenizes it (EOS appended)."""
    if task is None:
        return np.asarray(vocab.encode(text) + [vocab.eos_id], dtype=np.int64)
    feature = task.output_features["inputs"]
    feature_vocab = feature.vocabulary or vocab
    ids = feature_vocab.encode(text)
    return np.asarray(ids + [feature_vocab.eos_id] if feature.add_eos else ids, dtype=np.int64)


def max_length(cfg: PredictConfig) -> int:
    """--max-length, else the run's target length, else DEFAULT_MAX_LENGTH."""
    if cfg.max_length:
        return cfg.max_length
    run = run_lib.find_run(cfg.checkpoint, cfg.verify_checkpoints)
    return (run.settings.get("target_length") if run else None) or DEFAULT_MAX_LENGTH
