"""Checkpoints: t2t's own format.

Our format (one directory per saved step, inside a run directory)::

    runs/x/step_00000100/
        model.safetensors     the model's state dict (the tied embedding is one tensor: ``lm_head`` only
                              exists in untied configs, see t2t.models.t5)
        config.json           the ModelConfig
        optimizer.pt          the optimizer's state dict (``torch.load(weights_only=True)``)
        trainer_state.json    whatever JSON-able state the trainer passes (step, scheduler, data stream …)
        rng.pt                torch / CUDA / numpy / python RNG states, as tensors, lists and numbers
        train_config.yaml     the resolved training settings (when given): a recipe ``--config`` reads again
        modules.sha256        the sha256 of each module file the training imported, in ``sha256sum``'s format
                              (when the settings carry them; see t2t.checkpoints.run)
        checksums.sha256      the sha256 of every other file, in ``sha256sum``'s format

Writes are atomic: everything goes into a ``.tmp-step_…`` folder inside the run directory, every file and
the folder are fsynced, and one ``os.replace`` gives it its final name. ``latest_checkpoint`` only looks at
final names, so a crash at any moment leaves either the new checkpoint complete or the old ones untouched
(saving a step that exists moves the old copy to ``.old-step_…`` first, which stands for that step until
the new one is in place). Older checkpoints beyond the last ``keep_last`` are deleted only after the new
one is in place (renamed to a ``.trash-`` name first, so a half-deleted folder never looks like a
checkpoint), except the one the run records as its best (``best_checkpoint.json``, t2t.checkpoints.best),
which stays beside the newest ones however old it is. Files get the modes the user's umask asks for; a
write error is one T2TError. Loading checks the files it reads against checksums.sha256 (``verify=False``
skips that for very large models).

Loading never executes code from a file: weights come from safetensors (or a Hugging Face
``pytorch_model.bin`` through ``torch.load(weights_only=True)``), ``.pt`` files are loaded with
``weights_only=True``, settings are JSON/YAML. Every bad file — missing, truncated, garbage, or weights
that do not match the config — is one :class:`~t2t.errors.T2TError` naming the file.

Conversion from and to other formats lives beside this module: t2t/hf.py (Hugging Face T5 folders
and hub ids) and t2t/t5x.py (t5x msgpack checkpoints); they read files with the readers below.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import random
import re
import shlex
import shutil
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
import yaml
from safetensors.torch import save_file

from t2t import config as config_lib
from t2t import durable
from t2t.checkpoints import best as best_record
from t2t.checkpoints.files import read_json, torch_load, write_text, write_torch, write_with
from t2t.errors import T2TError, error_summary
from t2t.models.t5 import T5

log = logging.getLogger(__name__)

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
OPTIMIZER_FILE = "optimizer.pt"
TRAINER_STATE_FILE = "trainer_state.json"
RNG_FILE = "rng.pt"
SETTINGS_FILE = "train_config.yaml"
MODULES_FILE = "modules.sha256"
MODULE_DIGESTS = "module_sha256"  # the settings entry save_checkpoint writes to MODULES_FILE, not to SETTINGS_FILE
BASE_FILE = "base.json"  # a checkpoint of trained parameters only: the model its other weights come from
REQUIRED_FILES = (MODEL_FILE, CONFIG_FILE, TRAINER_STATE_FILE)

_STEP_DIR = re.compile(r"^(?:\.old-)?step_(\d{8,})$")
TMP_PREFIX = ".tmp-"
_TRASH_PREFIX = ".trash-"  # being deleted
_OLD_PREFIX = ".old-"  # a complete checkpoint moved aside while the same step is saved again


def checkpoint_name(step: int) -> str:
    """``step_00000100`` for step 100."""
    return f"step_{step:08d}"


# ----------------------------------------------------------------------------------------------------------
# Saving


def save_checkpoint(run_dir: str | os.PathLike, step: int, model: T5, *, model_state: Mapping | None = None,
                    optimizer: torch.optim.Optimizer | None = None, optimizer_state: dict | None = None,
                    trainer_state: Mapping[str, Any] | None = None, settings: Mapping[str, Any] | None = None,
                    save_rng: bool = True, keep_last: int | None = 3, base: str | None = None,
                    best: Mapping[str, Any] | None = None) -> Path:
    """Write ``run_dir/step_{step:08d}/`` atomically and return its path.

    ``optimizer`` (an optimizer) or ``optimizer_state`` (its state dict, e.g. gathered from FSDP shards) is
    saved as optimizer.pt; ``model_state`` replaces ``model.state_dict()`` where the module holds only a
    shard (the full state gathered from FSDP); ``trainer_state`` (JSON-able; ``step`` is filled in) as trainer_state.json;
    ``settings`` (the resolved training settings) as train_config.yaml, except their ``module_sha256`` entry
    ({module file name: sha256}), which goes to modules.sha256: train_config.yaml stays a file that
    ``--config`` takes as a recipe. ``keep_last`` keeps the newest K
    checkpoints (None or < 1: keep all); older ones are deleted after the new one is in place.
    ``base`` (a checkpoint folder, Hugging Face folder or hub id; see ``base_reference``) makes a checkpoint
    of ``model_state``'s tensors only (the trained ones): the other weights load from ``base``.
    ``best`` (a record for t2t.checkpoints.best, of this step) makes this checkpoint the run's best: the record
    is written once the checkpoint is in place and before rotation, so a kill leaves it naming a checkpoint
    that exists, and rotation keeps this one rather than the best it replaces.
    A write error (disk full, file-size limit) is one T2TError; the checkpoints already saved are untouched.
    """
    if optimizer is not None and optimizer_state is not None:
        raise ValueError("pass either optimizer or optimizer_state, not both")
    if optimizer is not None:
        optimizer_state = optimizer.state_dict()
    run_dir = Path(run_dir)
    final = run_dir / checkpoint_name(step)
    tmp = run_dir / f"{TMP_PREFIX}{final.name}"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        _clean_up_interrupted_saves(run_dir)
        tmp.mkdir()  # the user's umask applies (tempfile.mkdtemp would make it 0700)
        _write_model_files(tmp, model, model_state)
        state = {"step": step, **dict(trainer_state or {})}
        write_text(tmp / TRAINER_STATE_FILE, json.dumps(state, indent=2, sort_keys=True))
        if optimizer_state is not None:
            write_torch(tmp / OPTIMIZER_FILE, optimizer_state)
        if save_rng:
            write_torch(tmp / RNG_FILE, get_rng_state())
        if settings is not None:
            _write_settings(tmp, settings)
        if base is not None:
            write_text(tmp / BASE_FILE, json.dumps({"base": base}, indent=2))
        _write_checksums(tmp)
        durable.fsync_dir(tmp)
        _publish(tmp, final)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):
            raise durable.write_error(e, f"checkpoint {final}") from None
        raise
    if best is not None:
        best_record.write_best(run_dir, {**best, "step": step})
    if keep_last is not None and keep_last >= 1:
        prune_checkpoints(run_dir, keep_last, keep=final)
    return final


def _publish(tmp: Path, final: Path) -> None:
    """Rename the finished ``tmp`` to ``final``. An existing ``final`` (the same step saved again) is first
    renamed to ``.old-step_…``, which readers take for that step until the new one is in place, so a kill
    between the two renames still leaves that step loadable."""
    if not final.exists():
        os.replace(tmp, final)
        durable.fsync_dir(final.parent)
        return
    old = final.with_name(f"{_OLD_PREFIX}{final.name}")
    os.replace(final, old)
    os.replace(tmp, final)
    durable.fsync_dir(final.parent)
    shutil.rmtree(old, ignore_errors=True)


def prune_checkpoints(run_dir: str | os.PathLike, keep_last: int, keep: Path | None = None) -> list[Path]:
    """Delete all but the ``keep_last`` newest checkpoints, never ``keep`` nor the run's recorded best (see
    t2t.checkpoints.best); returns the deleted paths."""
    kept = _never_pruned(Path(run_dir), keep)
    deleted = []
    for path in list_checkpoints(run_dir)[:-keep_last]:
        if path.resolve() in kept:
            continue
        trash = path.with_name(f"{_TRASH_PREFIX}{path.name}")
        os.replace(path, trash)  # atomic: the checkpoint disappears whole, then its files go
        shutil.rmtree(trash, ignore_errors=True)
        deleted.append(path)
    return deleted


def _never_pruned(run_dir: Path, keep: Path | None) -> set[Path]:
    """``keep`` and the checkpoint the run records as its best, resolved."""
    found = [] if keep is None else [Path(keep)]
    best = best_record.best_step(run_dir)
    if best is not None:
        found.append(run_dir / checkpoint_name(best))
    return {path.resolve() for path in found}


def _write_model_files(folder: Path, model: T5, state: Mapping | None = None) -> None:
    """model.safetensors + config.json (the model's own part of a checkpoint)."""
    state = model.state_dict() if state is None else state
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state.items()}
    write_with(folder / MODEL_FILE, lambda p: save_file(tensors, p, {"format": "pt"}))
    write_text(folder / CONFIG_FILE, json.dumps(config_lib.to_dict(model.config), indent=2))


