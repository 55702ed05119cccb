"""``t2t-study``: a grid of runs — intermediate tasks × target tasks (jiant's "Sesame Street" study) or
transfer methods × target tasks (T5 §3.5.1) — as one resumable command that writes one table and one heat map.

Each cell fine-tunes on a target task, starting from a row's model, and evaluates on the target's
validation split:

- a row named by a task (``intermediates``) first fine-tunes the base on that task, then each target
  starts from that run (``--init-from``, so the target run records its parent); the row ``none`` starts
  from the base directly;
- a row named by a method (``methods``: name → extra ``t2t-train`` arguments, e.g. ``--set
  transfer.adapter_dim=32``) adds those arguments to its target runs.

Every run is a ``t2t-train`` in its own folder under ``output_dir`` and every score a ``t2t-eval`` of it,
each in a process of its own: an interrupted study resumes where it stopped (finished cells are read back,
unfinished runs resume from their last checkpoint). ``jobs`` runs go side by side, dividing the cores
between them (two runs that each took a thread per core were measured ≈27x slower per step than one alone).
Writes ``results.csv``, ``results.md`` and ``heatmap.png`` into ``output_dir``.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from t2t.evaluation import results
from t2t.errors import T2TError

log = logging.getLogger(__name__)

NO_INTERMEDIATE = "none"
RESULT_FILE = "study_result.json"


@dataclass
class StudyConfig:
    targets: list[str] = field(default_factory=list)        # columns: tasks fine-tuned on and evaluated
    intermediates: list[str] = field(default_factory=lambda: [NO_INTERMEDIATE])  # rows: tasks trained first
    methods: dict = field(default_factory=dict)             # rows instead: name → extra t2t-train arguments
    train_args: list[str] = field(default_factory=list)     # for every t2t-train, e.g. [--config, cpu-smoke]
    eval_args: list[str] = field(default_factory=list)      # for every t2t-eval, e.g. [--max-examples, 200]
    init_from: str | None = None                            # the base model (a run, HF folder or hub id)
    intermediate_steps: int = 100                           # training steps on each intermediate task
    target_steps: int = 100                                 # training steps on each target task
    metric: str | None = None     # the metric shown; default: the mean of the task's metrics (the paper's rule)
    output_dir: str = "runs/study"  # the study's folder: its runs, results.md/csv, heatmap.png
    jobs: int = 1                 # runs side by side; each gets cores // jobs threads

    def __post_init__(self):
        if self.jobs < 1:
            raise T2TError(f"study jobs must be ≥ 1, got {self.jobs}.")
        if self.methods and self.intermediates != [NO_INTERMEDIATE]:
            raise T2TError("a study's rows are either intermediate tasks or methods; give one of the two.")


@dataclass
class Cell:
    row: str
    target: str
    folder: Path
    train_args: list[str]


def run_study(cfg: StudyConfig) -> dict[str, dict[str, float]]:
    """Run (or resume) every cell of the grid; write the table and heat map; returns {row: {target: score}}."""
    if not cfg.targets:
        raise T2TError("a study needs target tasks; set targets (e.g. --targets rte,mrpc).")
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    threads = max(1, (os.cpu_count() or 1) // cfg.jobs)
    starts = run_intermediates(cfg, out, threads)
    cells = [Cell(row, target, out / row / target, start_args + extra)
             for row, (start_args, extra) in rows(cfg, starts).items() for target in cfg.targets]
    with ThreadPoolExecutor(cfg.jobs) as pool:
        scores = list(pool.map(lambda cell: run_cell(cfg, cell, threads), cells))
    table: dict[str, dict[str, float]] = {}
    for cell, score in zip(cells, scores):
        table.setdefault(cell.row, {})[cell.target] = score
    write_table(table, cfg.targets, out)
    return table


def run_intermediates(cfg: StudyConfig, out: Path, threads: int) -> dict[str, list[str]]:
    """Fine-tune the base on each intermediate task (side by side); the ``--init-from`` arguments of each row."""
    base = ["--init-from", cfg.init_from] if cfg.init_from else []
    tasks = [t for t in cfg.intermediates if t != NO_INTERMEDIATE]

    def train_intermediate(task: str) -> list[str]:
        folder = out / "intermediate" / task
        run_tool("t2t-train", ["--task", task, "--output-dir", str(folder), "--train-steps",
                               str(cfg.intermediate_steps), *base, *cfg.train_args], threads, folder / "train.log")
        return ["--init-from", str(folder)]

    with ThreadPoolExecutor(cfg.jobs) as pool:
        started = dict(zip(tasks, pool.map(train_intermediate, tasks)))
    return {NO_INTERMEDIATE: base, **started}


def rows(cfg: StudyConfig, starts: dict[str, list[str]]) -> dict[str, tuple[list[str], list[str]]]:
    """Row name → (arguments saying where its runs start, extra arguments of its method)."""
    if cfg.methods:
        return {name: (starts[NO_INTERMEDIATE], [str(a) for a in extra]) for name, extra in cfg.methods.items()}
    return {task: (starts[task], []) for task in cfg.intermediates}


def run_cell(cfg: StudyConfig, cell: Cell, threads: int) -> float:
    """Fine-tune and evaluate one cell, or read back its score when an earlier invocation finished it."""
    result_file = cell.folder / RESULT_FILE
    if result_file.exists():
        return json.loads(result_file.read_text())["score"]
    run_tool("t2t-train", ["--task", cell.target, "--output-dir", str(cell.folder), "--train-steps",
                           str(cfg.target_steps), *cfg.train_args, *cell.train_args], threads,
             cell.folder / "train.log")
    eval_dir = cell.folder / "study_eval"
    run_tool("t2t-eval", ["--task", cell.target, "--checkpoint", str(cell.folder), "--output-dir", str(eval_dir),
                          *cfg.eval_args], threads, cell.folder / "eval.log")
    (result,) = eval_dir.glob("*/*.metrics.json")  # <split>/<task>.metrics.json (t2t.evaluation.results)
    metrics = json.loads(result.read_text())["metrics"]
    score = results.task_score(metrics, cfg.metric)
    result_file.write_text(json.dumps({"row": cell.row, "target": cell.target, "score": score,
                                       "metrics": metrics}, indent=2) + "\n")
    log.info("%s → %s: %.2f", cell.row, cell.target, score)
    return score


def run_tool(tool: str, args: list[str], threads: int, log_file: Path) -> None:
    """One t2t command in its own process with ``threads`` threads; its output goes to ``log_file``."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    entry = {"t2t-train": "train_main", "t2t-eval": "eval_main"}[tool]
    command = [sys.executable, "-c", f"import sys; from t2t.cli import {entry}; sys.exit({entry}())",
               *args, "--set", f"threads={threads}"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    log.info("%s %s", tool, " ".join(args))
    with open(log_file, "a") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0:
        tail = log_file.read_text().strip().splitlines()[-1:] or ["no output"]
        raise T2TError(f"{tool} {' '.join(args[:2])} failed ({tail[0]}); see {log_file}, fix it and run the "
                       f"study again to resume.")


def write_table(table: dict[str, dict[str, float]], targets: list[str], out: Path) -> None:
    """``results.csv``, ``results.md`` and ``heatmap.png``: rows × targets."""
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["row", *targets])
        for row, scores in table.items():
            writer.writerow([row, *(f"{scores[t]:.2f}" for t in targets)])
    lines = ["| row | " + " | ".join(targets) + " |", "|---" * (len(targets) + 1) + "|"]
    lines += ["| " + row + " | " + " | ".join(f"{scores[t]:.2f}" for t in targets) + " |"
              for row, scores in table.items()]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    plot_heatmap(table, targets, out / "heatmap.png")


def plot_heatmap(table: dict[str, dict[str, float]], targets: list[str], path: Path) -> None:
    """Rows × targets, annotated with the scores; coloured by the difference from the ``none`` row of the
    same column where there is one (scores of different tasks do not compare), else by the score."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(table)
    values = np.array([[table[r][t] for t in targets] for r in names])
    if NO_INTERMEDIATE in table:
        colours = values - values[names.index(NO_INTERMEDIATE)]
        span = max(float(np.nanmax(np.abs(colours))), 1e-9) if np.isfinite(colours).any() else 1.0
        style = dict(cmap="coolwarm_r", vmin=-span, vmax=span)
        label = f"difference from '{NO_INTERMEDIATE}'"
    else:
        colours, style, label = values, dict(cmap="YlGn"), "validation score"
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(targets), 1.2 + 0.6 * len(names)))
    image = ax.imshow(colours, aspect="auto", **style)
    ax.set_xticks(range(len(targets)), targets, rotation=30, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("target task")
    for (i, j), value in np.ndenumerate(values):
        ax.text(j, i, "n/a" if np.isnan(value) else f"{value:.1f}", ha="center", va="center")
    fig.colorbar(image, ax=ax, label=label)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
