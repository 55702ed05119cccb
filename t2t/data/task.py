"""Tasks, mixtures and their registries.

A :class:`Task` is a frozen description of one text-to-text dataset:

    source                  → raw example dicts in source order (``t2t.data.sources``)
    preprocessors           → text stage, plain ``fn(example) -> example`` functions (prefix, "key: value", label word);
                              one may return a list of examples instead: empty drops it, several expand it
    output_features         → which string fields are tokenized, with which vocabulary, EOS or not
    tokenized_preprocessors → deterministic stage after tokenization, cached with the tokens:
                              ``fn(examples, *, vocab, sequence_length) -> examples`` over the whole split
                              (T5's reduce_concat_tokens + split_tokens, see ``t2t.data.preprocessors.concat_and_split``)
    token_preprocessors     → random stage, run once per draw: ``fn(features, rng, *, vocab, sequence_length) -> features``
                              (span corruption); ``rng`` is derived from (seed, task name, epoch, draw index)
    postprocess_fn          → ``fn(text, example=None, is_target=False)`` turns decoded text into a metric value
    metric_fns              → ``fn(targets, predictions) -> {name: value}``
    rank_choices            → the target strings rank classification scores (``t2t-eval --rank-classification``):
                              the label words, or ``fn(example) -> strings`` when they differ per example
                              (multiple choice); the best-scoring one is the prediction
    sequence_length         → T5's fine-tuning lengths for the task, ``{"inputs": 512, "targets": 84}`` (its
                              ``models/gin/sequence_lengths/*.gin``): training uses them when the user sets
                              none (``sequence_length_for``), evaluation decodes at most the targets length

A :class:`Mixture` is a named list of tasks with sampling rates (a number, or a function of the task such as
``t2t.data.mixing.rate_num_examples()``).

``TASKS`` and ``MIXTURES`` are :class:`t2t.registry.Registry` objects; ``load_modules`` imports the built-in
task/mixture modules (every module of the ``t2t.tasks`` and ``t2t.mixtures`` packages), the modules that installed
packages name under the ``t2t.tasks`` entry-point group, and any user modules or ``.py`` files.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import pkgutil
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from t2t.data.mixing import is_proportional, with_rate_options
from t2t.data.preprocessors import FieldError
from t2t.data.sources import DataNotFoundError
from t2t.data.tokenized import eval_examples
from t2t.errors import T2TError
from t2t.registry import Registry, unknown_name_message

# The packages whose modules `t2t-train`, `t2t-eval`, `t2t-show` and `t2t-tasks` load before looking a name up:
# tasks first, so that a mixture module finds its tasks registered.
BUILTIN_PACKAGES = ("t2t.tasks", "t2t.mixtures")
# The entry-point group through which an installed package ships task and mixture modules: each entry point's
# value names a module that registers them when imported (e.g. ``my_tasks = my_package.tasks``).
ENTRY_POINT_GROUP = "t2t.tasks"


@dataclass(frozen=True)
class Feature:
    """One output feature: ``vocabulary=None`` means the run's vocabulary (``--vocab``)."""

    vocabulary: Any = None
    add_eos: bool = True
    required: bool = True


def default_output_features() -> dict[str, Feature]:
    """T5's features: ``inputs`` (optional, e.g. made by span corruption later) and ``targets``, both with EOS."""
    return {"inputs": Feature(required=False), "targets": Feature()}


