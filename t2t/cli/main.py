"""Command-line entry points: t2t-train, t2t-eval, t2t-predict, t2t-show, t2t-tasks, t2t-vocab, t2t-study,
t2t-export.

Settings resolve as: dataclass defaults ← ``--config`` files (in order) ← explicit flags ← ``--set k=v``.
Bad input ends in ``error: <one sentence>`` and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
from pathlib import Path

from t2t.errors import T2TError
from t2t.terminal import disable_progress_bars_off_terminal


def run_cli(main):
    """Wrap a ``main(argv)``: T2TError → one line on stderr and exit 2; Ctrl-C → exit 130; no progress bars
    when stderr is not a terminal."""
    @functools.wraps(main)
    def wrapper(argv: list[str] | None = None) -> int:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        disable_progress_bars_off_terminal()
        try:
            return main(argv) or 0
        except T2TError as e:
            end_progress_bars()
            print(f"error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("interrupted; run the same command again to resume from the last checkpoint.",
                  file=sys.stderr)
            return 130
    return wrapper


def end_progress_bars() -> None:
    """Close the progress bars an error left open, so that the error starts a line of its own."""
    from tqdm import tqdm
    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vocab", help="SentencePiece .model (default: $T2T_VOCAB, DATA_DIR/vocab, the hub)")
    parser.add_argument("--data-dir", help="root of local dataset copies (default: $T2T_DATA_DIR)")
    add_module_flag(parser)


def add_module_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--module", action="append", default=[], dest="modules",
                        help="import a module or .py file that registers tasks (repeatable)")


def add_task_choice(parser: argparse.ArgumentParser, required: bool = True) -> None:
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--mixture", help="mixture (or task) name, e.g. glue_v002")
    group.add_argument("--task", help="task name, e.g. stsb")


def add_settings(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", action="append", default=[], metavar="FILE",
                        help="settings file or recipe name in configs/recipes (repeatable, later wins)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                        help="override any setting, e.g. --set optimizer.schedule=rsqrt (repeatable; "
                             "all settings: docs/settings.md)")
    parser.add_argument("--print-config", action="store_true",
                        help="print the fully resolved settings as YAML and exit")


def new_parser(prog: str, description: str, examples: str) -> argparse.ArgumentParser:
    """A parser whose --help ends with ``examples`` (kept as written)."""
    return argparse.ArgumentParser(prog=prog, description=description, epilog="examples:\n" + examples,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def print_config(cfg) -> None:
    import yaml
    from t2t import config
    print(yaml.safe_dump(config.to_dict(cfg), sort_keys=False), end="")


def resolve(cls, args: argparse.Namespace, flags: dict, base: dict | None = None, kind: str = "recipes"):
    """Build settings ``cls`` from ``base`` (a run's settings), --config files (paths, or names in
    configs/<kind>), the flags given (non-None), then --set."""
    from t2t import config
    files = [config.find_config(name, kind) for name in args.config]
    given = {}
    for key, value in flags.items():
        if value is None or value == []:
            continue
        node = given
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    data = dict(base or {})
    for file in files:
        data = config.merge(data, config.read_config_file(file))
    data = config.merge(data, given)
    data = config.merge(data, config.parse_overrides(args.overrides))
    return config.from_dict(cls, data)


def train_parser() -> argparse.ArgumentParser:
    parser = new_parser("t2t-train", "Train or fine-tune a T5 model; run again in the same --output-dir to "
                        "resume with the run's settings.", """\
  t2t-train --task rte --model t5-small --init-from google-t5/t5-small --config finetune --output-dir runs/rte
  t2t-train --mixture glue_v002 --config cpu-smoke --skip-unavailable --output-dir runs/glue
  t2t-train --output-dir runs/rte --train-steps 2000        # resume runs/rte and train on to step 2000
  t2t-train --task rte --model t5-tiny --print-config       # show every setting, train nothing
