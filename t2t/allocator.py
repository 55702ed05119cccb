"""A command's CPU memory: glibc's malloc told to keep freed blocks for reuse instead of returning them.

glibc serves a large allocation (32 MB and up, and smaller ones once its threshold has adapted) with a fresh
mmap and unmaps it when it is freed, so the next activation of that size faults its pages in again, 4 KB at
a time: filling a new 32 MB tensor took 13 ms here, against 0.7 ms for one whose memory was reused. Training
and decoding free and reallocate such tensors at every step. Keeping every block in the heap makes training
steps faster by 5-20% for about 10% more peak memory, which the process then holds until it exits
(benchmarks/results/HISTORY.md, "Model"). tcmalloc (``LD_PRELOAD``) ran at the same speed; jemalloc with its defaults
was slower than glibc's. A Python caller that wants the system's malloc simply does not call this (commands
always do: ``t2t.cli.common.run_cli``).
"""

from __future__ import annotations

import ctypes

# mallopt's parameter numbers (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Serve every allocation from glibc's heap (no mmap'd blocks) and never give the heap's free top back
    to the OS. Returns whether glibc took both settings: False off glibc (macOS, musl)."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # the process's own symbols, libc's among them
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))
