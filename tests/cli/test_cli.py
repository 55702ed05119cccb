"""CLI wrappers: one-sentence errors and the vocabulary trainer's file selection."""

import dataclasses
from pathlib import Path

import pytest
import yaml

from t2t import config
from t2t.cli import settings_doc
from t2t.cli.main import PARSERS, eval_main, run_cli, text_files, train_main
from t2t.training.train import TrainConfig
from t2t.errors import T2TError


def test_t2t_error_is_one_line_and_status_2(capsys):
    @run_cli
    def main(argv):
        raise T2TError("no such thing; do the other thing.")
    assert main([]) == 2
    assert capsys.readouterr().err == "error: no such thing; do the other thing.\n"


def test_vocab_folders_are_read_like_the_text_tasks(tmp_path):
    (tmp_path / "a.txt").write_text("words")
    (tmp_path / "wiki.test.raw").write_text("more words")
    (tmp_path / "README.md").write_text("docs")
    (tmp_path / "SOURCE_README.txt").write_text("provenance")
    assert sorted(p.name for p in text_files([str(tmp_path)])) == ["a.txt", "wiki.test.raw"]
    named_twice = text_files([str(tmp_path), str(tmp_path / "wiki.test.raw")])
    assert sorted(p.name for p in named_twice) == ["a.txt", "wiki.test.raw"]
    with pytest.raises(T2TError, match="no such file or folder"):
        text_files([str(tmp_path / "missing")])


TASK_MODULE = '''
from pathlib import Path
from t2t.evaluation import metrics
from t2t.data.sources import JsonlFiles
from t2t.data.task import Task, register_task
rows = str(Path(__file__).parent / "rows.jsonl")
register_task(Task("cli_copy", JsonlFiles({"train": rows, "validation": rows}), metric_fns=(metrics.accuracy,)))
'''


@pytest.mark.integration
def test_output_to_a_pipe_has_no_progress_bar_escapes(tmp_path):
    """datasets' split-generation bars, the training bar and the nested in-training eval bar all draw with
    carriage returns and cursor moves; in a log file they must be plain lines."""
    import json
    import subprocess
    import sys

    from t2t.testing import tiny_vocabulary
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"inputs": f"copy {i}", "targets": str(i)}) + "\n"
                                                 for i in range(8)))
    (tmp_path / "cli_task.py").write_text(TASK_MODULE)
    args = ["--module", str(tmp_path / "cli_task.py"), "--task", "cli_copy", "--model", "t5-tiny",
            "--vocab", str(tiny_vocabulary().path), "--output-dir", str(tmp_path / "run"), "--train-steps", "2",
            "--batch-size", "4", "--log-every", "1", "--eval-every", "2", "--set", "eval_max_examples=4",
            "--set", "input_length=16", "--set", "target_length=8"]
    code = "import sys; from t2t.cli.main import train_main; sys.exit(train_main())"
    run = subprocess.run([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=600)
    output = run.stdout.decode()
    assert run.returncode == 0, output[-3000:]
    assert "\x1b[" not in output and "\r" not in output, repr(output[-2000:])
    assert "step 2: loss" in output and "cli_copy/accuracy" in output  # plain lines instead of the bar


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_every_flag_says_what_it_does_and_help_shows_an_example(command):
    parser = PARSERS[command]()
    undocumented = [a.option_strings or a.dest for a in parser._actions if not a.help]
    assert undocumented == []
    examples = parser.format_help().split("\nexamples:\n")[1]
    assert f"{command} --" in examples


def test_settings_reference_is_in_sync_with_the_dataclasses():
    """docs/settings.md is generated: run `python -m t2t.cli.settings_doc > docs/settings.md` after a change."""
    assert (Path(__file__).parents[2] / "docs" / "settings.md").read_text() == settings_doc.render()


def test_settings_reference_lists_each_setting_with_type_default_and_comment():
    rows = {key: (kind, default, comment) for key, kind, default, comment in settings_doc.rows(TrainConfig)}
    assert rows["batch_size"] == ("int", "`128`", "global, in rows (packed rows when pack is on)")
    assert rows["optimizer.adam_betas"] == ("tuple[float, float]", "`[0.9, 0.999]`", "AdamW only")
    assert rows["vocab"][:2] == ("str | None", "`null`")
    for f in dataclasses.fields(TrainConfig):  # nested settings (optimizer, ...) as their dotted fields
        assert f.name in rows or any(key.startswith(f"{f.name}.") for key in rows), f.name


def test_print_config_prints_the_resolved_settings_and_exits(tmp_path, capsys):
    assert train_main(["--task", "rte", "--model", "t5-tiny", "--batch-size", "8", "--set", "optimizer.name=adamw",
                       "--output-dir", str(tmp_path / "run"), "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed == config.to_dict(config.from_dict(TrainConfig, {
        "mixture": "rte", "model": {"preset": "t5-tiny"}, "batch_size": 8, "optimizer": {"name": "adamw"},
        "output_dir": str(tmp_path / "run")}))
    assert not (tmp_path / "run").exists()
    assert eval_main(["--task", "rte", "--checkpoint", "google-t5/t5-small", "--beam-size", "4",
                      "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["beam_size"] == 4 and printed["checkpoint"] == "google-t5/t5-small" and printed["split"] == "validation"
