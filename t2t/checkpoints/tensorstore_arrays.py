"""The arrays t5x and orbax checkpoints keep beside their tree, read with TensorStore (optional: the
``tensorstore`` package, ``pip install 't2t[tensorstore]'``, imported only here and only when used).

Three layouts name such an array (t2t.checkpoints.t5x reads the tree; this module reads the arrays):

- t5x's own Checkpointer (t5x/checkpoints.py, ``_get_spec``): the ``checkpoint`` msgpack holds, for each
  partitioned parameter, a TensorStore spec with driver ``zarr`` and a kvstore path such as
  ``target.encoder.layers_0.mlp.wo.kernel``, relative to the checkpoint folder (gzip-compressed chunks).
- orbax's PyTreeCheckpointHandler without OCDBT: leaves ``PLACEHOLDER://<name>`` (older orbax also wrote
  ``AGGREGATED://``) in the ``checkpoint`` msgpack, or listed in ``_METADATA``, with a zarr folder ``<name>``.
- orbax with OCDBT (t5x's ``use_ocdbt``, orbax's default): one key-value database in the folder
  (``manifest.ocdbt``, ``d/``, per-process ``ocdbt.process_N/``) holding every array under its name; the
  tree is in ``_METADATA`` (``tree_metadata``, ``use_ocdbt``, ``use_zarr3``).

An orbax name joins the tree path with dots (orbax ``tree/utils.py``, ``get_param_names``). Reads refuse
missing chunks (``fill_missing_data_reads`` off): t5x and orbax write every chunk (zarr ``fill_value`` null,
orbax ``store_array_data_equal_to_fill_value``), so a missing one means a partial copy, not zeros.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Mapping

import numpy as np
import torch

from t2t.checkpoints.files import read_json
from t2t.errors import T2TError, error_summary

METADATA_FILE = "_METADATA"  # orbax's tree metadata
OCDBT_MANIFEST = "manifest.ocdbt"
PLACEHOLDER_PREFIXES = ("PLACEHOLDER://", "AGGREGATED://")
INSTALL = "pip install 't2t[tensorstore]'"


@dataclass(frozen=True)
class ArrayRef:
    """An array stored outside the tree: its kvstore name (relative to the checkpoint folder) and zarr
    driver (``zarr`` for zarr v2, ``zarr3``)."""

    name: str
    driver: str = "zarr"


def array_ref(leaf: Any, driver: str = "zarr") -> ArrayRef | None:
    """The ArrayRef a tree leaf stands for: a t5x TensorStore spec (a dict with ``driver`` and ``kvstore``)
    or an orbax placeholder string; None for anything else (an inline array, a subtree)."""
    if isinstance(leaf, str) and leaf.startswith(PLACEHOLDER_PREFIXES):
        return ArrayRef(leaf.split("://", 1)[1], driver)
    if isinstance(leaf, dict) and "driver" in leaf and isinstance(leaf.get("kvstore"), dict):
        name = leaf["kvstore"].get("path", leaf.get("path"))  # gs:// checkpoints kept the path beside the bucket
        return ArrayRef(str(name), str(leaf["driver"])) if name else None
    return None


@dataclass(frozen=True)
class Storage:
    """Where a checkpoint folder's arrays lie: one OCDBT database or a zarr folder each (orbax's
    ``use_ocdbt``; without ``_METADATA``, wherever an OCDBT manifest is), and the zarr driver of orbax's
    placeholders (``use_zarr3``)."""

    ocdbt: bool
    driver: str


def storage(folder: Path) -> Storage:
    metadata = _metadata(folder)
    return Storage(bool(metadata.get("use_ocdbt", (folder / OCDBT_MANIFEST).exists())),
                   "zarr3" if metadata.get("use_zarr3") else "zarr")


def read_orbax_tree(folder: Path) -> dict:
    """The tree (leaves are ArrayRefs) orbax lists in ``folder/_METADATA``; without that file (orbax before it
    wrote one), the arrays the OCDBT database in ``folder`` holds."""
    if not (folder / METADATA_FILE).is_file():
        return _listed_ocdbt_tree(folder)
    driver = storage(folder).driver
    tree: dict = {}
    try:
        for entry in _metadata(folder)["tree_metadata"].values():
            keys = [str(k["key"]) for k in entry["key_metadata"]]
            _insert(tree, keys, ArrayRef(".".join(keys), driver))
    except (KeyError, TypeError, AttributeError, IndexError) as e:
        raise T2TError(f"orbax metadata {folder / METADATA_FILE} has no tree_metadata with key_metadata entries "
                       f"({error_summary(e)} is missing or malformed); the file is damaged or from an orbax "
                       f"version t2t does not read.") from None
    return tree


def _metadata(folder: Path) -> dict:
    path = folder / METADATA_FILE
    return read_json(path, "orbax metadata") if path.is_file() else {}


def _listed_ocdbt_tree(folder: Path) -> dict:
    """Each array in the database is a key ``<name>/.zarray`` (zarr v2) or ``<name>/zarr.json`` (zarr3)."""
    ts = import_tensorstore()
    _check_manifest(folder)
    try:
        keys = ts.KvStore.open(_ocdbt_kvstore(folder)).result().list().result()
    except ValueError as e:
        raise _read_error(folder, "(the list of arrays)", True, e) from None
    tree: dict = {}
    for key in keys:
        name, _, last = key.decode().rpartition("/")
        if last in (".zarray", "zarr.json"):
            _insert(tree, name.split("."), ArrayRef(name, "zarr" if last == ".zarray" else "zarr3"))
    return tree


def _insert(tree: dict, keys: list[str], leaf: ArrayRef) -> None:
    for key in keys[:-1]:
        tree = tree.setdefault(key, {})
    tree[keys[-1]] = leaf


def read_arrays(folder: Path, refs: Mapping[str, ArrayRef], ocdbt: bool) -> dict[str, torch.Tensor]:
    """Each ref's array, from zarr folders under ``folder`` or (``ocdbt``) from its OCDBT database, as a
    tensor of its own dtype (bfloat16 as float32). Keys are kept; errors name the array and what is missing."""
    ts = import_tensorstore()
    if ocdbt:
        _check_manifest(folder)
    context = ts.Context()  # one cache for the database's manifest and b-tree nodes across arrays
    return {key: _read(ts, context, folder, ref, ocdbt) for key, ref in refs.items()}


def _check_manifest(folder: Path) -> None:
    if not (folder / OCDBT_MANIFEST).is_file():
        raise T2TError(f"checkpoint {folder} keeps its arrays in an OCDBT database but {OCDBT_MANIFEST} is "
                       f"missing; the copy is partial, so copy the whole checkpoint again.")


def import_tensorstore():
    try:
        import tensorstore
    except ImportError:
        raise T2TError(f"this checkpoint keeps its arrays in TensorStore (zarr or OCDBT) files, which need the "
                       f"tensorstore package; {INSTALL}.") from None
    return tensorstore


def _read(ts, context, folder: Path, ref: ArrayRef, ocdbt: bool) -> torch.Tensor:
    name = _checked_name(folder, ref.name)
    kvstore = {**_ocdbt_kvstore(folder), "path": f"{name}/"} if ocdbt else {"driver": "file", "path": f"{folder / name}/"}
    spec = {"driver": ref.driver, "kvstore": kvstore, "fill_missing_data_reads": False}
    try:
        return _to_tensor(ts.open(spec, open=True, read=True, context=context).result().read().result())
    except ValueError as e:
        raise _read_error(folder, name, ocdbt, e) from None


def _ocdbt_kvstore(folder: Path) -> dict:
    return {"driver": "ocdbt", "base": {"driver": "file", "path": f"{folder}/"}}


def _checked_name(folder: Path, name: str) -> str:
    """A stored name as a path inside ``folder`` (t5x and orbax write relative names; one that leaves the
    folder is refused rather than read from elsewhere)."""
    parts = PurePosixPath(name).parts
    if not parts or PurePosixPath(name).is_absolute() or ".." in parts:
        raise T2TError(f"checkpoint {folder} names an array outside its folder ({name!r}); t5x and orbax write "
                       f"names relative to the checkpoint, so the checkpoint file was altered.")
    return name


def _read_error(folder: Path, name: str, ocdbt: bool, e: ValueError) -> T2TError:
    """TensorStore's error as one sentence naming the missing piece: the array's folder, the file it names
    (a chunk, a zarr metadata file, a node of the OCDBT database), or the array absent from the database."""
    message = str(e).split(" [tensorstore_spec=")[0]
    if not message.startswith("NOT_FOUND"):
        return T2TError(f"array {name} of checkpoint {folder} cannot be read ({error_summary(ValueError(message))}); "
                        f"the copy is partial or damaged, so copy the whole checkpoint again.")
    files = [f for f in re.findall(r'local file "([^"]+)"', message) if not f.endswith("/")]  # not the database
    if not ocdbt and not (folder / name).is_dir():
        missing = f"the array folder {folder / name}"
    elif files:
        missing = f"{files[-1]}, part of the array {name}"
    else:
        missing = f"the array {name} in its OCDBT database" if ocdbt else f"the zarr metadata of array {name}"
    return T2TError(f"checkpoint {folder} lacks {missing}; the copy is partial, so copy the whole checkpoint again.")


def _to_tensor(array: np.ndarray) -> torch.Tensor:
    if array.dtype.kind not in "fiub":  # ml_dtypes' bfloat16 is kind "V": numpy converts it exactly
        array = array.astype(np.float32)
    return torch.from_numpy(np.ascontiguousarray(array))
