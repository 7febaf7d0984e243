"""Which backends exist and what each declares: one spec per backend, registered by its own package.

A backend (`evalfleet/backends/<name>/`, or a plug-in's module) registers one spec with `register_backend`:

    register_backend("ray", "evalfleet.backends.ray.backend:RayBackend", settings=RaySettings,
                     summary="...", sequential_waves=True, served_policies=True, gpus=True, ...)

the factory as an entry point "module:attr" (imported when the backend is chosen, so registering imports none of
its dependencies), the pydantic model of its settings under its own override root (`ray.address=auto`), and what
it supports. Override roots, `--backend`'s choices, `evalfleet overrides`' listing and the capability checks all
come from here, so a new backend touches no existing file but one line of `BUILTIN_BACKENDS` (a plug-in's: none).

This module sits at the bottom of the layers: the Experiment loader reads the roots and validates the settings
given under them, and nothing here imports a backend.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, ValidationError

from evalfleet.errors import UserError
from evalfleet.registry import Registry

WHERE = "command line"

# name -> the package that registers it (imported by plugins.load_registries, like the built-in environments)
BUILTIN_BACKENDS = {
    "local": "evalfleet.backends.local",
    "ray": "evalfleet.backends.ray",
    "slurm": "evalfleet.backends.slurm",
    "osmo": "evalfleet.backends.osmo",
}
DEFAULT_BACKEND = "local"


class NoSettings(BaseModel):
    """A backend that takes no settings: every key under its root is unknown."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class BackendSpec:
    """What a backend supports, beside its factory and settings (kept as the registry entry's `info`)."""

    settings: type[BaseModel] = NoSettings  # the model of `<name>.*`
    executes: bool = True  # `evalfleet run --backend NAME`: runs the shards and waits for them
    submits: bool = False  # `evalfleet submit --backend NAME`: hands the Experiment to a cluster
    resubmits: bool = False  # `evalfleet submit --resume --output-dir OUT`: submits again for a folder that died
    sequential_waves: bool = True  # can release shards a wave at a time (`stopping:`); OSMO's tasks are fixed
    served_policies: bool = True  # starts the policy servers its Runs need
    gpus: bool = False  # can give policy servers GPUs (a served Run asking for some is refused where not)
    task_entry: str | None = None  # what runs inside its cluster tasks (`python -m ...`), for the docs
    more_settings: dict[str, type[BaseModel]] = field(default_factory=dict)  # other roots it owns


BACKENDS: Registry[Any] = Registry("backend")


def register_backend(name: str, factory: Callable[..., Any] | str, *, summary: str = "",
                     settings: type[BaseModel] = NoSettings, **supports: Any) -> None:
    """Register a backend: `factory(settings=<its typed settings>, workers=<int or None>)` returns the object the
    pipeline drives (execution/backends.Backend); `settings` validates `<name>.*`; `supports` are BackendSpec's
    capability fields."""
    spec = BackendSpec(settings=settings, **supports)
    taken = setting_roots()
    for root in (name, *spec.more_settings):
        owner = taken.get(root)
        if owner is not None and owner[0] != name:
            raise UserError(f"backend {name!r} registers the settings root {root!r}, which backend {owner[0]!r} "
                            "owns; choose another name", where="plugins")
    BACKENDS.add(name, factory, options=settings, summary=summary, info=spec)


def spec_of(name: str) -> BackendSpec:
    entry = BACKENDS.get(name)
    if entry is None:
        raise UserError(f"unknown backend {name!r}{BACKENDS.suggest(name)}", where=WHERE, key="--backend")
    return entry.info


def setting_roots() -> dict[str, tuple[str, type[BaseModel]]]:
    """Override root → (the backend that owns it, its settings model), for every registered backend."""
    roots: dict[str, tuple[str, type[BaseModel]]] = {}
    for entry in BACKENDS:
        roots[entry.name] = (entry.name, entry.info.settings)
        for root, model in entry.info.more_settings.items():
            roots[root] = (entry.name, model)
    return roots


def backend_settings(root: str, settings: dict[str, Any] | None) -> Any:
    """The typed settings under `root` (defaults merged with the overrides given there); a UserError names an
    unknown key with the valid ones, or a bad value with its key."""
    owned = setting_roots().get(root)
    if owned is None:
        raise UserError(f"unknown settings root {root!r}; backends' roots: {', '.join(sorted(setting_roots()))}",
                        where=WHERE, key=root)
    model = owned[1]
    given = (settings or {}).get(root, {})
    fields = list(model.model_fields)
    if not isinstance(given, dict):
        example = f"e.g. {root}.{fields[0]}=VALUE" if fields else f"the {owned[0]} backend takes no settings"
        raise UserError(f"`{root}` takes sub-keys, {example}", where=WHERE, key=root)
    for key, value in given.items():
        if key not in model.model_fields:
            close = difflib.get_close_matches(key, fields, n=3, cutoff=0.5)
            if close:
                hint = f"did you mean {', '.join(f'{root}.{c}' for c in close)}?"
            elif fields:
                hint = f"valid keys: {', '.join(f'{root}.{k}' for k in fields)}"
            else:
                hint = f"the {owned[0]} backend takes no settings"
            raise UserError(f"unknown key {root}.{key}; {hint}", where=WHERE, key=f"{root}.{key}")
        if isinstance(value, dict):
            raise UserError(f"{root}.{key} has no sub-keys; set it directly: {root}.{key}=VALUE", where=WHERE,
                            key=f"{root}.{key}")
    try:
        return model.model_validate(given)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join([root, *(str(p) for p in err["loc"])])
        msg = err["msg"].removeprefix("Value error, ")
        if "input" in err and not isinstance(err["input"], dict) and err["type"] != "value_error":
            msg = f"{msg} (got {err['input']!r})"
        raise UserError(msg, where=WHERE, key=key) from None


def check_backend_settings(settings: dict[str, Any] | None) -> None:
    """Every registered backend's settings validated (a UserError names the key), the ones given and the defaults
    of the others: what loading an Experiment checks before anything is printed or written."""
    for root in setting_roots():
        backend_settings(root, settings)
