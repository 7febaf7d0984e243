"""The whole `evalfleet run` of one Experiment file, this source tree against other ones, as a user runs it.

    python bench/run_against.py [EXP.yaml] --against NAME=OTHER/src [--against ...] [--workers 2] [--repeats 3]
                                [KEY=VALUE ...]

Each repeat runs `python -m evalfleet.cli run EXP --workers N` once with this tree and once with every other tree
(`PYTHONPATH` pointing at it), the order rotated each repeat so the machine's drift falls on all alike, after one
untimed run of each on one episode per Run (bytecode compiled, files cached). Prints JSON: each tree's wall seconds
(median and spread) and its time over this tree's, repeat by repeat. Unlike `throughput.py --side-by-side` (one
worker a side, a core each) the runs here use every core as the default run does, so what a tree does with the
cores at a run's start and end (its runners' imports, contended or not) shows in the figures. Default: the
quickstart (examples/quickstart.yaml, 200 episodes); `shared.rollout_limit.num_episodes=250` makes it 1,000.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import add_repeat_arg, cache_bytecode, emit, machine, ratios, rotated, spread

ROOT = Path(__file__).resolve().parent.parent
THIS = "this"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment", nargs="?", default=str(ROOT / "examples" / "quickstart.yaml"))
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    parser.add_argument("--against", action="append", default=[], metavar="NAME=SRC", required=True,
                        help="another evalfleet source tree (a checkout's src), named NAME in the figures")
    parser.add_argument("--workers", type=int, default=2)
    add_repeat_arg(parser)
    args = parser.parse_args()
    trees = {THIS: ROOT / "src"}
    for item in args.against:
        name, sep, src = item.partition("=")
        if not sep or not (Path(src) / "evalfleet").is_dir() or name == THIS:
            sys.exit(f"--against {item!r}: expected NAME=SRC, SRC a folder holding the evalfleet package")
        trees[name] = Path(src).resolve()
    before = machine()
    with tempfile.TemporaryDirectory() as tmp:
        bytecode = cache_bytecode(Path(tmp) / "pycache")

        def run(name: str, overrides: list[str], tag: str) -> float:
            out = Path(tmp) / f"{name}-{tag}-{time.monotonic_ns()}"
            cmd = [sys.executable, "-m", "evalfleet.cli", "run", args.experiment, *overrides, "--output", str(out),
                   "--workers", str(args.workers), "--no-progress"]
            env = {**os.environ, "PYTHONPATH": str(trees[name]), "MPLBACKEND": "Agg"}
            started = time.perf_counter()
            done = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, stdin=subprocess.DEVNULL)
            seconds = time.perf_counter() - started
            if done.returncode != 0:
                sys.exit(f"{name}: evalfleet run failed ({done.returncode}):\n{done.stderr[-3000:]}")
            return seconds

        for name in trees:  # untimed: one episode of each Run
            run(name, [*args.overrides, "shared.rollout_limit.num_episodes=1"], "warm")
        seconds = rotated({name: (lambda name=name: run(name, args.overrides, "timed")) for name in trees},
                          args.repeats)
    emit({"experiment": args.experiment, "overrides": args.overrides, "workers": args.workers,
          "repeats": args.repeats, "trees": {name: str(src) for name, src in trees.items()},
          "seconds": {name: spread(values, 3) for name, values in seconds.items()},
          "ratio_to_this": {name: spread(ratios(values, seconds[THIS]), 3) for name, values in seconds.items()
                            if name != THIS},
          "bytecode_cache": bytecode}, machine_before=before)


if __name__ == "__main__":
    main()
