"""`stopping:` in an Experiment file: resolved per Run at load (the cap becomes what the plan covers), and each
mistake a UserError naming the file and the key (the command line prints its line and exits 2, as for every
UserError at load: tests/experiment/test_experiment_errors.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from evalfleet.errors import UserError
from evalfleet.experiment.loading import load_experiment
from evalfleet.experiment.plan import make_plan
from evalfleet.experiment.stopping import comparisons


def doc(stopping: str = "{wave: 5, max_episodes: 20, compare: {baseline: expert}}", limit: str = "{num_episodes: 10}",
        noisy_extra: str = "") -> str:
    return textwrap.dedent(f"""\
        stopping: {stopping}
        shared:
          environment: {{type: metaworld, task: reach-v3}}
          policy: {{type: metaworld_expert}}
          rollout_limit: {limit}
        runs:
          expert: {{policy_name: expert}}
          noisy: {{policy_name: noisy{noisy_extra}}}
        """)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return path


def test_the_cap_is_what_the_plan_covers(tmp_path: Path) -> None:
    loaded = load_experiment(write(tmp_path, doc()))
    plan = make_plan(loaded, workers=1)
    assert {n: rp.num_episodes for n, rp in plan.runs.items()} == {"expert": 20, "noisy": 20}
    resolved = loaded.resolved_document()["runs"]["noisy"]
    assert resolved["stopping"]["max_episodes"] == 20 and resolved["rollout_limit"] == {"num_episodes": 20}
    assert [(c.task, c.policy, c.baseline, c.run, c.baseline_run) for c in comparisons(loaded.experiment)] == [
        ("reach-v3", "noisy", "expert", "noisy", "expert")]
    # the default cap is num_episodes; a Run's own stopping replaces the Experiment's
    loaded = load_experiment(write(tmp_path, doc(stopping="{wave: 5, precision: {half_width: 0.2}}")))
    assert loaded.experiment.runs["noisy"].stopping.max_episodes == 10


@pytest.mark.parametrize("stopping, limit, extra, key, words", [
    ("{wave: 5}", "{num_episodes: 10}", "", "stopping", "at least one of precision or compare"),
    ("{wave: 0, precision: {half_width: 0.1}}", "{num_episodes: 10}", "", "stopping.wave", "greater than 0"),
    ("{precision: {half_width: 0.6}}", "{num_episodes: 10}", "", "stopping.precision.half_width", "0.5"),
    ("{compare: {baseline: expert, alpha: 0.7}}", "{num_episodes: 10}", "", "stopping.compare.alpha", "0.5"),
    ("{compare: {baseline: expert, spending: linear}}", "{num_episodes: 10}", "", "stopping.compare.spending",
     "obrien_fleming"),
    ("{compare: {baseline: expert, margin: 1.5}}", "{num_episodes: 10}", "", "stopping.compare.margin", "1"),
    ("{wave: 20, compare: {baseline: expert}}", "{num_episodes: 10}", "", "stopping.max_episodes",
     "max_episodes >= wave"),
    ("{compare: {baseline: expert}}", "{num_steps: 1000}", "", "shared.rollout_limit.num_steps",
     "num_episodes"),
    ("{compare: {baseline: oracle}}", "{num_episodes: 10}", "", "stopping.compare.baseline",
     "policies there: expert, noisy"),
    ("{compare: {baseline: expert}}", "{num_episodes: 10}", ", stopping: {wave: 2, compare: {baseline: expert}}",
     "stopping.wave", "same wave and max_episodes"),
])
def test_a_bad_rule_names_the_file_and_key(tmp_path: Path, stopping: str, limit: str, extra: str, key: str,
                                           words: str) -> None:
    path = write(tmp_path, doc(stopping, limit, extra))
    with pytest.raises(UserError) as exc:
        load_experiment(path)
    assert (exc.value.where, exc.value.key) == (str(path), key) and words in exc.value.message, exc.value.line()


def test_two_runs_with_one_policy_on_a_task_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, doc().replace("noisy: {policy_name: noisy}", "noisy: {policy_name: noisy}\n"
                                         "  noisy2: {policy_name: noisy}"))
    with pytest.raises(UserError) as exc:
        load_experiment(path)
    assert exc.value.key == "runs.noisy2.policy_name" and "both run policy 'noisy'" in exc.value.message


def test_stopping_takes_command_line_overrides_and_the_cli_refuses_bad_ones(tmp_path: Path, capsys) -> None:
    from evalfleet.cli import main

    path = write(tmp_path, doc())
    loaded = load_experiment(path, ["stopping.max_episodes=10", "stopping.compare.alpha=0.01"])
    assert {n: r.stopping.max_episodes for n, r in loaded.experiment.runs.items()} == {"expert": 10, "noisy": 10}
    assert loaded.experiment.runs["noisy"].stopping.compare.alpha == 0.01
    out = tmp_path / "out"
    for override, key in [("stopping.wave=50", "stopping.max_episodes"), ("stopping.wave=0", "stopping.wave"),
                          ("stopping=[1, 2]", "stopping")]:
        assert main(["run", str(path), override, "--output", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert f"override '{override}': {key}:" in err, err
        assert not out.exists()
