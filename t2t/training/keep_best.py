"""Keep the best evaluated checkpoint, and stop a run that stopped improving (``keep_best``, ``early_stopping``).

The rules are transformers' (``metric_for_best_model``, ``greater_is_better``, ``EarlyStoppingCallback``),
counted in the evaluations training runs every ``eval_every`` steps:

- the metric ``keep_best`` names is higher-is-better (T5's metrics: accuracy, F1, correlations, BLEU, ROUGE,
  the benchmark averages), unless its name ends in ``loss`` (transformers' rule), ``_edit`` (t5's word edit
  distances) or ``perplexity``;
- an evaluation better than every earlier one (strictly: the earliest step wins a tie, as
  t2t.evaluation.results.best_checkpoints) makes its step the best: that checkpoint is saved (also off the
  ``save_every`` schedule) and recorded in the run folder (t2t.checkpoints.best), where rotation never
  deletes it; an undefined value (NaN) is never best;
- with ``early_stopping.patience`` P, an evaluation that does not beat the best so far by more than
  ``min_delta`` counts against the patience, one that does resets it; after P in a row the run saves that
  step and stops.

A stopped run is done: training again in its folder trains nothing and says why, unless the patience is
raised (or set to 0), when it goes on from the step where it stopped, with the evaluations already counted.
Both settings may change on resume (they do not change what a step computes); a resumed run compares with
the best its folder records, and one whose ``keep_best`` names another metric starts its best afresh.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

from t2t import config
from t2t.checkpoints import best as best_record
from t2t.checkpoints import native as checkpoint
from t2t.data.task import Mixture, get_task_or_mixture, member_tasks
from t2t.errors import T2TError
from t2t.evaluation.results import BENCHMARKS

log = logging.getLogger(__name__)

EVAL_PREFIX = "eval/"  # the evaluation's keys in a logged record: eval/<task>/<metric>, eval/<benchmark>_average
LOWER_IS_BETTER = ("loss", "_edit", "perplexity")  # metric names ending so are better lower
WATCH_STATE = "keep_best"  # where a checkpoint's trainer state keeps the patience count


@dataclass
class EarlyStoppingConfig:
    patience: int = 0                 # evaluations in a row that do not beat keep_best's best before training stops (0: never)
    min_delta: float = 0.0            # beating the best by at most this much counts as no improvement

    def __post_init__(self):
        config.check(self, non_negative=("patience", "min_delta"))


def check_keep_best_settings(keep_best: str | None, early_stopping: EarlyStoppingConfig, eval_every: int) -> None:
    """``keep_best`` needs evaluations, and a patience needs ``keep_best``'s metric. Checked when training starts,
    once a resumed run's own settings are merged in (``t2t-train --output-dir RUN --set early_stopping.patience=6``
    resumes with the run's keep_best and eval_every), not where the settings are built."""
    if (keep_best or early_stopping.patience) and not eval_every:
        name = "keep_best" if keep_best else "early_stopping.patience"
        raise T2TError(f"{name} is set but eval_every is 0, so training evaluates nothing; set --eval-every N "
                       f"(steps between evaluations) or leave {name} out.")
    if early_stopping.patience and not keep_best:
        raise T2TError("early_stopping.patience counts evaluations in which the metric keep_best names did not "
                       "improve, and keep_best is not set; set --set keep_best=<metric> (e.g. accuracy).")


def higher_is_better(metric: str) -> bool:
    """Whether a larger value of logged metric ``metric`` is better (see the module's rules)."""
    return not metric.endswith(LOWER_IS_BETTER)


def check_keep_best(keep_best: str, evaluated: str) -> None:
    """Refuse before training a ``keep_best`` that the evaluation of ``evaluated`` (a task or mixture) cannot
    report: a task not among its members, or a benchmark average of none of them. (Metric names are known only
    once the metric functions have run: the first evaluation checks those.)"""
    name = keep_best.removeprefix(EVAL_PREFIX)
    item = get_task_or_mixture(evaluated)
    tasks = [task.name for task in member_tasks(item) if task.metric_fns]
    averages = [f"{key}_average" for key, benchmark in BENCHMARKS.items()
                if isinstance(item, Mixture) and set(tasks) & set(benchmark.tasks)]
    if name.endswith("_average") and "/" not in name and name.replace("_partial", "") not in averages:
        offered = f"its averages are {', '.join(averages)}" if averages else "it reports no benchmark average"
        raise T2TError(f"keep_best {keep_best} is not an average the evaluation of {evaluated} reports ({offered}); "
                       f"set --set keep_best=<a metric or an average it reports>.")
    if "/" in name and task_name(name.split("/")[0]) not in tasks:
        raise T2TError(f"keep_best {keep_best} names a task the evaluation of {evaluated} does not score (it scores "
                       f"{', '.join(tasks)}); set --set keep_best=<task>/<metric> with one of them.")


def task_name(name: str) -> str:
    """A task's registered name for ``name`` or an alias of it (rte → glue_rte_v002); unknown: ``name``."""
    try:
        return get_task_or_mixture(name).name
    except T2TError:
        return name


def find_metric(keep_best: str, record: dict) -> str:
    """The key of ``record`` (an evaluation's logged record) that ``keep_best`` names: ``eval/`` may be left
    out, a task may go by an alias (``rte/accuracy``), and a metric only one task reports by its own name
    (``accuracy``). Anything else is one sentence listing the names the evaluation reports."""
    names = [key.removeprefix(EVAL_PREFIX) for key in record if key.startswith(EVAL_PREFIX)]
    name = keep_best.removeprefix(EVAL_PREFIX)
    if "/" in name:
        task, metric = name.split("/", 1)
        name = f"{task_name(task)}/{metric}"
    matches = [n for n in names if n == name] or [n for n in names if "/" not in name and n.endswith("/" + name)]
    if len(matches) == 1:
        return EVAL_PREFIX + matches[0]
    if matches:
        raise T2TError(f"keep_best {keep_best} is reported by several tasks ({', '.join(matches)}); name one as "
                       f"--set keep_best=<task>/{name}.")
    raise T2TError(f"keep_best {keep_best} is not among the metrics the evaluation reports ({', '.join(names)}); "
                   f"set --set keep_best=<one of them> and run the same command again (it resumes).")


