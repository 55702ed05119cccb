"""Evaluation: decode → detokenize → postprocess → metric functions → report (T5 §2.7, Appendix).

Predictions and targets are postprocessed the same way seqio does (``postprocess_fn(text, example,
is_target)``), so numbers compare with the ``t5`` library's. What is reported and written (the table,
the result files, the paper's benchmark averages) is ``t2t.evaluation.results``.

Inputs longer than ``input_length`` tokens (512, as T5 evaluates) are cut the way seqio trims them (EOS kept
last) and counted. Predictions come from greedy/beam decoding, or with ``rank_classification`` from scoring
each of a task's ``rank_choices`` and taking the most likely (t5's rank classification). Each task reports
its throughput (examples/s, tokens/s) with its results. An unlabelled split (GLUE's and SuperGLUE's test
sets: label -1, target ``<unk>``) gives predictions and no metrics, saying "no labels: no metrics" (scoring
invalid predictions against invalid targets gave accuracies of 0 or 100).

A run dir stands for its newest checkpoint at the moment it is read: evaluation pins one step folder, reads
the step from inside it (trainer_state.json) and re-reads the newest one if a running t2t-train rotates the
pinned one away, so results are never stamped with another checkpoint's step. Results go beside the run
(``RUN/eval``), never inside a checkpoint, which rotation deletes. A run's modules are imported as t2t's one
ownership rule says (t2t.checkpoints.run): the user's own run unasked, any other only with --trust-modules.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, TypeVar

import numpy as np
import torch
from tqdm.auto import tqdm

from t2t import config, durable
from t2t.checkpoints import native as checkpoint
from t2t.checkpoints import run as run_lib
from t2t.checkpoints.loading import load_model, own_vocabulary
from t2t.data.cache import reading_cache
from t2t.data.task import Mixture, Task, get_task_or_mixture, load_modules, member_tasks
from t2t.data.vocab import load_vocabulary
from t2t.errors import T2TError
from t2t.evaluation import figures, results
from t2t.models import distributed, kernels
from t2t.models.decoding import compiling_seconds
from t2t.terminal import ProgressLines, on_terminal

log = logging.getLogger(__name__)

T = TypeVar("T")
# The settings that change what an evaluation scores: its result files record them (results.stamp).
SCORING_SETTINGS = ("max_examples", "input_length", "max_length", "beam_size", "temperature", "top_k", "seed",
                    "precision", "rank_classification")
PIN_ATTEMPTS = 5  # a run dir's newest checkpoint rotated away this often while being read: give up


@dataclass
class DecodingConfig:
    batch_size: int = 32              # examples decoded at once
    beam_size: int = 1                # beams; > 1: beam search (length penalty alpha 0.6, as T5), 1: greedy
    temperature: float = 0.0          # > 0: sample from softmax(logits / temperature); 0: greedy
    top_k: int = 0                    # sampling: only from the k most likely tokens (0: all)
    seed: int = 0                     # sampling: seed of the draws
    max_length: int | None = None     # most tokens decoded (eval: longest target, capped by the task's; predict: run's)
    input_length: int = 512           # inputs are cut to this many tokens, EOS kept last (seqio's trim, T5's 512)
    compile: bool = False             # the decoding step through torch.compile (one graph for all batches)

    def __post_init__(self):
        """The same ranges for t2t-eval, t2t-predict and Python callers."""
        config.check(self, positive=("batch_size", "beam_size", "max_length", "input_length"),
                     non_negative=("temperature", "top_k"))
        if self.beam_size > 1 and self.temperature > 0:
            raise T2TError(f"beam_size {self.beam_size} and temperature {self.temperature} ask for two decoding "
                           f"methods (beam search, sampling); set one of them (t2t has no beam sampling).")
        if self.top_k and not self.temperature:
            raise T2TError(f"top_k {self.top_k} restricts sampling, which temperature 0 turns off (greedy or "
                           f"beam); set temperature > 0 to sample, or leave top_k at 0.")


@dataclass
class EvalConfig(DecodingConfig):
    mixture: str = ""                 # a task or mixture name (--task / --mixture)
    checkpoint: str = ""              # a run's output dir (latest checkpoint), one checkpoint, or a HF T5
    split: str = "validation"         # split to evaluate
    vocab: str | None = None          # .model, vocab.json or byte (default: the run's, $T2T_VOCAB, DATA_DIR/vocab, hub)
    data_dir: str | None = None       # root of local data copies (default: the run's, else $T2T_DATA_DIR)
    cache_dir: str | None = None      # a t2t-cache folder to read tokenized examples from (t2t.data.cache)
    max_examples: int | None = None   # evaluate the first N examples of each task (default: all)
    output_dir: str | None = None     # results go to <output_dir>/<split>/; default RUN/eval (a run dir),
                                      # RUN/eval/step_X (one of its checkpoints), else <checkpoint>/eval
    skip_unavailable: bool = False    # leave out mixture members whose data is missing (with a warning)
    modules: list[str] = field(default_factory=list)   # modules or .py files registering tasks (default: the run's)
    device: str = "auto"              # auto, cpu, cuda or cuda:N
    threads: int = 0                  # CPU threads; 0: OMP_NUM_THREADS or all cores
    precision: Literal["fp32", "bf16"] = "fp32"  # bf16: autocast (see TrainConfig.precision)
    all_checkpoints: bool = False     # every kept checkpoint of the run, then each task at its best (§3.1.2)
    rank_classification: bool = False  # score each task's rank_choices and pick the best instead of generating
    trust_modules: bool = False       # import the modules of a run not your own (another user's, or changed)
    verify_checkpoints: bool = True   # check the checkpoint's and the run's files against their checksums

    def __post_init__(self):
        super().__post_init__()
        config.check(self, positive=("max_examples",), non_negative=("threads",))


def evaluate(cfg: EvalConfig) -> dict[str, dict[str, float]]:
    """Evaluate every task of ``cfg.mixture`` that has metrics; print a table, write results (t2t.evaluation.results).
    With ``cfg.cache_dir`` the tasks' tokenized examples come from that t2t-cache folder."""
    with reading_cache(cfg.cache_dir):
        return evaluate_tasks(cfg)


