"""The training recipe: one teacher-forced cross-entropy loss for every task (T5 §2.4, §3.1.2).

Read top to bottom: settings, the recipe (train_in_output_dir) and its named steps, the loop, the step. Running
the same command again in the same output folder resumes from the latest checkpoint and continues
exactly: the data stream, the optimizer, the schedule and the dropout masks (seeded by step) all pick up
where they stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from t2t import config, durable
from t2t.checkpoints import native as checkpoint
from t2t.checkpoints import run as run_lib
from t2t.checkpoints.loading import load_model, own_vocabulary
from t2t.data.cache import reading_cache
from t2t.data.pipeline import TrainBatches, build_train_batches
from t2t.data.prefetch import BatchesAhead
from t2t.data.task import get_task_or_mixture, load_modules, sequence_length_for
from t2t.data.vocab import load_vocabulary
from t2t.errors import T2TError
from t2t.evaluation.evaluate import validation_metrics
from t2t.models import checkpointing, distributed, kernels
from t2t.models.dropout import row_generators
from t2t.models.flex import require_flex_attention
from t2t.models.presets import COMPUTE_FIELDS
from t2t.models.t5 import T5, ModelConfig, resolve_model_config
from t2t.terminal import raise_if_interrupted
from t2t.training import dashboards  # noqa: F401 (registers the tensorboard, wandb and mlflow loggers)
from t2t.training.keep_best import (
    WATCH_STATE,
    BestWatch,
    EarlyStoppingConfig,
    check_keep_best,
    check_keep_best_settings,
    stopped_early,
)
from t2t.training.loggers import (
    DEFAULT_LOGGERS,
    METRICS_FILE,
    LoggedRun,
    MetricsLogger,
    check_logger_names,
    open_loggers,
)
from t2t.training.optim import OptimizerConfig, build_optimizer, build_scheduler
from t2t.training.precision import LossScaling, autocast, check_fp16
from t2t.training.progress import LogWindow, read_metrics
from t2t.training.transfer import TrainableSchedule, TransferConfig, describe_trainable, prepare_transfer

log = logging.getLogger(__name__)

DEFAULT_MODEL = "t5-small"  # trained from scratch when neither model nor init_from is given


@dataclass
class TrainConfig:
    mixture: str = ""                 # a task or mixture name (--task / --mixture)
    model: str | dict | None = None   # preset in configs/models or a config file, or {preset: NAME, <field>: value}; None: t5-small, or init_from's model
    init_from: str | None = None      # our checkpoint or run dir, a Hugging Face T5 folder or hub id, a t5x checkpoint
    vocab: str | None = None          # SentencePiece .model, vocab.json or byte (resuming: the run's vocab.json)
    data_dir: str | None = None       # root of local data copies (default: $T2T_DATA_DIR)
    cache_dir: str | None = None      # a t2t-cache folder to read tokenized examples from (t2t.data.cache)
    output_dir: str = "runs/t2t"      # the run folder; training again in it resumes
    modules: list[str] = field(default_factory=list)  # modules or .py files registering tasks (copied to the run)
    train_steps: int = 1000           # train until this step
    batch_size: int = 128             # global, in rows (packed rows when pack is on)
    grad_accum_steps: int = 1         # micro-batches per optimizer step (batch_size is split into them)
    input_length: int | None = None   # encoder tokens per row (None: the task's T5 length, else 512)
    target_length: int | None = None  # decoder tokens per row (None: the task's T5 length, e.g. GLUE 84, else 128)
    pack: bool = True                 # pack several examples into each row (as T5 trained)
    max_tokens: int | None = None     # train on each task's first N tokens, repeated (§3.4.2); None: all
    dropout_rate: float | None = None  # overrides the model config's (T5 used 0.1 everywhere)
    lm_loss_weight: float = 0.0       # GPT's λ (0.5 there): auxiliary LM loss over the inputs, decoder-only models
    z_loss: float = 0.0               # T5's z_loss·log(Z)² per target token (1e-4: mesh-tf, t5x, pretrain/finetune recipes)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    transfer: TransferConfig = field(default_factory=TransferConfig)  # adapters, freezing, unfreezing (§3.5.1)
    seed: int = 0                     # data order, initialisation and dropout masks
    log_every: int = 10               # log the loss every N steps
    loggers: list[str] = field(default_factory=lambda: list(DEFAULT_LOGGERS))  # where records go: jsonl, console, plot (metrics.png), tensorboard, wandb, mlflow (docs/scale.md), kinds --modules register
    save_every: int = 1000            # save a checkpoint every N steps (and at the last)
    keep_checkpoints: int = 3         # newest checkpoints kept (older ones are deleted)
    verify_checkpoints: bool = True   # resume checks each file's sha256 (false: skip it, for very large models)
    eval_every: int = 0               # evaluate every N steps (0: no evaluation during training)
    eval_mixture: str | None = None   # what that evaluation scores (default: the training mixture's tasks)
    eval_max_examples: int = 256      # examples per task in evaluation during training
    eval_batch_size: int = 32         # examples decoded at once in evaluation during training
    keep_best: str | None = None      # keep the best checkpoint by this evaluated metric (accuracy, rte/accuracy, glue_average) as RUN:best
    early_stopping: EarlyStoppingConfig = field(default_factory=EarlyStoppingConfig)  # stop once keep_best stops improving
    skip_unavailable: bool = False    # drop mixture members whose data is missing (with a warning)
    mixing_maximum: float | None = None      # K of §3.5.2 for a mixture's examples-proportional rates (None: theirs)
    mixing_temperature: float | None = None  # T of §3.5.2 for the same rates (None: theirs, 1 in t5's mixtures)
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"  # autocast; bf16: CUDA, CPUs with AMX/AVX512-BF16; fp16: with loss scaling, GPUs without bf16
    activation_checkpointing: bool = False  # recompute each block's activations in the backward pass: less memory, one more forward
    device: str = "auto"              # auto, cpu, cuda or cuda:N
    threads: int = 0                  # CPU threads; 0: OMP_NUM_THREADS or all cores (t2t-study divides them)
    parallelism: Literal["ddp", "fsdp"] = "ddp"   # under torchrun with several processes
    compile: bool = False             # the forward pass and loss through torch.compile (one graph: fixed row shapes)
    batches_ahead: int | None = None  # batches packed ahead on a background thread (None: 2 on CUDA, 0 on the CPU)

    # model.dropout_rate given in a layer of settings sets dropout_rate too, which overrides it (config.load)
    LINKED = {"model.dropout_rate": "dropout_rate"}

    def __post_init__(self):
        config.check(self, positive=("train_steps", "batch_size", "grad_accum_steps", "input_length",
                                     "target_length", "log_every", "save_every", "eval_max_examples",
                                     "eval_batch_size", "mixing_maximum", "mixing_temperature"),
                     non_negative=("keep_checkpoints", "eval_every", "threads", "batches_ahead", "z_loss"),
                     fraction=("dropout_rate",))
        if not self.output_dir.strip():
            raise T2TError("output_dir is empty, which would write the run into the working directory; pass "
                           "--output-dir RUN.")
        unread = config.given(self, ("eval_mixture", "eval_max_examples", "eval_batch_size"))
        if unread and not self.eval_every:
            raise T2TError(f"{unread[0]} is set but eval_every is 0, so training evaluates nothing; set "
                           f"--eval-every N (steps between evaluations) or leave {unread[0]} out.")


def train(cfg: TrainConfig, allow_changed_settings: bool = False, trust_modules: bool = False) -> list[dict]:
    """Train (or resume) per ``cfg``; returns the records of the run's metrics.jsonl.

    Resuming takes the run's vocabulary, modules and data dir where ``cfg`` leaves them unset, and refuses
    settings that break exact continuation unless ``allow_changed_settings`` (see t2t.checkpoints.run.check_resume).
    It imports the run's module copies the user owns; another user's only with ``trust_modules``
    (see t2t.checkpoints.run.require_module_consent).
    """
    if not cfg.mixture:
        recorded = checkpoint.latest_checkpoint(cfg.output_dir) if Path(cfg.output_dir).is_dir() else None
        hint = (f"; {cfg.output_dir} holds checkpoints without recorded settings ({checkpoint.SETTINGS_FILE}), so "
                f"resuming needs the run's own settings again" if recorded is not None else "")
        raise T2TError(f"no task or mixture given{hint}; pass --mixture NAME or --task NAME (see t2t-tasks).")
    check_keep_best_settings(cfg.keep_best, cfg.early_stopping, cfg.eval_every)
    if cfg.batch_size % (cfg.grad_accum_steps * distributed.world_size()):
        raise T2TError(f"batch size {cfg.batch_size} is not divisible by grad_accum_steps × processes "
                       f"({cfg.grad_accum_steps} × {distributed.world_size()}); choose a multiple.")
    if cfg.eval_every and cfg.parallelism == "fsdp" and distributed.is_distributed():
        raise T2TError("evaluation during FSDP training is not supported; set --eval-every 0 and evaluate "
                       "the checkpoints with t2t-eval.")
    if cfg.transfer.save_trained_only and not cfg.init_from:
        raise T2TError("transfer.save_trained_only saves the trained parameters and a reference to the model "
                       "they were trained from; give that model with --init-from.")
    if cfg.transfer.unfreeze == "gradual" and distributed.is_distributed():
        raise T2TError("gradual unfreezing runs in one process (DDP needs a fixed set of trained parameters); "
                       "start t2t-train without torchrun, or freeze with transfer.freeze instead.")
    if any(folder.is_dir() and checkpoint.is_checkpoint_dir(folder) for folder in (Path(cfg.output_dir),
                                                                                     Path(cfg.output_dir).parent)):
        raise T2TError(f"output dir {cfg.output_dir} is (inside) a checkpoint, whose files a run would overwrite; "
                       f"pass its run folder to resume that run, or another --output-dir (--init-from the "
                       f"checkpoint starts a new run from it).")
    # one writer per output dir (the main process writes everything in it)
    with (durable.lock_output_dir(Path(cfg.output_dir)) if distributed.is_main() else contextlib.nullcontext(),
          reading_cache(cfg.cache_dir)):
        return train_in_output_dir(cfg, allow_changed_settings, trust_modules)


def train_in_output_dir(cfg: TrainConfig, allow_changed_settings: bool, trust_modules: bool = False) -> list[dict]:
    """``train`` once the output dir is ours: the recipe, one named step a line."""
    run_dir = Path(cfg.output_dir)
    latest = run_lib.resumable_checkpoint(run_dir)
    if latest is not None and checkpoint.checkpoint_step(latest) >= cfg.train_steps:
        return nothing_to_train(run_dir, latest, cfg.train_steps)
    state = checkpoint.load_checkpoint(latest, restore_rng=False, verify=cfg.verify_checkpoints) if latest else {}
    if stopped_early(state, cfg.early_stopping):
        log.info("%s stopped early at %s (its keep_best metric did not improve in %d evaluations): nothing to "
                 "train; raise early_stopping.patience, or set it to 0, to train on", run_dir, latest.name,
                 cfg.early_stopping.patience)
        return read_metrics(run_dir / METRICS_FILE)
    if latest is not None:
        cfg = resume_settings(cfg, latest, allow_changed_settings, trust_modules)
    elif cfg.vocab is None and cfg.init_from:  # a new run reads its parent's text as the parent did
        cfg = dataclasses.replace(cfg, vocab=own_vocabulary(cfg.init_from))
    device = set_up_process(cfg)
    cfg = with_sequence_lengths(cfg, None)  # a new run's (a resumed run has its own already)
    vocab = load_vocabulary(cfg.vocab, data_dir=cfg.data_dir)
    parent = None if latest is not None else run_lib.pinned_checkpoint(cfg.init_from)
    model = build_model(cfg, vocab, resume_from=latest, init_from=parent).to(device)
    record_run(cfg, run_dir, vocab, parent)  # after the parent loaded: a failed --init-from claims no parent
    trainer = build_trainer(cfg, run_dir, model, vocab, device, resumed_from=latest, parent=parent)
    if latest is not None:
        resume_state(trainer, latest, allow_changed_settings)
    evaluator = make_evaluator(cfg, vocab, device) if cfg.eval_every else None
    return train_loop(trainer, evaluator)


@dataclass
class Trainer:
    """What the loop works on: the wrapped model, its optimizer and schedule, the data stream, and the step."""
    cfg: TrainConfig
    run_dir: Path
    settings: dict                  # the run's settings, recorded beside each checkpoint
    objective: torch.nn.Module      # the model under its loss, wrapped for DDP / FSDP
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    batches: TrainBatches | BatchesAhead
    trainable: TrainableSchedule
    trained_only: tuple[set[str], str] | None  # save_trained_only: (the trained names, the base reference)
    data_fingerprint: dict          # {member: {"examples", "sha256"}} of the training data read
    device: torch.device
    watch: BestWatch                # keep_best and early_stopping
    step: int = 0
    scaling: LossScaling = field(init=False)  # fp16's loss scale (a pass-through in other precisions)

    def __post_init__(self):
        self.scaling = LossScaling(self.cfg.precision, self.device)

    @property
    def model(self) -> T5:
        return unwrap(self.objective).model


def nothing_to_train(run_dir: Path, latest: Path, train_steps: int) -> list[dict]:
    """A run at or beyond ``train_steps`` says so and returns its logged records, touching nothing."""
    log.info("%s is already at step %d, at or beyond train_steps %d: nothing to train; pass a larger "
             "--train-steps to continue", run_dir, checkpoint.checkpoint_step(latest), train_steps)
    return read_metrics(run_dir / METRICS_FILE)


def resume_settings(cfg: TrainConfig, latest: Path, allow_changed_settings: bool,
                    trust_modules: bool = False) -> TrainConfig:
    """``cfg`` with the run's vocabulary, modules and data dir where it leaves them unset, checked against the
    settings recorded beside ``latest`` (see t2t.checkpoints.run.check_resume); the run's module copies are
    imported with the user's consent (t2t.checkpoints.run.require_module_consent)."""
    run = run_lib.open_run(latest, cfg.verify_checkpoints)
    run_lib.require_module_consent(run, cfg.modules, trust_modules)
    cfg = run_lib.with_run_locations(cfg, run)
    load_modules(cfg.modules)  # the lengths may come from a task the modules register
    cfg = with_sequence_lengths(cfg, run)
    cfg = with_run_init_from(cfg, run)
    run_lib.check_resume(run, config.to_dict(cfg), allow_changed_settings, defaults=config.to_dict(TrainConfig()))
    return cfg


