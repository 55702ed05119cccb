"""A server's memory over many batches of mixed shapes (run by hand, never a test):

    T2T_DATA_DIR=/work/shared/data python benchmarks/bench_batch_memory.py --checkpoint RUN --name t5-small

Decodes ``--batches`` batches of 1-32 random SST-2 validation inputs (``glue_sst2_v002``), shaped as t2t-serve
shapes them (``in_buckets``), on the worker thread a server would use, with the allocator settings the commands
use (``keep_freed_memory``), and prints the process's RSS every 300 batches. CPU kernel libraries keep a kernel
per shape, so memory grows while new shapes appear; bounded shapes make it level off. Writes
``benchmarks/results/batch-memory-<--name>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import threading
from pathlib import Path

import psutil
import torch

from t2t.allocator import keep_freed_memory
from t2t.data.task import get_task, load_modules
from t2t.evaluation.evaluate import DecodingConfig
from t2t.evaluation.predict import PredictConfig, Predictor, run_settings
from t2t.serve.service import in_buckets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--batches", type=int, default=2400)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--name", default="cpu", help="results go to benchmarks/results/batch-memory-NAME.json")
    args = parser.parse_args()
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    load_modules()
    task = get_task("glue_sst2_v002")
    texts = [task.preprocess(row)["inputs"] for row in task.raw_examples("validation", os.environ["T2T_DATA_DIR"])]
    predictor = Predictor.load(run_settings(PredictConfig(checkpoint=args.checkpoint, max_length=4, device="cpu")))
    rows = predictor.encode(texts, None)
    rng, process, rss = random.Random(0), psutil.Process(), {}

    def work():
        for i in range(args.batches + 1):
            if i % 300 == 0:
                rss[i] = round(process.memory_info().rss / 2**20)
            batch = in_buckets(rng.sample(rows, rng.randint(1, 32)), 32)
            predictor.decode(batch, DecodingConfig(batch_size=len(batch), max_length=4), desc="serve")

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    out = Path(__file__).resolve().parent / "results" / f"batch-memory-{args.name}.json"
    out.write_text(json.dumps({"checkpoint": args.checkpoint, "threads": args.threads, "rss_mib_by_batch": rss},
                              indent=2) + "\n")
    print(out.read_text(), end="")


if __name__ == "__main__":
    main()