def evaluate_tasks(cfg: EvalConfig) -> dict[str, dict[str, float]]:
    if not cfg.mixture:
        raise T2TError("no task or mixture given; pass --task NAME or --mixture NAME (see t2t-tasks).")
    if not cfg.checkpoint:
        raise T2TError("no model given; pass --checkpoint (a run's output dir, a checkpoint, or a HF T5).")
    out_root = Path(cfg.output_dir) if cfg.output_dir else default_output_dir(cfg.checkpoint)
    given = cfg
    _, cfg = pinned(given.checkpoint, lambda folder: trusted_run_settings(given, folder))
    load_modules(cfg.modules)
    item = get_task_or_mixture(cfg.mixture)
    tasks, skipped = tasks_to_evaluate(item, cfg.split, cfg.data_dir, cfg.skip_unavailable)
    if cfg.rank_classification:
        check_rank_classification(cfg, tasks)
    results.check_output_dir(out_root / cfg.split)
    distributed.use_threads(cfg.threads)
    device = distributed.pick_device(cfg.device)
    folder, (model, vocab, step) = pinned(cfg.checkpoint, lambda folder: load_for_evaluation(folder, cfg))
    model = model.to(device)
    vocabulary = results.vocabulary_record(vocab)
    out_dir = out_root / results.split_folder(cfg.split, other_vocabulary(folder, vocabulary["sha256"]))
    results.check_vocabulary(out_dir, [task.name for task in tasks], vocabulary)
    results.prepare_output_dir(out_dir)  # only now: a hub id that failed to load leaves no ./owner/name/eval
    stamp = results.stamp(folder, step, cfg.split, scoring_settings(cfg), vocabulary)
    scores, undefined = {}, {}
    for task in tasks:
        metrics, records, stats = evaluate_task(
            model, task, vocab, cfg.split, data_dir=cfg.data_dir, max_examples=cfg.max_examples,
            decoding=cfg, device=device, precision=cfg.precision,
            rank_classification=cfg.rank_classification and bool(task.rank_choices))
        reasons = results.undefined_reasons(metrics, records)
        results.write_task_result(out_dir, task.name, metrics, reasons, records, {**stamp, "stats": stats})
        print(format_stats(task.name, stats, cfg.input_length))
        if not stats["labelled"]:
            print(f"{task.name}: {results.NO_LABELS} (its {cfg.split} split is unlabelled; predictions only)")
            skipped[task.name] = results.NO_LABELS
            continue
        scores[task.name], undefined[task.name] = metrics, reasons
    averages = summary = None
    if isinstance(item, Mixture):
        averages = results.benchmark_averages(scores)
        summary = results.write_summary(out_dir, item.name, scores, averages, skipped, stamp)
    if scores:
        print(results.format_table(scores, undefined, averages))
    print(results.format_written(out_dir, [task.name for task in tasks], summary))
    return scores


