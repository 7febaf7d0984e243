"""Fixtures for the analysis tests; the generators live in analysis_synth.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis_synth import write_arena_run, write_run


@pytest.fixture
def evalfleet_output(tmp_path: Path) -> Path:
    """An evalfleet output folder: 2 tasks x 2 policies, shared seeds, a scalar factor that lowers success
    linearly, a colour vector, a categorical factor, progress values and a few infrastructure errors; plus
    the files a real output folder has besides records."""
    out = tmp_path / "out"
    variations = {
        "object.mass": lambda rng: float(rng.uniform(0.0, 1.0)),
        "table.color": lambda rng: [float(v) for v in rng.uniform(0, 1, 3)],
        "light.kind": lambda rng: str(rng.choice(["dim", "bright"])),
    }
    for t, task in enumerate(["pick_place", "drawer_open"]):
        for policy, offset in [("expert", 0.0), ("noisy", -0.25)]:
            write_run(out, f"{task}_{policy}", task=task, policy=policy, task_index=t, episodes=120,
                      success_prob=lambda v, o=offset: float(np.clip(0.95 - 0.6 * v["object.mass"] + o, 0, 1)),
                      variations=variations, outcome_seed=len(policy), error_every=40, progress=True)
    (out / "experiment.yaml").write_text("runs: {}\n")
    (out / "experiment_result.json").write_text("{}\n")
    (out / "index.html").write_text("<html></html>\n")
    (out / "pick_place_expert" / "videos").mkdir()
    (out / "pick_place_expert" / "videos" / "ep0.mp4").write_bytes(b"\x00" * 16)
    return out


@pytest.fixture
def arena_folder(tmp_path: Path) -> Path:
    """Arena's downloaded folder: runs banana_in_bowl_pi0, banana_in_bowl_cosmos, apple_pi0 (apple has no
    cosmos run), records without task/policy tags."""
    root = tmp_path / "arena_download"
    rng = np.random.default_rng(7)
    write_arena_run(root, "banana_in_bowl_pi0", list(rng.uniform(size=40) < 0.7))
    write_arena_run(root, "banana_in_bowl_cosmos", list(rng.uniform(size=40) < 0.4), with_job_name=False)
    write_arena_run(root, "apple_pi0", list(rng.uniform(size=30) < 0.5))
    return root
