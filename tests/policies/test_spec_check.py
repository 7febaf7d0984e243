"""What a policy declares is checked against its Run's environment before the first episode: each kind
of mismatch fails the Run at once with one line naming both sides; a matching spec runs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from evalfleet.errors import UserError
from evalfleet.policies.base import PolicySpec, SpecMismatchError, check_spec, spec_mismatches
from evalfleet.sim.base import EnvironmentSpec, environment_spec

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from evalfleet_testkit import run_evalfleet  # noqa: E402 - sys.path is set up first

ENV = EnvironmentSpec(source="environment pusht", action_dim=2, action_low=(-1.0, -1.0), action_high=(1.0, 1.0),
                      cameras=("top",), image_sizes={"top": (96, 96)}, state_dim=5, gripper="positive_closes",
                      control_hz=10.0)


@pytest.mark.parametrize(("declared", "expected"), [
    ({"action_dim": 7}, "action_dim: policy 7, environment 2"),
    ({"action_low": [0, 0], "action_high": [512, 512]}, "action bounds: policy [0, 512], environment [-1, 1]"),
    ({"cameras": ["wrist"]}, "cameras: policy needs wrist, environment renders top"),
    ({"keys": ["observation/images/wrist"]}, "cameras: policy needs wrist, environment renders top"),
    ({"image_sizes": {"top": [224, 224]}}, "image size of top: policy 224x224, environment 96x96"),
    ({"state_dim": 8}, "state_dim: policy 8, environment 5"),
    ({"gripper": "positive_opens"}, "gripper: policy positive_opens, environment positive_closes"),
    ({"control_hz": 50}, "control rate: policy 50 Hz, environment 10 Hz (each action would last another time than "
                         "it was trained for)"),
])
def test_each_mismatch_names_both_sides(declared, expected):
    spec = PolicySpec.from_mapping(declared, "policy p (registry entry)")
    assert spec_mismatches(spec, ENV) == [expected]
    with pytest.raises(SpecMismatchError) as err:
        check_spec(spec, ENV, run="r")
    line = err.value.line()
    assert "\n" not in line and "policy p (registry entry)" in line and "environment pusht" in line
    assert expected in line


def test_matching_and_undeclared_specs_pass():
    full = PolicySpec.from_mapping({"action_dim": 2, "action_low": [-1, -1], "action_high": [1, 1],
                                    "cameras": ["top"], "image_size": [96, 96], "state_dim": 5,
                                    "keys": ["observation/state", "prompt"], "gripper": "positive_closes",
                                    "control_hz": 10.05}, "p")  # within 1%: the same rate
    assert spec_mismatches(full, ENV) == []
    check_spec(full, ENV, run="r")
    check_spec(None, ENV, run="r")
    # what the environment does not declare is not checked
    assert spec_mismatches(PolicySpec.from_mapping({"action_dim": 7, "cameras": ["wrist"]}, "p"),
                           EnvironmentSpec(source="environment x")) == []


@pytest.mark.parametrize("bad", [
    {"action_dim": 0}, {"action_dim": True}, {"action_low": [0]}, {"image_sizes": {"top": [96]}},
    {"gripper": "sideways"}, {"camera": ["top"]}, [1, 2], {"control_hz": 0}, {"control_hz": "80"},
    {"control_hz": float("nan")}, {"control_hz": True},
])
def test_unreadable_declarations_are_refused(bad):
    with pytest.raises(ValueError):
        PolicySpec.from_mapping(bad, "p")


def test_wire_form_round_trips():
    spec = PolicySpec.from_mapping({"action_dim": 2, "cameras": ["top"], "image_sizes": {"top": [96, 80]},
                                    "gripper": "positive_opens", "action_low": [0, 0], "action_high": [1, 2],
                                    "control_hz": 12.5}, "p")
    assert PolicySpec.from_mapping(json.loads(json.dumps(spec.to_mapping())), "p") == spec


def test_environment_spec_from_options():
    from evalfleet.plugins import load_registries

    load_registries()
    pixels = environment_spec("pusht", {"obs_type": "pixels", "image_size": 64})
    assert pixels.cameras == ("top",) and pixels.image_sizes == {"top": (64, 64)}
    state = environment_spec("pusht", {"obs_type": "state"})
    assert state.cameras == () and state.action_dim is None  # the action size comes from the built env
    mw = environment_spec("metaworld", {"task": "reach-v3", "cameras": ["corner"], "image_size": [120, 160]})
    assert mw.image_sizes == {"corner": (120, 160)}


# ----------------------------------------------------------------------------- end to end


def _plugin_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")]))
    env["EVALFLEET_PLUGINS"] = "spec_test_plugins"
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra)
    return env


def _experiment(tmp_path: Path, runs: dict, name: str = "spec") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "seed": 0,
        "shared": {"environment": {"type": "pusht", "obs_type": "state", "actions": "normalized", "max_steps": 3},
                   "rollout_limit": {"num_episodes": 2}},
        "runs": runs,
    }))
    return path


def _records(out: Path, run: str) -> list[dict]:
    files = [out / run / "episode_results.jsonl", *sorted((out / run / "parts").glob("*.jsonl"))]
    return [json.loads(line) for f in files if f.exists() for line in f.read_text().splitlines() if line.strip()]


def test_action_dim_mismatch_fails_the_run_before_its_first_episode_and_a_match_runs(tmp_path):
    exp = _experiment(tmp_path, {
        "wrong_dim": {"policy": {"type": "spec_zero", "declare": {"action_dim": 7}}},
        "right_dim": {"policy": {"type": "spec_zero", "declare": {"action_dim": 2, "action_low": [-1, -1],
                                                                  "action_high": [1, 1]}}},
    })
    out = tmp_path / "out"
    done = run_evalfleet("run", str(exp), "--output", str(out), "--workers", "1", env=_plugin_env())
    assert done.returncode == 1, done.stderr
    status = json.loads((out / "wrong_dim" / "run_status.json").read_text())
    assert status["state"] == "failed" and status["failed_because"] == "spec_mismatch"
    assert "action_dim: policy 7, environment 2" in status["reason"]
    assert "policy spec_zero (registry entry)" in status["reason"] and "environment pusht" in status["reason"]
    assert _records(out, "wrong_dim") == []  # no episode ran, not N retried error records
    assert "wrong_dim: failed: spec_mismatch" in done.stderr
    result = json.loads((out / "experiment_result.json").read_text())
    assert result["runs"]["right_dim"]["status"] == "completed"
    merged = (out / "right_dim" / "episode_results.jsonl").read_text().splitlines()
    assert [json.loads(line)["status"] for line in merged] == ["failure", "failure"]


@pytest.mark.parametrize(("environment", "declare", "expected"), [
    ({"obs_type": "state"}, {"cameras": ["top"]}, "cameras: policy needs top, environment renders none"),
    ({"obs_type": "pixels", "image_size": 96}, {"image_sizes": {"top": [64, 64]}},
     "image size of top: policy 64x64, environment 96x96"),
])
def test_camera_and_image_size_mismatches_are_refused_at_load(tmp_path, environment, declare, expected):
    exp = _experiment(tmp_path, {"r": {"environment": {"type": "pusht", **environment},
                                       "policy": {"type": "spec_zero", "declare": declare}}})
    out = tmp_path / "out"
    done = run_evalfleet("run", str(exp), "--output", str(out), env=_plugin_env())
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "runs.r.policy" in lines[0], done.stderr
    assert not out.exists()


def test_a_servers_declaration_is_checked_after_connecting(tmp_path):
    """A remote policy's spec is known only once connected: the runner checks the server's metadata."""
    from evalfleet.serving.process import ServerProcess

    declare = json.dumps({"declare": {"image_sizes": {"top": [64, 64]}, "action_dim": 2}})
    proc = ServerProcess(["evalfleet", "serve", "spec_zero", "--import", "spec_test_plugins", "--options-json",
                          declare, "--protocol", "openpi", "--port", "{port}", "--action-dim", "2"],
                         protocol="openpi", log_path=tmp_path / "server.log", env=_plugin_env())
    with proc:
        proc.wait_healthy(60)
        exp = _experiment(tmp_path, {"remote": {
            "environment": {"type": "pusht", "obs_type": "pixels", "image_size": 96},
            "policy": {"type": "openpi_remote", "host": "127.0.0.1", "port": proc.port}}})
        plan = run_evalfleet("plan", str(exp), env=_plugin_env())
        assert "at connect, the openpi server's metadata" in plan.stdout, plan.stdout
        out = tmp_path / "out"
        done = run_evalfleet("run", str(exp), "--output", str(out), "--workers", "1", env=_plugin_env())
    assert done.returncode == 1, done.stderr
    status = json.loads((out / "remote" / "run_status.json").read_text())
    assert status["failed_because"] == "spec_mismatch"
    assert f"openpi server at ws://127.0.0.1:{proc.port} (metadata)" in status["reason"]
    assert "image size of top: policy 64x64, environment 96x96" in status["reason"]
    assert _records(out, "remote") == []


def test_a_control_rate_the_environment_does_not_run_at_fails_the_run_before_its_first_episode(tmp_path):
    """#55: a served policy trained at 20 Hz against Meta-World's 80 Hz (its control rate, declared by the env):
    every action would last a quarter of the time it was trained for, a silent fault; refused after connecting."""
    from evalfleet.serving.process import ServerProcess

    declare = json.dumps({"declare": {"control_hz": 20, "action_dim": 4}})
    proc = ServerProcess(["evalfleet", "serve", "spec_zero", "--import", "spec_test_plugins", "--options-json",
                          declare, "--protocol", "openpi", "--port", "{port}", "--action-dim", "4"],
                         protocol="openpi", log_path=tmp_path / "server.log", env=_plugin_env())
    with proc:
        proc.wait_healthy(60)
        exp = tmp_path / "mw.yaml"
        exp.write_text(yaml.safe_dump({"name": "rate", "runs": {"remote": {
            "environment": {"type": "metaworld", "task": "reach-v3", "max_steps": 3},
            "policy": {"type": "openpi_remote", "host": "127.0.0.1", "port": proc.port},
            "rollout_limit": {"num_episodes": 2}}}}))
        out = tmp_path / "out"
        done = run_evalfleet("run", str(exp), "--output", str(out), "--workers", "1", env=_plugin_env())
    assert done.returncode == 1, done.stderr
    status = json.loads((out / "remote" / "run_status.json").read_text())
    assert status["failed_because"] == "spec_mismatch"
    assert "control rate: policy 20 Hz, environment 80 Hz" in status["reason"]
    assert _records(out, "remote") == []


def test_plan_shows_what_is_checked(tmp_path):
    exp = _experiment(tmp_path, {"r": {"policy": {"type": "spec_zero", "declare": {"action_dim": 2}}}})
    done = run_evalfleet("plan", str(exp), env=_plugin_env())
    assert done.returncode == 0, done.stderr
    assert "checked before the first episode" in done.stdout
    assert "policy spec_zero (registry entry): action_dim 2" in done.stdout
    assert "environment pusht" in done.stdout


def test_user_error_is_a_spec_mismatch_base():
    assert issubclass(SpecMismatchError, UserError)
