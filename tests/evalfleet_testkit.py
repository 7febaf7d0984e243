"""Helpers shared by the suite (a uniquely named module: several test folders have their own conftest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PLUGINS_DIR = Path(__file__).resolve().parent / "plugins"


def metaworld_run(task: str, policy_type: str = "metaworld_expert", episodes: int = 6, **extra: Any) -> dict[str, Any]:
    run: dict[str, Any] = {
        "environment": {"type": "metaworld", "task": task},
        "policy": {"type": policy_type},
        "rollout_limit": {"num_episodes": episodes},
    }
    for key, value in extra.items():
        run[key] = value
    return run


def plugin_env(**extra: str) -> dict[str, str]:
    """Environment for evalfleet subprocesses that can use the misbehaving test policies."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGINS_DIR), env.get("PYTHONPATH", "")]))
    env["EVALFLEET_PLUGINS"] = "evalfleet_test_plugins"
    env.update(extra)
    return env


# Lines for a test's Python script: every os.fork() of the process is counted in `forks` (a list: one item a fork).
COUNT_FORKS = """
import os
forks = []
_fork = os.fork
def _counted_fork():
    forks.append(1)
    return _fork()
os.fork = _counted_fork
"""


def wait_for(predicate, *, what: str, timeout: float = 120.0):
    """`predicate()`'s first true value, polled until it comes; AssertionError naming `what` past `timeout` (a bound
    on a hang, not a timing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def runners_at_gate(gate: Path, count: int) -> list[int] | None:
    """The pids of the runners waiting at a test gate (evalfleet_test_plugins.GatedExpert), once `count` are."""
    pids = [int(p.name.split(".")[0]) for p in gate.glob("*.waiting")]
    return pids if len(pids) == count else None


def process_gone(pid: int, timeout: float = 20.0) -> bool:
    """Whether process `pid` has exited (gone, or a zombie) within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def evalfleet_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "evalfleet.cli", *args]


def run_evalfleet(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(evalfleet_cmd(*args), capture_output=True, text=True, env=env or plugin_env(),
                          timeout=timeout, stdin=subprocess.DEVNULL)


def results_by_episode(out: Path) -> dict[tuple[str, int], tuple[Any, ...]]:
    """(run, episode) → what must not depend on how the episode was run."""
    found = {}
    for path in sorted(out.glob("*/episode_results.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        episodes = [r["episode"] for r in lines]
        assert len(episodes) == len(set(episodes)), f"duplicate episodes in {path}"
        for r in lines:
            found[(r["run"], r["episode"])] = (r["seed"], r["status"], r["success"], r["episode_length"],
                                              json.dumps(r["variations"], sort_keys=True))
    return found


STARTS_AT_GOAL = "evalfleet-test/StartsAtGoal-v0"  # a Gymnasium id: registered by starts_at_goal()


def starts_at_goal():
    """A new StartsAtGoal env (a Gymnasium task whose start is past its goal for about one seed in four: success at
    reset, #55), its id STARTS_AT_GOAL registered in this process (in-process runs: run_shards)."""
    import gymnasium
    import numpy as np
    from gymnasium import spaces

    class StartsAtGoal(gymnasium.Env):
        """A point on a line that succeeds at x >= 3 (terminating). Its start is drawn in [0, 4), so about one
        start in four is already past the goal and the first step reports success whatever the action (a step
        moves at most 0.1 back)."""

        def __init__(self):
            self.action_space = spaces.Box(-0.1, 0.1, shape=(1,), dtype=np.float32)
            self.observation_space = spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float64)
            self.x = 0.0

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            self.x = float(self.np_random.uniform(0, 4))
            return np.array([self.x]), {}

        def step(self, action):
            self.x += float(np.clip(np.asarray(action).reshape(-1)[0], -0.1, 0.1))
            reached = self.x >= 3.0
            return np.array([self.x]), float(reached), reached, False, {"reached": reached}

    if STARTS_AT_GOAL not in gymnasium.registry:
        gymnasium.register(STARTS_AT_GOAL, entry_point=StartsAtGoal, max_episode_steps=40)
    return StartsAtGoal()
