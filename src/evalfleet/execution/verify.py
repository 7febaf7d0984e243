"""`evalfleet verify OUTPUT [--episodes K]` (#55): is the output reproducible? Its Experiment (the resolved
experiment.yaml) is run again for the first K episodes of every Run, in a temporary folder on this machine, and each
replayed episode is compared with its record: status, success, length and the digest of the state it ended in
(`final_state`: the simulator's whole state where the environment offers it). Episodes 0..K-1 have the same seeds
and variation values in both runs (the plan is deterministic), so a difference is the policy's or the simulator's
nondeterminism: unseeded noise, a GPU kernel, threads.

The agreement is written to OUT/verify.json, and the output's `trust` (experiment_result.json) and report gain a
`determinism` check. Only what the Experiment file defines can be replayed: an in-process policy given to
`evaluate()` is no longer there (its Runs point at a server that has stopped). The replay adds nothing to a store
and logs to no tracker.
"""

from __future__ import annotations

import copy
import datetime as _dt
import json
import tempfile
from pathlib import Path
from typing import Any, Callable

from evalfleet.errors import UserError
from evalfleet.layout import EXPERIMENT_FILE, RESULT_FILE, VERIFY_FILE

COMPARED = ("status", "success", "episode_length", "final_state")
MAX_LISTED = 10  # differences listed per Run


def replay_document(doc: dict[str, Any], episodes: int) -> dict[str, Any]:
    """The Experiment for the replay: each Run's first `episodes` episodes, nothing recorded, stored or logged."""
    out = copy.deepcopy(doc)
    for key in ("store", "tracking", "stopping"):
        out.pop(key, None)
    out["shared"] = {}  # the resolved Runs already hold what `shared` gave them
    for run in out.get("runs", {}).values():
        if isinstance(run, dict):
            run["rollout_limit"] = {"num_episodes": episodes}
            run.pop("stopping", None)
            run["recording"] = {}
    return out


def compare_records(original: dict[int, dict[str, Any]], replayed: dict[int, dict[str, Any]],
                    episodes: int) -> dict[str, Any]:
    """One Run's agreement over its first `episodes` decided episodes."""
    compared = agree = 0
    differences = []
    for episode in range(episodes):
        first, again = original.get(episode), replayed.get(episode)
        if first is None or again is None or first.get("status") not in ("success", "failure"):
            continue  # not recorded, or an infrastructure error: nothing the policy did to compare
        compared += 1
        differing = {k: [first.get(k), again.get(k)] for k in COMPARED if first.get(k) != again.get(k)}
        if differing:
            if len(differences) < MAX_LISTED:
                differences.append({"episode": episode, **differing})
        else:
            agree += 1
    return {"compared": compared, "agree": agree, "rate": agree / compared if compared else None,
            "differences": differences}


def verify_output(output: str | Path, *, episodes: int = 5, workers: int = 1,
                  log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Replay and compare (module doc); writes OUT/verify.json, the `determinism` check and the report."""
    from evalfleet.execution.pipeline import run as pipeline_run
    from evalfleet.experiment.loading import read_document
    from evalfleet.outputs.output_lock import writing
    from evalfleet.rollout.records import latest_records

    out = Path(output)
    if not (out / EXPERIMENT_FILE).is_file():
        raise UserError(f"no {EXPERIMENT_FILE} here: give the output folder of `evalfleet run`", where=str(out))
    if isinstance(episodes, bool) or not isinstance(episodes, int) or not 1 <= episodes <= 10_000:
        raise UserError(f"expected a number of episodes from 1 to 10000, got {episodes!r}", where="command line",
                        key="--episodes")
    doc = read_document(out / EXPERIMENT_FILE)
    runs = list(doc.get("runs") or {})
    with tempfile.TemporaryDirectory(prefix="evalfleet-verify-") as tmp:
        exp = Path(tmp) / EXPERIMENT_FILE
        exp.write_text(json.dumps(replay_document(doc, episodes)), encoding="utf-8")  # JSON is YAML
        pipeline_run(exp, output=Path(tmp) / "replay", workers=workers, progress=False,
                     log=log or (lambda _: None))
        per_run = {run: compare_records(latest_records(out, run), latest_records(Path(tmp) / "replay", run), episodes)
                   for run in runs}
    compared = sum(r["compared"] for r in per_run.values())
    agree = sum(r["agree"] for r in per_run.values())
    result = {"schema": "evalfleet.verify/1", "episodes_per_run": episodes, "compared": compared, "agree": agree,
              "agreement": agree / compared if compared else None, "fields": list(COMPARED), "runs": per_run,
              "verified_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    with writing(out):
        (out / VERIFY_FILE).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        _update_result(out, result)
    return result


def _update_result(out: Path, verification: dict[str, Any]) -> None:
    """experiment_result.json's `trust` with the determinism check, and the report written again from it."""
    from evalfleet.outputs.finalize import write_report
    from evalfleet.outputs.trust import determinism_check

    path = out / RESULT_FILE
    if not path.is_file():
        return
    result = json.loads(path.read_text(encoding="utf-8"))
    checks = [c for c in result.get("trust") or [] if isinstance(c, dict) and c.get("check") != "determinism"]
    result["trust"] = checks + [determinism_check(verification)]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    write_report(out)


def verify_lines(result: dict[str, Any]) -> list[str]:
    """What `evalfleet verify` prints: a line per Run, the differences, the total."""
    lines = []
    for run, r in result["runs"].items():
        if not r["compared"]:
            lines.append(f"{run}: nothing to compare (no decided episode among the first {result['episodes_per_run']})")
            continue
        lines.append(f"{run}: {r['agree']}/{r['compared']} episodes agree ({r['rate']:.0%})")
        for d in r["differences"]:
            fields = ", ".join(f"{k} {v[0]!r} then {v[1]!r}" for k, v in d.items() if k != "episode")
            lines.append(f"  episode {d['episode']}: {fields}")
    if result["agreement"] is not None:
        lines.append(f"agreement: {result['agree']}/{result['compared']} episodes ({result['agreement']:.1%}) "
                     f"replayed alike ({', '.join(result['fields'])})")
    return lines
