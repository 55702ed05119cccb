"""``t2t-eval``: score a model on tasks' metrics."""

from __future__ import annotations

import argparse

from t2t.cli.common import (
    DECODING_FLAGS,
    LOCATION_FLAGS,
    TASK,
    Flag,
    add_flags,
    add_settings,
    add_task_choice,
    new_parser,
    print_settings,
    resolve,
    resolved_locations,
    run_cli,
)
from t2t.evaluation.evaluate import EvalConfig, evaluate, evaluate_checkpoints

EXAMPLES = """\
  t2t-eval --task rte --checkpoint runs/rte
  t2t-eval --mixture glue_v002 --checkpoint runs/glue --beam-size 4 --max-examples 500
  t2t-eval --task stsb --checkpoint google-t5/t5-small --split validation --output-dir eval/t5-small
"""

FLAGS = [Flag("checkpoint", required=True), Flag("split"), Flag("max_examples"), Flag("output_dir"),
         Flag("device"), Flag("skip_unavailable"), Flag("all_checkpoints"), Flag("rank_classification"),
         Flag("trust_modules"), Flag("cache_dir"), *DECODING_FLAGS, *LOCATION_FLAGS]


def parser() -> argparse.ArgumentParser:
    p = new_parser("t2t-eval", "Evaluate a model on tasks' metrics; a run is evaluated with its own "
                   "vocabulary, modules and data dir unless flags override them.", EXAMPLES)
    add_task_choice(p, EvalConfig)
    add_flags(p, EvalConfig, FLAGS)
    add_settings(p, "precision=bf16")
    return p


def settings(args: argparse.Namespace) -> EvalConfig:
    return resolve(EvalConfig, args, [TASK, *FLAGS])


@run_cli
def eval_main(argv=None) -> int:
    args = parser().parse_args(argv)
    cfg = settings(args)
    if args.print_config:
        print_settings(resolved_locations(cfg))
        return 0
    (evaluate_checkpoints if cfg.all_checkpoints else evaluate)(cfg)
    return 0

