"""benchmarks/timing.py's paired speed: each round's ratio, so that a machine's drift between rounds, which
moves the ratio of medians, leaves it alone."""

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from timing import alternate, paired_speed  # noqa: E402


def test_paired_speed_takes_each_rounds_ratio_where_the_ratio_of_medians_is_moved_by_drift():
    # "fast" takes 0.8 of "base"'s time in every round but one, where "base" caught a hiccup; the machine slows
    # 3x for the last two rounds: the medians land in different regimes, the rounds' ratios do not
    base, fast = [1.0, 1.5, 1.0, 3.0, 3.0], [0.8, 0.8, 0.8, 2.4, 2.4]
    results = {"base": {"wall_all": base}, "fast": {"wall_all": fast}}
    assert paired_speed(results, "base", "fast") == 1.25
    assert paired_speed(results, "base", "base") == 1.0
    assert statistics.median(base) / statistics.median(fast) == 1.875


def test_alternate_keeps_each_rounds_time_in_round_order_for_the_pairing():
    calls = {"a": 0}

    def slower_each_call():  # its k-th timed call takes k times "b"'s time
        calls["a"] += 1
        time.sleep(0.05 * calls["a"])

    results = alternate({"a": slower_each_call, "b": lambda: time.sleep(0.05)}, reps=3, warmup=0)
    a = results["a"]["wall_all"]
    assert a[0] < 0.075 < a[1] < 0.125 < a[2]  # 0.05, 0.1, 0.15 s: the rounds in order
    assert 1.5 < paired_speed(results, "a", "b") < 2.5  # the middle round's 2x
