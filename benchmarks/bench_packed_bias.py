"""Packed rows with their positions against without them: what the shared position bias saves (run by hand,
never a test).

    python benchmarks/bench_packed_bias.py                                    # CPU: t5-small, 8 × 512→114, fp32
    python benchmarks/bench_packed_bias.py --device cuda --preset t5.1.1-base --batch 128 --precision bf16

The trainer's ``TrainingObjective`` leaves packed rows' positions out, so the model builds one position bias
for every row instead of one a row (the same loss: positions restart in each segment). This times forward and
backward of the model's ``loss_sums`` on rows the packer made from random examples of 16–128 input and 2–32
target tokens, with the positions (``loss_sums(batch)``) and through ``TrainingObjective``, alternating, and
reports the medians, the minima and their ratio. Eager: the difference is the bias and its gradient, not
compilation. Results: JSON on stdout and in --out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from timing import alternate  # benchmarks/

from t2t.data.features import get_converter
from t2t.models import kernels
from t2t.models.t5 import T5, resolve_model_config
from t2t.training.train import TrainingObjective


def packed_batch(batch: int, lengths: tuple[int, int], vocab_size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """``batch`` rows of random examples, packed as the trainer packs them, up to the first that does not fit."""
    rng = np.random.default_rng(seed)
    packer = get_converter("encoder_decoder", *lengths, pack=True).packer(batch)
    while packer.add({"inputs": rng.integers(2, vocab_size, rng.integers(16, 129)).tolist() + [1],
                      "targets": rng.integers(2, vocab_size, rng.integers(2, 33)).tolist() + [1]}):
        pass
    return packer.flush()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="t5-small")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lengths", type=int, nargs=2, default=[512, 114], metavar=("INPUTS", "TARGETS"))
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "packed-bias.json")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = T5(resolve_model_config({"preset": args.preset, "dropout_rate": 0.0})).to(device).train()
    batch = {k: v.to(device) for k, v in packed_batch(args.batch, args.lengths, model.config.vocab_size).items()}
    ways = {"with positions (a bias a row)": lambda: model.loss_sums(batch)[0],
            "without (TrainingObjective: one bias)": lambda: TrainingObjective(model)(batch)}

    def step(loss_of):
        with kernels.autocast(args.precision, device):
            loss = loss_of()
        loss.backward()
        model.zero_grad(set_to_none=True)

    r = alternate({name: lambda loss_of=loss_of: step(loss_of) for name, loss_of in ways.items()}, args.reps,
                  warmup=1, device=device)
    result = {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
              "segments_per_row": float((batch["encoder_segment_ids"].amax(1)).float().mean()),
              "seconds": {name: {"median": t["wall_s"], "min": t["wall_min_s"]} for name, t in r.items()}}
    with_positions, without = result["seconds"].values()
    result["speedup"] = {stat: with_positions[stat] / without[stat] for stat in ("median", "min")}
    print(json.dumps(result, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
