"""A run directory is the unit: it holds what evaluation, prediction, export and resuming need.

When training starts, :func:`record_run` copies into the run directory what the settings only point to::

    runs/x/vocab.json            the vocabulary's kind and fields ({"kind": "sentencepiece", "file":
                                 "spiece.model", "extra_ids": 100}; read back through t2t.data.vocab's kinds)
    runs/x/spiece.model          the file a vocabulary kind keeps (vocab.json's ``file``; for SentencePiece the
                                 name Hugging Face uses, and t2t-export copies it from here)
    runs/x/modules/<name>.py     each --module given as a .py file (module names are recorded by name)
    runs/x/checksums.sha256      the sha256 of those copies (``sha256sum -c`` format)
    runs/x/step_*/train_config.yaml   the resolved settings, with vocab and data_dir as absolute paths
    runs/x/step_*/modules.sha256      the sha256 of each module file the training imported (both covered by
                                 the checkpoint's own checksums.sha256)

so a run keeps working when it is moved to another folder or machine (runs from before vocab.json have
spiece.model alone, which is read as SentencePiece with 100 sentinels). :func:`open_run` reads a run back
(its settings, and vocabulary and module paths that resolve inside the run) and verifies the run's copies
against their checksums, so a swapped or damaged vocabulary or module is one error naming the file (a
run without the checksum file is refused the same way; ``verify=False`` skips the check).

Whose code a run imports: one rule for every tool that imports a run's modules (resuming t2t-train,
t2t-eval, t2t-predict, the cells of t2t-study; t2t-export imports none). A run is **the user's own** when
the files that say what it imports (the checkpoint's train_config.yaml, modules.sha256 and checksums.sha256,
the run's checksums.sha256 and module copies) belong to the user running the tool, and each module copy is the file
the training imported (its sha256 is the one the checkpoint recorded; checksums.sha256 cannot vouch for
that, since the user is told how to record it again). The user's own run imports its modules unasked.
Any other run (written by another user, or with a module file changed since the run recorded it, or from
before t2t recorded them) imports its module files and module names only with ``--trust-modules``, or not
at all when the user passes modules of their own with ``--module`` (:func:`require_module_consent`).
:func:`merge_settings` lays the user's explicit flags over a run's settings and logs one line per flag that
overrides one of them; :func:`check_resume` lists how resumed settings differ from the recorded ones and
refuses the differences that break exact continuation.
"""

from __future__ import annotations

import dataclasses
import filecmp
import json
import logging
import math
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from t2t import config, durable
from t2t.checkpoints import best as best_record
from t2t.checkpoints import native as checkpoint
from t2t.data.vocab import (
    RECORD_FILE,
    SentencePieceVocabulary,
    Vocabulary,
    load_vocabulary,
    named_vocabulary,
    recorded_file,
)
from t2t.durable import write_atomic
from t2t.errors import T2TError
from t2t.models.presets import COMPUTE_FIELDS, resolve_model_config

log = logging.getLogger(__name__)

VOCAB_FILE = SentencePieceVocabulary.FILE  # a run's vocabulary before vocab.json recorded its kind
LINEAGE_FILE = "lineage.json"  # the models a run was trained from, nearest first
MODULES_DIR = "modules"
EMBEDDING_MULTIPLE = 128  # T5 pads its 32,100 ids to 32,128 embedding rows
# Where a run finds its inputs: filled from the run when the user does not give them.
LOCATIONS = ("vocab", "modules", "data_dir")
BEST_SUFFIX = ":best"  # RUN:best, the checkpoint a run records as its best (checkpoint_path)
# Settings a resumed run may change and still continue exactly (the rest change what a step computes).
HARMLESS_CHANGES = frozenset({
    "train_steps", "log_every", "save_every", "keep_checkpoints", "eval_every", "eval_max_examples",
    "eval_mixture", "eval_batch_size", "verify_checkpoints", "device", "threads", "parallelism", "output_dir",
    "batches_ahead", "loggers", "keep_best", "early_stopping", "cache_dir", "activation_checkpointing"})


