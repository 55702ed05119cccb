"""How far bf16 and fp16 logits stray from fp32 logits: t2t against transformers' T5 on the same weights and inputs.

Run by hand (never a test):   python benchmarks/bench_precision.py [--device cpu|cuda] [--out FILE]

For a random t5-small (T5 1.0) and a random t5.1.1-small (T5 1.1) built by transformers, copied into t2t
through the real key map, the script computes teacher-forced logits on the same random batch (8 × 128→32)
in fp32, bf16 and fp16, and reports quantiles (50% … 99.99%) of |low-precision logit − fp32 logit| over
every logit, each model against its own fp32 logits (which agree with each other to ~1e-5). The variants, for
each of bf16 and fp16:
  t2t autocast      t2t's ``precision: bf16`` / ``fp16``: fp32 weights, autocast; layer norms, the softmax of
                    the loss, the position bias and the residual stream stay fp32 (fp16: the feed-forward
                    output computed at 1/32 scale, ``t2t.models.t5.out_projection``)
  hf autocast       transformers' T5 under the same autocast
  hf weights        transformers' T5 cast to bf16 / fp16 (``torch_dtype=...``), as most users run it
                    (fp16: cast whole, with its clamping of fp16 hidden states; ``from_pretrained`` would
                    keep ``wo`` in fp32)
The table (and --out JSON) is what nai-t5 publishes for its own bf16 path; the claim checked is that t2t's
autocast is no worse than transformers' at every quantile, in both precisions.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from t2t.checkpoints.hf import hf_key
from t2t.models.t5 import T5, ModelConfig

QUANTILES = (0.5, 0.9, 0.99, 0.999, 0.9999)
SMALL = dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8, dropout_rate=0.0)
SHAPES = {"t5-small": dict(SMALL, feed_forward_proj="relu", tie_word_embeddings=True),
          "t5.1.1-small": dict(SMALL, d_model=512, d_ff=1024, num_heads=6, num_layers=8,
                               feed_forward_proj="gated-gelu", tie_word_embeddings=False)}


def models(shape: dict, device: str):
    import transformers

    torch.manual_seed(0)
    hf = transformers.T5ForConditionalGeneration(transformers.T5Config(
        **shape, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)).eval().to(device)
    ours = T5(ModelConfig(**shape)).eval().to(device)
    state = hf.state_dict()
    ours.load_state_dict({k: state[hf_key(k)] for k in ours.state_dict()})
    return hf, ours


def batch(device: str, B: int = 8, S: int = 128, T: int = 32):
    g = torch.Generator().manual_seed(1)
    enc = torch.randint(2, 32000, (B, S), generator=g)
    dec = torch.randint(2, 32000, (B, T), generator=g)
    dec[:, 0] = 0
    return enc.to(device), dec.to(device)


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@torch.no_grad()
def logits(model, kind: str, enc, dec, autocast: torch.dtype | None) -> torch.Tensor:
    with torch.autocast(enc.device.type, dtype=autocast or torch.bfloat16, enabled=autocast is not None):
        if kind == "hf":
            out = model(input_ids=enc, attention_mask=(enc != 0).long(), decoder_input_ids=dec).logits
        else:
            out = model(enc, dec)
    return out.float()


def quantiles(diff: torch.Tensor) -> dict:
    flat = diff.flatten().double()
    picked = flat[torch.randperm(flat.numel(), generator=torch.Generator().manual_seed(0))[:2_000_000].to(flat.device)]
    return {f"{q:.2%}": float(torch.quantile(picked, q)) for q in QUANTILES}


def measure(name: str, shape: dict, device: str) -> dict:
    hf, ours = models(shape, device)
    enc, dec = batch(device)
    ref_hf, ref_ours = logits(hf, "hf", enc, dec, None), logits(ours, "t2t", enc, dec, None)
    rows = {"fp32 t2t vs fp32 hf": quantiles((ref_ours - ref_hf).abs())}
    for low, dtype in DTYPES.items():
        rows[f"t2t {low} autocast"] = quantiles((logits(ours, "t2t", enc, dec, dtype) - ref_ours).abs())
        rows[f"hf {low} autocast"] = quantiles((logits(hf, "hf", enc, dec, dtype) - ref_hf).abs())
    for low, dtype in DTYPES.items():
        hf_low = models(shape, device)[0].to(dtype)
        rows[f"hf {low} weights"] = quantiles((logits(hf_low, "hf", enc, dec, None) - ref_hf).abs())
    return {"model": name, "logit_scale (fp32 |logit| median)": float(ref_hf.abs().median()), "abs_error": rows}


def table(results: list[dict]) -> str:
    lines = []
    for r in results:
        lines.append(f"\n{r['model']} (median |fp32 logit| {r['logit_scale (fp32 |logit| median)']:.3g})")
        lines.append("| |logit − fp32 logit| | " + " | ".join(f"{q:.2%}" for q in QUANTILES) + " |")
        lines.append("|---|" + "---|" * len(QUANTILES))
        for label, row in r["abs_error"].items():
            lines.append(f"| {label} | " + " | ".join(f"{v:.3g}" for v in row.values()) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "precision.json")
    args = parser.parse_args()
    results = [measure(name, shape, args.device) for name, shape in SHAPES.items()]
    print(table(results))
    for r in results:
        for name in DTYPES:
            ours, theirs = r["abs_error"][f"t2t {name} autocast"], r["abs_error"][f"hf {name} autocast"]
            worse = [q for q in ours if ours[q] > theirs[q] * 1.05]
            print(f"{r['model']}: t2t {name} {'no worse than' if not worse else 'WORSE than'} transformers' "
                  f"autocast" + (f" at {', '.join(worse)}" if worse else ""))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"device": args.device, "torch": torch.__version__, "results": results}, indent=2))


if __name__ == "__main__":
    main()
