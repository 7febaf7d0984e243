"""Serving benchmark: prints one JSON object.

1. Round trip of a 2x224x224x3 uint8 image + float32 state observation through our openpi server
   (a policy that returns a small action at once) versus a bare websocket echo of the same bytes.
   Target: p50 ratio <= 1.2.
2. Throughput of 8 concurrent clients against a policy whose act_batch costs a fixed 20 ms per call
   (a batched model), with batching on (max_batch 8) versus off. Target: >= 2x.

    python bench/serving.py [--requests 200] [--clients 8] [--cost-ms 20] [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from typing import Any

import numpy as np

from evalfleet.serving import msgpack_numpy
from evalfleet.serving.openpi import OpenpiRemoteOptions, OpenpiRemotePolicy, OpenpiServer
from evalfleet.serving.process import ServerThread


class FixedCostPolicy:
    metadata: dict[str, Any] = {"name": "fixed_cost"}

    def __init__(self, cost_ms: float):
        self.cost_s = cost_ms / 1000.0

    def reset(self, episode_seed: int, env_id: int = 0) -> None:
        pass

    def act_batch(self, observations: list[dict], env_ids: list[int]) -> list[np.ndarray]:
        if self.cost_s:
            time.sleep(self.cost_s)
        return [np.asarray(obs["observation/state"][:4], dtype=np.float32) for obs in observations]


def observation() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {
        "observation/image": rng.integers(0, 255, (2, 224, 224, 3), dtype=np.uint8),
        "observation/state": rng.standard_normal(8).astype(np.float32),
        "prompt": "pick up the puck and place it at the goal",
    }


class EchoServer:
    """A bare websocket server that sends every frame straight back (same settings as ours)."""

    host = "127.0.0.1"

    async def serve(self, stop: asyncio.Event, ready) -> None:
        from websockets.asyncio.server import serve

        async def handler(ws):
            async for message in ws:
                await ws.send(message)

        async with serve(handler, self.host, 0, compression=None, max_size=64 * 2**20) as server:
            ready(self.host, server.sockets[0].getsockname()[1])
            await stop.wait()


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def latency(requests: int) -> dict[str, Any]:
    from websockets.sync.client import connect

    obs = observation()
    ours_ms: list[float] = []
    with ServerThread(OpenpiServer(FixedCostPolicy(0))) as server:
        client = OpenpiRemotePolicy(OpenpiRemoteOptions(port=server.port, connect_timeout_s=10))
        for i in range(requests + 10):
            start = time.perf_counter()
            client.act(obs)
            if i >= 10:
                ours_ms.append((time.perf_counter() - start) * 1000)
        client.close()
    echo_ms: list[float] = []
    with ServerThread(EchoServer()) as echo:
        with connect(f"ws://127.0.0.1:{echo.port}", compression=None, max_size=None, proxy=None) as ws:
            for i in range(requests + 10):
                start = time.perf_counter()
                ws.send(msgpack_numpy.packb(obs))  # the same bytes our client sends
                ws.recv()
                if i >= 10:
                    echo_ms.append((time.perf_counter() - start) * 1000)
    return {
        "payload_bytes": len(msgpack_numpy.packb(obs)),
        "ours_p50_ms": round(percentile(ours_ms, 50), 3),
        "ours_p99_ms": round(percentile(ours_ms, 99), 3),
        "echo_p50_ms": round(percentile(echo_ms, 50), 3),
        "echo_p99_ms": round(percentile(echo_ms, 99), 3),
        "p50_ratio": round(percentile(ours_ms, 50) / percentile(echo_ms, 50), 3),
        "p99_ratio": round(percentile(ours_ms, 99) / percentile(echo_ms, 99), 3),
        "target_p50_ratio": 1.2,
    }


def throughput(clients: int, cost_ms: float, seconds: float, max_batch: int) -> float:
    obs = {"observation/state": np.arange(8, dtype=np.float32)}
    counts = [0] * clients
    with ServerThread(OpenpiServer(FixedCostPolicy(cost_ms), max_batch=max_batch, max_wait_ms=5)) as server:
        remotes = [OpenpiRemotePolicy(OpenpiRemoteOptions(port=server.port, connect_timeout_s=10))
                   for _ in range(clients)]
        barrier = threading.Barrier(clients + 1)
        stop_at = [0.0]

        def work(k: int) -> None:
            barrier.wait()
            while time.perf_counter() < stop_at[0]:
                remotes[k].act(obs)
                counts[k] += 1

        threads = [threading.Thread(target=work, args=(k,)) for k in range(clients)]
        for t in threads:
            t.start()
        stop_at[0] = time.perf_counter() + seconds
        start = time.perf_counter()
        barrier.wait()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - start
        for r in remotes:
            r.close()
    return sum(counts) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--cost-ms", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    on = throughput(args.clients, args.cost_ms, args.seconds, max_batch=args.clients)
    off = throughput(args.clients, args.cost_ms, args.seconds, max_batch=1)
    result = {
        "round_trip": latency(args.requests),
        "batching": {
            "clients": args.clients,
            "act_batch_cost_ms": args.cost_ms,
            "on_requests_per_s": round(on, 1),
            "off_requests_per_s": round(off, 1),
            "speedup": round(on / off, 2),
            "target_speedup": 2.0,
        },
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