""")
    add_task_choice(parser, required=False)
    parser.add_argument("--model", help="preset (t5-small, t5.1.1-base, t5-tiny, ...) or model config file")
    parser.add_argument("--init-from", help="our checkpoint or run dir, a Hugging Face T5 folder or hub id")
    parser.add_argument("--output-dir", help="run folder; running again in it resumes")
    parser.add_argument("--train-steps", type=int, help="train until this step (default: 1000)")
    parser.add_argument("--batch-size", type=int, help="global batch size in rows (default: 128)")
    parser.add_argument("--learning-rate", type=float, help="the optimizer's learning rate (default: 1e-3)")
    parser.add_argument("--seed", type=int, help="seed of the data order, initialisation and dropout (default: 0)")
    parser.add_argument("--log-every", type=int, help="log the loss every N steps (default: 10)")
    parser.add_argument("--save-every", type=int, help="save a checkpoint every N steps (default: 1000)")
    parser.add_argument("--eval-every", type=int,
                        help="evaluate on the validation splits every N steps (default: 0, never)")
    parser.add_argument("--eval-mixture", help="task or mixture scored every --eval-every steps (default: the "
                                               "training mixture); the curve goes to metrics.jsonl and metrics.png")
    parser.add_argument("--skip-unavailable", action="store_true", default=None,
                        help="drop mixture members whose data is missing (with a warning)")
    parser.add_argument("--allow-changed-settings", action="store_true",
                        help="resume even with settings that break exact continuation (batch size, "
                             "optimizer, lengths, model …); the differences are listed")
    add_common(parser)
    add_settings(parser)
    return parser


@run_cli
def train_main(argv=None) -> int:
    args = train_parser().parse_args(argv)

    from t2t.models import distributed
    from t2t.training.train import TrainConfig, train
    flags = {
        "mixture": args.mixture or args.task, "model.preset": args.model, "init_from": args.init_from,
        "output_dir": args.output_dir, "train_steps": args.train_steps, "batch_size": args.batch_size,
        "optimizer.learning_rate": args.learning_rate, "seed": args.seed, "log_every": args.log_every,
        "save_every": args.save_every, "eval_every": args.eval_every,
        "eval_mixture": args.eval_mixture,
        "skip_unavailable": args.skip_unavailable, "vocab": args.vocab, "data_dir": args.data_dir,
        "modules": args.modules}
    cfg = resolve(TrainConfig, args, flags)
    cfg = resolve(TrainConfig, args, flags, base=resumed_settings(cfg.output_dir))
    if args.print_config:
        from t2t.checkpoints.run import find_run, with_run_locations
        print_config(with_run_locations(cfg, find_run(cfg.output_dir)))
        return 0
    with distributed.process_group_from_env():
        records = train(cfg, allow_changed_settings=args.allow_changed_settings)
        if records and distributed.is_main():  # inside: after the group is gone every process is rank 0
            last = records[-1]
            print(f"done: step {last['step']}, loss {last['loss']:.4f}; outputs in {cfg.output_dir}")
    return 0


def resumed_settings(output_dir: str) -> dict | None:
    """The settings of the run in ``output_dir`` that resuming starts from (None for a new run); where
    its data, modules and vocabulary are is left to t2t.checkpoints.run, which finds them inside a moved run."""
    from t2t.checkpoints import native as checkpoint
    from t2t.checkpoints.run import LOCATIONS, open_run
    latest = checkpoint.latest_checkpoint(output_dir)
    if latest is None:
        return None
    return {k: v for k, v in open_run(latest).settings.items() if k not in LOCATIONS}


def eval_parser() -> argparse.ArgumentParser:
    parser = new_parser("t2t-eval", "Evaluate a model on tasks' metrics; a run is evaluated with its own "
                        "vocabulary, modules and data dir unless flags override them.", """\
  t2t-eval --task rte --checkpoint runs/rte
  t2t-eval --mixture glue_v002 --checkpoint runs/glue --beam-size 4 --max-examples 500
  t2t-eval --task stsb --checkpoint google-t5/t5-small --split validation --output-dir eval/t5-small
