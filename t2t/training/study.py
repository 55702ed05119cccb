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

Nothing stale is reused: each run folder records the ``t2t-train`` arguments that made it
(``study_run.json``) and a study whose training arguments changed (``--target-steps``, ``--train-args``,
the intermediate steps …) refuses that folder rather than mixing runs of two settings (training again is
the user's call: a new ``--output-dir``, or deleting the folder); each cell's ``study_result.json`` records
its ``t2t-eval`` arguments and is evaluated again when they changed; the score is computed from the recorded
metrics with the current ``metric``. Result files are written atomically, and a torn one is evaluated again.
Each child process ends with the study, even when the study is killed with ``kill -9`` (Linux), so none is
left holding its run's lock.
"""

from __future__ import annotations

import csv
import ctypes
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from t2t.checkpoints import durable
from t2t.evaluation import results
from t2t.errors import T2TError

log = logging.getLogger(__name__)

NO_INTERMEDIATE = "none"
RESULT_FILE = "study_result.json"
RUN_FILE = "study_run.json"  # the t2t-train arguments that made a run folder
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent ends


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
        train_run(folder, ["--task", task, "--output-dir", str(folder), "--train-steps", str(cfg.intermediate_steps),
                           *base, *cfg.train_args], threads)
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
    """Fine-tune and evaluate one cell, or read back the metrics of an earlier invocation that made them with
    the same arguments; the score is the current ``metric`` of them."""
    eval_dir = cell.folder / "study_eval"
    eval_args = ["--task", cell.target, "--checkpoint", str(cell.folder), "--output-dir", str(eval_dir),
                 "--trust-modules", *cfg.eval_args]  # the modules are the user's own --train-args
    train_args = ["--task", cell.target, "--output-dir", str(cell.folder), "--train-steps", str(cfg.target_steps),
                  *cfg.train_args, *cell.train_args]
    result_file = cell.folder / RESULT_FILE
    recorded = recorded_result(result_file, eval_args) if made_by(cell.folder, train_args) else None
    if recorded is None:
        train_run(cell.folder, train_args, threads)  # resumes a run that is not done
        shutil.rmtree(eval_dir, ignore_errors=True)  # an earlier evaluation's files (another split …)
        run_tool("t2t-eval", eval_args, threads, cell.folder / "eval.log")
        (result,) = eval_dir.glob("*/*.metrics.json")  # <split>/<task>.metrics.json (t2t.evaluation.results)
        recorded = {"metrics": json.loads(result.read_text())["metrics"]}
    score = results.task_score(recorded["metrics"], cfg.metric)
    if (recorded.get("metric", ""), recorded.get("score")) != (cfg.metric, score):
        durable.write_atomic(result_file, json.dumps(
            {"row": cell.row, "target": cell.target, "score": score, "metric": cfg.metric,
             "metrics": recorded["metrics"], "eval_args": eval_args}, indent=2) + "\n")
    log.info("%s → %s: %.2f", cell.row, cell.target, score)
    return score


def train_run(folder: Path, args: list[str], threads: int) -> None:
    """``t2t-train args`` into ``folder`` (resuming it), which must be new or made by the same arguments."""
    if not made_by(folder, args):
        folder.mkdir(parents=True, exist_ok=True)
        durable.write_atomic(folder / RUN_FILE, json.dumps({"train_args": args}, indent=2) + "\n")
    run_tool("t2t-train", args, threads, folder / "train.log")


def made_by(folder: Path, args: list[str]) -> bool:
    """Whether run ``folder`` records that ``t2t-train args`` made it (False: a new folder); a folder made
    by other arguments is a T2TError, rather than a run of other settings mixed into the table."""
    recorded = read_json_object(folder / RUN_FILE)
    if recorded is None:
        return False
    if recorded.get("train_args") != args:
        shown = " ".join(map(str, recorded.get("train_args") or []))
        raise T2TError(f"{folder} was trained by t2t-train {shown}, not {' '.join(args)}; give the changed study "
                       f"a new --output-dir, or delete {folder} to train it again.")
    return True


def recorded_result(path: Path, eval_args: list[str]) -> dict | None:
    """The result an earlier invocation recorded in ``path`` with the same ``eval_args``; None when there is
    none, it came from other arguments, or the file is torn."""
    recorded = read_json_object(path)
    if recorded is None:
        return None
    if recorded.get("eval_args") != eval_args or not isinstance(recorded.get("metrics"), dict):
        log.info("evaluating %s again: it was made %s", path.parent,
                 f"by t2t-eval {' '.join(map(str, recorded['eval_args']))}" if recorded.get("eval_args")
                 else "by an older t2t-study")
        return None
    return recorded


def read_json_object(path: Path) -> dict | None:
    """A JSON object file, or None when it is missing or torn (a line says which)."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict):
        log.warning("%s is torn or unreadable; making it again", path)
        return None
    return data


def run_tool(tool: str, args: list[str], threads: int, log_file: Path) -> None:
    """One t2t command in its own process with ``threads`` threads; its output goes to ``log_file``. The
    process ends with the study (``die_with_parent``)."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    entry = {"t2t-train": "train_main", "t2t-eval": "eval_main"}[tool]
    code = (f"import sys; from t2t.training.study import die_with_parent; die_with_parent({os.getpid()}); "
            f"from t2t.cli import {entry}; sys.exit({entry}())")
    command = [sys.executable, "-c", code, *args, "--set", f"threads={threads}"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    log.info("%s %s", tool, " ".join(args))
    with open(log_file, "a") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0:
        tail = log_file.read_text().strip().splitlines()[-1:] or ["no output"]
        raise T2TError(f"{tool} {' '.join(args[:2])} failed ({tail[0]}); see {log_file}, fix it and run the "
                       f"study again to resume.")


def die_with_parent(parent: int) -> None:
    """In a study's child: be sent SIGTERM when the study ends, even by ``kill -9`` (Linux's
    PR_SET_PDEATHSIG; it fires when the thread that started the child ends, and the study's threads wait for
    their children), so no orphaned t2t-train goes on holding its run's lock. Elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != parent:  # the study ended before the signal was armed
        os._exit(1)


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
