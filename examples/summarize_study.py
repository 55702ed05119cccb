"""Tables and curves of the small-scale replication study (examples/replicate_t5.sh, docs/study-first-round.md).

    python examples/summarize_study.py runs/study/full --docs docs

Reads, under the study folder: ``timings.jsonl`` (wall time per stage), ``pretrain_<objective>/metrics.jsonl``
and ``finetune_<condition>/metrics.jsonl`` (training losses, the in-training validation scores), and
``finetune_<condition>/eval/validation/<task>.metrics.json`` (t2t-eval on the full validation sets). Writes
``study_pretrain.png`` and ``study_finetune.png`` into ``--docs`` and the markdown tables between the
``<!-- study-results -->`` / ``<!-- /study-results -->`` markers of ``<docs>/study-first-round.md`` (the rest of that page is
prose and stays as it is); without the markers or the page the tables go to ``<docs>/study_results.md``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

# Condition name (finetune_<name>) → label, and the paper's GLUE average for the corresponding row.
# Sources (Raffel et al., JMLR 2020, validation sets, T5-Base-sized model, 2^35 pre-training tokens on C4):
#   Table 1, "★ Baseline average" 83.28 and "No pre-training" 66.22 (checked against the paper's text);
#   Table 4, "Prefix language modeling" 80.69 (recalled; agrees with a published summary of the paper);
#   Table 7, span-corruption mean span length 3: 83.49 (recalled from the paper, not re-checked here).
CONDITIONS = {
    "span_corruption": ("Span corruption (15%, mean span 3)", "83.28 (Table 1, ★ baseline) · 83.49† (Table 7, span length 3)"),
    "prefix_lm": ("Prefix language modelling", "80.69 (Table 4)"),
    "scratch": ("No pre-training", "66.22 (Table 1)"),
}
TASKS = [  # (t2t task, short name, metrics in column order)
    ("glue_cola_v002", "CoLA", ["matthews_corrcoef"]),
    ("glue_sst2_v002", "SST-2", ["accuracy"]),
    ("glue_mrpc_v002", "MRPC", ["f1", "accuracy"]),
    ("glue_stsb_v002", "STS-B", ["pearson_corrcoef", "spearman_corrcoef"]),
    ("glue_rte_v002", "RTE", ["accuracy"]),
]
METRIC_SHORT = {"matthews_corrcoef": "MCC", "accuracy": "acc", "f1": "F1", "pearson_corrcoef": "Pearson",
                "spearman_corrcoef": "Spearman"}
START, END = "<!-- study-results -->", "<!-- /study-results -->"


def add_longer_pretraining(root: Path) -> None:
    """Pre-training steps into the labels; conditions finetune_span_corruption_pre<N> (span corruption pre-trained
    for N steps, examples/replicate_t5.sh) added."""
    for objective in ("span_corruption", "prefix_lm"):
        steps = final_step(root / f"pretrain_{objective}")
        if steps:
            label, paper = CONDITIONS[objective]
            CONDITIONS[objective] = (f"{label}, {steps} pre-training steps", paper)
    for run in sorted(root.glob("finetune_span_corruption_pre*")):
        steps = run.name[len("finetune_span_corruption_pre"):]
        if steps.isdigit():
            CONDITIONS[f"span_corruption_pre{steps}"] = (
                f"Span corruption (15%, mean span 3), {steps} pre-training steps", "—")


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def final_scores(run: Path) -> dict[str, dict[str, float]]:
    """{task: {metric: value}} from t2t-eval's ``eval/validation/<task>.metrics.json`` files (full validation
    sets); an undefined metric (stored as null) reads as NaN."""
    scores = {}
    for task, _, _ in TASKS:
        path = run / "eval" / "validation" / f"{task}.metrics.json"
        if path.exists():
            metrics = json.loads(path.read_text())["metrics"]
            scores[task] = {m: float("nan") if v is None else v for m, v in metrics.items()}
    return scores


def glue_average(scores: dict[str, dict[str, float]]) -> float | None:
    """The paper's average: the mean of each task's metrics, then the mean over the tasks (all five present).

    A correlation that is undefined (NaN: the model predicted one constant STS-B score) counts as 0."""
    if any(task not in scores for task, _, _ in TASKS):
        return None
    return float(np.mean([np.mean([0.0 if not np.isfinite(v) else v for v in scores[task].values()])
                          for task, _, _ in TASKS]))


def majority_scores() -> dict[str, dict[str, float]]:
    """Scores of predicting the training set's most frequent label everywhere (STS-B: its mean score), with
    the tasks' own metric functions on the validation sets -- the floor a model must clear."""
    import warnings
    from collections import Counter

    from t2t.data.task import get_task, load_modules
    load_modules([])
    scores = {}
    for name, _, _ in TASKS:
        task = get_task(name)
        train = [float(ex["label"]) for ex in task.source.load("train")]
        targets = [float(ex["label"]) for ex in task.source.load("validation")]
        if name == "glue_stsb_v002":
            constant = float(np.mean(train))
        else:
            constant = Counter(train).most_common(1)[0][0]
            targets = [int(t) for t in targets]
            constant = int(constant)
        scores[name] = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for metric_fn in task.metric_fns:
                scores[name].update(metric_fn(targets, [constant] * len(targets)))
    return scores


