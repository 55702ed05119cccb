"""BatchesAhead: batches prepared on a background thread are the stream's own batches, in its order, and its
state is the consumer's, so a run resumes exactly whether or not batches were produced ahead."""

import time

import numpy as np
import pytest
import torch

from t2t.data.pipeline import build_train_batches
from t2t.data.prefetch import BatchesAhead
from t2t.data.task import Mixture
from t2t.testing import in_memory_task, temporarily_registered, tiny_vocabulary


def rows(n, tag):
    rng = np.random.default_rng(n)
    return [{"inputs": f"{tag} {i} " + "word " * int(rng.integers(1, 12)), "targets": f"answer {i % 5}"}
            for i in range(n)]


@pytest.fixture
def mixture():
    a, b = in_memory_task("ahead_a", {"train": rows(23, "alpha")}), in_memory_task("ahead_b", {"train": rows(41, "beta")})
    with temporarily_registered(a, b, Mixture("ahead_mix", [("ahead_a", 1.0), ("ahead_b", 2.0)])):
        yield "ahead_mix"


def stream(name):
    return build_train_batches(name, vocab=tiny_vocabulary(), batch_size=4, input_length=48, target_length=16,
                               pack=True, seed=5)


def take(batches, n):
    return [batches.next_batch() for _ in range(n)]


def same(xs, ys):
    return len(xs) == len(ys) and all(x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
                                      for x, y in zip(xs, ys))


def test_batches_ahead_are_the_streams_batches_in_order(mixture):
    ahead = BatchesAhead(stream(mixture), depth=3)
    assert same(take(ahead, 25), take(stream(mixture), 25))
    ahead.close()


def test_state_is_after_the_last_batch_taken_and_resumes_exactly(mixture):
    plain, ahead = stream(mixture), BatchesAhead(stream(mixture), depth=3)
    take(plain, 7), take(ahead, 7)
    deadline = time.monotonic() + 10
    while ahead.batches.state_dict() == plain.state_dict() and time.monotonic() < deadline:
        time.sleep(0.01)  # until the producer has made batches ahead
    assert ahead.batches.state_dict() != plain.state_dict()
    assert ahead.state_dict() == plain.state_dict()  # the consumer's state, not the producer's
    resumed = BatchesAhead(stream(mixture))
    resumed.load_state_dict(ahead.state_dict())
    assert same(take(resumed, 10), take(plain, 10))
    assert same(take(ahead, 10), take(stream_after(mixture, 7), 10))
    ahead.close(), resumed.close()


def stream_after(name, n):
    batches = stream(name)
    take(batches, n)
    return batches


class FailingStream:
    """A stream whose third batch cannot be made."""

    def __init__(self):
        self.made = 0

    def next_batch(self):
        self.made += 1
        if self.made == 3:
            raise OSError("disk went away")
        return {"batch": torch.tensor([self.made])}

    def state_dict(self):
        return {"made": self.made}

    def load_state_dict(self, state):
        self.made = state["made"]


def test_a_producer_failure_is_raised_at_the_batch_it_belongs_to():
    ahead = BatchesAhead(FailingStream(), depth=2)
    assert [int(ahead.next_batch()["batch"]) for _ in range(2)] == [1, 2]
    with pytest.raises(OSError, match="disk went away"):
        ahead.next_batch()
