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


class _NoWarnings:
    number = 0  # before the first reset: no counter seen yet


class PhysicsWatch:
    """`reset(data)` at the episode's start; `check(step)` after each step raises PhysicsError when MuJoCo saw a
    bad state since, or qpos/qvel are non-finite now (~4 µs a step: the counters and arrays are live views of
    `data`, taken once per episode)."""

    __slots__ = ("_stats", "_qpos", "_qvel", "_seen")

    def __init__(self) -> None:
        self._stats: list[Any] = [_NoWarnings()] * 3
        self._qpos = self._qvel = np.zeros(0)
        self._seen = 0

    def _count(self) -> int:
        qpos, qvel, qacc = self._stats  # not sum() over a generator: this runs every step
        return qpos.number + qvel.number + qacc.number

    def reset(self, data: Any) -> None:
        self._stats = [data.warning[i] for i in _BAD]
        self._qpos, self._qvel = data.qpos, data.qvel
        self._seen = self._count()

    def check(self, step: int) -> None:
        finite = math.isfinite(mujoco.mju_sum(self._qpos) + mujoco.mju_sum(self._qvel))
        count = self._count()
        if finite and count <= self._seen:
            self._seen = count  # lower: the env cleared the counters (dm_control does before every step)
            return
        self._seen = count
        which = [name for stat, name in zip(self._stats, ("qpos", "qvel", "qacc")) if stat.number] or ["qpos/qvel"]
        raise PhysicsError(f"the simulation became unstable at step {step}: non-finite or huge {', '.join(which)} "
                           "(MuJoCo reset its state); the episode cannot go on")


class ObjectWatch:
    """The free objects' heights through an episode (and, given `effector`, how near the end effector came to
    one): `reset` at the start, `update` after each step, `code()` at the end."""

    def __init__(self, model: Any, effector: Callable[[Any], np.ndarray] | None = None):
        self.bodies = np.array(sorted({int(model.jnt_bodyid[j]) for j in free_joints(model)}), dtype=int)
        self._effector = effector
        self._start = np.zeros(len(self.bodies))
        self._highest = self._start.copy()
        self._last = self._start.copy()
        self.reached = False
        self._xpos = np.zeros((0, 3))
        self._z = self._xpos[:, 2]

    def _heights(self) -> np.ndarray:
        return self._z[self.bodies]  # a copy; indexing the 1-D view of z is ~8x cheaper than xpos[bodies, 2]

    def reset(self, data: Any) -> None:
        self._xpos = data.xpos  # live views, taken once per episode
        self._z = self._xpos[:, 2]
        self._start = self._heights()
        self._highest = self._start.copy()
        self._last = self._start.copy()
        self.reached = False
        self._near(data)

    def _near(self, data: Any) -> None:
        if self._effector is not None and not self.reached and len(self.bodies):
            distance = np.linalg.norm(self._xpos[self.bodies] - self._effector(data), axis=1)
            self.reached = bool(distance.min() <= REACH_M)

    def update(self, data: Any) -> None:
        self._last = self._heights()
        np.maximum(self._highest, self._last, out=self._highest)
        self._near(data)

    def code(self) -> str | None:
        """object_off_table, else object_dropped, else None."""
        rise = self._last - self._start
        if np.any(rise <= -FALL_M):
            return OBJECT_OFF_TABLE.code
        if np.any((self._highest - self._start >= LIFT_M) & (rise <= REST_M)):
            return OBJECT_DROPPED.code
        return None
