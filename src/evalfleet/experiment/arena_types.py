"""Which environment and policy `type`s are Isaac Lab Arena's: types that exist only in Arena's image, so a Run
using one loads, plans and dry-runs here and executes only through Arena's own runner (backends/osmo/arena.py).

The rule (issue #26): a type is Arena's when it is
- a path (`isaaclab_arena_environments/robolab/tasks/banana_in_bowl.yaml`) or a dotted class path
  (`isaaclab_arena_openpi.policy.pi0_remote_policy.Pi0RemotePolicy`, `module:Class`);
- one of the registered names Arena ships (`ARENA_ENVIRONMENTS`, `ARENA_POLICIES`: `pick_and_place_maple_table`,
  `zero_action`, ...);
- or any other registered name marked as Arena's: `arena:NAME` (the marker is dropped in the file Arena's runner
  reads, which sees `NAME`).
Any other bare name (`nosuch`, a typo `metaworl`) is an unknown type: a UserError with "did you mean" for a near
miss of one of evalfleet's names, never a plan that looks fine and fails in Arena's image.
"""

from __future__ import annotations

from typing import Any, Iterable

ARENA_MARKER = "arena:"

# Names registered in Isaac Lab Arena's own registries that its example Experiment files use
# (isaaclab_arena_environments/experiment_configs/*.yaml; isaaclab_arena/policy/zero_action_policy.py `name`).
ARENA_ENVIRONMENTS = frozenset({"pick_and_place_maple_table"})
ARENA_POLICIES = frozenset({"zero_action", "pi0_remote"})


def is_arena_name(type_name: str) -> bool:
    """A path, a dotted or `module:Class` path, one of Arena's registered names, or a name marked `arena:`."""
    if any(c in type_name for c in "./\\:"):
        return True
    return type_name in ARENA_ENVIRONMENTS or type_name in ARENA_POLICIES


def is_external_type(type_name: str, known: Iterable[str] | None = None) -> bool:
    """Whether `type_name` is an Arena type, not one of evalfleet's (`known`: the registry's names, which win)."""
    if known is not None and type_name in set(known):
        return False
    return is_arena_name(type_name)


def arena_spelling(type_name: str) -> str:
    """The type as Arena's runner reads it: `arena:NAME` → `NAME`; anything else unchanged."""
    return type_name[len(ARENA_MARKER):] if type_name.startswith(ARENA_MARKER) else type_name


def unknown_type_hint(kind: str) -> str:
    """What to write instead of an unknown bare name, for the UserError."""
    names = sorted(ARENA_ENVIRONMENTS if kind == "environment" else ARENA_POLICIES)
    return (f"; for an Isaac Lab Arena {kind} give its task YAML path or dotted class path, one of Arena's "
            f"registered names ({', '.join(names)}), or mark another registered Arena name as arena:NAME")


def arena_sections(run: Any) -> list[str]:
    """Which of a Run's `environment` / `policy` types are Arena's (exist only in Arena's image)."""
    from evalfleet.policies.base import POLICIES
    from evalfleet.sim.base import ENVIRONMENTS

    out = []
    for section, registry in (("environment", ENVIRONMENTS), ("policy", POLICIES)):
        name = getattr(run, section).type
        if registry.get(name) is None and is_external_type(name, registry.names()):
            out.append(section)
    return out