# Settings that a schedule is a function of: changing them on resume changes the rates already on their way.
SCHEDULE_SETTINGS = {"linear": "train_steps", "cosine": "train_steps"}


# Model fields a run derives from other settings: the vocabulary, dropout_rate, transfer.adapter_dim and lora_*.
DERIVED_MODEL_FIELDS = frozenset({"vocab_size", "dropout_rate", "adapter_dim", "lora_rank", "lora_alpha",
                                  "lora_targets"})
# model fields a resumed run may change with --allow-changed-settings (the weights stay; dropout masks differ)
_COMPUTE_KEYS = frozenset(f"model.{name}" for name in COMPUTE_FIELDS)


@dataclass(frozen=True)
class Run:
    path: Path            # the run directory
    checkpoint: Path      # the checkpoint asked for (a run dir means its latest)
    settings: dict        # the training settings recorded beside that checkpoint ({} for older runs)
    module_sha256: dict = dataclasses.field(default_factory=dict)  # {file name: sha256} the training imported

    @property
    def vocab(self) -> str | None:
        """The run's record of its vocabulary (vocab.json), or its spiece.model for runs from before the
        record; for runs older than the copy, the path they recorded."""
        copy = next((self.path / n for n in (RECORD_FILE, VOCAB_FILE) if (self.path / n).is_file()), None)
        return str(copy) if copy is not None else self.settings.get("vocab")

    @property
    def modules(self) -> list[str]:
        """The recorded --module entries, .py files replaced by the run's copies."""
        return [str(self.path / MODULES_DIR / Path(m).name)
                if is_module_file(m) and (self.path / MODULES_DIR / Path(m).name).is_file() else m
                for m in self.settings.get("modules") or []]

    @property
    def data_dir(self) -> str | None:
        """The recorded data dir, if it exists here (else None: $T2T_DATA_DIR applies)."""
        recorded = self.settings.get("data_dir")
        if recorded and not Path(recorded).is_dir():
            log.info("the run's data dir %s does not exist here; using $T2T_DATA_DIR or --data-dir", recorded)
            return None
        return recorded

    def locations(self) -> dict[str, Any]:
        """``{"vocab", "modules", "data_dir"}`` as this run resolves them."""
        return {"vocab": self.vocab, "modules": self.modules, "data_dir": self.data_dir}


def open_run(path: str | os.PathLike, verify: bool = True) -> Run:
    """The run of ``path``: a run dir (its latest checkpoint) or one ``step_*`` checkpoint inside one."""
    found = find_run(path, verify)
    if found is None:
        raise T2TError(f"{path} is not a t2t run (no step_* checkpoint in it); pass a run's --output-dir.")
    return found


def find_run(path: str | os.PathLike, verify: bool = True) -> Run | None:
    """Like :func:`open_run`, but None for anything that is not a t2t run (a Hugging Face folder, a hub id).
    ``verify`` checks the run's copies and its settings file against their checksums."""
    path = Path(path)
    if not path.is_dir():
        return None
    if checkpoint.is_checkpoint_dir(path):
        ckpt, run_dir = path, path.parent
    else:
        ckpt, run_dir = checkpoint.latest_checkpoint(path), path
        if ckpt is None:
            return None
    if verify:
        verify_run_files(run_dir)
    settings = checkpoint.read_settings(ckpt, verify) or {}
    check_recorded_locations(settings, ckpt / checkpoint.SETTINGS_FILE)
    return Run(run_dir, ckpt, settings, checkpoint.read_module_digests(ckpt, verify) or {})


