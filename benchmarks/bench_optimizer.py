"""One optimizer step over a T5's parameters: t2t's Adafactor against torch's (single-tensor and foreach), the
one transformers ships, and fused AdamW, in one process, alternating.

Run by hand (never a test):   python benchmarks/bench_optimizer.py [--preset t5-small] [--device cpu|cuda]
                              [--reps 9] [--out benchmarks/results/optimizer.json]

Every optimizer gets its own copy of the same parameters and the same random gradients (scaled to 1e-3), and
takes two warm-up steps first (they make its state). Adafactor's settings are T5's as t2t sets them
(``t2t.training.optim.build_optimizer``: decay -0.8, clipping 1, parameter scaling, epsilon1 1e-15) and, for
transformers' class, their equivalents (relative_step off, scale_parameter on, lr 1e-3). Reports the median
and minimum seconds of a step and each one's time over t2t's.
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import torch
from timing import alternate  # benchmarks/

from t2t.allocator import keep_freed_memory
from t2t.models.t5 import T5, resolve_model_config
from t2t.training.optim import OptimizerConfig, build_optimizer


def optimizers(model: T5) -> dict[str, torch.optim.Optimizer]:
    """Each optimizer over its own copy of ``model``'s parameters and gradients (t2t's over the model's own)."""
    from transformers.optimization import Adafactor as TransformersAdafactor

    def own_copy():
        clone = copy.deepcopy(model)
        for ours, theirs in zip(model.parameters(), clone.parameters()):
            theirs.grad = ours.grad.clone()
        return clone.parameters()

    t2t = build_optimizer(model, OptimizerConfig(name="adafactor", learning_rate=1e-3))
    settings = {k: v for k, v in t2t.defaults.items() if k in ("lr", "beta2_decay", "eps", "d", "weight_decay")}
    return {"t2t Adafactor": t2t,
            "torch Adafactor": torch.optim.Adafactor(own_copy(), foreach=False, **settings),
            "torch Adafactor foreach": torch.optim.Adafactor(own_copy(), foreach=True, **settings),
            "transformers Adafactor": TransformersAdafactor(own_copy(), lr=1e-3, relative_step=False,
                                                            scale_parameter=True, warmup_init=False),
            "fused AdamW": torch.optim.AdamW(own_copy(), lr=1e-3, fused=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="t5-small")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "optimizer.json")
    args = parser.parse_args()
    malloc = "kept" if keep_freed_memory() else "system"
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = T5(resolve_model_config(args.preset)).to(device)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    steps = {name: optimizer.step for name, optimizer in optimizers(model).items()}
    r = alternate(steps, args.reps, warmup=2, device=device)
    ours = r["t2t Adafactor"]["wall_s"]
    results = {"preset": args.preset, "device": args.device, "torch": torch.__version__,
               "threads": torch.get_num_threads(), "malloc": malloc,
               "parameters": sum(p.numel() for p in model.parameters()),
               "steps": {name: {"median_s": t["wall_s"], "min_s": t["wall_min_s"], "over_t2t": t["wall_s"] / ours,
                                "all_s": t["wall_all"]} for name, t in r.items()}}
    print(f"one optimizer step, {args.preset} ({results['parameters'] / 1e6:.1f}M parameters), {args.device}:")
    for name, t in results["steps"].items():
        print(f"  {name:26s} {t['median_s'] * 1e3:8.1f} ms (min {t['min_s'] * 1e3:.1f})  {t['over_t2t']:.2f}× t2t's")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
