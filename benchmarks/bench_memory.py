"""Peak memory and step time of a training step with and without activation checkpointing.

Run by hand (never a test):   python benchmarks/bench_memory.py [--preset t5-base] [--device cpu|cuda] [--steps 2]

Each setting runs in its own subprocess, so that one's peak cannot hide the other's: it builds the preset
(dropout 0.1, as T5 fine-tuned), then times ``--steps`` forward + backward passes of the trainer's loss
(``TrainingObjective``, row-seeded dropout as ``train_step`` draws it) on a packed-shape batch of
8 × 512 → 114 (T5's GLUE lengths are 512 → 84; 114 is the issue's). No optimizer: its state is the same with
and without checkpointing. Peak memory on the CPU is the process's peak resident set (``ru_maxrss``) less the
resident set before the first step (weights, and the gradients' first allocation, excluded); on CUDA
``torch.cuda.max_memory_allocated`` less the allocation before the step. Writes --out (default
benchmarks/results/memory-<device>-<preset>.json).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parent / "results"


def resident_bytes() -> int:
    """This process's resident set now (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def child(preset: str, device: str, steps: int, checkpointed: bool) -> dict:
    """One setting, in this (fresh) process."""
    from t2t.models import checkpointing, distributed
    from t2t.models.dropout import row_generators
    from t2t.models.t5 import T5, resolve_model_config
    from t2t.training.train import TrainingObjective

    torch.manual_seed(0)
    cfg = resolve_model_config(preset)
    cfg.dropout_rate = 0.1
    model = T5(cfg).to(device).train()
    checkpointing.enable(model, checkpointed)
    objective = TrainingObjective(model)
    g = torch.Generator().manual_seed(1)
    B, S, T = 8, 512, 114
    batch = {"encoder_input_tokens": torch.randint(2, 32000, (B, S), generator=g),
             "decoder_input_tokens": torch.randint(2, 32000, (B, T), generator=g),
             "decoder_target_tokens": torch.randint(2, 32000, (B, T), generator=g)}
    batch["decoder_loss_weights"] = torch.ones_like(batch["decoder_target_tokens"])
    batch = {k: v.to(device) for k, v in batch.items()}
    for p in model.parameters():  # gradients allocated before the measurement: they are not activations
        p.grad = torch.zeros_like(p)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated() if device == "cuda" else resident_bytes()
    seconds = []
    for step in range(steps):
        started = time.perf_counter()
        with row_generators(distributed.row_seeds(0, step, list(range(B)))):
            loss = objective(batch)
        loss.backward()
        if device == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - started)
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"activation_checkpointing": checkpointed, "peak_above_weights_and_grads_mib": (peak - before) / 2**20,
            "step_seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="t5-base")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--out", type=Path, help="the JSON file (default: results/memory-<device>-<preset>.json)")
    parser.add_argument("--child", choices=["on", "off"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.preset, args.device, args.steps, args.child == "on")))
        return
    rows = []
    for setting in ("off", "on"):
        run = subprocess.run([sys.executable, __file__, "--preset", args.preset, "--device", args.device,
                              "--steps", str(args.steps), "--child", setting], capture_output=True, text=True, check=True)
        rows.append(json.loads(run.stdout.splitlines()[-1]))
        print(rows[-1], flush=True)
    off, on = rows
    summary = {"memory_ratio": on["peak_above_weights_and_grads_mib"] / off["peak_above_weights_and_grads_mib"],
               "step_time_ratio": min(on["step_seconds"]) / min(off["step_seconds"])}
    print(summary)
    out = args.out or RESULTS / f"memory-{args.device}-{args.preset}.json"
    out.write_text(json.dumps({"preset": args.preset, "device": args.device, "batch": "8 x 512 -> 114",
                               "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
                               "threads": torch.get_num_threads(), "results": rows, **summary}, indent=2))


if __name__ == "__main__":
    main()
