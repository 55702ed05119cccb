"""t2t, transformers' T5 and NovelAI's nai-t5 on the same weights: encoder forward, training step and greedy
decoding, eager and compiled.

Run by hand (never a test), with nai-t5 installed (``pip install nai-t5``):

    python benchmarks/bench_peers.py [--preset t5-small|t5.1.1-small] [--device cpu|cuda]
                                     [--precision fp32|bf16] [--reps 5] [--workloads encoder train greedy]
                                     [--other-projections]

A random t5-small (T5 1.0: ReLU, tied output layer) or t5.1.1-small (gated GELU, separate output layer),
dropout 0, built by transformers is copied into t2t (through t2t's key map) and into nai-t5 (through its own
converter); the three models' logits are checked to agree. Each model gets the padding mask its users give it
(transformers' ``attention_mask``, as its tokenizer returns it; nai-t5's ``input_mask``; t2t computes it from
the pad id), all ones here. Until 2026-11-27 transformers ran without one, so its attention added one bias
shared by every row where the others read one per row: t5-small's compiled encoder over 4 × 512 in bf16 on
a Xeon ran 1.12× t2t's speed unmasked and 1.00× masked (two runs of 9 rounds).
Workloads, on full rows (no padding):
  encoder  the encoder over 32 × 128 and 4 × 512 tokens
  train    forward, mean token cross-entropy, backward and a fused AdamW step at 8 × 128→16 and 4 × 512→114
  greedy   greedy decoding of 32 tokens (EOS suppressed, so equal work) for 32 × 128 inputs, outputs checked
           to be identical
each eager and under ``torch.compile``: the whole encoder; the forward pass and loss of a training step (t2t as
``compile: true`` does it); decoding as each library's users compile it (t2t ``compile=True``, transformers a
static cache with ``generate``'s compilation). nai-t5's cached decoding step slices its cache to the current
length, a new shape every step, so its compiled decoding is not measured. Models alternate, order swapped every
repetition; the median wall time is reported with each one's speed relative to transformers' eager time (the
ratio of the medians, and "paired": the median over rounds of the ratio within a round, which a shared
machine's drift from round to round moves less; every round's time is kept in the JSON), and against this
machine: for the encoder and training, the share of the matmul rate (FLOPs counted as ``bench_model`` counts
them, over the best 2048³ rate measured at the start and after each workload), for greedy decoding the time over
its floor (``bench_model.decoding_floor_s``). The process keeps freed memory for reuse, as t2t's commands do
(``t2t.allocator``, for all three models). For each eager
training step, the ops it dispatches are counted too (``ops``): at these sizes a GPU step is bound by kernel
launches. ``--other-projections`` adds to the encoder and training workloads t2t with the
attention projections it does not use on the device (``t5.fused_projections``): "t2t fused" on the CPU, q|k|v
(and cross-attention's k|v) concatenated at every call as nai-t5 stores them; "t2t separate" on CUDA, a product
for each (``other_projections``). Results: JSON in --out.

nai-t5 1.0.10 needs two things its own code does not do here, both applied below: the tied output layer of
T5 1.0 scaled by d_model^-0.5 (its converter copies the embedding unscaled), and a greedy loop over its
decoder with the KV cache (``make_bound_forward`` passes its decoder an argument it does not accept).
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from bench_model import (  # benchmarks/
    decode_fn,
    decoding_floor_s,
    encoder_flops,
    in_precision,
    matmul_gflops,
    read_gbps,
    training_flops,
)
from timing import alternate, paired_speed  # benchmarks/
from torch.utils._python_dispatch import TorchDispatchMode

from t2t.allocator import keep_freed_memory
from t2t.checkpoints.hf import hf_key
from t2t.models import t5
from t2t.models.kernels import autocast
from t2t.models.t5 import T5, Attention, ModelConfig

PRESETS = {
    "t5-small": dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
                     dropout_rate=0.0, feed_forward_proj="relu", tie_word_embeddings=True),
    "t5.1.1-small": dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=1024, num_layers=8, num_heads=6,
                         dropout_rate=0.0, feed_forward_proj="gated-gelu", tie_word_embeddings=False),
}
SHAPES = {"encoder": [(32, 128), (4, 512)], "train": [(8, 128, 16), (4, 512, 114)], "greedy": [(32, 128, 32)]}
EOS = 1


def build(cfg: dict, device: torch.device) -> dict:
    """The three models with transformers' random weights."""
    import transformers
    from nai_t5 import t5_hf
    from nai_t5.t5 import T5 as NaiT5

    torch.manual_seed(0)
    hf = transformers.T5ForConditionalGeneration(transformers.T5Config(
        **cfg, decoder_start_token_id=0, pad_token_id=0, eos_token_id=EOS)).to(device)
    ours = T5(ModelConfig(**cfg)).to(device)
    state = hf.state_dict()
    ours.load_state_dict({k: state[hf_key(k)] for k in ours.state_dict()})
    nai_config = t5_hf.to_based_config(hf.config, n_tokens=512, device=device)
    nai = NaiT5(nai_config).to(device)
    nai.load_state_dict(t5_hf.hf_to_based_t5_state(state, nai_config))
    if cfg["tie_word_embeddings"]:
        with torch.no_grad():
            nai.lm_head.weight.mul_(cfg["d_model"] ** -0.5)  # T5 1.0's tied output layer
    return {"transformers": hf, "t2t": ours, "nai-t5": nai}


