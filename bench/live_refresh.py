"""Benchmark (issue #27 must-show 4): refreshing the live report of a 100,000-episode folder while 1,000 episodes
arrive, incremental vs a full re-read.

The folder is bench/collect.py's synthetic one (40 Runs, two shard logs each), every Run planned for 25 more
episodes and still running. Per repeat a fresh copy; a follower reads it once (not timed); then 1,000 episodes
arrive in batches appended to the shard logs, and after each batch, interleaved (ABBA):

  incremental  the follower's `refresh()` (only the new bytes) and the page's view (`live_view`)
  full         a new follower over the same folder: everything read again, and the view

Both views must agree. Prints JSON: seconds per refresh of each (median and spread over every batch of every
repeat), their ratio pair by pair, and the machine.

    python bench/live_refresh.py [--episodes 100000] [--runs 40] [--arriving 1000] [--batches 10] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Timer, add_repeat_arg, emit, machine, ratios, spread
from collect import make_runs

from evalfleet.outputs.live_follow import FolderFollower
from evalfleet.outputs.live_page import live_view
from evalfleet.outputs.storage import open_location


def plan_more(root: str, more: int) -> dict[str, int]:
    """Every Run planned for `more` further episodes and running; the next episode index of each."""
    nxt = {}
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name, "run_status.json")
        with open(path) as f:
            status = json.load(f)
        nxt[name] = status["planned_episodes"]
        status.update(planned_episodes=status["planned_episodes"] + more, state="running")
        with open(path, "w") as f:
            json.dump(status, f)
    return nxt


def arrive(root: str, nxt: dict[str, int], count: int, rng: random.Random) -> None:
    """`count` new episodes, round-robin over the Runs, appended to their shard logs as runners append them."""
    names = sorted(nxt)
    for i in range(count):
        name = names[i % len(names)]
        e = nxt[name]
        nxt[name] += 1
        status = "success" if rng.random() < 0.5 else "failure"
        rec = {"run": name, "episode": e, "seed": rng.getrandbits(32), "status": status,
               "success": status == "success", "episode_length": 100, "duration_s": 1.0, "variations": {},
               "attempt": 1, "timestamp": 1_770_000_000.0 + e, "job_name": name, "env_id": e, "episode_in_env": 0}
        with open(os.path.join(root, name, "parts", f"shard-{e % 2:03d}.jsonl"), "a") as f:
            f.write(json.dumps(rec) + "\n")


def figures(view: dict) -> list:
    return [(r["run"], r["done"], r["counts"], r["rate_text"]) for r in view["runs"]]


def one_repeat(template: str, work: str, args: argparse.Namespace, rep: int) -> tuple[list[float], list[float]]:
    root = os.path.join(work, f"repeat-{rep}")
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(template, root)
    nxt = plan_more(root, -(-args.arriving // args.runs))
    rng = random.Random(rep)
    follower = FolderFollower(open_location(root))
    follower.refresh()  # the first read of the whole folder: not timed
    inc, full = [], []

    def incremental() -> dict:
        with Timer() as t:
            follower.refresh()
            view = live_view(follower)
        inc.append(t.seconds)
        return view

    def reread() -> dict:
        with Timer() as t:
            fresh = FolderFollower(open_location(root))
            fresh.refresh()
            view = live_view(fresh)
        full.append(t.seconds)
        return view

    for batch in range(args.batches):
        arrive(root, nxt, args.arriving // args.batches, rng)
        if (batch + rep) % 2 == 0:
            views = [incremental(), reread()]
        else:
            views = [reread(), incremental()]
        assert figures(views[0]) == figures(views[1]), "the incremental view differs from a full re-read"
    shutil.rmtree(root, ignore_errors=True)
    return inc, full


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--arriving", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=10)
    add_repeat_arg(parser)
    args = parser.parse_args()
    start = machine()
    work = tempfile.mkdtemp(prefix="evalfleet-bench-live-")
    try:
        template = os.path.join(work, "template")
        os.makedirs(template)
        make_runs(template, args.episodes, args.runs)
        inc, full = [], []
        for rep in range(args.repeats):
            i, f = one_repeat(template, work, args, rep)
            inc += i
            full += f
        emit({"episodes": args.episodes, "runs": args.runs, "arriving": args.arriving, "batches": args.batches,
              "repeats": args.repeats, "incremental_refresh_s": spread(inc, 5), "full_reread_s": spread(full, 4),
              "full_over_incremental": spread(ratios(full, inc), 1)}, machine_before=start)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
