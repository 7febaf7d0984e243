"""One merge rule for every reader of an Experiment document: the loader (what `run` runs), the output folder's
reader that collect, the live report and the analysis commands share (`run_folder.experiment_document`), and the
sequential verdicts collect computes from it (`stopping_result.add_stopping`). A Run that overrides part of a
nested `shared` value (its own `stopping.max_episodes`, `shared`'s `stopping.wave` kept) reads the same in all."""

from __future__ import annotations

from pathlib import Path

from evalfleet.analysis.loading import folder_plan
from evalfleet.experiment.loading import load_experiment
from evalfleet.layout import EXPERIMENT_FILE
from evalfleet.outputs.stopping_result import add_stopping
from evalfleet.rollout.run_folder import experiment_document, planned_episodes

DOCUMENT = """\
name: readers
shared:
  environment: {type: metaworld, task: push-v3}
  policy: {type: metaworld_expert}
  rollout_limit: {num_episodes: 8}
  stopping: {wave: 2, max_episodes: 8, precision: {half_width: 0.5}}
runs:
  a: {}
  b:
    stopping: {max_episodes: 4}
    rollout_limit: {num_episodes: 4}
"""


def _record(run: str, episode: int) -> dict:
    return {"run": run, "episode": episode, "status": "success", "success": True, "attempt": 1}


def test_every_reader_merges_shared_into_a_run_the_same_way(tmp_path: Path) -> None:
    (tmp_path / EXPERIMENT_FILE).write_text(DOCUMENT)
    loaded = load_experiment(tmp_path / EXPERIMENT_FILE).experiment.runs
    read = experiment_document((tmp_path / EXPERIMENT_FILE).read_bytes(), EXPERIMENT_FILE)

    # the loader
    assert (loaded["b"].stopping.wave, loaded["b"].stopping.max_episodes) == (2, 4)
    assert loaded["b"].stopping.precision.half_width == 0.5
    # the output folder's reader: the same values, by the same rule
    assert read["b"]["stopping"] == {"wave": 2, "max_episodes": 4, "precision": {"half_width": 0.5}}
    assert read["a"]["stopping"] == {"wave": 2, "max_episodes": 8, "precision": {"half_width": 0.5}}
    assert planned_episodes(read) == {"a": 8, "b": 4} == {n: r.rollout_limit.num_episodes for n, r in loaded.items()}
    assert folder_plan(tmp_path) == {"a": 8, "b": 4}

    # the sequential entries collect writes: b's cap is its own 4; its first look comes after shared's wave of 2
    # episodes, where shared's precision rule (a half-width any interval meets) stops it, as in the run
    records = {"a": [_record("a", i) for i in range(8)], "b": [_record("b", i) for i in range(4)]}
    result = add_stopping({"runs": {"a": {}, "b": {}}}, read, records)
    b = result["runs"]["b"]["stopping"]
    assert (b["max_episodes"], b["stopped_at"]) == (4, 2) and "precision reached" in b["reason"]
    assert result["runs"]["a"]["stopping"]["max_episodes"] == 8
