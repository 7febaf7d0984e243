"""Run inside vla-eval's own venv by bench/harness_overhead.py (never imported by evalfleet): the same Push-T
episodes through vla-eval 0.8.0's sync runner (its benchmark → websocket → model server loop, the model a
seeded uniform-random policy served in-process with `serve_background`), and a bare loop in this interpreter.

    python _vlaeval_pusht.py '{"seeds": [...], "max_steps": 100, "repeats": 3}'

vla-eval ships no Push-T benchmark, so a minimal `StepBenchmark` over gym-pusht is defined here. Prints JSON:
{"bare_s": [...], "vlaeval_s": [...], "steps": [...]} (repeats interleaved, ABBA)."""

from __future__ import annotations

import json
import sys
import time

import anyio
import gym_pusht  # noqa: F401 - registers the id
import gymnasium
import numpy as np
from vla_eval.api import serve_background
from vla_eval.benchmarks.base import StepBenchmark, StepResult
from vla_eval.connection import Connection
from vla_eval.model_servers.predict import PredictModelServer
from vla_eval.runners.sync_runner import SyncEpisodeRunner

PUSHT_ID = "gym_pusht/PushT-v0"
LOW, HIGH = 0.0, 512.0


def make_env(max_steps: int):
    return gymnasium.make(PUSHT_ID, obs_type="state", render_mode="rgb_array", max_episode_steps=max_steps)


def to_native(a: np.ndarray) -> np.ndarray:
    return LOW + (np.clip(a, -1.0, 1.0) + 1.0) * 0.5 * (HIGH - LOW)


class PushT(StepBenchmark):
    render_backends = frozenset({"cpu", "gpu"})

    def __init__(self, max_steps: int):
        super().__init__()
        self.env = make_env(max_steps)
        self.max_steps = max_steps
        self.steps = 0

    def get_tasks(self):
        return [{"name": "pusht"}]

    def reset(self, task):
        self.steps = 0
        obs, _ = self.env.reset(seed=int(task["seed"]))
        return obs

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(to_native(np.asarray(action["actions"]).reshape(-1)))
        self.steps += 1
        done = bool(info.get("is_success")) or terminated or truncated or self.steps >= self.max_steps
        return StepResult(obs=obs, reward=float(reward), done=done, info=info)

    def make_obs(self, raw_obs, task):
        return {"states": np.asarray(raw_obs, dtype=np.float32), "task_description": "push the T"}

    def get_step_result(self, step_result):
        return {"success": bool(step_result.info.get("is_success", False))}

    def get_action_spec(self):
        return {}

    def get_observation_spec(self):
        return {}


class RandomServer(PredictModelServer):
    """Uniform actions in [-1, 1] from one generator per episode seed (the same stream as evalfleet's `random`)."""

    def __init__(self):
        super().__init__()
        self.rng = np.random.default_rng(0)

    async def on_episode_start(self, config, ctx):
        await super().on_episode_start(config, ctx)
        self.rng = np.random.default_rng([int(config["task"]["seed"]), 0x7A11D])

    def predict(self, obs, ctx):
        return {"actions": self.rng.uniform(-1.0, 1.0, size=2).astype(np.float32)}


def bare(seeds: list[int], max_steps: int) -> tuple[float, int]:
    env = make_env(max_steps)
    steps = 0
    t0 = time.perf_counter()
    for seed in seeds:
        rng = np.random.default_rng([seed, 0x7A11D])
        env.reset(seed=seed)
        for _ in range(max_steps):
            action = to_native(rng.uniform(-1.0, 1.0, size=2).astype(np.float32))
            _obs, _r, terminated, truncated, info = env.step(action)
            steps += 1
            if info.get("is_success") or terminated or truncated:
                break
    seconds = time.perf_counter() - t0
    env.close()
    return seconds, steps


def vlaeval(seeds: list[int], max_steps: int) -> tuple[float, int]:
    async def episodes(url: str) -> tuple[float, int]:
        benchmark = PushT(max_steps)
        runner = SyncEpisodeRunner()
        conn = Connection(url)
        await conn.connect(benchmark="pusht")
        steps = 0
        t0 = time.perf_counter()
        for seed in seeds:
            result = await runner.run_episode(benchmark, {"name": "pusht", "seed": seed}, conn, max_steps=max_steps)
            steps += int(result["steps"])
        seconds = time.perf_counter() - t0
        await conn.close()
        benchmark.env.close()
        return seconds, steps

    with serve_background(RandomServer()) as server:
        return anyio.run(episodes, server.url)


def main() -> None:
    args = json.loads(sys.argv[1])
    seeds, max_steps, repeats = [int(s) for s in args["seeds"]], int(args["max_steps"]), int(args["repeats"])
    out: dict[str, list] = {"bare_s": [], "vlaeval_s": [], "steps": [], "bare_steps": []}
    for i in range(repeats):
        order = ("bare", "vlaeval") if i % 2 == 0 else ("vlaeval", "bare")
        for which in order:
            seconds, steps = (bare if which == "bare" else vlaeval)(seeds, max_steps)
            out[f"{which}_s"].append(seconds)
            out["bare_steps" if which == "bare" else "steps"].append(steps)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
