"""``t2t-show``: a task's examples as JSON lines, in source order (preprocessed, or ``--raw`` as read)."""

from __future__ import annotations

import argparse
import json

from t2t.cli.common import add_locations, new_parser, run_cli
from t2t.data.show import show_examples, show_raw
from t2t.data.task import load_modules
from t2t.data.vocab import load_vocabulary
from t2t.errors import T2TError

EXAMPLES = """\
  t2t-show --task rte -n 3
  t2t-show --task rte --raw -n 1          # the fields t2t-predict --task rte reads
  t2t-show --task my_task --module my_tasks.py --split train --tokens
"""


def parser() -> argparse.ArgumentParser:
    p = new_parser("t2t-show", "Print a task's examples as JSON lines, in source order.", EXAMPLES)
    p.add_argument("--task", required=True, help="task name (see t2t-tasks)")
    p.add_argument("--split", default="validation", help="split to read (default: validation)")
    p.add_argument("-n", type=int, default=5, help="number of examples (default: 5)")
    p.add_argument("--tokens", action="store_true", help="add the token ids")
    p.add_argument("--raw", action="store_true",
                   help="print the source's fields before preprocessing (what t2t-predict --task reads)")
    add_locations(p)
    return p


@run_cli
def show_main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.raw and args.tokens:
        raise T2TError("--raw prints the source's fields, which have no tokens; leave out --raw or --tokens.")
    load_modules(args.modules)
    if args.raw:
        examples = show_raw(args.task, args.split, args.n, data_dir=args.data_dir)
    else:
        vocab = load_vocabulary(args.vocab, data_dir=args.data_dir) if args.tokens else None
        examples = show_examples(args.task, args.split, args.n, with_tokens=args.tokens, vocab=vocab,
                                 data_dir=args.data_dir)
    for example in examples:
        print(json.dumps(example, ensure_ascii=False, default=str))
    return 0