def evaluate_checkpoints(cfg: EvalConfig) -> dict[str, dict]:
    """Evaluate every kept checkpoint of the run ``cfg.checkpoint`` (results under ``<output>/<step>/``),
    then report each task at its best checkpoint, as the paper does (§3.1.2); writes ``best.json``. A
    checkpoint that a running t2t-train rotates away before it is read is skipped with one line."""
    run_dir = Path(cfg.checkpoint)
    found = checkpoint.list_checkpoints(run_dir)
    if not found:
        raise T2TError(f"{run_dir} holds no step_* checkpoints; --all-checkpoints takes a run's output dir.")
    out_dir = Path(cfg.output_dir or run_dir / "eval")
    per_step = {}
    for folder in found:
        log.info("evaluating %s", folder)
        try:
            per_step[checkpoint.named_step(folder)] = evaluate(dataclasses.replace(
                cfg, checkpoint=str(folder), output_dir=str(out_dir / folder.name), all_checkpoints=False))
        except T2TError:
            if folder.is_dir():
                raise
            log.warning("skipping %s: a running t2t-train deleted it (rotation) before it was read", folder)
    if not per_step:
        raise T2TError(f"every checkpoint of {run_dir} was deleted while it was evaluated; evaluate when the "
                       f"t2t-train writing it is done, or raise its keep_checkpoints.")
    best = results.best_checkpoints(per_step)
    vocabulary = results.vocabulary_record(evaluation_vocabulary(str(run_dir), cfg.vocab, cfg.data_dir))
    name = results.split_folder(cfg.split, other_vocabulary(str(run_dir), vocabulary["sha256"]))
    record = {"run": str(run_dir), "split": cfg.split, "vocabulary": vocabulary, "settings": scoring_settings(cfg),
              "tasks": best}
    durable.write_atomic(out_dir / f"best.{name}.json",
                         json.dumps(results.jsonable(record), indent=2, allow_nan=False) + "\n")
    figures.save_figure(checkpoints_figure(per_step, best), out_dir / f"checkpoints.{name}.png")
    print(results.format_best(best))
    print(f"wrote best.{name}.json and checkpoints.{name}.png to {out_dir}")
    return best


def checkpoints_figure(per_step: dict[int, dict[str, dict]], best: dict[str, dict]):
    """Each task's score (results.task_score) against the checkpoint's step, its best step marked."""
    names = {task: f"{task}: {'mean of ' if len(b['metrics']) > 1 else ''}{', '.join(b['metrics'])}"
             for task, b in best.items()}
    records = [{"step": step, **{names[task]: results.jsonable(results.task_score(metrics))
                                 for task, metrics in per_step[step].items()}} for step in sorted(per_step)]
    return figures.curves_figure(records, list(names.values()), {names[t]: b["step"] for t, b in best.items()})


def check_rank_classification(cfg: EvalConfig, tasks: list[Task]) -> None:
    """Rank classification needs a task with label strings; where it takes every task, a decoding setting
    given with it would do nothing and is an error; ``compile`` (the decoding step's) is said to do nothing."""
    ranked = [task.name for task in tasks if task.rank_choices]
    if not ranked:
        raise T2TError(f"no task of {cfg.mixture!r} has label strings to rank (rank_choices); evaluate by "
                       f"generation (leave out --rank-classification).")
    given = config.given(cfg, ("beam_size", "temperature", "top_k", "max_length"))
    if given and len(ranked) == len(tasks):
        raise T2TError(f"{given[0]} is a decoding setting, and with --rank-classification every task of "
                       f"{cfg.mixture!r} is scored by its label strings, not decoded; leave {given[0]} out, or "
                       f"evaluate by generation (without --rank-classification).")
    if cfg.compile:
        log.warning("compile: true compiles the decoding step, which rank classification does not take: %s "
                    "are scored eagerly.", ", ".join(ranked))