""")
    add_task_choice(parser)
    parser.add_argument("--checkpoint", required=True,
                        help="a run's output dir (its latest checkpoint), one checkpoint, or a HF T5 folder/id")
    parser.add_argument("--split", help="split to evaluate (default: validation)")
    parser.add_argument("--max-examples", type=int, help="evaluate the first N examples of each task")
    parser.add_argument("--output-dir", help="results go to OUTPUT_DIR/SPLIT/ (default: CHECKPOINT/eval): "
                                             "TASK.metrics.json and TASK.predictions.jsonl per task, "
                                             "MIXTURE.summary.json with the benchmark averages")
    parser.add_argument("--device", help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--skip-unavailable", action="store_true", default=None,
                        help="leave out mixture members whose data is missing (with a warning)")
    parser.add_argument("--all-checkpoints", action="store_true", default=None,
                        help="evaluate every kept checkpoint of the run, then print each task at its best")
    parser.add_argument("--rank-classification", action="store_true", default=None,
                        help="score each label string and pick the most likely instead of generating "
                             "(tasks with rank_choices; the others are generated)")
    add_decoding(parser, "the task's longest target")
    add_common(parser)
    add_settings(parser)
    return parser


@run_cli
def eval_main(argv=None) -> int:
    args = eval_parser().parse_args(argv)
    from t2t.evaluation.evaluate import EvalConfig, evaluate, evaluate_checkpoints, with_run_settings
    cfg = resolve(EvalConfig, args, {
        "mixture": args.mixture or args.task, "checkpoint": args.checkpoint, "split": args.split,
        "max_examples": args.max_examples, "output_dir": args.output_dir, "device": args.device,
        "skip_unavailable": args.skip_unavailable, "all_checkpoints": args.all_checkpoints, "vocab": args.vocab,
        "data_dir": args.data_dir, "modules": args.modules, "rank_classification": args.rank_classification,
        **decoding_flags(args)})
    if args.print_config:
        print_config(with_run_settings(cfg))
        return 0
    (evaluate_checkpoints if cfg.all_checkpoints else evaluate)(cfg)
    return 0


def predict_parser() -> argparse.ArgumentParser:
    parser = new_parser("t2t-predict", "Decode input strings with a trained model, one output line per input.",
                        """\
  echo "sst2 sentence: a gorgeous, witty film" | t2t-predict --checkpoint runs/glue
  t2t-predict --checkpoint runs/rte --task rte --input rte.jsonl --output predictions.txt  # raw fields
  t2t-predict --checkpoint runs/lm --input prompts.txt --temperature 0.7 --top-k 40 --seed 1 --max-length 64
""")
    parser.add_argument("--checkpoint", required=True,
                        help="a run's output dir (its latest checkpoint), one checkpoint, or a HF T5 folder/id")
    parser.add_argument("--input", default="-", metavar="FILE",
                        help="input strings, one per line (default: stdin)")
    parser.add_argument("--task", help="read JSON lines of this task's raw fields and apply its preprocessing")
    parser.add_argument("--output", metavar="FILE", help="write the decoded strings here (default: stdout)")
    parser.add_argument("--device", help="auto, cpu, cuda, cuda:N")
    add_decoding(parser, "the run's target_length, else 128")
    add_common(parser)
    add_settings(parser)
    return parser


@run_cli
def predict_main(argv=None) -> int:
    args = predict_parser().parse_args(argv)
    from t2t.evaluation.evaluate import with_run_settings
    from t2t.evaluation.predict import PredictConfig, predict
    cfg = resolve(PredictConfig, args, {
        "checkpoint": args.checkpoint, "task": args.task, "device": args.device, "vocab": args.vocab,
        "data_dir": args.data_dir, "modules": args.modules, **decoding_flags(args)})
    if args.print_config:
        print_config(with_run_settings(cfg))
        return 0
    predictions = predict(cfg, read_lines(args.input))
    text = "".join(p.replace("\n", " ") + "\n" for p in predictions)
    if args.output:
        write_text(Path(args.output), text)
    else:
        sys.stdout.write(text)
    return 0


def add_decoding(parser: argparse.ArgumentParser, max_length_default: str) -> None:
    parser.add_argument("--batch-size", type=int, help="examples decoded at once (default: 32)")
    parser.add_argument("--beam-size", type=int, help="beam search with this many beams (default: 1, greedy)")
    parser.add_argument("--temperature", type=float,
                        help="sample from softmax(logits / T) instead of greedy decoding (default: 0, greedy)")
    parser.add_argument("--top-k", type=int, help="sample only from the K most likely tokens (default: 0, all)")
    parser.add_argument("--seed", type=int, help="seed of the sampling draws (default: 0)")
    parser.add_argument("--max-length", type=int, help=f"most tokens decoded (default: {max_length_default})")
    parser.add_argument("--input-length", type=int,
                        help="cut longer inputs to this many tokens, EOS kept last, as T5 does (default: 512)")


def decoding_flags(args: argparse.Namespace) -> dict:
    return {"batch_size": args.batch_size, "beam_size": args.beam_size, "temperature": args.temperature,
            "top_k": args.top_k, "seed": args.seed, "max_length": args.max_length, "input_length": args.input_length}


def read_lines(source: str) -> list[str]:
    """Lines of a file, or of stdin for ``-``, without their line ends."""
    if source == "-":
        return sys.stdin.read().splitlines()
    try:
        return Path(source).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise T2TError(f"cannot read input file {source} ({getattr(e, 'strerror', None) or e}); pass a UTF-8 "
                       f"text file with one input per line.") from None


def write_text(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise T2TError(f"cannot write {path} ({e.strerror or e}); choose a writable --output path.") from None


def show_parser() -> argparse.ArgumentParser:
    parser = new_parser("t2t-show", "Print preprocessed examples as JSON lines, in source order.", """\
  t2t-show --task rte -n 3
  t2t-show --task my_task --module my_tasks.py --split train --tokens
