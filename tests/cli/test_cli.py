"""CLI wrappers: one-sentence errors and the vocabulary trainer's file selection."""

import dataclasses
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from t2t import config
from t2t.cli import COMMANDS, command_module, eval_main, predict_main, settings_doc, train_main
from t2t.cli.common import run_cli
from t2t.cli.vocab import text_files
from t2t.errors import T2TError
from t2t.models.t5 import resolve_model_config
from t2t.training.train import TrainConfig


def test_t2t_error_is_one_line_and_status_2(capsys):
    @run_cli
    def main(argv):
        raise T2TError("no such thing; do the other thing.")
    assert main([]) == 2
    assert capsys.readouterr().err == "error: no such thing; do the other thing.\n"


@pytest.mark.parametrize("resumable, said", [(True, "interrupted; run the same command again to resume from the "
                                                    "last checkpoint.\n"), (False, "interrupted.\n")])
def test_ctrl_c_says_how_to_resume_only_where_the_command_resumes(capsys, resumable, said):
    def main(argv):
        raise KeyboardInterrupt
    assert run_cli(main, resumable=resumable)([]) == 130
    assert capsys.readouterr().err == said


def test_running_out_of_memory_is_one_line_and_other_errors_are_not_hidden(capsys):
    @run_cli
    def main(argv):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:118] data. DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 80000000000 bytes. Error code 12 (Cannot allocate memory)")
    assert main([]) == 2
    said = capsys.readouterr().err
    assert re.fullmatch(r"error: out of memory \(.*80000000000 bytes.*\); lower --batch-size or the lengths "
                        r"\(--max-length, input_length\), or use a machine with more memory.\n", said)

    @run_cli
    def broken(argv):
        raise RuntimeError("shape mismatch")
    with pytest.raises(RuntimeError, match="shape mismatch"):
        broken([])


