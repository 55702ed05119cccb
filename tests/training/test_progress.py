"""metrics.jsonl and metrics.png: undefined values are JSON null and panels that say so; what a logged window of
steps measured."""

import json
import math

import pytest

from t2t.errors import T2TError
from t2t.training import progress
from t2t.training.progress import LogWindow, MetricsLog, metrics_figure, plot_metrics, read_metrics


def strict_json(line: str):
    """json.loads that refuses NaN and Infinity, as JSON itself (and jq, JavaScript) does."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(line, parse_constant=refuse)


def test_undefined_values_are_null_in_metrics_jsonl(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.write({"step": 1, "loss": float("nan"), "eval/stsb/pearson_corrcoef": float("nan"),
               "eval/rte/accuracy": 50.0})
    log.write({"step": 2, "loss": 1.5, "eval/stsb/pearson_corrcoef": float("inf")})
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [strict_json(line) for line in lines] == log.records() == [
        {"step": 1, "loss": None, "eval/stsb/pearson_corrcoef": None, "eval/rte/accuracy": 50.0},
        {"step": 2, "loss": 1.5, "eval/stsb/pearson_corrcoef": None}]


RECORDS = [{"step": s, "loss": 4.0 / s, "eval/stsb/pearson_corrcoef": None,
            "eval/cb/f1": None if s == 2 else 10.0 * s} for s in (1, 2, 3)]


def test_a_metric_undefined_at_every_step_is_a_panel_that_says_undefined():
    loss, f1, pearson = metrics_figure(RECORDS).axes[:3]  # eval panels sorted by name
    assert [t.get_text() for t in pearson.texts] == ["undefined"] and not pearson.lines
    assert list(pearson.get_yticks()) == []  # no made-up ±0.04 axis
    assert pearson.get_title() == "stsb/pearson_corrcoef (undefined at 3 of 3 steps)"
    assert f1.get_title() == "cb/f1 (undefined at 1 of 3 steps)"
    assert list(f1.lines[0].get_xdata()) == [1, 3] and list(f1.lines[0].get_ydata()) == [10.0, 30.0]
    assert loss.get_title() == "loss" and not loss.texts and len(loss.lines[0].get_xdata()) == 3


def test_plot_metrics_reads_the_nulls_it_wrote(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    for record in RECORDS:
        log.write({k: math.nan if v is None else v for k, v in record.items()})
    plot_metrics(log.records(), tmp_path / "metrics.png")
    assert (tmp_path / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_metrics_log_that_cannot_be_read_is_one_sentence(tmp_path):
    (tmp_path / "metrics.jsonl").mkdir()
    with pytest.raises(T2TError, match=r"cannot read the metrics log .*metrics.jsonl \(Is a directory\); it must be "
                                       r"the file training wrote"):
        read_metrics(tmp_path / "metrics.jsonl")


def test_a_log_window_rates_its_steps_tokens_and_waiting_over_its_time_less_what_it_left_out(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    window = LogWindow()
    for tokens in (50, 70, 80):
        window.count_step(tokens)
    window.waiting += 0.5
    window.left_out(1.0, compile_seconds=1.0)  # the first compiled step's time
    now[0] = 105.0
    assert window.rates() == {"steps_per_second": 3 / 4, "tokens_per_second": 200 / 4, "data_wait_share": 0.5 / 4,
                              "compile_seconds": 1.0}


@pytest.mark.parametrize("resumed", [False, True])
def test_a_linked_metrics_log_is_refused_and_its_target_left_alone(tmp_path, resumed):
    """Someone else's run folder may hold metrics.jsonl → a file of yours: resuming cuts the log back and
    training appends to it, and neither may reach through the link."""
    precious = tmp_path / "precious.txt"
    precious.write_text('{"step": 1, "loss": 2.0}\n{"step": 5, "loss": 1.0}\n')
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").symlink_to(precious)
    with pytest.raises(T2TError, match=r"^[^\n]*run/metrics.jsonl is a symbolic link, and t2t never writes through "
                                       r"a link [^\n]*; delete the link and run the same command again\.$"):
        MetricsLog(tmp_path / "run" / "metrics.jsonl", truncate_after=1 if resumed else 0).write({"step": 2})
    assert precious.read_text() == '{"step": 1, "loss": 2.0}\n{"step": 5, "loss": 1.0}\n'


def test_appending_through_a_link_planted_after_the_log_was_opened_is_refused(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.write({"step": 1, "loss": 2.0})
    precious = tmp_path / "precious.txt"
    precious.write_text("mine\n")
    (tmp_path / "metrics.jsonl").unlink()
    (tmp_path / "metrics.jsonl").symlink_to(precious)
    with pytest.raises(T2TError, match=r"metrics.jsonl is a symbolic link"):
        log.write({"step": 2, "loss": 1.0})
    assert precious.read_text() == "mine\n"
