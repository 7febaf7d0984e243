"""`evalfleet sensitivity`: a known linear effect is recovered; policies overlay; control arm; factor kinds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from analysis_synth import assert_real_image, episode_inputs, write_run
from evalfleet.analysis.fitting import logistic_fit
from evalfleet.cli import main

TRUE = {"expert": (0.92, -0.6), "noisy": (0.75, -0.5)}  # success probability = a + b * mass


def true_p(policy: str, mass: float) -> float:
    a, b = TRUE[policy]
    return a + b * mass


@pytest.fixture
def linear_effect(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    mass = {"gripper.object_mass": lambda rng: float(rng.uniform(0.0, 1.0))}
    for policy in TRUE:
        write_run(out, f"lift_{policy}", task="lift", policy=policy, task_index=0, episodes=600,
                  success_prob=lambda v, p=policy: true_p(p, v["gripper.object_mass"]), variations=mass,
                  outcome_seed=len(policy), error_every=50)
    # matched control arm for expert: same task, same seeds, the variation disabled (mass fixed at 0)
    write_run(out, "lift_expert_nominal", task="lift", policy="expert", task_index=0, episodes=200,
              success_prob=lambda v: true_p("expert", 0.0), variations={}, outcome_seed=99)
    return out


def test_linear_effect_recovered_for_two_overlaid_policies(linear_effect: Path, tmp_path: Path, capsys) -> None:
    png = tmp_path / "report" / "mass.png"
    assert main(["sensitivity", str(linear_effect), "--factors", "gripper.object_mass", "--output", str(png)]) == 0
    assert "slope" in capsys.readouterr().out
    data = json.loads(png.with_suffix(".json").read_text())
    assert_real_image(png, (540, 420))
    assert data["excluded_errors"] == 2 * 12
    [panel] = data["panels"]
    assert set(panel["policies"]) == {"expert", "noisy"}  # both overlaid in the one panel
    covered = total = 0
    for policy, entry in panel["policies"].items():
        fit = entry["fit"]
        assert fit["model"] == "logistic" and fit["converged"]
        assert fit["slope"] < 0 and fit["slope_ci"][1] < 0, policy  # the sign, with confidence
        assert sum(b["n"] for b in entry["bins"]) == entry["n"] == 600 - 12
        assert len(entry["bins"]) == 6
        for b in entry["bins"]:
            total += 1
            covered += b["ci"][0] <= true_p(policy, b["x"]) <= b["ci"][1]
        # the fitted curve stays near the true line
        grid = np.array(fit["grid"])
        assert np.max(np.abs(np.array(fit["curve"]) - true_p(policy, grid))) < 0.12
    assert covered >= 0.75 * total, f"only {covered}/{total} bins cover the true curve"

    control = panel["policies"]["expert"]["control"]
    assert control["runs"] == ["lift_expert_nominal"]
    assert control["n"] == 200
    assert control["matched_seeds"] == 200 - 4  # seeds whose treated episode was an infrastructure error don't match
    assert control["ci"][0] <= true_p("expert", 0.0) <= control["ci"][1]
    assert panel["policies"]["noisy"]["control"] is None


@pytest.mark.filterwarnings("ignore:.* is deprecated")
def test_logistic_fit_matches_statsmodels() -> None:
    from statsmodels.discrete.discrete_model import Logit

    rng = np.random.default_rng(4)
    x = rng.uniform(-2, 3, 400)
    y = (rng.uniform(size=400) < 1 / (1 + np.exp(-(0.3 - 0.8 * x)))).astype(float)
    fit = logistic_fit(x, y)
    ref = Logit(y, np.column_stack([np.ones_like(x), x])).fit(disp=0)
    assert [fit.intercept, fit.slope] == pytest.approx(list(ref.params), rel=1e-6)
    assert fit.slope_se == pytest.approx(ref.bse[1], rel=1e-5)
    assert fit.slope_p == pytest.approx(ref.pvalues[1], rel=1e-4)
    assert logistic_fit(x, np.ones_like(x)) is None  # nothing to fit


def test_vector_categorical_methods_and_progress(evalfleet_output: Path, tmp_path: Path) -> None:
    png = tmp_path / "s.png"
    args = ["sensitivity", str(evalfleet_output), "--factors", "table.color", "light.kind", "mass", "-o", str(png)]
    assert main(args) == 0
    data = json.loads(png.with_suffix(".json").read_text())
    labels = [p["label"] for p in data["panels"]]
    assert labels == ["table.color.r", "table.color.g", "table.color.b", "light.kind", "object.mass"]
    kind = data["panels"][3]
    assert kind["kind"] == "categorical"
    for entry in kind["policies"].values():
        assert [c["category"] for c in entry["categories"]] == ["bright", "dim"]
    assert_real_image(png, (1620, 840))

    assert main(["sensitivity", str(evalfleet_output), "--factors", "table.color.g", "-o", str(png),
                 "--method", "binned", "--bins", "4", "--policies", "noisy"]) == 0
    data = json.loads(png.with_suffix(".json").read_text())
    [panel] = data["panels"]
    assert panel["label"] == "table.color.g" and list(panel["policies"]) == ["noisy"]
    assert "fit" not in panel["policies"]["noisy"] and len(panel["policies"]["noisy"]["bins"]) == 4

    assert main(["sensitivity", str(evalfleet_output), "--factors", "object.mass", "-o", str(png),
                 "--method", "logistic", "--outcome", "progress", "--runs", "pick_place_expert"]) == 0
    data = json.loads(png.with_suffix(".json").read_text())
    entry = data["panels"][0]["policies"]["expert"]
    assert data["outcome_kind"] == "fraction" and "bins" not in entry
    assert entry["fit"]["model"] == "quasi_logistic" and entry["fit"]["slope"] < 0


def test_arena_episode_results_flag(tmp_path: Path) -> None:
    # Arena's spelling: --episode_results FILE.jsonl, records without tags
    run_dir = tmp_path / "banana_in_bowl_pi0"
    path = run_dir / "episode_results_rebuild0.jsonl"
    run_dir.mkdir()
    rng = np.random.default_rng(2)
    lines = []
    for i in range(300):
        seed, values = episode_inputs(0, i, {"droid.camera_extrinsics_wrist_camera":
                                             lambda r: [float(v) for v in r.normal(0, 0.05, 6)]})
        shift = values["droid.camera_extrinsics_wrist_camera"][0]
        lines.append({"job_name": "banana_in_bowl_pi0", "env_id": i % 4, "episode_in_env": i // 4,
                      "success": bool(rng.uniform() < 0.6 - 3 * shift), "variations": values})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    png = tmp_path / "camera.png"
    assert main(["sensitivity", "--outcome", "success", "--factors", "droid.camera_extrinsics_wrist_camera.x",
                 "--output", str(png), "--episode_results", str(path)]) == 0
    data = json.loads(png.with_suffix(".json").read_text())
    [panel] = data["panels"]
    [(policy, entry)] = panel["policies"].items()
    assert entry["n"] == 300 and entry["fit"]["slope"] < 0
    assert_real_image(png, (540, 420))


def test_folder_after_factors_is_taken_as_input(evalfleet_output: Path, tmp_path: Path) -> None:
    png = tmp_path / "late.png"
    assert main(["sensitivity", "--factors", "object.mass", str(evalfleet_output), "-o", str(png)]) == 0
    data = json.loads(png.with_suffix(".json").read_text())
    assert [p["label"] for p in data["panels"]] == ["object.mass"]
    assert data["policies"] == ["expert", "noisy"]


def test_control_from_plain_policy_when_the_variation_makes_the_arm(tmp_path: Path) -> None:
    """The quickstart's shape: `expert_noisy` is `expert` with robot.action_noise on; `expert` is the control."""
    out = tmp_path / "qs"
    noise = {"robot.action_noise": lambda rng: float(rng.uniform(0.2, 0.8))}
    for t, task in enumerate(["push-v3", "pick-place-v3"]):
        write_run(out, f"{task}_expert", task=task, policy="expert", task_index=t, episodes=40,
                  success_prob=lambda v: 0.95, outcome_seed=1)
        write_run(out, f"{task}_expert_noisy", task=task, policy="expert_noisy", task_index=t, episodes=40,
                  success_prob=lambda v: 1.1 - v["robot.action_noise"], variations=noise, outcome_seed=2)
    png = tmp_path / "noise.png"
    assert main(["sensitivity", str(out), "--factors", "robot.action_noise", "-o", str(png)]) == 0
    [panel] = json.loads(png.with_suffix(".json").read_text())["panels"]
    assert panel["policies"]["expert"] == {"n": 0}
    noisy = panel["policies"]["expert_noisy"]
    assert noisy["fit"]["slope"] < 0
    assert noisy["control"]["policies"] == ["expert"] and noisy["control"]["matched_seeds"] == 80
    assert noisy["control"]["n"] == 80