def test_importing_the_commands_entry_points_loads_nothing_heavy():
    """The console scripts import t2t.cli, whose entry point installs the Ctrl-C handler before it imports its
    command (and torch, seconds to load): until then Ctrl-C can only be a traceback, so that must be quick
    (tests/training/test_faults.py interrupts t2t-train at several moments)."""
    code = ("import sys, t2t.cli; heavy = {m.split('.')[0] for m in sys.modules} & {'torch', 'numpy', 'tqdm', 'yaml'}; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_second_ctrl_c_while_the_first_is_handled_ends_the_command_at_once():
    """Once the first one's KeyboardInterrupt was swallowed, or while its clean-up takes long."""
    code = textwrap.dedent("""
        import os, signal, time
        from t2t.terminal import stop_on_interrupt
        stop_on_interrupt()
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(30)
        except KeyboardInterrupt:
            pass
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(30)
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (run.returncode, run.stderr) == (130, "interrupted again: stopped.\n")


def test_running_out_of_memory_without_a_message_is_one_line_too(capsys):
    """Python's own MemoryError (a list of a billion rows: --batch-size 1000000000) carries no message."""
    @run_cli
    def main(argv):
        raise MemoryError
    assert main([]) == 2
    assert capsys.readouterr().err == ("error: out of memory (MemoryError); lower --batch-size or the lengths "
                                       "(--max-length, input_length), or use a machine with more memory.\n")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a torch without CUDA")
@pytest.mark.parametrize("name", ["cuda", "cuda:1"])
def test_a_cuda_device_without_cuda_is_one_sentence(name):
    from t2t.models.distributed import pick_device
    with pytest.raises(T2TError, match=rf"device '{name}' asked for, but this torch sees no CUDA GPU .*use the "
                                       rf"device auto or cpu"):
        pick_device(name)


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

    from t2t.testing import tiny_vocabulary
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"inputs": f"copy {i}", "targets": str(i)}) + "\n"
                                                 for i in range(8)))
    (tmp_path / "cli_task.py").write_text(TASK_MODULE)
    args = ["--module", str(tmp_path / "cli_task.py"), "--task", "cli_copy", "--model", "t5-tiny",
            "--vocab", str(tiny_vocabulary().path), "--output-dir", str(tmp_path / "run"), "--train-steps", "2",
            "--batch-size", "4", "--log-every", "1", "--eval-every", "2", "--set", "eval_max_examples=4",
            "--set", "input_length=16", "--set", "target_length=8"]
    code = "import sys; from t2t.cli import train_main; sys.exit(train_main())"
    run = subprocess.run([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=600)
    output = run.stdout.decode()
    assert run.returncode == 0, output[-3000:]
    assert "\x1b[" not in output and "\r" not in output, repr(output[-2000:])
    assert "step 2: loss" in output and "cli_copy/accuracy" in output  # plain lines instead of the bar
    assert re.search(r"step 1: loss .*, ETA \d\d:\d\d\n", output)  # how long the rest will take


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_flag_says_what_it_does_and_help_shows_an_example(command):
    parser = command_module(command).parser()
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


def test_print_config_prints_the_resolved_settings_and_exits(tmp_path, capsys, t5_vocab_path):
    assert train_main(["--task", "rte", "--model", "t5-tiny", "--batch-size", "8", "--set", "optimizer.name=adamw",
                       "--output-dir", str(tmp_path / "run"), "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    expected = config.to_dict(config.from_dict(TrainConfig, {
        "mixture": "rte", "model": {"preset": "t5-tiny"}, "batch_size": 8, "optimizer": {"name": "adamw"},
        "output_dir": str(tmp_path / "run"), "input_length": 512, "target_length": 84}))  # GLUE's, as training
    model = {**config.to_dict(resolve_model_config("t5-tiny")), "vocab_size": 32128}  # sized for T5's 32,100 ids
    assert printed == {**expected, "model": {"preset": "t5-tiny", **model}, "vocab": str(t5_vocab_path),
                       "data_dir": str(t5_vocab_path.parents[1])}
    assert not (tmp_path / "run").exists()
    assert eval_main(["--task", "rte", "--checkpoint", "google-t5/t5-small", "--beam-size", "4",
                      "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["beam_size"] == 4 and printed["checkpoint"] == "google-t5/t5-small" and printed["split"] == "validation"
    assert (printed["vocab"], printed["data_dir"]) == (str(t5_vocab_path), str(t5_vocab_path.parents[1]))


def test_print_config_shows_the_lengths_training_will_use(tmp_path, capsys, t5_vocab_path):
    """A task's own lengths (here from a module the user gives) where none are given, as training takes them
    (a resumed run's are in its settings already)."""
    from t2t.data.task import TASKS
    module = tmp_path / "lengths_task.py"
    module.write_text("from t2t import InMemorySource, Task, register_task\n"
                      "register_task(Task(name='print_config_lengths', source=InMemorySource({'train': []}),\n"
                      "                   sequence_length={'inputs': 96, 'targets': 12}))\n")
    try:
        for extra, lengths in [([], (96, 12)), (["--set", "target_length=20"], (96, 20))]:
            assert train_main(["--task", "print_config_lengths", "--module", str(module), "--model", "t5-tiny",
                               "--output-dir", str(tmp_path / "run"), "--print-config", *extra]) == 0
            printed = yaml.safe_load(capsys.readouterr().out)
            assert (printed["input_length"], printed["target_length"]) == lengths
    finally:
        TASKS.unregister("print_config_lengths")
    # no task: training would refuse to start, and the lengths stay unset
    assert train_main(["--model", "t5-tiny", "--output-dir", str(tmp_path / "run"), "--print-config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["input_length"] is None


def test_print_config_rejects_an_unknown_model_key(capsys):
    assert train_main(["--task", "rte", "--model", "t5-tiny", "--set", "model.num_layerz=3", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown setting model.num_layerz for ModelConfig") and err.count("\n") == 1


def example_commands(command: str) -> list[list[str]]:
    """The command lines of ``command``'s --help examples, as argument lists (comments and pipes left out)."""
    text = command_module(command).parser().format_help().split("\nexamples:\n")[1].replace("\\\n", " ")
    lines = [line[line.index(command):] for line in text.splitlines() if f"{command} " in line or
             line.strip() == command]
    return [shlex.split(line, comments=True)[1:] for line in lines]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_help_example_parses_and_its_settings_resolve(command, tmp_path, monkeypatch):
    """What --help shows works as written: each example's flags, and the --set example of its help."""
    monkeypatch.chdir(tmp_path)  # runs/... in the examples: no run there, so nothing resumes
    module = command_module(command)
    examples = example_commands(command)
    assert examples
    for argv in examples:
        args = module.parser().parse_args(argv)
        if hasattr(module, "settings"):
            module.settings(args)
    match = re.search(r"e\.g\. --set (\S+)", " ".join(module.parser().format_help().split()))
    if hasattr(module, "settings"):
        required = [a for a in examples[0] if a != "--print-config"]
        module.settings(module.parser().parse_args([*required, "--set", match[1]]))


def test_study_help_names_the_study_configs():
    shipped = sorted(p.stem for p in (Path(__file__).parents[2] / "configs" / "studies").glob("*.yaml"))
    assert len(shipped) >= 3
    assert f"configs/studies: {', '.join(shipped)}" in command_module("t2t-study").parser().format_help()


def test_flags_take_type_default_and_help_from_the_settings_dataclasses():
    train = command_module("t2t-train")
    help_text = " ".join(train.parser().format_help().split())
    assert "--train-steps TRAIN_STEPS train until this step (default: 1000)" in help_text
    assert "--learning-rate LEARNING_RATE peak rate" in help_text and "(default: 0.001)" in help_text
    args = train.parser().parse_args(["--learning-rate", "3e-3", "--module", "a.py", "--module", "b"])
    cfg = train.settings(args)
    assert (cfg.optimizer.learning_rate, cfg.modules) == (3e-3, ["a.py", "b"])
    study = command_module("t2t-study")
    cfg = study.settings(study.parser().parse_args(["--targets", "rte, mrpc", "--train-args", "--model 't5-tiny'"]))
    assert (cfg.targets, cfg.train_args) == (["rte", "mrpc"], ["--model", "t5-tiny"])


DOCUMENTED = [Path(__file__).parents[2] / name for name in ("README.md", "docs", "examples")]


def documented_command_lines() -> list[tuple[str, list[str]]]:
    """(command, arguments) of each t2t-* command line written in README.md, docs/*.md and examples/*.sh."""
    files = [DOCUMENTED[0], *DOCUMENTED[1].glob("*.md"), *DOCUMENTED[2].glob("*.sh")]
    found = []
    for file in files:
        text = file.read_text().replace("\\\n", " ")
        for match in re.finditer(r"(?m)(t2t-(?:train|eval|predict|show|tasks|vocab|study|export))((?: +[^\s`|;&)]+)+)",
                                 text):
            words = match[2].split()
            if words and words[0].startswith("-") or match[1] in ("t2t-vocab", "t2t-export"):
                found.append((match[1], shlex.split(" ".join(words), comments=True)))
    return found


def test_flags_written_in_the_docs_still_parse():
    lines = documented_command_lines()
    assert len(lines) > 20
    options = {command: {o for a in command_module(command).parser()._actions for o in a.option_strings}
               for command in COMMANDS}
    for command, argv in lines:
        known = options[command]
        unknown = [w.split("=")[0] for w in argv if w.startswith("--") and " " not in w and w.split("=")[0] not in known]
        assert unknown == [], (command, argv)


@pytest.mark.parametrize("command", ["t2t-eval", "t2t-predict"])
@pytest.mark.parametrize("flags, message", [
    (["--beam-size", "0"], "setting beam_size must be > 0, got 0"),
    (["--temperature", "-1"], "setting temperature must be >= 0, got -1.0"),
    (["--top-k", "-5"], "setting top_k must be >= 0, got -5"),
    (["--max-length", "0"], "setting max_length must be > 0, got 0"),
    (["--max-length", "-3"], "setting max_length must be > 0, got -3"),
    (["--max-length", "-2"], "setting max_length must be > 0, got -2"),
    (["--batch-size", "0"], "setting batch_size must be > 0, got 0"),
    (["--beam-size", "4", "--temperature", "0.7"], "beam_size 4 and temperature 0.7 ask for two decoding methods"),
    (["--top-k", "40"], "top_k 40 restricts sampling, which temperature 0 turns off"),
])
def test_decoding_settings_are_checked_alike_in_eval_and_predict(command, flags, message, tmp_path, capsys):
    main = {"t2t-eval": eval_main, "t2t-predict": predict_main}[command]
    task = ["--task", "rte"] if command == "t2t-eval" else []
    assert main([*task, "--checkpoint", str(tmp_path / "none"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err


def test_eval_of_a_hub_id_that_does_not_resolve_creates_nothing(tmp_path, monkeypatch, capsys, data_dir):
    """Output folders come after the model loads: a failed owner/name must not leave ./owner/name/eval,
    which would from then on be read as a local path."""
    monkeypatch.chdir(tmp_path)
    assert eval_main(["--task", "rte", "--checkpoint", "no-such-owner/no-such-model"]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert list(tmp_path.iterdir()) == []