""")
    parser.add_argument("--task", required=True, help="task name (see t2t-tasks)")
    parser.add_argument("--split", default="validation", help="split to read (default: validation)")
    parser.add_argument("-n", type=int, default=5, help="number of examples (default: 5)")
    parser.add_argument("--tokens", action="store_true", help="add the token ids")
    add_common(parser)
    return parser


@run_cli
def show_main(argv=None) -> int:
    args = show_parser().parse_args(argv)

    from t2t.data.show import show_examples
    from t2t.data.task import load_modules
    load_modules(args.modules)
    vocab = None
    if args.tokens:
        from t2t.data.vocab import load_vocabulary
        vocab = load_vocabulary(args.vocab, data_dir=args.data_dir)
    for example in show_examples(args.task, args.split, args.n, with_tokens=args.tokens, vocab=vocab,
                                 data_dir=args.data_dir):
        print(json.dumps(example, ensure_ascii=False))
    return 0


def tasks_parser() -> argparse.ArgumentParser:
    parser = new_parser("t2t-tasks", "List registered tasks and mixtures.", """\
  t2t-tasks
  t2t-tasks --module my_tasks.py --data-dir /data
""")
    parser.add_argument("--data-dir", help="root of local dataset copies (for sizes)")
    add_module_flag(parser)
    return parser


@run_cli
def tasks_main(argv=None) -> int:
    args = tasks_parser().parse_args(argv)

    from t2t.data.show import format_registry_table
    from t2t.data.task import load_modules
    load_modules(args.modules)
    print(format_registry_table(data_dir=args.data_dir))
    return 0


def vocab_parser() -> argparse.ArgumentParser:
    parser = new_parser("t2t-vocab", "Train a SentencePiece vocabulary with T5's conventions "
                                     "(pad 0, EOS 1, unk 2, sentinels at the top).", """\
  t2t-vocab ../shared/data/corpus --output runs/vocab/corpus8k --vocab-size 8000
  t2t-vocab --task rte --output runs/vocab/rte2k --vocab-size 2000 --model-type bpe
""")
    parser.add_argument("inputs", nargs="*", help="text files or folders of .txt files")
    parser.add_argument("--task", help="train on a task's text instead (inputs and targets of --split)")
    parser.add_argument("--split", default="train", help="the task's split to read (default: train)")
    parser.add_argument("--output", required=True, help="model prefix: writes PREFIX.model and PREFIX.vocab")
    parser.add_argument("--vocab-size", type=int, default=32000,
                        help="pieces, pad/EOS/unk included; 100 sentinel ids come on top (default: 32000)")
    parser.add_argument("--model-type", default="unigram", choices=["unigram", "bpe"],
                        help="SentencePiece algorithm (default: unigram, as T5)")
    parser.add_argument("--data-dir", help="root of local dataset copies, for --task (default: $T2T_DATA_DIR)")
    add_module_flag(parser)
    return parser


@run_cli
def vocab_main(argv=None) -> int:
    args = vocab_parser().parse_args(argv)

    from t2t.data.vocab import train_vocabulary
    if bool(args.inputs) == bool(args.task):
        raise T2TError("give either text files/folders or --task NAME to train a vocabulary on.")
    source = task_texts(args) if args.task else text_files(args.inputs)
    path = train_vocabulary(source, args.output, vocab_size=args.vocab_size, model_type=args.model_type)
    print(f"wrote {path}")
    return 0


def study_parser() -> argparse.ArgumentParser:
    parser = new_parser("t2t-study", "Run a grid of fine-tuning runs (intermediate tasks or transfer methods × "
                        "target tasks) and write one table (results.md, results.csv) and one heat map "
                        "(heatmap.png). Running it again resumes.", """\
  t2t-study --intermediates none,cola,sst2 --targets rte,mrpc --jobs 2 \\
            --train-args '--model t5-tiny --config cpu-smoke' --eval-args '--max-examples 200' \\
            --output-dir runs/sesame
  t2t-study --config transfer-methods --init-from runs/pretrained --output-dir runs/methods
