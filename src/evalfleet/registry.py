"""A tiny name → factory registry, used for environments, policies, server bindings and backends."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterator, TypeVar

from pydantic import BaseModel

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    factory: Callable[..., T]
    options: type[BaseModel] | None  # validates the type's options; None: passed through untyped
    summary: str = ""
    info: Any = None  # what else the kind of registry keeps per entry (e.g. an environment's variations)


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def register(
        self, name: str, *, options: type[BaseModel] | None = None, summary: str = "", info: Any = None
    ) -> Callable[[Callable[..., T]], Callable[..., T]]:
        def decorate(factory: Callable[..., T]) -> Callable[..., T]:
            self._entries[name] = Entry(name, factory, options, summary, info)
            return factory

        return decorate

    def get(self, name: str) -> Entry[T] | None:
        return self._entries.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(sorted(self._entries.values(), key=lambda e: e.name))

    def names(self) -> list[str]:
        return sorted(self._entries)

    def suggest(self, name: str) -> str:
        close = difflib.get_close_matches(name, self.names(), n=3)
        return f" (did you mean {', '.join(close)}?)" if close else f" (known: {', '.join(self.names())})"

    def describe(self, name: str) -> dict[str, Any]:
        entry = self._entries[name]
        return {"name": entry.name, "summary": entry.summary}
