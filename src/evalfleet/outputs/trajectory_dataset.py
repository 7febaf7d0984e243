"""The recorded trajectories of a collected output as a LeRobotDataset v3.0 (issue #54).

The runner leaves one Parquet file per recorded episode in `<run>/trajectories/` (rollout/trajectory.py), and
collect leaves one record per episode in `<run>/episode_results.jsonl`. This joins them, Run by Run in the
Experiment's order and episode by episode in plan order, and writes `OUT/dataset/` (or `<run>/dataset/` for
`dataset: run`) with outputs/lerobot_dataset.py. Every dataset episode carries its record's fields (Run, policy,
task, seed, variation values, status, success, failure code, progress) as episode metadata.

A trajectory is taken only where it is the one its record holds: the same attempt and seed (a file left by an
attempt that was later retried, and whose retry kept no frames, is left out and counted in the log line).
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from evalfleet.layout import DATASET_DIR, RECORDS_FILE, TRAJECTORIES_DIR

log = logging.getLogger("evalfleet")


@dataclass(frozen=True)
class DatasetGroup:
    """One dataset to write: where, and which Runs (in order) feed it."""

    dest: Path
    runs: list[str]


def dataset_groups(out: Path, trajectory_runs: dict[str, str]) -> list[DatasetGroup]:
    """`trajectory_runs`: Run -> its `dataset` setting, in the Experiment's order."""
    together = [r for r, how in trajectory_runs.items() if how == "experiment"]
    groups = [DatasetGroup(out / DATASET_DIR, together)] if together else []
    groups += [DatasetGroup(out / r / DATASET_DIR, [r]) for r, how in trajectory_runs.items() if how == "run"]
    return groups


def recorded_runs(loaded_runs: dict[str, Any]) -> dict[str, str]:
    """Run -> `dataset` setting for the Runs that record trajectories (validated Run models, in order)."""
    out = {}
    for name, run in loaded_runs.items():
        settings = getattr(getattr(run, "recording", None), "trajectories", None)
        if settings is not None:
            out[name] = settings.dataset
    return out


def declared_in_output(out: str | Path) -> dict[str, str]:
    """Run -> `dataset` setting, for the Runs of a collected output's (resolved) experiment.yaml that record
    trajectories; empty when it names none or cannot be read (collect already said what was wrong with it)."""
    doc = _experiment_document(Path(out))
    runs = doc.get("runs") if isinstance(doc, dict) else None
    found = {}
    for name, run in (runs.items() if isinstance(runs, dict) else ()):
        recording = run.get("recording") if isinstance(run, dict) else None
        settings = recording.get("trajectories") if isinstance(recording, dict) else None
        if isinstance(settings, dict):
            found[str(name)] = "run" if settings.get("dataset") == "run" else "experiment"
    return found


def write_datasets(out: str | Path, trajectory_runs: dict[str, str], *, experiment: str = "",
                   log_line: Callable[[str], None] | None = None) -> list[Any]:
    """Write each dataset of the output folder `out` (a local folder, collected); returns their summaries."""
    out = Path(out)
    say = log_line or log.info
    summaries = []
    for group in dataset_groups(out, trajectory_runs):
        summary = _write(out, group, list(_episode_files(out, group.runs, [], say)), experiment, say, overwrite=True)
        if summary is not None:
            summaries.append(summary)
    return summaries


def _write(out: Path, group: DatasetGroup, episodes: list[RecordedEpisode], experiment: str,
           say: Callable[[str], None], *, overwrite: bool) -> Any:
    from evalfleet.outputs.lerobot_dataset import write_dataset

    if not episodes:
        say(f"{group.dest}: no recorded trajectory; no dataset written")
        return None
    summary = write_dataset(group.dest, (_dataset_episode(out, ep, experiment) for ep in episodes),
                            fps=_one_fps(episodes, group), overwrite=overwrite)
    say(f"dataset: {group.dest} ({summary.episodes} episodes, {summary.frames} frames)")
    return summary


@dataclass(frozen=True)
class RecordedEpisode:
    """One episode with a trajectory: its Run, its file, its record and the file's own metadata."""

    run: str
    path: Path
    record: dict[str, Any]
    meta: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        rec = self.record
        return {"run": self.run, "episode": rec.get("episode"), "seed": rec.get("seed"), "status": rec.get("status"),
                "failure_code": rec.get("failure_code"), "frames": rec.get("episode_length"),
                "variations": rec.get("variations") or {}, "trajectory": str(self.path),
                "videos": {camera: str(self.path.parent.parent / rel)
                           for camera, rel in (self.meta.get("cameras") or {}).items()}}


