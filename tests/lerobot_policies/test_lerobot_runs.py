"""LeRobot checkpoints served from LeRobot's own Python 3.12 venv, on the local backend (must-show 1):
a Push-T Run with a tiny random ACT and a Meta-World Run with a tiny random Diffusion give identical
per-episode results on rerun, carry the checkpoint's provenance in every record, and are spec-checked
against their environment before the first episode."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from lerobot_testkit import run_cli
from evalfleet_testkit import results_by_episode


def _experiment(tmp_path: Path, act: Path, diffusion: Path, **pusht_env: object) -> Path:
    runs = {
        "pusht_act": {
            "environment": {"type": "pusht", "obs_type": "pixels_agent_pos", "image_size": 32, "max_steps": 40,
                            **pusht_env},
            "policy": {"type": "lerobot", "path": str(act), "device": "cpu"},
            "rollout_limit": {"num_episodes": 3},
            "environment_builder": {"num_envs": 2},
        },
        "reach_diffusion": {
            "environment": {"type": "metaworld", "task": "reach-v3", "max_steps": 12, "cameras": ["corner"],
                            "image_camera": "corner", "image_size": 32},
            "policy": {"type": "lerobot", "path": str(diffusion)},
            "rollout_limit": {"num_episodes": 2},
        },
    }
    path = tmp_path / "lerobot.yaml"
    path.write_text(yaml.safe_dump({"name": "lerobot", "seed": 3, "runs": runs}, sort_keys=False))
    return path


def _records(out: Path, run: str) -> list[dict]:
    return [json.loads(line) for line in (out / run / "episode_results.jsonl").read_text().splitlines() if line]


def test_pusht_act_and_metaworld_diffusion_rerun_identically(tmp_path, act_pusht, diffusion_metaworld):
    experiment = _experiment(tmp_path, act_pusht, diffusion_metaworld)
    outs = []
    for name in ("first", "second"):
        out = tmp_path / name
        proc = run_cli("run", str(experiment), "--output", str(out), "--workers", "2", "--no-progress")
        assert proc.returncode == 0, proc.stderr[-4000:]
        outs.append(out)
    first, second = (results_by_episode(o) for o in outs)
    assert len(first) == 5 and first == second
    for run, ckpt in (("pusht_act", act_pusht), ("reach_diffusion", diffusion_metaworld)):
        records = _records(outs[0], run)
        assert {r["status"] for r in records} <= {"success", "failure"}, records
        provenance = {json.dumps(r["policy_provenance"], sort_keys=True) for r in records}
        assert len(provenance) == 1
        p = json.loads(provenance.pop())
        assert p["framework"] == "lerobot" and p["lerobot_version"] == "0.6.1"
        assert p["path"] == str(ckpt.resolve()) and len(p["weights_sha256"]) == 64 and len(p["config_sha256"]) == 64
    # the server really ran in the 3.12 venv
    log = (outs[0] / "pusht_act" / "server.log").read_text()
    assert "serving openpi on" in log


def test_image_size_mismatch_fails_the_run_before_its_first_episode(tmp_path, act_pusht, diffusion_metaworld):
    experiment = _experiment(tmp_path, act_pusht, diffusion_metaworld, image_size=48)
    out = tmp_path / "out"
    proc = run_cli("run", str(experiment), "--output", str(out), "--workers", "1", "--no-progress")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "image size of top: policy 32x32, environment 48x48" in proc.stderr + proc.stdout
    assert not _records_or_empty(out, "pusht_act")
    assert len(_records(out, "reach_diffusion")) == 2  # the other Run is not affected


def _records_or_empty(out: Path, run: str) -> list[dict]:
    path = out / run / "episode_results.jsonl"
    return _records(out, run) if path.exists() else []
