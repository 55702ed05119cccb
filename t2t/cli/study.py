"""``t2t-study``: a grid of fine-tuning runs, one table and one heat map."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from t2t import config
from t2t.cli import train as train_cli
from t2t.cli.common import TASK, Flag, add_flags, add_settings, new_parser, print_settings, resolve, run_cli
from t2t.training.study import StudyConfig, run_study
from t2t.training.train import TrainConfig


def comma_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


FLAGS = [Flag("targets", parse=comma_list), Flag("intermediates", parse=comma_list), Flag("init_from"),
         Flag("intermediate_steps"), Flag("target_steps"), Flag("train_args", parse=shlex.split),
         Flag("eval_args", parse=shlex.split), Flag("output_dir"), Flag("jobs")]


def examples() -> str:
    return f"""\
  t2t-study --intermediates none,cola,sst2 --targets rte,mrpc --jobs 2 \\
            --train-args '--model t5-tiny --config cpu-smoke' --eval-args '--max-examples 200' \\
            --output-dir runs/sesame
  t2t-study --config transfer-methods --init-from runs/pretrained --output-dir runs/methods
(--config takes a file or a name in configs/studies: {', '.join(config.config_names("studies"))})
"""


def parser() -> argparse.ArgumentParser:
    p = new_parser("t2t-study", "Run a grid of fine-tuning runs (intermediate tasks or transfer methods × "
                   "target tasks) and write one table (results.md, results.csv) and one heat map "
                   "(heatmap.png). Running it again resumes.", examples())
    add_flags(p, StudyConfig, FLAGS)
    add_settings(p, "metric=accuracy", kind="studies")
    return p


def settings(args: argparse.Namespace) -> StudyConfig:
    return resolve(StudyConfig, args, FLAGS, kind="studies")


def train_settings(argv: list[str]) -> TrainConfig:
    """What t2t-train makes of ``argv`` (a study run's arguments), for the study's checks before it starts."""
    return resolve(TrainConfig, train_cli.parser().parse_args(argv), [TASK, *train_cli.FLAGS])


@run_cli(resumable=True)
def study_main(argv=None) -> int:
    args = parser().parse_args(argv)
    cfg = settings(args)
    if args.print_config:
        print_settings(config.to_dict(cfg))
        return 0
    run_study(cfg, train_settings)
    print(Path(cfg.output_dir, "results.md").read_text(), end="")
    print(f"wrote results.md, results.csv and heatmap.png in {cfg.output_dir}")
    return 0