# --- choosing episodes: `evalfleet trajectories` ---------------------------------------------------------------
CONDITION = re.compile(r"^(?P<key>[A-Za-z0-9_.\[\]-]+)\s*(?P<op><=|>=|!=|=|<|>)\s*(?P<value>.+)$")


@dataclass(frozen=True)
class Condition:
    """`KEY OP VALUE` on an episode's variation value: numbers compare as numbers, a vector by its length
    (`camera.position_offset>0.02`: offset by more than 2 cm), text only with = and !=."""

    key: str
    op: str
    value: str

    @classmethod
    def parse(cls, text: str) -> "Condition":
        from evalfleet.errors import UserError

        match = CONDITION.match(text.strip())
        if match is None:
            raise UserError(f"expected KEY OP VALUE with OP one of < <= > >= = != (camera.position_offset>0.02), "
                            f"got {text[:80]!r}", where="command line", key="--where")
        condition = cls(match["key"], match["op"], match["value"].strip())
        if condition.op not in ("=", "!=") and _number(condition.value) is None:
            raise UserError(f"{condition.op} compares numbers; {condition.value[:40]!r} is not one",
                            where="command line", key="--where")
        return condition

    def holds(self, variations: dict[str, Any]) -> bool:
        if self.key not in variations:
            return False
        got = variations[self.key]
        magnitude = _magnitude(got)
        wanted = _number(self.value)
        if self.op in ("=", "!="):
            same = (magnitude == wanted) if magnitude is not None and wanted is not None else str(got) == self.value
            return same == (self.op == "=")
        if magnitude is None:
            return False
        return {"<": magnitude < wanted, "<=": magnitude <= wanted, ">": magnitude > wanted,
                ">=": magnitude >= wanted}[self.op]


@dataclass(frozen=True)
class Selection:
    """Which recorded episodes: every list matches any of its values, all of them at once."""

    runs: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    failure_codes: tuple[str, ...] = ()
    conditions: tuple[Condition, ...] = ()

    def keeps(self, episode: RecordedEpisode) -> bool:
        rec = episode.record
        return ((not self.statuses or rec.get("status") in self.statuses)
                and (not self.failure_codes or rec.get("failure_code") in self.failure_codes)
                and all(c.holds(rec.get("variations") or {}) for c in self.conditions))


def recorded_episodes(out: str | Path, selection: Selection = Selection(),
                      say: Callable[[str], None] | None = None) -> list[RecordedEpisode]:
    """The output folder's recorded episodes the selection keeps, Run by Run, in plan order."""
    from evalfleet.errors import UserError

    out = Path(out)
    if not out.is_dir():
        raise UserError("no such folder (give the output folder of `evalfleet run` or `evalfleet collect`)",
                        where=str(out))
    runs = _runs_with_trajectories(out)
    unknown = [r for r in selection.runs if r not in runs]
    if unknown:
        raise UserError(f"no recorded trajectories for Run {unknown[0]!r} (Runs with trajectories: "
                        f"{', '.join(runs) or 'none'})", where=str(out), key="--run")
    chosen = [r for r in runs if not selection.runs or r in selection.runs]
    return [ep for ep in _episode_files(out, chosen, [], say or log.info) if selection.keeps(ep)]


def export_dataset(out: str | Path, dest: str | Path, episodes: list[RecordedEpisode], *,
                   say: Callable[[str], None] | None = None) -> Any:
    """The chosen episodes as a new LeRobotDataset at `dest` (refused where something exists there)."""
    from evalfleet.errors import UserError

    dest = Path(dest)
    if dest.exists():
        raise UserError("already exists; name a new folder for the dataset", where=str(dest), key="--export")
    if not episodes:
        raise UserError("no recorded episode matches; nothing to export", where=str(out))
    return _write(Path(out), DatasetGroup(dest, sorted({e.run for e in episodes})), episodes, _experiment_name(out),
                  say or log.info, overwrite=False)


def _runs_with_trajectories(out: Path) -> list[str]:
    """The Run folders holding trajectories, in the Experiment's order where its file says it."""
    found = sorted(p.parent.name for p in out.glob(f"*/{TRAJECTORIES_DIR}") if p.is_dir())
    order = list(_experiment_runs(out))
    return sorted(found, key=lambda r: (order.index(r) if r in order else len(order), r))


