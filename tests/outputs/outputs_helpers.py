"""Helpers for the outputs tests: synthetic Run folders (shard logs, statuses, videos, plots)."""

from __future__ import annotations

import json
import socket
import struct
import zlib
from pathlib import Path


def record(run: str, episode: int, status: str, *, task: str = "pick-place", policy: str = "expert",
           timestamp: float | None = None, **extra) -> dict:
    rec = {
        "run": run, "task": task, "policy": policy, "episode": episode, "seed": 10_000 + episode,
        "status": status, "success": None if status == "error" else status == "success",
        "episode_length": 50 + episode % 7, "duration_s": 0.5 + (episode % 10) / 10,
        "variations": {"cube.mass": round(0.05 * (episode % 20), 4), "cube.position": [0.1, -0.2, 0.05 * (episode % 3)],
                       "table.texture": ["wood", "metal", "cloth"][episode % 3]},
        "attempt": 1, "timestamp": 1_700_000_000.0 + episode if timestamp is None else timestamp,
        "job_name": run, "env_id": episode, "episode_in_env": 0,
    }
    rec.update(extra)
    return rec


def write_jsonl(path: Path, records: list[dict], *, torn_tail: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
        if torn_tail:
            f.write(torn_tail)


def write_status(run_dir: Path, *, planned: int, state: str, reason: str | None = None,
                 task: str = "pick-place", policy: str = "expert") -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run_status.json").write_text(json.dumps(
        {"run": run_dir.name, "task": task, "policy": policy, "planned_episodes": planned, "state": state,
         "reason": reason}))


def tiny_png(width: int = 4, height: int = 3) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + bytes([200, 60, 60] * width) for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def make_sample_output(root: Path, *, episodes_a: int = 250) -> Path:
    """An output folder as runners leave it: shard logs (with a duplicate and a torn line), videos, one
    completed Run, one partial Run (missing episodes + an infrastructure error), one failed Run, a plot."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "experiment.yaml").write_text("runs:\n  pick_expert: {}\n  pick_random: {}\n  drawer_random: {}\n")
    a = root / "pick_expert"
    # Episodes split over two shards; every 5th episode succeeds (success rate 20%).
    recs = [record("pick_expert", e, "success" if e % 5 == 0 else "failure") for e in range(episodes_a)]
    # Episode 7 first ended in an infrastructure error, then was retried successfully (later timestamp).
    recs[7] = record("pick_expert", 7, "error", error="policy server timeout", timestamp=1_600_000_000.0)
    shard0 = [r for r in recs if r["episode"] % 2 == 0]
    shard1 = [r for r in recs if r["episode"] % 2 == 1]
    shard1.append(record("pick_expert", 7, "failure", attempt=2, timestamp=1_800_000_000.0))
    for e in (1, 3):
        shard1[e // 2]["video"] = {"front": f"videos/episode_{e:05d}_front.mp4"}
        (a / "videos").mkdir(parents=True, exist_ok=True)
        (a / "videos" / f"episode_{e:05d}_front.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)))
    write_jsonl(a / "parts" / "shard-000.jsonl", shard0)
    write_jsonl(a / "parts" / "shard-001.jsonl", shard1, torn_tail='{"run": "pick_expert", "episode": 9, "sta')
    write_status(a, planned=episodes_a, state="completed")

    b = root / "pick_random"
    write_jsonl(b / "parts" / "shard-000.jsonl",
                [record("pick_random", e, "error" if e == 3 else ("success" if e == 0 else "failure"),
                        policy="random", **({"error": "simulator crashed"} if e == 3 else {})) for e in range(6)])
    write_status(b, planned=10, state="running", policy="random")

    c = root / "drawer_random"
    write_status(c, planned=20, state="failed", reason="policy server for drawer_random never became healthy",
                 task="drawer-open", policy="random")

    (root / "plots").mkdir(exist_ok=True)
    (root / "plots" / "success_rates.png").write_bytes(tiny_png())
    return root


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def s3fs_client(endpoint: str, key: str, secret: str):
    import s3fs

    return s3fs.S3FileSystem(key=key, secret=secret, client_kwargs={"endpoint_url": endpoint},
                             skip_instance_cache=True, use_listings_cache=False)
