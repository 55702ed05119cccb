"""The architectures of T5 §3.2 (Table 2): parameters, forward FLOPs per token, and a timed training step.

Run by hand (never a test):   python benchmarks/bench_architectures.py [--reps 5] [--device cpu|cuda]
                              [--shape small|base] [--batch B S T] [--threads N]
                              [--out benchmarks/results/architectures.json]

``sizes``: every architecture preset in configs/models, its parameter count (built on the meta device) and
its forward FLOPs per token for an example of 512 input + 512 target tokens (every matmul, attention scores
and values included, counted dense as the kernels compute them; the output layer on the target tokens,
where the loss is). ``steps``: one training step (forward, loss, backward, AdamW) of each architecture at
the t5-small (or t5-base) shape on full rows of ``S`` input and ``T`` target tokens, as tokens per second and
as a ratio to the encoder-decoder's; the decoder-only models run at two depths: the encoder-decoder's
per-stack depth (Table 2's pairing: same FLOPs per token, half the parameters) and twice it (the same
parameter count, twice the FLOPs per token). Ratios of medians and of minima (the least disturbed runs)
over ``--reps`` alternating repetitions; the machine may be shared, so compare the two.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path
from typing import Callable

import torch
from timing import alternate  # benchmarks/

from t2t import config as config_lib
from t2t.data.features import get_converter
from t2t.models.t5 import T5, ModelConfig, resolve_model_config

ROOT = Path(__file__).resolve().parent


def forward_flops(cfg: ModelConfig, S: int, T: int) -> float:
    """Forward FLOPs of one example of ``S`` input and ``T`` target tokens."""
    d, f, inner, V = cfg.d_model, cfg.d_ff, cfg.num_heads * cfg.d_kv, cfg.vocab_size
    ff = (3 if cfg.feed_forward_proj == "gated-gelu" else 2) * d * f
    self_attn = 4 * d * inner

    def stack(tokens: int, layers: int) -> float:  # projections + scores and values of self-attention
        return 2 * layers * (tokens * (self_attn + ff) + 2 * tokens * tokens * inner)

    if not cfg.has_encoder:
        return stack(S + T, cfg.num_layers) + 2 * T * d * V
    cross = 2 * cfg.decoder_layers * (T * 2 * d * inner + S * 2 * d * inner + 2 * T * S * inner)
    return stack(S, cfg.num_layers) + stack(T, cfg.decoder_layers) + cross + 2 * T * d * V


def sizes() -> list[dict]:
    rows = []
    for name in config_lib.config_names("models"):
        cfg = resolve_model_config(name)
        with torch.device("meta"):
            params = T5(cfg).num_parameters()
        rows.append({"preset": name, "architecture": cfg.architecture, "parameters": params,
                     "forward_flops_per_token": forward_flops(cfg, 512, 512) / 1024})
    return rows


def batch_for(cfg: ModelConfig, B: int, S: int, T: int, device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    examples = [{"inputs": torch.randint(3, 32000, (S,), generator=g).numpy(),
                 "targets": torch.randint(3, 32000, (T,), generator=g).numpy()} for _ in range(B)]
    batch = get_converter(cfg.architecture, S, T).convert(examples, B)
    return {k: v.to(device) for k, v in batch.items()}


def training_step(model: T5, optimizer, batch) -> Callable[[], None]:
    def step():
        loss, weight = model.loss_sums(batch)
        (loss / weight).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def steps(shape: str, B: int, S: int, T: int, reps: int, device) -> list[dict]:
    base = resolve_model_config(f"t5-{shape}")
    L = base.num_layers
    variants = {"encoder_decoder": {}, "shared_encoder_decoder": {"architecture": "shared_encoder_decoder"},
                f"decoder_only L={L}": {"architecture": "decoder_only"},
                f"prefix_lm L={L}": {"architecture": "prefix_lm"},
                f"decoder_only L={2 * L}": {"architecture": "decoder_only", "num_layers": 2 * L},
                f"prefix_lm L={2 * L}": {"architecture": "prefix_lm", "num_layers": 2 * L}}
    models, fns = {}, {}
    for name, fields in variants.items():
        cfg = resolve_model_config({"preset": f"t5-{shape}", "dropout_rate": 0.0, **fields})
        model = T5(cfg).to(device).train()
        models[name] = model, cfg
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        fns[name] = training_step(model, optimizer, batch_for(cfg, B, S, T, device))
    r = alternate(fns, reps, warmup=1, device=device)
    reference = r["encoder_decoder"]
    rows = []
    for name, (model, cfg) in models.items():
        t = r[name]
        rows.append({"model": name, "parameters": model.num_parameters(),
                     "forward_flops_per_token": forward_flops(cfg, S, T) / (S + T),
                     "step_seconds_median": t["wall_s"], "step_seconds_min": t["wall_min_s"],
                     "tokens_per_second": B * (S + T) / t["wall_s"],
                     "speed_vs_encoder_decoder_median": reference["wall_s"] / t["wall_s"],
                     "speed_vs_encoder_decoder_min": reference["wall_min_s"] / t["wall_min_s"]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shape", default="small", choices=["small", "base"])
    parser.add_argument("--batch", type=int, nargs=3, default=[8, 128, 128], metavar=("B", "S", "T"))
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (default: torch's)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "architectures.json")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    result = {"device": torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "cpu",
              "threads": torch.get_num_threads(), "torch": torch.__version__, "batch": args.batch, "sizes": sizes(),
              "steps": steps(args.shape, *args.batch, args.reps, device)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for row in result["sizes"]:
        print(f"{row['preset']:32s} {row['architecture']:24s} {row['parameters'] / 1e6:9.1f}M "
              f"{row['forward_flops_per_token'] / 1e6:9.1f} MFLOP/token")
    for row in result["steps"]:
        print(f"{row['model']:28s} {row['parameters'] / 1e6:7.1f}M {row['forward_flops_per_token'] / 1e6:7.1f} "
              f"MFLOP/tok {row['tokens_per_second']:10.0f} tok/s  x{row['speed_vs_encoder_decoder_median']:.2f} "
              f"(median)  x{row['speed_vs_encoder_decoder_min']:.2f} (min)")


if __name__ == "__main__":
    main()
