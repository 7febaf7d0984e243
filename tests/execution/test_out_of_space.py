"""Issue #52 finding 13: a full disk under a real `evalfleet run` (a small tmpfs, filled while a runner waits at
the test gate) ends it with one line and exit 1, no traceback, the metadata `failed` with the error, no temporary
file left; with space freed, `--resume` finishes it. Needs a tmpfs mount (root): skipped where there is none."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from evalfleet_testkit import ROOT, evalfleet_cmd, plugin_env, results_by_episode
from test_run_metadata import gated, read, start_run


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 2 MiB tmpfs at tmp_path/disk, unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> Path:
    """Write until the filesystem says it is full; the filler file."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\xff" * 65536)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    try:
        while True:  # the last pages, smaller than a chunk
            os.write(fd, b"\xff")
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_fails_the_run_cleanly_and_resume_finishes_it(tmp_path: Path, small_disk: Path) -> None:
    exp, gate = gated(tmp_path, 4)
    out = small_disk / "out"
    proc = start_run(exp, out, gate)  # a runner waits at the gate with one record written
    try:
        filler = fill(small_disk)
    finally:
        (gate / "release").write_text("")  # the runner's next record, and everything after it, finds no room
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"evalfleet: error: {out}: no space left on device"), err
    assert last.endswith(f"free space, then continue with: evalfleet run --resume --output {out}"), err
    meta = read(out / "experiment_metadata.json")
    assert meta["status"] == "failed" and meta["finished_at"], meta
    assert meta["error"]["type"] == "OSError" and "No space left on device" in meta["error"]["message"]
    leftovers = [p.name for p in [*out.rglob(".*.tmp"), *small_disk.glob(".evalfleet-collect-*")]]
    assert not leftovers and not (out / ".evalfleet" / "space.reserve").exists(), leftovers

    filler.unlink()
    done = subprocess.run(evalfleet_cmd("run", str(exp), "--output", str(out), "--workers", "1", "--resume"),
                          cwd=ROOT, capture_output=True, text=True, env=plugin_env(), timeout=600,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    meta = read(out / "experiment_metadata.json")
    assert meta["status"] == "finished" and [p["status"] for p in meta["previous"]] == ["failed"]
    assert len(results_by_episode(out)) == 4


def test_a_disk_that_fills_while_trajectories_are_recorded_leaves_no_half_written_file(tmp_path: Path,
                                                                                        small_disk: Path) -> None:
    """#54: the same full disk with every episode's trajectory (and a camera) recorded: the run ends with the same
    one line, no temporary trajectory or video and no dataset is left; with space freed, `--resume` finishes and
    writes a dataset of every episode, each trajectory the one its record holds."""
    import yaml

    exp, gate = gated(tmp_path, 4)
    doc = yaml.safe_load(exp.read_text())
    doc["shared"]["recording"] = {"trajectories": {"keys": ["state", "action"], "cameras": ["corner"], "width": 32}}
    exp.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = small_disk / "out"
    proc = start_run(exp, out, gate)
    try:
        filler = fill(small_disk)
    finally:
        (gate / "release").write_text("")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert "no space left on device" in err.strip().splitlines()[-1], err
    leftovers = [str(p) for p in out.rglob(".tmp-*")]
    assert not leftovers and not (out / "dataset").exists(), leftovers

    filler.unlink()
    done = subprocess.run(evalfleet_cmd("run", str(exp), "--output", str(out), "--workers", "1", "--resume"),
                          cwd=ROOT, capture_output=True, text=True, env=plugin_env(), timeout=600,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    import json

    from evalfleet.rollout.trajectory import read_trajectory

    records = [json.loads(line) for path in sorted(out.glob("*/episode_results.jsonl"))
               for line in path.read_text().splitlines()]
    info = json.loads((out / "dataset" / "meta" / "info.json").read_text())
    assert info["total_episodes"] == len(records) == len(results_by_episode(out))
    assert info["total_frames"] == sum(r["episode_length"] for r in records)
    for rec in records:
        table, meta = read_trajectory(out / rec["run"] / "trajectories" / f"episode_{rec['episode']:06d}.arrow")
        assert (meta["attempt"], table.num_rows) == (rec["attempt"], rec["episode_length"])
