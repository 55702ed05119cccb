"""``t2t-study``: a grid of runs — intermediate tasks × target tasks (jiant's "Sesame Street" study) or
transfer methods × target tasks (T5 §3.5.1) — as one resumable command that writes one table and one heat map.

Each cell fine-tunes on a target task, starting from a row's model, and evaluates on the target's
validation split:

- a row named by a task (``intermediates``) first fine-tunes the base on that task, then each target
  starts from that run (``--init-from``, so the target run records its parent); the row ``none`` starts
  from the base directly;
- a row named by a method (``methods``: name → extra ``t2t-train`` arguments, e.g. ``--set
  transfer.adapter_dim=32``) adds those arguments to its target runs.

Every run is a ``t2t-train`` in its own folder under ``output_dir`` and every score a ``t2t-eval`` of it
(which imports the run's modules under t2t's one ownership rule, t2t.checkpoints.run: a cell is the user's
own run, while a cell whose module files changed since it recorded them is refused as by plain t2t-eval),
each in a process of its own: an interrupted study resumes where it stopped (finished cells are read back,
unfinished runs resume from their last checkpoint). ``jobs`` runs go side by side, dividing the cores
between them (two runs that each took a thread per core ran many times slower per step than one alone).
Writes ``results.csv``, ``results.md`` and ``heatmap.png`` into ``output_dir``.

Nothing stale is reused: each run folder records the ``t2t-train`` arguments that made it
(``study_run.json``) and a study whose training arguments changed (``--target-steps``, ``--train-args``,
the intermediate steps …) refuses that folder rather than mixing runs of two settings (training again is
the user's call: a new ``--output-dir``, or deleting the folder); each cell's ``study_result.json`` records
its ``t2t-eval`` arguments and is evaluated again when they changed; the score is computed from the recorded
metrics with the current ``metric``. Result files are written atomically, and a torn one is evaluated again.
Each child process ends with the study, even when the study is killed with ``kill -9`` (Linux), so none is
left holding its run's lock.

Before the first run, every task is checked (it exists, and has the data its runs need), and a study given no
``train_args`` trains with t2t-train's defaults only where they fit in memory (``train_args_for_machine``).
A run killed by a signal says so (signal 9: probably out of memory) rather than quoting its log.
"""

from __future__ import annotations

import csv
import ctypes
import dataclasses
import io
import itertools
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from t2t import config, durable
from t2t.checkpoints.loading import read_model_config
from t2t.data.task import DEFAULT_SEQUENCE_LENGTH, Mixture, get_task_or_mixture, load_modules, member_tasks
from t2t.errors import T2TError
from t2t.evaluation import results
from t2t.evaluation.figures import save_figure
from t2t.models.t5 import T5, ModelConfig, resolve_model_config
from t2t.training.train import DEFAULT_MODEL, TrainConfig

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
    train_args: list[str] = field(default_factory=list)     # for every t2t-train (none: what fits); --train-args='...'
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
        self.methods = {name: _arguments(f"method {name}", args) for name, args in self.methods.items()}
        for what, args in [("train_args", self.train_args), ("eval_args", self.eval_args),
                           *((f"method {name}", args) for name, args in self.methods.items())]:
            taken = next((a for a in args if a.split("=")[0] in STUDY_SETS), None)
            if taken:
                raise T2TError(f"study {what} has {taken}, which the study sets for each run itself; leave it out.")


# the t2t-train and t2t-eval flags the study gives each run (its task, folders, steps)
STUDY_SETS = frozenset({"--task", "--mixture", "--output-dir", "--checkpoint", "--train-steps"})


def _arguments(what: str, value) -> list[str]:
    """A row's extra arguments: a list of them, or one string split as a shell would split it."""
    if isinstance(value, str):
        return shlex.split(value)
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise T2TError(f"study {what} must be t2t-train arguments, as a list ([--set, x=1]) or one string; got "
                       f"{value!r}.")
    return value


@dataclass
class Cell:
    row: str
    target: str
    folder: Path
    train_args: list[str]


