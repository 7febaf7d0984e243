"""The physics variations the MuJoCo adapters share: `scene.friction_scale` and `object.mass_scale`.

`PhysicsScales` keeps a model's nominal friction, masses and inertias from when the adapter built it, and
`apply` puts them back before scaling them for an episode, so no variation leaks from one episode into the
next: the friction scale multiplies every geom's sliding friction, the mass scale the mass and inertia of
every body with a free joint (the objects a robot moves).
"""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np


def free_joints(model: Any) -> np.ndarray:
    """The ids of the model's free joints."""
    return np.flatnonzero(model.jnt_type == mujoco.mjtJoint.mjJNT_FREE)


class PhysicsScales:
    """A model's nominal friction and masses, restored and scaled per episode."""

    def __init__(self, model: Any):
        self._nominal_friction = model.geom_friction.copy()
        self._nominal_mass = model.body_mass.copy()
        self._nominal_inertia = model.body_inertia.copy()
        self.free_bodies = sorted({int(model.jnt_bodyid[j]) for j in free_joints(model)})

    def apply(self, model: Any, variations: dict[str, Any]) -> None:
        """Nominal friction and masses, then this episode's `scene.friction_scale` and `object.mass_scale`."""
        model.geom_friction[:] = self._nominal_friction
        model.body_mass[:] = self._nominal_mass
        model.body_inertia[:] = self._nominal_inertia
        friction = variations.get("scene.friction_scale")
        if friction is not None:
            model.geom_friction[:, 0] = self._nominal_friction[:, 0] * float(friction)
        mass = variations.get("object.mass_scale")
        if mass is not None:
            for b in self.free_bodies:
                model.body_mass[b] = self._nominal_mass[b] * float(mass)
                model.body_inertia[b] = self._nominal_inertia[b] * float(mass)
