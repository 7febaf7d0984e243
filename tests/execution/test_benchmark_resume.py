"""`evalfleet run` killed with SIGKILL midway on the benchmarks beyond Meta-World (Push-T, any Gymnasium id,
robosuite, LIBERO, ALOHA), then `--resume`: the per-episode results equal an uninterrupted run's, and every observation
any runner saw, in the killed run or the resumed one, equals the uninterrupted run's observation at that
(episode seed, step) — an episode cut short by the kill replays from its start, identically."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from evalfleet_testkit import (evalfleet_cmd, plugin_env, results_by_episode, run_evalfleet, runners_at_gate,
                               wait_for)

pytest.importorskip("gym_pusht")
pytest.importorskip("robosuite")
pytest.importorskip("libero.libero")
pytest.importorskip("gym_aloha")

pytestmark = pytest.mark.slow

SIM_TESTS = Path(__file__).resolve().parents[1] / "sim"  # sim_digest_policy lives there
DIGEST = {"type": "test_observation_digest"}
RUNS = {
    "pusht_noisy": {
        "environment": {"type": "pusht", "obs_type": "state", "max_steps": 30, "actions": "normalized"},
        "policy": DIGEST,
        "rollout_limit": {"num_episodes": 6},
        "variations": {"robot.observation_noise": {"enabled": True}, "robot.action_noise": {"enabled": True}},
    },
    "cartpole": {
        "environment": {"type": "gymnasium", "id": "CartPole-v1", "import": "gymnasium",
                        "success": {"reward_at_least": 15.0}, "actions": "normalized"},
        "policy": DIGEST,
        "rollout_limit": {"num_episodes": 6},
    },
    "lift_noisy": {
        "environment": {"type": "robosuite", "task": "Lift", "max_steps": 30},
        "policy": DIGEST,
        "rollout_limit": {"num_episodes": 4},
        "variations": {"robot.action_noise": {"enabled": True}, "scene.friction_scale": {"enabled": True}},
    },
    "libero_noisy": {  # episodes start from the task's initial states 0..2
        "environment": {"type": "libero", "suite": "libero_spatial", "task": 0, "max_steps": 6, "settle_steps": 1},
        "policy": DIGEST,
        "rollout_limit": {"num_episodes": 3},
        "variations": {"robot.observation_noise": {"enabled": True}},
    },
    "aloha_noisy": {
        "environment": {"type": "aloha", "task": "transfer_cube", "max_steps": 20},
        "policy": DIGEST,
        "rollout_limit": {"num_episodes": 4},
        "variations": {"robot.action_noise": {"enabled": True}, "object.mass_scale": {"enabled": True}},
    },
}
TOTAL = sum(r["rollout_limit"]["num_episodes"] for r in RUNS.values())


def _runs(gate: Path) -> dict:
    """RUNS, where every runner process finishes 2 episodes, then waits at step 2 of its next one until the test
    releases `gate` (sim_digest_policy's gate): the SIGKILL always lands midway through an episode, on any machine."""
    return {name: {**run, "policy": {**DIGEST, "gate": str(gate), "after_episodes": 2, "at_step": 2}}
            for name, run in RUNS.items()}


def _env(digests: Path) -> dict[str, str]:
    digests.mkdir(exist_ok=True)
    env = plugin_env(EVALFLEET_DIGEST_DIR=str(digests), EVALFLEET_PLUGINS="sim_digest_policy")
    env["PYTHONPATH"] = os.pathsep.join([str(SIM_TESTS), env["PYTHONPATH"]])
    return env


def _digests(folder: Path) -> dict[tuple[int, int], str]:
    """(episode seed, step) → observation digest; fails if two runners saw different observations there."""
    found: dict[tuple[int, int], str] = {}
    for path in sorted(folder.glob("*.txt")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 3:  # a line torn by the SIGKILL
                continue
            key, digest = (int(parts[0]), int(parts[1])), parts[2]
            assert found.setdefault(key, digest) == digest, f"episode seed {key[0]} step {key[1]} saw two observations"
    return found


def _records_so_far(out: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in out.glob("*/parts/*.jsonl"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (ProcessLookupError, OSError):
        return False


def test_sigkill_midway_then_resume_gives_the_uninterrupted_results(write_experiment, tmp_path):
    gate = tmp_path / "gate"
    gate.mkdir()
    experiment = write_experiment(_runs(gate))
    (gate / "release").touch()  # the uninterrupted run passes the gate
    reference_out = tmp_path / "reference"
    proc = run_evalfleet("run", str(experiment), "--output", str(reference_out), "--workers", "1",
                         "--no-progress", env=_env(tmp_path / "d_reference"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = results_by_episode(reference_out)
    expected_digests = _digests(tmp_path / "d_reference")
    assert len(expected) == TOTAL
    # Outcomes and observations that differ per episode, so equality below means something.
    assert len({expected[("cartpole", i)][1:4] for i in range(6)}) > 1
    assert len(set(expected_digests.values())) == len(expected_digests)

    (gate / "release").unlink()  # the run to kill waits there
    out, digests = tmp_path / "killed", tmp_path / "d_killed"
    env = _env(digests)
    killed = subprocess.Popen(evalfleet_cmd("run", str(experiment), "--output", str(out), "--workers", "2",
                                            "--shard-size", "2", "--no-progress"),
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Both workers have finished 2 episodes each and wait midway through their next one.
        pids = wait_for(lambda: runners_at_gate(gate, 2), what="both workers at the gate")
        killed.send_signal(signal.SIGKILL)
        killed.wait()
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.wait()
    assert 3 <= _records_so_far(out) < TOTAL
    # The orphaned runners go on from the gate, notice their supervisor is gone and stop on their own; the
    # resumed run (same Experiment, same gate) passes it.
    (gate / "release").touch()
    wait_for(lambda: not any(_alive(p) for p in pids), timeout=30, what="orphaned runners to stop")

    done = run_evalfleet("run", "--resume", "--output", str(out), "--workers", "2", "--no-progress", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert results_by_episode(out) == expected
    assert _digests(digests) == expected_digests