def fmt(value: float | None, digits: int = 1) -> str:
    return "—" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def timings(root: Path) -> dict[str, float]:
    out = {}
    for record in read_jsonl(root / "timings.jsonl"):  # a rerun of a finished stage takes seconds: keep the longest
        out[record["stage"]] = max(record["seconds"], out.get(record["stage"], 0))
    return out


def settings(run: Path) -> dict:
    """The resolved settings of a run's latest checkpoint (train_config.yaml), if any."""
    import yaml
    found = sorted(run.glob("step_*/train_config.yaml"))
    return yaml.safe_load(found[-1].read_text()) if found else {}


def condition_runs(root: Path, condition: str) -> list[tuple[int, Path]]:
    """(fine-tuning seed, run folder) of a condition: finetune_<c> is seed 0, finetune_<c>_seed<N> seed N."""
    runs = [(0, root / f"finetune_{condition}")] if (root / f"finetune_{condition}").exists() else []
    for run in sorted(root.glob(f"finetune_{condition}_seed*")):
        runs.append((int(run.name.rsplit("_seed", 1)[1]), run))
    return runs


def long_runs(root: Path, condition: str) -> list[tuple[int, Path]]:
    """(steps, run folder) of the seed-0 run fine-tuned further: finetune_<condition>_<steps>."""
    out = []
    for run in root.glob(f"finetune_{condition}_*"):
        suffix = run.name[len(f"finetune_{condition}_"):]
        if suffix.isdigit():
            out.append((int(suffix), run))
    return sorted(out)


def final_step(run: Path) -> int | None:
    records = [r for r in read_jsonl(run / "metrics.jsonl") if "loss" in r]
    return records[-1]["step"] if records else None


