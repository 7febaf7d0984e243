"""Which checks stand behind the numbers (#55): experiment_result.json's `trust` and the report's Trust section.

Each check has an outcome: `passed` (it ran and found nothing), `flagged` (it found something the reader must weigh,
said in `detail`), `info` (what a number means here, nothing to pass or fail) or `not_run` (nothing to check it
with, e.g. an environment that declares no action bounds), and `meaning`: what the check guards against. Computed
from the Run summaries (outputs/summary.py), so `evalfleet collect` of a folder gives what the run gave.
"""

from __future__ import annotations

import html
from typing import Any

MEANINGS = {
    "protocol": "every record names the task protocol it was judged by (success criterion, milestones, failure codes, "
                "step limit); records of another protocol are refused, so one number never mixes two measurements",
    "complete": "every planned episode was decided; a Run cut short measures the episodes it reached, which may be "
                "the easier ones",
    "errors": "infrastructure and fault errors (a server lost, a crash, a physics error) are no policy outcome: they "
              "are retried and left out of the rates; many of them can bias a rate if they strike hard episodes more",
    "success_at_reset": "an episode whose task was already met after its first step says nothing about the policy: "
                        "it is left out of the rate (success_at_reset); many of them mean the task's initial states "
                        "or its success criterion are wrong",
    "action_bounds": "actions outside the environment's declared bounds are clipped by it; a policy clipped on most "
                     "steps usually has the wrong action convention (scale, normalisation, action space) and its "
                     "score says more about that than about the policy",
    "success_hold": "when the environment first reported success, and how many of those episodes counted as "
                    "successes (with success.hold_steps a success must hold; a flickering one does not count)",
    "floors": "the no-op and random policies on the same episodes: a task they often succeed at measures little, "
              "and a policy not above them has not shown it does anything useful there",
    "determinism": "the same episode (seed, variation values, policy) replayed gives the same outcome, length and "
                   "final state; where it does not, a rerun of the Experiment gives other numbers, and the rate "
                   "measured here says by how much to expect it",
    "paired": "policies on one task faced the same episode seeds (and variation values), so they compare pair by "
              "pair (McNemar, Bradley-Terry) rather than as independent samples",
}