def _write_settings(folder: Path, settings: Mapping[str, Any]) -> None:
    """train_config.yaml, and modules.sha256 when ``settings`` carry module digests (an empty file would be no
    ``sha256sum -c`` file)."""
    settings = dict(settings)
    digests = settings.pop(MODULE_DIGESTS, None)
    write_text(folder / SETTINGS_FILE, yaml.safe_dump(_yaml_safe(settings), sort_keys=False))
    if digests:
        write_text(folder / MODULES_FILE, durable.format_checksums(digests))


def _write_checksums(folder: Path) -> None:
    checksums = {path.name: durable.sha256_of(path) for path in folder.iterdir()}
    write_text(folder / durable.CHECKSUMS_FILE, durable.format_checksums(checksums))


def _clean_up_interrupted_saves(run_dir: Path) -> None:
    """Leftovers of a save that was killed (the output dir is locked, so none is in progress now): temp and
    trash folders go; an ``.old-step_…`` goes back to its name unless the new copy made it."""
    for path in run_dir.glob(f"{TMP_PREFIX}step_*"):
        shutil.rmtree(path, ignore_errors=True)
    for path in run_dir.glob(f"{_TRASH_PREFIX}step_*"):
        shutil.rmtree(path, ignore_errors=True)
    for old in run_dir.glob(f"{_OLD_PREFIX}step_*"):
        final = old.with_name(old.name.removeprefix(_OLD_PREFIX))
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(old, final)