def scoring_settings(cfg: EvalConfig) -> dict:
    """``cfg``'s SCORING_SETTINGS, so that results of a subset, of beam search or of bf16 say so."""
    return {name: getattr(cfg, name) for name in SCORING_SETTINGS}


def default_output_dir(checkpoint_path: str) -> Path:
    """Where results go without --output-dir: beside the run, never inside a checkpoint (rotation deletes
    those): ``RUN/eval`` for a run dir, ``RUN/eval/step_X`` for one of its checkpoints, else ``<path>/eval``."""
    path = Path(checkpoint_path)
    if path.is_dir() and checkpoint.is_checkpoint_dir(path):
        return path.parent / "eval" / path.name
    return path / "eval"


def pin_checkpoint(checkpoint_path: str) -> str:
    """The one folder ``checkpoint_path`` stands for now: a run dir its newest step folder, else itself."""
    path = Path(checkpoint_path)
    if path.is_dir() and not checkpoint.is_checkpoint_dir(path):
        latest = checkpoint.latest_checkpoint(path)
        if latest is not None:
            return str(latest)
    return str(checkpoint_path)


def pinned(checkpoint_path: str, read: Callable[[str], T]) -> tuple[str, T]:
    """``(folder, read(folder))`` for the folder ``checkpoint_path`` is pinned to. If a run dir's pinned
    checkpoint is deleted while it is read (a running t2t-train saved a newer one and rotated), the newest
    is pinned and read again; a step folder given by path that is deleted so is a T2TError saying that."""
    for _ in range(PIN_ATTEMPTS):
        folder = pin_checkpoint(checkpoint_path)
        existed = Path(folder).is_dir()
        try:
            return folder, read(folder)
        except (T2TError, OSError):
            if not existed or Path(folder).is_dir():
                raise
            if folder == str(checkpoint_path):
                raise T2TError(f"checkpoint {folder} was deleted while it was read (a running t2t-train "
                               f"rotated it away); evaluate a newer checkpoint of its run.") from None
            log.info("%s was deleted while it was read (a running t2t-train saved a newer one); reading the "
                     "newest checkpoint again", folder)
    raise T2TError(f"the newest checkpoint of {checkpoint_path} was deleted {PIN_ATTEMPTS} times while it was "
                   f"read; evaluate when the t2t-train writing it is done, or raise its keep_checkpoints.")


def load_for_evaluation(folder: str, cfg) -> tuple:
    """(model, vocabulary, step saved inside the checkpoint or None) of checkpoint ``folder``."""
    step = checkpoint.checkpoint_step(folder)
    model, vocab = load_model_and_vocabulary(folder, cfg.vocab, cfg.data_dir, cfg.verify_checkpoints)
    return model, vocab, step


def tasks_to_evaluate(item: Task | Mixture, split: str, data_dir, skip_unavailable: bool
                      ) -> tuple[list[Task], dict[str, str]]:
    """The tasks of ``item`` with metrics whose ``split`` data is present, and those skipped (with why).

    A mixture member without such a split (MNLI's training task; AX has only a test split) is not
    evaluated. A member whose data is missing is skipped with ``skip_unavailable``; otherwise one error
    lists every missing member.
    """
    if isinstance(item, Task):
        if not item.metric_fns:
            raise T2TError(f"task {item.name!r} has no metric functions to evaluate.")
        item.check_split(split)
        return [item], {}
    tasks, skipped = [], {}
    for task in member_tasks(item):
        if not task.metric_fns or (task.splits and split not in task.splits):
            continue
        if task.has_split(split, data_dir=data_dir):
            tasks.append(task)
        else:
            skipped[task.name] = f"no {split} data"
    if skipped and not skip_unavailable:
        raise T2TError(f"{split} data is missing for {len(skipped)} task(s) of {item.name!r}: "
                       f"{', '.join(skipped)}; get the data, or pass --skip-unavailable to evaluate the rest.")
    for name, reason in skipped.items():
        log.warning("skipping %s of %s: %s", name, item.name, reason)
    if not tasks:
        raise T2TError(f"{item.name!r} has no task with metrics and {split} data to evaluate.")
    return tasks, skipped


