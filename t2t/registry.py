"""A small generic name → object registry (tasks, mixtures, ...)."""

from __future__ import annotations

import difflib
from typing import Generic, Iterator, TypeVar

from t2t.errors import T2TError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names (and short aliases) to objects; duplicates are errors, unknown names suggest close ones."""

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}
        self._aliases: dict[str, str] = {}

    def register(self, name: str, obj: T | None = None):
        """Register ``obj`` under ``name`` and return it; without ``obj``, a decorator that registers what it
        decorates (``@registry.register("name")``)."""
        if obj is None:
            return lambda decorated: self.register(name, decorated)
        if name in self._items or name in self._aliases:
            raise T2TError(f"{self.kind} {name!r} is already registered; choose another name or remove the "
                           f"earlier registration.")
        self._items[name] = obj
        return obj

    def alias(self, short: str, name: str) -> None:
        """Let ``short`` resolve to the registered ``name``."""
        if short in self._items or short in self._aliases:
            raise T2TError(f"{self.kind} alias {short!r} is already taken; choose another alias.")
        self._aliases[short] = name

    def resolve(self, name: str) -> str:
        """The full registered name for ``name`` (itself or an alias's target)."""
        return self._aliases.get(name, name)

    def get(self, name: str) -> T:
        full = self.resolve(name)
        if full in self._items:
            return self._items[full]
        raise T2TError(unknown_name_message(self.kind, name, self.known_names()))

    def known_names(self) -> list[str]:
        """The registered names and aliases."""
        return list(self._items) + list(self._aliases)

    def __contains__(self, name: str) -> bool:
        return self.resolve(name) in self._items

    def names(self) -> list[str]:
        return sorted(self._items)

    def items(self) -> list[tuple[str, T]]:
        """(name, object) pairs in name order."""
        return [(name, self._items[name]) for name in self.names()]

    def aliases(self) -> dict[str, str]:
        return dict(self._aliases)

    def unregister(self, name: str) -> None:
        """Remove ``name`` and the aliases pointing at it (for tests and interactive use)."""
        self._items.pop(name, None)
        self._aliases = {a: n for a, n in self._aliases.items() if n != name}

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


# Up to this many registered names are listed whole when none is close to an unknown name.
LISTED_NAMES = 20


def unknown_name_message(kind: str, name: str, known: list[str]) -> str:
    """The sentence for a name that is not registered, with up to three close matches among ``known``; without
    one, all of ``known`` when they are few (objectives), else where to list them (tasks)."""
    close = difflib.get_close_matches(str(name), known, n=3, cutoff=0.5)
    if close:
        hint = f"did you mean {', '.join(close)}?"
    elif len(known) <= LISTED_NAMES:
        hint = f"the registered names are {', '.join(sorted(known))}."
    else:
        hint = "run `t2t-tasks` to list the registered names."
    return f"unknown {kind} {name!r}; {hint}"
