"""t2t on an accelerator: training tokens/s and MFU at nanoT5's setting, and greedy decoding, eager and compiled.

Run by hand when a GPU is at hand (never a test):

    python benchmarks/bench_gpu.py                       # t5.1.1-base, batch 128 × 512→114, bf16, CUDA
    python benchmarks/bench_gpu.py --attention flex      # FlexAttention instead of SDPA
    python benchmarks/bench_gpu.py --preset t5-tiny --device cpu --batch 4 --steps 3   # the code path, anywhere

Training: ``loss_sums`` + backward + Adafactor (t2t's optimizer) on random full rows (no padding), bf16
autocast, eager and under ``torch.compile`` (the forward, loss and backward compiled as one function).
nanoT5 trains T5 1.1-base at this setting (batch 128 × 512→114, bf16, compile) on one A100 in 0.56 s a step.
Decoding: greedy, batch 32 × 128→32 (EOS suppressed, so every row decodes 32 tokens), eager and with the
compiled static-shape step. MFU is the model FLOPs (counted from the shapes: 3 × every forward matmul,
attention included, for training; 1 × for decoding) per second over the device's peak bf16 dense rate
(``--peak-tflops``; default from the device name: H100 989, H200 989, A100 312). Results: JSON on stdout and
in --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from t2t.models.kernels import autocast
from t2t.models.t5 import T5, ModelConfig, resolve_model_config
from t2t.training.optim import OptimizerConfig, build_optimizer

PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}  # dense, no sparsity


def peak_tflops(device: torch.device, given: float | None) -> float | None:
    if given or device.type != "cuda":
        return given
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)


def forward_flops(cfg: ModelConfig, B: int, S: int, T: int) -> float:
    """Matmul FLOPs of one teacher-forced forward pass (2 per multiply-add)."""
    d, f, inner, L, V = cfg.d_model, cfg.d_ff, cfg.num_heads * cfg.d_kv, cfg.num_layers, cfg.vocab_size
    ff = (3 if cfg.feed_forward_proj == "gated-gelu" else 2) * d * f
    enc = B * S * L * (4 * d * inner + ff) + L * B * cfg.num_heads * S * S * cfg.d_kv * 2
    dec = B * T * L * (6 * d * inner + ff) + B * S * L * 2 * d * inner
    dec += L * B * cfg.num_heads * (T * T + T * S) * cfg.d_kv * 2
    return 2.0 * (enc + dec + B * T * d * V)


def batch(B: int, S: int, T: int, vocab: int, device) -> dict:
    g = torch.Generator().manual_seed(0)
    tgt = torch.randint(2, vocab - 100, (B, T), generator=g)
    return {k: v.to(device) for k, v in dict(
        encoder_input_tokens=torch.randint(2, vocab - 100, (B, S), generator=g),
        decoder_input_tokens=torch.cat([torch.zeros(B, 1, dtype=torch.long), tgt[:, :-1]], 1),
        decoder_target_tokens=tgt, decoder_loss_weights=torch.ones(B, T)).items()}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, steps: int, warmup: int) -> tuple[list[float], float]:
    """Per-call seconds after ``warmup`` calls, and the seconds the first call took (compilation)."""
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    first = time.perf_counter() - start
    for _ in range(warmup - 1):
        fn()
    times = []
    for _ in range(steps):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return times, first


def training(model: T5, data: dict, compile: bool, precision: str, device):
    optimizer = build_optimizer(model, OptimizerConfig())

    def loss(b):
        with autocast(precision, device):
            loss_sum, weight = model.loss_sums(b)
        return loss_sum / weight

    loss_fn = torch.compile(loss, fullgraph=True) if compile else loss

    def step():
        loss_fn(data).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def decoding(model: T5, enc: torch.Tensor, n: int, compile: bool, precision: str, device):
    def run():
        with autocast(precision, device):
            return model.generate(enc, max_new_tokens=n, min_new_tokens=n, compile=compile)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="t5.1.1-base")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    parser.add_argument("--attention", default="sdpa", choices=["sdpa", "flex"])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lengths", type=int, nargs=2, default=[512, 114], metavar=("INPUTS", "TARGETS"))
    parser.add_argument("--decode", type=int, nargs=3, default=[32, 128, 32], metavar=("BATCH", "INPUTS", "NEW"))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--peak-tflops", type=float, default=None)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "gpu.json")
    args = parser.parse_args()
    device = torch.device(args.device)
    cfg = resolve_model_config({"preset": args.preset, "dropout_rate": 0.0, "attention": args.attention})
    peak = peak_tflops(device, args.peak_tflops)
    B, (S, T) = args.batch, args.lengths
    results = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
               "torch": torch.__version__, "preset": args.preset, "precision": args.precision,
               "attention": args.attention, "peak_tflops": peak, "train": {}, "decode": {}}
    data = batch(B, S, T, cfg.vocab_size, device)
    for compile in (False, True):
        model = T5(cfg).to(device).train()
        times, first = timed(training(model, data, compile, args.precision, device), device, args.steps, args.warmup)
        step = statistics.median(times)
        flops = 3 * forward_flops(cfg, B, S, T) / step
        results["train"]["compiled" if compile else "eager"] = {
            "step_s": step, "first_step_s": first, "tokens_per_s": B * (S + T) / step,
            "tflops": flops / 1e12, "mfu": flops / (peak * 1e12) if peak else None}
        del model
    DB, DS, DN = args.decode
    enc = batch(DB, DS, 1, cfg.vocab_size, device)["encoder_input_tokens"]
    model = T5(cfg).to(device).eval()
    for compile in (False, True):
        times, first = timed(decoding(model, enc, DN, compile, args.precision, device), device,
                             max(3, args.steps // 2), args.warmup)
        seconds = statistics.median(times)
        results["decode"]["compiled" if compile else "eager"] = {
            "decode_s": seconds, "first_call_s": first, "new_tokens_per_s": DB * DN / seconds}
    print(json.dumps(results, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
