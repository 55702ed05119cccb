"""Whether output goes to a terminal, and what that changes: progress bars draw only there, and elsewhere
long work prints plain progress lines."""

import os
import sys
import time

from tqdm.auto import tqdm


def on_terminal() -> bool:
    """Whether stderr (where progress bars draw) is a terminal; in a log file or a pipe a bar's carriage
    returns and cursor moves (``ESC[A``) are noise."""
    return sys.stderr.isatty()


def disable_progress_bars_off_terminal() -> None:
    """Turn off the bars of ``datasets`` and ``huggingface_hub`` when stderr is not a terminal (the CLIs call
    this first; the libraries read these variables when they are imported)."""
    if not on_terminal():
        os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def eta(done: int, total: int, elapsed: float) -> str:
    """The time left for ``total - done`` more at the rate of the ``done`` in ``elapsed`` seconds, as tqdm
    shows it (``MM:SS``, ``H:MM:SS``); ``?`` before anything is done."""
    if done <= 0:
        return "?"
    return tqdm.format_interval(max(total - done, 0) * elapsed / done)


class ProgressLines:
    """Progress where bars do not draw (a log file, a pipe): a line every ``every`` seconds until the work is
    done, with how far, how fast and the ETA; on a terminal, nothing (the bar shows it)."""

    def __init__(self, desc: str, total: int, unit: str, every: float = 30.0, enabled: bool = True):
        self.desc, self.total, self.unit, self.every = desc, total, unit, every
        self.enabled = enabled and not on_terminal()
        self.done, self.start = 0, time.perf_counter()
        self.shown = self.start

    def update(self, n: int) -> None:
        self.done += n
        now = time.perf_counter()
        if self.enabled and now - self.shown >= self.every and self.done < self.total:
            self.shown = now
            elapsed = now - self.start
            print(f"{self.desc}: {self.done:,} of {self.total:,} {self.unit}, "
                  f"{self.done / max(elapsed, 1e-9):,.1f} {self.unit}/s, ETA {eta(self.done, self.total, elapsed)}",
                  file=sys.stderr, flush=True)
