"""Fills the registries: evalfleet's built-in types and backends, then any installed plugin packages that declare
an `evalfleet.plugins` entry point, then the modules named in EVALFLEET_PLUGINS (comma-separated,
importable from PYTHONPATH) — each a module imported for its registrations."""

from __future__ import annotations

import importlib
import os
from importlib.metadata import entry_points

from evalfleet.errors import UserError

BUILTIN_MODULES = (
    "evalfleet.sim.metaworld_spec",
    "evalfleet.sim.gymnasium_spec",
    "evalfleet.sim.pusht_spec",
    "evalfleet.sim.robosuite_spec",
    "evalfleet.sim.libero_spec",
    "evalfleet.sim.aloha_spec",
    "evalfleet.serving",
)
POLICY_PACKAGE = "evalfleet.policies"  # every module in it registers its policies

PLUGINS_ENV = "EVALFLEET_PLUGINS"
_loaded = False


def load_registries() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True  # set first: a plugin that itself calls load_registries() must not recurse
    try:
        _load_all()
    except UserError:
        _loaded = False  # a fixed environment is read again by the next call (tests, long-lived processes)
        raise


def _load_all() -> None:
    import pkgutil

    import evalfleet.policies

    from evalfleet.backend_registry import BUILTIN_BACKENDS

    policy_modules = [f"{POLICY_PACKAGE}.{m.name}" for m in pkgutil.iter_modules(evalfleet.policies.__path__)]
    for name in (*BUILTIN_MODULES, *policy_modules, *BUILTIN_BACKENDS.values()):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
    for ep in entry_points(group="evalfleet.plugins"):
        _import_plugin(ep.load, f"plugin {ep.value!r} (entry point {ep.name!r} of group evalfleet.plugins)",
                       "fix or uninstall the package that declares it", key=None)
    for name in filter(None, (n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(","))):
        _import_plugin(lambda: importlib.import_module(name), f"plugin module {name!r} named in {PLUGINS_ENV}",
                       f"check it is importable from PYTHONPATH, or remove it from {PLUGINS_ENV}", key=PLUGINS_ENV)


def _import_plugin(load: object, what: str, fix: str, *, key: str | None) -> None:
    """A plugin that cannot be imported is the user's setup, not evalfleet's bug: one line, exit 2."""
    try:
        load()  # type: ignore[operator]
    except ModuleNotFoundError as exc:
        raise UserError(f"{what} cannot be imported: no module named {exc.name!r}; {fix}",
                        where="environment", key=key) from None
    except Exception as exc:  # noqa: BLE001 — any error while importing third-party code
        detail = (str(exc).strip().splitlines() or [""])[0][:200]
        raise UserError(f"{what} failed to import ({type(exc).__name__}: {detail}); {fix}",
                        where="environment", key=key) from None