def check_recorded_locations(settings: dict, file: Path) -> None:
    """The recorded settings a run is read with (vocab, data_dir, modules) have the types t2t wrote."""
    for key in ("vocab", "data_dir"):
        if settings.get(key) is not None and not isinstance(settings[key], str):
            raise T2TError(f"settings file {file} has {key} {settings[key]!r}, not a path; the file was edited "
                           f"or is corrupt, so restore it from a copy.")
    modules = settings.get("modules") or []
    if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
        raise T2TError(f"settings file {file} has modules {modules!r}, not a list of module names or files; the "
                       f"file was edited or is corrupt, so restore it from a copy.")


# -- the run's own copies, under checksums ------------------------------------------------------------------


def run_files(run_dir: Path) -> list[Path]:
    """The copies a run keeps: its vocabulary's (vocab.json and the file it names, or an older run's
    spiece.model) and its modules' .py files."""
    return vocabulary_files(run_dir) + sorted((run_dir / MODULES_DIR).glob("*.py"))


def vocabulary_files(run_dir: Path) -> list[Path]:
    record_path = run_dir / RECORD_FILE
    if not record_path.is_file():
        return [run_dir / VOCAB_FILE] if (run_dir / VOCAB_FILE).is_file() else []
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError) as e:
        raise T2TError(f"vocabulary record {record_path} cannot be read ({e}); restore it from a copy.") from None
    named = [recorded_file(record_path, record)] if isinstance(record, dict) and "file" in record else []
    return [record_path, *named]


def record_checksums(run_dir: Path) -> None:
    """``run_dir/checksums.sha256``: the sha256 of each of the run's copies, by path inside the run."""
    checksums = {path.relative_to(run_dir).as_posix(): durable.sha256_of(path) for path in run_files(run_dir)}
    write_atomic(run_dir / durable.CHECKSUMS_FILE, durable.format_checksums(checksums))


def verify_run_files(run_dir: Path) -> None:
    """Each of the run's copies must match the checksum recorded when training wrote it."""
    files = run_files(run_dir)
    file = run_dir / durable.CHECKSUMS_FILE
    if not files and not file.is_file():
        return  # a run from before t2t kept copies: it reads the files its settings name
    names = [p.relative_to(run_dir).as_posix() for p in files]
    if not file.is_file():
        raise T2TError(f"run {run_dir} has no {file.name} for its {', '.join(names)}, so they cannot be verified "
                       f"(it was deleted, or the run predates it); if you trust them, record them with "
                       f"`{record_command(run_dir, names)}`.")
    recorded = durable.parse_checksums(file.read_text(errors="replace")) or {}
    problem = _run_file_problem(run_dir, files, recorded)
    if problem:
        again = (f"record them again with `{record_command(run_dir, names)}`" if names else
                 f"drop the record with `{record_command(run_dir, names)}` (the run then reads the files its "
                 f"settings name)")
        raise T2TError(f"run file {problem} (checksums in {file}); it was replaced or damaged after training "
                       f"wrote it, so restore the run's copy, or, if you trust the run's files as they are now, "
                       f"{again}.")


def record_command(run_dir: Path, names: list[str]) -> str:
    """The shell command that records the checksums of the run's copies ``names`` as they are now (with no
    copy left, the one that removes the record), paths quoted for the shell."""
    if not names:
        return f"rm {shlex.quote(str(run_dir / durable.CHECKSUMS_FILE))}"
    return (f"cd {shlex.quote(str(run_dir))} && sha256sum {' '.join(shlex.quote(n) for n in names)} > "
            f"{durable.CHECKSUMS_FILE}")


def _run_file_problem(run_dir: Path, files: list[Path], recorded: dict[str, str]) -> str | None:
    for path in files:
        name = path.relative_to(run_dir).as_posix()
        if name not in recorded:
            return f"{path} has no recorded checksum"
        if durable.sha256_of(path) != recorded[name]:
            return f"{path} does not match its recorded checksum"
    missing = [name for name in recorded if not (run_dir / name).is_file()]
    return f"{run_dir / missing[0]} is missing" if missing else None