def other_projections(model: T5, device: torch.device) -> tuple[str, T5]:
    """The variant's name and ``model`` with its attention projections in the form t2t does not use on
    ``device`` (``t5.fused_projections``, forced by ``Attention.fused``): by q|k|v (cross-attention: k|v)
    concatenated at every call, one product where there were three (two), nai-t5's products with t2t's
    parameters; or by each weight alone."""
    fused = not t5.fused_projections(torch.empty(0, device=device))
    for module in model.modules():
        if isinstance(module, Attention):
            module.fused = fused
    return ("t2t fused" if fused else "t2t separate"), model


def t2t_models(models: dict) -> list[str]:
    return [name for name, model in models.items() if isinstance(model, T5)]


def logits(models: dict, enc: torch.Tensor, dec: torch.Tensor) -> dict:
    ones = torch.ones_like
    return {"transformers": lambda: models["transformers"](input_ids=enc, attention_mask=ones(enc),
                                                           decoder_input_ids=dec).logits,
            **{name: (lambda m=models[name]: m(enc, dec)) for name in t2t_models(models)},
            "nai-t5": lambda: models["nai-t5"](enc, dec, encoder_input_mask=ones(enc, dtype=torch.bool),
                                               decoder_input_mask=ones(dec, dtype=torch.bool))}


def encoder_fns(models: dict, B: int, S: int, compiled: bool) -> dict:
    device = next(models["t2t"].parameters()).device
    ids = torch.randint(2, 32000, (B, S), generator=torch.Generator().manual_seed(B * S)).to(device)
    mask = torch.ones_like(ids, dtype=torch.bool)
    hf, nai = models["transformers"], models["nai-t5"]
    fns = {"transformers": lambda x: hf.encoder(input_ids=x, attention_mask=mask).last_hidden_state,
           **{name: models[name].encode for name in t2t_models(models)},
           "nai-t5": lambda x: nai.encoder(x, input_mask=mask)}
    return {name: (lambda fn=torch.compile(fn) if compiled else fn: fn(ids))  # noqa: B008 -- bound once, here
            for name, fn in fns.items()}


def train_fns(models: dict, B: int, S: int, T: int, compiled: bool) -> dict:
    g = torch.Generator().manual_seed(B * S)
    device = next(models["t2t"].parameters()).device
    enc, tgt = (torch.randint(2, 32000, shape, generator=g).to(device) for shape in ((B, S), (B, T)))
    dec = torch.cat([torch.zeros_like(tgt[:, :1]), tgt[:, :-1]], 1)
    batch = dict(encoder_input_tokens=enc, decoder_input_tokens=dec, decoder_target_tokens=tgt,
                 decoder_loss_weights=torch.ones_like(tgt))
    forward = logits(models, enc, dec)

    def ours_loss(model):
        total, weight = model.loss_sums(batch)
        return total / weight

    losses = {**{name: (lambda m=models[name]: ours_loss(m)) for name in t2t_models(models)},
              **{name: (lambda f=forward[name]: F.cross_entropy(f().flatten(0, 1), tgt.flatten()))
                 for name in ("transformers", "nai-t5")}}
    fns = {}
    for name, loss in losses.items():
        model = models[name].train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        loss = torch.compile(loss, fullgraph=isinstance(model, T5), dynamic=False) if compiled else loss

        def step(loss=loss, optimizer=optimizer):
            loss().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        fns[name] = step
    return fns


