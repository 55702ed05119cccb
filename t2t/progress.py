"""What a person watches during training: a progress bar, ``metrics.jsonl`` and a PNG of the curves."""

from __future__ import annotations

import json
import math
from pathlib import Path

from tqdm.auto import tqdm


class MetricsLog:
    """One JSON object per logged step in ``metrics.jsonl``.

    On resume, records after the checkpoint's step are dropped (they will be logged again), so the file
    of a stopped-and-resumed run reads like that of a run that never stopped.
    """

    def __init__(self, path: Path, enabled: bool = True, truncate_after: int = 0):
        self.path = Path(path)
        self.enabled = enabled
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            kept = [r for r in self.records() if r["step"] <= truncate_after]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))

    def write(self, record: dict) -> None:
        if self.enabled:
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")

    def records(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]


class ProgressBar:
    """Steps with loss, throughput and ETA (tqdm); silent on non-main processes."""

    def __init__(self, total: int, initial: int = 0, enabled: bool = True):
        self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, disable=not enabled,
                        desc="train")

    def update(self, loss: float) -> None:
        self.bar.update(1)
        self.bar.set_postfix(loss=f"{loss:.4f}", refresh=False)

    def show(self, record: dict) -> None:
        postfix = {"loss": f"{record['loss']:.4f}", "lr": f"{record['learning_rate']:.2e}",
                   "tok/s": f"{record['tokens_per_second']:,.0f}"}
        self.bar.set_postfix(postfix)
        if self.bar.disable:
            return
        evals = {k: v for k, v in record.items() if k.startswith("eval/")}
        if evals:
            self.bar.write(f"step {record['step']}: " + ", ".join(f"{k[5:]} {v:.2f}" for k, v in evals.items()))

    def close(self) -> None:
        self.bar.close()


def plot_metrics(metrics_path: Path, png_path: Path) -> None:
    """Loss (and every eval metric) against step, one panel each, written to ``png_path``."""
    records = [json.loads(line) for line in Path(metrics_path).read_text().splitlines() if line.strip()]
    if not records:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evals = sorted({k for r in records for k in r if k.startswith("eval/")})
    panels = ["loss"] + evals
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.2 * rows), squeeze=False)
    for ax, key in zip(axes.flat, panels):
        points = [(r["step"], r[key]) for r in records if key in r]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="." if len(points) < 50 else None)
        ax.set_title(key.removeprefix("eval/"))
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    tmp = png_path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(png_path)
