"""The command-line tools: one module per command, each with ``parser()`` and its ``<command>_main``.

The console scripts of setup.cfg name the entry points here, which import their command's module only when
called, with Ctrl-C deferred until that is done (t2t.terminal): importing torch takes a second or more, and
Ctrl-C then must end the command with one line too, not a traceback or an abort inside torch.
"""

import importlib

from t2t.terminal import INTERRUPTED, defer_interrupts, report_interrupt

COMMANDS = {"t2t-train": "train", "t2t-eval": "eval", "t2t-predict": "predict", "t2t-show": "show",
            "t2t-tasks": "tasks", "t2t-vocab": "vocab", "t2t-study": "study", "t2t-export": "export",
            "t2t-serve": "serve", "t2t-cache": "cache"}


def command_module(command: str):
    """The module of ``command``: ``t2t-train`` → t2t.cli.train."""
    return importlib.import_module(f"t2t.cli.{COMMANDS[command]}")


def entry_point(command: str):
    """``command``'s main(argv=None). Run as the process's command (``argv`` None), a Ctrl-C while the command's
    module (and torch) is imported ends it once that is done; from there its run_cli handles Ctrl-C."""
    def main(argv: list[str] | None = None) -> int:
        if argv is None:
            defer_interrupts()
        command_main = getattr(command_module(command), f"{COMMANDS[command]}_main")
        if INTERRUPTED.is_set():
            return report_interrupt(resumable=False)
        return command_main(argv)
    main.__name__ = main.__qualname__ = f"{COMMANDS[command]}_main"
    return main


train_main = entry_point("t2t-train")
eval_main = entry_point("t2t-eval")
predict_main = entry_point("t2t-predict")
show_main = entry_point("t2t-show")
tasks_main = entry_point("t2t-tasks")
vocab_main = entry_point("t2t-vocab")
study_main = entry_point("t2t-study")
export_main = entry_point("t2t-export")
serve_main = entry_point("t2t-serve")
cache_main = entry_point("t2t-cache")

__all__ = ["train_main", "eval_main", "predict_main", "show_main", "tasks_main", "vocab_main", "study_main",
           "export_main", "serve_main", "cache_main", "COMMANDS", "command_module"]
