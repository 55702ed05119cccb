"""``t2t-predict``: decode input strings (or a task's raw fields) with a trained model."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from t2t import durable
from t2t.cli.common import (
    DECODING_FLAGS,
    LOCATION_FLAGS,
    Flag,
    add_flags,
    add_settings,
    new_parser,
    print_settings,
    resolve,
    resolved_locations,
    run_cli,
)
from t2t.errors import T2TError
from t2t.evaluation.predict import PredictConfig, predict

EXAMPLES = """\
  echo "sst2 sentence: a gorgeous, witty film" | t2t-predict --checkpoint runs/glue
  t2t-predict --checkpoint runs/rte --task rte --input rte.jsonl --output predictions.txt  # raw fields
  t2t-predict --checkpoint runs/lm --input prompts.txt --temperature 0.7 --top-k 40 --seed 1 --max-length 64
"""

FLAGS = [Flag("checkpoint", required=True), Flag("task"), Flag("device"), Flag("trust_modules"), *DECODING_FLAGS,
         *LOCATION_FLAGS]


def parser() -> argparse.ArgumentParser:
    p = new_parser("t2t-predict", "Decode input strings with a trained model, one output line per input.",
                   EXAMPLES)
    add_flags(p, PredictConfig, FLAGS)
    p.add_argument("--input", default="-", metavar="FILE", help="input strings, one per line (default: stdin)")
    p.add_argument("--output", metavar="FILE", help="write the decoded strings here (default: stdout); a file "
                                                    "already there is replaced only once all are written")
    add_settings(p, "precision=bf16")
    return p


def settings(args: argparse.Namespace) -> PredictConfig:
    return resolve(PredictConfig, args, FLAGS)


@run_cli
def predict_main(argv=None) -> int:
    args = parser().parse_args(argv)
    cfg = settings(args)
    if args.print_config:
        print_settings(resolved_locations(cfg))
        return 0
    if args.output:
        check_output(Path(args.output))
    predictions = predict(cfg, read_lines(args.input))
    text = "".join(p.replace("\n", " ") + "\n" for p in predictions)
    if args.output:
        write_output(Path(args.output), text)
    else:
        sys.stdout.write(text)
    return 0


def read_lines(source: str) -> list[str]:
    """Lines of a file, or of stdin for ``-``, without their line ends; bytes that are not UTF-8 are one
    sentence naming the line."""
    name = "stdin" if source == "-" else source
    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as e:
        raise T2TError(f"cannot read input file {source} ({e.strerror or e}); pass a UTF-8 text file with one "
                       f"input per line.") from None
    lines = data.splitlines()
    for number, line in enumerate(lines, 1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise T2TError(f"input line {number} of {name} is not UTF-8 (byte {line[e.start]:#04x} at column "
                           f"{e.start + 1}); convert the input to UTF-8.") from None
    return [line.decode("utf-8") for line in lines]


def check_output(path: Path) -> None:
    """Refuse an output path that cannot be written before any decoding (which may take hours): a folder, a path
    under a file, or one in a folder this user cannot write to. Folders on the way that do not exist yet are
    created when the output is written."""
    if path.is_dir():
        raise T2TError(f"--output {path} is a folder; give a file's path, such as {path / 'predictions.txt'}.")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise T2TError(f"--output {path} cannot be written: {folder} is a file, not a folder; choose another "
                       f"--output path.")
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        raise T2TError(f"--output {path} cannot be written: folder {folder} is not writable ({e.strerror or e}); "
                       f"choose a writable --output path.") from None


def write_output(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it over ``path``, so that a failed write
    (a full disk) leaves the file that was there whole; the error names the system's reason."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise T2TError(f"cannot create the folder of {path} ({e.strerror or e}); choose a writable --output "
                       f"path.") from None
    durable.write_atomic(path, text)
