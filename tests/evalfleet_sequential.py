"""The sequential Experiment of issue #25's end-to-end tests (tests/execution/test_sequential_runs.py, the Slurm
waves in tests/backends/slurm/test_slurm_sequential.py): Meta-World's expert against the expert with strong action
noise on push-v3, decided before the cap; and what those tests compare. Episodes end at 150 steps: the expert
succeeds by about step 60, and the noisy expert's failures, which would run to 500, cost a third as much."""

from __future__ import annotations

import json
from pathlib import Path

EXPERIMENT = """\
name: sequential
stopping:
  wave: 5
  max_episodes: 30
  compare: {baseline: expert}
shared:
  environment: {type: metaworld, task: push-v3, max_steps: 150}
  policy: {type: metaworld_expert}
  rollout_limit: {num_episodes: 30}
runs:
  expert: {policy_name: expert}
  noisy:
    policy_name: noisy
    variations:
      robot.action_noise: {enabled: true, distribution: uniform, low: 1.0, high: 1.0}
"""

# One served policy for both Runs (server_sharing: per_policy: one server, which a 2-CPU Ray instance fits).
SERVED = "server_sharing: per_policy\n" + EXPERIMENT.replace(
    "  policy: {type: metaworld_expert}\n",
    "  policy: {type: openpi_remote, serve: {type: metaworld_expert}, allow_unauthenticated: true}\n")


def decisions(out: Path) -> tuple[list[dict], dict]:
    result = json.loads((out / "experiment_result.json").read_text())
    return result["comparisons"], {n: r.get("stopping") for n, r in result["runs"].items()}


def server_starts(out: Path, run: str = "expert") -> int:
    """How many times a Run's server started: the start lines it wrote into its log (kept beside its first Run's
    records, one block per start, restarts included)."""
    return sum(" starting " in line for line in (out / run / "server.log").read_text().splitlines())
