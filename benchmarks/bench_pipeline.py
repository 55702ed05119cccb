"""Is the data pipeline ever the bottleneck? Batches per second of the pipeline vs. t5-small training steps.

Run by hand (never a test):

    T2T_DATA_DIR=/work/shared/data python benchmarks/bench_pipeline.py [--threads 2] [--steps 3]

Measures, in one process on this machine's CPU:

1. ``corpus`` (``corpus_span_corruption`` over ``$T2T_DATA_DIR/corpus`` with T5's SentencePiece model):
   opening the stream (tokenizing and chunking the whole ~11 MB corpus once), then packed 512/114 batches of 8
   through ``build_train_batches`` -- span corruption, trimming, EOS and packing on every draw. Epoch 1 vs
   epoch 2: the time per draw and the number of ``encode_batch`` calls made during each epoch.
2. ``glue_v002_proportional`` (the GLUE mixture present under ``$T2T_DATA_DIR/glue``; missing members skipped)
   packed 512/128, batch 8.
3. One t5-small training step (forward + loss + backward + Adafactor step) on a packed corpus batch, with
   ``t2t.models.t5.T5`` (``configs/models/t5-small.yaml``), at the same torch thread count.
4. The GPU setting (``--gpu-steps``, 0 skips it): both pipelines at batch 128 × 512 (T5's and nanoT5's batch),
   batches/s against the fastest t5.1.1-base step recorded on an H100 at that batch (``results/gpu-h100.json``),
   and the wait for each batch in a loop of such steps with and without ``BatchesAhead`` (the training loop's
   background thread). Two stand-ins of the recorded step time take the GPU step's place: a sleep (a step that
   waits on the device with the GIL released), and half a busy Python loop, half a sleep (a step whose eager
   kernel launches hold the GIL, against which the producer thread competes). And the rate of one rank of 8
   (rank 0 places every example of the global batch and draws those of its 16 rows where their lengths are
   known without drawing).

Writes ``benchmarks/results/pipeline.json``; the numbers are logged in benchmarks/results/HISTORY.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

# GLUE members without a local copy (QQP, MNLI, QNLI train) would otherwise retry the unreachable hub for
# ~20 s each before being skipped; offline mode skips them at once.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from t2t.data import tokenized
from t2t.data.pipeline import build_train_batches
from t2t.data.prefetch import BatchesAhead
from t2t.data.vocab import load_vocabulary

RESULTS = Path(__file__).resolve().parent / "results" / "pipeline.json"


class CountingVocab:
    """Counts tokenizer calls by wrapping the vocabulary's class methods (so cache keys are unchanged)."""

    def __init__(self, vocab):
        self.calls = {"encode": 0, "encode_batch": 0, "texts": 0}
        cls = type(vocab)
        self._originals = (cls.encode, cls.encode_batch)
        counts = self.calls

        def encode(self_, text, _orig=cls.encode):
            counts["encode"] += 1
            counts["texts"] += 1
            return _orig(self_, text)

        def encode_batch(self_, texts, _orig=cls.encode_batch):
            texts = list(texts)
            counts["encode_batch"] += 1
            counts["texts"] += len(texts)
            return _orig(self_, texts)

        cls.encode, cls.encode_batch = encode, encode_batch
        self.cls = cls

    def snapshot(self) -> dict:
        return dict(self.calls)

    def restore(self) -> None:
        self.cls.encode, self.cls.encode_batch = self._originals


def batch_stats(batch: dict) -> dict:
    seg = batch.get("encoder_segment_ids")
    return {
        "encoder_fill": float((batch["encoder_input_tokens"] != 0).float().mean()),
        "decoder_fill": float((batch["decoder_target_tokens"] != 0).float().mean()),
        "examples": int(seg.max(dim=1).values.sum()) if seg is not None else int(batch["encoder_input_tokens"].shape[0]),
    }


def time_batches(batches, n: int) -> dict:
    it = iter(batches)
    next(it)  # warm-up
    examples = enc_tokens = dec_tokens = 0
    start = time.perf_counter()
    for _ in range(n):
        batch = next(it)
        stats = batch_stats(batch)
        examples += stats["examples"]
        enc_tokens += int((batch["encoder_input_tokens"] != 0).sum())
        dec_tokens += int((batch["decoder_target_tokens"] != 0).sum())
    elapsed = time.perf_counter() - start
    return {"batches": n, "seconds": elapsed, "batches_per_s": n / elapsed, "examples_per_s": examples / elapsed,
            "encoder_tokens_per_s": enc_tokens / elapsed, "decoder_tokens_per_s": dec_tokens / elapsed,
            "last_batch": stats}


