"""`bounded_iteration`: mujoco's struct lists iterate by `len()` instead of indexing until the bindings raise
IndexError (a C++ exception, ~80 µs to unwind). The same items in the same order as the sequence protocol gives,
and a Meta-World task whose reward loops over `data.contact` (pick-place-v3) steps bit-identically with and without
it (stock in a process of its own: the change is process-wide)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import mujoco
import numpy as np

from evalfleet.sim.mujoco_lists import _bounded_iter, bounded_iteration

# Expert episodes of pick-place-v3 (its reward calls `touching_object`, which loops over data.contact twice a
# step), hashed: observations, rewards and info, step by step.
EPISODES = textwrap.dedent("""
    import hashlib, sys, warnings
    warnings.filterwarnings("ignore")
    import metaworld.policies as mw_policies
    from evalfleet.policies.builtin import expert_class_name
    from evalfleet.sim.metaworld_env import make_task_env
    if sys.argv[1] == "bounded":
        from evalfleet.sim.mujoco_lists import bounded_iteration
        bounded_iteration()
    import mujoco._structs
    print("__iter__" in mujoco._structs._MjContactList.__dict__)
    env = make_task_env("pick-place-v3")
    expert = getattr(mw_policies, expert_class_name("pick-place-v3"))()
    digest, steps, touching = hashlib.sha256(), 0, 0
    for seed in (3, 4):
        env.seed(seed)
        obs, _ = env.reset()
        for _ in range(500):
            obs, reward, _, _, info = env.step(expert.get_action(obs))
            digest.update(obs.tobytes() + repr((float(reward), sorted(info.items()))).encode())
            steps += 1
            touching += bool(env.touching_main_object)
            if info["success"]:
                break
    print(digest.hexdigest(), steps, touching)
""")


def _contact_scene():
    """Two boxes resting on a floor, one on the other: several contacts once settled."""
    xml = """<mujoco><worldbody><geom type='plane' size='2 2 .1'/>
      <body pos='0 0 .05'><freejoint/><geom type='box' size='.05 .05 .05'/></body>
      <body pos='0 0 .16'><freejoint/><geom type='box' size='.05 .05 .05'/></body>
    </worldbody></mujoco>"""
    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    for _ in range(50):
        mujoco.mj_step(model, data)
    return model, data


def _by_index(items) -> list:
    """What Python's sequence protocol yields: items by index until IndexError."""
    out, i = [], 0
    while True:
        try:
            out.append(items[i])
        except IndexError:
            return out
        i += 1


def test_every_struct_list_iterates_the_items_the_sequence_protocol_gives():
    names = bounded_iteration()
    assert "_MjContactList" in names
    assert bounded_iteration() == names  # idempotent
    _, data = _contact_scene()
    assert data.ncon >= 4
    for lst in (data.contact, data.contact[1:3], data.warning, data.solver, data.timer):
        kind = type(lst)
        assert kind.__name__ in names and kind.__dict__["__iter__"] is _bounded_iter
        expected = _by_index(lst)
        assert len(expected) == len(lst)
        got = list(lst)
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            assert str(a) == str(b)  # every field of the struct, as its repr prints it
    assert [(c.geom1, c.geom2, c.efc_address) for c in data.contact] == [
        (int(g[0]), int(g[1]), int(e)) for g, e in zip(data.contact.geom, data.contact.efc_address)]
    assert [c.dist for c in data.contact] == list(np.asarray(data.contact.dist))


def test_metaworld_steps_bit_identically_with_and_without_it(tmp_path):
    def run(mode: str) -> tuple[str, list[str]]:
        done = subprocess.run([sys.executable, "-c", EPISODES, mode], capture_output=True, text=True, timeout=300,
                              cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        installed, result = done.stdout.split("\n")[:2]
        return installed, result.split()

    stock_installed, stock = run("stock")
    bounded_installed, bounded = run("bounded")
    assert (stock_installed, bounded_installed) == ("False", "True")
    assert int(stock[2]) > 0  # the gripper touched the object on some steps: the loop's result mattered
    assert bounded == stock  # the digest of every observation, reward and info, in order; and the step count


def test_the_metaworld_adapter_installs_it():
    from evalfleet.sim.metaworld_env import MetaworldEnvironment
    from evalfleet.sim.metaworld_spec import MetaworldOptions

    kind = type(mujoco.MjData(mujoco.MjModel.from_xml_string("<mujoco/>")).contact)
    if "__iter__" in kind.__dict__:
        del kind.__iter__  # as in a fresh process, whatever ran here before
    env = MetaworldEnvironment(MetaworldOptions(task="reach-v3"))
    try:
        assert type(env.data.contact).__dict__.get("__iter__") is _bounded_iter
    finally:
        env.close()