def with_run_init_from(cfg: TrainConfig, run: run_lib.Run) -> TrainConfig:
    """``cfg`` with the resumed run's own ``init_from``: resuming loads the run's checkpoint, so another model
    given would be neither loaded nor true of the run's weights, and is refused rather than recorded."""
    recorded = run.settings.get("init_from")
    if cfg.init_from is None or cfg.init_from == recorded or same_path(cfg.init_from, recorded):
        return dataclasses.replace(cfg, init_from=recorded)
    started = f"from {recorded}" if recorded else "from scratch"
    raise T2TError(f"{run.path} resumes from its own checkpoint {run.checkpoint.name} (it started {started}), so "
                   f"--init-from {cfg.init_from} would not be loaded; leave --init-from out to resume the run, or "
                   f"pass another --output-dir to start a new run from {cfg.init_from}.")


def same_path(given: str, recorded: str | None) -> bool:
    """Whether two spellings of ``init_from`` name the same existing folder or file."""
    return recorded is not None and Path(given).exists() and Path(given).resolve() == Path(recorded).resolve()


def set_up_process(cfg: TrainConfig) -> torch.device:
    """Seed, threads and device; the user's modules imported and the mixture's name checked (an unknown name
    fails here, before anything is loaded)."""
    torch.manual_seed(cfg.seed)
    distributed.use_threads(cfg.threads)
    device = distributed.pick_device(cfg.device)
    load_modules(cfg.modules)
    get_task_or_mixture(cfg.mixture)
    check_logger_names(cfg.loggers)  # a kind may come from the modules
    return device


