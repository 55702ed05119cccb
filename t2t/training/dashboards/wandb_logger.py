"""``loggers: [wandb]``: the run's records in a Weights & Biases run, its settings as the run's config.

W&B reads its own environment: ``WANDB_MODE=offline`` (a cluster without internet) writes the run under
``RUN/wandb/`` for ``wandb sync`` later, ``WANDB_PROJECT`` and ``WANDB_ENTITY`` say where it goes. The run's id is
kept in ``RUN/wandb_run.json``, so a resumed run continues the same W&B run (``wandb.init(id=..., resume="allow")``;
offline, each start is one folder of that run, and ``wandb sync`` uploads them in order). W&B keeps every step
it was sent, so records reach it at each checkpoint (see base.CheckpointedLogger): none twice, none missing.
"""

from __future__ import annotations

from t2t.errors import T2TError
from t2t.training.dashboards.base import (
    CheckpointedLogger,
    import_extra,
    read_dashboard_run,
    record_dashboard_run,
    require_package,
    scalars,
)
from t2t.training.loggers import LoggedRun, register_logger

RUN_FILE = "wandb_run.json"


class WandbLogger(CheckpointedLogger):
    kind = "wandb"

    @classmethod
    def check_available(cls) -> None:
        require_package("wandb", cls.kind, "wandb")

    def __init__(self, run: LoggedRun):
        super().__init__()
        self.wandb = import_extra("wandb", self.kind, "wandb")
        recorded = read_dashboard_run(run.dir / RUN_FILE)
        self.new = recorded is None
        try:  # a new run's id is W&B's own choice
            self.dashboard = self.wandb.init(dir=str(run.dir), id=None if self.new else recorded["id"],
                                             resume="allow", name=run.dir.name)
        except self.wandb.errors.UsageError as e:
            raise T2TError(f"W&B could not start a run ({e}); run `wandb login`, or set WANDB_MODE=offline to log "
                           f"under {run.dir / 'wandb'} and `wandb sync` it later.") from None
        if self.new:
            record_dashboard_run(run.dir / RUN_FILE, {"id": self.dashboard.id})

    def log_settings(self, settings: dict) -> None:
        if self.new:  # a resumed run's changed settings are in train_config.yaml
            self.dashboard.config.update(settings)

    def send(self, records: list[tuple[float, dict]]) -> None:
        for _, record in records:
            self.dashboard.log(scalars(record), step=record["step"], commit=True)

    def finish(self, complete: bool) -> None:
        self.dashboard.finish(exit_code=0 if complete else 1)


register_logger(WandbLogger)
