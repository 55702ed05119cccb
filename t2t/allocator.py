"""A command's CPU memory: glibc's malloc told to keep freed blocks for reuse instead of returning them.

glibc serves a large allocation (32 MB and up, and smaller ones once its threshold has adapted) with a fresh
mmap and unmaps it when it is freed, so the next activation of that size faults its pages in again, 4 KB at
a time: filling a new 32 MB tensor took 13 ms here, against 0.7 ms for one whose memory was reused. Training
and decoding free and reallocate such tensors at every step. With every block kept in the heap (t5-small,
AMD EPYC, 2 threads, fp32, benchmarks/bench_model.py with and without): a training step of 8 × 128→16 took
0.612 s instead of 0.642 s, of 4 × 512→114 1.745 s instead of 2.163 s, greedy decoding of 32 × 128→32 1.024 s
instead of 1.053 s; training's peak memory grew by 10% (2.84 → 3.12 GB at 4 × 512→114), and the process holds
its peak until it exits. tcmalloc (``LD_PRELOAD``) ran at the same speed; jemalloc with its defaults was
slower than glibc's.
"""

from __future__ import annotations

import ctypes
import os

# mallopt's parameter numbers (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
OPT_OUT = "T2T_SYSTEM_MALLOC"  # set to 1: leave malloc as the system configures it


def keep_freed_memory() -> bool:
    """Serve every allocation from glibc's heap (no mmap'd blocks) and never give the heap's free top back
    to the OS. Returns whether glibc took both settings: False off glibc (macOS, musl), or when the
    environment sets ``T2T_SYSTEM_MALLOC=1``."""
    if os.environ.get(OPT_OUT) == "1":
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # the process's own symbols, libc's among them
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))