def record_run(cfg: TrainConfig, run_dir: Path, vocab, parent: str | None) -> None:
    """The run's copies of its vocabulary and modules and, for a new run from ``parent``, its lineage."""
    if distributed.is_main():
        run_lib.record_run(run_dir, vocab, cfg.modules)
        if parent is not None:
            run_lib.record_lineage(run_dir, parent)


def build_trainer(cfg: TrainConfig, run_dir: Path, model: T5, vocab, device: torch.device,
                  resumed_from: Path | None, parent: str | None) -> Trainer:
    """Which parameters train, the wrapped model, its optimizer and schedule, and the data stream."""
    if cfg.lm_loss_weight and model.config.has_encoder:
        raise T2TError(f"lm_loss_weight (GPT's auxiliary LM loss over the inputs) needs a decoder_only or prefix_lm "
                       f"model, not {model.config.architecture}; set it to 0 or change model.architecture.")
    check_fp16(cfg.precision, cfg.parallelism)
    trainable = prepare_transfer(model, cfg.transfer, cfg.train_steps)
    checkpointing.enable(model, cfg.activation_checkpointing)
    trained_only = None
    if cfg.transfer.save_trained_only:  # the base is the checkpoint the parent's weights came from
        trained_only = (trainable.trained_names(), checkpoint.base_reference(parent or cfg.init_from, resumed_from))
    objective = distributed.wrap_model(TrainingObjective(model, cfg.lm_loss_weight, cfg.z_loss), cfg.parallelism,
                                       device)
    optimizer = build_optimizer(objective, cfg.optimizer)  # after wrapping: FSDP replaces the parameters
    scheduler = build_scheduler(optimizer, cfg.optimizer, cfg.train_steps)
    if cfg.compile:  # one graph of fixed shapes (rows are padded or packed to the run's lengths), which
        # DDP's buckets alone split; the same kernels on every step, so a resumed run computes as before
        objective = torch.compile(objective, fullgraph=not distributed.is_distributed(), dynamic=False)
    batches = build_batches(cfg, vocab, model.config)
    fingerprint = data_fingerprint(batches)
    ahead = cfg.batches_ahead if cfg.batches_ahead is not None else 2 * (device.type == "cuda")
    settings = run_lib.recorded_settings(config.to_dict(cfg), vocab.path)
    watch = BestWatch(run_dir, cfg.keep_best, cfg.early_stopping, evaluation_settings(cfg))
    return Trainer(cfg, run_dir, settings, objective, optimizer, scheduler,
                   BatchesAhead(batches, ahead) if ahead else batches, trainable, trained_only, fingerprint, device,
                   watch)


