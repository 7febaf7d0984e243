"""Fills the registries: evalfleet's built-in types, then any installed plugin packages that declare
an `evalfleet.plugins` entry point, then the modules named in EVALFLEET_PLUGINS (comma-separated,
importable from PYTHONPATH) — each a module imported for its registrations."""

from __future__ import annotations

import importlib
import os
from importlib.metadata import entry_points

BUILTIN_MODULES = (
    "evalfleet.sim.metaworld_spec",
    "evalfleet.sim.gymnasium_spec",
    "evalfleet.sim.pusht_spec",
    "evalfleet.sim.robosuite_spec",
    "evalfleet.serving",
)
POLICY_PACKAGE = "evalfleet.policies"  # every module in it registers its policies

PLUGINS_ENV = "EVALFLEET_PLUGINS"
_loaded = False


def load_registries() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    import pkgutil

    import evalfleet.policies

    policy_modules = [f"{POLICY_PACKAGE}.{m.name}" for m in pkgutil.iter_modules(evalfleet.policies.__path__)]
    for name in (*BUILTIN_MODULES, *policy_modules):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
    for ep in entry_points(group="evalfleet.plugins"):
        ep.load()
    for name in filter(None, (n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(","))):
        importlib.import_module(name)