@dataclass(frozen=True)
class Task:
    """A dataset turned into ``{"inputs": str, "targets": str}`` examples (see the module docstring)."""

    name: str
    source: Any  # t2t.data.sources.Source
    preprocessors: Sequence[Callable] = ()
    output_features: Mapping[str, Feature] = field(default_factory=default_output_features)
    tokenized_preprocessors: Sequence[Callable] = ()
    token_preprocessors: Sequence[Callable] = ()
    postprocess_fn: Callable | None = None
    metric_fns: Sequence[Callable] = ()
    description: str = ""
    rank_choices: Sequence[str] | Callable[[Mapping], Sequence[str]] = ()
    sequence_length: Mapping[str, int] | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise T2TError(f"a task name must be a non-empty string, got {self.name!r}.")
        for attr in ("preprocessors", "tokenized_preprocessors", "token_preprocessors", "metric_fns"):
            value = getattr(self, attr)
            if callable(value) or isinstance(value, (str, bytes)):
                value = (value,)
            value = tuple(value)
            for fn in value:
                if not callable(fn):
                    raise T2TError(f"task {self.name!r}: {attr} must hold functions, got {fn!r}.")
            object.__setattr__(self, attr, value)
        if isinstance(self.rank_choices, (str, bytes)) or not (callable(self.rank_choices) or all(
                isinstance(c, str) for c in self.rank_choices)):
            raise T2TError(f"task {self.name!r}: rank_choices must be label strings or a function of the example, "
                           f"got {self.rank_choices!r}.")
        if not callable(self.rank_choices):
            object.__setattr__(self, "rank_choices", tuple(self.rank_choices))
        if not isinstance(self.output_features, Mapping) or not self.output_features:
            raise T2TError(f"task {self.name!r}: output_features must map feature names to t2t.data.task.Feature.")
        for key, feat in self.output_features.items():
            if not isinstance(feat, Feature):
                raise T2TError(f"task {self.name!r}: output feature {key!r} must be a t2t.data.task.Feature, "
                               f"got {feat!r}.")
        if self.sequence_length is not None and not (
                isinstance(self.sequence_length, Mapping) and set(self.sequence_length) == {"inputs", "targets"}
                and all(_is_plain_number(v) and int(v) == v and v > 0 for v in self.sequence_length.values())):
            raise T2TError(f"task {self.name!r}: sequence_length must be {{'inputs': N, 'targets': M}} with positive "
                           f"whole numbers, got {self.sequence_length!r}.")
        if not hasattr(self.source, "load"):
            raise T2TError(f"task {self.name!r}: source must be a t2t.data.sources source (with .load(split, "
                           f"data_dir)), got {self.source!r}.")

    # ---------------------------------------------------------------- the text stage
    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.source.splits)

    def check_split(self, split: str) -> None:
        splits = self.splits
        if splits and split not in splits:
            close = difflib.get_close_matches(split, splits, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise T2TError(f"task {self.name!r} has no split {split!r}{hint}; its splits are "
                           f"{', '.join(splits)}.")

    def has_split(self, split: str, data_dir: str | os.PathLike | None = None) -> bool:
        """Whether ``split`` is one of the task's splits and its data can be found (a quick local check where
        the source has one, else one load attempt; the answer is remembered per process)."""
        if self.splits and split not in self.splits:
            return False
        key = (id(self), split, str(data_dir))
        if key not in _AVAILABLE:
            available = getattr(self.source, "available", None)
            answer = available(split, data_dir) if callable(available) else None
            if answer is None:
                try:
                    iter(self.source.load(split, data_dir))
                    answer = True
                except DataNotFoundError:
                    answer = False
            _AVAILABLE[key] = (self, answer)
        return _AVAILABLE[key][1]

    def raw_examples(self, split: str, data_dir: str | os.PathLike | None = None) -> Iterator[dict]:
        """The source's raw example dicts in source order."""
        self.check_split(split)
        return iter(self.source.load(split, data_dir))

    def preprocess_all(self, example: Mapping) -> list[dict]:
        """Run the text preprocessors on one raw example: the examples it becomes (zero, one or many), in order,
        each keeping the raw fields underneath.

        A preprocessor returns one example dict, or a list (or other iterable) of them: empty drops the
        example (a filter), several expand it (ReCoRD's one example per answer); each result goes through the
        next preprocessor. Deterministic functions of the example keep the expanded split, and so a resumed
        training stream, exact.
        """
        current = [example]
        for fn in self.preprocessors:
            current = [out for ex in current for out in self._outputs(fn, fn(ex))]
        return [{**example, **out} for out in current]

    def preprocess(self, example: Mapping) -> dict:
        """The one example that ``example`` becomes; for tasks whose preprocessors may drop or expand examples
        use ``preprocess_all``."""
        outs = self.preprocess_all(example)
        if len(outs) != 1:
            raise T2TError(f"task {self.name!r} turns this example into {len(outs)} examples; use "
                           f"task.preprocess_all(example) for tasks that drop or expand examples.")
        return outs[0]

    def _outputs(self, fn: Callable, result: Any) -> list[Mapping]:
        if isinstance(result, Mapping):
            return [result]
        if isinstance(result, (str, bytes)) or not isinstance(result, Iterable):
            raise T2TError(f"task {self.name!r}: text preprocessor {_fn_name(fn)} returned "
                           f"{type(result).__name__}, not an example dict or a list of them; make it return "
                           f"the example (or a list: empty to drop it, several to expand it).")
        outs = list(result)
        for out in outs:
            if not isinstance(out, Mapping):
                raise T2TError(f"task {self.name!r}: text preprocessor {_fn_name(fn)} returned a list holding "
                               f"{type(out).__name__}, not example dicts; make it return dicts.")
        return outs

    def text_examples(self, split: str, data_dir: str | os.PathLike | None = None) -> Iterator[dict]:
        """Preprocessed examples in source order: raw fields plus ``inputs``/``targets`` strings; an example
        that a preprocessor expands gives its examples one after the other.

        An empty split is an error (a silently empty task would just never be sampled). An example the
        preprocessors cannot read is one sentence naming it by file and line where the source can tell.
        """
        read = kept = 0
        for example in self.raw_examples(split, data_dir):
            try:  # the preprocessors only: reading raises its own errors (a UnicodeDecodeError is a ValueError)
                outs = self.preprocess_all(example)
            except FieldError as e:
                raise T2TError(f"task {self.name!r}: {self.example_location(split, read, data_dir)} {e.problem}; "
                               f"{e.fix}.") from None
            except PREPROCESSOR_ERRORS as e:
                raise preprocessing_failure(self, self.example_location(split, read, data_dir), example, e) from None
            read += 1
            for out in outs:
                kept += 1
                yield out
        if read == 0:
            raise T2TError(f"split {split!r} of task {self.name!r} is empty ({describe_source(self.source)}); "
                           f"check the data files.")
        if kept == 0:
            raise T2TError(f"the preprocessors of task {self.name!r} drop all {read} examples of split "
                           f"{split!r}; check the data and the filters.")

    def example_location(self, split: str, index: int, data_dir: str | os.PathLike | None = None) -> str:
        """Example ``index`` of ``split`` as an error names it: its file and line where the source can tell
        (``Source.locate``), else its place in the split."""
        locate = getattr(self.source, "locate", None)
        location = locate(split, index, data_dir) if callable(locate) else None
        return location or f"example {index} of split {split!r} (counting from 0 in the data's order)"

    # ---------------------------------------------------------------- sizes
    def known_num_examples(self, split: str) -> int | None:
        """The split's size if the source declares it (no data is read)."""
        sizes = getattr(self.source, "num_examples", None)
        return sizes(split) if callable(sizes) else None

    def num_input_examples(self, split: str = "train", data_dir: str | os.PathLike | None = None) -> int:
        """The split's size: declared by the source, else counted by reading it."""
        known = self.known_num_examples(split)
        if known is not None:
            return known
        return sum(1 for _ in self.raw_examples(split, data_dir))

    # ---------------------------------------------------------------- evaluation and postprocessing
    def examples(self, split: str, vocab, data_dir: str | os.PathLike | None = None,
                 sequence_length: Mapping[str, int] | None = None, max_examples: int | None = None) -> list[dict]:
        """Tokenized examples in source order for evaluation (no shuffling, no random preprocessors).

        Each dict has ``inputs``/``targets`` (np.int64 ids, EOS appended where the feature says so),
        ``inputs_pretokenized``/``targets_pretokenized`` and the raw fields. ``sequence_length`` is only
        needed by tasks with ``tokenized_preprocessors`` (e.g. chunking a corpus); ``max_examples`` reads
        only the first ones.
        """
        return eval_examples(self, split, vocab, data_dir=data_dir, sequence_length=sequence_length,
                             max_examples=max_examples)

    def rank_choices_for(self, example: Mapping) -> list[str]:
        """The target strings rank classification scores for ``example`` (see ``rank_choices``)."""
        choices = self.rank_choices(example) if callable(self.rank_choices) else self.rank_choices
        choices = list(choices or ())
        if not choices:
            raise T2TError(f"task {self.name!r} has no label strings to rank for an example; give the task "
                           f"rank_choices or evaluate it by generation.")
        return choices

    def postprocess(self, text: str, example: Mapping | None = None, is_target: bool = False) -> Any:
        if self.postprocess_fn is None:
            return text
        return self.postprocess_fn(text, example=example, is_target=is_target)


@dataclass(frozen=True)
class Mixture:
    """Tasks sampled together. ``tasks``: ``[(task_or_name, rate), ...]``, ``{name: rate}`` or bare names
    (rate ``default_rate``); a rate is a number or a function ``fn(task) -> float``.

    A member may itself be a mixture (by name or object, with a number as its rate): as in seqio, each of its
    tasks then gets ``rate × its rate there / that mixture's total rate``, and a task reached twice gets the
    sum. Members are looked up by name when the mixture is used, so they may be registered after it.
    """

    name: str
    tasks: Any
    default_rate: Any = 1.0

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise T2TError(f"a mixture name must be a non-empty string, got {self.name!r}.")
        items = self.tasks.items() if isinstance(self.tasks, Mapping) else self.tasks
        members: list[tuple[str, Any]] = []
        for item in items:
            if isinstance(item, (tuple, list)) and len(item) == 2:
                member, rate = item
            else:
                member, rate = item, self.default_rate
            name = member.name if isinstance(member, (Task, Mixture)) else member
            if not isinstance(name, str):
                raise T2TError(f"mixture {self.name!r}: member {member!r} must be a task or mixture (or its name).")
            if not (callable(rate) or _is_plain_number(rate)) or (_is_plain_number(rate) and rate < 0):
                raise T2TError(f"mixture {self.name!r}: the rate of {name!r} must be a non-negative number "
                               f"or a function of the task, got {rate!r}.")
            if name in dict(members):
                raise T2TError(f"mixture {self.name!r} lists task {name!r} twice; list it once.")
            members.append((name, rate))
        if not members:
            raise T2TError(f"mixture {self.name!r} has no tasks; give at least one (task, rate) pair.")
        object.__setattr__(self, "tasks", tuple(members))

    @property
    def task_names(self) -> list[str]:
        """The tasks sampled, in order: the members' and, in their place, those of member mixtures."""
        return [name for name, _ in self.task_rates()]

    def task_rates(self, maximum: float | None = None, temperature: float | None = None,
                   _outer: tuple[str, ...] = ()) -> list[tuple[str, Any]]:
        """``(task name, rate)`` for every task sampled, member mixtures expanded (see the class docstring);
        a rate is a number or a function of the task, as in ``tasks``. ``maximum`` (K) and ``temperature``
        (T) replace those of the examples-proportional rates (§3.5.2; ``t2t.data.mixing.with_rate_options``)."""
        if self.name in _outer:
            raise T2TError(f"mixture {self.name!r} contains itself (through {' -> '.join(_outer)}); remove the "
                           f"loop.")
        parts: dict[str, list] = {}
        for name, rate in self.tasks:
            load_builtin_modules()
            if name in TASKS or name not in MIXTURES:
                parts.setdefault(TASKS.resolve(name) if name in TASKS else name, []).append(
                    with_rate_options(rate, maximum, temperature))
                continue
            if not _is_plain_number(rate):
                raise T2TError(f"mixture {self.name!r}: member mixture {name!r} needs a number as its rate, got "
                               f"{rate!r}.")
            inner = MIXTURES.get(name)
            for task_name, _ in inner.task_rates(maximum, temperature, _outer + (self.name,)):
                parts.setdefault(task_name, []).append(_share_of(inner, task_name, rate, maximum, temperature))
        return [(name, rates[0] if len(rates) == 1 else _sum_of(rates)) for name, rates in parts.items()]

    def proportional(self) -> bool:
        """Whether any of its rates (member mixtures' included) is examples-proportional, so that §3.5.2's
        limit K and temperature T (``task_rates``' ``maximum`` and ``temperature``) change something."""
        load_builtin_modules()
        return any(is_proportional(rate) or (name not in TASKS and name in MIXTURES
                                             and MIXTURES.get(name).proportional())
                   for name, rate in self.tasks)

    def rates(self, data_dir: str | os.PathLike | None = None, maximum: float | None = None,
              temperature: float | None = None) -> dict[str, float]:
        """Each task's (unnormalised) rate; function rates are called with the Task (K and T: ``task_rates``)."""
        out = {}
        for name, rate in self.task_rates(maximum, temperature):
            value = rate_value(rate, get_task(name) if callable(rate) else None, data_dir)
            if not value >= 0:
                raise T2TError(f"mixture {self.name!r}: the rate of {name!r} came out as {value}; "
                               f"rates must be non-negative.")
            out[name] = value
        return out


_AVAILABLE: dict = {}

# What a text preprocessor raises on an example without the fields (or types) it expects; T2TError passes as is.
PREPROCESSOR_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError)


