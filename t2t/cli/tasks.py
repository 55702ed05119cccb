"""``t2t-tasks``: the registered tasks and mixtures."""

from __future__ import annotations

import argparse

from t2t.cli.common import add_locations, new_parser, run_cli
from t2t.data.show import format_registry_table
from t2t.data.task import load_modules

EXAMPLES = """\
  t2t-tasks
  t2t-tasks --module my_tasks.py --data-dir /data
"""


def parser() -> argparse.ArgumentParser:
    p = new_parser("t2t-tasks", "List registered tasks and mixtures.", EXAMPLES)
    add_locations(p, vocab=False)
    return p


@run_cli
def tasks_main(argv=None) -> int:
    args = parser().parse_args(argv)
    load_modules(args.modules)
    print(format_registry_table(data_dir=args.data_dir))
    return 0
