"""The command-line tools, one function per console script (setup.cfg's entry points name them here)."""

from t2t.cli.main import (eval_main, export_main, predict_main, show_main, study_main, tasks_main, train_main,
                          vocab_main)

__all__ = ["train_main", "eval_main", "predict_main", "show_main", "tasks_main", "vocab_main", "study_main",
           "export_main"]
