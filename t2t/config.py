"""Settings as dataclasses, overridden by YAML/JSON files in ``configs/`` and ``key=value`` flags.

Unknown keys and values of the wrong type are rejected with one sentence naming the key; the resolved
settings are plain dicts again (``to_dict``) so they can be written beside every checkpoint.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import math
import re
import types
import typing
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, TypeVar, Union

import yaml

from t2t.errors import T2TError

T = TypeVar("T")

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
if not CONFIG_DIR.is_dir():  # running from a source checkout: configs/ sits beside t2t/
    CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


def read_config_file(path: str | Path) -> dict:
    """Read a YAML or JSON mapping."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise T2TError(f"cannot read config file {path}: {e.strerror}; check the path.") from None
    except UnicodeDecodeError as e:
        raise T2TError(f"config file {path} is not UTF-8 text (byte {e.object[e.start]:#x} at offset {e.start}); "
                       f"save it as UTF-8.") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as e:
        raise T2TError(f"config file {path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'} "
                       f"({str(e).splitlines()[0]}); fix its syntax.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise T2TError(f"config file {path} must hold a mapping of setting names to values.")
    return data


def find_config(name_or_path: str | Path, kind: str) -> Path:
    """A config file given by path, or by name in ``configs/<kind>/`` (``t5-small`` → models/t5-small.yaml)."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml", ".json") and path.exists():
        return path
    for suffix in (".yaml", ".yml", ".json"):
        candidate = CONFIG_DIR / kind / f"{name_or_path}{suffix}"
        if candidate.exists():
            return candidate
    known = ", ".join(config_names(kind)) or "none"
    raise T2TError(f"no {kind} config {str(name_or_path)!r}: give a file path or one of: {known}.")


def config_names(kind: str) -> list[str]:
    folder = CONFIG_DIR / kind
    return sorted(p.stem for p in folder.glob("*.y*ml")) + sorted(p.stem for p in folder.glob("*.json"))


def parse_overrides(pairs: Iterable[str]) -> dict:
    """``["optim.lr=1e-3", "steps=10"]`` → ``{"optim": {"lr": 1e-3}, "steps": 10}``; values parsed as YAML."""
    values = []
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise T2TError(f"setting {pair!r} is not of the form key=value.")
        values.append((key.strip(), _override_value(key.strip(), raw)))
    return nest(values)


def _override_value(key: str, raw: str) -> Any:
    """``raw`` as YAML; text YAML cannot read (``*.bias``: ``*`` starts a YAML alias) is taken as a string,
    unless it was meant as a list or mapping."""
    try:
        return yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError as e:
        if raw.lstrip().startswith(("[", "{")):
            raise T2TError(f"setting {key}={raw} is not a valid YAML list or mapping ({str(e).splitlines()[0]}); "
                           f"write it as [a, b] or quote the value.") from None
        return raw


def nest(values: Iterable[tuple[str, Any]]) -> dict:
    """``[("optim.lr", 1e-3), ("steps", 10)]`` → ``{"optim": {"lr": 1e-3}, "steps": 10}``. A name given both
    a string and fields (``model=t5-tiny``, ``model.num_layers=3``) becomes ``{"preset": ..., fields}``, as
    in :func:`merge`."""
    result: dict = {}
    for key, value in values:
        node = result
        *parents, leaf = key.split(".")
        for depth, part in enumerate(parents):
            child = node.setdefault(part, {})
            if isinstance(child, str):
                child = node[part] = {PRESET: child}
            elif not isinstance(child, dict):
                raise T2TError(f"setting {'.'.join(parents[:depth + 1])} was given the value {child!r} and also "
                               f"the field {key}; give one or the other.")
            node = child
        if isinstance(node.get(leaf), dict) and isinstance(value, str):
            value = {**node[leaf], PRESET: value}
        elif isinstance(node.get(leaf), dict):
            raise T2TError(f"setting {key} was given fields and also the value {value!r}; give one or the other.")
        node[leaf] = value
    return result


PRESET = "preset"
_FIELD_COMMENT = re.compile(r"^\s+(\w+)\s*:[^#]*#\s*(.*\S)\s*$")


def merge(base: dict, override: dict) -> dict:
    """Recursive dict merge; ``override`` wins.

    A mapping merged over a string keeps the string as the mapping's ``preset``: ``model: t5-tiny`` from a
    recipe and ``--set model.num_layers=3`` make ``{"preset": "t5-tiny", "num_layers": 3}``.
    """
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), str):
            out[key] = {PRESET: out[key], **value}
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


class SettingError(T2TError):
    """A setting whose value is out of range; ``key`` is its name within its settings class."""

    def __init__(self, key: str, requirement: str, value: Any):
        self.key, self.requirement, self.value = key, requirement, value
        super().__init__(f"setting {key} must be {requirement}, got {value!r}; change it in your config file, "
                         f"flag or --set.")


def check(settings: Any, *, positive: Iterable[str] = (), non_negative: Iterable[str] = (),
          fraction: Iterable[str] = ()) -> None:
    """Range checks for a settings dataclass, called from its ``__post_init__`` (so a config file, a flag and
    Python code are held to the same rules): every float field must be finite (inf passes "> 0"), and each
    named field must be > 0, >= 0, or in [0, 1). None passes (it means "not set")."""
    rules = [(tuple(positive), "> 0", lambda v: v > 0), (tuple(non_negative), ">= 0", lambda v: v >= 0),
             (tuple(fraction), "in [0, 1)", lambda v: 0 <= v < 1)]
    ranges = {name: requirement for names, requirement, _ in rules for name in names}
    for name in float_fields(type(settings)):
        require(settings, name, f"a finite number {ranges.get(name, '')}".rstrip(), math.isfinite)
    for names, requirement, holds in rules:
        for name in names:
            require(settings, name, requirement, holds)


def require(settings: Any, name: str, requirement: str, holds: Callable[[Any], bool]) -> None:
    """Field ``name`` (each value of a list or tuple) must satisfy ``holds``, or be None."""
    value = getattr(settings, name)
    values = value if isinstance(value, (list, tuple)) else (value,)
    if value is not None and not all(holds(v) for v in values):
        raise SettingError(name, requirement, value)


@functools.cache
def float_fields(cls: type) -> tuple[str, ...]:
    """The fields of settings dataclass ``cls`` that hold floats (``float``, ``float | None``,
    ``tuple[float, float]``)."""
    hints = typing.get_type_hints(cls)
    return tuple(f.name for f in dataclasses.fields(cls)
                 if hints[f.name] is float or float in typing.get_args(hints[f.name]))


def given(settings: Any, names: Iterable[str]) -> list[str]:
    """Those of ``names`` whose value in the settings dataclass differs from its default: what a user set,
    for the checks that refuse a setting the rest of the settings leave unread."""
    fields = {f.name: f for f in dataclasses.fields(settings)}

    def default(field: dataclasses.Field) -> Any:
        return field.default_factory() if field.default is dataclasses.MISSING else field.default

    return [name for name in names if getattr(settings, name) != default(fields[name])]


def from_dict(cls: type[T], data: dict, where: str = "") -> T:
    """Build dataclass ``cls`` from ``data``, rejecting unknown keys and values of the wrong type."""
    if not isinstance(data, dict):
        raise T2TError(f"setting {where or cls.__name__} must be a mapping, got {data!r}.")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields), key=str)  # YAML keys may be numbers beside names
    if unknown:
        prefix = f"{where}." if where else ""
        raise T2TError(f"unknown setting {prefix}{unknown[0]} for {cls.__name__}; known settings: "
                       f"{', '.join(sorted(fields))}.")
    kwargs = {name: _coerce(hints[name], value, f"{where}.{name}" if where else name)
              for name, value in data.items()}
    try:
        return cls(**kwargs)
    except SettingError as e:
        if not where:
            raise
        raise SettingError(f"{where}.{e.key}", e.requirement, e.value) from None


def _coerce(hint: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, key)
            except T2TError:
                continue
        raise _type_error(key, hint, value)
    if origin is Literal:
        if value in args:
            return value
        raise T2TError(f"setting {key} must be one of {', '.join(map(repr, args))}, got {value!r}.")
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value, key) if isinstance(value, dict) else _expect(hint, value, key)
    if origin in (list, tuple):
        return _coerce_list(hint, value, key)
    if origin is dict:
        if not isinstance(value, dict):
            raise _type_error(key, hint, value)
        return dict(value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str):  # YAML reads 1e-3 as a string
        try:
            return float(value)
        except ValueError:
            raise _type_error(key, hint, value) from None
    return _expect(hint, value, key)


def _coerce_list(hint: Any, value: Any, key: str) -> list | tuple:
    """A list or tuple setting; one value given to a list setting (``--set transfer.freeze=encoder.*``) is a
    one-element list; a tuple of fixed length (``adam_betas``) needs that many values."""
    one_value = typing.get_origin(hint) is list and value is not None and not isinstance(value, (list, tuple, dict))
    if one_value:
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise _type_error(key, hint, value)
    args = typing.get_args(hint)
    fixed = typing.get_origin(hint) is tuple and args and args[-1] is not Ellipsis
    if fixed and len(value) != len(args):
        raise _type_error(key, hint, list(value))
    items_hints = args if fixed else [args[0] if args else Any] * len(value)
    try:
        items = [_coerce(item, v, f"{key}[{i}]") for i, (item, v) in enumerate(zip(items_hints, value))]
    except T2TError:
        if one_value:
            raise _type_error(key, hint, value[0]) from None
        raise
    return tuple(items) if typing.get_origin(hint) is tuple else items


def _expect(hint: type, value: Any, key: str) -> Any:
    if isinstance(hint, type) and isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
        return value
    raise _type_error(key, hint, value)


def _type_error(key: str, hint: Any, value: Any) -> T2TError:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        item = type_name(args[0]) if args else "values"
        return T2TError(f"setting {key} must be a list of {item}: one value, or several as [v1, v2] (--set "
                        f"{key}='[v1, v2]', or {key}: [v1, v2] in a file), got {value!r}.")
    if origin is tuple:
        return T2TError(f"setting {key} must be a list of {len(args)} values, [{', '.join(map(type_name, args))}] "
                        f"(--set {key}='[v1, v2]', or {key}: [v1, v2] in a file), got {value!r}.")
    return T2TError(f"setting {key} must be of type {type_name(hint)}, got {value!r}.")


def type_name(hint: Any) -> str:
    """``int``, ``str | None``, ``list[str]``: a type as settings files and docs/settings.md write it. (On
    Python 3.10 ``list[str]`` is an instance of ``type`` too, so a hint with arguments never goes by its name.)"""
    plain_class = isinstance(hint, type) and not typing.get_args(hint)
    return hint.__name__ if plain_class else str(hint).replace("typing.", "")


def load(cls: type[T], files: Iterable[str | Path] = (), overrides: Iterable[str] = (),
         base: dict | None = None, given: dict | None = None, kind: str = "recipes") -> T:
    """Settings ``cls``: its defaults ← ``base`` (a run's settings) ← each file in order (a path, or a name in
    ``configs/<kind>``) ← ``given`` (``{dotted key: value}``, what a command's flags set) ← ``key=value``
    overrides (``--set``). Every command resolves its settings here."""
    data = dict(base or {})
    for file in files:
        data = merge(data, with_linked(cls, read_config_file(find_config(file, kind))))
    data = merge(data, with_linked(cls, nest((given or {}).items())))
    data = merge(data, with_linked(cls, parse_overrides(overrides)))
    return from_dict(cls, data)


def with_linked(cls, layer: dict) -> dict:
    """One layer of settings (a file, the flags, ``--set``) with what its keys also set: ``cls.LINKED``
    maps a dotted key to a top-level setting that overrides it (``{"model.dropout_rate": "dropout_rate"}``),
    so that of a recipe's ``dropout_rate`` and a later ``--set model.dropout_rate`` the later wins. One
    layer giving both different values is one sentence (a target of None, as a run's train_config.yaml
    records one not set, gives nothing)."""
    for key, target in getattr(cls, "LINKED", {}).items():
        *parents, leaf = key.split(".")
        node = layer
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node:
            continue
        if layer.get(target) is not None and layer[target] != node[leaf]:
            raise T2TError(f"settings {target} {layer[target]!r} and {key} {node[leaf]!r} are given together and "
                           f"set the same thing; give one of them.")
        layer = {**layer, target: node[leaf]}
    return layer


def describe(cls, key: str) -> tuple[Any, Any, str]:
    """The type, default and comment of setting ``key`` of ``cls``: dotted for nested settings
    (``optimizer.learning_rate``); a key inside a mapping setting (``model.preset``) is described by that
    setting. What the reference lists and what the commands' flags say in their help."""
    head, _, rest = key.partition(".")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if head not in fields:
        raise KeyError(f"{cls.__name__} has no setting {head!r}")  # a flag declared for a missing field
    hint = typing.get_type_hints(cls)[head]
    if rest and dataclasses.is_dataclass(hint):
        return describe(hint, rest)
    f = fields[head]
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return hint, default, field_comments(cls).get(head, "")


@functools.cache
def field_comments(cls) -> dict[str, str]:
    """``{field: comment}`` from the ``# ...`` written beside each field in the class bodies (subclass wins)."""
    comments: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            for line in inspect.getsource(klass).splitlines():
                match = _FIELD_COMMENT.match(line)
                if match:
                    comments[match[1]] = match[2]
    return comments


def to_dict(obj: Any) -> dict:
    """A dataclass as a plain, JSON-serialisable dict."""
    return json.loads(json.dumps(dataclasses.asdict(obj), default=str))
