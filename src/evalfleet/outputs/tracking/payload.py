"""What every tracking sink logs for one finished run (one point): the same numbers as experiment_result.json.

Metrics are flat `name → number` with `<run>/...` names: the success rate and its 95% interval, episodes
planned and decided and their ratio (progress), counts by record `status` and by `failure_code` (where
records carry one), the mean and p90 of each runner phase in timings.json. The config is the resolved
Experiment and its provenance (git commit, config hash, versions, backend, masked command line); videos are
the newest few per Run. Every URL's credentials are masked; the Experiment holds no literal secret
(secrets travel as `api_key_env`)."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalfleet.experiment.loading import LoadedExperiment
from evalfleet.experiment.tracking import SinkOptions
from evalfleet.layout import VIDEOS_DIR
from evalfleet.outputs.result import ExperimentResult
from evalfleet.rollout.records import latest_records
from evalfleet.secrets import mask_url
from evalfleet.seeding import stable_hash

VIDEOS_PER_RUN = 4  # the newest videos of each Run go to the tracker (media or artifacts)
PROVENANCE_KEYS = ("experiment", "experiment_file", "config_sha256", "git", "experiment_git", "versions", "command",
                   "working_directory", "backend", "hosts", "status", "started_at", "finished_at", "resumed")


@dataclass(frozen=True)
class Point:
    """One logging point: the numbers of one finished run at one training `step` (0 without one)."""

    step: int
    metrics: dict[str, float]
    config: dict[str, Any]
    videos: dict[str, list[Path]] = field(default_factory=dict)  # Run → its newest videos
    files: dict[str, str] = field(default_factory=dict)  # artifact name → text (experiment.yaml, result)

    def copy_line(self, sink: str, tracker_run: str) -> dict[str, Any]:
        """The local copy of what `sink` logs: one JSON line of OUT/tracking/<sink>.jsonl."""
        return {"sink": sink, "tracker_run": tracker_run, "step": self.step, "metrics": self.metrics,
                "config": self.config, "videos": {run: [str(p) for p in paths] for run, paths in self.videos.items()}}


def tracker_run_name(options: SinkOptions, loaded: LoadedExperiment, out: Path, stepped: bool) -> str:
    """The tracker run a point goes to: `run_name`, else one run per training (the Experiment's name and
    its outputs' parent folder) when called with a step, else the output folder's name."""
    if options.run_name:
        return options.run_name
    if stepped:
        return f"{loaded.experiment.name}-{stable_hash(str(out.resolve().parent)) % 16**8:08x}"
    return out.name


def metric_name(text: str) -> str:
    """A name every tracker accepts (letters, digits, `_ - . /`)."""
    return re.sub(r"[^A-Za-z0-9_./-]+", "_", text)


def run_metrics(name: str, entry: dict[str, Any], failure_codes: Counter[str]) -> dict[str, float]:
    counts = entry.get("counts") or {}
    planned, decided = entry.get("planned_episodes"), int(entry.get("decided") or 0)
    found: dict[str, float] = {"episodes_decided": decided}
    if entry.get("success_rate") is not None:
        found["success_rate"] = float(entry["success_rate"])
    if entry.get("ci95"):
        found["ci95_low"], found["ci95_high"] = (float(v) for v in entry["ci95"])
    if isinstance(planned, int) and planned > 0:
        found["episodes_planned"] = planned
        found["progress"] = decided / planned
    for status, count in counts.items():
        if isinstance(count, (int, float)):
            found[f"status/{status}"] = count
    for code, count in failure_codes.items():
        found[f"failure_code/{metric_name(code)}"] = count
    return {f"{metric_name(name)}/{key}": float(value) for key, value in found.items()}


def timing_metrics(timings: dict[str, Any]) -> dict[str, float]:
    found = {}
    for run, entry in (timings.get("runs") or {}).items():
        for phase, stats in ((entry or {}).get("phases") or {}).items():
            for stat in ("mean_ms", "p90_ms"):
                if isinstance(stats, dict) and isinstance(stats.get(stat), (int, float)):
                    found[f"{metric_name(run)}/timing/{metric_name(phase)}_{stat}"] = float(stats[stat])
    return found


def failure_codes(out: Path, run: str, planned: int | None) -> Counter[str]:
    """Decided records by `failure_code` (records written before failure codes existed carry none)."""
    codes: Counter[str] = Counter()
    for record in latest_records(out, run, planned).values():
        code = record.get("failure_code")
        if isinstance(code, str) and code and record.get("status") != "success":
            codes[code] += 1
    return codes


def newest_videos(out: Path, run: str) -> list[Path]:
    folder = out / run / VIDEOS_DIR
    if not folder.is_dir():
        return []
    videos = [p for p in folder.rglob("*.mp4") if p.is_file() and not p.is_symlink()]
    return sorted(videos, key=lambda p: (p.stat().st_mtime, str(p)))[-VIDEOS_PER_RUN:]


def masked(document: Any) -> Any:
    """`document` with every URL's credentials masked, string by string (masking the JSON text instead could
    join two strings into one masked span and break the document)."""
    if isinstance(document, dict):
        return {masked(key): masked(value) for key, value in document.items()}
    if isinstance(document, list):
        return [masked(value) for value in document]
    return mask_url(document, per_line=False) if isinstance(document, str) else document


def build_point(loaded: LoadedExperiment, out: Path, result: ExperimentResult, step: int | None) -> Point:
    raw = result.raw
    metrics: dict[str, float] = {}
    videos: dict[str, list[Path]] = {}
    for name, entry in (raw.get("runs") or {}).items():
        metrics.update(run_metrics(name, entry, failure_codes(out, name, entry.get("planned_episodes"))))
        if newest_videos(out, name):
            videos[name] = newest_videos(out, name)
    metrics.update(timing_metrics(raw.get("timings") or {}))
    episodes = (raw.get("summary") or {}).get("episodes") or {}
    metrics.update({f"experiment/{metric_name(k)}": float(v) for k, v in episodes.items()
                    if isinstance(v, (int, float))})
    metadata = (raw.get("experiment_metadata") or {}).get("document") or {}
    provenance = {key: metadata[key] for key in PROVENANCE_KEYS if key in metadata}
    config = masked({"experiment": loaded.resolved_document(), "provenance": provenance, "output": str(out),
                     "step": step})
    files = {"experiment.json": json.dumps(config["experiment"], indent=1),
             "provenance.json": json.dumps(provenance and config["provenance"], indent=1),
             "experiment_result.json": json.dumps(masked(raw), indent=1)}
    return Point(step=step if step is not None else 0, metrics=metrics, config=config, videos=videos, files=files)