def nai_greedy(nai, ids: torch.Tensor, n: int) -> torch.Tensor:
    """Greedy decoding with nai-t5's decoder and its preallocated KV cache (what ``make_bound_forward`` does)."""
    B = ids.shape[0]
    encoding = nai.encoder(ids, input_mask=torch.ones_like(ids, dtype=torch.bool))
    self_kv = nai.decoder.get_kv_cache(batch_size=B, length=n, dtype=encoding.dtype, device=ids.device)
    cross_kv = nai.decoder.get_cross_kv(encoding)
    token, out = ids.new_zeros((B, 1)), []
    for t in range(n):
        h = nai.decoder(nai.encoder.vocab_embed(token), encoding, self_past_kv=self_kv[:, :, :, :, :t + 1],
                        cross_kv=cross_kv)
        scores = nai.lm_head(h[:, -1])
        scores[:, EOS] = float("-inf")
        token = scores.max(-1, keepdim=True).indices
        out.append(token)
    return torch.cat(out, 1)


def greedy_fns(models: dict, B: int, S: int, N: int, compiled: bool) -> dict:
    device = next(models["t2t"].parameters()).device
    ids = torch.randint(2, 32000, (B, S), generator=torch.Generator().manual_seed(B * S)).to(device)
    hf, ours, nai = (models[name].eval() for name in ("transformers", "t2t", "nai-t5"))
    fns = {"transformers": decode_fn(hf, "hf", ids, N, compiled), "t2t": decode_fn(ours, "ours", ids, N, compiled)}
    if not compiled:
        fns["nai-t5"] = lambda: nai_greedy(nai, ids, N)
    return fns


def measure(variants: dict, reps: int, device: torch.device, precision: str) -> tuple[dict, dict]:
    """``alternate``'s timings of each variant (two warm-up calls each, which compile), and each variant's
    output of its first call."""
    variants = {name: in_precision(fn, precision, device) for name, fn in variants.items()}
    outputs = {name: fn() for name, fn in variants.items()}
    return alternate(variants, reps, warmup=1, device=device), outputs


class OpCount(TorchDispatchMode):
    """The aten (and custom) ops dispatched, views and allocations left out: what launches a kernel on a GPU."""
    FREE = {"view", "_unsafe_view", "t", "transpose", "expand", "slice", "select", "unsqueeze", "squeeze", "permute",
            "as_strided", "detach", "alias", "reshape", "unbind", "split", "split_with_sizes", "lift_fresh", "empty",
            "empty_like", "new_empty"}

    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ not in self.FREE:
            self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def ops_per_call(fn, precision: str, device: torch.device) -> dict:
    """Ops one eager call dispatches, in all and as matrix products (t2t's oneDNN products included)."""
    with OpCount() as count, autocast(precision, device):
        fn()
    products = ("mm", "addmm", "onednn_linear", "linear_without_grad")
    return {"ops": sum(count.ops.values()), "matrix_products": sum(count.ops[name] for name in products)}


def check_agreement(models: dict, device: torch.device) -> None:
    g = torch.Generator().manual_seed(1)
    enc, dec = (torch.randint(2, 32000, (2, n), generator=g).to(device) for n in (16, 5))
    with torch.no_grad():
        out = {name: fn() for name, fn in logits({k: m.eval() for k, m in models.items()}, enc, dec).items()}
    scale = out["transformers"].abs().max().item()  # T5 1.1's logits reach the hundreds: fp32 rounding scales
    for name in (name for name in out if name != "transformers"):
        torch.testing.assert_close(out[name], out["transformers"], rtol=1e-4, atol=1e-4 * max(1.0, scale), msg=name)


