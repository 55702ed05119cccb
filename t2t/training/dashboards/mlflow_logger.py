"""``loggers: [mlflow]``: the run's records as MLflow metrics, its settings as parameters
(``optimizer.learning_rate``: the names ``--set`` takes).

MLflow reads its own environment: ``MLFLOW_TRACKING_URI`` (a server, a database, a shared folder) and
``MLFLOW_EXPERIMENT_NAME``. Without a tracking URI the store is a folder of the run, ``RUN/mlruns``, which needs
no server or internet (``mlflow ui --backend-store-uri RUN/mlruns``); MLflow 3 keeps such file stores behind
``MLFLOW_ALLOW_FILE_STORE``, which this logger sets for its own folder when the user has not. The run's id is
kept in ``RUN/mlflow_run.json``, so a resumed run continues the same MLflow run. MLflow keeps every point it
was sent, so records reach it at each checkpoint (see base.CheckpointedLogger): none twice, none missing.
"""

from __future__ import annotations

import json
import os

from t2t.errors import T2TError
from t2t.training.dashboards.base import (
    CheckpointedLogger,
    flat_settings,
    import_extra,
    read_dashboard_run,
    record_dashboard_run,
    require_package,
    scalars,
)
from t2t.training.loggers import LoggedRun, register_logger

RUN_FILE = "mlflow_run.json"
STORE_FOLDER = "mlruns"
DEFAULT_EXPERIMENT = "0"  # MLflow's "Default", where mlflow.start_run() logs without an experiment
BATCH = 100  # MLflow's most parameters in one log_batch call (its most metrics is 1000)


class MlflowLogger(CheckpointedLogger):
    kind = "mlflow"

    @classmethod
    def check_available(cls) -> None:
        require_package("mlflow", cls.kind, "mlflow")

    def __init__(self, run: LoggedRun):
        super().__init__()
        mlflow = import_extra("mlflow", self.kind, "mlflow")
        self.entities = mlflow.entities
        given = mlflow.environment_variables.MLFLOW_TRACKING_URI.get()
        if not given:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # our own folder (see the module's notes)
        uri = given or str((run.dir / STORE_FOLDER).resolve())
        self.client = mlflow.tracking.MlflowClient(tracking_uri=uri)
        recorded = read_dashboard_run(run.dir / RUN_FILE)
        self.new = recorded is None
        if self.new:
            experiment = self.experiment_id(mlflow.environment_variables.MLFLOW_EXPERIMENT_NAME.get())
            self.run_id = self.client.create_run(experiment, run_name=run.dir.name).info.run_id
            record_dashboard_run(run.dir / RUN_FILE, {"id": self.run_id, "tracking_uri": given})
        else:
            self.run_id = recorded["id"]
            self.continue_run(run, uri, recorded.get("tracking_uri"), mlflow.exceptions.MlflowException)

    def experiment_id(self, name: str | None) -> str:
        """The id of experiment ``name`` (made if new), or MLflow's default experiment."""
        if not name:
            return DEFAULT_EXPERIMENT
        found = self.client.get_experiment_by_name(name)
        return found.experiment_id if found is not None else self.client.create_experiment(name)

    def continue_run(self, run: LoggedRun, uri: str, recorded_uri: str | None, error: type[Exception]) -> None:
        """Mark the recorded MLflow run running again; one sentence when this store does not hold it."""
        try:
            self.client.update_run(self.run_id, status="RUNNING")
        except error:
            was = recorded_uri or f"the run's own {STORE_FOLDER} folder"
            raise T2TError(f"the MLflow run {self.run_id} that {run.dir} logs to is not in the tracking store "
                           f"{uri} (it was logged to {was}); set MLFLOW_TRACKING_URI to that store, or delete "
                           f"{run.dir / RUN_FILE} to start a new MLflow run.") from None

    def log_settings(self, settings: dict) -> None:
        if self.new:  # parameters cannot change in MLflow; a resumed run's changes are in train_config.yaml
            params = [self.entities.Param(key, value if isinstance(value, str) else repr_setting(value))
                      for key, value in flat_settings(settings).items()]
            for i in range(0, len(params), BATCH):
                self.client.log_batch(self.run_id, params=params[i:i + BATCH])

    def send(self, records: list[tuple[float, dict]]) -> None:
        metrics = [self.entities.Metric(key, value, int(wall * 1000), record["step"])
                   for wall, record in records for key, value in scalars(record).items()]
        for i in range(0, len(metrics), 10 * BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[i:i + 10 * BATCH])

    def finish(self, complete: bool) -> None:
        self.client.set_terminated(self.run_id, status="FINISHED" if complete else "FAILED")


def repr_setting(value) -> str:
    """A setting's value as ``--set`` takes it: JSON (``null``, ``true``, ``["jsonl", "plot"]``)."""
    return json.dumps(value)


register_logger(MlflowLogger)
