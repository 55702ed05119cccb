"""How the benchmarks time a call: wall and process-CPU seconds with the device synchronized around it, and
several variants measured in alternation (the order reversed every other round), so that a slow or fast turn
of a shared machine falls on all of them alike."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def sync(device: torch.device | None) -> None:
    """Wait for the work queued on a CUDA ``device`` (nothing elsewhere)."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable, device: torch.device | None = None) -> tuple[float, float, object]:
    """Wall and process-CPU seconds of one call of ``fn``, with ``device`` synchronized before and after, and
    what the call returned."""
    sync(device)
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    sync(device)
    return time.perf_counter() - wall, time.process_time() - cpu, out


def alternate(fns: dict[str, Callable], reps: int, warmup: int = 2, device: torch.device | None = None,
              yardstick: Callable | None = None) -> dict[str, dict]:
    """Each function ``warmup`` times (compiling, filling caches), then ``reps`` rounds of one call each in
    alternating order. Per function: the median and minimum wall time, the median CPU time and every round's
    wall time (``wall_all``). With ``yardstick`` (a function returning the machine's rate now), it is called
    after every round and each result carries the list of those rates (``yardsticks``)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    names, rates = list(fns), []
    wall, cpu = {name: [] for name in names}, {name: [] for name in names}
    for rep in range(reps):
        for name in (names if rep % 2 == 0 else names[::-1]):
            w, c, _ = timed(fns[name], device)
            wall[name].append(w)
            cpu[name].append(c)
        if yardstick is not None:
            rates.append(yardstick())
    return {name: {"wall_s": statistics.median(wall[name]), "wall_min_s": min(wall[name]),
                   "cpu_s": statistics.median(cpu[name]), "wall_all": [round(x, 6) for x in wall[name]],
                   **({"yardsticks": rates} if rates else {})}
            for name in names}


def paired_speed(results: dict[str, dict], base: str, name: str) -> float:
    """The median over rounds of ``base``'s time over ``name``'s in the same round of ``alternate``'s
    ``results``: a speed ratio that the machine's drift between rounds moves much less than the ratio of
    medians does (a round's calls follow one another within seconds)."""
    return statistics.median(b / t for b, t in zip(results[base]["wall_all"], results[name]["wall_all"]))
