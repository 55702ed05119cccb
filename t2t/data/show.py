"""What ``t2t-show`` and ``t2t-tasks`` print (no argparse here; ``t2t.cli.show`` and ``t2t.cli.tasks`` wrap these).

- ``show_examples(name, split, n, with_tokens, vocab, data_dir)``: a task's preprocessed examples in source
  order as JSON-able dicts ``{"inputs": str, "targets": str}``, plus ``"inputs_tokens"``/``"targets_tokens"``
  (token ids, EOS appended as the model sees them) with ``with_tokens``.
- ``show_raw(name, split, n, data_dir)``: the source's examples before preprocessing (what ``t2t-predict
  --task`` reads, one JSON object per line).
- ``registry_table(data_dir)``: one row per registered task and mixture (name, kind, aliases, split sizes where
  known, local data found, member rates and their strategies); ``format_registry_table`` renders it as text,
  a mixture's members grouped by strategy ("examples-proportional, K=2^19", "equal", ...) and long lists cut.
"""

from __future__ import annotations

import itertools
from typing import Iterator

from t2t.data.mixing import FIXED, describe_rate, is_proportional
from t2t.data.sources import resolve_data_dir
from t2t.data.task import MIXTURES, TASKS, Mixture, Task, get_task, get_task_or_mixture, load_builtin_modules
from t2t.errors import T2TError

SHOW_CHUNK = 256
MEMBERS_SHOWN = 3  # per strategy on a mixture's line of t2t-tasks; the others are counted
EVALUATION_ONLY = "rate 0, evaluation only"
EQUAL = "equal"


def show_examples(name: str, split: str = "validation", n: int | None = 5, with_tokens: bool = False, vocab=None,
                  data_dir=None) -> Iterator[dict]:
    """The first ``n`` (all with None) preprocessed examples of task ``name``'s ``split``, in source order."""
    task = shown_task(name, n)
    keys = [k for k in task.output_features]
    examples = task.text_examples(split, data_dir)
    if n is not None:
        examples = itertools.islice(examples, n)
    while True:
        chunk = list(itertools.islice(examples, SHOW_CHUNK))
        if not chunk:
            return
        rows = [{k: ex[k] for k in keys if k in ex} for ex in chunk]
        if with_tokens:
            _add_tokens(task, rows, vocab)
        yield from rows


def show_raw(name: str, split: str = "validation", n: int | None = 5, data_dir=None) -> Iterator[dict]:
    """The first ``n`` (all with None) examples of task ``name``'s ``split`` as its source gives them, before
    preprocessing."""
    examples = shown_task(name, n).raw_examples(split, data_dir)
    return itertools.islice(examples, n) if n is not None else examples


def shown_task(name: str, n: int | None) -> Task:
    item = get_task_or_mixture(name)
    if isinstance(item, Mixture):
        raise T2TError(f"{name!r} is a mixture; show one of its tasks ({', '.join(item.task_names)}).")
    if n is not None and n < 0:
        raise T2TError(f"the number of examples to show must be >= 0, got {n}.")
    return item


def _add_tokens(task: Task, rows: list[dict], vocab) -> None:
    for key, feature in task.output_features.items():
        present = [r for r in rows if key in r]
        if not present:
            continue
        feature_vocab = feature.vocabulary or vocab
        if feature_vocab is None:
            raise T2TError(f"showing tokens of task {task.name!r} needs a vocabulary; pass --vocab.")
        for row, ids in zip(present, feature_vocab.encode_batch([r[key] for r in present])):
            row[f"{key}_tokens"] = [int(i) for i in ids] + ([int(feature_vocab.eos_id)] if feature.add_eos else [])


