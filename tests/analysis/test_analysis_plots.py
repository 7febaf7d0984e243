"""`evalfleet plot` on evalfleet output and on Arena's downloaded folders."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from analysis_synth import assert_real_image
from evalfleet.analysis.plots import plot_size_px
from evalfleet.analysis.stats import wilson_interval
from evalfleet.cli import main


def cells(path: Path) -> dict[tuple[str, str], dict]:
    data = json.loads(path.read_text())
    return {(c["task"], c["policy"]): c for c in data["cells"]}


def test_plot_evalfleet_output_uses_tags_and_writes_progress(evalfleet_output: Path, capsys) -> None:
    assert main(["plot", str(evalfleet_output)]) == 0
    out = capsys.readouterr().out
    png = evalfleet_output / "plots" / "success_rates.png"
    assert f"wrote {png}" in out
    assert_real_image(png, plot_size_px(2, 2))
    got = cells(png.with_suffix(".json"))
    assert set(got) == {(t, p) for t in ("drawer_open", "pick_place") for p in ("expert", "noisy")}
    for cell in got.values():
        assert cell["n"] == 117  # 3 infrastructure errors per run excluded
        assert cell["ci"] == list(wilson_interval(cell["successes"], cell["n"]))
    assert got[("pick_place", "expert")]["value"] > got[("pick_place", "noisy")]["value"]

    progress = evalfleet_output / "plots" / "average_progress.png"
    assert_real_image(progress, plot_size_px(2, 2))
    prog = cells(progress.with_suffix(".json"))
    assert all(0 <= c["value"] <= 1 and c["n"] == 117 for c in prog.values())


def test_plot_arena_folder_suffix_grouping_and_missing_pair(arena_folder: Path, tmp_path: Path, capsys) -> None:
    png = tmp_path / "success_rates.png"
    assert main(["plot", str(arena_folder), "--policies", "pi0", "cosmos", "--output", str(png)]) == 0
    assert_real_image(png, plot_size_px(2, 2))
    data = json.loads(png.with_suffix(".json").read_text())
    assert data["tasks"] == ["apple", "banana_in_bowl"] and data["policies"] == ["pi0", "cosmos"]
    got = cells(png.with_suffix(".json"))
    assert got[("apple", "cosmos")] == {"task": "apple", "policy": "cosmos", "n": 0, "value": None}  # drawn N/A
    assert got[("apple", "pi0")]["n"] == 30 and got[("banana_in_bowl", "cosmos")]["n"] == 40
    assert not (png.parent / "average_progress.png").exists()  # no progress in these records

    # the same folder packed as Arena's download archive, and without --policies (each Run its own task)
    archive = tmp_path / "download.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(arena_folder, arcname="download")
    png2 = tmp_path / "from_tar.png"
    assert main(["plot", str(archive), "-o", str(png2), "--policies", "pi0", "cosmos"]) == 0
    assert cells(png2.with_suffix(".json")) == got
    capsys.readouterr()
    assert main(["plot", str(arena_folder), "-o", str(png2)]) == 0
    assert "pass --policies" in capsys.readouterr().out
    assert len(json.loads(png2.with_suffix(".json").read_text())["tasks"]) == 3
    assert_real_image(png2, plot_size_px(3, 1))


def test_plot_size_grows_with_tasks(tmp_path: Path) -> None:
    from analysis_synth import write_arena_run

    root = tmp_path / "many"
    for t in range(12):
        for p in ("pi0", "gr00t", "cosmos"):
            write_arena_run(root, f"task{t:02d}_{p}", [True, False, t % 2 == 0])
    png = tmp_path / "many.png"
    assert main(["plot", str(root), "--policies", "pi0", "gr00t", "cosmos", "-o", str(png)]) == 0
    assert plot_size_px(12, 3)[0] > 720
    assert_real_image(png, plot_size_px(12, 3))
