"""A collected output folder (local or a bucket) as the store's rows: one Experiment, its Runs, its episodes.

What is read: experiment_result.json (which Runs, their counts, each Run's records file and protocol),
experiment.yaml (each Run's policy and environment), experiment_metadata.json (the Experiment's id, step and
provenance) and each Run's collected records. An output that was never collected has no experiment_result.json:
it is refused with the command that collects it. Files are read with the bounded readers a run did not write.

A Run's records file is read by pyarrow's JSON reader (a million episodes in seconds) wherever that gives every
column exactly as Python's json does, line by line, which reads the rest (`arrow_columns`). An episode's `record`
is its line as collected: the whole record, its keys in the order the run wrote them; `variations` is canonical JSON
(sorted keys), the same text for the same values whoever wrote them, so it pairs episodes across Experiments.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

from evalfleet.errors import UserError
from evalfleet.feedback import is_long
from evalfleet.layout import EXPERIMENT_FILE, METADATA_FILE, RESULT_FILE
from evalfleet.outputs.storage import Location
from evalfleet.store.identity import canonical, digest, environment_identity, policy_identity
from evalfleet.store.schema import arrow_schemas

MAX_TAGS = 32

log = logging.getLogger("evalfleet.store")


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
    import pyarrow as pa

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
    episodes: dict[str, list[Any]] = {k: [] for k in EPISODE_COLUMNS}  # each Run's arrays, joined below
    runs: dict[str, list[Any]] = {k: [] for k in (
        "experiment_id", "run", "task", "policy", "policy_type", "policy_revision", "policy_identity",
        "environment_type", "environment_fingerprint", "environment_identity", "protocol", "step", "status",
        "planned_episodes", "episodes", "successes", "failures", "errors")}
    recorded = sum(number((r or {}).get("episodes_recorded"), int) or 0 for r in result["runs"].values()
                   if isinstance(r, dict))
    long = is_long(files=len(result["runs"]), episodes=recorded)
    for index, (run_name, summary) in enumerate(result["runs"].items(), 1):
        if not isinstance(summary, dict):
            continue
        if long:  # progress on a long add: one line per Run (enable_cli_feedback shows them on stderr)
            log.info("%s: reading Run %d of %d (%s)", loc.display(), index, len(result["runs"]), run_name)
        found, declared = run_episodes(loc, str(run_name), summary, rows.experiment_id)
        for key, values in found.items():
            episodes[key].append(values)
        run_doc = named.get(run_name) if isinstance(named.get(run_name), dict) else {}
        protocol = summary.get("protocol") if isinstance(summary.get("protocol"), str) else None
        policy = policy_identity(run_doc, [] if declared is None else [{"policy_provenance": declared}], step)
        environment = environment_identity(run_doc, versions, protocol)
        counts = summary.get("counts") if isinstance(summary.get("counts"), dict) else {}
        for key, value in (
                ("experiment_id", rows.experiment_id), ("run", str(run_name)), ("task", summary.get("task")),
                ("policy", summary.get("policy")), ("policy_type", (run_doc.get("policy") or {}).get("type")),
                ("policy_revision", digest(policy)[:16]), ("policy_identity", canonical(policy)),
                ("environment_type", environment["type"]), ("environment_fingerprint", digest(environment)[:16]),
                ("environment_identity", canonical(environment)), ("protocol", protocol), ("step", step),
                ("status", summary.get("status")), ("planned_episodes", number(summary.get("planned_episodes"), int)),
                ("episodes", len(found["record"])), ("successes", number(counts.get("success"), int)),
                ("failures", number(counts.get("failure"), int)), ("errors", number(counts.get("error"), int))):
            runs[key].append(value if key not in ("task", "policy", "status") or value is None else str(value))
    schema = arrow_schemas()["episodes"]
    rows.columns = {
        "episodes": {k: pa.chunked_array(v, schema.field(k).type) for k, v in episodes.items()}, "runs": runs,
        "experiments": {
            "experiment_id": [rows.experiment_id], "name": [name], "source": [loc.display()],
            "added_at": [_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")],
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


EPISODE_COLUMNS = ("experiment_id", "run", "episode", "seed", "status", "success", "failure_code", "episode_length",
                   "duration_s", "progress", "variations", "attempt", "timestamp", "policy_latency_ms", "protocol",
                   "record")
WHOLE = ("episode", "seed", "episode_length", "attempt")  # a JSON integer, else null
REAL = ("duration_s", "timestamp", "policy_latency_ms")  # a JSON number, else null
TEXT = ("failure_code", "protocol")  # a JSON string, else null
PLAIN_TEXT = r"^[ !#-\[\]-~]*$"  # printable ASCII but " and \: json.dumps writes such a string as it is


def run_episodes(loc: Location, run: str, summary: dict[str, Any], experiment_id: str) -> tuple[dict[str, Any], Any]:
    """The Run's episode columns (Arrow arrays, one row per record line: `record` is the line) and the first
    `policy_provenance` map its records declare. Arrow's JSON reader reads the lines where it is sure to give what
    Python's json gives (`arrow_columns`); Python reads them, line by line, where it is not."""
    import pyarrow as pa

    rel = summary.get("records_file")
    data = loc.read_bytes(rel) if isinstance(rel, str) and loc.exists(rel) else b""
    columns, declared = arrow_columns(data) or python_columns(loc, str(rel), data)
    count = len(columns["record"])
    columns["experiment_id"] = pa.repeat(pa.scalar(experiment_id, pa.string()), count)
    columns["run"] = pa.repeat(pa.scalar(run, pa.string()), count)
    return columns, declared


