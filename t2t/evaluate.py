"""Evaluation: decode → detokenize → postprocess → metric functions → report (T5 §2.7, Appendix).

Predictions and targets are postprocessed the same way seqio does (``postprocess_fn(text, example,
is_target)``), so numbers compare with the ``t5`` library's. For GLUE the paper-style average is added:
each task contributes the mean of its metrics, then tasks are averaged.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from tqdm.auto import tqdm

from t2t import checkpoint, distributed, kernels
from t2t.errors import T2TError
from t2t.task import Mixture, Task, get_task_or_mixture, load_modules, member_tasks
from t2t.vocab import load_vocabulary

log = logging.getLogger(__name__)


@dataclass
class EvalConfig:
    mixture: str = ""                 # a task or mixture name (--task / --mixture)
    checkpoint: str = ""              # a run's output dir (latest checkpoint), one checkpoint, or a HF T5
    split: str = "validation"
    vocab: str | None = None
    data_dir: str | None = None
    max_examples: int | None = None
    batch_size: int = 32
    beam_size: int = 1
    output_dir: str | None = None     # default: <checkpoint>/eval/<split>
    modules: list[str] = field(default_factory=list)
    device: str = "auto"
    precision: Literal["fp32", "bf16"] = "fp32"


def evaluate(cfg: EvalConfig) -> dict[str, dict[str, float]]:
    """Evaluate every task of ``cfg.mixture`` that has metrics; print a table, write metrics and predictions."""
    if not cfg.mixture:
        raise T2TError("no task or mixture given; pass --task NAME or --mixture NAME (see t2t-tasks).")
    if not cfg.checkpoint:
        raise T2TError("no model given; pass --checkpoint (a run's output dir, a checkpoint, or a HF T5).")
    load_modules(cfg.modules)
    tasks = [t for t in member_tasks(get_task_or_mixture(cfg.mixture)) if t.metric_fns]
    if not tasks:
        raise T2TError(f"{cfg.mixture!r} has no task with metric functions to evaluate.")
    vocab = load_vocabulary(cfg.vocab, data_dir=cfg.data_dir)
    device = distributed.pick_device(cfg.device)
    model = checkpoint.load_model(cfg.checkpoint).to(device)
    out_dir = Path(cfg.output_dir or Path(cfg.checkpoint) / "eval" / cfg.split)
    results = {}
    for task in tasks:
        metrics, predictions = evaluate_task(
            model, task, vocab, cfg.split, data_dir=cfg.data_dir, max_examples=cfg.max_examples,
            batch_size=cfg.batch_size, beam_size=cfg.beam_size, device=device, precision=cfg.precision)
        results[task.name] = metrics
        write_jsonl(out_dir / f"{task.name}.predictions.jsonl", predictions)
    average = glue_average(results)
    summary = {"split": cfg.split, "checkpoint": str(cfg.checkpoint), "tasks": results}
    if average is not None:
        summary["glue_average"] = average
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "metrics.json").write_text(json.dumps(jsonable(summary), indent=2, allow_nan=False) + "\n")
    print(format_table(results, average))
    print(f"wrote {out_dir / 'metrics.json'} and the predictions beside it")
    return results


def evaluate_task(model, task: Task, vocab, split: str, *, data_dir=None, max_examples=None, batch_size=32,
                  beam_size=1, device=torch.device("cpu"), precision="fp32") -> tuple[dict, list[dict]]:
    """Metrics and per-example records (input, target, prediction, postprocessed values) for one task."""
    examples = task.examples(split, vocab, data_dir=data_dir)
    if max_examples is not None:
        examples = examples[:max_examples]
    max_new_tokens = max(len(ex["targets"]) for ex in examples)
    decoded = decode_in_batches(model, [ex["inputs"] for ex in examples], vocab, batch_size=batch_size,
                                beam_size=beam_size, max_new_tokens=max_new_tokens, device=device,
                                precision=precision, desc=task.name)
    targets = [task.postprocess(ex["targets_pretokenized"], ex, is_target=True) for ex in examples]
    predictions = [task.postprocess(text, ex, is_target=False) for text, ex in zip(decoded, examples)]
    metrics = {}
    for metric_fn in task.metric_fns:
        metrics.update(metric_fn(targets, predictions))
    records = [{"inputs": ex["inputs_pretokenized"], "targets": ex["targets_pretokenized"], "prediction": text,
                "target_value": jsonable(t), "prediction_value": jsonable(p)}
               for ex, text, t, p in zip(examples, decoded, targets, predictions)]
    return metrics, records


@torch.no_grad()
def decode_in_batches(model, inputs: list[np.ndarray], vocab, *, batch_size: int, beam_size: int,
                      max_new_tokens: int, device, precision="fp32", desc="decode") -> list[str]:
    """Greedy or beam decodes of ``inputs`` in source order; batches are formed by length to limit padding."""
    model.eval()
    order = np.argsort([len(x) for x in inputs], kind="stable")
    texts: list[str] = [""] * len(inputs)
    for start in tqdm(range(0, len(order), batch_size), desc=desc, unit="batch", leave=False,
                      disable=not distributed.is_main()):
        idx = order[start:start + batch_size]
        batch = pad_rows([inputs[i] for i in idx]).to(device)
        with kernels.autocast(precision, device):
            ids = model.generate(batch, max_new_tokens=max_new_tokens, num_beams=beam_size)
        for i, text in zip(idx, vocab.decode_batch(ids.tolist())):
            texts[i] = text
    return texts


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
    results = {}
    item = get_task_or_mixture(name)
    rates = item.rates(data_dir) if trained_only and isinstance(item, Mixture) else {}
    for task in member_tasks(item):
        if not task.metric_fns or not task.has_split(split, data_dir=data_dir):
            continue
        if rates.get(task.name, 0) > 0 and not task.has_split("train", data_dir=data_dir):
            continue
        metrics, _ = evaluate_task(model, task, vocab, split, data_dir=data_dir, max_examples=max_examples,
                                   batch_size=batch_size, device=device, precision=precision)
        results[task.name] = metrics
    flat = {f"eval/{task}/{metric}": value for task, m in results.items() for metric, value in m.items()}
    average = glue_average(results)
    if average is not None:
        flat["eval/glue_average"] = average
    return flat


def glue_average(results: dict[str, dict[str, float]]) -> float | None:
    """The paper's GLUE average over the GLUE tasks present: mean of each task's metrics, then of tasks.

    MNLI's matched and mismatched evaluations count as one task with two scores, as in the GLUE score.
    """
    per_task: dict[str, list[float]] = {}
    for name, metrics in results.items():
        if not name.startswith("glue_") or name.startswith("glue_ax") or not metrics:
            continue
        group = "mnli" if name.startswith("glue_mnli") else name
        per_task.setdefault(group, []).append(float(np.mean(list(metrics.values()))))
    if not per_task:
        return None
    return float(np.mean([np.mean(scores) for scores in per_task.values()]))


def format_table(results: dict[str, dict[str, float]], average: float | None) -> str:
    rows = [(task, metric, format_value(value)) for task, metrics in results.items()
            for metric, value in metrics.items()]
    if average is not None:
        rows.append(("GLUE average", "", format_value(average)))
    widths = [max(len(r[i]) for r in rows + [("task", "metric", "value")]) for i in range(3)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(("task", "metric", "value"), widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    if any(r[2] == "n/a" for r in rows):
        lines.append("n/a: undefined, e.g. a correlation of constant predictions (an undertrained model)")
    return "\n".join(lines)


def format_value(value: float) -> str:
    return f"{value:.2f}" if np.isfinite(value) else "n/a"


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


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
