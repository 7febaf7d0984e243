"""`evalfleet overrides`, `evalfleet plan`, `evalfleet variations`."""

from __future__ import annotations

import argparse
import json
import re
import sys

from evalfleet.cli.experiment_args import (
    add_arena_runner_flags,
    add_experiment_args,
    experiment_path,
    load_from_args,
    print_overrides,
)
from evalfleet.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("overrides", help="every overridable key with its effective value")
    add_experiment_args(p)
    add_arena_runner_flags(p)
    p.set_defaults(handler=cmd_overrides)

    p = sub.add_parser("plan", help="the episode plan: runs, episodes, shards, servers")
    add_experiment_args(p)
    add_arena_runner_flags(p)
    p.add_argument("--json", action="store_true", help="print the whole plan, every episode's seed and variations")
    p.add_argument("--shard-size", type=int, default=None,
                   help="episodes per shard (default: chosen for --workers, each Run's last shards smaller, "
                        "as `evalfleet run` makes them on the local backend)")
    p.add_argument("--workers", type=int, default=None, help="workers the shards are sized for (default: CPU count)")
    p.set_defaults(handler=cmd_plan)

    p = sub.add_parser("variations", help="the variations an environment type offers")
    p.add_argument("env_type", nargs="?", help="environment type, e.g. metaworld (default: all)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_variations)


def cmd_overrides(args: argparse.Namespace) -> int:
    print_overrides(args, experiment_path(args))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from evalfleet.execution.argument_checks import check_workers
    from evalfleet.backends.osmo.workflow import run_order
    from evalfleet.experiment.plan import make_plan
    from evalfleet.textlayout import output_width

    path = experiment_path(args)
    # The same refusals as `evalfleet run`, so a plan never shows what a run would refuse.
    check_workers(args.workers)
    if args.shard_size is not None and args.shard_size <= 0:
        raise UserError("--shard-size must be a positive number of episodes", where="command line", key="--shard-size")
    loaded = load_from_args(args, path)
    plan = make_plan(loaded, shard_size=args.shard_size, workers=args.workers, taper=True)  # `run`'s default: local
    if args.json:
        json.dump(plan.to_json(), sys.stdout, indent=1)
        print()
        return 0
    order = run_order(loaded, list(plan.runs))  # what osmo.max_parallel_runs does to these Runs
    for line in plan_lines(loaded.experiment.name, plan, output_width(), order=order):
        print(line)
    for line in arena_lines(loaded, plan, output_width()):
        print(line)
    return 0


def arena_lines(loaded, plan, width: int) -> list[str]:  # an experiment.loading.LoadedExperiment, a Plan
    """The Runs whose types exist only in Isaac Lab Arena's image, with the Arena keys and flags they carry."""
    from evalfleet.experiment.arena_keys import ARENA_BUILDER_KEYS
    from evalfleet.experiment.arena_types import arena_sections
    from evalfleet.textlayout import wrap_fields

    lines: list[str] = []
    for rp in plan.runs.values():
        run, sections = rp.run, arena_sections(rp.run)
        if not sections:
            continue
        if not lines:
            head = ("Isaac Lab Arena Runs (types only Arena's image has; they run in Arena's runner: evalfleet "
                    "submit EXP --backend osmo):")
            lines += ["", *wrap_fields(head.split(" "), width, gap=" ", hanging="  ")]
        words = [f"{rp.name}:"] + [w for s in sections for w in (s, getattr(run, s).type, "(Arena's);")]
        if run.labels:
            words += [f"labels.{k}={v};" for k, v in run.labels.model_dump(exclude_none=True).items()]
        if rp.num_episodes and (run.num_rebuilds or 1) > 1:
            base, extra = divmod(rp.num_episodes, run.num_rebuilds)
            split = "+".join(str(base + (i < extra)) for i in range(run.num_rebuilds))
            words += [f"{rp.num_episodes}", "episodes", "over", f"{run.num_rebuilds}", f"rebuilds ({split});"]
        builder = run.environment_builder
        for k in ARENA_BUILDER_KEYS:
            if getattr(builder, k) is not None:
                words += f"{k}={getattr(builder, k)!r};".split(" ")
        lines.extend(wrap_fields(words, width, gap=" ", hanging="  "))
    if loaded.policy_config:
        lines.extend(wrap_fields(f"policy: every Run's from --policy_config {loaded.policy_config}".split(" "),
                                 width, gap=" ", hanging="  "))
    if loaded.continue_on_error:
        note = ("--continue_on_error: Arena's runner goes on with the next Run when one fails (passed to it); "
                "evalfleet's own Runs always do")
        lines.extend(wrap_fields(note.split(" "), width, gap=" ", hanging="  "))
    return lines


FREE_PORT = "FREE_PORT"
_PORT_FLAG = re.compile(r"(--[\w.-]*port)([= ])(\d+)\b")


def plan_lines(name: str, plan, width: int, *, order: str | None = None) -> list[str]:  # an experiment.plan.Plan
    """The plan as text lines for `width` columns: Run names whole, commands wrapped between arguments; `order`:
    how the Runs are ordered on a cluster (`backends.osmo.workflow.run_order`), when that changes anything."""
    from evalfleet.textlayout import Column, command_lines, table_lines, wrap_fields

    columns = [Column("run"), Column("task"), Column("policy"), Column("episodes", "right"), Column("envs", "right"),
               Column("shards", "right"), Column("variations")]
    rows = []
    for rp in plan.runs.values():
        n = str(rp.num_episodes) if rp.num_episodes else f"until {rp.num_steps} steps"
        rows.append([rp.name, str(rp.task), str(rp.policy), n, str(rp.run.environment_builder.num_envs),
                     str(sum(1 for s in plan.shards if s.run == rp.name)),
                     f"replays {rp.replay.source}" if rp.replay else ", ".join(rp.samplers) or "-"])
    title = f"{name}: {plan.total_episodes} episodes, {len(plan.shards)} shards"
    lines = table_lines(columns, rows, width, title=title)
    lines.extend(spec_check_lines(plan, width))
    lines.extend(protocol_lines(plan, width))
    if order:
        lines.extend(wrap_fields(order.split(" "), width, gap=" ", hanging="  "))
    if not plan.servers:
        return [*lines, "servers: none needed"]
    lines.append("")
    for server in plan.servers:
        res = server["resources"]
        words = f"server {server['id']}: {server['protocol']} {server['policy_type']} for".split(" ")
        words += [f"{r}," for r in server["runs"][:-1]] + server["runs"][-1:]
        words += [f"(gpus={res['gpus']},", f"cpus={res['cpus']},", f"memory={res['memory_gb']} GB)"]
        lines.extend(wrap_fields(words, width, gap=" ", hanging="  "))
        lines.extend(command_lines(_PORT_FLAG.sub(rf"\1\2{FREE_PORT}", server["command"]), width))
    note = f"{FREE_PORT}: `evalfleet run` starts each server on a free loopback port and wires its clients to it"
    lines.extend(wrap_fields(note.split(" "), width, gap=" ", hanging="  "))
    return lines


def spec_check_lines(plan, width: int) -> list[str]:  # an experiment.plan.Plan
    """What is checked before each Run's first episode: the policy's declaration against the environment."""
    from evalfleet.experiment.validation import spec_check_summary
    from evalfleet.textlayout import wrap_fields

    lines = ["", "checked before the first episode (a mismatch fails the Run at once):"]
    for rp in plan.runs.values():
        declared, provided = spec_check_summary(rp.run)
        lines.append(f"{rp.name}:")
        for text in (f"policy: {declared}", f"against {provided}"):
            lines.extend("  " + line for line in wrap_fields(text.split(" "), width - 2, gap=" ", hanging="    "))
    return lines


def protocol_lines(plan, width: int) -> list[str]:  # an experiment.plan.Plan
    """What each Run's episodes are judged by (sim/protocol.py): the task's protocol identity, its milestones and
    the failure codes its adapter tells apart (beyond the codes every Run can produce)."""
    from evalfleet.rollout.failures import run_protocol
    from evalfleet.textlayout import wrap_fields

    head = "judged by (the protocol each record carries; a changed protocol is a new measurement):"
    lines = ["", *wrap_fields(head.split(" "), width, gap=" ", hanging="  ")]
    for rp in plan.runs.values():
        protocol = run_protocol(rp.run)
        words = [f"{rp.name}:", protocol.task, f"protocol {protocol.identity[:12]};"]
        if protocol.milestones:
            words += ["milestones", " → ".join(protocol.milestones) + ";"]
        words += ["failure codes", ", ".join(c.code for c in protocol.failures) or "none of its own", "+ common"]
        lines.extend(wrap_fields(" ".join(words).split(" "), width, gap=" ", hanging="  "))
    return lines


def cmd_variations(args: argparse.Namespace) -> int:
    from evalfleet.plugins import load_registries
    from evalfleet.sim.base import ENVIRONMENTS

    load_registries()
    names = [args.env_type] if args.env_type else ENVIRONMENTS.names()
    out = {}
    for name in names:
        entry = ENVIRONMENTS.get(name)
        if entry is None:
            raise UserError(f"unknown environment type {name!r}{ENVIRONMENTS.suggest(name)}", where="command line")
        out[name] = [v.describe() for v in entry.info.variations.values()]
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    for name, variations in out.items():
        print(f"{name}: {len(variations)} variations")
        for v in variations:
            sampler = json.dumps(v["default_sampler"])
            comps = f" components={','.join(v['components'])}" if "components" in v else ""
            opts = f" options={json.dumps(v['options'])}" if "options" in v else ""
            print(f"  {v['name']:<32} {v['kind']:<11} nominal={json.dumps(v['nominal'])} "
                  f"default={sampler}{comps}{opts}")
            print(f"  {'':<32} {v['description']}")
    return 0
