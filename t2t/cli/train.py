"""``t2t-train`` (and ``python -m t2t.cli``, what torchrun runs): train or fine-tune, or resume a run."""

from __future__ import annotations

import argparse
import dataclasses
import logging

from t2t import config
from t2t.checkpoints import native as checkpoint
from t2t.checkpoints.run import LOCATIONS, embedding_rows, find_run, open_run, with_run_locations
from t2t.cli.common import (
    LOCATION_FLAGS,
    TASK,
    Flag,
    add_flags,
    add_settings,
    add_task_choice,
    new_parser,
    print_settings,
    resolve,
    run_cli,
)
from t2t.data.sources import resolve_data_dir
from t2t.data.task import load_modules
from t2t.data.vocab import load_vocabulary
from t2t.errors import T2TError
from t2t.models import distributed
from t2t.models.presets import preset_vocabulary
from t2t.models.t5 import resolve_model_config
from t2t.training.train import DEFAULT_MODEL, TrainConfig, train, with_sequence_lengths

EXAMPLES = """\
  t2t-train --task rte --model t5-small --init-from google-t5/t5-small --config finetune --output-dir runs/rte
  t2t-train --mixture glue_v002 --config cpu-smoke --skip-unavailable --output-dir runs/glue
  t2t-train --output-dir runs/rte --train-steps 2000        # resume runs/rte and train on to step 2000
  t2t-train --task rte --model t5-tiny --print-config       # show every setting, train nothing
"""

FLAGS = [Flag("model.preset", name="--model"), Flag("init_from"), Flag("output_dir"), Flag("train_steps"),
         Flag("batch_size"), Flag("optimizer.learning_rate"), Flag("seed"), Flag("log_every"),
         Flag("save_every"), Flag("eval_every"), Flag("eval_mixture"), Flag("skip_unavailable"),
         Flag("cache_dir"), *LOCATION_FLAGS]


def parser() -> argparse.ArgumentParser:
    p = new_parser("t2t-train", "Train or fine-tune a T5 model; run again in the same --output-dir to resume "
                   "with the run's settings.", EXAMPLES)
    add_task_choice(p, TrainConfig, required=False)
    add_flags(p, TrainConfig, FLAGS)
    p.add_argument("--allow-changed-settings", action="store_true",
                   help="resume even with settings that break exact continuation (batch size, optimizer, "
                        "lengths, model …); the differences are listed")
    p.add_argument("--trust-modules", action="store_true",
                   help="resuming a run not your own (another user's, or its modules changed since it recorded "
                        "them): import its modules though not given with --module")
    add_settings(p, "optimizer.schedule=rsqrt", kind="recipes")
    return p


def settings(args: argparse.Namespace) -> TrainConfig:
    """The settings of this run: a run being resumed starts from its own. A model given for a resumed run stays
    as given: merged into the run's recorded fields, ``--model t5-small`` would name the run's own model, and
    resuming could not tell that it differs (and refuse it). A given model whose preset names a vocabulary
    (``vocab: byte`` in configs/models/byt5-*.yaml) brings it when no --vocab is given."""
    given = resolve(TrainConfig, args, [TASK, *FLAGS])
    cfg = resolve(TrainConfig, args, [TASK, *FLAGS], base=resumed_settings(given.output_dir, given.verify_checkpoints))
    if given.model is None:
        return cfg
    return dataclasses.replace(cfg, model=given.model, vocab=cfg.vocab or preset_vocabulary(given.model))


@run_cli(resumable=True)
def train_main(argv=None) -> int:
    args = parser().parse_args(argv)
    cfg = settings(args)
    if args.print_config:
        print_settings(resolved(cfg))
        return 0
    with distributed.process_group_from_env():
        if not distributed.is_main():  # under torchrun the main process logs the run, the others what goes wrong
            logging.getLogger().setLevel(logging.WARNING)
        records = train(cfg, allow_changed_settings=args.allow_changed_settings, trust_modules=args.trust_modules)
        if records and distributed.is_main():  # inside: after the group is gone every process is rank 0
            last = records[-1]
            print(f"done: step {last['step']}, loss {last['loss']:.4f}; outputs in {cfg.output_dir}")
    return 0


def resumed_settings(output_dir: str, verify: bool = True) -> dict | None:
    """The settings of the run in ``output_dir`` that resuming starts from (None for a new run); where
    its data, modules and vocabulary are is left to t2t.checkpoints.run, which finds them inside a moved run.
    A recorded setting of the wrong type or range is one sentence naming the file."""
    latest = checkpoint.latest_checkpoint(output_dir)
    if latest is None:
        return None
    settings = open_run(latest, verify).settings
    try:
        config.from_dict(TrainConfig, settings)
    except T2TError as e:
        raise T2TError(f"the run's settings file {latest / checkpoint.SETTINGS_FILE} is invalid: "
                       f"{str(e).split('; change it')[0].rstrip('.')}; restore it from a copy.") from None
    return {k: v for k, v in settings.items() if k not in LOCATIONS}


def resolved(cfg: TrainConfig) -> dict:
    """The settings as training uses them (what ``--print-config`` prints): the sequence lengths, the
    vocabulary file and data dir found, and a preset's model fields, its embedding sized for that vocabulary
    as training sizes it; the model's settings are checked here (an unknown key is an error). A model loaded
    from ``init_from`` is that checkpoint's, so it is left as given."""
    setting = cfg.model or DEFAULT_MODEL
    model = config.to_dict(resolve_model_config(setting))  # first: a bad model key needs no vocabulary to say so
    cfg = with_lengths(cfg)
    cfg = with_run_locations(cfg, find_run(cfg.output_dir))
    data_dir = resolve_data_dir(cfg.data_dir)
    vocab = load_vocabulary(cfg.vocab, data_dir=data_dir)
    out = config.to_dict(cfg)
    out.update(vocab=str(vocab.path), data_dir=str(data_dir) if data_dir else None)
    if not cfg.init_from:
        if not (isinstance(setting, dict) and "vocab_size" in setting):
            model["vocab_size"] = embedding_rows(vocab.vocab_size)
        preset = setting if isinstance(setting, str) else setting.get(config.PRESET)
        out["model"] = {config.PRESET: preset, **model} if preset else model
    return out


def with_lengths(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with the sequence lengths a new run takes from its task (a resumed run has its own already,
    from its settings); the task may come from the modules the user gave, never from a run's copies (their
    import needs consent, which printing settings does not ask for). Without a task, training refuses to
    start, so the lengths stay unset."""
    if not cfg.mixture or None not in (cfg.input_length, cfg.target_length):
        return cfg
    load_modules(cfg.modules)
    return with_sequence_lengths(cfg, None)
