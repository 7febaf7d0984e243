"""Registering an environment type: its options model, its variations and, by entry point, what builds it.

    register_environment("aloha", "evalfleet.sim.aloha_env:AlohaEnvironment", options=AlohaOptions,
                         info=EnvironmentInfo(...), arguments=lambda opts: (opts.task_instruction(),))

The entry point ("module:attr", like Gymnasium's `register(id, entry_point="module:Class")`) is imported
when the first env is built, so a spec module never imports its adapter and loading an Experiment imports
no simulator. A plugin may as well register any `factory(options, builder)`, or an entry point naming one,
with `ENVIRONMENTS.register` / `ENVIRONMENTS.add`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel

from evalfleet.registry import check_entry_point, load_entry_point
from evalfleet.sim.base import ENVIRONMENTS, EnvironmentInfo


@dataclass(frozen=True)
class BuildFromOptions:
    """An environment factory `(options, builder) -> Environment`: validates the options with the type's model,
    then calls what `entry_point` names with them (and with what `arguments` adds, e.g. the instruction)."""

    entry_point: str
    options: type[BaseModel]
    arguments: Callable[[Any], tuple[Any, ...]] | None = None
    what: str = "environment"  # how an error names the type: "environment 'aloha'"

    def __call__(self, options: Any, builder: dict[str, Any]) -> Any:
        opts = options if isinstance(options, self.options) else self.options.model_validate(options)
        build = load_entry_point(self.entry_point, self.what)
        return build(opts, *(self.arguments(opts) if self.arguments is not None else ()))


def register_environment(name: str, entry_point: str, *, options: type[BaseModel], info: EnvironmentInfo,
                         summary: str = "", arguments: Callable[[Any], tuple[Any, ...]] | None = None,
                         ) -> BuildFromOptions:
    """Registers environment type `name`; returns its factory."""
    what = f"environment {name!r}"
    factory = BuildFromOptions(check_entry_point(entry_point, what), options, arguments, what)
    ENVIRONMENTS.add(name, factory, options=options, summary=summary, info=info)
    return factory
