"""What the dashboard loggers share: importing their package only when chosen, the record of their dashboard
run in the run folder (so a resumed run continues the same one), and holding records until a checkpoint."""

from __future__ import annotations

import json
import sys
import time
from abc import abstractmethod
from pathlib import Path
from types import ModuleType

from t2t import durable, extras
from t2t.errors import T2TError
from t2t.training.loggers import MetricsLogger


def require_package(package: str, kind: str, extra: str) -> None:
    """One sentence naming the extra to install when ``package`` is not installed (found without importing it,
    so that a missing package stops a run before it loads anything)."""
    extras.require_extra(package, extra, f"the {kind} logger", f"leave {kind} out of loggers")


def import_extra(module: str, kind: str, extra: str) -> ModuleType:
    """``module``, imported when its logger is built (``require_package`` first)."""
    return extras.import_extra(module, extra, f"the {kind} logger", f"leave {kind} out of loggers")


def read_dashboard_run(path: Path) -> dict | None:
    """The dashboard run a run folder logged to, as ``record_dashboard_run`` wrote it (None: none yet)."""
    if not path.exists():
        return None
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise T2TError(f"cannot read {path} ({e}); it names the dashboard run this run logs to, so delete it to "
                       f"start a new dashboard run, or restore it to continue the old one.") from None
    if not isinstance(found, dict) or not isinstance(found.get("id"), str):
        raise T2TError(f"{path} names no dashboard run id; delete it to start a new dashboard run, or restore it "
                       f"to continue the old one.")
    return found


def record_dashboard_run(path: Path, record: dict) -> None:
    """Write ``record`` (``{"id": ...}`` and whatever else finds the run again) atomically, never through a link."""
    durable.write_atomic(path, json.dumps(record, indent=2) + "\n")


def scalars(record: dict) -> dict[str, float]:
    """A logged record's values by name, less its step: the numbers a dashboard plots (NaN for undefined)."""
    return {key: float(value) for key, value in record.items()
            if key != "step" and isinstance(value, (int, float))}


def flat_settings(settings: dict, prefix: str = "") -> dict[str, object]:
    """``{"optimizer": {"learning_rate": 1e-3}}`` as ``{"optimizer.learning_rate": 1e-3}``: the names ``--set``
    takes, for dashboards whose parameters are flat."""
    flat = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat.update(flat_settings(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


class CheckpointedLogger(MetricsLogger):
    """A logger whose dashboard cannot take back what it was sent (W&B and MLflow keep every point of a metric's
    history): it holds each record until the checkpoint that covers it is saved, then sends it.

    A run that stops between checkpoints resumes at the last one and logs the steps after it again; this
    logger never sent those, so the dashboard holds each step once, with the values metrics.jsonl keeps, as
    TensorBoard's ``purge_step`` gives. The cost: the dashboard trails training by up to ``save_every`` steps.
    """

    def __init__(self):
        self.pending: list[tuple[float, dict]] = []  # (wall time, record) logged since the last checkpoint

    def log(self, record: dict) -> None:
        self.pending.append((time.time(), dict(record)))

    def flush(self) -> None:
        if self.pending:
            self.send(self.pending)
            self.pending = []

    def close(self) -> None:
        """Records after the last checkpoint are dropped (a resume logs them again); the dashboard run ends as
        failed when an error is stopping training (the loop closes its loggers while that error unwinds), else
        as finished (at train_steps, or stopped early)."""
        self.pending = []
        self.finish(complete=sys.exc_info()[1] is None)

    @abstractmethod
    def send(self, records: list[tuple[float, dict]]) -> None:
        """Send (wall time, record) pairs, in step order, to the dashboard."""

    @abstractmethod
    def finish(self, complete: bool) -> None:
        """End the dashboard run (``complete``: no error stopped training)."""
