"""Serving benchmark: prints one JSON object.

1. Round trip of a 2x224x224x3 uint8 image + float32 state observation through our openpi server
   (a policy that returns a 4-float action at once) versus a bare websocket server that does the same
   wire work and nothing else: it decodes the request with the same msgpack-numpy codec and replies
   with an action of the same size and the same reply keys (like-for-like). Measured in `--repeats`
   interleaved rounds (ours, bare; bare, ours; ...) of `--requests` round trips each (>= 1,000 samples
   per arm by default); per-round p50/p99 as median and spread, and the pooled p50/p99.
   Target: p50 ratio <= 1.2.
2. Throughput of 8 concurrent clients against a policy whose act_batch costs a fixed 20 ms per call
   (a batched model), with batching on (max_batch 8) versus off, in interleaved pairs. Target: >= 2x.

    python bench/serving.py [--requests 400] [--repeats 3] [--clients 8] [--cost-ms 20] [--seconds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from typing import Any

import numpy as np
from _common import add_repeat_arg, emit, interleaved, machine, ratios, spread

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


ACTION_DIM = 4  # what FixedCostPolicy answers: state[:4] as float32


class BareServer:
    """A bare websocket server doing only the wire work ours does: decode the request with the same codec,
    reply with an action of the same size under the same keys (same websocket settings as ours)."""

    host = "127.0.0.1"

    async def serve(self, stop: asyncio.Event, ready) -> None:
        from websockets.asyncio.server import serve

        async def handler(ws):
            async for message in ws:
                observation = msgpack_numpy.unpackb(message)
                action = np.asarray(observation["observation/state"][:ACTION_DIM], dtype=np.float32)
                await ws.send(msgpack_numpy.packb({"actions": action, "server_timing": {"infer_ms": 0.0}}))

        async with serve(handler, self.host, 0, compression=None, max_size=64 * 2**20) as server:
            ready(self.host, server.sockets[0].getsockname()[1])
            await stop.wait()


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def ours_round(requests: int) -> list[float]:
    obs = observation()
    out: list[float] = []
    with ServerThread(OpenpiServer(FixedCostPolicy(0))) as server:
        client = OpenpiRemotePolicy(OpenpiRemoteOptions(port=server.port, connect_timeout_s=10))
        for i in range(requests + 10):
            start = time.perf_counter()
            action = client.act(obs)
            if i >= 10:  # the first round trips warm up the connection
                out.append((time.perf_counter() - start) * 1000)
        assert np.asarray(action).shape[-1] == ACTION_DIM
        client.close()
    return out


def bare_round(requests: int) -> list[float]:
    from websockets.sync.client import connect

    obs = observation()
    out: list[float] = []
    with ServerThread(BareServer()) as bare:
        with connect(f"ws://127.0.0.1:{bare.port}", compression=None, max_size=None, proxy=None) as ws:
            for i in range(requests + 10):
                start = time.perf_counter()
                ws.send(msgpack_numpy.packb(obs))  # what our client encodes and sends
                reply = msgpack_numpy.unpackb(ws.recv())  # and decodes
                if i >= 10:
                    out.append((time.perf_counter() - start) * 1000)
        assert reply["actions"].shape == (ACTION_DIM,)
    return out


def latency(requests: int, repeats: int) -> dict[str, Any]:
    ours, bare = interleaved(lambda: ours_round(requests), lambda: bare_round(requests), repeats)
    p50 = lambda xs: percentile(xs, 50)  # noqa: E731 - a one-line local helper
    p99 = lambda xs: percentile(xs, 99)  # noqa: E731 - a one-line local helper
    pooled_ours, pooled_bare = [x for r in ours for x in r], [x for r in bare for x in r]
    reply = msgpack_numpy.packb({"actions": np.zeros(ACTION_DIM, np.float32), "server_timing": {"infer_ms": 0.0}})
    return {
        "request_bytes": len(msgpack_numpy.packb(observation())),
        "reply_bytes": len(reply),
        "samples_per_arm": len(pooled_ours),
        "rounds": repeats,
        "ours_p50_ms": spread([p50(r) for r in ours]),
        "bare_p50_ms": spread([p50(r) for r in bare]),
        "ours_p99_ms": spread([p99(r) for r in ours]),
        "bare_p99_ms": spread([p99(r) for r in bare]),
        "p50_ratio": spread(ratios([p50(r) for r in ours], [p50(r) for r in bare])),
        "p99_ratio": spread(ratios([p99(r) for r in ours], [p99(r) for r in bare])),
        "pooled": {"ours_p50_ms": round(p50(pooled_ours), 3), "bare_p50_ms": round(p50(pooled_bare), 3),
                   "ours_p99_ms": round(p99(pooled_ours), 3), "bare_p99_ms": round(p99(pooled_bare), 3),
                   "p50_ratio": round(p50(pooled_ours) / p50(pooled_bare), 3)},
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
    parser.add_argument("--requests", type=int, default=400, help="round trips per round and arm (default 400)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--cost-ms", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per throughput measurement")
    add_repeat_arg(parser)
    args = parser.parse_args()
    before = machine()
    on, off = interleaved(lambda: throughput(args.clients, args.cost_ms, args.seconds, max_batch=args.clients),
                          lambda: throughput(args.clients, args.cost_ms, args.seconds, max_batch=1), args.repeats)
    result = {
        "round_trip": latency(args.requests, args.repeats),
        "batching": {
            "clients": args.clients,
            "act_batch_cost_ms": args.cost_ms,
            "seconds_each": args.seconds,
            "on_requests_per_s": spread(on, 1),
            "off_requests_per_s": spread(off, 1),
            "speedup": spread(ratios(on, off), 2),
            "target_speedup": 2.0,
        },
    }
    emit(result, machine_before=before)


if __name__ == "__main__":
    main()
