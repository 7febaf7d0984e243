"""Every built-in adapter declares its task's protocol at registration (simulator-free): its success criterion,
milestones and failure codes, and a SHA-256 identity that is the same in every process, changes with what
changes the measurement (the step limit, the task) and not with what does not (image size, cameras)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from evalfleet_testkit import run_evalfleet

from evalfleet.plugins import load_registries
from evalfleet.sim.base import task_protocol
from evalfleet.sim.metaworld_spec import PROGRESS_CRITERIA

load_registries()

OPTIONS = {
    "metaworld": {"task": "reach-v3"},
    "robosuite": {"task": "Lift"},
    "aloha": {"task": "transfer_cube"},
    "pusht": {},
    "gymnasium": {"id": "CartPole-v1", "success": {"reward_at_least": 2.0}},
}
SIMULATORS = ("mujoco", "metaworld", "robosuite", "gymnasium", "gym_pusht", "gym_aloha", "dm_control", "pymunk")

_IDENTITIES = """
import json, sys
from evalfleet.plugins import load_registries
from evalfleet.sim.base import task_protocol
load_registries()
out = {t: task_protocol(t, o).identity for t, o in json.loads(sys.argv[1]).items()}
print(json.dumps({"identities": out, "simulators": sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)}))
"""


def test_every_adapter_declares_its_protocol_and_the_identity_is_the_same_in_another_process():
    here = {t: task_protocol(t, o) for t, o in OPTIONS.items()}
    for env_type, protocol in here.items():
        assert protocol.task.startswith(f"{env_type}:") and "*" not in protocol.task and protocol.success
        assert protocol.failures and len(protocol.identity) == 64
        assert protocol.parameters["max_steps"] is None or protocol.parameters["max_steps"] > 0
    assert here["metaworld"].milestones == PROGRESS_CRITERIA  # the records' progress criteria, in their order
    proc = subprocess.run([sys.executable, "-c", _IDENTITIES, json.dumps(OPTIONS), json.dumps(SIMULATORS)],
                          capture_output=True, text=True, timeout=120, env={"PYTHONHASHSEED": "123",
                                                                            **_path_env()})
    assert proc.returncode == 0, proc.stderr[-2000:]
    there = json.loads(proc.stdout)
    assert there["identities"] == {t: p.identity for t, p in here.items()}
    assert there["simulators"] == []  # declared at registration: no simulator imported to know them


def _path_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}


def test_the_reach_protocol_identity_is_this_literal():
    # Records on disk carry this hash, and results are merged only under one identity: if it changes while the
    # protocol's meaning did not (a refactor of the canonical form), every stored result would look like a
    # different measurement. A deliberate change of Meta-World's protocol changes it: update this literal then.
    protocol = task_protocol("metaworld", {"task": "reach-v3"})
    assert protocol.parameters == {"task": "reach-v3", "max_steps": 500, "lift_m": 0.05, "rest_m": 0.02,
                                   "fall_m": 0.1}
    assert protocol.identity == REACH_IDENTITY


REACH_IDENTITY = "4bca70042b958e3f78cd4504db6e5947d4134cac1d0abe77f7d87a0b4db1ed1a"


def test_the_identity_changes_with_the_step_limit_and_task_not_with_image_size_or_cameras():
    base = task_protocol("metaworld", {"task": "reach-v3"}).identity
    assert task_protocol("metaworld", {"task": "reach-v3", "max_steps": 200}).identity != base
    assert task_protocol("metaworld", {"task": "push-v3"}).identity != base
    for same in ({"image_size": 64}, {"cameras": ["corner"], "image_size": [96, 128]}, {"render_quality": "default"},
                 {"instruction": "reach it"}):
        assert task_protocol("metaworld", {"task": "reach-v3", **same}).identity == base, same
    lift = task_protocol("robosuite", {"task": "Lift"}).identity
    assert task_protocol("robosuite", {"task": "Lift", "cameras": ["agentview"], "image_size": 64}).identity == lift
    assert task_protocol("robosuite", {"task": "Lift", "max_steps": 100}).identity != lift
    pusht = task_protocol("pusht", {}).identity
    assert task_protocol("pusht", {"obs_type": "pixels", "image_size": 64, "render": True}).identity == pusht
    assert task_protocol("pusht", {"max_steps": 100}).identity != pusht
    aloha = task_protocol("aloha", {"task": "insertion"}).identity
    assert task_protocol("aloha", {"task": "insertion", "image_size": [48, 64], "cameras": ["top"]}).identity == aloha
    assert task_protocol("aloha", {"task": "insertion", "max_steps": 100}).identity != aloha
    gym = {"id": "CartPole-v1", "success": {"reward_at_least": 2.0}}
    assert task_protocol("gymnasium", {**gym, "render": True}).identity == task_protocol("gymnasium", gym).identity
    assert (task_protocol("gymnasium", {**gym, "success": {"reward_at_least": 1.0}}).identity
            != task_protocol("gymnasium", gym).identity)


@pytest.mark.skipif(importlib.util.find_spec("libero") is None, reason="LIBERO is not installed")
def test_a_libero_task_by_index_or_by_name_is_one_protocol():
    from evalfleet.sim.libero_tasks import task_names

    name = task_names("libero_goal")[2]
    by_index = task_protocol("libero", {"suite": "libero_goal", "task": 2})
    assert by_index.task == f"libero:libero_goal/{name}" and by_index.parameters["max_steps"] == 300
    assert task_protocol("libero", {"suite": "libero_goal", "task": name}).identity == by_index.identity
    assert task_protocol("libero", {"suite": "libero_goal", "task": 2, "camera_size": 64}).identity == by_index.identity
    assert task_protocol("libero", {"suite": "libero_goal", "task": 2, "max_steps": 50}).identity != by_index.identity


def test_plan_shows_each_runs_protocol(write_experiment):
    runs = {"reach": {"environment": {"type": "metaworld", "task": "reach-v3", "max_steps": 50},
                      "policy": {"type": "zero"}, "rollout_limit": {"num_episodes": 2}},
            "push_t": {"environment": {"type": "pusht"}, "policy": {"type": "zero"},
                       "rollout_limit": {"num_episodes": 2}}}
    done = run_evalfleet("plan", str(write_experiment(runs)))
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())  # the lines wrap at the terminal's width
    reach = task_protocol("metaworld", {"task": "reach-v3", "max_steps": 50})
    assert f"reach: metaworld:reach-v3 protocol {reach.identity[:12]}; milestones near_object → halfway → success;" \
           " failure codes object_off_table, object_dropped, never_reached + common" in text
    assert (f"push_t: pusht:PushT-v0 protocol {task_protocol('pusht', {}).identity[:12]}; failure codes "
            "block_untouched, low_coverage + common") in text
