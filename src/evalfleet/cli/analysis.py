"""Analysis subcommands: plot, sensitivity, compare, power. They read episode records only."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from evalfleet.errors import UserError
from evalfleet.layout import PLOTS_DIR

INPUT_HELP = "an output folder (searched recursively), a .tar/.tar.gz archive or an episode_results .jsonl file"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plot", help="grouped success-rate bars with 95%% intervals (and average progress)",
                       description="Grouped success-rate bars: tasks on the x axis, one bar per policy, 95% Wilson "
                                   "whiskers, N/A for a missing task/policy pair. Writes PNG + JSON.")
    p.add_argument("inputs", nargs="+", metavar="DIR", help=INPUT_HELP)
    p.add_argument("--output", "-o", help="image file (default DIR/plots/success_rates.png)")
    p.add_argument("--policies", nargs="+", metavar="POLICY",
                   help="policies to show, in this order; also Arena's rule: a Run named <task>_<policy> belongs to "
                        "<policy> when records carry no policy tag")
    p.add_argument("--runs", nargs="+", metavar="RUN", help="only these runs")
    p.add_argument("--title", help="plot title")
    p.set_defaults(handler=cmd_plot)

    s = sub.add_parser("sensitivity", help="outcome against variation factors, policies overlaid",
                       description="For each factor: binned rates with 95% intervals and a logistic fit with a 95% "
                                   "band (categorical factors as bars), every policy overlaid, a matched control arm "
                                   "(variation disabled) as a band. Writes PNG + JSON.")
    s.add_argument("inputs", nargs="*", metavar="DIR", help=INPUT_HELP)
    s.add_argument("--episode-results", nargs="+", action="extend", default=[], metavar="FILE",
                   help="record file(s) to read (Arena's --episode_results)")
    s.add_argument("--factors", nargs="+", required=True, metavar="KEY",
                   help="variation keys (asset.variation), a vector component (asset.variation.x) "
                        "or a unique last part")
    s.add_argument("--outcome", default="success", help="success (default) or a numeric record key such as progress")
    s.add_argument("--runs", nargs="+", metavar="RUN", help="only these runs")
    s.add_argument("--policies", nargs="+", metavar="POLICY", help="policies to overlay (tag or Run-name suffix)")
    s.add_argument("--method", choices=("binned", "logistic", "both"), default="both",
                   help="binned rates, the fitted curve, or both (default)")
    s.add_argument("--bins", type=int, default=6, help="bins per numeric factor (default 6)")
    s.add_argument("--per-task", action="store_true",
                   help="one panel per task and factor (policies overlaid) instead of pooling every task into one "
                        "curve per policy")
    s.add_argument("--output", "-o", help="image file (default DIR/plots/sensitivity.png); numbers go to the same "
                                          "name with .json")
    s.set_defaults(handler=cmd_sensitivity)

    c = sub.add_parser("compare", help="each policy against a baseline: paired McNemar or z test, Holm-corrected",
                       description="Per task and pooled: each policy's success-rate difference from the baseline, "
                                   "exact McNemar on (task, seed) pairs when the arms share seeds, else a "
                                   "two-proportion z test; Holm correction across all tests. "
                                   "Prints a table, writes JSON.")
    c.add_argument("inputs", nargs="+", metavar="DIR", help=INPUT_HELP)
    c.add_argument("--baseline", required=True, metavar="POLICY", help="the policy the others are compared with")
    c.add_argument("--policies", nargs="+", metavar="POLICY", help="policies to compare (default: all)")
    c.add_argument("--runs", nargs="+", metavar="RUN", help="only these runs")
    c.add_argument("--alpha", type=float, default=0.05, help="family-wise error rate (default 0.05)")
    c.add_argument("--output", "-o", help="JSON file (default DIR/plots/compare_<baseline>.json)")
    c.add_argument("--gate", action="store_true",
                   help="for CI: exit 1 when a policy is worse than the baseline on some task (Holm over the "
                        "per-task tests), 0 when none is; the verdict is printed and kept in the JSON")
    c.set_defaults(handler=cmd_compare)

    w = sub.add_parser("power", help="episodes per arm needed to detect a success-rate difference",
                       description="Episodes per arm for a two-sided two-proportion z test (normal approximation); "
                                   "--paired: matched pairs (same seeds) for the exact McNemar test, from "
                                   "--p1 --p2 --discordance or a pilot folder (--pilot DIR --policy A --baseline B).")
    w.add_argument("--p1", type=float, help="success rate of one arm (with --paired: the policy), e.g. 0.6")
    w.add_argument("--p2", type=float, help="success rate of the other arm (with --paired: the baseline), e.g. 0.7")
    w.add_argument("--paired", action="store_true",
                   help="paired episodes on shared seeds: N pairs for the exact McNemar test (Connor 1987, exact "
                        "search)")
    w.add_argument("--discordance", type=float,
                   help="with --paired: probability that exactly one policy succeeds on a seed (p10 + p01)")
    w.add_argument("--pilot", metavar="DIR", help="with --paired: a pilot output folder to estimate p1, p2 and "
                                                  "the discordance from")
    w.add_argument("--policy", help="with --pilot: the policy (p1)")
    w.add_argument("--baseline", help="with --pilot: the baseline (p2)")
    w.add_argument("--task", help="with --pilot: only this task's pairs (default: every task's, pooled)")
    w.add_argument("--alpha", type=float, default=0.05, help="two-sided significance level (default 0.05)")
    w.add_argument("--power", type=float, default=0.8, help="probability of detecting the difference (default 0.8)")
    w.set_defaults(handler=cmd_power)


# ---------------------------------------------------------------------------------------------- helpers


def _where(inputs: list[str]) -> str:
    from evalfleet.secrets import mask_url

    return mask_url(", ".join(inputs))


def _output_file(given: str | None, flag: str = "--output") -> Path | None:
    """The file `--output` names (None when not given); a URL is refused (these commands write local files)."""
    if given is None:
        return None
    if "://" in given:
        from evalfleet.secrets import mask_url

        raise UserError(f"expected a local file path, got the URL {mask_url(given)!r}; write a local file (to "
                        "put a whole output folder in a bucket: evalfleet collect DIR --output URL)",
                        where="command line", key=flag)
    return Path(given)


def _default_dir(inputs: list[str]) -> Path:
    first = Path(inputs[0])
    return first if first.is_dir() else first.resolve().parent


def _load(inputs: list[str], runs: list[str] | None, policies: list[str] | None, flag: str = "--policies"):
    from evalfleet.analysis.loading import load_records
    from evalfleet.analysis.success import labelled_records
    from evalfleet.feedback import enable_cli_feedback

    enable_cli_feedback()  # progress on stderr for big folders
    record_set = load_records(inputs)
    _note_set_aside(record_set)
    return record_set, labelled_records(record_set, runs, policies, where=_where(inputs), flag=flag)


def _note_set_aside(record_set: Any) -> None:
    if record_set.set_aside.total:
        print(f"note: {record_set.set_aside.describe()}; they are in no count")


def _check_output(path: Path, suffixes: tuple[str, ...], flag: str = "--output") -> None:
    if path.suffix.lower() not in suffixes:
        raise UserError(f"expected a file ending in {' or '.join(suffixes)}, got {path.name!r}",
                        where="command line", key=flag)
    if path.exists() and path.is_dir():
        raise UserError("is a folder; give a file name", where=str(path), key=flag)


IMAGE_SUFFIXES = (".png", ".pdf", ".svg")


# ---------------------------------------------------------------------------------------------- plot


def cmd_plot(args: argparse.Namespace) -> int:
    from evalfleet.analysis.loading import load_records
    from evalfleet.analysis.success import SUCCESS_PLOT, write_success_plots

    from evalfleet.feedback import enable_cli_feedback

    output = _output_file(args.output) or _default_dir(args.inputs) / PLOTS_DIR / SUCCESS_PLOT
    _check_output(output, IMAGE_SUFFIXES)
    enable_cli_feedback()  # progress on stderr for big folders
    record_set = load_records(args.inputs)
    _note_set_aside(record_set)
    plots = write_success_plots(record_set, output, policies=args.policies, runs=args.runs, title=args.title,
                                where=_where(args.inputs))
    print(f"wrote {plots.image} ({plots.size_px[0]}x{plots.size_px[1]} px, {len(plots.tasks)} tasks x "
          f"{len(plots.policies)} policies) and {plots.data}")
    if plots.untagged:
        print("note: some records carry no policy tag; pass --policies SUFFIX ... to split Run names like "
              "<task>_<policy> (Arena's rule)")
    if plots.progress_image:
        print(f"wrote {plots.progress_image}")
    return 0


# ---------------------------------------------------------------------------------------------- sensitivity


def cmd_sensitivity(args: argparse.Namespace) -> int:
    from evalfleet.analysis import sensitivity as sens
    from evalfleet.analysis.grouping import ordered_policies
    from evalfleet.analysis.plots import write_json

    factors = list(args.factors)
    # `--factors K ... DIR`: argparse hands a trailing folder or record file to --factors; take it back.
    moved = [f for f in factors if _looks_like_input(f)]
    factors = [f for f in factors if f not in moved]
    if not factors:
        raise UserError("--factors needs at least one variation key", where="command line", key="--factors")
    inputs = list(args.inputs) + moved + list(args.episode_results)
    if not inputs:
        raise UserError("give an output folder or --episode-results FILE.jsonl", where="command line")
    if args.bins < 1:
        raise UserError(f"--bins must be at least 1, got {args.bins}", where="command line", key="--bins")
    output = _output_file(args.output) or _default_dir(inputs) / PLOTS_DIR / "sensitivity.png"
    _check_output(output, IMAGE_SUFFIXES)
    where = _where(inputs)
    record_set, labelled = _load(inputs, args.runs, args.policies)
    records = [rec for _, rec in labelled]
    outcome = sens.resolve_outcome(args.outcome, records, where=where)
    specs = sens.resolve_factors(factors, sens.catalog(records), where=where)
    policies = ordered_policies(labelled, args.policies)
    if args.per_task:
        panels = sens.analyse_per_task(labelled, specs, outcome, policies, method=args.method, bins=args.bins)
    else:
        panels = sens.mark_pooled(sens.analyse(labelled, specs, outcome, policies, method=args.method,
                                               bins=args.bins), labelled)
    tasks = sorted({arm.task for arm, _ in labelled})
    scope = "one panel per task" if args.per_task else (
        f"{len(tasks)} tasks pooled into one curve per policy" if len(tasks) > 1 else f"task {tasks[0]}")
    title = f"Sensitivity of {outcome.name} ({len(records)} episodes; {scope}; policies: {', '.join(policies)})"
    size = sens.plot(panels, policies, outcome, output, title)
    json_path = output.with_suffix(".json")
    write_json(json_path, {
        "outcome": outcome.name, "outcome_kind": outcome.kind, "method": args.method, "bins": args.bins,
        "episodes": len(records), "excluded_errors": record_set.n_errors, "policies": policies,
        "per_task": bool(args.per_task), "tasks": tasks,
        "sources": record_set.sources, "image": str(output), "panels": panels,
    })
    print(f"wrote {output} ({size[0]}x{size[1]} px, {len(panels)} panels) and {json_path}")
    print(f"curves: {scope}" + ("" if args.per_task or len(tasks) < 2 else " (--per-task: one panel per task)"))
    for panel in panels:
        for policy, entry in panel["policies"].items():
            fit = entry.get("fit")
            if fit and fit.get("slope") is not None:
                print(f"  {panel['label']} / {policy} ({sens.scope_text(panel)}): "
                      f"{sens.slope_text(fit, panel['label'], outcome)} ({fit['model']}, n={fit['n']})")
    return 0


def _looks_like_input(name: str) -> bool:
    path = Path(name)
    return path.is_dir() or (path.is_file() and (name.endswith(".jsonl") or name.endswith((".tar", ".tar.gz", ".tgz"))))


# ---------------------------------------------------------------------------------------------- compare


def cmd_compare(args: argparse.Namespace) -> int:
    from evalfleet.analysis.compare import compare, gate, gate_lines, print_table, sequential_gate_of
    from evalfleet.analysis.grouping import UNTAGGED, listing, ordered_policies
    from evalfleet.analysis.plots import write_json

    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha must lie between 0 and 1, got {args.alpha}", where="command line", key="--alpha")
    output = _output_file(args.output) or _default_dir(args.inputs) / PLOTS_DIR / f"compare_{args.baseline}.json"
    _check_output(output, (".json",))
    wanted = None
    if args.policies:
        wanted = list(dict.fromkeys([args.baseline, *args.policies]))
    record_set, labelled = _load(args.inputs, args.runs, wanted, flag="--baseline/--policies")
    policies = ordered_policies(labelled, wanted)
    if args.baseline not in policies:
        hint = ""
        if UNTAGGED in policies:
            hint = ("; records carry no policy tag: name the policies, e.g. --baseline pi0 --policies cosmos, to "
                    "group Runs named <task>_<policy>")
        raise UserError(f"no records for baseline policy {args.baseline!r}; policies present: "
                        f"{listing(policies)}{hint}", where=_where(args.inputs), key="--baseline")
    if len(policies) < 2:
        raise UserError(f"only policy {args.baseline!r} has records; compare needs a second policy",
                        where=_where(args.inputs), key="--baseline")
    # the baseline first, then the rest in their order
    policies = [args.baseline] + [p for p in policies if p != args.baseline]
    result = compare(labelled, args.baseline, policies, alpha=args.alpha)
    result["excluded_errors"] = record_set.n_errors
    if args.gate:  # an Experiment that stopped sequentially is gated by its own sequential decisions
        sequential = sequential_gate_of(args.inputs[0], args.baseline) if len(args.inputs) == 1 else None
        result["gate"] = sequential or gate(result)
    print_table(result)
    write_json(output, result)
    print(f"wrote {output}")
    if args.gate:
        for line in gate_lines(result["gate"], args.baseline):
            print(line)
        return 0 if result["gate"]["passed"] else 1
    return 0


# ---------------------------------------------------------------------------------------------- power


def cmd_power(args: argparse.Namespace) -> int:
    from evalfleet.analysis.stats import episodes_per_arm

    if args.paired:
        return _cmd_power_paired(args)
    for flag in ("discordance", "pilot", "policy", "baseline", "task"):
        if getattr(args, flag) is not None:
            raise UserError(f"--{flag} needs --paired (paired episodes on shared seeds)", where="command line",
                            key="--paired")
    for name in ("p1", "p2"):
        if getattr(args, name) is None:
            raise UserError(f"--{name} is required (or --paired --pilot DIR)", where="command line", key=f"--{name}")
    for name in ("p1", "p2"):
        value = getattr(args, name)
        if not 0 < value < 1:
            raise UserError(
                f"--{name} must lie strictly between 0 and 1, got {value}", where="command line", key=f"--{name}"
            )
    if args.p1 == args.p2:
        raise UserError("--p1 and --p2 are equal; no episode count detects a zero difference", where="command line")
    for name in ("alpha", "power"):
        value = getattr(args, name)
        if not 0 < value < 1:
            raise UserError(
                f"--{name} must lie strictly between 0 and 1, got {value}", where="command line", key=f"--{name}"
            )
    n = episodes_per_arm(args.p1, args.p2, args.alpha, args.power)
    print(f"{n} episodes per arm ({2 * n} in all) detect success rates {args.p1:g} vs {args.p2:g} with power "
          f"{args.power:g} at two-sided alpha {args.alpha:g} (two-proportion z test). Paired episodes (same seeds, "
          f"exact McNemar) usually need fewer.")
    return 0


def _cmd_power_paired(args: argparse.Namespace) -> int:
    from evalfleet.analysis.paired_power import describe, paired_episodes, paired_episodes_from_pilot

    where = "command line"
    if args.pilot is not None:
        given = [f"--{f}" for f in ("p1", "p2", "discordance") if getattr(args, f) is not None]
        if given:
            raise UserError(f"--pilot estimates the rates; drop {' '.join(given)} (or drop --pilot)", where=where,
                            key="--pilot")
        for flag in ("policy", "baseline"):
            if getattr(args, flag) is None:
                raise UserError(f"--pilot needs --{flag} POLICY", where=where, key=f"--{flag}")
        if not Path(args.pilot).exists():
            raise UserError("no such folder; give a pilot output folder", where=args.pilot, key="--pilot")
        size = paired_episodes_from_pilot(args.pilot, args.policy, args.baseline, args.task, args.alpha, args.power)
    else:
        for flag in ("policy", "baseline", "task"):
            if getattr(args, flag) is not None:
                raise UserError(f"--{flag} needs --pilot DIR", where=where, key=f"--{flag}")
        missing = [f"--{f}" for f in ("p1", "p2", "discordance") if getattr(args, f) is None]
        if missing:
            raise UserError(f"--paired needs {' '.join(missing)} (or --pilot DIR --policy A --baseline B)",
                            where=where, key=missing[0])
        size = paired_episodes(args.p1, args.p2, args.discordance, args.alpha, args.power)
    for line in describe(size):
        print(line)
    return 0