def bench_corpus(vocab, data_dir, n_batches: int) -> tuple[dict, dict]:
    counter = CountingVocab(vocab)
    try:
        tokenized.clear_cache()
        start = time.perf_counter()
        batches = build_train_batches("corpus", vocab=vocab, batch_size=8, input_length=512, target_length=114,
                                      pack=True, seed=0, data_dir=data_dir)
        open_seconds = time.perf_counter() - start
        after_open = counter.snapshot()
        stream = batches.streams["corpus_span_corruption"]
        n_chunks = len(stream.data)
        raw_tokens = int(sum(x["targets"].size for x in stream.data))

        # epoch 1 and epoch 2 of the task's draws (span corruption + trim + EOS per draw)
        epochs = []
        for epoch in range(2):
            before = counter.snapshot()
            t0 = time.perf_counter()
            for i in range(epoch * n_chunks, (epoch + 1) * n_chunks):
                stream.draw(i)
            seconds = time.perf_counter() - t0
            after = counter.snapshot()
            epochs.append({"epoch": epoch + 1, "draws": n_chunks, "seconds": seconds,
                           "draws_per_s": n_chunks / seconds,
                           "tokenizer_calls": after["encode"] + after["encode_batch"]
                           - before["encode"] - before["encode_batch"],
                           "texts_tokenized": after["texts"] - before["texts"]})

        throughput = time_batches(batches, n_batches)
        first_batch = next(iter(build_train_batches("corpus", vocab=vocab, batch_size=8, input_length=512,
                                                    target_length=114, pack=True, seed=0, data_dir=data_dir)))
        total = counter.snapshot()
    finally:
        counter.restore()
    result = {
        "task": "corpus_span_corruption", "batch_size": 8, "input_length": 512, "target_length": 114,
        "pack": True, "chunks": n_chunks, "raw_tokens": raw_tokens,
        "open_seconds_tokenize_and_chunk": open_seconds, "tokenizer_calls_at_open": after_open,
        "epochs": epochs, "tokenizer_calls_total": total,
        "texts_tokenized_after_open": total["texts"] - after_open["texts"],
        "throughput": throughput,
    }
    return result, first_batch


def bench_glue(vocab, data_dir, n_batches: int) -> dict:
    tokenized.clear_cache()
    start = time.perf_counter()
    batches = build_train_batches("glue_v002_proportional", vocab=vocab, batch_size=8, input_length=512,
                                  target_length=128, pack=True, seed=0, data_dir=data_dir, skip_unavailable=True)
    open_seconds = time.perf_counter() - start
    return {"mixture": "glue_v002_proportional", "members_used": sorted(batches.rates), "batch_size": 8,
            "input_length": 512, "target_length": 128, "pack": True, "open_seconds_tokenize": open_seconds,
            "throughput": time_batches(batches, n_batches)}


def bench_model_step(batch: dict, steps: int) -> dict:
    from t2t.models.t5 import T5, resolve_model_config
    from t2t.training.optim import OptimizerConfig, build_optimizer

    torch.manual_seed(0)
    model = T5(resolve_model_config("t5-small"))
    model.train()
    optimizer = build_optimizer(model, OptimizerConfig())
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        loss_sum, weight = model.loss_sums(batch)
        (loss_sum / weight).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i:  # the first step allocates optimizer state
            times.append(time.perf_counter() - t0)
    seconds = float(np.median(times))
    return {"model": "t2t.models.t5.T5 t5-small (configs/models/t5-small.yaml)", "optimizer": "Adafactor",
            "batch": "8 x 512/114 packed corpus batch", "steps_timed": steps, "seconds_per_step": seconds,
            "steps_per_s": 1 / seconds, "all_step_seconds": times,
            "params": sum(p.numel() for p in model.parameters())}


def recorded_gpu_step() -> tuple[float, str]:
    """The fastest t2t training step recorded by bench_gpu.py on an H100 (t5.1.1-base, 128 × 512→114, bf16)."""
    recorded = json.loads((RESULTS.parent / "gpu-h100.json").read_text())
    runs = [(run["seconds"], f"{variant}, {name}") for variant, by_run in recorded["train"].items()
            if variant.startswith("t2t") for name, run in by_run.items() if "seconds" in run]
    return min(runs)


def sleep_step(seconds: float) -> None:
    """A GPU step that waits on the device: the GIL is free the whole time."""
    time.sleep(seconds)


def half_python_step(seconds: float) -> None:
    """A GPU step that launches its kernels eagerly: Python holds the GIL for the first half, then waits."""
    end = time.perf_counter() + seconds / 2
    while time.perf_counter() < end:
        pass
    time.sleep(seconds / 2)


