"""Dynamic batching: one worker thread owns the model and runs the rows of many requests in one batch.

A request is a :class:`Job`: its rows (one per input), the key its rows share a batch under (decoding
settings: only rows decoded the same way may be decoded together), and a deadline. The worker takes the
oldest waiting row, waits until ``max_wait`` seconds after that row's request arrived, or after its own last
batch ended if that is later, for more rows with its key (or until ``max_batch_size`` of them wait): under
load, the wait lets the requests that came in during a batch reach the queue (the event loop parses them
while the worker waits instead of holding the GIL). Then it runs up to ``max_batch_size`` of them together,
grouped by length: of those rows sorted by length, the run of ``max_batch_size`` that holds the oldest row
and spans the fewest tokens, so padding stays low and no row waits for ever behind shorter ones. A job that
finds the worker idle with nothing else queued runs at once: at idle a wait for company only adds latency,
and under load rows gather while the previous batch runs. A job marked ``whole`` (sampling, whose draws
depend on the batch) runs alone, all its rows in one call.

Each row's result goes back to its own job by position, so a job never sees another's output; a batch that
raises fails its jobs alone and the worker carries on. The queue holds at most ``max_queue`` jobs; a job past
its deadline is answered with :class:`Expired` without being run. ``close`` stops taking jobs and returns once
every waiting one is answered (the server's drain on SIGTERM).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

log = logging.getLogger(__name__)


class QueueFull(Exception):
    """The queue holds ``max_queue`` jobs already."""


class Closed(Exception):
    """The batcher is draining and takes no new jobs."""


class Expired(Exception):
    """The job's deadline passed before it was run."""


@dataclass(eq=False)
class Job:
    rows: list                           # one item per input, in the request's order
    key: Hashable                        # rows of jobs with equal keys may share a batch
    deadline: float                      # time.monotonic() after which the job is not run
    on_done: Callable[[list | None, BaseException | None], None]  # called once, from the worker thread
    whole: bool = False                  # run all rows in one call, with no other job's
    arrived: float = field(default_factory=time.monotonic)
    results: list = field(init=False)
    left: int = field(init=False)        # rows not answered yet
    finished: bool = False               # on_done was called (or the caller gave up: ``cancel``)

    def __post_init__(self):
        self.results = [None] * len(self.rows)
        self.left = len(self.rows)

    def cancel(self) -> None:
        """The caller no longer waits (its deadline passed): rows not yet run are dropped."""
        self.finished = True


@dataclass(frozen=True)
class Row:
    job: Job
    index: int
    length: int