def base_reference(init_from: str, resumed_from: Path | None = None) -> str:
    """What a trained-only checkpoint names as its base: the base its run started from (recorded in
    ``resumed_from``, when resuming one), else a run dir's current latest checkpoint (so that training the
    base further does not change it) or a folder or file as an absolute path; a hub id as it is."""
    if resumed_from is not None and (resumed_from / BASE_FILE).is_file():
        return read_json(resumed_from / BASE_FILE, "base reference")["base"]
    path = Path(init_from)
    if not path.exists():
        return init_from  # a hub id
    latest = latest_checkpoint(path) if path.is_dir() and not (path / CONFIG_FILE).is_file() else None
    return str((latest or path).resolve())  # a t5x checkpoint file too


def _yaml_safe(obj: Any) -> Any:
    """Settings as YAML-safe builtins (tuples → lists, paths → strings)."""
    return json.loads(json.dumps(obj, default=str))


# ----------------------------------------------------------------------------------------------------------
# Finding checkpoints


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """The complete checkpoints in ``run_dir``, oldest step first (temp and trash folders are ignored; an
    ``.old-step_…`` stands for its step while a save of the same step is being published). A folder whose
    name does not give the step saved inside it is a T2TError; one deleted while it is listed (rotation by a
    running t2t-train) is left out."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found: dict[int, Path] = {}
    for path in sorted(run_dir.iterdir(), key=lambda p: p.name.startswith(_OLD_PREFIX)):
        match = _STEP_DIR.match(path.name)
        if not match or not path.is_dir() or int(match[1]) in found:
            continue
        missing = [name for name in REQUIRED_FILES if not (path / name).is_file()]
        if missing:
            if path.is_dir():
                log.warning("ignoring %s: it has no %s", path, ", ".join(missing))
            continue
        if _listed_step(path) is not None:
            found[int(match[1])] = path
    return [found[step] for step in sorted(found)]


def _listed_step(path: Path) -> int | None:
    """The step saved in step folder ``path``, checked against its name; None if it was deleted meanwhile."""
    try:
        return check_folder_name(path)
    except T2TError:
        if not path.is_dir():
            return None
        raise


def saved_step(folder: str | os.PathLike) -> int:
    """The step checkpoint ``folder`` holds: the ``step`` of its trainer_state.json."""
    file = Path(folder) / TRAINER_STATE_FILE
    step = read_json(file, "trainer state").get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise T2TError(f"trainer state {file} has step {step!r}, not a step number; the file was edited or is "
                       f"corrupt, so restore it or move {Path(folder).name} out of the run.")
    return step


def check_folder_name(folder: str | os.PathLike) -> int:
    """The step saved in ``folder``, which must be the step its ``step_*`` name says (when it has one)."""
    folder = Path(folder)
    step = saved_step(folder)
    named = named_step(folder)
    if named not in (None, step):
        raise T2TError(f"checkpoint folder {folder} holds step {step} (its {TRAINER_STATE_FILE}), not {named}; "
                       f"move it out of {folder.parent} or give it its own name {checkpoint_name(step)}.")
    return step


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint in ``run_dir``, or None."""
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """The training step saved in a step folder, or in a run dir's latest checkpoint; None for anything else
    (a Hugging Face folder or hub id)."""
    path = Path(path)
    if not path.is_dir():
        return None
    folder = path if is_checkpoint_dir(path) else latest_checkpoint(path)
    return check_folder_name(folder) if folder is not None else None