class BestWatch:
    """The best evaluation so far and the evaluations since an improvement, for the training loop.

    ``observe`` judges each evaluation; ``wants_checkpoint`` says which steps must be saved (the best, the
    stopping one); ``record_for`` is the run-folder record that saving a step writes; ``state_dict`` /
    ``resume`` carry the patience count in the checkpoint's trainer state (so a resumed run counts as if it
    had not stopped). Without ``keep_best`` it watches nothing."""

    def __init__(self, run_dir: Path, keep_best: str | None, early_stopping: EarlyStoppingConfig,
                 evaluation: dict):
        self.keep_best, self.early_stopping, self.evaluation = keep_best, early_stopping, evaluation
        self.best = recorded_best(run_dir) if keep_best else None  # the run folder's record, or None
        if self.best is not None and self.best.get("evaluation") != evaluation:
            log.warning("the recorded best (step %d) was scored with %s and this run evaluates with %s: its values "
                        "compare with the record only as far as those settings do", self.best["step"],
                        self.best.get("evaluation"), evaluation)
        self.metric: str | None = None
        self.without_improvement = 0
        self.stopped_at: int | None = None

    def resume(self, state: dict | None) -> None:
        """The patience count a checkpoint's trainer state saved (``state_dict``)."""
        if self.keep_best and state:
            self.metric, self.without_improvement = state["metric"], int(state["evaluations_without_improvement"])

    def state_dict(self) -> dict | None:
        if self.metric is None:
            return None
        return {"metric": self.metric, "evaluations_without_improvement": self.without_improvement}

    def observe(self, step: int, record: dict) -> dict:
        """Judge the evaluation in ``record`` (step ``step``); returns what the record gains: ``best/step`` and
        ``best/value``, and ``early_stopped`` at the evaluation that ends the run."""
        if not self.keep_best:
            return {}
        metric = find_metric(self.keep_best, record)
        self.start_afresh_if_changed(metric)
        value, best = float(record[metric]), self.best["value"] if self.best is not None else None
        sign = 1 if higher_is_better(metric) else -1
        improved = math.isfinite(value) and (best is None or sign * (value - best) > 0)
        if improved:
            self.best = {"keep_best": self.keep_best, "metric": metric, "higher_is_better": sign > 0,
                         "step": step, "value": value, "evaluation": self.evaluation}
        if improved and (best is None or abs(value - best) > self.early_stopping.min_delta):
            self.without_improvement = 0
        else:
            self.without_improvement += 1
        gains = {"best/step": self.best["step"], "best/value": self.best["value"]} if self.best else {}
        if self.early_stopping.patience and self.without_improvement >= self.early_stopping.patience:
            self.stopped_at = step
            log.info(self.stop_message())
            gains["early_stopped"] = True
        return gains

    def start_afresh_if_changed(self, metric: str) -> None:
        """A run resumed with ``keep_best`` naming another metric forgets the old best and its count."""
        if self.metric not in (None, metric):
            self.without_improvement = 0
        if self.best is not None and self.best["metric"] != metric:
            log.info("keep_best now names %s, not the recorded %s: the best starts afresh (the checkpoint it "
                     "recorded, step %d, stays until a new best replaces the record)", metric, self.best["metric"],
                     self.best["step"])
            self.best = None
        self.metric = metric

    def wants_checkpoint(self, step: int) -> bool:
        """Whether step ``step`` must be saved: it is the new best, or the run stops there."""
        return step == self.stopped_at or (self.best is not None and self.best["step"] == step)

    def record_for(self, step: int) -> dict | None:
        """The best-checkpoint record to write with the checkpoint of ``step`` (None unless it is the best)."""
        return self.best if self.best is not None and self.best["step"] == step else None

    def stop_message(self) -> str:
        """The one line that says the run stopped, and why."""
        if self.best is None:
            return (f"early stopping at step {self.stopped_at}: {self.metric} was undefined in "
                    f"{self.without_improvement} evaluations; the run is done")
        return (f"early stopping at step {self.stopped_at}: {self.metric} did not beat its best by more than "
                f"{self.early_stopping.min_delta:g} in {self.without_improvement} evaluations (best "
                f"{self.best['value']:g} at step {self.best['step']}, kept as RUN:best); the run is done, and "
                f"raising early_stopping.patience continues it")


def recorded_best(run_dir: Path) -> dict | None:
    """The run folder's best-checkpoint record, if the checkpoint it names is still there."""
    record = best_record.read_best(run_dir)
    if record is not None and not (run_dir / checkpoint.checkpoint_name(record["step"])).is_dir():
        log.warning("%s records step %d as the best, which is missing: the best starts afresh",
                    run_dir / best_record.BEST_FILE, record["step"])
        return None
    return record


def stopped_early(trainer_state: dict, early_stopping: EarlyStoppingConfig) -> bool:
    """Whether the checkpoint with ``trainer_state`` ended its run by early stopping under these settings."""
    state = trainer_state.get(WATCH_STATE) or {}
    count = state.get("evaluations_without_improvement", 0)
    return bool(early_stopping.patience) and count >= early_stopping.patience
