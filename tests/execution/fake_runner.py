"""A small, real, resumable runner used as the watchdog's child in tests.

It "runs" episodes 0..N-1: each episode is --steps env steps of --step-delay seconds, then one JSON line
{"episode", "attempt", "pid"} appended (and flushed) to --log. Episodes already in the log are skipped, so a relaunch
resumes where the last attempt stopped. It reports progress with the real HeartbeatWriter (EVALFLEET_HEARTBEAT).

Faults fire at episode --fault-at on the attempts in --fault-attempts ("1", "1,2" or "all"):
  --spin          keep stepping, one step per --spin-delay s (heartbeat progress goes on), but never finish the
                  episode: a test kills/stops it
  --hang sleep    stop stepping and sleep forever (no more progress)
  --hang stop     SIGSTOP itself
  --crash exit    os._exit(3) before the episode is logged
  --crash sigkill SIGKILL itself
Other switches: --no-heartbeat, --ignore-term (SIGTERM ignored, so only SIGKILL ends it), --grandchild (start a
sleeping process in the same group), --marker FILE (written with {"pid", "grandchild", "attempt"} when the fault
fires or, without a fault, at start), --startup-delay S (beat "starting" and wait before running).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from evalfleet.rollout.heartbeat import ATTEMPT_ENV, HeartbeatWriter, write_json_atomic


def done_episodes(log_path: str) -> set[int]:
    done = set()
    try:
        with open(log_path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    done.add(int(json.loads(line)["episode"]))
                except (ValueError, KeyError, TypeError):
                    pass  # a torn last line
    except FileNotFoundError:
        pass
    return done


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--episodes", type=int, required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--shard", default="shard-0")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--step-delay", type=float, default=0.01)
    p.add_argument("--spin-delay", type=float, default=0.01)
    p.add_argument("--beat-interval", type=float, default=0.05)
    p.add_argument("--fault-at", type=int, default=None)
    p.add_argument("--fault-attempts", default="1")
    p.add_argument("--spin", action="store_true")
    p.add_argument("--hang", choices=["sleep", "stop"], default=None)
    p.add_argument("--crash", choices=["exit", "sigkill"], default=None)
    p.add_argument("--no-heartbeat", action="store_true")
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--grandchild", action="store_true")
    p.add_argument("--marker", default=None)
    p.add_argument("--startup-delay", type=float, default=0.0)
    args = p.parse_args()

    attempt = int(os.environ.get(ATTEMPT_ENV, "0"))
    faulty = args.fault_attempts == "all" or str(attempt) in args.fault_attempts.split(",")
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    grandchild = None
    if args.grandchild:
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"]).pid

    def mark() -> None:
        if args.marker:
            write_json_atomic(args.marker, {"pid": os.getpid(), "grandchild": grandchild, "attempt": attempt})

    hb = HeartbeatWriter(None if args.no_heartbeat else os.environ.get("EVALFLEET_HEARTBEAT"), args.shard,
                         min_interval=args.beat_interval)
    hb.beat(state="starting")
    if args.startup_delay:
        time.sleep(args.startup_delay)
    if args.fault_at is None:
        mark()

    done = done_episodes(args.log)
    steps = finished = 0
    with open(args.log, "a", encoding="utf-8") as log:
        for episode in range(args.episodes):
            if episode in done:
                continue
            if faulty and episode == args.fault_at:
                mark()
                if args.spin:
                    while True:
                        steps += 1
                        hb.beat(steps=steps, episodes=finished, state="running")
                        time.sleep(args.spin_delay)
                if args.hang == "stop":
                    os.kill(os.getpid(), signal.SIGSTOP)
                elif args.hang == "sleep":
                    while True:
                        time.sleep(3600)
                if args.crash == "exit":
                    os._exit(3)
                elif args.crash == "sigkill":
                    os.kill(os.getpid(), signal.SIGKILL)
            for _ in range(args.steps):
                steps += 1
                hb.beat(steps=steps, episodes=finished, state="running")
                if args.step_delay:
                    time.sleep(args.step_delay)
            log.write(json.dumps({"episode": episode, "attempt": attempt, "pid": os.getpid()}) + "\n")
            log.flush()
            finished += 1
            hb.beat(steps=steps, episodes=finished, state="running")
    hb.done()
    return 0


if __name__ == "__main__":
    sys.exit(main())
