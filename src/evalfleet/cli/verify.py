"""`evalfleet verify OUTPUT [--episodes K]`: replay the first K episodes of every Run and compare them with their
records (execution/verify.py)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("verify", help="replay the first episodes of an output and say how many replay alike",
                       description="Runs the output's Experiment again for the first K episodes of every Run (same "
                       "seeds and variation values) and compares status, success, length and the final state's "
                       "digest with the records; writes OUT/verify.json and the report's determinism check. Exit "
                       "1 when some episode differs.")
    p.add_argument("output", metavar="OUTPUT", help="the output folder of `evalfleet run`")
    p.add_argument("--episodes", "-k", type=int, default=5, metavar="K", help="episodes per Run to replay (5)")
    p.add_argument("--workers", type=int, default=1, help="parallel runners for the replay (1)")
    p.set_defaults(handler=_verify)


def _verify(args: argparse.Namespace) -> int:
    from evalfleet.execution.argument_checks import check_workers
    from evalfleet.execution.verify import verify_lines, verify_output

    workers = check_workers(args.workers)
    result = verify_output(args.output, episodes=args.episodes, workers=workers,
                           log=lambda line: print(line, file=sys.stderr))
    for line in verify_lines(result):
        print(line)
    return 0 if result["agreement"] in (None, 1.0) else 1
