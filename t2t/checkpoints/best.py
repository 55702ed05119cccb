"""A run's record of its best evaluated checkpoint: ``RUN/best_checkpoint.json``.

Training with ``keep_best`` (t2t.training.keep_best) writes it once a checkpoint that scored better than every
earlier evaluation is in place; rotation (t2t.checkpoints.native.prune_checkpoints) never deletes the step
it names, and ``RUN:best`` (t2t.checkpoints.run.checkpoint_path) stands for that step's folder::

    {"keep_best": "accuracy",                       the setting as given
     "metric": "eval/glue_rte_v002/accuracy",       the logged value it names (metrics.jsonl)
     "higher_is_better": true,
     "step": 40, "value": 62.5,
     "evaluation": {"mixture": ..., "split": "validation", "max_examples": 64, "batch_size": 32,
                    "precision": "fp32"}}           how t2t-eval scores that checkpoint the same way

The record names a step, never a path, so it cannot point outside its run. It is written atomically
(t2t.durable.write_atomic replaces a link in its place, never writing through it) and a link
found in its place is refused when read: a planted link must not choose which checkpoint ``RUN:best`` loads
or rotation keeps.
"""

from __future__ import annotations

import errno
import json
import math
import os
from pathlib import Path

from t2t import durable
from t2t.errors import T2TError

BEST_FILE = "best_checkpoint.json"


def read_best(run_dir: str | os.PathLike) -> dict | None:
    """The run's best-checkpoint record, or None when it has none (trained without ``keep_best``)."""
    path = Path(run_dir) / BEST_FILE
    try:
        fd = os.open(path, os.O_RDONLY | durable.NO_FOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise T2TError(f"{path} is a symbolic link, and a run's best-checkpoint record must be the file its "
                           f"training wrote (a link could choose the checkpoint RUN:best loads); delete the link "
                           f"and run the same command again.") from None
        raise T2TError(f"cannot read the best-checkpoint record {path} ({e.strerror or e}); restore it, or "
                       f"delete it to leave the run without a best checkpoint.") from None
    with os.fdopen(fd, "rb") as file:
        text = file.read()
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    problem = record_problem(record)
    if problem:
        raise T2TError(f"best-checkpoint record {path} is not what t2t wrote ({problem}); restore it, or delete it "
                       f"to leave the run without a best checkpoint (rotation then keeps only the newest ones).")
    return record


def record_problem(record) -> str | None:
    """What makes ``record`` unlike the records training writes (None: nothing)."""
    if not isinstance(record, dict):
        return "not a JSON object"
    step, value = record.get("step"), record.get("value")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return f"step {step!r} is not a step number"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return f"value {value!r} is not a finite number"
    if not isinstance(record.get("metric"), str) or not isinstance(record.get("higher_is_better"), bool):
        return "it lacks the metric's name or direction"
    return None


def write_best(run_dir: str | os.PathLike, record: dict) -> None:
    """Replace the run's record with ``record`` (atomically: a reader sees the old one or the new one)."""
    problem = record_problem(record)
    if problem:
        raise ValueError(f"not a best-checkpoint record: {problem}")
    durable.write_atomic(Path(run_dir) / BEST_FILE, json.dumps(record, indent=2) + "\n")


def best_step(run_dir: str | os.PathLike) -> int | None:
    """The step the run records as its best, or None."""
    record = read_best(run_dir)
    return None if record is None else record["step"]
