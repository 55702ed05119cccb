"""Dashboards a run's records can go to beside metrics.jsonl: TensorBoard, Weights & Biases and MLflow, one
module and one ``register_logger`` line each; each imports its package only when a run chooses it."""

from t2t.training.dashboards import mlflow_logger, tensorboard_logger, wandb_logger  # noqa: F401 (they register)