def preprocessing_failure(task: Task, what: str, example: Mapping, error: Exception) -> T2TError:
    """One sentence for a text preprocessor of ``task`` that raised ``error`` (one of ``PREPROCESSOR_ERRORS``)
    on ``example`` (``what`` names it: "example 3 of split 'train'"): the error, the fields the example has
    (None ones flagged: a JSON-lines row without a field has it as None) and the fix."""
    said = (str(error).strip().splitlines() or [""])[0][:200]
    reason = f"{type(error).__name__}: {said}" if said else type(error).__name__
    has = f"the example has fields {', '.join(map(str, example))}" if example else "the example has no fields"
    nones = [str(k) for k, v in example.items() if v is None]
    if nones:
        has += (f", of which {', '.join(nones)} {'is' if len(nones) == 1 else 'are'} None (a field missing from a "
                f"JSON-lines file reads as None)")
    return T2TError(f"task {task.name!r} cannot preprocess {what}: {reason}; {has}; fix that example in the data "
                    f"or make the preprocessors handle it.")


def _share_of(inner: Mixture, task_name: str, rate: float, maximum: float | None, temperature: float | None):
    """The rate a member mixture with ``rate`` passes on to one of its tasks (seqio's ``Mixture.get_rate``)."""

    def share(task, data_dir=None) -> float:
        rates = inner.rates(data_dir, maximum, temperature)
        total = sum(rates.values())
        return rate * rates[task_name] / total if total > 0 else 0.0

    share.takes_data_dir = True
    share.__name__ = f"{rate:g} x share in {inner.name}"
    return share


