"""Registration of the `libero` environment type: LIBERO's four 10-task suites (robosuite 1.4, MuJoCo).

    environment: {type: libero, suite: libero_spatial, task: 0, cameras: [agentview, eye_in_hand],
                  camera_size: 128}

Episode i of a Run starts from the task's fixed initial state `i mod 50` (LIBERO's evaluation
protocol), reached with the episode's seed. Light on purpose: loading an Experiment never imports
robosuite; sim/libero_env.py does, named by its entry point, on first use. Task names are checked against
LIBERO's task map when LIBERO is installed (a pure-Python read, ~0.1 s; sim/libero_tasks.py).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from evalfleet.sim.base import EnvironmentInfo
from evalfleet.sim.protocol import TaskProtocol
from evalfleet.sim.libero_tasks import CAMERAS
from evalfleet.sim.registration import register_environment
from evalfleet.sim.spec_checks import (CameraOptions, ImageSize, Int, RenderQuality, max_steps_field,
                                       not_bool)
from evalfleet.sim.standard_variations import UNIT_ACTIONS, action_noise, observation_noise, variation_table
from evalfleet.sim.task_codes import NEVER_REACHED, OBJECT_CODES, REACH_M, object_parameters

SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
# The step limits of LIBERO's reference evaluation (openpi's examples/libero/main.py), set from the
# longest training demonstration of each suite.
SUITE_MAX_STEPS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520}
ACTION_DIM = 7  # OSC_POSE: xyz and axis-angle deltas in [-1, 1], gripper (-1 open, +1 close)


class LiberoOptions(CameraOptions):
    size_field = "camera_size"
    suite: Literal[SUITES] = "libero_spatial"  # type: ignore[valid-type]
    task: Annotated[int | str, not_bool("the task's index (0..9) or its name")] = Field(
        default=0, description="the task's index in the suite (0..9) or its name")
    max_steps: Int | None = max_steps_field(None, description="default: the suite's limit")
    settle_steps: Int = Field(default=10, ge=0, le=1000,
                              description="no-op steps after the initial state so objects come to rest (not counted)")
    instruction: str | None = Field(default=None, description="default: the task's own language instruction")
    cameras: list[Literal[tuple(CAMERAS)]] = Field(default_factory=list)  # type: ignore[valid-type]
    camera_size: ImageSize = Field(default=128, description="pixels, or [height, width]")
    render_quality: RenderQuality = "fast"

    @field_validator("task")
    @classmethod
    def index_in_range(cls, v: int | str) -> int | str:
        if isinstance(v, int) and not 0 <= v < 10:
            raise ValueError("task index must be 0..9 (each suite has 10 tasks), or the task's name")
        return v

    @model_validator(mode="after")
    def task_in_suite(self) -> "LiberoOptions":
        from evalfleet.sim.libero_tasks import libero_installed, task_index

        if libero_installed():  # otherwise the runner says the extra is missing
            task_index(self.suite, self.task)
        return self

    def step_limit(self) -> int:
        return self.max_steps or SUITE_MAX_STEPS[self.suite]


VARIATIONS = variation_table(
    action_noise(UNIT_ACTIONS, 0.3),
    observation_noise("std of zero-mean Gaussian noise (metres, quaternion units, radians) added to the state vector",
                      0.01),
)



def task_protocol(opts: LiberoOptions) -> TaskProtocol:
    """A LIBERO task's protocol, the task named by its name whether the Run gave its index or its name (where
    LIBERO is installed), so both spellings are one protocol."""
    from evalfleet.sim.libero_tasks import libero_installed, task_index, task_names

    task = task_names(opts.suite)[task_index(opts.suite, opts.task)] if libero_installed() else str(opts.task)
    return TaskProtocol(
        task=f"libero:{opts.suite}/{task}",
        success="LIBERO's check_success() (the task's BDDL goal predicates), checked after every step; it ends "
                "the episode",
        failures=(*OBJECT_CODES, NEVER_REACHED),
        parameters=object_parameters(suite=opts.suite, task=task, max_steps=opts.step_limit(),
                                     settle_steps=opts.settle_steps, reach_m=REACH_M))


_make_libero = register_environment(
    "libero", "evalfleet.sim.libero_env:LiberoEnvironment", options=LiberoOptions,
    summary="LIBERO's suites (libero_spatial/object/goal/10), fixed initial states; needs evalfleet[libero]",
    info=EnvironmentInfo(variations=VARIATIONS, action_dim=ACTION_DIM, protocol=task_protocol),
)
