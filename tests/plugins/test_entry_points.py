"""A registry entry names its factory by a callable or, as Gymnasium's `register(id, entry_point=...)`, by a
"module:attr" string imported on first use; a string that names nothing is a UserError naming it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from evalfleet.errors import UserError
from evalfleet.registry import Registry
from evalfleet.sim.base import ENVIRONMENTS
from evalfleet.sim.registration import register_environment
from evalfleet.sim.spec_checks import EnvironmentOptions


@pytest.fixture
def plugin_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module on sys.path, not yet imported, whose `make` returns what it was called with."""
    name = "evalfleet_entry_point_test_module"
    (tmp_path / f"{name}.py").write_text("def make(*args):\n    return ('made', args)\n\nNOT_CALLABLE = 3\n")
    (tmp_path / "needs_missing_extra.py").write_text("import evalfleet_no_such_extra\n\ndef make(*a): ...\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


def test_a_callable_is_its_own_factory():
    registry: Registry[object] = Registry("thing")

    @registry.register("a", summary="A")
    def make(x: int) -> tuple[str, int]:
        return ("a", x)

    registry.add("b", lambda: "b")
    assert registry.get("a").factory(1) == ("a", 1) and registry.get("b").factory() == "b"
    assert registry.describe("a") == {"name": "a", "summary": "A"}


def test_an_entry_point_string_is_imported_on_first_use(plugin_module: str):
    registry: Registry[object] = Registry("thing")
    registry.add("p", f"{plugin_module}:make")
    assert plugin_module not in sys.modules  # registering imports nothing
    assert registry.get("p").factory(1, 2) == ("made", (1, 2))
    assert plugin_module in sys.modules


@pytest.mark.parametrize("text", ["no_colon", "a:b:c", "mod:", ":attr", "1mod:x", "mod:x y"])
def test_a_misspelt_entry_point_is_refused_when_registered(text: str):
    with pytest.raises(UserError, match=f"thing 'x': entry point '{text}' is not of the form module:attr"):
        Registry("thing").add("x", text)


def test_an_entry_point_naming_nothing_is_a_user_error_naming_it(plugin_module: str):
    registry: Registry[object] = Registry("thing")
    registry.add("gone", "evalfleet_entry_point_no_such_module:make")
    registry.add("attr", f"{plugin_module}:nothing_here")
    registry.add("value", f"{plugin_module}:NOT_CALLABLE")
    with pytest.raises(UserError, match=r"thing 'gone': entry point 'evalfleet_entry_point_no_such_module:make' "
                                        r"cannot be imported: no module named 'evalfleet_entry_point_no_such_module'"):
        registry.get("gone").factory
    with pytest.raises(UserError, match=f"thing 'attr': entry point '{plugin_module}:nothing_here': "
                                        f"{plugin_module} has no attribute 'nothing_here'"):
        registry.get("attr").factory
    with pytest.raises(UserError, match="is not callable"):
        registry.get("value").factory


def test_a_dependency_missing_inside_the_named_module_is_raised_as_it_is(plugin_module: str):
    registry: Registry[object] = Registry("thing")
    registry.add("extra", "needs_missing_extra:make")
    with pytest.raises(ModuleNotFoundError) as raised:
        registry.get("extra").factory
    assert raised.value.name == "evalfleet_no_such_extra"


class _Options(EnvironmentOptions):
    size: int = 1


def test_an_environment_entry_point_gets_the_validated_options(plugin_module: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(ENVIRONMENTS, "_entries", dict(ENVIRONMENTS._entries))
    factory = register_environment("test_entry_point_env", f"{plugin_module}:make", options=_Options,
                                   info=None, arguments=lambda opts: (opts.size * 10,))  # type: ignore[arg-type]
    assert ENVIRONMENTS.get("test_entry_point_env").factory is factory
    made, (opts, extra) = factory({"size": 4}, {})
    assert made == "made" and isinstance(opts, _Options) and opts.size == 4 and extra == 40
    with pytest.raises(Exception, match="Extra inputs are not permitted"):
        factory({"sise": 4}, {})
    with pytest.raises(UserError, match="environment 'bad': entry point 'nope' is not of the form module:attr"):
        register_environment("bad", "nope", options=_Options, info=None)  # type: ignore[arg-type]
