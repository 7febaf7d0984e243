"""`PhysicsWatch` and `ObjectWatch` on a small MuJoCo scene of their own: the free bodies picked by a live slice
where they are evenly spaced and by an index array where not, judged alike; the physics counters compared by
their bytes (raised on a rise, not on a clear)."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from evalfleet.sim.mujoco_watch import ObjectWatch, PhysicsWatch, _as_slice
from evalfleet.sim.protocol import PhysicsError
from evalfleet.sim.task_codes import OBJECT_DROPPED, OBJECT_OFF_TABLE


def _scene(fixed_between: bool):
    """Three free boxes resting on a floor; with `fixed_between`, fixed bodies sit between them in the body
    order, so that the free ones are not evenly spaced."""
    fixed = "<body pos='5 5 0.05'><geom type='box' size='.05 .05 .05'/></body>"
    bodies = []
    for i, x in enumerate((0.0, 0.5, 1.0)):
        bodies.append(f"<body pos='{x} 0 0.05'><freejoint/><geom type='box' size='.05 .05 .05'/></body>")
        if fixed_between:
            bodies.extend([fixed] * (i + 1))  # 1 then 2 fixed bodies: gaps of 2 and 3
    xml = f"<mujoco><worldbody><geom type='plane' size='5 5 .1'/>{''.join(bodies)}</worldbody></mujoco>"
    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    return model, data


def _move(model, data, body: int, dz: float) -> None:
    joint = int(np.flatnonzero(model.jnt_bodyid == body)[0])
    data.qpos[model.jnt_qposadr[joint] + 2] += dz
    data.qvel[:] = 0
    mujoco.mj_forward(model, data)


def test_as_slice_picks_the_same_items():
    z = np.arange(20.0)
    for indices in ([], [3], [2, 3, 4], [1, 4, 7], [0, 2, 7], [5, 9]):
        pick = _as_slice(indices)
        assert z[pick].tolist() == z[np.array(indices, dtype=int)].tolist()
    assert isinstance(_as_slice([1, 4, 7]), slice) and isinstance(_as_slice([0, 2, 7]), np.ndarray)


@pytest.mark.parametrize("fixed_between", [False, True])
def test_object_watch_codes_with_the_bodies_spaced_or_not(fixed_between):
    model, data = _scene(fixed_between)
    watch = ObjectWatch(model)
    assert isinstance(watch._pick, np.ndarray if fixed_between else slice)
    first, second, _third = (int(b) for b in watch.bodies)
    # a box lifted 8 cm, then put back: dropped
    watch.reset(data)
    _move(model, data, second, 0.08)
    watch.update(data)
    assert watch.code() is None  # still up at the end: not dropped
    _move(model, data, second, -0.08)
    watch.update(data)
    assert watch.code() == OBJECT_DROPPED.code
    # the next episode starts clean; a box that ends 20 cm below its start left the table
    watch.reset(data)
    watch.update(data)
    assert watch.code() is None
    _move(model, data, first, -0.2)
    watch.update(data)
    assert watch.code() == OBJECT_OFF_TABLE.code


def test_physics_watch_raises_on_a_counter_rise_or_a_non_finite_state_not_on_a_clear():
    model, data = _scene(False)
    watch = PhysicsWatch()
    watch.check(1)  # before any reset: nothing seen, nothing raised
    watch.reset(data)
    mujoco.mj_step(model, data)
    watch.check(1)
    bad = int(mujoco.mjtWarning.mjWARN_BADQACC)
    data.warning[bad].number += 1
    with pytest.raises(PhysicsError, match=r"unstable at step 2: non-finite or huge qacc"):
        watch.check(2)
    watch.check(3)  # the rise was reported once
    data.warning[bad].number = 0  # cleared, as dm_control does before every step
    watch.check(4)
    data.qvel[0] = np.nan
    with pytest.raises(PhysicsError, match="unstable at step 5: non-finite or huge qpos/qvel"):
        watch.check(5)
