"""`evalfleet trajectories OUTPUT`: list the recorded episodes, filter them, export a subset as a LeRobotDataset
(outputs/trajectory_dataset.py)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("trajectories", help="list, filter and export the recorded trajectories of an output",
                       description="One line per recorded episode (recording.trajectories), filtered by Run, "
                       "status, failure code and variation values; --export writes the selection as a new "
                       "LeRobotDataset v3.0.")
    p.add_argument("output", metavar="OUTPUT", help="the output folder of `evalfleet run` or `evalfleet collect`")
    p.add_argument("--run", action="append", default=[], metavar="RUN", help="only this Run (repeatable)")
    p.add_argument("--status", action="append", default=[], choices=("success", "failure", "error"),
                   help="only episodes with this status (repeatable)")
    p.add_argument("--failure-code", action="append", default=[], metavar="CODE",
                   help="only episodes with this failure code (repeatable)")
    p.add_argument("--where", action="append", default=[], metavar="KEY OP VALUE",
                   help="a variation value's condition, e.g. 'camera.position_offset>0.02' (a vector compares by "
                        "its length; repeatable, all must hold)")
    p.add_argument("--export", metavar="DIR", default=None, help="write the chosen episodes as a new dataset here")
    p.add_argument("--json", action="store_true", help="the chosen episodes as JSON lines")
    p.set_defaults(handler=_trajectories)


def _trajectories(args: argparse.Namespace) -> int:
    from evalfleet.outputs.trajectory_dataset import Condition, Selection, export_dataset, recorded_episodes

    selection = Selection(tuple(args.run), tuple(args.status), tuple(args.failure_code),
                          tuple(Condition.parse(w) for w in args.where))
    say = lambda line: print(line, file=sys.stderr)  # noqa: E731 - progress and notes on stderr
    episodes = recorded_episodes(args.output, selection, say)
    if args.export is not None:
        export_dataset(args.output, args.export, episodes, say=say)
        return 0
    if args.json:
        for episode in episodes:
            print(json.dumps(episode.to_json()))
        return 0
    print(f"{'run':<28} {'episode':>7} {'status':<8} {'failure code':<18} {'frames':>6}  variations")
    for episode in episodes:
        e = episode.to_json()
        variations = ", ".join(f"{k}={v}" for k, v in e["variations"].items())
        print(f"{e['run'][:28]:<28} {e['episode']:>7} {str(e['status']):<8} {str(e['failure_code'] or ''):<18} "
              f"{e['frames']:>6}  {variations[:80]}")
    print(f"{len(episodes)} recorded episodes", file=sys.stderr)
    return 0
