"""The command-line tools: one module per command, each with ``parser()`` and its ``<command>_main`` (the
console scripts of setup.cfg name these), built on ``t2t.cli.common``."""

from t2t.cli import eval, export, predict, show, study, tasks, train, vocab
from t2t.cli.eval import eval_main
from t2t.cli.export import export_main
from t2t.cli.predict import predict_main
from t2t.cli.show import show_main
from t2t.cli.study import study_main
from t2t.cli.tasks import tasks_main
from t2t.cli.train import train_main
from t2t.cli.vocab import vocab_main

COMMANDS = {"t2t-train": train, "t2t-eval": eval, "t2t-predict": predict, "t2t-show": show, "t2t-tasks": tasks,
            "t2t-vocab": vocab, "t2t-study": study, "t2t-export": export}

__all__ = ["train_main", "eval_main", "predict_main", "show_main", "tasks_main", "vocab_main", "study_main",
           "export_main", "COMMANDS"]
