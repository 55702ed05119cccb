"""Where a run's logged records go: one small interface, as torchtune's ``MetricLoggerInterface``, and its kinds.

The training loop holds a list of loggers and knows none of them. ``TrainConfig.loggers`` names the kinds
(``jsonl``, ``console`` and ``plot`` by default; ``tensorboard``, ``wandb`` and ``mlflow`` in
t2t.training.dashboards), which only the main process builds. A new kind is one module with a subclass plus one
:func:`register_logger` line; a ``--module`` file may hold it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from t2t.errors import T2TError
from t2t.evaluation.results import jsonable
from t2t.registry import Registry
from t2t.training.progress import MetricsLog, ProgressBar, plot_metrics, read_metrics

METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "metrics.png"
DEFAULT_LOGGERS = ("jsonl", "console", "plot")


@dataclass(frozen=True)
class LoggedRun:
    """What a logger is built for. A resumed run starts at its checkpoint's step: the records after it were
    logged by the run that stopped and come again, so a logger that keeps them drops them (metrics.jsonl does)."""
    dir: Path          # the run folder, where loggers that write files write them
    start_step: int    # the step training starts from (0, or the step of the checkpoint it resumes)
    train_steps: int   # the step it trains to


class MetricsLogger(ABC):
    """One destination of a run's records. Built as ``kind(run: LoggedRun)`` on the main process; the loop
    calls ``log_settings`` once, ``advance`` after every step, ``log`` at every logged step, ``flush`` after
    every checkpoint, and ``close`` however training ends (an error included)."""

    kind: ClassVar[str]  # its name in TrainConfig.loggers and LOGGER_KINDS

    @classmethod
    def check_available(cls) -> None:
        """Raise T2TError if this kind cannot work here (its package is not installed), on every process and
        before anything is loaded."""

    def log_settings(self, settings: dict) -> None:
        """The run's settings as train_config.yaml records them, before the first step."""

    def advance(self, step: int, loss: float) -> None:
        """Step ``step`` is done with this loss (every step, logged or not: a progress bar moves)."""

    @abstractmethod
    def log(self, record: dict) -> None:
        """A logged step's record: ``step``, ``loss``, ``learning_rate``, rates and ``eval/<task>/<metric>``;
        undefined values are NaN."""

    def flush(self) -> None:
        """A checkpoint was just saved: make what is logged so far durable beside it."""

    def close(self) -> None:
        """Release what the logger holds."""


LOGGER_KINDS: Registry[type[MetricsLogger]] = Registry("metrics logger")


def register_logger(cls: type[MetricsLogger]) -> type[MetricsLogger]:
    """Make ``cls`` selectable in ``TrainConfig.loggers`` (under ``cls.kind``)."""
    return LOGGER_KINDS.register(cls.kind, cls)


def check_logger_names(names: list[str]) -> None:
    """Each name in ``loggers`` registered (a misspelt one suggests close names) and named once."""
    for name in names:
        LOGGER_KINDS.get(name).check_available()
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise T2TError(f"loggers names {repeated[0]} more than once, so its records would be logged twice; "
                       f"name each logger once.")


def open_loggers(names: list[str], run: LoggedRun, settings: dict, closing: ExitStack) -> list[MetricsLogger]:
    """The loggers ``names`` selects, each given the run's ``settings``; ``closing`` closes each one built,
    however training ends (also when a later one fails to build)."""
    loggers = []
    for name in names:
        logger = LOGGER_KINDS.get(name)(run)
        closing.callback(logger.close)
        logger.log_settings(settings)
        loggers.append(logger)
    return loggers


class JsonlLogger(MetricsLogger):
    """Each record as a line of the run's ``metrics.jsonl`` (see progress.MetricsLog)."""

    kind = "jsonl"

    def __init__(self, run: LoggedRun):
        self.file = MetricsLog(run.dir / METRICS_FILE, truncate_after=run.start_step)

    def log(self, record: dict) -> None:
        self.file.write(record)


class ConsoleLogger(MetricsLogger):
    """A progress bar with loss and ETA on a terminal, one plain line per logged step elsewhere."""

    kind = "console"

    def __init__(self, run: LoggedRun):
        self.bar = ProgressBar(total=run.train_steps, initial=run.start_step)

    def advance(self, step: int, loss: float) -> None:
        self.bar.update(loss)

    def log(self, record: dict) -> None:
        self.bar.show(record)

    def close(self) -> None:
        self.bar.close()


class PlotLogger(MetricsLogger):
    """``metrics.png``, drawn at each checkpoint (a PNG a step is too slow) from the records logged so far; a
    resumed run's earlier records come from its metrics.jsonl."""

    kind = "plot"

    def __init__(self, run: LoggedRun):
        self.path = run.dir / PLOT_FILE
        earlier = read_metrics(run.dir / METRICS_FILE) if run.start_step else []
        self.records = [record for record in earlier if record["step"] <= run.start_step]

    def log(self, record: dict) -> None:
        self.records.append(jsonable(record))  # NaN as None, as metrics.jsonl holds it

    def flush(self) -> None:
        plot_metrics(self.records, self.path)


register_logger(JsonlLogger)
register_logger(ConsoleLogger)
register_logger(PlotLogger)
