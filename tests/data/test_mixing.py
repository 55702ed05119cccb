"""Mixing rates (T5 §3.5.2) and the seeded, resumable sampler."""

import numpy as np
import pytest
from scipy import stats

from t2t.data.mixing import (
    FIXED,
    MixtureSampler,
    describe_rate,
    draw_rng,
    epoch_permutation,
    normalize_rates,
    rate_equal,
    rate_num_examples,
    rate_unsupervised,
    sampled_counts,
    stable_hash,
)
from t2t.errors import T2TError
from t2t.testing import in_memory_task


def _task(n):
    return in_memory_task(f"t{n}", {"train": [{"inputs": "x", "targets": "y"}] * n})


def test_rate_num_examples_limit_temperature_scale():
    assert rate_num_examples()(_task(300)) == 300
    assert rate_num_examples(maximum=100)(_task(300)) == 100
    assert rate_num_examples(maximum=1000)(_task(300)) == 300
    assert rate_num_examples(temperature=2.0)(_task(400)) == pytest.approx(20.0)
    assert rate_num_examples(maximum=100, temperature=2.0)(_task(400)) == pytest.approx(10.0)
    assert rate_num_examples(scale=0.5)(_task(300)) == 150
    with pytest.raises(T2TError):
        rate_num_examples(temperature=0)
    assert rate_unsupervised()(_task(1)) == 1e6 and rate_equal()(_task(5)) == 1.0


def test_normalize_rates_drops_zero_rates():
    assert normalize_rates({"a": 1, "b": 3, "c": 0}) == {"a": 0.25, "b": 0.75}
    with pytest.raises(T2TError, match="nothing to sample"):
        normalize_rates({"a": 0})


def test_sampled_frequencies_match_rates():
    rates = {"a": 1.0, "b": 3.0, "c": 6.0, "d": 0.5}
    n = 40_000
    counts = sampled_counts(rates, n, seed=123)
    total = sum(rates.values())
    expected = [n * rates[k] / total for k in rates]
    observed = [counts[k] for k in rates]
    assert stats.chisquare(observed, expected).pvalue > 1e-3
    for k, e in zip(rates, expected):
        p = rates[k] / total
        assert abs(counts[k] - e) < 4 * np.sqrt(n * p * (1 - p)), k


def test_stream_is_a_pure_function_of_seed_and_position():
    rates = {"a": 1.0, "b": 1.0, "c": 2.0}
    sampler = MixtureSampler(rates, seed=7)
    stream = [sampler.next_task() for _ in range(500)]
    # position p draws task_at(p), whatever was drawn before; the counter counts that task's earlier draws
    fresh = MixtureSampler(rates, seed=7)
    assert [name for name, _ in stream] == [fresh.task_at(p) for p in reversed(range(500))][::-1]  # any order
    assert [count for _, count in stream] == [[n for n, _ in stream[:p]].count(name) for p, (name, _) in
                                              enumerate(stream)]
    # recorded: a change to the draw would silently change every resumed run's data
    assert "".join(name for name, _ in stream[:30]) == "bccbccabacabcbccccacaccbccacac"
    other = MixtureSampler(rates, seed=8)
    assert [other.next_task()[0] for _ in range(200)] != [name for name, _ in stream[:200]]


@pytest.mark.parametrize("rates", [{"a": 1.0, "b": 1.0, "c": 2.0}, {"only": 1.0}])
def test_looking_ahead_tells_the_tasks_and_counters_that_next_task_gives(rates):
    """``ahead(n)`` (across the sampler's blocks of positions) leaves the sampler where it was, and gives what n
    calls of ``next_task`` give; ``advance`` moves exactly as far."""
    sampler, reference = MixtureSampler(rates, seed=5), MixtureSampler(rates, seed=5)
    for n in (700, 1, 2500, 300):  # 0 … 3500: three block boundaries crossed, one run longer than a block
        tasks, counts = sampler.ahead(n)
        assert sampler.position == reference.position and sampler.counters == reference.counters
        assert [(sampler.names[t], c) for t, c in zip(tasks.tolist(), counts.tolist())] == \
            [reference.next_task() for _ in range(n)]
        sampler.advance(tasks)
        assert sampler.state_dict() == reference.state_dict()


def test_sampler_resume():
    rates = {"a": 2.0, "b": 1.0}
    sampler = MixtureSampler(rates, seed=1)
    for _ in range(37):
        sampler.next_task()
    state = sampler.state_dict()
    expected = [sampler.next_task() for _ in range(100)]
    resumed = MixtureSampler(rates, seed=1)
    resumed.load_state_dict(state)
    assert [resumed.next_task() for _ in range(100)] == expected
    with pytest.raises(T2TError, match="same mixture and seed"):
        MixtureSampler(rates, seed=2).load_state_dict(state)


def test_epoch_permutations():
    first, second = epoch_permutation(0, "task", 0, 50), epoch_permutation(0, "task", 1, 50)
    assert sorted(first) == list(range(50)) and sorted(second) == list(range(50))
    assert list(first) != list(second)
    assert list(first) == list(epoch_permutation(0, "task", 0, 50))
    assert list(first) != list(epoch_permutation(0, "other", 0, 50))


def test_draw_rng_and_stable_hash_are_recorded_values():
    # recorded values: the draws must not change between processes, machines or versions (exact resume)
    assert stable_hash("glue_stsb_v002") == 6322813207034396422
    assert draw_rng(0, "t", 1, 2).random() == 0.29304340031151654
    # every argument enters the seed
    draws = {draw_rng(*args).random() for args in [(0, "t", 1, 2), (1, "t", 1, 2), (0, "u", 1, 2),
                                                   (0, "t", 2, 2), (0, "t", 1, 3)]}
    assert len(draws) == 5


def test_rates_are_described_as_a_user_writes_them():
    def my_rate(task):
        return 2.0

    assert describe_rate(rate_num_examples()) == "examples-proportional"
    assert describe_rate(rate_num_examples(maximum=2 ** 19)) == "examples-proportional, K=2^19"
    assert describe_rate(rate_num_examples(maximum=524288.0, temperature=2)) == \
        "examples-proportional, K=2^19, temperature 2.0"
    assert describe_rate(rate_num_examples(maximum=1e5, num_examples=300, scale=0.5)) == \
        "examples-proportional, K=100000"  # a written-down size and a scale are the task's value, not the strategy
    assert describe_rate(rate_num_examples(split="validation")) == "examples-proportional, sizes of split 'validation'"
    assert describe_rate(1.0) == describe_rate(rate_unsupervised()) == FIXED
    assert describe_rate(my_rate) == "my_rate"
