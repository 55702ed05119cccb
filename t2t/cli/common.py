"""What every command shares: one-sentence errors (exit 2), the parser with its examples, flags derived from
the settings dataclasses, and ``--config``/``--set``/``--print-config``.

Settings resolve through ``t2t.config.load``: dataclass defaults ← a run's settings (resuming) ← ``--config``
files (in order) ← the flags given ← ``--set key=value``. A flag is declared by the setting it sets
(``Flag("train_steps")`` is ``--train-steps``): its type, default and help come from the dataclass field and
the comment beside it (the same text docs/settings.md shows), so nothing is repeated by hand.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import sys
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable

import yaml
from tqdm import tqdm

from t2t import config
from t2t.allocator import keep_freed_memory
from t2t.checkpoints.loading import own_vocabulary
from t2t.checkpoints.run import checkpoint_path
from t2t.data.sources import resolve_data_dir
from t2t.data.vocab import load_vocabulary
from t2t.errors import T2TError
from t2t.evaluation.evaluate import with_run_settings
from t2t.terminal import disable_progress_bars_off_terminal, raise_if_interrupted, report_interrupt, stop_on_interrupt


def run_cli(main=None, *, resumable: bool = False):
    """Wrap a ``main(argv)``: T2TError → one line on stderr and exit 2; running out of memory → one line and
    exit 2; Ctrl-C → one line and exit 130 (saying how to resume where the command can: ``resumable``), even
    where something swallowed its KeyboardInterrupt; no progress bars when stderr is not a terminal. Run as a
    command (``argv`` None: the process is the command's own), Ctrl-C is handled (``t2t.terminal``) and freed
    memory is kept for reuse (``t2t.allocator``); called from Python with arguments, both are left alone."""
    if main is None:
        return functools.partial(run_cli, resumable=resumable)

    @functools.wraps(main)
    def wrapper(argv: list[str] | None = None) -> int:
        if argv is None:
            stop_on_interrupt()
            keep_freed_memory()
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        disable_progress_bars_off_terminal()
        try:
            status = main(argv) or 0
            raise_if_interrupted()
            return status
        except T2TError as e:
            return fail(str(e))
        except (MemoryError, RuntimeError) as e:
            if not is_out_of_memory(e):
                raise
            first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]  # Python's own has no message
            return fail(f"out of memory ({first_line}); lower --batch-size or the lengths (--max-length, "
                        f"input_length), or use a machine with more memory.")
        except KeyboardInterrupt:
            return report_interrupt(resumable)
    return wrapper


def fail(message: str) -> int:
    end_progress_bars()
    print(f"error: {message}", file=sys.stderr)
    return 2


def is_out_of_memory(error: BaseException) -> bool:
    """torch's allocators raise RuntimeError (``torch.OutOfMemoryError`` on CUDA, "can't allocate memory" on
    the CPU); Python's raise MemoryError."""
    text = str(error)
    return isinstance(error, MemoryError) or "out of memory" in text or "can't allocate memory" in text


