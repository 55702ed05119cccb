"""The encoder forward pass of t2t, transformers' T5 and NovelAI's nai-t5 on the same weights, eager and compiled.

Run by hand (never a test), with nai-t5 installed (``pip install nai-t5``):

    python benchmarks/bench_peers.py [--device cpu|cuda] [--precision fp32|bf16] [--reps 7] [--shapes 32x128 4x512]

A random t5-small (T5 1.0) built by transformers is copied into t2t (through t2t's key map) and into
nai-t5's encoder (through its own converter); the three outputs are checked to agree. Each model's encoder
runs on full rows (no padding) of the given batch × length shapes, eager and under ``torch.compile``; the
models alternate, order swapped every repetition, and the median wall time is reported with each one's
speed relative to transformers' eager encoder. nai-t5 is an encoder and decoder without a training loss or
a packed-sequence path in its HF conversion, so the comparison is the encoder, where all three have the
feature. Results: JSON on stdout and in --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from t2t.checkpoints.hf import hf_key
from t2t.models.kernels import autocast
from t2t.models.t5 import T5, ModelConfig

SMALL = dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8, dropout_rate=0.0,
             feed_forward_proj="relu", tie_word_embeddings=True)


def encoders(device: torch.device, max_length: int) -> dict:
    import transformers
    from nai_t5 import t5_hf
    from nai_t5.t5_encoder import T5EncoderStack

    torch.manual_seed(0)
    hf = transformers.T5ForConditionalGeneration(transformers.T5Config(
        **SMALL, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)).eval().to(device)
    ours = T5(ModelConfig(**SMALL)).eval().to(device)
    state = hf.state_dict()
    ours.load_state_dict({k: state[hf_key(k)] for k in ours.state_dict()})
    nai_cfg = t5_hf.to_based_config(hf.config, n_tokens=max_length, device=device)
    nai = T5EncoderStack(nai_cfg).eval().to(device)
    nai.load_state_dict(t5_hf.hf_to_based_t5_enc_state(state, nai_cfg))
    return {"transformers": lambda ids: hf.encoder(input_ids=ids).last_hidden_state,
            "t2t": ours.encode,
            "nai-t5": lambda ids: nai(ids, input_mask=torch.ones_like(ids, dtype=torch.bool))}


def timed(fn, ids, device, precision: str) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    with torch.no_grad(), autocast(precision, device):
        fn(ids)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--shapes", nargs="+", default=["32x128", "4x512"])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "peers.json")
    args = parser.parse_args()
    device = torch.device(args.device)
    shapes = [tuple(int(n) for n in s.split("x")) for s in args.shapes]
    models = encoders(device, max(length for _, length in shapes))
    variants = {f"{name} {mode}": (fn if mode == "eager" else torch.compile(fn))
                for name, fn in models.items() for mode in ("eager", "compiled")}
    results = {"device": args.device, "precision": args.precision, "torch": torch.__version__, "shapes": {}}
    for B, L in shapes:
        ids = torch.randint(2, 32000, (B, L), generator=torch.Generator().manual_seed(B * L)).to(device)
        with torch.no_grad():
            reference = models["transformers"](ids)
            for name, fn in variants.items():  # also the warm-up (and compilation) of every variant
                torch.testing.assert_close(fn(ids), reference, rtol=1e-3, atol=1e-3, msg=name)
        times = {name: [] for name in variants}
        order = list(variants)
        for rep in range(args.reps):
            for name in (order if rep % 2 == 0 else order[::-1]):
                times[name].append(timed(variants[name], ids, device, args.precision))
        base = statistics.median(times["transformers eager"])
        results["shapes"][f"{B}x{L}"] = {name: {"median_s": statistics.median(t),
                                                "speed_vs_transformers_eager": base / statistics.median(t)}
                                         for name, t in times.items()}
        print(f"encoder {B}x{L} ({args.precision}, {args.device}):")
        for name, row in results["shapes"][f"{B}x{L}"].items():
            print(f"  {name:24s} {row['median_s'] * 1e3:9.1f} ms  {row['speed_vs_transformers_eager']:.2f}×")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
