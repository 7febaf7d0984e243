"""The task failure codes the object-manipulation adapters share, and the thresholds that tell them apart.

Simulator-free (the spec modules declare their protocols with them). The thresholds are part of each protocol's
`parameters`: a changed threshold is a changed measurement, so it changes the protocol's identity.
"""

from __future__ import annotations

from typing import Any

from evalfleet.sim.protocol import FailureCode

LIFT_M = 0.05  # an object counts as lifted once it is this far above where the episode started it
REST_M = 0.02  # ... and as back down when it ends at most this far above its start
FALL_M = 0.10  # an object that ends this far below its start has left the table
REACH_M = 0.10  # the end effector came near an object: this close to the object's origin

OBJECT_OFF_TABLE = FailureCode("object_off_table", f"an object ended at least {FALL_M:g} m below where it started: "
                               "it left the table (pushed or thrown off the workspace)")
OBJECT_DROPPED = FailureCode("object_dropped", f"an object was lifted at least {LIFT_M:g} m, then ended back down "
                             f"(within {REST_M:g} m of its starting height): grasped, then lost")
NEVER_REACHED = FailureCode("never_reached", "the end effector never came near the object (the first milestone "
                            "was never met)")

# Most specific first: the code an episode gets is the first of these that holds.
OBJECT_CODES = (OBJECT_OFF_TABLE, OBJECT_DROPPED)


def object_parameters(**more: Any) -> dict[str, Any]:
    """The thresholds `ObjectWatch` judges by, with the adapter's own parameters."""
    return {"lift_m": LIFT_M, "rest_m": REST_M, "fall_m": FALL_M, **more}
