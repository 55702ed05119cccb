"""Does a real training run wait for its data? The trainer's own ``data_wait_share`` with batches made ahead and
without (run by hand, never a test).

    T2T_DATA_DIR=../shared/data python benchmarks/bench_data_wait.py            # GPU: t5.1.1-base, GLUE, 128 × 512
    T2T_DATA_DIR=../shared/data python benchmarks/bench_data_wait.py --model t5-tiny --batch-size 8 \\
        --device cpu --precision fp32 --no-compile --steps 6 --log-every 2        # a smoke run anywhere

Trains ``--model`` on ``--mixture`` (members without local data skipped) with ``t2t.training.train.train`` —
the real pipeline, packing, loop, logging and a checkpoint at the last step — once with ``batches_ahead`` 2 (the
CUDA default: a background thread packs two batches ahead) and once with 0 (each batch packed inside the step;
``--batches-ahead`` chooses),
and reads from each run's metrics the share of each logged window that the steps spent waiting for their
batches, the steps/s and the tokens/s, leaving out the first window (compilation, tokenization, warm-up). Where
bench_pipeline.py's fourth part stands in for the GPU step with a sleep, this is the GPU step itself. Each
optimizer of ``--optimizers`` after the first (T5's Adafactor) adds a run with batches ahead, to set the
trainer's step against bench_gpu.py's bare one (fused AdamW). ``--profile`` adds a short run (batches ahead,
the first optimizer) whose steps 6–8 run under torch.profiler, and writes its ops by self time on the device and
on the host beside --out (``.profile.txt``): where a step's time goes, host reads (``_local_scalar_dense``)
included. Results: JSON on stdout and in --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from torch.profiler import ProfilerActivity, profile, schedule

from t2t import config
from t2t.training import train as trainer
from t2t.training.train import TrainConfig, train

RESULTS = Path(__file__).resolve().parent / "results" / "data-wait.json"


def settings(args, ahead: int, optimizer: str, out: str, steps: int | None = None) -> TrainConfig:
    steps = steps or args.steps
    return config.from_dict(TrainConfig, {
        "mixture": args.mixture, "model": args.model, "output_dir": out, "train_steps": steps,
        "batch_size": args.batch_size, "input_length": args.lengths[0], "target_length": args.lengths[1],
        "pack": True, "log_every": args.log_every, "save_every": steps, "keep_checkpoints": 1,
        "skip_unavailable": True, "precision": args.precision, "compile": not args.no_compile,
        "device": args.device, "batches_ahead": ahead, "optimizer": {"name": optimizer}})


def profiled_steps(args, optimizer: str) -> str:
    """A run of 8 steps whose steps 6-8 run under torch.profiler (each ``train_step`` ticks its schedule): the
    tables of their ops by self time on the device and on the host (the host's alone where there is no GPU)."""
    cuda = args.device == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    original = trainer.train_step
    with profile(activities=activities, schedule=schedule(wait=4, warmup=1, active=3)) as profiler:
        def ticking(*step_args, **step_kwargs):
            result = original(*step_args, **step_kwargs)
            profiler.step()
            return result

        trainer.train_step = ticking
        try:
            with tempfile.TemporaryDirectory() as out:
                train(settings(args, 2, optimizer, out, steps=8))
        finally:
            trainer.train_step = original
    sorts = ["self_device_time_total", "self_cpu_time_total"] if cuda else ["self_cpu_time_total"]
    return "\n\n".join(profiler.key_averages().table(sort_by=sort, row_limit=40) for sort in sorts)


def after_warm_up(records: list[dict]) -> dict:
    kept = records[1:] or records
    shares = [r["data_wait_share"] for r in kept]
    return {"windows": len(kept), "data_wait_share_median": statistics.median(shares),
            "data_wait_share_max": max(shares),
            "steps_per_second_median": statistics.median(r["steps_per_second"] for r in kept),
            "tokens_per_second_median": statistics.median(r["tokens_per_second"] for r in kept)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixture", default="glue_v002")
    parser.add_argument("--model", default="t5.1.1-base")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lengths", type=int, nargs=2, default=[512, 128], metavar=("INPUTS", "TARGETS"))
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--batches-ahead", type=int, nargs="+", default=[2, 0],
                        help="a run of the first optimizer for each (the later optimizers: the first value)")
    parser.add_argument("--optimizers", nargs="+", default=["adafactor"], choices=["adafactor", "adamw"])
    parser.add_argument("--profile", action="store_true", help="profile steps 6-8 of a short run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = {"settings": {k: v for k, v in vars(args).items() if k != "out"}, "runs": {}}
    first = args.optimizers[0]
    runs = [(ahead, first) for ahead in args.batches_ahead] + [(args.batches_ahead[0], other)
                                                                 for other in args.optimizers[1:]]
    for ahead, optimizer in runs:
        with tempfile.TemporaryDirectory() as out:
            result["runs"][f"{optimizer}, batches_ahead_{ahead}"] = after_warm_up(
                train(settings(args, ahead, optimizer, out)))
    print(json.dumps(result, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    if args.profile:
        table = profiled_steps(args, first)
        print(table)
        args.out.with_suffix(".profile.txt").write_text(table + "\n")


if __name__ == "__main__":
    main()