def with_run_settings(cfg, folder: str | None = None):
    """``cfg`` with the vocabulary, modules and data dir of the run at ``folder`` (default: ``cfg.checkpoint``)
    where the user gave none (a checkpoint that is not a t2t run changes nothing)."""
    return run_lib.with_run_locations(cfg, run_lib.find_run(folder or cfg.checkpoint, cfg.verify_checkpoints))


def trusted_run_settings(cfg, folder: str | None = None):
    """:func:`with_run_settings` once the run's modules may be imported: it is the user's own run, or the user
    consents (``cfg.trust_modules``, or modules of their own; see t2t.checkpoints.run.require_module_consent)."""
    run = run_lib.find_run(folder or cfg.checkpoint, cfg.verify_checkpoints)
    run_lib.require_module_consent(run, cfg.modules, cfg.trust_modules)
    return run_lib.with_run_locations(cfg, run)


def load_model_and_vocabulary(checkpoint_path: str, vocab_path: str | None, data_dir: str | None,
                              verify: bool = True):
    """The model at ``checkpoint_path`` and its ``evaluation_vocabulary``, checked to fit its embedding."""
    vocab = evaluation_vocabulary(checkpoint_path, vocab_path, data_dir)
    model = load_model(checkpoint_path, verify)
    run_lib.check_vocabulary_fits(model.config.vocab_size, vocab, f"the model {checkpoint_path}")
    return model, vocab


def evaluation_vocabulary(checkpoint_path: str, vocab_path: str | None, data_dir: str | None):
    """``vocab_path``, else the checkpoint's own vocabulary, else ``load_vocabulary``'s default."""
    return load_vocabulary(vocab_path or own_vocabulary(checkpoint_path), data_dir=data_dir)


def other_vocabulary(checkpoint_path: str, sha256: str) -> str | None:
    """``sha256`` (a vocabulary's) if the checkpoint carries a vocabulary of its own and this is another one,
    else None: where results are kept apart (results.split_folder)."""
    own = own_vocabulary(checkpoint_path)
    return sha256 if own is not None and load_vocabulary(own).sha256 != sha256 else None


def evaluate_task(model, task: Task, vocab, split: str, *, data_dir=None, max_examples=None,
                  decoding: DecodingConfig | None = None, device=torch.device("cpu"), precision="fp32",
                  rank_classification: bool = False) -> tuple[dict, list[dict], dict]:
    """Metrics, per-example records (input, target, prediction, postprocessed values) and run statistics
    (whether the split has labels, examples, inputs truncated to ``decoding.input_length``, seconds,
    examples/s and tokens/s) for one task. An unlabelled split (``has_labels``) gets no metrics.

    Predictions are decodes per ``decoding``, or with ``rank_classification`` the best-scoring of the task's
    ``rank_choices``; either way they go through the task's postprocessor and metrics.
    """
    decoding = decoding or DecodingConfig()
    examples = task.examples(split, vocab, data_dir=data_dir, max_examples=max_examples)
    inputs, truncated = trim_inputs([ex["inputs"] for ex in examples], decoding.input_length, vocab.eos_id)
    compiled_before, start = compiling_seconds(), time.perf_counter()
    if rank_classification:
        decoded, tokens = rank_in_batches(model, task, examples, inputs, vocab, batch_size=decoding.batch_size,
                                          device=device, precision=precision)
    else:
        max_new_tokens = decoding.max_length or decode_length(task, examples)
        decoded, tokens = decode_in_batches(model, inputs, vocab, decoding, max_new_tokens=max_new_tokens,
                                            device=device, precision=precision, desc=task.name)
    compiling = compiling_seconds() - compiled_before
    seconds = time.perf_counter() - start - compiling
    labelled = has_labels(examples)
    targets = [task.postprocess(ex["targets_pretokenized"], ex, is_target=True) if labelled else None
               for ex in examples]
    predictions = [task.postprocess(text, ex, is_target=False) for text, ex in zip(decoded, examples)]
    metrics = {}
    for metric_fn in task.metric_fns if labelled else ():
        metrics.update(metric_fn(targets, predictions))
    records = [{"inputs": ex["inputs_pretokenized"], "targets": ex["targets_pretokenized"], "prediction": text,
                "target_value": results.jsonable(t), "prediction_value": results.jsonable(p)}
               for ex, text, t, p in zip(examples, decoded, targets, predictions)]
    stats = {"mode": "rank_classification" if rank_classification else "generation", "labelled": labelled,
             "examples": len(examples), **({} if rank_classification else {"max_new_tokens": max_new_tokens}),
             "truncated_inputs": truncated, "seconds": seconds,
             "examples_per_second": len(examples) / max(seconds, 1e-9),
             "tokens_per_second": tokens / max(seconds, 1e-9)}
    if compiling:  # left out of the throughput above (and logged by the decoding step)
        stats["compile_seconds"] = compiling
    return metrics, records, stats


