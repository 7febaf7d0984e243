"""The output folder's format: every name in it, defined once, and the paths made from them.

```
OUT/
  experiment.yaml            EXPERIMENT_FILE: the resolved Experiment
  experiment_result.json     RESULT_FILE
  index.html                 REPORT_FILE
  plots/                     PLOTS_DIR
  experiment_metadata.json   METADATA_FILE: status (starting → running → finished | interrupted | failed), git, hashes
  experiment_manifest.json   MANIFEST_FILE: each Run's task/policy labels and where they came from
  timings.json               TIMINGS_FILE: per Run and phase, merged from the shards' files by collect
  dataset/                   DATASET_DIR: the recorded trajectories as a LeRobotDataset v3.0 (or one per Run folder)
  verify.json                VERIFY_FILE: `evalfleet verify`'s replay of the first episodes, against the records
  report_episodes/           REPORT_DATA_DIR: index.html's episode tables, <NNNN>.js per Run, loaded on demand;
                             trajectories/<NNNN>-<EEEEEE>.js: a recorded episode's plot data (report_trajectories)
  .evalfleet/                INTERNAL_DIR: worker logs, heartbeats and status files, claims, the wired Experiment,
                             the folder's lock (LOCK_FILE) and the run's space reserve (SPACE_RESERVE_FILE)
  <run>/                     run_dir(out, run): a Run folder
    episode_results.jsonl    RECORDS_FILE: the collected records, one line per episode
    parts/<shard>.jsonl      PARTS_DIR: append-only records, one file per shard attempt
    run_status.json          STATUS_FILE
    protocol.json            PROTOCOL_FILE: the task protocol (sim/protocol.py) whose identity its records carry
    videos/<camera>/...      VIDEOS_DIR
    trajectories/            TRAJECTORIES_DIR: episode_NNNNNN.arrow per recorded episode, <camera>/*.mp4
    server.log               SERVER_LOG: the Run's policy server, when evalfleet started one
    timings/<shard>-...json  RUN_TIMINGS_DIR: one worker's phase timings of one shard (timings_path)
```

Isaac Lab Arena's own names are read beside these: `episode_results_rebuild<R>.jsonl` (or `_rank<N>`),
`experiment_runner_result.json`, `arena_attempts/attempt-<NNN>`, `arena_experiment_metadata.json`,
`experiment_manifest.json` (the same name as evalfleet's) and `arena_experiment_timings.json` (at the root and in
each Run folder). Names and paths only: reading a Run folder's
files is `rollout.run_folder`'s work (for `outputs.collect` and `analysis.loading`).
"""

from __future__ import annotations

import re
from pathlib import Path

# --- the output folder ---------------------------------------------------------------------------------
EXPERIMENT_FILE = "experiment.yaml"
RESULT_FILE = "experiment_result.json"
REPORT_FILE = "index.html"
REPORT_DATA_DIR = "report_episodes"  # the report's episode tables, one script per Run, loaded on demand
PLOTS_DIR = "plots"
INTERNAL_DIR = ".evalfleet"
METADATA_FILE = "experiment_metadata.json"
MANIFEST_FILE = "experiment_manifest.json"
TIMINGS_FILE = "timings.json"
DATASET_DIR = "dataset"
VERIFY_FILE = "verify.json"  # `evalfleet verify`: replayed episodes against their records

# --- a Run folder --------------------------------------------------------------------------------------
RECORDS_FILE = "episode_results.jsonl"
RECORDS_PREFIX = "episode_results"  # every file a reader takes as records starts with it (Arena's as well)
RECORDS_SUFFIX = ".jsonl"
PARTS_DIR = "parts"
STATUS_FILE = "run_status.json"
PROTOCOL_FILE = "protocol.json"
VIDEOS_DIR = "videos"
TRAJECTORIES_DIR = "trajectories"
SERVER_LOG = "server.log"
RUN_TIMINGS_DIR = "timings"

