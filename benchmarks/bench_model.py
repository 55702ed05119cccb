"""Speed and memory of t2t's T5 against transformers' T5ForConditionalGeneration, same weights, same run.

Run by hand (never a test):   python benchmarks/bench_model.py [--reps 7] [--threads N] [--breakdown]
                              [--precision bf16 --skip-memory --out benchmarks/results/model-bf16.json]
                              [--compile --skip-memory --out benchmarks/results/model-compiled.json]

Measures, for the t5-small shape in fp32 on the CPU with torch's default threads unless --threads:
  matmul    the machine's matmul rate in the run's precision (2048³ GEMM), the yardstick for "share of peak"
  train     one training step (forward, cross-entropy, backward, AdamW step) at batch 8 with 128→16 tokens
            and at batch 4 with 512→114 tokens (full rows, no padding: the work is identical for both)
  decode    greedy decoding at batch 32, 128→32 tokens (EOS suppressed until 32 tokens, so equal work;
            the two outputs are checked to be identical)
  memory    peak resident memory (VmHWM) of a fresh subprocess per model and workload, and that peak minus
            the RSS after the imports (weights, activations, gradients, optimizer state, cache: what the
            model costs, without either library's import)
Measurements alternate between the two models (order swapped every repetition) and report medians of
wall time and of process CPU time, and the minimum wall time (the least disturbed run); the machine may be
shared, so read the spread too. The matmul yardstick is the faster of MKL's and oneDNN's GEMM, measured at
the start and again after each training shape; the best rate seen so far is the one used. Since the machine's
rate itself drifts (2048³ rates of 115-173 GFLOP/s within one run on a 2-core EPYC), each round of the
alternation is also followed by one more measurement (and, for decoding, of the read bandwidth), and the
"paired" figures set each round's time against it: the median over rounds of those shares and floors.
Greedy decoding is also split into our encoder part (``begin_decoding``, timed in the same alternation)
and the steps after it, each against its part of the floor (``decoding_floor_parts``).
With ``--precision bf16`` both models run their training steps and decoding under CPU bf16 autocast (the
memory measurements stay fp32). With ``--compile`` each workload also runs compiled, in the same alternation:
ours as ``compile: true`` runs it (training: the forward pass and loss as one static graph; decoding: the
static-shape step, ``generate(compile=True)``), transformers as its users compile it (``torch.compile`` of
the model; generation with a static cache and its automatic compilation); compile time is excluded (two
warm-up runs). The process keeps freed memory for reuse, as t2t's commands do (``t2t.allocator``; both
models share the process, so both get it); ``--system-malloc`` measures with glibc's defaults instead.
Ours runs twice in every alternation: with the tuned CPU kernels (``model.kernels: auto``, "ours") and with
plain PyTorch (``kernels: plain``, "ours_plain", a copy of the same weights; eager only).
Results go to benchmarks/results/model.json.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from timing import alternate, timed  # benchmarks/

from t2t.allocator import keep_freed_memory
from t2t.models import kernels

ROOT = Path(__file__).resolve().parent
SMALL = dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8, dropout_rate=0.1,
             feed_forward_proj="relu", tie_word_embeddings=True)
DIMENSIONS = ("d_model", "d_ff", "num_heads", "d_kv", "num_layers", "vocab_size")  # for counting FLOPs and bytes
TRAIN_SHAPES = [(8, 128, 16), (4, 512, 114)]
DECODE_SHAPE = (32, 128, 32)


# ---- models ---------------------------------------------------------------------------------------------


def build_hf(seed: int = 0):
    import transformers

    torch.manual_seed(seed)
    cfg = transformers.T5Config(**SMALL, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    return transformers.T5ForConditionalGeneration(cfg)


def build_ours(hf=None, seed: int = 0):
    from t2t.checkpoints.hf import hf_key
    from t2t.models.t5 import T5, ModelConfig

    torch.manual_seed(seed)
    model = T5(ModelConfig(**SMALL))
    if hf is not None:  # copy the HF weights through the real key map
        hf_state = hf.state_dict()
        model.load_state_dict({k: hf_state[hf_key(k)] for k in model.state_dict()})
    return model


def make_optimizer(model, kind: str):
    if kind == "fused":
        return torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    return torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=(kind == "foreach"))


def train_batch(B: int, S: int, T: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    enc = torch.randint(2, 32000, (B, S), generator=g)
    tgt = torch.randint(2, 32000, (B, T), generator=g)
    dec = torch.cat([torch.zeros(B, 1, dtype=torch.long), tgt[:, :-1]], 1)
    return dict(encoder_input_tokens=enc, decoder_input_tokens=dec, decoder_target_tokens=tgt,
                decoder_loss_weights=torch.ones_like(tgt))


def train_step_fn(model, kind: str, batch: dict, optimizer, compile: bool = False):
    """One step; the loss is mean token cross-entropy for both. ``compile``: the forward pass and loss
    through torch.compile (ours: one static graph, as t2t-train's ``compile: true``)."""
    if kind == "ours":
        loss_sums = torch.compile(model.loss_sums, fullgraph=True, dynamic=False) if compile else model.loss_sums

        def step():
            loss_sum, weight_sum = loss_sums(batch, every_position=compile)
            (loss_sum / weight_sum).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    else:
        mask = torch.ones_like(batch["encoder_input_tokens"])
        forward = torch.compile(model) if compile else model

        def step():
            out = forward(input_ids=batch["encoder_input_tokens"], attention_mask=mask,
                        decoder_input_ids=batch["decoder_input_tokens"], labels=batch["decoder_target_tokens"])
            out.loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return step


def decode_fn(model, kind: str, enc: torch.Tensor, n: int, compile: bool = False):
    """Greedy decoding; ``compile``: ours with its compiled static-shape step, transformers with a static
    cache and the compilation ``generate`` does for one (asked for on the CPU too)."""
    if kind == "ours":
        return lambda: model.generate(enc, max_new_tokens=n, min_new_tokens=n, compile=compile)
    mask = torch.ones_like(enc)
    compiled = {}
    if compile:
        from transformers import CompileConfig

        config = CompileConfig(fullgraph=False, mode="default")
        config._compile_all_devices = True  # transformers compiles only on accelerators unless told
        compiled = dict(cache_implementation="static", compile_config=config)
    return lambda: model.generate(input_ids=enc, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                                  do_sample=False, num_beams=1, **compiled)[:, 1:]


# ---- measuring ------------------------------------------------------------------------------------------


def in_precision(fn, precision: str, device: torch.device = torch.device("cpu")):
    """``fn`` in t2t's precision context (bf16: autocast, as t2t-train and t2t-eval use it)."""
    def run():
        with kernels.autocast(precision, device):
            return fn()
    return run


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what platform knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def paired(result: dict, value) -> float:
    """The median over rounds of ``value(seconds, yardstick)`` for one of ``alternate``'s results: each
    round's time against the rate measured right after it, so that a slow or fast turn of a shared machine
    moves both sides of the ratio."""
    return statistics.median(value(t, rate) for t, rate in zip(result["wall_all"], result["yardsticks"]))


def speedups(r: dict, suffix: str = "") -> dict:
    """transformers' time over ours (``suffix`` "_compiled": compiled against compiled): of the medians, of
    the minima (the least disturbed runs), of CPU time."""
    hf, ours = r["hf" + suffix], r["ours" + suffix]
    plain = {} if suffix or "ours_plain" not in r else {  # plain kernels against transformers and the tuned ones
        "speedup_plain_wall": hf["wall_s"] / r["ours_plain"]["wall_s"],
        "speedup_plain_min": hf["wall_min_s"] / r["ours_plain"]["wall_min_s"],
        "tuned_over_plain_wall": r["ours_plain"]["wall_s"] / ours["wall_s"]}
    return {f"speedup{suffix}_wall": hf["wall_s"] / ours["wall_s"],
            f"speedup{suffix}_min": hf["wall_min_s"] / ours["wall_min_s"],
            f"speedup{suffix}_cpu": hf["cpu_s"] / ours["cpu_s"], **plain}


def compiled_gains(r: dict) -> dict:
    """Each model's eager time over its compiled time (medians): above 1, compiling pays."""
    return {f"{kind}_compiled_vs_eager": r[kind]["wall_s"] / r[kind + "_compiled"]["wall_s"] for kind in ("ours", "hf")}


def matmul_gflops(precision: str = "fp32", reps: int = 5, n: int = 2048) -> dict:
    """GEMM rate of an n³ product in ``precision`` with each CPU kernel torch has for it (fp32: MKL, and
    oneDNN where built in; bf16: oneDNN, which torch's bf16 matmul runs on); the best is the machine's
    measured matmul rate."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    if precision == "bf16":
        a, b = a.bfloat16(), b.bfloat16()
        products = {"onednn_bf16": lambda: a @ b}
    else:
        products = {"mkl": lambda: a @ b}
        if kernels.HAS_ONEDNN:
            products["onednn"] = lambda: kernels.onednn_linear(a, b)
    rates = {}
    for name, product in products.items():
        product()
        times = [timed(product)[0] for _ in range(reps)]
        rates[name] = 2 * n ** 3 / statistics.median(times) / 1e9
    return {**rates, "best": max(rates.values())}


def _sizes(cfg: dict) -> tuple[int, ...]:
    """d_model, d_ff, heads, d_kv, layers, vocabulary, and the weights of one feed-forward sublayer."""
    d, f, h, dkv, L, V = (cfg[k] for k in DIMENSIONS)
    ff = (3 if cfg.get("feed_forward_proj") == "gated-gelu" else 2) * d * f  # wi (wi_0, wi_1) and wo
    return d, f, h, dkv, L, V, ff


def encoder_flops(B: int, S: int, cfg: dict = SMALL) -> float:
    """One encoder forward pass: every matmul, attention included."""
    d, f, h, dkv, L, V, ff = _sizes(cfg)
    return B * S * L * (4 * d * h * dkv + ff) * 2 + L * B * h * S * S * dkv * 2 * 2


def training_flops(B: int, S: int, T: int, cfg: dict = SMALL) -> float:
    """Explicit count for one step: 3 × forward (backward = 2 × forward) of every matmul, attention included."""
    d, f, h, dkv, L, V, ff = _sizes(cfg)
    inner = h * dkv
    dec = B * T * L * (4 * d * inner + 2 * d * inner + ff) * 2  # self qkvo, cross q+o, feed-forward
    dec += B * S * L * 2 * d * inner * 2  # cross-attention keys/values of the encoder output
    dec += L * B * h * (T * T + T * S) * dkv * 2 * 2
    out = B * T * d * V * 2
    return 3.0 * (encoder_flops(B, S, cfg) + dec + out)


def read_gbps(reps: int = 5, mb: int = 512) -> float:
    """Memory read bandwidth: a sum over a ``mb`` MB fp32 tensor (far larger than the caches)."""
    x = torch.ones(mb * 2 ** 20 // 4)
    x.sum()
    return x.numel() * 4 / statistics.median(timed(x.sum)[0] for _ in range(reps)) / 1e9


def decoding_floor_parts(B: int, S: int, gflops: float, gbps: float, cfg: dict = SMALL) -> tuple[float, float]:
    """The least time of greedy decoding's two parts on this machine (fp32 weights): the encoder over ``B`` ×
    ``S`` inputs and the cross-attention keys/values at the matmul rate; and one decoding step, bound by the
    larger of its FLOPs at the matmul rate and its bytes (decoder and output weights, cross-attention
    keys/values) at the read bandwidth."""
    d, f, h, dkv, L, V, ff = _sizes(cfg)
    inner = h * dkv
    cross_kv = B * S * L * 2 * d * inner * 2
    step_weights = L * (6 * d * inner + ff) + V * d  # self q|k|v|o, cross q|o, feed-forward; output
    step_flops = 2 * B * step_weights + L * B * h * S * dkv * 2 * 2  # + attention over the encoder states
    step_bytes = 4 * (step_weights + L * 2 * B * S * inner)
    return (encoder_flops(B, S, cfg) + cross_kv) / (gflops * 1e9), max(step_flops / (gflops * 1e9),
                                                                         step_bytes / (gbps * 1e9))


def decoding_floor_s(B: int, S: int, N: int, gflops: float, gbps: float, cfg: dict = SMALL) -> float:
    """The least time greedy decoding of ``N`` tokens over ``B`` × ``S`` inputs can take on this machine:
    the encoder part and ``N`` steps (``decoding_floor_parts``)."""
    encoder, step = decoding_floor_parts(B, S, gflops, gbps, cfg)
    return encoder + N * step


PRODUCTS = ("onednn_linear", "linear_without_grad", "_linear_pointwise", "_mkl_linear", "aten.bmm", "aten.mm",
            "aten.addmm", "scaled_dot_product")


def op_breakdown(fn) -> dict:
    """Where ``fn``'s time goes: every op it dispatches, timed where it runs (a TorchDispatchMode around one
    call) and grouped into the matrix products, dropout masks, the optimizer's update and all other ops;
    ``outside ops`` is the wall time the ops leave (Python, autograd, and this mode's own cost, a few
    microseconds an op). torch.profiler's figures were no use for this here: under it, zero-filling a fresh
    66 MB gradient took 180 ms instead of 2–20. The products alone give each target its ceiling with these
    kernels: a training step's share of the matmul rate, or greedy decoding's time over its floor, were
    every other op free. ``product_shapes`` holds each product's op and operand shapes with its seconds,
    calls and GFLOP/s (attention's fused kernels without a rate): where the products fall short of the rate."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seconds: dict[str, float] = {}
    shapes: dict[str, list] = {}

    class Clock(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            start = time.perf_counter()
            out = func(*args, **(kwargs or {}))
            spent, name = time.perf_counter() - start, str(func)
            group = ("products" if any(p in name for p in PRODUCTS) else "dropout masks" if "keep_mask" in name
                     else "optimizer" if "adam" in name else "other ops")
            seconds[group] = seconds.get(group, 0.0) + spent
            if group == "products":
                a, b = args[1:3] if "addmm" in name else args[:2]
                entry = shapes.setdefault(f"{func.__name__} {list(a.shape)} {list(b.shape)}", [0.0, 0, 0.0])
                matmul = "scaled_dot_product" not in name  # out = a @ b: 2·K FLOPs an output element
                entry[0], entry[1] = entry[0] + spent, entry[1] + 1
                entry[2] += 2 * out.numel() * a.shape[-1] if matmul else 0
            return out

    for _ in range(2):  # the first call pays the mode's one-time costs
        seconds.clear()
        shapes.clear()
        start = time.perf_counter()
        with Clock():
            fn()
        wall = time.perf_counter() - start
    product_shapes = {key: {"seconds": t, "calls": n, "gflops": flops / t / 1e9 if flops else None}
                      for key, (t, n, flops) in sorted(shapes.items(), key=lambda kv: -kv[1][0])}
    return {"wall_s": wall, **seconds, "outside ops": wall - sum(seconds.values()), "product_shapes": product_shapes}


def print_breakdown(b: dict) -> None:
    ceilings = ("products_share_of_matmul_rate", "products_over_floor")
    parts = {k: v for k, v in b.items() if k not in ("wall_s", "product_shapes", *ceilings)}
    print(f"  ours, one call timed op by op ({b['wall_s']:.3f} s): "
          + ", ".join(f"{k} {100 * v / b['wall_s']:.0f}%" for k, v in parts.items()))
    for key, e in list(b["product_shapes"].items())[:8]:
        rate = f", {e['gflops']:.0f} GFLOP/s" if e["gflops"] else ""
        print(f"    {key}: {1e3 * e['seconds']:.0f} ms in {e['calls']} calls{rate}")
    if ceilings[0] in b:
        print(f"  the products alone run at {100 * b[ceilings[0]]:.0f}% of the 2048³ rate")
    if ceilings[1] in b:
        print(f"  the products alone take {b[ceilings[1]]:.2f}x the floor")


# ---- memory (fresh subprocess per measurement) ----------------------------------------------------------


def _rss_mb(field: str) -> float:
    """VmRSS (now) or VmHWM (peak) of this process from /proc, in MB. (ru_maxrss is useless here: Linux
    carries the parent's high-water mark over fork+exec.)"""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024


def memory_child(kind: str, workload: str, shape: list[int], optimizer: str) -> dict:
    if kind == "hf":
        import transformers  # noqa: F401  (imports are not the model's memory: counted in the baseline)
    else:
        import t2t.models.t5  # noqa: F401
    imported = _rss_mb("VmRSS")
    if kind == "hf":
        model = build_hf()
    else:
        model = build_ours()
    base = _rss_mb("VmRSS")
    if workload == "train":
        model.train()
        step = train_step_fn(model, kind, train_batch(*shape), make_optimizer(model, optimizer))
        for _ in range(2):
            step()
    else:
        model.eval()
        B, S, N = shape
        enc = torch.randint(2, 32000, (B, S), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            decode_fn(model, kind, enc, N)()
    peak = _rss_mb("VmHWM")
    return {"peak_rss_mb": peak, "after_imports_rss_mb": imported, "after_build_rss_mb": base,
            "model_and_work_mb": peak - imported}


def measure_memory(kind, workload, shape, optimizer, threads, plain_weights, system_malloc) -> dict:
    cmd = [sys.executable, __file__, "--memory-child", kind, workload, ",".join(map(str, shape)),
           "--optimizer", optimizer, "--plain-weights", plain_weights] + ["--system-malloc"] * system_malloc
    if threads:
        cmd += ["--threads", str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---- main -----------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7, help="timed repetitions per model (training)")
    ap.add_argument("--decode-reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--optimizer", choices=["fused", "foreach", "loop"], default="fused",
                    help="AdamW implementation, the same for both models")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: both models' timed steps and decoding under CPU bf16 autocast")
    ap.add_argument("--compile", action="store_true", help="also run each workload compiled (see above)")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--breakdown", action="store_true",
                    help="time every op of one of our training steps and of greedy decoding (see op_breakdown)")
    ap.add_argument("--plain-weights", choices=["auto", "onednn", "mkl"], default="auto",
                    help="our kernel for products by plain weights (training, the encoder); auto: this CPU's "
                         "choice, kernels.ONEDNN_UNPACKED")
    ap.add_argument("--system-malloc", action="store_true", help="leave glibc's malloc as configured (t2t.allocator)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "model.json")
    ap.add_argument("--memory-child", nargs=3, metavar=("KIND", "WORKLOAD", "SHAPE"), help=argparse.SUPPRESS)
    return ap.parse_args()


def machine(args, malloc: str) -> dict:
    """The run's machine, versions and yardsticks: the matmul rate and the memory read bandwidth."""
    import transformers

    results: dict = {"machine": {"python": platform.python_version(), "torch": torch.__version__,
                                 "threads": torch.get_num_threads(), "cpu": cpu_name(),
                                 "transformers": transformers.__version__},
                     "optimizer": args.optimizer, "precision": args.precision, "malloc": malloc,
                     "plain_weights": "onednn" if kernels.ONEDNN_UNPACKED else "mkl",
                     "packed_weights": "mkl" if kernels.PACKED_BY_MKL else "onednn",
                     "matmul_gflops": matmul_gflops(args.precision), "read_gbps": read_gbps()}
    print(f"{args.precision} matmul (2048³), {torch.get_num_threads()} threads: "
          + ", ".join(f"{k} {v:.1f} GFLOP/s" for k, v in results["matmul_gflops"].items())
          + f"; memory read {results['read_gbps']:.1f} GB/s")
    return results


def same_weights() -> tuple:
    """transformers' t5-small with random weights and ours with a copy of them, checked on one batch."""
    hf = build_hf()
    ours = build_ours(hf)
    with torch.no_grad():
        b = train_batch(2, 16, 4)
        hf.eval(), ours.eval()
        a = ours(b["encoder_input_tokens"], b["decoder_input_tokens"])
        h = hf(input_ids=b["encoder_input_tokens"], decoder_input_ids=b["decoder_input_tokens"]).logits
        assert torch.allclose(a, h, rtol=1e-4, atol=1e-4), "weights were not copied correctly"
    return ours, hf


def variants(make, args) -> dict:
    """``make(kind, model, compile)`` for each model, eager (and compiled with --compile), in the run's precision;
    ours also with plain kernels ("ours_plain")."""
    ours, hf = same_weights()
    plain = kernels.apply(copy.deepcopy(ours), "plain")
    fns = {name: make(kind, model, False) for name, kind, model in
           (("ours", "ours", ours), ("ours_plain", "ours", plain), ("hf", "hf", hf))}
    if args.compile:
        fns |= {kind + "_compiled": make(kind, model, True) for kind, model in (("ours", ours), ("hf", hf))}
    return {name: in_precision(fn, args.precision) for name, fn in fns.items()}


def bench_training(args, results: dict, save) -> list[tuple]:
    """Each training shape, all variants alternating; its share of the matmul rate."""
    rows, results["train"] = [], []
    for B, S, T in TRAIN_SHAPES:
        batch = train_batch(B, S, T)

        def step(kind, model, compile, batch=batch):
            model.train()
            return train_step_fn(model, kind, batch, make_optimizer(model, args.optimizer), compile)

        fns = variants(step, args)
        r = alternate(fns, args.reps, yardstick=lambda: matmul_gflops(args.precision, reps=1)["best"])
        # the yardstick is the best 2048³ rate measured so far: one slow first measurement would inflate shares
        rate = results["matmul_gflops"]
        gflops = rate["best"] = max(rate["best"], matmul_gflops(args.precision)["best"])
        flops = training_flops(B, S, T)
        entry = {"shape": f"B{B} {S}->{T}", **r, **speedups(r), "flops": flops,
                 **{f"{name}_share_of_matmul_peak": flops / r[name]["wall_s"] / 1e9 / gflops for name in r},
                 **{f"{name}_paired_share_of_matmul_rate": paired(r[name], lambda t, rate, flops=flops: flops / t / 1e9 / rate)
                    for name in r}}
        if args.compile:
            entry |= speedups(r, "_compiled") | compiled_gains(r)
        results["train"].append(entry)
        rows.append((f"train B{B} {S}->{T}", r, entry))
        print(f"train B{B} {S}->{T}: " + ", ".join(f"{name} {r[name]['wall_s']:.3f}s" for name in r), flush=True)
        save()
        if args.breakdown:  # the products alone at the matmul rate: the ceiling of the step's share
            entry["ours_breakdown"] = b = op_breakdown(fns["ours"])
            b["products_share_of_matmul_rate"] = flops / b["products"] / 1e9 / gflops
            print_breakdown(b)
            save()
    return rows


def bench_greedy(args, results: dict) -> tuple:
    """Greedy decoding, all variants alternating (on fresh copies of the same weights: training moved each model
    by its own dropout masks, and greedy decoding of random weights has near-ties that such differences flip)."""
    B, S, N = DECODE_SHAPE
    enc = torch.randint(2, 32000, (B, S), generator=torch.Generator().manual_seed(0))
    models = {}

    def make(kind, model, compile):
        models.setdefault(kind, model.eval())  # "ours": the tuned model, made first
        return decode_fn(model, kind, enc, N, compile)

    fns = variants(make, args)
    outputs = {name: fn() for name, fn in fns.items()}
    same = all(torch.equal(out, outputs["ours"]) for out in outputs.values())
    # our encoder part alone (eager in both of our variants: the encoder, the cross-attention keys/values, the
    # first decoder pass), timed in the same alternation; the rest of a call is its steps
    begin = torch.no_grad()(lambda: models["ours"].begin_decoding(enc, N))
    r = alternate(fns | {"ours_encoder": in_precision(begin, args.precision)}, args.decode_reps,
                  yardstick=lambda: (matmul_gflops(args.precision, reps=1)["best"], read_gbps(reps=1)))
    encoder = r.pop("ours_encoder")["wall_s"]
    gflops, gbps = results["matmul_gflops"]["best"], results["read_gbps"]
    encoder_floor, step_floor = decoding_floor_parts(B, S, gflops, gbps)
    floor = decoding_floor_s(B, S, N, gflops, gbps)
    entry = {"shape": f"B{B} {S}->{N}", **r, "identical_outputs": same, **speedups(r), "floor_s": floor,
             **{f"{name}_over_floor": r[name]["wall_s"] / floor for name in r},
             **{f"{name}_paired_over_floor": paired(r[name], lambda t, y: t / decoding_floor_s(B, S, N, *y))
                for name in r},
             "ours_encoder_s": encoder, "encoder_floor_s": encoder_floor, "step_floor_s": step_floor,
             **{f"{name}_step_s": (r[name]["wall_s"] - encoder) / (N - 1) for name in r if name.startswith("ours")}}
    if args.compile:
        entry |= speedups(r, "_compiled") | compiled_gains(r)
    if args.breakdown:  # the products alone against the floor: the ceiling of "time over the floor"
        entry["ours_breakdown"] = b = op_breakdown(fns["ours"])
        b["products_over_floor"] = b["products"] / floor
        print_breakdown(b)
    results["decode_greedy"] = entry
    return f"greedy B{B} {S}->{N}", r, entry


def print_summary(rows: list[tuple], results: dict, compiled: bool) -> None:
    print(f"\n{'workload':<24}{'ours s':>9}{'hf s':>9}{'speedup':>9}{'of min':>8}{'ours cpu':>10}{'hf cpu':>9}{'cpu ×':>7}")
    for name, r, e in rows:
        print(f"{name:<24}{r['ours']['wall_s']:>9.3f}{r['hf']['wall_s']:>9.3f}{e['speedup_wall']:>8.2f}x"
              f"{e['speedup_min']:>7.2f}x{r['ours']['cpu_s']:>10.3f}{r['hf']['cpu_s']:>9.3f}{e['speedup_cpu']:>6.2f}x")
        print(f"{'  plain kernels':<24}{r['ours_plain']['wall_s']:>9.3f}{r['hf']['wall_s']:>9.3f}"
              f"{e['speedup_plain_wall']:>8.2f}x{e['speedup_plain_min']:>7.2f}x   (tuned / plain: "
              f"{e['tuned_over_plain_wall']:.2f}x)")
    names = rows[-1][1]
    for e in results["train"]:
        print(f"training {e['shape']}, share of the best matmul rate measured: "
              + ", ".join(f"{name} {100 * e[f'{name}_share_of_matmul_peak']:.0f}%" for name in names)
              + "; of the rate measured after each round (median): "
              + ", ".join(f"{name} {100 * e[f'{name}_paired_share_of_matmul_rate']:.0f}%" for name in names))
    e = results["decode_greedy"]
    print(f"greedy: floor {e['floor_s']:.3f}s; time over floor: "
          + ", ".join(f"{name} {e[f'{name}_over_floor']:.2f}x" for name in names)
          + "; over the floor measured after each round (median): "
          + ", ".join(f"{name} {e[f'{name}_paired_over_floor']:.2f}x" for name in names))
    print(f"  ours by part: encoder {e['ours_encoder_s']:.3f}s ({e['ours_encoder_s'] / e['encoder_floor_s']:.2f}x "
          f"its floor), a step " + ", ".join(f"{name} {1e3 * e[f'{name}_step_s']:.1f} ms "
                                            f"({e[f'{name}_step_s'] / e['step_floor_s']:.2f}x its floor)"
                                            for name in names if name.startswith("ours")))
    if compiled:
        for e in [*results["train"], results["decode_greedy"]]:
            print(f"{e['shape']}: compiled vs eager (eager time / compiled time): "
                  f"ours {e['ours_compiled_vs_eager']:.2f}x, hf {e['hf_compiled_vs_eager']:.2f}x; "
                  f"compiled ours vs compiled hf {e['speedup_compiled_wall']:.2f}x")
    print(f"greedy outputs identical (all variants): {results['decode_greedy']['identical_outputs']}")


def bench_memory(args, results: dict, save) -> None:
    results["memory"] = []
    print(f"\n{'memory (fresh process)':<26}{'ours peak MB':>13}{'hf peak MB':>12}"
          f"{'ours model+work MB':>20}{'hf model+work MB':>18}")
    workloads = [("train", list(s)) for s in TRAIN_SHAPES] + [("decode", list(DECODE_SHAPE))]
    for workload, shape in workloads:
        m = {kind: measure_memory(kind, workload, shape, args.optimizer, args.threads, args.plain_weights,
                                args.system_malloc)
             for kind in ("ours", "hf")}
        results["memory"].append({"workload": workload, "shape": shape, **m})
        save()
        print(f"{workload + ' ' + 'x'.join(map(str, shape)):<26}{m['ours']['peak_rss_mb']:>13.0f}"
              f"{m['hf']['peak_rss_mb']:>12.0f}{m['ours']['model_and_work_mb']:>20.0f}"
              f"{m['hf']['model_and_work_mb']:>18.0f}", flush=True)


def main() -> None:
    args = parse_args()
    malloc = "system" if args.system_malloc or not keep_freed_memory() else "kept"
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.plain_weights != "auto":
        kernels.ONEDNN_UNPACKED = args.plain_weights == "onednn"
    if args.memory_child:
        kind, workload, shape = args.memory_child
        print(json.dumps(memory_child(kind, workload, [int(x) for x in shape.split(",")], args.optimizer)))
        return
    results = machine(args, malloc)

    def save() -> None:  # after every section, so an interrupted run keeps what it measured
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))

    rows = bench_training(args, results, save)
    rows.append(bench_greedy(args, results))
    save()
    print_summary(rows, results, args.compile)
    if not args.skip_memory:
        bench_memory(args, results, save)
    save()
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