(--config takes a file or a name in configs/studies: sesame-street, transfer-methods, multitask-then-finetune)
""")
    parser.add_argument("--targets", help="comma-separated target tasks (the columns)")
    parser.add_argument("--intermediates", help="comma-separated tasks trained first (the rows; 'none': no "
                                                "intermediate task)")
    parser.add_argument("--init-from", help="base model of every run: a run dir, HF T5 folder or hub id")
    parser.add_argument("--intermediate-steps", type=int,
                        help="training steps on each intermediate task (default: 100)")
    parser.add_argument("--target-steps", type=int, help="training steps on each target task (default: 100)")
    parser.add_argument("--train-args", help="arguments for every t2t-train, as one quoted string")
    parser.add_argument("--eval-args", help="arguments for every t2t-eval, as one quoted string")
    parser.add_argument("--output-dir", help="the study's folder (runs, table, heat map)")
    parser.add_argument("--jobs", type=int, help="runs side by side; the cores are divided between them")
    add_settings(parser)
    return parser


@run_cli
def study_main(argv=None) -> int:
    args = study_parser().parse_args(argv)

    import shlex
    from t2t.training.study import StudyConfig, run_study

    def split(text):
        return [t.strip() for t in text.split(",") if t.strip()] if text else None
    cfg = resolve(StudyConfig, args, {
        "targets": split(args.targets), "intermediates": split(args.intermediates), "init_from": args.init_from,
        "intermediate_steps": args.intermediate_steps, "target_steps": args.target_steps,
        "train_args": shlex.split(args.train_args) if args.train_args else None,
        "eval_args": shlex.split(args.eval_args) if args.eval_args else None,
        "output_dir": args.output_dir, "jobs": args.jobs}, kind="studies")
    if args.print_config:
        print_config(cfg)
        return 0
    run_study(cfg)
    print(Path(cfg.output_dir, "results.md").read_text(), end="")
    print(f"wrote results.md, results.csv and heatmap.png in {cfg.output_dir}")
    return 0


def export_parser() -> argparse.ArgumentParser:
    parser = new_parser("t2t-export", "Write a run's model and vocabulary as a Hugging Face T5 folder "
                        "(model.safetensors, config.json, generation_config.json, spiece.model, "
                        "tokenizer_config.json) that transformers' T5ForConditionalGeneration and AutoTokenizer "
                        "load with from_pretrained.", """\
  t2t-export --checkpoint runs/glue-small --to hf exported/glue-small
then, in Python: T5ForConditionalGeneration.from_pretrained("exported/glue-small") and
                 AutoTokenizer.from_pretrained("exported/glue-small")
""")
    parser.add_argument("--checkpoint", required=True, help="a run's output dir (its latest checkpoint) or one "
                                                            "step_* checkpoint")
    parser.add_argument("--to", required=True, choices=["hf"], help="format to write: hf (Hugging Face "
                                                                    "transformers)")
    parser.add_argument("out_dir", metavar="OUT_DIR", help="folder to write: new, or one an earlier export wrote")
    parser.add_argument("--vocab", help="SentencePiece .model to ship instead of the run's vocabulary")
    return parser


@run_cli
def export_main(argv=None) -> int:
    args = export_parser().parse_args(argv)
    from t2t.checkpoints.loading import load_model
    from t2t.checkpoints.hf import to_hf
    from t2t.checkpoints.run import open_run
    from t2t.data.vocab import load_vocabulary
    run = open_run(args.checkpoint)  # its vocabulary resolves inside the run, also after a move
    if args.vocab:
        print(f"using --vocab {args.vocab} instead of the run's vocabulary ({run.vocab or 'default'})")
    vocab = load_vocabulary(args.vocab or run.vocab, data_dir=run.data_dir)
    out = to_hf(load_model(args.checkpoint), args.out_dir, vocabulary=vocab)
    print(f"wrote {out}: load it with transformers' T5ForConditionalGeneration and AutoTokenizer")
    return 0


def text_files(inputs: list[str]) -> list[Path]:
    """Files as given; folders read like the text-folder tasks read them (same suffixes, docs left out).
    A file named twice (alone and inside a given folder) is read once."""
    from t2t.tasks.text_files import TextFolderSource
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
    from t2t.data.show import show_examples
    from t2t.data.task import load_modules
    load_modules(args.modules)
    for example in show_examples(args.task, args.split, None, with_tokens=False, vocab=None,
                                 data_dir=args.data_dir):
        yield example["inputs"]
        yield example["targets"]


PARSERS = {"t2t-train": train_parser, "t2t-eval": eval_parser, "t2t-predict": predict_parser,
           "t2t-show": show_parser, "t2t-tasks": tasks_parser, "t2t-vocab": vocab_parser,
           "t2t-study": study_parser, "t2t-export": export_parser}

