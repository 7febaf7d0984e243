"""The report's episode tables, kept out of index.html: one small script per Run, loaded when the user opens it.

`index.html` holds only the summary and a manifest of the Runs' tables (`episode_manifest`: Run names, episode
counts, the script of each), so its size depends on the number of Runs, never on the number of episodes. Each
Run's table is `report_episodes/<NNNN>.js` (`layout.REPORT_DATA_DIR`; NNNN the Run's place in the report),
written by `episode_script` while collect holds that Run's records and no other's:

    (window.__evalfleet_episodes = window.__evalfleet_episodes || {})[3] = {"run": "...", "ep": [...], ...};

a script, not JSON, because Chromium refuses fetch() of a file:// URL but runs a `<script src>` beside the page,
so the report works opened from disk and from a bucket alike. The table's layout (one Run): ep (episode index
deltas, a contiguous Run is a list of 1s), st (one character per row: s/f/e), len, dur, vars (columns, values to
3 significant digits), video and err (sparse [row, value] pairs), att (sparse [row, attempt] where attempt != 1),
traj (sparse [row, {frames, videos?, plot?}] for a recorded episode: its Parquet file, its camera videos and its
plot's data script, `report_trajectories`). Seeds and exact values stay in the Run's episode_results.jsonl.
"""

from __future__ import annotations

import json
import math
from typing import Any

from evalfleet.layout import REPORT_DATA_DIR
from evalfleet.rollout.run_folder import join
from evalfleet.rollout.trajectory import camera_relpath, trajectory_relpath

_VECTOR_NAMES = {3: ("x", "y", "z")}
_COLOR_NAMES = ("r", "g", "b")
MAX_VECTOR_COMPONENTS = 8
MAX_ERROR_CHARS = 200
VALUE_FORMAT = ".3g"  # variation values and durations in the tables: 3 significant digits
AUTO_LOAD_EPISODES = 20_000  # the page loads every Run's table at once up to this many episodes in all
PLOT_DIR = f"{REPORT_DATA_DIR}/trajectories"  # a recorded episode's plot data (report_trajectories)


def script_path(index: int) -> str:
    """Where the table of the report's `index`-th Run lies, relative to index.html."""
    return f"{REPORT_DATA_DIR}/{index:04d}.js"


def plot_path(index: int, episode: int) -> str:
    """Where the plot data of episode `episode` of the report's `index`-th Run lies, relative to index.html."""
    return f"{PLOT_DIR}/{index:04d}-{episode:06d}.js"


def episode_of(rec: dict[str, Any]) -> int | None:
    e = rec.get("episode")
    return e if isinstance(e, int) and not isinstance(e, bool) and e >= 0 else None


def trajectory_link(name: str, rec: dict[str, Any]) -> dict[str, Any] | None:
    """What the table links for a recorded episode: its Parquet file and camera videos, relative to index.html;
    None where the record names none, or names files other than the runner's names for this episode (a record
    is not trusted to point anywhere else)."""
    found, episode = rec.get("trajectory"), episode_of(rec)
    if not isinstance(found, dict) or episode is None or found.get("frames") != trajectory_relpath(episode):
        return None
    link: dict[str, Any] = {"frames": join(name, found["frames"])}
    videos = found.get("videos")
    if isinstance(videos, dict):
        cams = {c: join(name, p) for c, p in videos.items()
                if isinstance(c, str) and "/" not in c and not c.startswith(".") and p == camera_relpath(c, episode)}
        if cams:
            link["videos"] = cams
    return link


def script_safe(text: str) -> str:
    # Inside <script>, "<" only appears in JSON strings, where \u003c is the same character.
    return text.replace("<", "\\u003c")


def episode_manifest(runs: list[tuple[str, int]]) -> str:
    """The page's manifest of the Runs' tables, from (name, episodes recorded) in the report's order."""
    total = sum(n for _, n in runs)
    return json.dumps({"runs": [name for name, _ in runs], "counts": [n for _, n in runs],
                       "files": [script_path(i) if n else None for i, (_, n) in enumerate(runs)],
                       "total": total, "auto": total <= AUTO_LOAD_EPISODES}, separators=(",", ":"))


def episode_script(index: int, name: str, records: list[dict[str, Any]],
                   plots: dict[int, str] | None = None) -> bytes:
    """The script holding one Run's table (`records`: the ones that count, by episode; `plots`: episode -> its
    plot's data script, `report_trajectories.TrajectoryPlots`)."""
    return (f"(window.__evalfleet_episodes=window.__evalfleet_episodes||{{}})[{index}]="
            f"{script_safe(run_episode_json(name, records, plots))};\n").encode("utf-8")


def _num(v: Any, spec: str = ".4g") -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return "null"
        if v == int(v) and abs(v) < 1e15:
            return str(int(v))
        return format(v, spec)
    return "null"