def trust_checks(runs: list[dict[str, Any]], floors: dict[str, Any] | None = None,
                 verification: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The checks, in a fixed order, from the Run summaries, the floors' result (outputs/floors.py) and
    `evalfleet verify`'s verify.json (execution/verify.py)."""
    return [_protocol(runs), _complete(runs), _errors(runs), _at_reset(runs), _bounds(runs), _hold(runs),
            _paired(runs), _floors(floors), determinism_check(verification)]


def determinism_check(verification: dict[str, Any] | None) -> dict[str, Any]:
    if not isinstance(verification, dict) or not verification.get("compared"):
        return _check("determinism", "episodes replay alike", "not_run",
                      "not verified: `evalfleet verify OUT --episodes K` replays the first K episodes of every Run")
    agree, compared = verification.get("agree", 0), verification["compared"]
    runs = verification.get("runs") or {}
    detail = (f"{agree}/{compared} replayed episodes agree ({agree / compared:.0%}; status, success, length, final "
              f"state), {verification.get('verified_at', '')}")
    differing = [f"{run} {r['agree']}/{r['compared']}" for run, r in runs.items()
                 if isinstance(r, dict) and r.get("compared") and r.get("agree") != r.get("compared")]
    if differing:
        return _check("determinism", "episodes replay alike", "flagged", detail + "; differ in " + ", ".join(differing))
    return _check("determinism", "episodes replay alike", "passed", detail)


def _floors(floors: dict[str, Any] | None) -> dict[str, Any]:
    from evalfleet.outputs.floors import floors_lines

    if not floors:
        return _check("floors", "policies above their floors", "not_run", "no floors: add `floors: [noop, random]`")
    flagged = floors_lines({"floors": floors})
    if flagged:
        return _check("floors", "policies above their floors", "flagged", "; ".join(flagged))
    tasks = len(floors["tasks"])
    return _check("floors", "policies above their floors", "passed",
                  f"on {tasks} task{'s' if tasks > 1 else ''}, every policy above every floor, no floor too high")


def _check(name: str, title: str, outcome: str, detail: str) -> dict[str, Any]:
    return {"check": name, "title": title, "outcome": outcome, "detail": detail, "meaning": MEANINGS[name]}


def _protocol(runs: list[dict[str, Any]]) -> dict[str, Any]:
    named = [r["run"] for r in runs if r.get("protocol")]
    if not named:
        return _check("protocol", "one protocol per Run", "not_run", "the records name no protocol (e.g. Arena's)")
    missing = [r["run"] for r in runs if not r.get("protocol") and r.get("episodes_recorded")]
    if missing:
        return _check("protocol", "one protocol per Run", "flagged",
                      f"records without a protocol identity in {', '.join(missing)}")
    return _check("protocol", "one protocol per Run", "passed",
                  f"{len(named)} Runs, each of one protocol identity")


def _complete(runs: list[dict[str, Any]]) -> dict[str, Any]:
    short = [f"{r['run']} ({r['status']})" for r in runs if r.get("status") != "completed"]
    if short:
        return _check("complete", "every planned episode decided", "flagged", "not completed: " + ", ".join(short))
    return _check("complete", "every planned episode decided", "passed", f"all {len(runs)} Runs completed")


def _errors(runs: list[dict[str, Any]]) -> dict[str, Any]:
    errors = {r["run"]: r["counts"]["error"] for r in runs if r["counts"].get("error")}
    if not errors:
        return _check("errors", "errors left out of the rates", "passed", "no error record")
    total = sum(r["episodes_recorded"] for r in runs) or 1
    share = sum(errors.values()) / total
    detail = (f"{sum(errors.values())} error records ({share:.1%} of the episodes) left out: "
              + ", ".join(f"{run} {n}" for run, n in errors.items()))
    return _check("errors", "errors left out of the rates", "flagged" if share > 0.05 else "info", detail)


def _at_reset(runs: list[dict[str, Any]]) -> dict[str, Any]:
    found = {r["run"]: r["success_at_reset"] for r in runs if r.get("success_at_reset")}
    if not found:
        return _check("success_at_reset", "no success at reset", "passed", "no episode met the task at its start")
    return _check("success_at_reset", "no success at reset", "flagged",
                  "episodes already successful after the first step: "
                  + ", ".join(f"{run} {n}" for run, n in found.items()))


def _bounds(runs: list[dict[str, Any]]) -> dict[str, Any]:
    counted = {r["run"]: r["clipped_actions"] for r in runs if isinstance(r.get("clipped_actions"), dict)}
    if not counted:
        return _check("action_bounds", "actions within the environment's bounds", "not_run",
                      "no environment here declares its action bounds")
    flagged = {run: c for run, c in counted.items() if c.get("flagged")}
    worst = max(counted.items(), key=lambda item: item[1].get("fraction", 0.0))
    if flagged:
        return _check("action_bounds", "actions within the environment's bounds", "flagged",
                      "clipped on most steps: " + ", ".join(f"{run} {c['fraction']:.0%}" for run, c in flagged.items()))
    return _check("action_bounds", "actions within the environment's bounds", "passed",
                  f"at most {worst[1].get('fraction', 0.0):.1%} of steps clipped ({worst[0]})")


def _hold(runs: list[dict[str, Any]]) -> dict[str, Any]:
    seen = {r["run"]: r["first_success_step"] for r in runs if isinstance(r.get("first_success_step"), dict)}
    if not seen:
        return _check("success_hold", "when success was first reported", "info", "no episode reported success")
    not_counted = {run: s["episodes"] - s["succeeded"] for run, s in seen.items() if s["episodes"] > s["succeeded"]}
    detail = ", ".join(f"{run}: step {s['median']:g} (median) in {s['episodes']} episodes" for run, s in seen.items())
    if not_counted:
        detail += "; reported but not counted (did not hold, or at the step limit): " + ", ".join(
            f"{run} {n}" for run, n in not_counted.items())
    return _check("success_hold", "when success was first reported", "info", detail)


def _paired(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """From each Run's `seeds_head` (its first episodes' seeds by index): on a task, do the policies' episodes of
    the same index have the same seed?"""
    by_task: dict[str, list[dict[int, Any]]] = {}
    for r in runs:
        head = {int(e): seed for e, seed in r.get("seeds_head") or []}
        if head:
            by_task.setdefault(str(r.get("task")), []).append(head)
    shared = {task: heads for task, heads in by_task.items() if len(heads) > 1}
    if not shared:
        return _check("paired", "policies paired by seed", "not_run", "no task has two Runs with seeded records")
    unpaired = [task for task, heads in shared.items()
                if any(a[e] != b[e] for a in heads for b in heads for e in set(a) & set(b))]
    if unpaired:
        return _check("paired", "policies paired by seed", "flagged",
                      "the Runs of " + ", ".join(unpaired) + " did not face the same seeds: compared as independent "
                      "samples")
    tasks = f"{len(shared)} task" + ("s" if len(shared) > 1 else "")
    return _check("paired", "policies paired by seed", "passed",
                  f"{tasks}, their Runs on the same seeds episode by episode")


def trust_section(result: dict[str, Any]) -> str:
    """The report's Trust section (nothing where the result has no `trust`)."""
    checks = result.get("trust")
    if not isinstance(checks, list) or not checks:
        return ""
    e = lambda v: html.escape("" if v is None else str(v), quote=True)  # noqa: E731 - a one-line local helper
    rows = "".join(
        f'<tr data-check="{e(c.get("check"))}" data-outcome="{e(c.get("outcome"))}"><td>{e(c.get("title"))}</td>'
        f'<td class="outcome"><span class="badge trust-{e(c.get("outcome"))}">{e(c.get("outcome"))}</span></td>'
        f'<td class="detail">{e(c.get("detail"))}</td><td class="note">{e(c.get("meaning"))}</td></tr>'
        for c in checks if isinstance(c, dict))
    return ('<section id="trust"><h2>Trust</h2><p class="note">the checks behind these numbers: passed, flagged '
            '(weigh the detail), info, or not run</p><table id="trust-checks" class="grid"><thead><tr><th>Check</th>'
            '<th>Outcome</th><th>Detail</th><th>What it guards against</th></tr></thead><tbody>' + rows
            + "</tbody></table></section>")