def _experiment_runs(out: Path) -> list[str]:
    doc = _experiment_document(out)
    runs = doc.get("runs") if isinstance(doc, dict) else None
    return list(runs) if isinstance(runs, dict) else []


def _experiment_name(out: str | Path) -> str:
    doc = _experiment_document(Path(out))
    return str(doc.get("name") or "") if isinstance(doc, dict) else ""


def _experiment_document(out: Path) -> Any:
    from evalfleet.layout import EXPERIMENT_FILE

    try:
        import yaml

        return yaml.safe_load((out / EXPERIMENT_FILE).read_text(encoding="utf-8")[:10_000_000])
    except (OSError, ValueError, yaml.YAMLError):
        return None


def _number(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _magnitude(value: Any) -> float | None:
    """A number's value, a vector's length, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, list) and value and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                  for v in value):
        return math.sqrt(sum(float(v) ** 2 for v in value))
    return None


def _episode_files(out: Path, runs: list[str], skipped: list[str], say: Callable[[str], None]
                   ) -> Iterator[RecordedEpisode]:
    """The Runs' trajectory files joined with their records, in plan order; only their metadata is read here."""
    from evalfleet.bounded_json import loads
    from evalfleet.rollout.trajectory import read_metadata, trajectory_relpath

    for run in runs:
        folder = out / run
        if not (folder / TRAJECTORIES_DIR).is_dir():
            continue
        records: dict[int, dict[str, Any]] = {}
        records_path = folder / RECORDS_FILE
        if records_path.is_file():
            with open(records_path, encoding="utf-8") as f:
                for line in f:
                    try:
                        rec = loads(line)
                    except ValueError:
                        continue
                    if isinstance(rec, dict) and isinstance(rec.get("episode"), int):
                        records[rec["episode"]] = rec
        for episode in sorted(records):
            path = folder / trajectory_relpath(episode)
            if not path.is_file():
                continue
            meta = read_metadata(path)
            rec = records[episode]
            if meta.get("attempt") != rec.get("attempt", 1) or meta.get("seed") != rec.get("seed"):
                skipped.append(f"{run} episode {episode} (its trajectory is of attempt {meta.get('attempt')}, its "
                               f"record of attempt {rec.get('attempt', 1)})")
                continue
            yield RecordedEpisode(run, path, rec, meta)
    if skipped:
        say(f"left out {len(skipped)} trajectories not of the attempt their record holds: {'; '.join(skipped[:3])}"
            + (" ..." if len(skipped) > 3 else ""))


def _one_fps(episodes: list[RecordedEpisode], group: DatasetGroup) -> float:
    rates = {float(ep.meta.get("fps") or 0) for ep in episodes}
    if len(rates) != 1 or not all(rates):
        from evalfleet.errors import UserError

        raise UserError(f"the Runs {', '.join(group.runs)} record at different frame rates ({sorted(rates)}); one "
                        "dataset has one rate: set recording.trajectories.dataset: run", where=str(group.dest))
    return rates.pop()


def _dataset_episode(out: Path, ep: RecordedEpisode, experiment: str) -> Any:
    import numpy as np

    from evalfleet.outputs.lerobot_dataset import DatasetEpisode
    from evalfleet.rollout.trajectory import camera_feature, read_trajectory

    table, meta = read_trajectory(ep.path)
    columns: dict[str, Any] = {}
    for name in table.column_names:
        if name == "frame_index":
            continue
        column = table.column(name).combine_chunks()
        if hasattr(column.type, "list_size"):
            columns[name] = column.flatten().to_numpy(zero_copy_only=False).reshape(len(column), column.type.list_size)
        else:
            columns[name] = np.asarray(column.to_numpy(zero_copy_only=False))
    rec = ep.record
    progress = rec.get("progress")
    metadata = {"experiment": experiment, "run": ep.run, "policy": rec.get("policy"), "task": rec.get("task"),
                "episode": rec.get("episode"), "seed": rec.get("seed"), "attempt": rec.get("attempt", 1),
                "variations": rec.get("variations") or {}, "status": rec.get("status"),
                "success": rec.get("success"), "failure_code": rec.get("failure_code"),
                "progress": progress.get("overall_score") if isinstance(progress, dict) else None}
    videos = {camera_feature(camera): str(out / ep.run / rel) for camera, rel in (meta.get("cameras") or {}).items()}
    return DatasetEpisode(columns=columns, task=meta.get("instruction") or str(rec.get("task") or ""),
                          metadata=metadata, videos=videos)
