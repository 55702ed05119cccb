"""The dynamic batcher on its own (no model): which rows share a batch, and that every job gets its own rows'
answers whatever happens to the others."""

import threading
import time

import pytest

from t2t.serve.batcher import Batcher, Closed, Expired, Job, QueueFull


class Recorder:
    """A ``run`` that records each batch and answers each row with (key, row), optionally blocking or failing."""

    def __init__(self, fail_on=None):
        self.batches, self.fail_on = [], fail_on
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, key, rows):
        self.gate.wait(10)
        self.batches.append((key, list(rows)))
        if self.fail_on is not None and self.fail_on in rows:
            raise RuntimeError("boom")
        return [(key, row) for row in rows]


def job(rows, key="greedy", deadline=60.0, whole=False):
    done = threading.Event()
    answer = {}

    def on_done(results, error):
        answer.update(results=results, error=error)
        done.set()
    made = Job(list(rows), key, deadline=time.monotonic() + deadline, on_done=on_done, whole=whole)
    made.done, made.answer = done, answer
    return made


def batcher(run, **kwargs):
    settings = dict(max_batch_size=4, max_wait=0.05, max_queue=8, length=len)
    return Batcher(run, **{**settings, **kwargs})


def test_rows_of_several_requests_share_a_batch_and_each_gets_its_own_answers():
    run = Recorder()
    b = batcher(run, max_wait=0.3)
    jobs = [job(["aa", "b"]), job(["ccc"]), job(["d"])]
    for j in jobs:
        b.submit(j)
    b.start()
    for j in jobs:
        assert j.done.wait(10)
    b.close()
    assert len(run.batches) == 1 and sorted(run.batches[0][1]) == ["aa", "b", "ccc", "d"]
    assert [j.answer["results"] for j in jobs] == [[("greedy", "aa"), ("greedy", "b")], [("greedy", "ccc")],
                                                  [("greedy", "d")]]


def test_a_batch_holds_at_most_max_batch_size_rows_grouped_by_length_and_the_oldest_goes_first():
    run = Recorder()
    b = batcher(run, max_batch_size=3)
    lengths = [5, 1, 9, 2, 8, 1, 7]
    jobs = [job(["x" * n]) for n in lengths]
    for j in jobs:
        b.submit(j)
    b.start()
    for j in jobs:
        assert j.done.wait(10)
    b.close()
    batches = [sorted(len(row) for row in rows) for _, rows in run.batches]
    assert all(len(rows) <= 3 for rows in batches)
    assert batches[0] == [5, 7, 8]  # holds the oldest row (5) and spans the fewest tokens around it
    assert sorted(n for rows in batches for n in rows) == sorted(lengths)


def test_only_rows_with_the_same_key_share_a_batch_and_a_whole_job_runs_alone():
    run = Recorder()
    b = batcher(run, max_batch_size=8, max_wait=0.2)
    jobs = [job(["a"], "greedy"), job(["b"], "beam4"), job(["c"], "greedy"), job(["d", "e"], "sample", whole=True),
            job(["f"], "sample", whole=True)]
    for j in jobs:
        b.submit(j)
    b.start()
    for j in jobs:
        assert j.done.wait(10)
    b.close()
    assert sorted((key, sorted(rows)) for key, rows in run.batches) == [
        ("beam4", ["b"]), ("greedy", ["a", "c"]), ("sample", ["d", "e"]), ("sample", ["f"])]


def test_a_request_at_an_idle_worker_runs_at_once_and_those_arriving_during_a_batch_gather():
    run = Recorder()
    run.gate.clear()
    b = batcher(run, max_wait=1.0)  # a wait for company would show
    b.start()
    time.sleep(0.05)  # the worker is idle
    started = time.monotonic()
    lone = job(["lone"])
    b.submit(lone)
    while b.depth:  # taken at once, though nothing else came
        assert time.monotonic() - started < 0.5
        time.sleep(0.005)
    gathered = [job(["a"]), job(["bb"])]
    for j in gathered:
        b.submit(j)
    run.gate.set()
    for j in (lone, *gathered):
        assert j.done.wait(10)
    b.close()
    assert [rows for _, rows in run.batches] == [["lone"], ["a", "bb"]]


def test_a_full_queue_refuses_and_a_closed_batcher_refuses():
    run = Recorder()
    run.gate.clear()  # the worker blocks in its first batch
    b = batcher(run, max_queue=2, max_wait=0)
    b.start()
    first = job(["running"])
    b.submit(first)
    while not b.depth == 0:  # the worker took it
        time.sleep(0.01)
    b.submit(job(["a"]))
    b.submit(job(["b"]))
    with pytest.raises(QueueFull):
        b.submit(job(["c"]))
    run.gate.set()
    b.close()
    with pytest.raises(Closed):
        b.submit(job(["d"]))


def test_a_failing_batch_fails_its_own_jobs_and_the_worker_serves_the_next():
    run = Recorder(fail_on="bad")
    b = batcher(run, max_batch_size=2, max_wait=0)
    bad, good = job(["bad"]), job(["good"])
    b.start()
    b.submit(bad)
    assert bad.done.wait(10)
    b.submit(good)
    assert good.done.wait(10)
    b.close()
    assert isinstance(bad.answer["error"], RuntimeError) and bad.answer["results"] is None
    assert good.answer == {"results": [("greedy", "good")], "error": None}


def test_a_job_past_its_deadline_is_not_run_and_a_cancelled_one_is_dropped():
    run = Recorder()
    run.gate.clear()
    b = batcher(run, max_wait=0)
    b.start()
    blocker = job(["blocker"])
    b.submit(blocker)
    while b.depth:
        time.sleep(0.01)
    late, cancelled, fine = job(["late"], deadline=0.05), job(["cancelled"]), job(["fine"])
    for j in (late, cancelled, fine):
        b.submit(j)
    cancelled.cancel()
    time.sleep(0.1)
    run.gate.set()
    assert late.done.wait(10) and fine.done.wait(10)
    b.close()
    assert isinstance(late.answer["error"], Expired)
    assert not cancelled.done.is_set()
    assert [rows for _, rows in run.batches] == [["blocker"], ["fine"]]


def test_close_answers_every_waiting_job_before_returning():
    run = Recorder()
    run.gate.clear()
    b = batcher(run, max_batch_size=2, max_wait=30.0)  # without the drain they would wait 30 s for company
    b.start()
    jobs = [job([f"r{i}"]) for i in range(5)]
    for j in jobs:
        b.submit(j)
    closer = threading.Thread(target=b.close)
    started = time.monotonic()
    closer.start()
    run.gate.set()
    closer.join(10)
    assert not b.alive and time.monotonic() - started < 5
    assert all(j.done.is_set() and j.answer["error"] is None for j in jobs)