def build_batches(cfg: TrainConfig, vocab, model_config: ModelConfig) -> TrainBatches:
    """This process's share of the run's deterministic, resumable stream of training batches."""
    return build_train_batches(
        cfg.mixture, vocab=vocab, batch_size=cfg.batch_size,
        input_length=cfg.input_length, target_length=cfg.target_length, pack=cfg.pack, seed=cfg.seed,
        data_dir=cfg.data_dir, rank=distributed.rank(), world_size=distributed.world_size(),
        skip_unavailable=cfg.skip_unavailable, max_tokens=cfg.max_tokens, mixing_maximum=cfg.mixing_maximum,
        mixing_temperature=cfg.mixing_temperature, architecture=model_config.architecture,
        decoder_start_id=model_config.decoder_start_id)


def data_fingerprint(batches: TrainBatches) -> dict[str, dict]:
    """``{member: {"examples": n, "sha256": hash}}`` of the tokenized training examples each mixture member
    holds (what the pipeline already read: hashing them costs far less than tokenizing them). A streaming
    member is read as training goes, so it has none."""
    found = {}
    for name, stream in sorted(batches.streams.items()):
        if stream.streaming:
            continue
        digest = hashlib.sha256()
        for example in stream.data:
            for key in sorted(example):
                digest.update(key.encode())
                digest.update(np.ascontiguousarray(example[key]).tobytes())
        found[name] = {"examples": len(stream.data), "sha256": digest.hexdigest()}
    return found