# ----------------------------------------------------------------------------------------------------------
# Loading


def load_checkpoint(path: str | os.PathLike, restore_rng: bool = True, verify: bool = True) -> dict:
    """The trainer state of checkpoint ``path`` (a step folder, or a run dir: its latest): ``step`` and whatever
    the trainer saved; the RNG states are restored when ``restore_rng`` and rng.pt exists. ``verify`` checks
    the files read against their checksums. The rest of a checkpoint is read as resuming reads it: the model
    with t2t.checkpoints.loading.load_model, the optimizer state with :func:`read_optimizer_state`."""
    path = _resolve_checkpoint_dir(Path(path))
    if verify:
        verify_checkpoint(path, [TRAINER_STATE_FILE] + [RNG_FILE] * restore_rng)
    state = read_json(path / TRAINER_STATE_FILE, "trainer state")
    if restore_rng and (path / RNG_FILE).is_file():
        set_rng_state(torch_load(path / RNG_FILE, "RNG state"), path / RNG_FILE)
    return state


def read_optimizer_state(path: str | os.PathLike, verify: bool = True) -> dict:
    """The optimizer state dict saved in checkpoint ``path`` (read with ``weights_only=True``)."""
    path = _resolve_checkpoint_dir(Path(path))
    if verify:
        verify_checkpoint(path, [OPTIMIZER_FILE])
    return torch_load(path / OPTIMIZER_FILE, "optimizer state")


def read_settings(path: str | os.PathLike, verify: bool = True) -> dict | None:
    """The resolved training settings saved beside checkpoint ``path`` (None if there are none)."""
    path = _resolve_checkpoint_dir(Path(path))
    if not (path / SETTINGS_FILE).is_file():
        return None
    if verify:
        verify_checkpoint(path, [SETTINGS_FILE])
    return config_lib.read_config_file(path / SETTINGS_FILE)


def read_module_digests(path: str | os.PathLike, verify: bool = True) -> dict[str, str] | None:
    """{module file name: sha256} of the modules the training of checkpoint ``path`` imported (None when it
    recorded none: checkpoints from before the record). A file not in ``sha256sum``'s format is one T2TError."""
    path = _resolve_checkpoint_dir(Path(path))
    file = path / MODULES_FILE
    if not file.is_file():
        return None
    if verify:
        verify_checkpoint(path, [MODULES_FILE])
    digests = durable.parse_checksums(file.read_text(errors="replace"))
    if digests is None:
        raise T2TError(f"module record {file} is not in sha256sum's format (a sha256 and a file name a line); the "
                       f"file was edited or is corrupt, so restore it from a copy.")
    return digests


def verify_checkpoint(path: str | os.PathLike, names: list[str] | None = None) -> None:
    """Check the files of checkpoint ``path`` (all, or ``names``) against the checksums recorded when it
    was saved (``sha256sum -c checksums.sha256`` in the folder does the same). A mismatch is a T2TError that
    names the newest checkpoint of the run that verifies.

    A checkpoint without checksums.sha256 is refused too: deleting or emptying the file must not turn the
    check off. That includes checkpoints saved by t2t versions that did not record checksums: the error
    says how to record them for files one trusts, or to load with ``verify_checkpoints: false``."""
    path = Path(path)
    file = path / durable.CHECKSUMS_FILE
    if not file.is_file():
        raise T2TError(f"checkpoint {path} has no {file.name}, so its files cannot be verified (it was deleted, "
                       f"or the checkpoint predates checksums); if you trust its files, record them with `cd "
                       f"{shlex.quote(str(path))} && sha256sum * > {file.name}`, or load it unchecked with --set "
                       f"verify_checkpoints=false (t2t-train, t2t-eval, t2t-predict).")
    problem = _checksum_problem(path, names)
    if problem:
        raise T2TError(f"{problem}; {_fallback(path)}.")


