"""Lookup by id or alias with close-match suggestions, shared by every catalog."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from typing import Generic, Protocol, TypeVar


class _HasIdAndAliases(Protocol):
    id: str
    aliases: tuple[str, ...]


T = TypeVar("T", bound=_HasIdAndAliases)


def normalise_key(name: str) -> str:
    """Case-insensitive key; ``_`` and spaces are equivalent to ``-``."""
    return "-".join(str(name).strip().lower().split()).replace("_", "-")


def close_matches(name: str, candidates: Iterable[str], n: int = 4) -> str:
    """A ``"; did you mean ...?"`` suffix listing up to ``n`` close candidates (or ``""``)."""
    pool = sorted(set(candidates))
    key = normalise_key(name)
    hits = difflib.get_close_matches(key, pool, n=n, cutoff=0.5)
    if not hits:
        hits = [c for c in pool if key and (key in c or c in key)][:n]
    return f"; did you mean {', '.join(hits)}?" if hits else ""


class Catalog(Generic[T]):
    """Entries indexed by id and aliases (case-insensitive); unknown names list close matches."""

    def __init__(self, kind: str, entries: Iterable[T]) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._index: dict[str, str] = {}
        for entry in entries:
            if entry.id in self._entries:
                raise ValueError(f"duplicate {kind} id {entry.id!r}")
            self._entries[entry.id] = entry
            for key in (entry.id, *entry.aliases):
                norm = normalise_key(key)
                owner = self._index.get(norm)
                if owner is not None and owner != entry.id:
                    raise ValueError(f"{kind} alias {key!r} names both {owner!r} and {entry.id!r}")
                self._index[norm] = entry.id

    def __iter__(self) -> Iterator[T]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and normalise_key(name) in self._index

    @property
    def ids(self) -> list[str]:
        return list(self._entries)

    def get(self, name: str, field: str | None = None) -> T:
        """The entry whose id or alias is ``name``; `UnknownIdError` with close matches otherwise."""
        from llmco2.errors import UnknownIdError

        key = normalise_key(name)
        if key in self._index:
            return self._entries[self._index[key]]
        if isinstance(name, str) and not name.strip():
            raise UnknownIdError(f"the {self.kind} is empty; give a {self.kind} id (known ids: {', '.join(self.ids[:8])}, ...)",
                                 field=field or self.kind)
        raise UnknownIdError(
            f"unknown {self.kind} {name!r}" + (close_matches(name, self._index) or f"; known ids: {', '.join(self.ids)}"),
            field=field or self.kind,
        )
