"""What the preprocessed cache (t2t-cache) saves: time to the first training batch and steps/s, with and without
it, each in a fresh process so nothing tokenized stays in memory (run by hand, never a test).

    T2T_DATA_DIR=../shared/data python benchmarks/bench_cache.py [--mixture glue_v002] [--shards 2] [--steps 20]

Writes the cache with ``t2t-cache`` in ``--shards`` processes side by side (timed), then, in a fresh process
each, builds the training batches of ``--mixture`` from the sources and from the cache and times the first
batch, and trains t5-tiny ``--steps`` steps each way (the losses must be equal). Members whose data is
missing are left out (``--skip-unavailable``). Results: JSON on stdout and in --out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "cache.json"

FIRST_BATCH = """
import json, sys, time
started = time.perf_counter()
from t2t.data.cache import reading_cache
from t2t.data.pipeline import build_train_batches
from t2t.data.vocab import load_vocabulary
vocab = load_vocabulary(None)
imported = time.perf_counter()
with reading_cache(sys.argv[2] or None):
    batches = build_train_batches(sys.argv[1], vocab=vocab, batch_size=32, input_length=512, target_length=84,
                                  skip_unavailable=True)
    next(iter(batches))
print(json.dumps({"first_batch_seconds": time.perf_counter() - imported, "imports_seconds": imported - started}))
"""


def command(main: str, *args: str) -> list[str]:
    return [sys.executable, "-c", f"import sys; from t2t.cli import {main}; sys.exit({main}())", *args]


def write_cache(args, out: Path) -> float:
    started = time.perf_counter()
    writers = [subprocess.Popen(command("cache_main", "--mixture", args.mixture, "--split", "train", "--output",
                                        str(out), "--num-shards", str(args.shards), "--shard", str(i),
                                        "--skip-unavailable"))
               for i in range(args.shards)]
    if any(writer.wait() for writer in writers):
        sys.exit("t2t-cache failed")
    return time.perf_counter() - started


def first_batch(args, cache_dir: str) -> dict:
    run = subprocess.run([sys.executable, "-c", FIRST_BATCH, args.mixture, cache_dir], check=True,
                         capture_output=True, text=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def training(args, out: Path, cache_dir: str) -> dict:
    extra = ["--cache-dir", cache_dir] if cache_dir else []
    started = time.perf_counter()
    subprocess.run(command("train_main", "--mixture", args.mixture, "--model", "t5-tiny", "--batch-size", "32",
                           "--train-steps", str(args.steps), "--log-every", "1", "--eval-every", "0",
                           "--save-every", str(args.steps), "--skip-unavailable", "--set", "input_length=512",
                           "--set", "target_length=84",
                           "--output-dir", str(out), *extra), check=True, capture_output=True)
    wall = time.perf_counter() - started
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    later = [r for r in records if "steps_per_second" in r][1:]  # the first window holds the warm-up
    return {"wall_seconds": wall, "losses": losses,
            "steps_per_second": sum(r["steps_per_second"] for r in later) / max(len(later), 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mixture", default="glue_v002")
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cache_dir = Path(tmp) / "cache"
        result = {"mixture": args.mixture, "shards": args.shards,
                  "write_seconds": write_cache(args, cache_dir),
                  "cache_megabytes": sum(f.stat().st_size for f in cache_dir.rglob("*")) / 2**20,
                  "first_batch": {"source": first_batch(args, ""), "cache": first_batch(args, str(cache_dir))},
                  "training": {"source": training(args, Path(tmp) / "source", ""),
                               "cache": training(args, Path(tmp) / "cached", str(cache_dir))}}
    result["same_losses"] = result["training"]["source"]["losses"] == result["training"]["cache"]["losses"]
    print(json.dumps(result, indent=2))
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