def python_columns(loc: Location, rel: str, data: bytes) -> tuple[dict[str, Any], Any]:
    """The columns read line by line with the bounded reader; a line that is not JSON is refused, one that is not
    a JSON object skipped."""
    import pyarrow as pa

    from evalfleet.bounded_json import loads

    columns: dict[str, list[Any]] = {k: [] for k in EPISODE_COLUMNS[2:]}
    declared = None
    for number_, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = loads(line)
        except ValueError:
            raise UserError(f"line {number_} is not a JSON record; collect the output again",
                            where=loc.display(rel)) from None
        if not isinstance(rec, dict):
            continue
        for key in WHOLE:
            columns[key].append(number(rec.get(key), int))
        for key in REAL:
            columns[key].append(number(rec.get(key), float))
        for key in TEXT:
            columns[key].append(rec.get(key) if isinstance(rec.get(key), str) else None)
        columns["status"].append(rec.get("status"))
        columns["success"].append(rec.get("success") if isinstance(rec.get("success"), bool) else None)
        columns["progress"].append(progress_score(rec.get("progress")))
        columns["variations"].append(canonical(rec.get("variations") or {}))
        columns["record"].append(line)
        if declared is None and isinstance(rec.get("policy_provenance"), dict):
            declared = rec["policy_provenance"]
    schema = arrow_schemas()["episodes"]
    return {k: pa.array(v, schema.field(k).type) for k, v in columns.items()}, declared


