"""Where each Run goes (its task group, runner, server and what the server needs), and the checks before
anything is rendered: servers that need different pools or platforms, or an `osmo.*` profile that falls
short of what a server binding needs (GPUs, CPUs, memory), are a UserError (exit 2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evalfleet.errors import UserError
from evalfleet.backends.osmo.names import WHERE, task_names
from evalfleet.backends.osmo.settings import OsmoSettings

COLLECT_RESOURCE = {"cpu": 2, "gpu": 0, "memory": "8Gi"}


@dataclass
class RunPlacement:
    run: str
    group: str
    runner: str
    server: str | None
    needs: Any = None  # ServerResources of the server, if any
    server_pool: str | None = None
    server_platform: str | None = None

    @property
    def tasks(self) -> int:
        return 2 if self.server else 1


def _server_constraint(options: dict[str, Any], key: str) -> str | None:
    """A server's own pool/platform, from its policy options (`server:` or `server_resources:`)."""
    for section in ("server", "server_resources"):
        value = (options.get(section) or {}).get(key) if isinstance(options.get(section), dict) else None
        if value:
            return str(value)
    return None


def placements(loaded: Any) -> list[RunPlacement]:
    from evalfleet.serving.bindings import binding_for, needs_server

    names = task_names(list(loaded.experiment.runs))
    out = []
    for run_name, run in loaded.experiment.runs.items():
        slug = names[run_name]
        options = run.policy.options()
        p = RunPlacement(run_name, f"run-{slug}", f"runner-{slug}", None)
        if needs_server(run.policy.type, options):
            binding = binding_for(run.policy.type)
            p.server = f"server-{slug}"
            p.needs = binding.resources(options)
            p.server_pool = _server_constraint(options, "pool")
            p.server_platform = _server_constraint(options, "platform")
        out.append(p)
    return out


def check_resources(places: list[RunPlacement], settings: OsmoSettings, given: dict[str, Any],
                    where: str | None = None) -> None:
    """Fail before rendering when servers disagree on pool/platform or the profile is too small."""
    for key in ("pool", "platform"):
        wanted = [(p.run, getattr(p, f"server_{key}")) for p in places if getattr(p, f"server_{key}")]
        explicit = getattr(settings, key)
        for run, value in wanted:
            if explicit is not None and value != explicit:
                raise UserError(f"osmo.{key}={explicit} but Run {run!r}'s server needs {key} {value!r}; drop the"
                                f" override or set osmo.{key}={value}", where=WHERE, key=f"osmo.{key}")
            first_run, first = wanted[0]
            if value != first:
                raise UserError(f"the servers of Runs {first_run!r} and {run!r} need different {key}s ({first!r} vs"
                                f" {value!r}); one workflow runs in one {key}: submit them separately",
                                where=where, key=f"runs.{run}.policy")
    memory = settings.memory_gib()
    for p in places:
        if p.needs is None:
            continue
        shortfalls = []
        if settings.gpus < p.needs.gpus:
            shortfalls.append(("gpus", f"{p.needs.gpus} GPU(s)", f"osmo.gpus={settings.gpus}", str(p.needs.gpus)))
        if settings.cpus < p.needs.cpus:
            shortfalls.append(("cpus", f"{p.needs.cpus:g} CPUs", f"osmo.cpus={settings.cpus}",
                               str(int(-(-p.needs.cpus // 1)))))
        if memory + 1e-9 < p.needs.memory_gb:
            shortfalls.append(("memory", f"{p.needs.memory_gb:g}Gi of memory", f"osmo.memory={settings.memory}",
                               f"{int(-(-p.needs.memory_gb // 1))}Gi"))
        if shortfalls:
            key, need, have, fix = shortfalls[0]
            origin = "given on the command line" if key in given else "the default"
            raise UserError(f"Run {p.run!r}'s policy server needs {need} but {have} ({origin}); set"
                            f" osmo.{key}={fix} or more", where=WHERE, key=f"osmo.{key}")


def resource_profiles(settings: OsmoSettings, places: list[RunPlacement]) -> dict[str, Any]:
    """The workflow's `resources`: `default` (the `osmo.*` profile, every runner and server) and `collect`
    (a small CPU profile), both on the platform `osmo.platform` or a server names."""
    default: dict[str, Any] = {"cpu": settings.cpus, "gpu": settings.gpus, "memory": settings.memory,
                               "storage": settings.storage}
    if settings.platform:
        default["platform"] = settings.platform
    resources = {"default": default, "collect": {**COLLECT_RESOURCE, "storage": settings.storage}}
    platform = settings.platform or next((p.server_platform for p in places if p.server_platform), None)
    if platform:
        resources["default"]["platform"] = platform
        resources["collect"]["platform"] = platform
    return resources