def decode_length(task: Task, examples: list[dict]) -> int:
    """Tokens to decode when the user sets none: the longest target (with EOS), at most the task's T5 target
    length (``Task.sequence_length``, t5's gin ``sequence_lengths``: CNN/DM 512), so that a decode that never
    stops ends where T5's did rather than at the longest reference (938 tokens in CNN/DM's test set)."""
    longest = max(len(ex["targets"]) for ex in examples)
    return min(longest, task.sequence_length["targets"]) if task.sequence_length else longest


def has_labels(examples: list[dict]) -> bool:
    """Whether any example carries a gold answer. GLUE's and SuperGLUE's test rows have none: label -1 and
    target ``<unk>`` (STS-B's target is ``"-1.0"``, ReCoRD's ``<unk>`` with no answers)."""
    return any(example.get("label") != -1 and example["targets_pretokenized"] != "<unk>" for example in examples)


def trim_inputs(inputs: list[np.ndarray], length: int | None, eos_id: int) -> tuple[list[np.ndarray], int]:
    """Inputs cut to ``length`` tokens with EOS kept last, as seqio's ``append_eos_after_trim`` does for
    T5's evaluation (an input of ``length`` tokens or fewer is unchanged); also how many were cut."""
    if length is None:
        return inputs, 0
    if length < 2:
        raise T2TError(f"the evaluation input length must be at least 2 tokens, got {length}.")
    out = [np.append(x[:length - 1], eos_id) if len(x) > length else x for x in inputs]
    return out, sum(len(x) > length for x in inputs)


@torch.no_grad()
def decode_in_batches(model, inputs: list[np.ndarray], vocab, decoding: DecodingConfig, *, max_new_tokens: int,
                      device, precision="fp32", desc="decode") -> tuple[list[str], int]:
    """Greedy, beam or sampled decodes (per ``decoding``) of ``inputs`` in source order, and the number of
    tokens generated; batches are formed by length to limit padding (so sampled strings depend on the seed
    and the batch size)."""
    model.eval()
    generator = torch.Generator(device).manual_seed(decoding.seed) if decoding.temperature > 0 else None
    texts: list[str] = [""] * len(inputs)
    generated = 0
    for idx in length_batches(inputs, decoding.batch_size, desc):
        batch = pad_rows([inputs[i] for i in idx]).to(device)
        with kernels.autocast(precision, device), model.dense_attention():
            ids = model.generate(batch, max_new_tokens=max_new_tokens, num_beams=decoding.beam_size,
                                 temperature=decoding.temperature, top_k=decoding.top_k, generator=generator,
                                 compile=decoding.compile)
        generated += generated_tokens(ids, vocab.eos_id)
        for i, text in zip(idx, vocab.decode_batch(ids.tolist())):
            texts[i] = text
    return texts, generated


def generated_tokens(ids: torch.Tensor, eos_id: int) -> int:
    """Tokens decoded in ``ids`` [B, T]: each row up to and including its first EOS (the rest is padding)."""
    ends = torch.where((ids == eos_id).any(dim=1), (ids == eos_id).int().argmax(dim=1) + 1, ids.shape[1])
    return int(ends.sum())