def run_study(cfg: StudyConfig, train_settings: Callable[[list[str]], TrainConfig]) -> dict[str, dict[str, float]]:
    """Run (or resume) every cell of the grid; write the table and heat map; returns {row: {target: score}}.

    ``train_settings`` is what t2t-train makes of a list of its arguments: before the first run starts, every
    task is checked with the modules and data dir the runs will have (``check_tasks``)."""
    if not cfg.targets:
        raise T2TError("a study needs target tasks; set targets (e.g. --targets rte,mrpc).")
    if not cfg.train_args:
        cfg = dataclasses.replace(cfg, train_args=train_args_for_machine(cfg))
    check_tasks(cfg, train_settings)
    out = Path(cfg.output_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise T2TError(f"cannot create the study folder {out} ({e.strerror or e}); choose a writable "
                       f"--output-dir.") from None
    threads = max(1, (os.cpu_count() or 1) // cfg.jobs)
    starts = run_intermediates(cfg, out, threads)
    cells = [Cell(row, target, out / row / target, start_args + extra)
             for row, (start_args, extra) in rows(cfg, starts).items() for target in cfg.targets]
    finished = itertools.count(1)  # next() is atomic: the pool's threads count without a lock

    def run(cell: Cell) -> float:
        score = run_cell(cfg, cell, threads)
        log.info("%s → %s: %.2f (%d of %d cells done)", cell.row, cell.target, score, next(finished), len(cells))
        return score

    with ThreadPoolExecutor(cfg.jobs) as pool:
        scores = list(pool.map(run, cells))
    table: dict[str, dict[str, float]] = {}
    for cell, score in zip(cells, scores):
        table.setdefault(cell.row, {})[cell.target] = score
    write_table(table, cfg.targets, out, cfg.metric)
    return table


def check_tasks(cfg: StudyConfig, train_settings: Callable[[list[str]], TrainConfig]) -> None:
    """Every intermediate task exists and has train data, every target train and validation data, found as
    its t2t-train would find them (``--module``, ``--data-dir`` and ``--skip-unavailable`` of ``train_args``);
    one T2TError lists every problem, before any run starts (a missing target no longer stops the study
    after its intermediate runs)."""
    needs = {task: ["train"] for task in cfg.intermediates if task != NO_INTERMEDIATE}
    for target in cfg.targets:
        needs[target] = ["train", "validation"]
    problems = [problem for task, splits in needs.items()
                for problem in task_problems(task, splits, train_settings(["--task", task, *cfg.train_args]))]
    if problems:
        raise T2TError(f"the study cannot run: {'; '.join(problems)}; fix the names or the data (or --module, "
                       f"--data-dir in --train-args) before any run starts.")


def task_problems(name: str, splits: list[str], settings: TrainConfig) -> list[str]:
    """Why ``name`` cannot give ``splits`` under ``settings`` (nothing when it can)."""
    try:
        load_modules(settings.modules)
        item = get_task_or_mixture(name)
    except T2TError as e:
        return [str(e).rstrip(".")]
    problems, no_data = [], []
    for split in splits:
        members = [task for task in member_tasks(item) if not task.splits or split in task.splits]
        lacking = [task.name for task in members if not task.has_split(split, data_dir=settings.data_dir)]
        if not members:
            problems.append(f"{name} has no {split} split")
        elif len(lacking) == len(members) or (lacking and not settings.skip_unavailable):
            no_data.append(f"{split} data for {', '.join(lacking)}" if isinstance(item, Mixture) else split)
    if no_data:
        problems.append(f"{name} has no {' or '.join(no_data)}" + ("" if isinstance(item, Mixture) else " data"))
    return problems


# t2t-train's arguments where a study gives none and t2t-train's defaults need more memory than there is
SMALL_TRAIN_ARGS = ["--config", "cpu-smoke"]
GB = 2 ** 30


def train_args_for_machine(cfg: StudyConfig) -> list[str]:
    """A study given no ``train_args``: t2t-train's defaults where ``jobs`` runs of them fit in this machine's
    memory (the GPU's where there is one), else ``SMALL_TRAIN_ARGS`` (t5-tiny, short rows), said in one line;
    with ``init_from`` (whose model the runs keep) a T2TError saying how much the defaults need."""
    defaults = dataclasses.replace(TrainConfig(), model=DEFAULT_MODEL, input_length=DEFAULT_SEQUENCE_LENGTH["inputs"],
                                   target_length=DEFAULT_SEQUENCE_LENGTH["targets"])
    model = read_model_config(cfg.init_from) if cfg.init_from else resolve_model_config(defaults.model)
    need, (have, where) = training_memory(model, defaults), machine_memory()
    if need * cfg.jobs <= have:
        return []
    what = (f"t2t-train's defaults (batch {defaults.batch_size} of {defaults.input_length} + "
            f"{defaults.target_length} tokens, {cfg.init_from or defaults.model}) need about {need / GB:.0f} GB "
            f"per run, and {where} has {have / GB:.0f} GB for {cfg.jobs} run(s) side by side")
    small = config.load(TrainConfig, [config.find_config(SMALL_TRAIN_ARGS[1], "recipes")])
    if cfg.init_from or training_memory(resolve_model_config(small.model or DEFAULT_MODEL), small) * cfg.jobs > have:
        raise T2TError(f"{what}; pass --train-args with a smaller batch and lengths (e.g. '--batch-size 16 "
                       f"--set input_length=128 --set target_length=16'), or fewer --jobs.")
    log.warning("%s; the study trains with --train-args '%s' (%s) instead; pass --train-args to choose.",
                what, " ".join(SMALL_TRAIN_ARGS), small.model)
    return list(SMALL_TRAIN_ARGS)


def training_memory(model: ModelConfig, train: TrainConfig) -> float:
    """About how many bytes one fp32 training process of ``model`` at ``train``'s batch and lengths holds:
    weights, gradients and two optimizer states (16 bytes a parameter), the activations the backward pass
    keeps (per layer and token: about 10 (encoder) or 16 (decoder) × d_model, 3 × d_ff and 3 attention
    probabilities per head and key), the logits three times over, and 0.5 GB for the process itself.
    Measured peaks of AdamW steps on CPU, above the process's start: t5-small with 4 and 8 rows of 512 + 128
    tokens within 10% of it (2.4 and 4.3 GB); t5-tiny at cpu-smoke's batch 0.25 GB where it says 0.18,
    a difference its 0.5 GB for the process covers."""
    parameters = sum(p.numel() for p in T5.from_config(model, device="meta").parameters())
    rows = train.batch_size  # lengths left unset (a task's own) counted at the longest most tasks use
    enc = train.input_length or DEFAULT_SEQUENCE_LENGTH["inputs"]
    dec = train.target_length or DEFAULT_SEQUENCE_LENGTH["targets"]
    attention = model.num_heads * 3
    encoder = rows * enc * (10 * model.d_model + 3 * model.d_ff + attention * enc) * model.num_layers
    decoder = rows * dec * (16 * model.d_model + 3 * model.d_ff + attention * (dec + enc)) * model.decoder_layers
    logits = rows * dec * model.vocab_size * 3
    return 16 * parameters + 4 * (encoder + decoder + logits) + GB / 2


def machine_memory() -> tuple[int, str]:
    """(bytes, what they are): the GPU's memory where CUDA is available, else this machine's (or its
    cgroup's, in a container) RAM."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory, "the GPU"
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        limit = "max"
    return (min(ram, int(limit)) if limit.isdigit() else ram), "this machine"


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
                 *cfg.eval_args]  # the cell is the user's own run: its modules need no --trust-modules
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
    try:
        out = open(log_file, "a", opener=durable.no_follow_opener)
    except OSError as e:
        raise durable.write_error(e, str(log_file)) from None
    with out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0:
        raise T2TError(f"{tool} {' '.join(args[:2])} {failure(done.returncode, log_file)}; see {log_file}, fix it "
                       f"and run the study again to resume.")


def die_with_parent(parent: int) -> None:
    """In a study's child: be sent SIGTERM when the study ends, even by ``kill -9`` (Linux's
    PR_SET_PDEATHSIG; it fires when the thread that started the child ends, and the study's threads wait for
    their children), so no orphaned t2t-train goes on holding its run's lock. Elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != parent:  # the study ended before the signal was armed
        os._exit(1)


def failure(returncode: int, log_file: Path) -> str:
    """How a run ended: killed by a signal (SIGKILL is what the kernel's out-of-memory killer sends; the
    log's last line is then whatever the run was doing), else failed with its log's last line."""
    if returncode < 0:
        number = -returncode
        why = ", probably out of memory" if number == signal.SIGKILL else ""
        return f"was killed (signal {number}){why}"
    tail = log_file.read_text().strip().splitlines()[-1:] or ["no output"]
    return f"failed ({tail[0]})"


def write_table(table: dict[str, dict[str, float]], targets: list[str], out: Path,
                metric: str | None = None) -> None:
    """``results.csv``, ``results.md`` and ``heatmap.png``: rows × targets (each written atomically)."""
    rows_csv = io.StringIO(newline="")
    writer = csv.writer(rows_csv)
    writer.writerow(["row", *targets])
    for row, scores in table.items():
        writer.writerow([row, *(f"{scores[t]:.2f}" for t in targets)])
    durable.write_atomic(out / "results.csv", rows_csv.getvalue())
    lines = ["| row | " + " | ".join(targets) + " |", "|---" * (len(targets) + 1) + "|"]
    lines += ["| " + row + " | " + " | ".join(f"{scores[t]:.2f}" for t in targets) + " |"
              for row, scores in table.items()]
    durable.write_atomic(out / "results.md", "\n".join(lines) + "\n")
    save_figure(heatmap_figure(table, targets, metric), out / "heatmap.png")


def heatmap_figure(table: dict[str, dict[str, float]], targets: list[str], metric: str | None):
    """A matplotlib Figure of rows × targets, annotated with the scores, titled with what they are
    (``metric``, or the mean of each task's metrics); coloured by the difference from the ``none`` row of the
    same column where there is one (scores of different tasks do not compare), else by the score. The colour
    scale spans at least ``MIN_COLOUR_SPAN`` points, so equal scores are one pale colour, not a scale of
    rounding errors."""
    from matplotlib.figure import Figure  # only for plots: importing it takes a while

    names = list(table)
    values = np.array([[table[r][t] for t in targets] for r in names], dtype=float)
    if NO_INTERMEDIATE in table:
        colours = values - values[names.index(NO_INTERMEDIATE)]
        span = max(float(np.nanmax(np.abs(colours))) if np.isfinite(colours).any() else 0.0, MIN_COLOUR_SPAN)
        style = dict(cmap="coolwarm_r", vmin=-span, vmax=span)
        label = f"difference from '{NO_INTERMEDIATE}' (points)"
    else:
        colours, style, label = values, dict(cmap="YlGn", **score_range(values)), "validation score"
    fig = Figure(figsize=(2.4 + 1.3 * len(targets), 1.6 + 0.6 * len(names)))
    ax = fig.subplots()
    image = ax.imshow(colours, aspect="auto", **style)
    ax.set_xticks(range(len(targets)), targets, rotation=30, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("target task")
    ax.set_title(f"validation {metric}" if metric else "validation score: mean of each task's metrics",
                 fontsize=10)
    for (i, j), value in np.ndenumerate(values):
        red, green, blue, _ = image.cmap(image.norm(colours[i, j]))
        dark = 0.3 * red + 0.6 * green + 0.1 * blue < 0.5 and not np.isnan(colours[i, j])
        ax.text(j, i, "n/a" if np.isnan(value) else f"{value:.1f}", ha="center", va="center",
                color="white" if dark else "black")
    fig.colorbar(image, ax=ax, label=label)
    fig.tight_layout()
    return fig


MIN_COLOUR_SPAN = 1.0  # score points


def score_range(values: np.ndarray) -> dict:
    """vmin/vmax around the defined scores, at least ``MIN_COLOUR_SPAN`` wide."""
    defined = values[np.isfinite(values)]
    low, high = (float(defined.min()), float(defined.max())) if defined.size else (0.0, 0.0)
    pad = max(MIN_COLOUR_SPAN - (high - low), 0.0) / 2
    return {"vmin": low - pad, "vmax": high + pad}
