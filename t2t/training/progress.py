"""What a person watches during training: a progress bar, ``metrics.jsonl`` and a PNG of the curves (the
loggers in loggers.py are made of these)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm

from t2t.durable import append_line, refuse_link, write_error
from t2t.errors import T2TError
from t2t.evaluation.figures import curves_figure, save_figure
from t2t.evaluation.results import jsonable
from t2t.terminal import eta, on_terminal


class MetricsLog:
    """One JSON object per logged step in ``metrics.jsonl``, appended line by line (never rewritten).

    An undefined value (a NaN loss, the correlation of constant predictions) is ``null``, as in the
    evaluation's result files: a bare ``NaN`` is not JSON, and strict readers (``jq``, JavaScript) reject it.

    On resume, records after the checkpoint's step are cut off (they will be logged again), so the file
    of a stopped-and-resumed run reads like that of a run that never stopped. A torn last line (a write cut
    short by a full disk or a crash) is cut off too. A symbolic link in its place is refused (cutting back or
    appending to it would change the file it points to).
    """

    def __init__(self, path: Path, truncate_after: int = 0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        refuse_link(self.path)
        keep = 0  # bytes of the lines kept: those up to the resumed step
        for line, record in _read_lines(self.path):
            if record is None or record["step"] > truncate_after:
                break
            keep += len(line)
        if self.path.exists() and keep < self.path.stat().st_size:
            os.truncate(self.path, keep)  # one call: the lines kept are never rewritten

    def write(self, record: dict) -> None:
        try:
            append_line(self.path, json.dumps(jsonable(record), allow_nan=False))
        except OSError as e:
            raise write_error(e, str(self.path)) from None

    def records(self) -> list[dict]:
        return read_metrics(self.path)


def read_metrics(path: Path) -> list[dict]:
    """The records of a ``metrics.jsonl`` (a torn last line is left out)."""
    return [record for _, record in _read_lines(Path(path)) if record is not None]


def _read_lines(path: Path) -> list[tuple[bytes, dict | None]]:
    """(raw line, record) pairs in file order; the record is None for a torn last line."""
    if not path.exists():
        return []
    try:
        lines = path.read_bytes().splitlines(keepends=True)
    except OSError as e:
        raise T2TError(f"cannot read the metrics log {path} ({e.strerror or e}); it must be the file training "
                       f"wrote, so move whatever is there away and run the same command again.") from None
    pairs = [(line, _parse_record(line)) for line in lines]
    for number, (_, record) in enumerate(pairs[:-1], 1):
        if record is None:
            raise T2TError(f"line {number} of {path} is not a JSON record with a step number; delete that line (or "
                           f"the file) and run the same command again.")
    return pairs


def _parse_record(line: bytes) -> dict | None:
    """A logged record, or None for a line that is not one (torn: no newline, or cut inside the JSON)."""
    if not line.endswith(b"\n"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and type(record.get("step")) is int else None  # not "abc", true


class LogWindow:
    """What the steps since the last logged one measured: their steps and tokens per second and the share of
    the time they waited for their batches. Time ``left_out`` (the first compiled step's) counts in none."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.steps, self.tokens, self.waiting, self.start, self.notes = 0, 0, 0.0, time.perf_counter(), {}

    def count_step(self, tokens: int) -> None:
        self.steps += 1
        self.tokens += tokens

    def left_out(self, seconds: float, **notes) -> None:
        """Leave ``seconds`` just spent out of the window, and add ``notes`` to its record."""
        self.start += seconds
        self.notes.update(notes)

    def rates(self) -> dict:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        return {"steps_per_second": self.steps / elapsed, "tokens_per_second": self.tokens / elapsed,
                "data_wait_share": self.waiting / elapsed, **self.notes}


class ProgressBar:
    """Steps with loss, throughput and ETA (tqdm) on a terminal, one plain line per logged step elsewhere."""

    def __init__(self, total: int, initial: int = 0):
        self.total, self.initial, self.start = total, initial, time.perf_counter()
        self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, disable=not on_terminal(),
                        desc="train")

    def update(self, loss: float) -> None:
        self.bar.update(1)
        self.bar.set_postfix(loss=f"{loss:.4f}", refresh=False)

    def show(self, record: dict) -> None:
        postfix = {"loss": f"{record['loss']:.4f}", "lr": f"{record['learning_rate']:.2e}",
                   "tok/s": f"{record['tokens_per_second']:,.0f}", "data wait": f"{record['data_wait_share']:.1%}"}
        self.bar.set_postfix(postfix)
        evals = ", ".join(f"{k[5:]} {v:.2f}" for k, v in record.items() if k.startswith("eval/"))
        if self.bar.disable:
            left = eta(record["step"] - self.initial, self.total - self.initial, time.perf_counter() - self.start)
            print(f"step {record['step']}: " + ", ".join(f"{k} {v}" for k, v in postfix.items()) +
                  (f", {evals}" if evals else "") + f", ETA {left}", file=sys.stderr, flush=True)
        elif evals:
            self.bar.write(f"step {record['step']}: {evals}")

    def close(self) -> None:
        self.bar.close()


def plot_metrics(records: list[dict], png_path: Path) -> None:
    """Loss (and every eval metric) of ``records`` against step, one panel each, written to ``png_path`` (nothing
    without records)."""
    if records:
        save_figure(metrics_figure(records), png_path)


def metrics_figure(records: list[dict]):
    """The loss, then every eval metric in name order, against step (figures.curves_figure)."""
    evals = sorted({k for r in records for k in r if k.startswith("eval/")})
    return curves_figure(records, ["loss"] + evals)