@torch.no_grad()
def rank_in_batches(model, task: Task, examples: list[dict], inputs: list[np.ndarray], vocab, *, batch_size: int,
                    device, precision="fp32") -> tuple[list[str], int]:
    """For each example, the choice (of ``task.rank_choices_for``) with the highest log-likelihood given its
    input (T5's rank classification: the sum over the choice's tokens and EOS), and the number of choice
    tokens scored. Ties go to the earlier choice."""
    model.eval()
    pairs = []  # (example index, choice text, choice ids with EOS)
    for i, ex in enumerate(examples):
        choices = task.rank_choices_for(ex)
        for text, ids in zip(choices, vocab.encode_batch(choices)):
            pairs.append((i, text, np.append(np.asarray(ids, np.int64), vocab.eos_id)))
    scores = np.empty(len(pairs))
    pair_inputs = [inputs[i] for i, _, _ in pairs]
    for idx in length_batches(pair_inputs, batch_size, task.name, unit="choices"):
        enc = pad_rows([pair_inputs[j] for j in idx]).to(device)
        targets = pad_rows([pairs[j][2] for j in idx]).to(device)
        with kernels.autocast(precision, device), model.dense_attention():
            scores[idx] = model.score(enc, targets).float().cpu().numpy()
    best: dict[int, tuple[float, str]] = {}
    for (i, text, _), score in zip(pairs, scores):
        if i not in best or score > best[i][0]:
            best[i] = (score, text)
    return [best[i][1] for i in range(len(examples))], sum(len(ids) for _, _, ids in pairs)


def length_batches(rows: list, batch_size: int, desc: str, unit: str = "examples"):
    """Index batches of ``rows`` grouped by length (less padding), with progress on the main process: a bar
    on a terminal, else a line every half minute (``ProgressLines``)."""
    order = np.argsort([len(x) for x in rows], kind="stable")
    lines = ProgressLines(desc, len(rows), unit, enabled=distributed.is_main())
    for start in tqdm(range(0, len(order), batch_size), desc=desc, unit="batch", leave=False,
                      disable=not (distributed.is_main() and on_terminal())):
        batch = order[start:start + batch_size]
        yield batch
        lines.update(len(batch))


def pad_rows(rows: list[np.ndarray]) -> torch.Tensor:
    out = torch.zeros(len(rows), max(len(r) for r in rows), dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, :len(row)] = torch.as_tensor(row)
    return out


def validation_metrics(model, name: str, vocab, *, data_dir=None, max_examples=256, batch_size=32,
                       device=torch.device("cpu"), precision="fp32", split="validation",
                       trained_only: bool = False) -> dict[str, float]:
    """Flat ``{"eval/<task>/<metric>": value}`` over the tasks of ``name`` that have a validation split.

    ``trained_only`` (a run with --skip-unavailable) leaves out members that were dropped from training
    because their train data is missing; evaluation-only members (rate 0, e.g. MNLI matched) stay.
    """
    scores = {}
    item = get_task_or_mixture(name)
    rates = item.rates(data_dir) if trained_only and isinstance(item, Mixture) else {}
    for task in member_tasks(item):
        if not task.metric_fns or not task.has_split(split, data_dir=data_dir):
            continue
        if rates.get(task.name, 0) > 0 and not task.has_split("train", data_dir=data_dir):
            continue
        metrics, _, _ = evaluate_task(model, task, vocab, split, data_dir=data_dir, max_examples=max_examples,
                                      decoding=DecodingConfig(batch_size=batch_size), device=device,
                                      precision=precision)
        scores[task.name] = metrics
    flat = {f"eval/{task}/{metric}": value for task, m in scores.items() for metric, value in m.items()}
    if isinstance(item, Mixture):
        for key, average in results.benchmark_averages(scores).items():
            # the paper's average needs every task (t5's compute_avg_glue); one over a subset is named apart
            partial = "_partial" if average["missing"] else ""
            flat[f"eval/{key}{partial}_average"] = average["value"]
            if partial:
                log.info("%s: average over %d of its tasks (not evaluated: %s), logged as eval/%s_partial_average",
                         average["title"], len(average["tasks"]), ", ".join(average["missing"]), key)
    return flat


def format_stats(name: str, stats: dict, input_length: int | None) -> str:
    """One line per task: how many examples, how fast, how many inputs were cut."""
    unit = "target tokens scored" if stats["mode"] == "rank_classification" else "tokens generated"
    line = (f"{name}: {stats['examples']} examples ({stats['mode'].replace('_', ' ')}) in {stats['seconds']:.1f} s, "
            f"{stats['examples_per_second']:.1f} examples/s, {stats['tokens_per_second']:.0f} {unit}/s")
    if stats["truncated_inputs"]:
        line += f"; {stats['truncated_inputs']} inputs truncated to {input_length} tokens"
    return line
