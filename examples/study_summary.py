"""Results of the pre-training study (examples/pretraining_study.py): ``results.csv``, the table, the curves.

A fine-tuning run's score is its best in-training evaluation on the task's full validation set (§3.1.2
reports each task at its best checkpoint), in the task's metric on 0-100; MRPC's and STS-B's two metrics
are averaged, as the paper does for its GLUE average. A pre-trained condition "beats scratch beyond the
seeds' spread" on a task when its worst seed scores above scratch's best seed: "no" is final as soon as one
pre-trained seed scores at or below one scratch seed (more seeds cannot undo it); "yes" needs two seeds each.
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import yaml

TASKS = {  # task → (t2t task, the metrics averaged into its score)
    "cola": ("glue_cola_v002", ("matthews_corrcoef",)),
    "sst2": ("glue_sst2_v002", ("accuracy",)),
    "mrpc": ("glue_mrpc_v002", ("f1", "accuracy")),
    "stsb": ("glue_stsb_v002", ("pearson_corrcoef", "spearman_corrcoef")),
    "rte": ("glue_rte_v002", ("accuracy",)),
}
TASK_LABELS = {"cola": "CoLA (MCC)", "sst2": "SST-2 (acc)", "mrpc": "MRPC (F1, acc)",
               "stsb": "STS-B (Pearson, Spearman)", "rte": "RTE (acc)"}
CONDITION_LABELS = {"scratch": "no pre-training", "generic": "span corruption, generic corpus",
                    "indomain": "span corruption, GLUE inputs + corpus"}


def finetune_run(out: Path, task: str, condition: str, seed: int) -> Path:
    return out / "finetune" / task / condition / f"seed{seed}"


def finished(run: Path, steps: int) -> bool:
    return (run / f"step_{steps:08d}").is_dir()


def last_step(run: Path) -> int | None:
    steps = sorted(run.glob("step_*"))
    return int(steps[-1].name[len("step_"):]) if steps else None


def completed(run: Path) -> bool:
    """Whether the run's newest checkpoint is its final step (``train_steps`` in the checkpoint's config)."""
    step = last_step(run)
    if step is None:
        return False
    config = yaml.safe_load((run / f"step_{step:08d}" / "train_config.yaml").read_text())
    return config["train_steps"] == step


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def task_score(record: dict, task: str) -> float | None:
    """The task's score in one evaluation record (an undefined correlation, from a model that predicts one
    constant, counts as 0)."""
    name, metrics = TASKS[task]
    keys = [f"eval/{name}/{m}" for m in metrics]
    if any(key not in record for key in keys):
        return None
    values = [record[key] for key in keys]  # None: undefined (JSON has no NaN)
    return statistics.mean(0.0 if v is None or v != v else float(v) for v in values)


def evaluations(run: Path, task: str) -> list[tuple[int, float]]:
    """(step, score) of every in-training evaluation of a fine-tuning run."""
    return [(r["step"], s) for r in read_jsonl(run / "metrics.jsonl") if (s := task_score(r, task)) is not None]


def results(out: Path, tasks, conditions, seeds) -> list[dict]:
    """One row per finished fine-tuning run: task, condition, seed, score (its best evaluation)."""
    rows = []
    for task in tasks:
        for condition in conditions:
            for seed in seeds:
                run = finetune_run(out, task, condition, seed)
                scored = evaluations(run, task)
                if completed(run) and scored and scored[-1][0] == last_step(run):  # and evaluated its last step
                    best = max(score for _, score in scored)
                    rows.append({"task": task, "condition": condition, "seed": seed, "score": round(best, 2)})
    return rows


def write_csv(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["task", "condition", "seed", "score"], lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def scores_by(rows: list[dict]) -> dict[tuple[str, str], list[float]]:
    grouped: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        grouped.setdefault((row["task"], row["condition"]), []).append(float(row["score"]))
    return grouped


def mean_std(scores: list[float]) -> str:
    if not scores:
        return "—"
    spread = f" ± {statistics.stdev(scores):.1f}" if len(scores) > 1 else ""
    return f"{statistics.mean(scores):.1f}{spread} (n={len(scores)})"


def beats_scratch(pretrained: list[float], scratch: list[float]) -> bool | None:
    """Above scratch beyond the seeds' spread: the worst pre-trained seed above the best scratch seed. False
    as soon as it fails (more seeds only lower the worst and raise the best); None while it holds with fewer
    than two seeds either side (one seed has no spread to exceed) or a side has none."""
    if not pretrained or not scratch:
        return None
    if min(pretrained) <= max(scratch):
        return False
    return True if min(len(pretrained), len(scratch)) >= 2 else None


def table(rows: list[dict], tasks, conditions) -> str:
    grouped = scores_by(rows)
    pretrained = [c for c in conditions if c != "scratch"]
    head = ["task", *(CONDITION_LABELS[c] for c in conditions), *(f"{c} beats scratch" for c in pretrained)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    wins = dict.fromkeys(pretrained, 0)
    for task in tasks:
        cells = [mean_std(grouped.get((task, c), [])) for c in conditions]
        for c in pretrained:
            won = beats_scratch(grouped.get((task, c), []), grouped.get((task, "scratch"), []))
            wins[c] += bool(won)
            cells.append({True: "yes", False: "no", None: "undecided"}[won])
        lines.append(f"| {TASK_LABELS[task]} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += [f"{CONDITION_LABELS[c]}: above no pre-training beyond the seeds' spread on {wins[c]} of "
              f"{len(tasks)} tasks." for c in pretrained]
    return "\n".join(lines)


def plot(out: Path, tasks, conditions, seeds, docs: Path) -> list[Path]:
    """Pre-training loss per condition; per task, validation score against fine-tuning step, one line per
    condition (the mean over seeds) with a band from the worst to the best seed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    docs.mkdir(parents=True, exist_ok=True)
    written = []
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for condition in conditions:
        records = [r for r in read_jsonl(out / f"pretrain_{condition}" / "metrics.jsonl") if "loss" in r]
        if records:
            ax.plot([r["step"] for r in records], [r["loss"] for r in records], label=CONDITION_LABELS[condition])
    ax.set(xlabel="pre-training step", ylabel="span-corruption loss", title="Pre-training")
    if ax.lines:
        ax.legend()
    fig.tight_layout()
    fig.savefig(docs / "pretraining_loss.png", dpi=110)
    plt.close(fig)
    written.append(docs / "pretraining_loss.png")
    fig, axes = plt.subplots(1, len(tasks), figsize=(3.6 * len(tasks), 3.3), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for condition in conditions:
            curves = [c for s in seeds if (c := dict(evaluations(finetune_run(out, task, condition, s), task)))]
            steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []  # the seeds run so far
            if steps:
                values = [[c[step] for c in curves] for step in steps]
                ax.plot(steps, [statistics.mean(v) for v in values], label=CONDITION_LABELS[condition])
                ax.fill_between(steps, [min(v) for v in values], [max(v) for v in values], alpha=0.2)
        ax.set(xlabel="fine-tuning step", title=TASK_LABELS[task])
    axes[0][0].set_ylabel("validation score")
    if any(ax.lines for ax in axes[0]):
        fig.legend(*next(ax for ax in axes[0] if ax.lines).get_legend_handles_labels(), loc="lower center",
                   ncol=len(conditions), fontsize=8)
    fig.tight_layout(rect=(0, 0.1, 1, 1))  # room for the legend below
    fig.savefig(docs / "finetuning_curves.png", dpi=110)
    plt.close(fig)
    written.append(docs / "finetuning_curves.png")
    return written


def summarize(out: Path, tasks, conditions, seeds, docs: Path) -> str:
    """Write results.csv, table.md and the PNGs into ``docs``; return the table."""
    rows = results(out, tasks, conditions, seeds)
    write_csv(rows, docs / "results.csv")
    plot(out, tasks, conditions, seeds, docs)
    text = table(rows, tasks, conditions)
    (docs / "table.md").write_text(text + "\n")
    return text
