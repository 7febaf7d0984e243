"""An Experiment's plan → the batch scripts the Slurm backend submits (`Rendering`), every check before any
file is written: the `slurm.*` settings, the output folder's path, each served Run's server bound to the node's
address (a key, or allow_unauthenticated)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalfleet.backend_registry import backend_settings, check_backend_settings
from evalfleet.backends.slurm.settings import SlurmSettings
from evalfleet.backends.slurm.paths import SlurmPaths, check_output_path
from evalfleet.backends.slurm.scripts import (
    COLLECT_SCRIPT,
    RUNNERS_SCRIPT,
    Script,
    collect_script,
    runners_script,
    server_script,
    server_script_name,
)
from evalfleet.execution.watchdog import WatchdogConfig
from evalfleet.experiment.plan import Plan, Shard
from evalfleet.layout import EXPERIMENT_FILE

WORKERS_CAP = 16  # array tasks when neither slurm.workers nor --workers says: one per shard, at most this many
SERVER_BIND = "0.0.0.0"  # a server job serves runners on other nodes


@dataclass
class Rendering:
    paths: SlurmPaths
    settings: SlurmSettings
    workers: int
    shards: list[Shard]
    servers: dict[str, list[str]]  # ServerPlan id → the Runs it serves
    scripts: list[Script] = field(default_factory=list)

    def script(self, kind: str) -> Script | None:
        return next((s for s in self.scripts if s.kind == kind), None)

    def write(self, folder: Path) -> list[Path]:
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for script in self.scripts:
            path = folder / script.name
            path.write_text(script.text, encoding="utf-8")
            written.append(path)
        return written


def slurm_settings(loaded: Any) -> SlurmSettings:
    given = _time_as_typed(loaded)
    check_backend_settings(given)
    settings = backend_settings("slurm", given)
    assert isinstance(settings, SlurmSettings)
    return settings


def _time_as_typed(loaded: Any) -> dict[str, Any]:
    """The backend settings with `slurm.time` as typed: YAML reads 1:00:00 as the base-60 number 3600, which
    sbatch would take as minutes."""
    settings = dict(loaded.backend_settings or {})
    typed = [text.partition("=")[2].strip() for text in getattr(loaded, "overrides", None) or []
             if text.partition("=")[0].strip().removeprefix("experiment_cfg.") == "slurm.time"]
    if typed and isinstance(settings.get("slurm"), dict) and isinstance(settings["slurm"].get("time"), int):
        settings["slurm"] = {**settings["slurm"], "time": typed[-1].strip("'\"")}
    return settings


def job_name(settings: SlurmSettings, experiment: str) -> str:
    if settings.job_name:
        return settings.job_name
    return "evalfleet-" + (re.sub(r"[^A-Za-z0-9_.-]+", "-", experiment).strip("-.") or "experiment")[:48]


def array_size(settings: SlurmSettings, workers: int | None, shards: int) -> int:
    wanted = settings.workers or workers or WORKERS_CAP
    return max(1, min(wanted, shards))


def check_servers(loaded: Any) -> None:
    """A server bound to the node's address needs a key or allow_unauthenticated (a UserError naming the Run)."""
    from evalfleet.serving.planning import server_commands

    server_commands(loaded.experiment.runs, loaded.path, host=SERVER_BIND)


def render(loaded: Any, out: Path, plan: Plan, *, workers: int | None = None,
           watchdog: WatchdogConfig | None = None, collect: bool = True,
           experiment_file: Path | None = None, feed: Path | None = None) -> Rendering:
    """Every script of the submission (servers, the runner array, the collect job unless `collect` is false);
    nothing written. With a `feed` folder the array's tasks take the shards released there (the plan's shards
    size the array and say which servers it waits for)."""
    from evalfleet.serving.planning import plan_server_groups

    settings = slurm_settings(loaded)
    out = check_output_path(out)
    check_servers(loaded)
    paths = SlurmPaths(out)
    shards = sorted(plan.shards, key=lambda s: (s.start, list(plan.runs).index(s.run)))
    size = array_size(settings, workers, len(shards))
    groups = plan_server_groups({n: rp.run for n, rp in plan.runs.items()}, loaded.experiment.server_sharing,
                                loaded.experiment.seed)
    servers = {g.id: list(g.runs) for g in groups}
    base = job_name(settings, loaded.experiment.name)
    rendering = Rendering(paths, settings, size, shards, servers)
    for server in servers:
        rendering.scripts.append(Script(server_script_name(server), "server",
                                        server_script(paths, settings, job_name=f"{base}-server", server=server),
                                        server=server))
    rendering.scripts.append(Script(RUNNERS_SCRIPT, "runners", runners_script(
        paths, settings, job_name=f"{base}-runners", experiment=experiment_file or out / EXPERIMENT_FILE,
        shards=shards, workers=size, servers=serving(servers, shards), watchdog=watchdog or WatchdogConfig(),
        feed=feed)))
    if collect:
        rendering.scripts.append(Script(COLLECT_SCRIPT, "collect",
                                        collect_script(paths, settings, job_name=f"{base}-collect")))
    return rendering


def serving(servers: dict[str, list[str]], shards: list[Shard]) -> list[str]:
    """The servers the runners wait for: those of the Runs these shards are of (a wave of sequential stopping
    runs only its undecided Runs; a decided Run's server job may be gone)."""
    runs = {s.run for s in shards}
    return [server for server, its in servers.items() if runs.intersection(its)]


def write_jobs(paths: SlurmPaths, rendering: Rendering, jobs: dict[str, Any]) -> None:
    """jobs.json: what the collect step and `--resume` read back (job ids, array size, the shards)."""
    from evalfleet.execution.output_dir import write_atomic
    from evalfleet.execution.invocation import shard_arg

    doc = {"workers": rendering.workers, "shards": [shard_arg(s) for s in rendering.shards],
           "servers": rendering.servers, "signal_lead_s": rendering.settings.signal_lead_s, **jobs}
    write_atomic(paths.jobs, json.dumps(doc, indent=1) + "\n")


def read_jobs(paths: SlurmPaths) -> dict[str, Any]:
    try:
        doc = json.loads(paths.jobs.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}
