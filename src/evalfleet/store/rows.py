"""A collected output folder (local or a bucket) as the store's rows: one Experiment, its Runs, its episodes.

What is read: experiment_result.json (which Runs, their counts, each Run's records file and protocol),
experiment.yaml (each Run's policy and environment), experiment_metadata.json (the Experiment's id, step and
provenance) and each Run's collected records. An output that was never collected has no experiment_result.json:
it is refused with the command that collects it. Files are read with the bounded readers a run did not write.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
from dataclasses import dataclass, field
from typing import Any

from evalfleet.errors import UserError
from evalfleet.layout import EXPERIMENT_FILE, METADATA_FILE, RESULT_FILE
from evalfleet.outputs.storage import Location
from evalfleet.store.identity import canonical, digest, environment_identity, policy_identity

MAX_TAGS = 32


@dataclass
class OutputRows:
    """One output folder's rows, as columns ready for Arrow (`columns[table][column] = values`)."""

    experiment_id: str
    name: str
    source: str
    columns: dict[str, dict[str, list[Any]]] = field(default_factory=dict)

    @property
    def episodes(self) -> int:
        return len(self.columns["episodes"]["episode"])


def read_json(loc: Location, rel: str) -> Any:
    from evalfleet.bounded_json import loads

    try:
        return loads(loc.read_bytes(rel).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"cannot read it ({exc})", where=loc.display(rel)) from None


def experiment_id(metadata: dict[str, Any], name: str) -> str:
    """The id the run gave its output (kept across --resume); for an output without one (written before ids, or
    by Arena alone), a digest of what names it: the Experiment, when it first started, its config and host."""
    given = metadata.get("experiment_id")
    if isinstance(given, str) and len(given) == 32 and all(c in "0123456789abcdef" for c in given):
        return given
    first = (metadata.get("previous") or [metadata])[0]
    first = first if isinstance(first, dict) else metadata
    parts = [name, first.get("started_at"), metadata.get("config_sha256"), metadata.get("hosts")]
    return hashlib.sha256(canonical(parts).encode()).hexdigest()[:32]


