"""`evalfleet history POLICY`: a policy's checkpoints over training steps (store/history.py)."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("history", help="a policy's success over its checkpoints, from the results store",
                       description="Success per task and training step with 95% intervals; with --baseline, a "
                       "paired test per step (exact McNemar, Holm over every step) and the first step that is "
                       "better.")
    p.add_argument("policy", metavar="POLICY")
    p.add_argument("--baseline", default=None, metavar="POLICY", help="compare each step with this policy")
    p.add_argument("--task", default=None, help="only this task")
    p.add_argument("--store", metavar="DIR|URL", default=None, help="the store (default: $EVALFLEET_STORE)")
    p.add_argument("--s3-endpoint", metavar="URL", default=None,
                   help="S3-compatible endpoint (default: $EVALFLEET_S3_ENDPOINT, then $AWS_ENDPOINT_URL)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="the result as JSON")
    fmt.add_argument("--csv", action="store_true", help="one row per point as CSV")
    p.add_argument("--plot", metavar="FILE.png", default=None, help="also draw success over steps into FILE")
    p.set_defaults(handler=_history)


def _history(args: argparse.Namespace) -> int:
    from evalfleet.errors import UserError
    from evalfleet.store import open_store
    from evalfleet.store.history import history, table_lines, write_plot

    if args.plot is not None and not args.plot.lower().endswith((".png", ".svg", ".pdf")):
        raise UserError(f"expected a .png, .svg or .pdf file, got {args.plot!r}", where="command line",
                        key="--plot")
    result = history(open_store(args.store, endpoint_url=args.s3_endpoint), args.policy, baseline=args.baseline,
                     task=args.task)
    if args.plot is not None:  # first: a plot that cannot be written is refused before anything is printed
        try:
            write_plot(result, args.plot)
        except OSError as exc:
            raise UserError(f"cannot write the plot ({exc.strerror or exc})", where=args.plot, key="--plot") from None
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_json(), default=str))
    elif args.csv:
        writer = csv.writer(sys.stdout)
        writer.writerow(["task", "fingerprint", "step", "revision", "successes", "decided", "rate", "ci_low",
                         "ci_high", "pairs", "better", "worse", "p_holm", "is_better"])
        for s in result.series:
            for p in s.points:
                v = p.versus_baseline or {}
                writer.writerow([s.task, s.fingerprint, p.step, p.revision, p.successes, p.decided, p.rate,
                                 p.ci95[0], p.ci95[1], v.get("pairs"), v.get("better"), v.get("worse"),
                                 v.get("p_holm"), v.get("is_better")])
    else:
        print("\n".join(table_lines(result)))
    return 0
