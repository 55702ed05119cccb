"""Progress off a terminal: plain lines with how far, how fast and the ETA."""

import re

from t2t import terminal


def test_eta_extrapolates_the_rate_so_far_as_tqdm_prints_it():
    assert terminal.eta(10, 100, 5.0) == "00:45"
    assert terminal.eta(1, 3601, 1.0) == "1:00:00"
    assert terminal.eta(0, 10, 3.0) == "?"


def test_progress_lines_are_printed_off_a_terminal_until_the_work_is_done(monkeypatch, capsys):
    monkeypatch.setattr(terminal, "on_terminal", lambda: False)
    lines = terminal.ProgressLines("glue_rte_v002", 10, "examples", every=0.0)
    for n in (3, 3, 4):
        lines.update(n)
    printed = capsys.readouterr().err.splitlines()
    assert len(printed) == 2  # none once all 10 are done: the task's own summary line follows
    assert re.fullmatch(r"glue_rte_v002: 3 of 10 examples, [\d,.]+ examples/s, ETA \d\d:\d\d", printed[0])
    assert printed[1].startswith("glue_rte_v002: 6 of 10 examples")


def test_progress_lines_are_quiet_on_a_terminal_and_off_the_main_process(monkeypatch, capsys):
    monkeypatch.setattr(terminal, "on_terminal", lambda: True)
    terminal.ProgressLines("t", 10, "examples", every=0.0).update(3)
    monkeypatch.setattr(terminal, "on_terminal", lambda: False)
    terminal.ProgressLines("t", 10, "examples", every=0.0, enabled=False).update(3)
    assert capsys.readouterr().err == ""
