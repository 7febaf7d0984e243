"""The dependency rule of docs/architecture.md, checked on the source: every package and top-level module of
evalfleet has a layer (a new one without a layer fails here), every `import evalfleet...` (at module level or
inside a function) points down the layers, no library module imports the command line, and there is no import
circle between modules. The checks are functions of an import graph, so the tests at the end plant each
violation in a copy of the tree and show that it is caught."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

# Every package and top-level module of evalfleet, by layer, lowest first. A module imports only its own layer
# or lower ones; modules of one layer may import each other (without circles).
LAYERS: list[set[str]] = [
    {"evalfleet", "evalfleet.errors", "evalfleet.registry", "evalfleet.seeding", "evalfleet.textlayout",
     "evalfleet.secrets", "evalfleet.shell", "evalfleet.feedback", "evalfleet.process_exit", "evalfleet.forking",
     "evalfleet.interpreter", "evalfleet.layout", "evalfleet.arena_format", "evalfleet.backend_registry",
     "evalfleet.bounded_json"},
    {"evalfleet.sim"},
    {"evalfleet.policies"},
    {"evalfleet.serving", "evalfleet.plugins"},
    {"evalfleet.experiment"},
    {"evalfleet.rollout"},
    {"evalfleet.analysis"},
    {"evalfleet.outputs", "evalfleet.store"},  # the store reads outputs; run and collect add to it
    {"evalfleet.execution"},
    {"evalfleet.backends"},  # one package per backend, driven by execution through its registry
    {"evalfleet.cli"},  # the command line: every parser and handler
]
CLI = "evalfleet.cli"
CLI_LAYER = len(LAYERS) - 1
# The entry points outside the package: the `__main__` of `python -m evalfleet.execution.watchdog`, `.osmo`
# and `.slurm` (rendered task scripts run them) are thin shims that call into evalfleet.cli, so they are the
# command line too (layer CLI_LAYER); nothing else imports evalfleet.cli.
CLI_ENTRY_POINTS = {"evalfleet.execution.watchdog.__main__", "evalfleet.backends.osmo.__main__",
                    "evalfleet.backends.slurm.__main__"}

def module_name(path: Path, src: Path = SRC) -> str:
    name = ".".join(path.relative_to(src).with_suffix("").parts)
    return name.removesuffix(".__init__")


def _targets(node: ast.AST, modules: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
        # `from pkg import sub` imports the submodule; `from pkg import name` the package
        return subs if len(subs) == len(node.names) else [node.module, *subs]
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return []


def imports(src: Path = SRC) -> dict[str, set[str]]:
    """Module → the evalfleet modules it imports, at module level or in a function, for every module under
    `src`. A function-level import counts like any other: registries name what a spec builds by an entry-point
    string (sim/registration.py), so no lazy import is left to hide a circle."""
    modules = {module_name(p, src): p for p in (src / "evalfleet").rglob("*.py")}
    trees = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in modules.items()}
    graph: dict[str, set[str]] = {}
    for name, tree in trees.items():
        typing_only = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
                       for inner in ast.walk(node)}
        found: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue  # annotations only: never imported at run time
            for target in _targets(node, modules):
                if target not in modules or target == name:
                    continue
                found.add(target)
        graph[name] = found
    return graph


def unit(module: str) -> str:
    """The package or top-level module a layer is given to: `evalfleet.sim.base` → `evalfleet.sim`."""
    return ".".join(module.split(".")[:2])


def layer_of(module: str) -> int | None:
    if is_cli(module):
        return CLI_LAYER
    return next((i for i, members in enumerate(LAYERS) if unit(module) in members), None)


def is_cli(module: str) -> bool:
    return unit(module) == CLI or module in CLI_ENTRY_POINTS


def unassigned(graph: dict[str, set[str]]) -> list[str]:
    """The packages and top-level modules that LAYERS does not name."""
    return sorted({unit(m) for m in graph if layer_of(m) is None})


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
            for a, targets in sorted(graph.items()) for b in sorted(targets)
            if not is_cli(b) and None not in (layer_of(a), layer_of(b)) and layer_of(b) > layer_of(a)]


def command_line_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"{a} imports the command line: {b}" for a, targets in sorted(graph.items()) for b in sorted(targets)
            if is_cli(b) and not is_cli(a)]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle: the strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_package_has_a_layer():
    missing = unassigned(imports())
    assert not missing, f"{missing} are in no layer: add each to LAYERS here and to docs/architecture.md"


def test_imports_point_down_the_layers():
    violations = upward_imports(imports())
    assert not violations, "\n".join(violations)


def test_nothing_imports_the_command_line():
    violations = command_line_imports(imports())
    assert not violations, "\n".join(violations)


def test_no_import_circles():
    found = circles(imports())
    assert not found, found


# ---------------------------------------------------------------------------------------------- the checker


def planted_tree(tmp_path: Path) -> Path:
    """A copy of src/evalfleet to plant violations in."""
    shutil.copytree(SRC / "evalfleet", tmp_path / "evalfleet", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def plant(src: Path, relative: str, code: str) -> None:
    path = src / "evalfleet" / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((path.read_text(encoding="utf-8") if path.exists() else "") + "\n" + code + "\n",
                    encoding="utf-8")


def test_the_copy_of_the_tree_is_clean(tmp_path):
    src = planted_tree(tmp_path)
    graph = imports(src)
    assert graph == imports() and not unassigned(graph) and not upward_imports(graph)
    assert not command_line_imports(graph)


def test_the_rule_catches_an_import_of_the_command_line(tmp_path):
    src = planted_tree(tmp_path)
    plant(src, "rollout/runner.py", "from evalfleet.cli import main")
    plant(src, "outputs/report.py", "def later():\n    import evalfleet.cli.plan")
    assert command_line_imports(imports(src)) == [
        "evalfleet.outputs.report imports the command line: evalfleet.cli.plan",
        "evalfleet.rollout.runner imports the command line: evalfleet.cli",
    ]
    # an entry point outside the package is the command line too: it may import evalfleet.cli, nothing may import it
    graph = {"evalfleet.execution.pipeline": {"evalfleet.execution.watchdog.__main__"},
             "evalfleet.execution.watchdog.__main__": {"evalfleet.cli.watchdog"},
             "evalfleet.cli.watchdog": {"evalfleet.execution.watchdog.process"},
             "evalfleet.execution.watchdog.process": set()}
    assert command_line_imports(graph) == [
        "evalfleet.execution.pipeline imports the command line: evalfleet.execution.watchdog.__main__"]
    # any other module of those packages is the library: importing evalfleet.cli there is caught
    plant(src, "execution/watchdog/process.py", "from evalfleet.cli.watchdog import main")
    assert command_line_imports(imports(src)) == [
        "evalfleet.execution.watchdog.process imports the command line: evalfleet.cli.watchdog",
        "evalfleet.outputs.report imports the command line: evalfleet.cli.plan",
        "evalfleet.rollout.runner imports the command line: evalfleet.cli",
    ]


def test_the_rule_catches_a_package_without_a_layer(tmp_path):
    src = planted_tree(tmp_path)
    plant(src, "trackers/__init__.py", '"""A new package."""')
    plant(src, "trackers/wandb.py", "from evalfleet.errors import UserError")
    plant(src, "helpers.py", '"""A new top-level module."""')
    assert unassigned(imports(src)) == ["evalfleet.helpers", "evalfleet.trackers"]


def test_the_rule_catches_an_upward_import(tmp_path):
    src = planted_tree(tmp_path)
    plant(src, "rollout/runner.py", "def later():\n    from evalfleet.execution.pipeline import run")
    plant(src, "sim/base.py", "from evalfleet.experiment import plan")
    plant(src, "errors.py", "import evalfleet.sim.base")
    assert upward_imports(imports(src)) == [
        "evalfleet.errors (layer 0) imports evalfleet.sim.base (layer 1)",
        "evalfleet.rollout.runner (layer 5) imports evalfleet.execution.pipeline (layer 8)",
        "evalfleet.sim.base (layer 1) imports evalfleet.experiment.plan (layer 4)",
    ]


def test_the_rule_catches_a_circle():
    graph = {"evalfleet.sim.a": {"evalfleet.sim.b"}, "evalfleet.sim.b": {"evalfleet.sim.c"},
             "evalfleet.sim.c": {"evalfleet.sim.a"}, "evalfleet.sim.d": {"evalfleet.sim.a"}}
    assert circles(graph) == [["evalfleet.sim.a", "evalfleet.sim.b", "evalfleet.sim.c"]]