def _sum_of(rates: list):
    """One rate for a task reached several ways: the sum of its rates."""

    def total(task, data_dir=None) -> float:
        return sum(rate_value(rate, task, data_dir) for rate in rates)

    total.takes_data_dir = True
    total.__name__ = " + ".join(getattr(r, "__name__", repr(r)) for r in rates)
    return total


def rate_value(rate, task: Task | None, data_dir=None) -> float:
    """A mixing rate's value for ``task``: the number, or the function called with the task (and the data dir
    when the function takes it)."""
    if not callable(rate):
        return float(rate)
    return float(rate(task, data_dir=data_dir) if _takes_data_dir(rate) else rate(task))


# ---------------------------------------------------------------------------------------------- registries

TASKS: Registry[Task] = Registry("task")
MIXTURES: Registry[Mixture] = Registry("mixture")


def register_task(task: Task, aliases: Iterable[str] = ()) -> Task:
    """Add ``task`` under its name (and short ``aliases``); a name already used by a task or mixture is an error."""
    return _register(TASKS, Task, task, aliases)


def register_mixture(mixture: Mixture, aliases: Iterable[str] = ()) -> Mixture:
    """Add ``mixture`` under its name (and ``aliases``); members are looked up when the mixture is used."""
    return _register(MIXTURES, Mixture, mixture, aliases)