def arrow_columns(data: bytes) -> tuple[dict[str, Any], Any] | None:
    """The columns read by pyarrow's JSON reader, or None where they might differ from `python_columns`: text that
    is not ASCII or holds control characters other than "\\n" (Python splits lines at more), lines Arrow refuses or
    types otherwise than Python reads them (a fraction in an integer column), a record nested deeper than the
    bounded reader allows, lines over its size bound."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    from evalfleet.bounded_json import MAX_DEPTH, MAX_DOCUMENT_BYTES, loads

    if not data or data.isspace() or len(data) >= 2**31 or not data.isascii():
        return None
    octets = np.frombuffer(data, np.uint8)
    ends = np.flatnonzero(octets == 10)
    if np.count_nonzero(octets < 32) != len(ends):
        return None
    offsets = np.concatenate(([0], ends + 1, [] if data.endswith(b"\n") else [len(data)])).astype(np.int32)
    lines = pc.utf8_rtrim(pa.StringArray.from_buffers(len(offsets) - 1, pa.py_buffer(offsets), pa.py_buffer(data)),
                          characters="\n")
    lines = lines.filter(pc.not_equal(pc.utf8_trim(lines, characters=" "), ""))
    try:
        table = pj.read_json(pa.BufferReader(data)).combine_chunks()
    except pa.ArrowInvalid:
        return None
    if (table.num_rows != len(lines) or pc.max(pc.binary_length(lines)).as_py() > MAX_DOCUMENT_BYTES
            or 1 + max(map(nesting, table.schema.types), default=0) > MAX_DEPTH):
        return None
    count = table.num_rows
    got = {name: table.column(name).chunk(0) for name in table.column_names}
    kind = {name: got[name].type if name in got else pa.null() for name in (*WHOLE, *REAL, *TEXT, "status", "success")}
    nulls = {t: pa.nulls(count, t) for t in (pa.int64(), pa.float64(), pa.bool_(), pa.string())}
    columns: dict[str, Any] = {"record": lines}
    for key in WHOLE:
        if pa.types.is_floating(kind[key]):
            return None  # Python truncates a fraction to its integer; let it
        columns[key] = got[key] if kind[key] == pa.int64() else nulls[pa.int64()]
    for key in REAL:
        number_ = kind[key] in (pa.int64(), pa.float64())
        columns[key] = got[key].cast(pa.float64()) if number_ else nulls[pa.float64()]
    for key in TEXT:
        columns[key] = got[key] if kind[key] == pa.string() else nulls[pa.string()]
    if kind["status"] not in (pa.string(), pa.null()):
        return None
    columns["status"] = got["status"] if kind["status"] == pa.string() else nulls[pa.string()]
    columns["success"] = got["success"] if kind["success"] == pa.bool_() else nulls[pa.bool_()]
    progress = got.get("progress")
    if progress is not None and pa.types.is_struct(progress.type) and "overall_score" in progress.type.names:
        progress = pc.struct_field(progress, "overall_score")
    number_ = progress is not None and progress.type in (pa.int64(), pa.float64())
    columns["progress"] = progress.cast(pa.float64()) if number_ else nulls[pa.float64()]
    variations = got.get("variations", pa.nulls(count))
    if pa.types.is_struct(variations.type):
        texts, unsure = json_texts(variations)
        texts = pc.fill_null(texts, "{}")  # no variations, or null: `or {}`
        redo = np.flatnonzero(unsure)
        if len(redo):
            again = [canonical(loads(lines[int(i)].as_py()).get("variations") or {}) for i in redo]
            texts = pc.replace_with_mask(texts, pa.array(unsure), pa.array(again, pa.string()))
        columns["variations"] = texts
    elif pa.types.is_null(variations.type):
        columns["variations"] = pa.repeat(pa.scalar("{}", pa.string()), count)
    else:
        return None
    declared = None
    provenance = got.get("policy_provenance")
    if provenance is not None and pa.types.is_struct(provenance.type) and provenance.null_count < count:
        first = pc.index(provenance.is_valid(), True).as_py()
        declared = loads(lines[first].as_py())["policy_provenance"]
    return columns, declared


def nesting(kind: Any) -> int:
    """How many maps and lists deep an Arrow type nests."""
    import pyarrow as pa

    if pa.types.is_struct(kind):
        return 1 + max((nesting(f.type) for f in kind), default=0)
    if pa.types.is_list(kind):
        return 1 + nesting(kind.value_type)
    return 0


def json_texts(values: Any) -> tuple[Any, Any]:
    """Each value of an Arrow array as JSON text, as identity.canonical writes it (null where the value is null),
    and the values that might be written otherwise (True), for Python to redo: a float Arrow formats otherwise than
    Python's repr (a whole number, an exponent), a text json.dumps escapes, a map key absent or null (Arrow reads
    both as null)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    kind, count = values.type, len(values)
    unsure = np.zeros(count, bool)
    if pa.types.is_boolean(kind):
        return pc.if_else(values, "true", "false"), unsure
    if pa.types.is_int64(kind):
        return values.cast(pa.string()), unsure
    if pa.types.is_float64(kind):
        size = pc.abs(values)
        plain = pc.and_(pc.and_(pc.greater_equal(size, 1e-4), pc.less(size, 1e9)),
                        pc.not_equal(values, pc.floor(values)))
        return values.cast(pa.string()), np.asarray(pc.fill_null(pc.invert(plain), False))
    if pa.types.is_string(kind):
        plain = pc.match_substring_regex(values, PLAIN_TEXT)
        return pc.binary_join_element_wise('"', values, '"', ""), np.asarray(pc.fill_null(pc.invert(plain), False))
    if pa.types.is_null(kind):
        return pa.nulls(count, pa.string()), unsure
    if pa.types.is_struct(kind):
        valid = np.asarray(values.is_valid())
        names = sorted(f.name for f in kind)
        if not all(pc.match_substring_regex(pa.array(names, pa.string()), PLAIN_TEXT).to_pylist()):
            return pa.nulls(count, pa.string()), valid
        parts = []
        for name in names:
            texts, inner = json_texts(pc.struct_field(values, name))
            unsure |= inner | (np.asarray(texts.is_null()) & valid)  # absent or null: Arrow cannot tell
            parts.append(pc.binary_join_element_wise(f'"{name}":', texts, ""))
        inside = pc.binary_join_element_wise(*parts, ",") if parts else pa.repeat(pa.scalar("", pa.string()), count)
        texts = pc.binary_join_element_wise("{", inside, "}", "")
        return pc.if_else(values.is_valid(), texts, pa.scalar(None, pa.string())), unsure
    if pa.types.is_list(kind):
        texts, inner = json_texts(values.flatten())
        lengths = np.asarray(pc.fill_null(pc.list_value_length(values), 0))
        offsets = pa.array(np.concatenate(([0], np.cumsum(lengths))), pa.int32())
        joined = pc.binary_join(pa.ListArray.from_arrays(offsets, pc.fill_null(texts, "null"), mask=values.is_null()),
                                ",")
        unsure[np.asarray(pc.list_parent_indices(values))[inner]] = True
        return pc.binary_join_element_wise("[", joined, "]", ""), unsure
    return pa.nulls(count, pa.string()), np.asarray(values.is_valid())