class Batcher:
    """The worker: ``submit`` jobs from any thread; ``run(key, rows) -> results`` is called on the worker
    thread with the rows of one batch (all under ``key``) and returns one result per row, in order."""

    def __init__(self, run: Callable[[Hashable, list], list], *, max_batch_size: int, max_wait: float,
                 max_queue: int, length: Callable[[Any], int] = len,
                 on_batch: Callable[[int, float], None] = lambda size, seconds: None):
        self.run, self.length, self.on_batch = run, length, on_batch
        self.max_batch_size, self.max_wait, self.max_queue = max_batch_size, max_wait, max_queue
        self.waiting: list[Row] = []     # in arrival order
        self.condition = threading.Condition()
        self.closing = False
        self.idle_since: float | None = None  # when the worker began waiting with nothing queued
        self.free_since = 0.0                 # when the worker's last batch ended
        self.thread = threading.Thread(target=self.work, name="t2t-serve-batcher", daemon=True)

    def start(self) -> None:
        self.thread.start()

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    @property
    def depth(self) -> int:
        """Jobs with rows waiting to be run."""
        with self.condition:
            return len({id(row.job) for row in self.waiting})

    def submit(self, job: Job) -> None:
        """Queue ``job``; :class:`QueueFull` or :class:`Closed` where it cannot be. A job of no rows is
        answered at once."""
        if not job.rows:
            job.finished = True
            job.on_done([], None)
            return
        with self.condition:
            if self.closing:
                raise Closed
            if len({id(row.job) for row in self.waiting}) >= self.max_queue:
                raise QueueFull
            self.waiting.extend(Row(job, i, self.length(row)) for i, row in enumerate(job.rows))
            self.condition.notify()

    def close(self, timeout: float | None = None) -> None:
        """Take no more jobs; return once the waiting ones are answered (or ``timeout`` seconds passed)."""
        with self.condition:
            self.closing = True
            self.condition.notify()
        if self.thread.is_alive():
            self.thread.join(timeout)

    def work(self) -> None:
        while True:
            batch = self.next_batch()
            if batch is None:
                return
            self.run_batch(batch)
            self.free_since = time.monotonic()

    def next_batch(self) -> list[Row] | None:
        """The rows to run next (None once closed and empty), after waiting for company as the module says."""
        with self.condition:
            while True:
                self.drop_finished()
                if self.waiting:
                    first = self.waiting[0]
                    if first.job.whole:
                        return self.take([row for row in self.waiting if row.job is first.job])
                    left = max(first.job.arrived, self.free_since) + self.max_wait - time.monotonic()
                    if (self.closing or left <= 0 or self.compatible(first) >= self.max_batch_size
                            or self.found_idle(first)):
                        return self.take(self.length_window(first))
                    self.condition.wait(left)
                elif self.closing:
                    return None
                else:
                    self.idle_since = time.monotonic() if self.idle_since is None else self.idle_since
                    self.condition.wait()

    def found_idle(self, first: Row) -> bool:
        """Whether ``first``'s job is the only one waiting and found the worker idle: it runs at once, since
        waiting for company at idle only adds latency (under load rows gather while a batch runs)."""
        return (self.idle_since is not None and first.job.arrived >= self.idle_since
                and all(row.job is first.job for row in self.waiting))

    def drop_finished(self) -> None:
        """Drop the rows of cancelled jobs, and answer the jobs past their deadline with :class:`Expired`."""
        now = time.monotonic()
        for job in {id(row.job): row.job for row in self.waiting}.values():
            if not job.finished and now > job.deadline:
                self.finish(job, None, Expired())
        self.waiting = [row for row in self.waiting if not row.job.finished]

    def compatible(self, first: Row) -> int:
        return sum(1 for row in self.waiting if row.job.key == first.job.key and not row.job.whole)

    def length_window(self, first: Row) -> list[Row]:
        """Of the rows that may share ``first``'s batch, sorted by length, the ``max_batch_size`` consecutive
        ones holding ``first`` whose longest and shortest differ least."""
        rows = sorted((row for row in self.waiting if row.job.key == first.job.key and not row.job.whole),
                      key=lambda row: row.length)
        size = self.max_batch_size
        if len(rows) <= size:
            return rows
        at = rows.index(first)
        starts = range(max(0, at - size + 1), min(at, len(rows) - size) + 1)
        best = min(starts, key=lambda start: rows[start + size - 1].length - rows[start].length)
        return rows[best:best + size]

    def take(self, rows: list[Row]) -> list[Row]:
        self.idle_since = None
        taken = set(map(id, rows))
        self.waiting = [row for row in self.waiting if id(row) not in taken]
        return rows

    def run_batch(self, batch: list[Row]) -> None:
        """Run one batch and hand each row's result to its job; an exception fails the batch's jobs only."""
        started = time.perf_counter()
        try:
            results = self.run(batch[0].job.key, [row.job.rows[row.index] for row in batch])
        except Exception as error:  # noqa: BLE001 - whatever a batch raises, the worker serves the next
            for job in {id(row.job): row.job for row in batch}.values():
                self.finish(job, None, error)
            return
        self.on_batch(len(batch), time.perf_counter() - started)
        for row, result in zip(batch, results):
            job = row.job
            job.results[row.index] = result
            job.left -= 1
            if job.left == 0:
                self.finish(job, job.results, None)

    def finish(self, job: Job, results: list | None, error: BaseException | None) -> None:
        if job.finished:
            return
        job.finished = True
        try:
            job.on_done(results, error)
        except Exception:  # noqa: BLE001 - a caller's callback must not end the worker
            log.exception("answering a request failed")
