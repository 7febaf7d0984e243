"""A tiny name → factory registry, used for environments, policies, server bindings and backends.

A factory is registered as a callable or, like Gymnasium's `register(id, entry_point="module:Class")`,
as an entry point "module:attr" naming one: imported on first use, so a registration never imports
what it builds.
"""

from __future__ import annotations

import difflib
import importlib
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Generic, Iterator, TypeVar

from pydantic import BaseModel

from evalfleet.errors import UserError

T = TypeVar("T")

ENTRY_POINT = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def check_entry_point(text: str, what: str) -> str:
    """`text` if it is spelt module:attr (nothing is imported), else a UserError naming it and `what` it is for."""
    if not ENTRY_POINT.fullmatch(text):
        raise UserError(f"{what}: entry point {text!r} is not of the form module:attr "
                        "(e.g. evalfleet.sim.aloha_env:AlohaEnvironment)")
    return text


def load_entry_point(text: str, what: str) -> Callable[..., Any]:
    """The callable an entry point "module:attr" names. A module or attribute that is not there is a UserError
    naming the entry point; an import failing inside the module (a missing extra) is raised as it is."""
    module_name, _, attr = check_entry_point(text, what).partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if not exc.name or not (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise
        raise UserError(f"{what}: entry point {text!r} cannot be imported: no module named {exc.name!r}") from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise UserError(f"{what}: entry point {text!r}: {module_name} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise UserError(f"{what}: entry point {text!r} is not callable")
    return target


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    target: Callable[..., T] | str  # the factory, or the entry point "module:attr" naming it
    options: type[BaseModel] | None  # validates the type's options; None: passed through untyped
    summary: str = ""
    info: Any = None  # what else the kind of registry keeps per entry (e.g. an environment's variations)
    kind: str = ""

    @cached_property
    def factory(self) -> Callable[..., T]:
        """The factory; an entry point is imported on first use."""
        if callable(self.target):
            return self.target
        return load_entry_point(self.target, f"{self.kind} {self.name!r}".strip())


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def add(self, name: str, factory: Callable[..., T] | str, *, options: type[BaseModel] | None = None,
            summary: str = "", info: Any = None) -> None:
        """Registers `factory`: a callable, or an entry point "module:attr" (checked by spelling, imported when
        first used)."""
        if isinstance(factory, str):
            check_entry_point(factory, f"{self.kind} {name!r}")
        self._entries[name] = Entry(name, factory, options, summary, info, self.kind)

    def register(
        self, name: str, *, options: type[BaseModel] | None = None, summary: str = "", info: Any = None
    ) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """`add` as a decorator: `@REGISTRY.register(name)` over the factory."""
        def decorate(factory: Callable[..., T]) -> Callable[..., T]:
            self.add(name, factory, options=options, summary=summary, info=info)
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
