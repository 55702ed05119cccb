"""Whether output goes to a terminal, and what that changes: progress bars draw only there, and elsewhere
long work prints plain progress lines; and Ctrl-C, which stops a command wherever it lands.

Light on purpose (the standard library only): the commands install their Ctrl-C handler from here before
they import torch, which takes seconds.
"""

import os
import signal
import sys
import threading
import time

INTERRUPTED = threading.Event()  # set by Ctrl-C in a command's own process (stop_on_interrupt)


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
    minutes, seconds = divmod(int(max(total - done, 0) * elapsed / done), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes:02d}:{seconds:02d}"


def stop_on_interrupt() -> None:
    """Ctrl-C (SIGINT) in a command's own process: the first raises KeyboardInterrupt, as Python's handler
    does, and is remembered in ``INTERRUPTED``, so that a library that swallows the exception (a broad
    ``except``, a ``__del__``) cannot make the command carry on: the training loop and the command's end
    check it (``raise_if_interrupted``). One that lands in a ``__del__`` is not reported as "Exception
    ignored" with its traceback. A second one while the first is handled ends the process at once."""
    signal.signal(signal.SIGINT, on_interrupt)
    sys.unraisablehook = report_unraisable_but_interrupts


def report_unraisable_but_interrupts(unraisable) -> None:
    """Python's report of an exception it cannot raise (in a ``__del__``, a weakref callback), but for
    KeyboardInterrupt: INTERRUPTED has it, and the command ends with its one line."""
    if not issubclass(unraisable.exc_type, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)


def defer_interrupts() -> None:
    """Ctrl-C only remembered (``INTERRUPTED``), for while a command imports its modules: a KeyboardInterrupt
    raised inside torch's import aborts the process from C++ (pybind11), or leaves numpy half-imported. A
    second one ends the process at once."""
    signal.signal(signal.SIGINT, remember_interrupt)


def on_interrupt(signum: int, frame) -> None:
    remember_interrupt(signum, frame)
    raise KeyboardInterrupt


def remember_interrupt(signum: int, frame) -> None:
    if INTERRUPTED.is_set():
        print("interrupted again: stopped.", file=sys.stderr, flush=True)
        os._exit(130)  # the first one's clean-up, or the wait for it to take effect, is what is interrupted
    INTERRUPTED.set()


def raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt if Ctrl-C was pressed, though whatever its KeyboardInterrupt reached swallowed it."""
    if INTERRUPTED.is_set():
        raise KeyboardInterrupt


def report_interrupt(resumable: bool) -> int:
    """The one line a command ends with when interrupted, and its exit status (130, as shells report Ctrl-C)."""
    print("interrupted; run the same command again to resume from the last checkpoint." if resumable
          else "interrupted.", file=sys.stderr, flush=True)
    return 130


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
