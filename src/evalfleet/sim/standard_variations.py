"""The variations several environment types offer, defined once: each benchmark's spec picks the ones its
adapter applies and says, where they differ, its own units and default range.

    VARIATIONS = variation_table(action_noise(UNIT_ACTIONS, 0.5), observation_noise("... (metres) ...", 0.02),
                                 FRICTION_SCALE, mass_scale())
"""

from __future__ import annotations

from typing import Any

from evalfleet.sim.base import VariationInfo

XYZ = ("x", "y", "z")
RGB = ("r", "g", "b")

# How the action noise is described where actions are in [-1, 1] (robosuite, LIBERO, Meta-World).
UNIT_ACTIONS = "std of zero-mean Gaussian noise added to every action (actions are in [-1, 1])"


def uniform(low: Any, high: Any) -> dict[str, Any]:
    """A default sampler: uniform between `low` and `high` (numbers, or lists for a vector)."""
    return {"distribution": "uniform", "low": low, "high": high}


def variation_table(*variations: VariationInfo) -> dict[str, VariationInfo]:
    """An environment type's variations by name, in the order given (the order `evalfleet variations` lists)."""
    return {v.name: v for v in variations}


def vector(name: str, description: str, low: list[float], high: list[float], *,
           components: tuple[str, ...] = XYZ, nominal: Any = "zeros") -> VariationInfo:
    """A vector variation sampled uniformly per component; nominal: all zeros unless given (None: no nominal)."""
    return VariationInfo(name, description, uniform(low, high), kind="vector", components=components,
                         nominal=[0.0] * len(components) if nominal == "zeros" else nominal)


def action_noise(description: str, high: float) -> VariationInfo:
    """`robot.action_noise`: the std of Gaussian noise on every action, 0..`high` by default."""
    return VariationInfo("robot.action_noise", description, uniform(0.0, high))


def observation_noise(description: str, high: float) -> VariationInfo:
    """`robot.observation_noise`: the std of Gaussian noise on the state vector, 0..`high` by default."""
    return VariationInfo("robot.observation_noise", description, uniform(0.0, high))


FRICTION_SCALE = VariationInfo("scene.friction_scale", "factor applied to the sliding friction of every geom",
                               uniform(0.5, 1.5), nominal=1.0)


def mass_scale(objects: str = "every free (movable) object") -> VariationInfo:
    """`object.mass_scale`: a factor on the mass and inertia of `objects`."""
    return VariationInfo("object.mass_scale", f"factor applied to the mass and inertia of {objects}",
                         uniform(0.5, 2.0), nominal=1.0)