def resume_state(trainer: Trainer, latest: Path, allow_changed_settings: bool) -> None:
    """Everything but the weights (build_model loaded those) from checkpoint ``latest``: the step, schedule,
    data stream position, RNG and optimizer states; the training data must be what the run read before."""
    cfg = trainer.cfg
    state = checkpoint.load_checkpoint(latest, verify=cfg.verify_checkpoints)
    require_resume_state(state, latest)
    try:  # values of the wrong kind (a hand-edited file whose checksums were redone) fail where they are read
        run_lib.check_data_fingerprint(latest, state.get("data_fingerprint"), trainer.data_fingerprint,
                                       allow_changed_settings)
        load_optimizer_state(run_lib.open_run(latest), cfg, trainer.objective, trainer.optimizer, latest)
        restore_schedule(trainer.scheduler, state["scheduler"], cfg.optimizer.learning_rate)
        trainer.batches.load_state_dict(state["data"])
        trainer.scaling.load_checkpoint_state(state)
        trainer.step = int(state["step"])
        trainer.watch.resume(state.get(WATCH_STATE))
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        raise T2TError(f"trainer state in {latest} is not what t2t wrote ({type(e).__name__}: {e}), so the run "
                       f"cannot resume from it; resume from an earlier checkpoint or start a new --output-dir.") from None
    log.info("resumed from %s at step %d", latest, trainer.step)


def train_loop(trainer: Trainer, evaluator) -> list[dict]:
    """``run_steps`` with the loggers closed and the batch producer stopped however it ends; returns the records
    of the run's metrics.jsonl. Only the main process logs."""
    with contextlib.ExitStack() as closing:
        if isinstance(trainer.batches, BatchesAhead):
            closing.callback(trainer.batches.close)
        loggers = []
        if distributed.is_main():
            run = LoggedRun(trainer.run_dir, trainer.step, trainer.cfg.train_steps)
            loggers = open_loggers(trainer.cfg.loggers, run, resolved_settings(trainer.settings, trainer.model),
                                   closing)
        run_steps(trainer, evaluator, loggers)
    return read_metrics(trainer.run_dir / METRICS_FILE)


def run_steps(trainer: Trainer, evaluator, loggers: list[MetricsLogger]) -> None:
    """Steps from ``trainer.step`` to ``train_steps``: log, evaluate and save on their schedules."""
    cfg = trainer.cfg
    batch_iter = iter(trainer.batches)
    window = LogWindow()
    compiling = cfg.compile  # this process's first step compiles the step's graphs
    trainer.trainable.apply(trainer.step)
    log.info(describe_trainable(trainer.model))
    while trainer.step < cfg.train_steps:
        raise_if_interrupted()  # Ctrl-C whose KeyboardInterrupt something swallowed stops the run all the same
        trainer.trainable.apply(trainer.step)
        asked = time.perf_counter()
        batch = next(batch_iter)  # the step's wait for its data: ~0 when batches are made ahead fast enough
        window.waiting += time.perf_counter() - asked
        micro_batches = split_rows(batch, trainer.batches.global_rows(), cfg.grad_accum_steps)
        started = time.perf_counter()
        loss, tokens = train_step(trainer.objective, micro_batches, trainer.optimizer, trainer.scaling, cfg,
                                  trainer.device, trainer.step)
        if compiling:  # logged once, and left out of the window's tokens/s
            compiling, seconds = False, time.perf_counter() - started
            log.info("compiled the training step: its first call took %.1f s", seconds)
            window.left_out(seconds, compile_seconds=seconds)
        else:
            window.count_step(tokens)
        trainer.scheduler.step()
        trainer.step += 1
        step = trainer.step
        check_finite(trainer, loss)
        for logger in loggers:
            logger.advance(step, loss)
        last = step == cfg.train_steps
        evaluate_now = evaluator is not None and (step % cfg.eval_every == 0 or last)
        save_now = step % cfg.save_every == 0 or last
        if step % cfg.log_every == 0 or evaluate_now or last:
            record = {"step": step, "loss": loss, "learning_rate": trainer.scheduler.get_last_lr()[0],
                      **window.rates(), **trainer.scaling.record()}
            if evaluate_now:
                record.update(evaluator(trainer.model))
                record.update(trainer.watch.observe(step, record))
            for logger in loggers:
                logger.log(record)
            window.reset()
        if save_now or trainer.watch.wants_checkpoint(step):
            save_checkpoint(trainer)
            for logger in loggers:
                logger.flush()
        if trainer.watch.stopped_at == step:
            break


def check_finite(trainer: Trainer, loss: float) -> None:
    """Stop at the step whose loss or update is not finite, before anything of it is logged, evaluated or
    saved (each process checks its shard of the weights; one device sync)."""
    if not math.isfinite(loss):
        raise diverged(trainer, f"the loss became {loss}")
    largest = torch._foreach_norm([p.detach() for p in trainer.objective.parameters()], ord=math.inf)
    finite = torch.isfinite(torch.stack(largest)).all()  # NaN propagates through max |p|
    if distributed.all_reduce_sum(float(not finite)):
        raise diverged(trainer, "the weights became NaN or infinite")