def mean_scores(per_seed: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Metric-wise mean over seeds (tasks missing from a seed are left out of that task's mean)."""
    out: dict[str, dict[str, float]] = {}
    for task, _, metrics in TASKS:
        values = {m: [s[task][m] for s in per_seed if task in s and m in s[task]] for m in metrics}
        if all(values.values()):
            out[task] = {m: float(np.mean(v)) for m, v in values.items()}
    return out


def score_row(label: str, per_seed: list[dict[str, dict[str, float]]], paper: str, seeds: str = "—") -> str:
    scores = mean_scores(per_seed)
    average = fmt(glue_average(scores))
    if len(per_seed) > 1:
        average = f"**{average}** ({' / '.join(fmt(glue_average(s)) for s in per_seed)})"
    else:
        average = f"**{average}**"
    row = [label, seeds, average]
    for task, _, metrics in TASKS:
        row += [fmt(scores.get(task, {}).get(m)) for m in metrics]
    row.append(paper)
    return "| " + " | ".join(row) + " |"


def results_markdown(root: Path) -> str:
    times = timings(root)
    header = ["Condition", "Fine-tuning seeds", "GLUE avg (5 tasks)"]
    for _, name, metrics in TASKS:
        header += [f"{name} {METRIC_SHORT[m]}" for m in metrics]
    header += ["Paper: GLUE avg (all tasks)"]
    try:
        majority = score_row("*Majority class (no model; STS-B: mean score)*", [majority_scores()], "—")
    except Exception as e:  # the reference row needs the GLUE data; the table does not
        print(f"(no majority-class row: {e})")
        majority = None
    steps = sorted({final_step(run) for c in CONDITIONS for _, run in condition_runs(root, c)
                    if glue_average(final_scores(run)) is not None} - {None})
    lines = [f"**GLUE validation scores after {', '.join(map(str, steps))} fine-tuning steps** (full validation "
             "sets, greedy decoding, t2t-eval; the average is the paper's: mean of each task's metrics, then of the "
             "five tasks; with several fine-tuning seeds every score is the mean over seeds, and the per-seed "
             "averages follow in brackets)", ""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for condition, (label, paper) in CONDITIONS.items():
        runs = [(seed, run) for seed, run in condition_runs(root, condition)
                if glue_average(final_scores(run)) is not None]  # all five tasks evaluated
        if runs:
            lines.append(score_row(label, [final_scores(run) for _, run in runs], paper,
                                   ", ".join(str(seed) for seed, _ in runs)))
    if majority:
        lines.append(majority)
    longer = sorted({steps for c in CONDITIONS for steps, run in long_runs(root, c)
                     if glue_average(final_scores(run)) is not None})
    for budget in longer:
        lines += ["", f"**The same after {budget} fine-tuning steps** (seed 0 only: the seed-0 runs above, "
                      f"continued)", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for condition, (label, paper) in CONDITIONS.items():
            for steps, run in long_runs(root, condition):
                if steps == budget and glue_average(final_scores(run)) is not None:
                    lines.append(score_row(label, [final_scores(run)], paper, "0"))
        if majority:
            lines.append(majority)
    lines += ["", "— : undefined (a constant STS-B prediction has no correlation); it counts as 0 in the average. "
              "Paper column: T5-Base-sized model, 2^35 pre-training tokens of C4, all GLUE tasks; Table 1's numbers "
              "were checked against the paper's text and Table 4's against a published summary of it; † marks a "
              "number recalled from the paper that could not be re-checked offline."]

    lines += ["", "**Runs** (wall time on the 2-core machine, up to four runs side by side, one thread each; a continued "
              "run's time is that of its continuation only)",
              "", "| Run | Task | Initialised from | Seed | Steps | Batch (rows × tokens in→out) | Final training loss | Wall time |",
              "|---|---|---|---|---|---|---|---|"]
    for run in sorted(root.glob("pretrain_*")) + sorted(root.glob("finetune_*")):
        cfg = settings(run)
        records = [r for r in read_jsonl(run / "metrics.jsonl") if "loss" in r]
        last = records[-1] if records else {}
        steps = last.get("step", "—")
        batch = (f"{cfg.get('batch_size')} × {cfg.get('input_length')}→{cfg.get('target_length')}"
                 if cfg else "—")
        seconds = times.get(run.name)
        eval_seconds = times.get(f"eval_{run.name}")
        wall = fmt(seconds / 60 if seconds else None) + " min"
        if eval_seconds:
            wall += f" (+ {eval_seconds / 60:.1f} min t2t-eval)"
        init = (f"`{Path(cfg['init_from']).name}`" if cfg.get("init_from")
                else f"random (seed {cfg.get('seed', '?')})" if cfg else "—")
        lines.append(f"| `{run.name}` | `{cfg.get('mixture', '—')}` | {init} | {cfg.get('seed', '—')} | {steps} | {batch} | "
                     f"{fmt(last.get('loss'), 3)} | {wall} |")
    records = [r for r in read_jsonl(root / "timings.jsonl") if r["stage"] != "total"]
    if records:
        span = max(r["end"] for r in records) - min(r["start"] for r in records)
        lines += ["", f"Whole study, first stage start to last stage end: {span / 60:.1f} min wall time "
                      f"(vocabulary training not included when it was reused)."]
    return "\n".join(lines) + "\n"


def unigram_entropy(root: Path) -> float | None:
    """Entropy (nats/token) of the corpus's token frequencies with the study's vocabulary, or None."""
    try:
        from collections import Counter

        import sentencepiece as spm

        from t2t.data.task import get_task, load_modules
        load_modules([])
        vocab = root.parent / "vocab" / "corpus8k.model"
        processor = spm.SentencePieceProcessor(model_file=str(vocab))
        counts = Counter()
        for example in get_task("corpus_span_corruption").source.load("train"):
            counts.update(processor.encode(example["text"]))
        p = np.array(list(counts.values()), dtype=float) / sum(counts.values())
        return float(-(p * np.log(p)).sum())
    except Exception as e:  # a reference line only
        print(f"(no unigram reference: {e})")
        return None


def plot(root: Path, docs: Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    runs = sorted(root.glob("pretrain_*"))
    for color, run in zip(["C0", "C1", "C2", "C3"], runs):
        if any(other.name.startswith(run.name + "_") for other in runs):
            continue  # its continuation holds the same first steps
        records = [r for r in read_jsonl(run / "metrics.jsonl") if "loss" in r]
        if records:
            name = run.name[len("pretrain_"):]
            base, _, steps = name.rpartition("_")
            label = (f"{base.replace('_', ' ')} (the {final_step(root / f'pretrain_{base}')}-step run, "
                     f"continued to {steps})" if steps.isdigit() else name.replace("_", " "))
            ax.plot([r["step"] for r in records], [r["loss"] for r in records], color=color, label=label)
    entropy = unigram_entropy(root)
    if entropy:
        # unigram level: prefix LM targets are text (H per token); a span-corruption target of a 141-token chunk
        # holds 21 noise tokens, 7 sentinels and EOS (sentinels and EOS counted as free)
        for level, text in ((entropy, "unigram level, prefix LM"), (entropy * 21 / 29, "unigram level, span corruption")):
            ax.axhline(level, color="gray", linestyle=":", linewidth=1)
            ax.text(ax.get_xlim()[1], level, text, ha="right", va="bottom", fontsize=8, color="gray")
    ax.set(xlabel="pre-training step", ylabel="training loss (per target token)",
           title="Pre-training on the corpus")
    ax.legend(loc="upper right", bbox_to_anchor=(1.0, 0.8))  # below the unigram labels
    ax.grid(alpha=0.3)
    fig.tight_layout()
    written.append(docs / "study_pretrain.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    for color, (condition, (label, _)) in zip(["C0", "C1", "C2", "C3", "C4"], CONDITIONS.items()):
        for seed, run in condition_runs(root, condition):
            if seed == 0 and long_runs(root, condition):  # its continuation holds the same first steps
                run = long_runs(root, condition)[-1][1]
            short = label.replace(" (15%, mean span 3)", "").replace(" pre-training steps", " pre-training")
            style = dict(color=color, linestyle="-" if seed == 0 else "--", label=f"{short}, seed {seed}")
            records = read_jsonl(run / "metrics.jsonl")
            losses = [r for r in records if "loss" in r]
            if losses:
                axes[0].plot([r["step"] for r in losses], [r["loss"] for r in losses], **style)
            evals = []
            for r in records:
                scores = {task: {m.split("/")[-1]: v for m, v in r.items() if m.startswith(f"eval/{task}/")}
                          for task, _, _ in TASKS}
                average = glue_average({t: s for t, s in scores.items() if s})
                if average is not None:
                    evals.append((r["step"], average))
            if evals:
                axes[1].plot(*zip(*evals), marker="o", **style)
    axes[0].set(xlabel="fine-tuning step", ylabel="training loss (log scale)", yscale="log",
                title="Fine-tuning on the GLUE mixture")
    axes[1].set(xlabel="fine-tuning step", ylabel="GLUE average (5 tasks)",
                title="Validation during fine-tuning (first 96 examples per task)")
    for ax in axes:
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    written.append(docs / "study_finetune.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path, help="the study folder, e.g. runs/study/full")
    parser.add_argument("--docs", type=Path, default=Path("docs"), help="where the page and the PNGs go")
    args = parser.parse_args(argv)
    args.docs.mkdir(parents=True, exist_ok=True)
    add_longer_pretraining(args.study)
    table = results_markdown(args.study)
    page = args.docs / "study-first-round.md"
    text = page.read_text() if page.exists() else ""
    if START in text and END in text:
        head, rest = text.split(START, 1)
        tail = rest.split(END, 1)[1]
        page.write_text(f"{head}{START}\n{table}{END}{tail}")
        target = page
    else:
        target = args.docs / "study_results.md"
        target.write_text(table)
    pngs = plot(args.study, args.docs)
    print(table)
    print(f"wrote {target} and {', '.join(map(str, pngs))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
