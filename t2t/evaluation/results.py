"""What an evaluation reports: benchmark averages, the printed table and the result files.

One evaluation writes, under ``<output dir>/<split>/``::

    <task>.predictions.jsonl   every example: input, target, prediction, postprocessed values
    <task>.metrics.json        that task's metrics, with the checkpoint, its step, the settings that change
                               scores (a subset, beam search, bf16 …) and the time of writing
                               (none for an unlabelled split: ``"metrics": {}`` and the note NO_LABELS)
    <mixture>.summary.json     a mixture's: the tasks of *this* evaluation and the benchmark averages

Files are named by task (or mixture), so evaluating one task never overwrites another's results, and each
file says which checkpoint step it scored, with which vocabulary (its path and sha256), how and when, so a
file left by an earlier evaluation never reads as current and a subset's or a beam search's scores never
read as the full greedy evaluation's. Undefined metrics (a correlation of constant predictions) are
``null`` with the reason beside.

The vocabulary decides what every prediction says, and another one of the same size loads without a word,
so results of two vocabularies are kept apart rather than one replacing the other: those of a vocabulary
other than the checkpoint's own go to ``<output dir>/<split>.vocab-<its sha256's first 12 digits>/``
(``split_folder``), and a result file that records another vocabulary than this evaluation's is never
overwritten (``check_vocabulary``: a checkpoint that carries no vocabulary of its own).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

import numpy as np

from t2t.durable import write_atomic
from t2t.errors import T2TError

NO_LABELS = "no labels: no metrics"  # what is said and written for an unlabelled split (GLUE/SuperGLUE test)


@dataclass(frozen=True)
class Benchmark:
    """A benchmark's average as the T5 paper reports it (§2.3; ``t5.evaluation.eval_utils.compute_avg_glue``).

    ``tasks`` maps each t2t task to the paper's task it counts towards and the metrics that count: a paper
    task scores the mean of those metrics over its t2t tasks (MRPC: F1 and accuracy; MNLI: matched and
    mismatched accuracy), and the benchmark averages the paper tasks. Tasks without labels (AX; SuperGLUE's
    AX-b and AX-g diagnostics) and tasks the paper leaves out of the average (WNLI, DPR) are not listed.
    """

    title: str
    tasks: Mapping[str, tuple[str, tuple[str, ...]]]


# The metric tags of t5.evaluation.eval_utils.METRIC_NAMES, grouped as there.
BENCHMARKS: dict[str, Benchmark] = {
    "glue": Benchmark("GLUE", {
        "glue_cola_v002": ("CoLA", ("matthews_corrcoef",)),
        "glue_sst2_v002": ("SST-2", ("accuracy",)),
        "glue_mrpc_v002": ("MRPC", ("f1", "accuracy")),
        "glue_stsb_v002": ("STS-B", ("pearson_corrcoef", "spearman_corrcoef")),
        "glue_qqp_v002": ("QQP", ("f1", "accuracy")),
        "glue_mnli_matched_v002": ("MNLI", ("accuracy",)),
        "glue_mnli_mismatched_v002": ("MNLI", ("accuracy",)),
        "glue_qnli_v002": ("QNLI", ("accuracy",)),
        "glue_rte_v002": ("RTE", ("accuracy",)),
    }),
    "super_glue": Benchmark("SuperGLUE", {
        "super_glue_boolq_v102": ("BoolQ", ("accuracy",)),
        "super_glue_cb_v102": ("CB", ("mean_3class_f1", "accuracy")),
        "super_glue_copa_v102": ("COPA", ("accuracy",)),
        "super_glue_multirc_v102": ("MultiRC", ("f1", "exact_match")),
        "super_glue_record_v102": ("ReCoRD", ("f1", "em")),
        "super_glue_rte_v102": ("RTE", ("accuracy",)),
        "super_glue_wic_v102": ("WiC", ("accuracy",)),
        "super_glue_wsc_v102_simple_eval": ("WSC", ("accuracy",)),
    }),
}


def benchmark_averages(results: Mapping[str, Mapping[str, float]]) -> dict[str, dict]:
    """``{benchmark: {"title", "value", "tasks", "missing"}}`` for each benchmark with a task in ``results``.

    ``tasks`` are the evaluated tasks that went into ``value``; ``missing`` the benchmark's tasks that did
    not (an average over a subset does not compare with the paper's). An undefined metric makes the
    average undefined (NaN), as in t5.
    """
    averages = {}
    for key, benchmark in BENCHMARKS.items():
        scores: dict[str, list[float]] = {}
        used = []
        for task, (paper_task, metric_names) in benchmark.tasks.items():
            values = [results[task][m] for m in metric_names if m in results.get(task, {})]
            if values:
                scores.setdefault(paper_task, []).extend(float(v) for v in values)
                used.append(task)
        if used:
            averages[key] = {"title": benchmark.title,
                             "value": float(np.mean([np.mean(v) for v in scores.values()])),
                             "tasks": used, "missing": [t for t in benchmark.tasks if t not in used]}
    return averages


def task_score(metrics: Mapping[str, float | None], metric: str | None = None) -> float:
    """One number for a task: ``metric``, or the mean of its metrics as the paper averages a task's
    metrics (§2.3, e.g. MRPC's F1 and accuracy); NaN when a metric is undefined."""
    if metric is not None and metric not in metrics:
        raise T2TError(f"the task reports {', '.join(metrics)}, not {metric!r}; choose one of them.")
    values = [metrics[metric]] if metric is not None else list(metrics.values())
    return float(np.mean([np.nan if v is None else v for v in values]))


def best_checkpoints(per_step: Mapping[int, Mapping[str, Mapping[str, float]]]) -> dict[str, dict]:
    """``{task: {"step", "score", "metrics"}}``: each task at the checkpoint where its score is highest,
    chosen per task as the paper does for multi-task runs (§3.1.2); the earliest step wins a tie. Tasks the
    paper reports as one (MNLI matched and mismatched) share the step where their mean is highest, as t5's
    ``metric_group_max`` does."""
    order = list(dict.fromkeys(task for step in sorted(per_step) for task in per_step[step]))
    steps = {}
    for group in {report_group(task) for task in order}:
        members = [task for task in order if report_group(task) == group]
        together = _best_step(per_step, members)
        steps.update({task: _best_step(per_step, [task]) if together is None else together for task in members})
    return {task: {"step": steps[task], "score": task_score(per_step[steps[task]][task]),
                   "metrics": dict(per_step[steps[task]][task])} for task in order}


def report_group(task: str) -> tuple[str, str]:
    """The (benchmark, paper task) a task is reported under; a task of no benchmark is its own group."""
    for key, benchmark in BENCHMARKS.items():
        if task in benchmark.tasks:
            return key, benchmark.tasks[task][0]
    return "", task


def _best_step(per_step: Mapping[int, Mapping[str, Mapping[str, float]]], members: list[str]) -> int | None:
    """The step where the mean score of ``members`` is highest, among the steps that evaluated them all (None
    if none did); NaN never wins."""
    best_step, best_score = None, np.nan
    for step in sorted(per_step):
        if not all(task in per_step[step] for task in members):
            continue
        score = float(np.mean([task_score(per_step[step][task]) for task in members]))
        if best_step is None or score > best_score or np.isnan(best_score):
            best_step, best_score = step, score
    return best_step


def format_best(best: Mapping[str, dict]) -> str:
    rows = [(task, str(b["step"]), format_value(b["score"])) for task, b in best.items()]
    widths = [max(len(r[i]) for r in rows + [("task", "best step", "score")]) for i in range(3)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(("task", "best step", "score"), widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    return "\n".join(lines + ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows])


def undefined_reasons(metrics: Mapping[str, float], records: list[dict]) -> dict[str, str]:
    """Why each undefined (non-finite) metric is undefined, from the postprocessed values in ``records``."""
    undefined = [name for name, value in metrics.items() if not np.isfinite(value)]
    if not undefined:
        return {}
    constant_predictions = _is_constant(r["prediction_value"] for r in records)
    constant_targets = _is_constant(r["target_value"] for r in records)
    reasons = {}
    for name in undefined:
        what = "correlation undefined" if "corrcoef" in name else "undefined"
        if constant_predictions:
            reasons[name] = f"predictions constant: {what}"
        elif constant_targets:
            reasons[name] = f"targets constant: {what}"
        else:
            reasons[name] = what
    return reasons


def _is_constant(values) -> bool:
    return len({json.dumps(v, sort_keys=True) for v in values}) <= 1


# ---------------------------------------------------------------------------------------------- the table

def format_table(results: Mapping[str, Mapping[str, float]], undefined: Mapping[str, Mapping[str, str]] = {},
                 averages: Mapping[str, dict] | None = None) -> str:
    """Task, metric, value rows (an undefined value shows its reason), then each benchmark average with
    the tasks that went into it."""
    rows = [(task, metric, undefined.get(task, {}).get(metric) or format_value(value))
            for task, metrics in results.items() for metric, value in metrics.items()]
    notes = []
    for average in (averages or {}).values():
        rows.append((f"{average['title']} average", f"{len(average['tasks'])} tasks",
                     format_value(average["value"])))
        note = f"{average['title']} average over {', '.join(average['tasks'])}"
        if average["missing"]:
            note += f"; not evaluated: {', '.join(average['missing'])}"
        notes.append(note)
    widths = [max(len(r[i]) for r in rows + [("task", "metric", "value")]) for i in range(3)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(("task", "metric", "value"), widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines + notes)


def format_value(value: float) -> str:
    return f"{value:.2f}" if np.isfinite(value) else "n/a"


# ---------------------------------------------------------------------------------------------- the files

def check_output_dir(path: Path) -> None:
    """Before the model loads, creating nothing (a hub id that fails to load must not leave a folder named
    after it): a file or a read-only folder in the way of ``path`` is one sentence now."""
    path = Path(path)
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise _file_in_the_way(path)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise _not_writable(path, f"{existing} is not writable")


def prepare_output_dir(path: Path) -> Path:
    """Create ``path`` and prove it writable, before any decoding: a file or a read-only folder in the way
    is one sentence now rather than a traceback after all the work."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except (FileExistsError, NotADirectoryError):
        raise _file_in_the_way(path) from None
    except OSError as e:
        raise _not_writable(path, e.strerror) from None
    return path


def _file_in_the_way(path: Path) -> T2TError:
    return T2TError(f"output dir {path} (or a parent) is a file; pass --output-dir a folder.")


def _not_writable(path: Path, reason: str) -> T2TError:
    return T2TError(f"cannot write to output dir {path} ({reason}); pass a writable --output-dir.")


def stamp(checkpoint: str, step: int | None, split: str, settings: Mapping, vocabulary: Mapping) -> dict:
    """What a result file says about the evaluation that wrote it: the checkpoint and its step, the split, the
    vocabulary (``vocabulary_record``), the settings that change scores (how many examples, how decoded, in
    which precision) and when."""
    return {"checkpoint": str(checkpoint), "step": step, "split": split, "vocabulary": dict(vocabulary),
            "settings": dict(settings), "evaluated_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def vocabulary_record(vocab) -> dict:
    """``{"path", "sha256"}`` of the vocabulary an evaluation read (t2t.data.vocab.Vocabulary.sha256: a
    SentencePiece model's bytes)."""
    return {"path": str(vocab.path), "sha256": vocab.sha256}


def split_folder(split: str, other_vocabulary: str | None) -> str:
    """The folder of a split's results: ``<split>``, or for a vocabulary other than the checkpoint's own
    (``other_vocabulary``: its sha256) ``<split>.vocab-<first 12 hex digits>``."""
    return f"{split}.vocab-{other_vocabulary[:12]}" if other_vocabulary else split


def check_vocabulary(out_dir: Path, tasks: list[str], vocabulary: Mapping) -> None:
    """Before decoding: a task's result in ``out_dir`` that records another vocabulary than ``vocabulary`` is
    one sentence (results of older t2t versions record none and are replaced)."""
    for task in tasks:
        path = Path(out_dir) / f"{task}.metrics.json"
        try:
            recorded = json.loads(path.read_text()).get("vocabulary") or {}
        except (OSError, ValueError, AttributeError):
            continue  # none there, or torn: nothing of worth to keep
        if recorded.get("sha256") not in (None, vocabulary["sha256"]):
            raise T2TError(f"{path} holds the result of another vocabulary ({recorded.get('path')}, sha256 "
                           f"{str(recorded['sha256'])[:12]}) than this evaluation's ({vocabulary['path']}, sha256 "
                           f"{vocabulary['sha256'][:12]}); pass another --output-dir to keep both, or move that "
                           f"file away to replace it.")


def write_task_result(out_dir: Path, task: str, metrics: Mapping[str, float], undefined: Mapping[str, str],
                      records: list[dict], evaluation: Mapping) -> Path:
    """``<task>.predictions.jsonl`` then ``<task>.metrics.json`` (written last: its presence means both
    are complete)."""
    predictions = out_dir / f"{task}.predictions.jsonl"
    write_atomic(predictions, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    result = {"task": task, **evaluation, "num_examples": len(records), "metrics": jsonable(metrics),
              "undefined": dict(undefined), "predictions": predictions.name}
    if not evaluation.get("stats", {}).get("labelled", True):
        result["note"] = NO_LABELS
    path = out_dir / f"{task}.metrics.json"
    write_atomic(path, json.dumps(result, indent=2, allow_nan=False) + "\n")
    return path


def format_written(out_dir: Path, tasks: list[str], summary: Path | None = None) -> str:
    """The line naming the files one evaluation wrote: each task's two, then the mixture's summary."""
    names = [f"{task}.{kind}" for task in tasks for kind in ("metrics.json", "predictions.jsonl")]
    names += [summary.name] if summary else []
    return f"wrote {', '.join(names[:-1])} and {names[-1]} to {out_dir}"


def write_summary(out_dir: Path, name: str, results: Mapping[str, Mapping[str, float]],
                  averages: Mapping[str, dict], skipped: Mapping[str, str], evaluation: Mapping) -> Path:
    """``<name>.summary.json``: this evaluation's tasks only, the benchmark averages and what was skipped."""
    summary = {"mixture": name, **evaluation, "tasks": jsonable(results), "benchmarks": jsonable(averages),
               "skipped": dict(skipped)}
    path = out_dir / f"{name}.summary.json"
    write_atomic(path, json.dumps(summary, indent=2, allow_nan=False) + "\n")
    return path


def jsonable(value):
    """Plain JSON values: numpy scalars unwrapped, NaN/inf (an undefined correlation) as null."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value
