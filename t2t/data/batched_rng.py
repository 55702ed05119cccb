"""``np.random.default_rng([*prefix, n]).random()`` for many ``n`` at once, bit for bit.

The mixture sampler picks each position's task with a generator seeded by ``(tag, seed, position)``, so that a
resumed or re-sharded stream sees the same mixture. Seeding one generator costs ~20 µs (a ``SeedSequence`` and
a ``PCG64``), which at T5's batch of 128 × 512 packed GLUE rows (~2,500 positions) was a third of the
pipeline's time. This module does the same arithmetic over an array of positions: numpy's ``SeedSequence``
(pool of 4 uint32 words, its hash and mix constants) in uint32 arrays, then ``PCG64``'s seeding (two 128-bit
LCG steps, each number a pair of uint64 arrays) and its first XSL-RR output, whose top 53 bits make the
double. The tests compare it with numpy's own generators; anything outside what it covers (entropy of more
than 4 words, a negative number) is left to numpy, one seed at a time.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

_MASK32, _MASK64 = (1 << 32) - 1, (1 << 64) - 1
_POOL = 4  # SeedSequence's default pool size (uint32 words)
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715
_PCG_MULT = 0x2360ED051FC65DA44385DF649FCCF645  # PCG's default 128-bit multiplier


def first_uniforms(prefix: Sequence[int], last: np.ndarray) -> np.ndarray:
    """``[np.random.default_rng([*prefix, int(n)]).random() for n in last]`` as a float64 array."""
    last = np.asarray(last, dtype=np.int64)
    words = [w for value in prefix for w in _uint32_words(int(value))] if min(prefix, default=0) >= 0 else None
    if words is None or len(words) + 1 > _POOL or last.size == 0 or last.min() < 0 or last.max() > _MASK32:
        return np.array([np.random.default_rng([*prefix, int(n)]).random() for n in last], dtype=np.float64)
    with np.errstate(over="ignore"):  # uint32 arithmetic wraps, as in numpy's C code
        state = _seed_sequence_state([*(np.full(last.shape, w, np.uint32) for w in words), last.astype(np.uint32)])
    return _pcg64_first_double(state)


def _uint32_words(value: int) -> list[int]:
    """numpy's split of a non-negative int seed into little-endian uint32 words (0 is one word)."""
    words = [0] if value == 0 else []
    while value:
        words.append(value & _MASK32)
        value >>= 32
    return words


def _seed_sequence_state(entropy: list[np.ndarray]) -> list[np.ndarray]:
    """``SeedSequence(entropy).generate_state(8, uint32)``, one column per seed (at most ``_POOL`` words)."""
    u32 = np.uint32
    hash_const = [_INIT_A]

    def hashmix(value):
        value = value ^ u32(hash_const[0])
        hash_const[0] = (hash_const[0] * _MULT_A) & _MASK32
        value = value * u32(hash_const[0])
        return value ^ (value >> u32(16))

    def mix(x, y):
        result = u32(_MIX_L) * x - u32(_MIX_R) * y
        return result ^ (result >> u32(16))

    zero = np.zeros_like(entropy[0])
    pool = [hashmix(entropy[i] if i < len(entropy) else zero) for i in range(_POOL)]
    for src in range(_POOL):
        for dst in range(_POOL):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    state, hash_b = [], _INIT_B
    for i in range(2 * _POOL):
        value = pool[i % _POOL] ^ u32(hash_b)
        hash_b = (hash_b * _MULT_B) & _MASK32
        value = value * u32(hash_b)
        state.append(value ^ (value >> u32(16)))
    return state


def _pcg64_first_double(state: list[np.ndarray]) -> np.ndarray:
    """``PCG64`` seeded with the 8 uint32 words (as 4 little-endian uint64: state high, low, increment high,
    low), then ``random()``: the first 64-bit output's top 53 bits over 2**53. 128-bit numbers are (high, low)
    pairs of uint64 arrays."""
    w = [state[2 * i].astype(np.uint64) | (state[2 * i + 1].astype(np.uint64) << np.uint64(32)) for i in range(4)]
    increment = (w[2] << np.uint64(1)) | (w[3] >> np.uint64(63)), (w[3] << np.uint64(1)) | np.uint64(1)
    lcg = _add128(increment, (w[0], w[1]))  # srandom: state 0, one step (0 * mult + inc), add the seed
    for _ in range(2):  # ... one more step; then next64(): step, and output the new state
        lcg = _add128(_times_pcg_mult(lcg), increment)
    high, low = lcg
    folded, rotation = high ^ low, high >> np.uint64(58)
    output = (folded >> rotation) | (folded << ((np.uint64(64) - rotation) & np.uint64(63)))
    return (output >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


_PCG_MULT_HIGH, _PCG_MULT_LOW = np.uint64(_PCG_MULT >> 64), np.uint64(_PCG_MULT & _MASK64)


def _add128(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    low = a[1] + b[1]
    return a[0] + b[0] + (low < a[1]).astype(np.uint64), low


def _times_pcg_mult(a: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``a * _PCG_MULT`` mod 2**128: the low words' full 128-bit product plus the cross terms' low 64 bits."""
    high, low = a
    return _high_product(low, _PCG_MULT_LOW) + low * _PCG_MULT_HIGH + high * _PCG_MULT_LOW, low * _PCG_MULT_LOW


def _high_product(x: np.ndarray, y: np.uint64) -> np.ndarray:
    """The high 64 bits of the 128-bit products ``x * y``, from 32-bit halves."""
    m32, s32 = np.uint64(_MASK32), np.uint64(32)
    x0, x1, y0, y1 = x & m32, x >> s32, y & m32, y >> s32
    cross_a, cross_b = x0 * y1, x1 * y0
    middle = ((x0 * y0) >> s32) + (cross_a & m32) + (cross_b & m32)
    return x1 * y1 + (cross_a >> s32) + (cross_b >> s32) + (middle >> s32)