def progress_score(value: Any) -> float | None:
    if isinstance(value, dict):
        value = value.get("overall_score")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def number(value: Any, kind: type) -> Any:
    return kind(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def output_rows(loc: Location, *, tags: list[str] | None = None, step: int | None = None) -> OutputRows:
    """The rows of the collected output at `loc`; UserError naming the file when it is not one."""
    from evalfleet.rollout.run_folder import experiment_document

    if not loc.exists(RESULT_FILE):
        raise UserError(f"no {RESULT_FILE}: not a collected output; collect it first (evalfleet collect "
                        f"{loc.display()}) or name the output folder itself", where=loc.display())
    result = read_json(loc, RESULT_FILE)
    if not isinstance(result, dict) or not isinstance(result.get("runs"), dict):
        raise UserError("not an evalfleet result (no `runs` map)", where=loc.display(RESULT_FILE))
    named = experiment_document(loc.read_bytes(EXPERIMENT_FILE), loc.display(EXPERIMENT_FILE)) \
        if loc.exists(EXPERIMENT_FILE) else {}
    metadata = read_json(loc, METADATA_FILE) if loc.exists(METADATA_FILE) else {}
    metadata = metadata if isinstance(metadata, dict) else {}
    provenance = result.get("provenance") if isinstance(result.get("provenance"), dict) else {}
    name = str(metadata.get("experiment") or provenance.get("experiment") or loc.display().rstrip("/").split("/")[-1])
    step = step if step is not None else number(metadata.get("step"), int)
    versions = {**(provenance.get("packages") or {}), **(metadata.get("versions") or {})}
    rows = OutputRows(experiment_id(metadata, name), name, loc.display())
    episodes: dict[str, list[Any]] = {k: [] for k in (
        "experiment_id", "run", "episode", "seed", "status", "success", "failure_code", "episode_length",
        "duration_s", "progress", "variations", "attempt", "timestamp", "policy_latency_ms", "protocol", "record")}
    runs: dict[str, list[Any]] = {k: [] for k in (
        "experiment_id", "run", "task", "policy", "policy_type", "policy_revision", "policy_identity",
        "environment_type", "environment_fingerprint", "environment_identity", "protocol", "step", "status",
        "planned_episodes", "episodes", "successes", "failures", "errors")}
    for run_name, summary in result["runs"].items():
        if not isinstance(summary, dict):
            continue
        records = run_records(loc, str(run_name), summary)
        for rec in records:
            episodes["experiment_id"].append(rows.experiment_id)
            episodes["run"].append(str(run_name))
            episodes["episode"].append(number(rec.get("episode"), int))
            episodes["seed"].append(number(rec.get("seed"), int))
            episodes["status"].append(rec.get("status"))
            episodes["success"].append(rec.get("success") if isinstance(rec.get("success"), bool) else None)
            episodes["failure_code"].append(rec.get("failure_code") if isinstance(rec.get("failure_code"), str)
                                            else None)
            episodes["episode_length"].append(number(rec.get("episode_length"), int))
            episodes["duration_s"].append(number(rec.get("duration_s"), float))
            episodes["progress"].append(progress_score(rec.get("progress")))
            episodes["variations"].append(canonical(rec.get("variations") or {}))
            episodes["attempt"].append(number(rec.get("attempt"), int))
            episodes["timestamp"].append(number(rec.get("timestamp"), float))
            episodes["policy_latency_ms"].append(number(rec.get("policy_latency_ms"), float))
            episodes["protocol"].append(rec.get("protocol") if isinstance(rec.get("protocol"), str) else None)
            episodes["record"].append(canonical(rec))
        run_doc = named.get(run_name) if isinstance(named.get(run_name), dict) else {}
        protocol = summary.get("protocol") if isinstance(summary.get("protocol"), str) else None
        policy = policy_identity(run_doc, records, step)
        environment = environment_identity(run_doc, versions, protocol)
        counts = summary.get("counts") if isinstance(summary.get("counts"), dict) else {}
        for key, value in (
                ("experiment_id", rows.experiment_id), ("run", str(run_name)), ("task", summary.get("task")),
                ("policy", summary.get("policy")), ("policy_type", (run_doc.get("policy") or {}).get("type")),
                ("policy_revision", digest(policy)[:16]), ("policy_identity", canonical(policy)),
                ("environment_type", environment["type"]), ("environment_fingerprint", digest(environment)[:16]),
                ("environment_identity", canonical(environment)), ("protocol", protocol), ("step", step),
                ("status", summary.get("status")), ("planned_episodes", number(summary.get("planned_episodes"), int)),
                ("episodes", len(records)), ("successes", number(counts.get("success"), int)),
                ("failures", number(counts.get("failure"), int)), ("errors", number(counts.get("error"), int))):
            runs[key].append(value if key not in ("task", "policy", "status") or value is None else str(value))
    rows.columns = {
        "episodes": episodes, "runs": runs,
        "experiments": {
            "experiment_id": [rows.experiment_id], "name": [name], "source": [loc.display()],
            "added_at": [_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")],
            "started_at": [str(first_started(metadata))], "finished_at": [metadata.get("finished_at")],
            "status": [metadata.get("status")], "step": [step], "tags": [canonical(sorted(set(tags or [])))],
            "config_sha256": [metadata.get("config_sha256")],
            "evalfleet_version": [str((metadata.get("versions") or {}).get("evalfleet")
                                      or provenance.get("evalfleet_version") or "")],
            "metadata": [canonical({k: v for k, v in metadata.items() if k != "previous"})],
            "provenance": [canonical(provenance)]}}
    return rows


def first_started(metadata: dict[str, Any]) -> Any:
    previous = metadata.get("previous")
    if isinstance(previous, list) and previous and isinstance(previous[0], dict):
        return previous[0].get("started_at")
    return metadata.get("started_at")


def run_records(loc: Location, run: str, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The Run's collected records (one line per episode), each a JSON object; a line that is not is refused."""
    from evalfleet.bounded_json import loads

    rel = summary.get("records_file")
    if not isinstance(rel, str) or not loc.exists(rel):
        return []
    out = []
    for number_, line in enumerate(loc.read_bytes(rel).decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = loads(line)
        except ValueError:
            raise UserError(f"line {number_} is not a JSON record; collect the output again",
                            where=loc.display(rel)) from None
        if isinstance(rec, dict):
            out.append(rec)
    return out