def end_progress_bars() -> None:
    """Close the progress bars an error left open, so that the error starts a line of its own."""
    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def new_parser(prog: str, description: str, examples: str) -> argparse.ArgumentParser:
    """A parser whose --help ends with ``examples`` (kept as written; tests/cli parses each command line)."""
    return argparse.ArgumentParser(prog=prog, description=description, epilog="examples:\n" + examples,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


@dataclass(frozen=True)
class Flag:
    """A flag that sets one setting: ``key`` is the setting's dotted name (``optimizer.learning_rate``; a key
    inside a mapping setting such as ``model.preset`` takes that setting's description)."""
    key: str
    name: str | None = None                # default: --<last part of key, with dashes>
    parse: Callable[[str], Any] | None = None  # a list setting given as one string (comma-separated, shell words)
    required: bool = False

    @property
    def option(self) -> str:
        return self.name or "--" + self.key.rsplit(".", 1)[-1].replace("_", "-")


def add_flags(parser, cls, flags: list[Flag]) -> None:
    """Add each flag to ``parser`` (or an argument group), typed and described by setting ``flag.key`` of
    ``cls``; a flag not given stays None and so leaves the setting to the files and defaults."""
    for flag in flags:
        hint, default, comment = config.describe(cls, flag.key)
        kwargs: dict[str, Any] = {"dest": flag.key, "default": None, "required": flag.required,
                                  "help": help_text(comment, default)}
        if hint is bool:
            kwargs["action"] = "store_true"
        elif typing.get_origin(hint) is list and flag.parse is None:
            kwargs.update(action="append", metavar=flag.option.lstrip("-").replace("-", "_").upper())
        else:
            kwargs.update(type=flag.parse or scalar_type(hint),
                          metavar=flag.option.lstrip("-").replace("-", "_").upper())
        parser.add_argument(flag.option, **kwargs)


def help_text(comment: str, default: Any) -> str:
    """The field's comment, with its default where that says something (argparse's ``%`` escaped)."""
    text = comment
    if default not in (None, "", [], {}, False) and "default" not in comment:
        shown = default if isinstance(default, str) else json.dumps(default)
        text += f" (default: {shown})"
    return text.replace("%", "%%")


def scalar_type(hint: Any) -> type:
    """What a flag's one word is read as: the first of int, float, str in ``hint`` (``int | None`` → int)."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    return next((t for t in options if t in (int, float, str)), str)


def given(args: argparse.Namespace, flags: list[Flag]) -> dict:
    """``{dotted key: value}`` of the flags given on the command line."""
    return {flag.key: getattr(args, flag.key) for flag in flags if getattr(args, flag.key) is not None}


def add_settings(parser: argparse.ArgumentParser, example: str, kind: str | None = None) -> None:
    """``--config`` (files, or names in configs/<kind>), ``--set`` (``example`` must be a valid one for this
    command: tests/cli checks it) and ``--print-config``."""
    names = f", or a name in configs/{kind} ({', '.join(config.config_names(kind))})" if kind else ""
    parser.add_argument("--config", action="append", default=[], metavar="FILE",
                        help=f"settings file (YAML or JSON){names}; repeatable, later wins")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                        help=f"override any setting, e.g. --set {example} (repeatable; a list setting takes one "
                             f"value or [a, b]; all settings: docs/settings.md)")
    parser.add_argument("--print-config", action="store_true",
                        help="print the fully resolved settings as YAML and exit")


def resolve(cls, args: argparse.Namespace, flags: list[Flag], base: dict | None = None, kind: str = "recipes"):
    """Settings ``cls`` from ``base``, the ``--config`` files, the ``flags`` given and ``--set``; a ``checkpoint``
    or ``init_from`` given as ``RUN:best`` becomes the step folder the run records as its best (checkpoint_path)."""
    settings = config.load(cls, args.config, args.overrides, base=base, given=given(args, flags), kind=kind)
    for key in ("checkpoint", "init_from"):
        if isinstance(getattr(settings, key, None), str):
            settings = dataclasses.replace(settings, **{key: checkpoint_path(getattr(settings, key))})
    return settings


def resolved_locations(cfg) -> dict:
    """Evaluation or prediction settings (what their ``--print-config`` prints) with the vocabulary file and
    data dir used: the checkpoint's where the user gave none, else t2t.data.vocab.load_vocabulary's order."""
    cfg = with_run_settings(cfg)
    data_dir = resolve_data_dir(cfg.data_dir)
    vocab = load_vocabulary(cfg.vocab or own_vocabulary(cfg.checkpoint), data_dir=data_dir)
    return {**config.to_dict(cfg), "vocab": str(vocab.path), "data_dir": str(data_dir) if data_dir else None}


def print_settings(data: dict) -> None:
    print(yaml.safe_dump(data, sort_keys=False), end="")


def add_locations(parser, vocab: bool = True) -> None:
    """--vocab, --data-dir and --module for the commands without settings dataclasses (show, tasks, vocab)."""
    if vocab:
        parser.add_argument("--vocab", help="SentencePiece .model, a vocabulary record vocab.json, or byte "
                                             "(ByT5's bytes; default: $T2T_VOCAB, DATA_DIR/vocab, the hub)")
    parser.add_argument("--data-dir", help="root of local dataset copies (default: $T2T_DATA_DIR)")
    parser.add_argument("--module", action="append", default=[], dest="modules",
                        help="import a module or .py file that registers tasks (repeatable)")


def add_task_choice(parser: argparse.ArgumentParser, cls, required: bool = True) -> None:
    """--mixture or --task, both setting ``mixture``."""
    _, _, comment = config.describe(cls, "mixture")
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--mixture", dest="mixture", metavar="NAME", help=f"{comment}, e.g. glue_v002")
    group.add_argument("--task", dest="mixture", metavar="NAME", help=f"{comment}, e.g. stsb")


TASK = Flag("mixture")  # what add_task_choice sets, for ``given``
LOCATION_FLAGS = [Flag("vocab"), Flag("data_dir"), Flag("modules", name="--module")]
DECODING_FLAGS = [Flag("batch_size"), Flag("beam_size"), Flag("temperature"), Flag("top_k"), Flag("seed"),
                  Flag("max_length"), Flag("input_length")]
