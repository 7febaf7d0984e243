"""What one `SlurmBackend.serve(job)` holds for every `execute` in it (`SlurmServing`): the policy server jobs and
the `ServerKeeper` that resubmits one that ended. A server job (on a cluster: a GPU model loading, a queue wait) is
submitted once and serves the whole execute: a fixed plan's array, or under sequential stopping the one array
whose tasks take every look from the shard feed, as the local backend's servers and Ray's do.

`begin_wave` (before each execute) cancels a server job none of whose Runs
is in the execute once no later one can need it (its Runs are fixed-N or decided), and submits again one whose
Runs are in it and whose job was cancelled. Every server job is cancelled when the serve ends, or at Ctrl-C."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evalfleet.execution.backends import ExecutionJob
from evalfleet.backends.slurm.commands import scancel
from evalfleet.backends.slurm.launch import ServerKeeper, launch_servers, reset_state, write_scripts
from evalfleet.backends.slurm.render import Rendering, render, write_jobs
from evalfleet.execution.waves import stopped_runs
from evalfleet.experiment.plan import Shard


@dataclass
class SlurmServing:
    job: ExecutionJob  # the whole plan: every wave's shards lie in it
    rendering: Rendering  # the whole plan's: its server scripts serve every wave
    jobs: dict[str, Any] = field(default_factory=lambda: {"server_jobs": {}})  # as launch's, `runners` per wave
    keeper: ServerKeeper | None = None
    started: dict[str, int] = field(default_factory=dict)  # server id → how many times its job was submitted

    @classmethod
    def open(cls, job: ExecutionJob, workers: int | None) -> "SlurmServing":
        """Every check (render), the state folder reset, every script written, every server job submitted."""
        rendering = render(job.loaded, job.out, job.plan, workers=workers, watchdog=job.watchdog, collect=False)
        serving = cls(job, rendering)
        reset_state(rendering)
        write_scripts(rendering)
        serving._submit(list(rendering.servers))
        serving.keeper = ServerKeeper(rendering, serving.jobs, job.loaded.secrets, log=job.log)
        return serving

    def _submit(self, servers: list[str]) -> None:
        if not servers:
            return
        launch_servers(self.rendering, self.job.loaded, self.jobs, servers)
        for server in servers:
            self.started[server] = self.started.get(server, 0) + 1
        self.job.log("slurm: server jobs " + ", ".join(f"{self.jobs['server_jobs'][s]} ({s})" for s in servers))

    def begin_wave(self, shards: list[Shard]) -> None:
        """Cancel the server jobs no wave from this one on needs; submit again those this wave needs."""
        runs = {s.run for s in shards}
        decided = set(stopped_runs(self.job.out, self.job.plan)) if self.jobs["server_jobs"] else set()
        plan_runs = self.job.plan.runs
        done = []
        for server, its in self.rendering.servers.items():
            running = server in self.jobs["server_jobs"]
            later = any(plan_runs[r].run.stopping is not None and r not in decided for r in its)
            if running and not runs.intersection(its) and not later:
                done.append(server)
        if done:
            stopped = [self.jobs["server_jobs"].pop(s) for s in done]
            scancel(stopped)
            write_jobs(self.rendering.paths, self.rendering, self.jobs)
            self.job.log(f"slurm: server jobs {', '.join(stopped)} cancelled: no later wave needs them")
        self._submit([s for s, its in self.rendering.servers.items()
                      if s not in self.jobs["server_jobs"] and runs.intersection(its)])

    def server_jobs(self) -> list[str]:
        return list(self.jobs["server_jobs"].values())

    def close(self) -> None:
        """No resubmission from now on; every server job cancelled."""
        if self.keeper is not None:
            self.keeper.close()
        scancel(self.server_jobs())
