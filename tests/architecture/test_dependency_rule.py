"""The dependency rule of docs/architecture.md, checked on the source: every `import evalfleet...` (at module
level or inside a function) points down the layers, no module imports the command line, and there is no
import circle between modules."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

# Lower layers never import higher ones. Modules of one layer may import each other (without circles).
LAYERS = [
    {"evalfleet", "evalfleet.errors", "evalfleet.registry", "evalfleet.seeding", "evalfleet.arguments",
     "evalfleet.textlayout", "evalfleet.feedback", "evalfleet.layout"},
    {"evalfleet.sim"},
    {"evalfleet.policies"},
    {"evalfleet.serving", "evalfleet.plugins"},
    {"evalfleet.experiment"},
    {"evalfleet.rollout"},
    {"evalfleet.analysis"},
    {"evalfleet.outputs"},
    {"evalfleet.execution"},
    {"cli"},  # evalfleet.cli and every subcommand module (argument parsers over the library)
]
CLI_MODULES = {"evalfleet.cli", "evalfleet.execution.submit"}  # plus every `<package>.commands`


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(SRC).with_suffix("").parts)
    return name.removesuffix(".__init__")


# Third-party packages heavy enough that the modules importing them load only on first use. A function-level
# import of such a module (a registry factory loading its simulator adapter) is not a circle: nothing runs
# it at import time, and making it a module-level import would load the simulator to read an Experiment.
HEAVY = {"mujoco", "metaworld", "robosuite", "gymnasium", "gym_pusht", "ray", "matplotlib", "torch", "websockets",
         "zmq"}


def _targets(node: ast.AST, modules: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
        # `from pkg import sub` imports the submodule; `from pkg import name` the package
        return subs if len(subs) == len(node.names) else [node.module, *subs]
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return []


def imports(*, for_circles: bool = False) -> dict[str, set[str]]:
    """Module → the evalfleet modules it imports, at module level or in a function. `for_circles`: without
    function-level imports of modules that import a HEAVY package at module level."""
    modules = {module_name(p): p for p in SRC.rglob("*.py")}
    trees = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in modules.items()}
    heavy = {name for name, tree in trees.items()
             if any(t.split(".")[0] in HEAVY for node in tree.body for t in _raw_targets(node))}
    graph: dict[str, set[str]] = {}
    for name, tree in trees.items():
        top_level = {id(node) for node in tree.body}
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
                if for_circles and id(node) not in top_level and target in heavy:
                    continue
                found.add(target)
        graph[name] = found
    return graph


def _raw_targets(node: ast.AST) -> list[str]:
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return []


def layer_of(module: str) -> int:
    if module in CLI_MODULES or module.endswith(".commands"):
        return len(LAYERS) - 1
    parts = module.split(".")
    for depth in (2, 1):
        prefix = ".".join(parts[:depth])
        for i, members in enumerate(LAYERS):
            if prefix in members:
                return i
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS and docs/architecture.md")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
            for a, targets in graph.items() for b in sorted(targets) if layer_of(b) > layer_of(a)]


def test_imports_point_down_the_layers():
    violations = upward_imports(imports())
    assert not violations, "\n".join(violations)


def test_nothing_imports_the_command_line():
    graph = imports()
    assert not [a for a, targets in graph.items() if "evalfleet.cli" in targets]
    below_cli = [f"{a} imports {b}" for a, targets in graph.items() for b in targets
                 if layer_of(b) == len(LAYERS) - 1 and layer_of(a) < len(LAYERS) - 1]
    assert not below_cli, "\n".join(below_cli)


def test_no_import_circles():
    graph = imports(for_circles=True)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
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
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not circles, circles


def test_the_rule_catches_a_violation():
    """The checker itself: a rollout module importing the pipeline, or the simulator the plan, is reported."""
    graph = imports()
    graph["evalfleet.rollout.runner"] = graph["evalfleet.rollout.runner"] | {"evalfleet.execution.pipeline"}
    graph["evalfleet.sim.metaworld_env"] = graph["evalfleet.sim.metaworld_env"] | {"evalfleet.experiment.plan"}
    assert sorted(upward_imports(graph)) == [
        "evalfleet.rollout.runner (layer 5) imports evalfleet.execution.pipeline (layer 8)",
        "evalfleet.sim.metaworld_env (layer 1) imports evalfleet.experiment.plan (layer 4)",
    ]