def diverged(trainer: Trainer, what: str) -> T2TError:
    """Training diverged at ``trainer.step``: one sentence with the step and the last good checkpoint."""
    latest = checkpoint.latest_checkpoint(trainer.run_dir)
    good = (f"the last good checkpoint is {latest} (to resume from it with a lower rate, pass "
            f"--allow-changed-settings)" if latest is not None else "no checkpoint was saved")
    bf16 = ", or train in fp32" if trainer.cfg.precision in ("bf16", "fp16") else ""
    return T2TError(f"training diverged at step {trainer.step}: {what}, so nothing of it was saved; {good}; "
                    f"lower optimizer.learning_rate (now {trainer.cfg.optimizer.learning_rate:g}){bf16}.")


def with_sequence_lengths(cfg: TrainConfig, run: run_lib.Run | None) -> TrainConfig:
    """``cfg`` with the lengths it leaves unset filled in: a resumed run's own, else the task's or mixture's
    T5 lengths (``t2t.data.task.sequence_length_for``: GLUE 512/84, SuperGLUE 512/62, SQuAD 512/97, CNN/DM and
    WMT 512/512), else 512/128."""
    recorded = (run.settings or {}) if run is not None else {}
    lengths = sequence_length_for(cfg.mixture, cfg.input_length or recorded.get("input_length"),
                                  cfg.target_length or recorded.get("target_length"))
    return dataclasses.replace(cfg, input_length=lengths["inputs"], target_length=lengths["targets"])


def build_model(cfg: TrainConfig, vocab, resume_from: Path | None = None, init_from: str | None = None) -> T5:
    """The preset (or ``init_from``'s weights), with the run's dropout, checked against the vocabulary.

    A preset's embedding is sized from the vocabulary, rounded up to a multiple of 128 as T5 pads 32,100
    ids to 32,128 rows (so every T5 preset keeps its 32,128 with T5's vocabulary); ``init_from``'s
    embedding is fixed, and must fit the vocabulary. Resuming builds the model of checkpoint
    ``resume_from``, so a moved run resumes without its model file or ``init_from`` model. ``init_from``
    defaults to ``cfg.init_from`` pinned to one checkpoint (the recipe pins it once and passes it, so that
    the weights, lineage.json and base.json name the same checkpoint).
    """
    if resume_from is None and init_from is None:
        init_from = run_lib.pinned_checkpoint(cfg.init_from)
    if resume_from is not None:
        model = load_model(resume_from, verify=cfg.verify_checkpoints)
        run_lib.check_vocabulary_fits(model.config.vocab_size, vocab, f"checkpoint {resume_from}")
        set_compute_fields(model, cfg.model)
    elif init_from:
        model = load_model(init_from, verify=cfg.verify_checkpoints)
        check_model_settings(cfg.model, model.config, cfg.init_from)
        run_lib.check_vocabulary_fits(model.config.vocab_size, vocab, cfg.init_from)
        set_compute_fields(model, cfg.model)
    else:
        model_cfg = resolve_model_config(cfg.model or DEFAULT_MODEL)
        if isinstance(cfg.model, dict) and "vocab_size" in cfg.model:  # set explicitly: must fit
            run_lib.check_vocabulary_fits(model_cfg.vocab_size, vocab, "model.vocab_size")
        elif model_cfg.vocab_size != run_lib.embedding_rows(vocab.vocab_size):
            rows = run_lib.embedding_rows(vocab.vocab_size)
            log.info("model: %d embedding rows for the vocabulary's %d ids (the preset has %d)",
                     rows, vocab.vocab_size, model_cfg.vocab_size)
            model_cfg = dataclasses.replace(model_cfg, vocab_size=rows)
        model = T5(model_cfg)
    if cfg.dropout_rate is not None:
        set_dropout(model, cfg.dropout_rate)
    return model


def check_model_settings(setting: str | dict | None, loaded: ModelConfig, source: str) -> None:
    """A model given beside ``init_from`` must match the loaded model (its weights fix it): a preset (or
    config file) in every field but those other settings derive (vocabulary size, dropout, adapters), fields
    given without a preset in those fields."""
    if setting is None:
        return
    named = isinstance(setting, str) or config.PRESET in setting
    fields = {} if isinstance(setting, str) else {k: v for k, v in setting.items() if k != config.PRESET}
    given = effective(resolve_model_config(setting) if named else config.from_dict(ModelConfig, fields, "model"))
    have = effective(loaded)
    compared = [k for k in have if k not in run_lib.DERIVED_MODEL_FIELDS] if named else []
    differ = sorted({k for k in [*compared, *fields] if k not in COMPUTE_FIELDS and given[k] != have[k]})
    if not differ:
        return
    key = differ[0]
    what = f"model {setting if isinstance(setting, str) else setting[config.PRESET]}" if named and key not in fields \
        else f"model.{key} = {fields[key]!r}"
    raise T2TError(f"{what} differs from the model loaded from {source} ({key} {have[key]!r}, not "
                   f"{given[key]!r}); leave it out to train the loaded model, or leave out --init-from to train "
                   f"from scratch.")