def against_machine(workload: str, shape: tuple, seconds: float, gflops: float, gbps: float, cfg: dict) -> dict:
    """The share of the matmul rate (encoder, training) or the time over the decoding floor (greedy)."""
    if workload == "greedy":
        return {"over_floor": seconds / decoding_floor_s(*shape, gflops, gbps, cfg)}
    flops = encoder_flops(*shape, cfg) if workload == "encoder" else training_flops(*shape, cfg)
    return {"share_of_matmul_rate": flops / seconds / 1e9 / gflops}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="t5-small", choices=PRESETS)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--workloads", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--other-projections", action="store_true",
                        help='add "t2t fused" (CPU) or "t2t separate" (CUDA) to the encoder and training workloads')
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "peers.json")
    args = parser.parse_args()
    malloc = "kept" if keep_freed_memory() else "system"
    device = torch.device(args.device)
    cfg = PRESETS[args.preset]
    models = build(cfg, device)
    if args.other_projections:
        name, model = other_projections(copy.deepcopy(models["t2t"]), device)
        models[name] = model
    check_agreement(models, device)
    results = {"preset": args.preset, "device": args.device, "precision": args.precision,
               "torch": torch.__version__, "threads": torch.get_num_threads(), "malloc": malloc, "workloads": {}}
    if device.type == "cpu":  # the yardsticks of bench_model, CPU only
        results |= {"matmul_gflops": matmul_gflops(args.precision)["best"], "read_gbps": read_gbps()}
    builders = {"encoder": encoder_fns, "train": train_fns, "greedy": greedy_fns}
    for workload in args.workloads:
        for shape in SHAPES[workload]:
            key = f"{workload} {'x'.join(map(str, shape))}"
            variants = {f"{name} {mode}": fn for mode in ("eager", "compiled")
                        for name, fn in builders[workload](models, *shape, mode == "compiled").items()}
            with torch.no_grad() if workload != "train" else torch.enable_grad():
                timings, outputs = measure(variants, args.reps, device, args.precision)
            medians = {name: r["wall_s"] for name, r in timings.items()}
            if workload == "train":  # at these sizes a GPU step is bound by launches: count them
                for name in (n for n in variants if n.endswith("eager")):
                    results.setdefault("ops", {})[f"{key} {name}"] = ops_per_call(variants[name], args.precision,
                                                                                  device)
            base = medians["transformers eager"]
            results["workloads"][key] = {
                name: {"median_s": t, "speed_vs_transformers_eager": base / t,
                       "paired_speed_vs_transformers_eager": paired_speed(timings, "transformers eager", name),
                       "rounds_s": timings[name]["wall_all"]}
                for name, t in medians.items()}
            if device.type == "cpu":  # the best rate so far: one slow measurement would inflate the shares
                results["matmul_gflops"] = max(results["matmul_gflops"], matmul_gflops(args.precision)["best"])
                for name, t in medians.items():
                    results["workloads"][key][name] |= against_machine(
                        workload, shape, t, results["matmul_gflops"], results["read_gbps"], cfg)
            if workload == "greedy":
                reference = outputs["transformers eager"]
                differing = [name for name, out in outputs.items() if not torch.equal(out, reference)]
                results["workloads"][key] |= {"identical_outputs": not differing, "differing_outputs": differing}
            print(f"{key} ({args.preset}, {args.precision}, {args.device}):")
            for name, t in medians.items():
                machine = "".join(f"  {k} {v:.2f}" for k, v in results["workloads"][key][name].items()
                                  if k in ("share_of_matmul_rate", "over_floor"))
                ops = results.get("ops", {}).get(f"{key} {name}")
                ops = f"  ops {ops['ops']} (matrix products {ops['matrix_products']})" if ops else ""
                paired = results["workloads"][key][name]["paired_speed_vs_transformers_eager"]
                print(f"  {name:24s} {t * 1e3:9.1f} ms  {base / t:.2f}× (paired {paired:.2f}×){machine}{ops}",
                      flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
