"""Whether output goes to a terminal, and what that changes: progress bars draw only there."""

import os
import sys


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
