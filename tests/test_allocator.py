"""t2t.allocator: with freed memory kept, a large tensor allocated again reuses pages instead of faulting in
new ones; commands apply it, in-process calls with arguments do not."""

import platform
import subprocess
import sys

import pytest

from t2t.cli import common

# Five 64 MB tensors made and freed in turn, and the minor page faults they cost, after twenty more have
# let the heap settle (freed blocks sit between small live ones, and an aligned request a little larger than
# a freed block does not fit in it, so the heap first grows by a few blocks: 7 here).
FAULTS = """
import resource, sys, torch
from t2t.allocator import keep_freed_memory
took = keep_freed_memory() if sys.argv[1] == "keep" else False
for _ in range(20):
    x = torch.ones(2**24); del x
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    x = torch.ones(2**24); del x
print(took, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
PAGES_PER_TENSOR = 2**26 // 4096


def faults(malloc: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", FAULTS, malloc], capture_output=True, text=True, check=True)
    took, count = out.stdout.split()
    return took, int(count)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_kept_memory_is_reused_without_page_faults(monkeypatch):
    monkeypatch.delenv("MALLOC_MMAP_MAX_", raising=False)
    took, kept = faults("keep")
    assert took == "True"
    assert kept < PAGES_PER_TENSOR // 10  # five tensors, not one tensor's worth of faults
    # the control: the system's malloc unmaps each tensor, and each new one faults its pages in again
    took, system = faults("system")
    assert took == "False"
    assert system >= 10 * max(kept, 1)  # 4 KB pages: 5 × 16,384 faults (fewer where huge pages back it)


def test_a_command_keeps_freed_memory_and_an_in_process_call_does_not(monkeypatch):
    calls = []
    monkeypatch.setattr(common, "keep_freed_memory", lambda: calls.append(1))
    main = common.run_cli(lambda argv: 0)
    main(["--help-free-arguments"])
    assert calls == []
    main()
    assert calls == [1]