def set_compute_fields(model: T5, setting: str | dict | None) -> None:
    """Give a loaded ``model`` the attention kernel and CPU kernels the ``model`` setting names explicitly
    (``--set model.kernels=plain``): they change how it computes, not its weights."""
    given = {k: v for k, v in setting.items() if k in COMPUTE_FIELDS} if isinstance(setting, dict) else {}
    if not given:
        return
    config.from_dict(ModelConfig, {**config.to_dict(model.config), **given}, "model")  # one sentence if invalid
    for key, value in given.items():
        setattr(model.config, key, value)  # in place: the model's stacks share its config
    if model.config.attention == "flex":
        require_flex_attention()
    kernels.apply(model, model.config.kernels)


def effective(model_cfg: ModelConfig) -> dict:
    """A model config's fields as the network uses them (num_decoder_layers None means num_layers)."""
    return {**config.to_dict(model_cfg), "num_decoder_layers": model_cfg.decoder_layers}


def load_optimizer_state(run, cfg: TrainConfig, objective, optimizer, latest: Path) -> None:
    """The checkpoint's optimizer state (moments, step counts) under this run's optimizer settings (changed
    ones were allowed by the user), unless the optimizer was changed: a state of another optimizer does not
    fit, so the new one starts afresh."""
    recorded = run.settings.get("optimizer", {}).get("name", cfg.optimizer.name)
    if recorded != cfg.optimizer.name:
        log.info("optimizer changed from %s to %s: its state starts afresh", recorded, cfg.optimizer.name)
        return
    optimizer_state = checkpoint.read_optimizer_state(latest, cfg.verify_checkpoints)
    settings = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    distributed.load_optimizer_state(objective, optimizer, optimizer_state)
    for group, setting in zip(optimizer.param_groups, settings):  # the settings of this run, not the saved ones
        group.update(setting)


def restore_schedule(scheduler: torch.optim.lr_scheduler.LambdaLR, state: dict, learning_rate: float) -> None:
    """The schedule where it stopped, at the configured peak rate (the run's own unless the user changed it
    with --allow-changed-settings, which the resume then follows)."""
    scheduler.load_state_dict(state)
    scheduler.base_lrs = [learning_rate] * len(scheduler.base_lrs)
    for group, factor in zip(scheduler.optimizer.param_groups, scheduler.lr_lambdas):
        group["initial_lr"], group["lr"] = learning_rate, learning_rate * factor(scheduler.last_epoch)


def require_resume_state(state: dict, path: Path) -> None:
    """The trainer state keys a resume reads, each missing one named (a hand-edited or foreign file)."""
    missing = [key for key in ("step", "scheduler", "data") if key not in state]
    if missing:
        raise T2TError(f"trainer state in {path} lacks {', '.join(missing)}, so the run cannot resume from it; "
                       f"resume from an earlier checkpoint or start a new --output-dir.")


def set_dropout(model: T5, rate: float) -> None:
    model.config.dropout_rate = rate
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = rate


def split_rows(batch: dict, rows: list[int], parts: int) -> list[tuple[dict, list[int]]]:
    """This process's rows of the step's global batch as ``parts`` micro-batches, each with the global row
    index of each of its rows."""
    size = len(rows) // parts
    return [({k: v[i * size:(i + 1) * size] for k, v in batch.items()}, rows[i * size:(i + 1) * size])
            for i in range(parts)]


def train_step(objective: torch.nn.Module, micro_batches: list[tuple[dict, list[int]]],
               optimizer: torch.optim.Optimizer, scaling: LossScaling, cfg: TrainConfig, device: torch.device,
               step: int) -> tuple[float, int]:
    """One optimizer step over ``micro_batches`` (each with its rows' global indices); returns (mean loss per
    target token, tokens seen).

    The loss is the token-sum over the *global* batch divided by its number of target tokens, so it is
    the same with 1 process or N (gradients are averaged over processes, hence the ``world_size``). The
    dropout masks of a row are a function of (seed, step, its global row index) on the CPU, so they too are
    the same with 1 process or N and with any gradient accumulation. In fp16 ``scaling`` scales the loss, and
    skips the update of a step whose gradients overflowed.
    """
    objective.train()
    torch.manual_seed(distributed.step_seed(cfg.seed, step))  # dropout on CUDA: a function of the step
    local_weight = sum(float(b["decoder_loss_weights"].sum()) for b, _ in micro_batches)
    total_weight = distributed.all_reduce_sum(local_weight)
    scale = distributed.world_size() / max(total_weight, 1.0)
    loss_sums, tokens = [], sum(count_tokens(batch) for batch, _ in micro_batches)
    for i, (batch, rows) in enumerate(micro_batches):
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        last = i == len(micro_batches) - 1
        with (distributed.maybe_no_sync(objective, last), autocast(cfg.precision, device),
              row_generators(distributed.row_seeds(cfg.seed, step, rows)), kernels.many_graphs(cfg.compile)):
            batch_loss = objective(batch)
        scaling.backward(batch_loss * scale)
        loss_sums.append(batch_loss.detach())
    if cfg.optimizer.grad_clip_norm > 0:
        scaling.unscale(optimizer)
        torch.nn.utils.clip_grad_norm_(objective.parameters(), cfg.optimizer.grad_clip_norm)
    scaling.step(optimizer, step)
    optimizer.zero_grad(set_to_none=True)
    # read back once, after the step is launched: on a GPU the host queues the optimizer during the backward pass
    loss_sum = float(sum(loss.double() for loss in loss_sums))
    mean_loss = distributed.all_reduce_sum(loss_sum) / max(total_weight, 1.0)
    return mean_loss, int(distributed.all_reduce_sum(tokens))


