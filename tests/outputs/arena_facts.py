"""Isaac Lab Arena's metadata, manifest and timings files for tests, shaped as Arena writes them:
- arena_experiment_metadata.json: isaaclab_arena/evaluation/arena_experiment_metadata.py
  (ArenaExperimentMetadataRecorder: schema_version, status, started/resolved/finished_at, experiment_config
  {path, format, sha256}, command, runtime flags, revision {git_commit, git_dirty, isaaclab_submodule}, runs
  {name: resolved seeds, camera and its resolution source, rollout_limit, num_rebuilds, variations});
- experiment_manifest.json: isaaclab_arena/evaluation/experiment_manifest.py (dataclasses.asdict of
  ExperimentManifest: runs [RunManifestEntry], experiment_name, created_at, source, label_source, schema_version);
- arena_experiment_timings.json: isaaclab_arena/evaluation/experiment_timings.py and utils/timer.py (per Run a
  list of get_timer_stats_json records; at the root {"totals": merge_timer_stats_json(...), "runs": [{run_name,
  ...record}]}). The timer names below are illustrative: Arena names its timers where it measures."""

from __future__ import annotations

import json
from pathlib import Path

TIMERS = {"build_environment": (1, 41000.0), "policy_get_action": (600, 0.0), "env_step": (600, 0.0),
          "write_episode_results": (6, 0.0)}


def timer_record(name: str, count: int, base_ms: float, spread: float) -> dict:
    """One get_timer_stats_json entry."""
    mean = base_ms or spread
    return {"type": "timing", "name": name, "app_name": "experiment_runner", "count": count, "mean_ms": mean,
            "total_ms": mean * count, "min_ms": mean * 0.5, "max_ms": mean * 3.0, "p10_ms": mean * 0.7,
            "p50_ms": mean * 0.95, "p90_ms": mean * 1.6}


def write_arena_facts(root: Path, runs: dict[str, tuple[str, str]]) -> None:
    """`runs`: Run name -> (task label, policy label); each Run folder must exist already."""
    per_run = {}
    for i, run in enumerate(runs):
        spreads = {"build_environment": 0.0, "policy_get_action": 38.0 + 9 * i, "env_step": 11.0 + 2 * i,
                   "write_episode_results": 1.5}
        records = [timer_record(name, count, base, spreads[name]) for name, (count, base) in TIMERS.items()]
        (root / run / "arena_experiment_timings.json").write_text(json.dumps(records, indent=2) + "\n")
        per_run[run] = records
    rows = [{"run_name": run, **rec} for run in sorted(per_run) for rec in per_run[run]]
    (root / "arena_experiment_timings.json").write_text(json.dumps({"totals": [], "runs": rows}, indent=2) + "\n")
    metadata = {
        "schema_version": 1, "status": "finished", "started_at": "2026-05-01T10:00:00.000000Z",
        "resolved_at": "2026-05-01T10:00:05.000000Z", "finished_at": "2026-05-01T11:00:00.000000Z",
        "experiment_config": {"path": "/workspace/exp/banana.yaml", "format": "yaml", "sha256": "ab" * 32},
        "experiment_output_directory": "/workspace/out", "working_directory": "/workspace",
        "command": ["/isaac-sim/python.sh", "isaaclab_arena/evaluation/experiment_runner_cli.py",
                    "--experiment_cfg", "/workspace/exp/banana.yaml"],
        "experiment_overrides": [],
        "runtime": {"device": "cuda:0", "headless": True, "visualizer": None, "rendering_mode": "performance",
                    "renderer": None, "enable_cameras": True, "record_viewport_video": False,
                    "record_camera_video": True, "environment_render_mode": None},
        "revision": {"git_commit": "0123456789abcdef0123456789abcdef01234567", "git_dirty": True,
                     "isaaclab_submodule": {"git_commit": "fe" * 20, "expected_git_commit": "fe" * 20,
                                            "matches_superproject": True, "git_dirty": False}},
        "runs": {run: {"environment_config_type": "isaaclab_arena.examples.KitchenPickAndPlaceCfg",
                       "policy_config_type": "isaaclab_arena.policy.Gr00tRemotePolicyCfg", "num_envs": 2,
                       "device": "cuda:0", "seed": 1000, "placement_seed": 7,
                       "camera": {"enabled": True, "height": None, "width": None,
                                  "resolution_source": "embodiment_default"},
                       "rollout_limit": {"num_steps": None, "num_episodes": 6, "source": "configured"},
                       "num_rebuilds": 1, "variations": {"light.hdr_image": {"enabled": True}}} for run in runs},
    }
    (root / "arena_experiment_metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    manifest = {"runs": [{"name": run, "task": task, "policy": policy, "environment": "kitchen_pick_and_place",
                          "policy_type": "gr00t_remote", "num_episodes": 6, "num_rebuilds": 1, "num_envs": 2,
                          "language_instruction": "Put the banana in the bowl.", "variations": {}}
                         for run, (task, policy) in runs.items()],
                "experiment_name": root.name, "created_at": "2026-05-01T10:00:05", "source": "experiment_runner",
                "label_source": "configured", "schema_version": 1}
    (root / "experiment_manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
