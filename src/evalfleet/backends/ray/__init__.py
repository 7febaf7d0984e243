"""The Ray backend: worker tasks that each run one runner under the watchdog on some node, for many shards.

    evalfleet run EXP.yaml --backend ray [--ray-address ADDR]
    evalfleet submit EXP.yaml --backend ray --ray-address http://HEAD:8265

A worker task (1 CPU, run again by Ray when its worker process dies) writes the experiment file of its pool's Runs
into a private temp folder on its node and runs `evalfleet runner EXP --output TMP --feed TMP/feed` under
`watchdog.supervise` once; it takes shards one at a time from a `ShardQueue` actor and hands each to its runner
with the Run's already-recorded episodes of its range, so the runner keeps its environments and policy from shard
to shard and finished episodes are never run twice (issue #57). Every new record line is streamed, in batches, to
a `RecordSink` actor with the files the runner wrote for its episode (a recorded trajectory and its camera
videos). The driver drains the sink, writes the files into OUT/<run>/trajectories/ and then appends the lines to
OUT/<run>/parts/<shard>.jsonl, so workers need no shared filesystem and the progress bar, run_status.json,
resume, summary and trajectory dataset are the local backend's.

A Run with a served policy (a server binding whose `needs_server` is true) gets a placement group: bundle 0
holds a `PolicyServer` actor (resources from `binding.resources`) that starts the server with `ServerProcess` on a
free port of its node and restarts it on the same port if it dies; the workers of the Runs it serves (its pool)
go in the other bundles (PACK strategy) with the client options wired to that host and port. The server is
stopped (its log kept as OUT/<run>/server.log) and the group removed when its pool is done: its Runs' shards run,
or, under sequential stopping, its Runs decided. Servers are planned as for the local backend
(`serving.planning.plan_server_groups`): one per served Run, or with `server_sharing: per_policy` one per distinct
server identity, whose group then holds the workers of all the Runs sharing it.

The package, by concern: `backend` (the `ray` backend: check, connect, execute, submit), `driver` (`RayRun`: the
pools of worker tasks, the queue fed, the sink drained into the parts), `shard_queue` (the `ShardQueue` actor),
`serving` (`RayServing`: the sink, the servers' placement groups and actors), `worker_task` (what a worker task
runs on its node), `sink` (the `RecordSink` actor), `policy_server` (the `PolicyServer` actor), `jobs` (Ray Jobs:
submit a whole evaluation, wait for it) and `common` (Ray imported on first use).
"""

from evalfleet.backend_registry import register_backend
from evalfleet.backends.ray.settings import RaySettings

register_backend("ray", "evalfleet.backends.ray.backend:RayBackend", settings=RaySettings,
                 summary="worker tasks on a Ray cluster (or a local Ray instance), one runner each for many "
                         "shards; also Ray jobs",
                 executes=True, submits=True, sequential_waves=True, served_policies=True, gpus=True,
                 task_entry="evalfleet.backends.ray.worker_task:run_worker")