def _register(registry: Registry, cls: type, item, aliases: Iterable[str]):
    if not isinstance(item, cls):
        raise T2TError(f"register_{registry.kind} expects a t2t.{cls.__name__}, got {type(item).__name__}.")
    _check_free(item.name)
    registry.register(item.name, item)
    for short in aliases:
        _check_free(short)
        registry.alias(short, item.name)
    return item


def _check_free(name: str) -> None:
    for registry in (TASKS, MIXTURES):
        if name in registry or name in registry.aliases():
            raise T2TError(f"{registry.kind} {name!r} is already registered; choose another name.")


def get_task(name: str) -> Task:
    load_builtin_modules()
    if name not in TASKS and name in MIXTURES:
        raise T2TError(f"{name!r} is a mixture, not a task; give one of its tasks "
                       f"({', '.join(MIXTURES.get(name).task_names)}).")
    if name not in TASKS:
        raise T2TError(_unknown_message("task", name))
    return TASKS.get(name)


def get_mixture(name: str) -> Mixture:
    load_builtin_modules()
    if name not in MIXTURES:
        raise T2TError(_unknown_message("mixture", name))
    return MIXTURES.get(name)


def get_task_or_mixture(name: str) -> Task | Mixture:
    """A registered task or mixture by name or alias; an unknown name lists the closest registered names."""
    load_builtin_modules()
    if name in TASKS:
        return TASKS.get(name)
    if name in MIXTURES:
        return MIXTURES.get(name)
    raise T2TError(_unknown_message("task or mixture", name))


