"""A trained checkpoint gives the same episodes through lerobot-eval and through evalfleet (issue #29 must-show 3):
scripts/pusht-checkpoint.sh's ACT (trained here on the Push-T planner's demonstrations; it succeeds in some
episodes and fails in others, so agreement can fail) plays seeds 0..N-1 in `lerobot-eval --seed=0` and in evalfleet
replaying those seeds through a condition set, both ways evalfleet runs a LeRobot checkpoint: in-process from
LeRobot's venv (`lerobot_local`) and served over openpi from evalfleet's own environment (`lerobot`). Neither
evalfleet side batches observations, so every forward pass is lerobot-eval's own (a batch of one) and every
episode must end the same way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lerobot_testkit import HERE, venv_env

EPISODES = 12
ROOT = HERE.parent.parent


@pytest.fixture(scope="session")
def trained_pusht(lerobot_py) -> Path:
    """The cached checkpoint (built by scripts/test.sh before the suite; here only if it is missing, ~4 min)."""
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "pusht-checkpoint.sh")], capture_output=True, text=True,
                          env=venv_env(), timeout=1800, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


def _condition_set(path: Path) -> None:
    from evalfleet.experiment.condition_export import seeds_document

    path.write_text(json.dumps(seeds_document("pusht", "pusht", range(EPISODES), runs=["act"],
                                              experiment="lerobot-eval --seed=0")))


def _evalfleet(python: str, tmp_path: Path, name: str, policy: dict) -> dict[int, bool]:
    folder = tmp_path / name
    folder.mkdir()
    _condition_set(folder / "seeds.json")
    experiment = folder / "exp.yaml"
    experiment.write_text(yaml.safe_dump({"name": name, "runs": {"act": {
        "environment": {"type": "pusht", "obs_type": "environment_state_agent_pos"}, "policy": policy,
        "conditions": "seeds.json", "rollout_limit": {"num_episodes": EPISODES}}}}))
    proc = subprocess.run([python, "-m", "evalfleet.cli", "run", str(experiment), "--output", str(folder / "out"),
                           "--workers", "2", "--no-progress"], capture_output=True, text=True, env=venv_env(),
                          timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (folder / "out" / "act" / "episode_results.jsonl").read_text().splitlines()]
    assert {r["status"] for r in records} <= {"success", "failure"}, records
    return {int(r["seed"]): bool(r["success"]) for r in records}


def test_lerobot_eval_and_evalfleet_end_every_episode_alike(tmp_path, lerobot_py, trained_pusht):
    proc = subprocess.run([str(lerobot_py.parent / "lerobot-eval"), f"--policy.path={trained_pusht}",
                           "--policy.device=cpu", "--env.type=pusht", "--env.obs_type=environment_state_agent_pos",
                           f"--eval.n_episodes={EPISODES}", "--seed=0", f"--output_dir={tmp_path / 'lerobot_eval'}"],
                          capture_output=True, text=True, env={**venv_env(), "HF_HUB_OFFLINE": "1"}, timeout=900,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads((tmp_path / "lerobot_eval" / "eval_info.json").read_text())
    theirs = dict(enumerate(bool(s) for s in info["per_task"][0]["metrics"]["successes"]))
    assert 0 < sum(theirs.values()) < EPISODES, f"the checkpoint must succeed in some episodes only: {theirs}"

    in_process = _evalfleet(str(lerobot_py), tmp_path, "in_process",
                            {"type": "lerobot_local", "path": str(trained_pusht)})
    served = _evalfleet(sys.executable, tmp_path, "served", {
        "type": "lerobot", "path": str(trained_pusht), "batching": {"max_batch": 1}})
    assert in_process == theirs
    assert served == theirs
