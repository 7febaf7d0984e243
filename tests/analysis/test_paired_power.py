"""`power --paired`: N matched pairs for the exact McNemar test, checked against a simulation, and its CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from evalfleet.analysis.paired_power import paired_episodes, paired_episodes_from_cells
from evalfleet.errors import UserError

REPS = 20_000
SRC = Path(__file__).resolve().parents[2] / "src"


def simulated_power(p_a: float, p_b: float, d: float, n: int, alpha: float, rng: np.random.Generator) -> float:
    """Share of REPS simulated pilot-free experiments of n pairs where the exact McNemar test rejects (scipy's
    binomial, independent of the module's own critical values)."""
    a_only, b_only = (d + p_a - p_b) / 2, (d - p_a + p_b) / 2
    both = p_a - a_only
    counts = rng.multinomial(n, [both, a_only, b_only, 1 - both - a_only - b_only], size=REPS)
    b, c = counts[:, 1], counts[:, 2]
    m = b + c
    p = np.minimum(1.0, 2 * sps.binom.cdf(np.minimum(b, c), m, 0.5))
    return float(np.mean((m > 0) & (p <= alpha)))


@pytest.mark.parametrize("p_a,p_b,d,alpha,power", [
    (0.6, 0.7, 0.2, 0.05, 0.8),
    (0.5, 0.65, 0.25, 0.05, 0.8),
    (0.8, 0.9, 0.12, 0.05, 0.8),
    (0.3, 0.5, 0.3, 0.01, 0.9),
])
def test_required_pairs_within_5_percent_of_simulation(p_a, p_b, d, alpha, power) -> None:
    size = paired_episodes(p_a, p_b, d, alpha, power)
    rng = np.random.default_rng([7, int(1000 * p_a), int(1000 * d)])
    se = (power * (1 - power) / REPS) ** 0.5
    at_n = simulated_power(p_a, p_b, d, size.pairs, alpha, rng)
    below = simulated_power(p_a, p_b, d, int(0.95 * size.pairs), alpha, rng)
    assert at_n >= power - 3 * se, (size, at_n)
    assert below < power, (size, below)
    assert size.exact_power == pytest.approx(at_n, abs=4 * se)


def test_impossible_discordance_names_the_flag() -> None:
    with pytest.raises(UserError) as err:
        paired_episodes(0.6, 0.7, 0.05)
    assert err.value.key == "--discordance" and "at least 0.1" in str(err.value)
    with pytest.raises(UserError) as err:
        paired_episodes(0.9, 0.95, 0.5)
    assert err.value.key == "--discordance"


def test_cells_give_the_same_pairs() -> None:
    assert paired_episodes_from_cells(0.05, 0.15, p_a=0.6).pairs == paired_episodes(0.6, 0.7, 0.2).pairs


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "-m", "evalfleet.cli", "power", "--paired", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def _pilot(root: Path) -> Path:
    """Two policies on the same 40 seeds of one task: 30 pairs agree, cand-only 8, base-only 2."""
    out = root / "pilot"
    cand = [1] * 18 + [0] * 12 + [1] * 8 + [0] * 2
    base = [1] * 18 + [0] * 12 + [0] * 8 + [1] * 2
    for policy, outcomes in (("cand", cand), ("base", base)):
        run = out / f"reach_{policy}"
        run.mkdir(parents=True)
        lines = [json.dumps({"run": f"reach_{policy}", "task": "reach", "policy": policy, "episode": i,
                             "seed": 100 + i, "status": "success" if ok else "failure", "success": bool(ok)})
                 for i, ok in enumerate(outcomes)]
        (run / "episode_results.jsonl").write_text("\n".join(lines) + "\n")
    return out


def test_cli_from_rates() -> None:
    done = _cli("--p1", "0.6", "--p2", "0.7", "--discordance", "0.2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{paired_episodes(0.6, 0.7, 0.2).pairs} matched pairs")


def test_cli_from_pilot(tmp_path: Path) -> None:
    pilot = _pilot(tmp_path)
    before = sorted(p for p in pilot.rglob("*"))
    done = _cli("--pilot", str(pilot), "--policy", "cand", "--baseline", "base")
    assert done.returncode == 0, done.stderr
    expected = paired_episodes(26 / 40, 20 / 40, 10 / 40).pairs
    assert done.stdout.startswith(f"{expected} matched pairs"), done.stdout
    assert "estimated from 40 seed-matched pairs of cand (p1) vs base (p2)" in done.stdout
    assert sorted(p for p in pilot.rglob("*")) == before  # nothing written


@pytest.mark.parametrize("args,flag", [
    (("--p1", "0.6", "--p2", "0.7", "--discordance", "0.05"), "--discordance"),
    (("--pilot", "PILOT", "--policy", "cand", "--baseline", "nobody"), "--policy/--baseline"),
])
def test_cli_bad_input_exits_2_naming_the_flag(tmp_path: Path, args, flag) -> None:
    pilot = _pilot(tmp_path)
    before = sorted(p for p in tmp_path.rglob("*"))
    done = _cli(*(str(pilot) if a == "PILOT" else a for a in args))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert flag in done.stderr and done.stdout == ""
    assert sorted(p for p in tmp_path.rglob("*")) == before
