"""What the training loop costs on top of the bare model step (run by hand, never a test).

    T2T_DATA_DIR=../shared/data python benchmarks/bench_trainer.py [--steps 25] [--task glue_sst2_v002]

Fine-tunes t5-small (fp32, Adafactor at 1e-3, batch 8 × 128→16 tokens, packed) with ``t2t.training.train.train`` —
data pipeline, logging, progress bar and a checkpoint at step 20 included — and reads the trainer's own
tokens/s from metrics.jsonl for steps 11–30 (the first 10 hold tokenization and warm-up). Then it times the bare step on batches from the same pipeline: ``loss_sums``, backward and the same
optimizer, nothing else. Both count tokens the same way (non-padding encoder + target tokens). The two are
measured in turn in one process; the machine may be shared, so read the per-window spread too.
Results go to benchmarks/results/trainer.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from t2t import config
from t2t.data.pipeline import build_train_batches
from t2t.data.vocab import load_vocabulary
from t2t.training.optim import build_optimizer
from t2t.training.train import TrainConfig, TrainingObjective, build_model, train

ROOT = Path(__file__).resolve().parent


def settings(task: str, steps: int, out: str) -> TrainConfig:
    return config.from_dict(TrainConfig, {
        "mixture": task, "model": "t5-small", "output_dir": out, "train_steps": steps, "batch_size": 8,
        "input_length": 128, "target_length": 16, "pack": True, "log_every": 5, "save_every": 20,
        "keep_checkpoints": 1, "dropout_rate": 0.1,
        "optimizer": {"name": "adafactor", "learning_rate": 1e-3, "schedule": "constant"}})


def trainer_tokens_per_second(cfg: TrainConfig) -> list[float]:
    records = train(cfg)
    return [r["tokens_per_second"] for r in records[2:]]  # after 10 steps (tokenization, warm-up)


def bare_tokens_per_second(cfg: TrainConfig, steps: int) -> list[float]:
    vocab = load_vocabulary(cfg.vocab, data_dir=cfg.data_dir)
    torch.manual_seed(cfg.seed)
    objective = TrainingObjective(build_model(cfg, vocab))
    optimizer = build_optimizer(objective, cfg.optimizer)
    batches = iter(build_train_batches(cfg.mixture, vocab=vocab, batch_size=cfg.batch_size,
                                       input_length=cfg.input_length, target_length=cfg.target_length,
                                       pack=cfg.pack, seed=cfg.seed))
    data = [next(batches) for _ in range(steps)]  # drawn up front: the bare step does no data work
    objective.train()
    rates = []
    for i, batch in enumerate(data):
        start = time.perf_counter()
        loss = objective(batch) / batch["decoder_loss_weights"].sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - start
        tokens = int(batch["encoder_input_tokens"].count_nonzero() + batch["decoder_target_tokens"].count_nonzero())
        if i >= 10:  # warm-up, as for the trainer
            rates.append(tokens / seconds)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--task", default="glue_sst2_v002")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as out:
        cfg = settings(args.task, args.steps, out)
        trainer = trainer_tokens_per_second(cfg)
        bare = bare_tokens_per_second(cfg, args.steps)
    result = {
        "task": args.task, "model": "t5-small", "batch": "8 x 128->16 packed", "threads": torch.get_num_threads(),
        "trainer_tokens_per_second": statistics.mean(trainer), "trainer_windows": trainer,
        "bare_tokens_per_second": len(bare) / sum(1 / r for r in bare), "bare_steps": bare,
    }
    result["loop_overhead"] = 1 - result["trainer_tokens_per_second"] / result["bare_tokens_per_second"]
    (ROOT / "results").mkdir(exist_ok=True)
    (ROOT / "results" / "trainer.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"trainer {result['trainer_tokens_per_second']:,.0f} tok/s (windows "
          f"{', '.join(f'{r:,.0f}' for r in trainer)}); bare step {result['bare_tokens_per_second']:,.0f} tok/s "
          f"(harmonic mean over {len(bare)} steps); loop overhead {100 * result['loop_overhead']:.1f}%")


if __name__ == "__main__":
    main()
