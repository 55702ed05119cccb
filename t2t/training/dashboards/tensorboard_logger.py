"""``loggers: [tensorboard]``: each record's values as TensorBoard scalars in ``RUN/tensorboard``, as t5x writes
its summaries by default (``tensorboard --logdir RUN/tensorboard``, or the runs' parent folder to compare runs).

Tags are metrics.jsonl's keys (``loss``, ``learning_rate``, ``tokens_per_second``, ``data_wait_share``,
``eval/<task>/<metric>``, ...), so one name means one thing everywhere; TensorBoard stores them as float32. The
settings go in once, as text (as transformers' TensorBoardCallback writes its arguments). A resumed run
writes a new event file that opens with ``purge_step`` one past the checkpoint's step: TensorBoard's reader
then drops what the stopped run logged after that checkpoint, and the resumed run's steps take their place.
"""

from __future__ import annotations

import json

from t2t.training.dashboards.base import import_extra, require_package, scalars
from t2t.training.loggers import LoggedRun, MetricsLogger, register_logger

FOLDER = "tensorboard"


class TensorBoardLogger(MetricsLogger):
    kind = "tensorboard"

    @classmethod
    def check_available(cls) -> None:
        require_package("tensorboard", cls.kind, "tensorboard")  # torch's writer needs it

    def __init__(self, run: LoggedRun):
        folder = run.dir / FOLDER
        self.resumed = folder.is_dir() and any(folder.glob("events.out.tfevents.*"))
        writer = import_extra("torch.utils.tensorboard", self.kind, "tensorboard").SummaryWriter
        self.start_step = run.start_step
        self.writer = writer(str(folder), purge_step=run.start_step + 1 if self.resumed else None)

    def log_settings(self, settings: dict) -> None:
        if not self.resumed:  # the first start's are kept (a resumed run's changes are in train_config.yaml)
            text = "```\n" + json.dumps(settings, indent=2, default=str) + "\n```"
            self.writer.add_text("settings", text, global_step=self.start_step)

    def log(self, record: dict) -> None:
        for key, value in scalars(record).items():
            self.writer.add_scalar(key, value, global_step=record["step"])

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


register_logger(TensorBoardLogger)