def registry_table(data_dir=None) -> list[dict]:
    """Rows for ``t2t-tasks``: tasks, then mixtures, each sorted by name. Reads no data (split sizes are the
    sources' declared ones; ``local_splits`` lists the splits found under the data dir, where a source can tell)."""
    load_builtin_modules()
    aliases: dict[str, list[str]] = {}
    for registry in (TASKS, MIXTURES):
        for short, full in registry.aliases().items():
            aliases.setdefault(full, []).append(short)
    root = resolve_data_dir(data_dir)
    rows = []
    for name in TASKS.names():
        task = TASKS.get(name)
        row = {"name": name, "kind": "task", "aliases": sorted(aliases.get(name, [])),
               "splits": {s: task.known_num_examples(s) for s in task.splits},
               "description": task.description}
        available = getattr(task.source, "available", None)
        if callable(available) and root is not None:
            row["local_splits"] = [s for s in task.splits if available(s, root)]
        rows.append(row)
    for name in MIXTURES.names():
        mixture = MIXTURES.get(name)
        rows.append({"name": name, "kind": "mixture", "aliases": sorted(aliases.get(name, [])),
                     "rates": {member: _shown_rate(member, rate) for member, rate in mixture.tasks},
                     "strategies": {member: describe_rate(rate) for member, rate in mixture.tasks}})
    return rows


def _shown_rate(member: str, rate) -> float | None:
    """The rate's value where it is known without reading data, else None."""
    if not callable(rate):
        return float(rate)
    if member not in TASKS:
        return None
    task = get_task(member)
    if getattr(rate, "takes_data_dir", False) and not _known_without_data(rate, task):
        return None
    try:
        return float(rate(task))
    except T2TError:
        return None


def _known_without_data(rate, task: Task) -> bool:
    """Whether an examples-proportional rate needs no data for ``task``: a written-down size, a size the
    source declares, or a task without the rate's split (rate 0)."""
    if not is_proportional(rate):
        return False
    split = rate.options["split"]
    return (rate.options["num_examples"] is not None or task.known_num_examples(split) is not None
            or split not in task.splits)


def format_registry_table(data_dir=None) -> str:
    """``registry_table`` as aligned text lines."""
    lines = []
    for row in registry_table(data_dir):
        alias = f" ({', '.join(row['aliases'])})" if row["aliases"] else ""
        if row["kind"] == "task":
            splits = ", ".join(f"{s}={'?' if n is None else n}" for s, n in row["splits"].items())
            local = f"  local: {', '.join(row['local_splits']) or 'none'}" if "local_splits" in row else ""
            lines.append(f"task     {row['name']}{alias}  [{splits}]{local}")
        else:
            lines.append(f"mixture  {row['name']}{alias}  {format_mixture_rates(row['rates'], row['strategies'])}")
    return "\n".join(lines) if lines else "no tasks or mixtures are registered; pass --module to load some."


def format_mixture_rates(rates: dict[str, float | None], strategies: dict[str, str]) -> str:
    """A mixture's members grouped by strategy, in order: ``"examples-proportional (8 tasks): glue_cola_v002=8551,
    ... (+5 more); rate 0, evaluation only (3 tasks): ..."``, and ``"equal (29 tasks): ..."`` where every member
    sampled has the same fixed rate. A value is ``?`` where it needs the data."""
    groups: dict[str, list[str]] = {}
    for member, value in rates.items():
        groups.setdefault(EVALUATION_ONLY if value == 0 else strategies[member], []).append(member)
    sampled = [strategy for strategy in groups if strategy != EVALUATION_ONLY]
    if sampled == [FIXED] and len({rates[member] for member in groups[FIXED]}) == 1:
        groups = {(EQUAL if strategy == FIXED else strategy): members for strategy, members in groups.items()}
    return "; ".join(_member_list(strategy, members, None if strategy in (EQUAL, EVALUATION_ONLY) else rates)
                     for strategy, members in groups.items())


def _member_list(strategy: str, members: list[str], rates: dict[str, float | None] | None) -> str:
    shown = [f"{m}={_fmt(rates[m])}" if rates else m for m in members[:MEMBERS_SHOWN]]
    more = f", ... (+{len(members) - MEMBERS_SHOWN} more)" if len(members) > MEMBERS_SHOWN else ""
    return f"{strategy} ({len(members)} task{'s' if len(members) != 1 else ''}): {', '.join(shown)}{more}"


def _fmt(rate: float | None) -> str:
    if rate is None:
        return "?"
    return str(int(rate)) if rate.is_integer() and abs(rate) < 1e15 else f"{rate:g}"