def require_module_consent(run: Run | None, given: list[str], trusted: bool) -> None:
    """Refuse to import ``run``'s modules unless the run is the user's own (see :func:`not_own_because`) or the
    user consents: ``trusted`` (--trust-modules) or modules of their own (``given``, which replace the run's;
    a given file with the same contents as a run's copy stands for it). Module files are code from a folder;
    module names are imported from the user's environment, but which ones is the run's choice (a name can
    pick up a package in the working directory)."""
    if run is None or given or not run.modules:
        return
    reason = not_own_because(run)
    if reason is None:
        return
    files = [m for m in run.modules if is_module_file(m)]
    names = [m for m in run.modules if not is_module_file(m)]
    if trusted:
        log.info("importing %s's modules %s (--trust-modules), though %s", run.path, ", ".join(run.modules), reason)
    elif files:
        raise T2TError(f"run {run.path} would import its module files {', '.join(files)}, code that runs as you, "
                       f"and {reason}; read them and pass --trust-modules, or pass your own copies with --module.")
    else:
        raise T2TError(f"run {run.path} would import the modules {', '.join(names)}, and {reason}; pass "
                       f"--trust-modules if you expect them, or name the modules you mean with --module.")


def not_own_because(run: Run) -> str | None:
    """Why ``run`` is not the user's own (None when it is): a file that says what it imports belongs to
    another user, or a module file is not the one the training imported (it changed since the checkpoint
    recorded its sha256, or the checkpoint recorded none)."""
    getuid = getattr(os, "getuid", None)
    if getuid is None:
        return "this system has no user ids to tell whose files they are"
    record = run.checkpoint / checkpoint.MODULES_FILE
    files = [Path(m) for m in run.modules if is_module_file(m)]
    for path in [run.checkpoint / checkpoint.SETTINGS_FILE, record, run.checkpoint / durable.CHECKSUMS_FILE,
                 run.path / durable.CHECKSUMS_FILE, *files]:
        owner = path.lstat().st_uid if path.is_symlink() or path.exists() else getuid()  # a link: its own owner
        if owner != getuid():
            return f"{path} belongs to another user (uid {owner})"
    for path in files:
        recorded = run.module_sha256.get(path.name)
        if recorded is None:
            return f"{record} records no sha256 of {path.name} (runs from before t2t recorded them)"
        if not path.is_file() or durable.sha256_of(path) != recorded:
            return f"{path} changed since the run recorded it in {record}"
    return None


def with_run_locations(cfg, run: Run | None):
    """``cfg`` (settings with vocab, modules and data_dir fields) with those the user left unset taken from
    ``run``; one that is given and differs from the run's is logged in one line (see merge_settings)."""
    if run is None:
        return cfg
    given = {k: _as_in_run(run, k, getattr(cfg, k)) for k in LOCATIONS if getattr(cfg, k) not in (None, [])}
    merged = merge_settings(run.locations(), given)
    return dataclasses.replace(cfg, **{k: merged[k] for k in LOCATIONS})


def _as_in_run(run: Run, key: str, value: Any) -> Any:
    """A given location that names what the run already has (same file contents, same folder) as the
    run's own, so that repeating the training command's flags overrides nothing."""
    if key == "vocab":
        return run.vocab if run.vocab and same_vocabulary(value, run.vocab) else value
    if key == "data_dir":
        recorded = run.settings.get("data_dir")
        return recorded if recorded and Path(value).resolve() == Path(recorded).resolve() else value
    copies = dict(zip(run.settings.get("modules") or [], run.modules))
    return [next((c for c in copies.values() if is_module_file(m) and same_file(m, c)), m) for m in value]


def merge_settings(run_settings: dict, given: dict) -> dict:
    """``run_settings`` with ``given`` (the user's explicit settings, nested dicts) laid over them; one
    log line for each given setting that overrides a different value of the run's."""
    merged = config.merge(run_settings, given)
    for key, old, new in differences(run_settings, merged):
        if old is not None and old != []:
            flag = "module" if key == "modules" else key.replace("_", "-")
            log.info("--%s %s overrides the run's %s", flag, _show(new), _show(old))
    return merged