# --- inside INTERNAL_DIR -------------------------------------------------------------------------------
WIRED_EXPERIMENT_FILE = "experiment.wired.yaml"  # experiment.yaml wired to this invocation's server ports
CLAIMS_DIR = "claims"
FEED_DIR = "feed"  # the shards a sequential Experiment's driver releases to runners that keep running (shard_feed.py)
RUN_TIMINGS_FILE = "timings-run.json"  # the run process's own phases (server_start), merged by collect
SLURM_DIR = "slurm"  # the Slurm backend's sbatch scripts, job logs, server addresses and job ids
LOCK_FILE = "lock"  # flock'd by the one process writing the folder; holds {pid, host, since} (outputs/output_lock.py)
SPACE_RESERVE_FILE = "space.reserve"  # freed on a full disk so the metadata can still say `failed` (run_metadata)

# --- Isaac Lab Arena's own names -----------------------------------------------------------------------
# Arena's runner writes one record file per environment rebuild (or per rank when distributed).
ARENA_RECORDS = re.compile(r"^episode_results_(rebuild|rank)(\d+)\.jsonl$")
# Arena's camera videos: <prefix>-rebuild<R>-env<N>-<camera>-episode-<E>.mp4
ARENA_VIDEO = re.compile(
    r"^(?P<prefix>.*)-rebuild(?P<rebuild>\d+)-env(?P<env>\d+)-(?P<camera>.+)-episode-(?P<episode>\d+)\.mp4$")
ARENA_RESULT_FILE = "experiment_runner_result.json"  # what Arena's collector reads in a runner's output
ARENA_ATTEMPTS_DIR = "arena_attempts"  # {{output}}/arena_attempts/attempt-<NNN>: one Arena output per attempt
ARENA_ATTEMPT_FOLDER = "attempt-{attempt:03d}"  # zero-padded: collect reads the attempts in name order = launch order
ARENA_METADATA_FILE = "arena_experiment_metadata.json"  # at Arena's output root
ARENA_MANIFEST_FILE = MANIFEST_FILE  # Arena's experiment_manifest.json: the same name, its own schema
ARENA_TIMINGS_FILE = "arena_experiment_timings.json"  # per Run (a list of timers), and at the root (totals, runs)


def run_dir(out: Path, run: str) -> Path:
    return out / run


def records_path(out: Path, run: str) -> Path:
    return out / run / RECORDS_FILE


def parts_dir(out: Path, run: str) -> Path:
    return out / run / PARTS_DIR


def part_path(out: Path, run: str, shard_id: str) -> Path:
    """A shard's own record file: OUT/<run>/parts/<shard>.jsonl."""
    return out / run / PARTS_DIR / f"{shard_id}{RECORDS_SUFFIX}"


def run_status_path(out: Path, run: str) -> Path:
    return out / run / STATUS_FILE


def protocol_path(out: Path, run: str) -> Path:
    """OUT/<run>/protocol.json: the Run's TaskProtocol.describe(), written when the Run starts."""
    return out / run / PROTOCOL_FILE


def server_log_path(out: Path, run: str) -> Path:
    return out / run / SERVER_LOG


def timings_path(out: Path, run: str, shard_id: str, worker: str) -> Path:
    """OUT/<run>/timings/<shard>-<worker>.json: one worker's phase timings of one shard (collect merges them)."""
    return out / run / RUN_TIMINGS_DIR / f"{shard_id}-{worker}.json"


def internal_dir(out: Path) -> Path:
    return out / INTERNAL_DIR


def lock_path(out: Path) -> Path:
    """OUT/.evalfleet/lock: the output folder's advisory lock (outputs/output_lock.py)."""
    return out / INTERNAL_DIR / LOCK_FILE


def worker_file(out: Path, worker: int, suffix: str) -> Path:
    """OUT/.evalfleet/worker-<N><suffix>: a local worker's `.log`, `.heartbeat` and `.status.json`."""
    return out / INTERNAL_DIR / f"worker-{worker}{suffix}"


def ray_task_log(out: Path, run: str, shard_id: str) -> Path:
    """OUT/.evalfleet/ray-<run>-<shard>.log: the log tail of a Ray task that did not complete."""
    return out / INTERNAL_DIR / f"ray-{run}-{shard_id}.log"


def is_records_name(name: str) -> bool:
    """A file name readers take as records: episode_results.jsonl, or Arena's episode_results_*.jsonl."""
    return name.startswith(RECORDS_PREFIX) and name.endswith(RECORDS_SUFFIX)

