"""``t2t-cache``: write the deterministic part of tasks' pipelines (source → preprocessors → tokens) once, as
Parquet shards that ``t2t-train --cache-dir`` and ``t2t-eval --cache-dir`` read (t2t.data.cache)."""

from __future__ import annotations

import argparse
import time

from t2t.cli.common import add_locations, new_parser, run_cli
from t2t.data import cache
from t2t.data.sources import DataNotFoundError
from t2t.data.task import load_modules, member_tasks, sequence_length_for
from t2t.data.tokenized import iter_tokenized
from t2t.data.vocab import load_vocabulary

EXAMPLES = """\
  t2t-cache --mixture glue_v002 --output cache/
  t2t-train --mixture glue_v002 --cache-dir cache/ --output-dir runs/glue
  t2t-cache --task c4 --split train --output /shared/cache --num-shards 64 --shard 7   # job 7 of 64
      (each job of a SLURM array or Kubernetes indexed job writes its own shard: --shard $SLURM_ARRAY_TASK_ID)
"""


def parser() -> argparse.ArgumentParser:
    p = new_parser("t2t-cache", "Write tasks' tokenized examples once, for training and evaluation to read with "
                   "--cache-dir.", EXAMPLES)
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--task", dest="name", metavar="NAME", help="a task (see t2t-tasks)")
    group.add_argument("--mixture", dest="name", metavar="NAME", help="a mixture: each of its tasks")
    p.add_argument("--split", action="append", dest="splits",
                   help="a split to write (repeatable; default: train and validation, where a task has them)")
    p.add_argument("--output", required=True, help="the cache folder (DIR/<task>/<split>/)")
    p.add_argument("--num-shards", type=int, default=1, help="how many shards each split is written in")
    p.add_argument("--shard", type=int, default=0, help="which shard this process writes (0 … num-shards - 1)")
    p.add_argument("--input-length", type=int, help="inputs length for tasks with a tokenized stage "
                                                    "(default: the task's T5 lengths, as t2t-train)")
    p.add_argument("--target-length", type=int, help="targets length for tasks with a tokenized stage")
    p.add_argument("--skip-unavailable", action="store_true",
                   help="leave out tasks whose data is missing, with a warning, as t2t-train does")
    add_locations(p)
    return p


@run_cli
def cache_main(argv=None) -> int:
    args = parser().parse_args(argv)
    load_modules(args.modules)
    vocab = load_vocabulary(args.vocab, data_dir=args.data_dir)
    lengths = sequence_length_for(args.name, args.input_length, args.target_length)
    tasks = member_tasks(args.name)
    for task in tasks:
        for split in args.splits or [s for s in ("train", "validation") if s in task.splits]:
            if len(tasks) > 1 and task.splits and split not in task.splits:
                print(f"skipping {task.name} {split}: it has no such split (evaluation-only tasks)", flush=True)
                continue
            try:
                write(args, task, split, vocab, lengths)
            except DataNotFoundError as e:
                if not args.skip_unavailable:
                    raise
                print(f"skipping {task.name} {split}: its data is unavailable ({e})", flush=True)
    return 0


def write(args, task, split: str, vocab, lengths: dict[str, int]) -> None:
    started = time.perf_counter()
    made_from = cache.fingerprint(task, split, vocab, args.data_dir, lengths)
    examples = iter_tokenized(task, split, vocab, args.data_dir, lengths)
    count = cache.write_shard(task, split, examples, made_from, args.output, args.num_shards, args.shard)
    print(f"{task.name} {split}: shard {args.shard + 1} of {args.num_shards}, {count:,} examples "
          f"({time.perf_counter() - started:.1f} s)", flush=True)
