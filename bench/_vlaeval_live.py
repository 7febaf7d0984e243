"""Run by bench/realtime_live.py (never imported by evalfleet): Push-T episodes through vla-eval 0.8.0's live
mode (`LiveEpisodeRunner`: the env paced at `hz`, the benchmark's hold action while the model is late), the model
a server whose every prediction sleeps `sleep_s` and then pushes toward the block (the same rule as the evalfleet
side's policy).

    python _vlaeval_live.py '{"seeds": [...], "max_steps": 50, "hz": 10, "sleep_s": 0.15}'

Prints JSON: {"stale_ratio": [...], "stale_count": [...], "steps": [...]}, one per episode."""

from __future__ import annotations

import json
import sys
import time

import anyio
import numpy as np
from vla_eval.api import serve_background
from vla_eval.benchmarks.base import repeat_last_hold
from vla_eval.connection import Connection
from vla_eval.model_servers.predict import PredictModelServer
from vla_eval.runners.live_runner import LiveEpisodeRunner

from _vlaeval_pusht import PushT


def toward_block(state: np.ndarray) -> np.ndarray:
    """Normalised [-1, 1] target: the block's position (Push-T's state: agent x, y, block x, y, angle)."""
    return (np.asarray(state, dtype=np.float64)[2:4] / 256.0 - 1.0).astype(np.float32)


class LivePushT(PushT):
    """Push-T with its target positions held on a late tick (absolute control: repeat the last action)."""

    def get_hold_action(self, last_action):
        return repeat_last_hold(last_action, 2)


class SleepyServer(PredictModelServer):
    def __init__(self, sleep_s: float):
        super().__init__()
        self.sleep_s = sleep_s

    def predict(self, obs, ctx):
        time.sleep(self.sleep_s)
        return {"actions": toward_block(obs["states"])}


def main() -> None:
    args = json.loads(sys.argv[1])
    seeds, max_steps = [int(s) for s in args["seeds"]], int(args["max_steps"])

    async def episodes(url: str) -> dict:
        benchmark = LivePushT(max_steps)
        runner = LiveEpisodeRunner(hz=float(args["hz"]))
        conn = Connection(url)
        await conn.connect(benchmark="pusht")
        out: dict = {"stale_ratio": [], "stale_count": [], "steps": []}
        for seed in seeds:
            result = await runner.run_episode(benchmark, {"name": "pusht", "seed": seed}, conn, max_steps=max_steps)
            out["stale_ratio"].append(result["rt_metrics"]["stale_action_ratio"])
            out["stale_count"].append(result["rt_metrics"]["stale_count"])
            out["steps"].append(int(result["steps"]))
        await conn.close()
        benchmark.env.close()
        return out

    with serve_background(SleepyServer(float(args["sleep_s"]))) as server:
        print(json.dumps(anyio.run(episodes, server.url)))


if __name__ == "__main__":
    main()