def differences(old: dict, new: dict, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """``(dotted key, old value, new value)`` for every leaf that differs between two settings dicts."""
    found = []
    for key in sorted(set(old) | set(new), key=str):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found += differences(a, b, f"{prefix}{key}.")
        elif _comparable(a) != _comparable(b):
            found.append((f"{prefix}{key}", a, b))
    return found


def check_resume(run: Run, settings: dict, allow_changed: bool = False, defaults: dict | None = None) -> None:
    """Compare a resumed run's ``settings`` (a TrainConfig as a dict) with those ``run`` recorded.

    Harmless changes (HARMLESS_CHANGES) are logged, one line each; any other difference, including a
    vocabulary with different pieces, breaks exact continuation and is one T2TError listing them all,
    unless ``allow_changed``. Where the data and modules are found is not compared (with_run_locations
    logs a changed one). A setting added to t2t after the run recorded its own counts as its value in
    ``defaults`` (the settings dataclass's defaults), which is what the run trained with; without
    ``defaults`` such settings are not compared.
    """
    if not run.settings:
        return
    recorded = {k: v for k, v in config.merge(defaults or {}, run.settings).items()
                if k not in LOCATIONS + ("model",)}
    current = {k: v for k, v in settings.items() if k not in LOCATIONS + ("model",)}
    changes = [c for c in differences(recorded, current) if _has_key(recorded, c[0])]
    changes += model_changes(run.settings.get("model"), settings.get("model"))
    if settings.get("vocab") and run.vocab and not same_vocabulary(settings["vocab"], run.vocab):
        changes.append(("vocab", run.vocab, settings["vocab"]))
    model = [c for c in changes if c[0].split(".")[0] == "model" and c[0] not in _COMPUTE_KEYS]
    if model:  # resuming builds the checkpoint's model: a changed one would be logged but not trained
        listed = "; ".join(f"{key} {_show(old)} → {_show(new)}" for key, old, new in model)
        raise T2TError(f"resuming {run.path} with a changed model ({listed}): a run's model is fixed by its "
                       f"checkpoints, so not even --allow-changed-settings changes it; leave the model setting out "
                       f"to resume with the run's, or start a new --output-dir with --init-from {run.path}.")
    harmless = HARMLESS_CHANGES - {SCHEDULE_SETTINGS.get(run.settings.get("optimizer", {}).get("schedule"))}
    breaking = [c for c in changes if c[0].split(".")[0] not in harmless]
    if breaking and not allow_changed:
        listed = "; ".join(f"{key} {_show(old)} → {_show(new)}{_why_breaking(run, key)}" for key, old, new in breaking)
        raise T2TError(f"resuming {run.path} with settings that break exact continuation ({listed}); use the "
                       f"run's settings, or pass --allow-changed-settings to continue with the new ones.")
    for key, old, new in changes:
        log.info("resuming with %s %s (the run had %s)", key, _show(new), _show(old))


def _why_breaking(run: Run, key: str) -> str:
    schedule = run.settings.get("optimizer", {}).get("schedule")
    return f", which the {schedule} schedule decays over" if SCHEDULE_SETTINGS.get(schedule) == key else ""


def check_data_fingerprint(checkpoint_path: Path, recorded: dict | None, current: dict,
                           allow_changed: bool = False) -> None:
    """The training data a resumed run reads must be what it read before (``{member: {"examples", "sha256"}}``
    as the trainer records it beside each checkpoint; checkpoints from before the record pass). A change is
    one T2TError, or with ``allow_changed`` a warning."""
    if recorded is None:
        return
    changed = [name for name in sorted(set(recorded) | set(current)) if recorded.get(name) != current.get(name)]
    if not changed:
        return
    name = changed[0]
    before, now = (_data_summary(d.get(name)) for d in (recorded, current))
    message = (f"the training data of {name} changed since {checkpoint_path} was saved ({before} then, {now} "
               f"now{f'; {len(changed) - 1} more member(s) changed' if len(changed) > 1 else ''})")
    if not allow_changed:
        raise T2TError(f"{message}, so the run cannot continue exactly; restore that data, or pass "
                       f"--allow-changed-settings to continue on the new data.")
    log.warning("%s; continuing on the new data (--allow-changed-settings)", message)


def _data_summary(fingerprint: dict | None) -> str:
    if fingerprint is None:
        return "not in the mixture"
    return f"{fingerprint['examples']:,} examples, sha256 {fingerprint['sha256'][:12]}"


def model_changes(recorded: Any, setting: Any) -> list[tuple[str, Any, Any]]:
    """How the ``model`` setting differs from the model a run recorded (all its fields): fields set from
    other settings (the vocabulary, dropout_rate, transfer.adapter_dim) are not compared; a preset file that
    is not readable here cannot differ (resuming builds the run's own model)."""
    if setting is None:  # not given: the run's own model
        return []
    if setting == recorded or not isinstance(recorded, dict):
        return [] if setting == recorded else [("model", recorded, setting)]
    try:
        resolved = config.to_dict(resolve_model_config(setting))
    except T2TError:
        log.info("model %s is not readable here; resuming with the run's own model", _show(setting))
        return []
    return [(f"model.{key}", recorded[key], value) for key, value in resolved.items()
            if key in recorded and key not in DERIVED_MODEL_FIELDS and recorded[key] != value]


def record_run(run_dir: str | os.PathLike, vocab: Vocabulary, modules: list[str]) -> None:
    """Record the vocabulary (:func:`record_vocabulary`) and copy each .py module to ``run_dir/modules/``
    (atomic writes with the user's umask; a file already identical is left alone), then record their
    checksums."""
    run_dir = Path(run_dir)
    files = [m for m in modules if is_module_file(m)]
    names = [Path(m).name for m in files]
    clash = next((n for n in names if names.count(n) > 1), None)
    if clash:
        raise T2TError(f"two --module files are named {clash}; rename one so the run can keep a copy of each.")
    record_vocabulary(run_dir, vocab)
    for module in files:
        _copy(Path(module), run_dir / MODULES_DIR / Path(module).name)
    record_checksums(run_dir)


def record_vocabulary(run_dir: Path, vocab: Vocabulary) -> None:
    """``run_dir/vocab.json`` (the vocabulary's kind and fields) and the file its kind keeps beside it."""
    record = {"kind": vocab.kind, **vocab.record()}
    if "file" in record:
        _write_copy(vocab.file_bytes(), recorded_file(run_dir / RECORD_FILE, record))
    _write_copy(json.dumps(record, indent=2).encode() + b"\n", run_dir / RECORD_FILE)


def resumable_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The checkpoint that training in ``run_dir`` resumes from (None: a new run). A damaged step folder (one
    without all of checkpoint.REQUIRED_FILES) newer than it is refused: resuming would restart behind it,
    cut metrics.jsonl back and save over it."""
    run_dir = Path(run_dir)
    latest = checkpoint.latest_checkpoint(run_dir)
    floor = -1 if latest is None else checkpoint.checkpoint_step(latest)
    for path in sorted(run_dir.glob("step_*")) if run_dir.is_dir() else []:
        step = checkpoint.named_step(path)  # the name's: a damaged folder may have no trainer state to ask
        missing = [name for name in checkpoint.REQUIRED_FILES if not (path / name).is_file()]
        if path.is_dir() and step is not None and step > floor and missing:
            behind = latest.name if latest is not None else "step 0"
            raise T2TError(f"checkpoint {path} is damaged (it has no {', '.join(missing)}): training would restart "
                           f"from {behind} behind it, cut metrics.jsonl back and save over it; restore the missing "
                           f"file, or move {path.name} out of {run_dir} to resume from {behind}.")
    return latest


def checkpoint_path(spec: str) -> str:
    """``spec`` as a checkpoint: ``RUN:best`` is the step folder run ``RUN`` records as its best
    (t2t.checkpoints.best); anything else (a run dir, a step folder, a hub id, a path that exists) is itself."""
    if not spec.endswith(BEST_SUFFIX) or Path(spec).exists():
        return spec
    run_dir = Path(spec.removesuffix(BEST_SUFFIX))
    if not run_dir.is_dir() or checkpoint.is_checkpoint_dir(run_dir):
        raise T2TError(f"{spec} names the best checkpoint of a run, but {run_dir} is not a run folder; pass "
                       f"RUN:best with a run's --output-dir.")
    record = best_record.read_best(run_dir)
    if record is None:
        raise T2TError(f"run {run_dir} records no best checkpoint ({best_record.BEST_FILE}), so {spec} names "
                       f"nothing; train with --set keep_best=<metric>, or pass the run or one of its step_* folders.")
    folder = run_dir / checkpoint.checkpoint_name(record["step"])
    if folder.is_symlink() or not folder.is_dir():
        raise T2TError(f"run {run_dir} records step {record['step']} as its best ({record['metric']} "
                       f"{record['value']:g}), but {folder.name} is {'a link' if folder.is_symlink() else 'missing'}; "
                       f"restore that checkpoint, or pass the run or one of its step_* folders.")
    return str(folder)


def pinned_checkpoint(init_from: str | None) -> str | None:
    """``init_from`` with a t2t run dir replaced by its latest checkpoint, so that the weights loaded, the
    parent recorded in lineage.json and a trained-only checkpoint's base are one checkpoint, even while the
    parent run goes on saving newer ones (anything else is returned as it is)."""
    if not init_from:
        return None
    parent = find_run(init_from) if Path(init_from).is_dir() else None
    return str(parent.checkpoint) if parent is not None else init_from


def record_lineage(run_dir: str | os.PathLike, init_from: str) -> list[dict]:
    """Write ``run_dir/lineage.json``: the model ``init_from`` names, then that model's own lineage, so a
    run says how it came to be (base → intermediate task → target) even after its parents move.

    A t2t run or checkpoint is recorded as its checkpoint folder, step and mixture; anything else (a
    Hugging Face folder or hub id) as the name given."""
    parent = find_run(init_from) if Path(init_from).is_dir() else None
    if parent is None:
        chain = [{"model": init_from}]
    else:
        step = checkpoint.checkpoint_step(parent.checkpoint)
        chain = [{"run": str(parent.path.resolve()), "checkpoint": str(parent.checkpoint.resolve()),
                  "step": step, "mixture": parent.settings.get("mixture")}] + read_lineage(parent.path)
    write_atomic(Path(run_dir) / LINEAGE_FILE, json.dumps(chain, indent=2) + "\n")
    log.info("trained from: %s", " ← ".join(f"{a['mixture']} (step {a['step']})" if "run" in a else a["model"]
                                            for a in chain))
    return chain


def read_lineage(run_dir: str | os.PathLike) -> list[dict]:
    """The models ``run_dir`` was trained from, nearest first ([] for a run trained from scratch)."""
    path = Path(run_dir) / LINEAGE_FILE
    if not path.is_file():
        return []
    try:
        chain = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise T2TError(f"lineage file {path} cannot be read ({e}); restore it from a copy or delete it.") from None
    bad = next((i for i, a in enumerate(chain) if not _is_ancestor(a)), None) if isinstance(chain, list) else 0
    if bad is not None:
        raise T2TError(f"lineage file {path} has an invalid entry {bad} (each is {{\"model\": name}} or a run's "
                       f"run, checkpoint, step and mixture); restore it from a copy or delete it.")
    return chain


def _is_ancestor(entry: Any) -> bool:
    if not isinstance(entry, dict):
        return False
    if "run" not in entry:
        return isinstance(entry.get("model"), str)
    step = entry.get("step")
    return (isinstance(entry["run"], str) and isinstance(entry.get("checkpoint"), str)
            and (step is None or (isinstance(step, int) and not isinstance(step, bool)))
            and isinstance(entry.get("mixture"), (str, type(None))))


def recorded_settings(settings: dict, vocab_path: str | os.PathLike) -> dict:
    """The settings as a run records them: the vocabulary actually used (a path made absolute, or a kind's name
    such as ``byte``; never ``vocab: null``) and the data dir as an absolute path, .py modules as absolute paths, and the sha256 of each module file (read
    now, after the training imported it), by which :func:`not_own_because` knows its copy later (the
    checkpoint writes them to a file of their own, t2t.checkpoints.native.MODULES_FILE)."""
    data_dir = settings.get("data_dir") or os.environ.get("T2T_DATA_DIR")
    files = [Path(m) for m in settings.get("modules", []) if is_module_file(m)]
    vocab = str(vocab_path) if named_vocabulary(vocab_path) is not None else str(Path(vocab_path).resolve())
    return {**settings, "vocab": vocab,
            "data_dir": str(Path(data_dir).resolve()) if data_dir else None,
            "modules": [str(Path(m).resolve()) if is_module_file(m) else m for m in settings.get("modules", [])],
            checkpoint.MODULE_DIGESTS: {path.name: durable.sha256_of(path) for path in files}}


def embedding_rows(vocab_size: int) -> int:
    """Embedding rows for a vocabulary: its size rounded up to a multiple of 128 (T5: 32,100 → 32,128)."""
    return math.ceil(vocab_size / EMBEDDING_MULTIPLE) * EMBEDDING_MULTIPLE


def check_vocabulary_fits(model_vocab_size: int, vocab, model_name: str) -> None:
    """A model's embedding rows must cover the vocabulary's ids and be at most its padded size."""
    if vocab.vocab_size <= model_vocab_size <= embedding_rows(vocab.vocab_size):
        return
    raise T2TError(f"{model_name} has {model_vocab_size} embedding rows but the vocabulary {vocab.path} has "
                   f"{vocab.vocab_size} ids; pass the vocabulary the model was trained with (--vocab).")


def is_module_file(spec: str) -> bool:
    """A --module given as a file path (else it is an importable module name)."""
    return spec.endswith(".py") or "/" in spec or os.sep in spec


def same_vocabulary(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two vocabularies (a SentencePiece model, a run's vocab.json, a kind's name such as ``byte``) are
    one vocabulary."""
    readable = all(Path(v).is_file() or named_vocabulary(v) is not None for v in (a, b))
    return same_file(a, b) or (readable and load_vocabulary(a) == load_vocabulary(b))


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    return Path(a).is_file() and Path(b).is_file() and filecmp.cmp(a, b, shallow=False)


def _copy(source: Path, target: Path) -> None:
    if not source.is_file():
        raise T2TError(f"{source} does not exist, so the run cannot keep a copy of it; check the path.")
    _write_copy(source.read_bytes(), target)


def _write_copy(data: bytes, target: Path) -> None:
    """``target`` holding ``data``: a file already identical is left alone; a link is replaced, never kept or
    written through."""
    if not target.is_symlink() and target.is_file() and target.read_bytes() == data:
        return
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise T2TError(f"cannot write the run's copy of {target.name} into {target.parent} "
                       f"({e.strerror or e}); choose a writable --output-dir.") from None
    write_atomic(target, data)


def _has_key(settings: dict, dotted: str) -> bool:
    node: Any = settings
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _comparable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _show(value: Any) -> str:
    return str(_comparable(value))