def _nums(values: list[Any], spec: str = ".4g") -> list[str]:
    """`_num` of every value; plain floats and ints without a call each (a table of 100,000 episodes formats
    several hundred thousand numbers)."""
    out = []
    append = out.append
    for v in values:
        t = type(v)
        if t is float and v - v == 0.0:  # finite (inf - inf and nan - nan are nan)
            append(str(int(v)) if v.is_integer() and -1e15 < v < 1e15 else format(v, spec))
        elif t is int:
            append(str(v))
        else:
            append(_num(v, spec))
    return out


def _component_names(key: str, n: int) -> tuple[str, ...]:
    if n == 3:
        low = key.lower()
        if "color" in low or "colour" in low or "rgb" in low:
            return _COLOR_NAMES
        return _VECTOR_NAMES[3]
    return tuple(str(i) for i in range(n))


class _Absent:
    """A variation key a record does not have (a present null is None)."""


_ABSENT = _Absent()
_NUMBER_TYPES = frozenset((int, float))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _kind(v: Any) -> str:
    """A variation value's kind: num (a number), vec (a non-empty list of numbers) or cat (anything else)."""
    if type(v) in _NUMBER_TYPES or _is_number(v):
        return "num"
    if isinstance(v, list) and v and (set(map(type, v)) <= _NUMBER_TYPES or all(_is_number(x) for x in v)):
        return "vec"
    return "cat"


def _variation_values(records: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Every variation key present, with its value in each record (`_ABSENT` where a record lacks it)."""
    columns: dict[str, list[Any]] = {}
    for row, rec in enumerate(records):
        for k, v in (rec.get("variations") or {}).items():
            column = columns.get(k)
            if column is None:
                column = columns[k] = [_ABSENT] * len(records)
            column[row] = v
    return columns


def _column_kind(values: list[Any]) -> str:
    """The kind of a variation key from its present values: theirs when they share one, else cat."""
    types = set(map(type, values))
    types.discard(_Absent)
    if types <= _NUMBER_TYPES:
        return "num"
    kinds = {_kind(v) for v in values if v is not _ABSENT}
    return kinds.pop() if len(kinds) == 1 else "cat"


def _variation_columns(records: list[dict[str, Any]]) -> list[str]:
    """The JSON of a column for every variation key present: numeric scalars, vector components, or categories."""
    columns = []
    for key, values in sorted(_variation_values(records).items()):
        kind = _column_kind(values)
        if kind == "num":
            columns.append(_column(key, "num", _nums(values, VALUE_FORMAT)))
        elif kind == "vec":
            width = max(len(v) for v in values if v is not _ABSENT)
            names = _component_names(key, width)
            for i in range(min(width, MAX_VECTOR_COMPONENTS)):
                data = _nums([v[i] if isinstance(v, list) and len(v) > i else None for v in values], VALUE_FORMAT)
                columns.append(_column(f"{key}.{names[i]}", "num", data))
        else:
            cats: dict[str, int] = {}
            codes = ["-1" if v is None or v is _ABSENT else str(cats.setdefault(
                v if isinstance(v, str) else json.dumps(v, separators=(",", ":")), len(cats))) for v in values]
            columns.append(_column(key, "cat", codes, list(cats)))
    return columns


def _column(key: str, kind: str, data: list[str], cats: list[str] | None = None) -> str:
    head = f'"key":{json.dumps(key)},"kind":"{kind}",' + (f'"cats":{json.dumps(cats)},' if cats is not None else "")
    return "{" + head + '"data":[' + ",".join(data) + "]}"


def run_episode_json(name: str, records: list[dict[str, Any]], plots: dict[int, str] | None = None) -> str:
    """One Run's table as compact columnar JSON (rows by episode)."""
    ep, st, ln, dur = [], [], [], []
    video, err, att, traj = [], [], [], []
    plots = plots or {}
    code = {"success": "s", "failure": "f"}
    prev = -1
    for row, rec in enumerate(records):
        e = int(rec.get("episode", rec.get("env_id", 0)))
        ep.append(str(e - prev))
        prev = e
        st.append(code.get(rec.get("status"), "e"))
        ln.append(rec.get("episode_length"))
        dur.append(rec.get("duration_s"))
        v = rec.get("video")
        if isinstance(v, dict) and v:
            video.append([row, {str(cam): f"{name}/{path}" for cam, path in v.items()}])
        if "trajectory" in rec:
            link = trajectory_link(name, rec)
            if link is not None:
                plot = plots.get(e)
                traj.append([row, {**link, "plot": plot} if plot else link])
        if rec.get("error"):
            err.append([row, str(rec["error"])[:MAX_ERROR_CHARS]])
        a = rec.get("attempt")
        if isinstance(a, int) and a != 1:
            att.append([row, a])
    compact = {"separators": (",", ":")}
    return (
        "{"
        f'"run":{json.dumps(name)},"count":{len(records)},"ep":[{",".join(ep)}],'
        f'"st":"{"".join(st)}","len":[{",".join(_nums(ln))}],"dur":[{",".join(_nums(dur, VALUE_FORMAT))}],'
        f'"vars":[{",".join(_variation_columns(records))}],"video":{json.dumps(video, **compact)},'
        f'"err":{json.dumps(err, **compact)},"att":{json.dumps(att, **compact)},"traj":{json.dumps(traj, **compact)}'
        "}"
    )