def count_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Non-padding tokens the model reads: encoder inputs (encoder-decoders) and the decoder's targets."""
    return sum(int(batch[k].count_nonzero()) for k in ("encoder_input_tokens", "decoder_target_tokens") if k in batch)


POSITION_FEATURES = ("encoder_positions", "decoder_positions")


class TrainingObjective(torch.nn.Module):
    """The model under its loss: DDP and FSDP wrap this, so their hooks run around ``loss_sums``.

    It leaves out packed rows' positions: they restart in each segment, so for every pair of tokens the
    segment masks let attend, key − query positions are index distances, and without them the position bias is
    one [1, H, T, S] shared by every row (as t5x computes it), not one a row. Same loss; its gradient is summed
    over the batch once, where a GPU summed a row's bias gradient by atomic adds (bench_packed_bias.py: t5-small's
    packed 8 × 512→114 forward and backward 3–4% faster on the CPU; the GPU's gain is not measured yet).
    """

    def __init__(self, model: T5, lm_loss_weight: float = 0.0, z_loss: float = 0.0):
        super().__init__()
        self.model = model
        self.lm_loss_weight, self.z_loss = lm_loss_weight, z_loss

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        batch = {k: v for k, v in batch.items() if k not in POSITION_FEATURES}
        loss_sum, _ = self.model.loss_sums(batch, lm_weight=self.lm_loss_weight, z_loss=self.z_loss,
                                           every_position=torch.compiler.is_compiling())  # static shapes
        return loss_sum


def save_checkpoint(trainer: Trainer) -> None:
    """Gather the full state on every process (FSDP needs all of them), write it from the main one.

    With ``trained_only`` = (names, base), only those parameters are written, and ``base`` as where the rest is."""
    model_state = distributed.full_model_state(trainer.objective, prefix="model.")
    optimizer_state = distributed.full_optimizer_state(trainer.objective, trainer.optimizer)
    data_state = trainer.batches.state_dict()
    if distributed.is_main():
        model, base = trainer.model, None
        if trainer.trained_only is not None:
            names, base = trainer.trained_only
            model_state = {k: v for k, v in (model_state or model.state_dict()).items() if k in names}
        state = {"step": trainer.step, "scheduler": trainer.scheduler.state_dict(), "data": data_state,
                 "data_fingerprint": trainer.data_fingerprint, WATCH_STATE: trainer.watch.state_dict()}
        state.update(trainer.scaling.checkpoint_state())
        checkpoint.save_checkpoint(trainer.run_dir, trainer.step, model, model_state=model_state,
                                   optimizer_state=optimizer_state, trainer_state=state,
                                   settings=resolved_settings(trainer.settings, model),
                                   keep_last=trainer.cfg.keep_checkpoints, base=base,
                                   best=trainer.watch.record_for(trainer.step))
    distributed.barrier()


def resolved_settings(settings: dict, model: T5) -> dict:
    """The run's settings as recorded beside its checkpoints, with ``model`` resolved to every field."""
    return {**settings, "model": config.to_dict(model.config)}


def unwrap(objective: torch.nn.Module) -> "TrainingObjective":
    """The TrainingObjective inside torch.compile's and DDP's wrappers."""
    objective = getattr(objective, "_orig_mod", objective)  # torch.compile's OptimizedModule
    return objective.module if isinstance(objective, torch.nn.parallel.DistributedDataParallel) else objective


def make_evaluator(cfg: TrainConfig, vocab, device: torch.device):
    """A callable model → {"eval/<task>/<metric>": value} over the validation splits of ``eval_mixture``
    (default: the training mixture, less the members a --skip-unavailable run never trained)."""
    name = cfg.eval_mixture or cfg.mixture
    get_task_or_mixture(name)  # a misspelt name fails before training starts
    if cfg.keep_best:
        check_keep_best(cfg.keep_best, name)

    def evaluator(model: T5) -> dict:
        return validation_metrics(model, name, vocab, data_dir=cfg.data_dir,
                                  max_examples=cfg.eval_max_examples, batch_size=cfg.eval_batch_size,
                                  device=device, precision=cfg.precision,
                                  trained_only=cfg.skip_unavailable and not cfg.eval_mixture)
    return evaluator


def evaluation_settings(cfg: TrainConfig) -> dict:
    """How evaluation during training scores (what t2t-eval needs to score a checkpoint the same way)."""
    return {"mixture": cfg.eval_mixture or cfg.mixture, "split": "validation", "max_examples": cfg.eval_max_examples,
            "batch_size": cfg.eval_batch_size, "precision": cfg.precision}
