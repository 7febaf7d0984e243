"""A spec module (sim/*_spec.py) registers its environment type by entry point and never imports the module
that builds it: not at the top, not inside a function. Checked on the source (every import statement, at any
depth) and in a fresh interpreter (importing every spec loads no env module and no simulator)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from evalfleet.plugins import load_registries
from evalfleet.sim.base import ENVIRONMENTS
from evalfleet.sim.registration import BuildFromOptions

SIM = Path(__file__).resolve().parents[2] / "src" / "evalfleet" / "sim"
SPECS = sorted(f"evalfleet.sim.{p.stem}" for p in SIM.glob("*_spec.py"))
SIMULATORS = {"mujoco", "metaworld", "robosuite", "libero", "gymnasium", "gym_pusht", "gym_aloha", "dm_control",
              "pygame", "pymunk"}


def env_modules() -> set[str]:
    """Every sim/*_env.py and every module a built-in environment type's entry point names."""
    load_registries()
    named = {entry.factory.entry_point.partition(":")[0] for entry in ENVIRONMENTS
             if isinstance(entry.factory, BuildFromOptions)}
    return named | {f"evalfleet.sim.{p.stem}" for p in SIM.glob("*_env.py")}


def imported_modules(source: str) -> set[str]:
    """Every module an import statement anywhere in `source` names (`from a import b`: a and a.b)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def env_imports(source: str, forbidden: set[str]) -> list[str]:
    return sorted(imported_modules(source) & forbidden)


def test_every_builtin_environment_is_registered_by_entry_point():
    load_registries()
    for name in ("aloha", "gymnasium", "libero", "metaworld", "pusht", "robosuite"):
        factory = ENVIRONMENTS.get(name).factory
        assert isinstance(factory, BuildFromOptions), name
        assert factory.entry_point.partition(":")[0] in env_modules()


def test_no_spec_module_imports_an_env_module():
    forbidden = env_modules()
    assert SPECS and {"evalfleet.sim.aloha_env", "evalfleet.sim.pusht_env", "evalfleet.sim.gymnasium_make"} <= forbidden
    offenders = {spec: found for spec in SPECS
                 if (found := env_imports((SIM / f"{spec.rpartition('.')[2]}.py").read_text(encoding="utf-8"),
                                          forbidden))}
    assert not offenders, f"spec modules importing the modules that build their envs: {offenders}"


def test_the_check_finds_a_lazy_import_inside_a_function():
    planted = "def _make(options, builder):\n    from evalfleet.sim.aloha_env import AlohaEnvironment\n"
    assert env_imports(planted, env_modules()) == ["evalfleet.sim.aloha_env"]
    assert env_imports("from evalfleet.sim import pusht_env\n", env_modules()) == ["evalfleet.sim.pusht_env"]
    assert env_imports("import evalfleet.sim.metaworld_env\n", env_modules()) == ["evalfleet.sim.metaworld_env"]
    assert env_imports("from evalfleet.sim.spec_checks import Int\n", env_modules()) == []


def test_importing_every_spec_loads_no_env_module_and_no_simulator():
    code = ("import importlib, json, sys\n"
            f"for name in {SPECS!r}: importlib.import_module(name)\n"
            "print(json.dumps(sorted(sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    loaded = set(json.loads(done.stdout))
    assert set(SPECS) <= loaded
    assert not loaded & env_modules(), sorted(loaded & env_modules())
    assert not {m.split(".")[0] for m in loaded} & SIMULATORS, sorted({m.split(".")[0] for m in loaded} & SIMULATORS)
