"""`evalfleet board`: the leaderboard across the store's Experiments (evalfleet/store/board.py), with reproduction
verdicts for a claims file (store/claims.py). Everything is computed, and every claim checked, before anything is
printed or written: a refusal leaves no partial output."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "board", help="a leaderboard across every Experiment in the results store",
        description="Per task × policy success with its 95% Wilson interval and episode count, pooled across "
        "Experiments where the environment and the policy revision are the same, and an overall rank by "
        "Bradley-Terry on episodes paired across Experiments (same environment, seed and variations), with "
        "simultaneous intervals and rank ranges. Repeated filters match any of their values.")
    p.add_argument("--store", metavar="DIR|URL", default=None, help="the store (default: $EVALFLEET_STORE)")
    p.add_argument("--s3-endpoint", metavar="URL", default=None,
                   help="S3-compatible endpoint (default: $EVALFLEET_S3_ENDPOINT, then $AWS_ENDPOINT_URL)")
    p.add_argument("--task", action="append", default=[], help="only this task (repeatable)")
    p.add_argument("--suite", action="append", default=[],
                   help="only this suite: LIBERO's suite option, else the environment type (repeatable)")
    p.add_argument("--policy", action="append", default=[], help="only this policy name (repeatable)")
    p.add_argument("--tag", action="append", default=[], help="only Experiments added with this tag (repeatable)")
    p.add_argument("--experiment", action="append", default=[], metavar="ID",
                   help="only this Experiment id, see `evalfleet store ls` (repeatable)")
    p.add_argument("--since", metavar="DATE", help="only Experiments started on or after this ISO date or time")
    p.add_argument("--until", metavar="DATE", help="only Experiments started on or before this ISO date or time")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="one JSON document instead of tables")
    fmt.add_argument("--csv", action="store_true", help="the task × policy rows as CSV (with --claims: the verdicts)")
    p.add_argument("--html", metavar="DIR", help="also write the board as DIR/index.html (static, sortable)")
    p.add_argument("--claims", metavar="FILE",
                   help="a YAML list of {policy, task or suite, success, source}: a verdict for each claim")
    p.set_defaults(handler=cmd_board)


def cmd_board(args: argparse.Namespace) -> int:
    from evalfleet.store import open_store
    from evalfleet.store.board import Filters, build_board, parse_time
    from evalfleet.store.board_text import board_csv, board_lines
    from evalfleet.store.claims import check_claims, read_claims
    from evalfleet.textlayout import output_width

    claims = read_claims(args.claims) if args.claims else None  # a bad file is refused before the store is read
    filters = Filters(tasks=tuple(args.task), suites=tuple(args.suite), policies=tuple(args.policy),
                      tags=tuple(args.tag), experiments=tuple(args.experiment),
                      since=parse_time(args.since, "--since") if args.since else None,
                      until=parse_time(args.until, "--until", end_of_day=True) if args.until else None)
    board = build_board(open_store(args.store, endpoint_url=args.s3_endpoint), filters)
    verdicts = check_claims(board, claims, args.claims) if claims is not None else None
    if args.html:
        write_page(args.html, board, verdicts)
    if args.json:
        doc = board.to_dict()
        if verdicts is not None:
            doc["claims"] = [v.to_dict() for v in verdicts]
        print(json.dumps(doc, indent=1))
    elif args.csv:
        sys.stdout.write(board_csv(board, verdicts))
    else:
        print("\n".join(board_lines(board, output_width(), verdicts)))
    if args.html:
        print(f"board page: {Path(args.html) / 'index.html'}", file=sys.stderr)
    return 0


def write_page(folder: str, board: Any, verdicts: Any) -> None:
    """DIR/index.html written whole (a temporary file renamed), so a reader never sees half a page."""
    from evalfleet.errors import UserError
    from evalfleet.store.board_page import render_board_page

    page = render_board_page(board, verdicts).encode("utf-8")
    target = Path(folder)
    tmp = None
    try:
        target.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".index.", suffix=".html", dir=target)
        with os.fdopen(fd, "wb") as f:
            f.write(page)
        os.chmod(tmp, 0o644)  # a page to share: mkstemp's 0600 would hide it from a web server
        os.replace(tmp, target / "index.html")
    except OSError as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise UserError(f"cannot write the board page ({exc.strerror or exc}); name a folder you can write",
                        where=str(target), key="--html") from None
