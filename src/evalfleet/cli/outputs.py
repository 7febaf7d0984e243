"""`evalfleet collect` and `evalfleet report`."""

from __future__ import annotations

import argparse
import sys
from typing import Any


COLLECT_DESCRIPTION = ("Merge every Run's episode logs from SRC folders/URLs into OUTPUT: one sorted "
                       "<run>/episode_results.jsonl per Run, videos, experiment.yaml, experiment_result.json and "
                       "index.html. SRC and OUTPUT may be local folders or fsspec URLs such as s3://bucket/prefix.")


def register(sub: Any) -> None:
    p = sub.add_parser("collect", description=COLLECT_DESCRIPTION,
                       help="merge Run outputs into one folder or bucket prefix (experiment_result.json, index.html)")
    p.add_argument("sources", nargs="+", metavar="SRC", help="output folder(s) or URL(s) holding Run folders")
    p.add_argument("--output", "-o", required=True, metavar="DIR|URL", help="where to write (may equal SRC)")
    p.add_argument("--s3-endpoint", metavar="URL", default=None,
                   help="S3-compatible endpoint (default: $EVALFLEET_S3_ENDPOINT, then $AWS_ENDPOINT_URL)")
    p.add_argument("--no-report", action="store_true", help="do not write index.html")
    p.add_argument("--finish-submission", action="store_true",
                   help="as a submitted Experiment's collect step (OSMO's collect task): set its "
                        "experiment_metadata.json finished or failed and log to its tracking: sinks")
    p.set_defaults(handler=_collect)

    r = sub.add_parser("report", help="write DIR/index.html from a collected output folder",
                       description="Write one self-contained index.html (no network needed) into DIR.")
    r.add_argument("dir", metavar="DIR")
    r.add_argument("--title", default=None)
    r.set_defaults(handler=_report)


def _print_runs(result: dict[str, Any]) -> None:
    from evalfleet.outputs.report import fmt_rate

    for r in result["runs"].values():
        c = r["counts"]
        rate = fmt_rate(r["success_rate"], r["ci95"]) if r["status"] != "failed" else "—"
        line = (f"  {r['run']}: {r['status']}, {c['success']} success / {c['failure']} failure / "
                f"{c['error']} error" + (f" / {c['missing']} missing" if c.get("missing") else "")
                + f", success rate {rate}")
        if r.get("reason"):
            line += f" ({r['reason']})"
        print(line)


def _collect(args: argparse.Namespace) -> int:
    from evalfleet.feedback import enable_cli_feedback
    from evalfleet.outputs.collect import collect

    enable_cli_feedback()  # progress on stderr for big folders
    if args.finish_submission:
        from evalfleet.execution.cluster_metadata import collect_submission

        result = collect_submission(args.sources, args.output, endpoint_url=args.s3_endpoint,
                                    report=not args.no_report, log=lambda line: print(line, file=sys.stderr))
    else:
        result = collect(args.sources, args.output, endpoint_url=args.s3_endpoint, report=not args.no_report)
    by_status = result["summary"]["runs_by_status"]
    print(f"collected {result['summary']['runs']} Runs into {args.output} ("
          + ", ".join(f"{n} {s}" for s, n in by_status.items() if n) + ")")
    _print_runs(result)
    if by_status.get("failed") or by_status.get("partial"):
        print("evalfleet: some Runs are partial or failed; see experiment_result.json", file=sys.stderr)
    _write_datasets(args.output)
    from evalfleet.store.automatic import add_if_named, declared_in_output

    add_if_named(args.output, declared_in_output(args.output, endpoint_url=args.s3_endpoint),
                 endpoint_url=args.s3_endpoint, log=lambda line: print(line, file=sys.stderr))
    return 0


def _write_datasets(output: str) -> None:
    """The collected trajectories as LeRobot datasets, where the output is a local folder (a bucket: said)."""
    from evalfleet.outputs.trajectory_dataset import declared_in_output, write_datasets

    if "://" in output:
        return  # a bucket: collecting it into a local folder writes the dataset there
    recorded = declared_in_output(output)
    if recorded:
        write_datasets(output, recorded, log_line=lambda line: print(line, file=sys.stderr))


def _report(args: argparse.Namespace) -> int:
    from evalfleet.feedback import enable_cli_feedback
    from evalfleet.outputs.finalize import write_report

    enable_cli_feedback()
    path = write_report(args.dir, title=args.title)
    print(f"wrote {path}")
    return 0
