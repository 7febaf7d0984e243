"""A recorded episode in the report (#54, outputs/report_trajectories.py): its plot data stays bounded however
long the episode (MAX_POINTS per series, evenly sampled steps, a brief success never dropped, the last step's
flags exact); only the first MAX_PLOTTED_PER_RUN recorded episodes of a Run get a plot; a record pointing
anywhere but the runner's own file name gets no link, and a file of another attempt no plot. The browser side:
test_report_trajectories_browser.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from outputs_helpers import record, write_jsonl, write_status

from evalfleet.outputs import report_trajectories
from evalfleet.outputs.collect import collect
from evalfleet.outputs.report_trajectories import MAX_POINTS, held_since_previous, sampled_steps
from evalfleet.rollout.trajectory import _write_frames, trajectory_relpath


def write_trajectory(run_dir: Path, rec: dict, length: int, *, success_at: tuple[int, ...] = (),
                     attempt: int | None = None) -> dict[str, np.ndarray]:
    """The runner's file for `rec`: 4-dimensional actions, success at `success_at` and the last step when the
    record succeeded, done at the last step, progress rising; returns the columns written."""
    rng = np.random.default_rng(rec["episode"])
    actions = rng.uniform(-1, 1, size=(length, 4)).astype(np.float32)
    success = np.zeros(length, dtype=bool)
    success[list(success_at)] = True
    success[-1] = rec["status"] == "success"
    progress = np.linspace(0, 1, length, dtype=np.float32)
    columns = {"action": list(actions), "next.success": success.tolist(),
               "next.done": [False] * (length - 1) + [True], "next.progress": progress.tolist()}
    _write_frames(run_dir / trajectory_relpath(rec["episode"]), columns, length,
                  {"episode": rec["episode"], "seed": rec["seed"], "attempt": attempt or rec["attempt"]})
    return {"action": actions, "success": success, "progress": progress}


def read_script(path: Path, store: str) -> dict:
    text = path.read_text()
    prefix = f"(window.{store}=window.{store}||{{}})["
    assert text.startswith(prefix) and text.endswith(";\n")
    return json.loads(text[text.index("]=") + 2:-2])


def test_sampled_steps_and_held_flags() -> None:
    assert sampled_steps(5) == [0, 1, 2, 3, 4] and sampled_steps(MAX_POINTS) == list(range(MAX_POINTS))
    steps = sampled_steps(10_000)
    assert len(steps) == MAX_POINTS and steps[0] == 0 and steps[-1] == 9_999 and steps == sorted(set(steps))
    flags = np.zeros(10_000, dtype=bool)
    flags[5_001] = True  # between two sampled steps: held at the next one
    held = held_since_previous(flags, steps)
    after = next(k for k, s in enumerate(steps) if s >= 5_001)
    assert steps[after] != 5_001 and [k for k, v in enumerate(held) if v] == [after]


def test_a_long_episode_gives_a_bounded_plot_of_its_own_frames(tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    rec = record("r", 0, "success", episode_length=10_000,
                 trajectory={"frames": trajectory_relpath(0)})
    frames = write_trajectory(src / "r", rec, 10_000, success_at=(5_001,))
    write_jsonl(src / "r" / "parts" / "s.jsonl", [rec])
    write_status(src / "r", planned=1, state="completed")
    collect([str(src)], str(out), report=True)  # read from the source, before the trajectories are copied

    script = out / "report_episodes" / "trajectories" / "0000-000000.js"
    assert script.stat().st_size < 20_000  # 10,000 steps, 4 action dimensions
    data = read_script(script, "__evalfleet_trajectories")
    steps = data["x"]
    assert steps == sampled_steps(10_000) and data["steps"] == 10_000 and data["dims"] == 4
    assert len(data["actions"]) == 4 and all(len(a) == MAX_POINTS for a in data["actions"])
    np.testing.assert_allclose(np.array(data["actions"]).T, frames["action"][steps], rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(data["progress"], frames["progress"][steps], rtol=1e-3, atol=1e-4)
    assert len(data["success"]) == MAX_POINTS and data["success"].count("1") == 2  # the brief one, the last
    assert data["success"][-1] == "1" and data["final_success"] is True and data["done"] == "0" * 299 + "1"

    table = read_script(out / "report_episodes" / "0000.js", "__evalfleet_episodes")
    assert table["traj"] == [[0, {"frames": "r/trajectories/episode_000000.arrow",
                                  "plot": "report_episodes/trajectories/0000-000000.js"}]]
    assert (out / "r" / "trajectories" / "episode_000000.arrow").is_file()  # the link leads to the copy


def test_only_the_first_episodes_of_a_run_get_a_plot_and_records_are_not_trusted(tmp_path: Path,
                                                                               monkeypatch) -> None:
    monkeypatch.setattr(report_trajectories, "MAX_PLOTTED_PER_RUN", 3)
    out = tmp_path / "out"
    records = []
    for e in range(7):
        rec = record("r", e, "failure", trajectory={"frames": trajectory_relpath(e)})
        write_trajectory(out / "r", rec, 20, attempt=2 if e == 1 else None)  # 1: a file of another attempt
        records.append(rec)
    records[0]["trajectory"]["videos"] = {"top": "trajectories/top/episode_000000.mp4", "../x": "../x.mp4"}
    records.append(record("r", 7, "failure", trajectory={"frames": "../../elsewhere/secret.arrow"}))
    records.append(record("r", 8, "failure", trajectory={"frames": "trajectories/episode_000000.arrow"}))
    write_jsonl(out / "r" / "parts" / "s.jsonl", records)
    write_status(out / "r", planned=9, state="completed")
    collect([str(out)], str(out), report=True)

    table = read_script(out / "report_episodes" / "0000.js", "__evalfleet_episodes")
    links = {row: link for row, link in table["traj"]}
    assert sorted(links) == list(range(7))  # 7 and 8 name files that are not theirs: no link
    assert links[0]["videos"] == {"top": "r/trajectories/top/episode_000000.mp4"}
    # the first three recorded episodes are tried; episode 1's file is of another attempt: no plot
    assert {row for row, link in links.items() if "plot" in link} == {0, 2}
    written = sorted(p.name for p in (out / "report_episodes" / "trajectories").iterdir())
    assert written == ["0000-000000.js", "0000-000002.js"]


@pytest.mark.parametrize("keys", [["action"], ["progress", "success"]])
def test_a_run_that_records_some_keys_plots_those(tmp_path: Path, keys: list[str]) -> None:
    from evalfleet.outputs.report_trajectories import plot_json

    columns = {"action": [np.zeros(2, np.float32)] * 5, "next.progress": [0.5] * 5, "next.success": [False] * 5}
    chosen = {k: v for k, v in columns.items() if k.removeprefix("next.") in keys}
    _write_frames(tmp_path / "t.arrow", chosen, 5, {})
    from evalfleet.rollout.trajectory import read_trajectory

    data = json.loads(plot_json("r", record("r", 0, "failure"), read_trajectory(tmp_path / "t.arrow")[0]))
    assert ("actions" in data) == ("action" in keys) and ("progress" in data) == ("progress" in keys)
    assert ("final_success" in data) == ("success" in keys) and "done" not in data and data["x"] == list(range(5))