# The lengths training uses when neither the user nor the task says: T5's encoder length and a decoder length
# that holds the short targets of most tasks.
DEFAULT_SEQUENCE_LENGTH = {"inputs": 512, "targets": 128}


def sequence_length_for(item: Task | Mixture | str, inputs: int | None = None,
                        targets: int | None = None) -> dict[str, int]:
    """The lengths to train ``item`` with: ``inputs``/``targets`` where given, else the task's T5 lengths
    (``Task.sequence_length``; a mixture takes the longest over its tasks that have them, as t5's gin files
    give a mixture the lengths of its longest member: GLUE 512/84, SQuAD 512/97, CNN/DM and WMT 512/512),
    else ``DEFAULT_SEQUENCE_LENGTH``."""
    given = {"inputs": inputs, "targets": targets}
    known = [t.sequence_length for t in member_tasks(item) if t.sequence_length]
    return {key: int(given[key] or max((lengths[key] for lengths in known), default=DEFAULT_SEQUENCE_LENGTH[key]))
            for key in given}


def member_tasks(item: Task | Mixture | str) -> list[Task]:
    """The tasks of a task (itself) or mixture (its members, in order); a name is looked up first."""
    if isinstance(item, str):
        item = get_task_or_mixture(item)
    if isinstance(item, Task):
        return [item]
    return [get_task(name) for name in item.task_names]


def _unknown_message(kind: str, name: str) -> str:
    return unknown_name_message(kind, name, TASKS.known_names() + MIXTURES.known_names())


# ---------------------------------------------------------------------------------------------- modules

_builtin_modules_loaded: list[str] | None = None  # the built-in and installed packages' modules, once imported
_loaded_files: dict[str, tuple[str, set[str]]] = {}  # contents' sha256 → (module name, names it registered)


def _registered_names() -> set[str]:
    return set(TASKS.names()) | set(MIXTURES.names())


def builtin_modules() -> list[str]:
    """The modules of ``BUILTIN_PACKAGES``, package by package, each package's in name order."""
    modules = []
    for package in BUILTIN_PACKAGES:
        found = pkgutil.iter_modules(importlib.import_module(package).__path__, prefix=f"{package}.")
        modules += sorted(info.name for info in found)
    return modules


def package_entry_points() -> list[importlib.metadata.EntryPoint]:
    """The installed packages' entry points of ``ENTRY_POINT_GROUP``, in name order."""
    return sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: (ep.name, ep.value))


def load_builtin_modules() -> list[str]:
    """Import the built-in task/mixture modules, then the installed packages' ones, once per process; their
    names."""
    global _builtin_modules_loaded
    if _builtin_modules_loaded is None:
        _builtin_modules_loaded = builtin_modules()
        for module in _builtin_modules_loaded:
            importlib.import_module(module)
        for entry_point in package_entry_points():
            _import_package_module(entry_point)
            _builtin_modules_loaded.append(entry_point.module)
    return list(_builtin_modules_loaded)


