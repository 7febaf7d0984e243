"""Benchmark (issue #52 must-show 3): the live report server under load, on loopback.

A real `evalfleet watch OUT` process serves a folder whose Run holds a 300 MB video. Per repeat a fresh server,
then at once: 500 slow connections (request headers sent one byte every few seconds, never finished: what a
slowloris client does), 200 `/events` streams, and 4 slow readers of the 300 MB file (64 KiB every 20 ms). While
all of them are held, a normal request (`/plots/success.png`) every 0.25 s is timed. Then every client goes, and
the server's thread count is followed until it is back where it started.

Before #52's bounds the same load held a thread per connection for ever, and 4 slow readers of a 300 MB file took
the server from 65 MB to 1.27 GB (each file read whole).

Prints JSON: per repeat and as median and spread: the server's peak RSS (VmHWM) and its RSS before the load, the
normal request's latency (median and max), how many /events streams were served and how many got 503, the peak
thread count, and the seconds until every thread of the load was freed.

    python bench/live_server_load.py [--slow 500] [--streams 200] [--readers 4] [--size-mb 300] [--hold-s 20]
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import add_repeat_arg, emit, machine, spread

from evalfleet.interpreter import python_command

URL_LINE = "live report: "


def make_folder(root: str, size_mb: int) -> str:
    out = os.path.join(root, "out")
    os.makedirs(os.path.join(out, "a", "videos"))
    os.makedirs(os.path.join(out, "plots"))
    with open(os.path.join(out, "a", "run_status.json"), "w") as f:
        f.write('{"run": "a", "planned_episodes": 10, "state": "running"}')
    with open(os.path.join(out, "plots", "success.png"), "wb") as f:
        f.write(b"\x89PNG" + os.urandom(20_000))
    with open(os.path.join(out, "a", "videos", "big.mp4"), "wb") as f:  # real bytes: a sparse file reads faster
        block = os.urandom(1 << 20)
        for _ in range(size_mb):
            f.write(block)
    return out


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM in MB and Threads of a process."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) // 1024
            elif key == "Threads":
                out[key] = int(value)
    return out


def start_server(out: str) -> tuple[subprocess.Popen, str, int]:
    proc = subprocess.Popen([*python_command(), "-m", "evalfleet.cli", "watch", out, "--port", "0"],
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if not line.startswith(URL_LINE):
        raise SystemExit(f"the server did not start: {line!r}")
    host, port = line[len(URL_LINE):].strip().split("//")[1].rstrip("/").rsplit(":", 1)
    return proc, host, int(port)


def slow_connection(host: str, port: int) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=60)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    return sock


def closed(sock: socket.socket) -> bool:
    """The server has closed this connection (a read would end at once)."""
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def events_stream(host: str, port: int) -> tuple[socket.socket, int]:
    sock = socket.create_connection((host, port), timeout=60)
    sock.sendall(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    status = int(sock.recv(64).split()[1])
    return sock, status


def slow_reader(host: str, port: int, stop: threading.Event, got: list[int]) -> None:
    conn = http.client.HTTPConnection(host, port, timeout=60)
    conn.request("GET", "/a/videos/big.mp4")
    resp = conn.getresponse()
    while not stop.is_set():
        chunk = resp.read(64 * 1024)
        if not chunk:
            break
        got[0] += len(chunk)
        time.sleep(0.02)
    conn.close()


def normal_request(host: str, port: int) -> float:
    start = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=60)
    conn.request("GET", "/plots/success.png")
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    if resp.status != 200 or len(body) < 20_000:
        raise SystemExit(f"the normal request failed: {resp.status}")
    return time.perf_counter() - start


def one_repeat(out: str, args: argparse.Namespace) -> dict:
    proc, host, port = start_server(out)
    try:
        time.sleep(1.0)  # the follower's first refresh
        before = proc_status(proc.pid)
        peak = {"threads": before["Threads"]}
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.wait(0.05):
                peak["threads"] = max(peak["threads"], proc_status(proc.pid)["Threads"])

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        slow = [slow_connection(host, port) for _ in range(args.slow)]
        streams = [events_stream(host, port) for _ in range(args.streams)]
        stop = threading.Event()
        got = [[0] for _ in range(args.readers)]
        readers = [threading.Thread(target=slow_reader, args=(host, port, stop, g), daemon=True) for g in got]
        for t in readers:
            t.start()
        latencies = []
        end = time.monotonic() + args.hold_s
        next_drip = time.monotonic() + 5.0
        while time.monotonic() < end:
            latencies.append(normal_request(host, port))
            if time.monotonic() >= next_drip:  # one more header byte: the slow clients stay just inside the timeout
                for sock in slow:
                    try:
                        sock.sendall(b"x")
                    except OSError:
                        pass
                next_drip += 5.0
            time.sleep(0.25)
        held = proc_status(proc.pid)
        closed_by_server = sum(1 for sock in slow if closed(sock))
        stop.set()
        for t in readers:
            t.join()
        for sock in slow:
            sock.close()
        for sock, _ in streams:
            sock.close()
        gone = time.monotonic()
        while proc_status(proc.pid)["Threads"] > before["Threads"] and time.monotonic() - gone < 60:
            time.sleep(0.05)
        freed_s = time.monotonic() - gone
        sampling.set()
        after = proc_status(proc.pid)
        latencies.sort()
        return {"rss_before_mb": before["VmRSS"], "rss_held_mb": held["VmRSS"], "peak_rss_mb": after["VmHWM"],
                "normal_request_s": {"median": round(latencies[len(latencies) // 2], 4),
                                     "max": round(latencies[-1], 4), "count": len(latencies)},
                "events_served": sum(1 for _, s in streams if s == 200),
                "events_503": sum(1 for _, s in streams if s == 503),
                "slow_connections_closed_by_server": closed_by_server,
                "bytes_read_by_slow_readers_mb": round(sum(g[0] for g in got) / 2**20, 1),
                "threads_before": before["Threads"], "threads_peak": peak["threads"],
                "threads_after": after["Threads"], "seconds_to_free_threads": round(freed_s, 2)}
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slow", type=int, default=500)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--size-mb", type=int, default=300)
    parser.add_argument("--hold-s", type=float, default=20.0)
    add_repeat_arg(parser)
    args = parser.parse_args()
    before = machine()
    with tempfile.TemporaryDirectory() as root:
        out = make_folder(root, args.size_mb)
        repeats = [one_repeat(out, args) for _ in range(args.repeats)]
    emit({"load": {"slow": args.slow, "streams": args.streams, "readers": args.readers, "size_mb": args.size_mb,
                   "hold_s": args.hold_s},
          "peak_rss_mb": spread([r["peak_rss_mb"] for r in repeats]),
          "normal_request_max_s": spread([r["normal_request_s"]["max"] for r in repeats]),
          "normal_request_median_s": spread([r["normal_request_s"]["median"] for r in repeats]),
          "seconds_to_free_threads": spread([r["seconds_to_free_threads"] for r in repeats]),
          "repeats": repeats}, machine_before=before)


if __name__ == "__main__":
    main()
