"""The metrics-logger seam: a kind added from outside t2t is selected by ``loggers`` and sees the run's settings
once, every step, one record per logged step, each checkpoint and its close (also when training fails); the
built-in kinds stand alone."""

import inspect

import pytest
from test_train import TASK, copy_task, settings  # noqa: F401 (copy_task: a fixture)

from t2t.errors import T2TError
from t2t.training import train as train_module
from t2t.training.loggers import LOGGER_KINDS, LoggedRun, MetricsLogger, PlotLogger, register_logger
from t2t.training.progress import MetricsLog
from t2t.training.train import train

pytestmark = pytest.mark.integration  # training runs


class ToyLogger(MetricsLogger):
    """Writes down every call it gets, in order, in ``calls`` (a class attribute: train builds the instance)."""

    kind = "toy"
    calls: list = []

    def __init__(self, run: LoggedRun):
        self.calls.append(("start", run.start_step, run.train_steps))

    def log_settings(self, settings: dict) -> None:
        self.calls.append(("settings", settings["mixture"], settings["train_steps"]))

    def advance(self, step: int, loss: float) -> None:
        self.calls.append(("advance", step))

    def log(self, record: dict) -> None:
        self.calls.append(("log", record["step"], sorted(record)[:2]))

    def flush(self) -> None:
        self.calls.append(("flush",))

    def close(self) -> None:
        self.calls.append(("close",))


@pytest.fixture
def toy_logger():
    ToyLogger.calls = []
    register_logger(ToyLogger)
    yield ToyLogger.calls
    LOGGER_KINDS.unregister("toy")


def test_a_registered_logger_kind_selected_by_name_gets_each_call_in_order(copy_task, toy_logger, tmp_path):
    records = train(settings(copy_task, tmp_path / "run", train_steps=3, log_every=2, save_every=2,
                             loggers=["toy"]))
    assert toy_logger == [("start", 0, 3), ("settings", TASK, 3),
                          ("advance", 1), ("advance", 2), ("log", 2, ["data_wait_share", "learning_rate"]), ("flush",),
                          ("advance", 3), ("log", 3, ["data_wait_share", "learning_rate"]), ("flush",), ("close",)]
    # the toy alone: no built-in logger wrote anything
    assert records == [] and not (tmp_path / "run" / "metrics.jsonl").exists()
    assert not (tmp_path / "run" / "metrics.png").exists()


def test_a_logger_is_closed_when_training_fails(copy_task, toy_logger, tmp_path, monkeypatch):
    real_step = train_module.train_step

    def fail_at_step_2(*args, **kwargs):
        if inspect.signature(real_step).bind(*args, **kwargs).arguments["step"] == 1:  # the step that makes step 2
            raise T2TError("the disk is gone")
        return real_step(*args, **kwargs)

    monkeypatch.setattr(train_module, "train_step", fail_at_step_2)
    with pytest.raises(T2TError, match="the disk is gone"):
        train(settings(copy_task, tmp_path / "run", train_steps=3, loggers=["toy", "jsonl"]))
    assert [call[0] for call in toy_logger] == ["start", "settings", "advance", "log", "close"]


def test_a_resumed_run_tells_its_loggers_the_step_it_resumes_from_and_may_change_them(copy_task, toy_logger,
                                                                                      tmp_path):
    train(settings(copy_task, tmp_path / "run", train_steps=3, save_every=3))  # the default loggers
    records = train(settings(copy_task, tmp_path / "run", train_steps=5, save_every=3, loggers=["jsonl", "toy"]))
    assert toy_logger[0] == ("start", 3, 5)
    assert [call[1] for call in toy_logger if call[0] == "log"] == [4, 5]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("loggers, message", [
    (["jsonl", "tensorbaord"], r"^unknown metrics logger 'tensorbaord'; did you mean tensorboard\?$"),
    (["jsonl", "plot", "jsonl"], r"^loggers names jsonl more than once, so its records would be logged twice; name "
                                 r"each logger once\.$"),
])
def test_loggers_that_are_not_registered_or_named_twice_are_one_sentence_before_training(copy_task, tmp_path,
                                                                                         loggers, message):
    with pytest.raises(T2TError, match=message):
        train(settings(copy_task, tmp_path / "run", loggers=loggers))
    assert not (tmp_path / "run" / "vocab.json").exists()  # refused before the run was recorded


def test_the_plot_alone_draws_its_own_records_and_a_resumed_runs_earlier_ones(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    for step in (1, 2, 3, 4):  # step 4 was logged after the checkpoint the run resumes from
        log.write({"step": step, "loss": 5.0 - step})
    plot = PlotLogger(LoggedRun(tmp_path, start_step=3, train_steps=6))
    plot.log({"step": 4, "loss": float("nan"), "eval/cb/f1": 50.0})
    assert plot.records == [{"step": 1, "loss": 4.0}, {"step": 2, "loss": 3.0}, {"step": 3, "loss": 2.0},
                            {"step": 4, "loss": None, "eval/cb/f1": 50.0}]
    plot.flush()
    assert (tmp_path / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_only_the_main_process_builds_loggers(copy_task, toy_logger, tmp_path, monkeypatch):
    monkeypatch.setattr(train_module.distributed, "is_main", lambda: False)
    train(settings(copy_task, tmp_path / "run", train_steps=2, loggers=["toy"]))
    assert toy_logger == []
