"""How much of a packed UL2 batch is padding, against span corruption at the same lengths?

Run by hand (never a test):

    T2T_DATA_DIR=/work/shared/data python benchmarks/bench_ul2_packing.py [--batches 10] [--batch-size 32]

For each pair of lengths (512/512, UL2's; 512/256; 512/114, T5's), ``corpus_ul2`` and ``corpus_span_corruption``
over ``$T2T_DATA_DIR/corpus`` with T5's SentencePiece model, packed through ``build_train_batches`` (seed 0):
the share of encoder positions, of decoder positions and of all positions that hold no token, over
``--batches`` batches, and the chunk length each task cuts its text into. UL2's chunk is the longest that
none of its seven denoisers overflows; a UL2 example's inputs and targets shares of the chunk differ by
denoiser (R: about 0.9 and 0.2; X at r=0.5: about 0.6 each), so one pair of row lengths cannot be filled by
every draw.

Writes ``benchmarks/results/ul2-packing.json``; the numbers are logged in benchmarks/results/HISTORY.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

from t2t.data import objectives as ob
from t2t.data.pipeline import build_train_batches
from t2t.data.task import get_task, load_modules
from t2t.data.vocab import SentencePieceVocabulary

LENGTHS = [(512, 512), (512, 256), (512, 114)]
TASKS = ["corpus_ul2", "corpus_span_corruption"]


def padding(name: str, vocab, data_dir: Path, inputs: int, targets: int, batches: int, batch_size: int) -> dict:
    stream = iter(build_train_batches(name, vocab=vocab, batch_size=batch_size, input_length=inputs,
                                      target_length=targets, pack=True, seed=0, data_dir=data_dir))
    empty = {"encoder": 0, "decoder": 0}
    size = {"encoder": 0, "decoder": 0}
    examples = 0
    for _ in range(batches):
        batch = next(stream)
        for side, key in (("encoder", "encoder_segment_ids"), ("decoder", "decoder_segment_ids")):
            empty[side] += int((batch[key] == 0).sum())
            size[side] += batch[key].numel()
        examples += int(batch["encoder_segment_ids"].max(dim=1).values.sum())
    task = get_task(name)
    denoise = task.token_preprocessors[0].keywords
    chunk = ob.chunk_length({"inputs": inputs, "targets": targets}, vocab=vocab, **denoise)
    return {"chunk_length": chunk, "examples_per_row": round(examples / (batches * batch_size), 3),
            "encoder_padding": round(empty["encoder"] / size["encoder"], 4),
            "decoder_padding": round(empty["decoder"] / size["decoder"], 4),
            "all_padding": round(sum(empty.values()) / sum(size.values()), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    data_dir = Path(os.environ["T2T_DATA_DIR"])
    vocab = SentencePieceVocabulary(data_dir / "vocab" / "t5_spiece.model", extra_ids=100)
    load_modules([])
    results = {f"{i}/{t}": {name: padding(name, vocab, data_dir, i, t, args.batches, args.batch_size)
                            for name in TASKS} for i, t in LENGTHS}
    out = {"machine": platform.processor() or platform.machine(), "batches": args.batches,
           "batch_size": args.batch_size, "results": results}
    print(json.dumps(out, indent=1))
    path = Path(__file__).parent / "results" / "ul2-packing.json"
    path.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
