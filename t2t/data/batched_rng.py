"""``np.random.default_rng([*prefix, n]).random()`` for many ``n`` at once, bit for bit.

The mixture sampler picks each position's task with a generator seeded by ``(tag, seed, position)``, so that a
resumed or re-sharded stream sees the same mixture. Seeding one generator costs ~20 µs (a ``SeedSequence`` and
a ``PCG64``), which at T5's batch of 128 × 512 packed GLUE rows (~2,500 positions) was a third of the
pipeline's time. This module does the same arithmetic over an array of positions: numpy's ``SeedSequence``
(pool of 4 uint32 words, its hash and mix constants) in uint32 arrays, then ``PCG64``'s seeding (two 128-bit
LCG steps) and its first XSL-RR output, whose top 53 bits make the double. The tests compare it with numpy's
own generators; anything outside what it covers (entropy of more than 4 words, a negative number) is left
to numpy, one seed at a time.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

_MASK32, _MASK64, _MASK128 = (1 << 32) - 1, (1 << 64) - 1, (1 << 128) - 1
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
    low), then ``random()``: the first 64-bit output's top 53 bits over 2**53. 128-bit math in Python ints."""
    w = [state[2 * i].astype(object) | (state[2 * i + 1].astype(object) << 32) for i in range(4)]
    init_state, increment = (w[0] << 64) | w[1], (((w[2] << 64) | w[3]) << 1 | 1) & _MASK128
    lcg = (increment + init_state) & _MASK128  # srandom: state 0, one step (0 * mult + inc), add the seed
    lcg = (lcg * _PCG_MULT + increment) & _MASK128  # ... one more step
    lcg = (lcg * _PCG_MULT + increment) & _MASK128  # next64(): step, then output the new state
    folded, rotation = (lcg >> 64) ^ (lcg & _MASK64), lcg >> 122
    output = ((folded >> rotation) | (folded << ((64 - rotation) & 63))) & _MASK64
    return (output >> 11).astype(np.float64) * (1.0 / (1 << 53))
