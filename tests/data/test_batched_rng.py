"""``first_uniforms``: numpy's ``default_rng([*prefix, n]).random()`` for many ``n`` at once, bit for bit."""

import numpy as np
import pytest

from t2t.data.batched_rng import first_uniforms
from t2t.data.mixing import MixtureSampler, position_uniforms


def _numpy(prefix, last):
    return np.array([np.random.default_rng([*prefix, int(n)]).random() for n in last])


@pytest.mark.parametrize("prefix", [[1, 0], [1, 7], [3, 2**32 - 1], [1, 2**32], [1, 2**40 + 5], [0], []])
def test_equal_to_numpys_generators_bit_for_bit(prefix):
    # 0 and 2**32 - 1 are the ends of one uint32 word; a seed of 2**32 and more takes two words
    last = np.array([0, 1, 2, 1023, 1024, 65_537, 2**31, 2**32 - 1] + list(range(10_000, 10_300)))
    assert np.array_equal(first_uniforms(prefix, last), _numpy(prefix, last))


@pytest.mark.parametrize("prefix, last", [([1, 2**64 + 3], [0, 5]),  # 1 + 3 + 1 words: more than the pool
                                          ([1, 0], [2**32, 2**33 + 9])])  # a position of two words
def test_beyond_the_vectorized_case_numpy_draws_them(prefix, last):
    assert np.array_equal(first_uniforms(prefix, np.array(last)), _numpy(prefix, last))


def test_a_negative_seed_is_numpys_error():
    with pytest.raises(ValueError):
        np.random.default_rng([1, -1, 0])
    with pytest.raises(ValueError):
        first_uniforms([1, -1], np.array([0, 1]))


def test_the_sampler_draws_blocks_as_it_drew_positions_one_by_one():
    seed, start = 11, MixtureSampler.BLOCK - 3  # a stretch across a block boundary
    one_by_one = [np.random.default_rng([1, seed, p]).random() for p in range(start, start + 6)]  # 1: the tag
    assert position_uniforms(seed, start, 6).tolist() == one_by_one
    rates = {"a": 1.0, "b": 2.0, "c": 0.5}
    sampler = MixtureSampler(rates, seed=seed)
    tasks = ["abc"[int(np.searchsorted(sampler.cumulative, u, side="right"))] for u in one_by_one]
    assert [sampler.task_at(p) for p in range(start, start + 6)] == tasks