def waits_for_batches(make_batches, step_seconds: float, steps: int) -> dict:
    """Median wait for the next batch, and steps/s, in a loop of ``steps`` stand-in steps of ``step_seconds``
    (``sleep_step`` and ``half_python_step``), with the batches made in the loop (ahead 0) and by
    ``BatchesAhead`` two ahead, whose thread competes for the GIL with a step that holds it."""
    out = {}
    for stand_in in (sleep_step, half_python_step):
        for depth in (0, 2):
            batches = BatchesAhead(make_batches(), depth) if depth else make_batches()
            batches.next_batch()  # warm-up (and the producer's start)
            waits, start = [], time.perf_counter()
            for _ in range(steps):
                t0 = time.perf_counter()
                batches.next_batch()
                waits.append(time.perf_counter() - t0)
                stand_in(step_seconds)
            seconds = time.perf_counter() - start
            if depth:
                batches.close()
            out.setdefault(stand_in.__name__, {})[f"ahead_{depth}"] = {"median_wait_s": float(np.median(waits)),
                                                                       "steps_per_s": steps / seconds}
    return out


def bench_gpu_setting(vocab, data_dir, steps: int) -> dict:
    """Pipelines at batch 128 × 512 against the recorded H100 step (see the module doc, 4)."""
    step_seconds, source = recorded_gpu_step()
    pipelines = {"corpus": ("corpus", 114, {}),
                 "glue_v002_proportional": ("glue_v002_proportional", 128, {"skip_unavailable": True})}
    result = {"gpu_step_s": step_seconds, "gpu_step": f"{source} (results/gpu-h100.json)"}
    for name, (mixture, targets, extra) in pipelines.items():
        def make_batches(mixture=mixture, targets=targets, extra=extra, **layout):
            return build_train_batches(mixture, vocab=vocab, batch_size=128, input_length=512,
                                       target_length=targets, pack=True, seed=0, data_dir=data_dir, **extra, **layout)

        throughput = time_batches(make_batches(), steps)
        # a rank's batches are quicker: 5x as many, for a window as long as the others'
        one_of_eight = time_batches(make_batches(rank=0, world_size=8), 5 * steps)["batches_per_s"]
        result[name] = {"batch": f"128 x 512/{targets} packed", "throughput": throughput,
                        "batches_per_gpu_step": throughput["batches_per_s"] * step_seconds,
                        "rank_0_of_8_batches_per_s": one_of_eight,
                        **waits_for_batches(make_batches, step_seconds, steps)}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="t5-small training steps to time")
    parser.add_argument("--batches", type=int, default=200, help="pipeline batches to time")
    parser.add_argument("--gpu-steps", type=int, default=10,
                        help="batches and stand-in steps at the GPU setting (4. in the module doc; 0 skips it)")
    parser.add_argument("--data-dir", default=os.environ.get("T2T_DATA_DIR"))
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    if not args.data_dir:
        print("error: pass --data-dir or set T2T_DATA_DIR (needs corpus/, glue/ and vocab/).", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    vocab = load_vocabulary(data_dir=args.data_dir)

    corpus, batch = bench_corpus(vocab, args.data_dir, args.batches)
    print(json.dumps(corpus, indent=1), flush=True)
    glue = bench_glue(vocab, args.data_dir, args.batches)
    print(json.dumps(glue, indent=1), flush=True)
    step = bench_model_step(batch, args.steps)
    print(json.dumps({k: v for k, v in step.items() if k != "all_step_seconds"}, indent=1), flush=True)

    gpu = bench_gpu_setting(vocab, args.data_dir, args.gpu_steps) if args.gpu_steps else None
    if gpu:
        print(json.dumps(gpu, indent=1), flush=True)

    ratio = {
        "corpus_pipeline_batches_per_training_step": corpus["throughput"]["batches_per_s"] * step["seconds_per_step"],
        "glue_pipeline_batches_per_training_step": glue["throughput"]["batches_per_s"] * step["seconds_per_step"],
        "pipeline_share_of_step_time_corpus": 1 / (1 + corpus["throughput"]["batches_per_s"] * step["seconds_per_step"]),
    }
    result = {
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                    "cpu_count": os.cpu_count(), "load_average_before": load_before,
                    "load_average_after": os.getloadavg(),
                    "note": "CPU only; cores shared with other jobs, so timings are noisy"},
        "corpus_span_corruption": corpus, "glue_mixture": glue, "t5_small_training_step": step, "ratio": ratio,
        "gpu_setting": gpu,
        "target": "pipeline >= 10x the training step's consumption (batches/s)",
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(ratio, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
