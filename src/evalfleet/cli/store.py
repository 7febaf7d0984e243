"""`evalfleet store add|ls|rm|query`: the results store (evalfleet/store/)."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from typing import Any

TAG_CHARACTERS = "letters, digits and - _ . : / = +"


def register(sub: Any) -> None:
    p = sub.add_parser("store", help="the results store: add outputs, list, remove, query with SQL",
                       description="A results store is a folder or bucket of Parquet files that outlives one "
                       "Experiment (default location: $EVALFLEET_STORE). Adding the same output again replaces "
                       "its rows.")
    cmds = p.add_subparsers(dest="store_command", required=True, metavar="{add,ls,rm,query}")

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--store", metavar="DIR|URL", default=None, help="the store (default: $EVALFLEET_STORE)")
        q.add_argument("--s3-endpoint", metavar="URL", default=None,
                       help="S3-compatible endpoint (default: $EVALFLEET_S3_ENDPOINT, then $AWS_ENDPOINT_URL)")

    a = cmds.add_parser("add", help="add collected output folders (or URLs) to the store")
    a.add_argument("outputs", nargs="+", metavar="OUTPUT")
    a.add_argument("--tag", action="append", default=[], help="a tag kept with each Experiment (repeatable)")
    common(a)
    a.set_defaults(handler=_add)

    ls = cmds.add_parser("ls", help="list the store's Experiments with their Runs and episodes")
    ls.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    common(ls)
    ls.set_defaults(handler=_ls)

    rm = cmds.add_parser("rm", help="remove Experiments from the store by id (see `store ls`)")
    rm.add_argument("ids", nargs="+", metavar="EXPERIMENT_ID")
    common(rm)
    rm.set_defaults(handler=_rm)

    q = cmds.add_parser("query", help="run one SQL query over the views episodes, runs and experiments",
                        description="DuckDB SQL over three views: episodes (one row per episode), runs (one row per "
                        "Run: policy identity, environment fingerprint, counts) and experiments (provenance).")
    q.add_argument("sql", metavar="SQL")
    fmt = q.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="rows as a JSON list")
    fmt.add_argument("--csv", action="store_true", help="rows as CSV")
    common(q)
    q.set_defaults(handler=_query)


def _store(args: argparse.Namespace) -> Any:
    from evalfleet.store import open_store

    return open_store(args.store, endpoint_url=args.s3_endpoint)


def _add(args: argparse.Namespace) -> int:
    import re

    from evalfleet.errors import UserError
    from evalfleet.store import add_outputs

    for tag in args.tag:
        if not re.fullmatch(r"[A-Za-z0-9_.:/=+-]{1,100}", tag):
            raise UserError(f"a tag holds 1 to 100 of {TAG_CHARACTERS}, got {tag[:120]!r}", where="command line",
                            key="--tag")
    from evalfleet.feedback import enable_cli_feedback

    enable_cli_feedback()  # a long add says which Run it reads
    store = _store(args)
    added = add_outputs(store, args.outputs, tags=args.tag, endpoint_url=args.s3_endpoint,
                        log=lambda line: print(line, file=sys.stderr, flush=True))
    print(f"{store.location.display()}: {len(added)} Experiments, {sum(a.episodes for a in added)} episodes added")
    return 0


def _ls(args: argparse.Namespace) -> int:
    experiments = _store(args).experiments()
    if args.json:
        print(json.dumps(experiments, indent=1, default=str))
        return 0
    if not experiments:
        print("the store holds no Experiment")
        return 0
    print(f"{'EXPERIMENT_ID':32}  {'NAME':24} {'STEP':>8} {'RUNS':>5} {'EPISODES':>9}  ADDED")
    for e in experiments:
        step = "" if e["step"] is None else str(e["step"])
        print(f"{e['experiment_id']:32}  {e['name'][:24]:24} {step:>8} {e['runs']:>5} {e['episodes']:>9}  "
              f"{e['added_at']}")
    return 0


def _rm(args: argparse.Namespace) -> int:
    from evalfleet.errors import UserError

    store = _store(args)
    listed = {e["experiment_id"] for e in store.experiments()}
    missing = [i for i in args.ids if i not in listed]
    if missing:
        raise UserError(f"no Experiment {missing[0][:80]!r} in the store (see `evalfleet store ls`); nothing removed",
                        where=store.location.display(), key="EXPERIMENT_ID")
    for experiment_id in args.ids:
        store.remove(experiment_id)
        print(f"removed {experiment_id}")
    return 0


def _query(args: argparse.Namespace) -> int:
    table = _store(args).query(args.sql)
    rows = table.to_pylist()
    if args.json:
        print(json.dumps(rows, default=str))
    elif args.csv:
        writer = csv.writer(sys.stdout)
        writer.writerow(table.column_names)
        writer.writerows([[row[c] for c in table.column_names] for row in rows])
    else:
        widths = [max([len(c)] + [len(str(r[c])) for r in rows]) for c in table.column_names]
        print("  ".join(c.ljust(w) for c, w in zip(table.column_names, widths)))
        for r in rows:
            print("  ".join(str(r[c]).ljust(w) for c, w in zip(table.column_names, widths)))
    return 0
