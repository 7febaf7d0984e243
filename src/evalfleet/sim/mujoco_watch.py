"""What the MuJoCo adapters watch after every step: a state gone non-finite (`PhysicsWatch`, raising
`PhysicsError`) and what the free objects did during the episode (`ObjectWatch`, for their failure codes).

MuJoCo resets the data by itself when qpos, qvel or qacc turn non-finite (or huge) inside `mj_step` and counts
the event in `data.warning[mjWARN_BADQPOS|BADQVEL|BADQACC]`, so a simulator that went unstable mid-episode
would otherwise go on quietly from its initial state (Meta-World even reports the last stable observation):
the counters are compared with their values at the episode's start, and qpos/qvel are checked finite for
adapters that disable the auto-reset.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import mujoco
import numpy as np

from evalfleet.sim.mujoco_scene import free_joints
from evalfleet.sim.protocol import PhysicsError
from evalfleet.sim.task_codes import FALL_M, LIFT_M, OBJECT_DROPPED, OBJECT_OFF_TABLE, REACH_M, REST_M

_BAD = (int(mujoco.mjtWarning.mjWARN_BADQPOS), int(mujoco.mjtWarning.mjWARN_BADQVEL),
        int(mujoco.mjtWarning.mjWARN_BADQACC))


def _as_slice(indices: "list[int] | np.ndarray") -> "slice | np.ndarray":
    """`indices` (sorted, distinct) as the slice that picks the same items where they are evenly spaced (indexing
    with it gives a live view, read without a copy), else as an index array."""
    indices = [int(i) for i in indices]
    if not indices:
        return slice(0, 0)
    stride = indices[1] - indices[0] if len(indices) > 1 else 1
    if stride > 0 and indices == list(range(indices[0], indices[-1] + 1, stride)):
        return slice(indices[0], indices[-1] + 1, stride)
    return np.array(indices, dtype=int)


class PhysicsWatch:
    """`reset(data)` at the episode's start; `check(step)` after each step raises PhysicsError when MuJoCo saw a
    bad state since, or qpos/qvel are non-finite now. The counters and arrays are live views of `data`, taken once
    per episode, and a step compares all of MuJoCo's warning counters' bytes with those it last saw (~0.6 % of a
    Meta-World step); only when they differ does it look at the three bad-state ones."""

    __slots__ = ("_counts", "_qpos", "_qvel", "_seen", "_seen_bytes")

    def __init__(self) -> None:
        self._counts = np.zeros(int(mujoco.mjtWarning.mjNWARNING), dtype=np.int32)  # before the first reset
        self._qpos = self._qvel = np.zeros(0)
        self._seen = 0
        self._seen_bytes = self._counts.tobytes()

    def reset(self, data: Any) -> None:
        self._counts = data.warning.number  # every warning's counter, a live view
        self._qpos, self._qvel = data.qpos, data.qvel
        self._remember()

    def _bad(self) -> list[int]:
        numbers = self._counts.tolist()
        return [numbers[i] for i in _BAD]

    def _remember(self) -> None:
        self._seen_bytes = self._counts.tobytes()
        self._seen = sum(self._bad())

    def check(self, step: int) -> None:
        # Python's sum of the values as a list: cheaper between MuJoCo's steps than a numpy or MuJoCo call.
        finite = math.isfinite(sum(self._qpos.tolist()) + sum(self._qvel.tolist()))
        if finite and self._counts.tobytes() == self._seen_bytes:
            return  # the usual step: nothing counted since
        bad = self._bad()
        if finite and sum(bad) <= self._seen:
            self._remember()  # another warning, or lower: the env cleared the counters (dm_control does every step)
            return
        self._remember()
        which = [name for number, name in zip(bad, ("qpos", "qvel", "qacc")) if number]
        raise PhysicsError(f"the simulation became unstable at step {step}: non-finite or huge "
                           f"{', '.join(which or ['qpos/qvel'])} (MuJoCo reset its state); the episode cannot go on")


class ObjectWatch:
    """The free objects' heights through an episode (and, given `effector`, how near the end effector came to
    one): `reset` at the start, `update` after each step, `code()` right after the last step (it judges the
    heights of the state it finds as the episode's last)."""

    def __init__(self, model: Any, effector: Callable[[Any], np.ndarray] | None = None):
        self.bodies = np.array(sorted({int(model.jnt_bodyid[j]) for j in free_joints(model)}), dtype=int)
        self._pick = _as_slice(self.bodies)  # a slice where it can: each step reads a view of xpos, not a copy
        self._effector = effector
        self._start = np.zeros(len(self.bodies))
        self._highest: list[float] = self._start.tolist()
        self.reached = False
        self._xpos = np.zeros((0, 3))
        self._z = self._xpos[:, 2]

    def _heights(self) -> np.ndarray:
        return np.array(self._z[self._pick])  # a copy (a slice alone would be a live view)

    def reset(self, data: Any) -> None:
        self._xpos = data.xpos  # live views, taken once per episode
        self._z = self._xpos[:, 2]
        self._start = self._heights()
        self._highest = self._start.tolist()
        self.reached = False
        self._near(data)

    def _near(self, data: Any) -> None:
        if self._effector is not None and not self.reached and len(self.bodies):
            distance = np.linalg.norm(self._xpos[self.bodies] - self._effector(data), axis=1)
            self.reached = bool(distance.min() <= REACH_M)

    def update(self, data: Any) -> None:
        # A handful of floats: Python's max of a list is several times cheaper than a numpy call between two
        # simulator steps, which leave numpy's code out of the caches (a NaN height never gets here: PhysicsWatch
        # raises first).
        now = self._z[self._pick].tolist()
        self._highest = [high if high >= z else z for high, z in zip(self._highest, now)]
        if self._effector is not None:
            self._near(data)

    def code(self) -> str | None:
        """object_off_table, else object_dropped, else None."""
        rise = self._heights() - self._start
        if np.any(rise <= -FALL_M):
            return OBJECT_OFF_TABLE.code
        if np.any((np.array(self._highest) - self._start >= LIFT_M) & (rise <= REST_M)):
            return OBJECT_DROPPED.code
        return None