def _checksum_problem(path: Path, names: list[str] | None) -> str | None:
    file = path / durable.CHECKSUMS_FILE
    if not file.is_file():
        return f"checksum file {file} is missing"
    recorded = durable.parse_checksums(file.read_text(errors="replace"))
    if not recorded:
        return f"checksum file {file} is empty or corrupt"
    recorded.pop(durable.CHECKSUMS_FILE, None)  # listed by a `sha256sum *` run over an emptied file
    for name in recorded if names is None else names:
        target = path / name
        if name not in recorded:
            if target.exists():  # not written by the save: added (or hidden from the list) later
                return f"checkpoint file {target} is not listed in {file} (it was added after the save)"
            continue  # a file this save did not write (no optimizer, no RNG state)
        if not target.is_file():
            return f"checkpoint file {target} is missing"
        if durable.sha256_of(target) != recorded[name]:
            return f"checkpoint file {target} does not match the checksum recorded when it was saved (it is corrupt)"
    return None


def _fallback(path: Path) -> str:
    """What to do about corrupt checkpoint ``path``: resume from the newest older one that verifies."""
    run_dir = path.parent
    step = named_step(path)
    step = -1 if step is None else step
    for candidate in reversed(list_checkpoints(run_dir)):
        if named_step(candidate) < step and _checksum_problem(candidate, None) is None:
            return (f"the newest checkpoint that verifies is {candidate}: move {path.name} out of {run_dir} and "
                    f"run the same command again to resume from step {named_step(candidate)} (t2t-eval: pass "
                    f"--checkpoint {candidate})")
    return f"no older checkpoint in {run_dir} verifies, so restore the file from a copy or start a new run dir"


def named_step(path: str | os.PathLike) -> int | None:
    """The step a ``step_*`` folder's name says (None for any other name)."""
    match = _STEP_DIR.match(Path(path).name)
    return int(match[1]) if match else None


def is_checkpoint_dir(path: str | os.PathLike) -> bool:
    """Whether ``path`` is one checkpoint (a step_* folder), not a run dir holding them."""
    path = Path(path)
    return bool(_STEP_DIR.match(path.name)) or (path / TRAINER_STATE_FILE).exists()


def _resolve_checkpoint_dir(path: Path) -> Path:
    if not path.is_dir():
        raise T2TError(f"checkpoint {path} does not exist; pass a step_* folder or a run dir.")
    if is_checkpoint_dir(path):
        return path
    latest = latest_checkpoint(path)
    if latest is None:
        raise T2TError(f"{path} holds no complete step_* checkpoint; pass a checkpoint folder or a run dir.")
    return latest


# -- reading files, every failure a T2TError naming the file -----------------------------------------------


# ----------------------------------------------------------------------------------------------------------
# RNG states (weights_only-loadable: tensors, lists, numbers, strings)


def get_rng_state() -> dict:
    """torch (CPU and CUDA), numpy's global and python's ``random`` states as tensors and numbers."""
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    py_version, py_state, py_gauss = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {"bit_generator": np_name, "keys": torch.from_numpy(np_keys.astype(np.int64)),
                  "pos": int(np_pos), "has_gauss": int(np_has_gauss), "cached_gaussian": float(np_gauss)},
        "python": {"version": py_version, "state": torch.tensor(py_state, dtype=torch.int64),
                   "gauss_next": py_gauss},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict, path: Path | str = RNG_FILE) -> None:
    try:
        torch.set_rng_state(state["torch"])
        n = state["numpy"]
        np.random.set_state((n["bit_generator"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                             n["cached_gaussian"]))
        p = state["python"]
        random.setstate((p["version"], tuple(int(x) for x in p["state"].tolist()), p["gauss_next"]))
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as e:
        raise T2TError(f"RNG state file {path} is malformed ({error_summary(e)}); delete it to resume without "
                       f"restoring random states.") from None
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


# ----------------------------------------------------------------------------------------------------------
# Names that lived here before the conversions got their own modules (t2t.checkpoints.native.from_hf keeps working)

_MOVED = {"from_hf": "t2t.checkpoints.hf", "to_hf": "t2t.checkpoints.hf", "hf_key": "t2t.checkpoints.hf", "model_config_from_hf": "t2t.checkpoints.hf",
          "model_config_to_hf": "t2t.checkpoints.hf", "HF_MODEL_TYPES": "t2t.checkpoints.hf", "from_t5x": "t2t.checkpoints.t5x"}


def __getattr__(name: str):
    if name in _MOVED:
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module 't2t.checkpoints.native' has no attribute {name!r}")
