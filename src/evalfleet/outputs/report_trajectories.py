"""The report's view of a recorded episode (issue #54): its actions, progress and success over time.

An episode whose record says where its trajectory is (`"trajectory": {"frames", "videos"}`, rollout/trajectory.py)
gets, in its Run's table (`report_episodes.run_episode_json`'s sparse `traj` column), a link to its Parquet
file, its camera videos and, for the first MAX_PLOTTED_PER_RUN recorded episodes of the Run (by episode), a
"plot" button. The plot's data is a small script beside the page, loaded by a `<script src>` when the button is
clicked (file:// refuses fetch(); the same pattern as the tables):

    (window.__evalfleet_trajectories = window.__evalfleet_trajectories || {})["report_episodes/trajectories/
    0003-000012.js"] = {"run": ..., "episode": 12, "steps": L, "x": [...], "actions": [[...], ...], ...};

`report_episodes/trajectories/<NNNN>-<EEEEEE>.js` (NNNN the Run's place in the report, EEEEEE the episode).

Bounds: a series has at most MAX_POINTS points whatever the episode's length (a 10,000-step episode's script
stays ~14 KB with a 4-dimensional action): the sampled steps are evenly spaced and always include the first and
the last, each point is the frame at that step (never an average), and a flag (success, done) is set at a point
where it held at any step since the previous point, so a brief success is never dropped; the last step's flags
are given exactly.
Only the first MAX_PLOTTED_PER_RUN recorded episodes of a Run (by episode) get a script, so a Run writes at most
that many files (each far smaller than the trajectory it plots) and collect reads at most that many trajectories
per Run; the others keep their links, their Parquet file holds every frame. A trajectory file is read only
where its record names the runner's own name for it, up to MAX_TRAJECTORY_BYTES, and plotted only where its
metadata is of the record's attempt and seed.

The plot data: run, episode, policy, task, status, steps (the episode's length), x (the sampled steps),
action ("action", else "applied_action"), dims (its width), actions (one list per dimension, the first
MAX_ACTION_DIMS), progress, success and done (one character per point, "1" where it held), final_success and
final_done (the last step's flags); each only where the Run recorded that key.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable

from evalfleet.outputs.report_episodes import _nums, episode_of, plot_path, script_safe, trajectory_link
from evalfleet.rollout.run_folder import join
from evalfleet.rollout.trajectory import METADATA_KEY, trajectory_relpath

log = logging.getLogger("evalfleet.outputs")

MAX_POINTS = 300  # points per series of a plot
MAX_PLOTTED_PER_RUN = 100  # recorded episodes of a Run that get a plot script: the first ones, by episode
MAX_ACTION_DIMS = 16  # action dimensions drawn (the rest are in the Parquet file)
MAX_TRAJECTORY_BYTES = 64 << 20  # a trajectory file larger than this is linked, not plotted
ACTION_COLUMNS = ("action", "applied_action")  # the action as sent, else as applied
FLAG_COLUMNS = {"success": "next.success", "done": "next.done"}
PROGRESS_COLUMN = "next.progress"


def sampled_steps(length: int, max_points: int = MAX_POINTS) -> list[int]:
    """The steps a plot shows: all of them up to `max_points`, else `max_points` evenly spaced ones, the first
    and the last included."""
    if length <= max_points:
        return list(range(length))
    return [round(k * (length - 1) / (max_points - 1)) for k in range(max_points)]


def held_since_previous(flags: Any, steps: list[int]) -> list[bool]:
    """For each sampled step, whether the flag held at any step after the previous sampled one, up to it."""
    import numpy as np

    flags = np.asarray(flags, dtype=bool)
    starts = np.array([0] + [s + 1 for s in steps[:-1]], dtype=np.int64)
    return [bool(v) for v in np.logical_or.reduceat(flags, starts)] if len(flags) else []


class TrajectoryPlots:
    """Writes the plot scripts of one Run's recorded episodes (the first MAX_PLOTTED_PER_RUN) and says which
    episodes have one. `folders`: (Location, the Run folder inside it) where its trajectories may lie, tried in
    order; `write(rel, data)`: where a script goes (collect's staging, or the output itself)."""

    def __init__(self, index: int, name: str, folders: list[tuple[Any, str]],
                 write: Callable[[str, bytes], None], limit: int | None = None):
        self.index, self.name, self.folders, self.write = index, name, folders, write
        self.limit = MAX_PLOTTED_PER_RUN if limit is None else limit
        self.skipped: list[str] = []

    def write_all(self, records: list[dict[str, Any]]) -> dict[int, str]:
        """{episode: its plot script} for the recorded episodes that got one."""
        plotted: dict[int, str] = {}
        tried = 0
        for rec in records:
            if tried >= self.limit:  # counted tries, not plots: files that fail are not read without end either
                break
            if "trajectory" not in rec or trajectory_link(self.name, rec) is None:
                continue
            tried += 1
            episode = episode_of(rec)
            data = self._plot_json(rec)
            if data is not None:
                path = plot_path(self.index, episode)
                self.write(path, plot_script(path, data))
                plotted[episode] = path
        if self.skipped:
            log.info("%s: %d recorded episode(s) not plotted in the report: %s", self.name, len(self.skipped),
                     "; ".join(self.skipped[:3]) + (" ..." if len(self.skipped) > 3 else ""))
        return plotted

    def _plot_json(self, rec: dict[str, Any]) -> str | None:
        import pyarrow as pa

        episode = episode_of(rec)
        for location, folder in self.folders:
            rel = join(folder, trajectory_relpath(episode))
            if not location.is_file(rel):
                continue
            size = location.size(rel)
            if size is None or size > MAX_TRAJECTORY_BYTES:
                self.skipped.append(f"episode {episode} (its trajectory is over {MAX_TRAJECTORY_BYTES >> 20} MiB)")
                return None
            try:
                frames = pa.ipc.open_file(pa.BufferReader(location.read_bytes(rel))).read_all()
                meta = json.loads((frames.schema.metadata or {}).get(METADATA_KEY, b"{}"))
                if meta.get("attempt") != rec.get("attempt", 1) or meta.get("seed") != rec.get("seed"):
                    self.skipped.append(f"episode {episode} (its trajectory is of attempt {meta.get('attempt')}, "
                                        f"its record of attempt {rec.get('attempt', 1)})")
                    return None
                wanted = [c for c in (*ACTION_COLUMNS, *FLAG_COLUMNS.values(), PROGRESS_COLUMN)
                          if c in frames.schema.names]
                return plot_json(self.name, rec, frames.select(wanted))
            except Exception as exc:  # noqa: BLE001 - a bad file costs its plot, never the collect
                self.skipped.append(f"episode {episode} (its trajectory could not be read: {exc})")
                return None
        self.skipped.append(f"episode {episode} (no trajectory file found)")
        return None


def _column(table: Any, name: str) -> Any:
    """A column as numbers: (steps,) for a scalar, (steps, width) for a fixed-size list."""
    column = table.column(name).combine_chunks()
    if hasattr(column.type, "list_size"):
        return column.flatten().to_numpy(zero_copy_only=False).reshape(len(column), column.type.list_size)
    return column.to_numpy(zero_copy_only=False)


def _flags(values: list[bool]) -> str:
    return "".join("1" if v else "0" for v in values)


def plot_json(name: str, rec: dict[str, Any], table: Any) -> str:
    """One episode's plot data as compact JSON (the module's docstring), from its frames (an Arrow table)."""
    length = table.num_rows
    steps = sampled_steps(length)
    data: dict[str, Any] = {"run": name, "episode": episode_of(rec), "policy": rec.get("policy"),
                            "task": rec.get("task"), "status": rec.get("status"), "steps": length}
    parts = [json.dumps(data, separators=(",", ":"))[:-1], f'"x":[{",".join(map(str, steps))}]']
    action = next((c for c in ACTION_COLUMNS if c in table.column_names), None)
    if action is not None and length:
        values = _column(table, action)
        values = values.reshape(length, -1)
        width = values.shape[1]
        rows = [",".join(_nums(values[steps, d].astype(float).tolist())) for d in range(min(width, MAX_ACTION_DIMS))]
        parts.append(f'"action":{json.dumps(action)},"dims":{width},"actions":[' + ",".join(f"[{r}]" for r in rows)
                     + "]")
    if PROGRESS_COLUMN in table.column_names and length:
        progress = _column(table, PROGRESS_COLUMN)[steps].astype(float).tolist()
        parts.append(f'"progress":[{",".join(_nums(progress))}]')
    for key, column in FLAG_COLUMNS.items():
        if column in table.column_names and length:
            flags = _column(table, column)
            parts.append(f'"{key}":"{_flags(held_since_previous(flags, steps))}","final_{key}":'
                         f'{"true" if bool(flags[-1]) else "false"}')
    return ",".join(parts) + "}"


def plot_script(path: str, data: str) -> bytes:
    """The script holding one episode's plot data, keyed by its own path (report.js checks the key it asked
    for)."""
    return (f"(window.__evalfleet_trajectories=window.__evalfleet_trajectories||{{}})[{json.dumps(path)}]="
            f"{script_safe(data)};\n").encode("utf-8")
