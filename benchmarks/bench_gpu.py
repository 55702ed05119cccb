"""t2t and transformers' T5 on an accelerator: training tokens/s and MFU at nanoT5's setting, and greedy
decoding, eager and compiled, on the same weights.

Run by hand when a GPU is at hand (never a test):

    python benchmarks/bench_gpu.py                       # t5.1.1-base, batch 128 × 512→114, bf16, CUDA
    python benchmarks/bench_gpu.py --preset t5-tiny --device cpu --batch 4 --steps 3 --decode 2 16 4  # anywhere

Variants: t2t with SDPA (a dense bias per stack), t2t with FlexAttention (T5's bias inside the kernel), and
transformers' ``T5ForConditionalGeneration`` built from the same config, whose random weights are copied
into both t2t models through t2t's key map. Training: forward, mean token cross-entropy, backward and fused
AdamW (the same optimizer for all) on random full rows (no padding), bf16 autocast with fp32 weights (as
nanoT5 and ``precision: bf16`` do), eager and under ``torch.compile`` (forward and loss compiled as one
function; transformers' without ``fullgraph``). nanoT5 trains T5 1.1-base at this setting on one A100 in
0.56 s a step. Decoding: greedy and beam search (``--beams``, 4 by default), batch 32 × 128→32 (EOS
suppressed, so every row decodes 32 tokens); t2t eager and with its compiled static-shape step, each replayed
as a CUDA graph (t2t's default) and not, transformers' ``generate`` eager. MFU is the model FLOPs
(counted from the shapes: 3 × every forward matmul, attention included, for training) per second over the
device's peak dense bf16 rate (``--peak-tflops``; by default from the device's name). A variant that runs
out of memory or fails is reported as such. Results: JSON on stdout and in --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import statistics
from pathlib import Path

import torch
from timing import timed  # benchmarks/

from t2t.checkpoints.hf import hf_key
from t2t.models.kernels import autocast
from t2t.models.t5 import T5, ModelConfig, resolve_model_config

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


def transformers_model(cfg: ModelConfig):
    """transformers' T5 with t2t's shape; its random weights are the ones every variant uses."""
    import transformers

    torch.manual_seed(0)
    return transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=cfg.vocab_size, d_model=cfg.d_model, d_kv=cfg.d_kv, d_ff=cfg.d_ff, num_layers=cfg.num_layers,
        num_heads=cfg.num_heads, relative_attention_num_buckets=cfg.relative_attention_num_buckets,
        relative_attention_max_distance=cfg.relative_attention_max_distance, dropout_rate=0.0,
        feed_forward_proj=cfg.feed_forward_proj, tie_word_embeddings=cfg.tie_word_embeddings,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))


def t2t_model(cfg: ModelConfig, attention: str, hf) -> T5:
    model = T5(dataclasses.replace(cfg, attention=attention))
    state = hf.state_dict()
    model.load_state_dict({k: state[hf_key(k)] for k in model.state_dict()})
    return model


def batch(B: int, S: int, T: int, vocab: int, device) -> dict:
    g = torch.Generator().manual_seed(0)
    tgt = torch.randint(2, vocab - 100, (B, T), generator=g)
    return {k: v.to(device) for k, v in dict(
        encoder_input_tokens=torch.randint(2, vocab - 100, (B, S), generator=g),
        decoder_input_tokens=torch.cat([torch.zeros(B, 1, dtype=torch.long), tgt[:, :-1]], 1),
        decoder_target_tokens=tgt, decoder_loss_weights=torch.ones(B, T)).items()}


def timed_calls(fn, device, steps: int, warmup: int) -> tuple[list[float], float]:
    """Per-call seconds after ``warmup`` calls, and the seconds the first call took (compilation)."""
    first = timed(fn, device)[0]
    for _ in range(warmup - 1):
        fn()
    return [timed(fn, device)[0] for _ in range(steps)], first


def mean_loss(model, kind: str):
    """The mean token cross-entropy of a batch: t2t's ``loss_sums``, transformers' ``labels`` loss."""
    if kind == "transformers":
        return lambda b: model(input_ids=b["encoder_input_tokens"], decoder_input_ids=b["decoder_input_tokens"],
                               labels=b["decoder_target_tokens"]).loss

    def loss(b):
        loss_sum, weight = model.loss_sums(b)
        return loss_sum / weight
    return loss


def training_step(model, kind: str, data: dict, compile: bool, precision: str, device):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    loss = mean_loss(model, kind)

    def forward(b):
        with autocast(precision, device):
            return loss(b)

    forward = torch.compile(forward, fullgraph=kind != "transformers") if compile else forward

    def step():
        forward(data).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def decoding(model, kind: str, enc: torch.Tensor, n: int, beams: int, compile: bool, graph: bool, precision: str,
             device):
    def run():
        with torch.no_grad(), autocast(precision, device):
            if kind == "transformers":
                return model.generate(input_ids=enc, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                      num_beams=beams)[:, 1:]
            return model.generate(enc, max_new_tokens=n, min_new_tokens=n, num_beams=beams, compile=compile,
                                  cuda_graph=graph)
    return run


def measure(fn, device, steps: int, warmup: int) -> dict:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    try:
        times, first = timed_calls(fn, device, steps, warmup)
    except torch.cuda.OutOfMemoryError:
        return {"error": "out of memory"}
    except Exception as error:  # a variant that cannot run (a kernel the device lacks) is reported, not fatal
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return {"seconds": statistics.median(times), "first_call_s": first,
            "peak_memory_gb": torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None}


def variants(cfg: ModelConfig, hf, names: list[str]):
    """(name, kind, model factory) for each model compared."""
    factories = {"t2t sdpa": lambda: t2t_model(cfg, "sdpa", hf), "t2t flex": lambda: t2t_model(cfg, "flex", hf),
                 "transformers": lambda: hf}
    return [(name, name.split()[0], factories[name]) for name in names]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="t5.1.1-base")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    parser.add_argument("--models", nargs="+", default=["t2t sdpa", "t2t flex", "transformers"],
                        choices=["t2t sdpa", "t2t flex", "transformers"])
    parser.add_argument("--modes", nargs="+", default=["eager", "compiled"], choices=["eager", "compiled"])
    parser.add_argument("--no-greedy", action="store_true", help="time training alone")
    parser.add_argument("--beams", type=int, default=4, help="beam search's beams (1: greedy decoding alone)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lengths", type=int, nargs=2, default=[512, 114], metavar=("INPUTS", "TARGETS"))
    parser.add_argument("--decode", type=int, nargs=3, default=[32, 128, 32], metavar=("BATCH", "INPUTS", "NEW"))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--peak-tflops", type=float, default=None)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "gpu.json")
    args = parser.parse_args()
    device = torch.device(args.device)
    cfg = resolve_model_config({"preset": args.preset, "dropout_rate": 0.0})
    hf = transformers_model(cfg)
    peak = peak_tflops(device, args.peak_tflops)
    B, (S, T) = args.batch, args.lengths
    DB, DS, DN = args.decode
    results = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
               "torch": torch.__version__, "preset": args.preset, "precision": args.precision,
               "batch": [B, S, T], "decode": [DB, DS, DN], "peak_tflops": peak, "train": {}, "greedy": {}, "beam": {}}
    data = batch(B, S, T, cfg.vocab_size, device)
    enc = batch(DB, DS, 1, cfg.vocab_size, device)["encoder_input_tokens"]
    for name, kind, build in variants(cfg, hf, args.models):
        for mode in args.modes:
            compile, label = mode == "compiled", f"{name} {mode}"
            model = build().to(device).train()
            row = measure(training_step(model, kind, data, compile, args.precision, device), device,
                          args.steps, args.warmup)
            if "seconds" in row:
                flops = 3 * forward_flops(cfg, B, S, T) / row["seconds"]
                row.update(tokens_per_s=B * (S + T) / row["seconds"], tflops=flops / 1e12,
                           mfu=flops / (peak * 1e12) if peak else None)
            results["train"][label] = row
            print(label, "train", json.dumps(row), flush=True)
            if args.no_greedy or (compile and kind == "transformers"):
                continue  # transformers' generate is not compiled here
            model.eval()
            searches = {"greedy": 1, "beam": args.beams} if args.beams > 1 else {"greedy": 1}
            graphs = (True, False) if kind == "t2t" and device.type == "cuda" else (True,)
            for (search, beams), graph in itertools.product(searches.items(), graphs):
                row = measure(decoding(model, kind, enc, DN, beams, compile, graph, args.precision, device), device,
                              max(3, args.steps // 2), args.warmup)
                if "seconds" in row:
                    row["new_tokens_per_s"] = DB * DN / row["seconds"]
                results[search][label + ("" if graph else ", no CUDA graph")] = row
                print(label, search, "" if graph else "(no CUDA graph)", json.dumps(row), flush=True)
            model.cpu()
            torch.compiler.reset()
    print(json.dumps(results, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
