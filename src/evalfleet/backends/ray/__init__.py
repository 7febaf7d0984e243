"""The Ray backend: every shard is a Ray task that runs the runner under the watchdog on some node.

    evalfleet run EXP.yaml --backend ray [--ray-address ADDR]
    evalfleet submit EXP.yaml --backend ray --ray-address http://HEAD:8265

A shard task (1 CPU, retried by Ray when its worker dies) writes the single experiment file and the Run's
already-recorded episodes of its range into a private temp folder on its node, runs
`evalfleet runner EXP --output TMP --shard RUN:START:STOP` under `watchdog.supervise`, and streams every new
record line, in batches, to a `_RecordSink` actor, with the files the runner wrote for its episode (a recorded
trajectory and its camera videos). The driver drains the sink, writes the files into OUT/<run>/trajectories/ and
then appends the lines to OUT/<run>/parts/<shard>.jsonl, so workers need no shared filesystem and the progress
bar, run_status.json, resume, summary and trajectory dataset are the local backend's. A retried or resumed task
starts from every line the sink holds for its range, so finished episodes are never run twice.

A Run with a served policy (a server binding whose `needs_server` is true) gets a placement group: bundle 0
holds a `_PolicyServer` actor (resources from `binding.resources`) that starts the server with
`ServerProcess` on a free port of its node and restarts it on the same port if it dies; the Run's shard tasks
go in the other bundles (PACK strategy) with the client options wired to that host and port. The server
is stopped (its log kept as OUT/<run>/server.log) and the group removed when the Run's shards are done; under
sequential stopping, when its Run is decided: servers and sink live for the backend's `serve`, across every
wave (`serving.RayServing`).
Servers are planned as for the local backend (`serving.planning.plan_server_groups`): one per served Run, or
with `server_sharing: per_policy` one per distinct server identity, whose group then holds the shard tasks of
all the Runs sharing it.

The package, by concern: `backend` (the `ray` backend: check, connect, execute, submit), `driver` (`RayRun`: one
execute's shard tasks, the sink drained into the parts), `serving` (`RayServing`: what one serve keeps for every
wave: the sink, the servers' placement groups and actors), `shard_task` (what a shard task
runs on its node), `sink` (the `RecordSink` actor), `policy_server` (the `PolicyServer` actor), `jobs` (Ray
Jobs: submit a whole evaluation, wait for it) and `common` (Ray imported on first use).
"""

from evalfleet.backend_registry import register_backend
from evalfleet.backends.ray.settings import RaySettings

register_backend("ray", "evalfleet.backends.ray.backend:RayBackend", settings=RaySettings,
                 summary="shard tasks on a Ray cluster (or a local Ray instance); also Ray jobs",
                 executes=True, submits=True, sequential_waves=True, served_policies=True, gpus=True,
                 task_entry="evalfleet.backends.ray.shard_task:run_shard_on_worker")
