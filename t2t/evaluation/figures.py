"""Figures of results: values against steps, one panel each (training's metrics.png, evaluation's
``checkpoints.<split>.png``), and writing a figure so that a reader never sees half a PNG. matplotlib is
imported on use: importing it takes a while and most commands draw nothing."""

from __future__ import annotations

import io
import math
import textwrap
from pathlib import Path
from typing import Mapping

from t2t.durable import write_atomic

TITLE_WIDTH = 56  # characters a line of a panel's title (4.5 inches wide, 10 points)


def curves_figure(records: list[dict], keys: list[str], best: Mapping[str, int] | None = None):
    """A matplotlib Figure with one panel per key of ``records`` (``{"step": …, key: value}``) against step;
    ``None`` (undefined) values are left out and counted in the title, and a value undefined at every step
    is a panel that says "undefined" instead of an empty plot. ``best`` marks a step on a key's curve."""
    from matplotlib.figure import Figure

    cols = min(3, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig = Figure(figsize=(4.5 * cols, 3.2 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, key in zip(axes.flat, keys):
        logged = [(r["step"], r[key]) for r in records if key in r]
        points = [(step, value) for step, value in logged if value is not None]
        title = key.removeprefix("eval/")
        if len(points) < len(logged):
            title += f" (undefined at {len(logged) - len(points)} of {len(logged)} steps)"
        ax.set_title(textwrap.fill(title, TITLE_WIDTH), fontsize=10)
        ax.set_xlabel("step")
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="." if len(points) < 50 else None)
            ax.grid(alpha=0.3)
            _mark_best(ax, points, (best or {}).get(key))
        else:
            ax.text(0.5, 0.5, "undefined", ha="center", va="center", fontsize=14, color="0.4",
                    transform=ax.transAxes)
            ax.set_yticks([])
            ax.set_xlim(logged[0][0] - 0.5, logged[-1][0] + 0.5)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    fig.tight_layout()
    return fig


def _mark_best(ax, points: list[tuple[int, float]], step: int | None) -> None:
    value = dict(points).get(step)
    if value is not None:
        ax.plot([step], [value], marker="*", markersize=12, color="tab:red", linestyle="none",
                label=f"best: {value:.2f} at step {step}")
        ax.legend(fontsize=8, loc="best")


def save_figure(figure, path: Path) -> None:
    """``figure`` as a PNG at ``path``, written atomically (``durable.write_atomic``)."""
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=100)
    write_atomic(path, png.getvalue())
