"""``t2t-vocab``: train a SentencePiece vocabulary with T5's conventions."""

from __future__ import annotations

import argparse
from pathlib import Path

from t2t.cli.common import add_locations, new_parser, run_cli
from t2t.data.show import show_examples
from t2t.data.task import load_modules
from t2t.data.vocab import train_vocabulary
from t2t.errors import T2TError
from t2t.tasks.text_files import TextFolderSource

EXAMPLES = """\
  t2t-vocab ../shared/data/corpus --output runs/vocab/corpus8k --vocab-size 8000
  t2t-vocab --task rte --output runs/vocab/rte2k --vocab-size 2000 --model-type bpe
"""


def parser() -> argparse.ArgumentParser:
    p = new_parser("t2t-vocab", "Train a SentencePiece vocabulary with T5's conventions "
                                "(pad 0, EOS 1, unk 2, sentinels at the top).", EXAMPLES)
    p.add_argument("inputs", nargs="*", help="text files or folders of .txt files")
    p.add_argument("--task", help="train on a task's text instead (inputs and targets of --split)")
    p.add_argument("--split", default="train", help="the task's split to read (default: train)")
    p.add_argument("--output", required=True, help="model prefix: writes PREFIX.model and PREFIX.vocab")
    p.add_argument("--vocab-size", type=int, default=32000,
                   help="pieces, pad/EOS/unk included; 100 sentinel ids come on top (default: 32000)")
    p.add_argument("--model-type", default="unigram", choices=["unigram", "bpe"],
                   help="SentencePiece algorithm (default: unigram, as T5)")
    add_locations(p, vocab=False)
    return p


@run_cli
def vocab_main(argv=None) -> int:
    args = parser().parse_args(argv)
    if bool(args.inputs) == bool(args.task):
        raise T2TError("give either text files/folders or --task NAME to train a vocabulary on.")
    source = task_texts(args) if args.task else text_files(args.inputs)
    path = train_vocabulary(source, args.output, vocab_size=args.vocab_size, model_type=args.model_type)
    print(f"wrote {path}")
    return 0


def text_files(inputs: list[str]) -> list[Path]:
    """Files as given; folders read like the text-folder tasks read them (same suffixes, docs left out).
    A file named twice (alone and inside a given folder) is read once."""
    files: list[Path] = []
    for item in map(Path, inputs):
        if item.is_dir():
            files += TextFolderSource(item.resolve()).files()
        elif item.exists():
            files.append(item.resolve())
        else:
            raise T2TError(f"no such file or folder {item}; check the path.")
    return list(dict.fromkeys(files))


def task_texts(args: argparse.Namespace):
    load_modules(args.modules)
    for example in show_examples(args.task, args.split, None, with_tokens=False, vocab=None,
                                 data_dir=args.data_dir):
        yield example["inputs"]
        yield example["targets"]