def _import_package_module(entry_point: importlib.metadata.EntryPoint) -> None:
    """Import the module an installed package names; its failure is one sentence naming package and module."""
    try:
        importlib.import_module(entry_point.module)
    except (Exception, SystemExit) as e:
        package = entry_point.dist.name if entry_point.dist else entry_point.name
        said = (str(e).strip().splitlines() or [""])[0]
        raise T2TError(f"package {package!r} ships task module {entry_point.module!r} (entry point "
                       f"{entry_point.name!r} of group {ENTRY_POINT_GROUP!r}), which raised {type(e).__name__}"
                       f"{f' ({said})' if said else ''} while it was imported; upgrade or fix that package, or "
                       f"uninstall it.") from None


def load_modules(extra: Iterable[str] = ()) -> list[str]:
    """Import the built-in task/mixture modules and the installed packages' ones, then each user module name
    or ``.py`` path in ``extra``.

    Python imports a module once per process, so calling this again never registers anything twice.
    Returns the names of the modules imported.
    """
    loaded = load_builtin_modules()
    for spec in extra or ():
        loaded.append(_import_user_module(str(spec)))
    return loaded


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _import_user_module(spec: str) -> str:
    if spec.endswith(".py") or os.sep in spec or "/" in spec:
        path = Path(spec).expanduser().resolve()
        if not path.is_file():
            raise T2TError(f"task module file {spec} does not exist; check the --module path.")
        # keyed by contents, so a run's copy of a module imported already (t2t.checkpoints.run) is not imported again;
        # it is if what it registered was unregistered since
        key = hashlib.sha256(path.read_bytes()).hexdigest()
        if key in _loaded_files and _loaded_files[key][1] <= _registered_names():
            return _loaded_files[key][0]
        module_name = f"t2t_user_{path.stem}_{key[:8]}"
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module
        before = _registered_names()
        try:
            module_spec.loader.exec_module(module)
        except (Exception, SystemExit) as e:
            del sys.modules[module_name]
            raise module_failure(e, path) from None
        except BaseException:
            del sys.modules[module_name]
            raise
        _loaded_files[key] = (module_name, _registered_names() - before)
        return module_name
    if not _module_exists(spec):
        raise T2TError(f"task module {spec!r} cannot be found; install it, add its folder to PYTHONPATH, or "
                       f"pass a .py file path to --module.")
    try:
        importlib.import_module(spec)
    except (Exception, SystemExit) as e:
        raise module_failure(e, Path(importlib.util.find_spec(spec).origin or spec)) from None
    return spec


def module_failure(e: BaseException, path: Path) -> T2TError:
    """One sentence for a user module that failed while it was imported (raised, a syntax error, exit()):
    the file and line where it happened, and what."""
    if isinstance(e, SyntaxError):
        file, line, what = e.filename or str(path), e.lineno, f"has a syntax error ({e.msg})"
    else:
        frames = traceback.extract_tb(e.__traceback__)
        frame = ([f for f in frames if f.filename == str(path)] or frames or [None])[-1]
        file, line = (frame.filename, frame.lineno) if frame else (str(path), None)
        what = (f"called exit({e.code!r})" if isinstance(e, SystemExit) else
                f"raised {type(e).__name__}" + (f" ({str(e).splitlines()[0]})" if str(e).strip() else ""))
    return T2TError(f"task module {file} {what} at line {line} while it was imported; fix it or leave it out "
                    f"of --module.")


# ---------------------------------------------------------------------------------------------- helpers

def _is_plain_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _takes_data_dir(fn: Callable) -> bool:
    return bool(getattr(fn, "takes_data_dir", False))


def _fn_name(fn: Callable) -> str:
    inner = getattr(fn, "func", fn)
    return getattr(inner, "__name__", repr(inner))


def describe_source(source: Any) -> str:
    describe = getattr(source, "describe", None)
    return describe() if callable(describe) else type(source).__name__

