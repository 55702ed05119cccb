"""Decoding batches of mixed lengths with their rows packed for the encoder, against the batch as it is (run
by hand, never a test):

    T2T_DATA_DIR=/work/shared/data python benchmarks/bench_packed_rows.py           # t5-small, 1 thread

A server's batch holds the requests that arrived together; t2t-predict sorts its inputs by length first. This
decodes the SST-2 validation inputs (``glue_sst2_v002``, T5's vocabulary) greedily, 4 tokens, with a random
t5-small (the cost does not depend on the weights): in batches of 32 sorted by length (t2t-predict), and in
random batches of each ``--sizes``, padded as t2t-serve pads them (``in_buckets``), with the encoder's rows
packed (``T5.encode_rows``) and without (``pack_rows`` turned off), in alternation (``timing.alternate``).
Reports CPU milliseconds per example and checks that both arms decode the same tokens. Results: JSON on
stdout and in --out.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

import numpy as np
import torch
from timing import alternate  # benchmarks/

from t2t.data.task import get_task, load_modules
from t2t.data.vocab import load_vocabulary
from t2t.evaluation.evaluate import pad_rows
from t2t.models import t5 as t5_module
from t2t.models.t5 import T5, resolve_model_config
from t2t.serve.service import in_buckets


def sst2_rows(data_dir: str) -> list[np.ndarray]:
    task = get_task("glue_sst2_v002")
    vocab = load_vocabulary(None, data_dir)
    texts = [task.preprocess(row)["inputs"] for row in task.raw_examples("validation", data_dir)]
    return [np.asarray(ids + [vocab.eos_id]) for ids in vocab.encode_batch(texts)]


def decode_all(model: T5, batches: list[torch.Tensor], packed: bool) -> list[torch.Tensor]:
    pack_rows = t5_module.pack_rows
    if not packed:
        t5_module.pack_rows = lambda tokens, pad_id: None
    try:
        with torch.no_grad(), model.dense_attention():
            return [model.generate(batch, max_new_tokens=4) for batch in batches]
    finally:
        t5_module.pack_rows = pack_rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="t5-small")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--examples", type=int, default=256, help="inputs decoded per arm and size")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "packed-rows.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_modules()
    rows = sst2_rows(os.environ["T2T_DATA_DIR"])
    torch.manual_seed(0)
    model = T5(resolve_model_config(args.preset)).eval()
    chosen = random.Random(0).sample(rows, args.examples)
    ordered = sorted(chosen, key=len)
    arms = {"sorted 32 (t2t-predict)": [pad_rows(ordered[i:i + 32]) for i in range(0, len(ordered), 32)]}
    for size in args.sizes:
        arms[f"random {size}"] = [pad_rows(in_buckets(chosen[i:i + size], size)) for i in range(0, len(chosen), size)]
    fns = {}
    for name, batches in arms.items():
        fns[f"{name} packed"] = lambda batches=batches: decode_all(model, batches, packed=True)
        if not name.startswith("sorted"):
            fns[f"{name} as it is"] = lambda batches=batches: decode_all(model, batches, packed=False)
    decoded = {name: fn() for name, fn in fns.items()}  # also the warm-up
    for name in arms:
        if not name.startswith("sorted"):
            same = all(torch.equal(a, b) for a, b in zip(decoded[f"{name} packed"], decoded[f"{name} as it is"]))
            assert same, f"{name}: packing changed the decoded tokens"
    timed = alternate(fns, args.reps, warmup=0)
    results = {"preset": args.preset, "threads": args.threads, "examples": args.examples,
               "cpu_ms_per_example": {name: round(1000 * r["cpu_s"] / args.examples, 2) for name, r in timed.items()}}
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
