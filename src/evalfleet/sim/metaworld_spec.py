"""Registration of the Meta-World environment type: its options and variations. Light on purpose:
loading an Experiment never imports MuJoCo; the adapter (sim/metaworld_env.py), named by its entry point,
loads on first use."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from evalfleet.sim.base import EnvironmentInfo, VariationInfo
from evalfleet.sim.protocol import TaskProtocol
from evalfleet.sim.registration import register_environment
from evalfleet.sim.spec_checks import (CameraOptions, ImageSize, Int, RenderQuality, check_name, check_names,
                                       max_steps_field)
from evalfleet.sim.standard_variations import (FRICTION_SCALE, RGB, UNIT_ACTIONS, action_noise, mass_scale,
                                              observation_noise, uniform, variation_table, vector)
from evalfleet.sim.task_codes import NEVER_REACHED, OBJECT_CODES, object_parameters

# Meta-World 3.1.1's v3 tasks with the instruction a language-conditioned policy receives.
TASK_INSTRUCTIONS: dict[str, str] = {
    "assembly-v3": "put the ring on the peg",
    "basketball-v3": "dunk the basketball into the hoop",
    "bin-picking-v3": "move the cube from one bin to the other",
    "box-close-v3": "put the lid on the box",
    "button-press-topdown-v3": "press the button from the top",
    "button-press-topdown-wall-v3": "press the button behind the wall from the top",
    "button-press-v3": "press the button",
    "button-press-wall-v3": "press the button behind the wall",
    "coffee-button-v3": "press the coffee machine's button",
    "coffee-pull-v3": "pull the mug from the coffee machine",
    "coffee-push-v3": "push the mug under the coffee machine",
    "dial-turn-v3": "turn the dial",
    "disassemble-v3": "take the ring off the peg",
    "door-close-v3": "close the door",
    "door-lock-v3": "lock the door by turning the lock",
    "door-open-v3": "open the door",
    "door-unlock-v3": "unlock the door by turning the lock",
    "hand-insert-v3": "insert the hand into the hole",
    "drawer-close-v3": "close the drawer",
    "drawer-open-v3": "open the drawer",
    "faucet-open-v3": "turn the faucet on",
    "faucet-close-v3": "turn the faucet off",
    "hammer-v3": "hammer the nail into the wall",
    "handle-press-side-v3": "press the handle down from the side",
    "handle-press-v3": "press the handle down",
    "handle-pull-side-v3": "pull the handle up from the side",
    "handle-pull-v3": "pull the handle up",
    "lever-pull-v3": "pull the lever up",
    "pick-place-wall-v3": "pick up the puck and place it at the goal behind the wall",
    "pick-out-of-hole-v3": "pick the peg out of the hole",
    "pick-place-v3": "pick up the puck and place it at the goal",
    "plate-slide-v3": "slide the plate into the cabinet",
    "plate-slide-side-v3": "slide the plate into the cabinet from the side",
    "plate-slide-back-v3": "slide the plate out of the cabinet",
    "plate-slide-back-side-v3": "slide the plate out of the cabinet sideways",
    "peg-insert-side-v3": "insert the peg into the hole from the side",
    "peg-unplug-side-v3": "unplug the peg from the side",
    "soccer-v3": "kick the ball into the goal",
    "stick-push-v3": "grasp the stick and push the box with it",
    "stick-pull-v3": "grasp the stick and pull the box with it",
    "push-v3": "push the puck to the goal",
    "push-wall-v3": "push the puck to the goal behind the wall",
    "push-back-v3": "push the puck back to the goal",
    "reach-v3": "reach the goal position",
    "reach-wall-v3": "reach the goal position behind the wall",
    "shelf-place-v3": "pick up the puck and place it on the shelf",
    "sweep-into-v3": "sweep the puck into the hole",
    "sweep-v3": "sweep the puck off the table",
    "window-open-v3": "slide the window open",
    "window-close-v3": "slide the window closed",
}
MAX_STEPS = 500
# Every Meta-World v3 task model has these cameras (`gripperPOV` and `behindGripper` ride on the hand).
CAMERAS = ("topview", "corner", "corner2", "corner3", "corner4", "behindGripper", "gripperPOV")


class MetaworldOptions(CameraOptions):
    task: str
    max_steps: Int = max_steps_field(MAX_STEPS)
    instruction: str | None = None  # replaces the task's built-in instruction
    # Rendering (nothing is rendered unless `cameras` lists some): every listed camera is rendered into
    # each observation as `observation/images/<camera>`; `image_camera` is also `observation/image` and
    # `wrist_camera` `observation/wrist_image` (openpi keys); `depth`/`segmentation` add
    # `observation/depth` (float32 H×W metres) / `observation/segmentation` (int32 H×W×2: object id,
    # mjtObj type) of `image_camera`. The camera.* variations move `varied_camera` (default: image_camera).
    cameras: list[str] = Field(default_factory=list)
    image_camera: str = "corner"
    wrist_camera: str = "gripperPOV"
    varied_camera: str | None = None
    image_size: ImageSize = Field(default=224, description="pixels, or [height, width]")
    render_quality: RenderQuality = "fast"
    depth: bool = False
    segmentation: bool = False

    @field_validator("cameras")
    @classmethod
    def known_cameras(cls, v: list[str]) -> list[str]:
        return check_names(v, CAMERAS, "Meta-World camera")

    @field_validator("image_camera", "wrist_camera", "varied_camera")
    @classmethod
    def known_camera(cls, v: str | None) -> str | None:
        return v if v is None else check_names([v], CAMERAS, "Meta-World camera")[0]

    @model_validator(mode="after")
    def depth_needs_camera(self) -> "MetaworldOptions":
        for flag in ("depth", "segmentation"):
            if getattr(self, flag) and self.image_camera not in self.cameras:
                raise ValueError(f"{flag}: true renders image_camera {self.image_camera!r}; add it to `cameras`")
        return self

    @field_validator("task")
    @classmethod
    def known_task(cls, v: str) -> str:
        return check_name(v, TASK_INSTRUCTIONS, "Meta-World task", "see the 50 Meta-World v3 task names")


VARIATIONS = variation_table(
    action_noise(UNIT_ACTIONS, 0.5),
    observation_noise("std of zero-mean Gaussian noise (metres) added to the state observation the policy sees",
                      0.02),
    FRICTION_SCALE,
    mass_scale(),
    vector("object.position_noise",
           "offset (metres) added to every free object's initial position after the seeded reset",
           [-0.03, -0.03, 0.0], [0.03, 0.03, 0.0]),
    vector("camera.position_offset",
           "offset (metres, world frame) added to the position of the environment's `varied_camera` "
           "(default: its image_camera)",
           [-0.03, -0.03, -0.03], [0.03, 0.03, 0.03]),
    vector("camera.rotation_offset",
           "rotation (degrees) of the varied camera about its own axes: roll about the optical axis, "
           "pitch about its horizontal axis (tilt), yaw about its vertical axis (pan)",
           [-3.0, -3.0, -3.0], [3.0, 3.0, 3.0], components=("roll", "pitch", "yaw")),
    VariationInfo("camera.fov",
                  "degrees ADDED to the varied camera's nominal vertical field of view (an offset, not absolute)",
                  uniform(-5.0, 5.0)),
    VariationInfo("light.intensity", "factor applied to the diffuse and specular strength of every light",
                  uniform(0.5, 1.5), nominal=1.0),
    vector("light.direction", "offset added to every light's direction vector (then renormalised)",
           [-0.3, -0.3, 0.0], [0.3, 0.3, 0.0]),
    vector("light.color", "per-channel factor applied to every light's diffuse colour",
           [0.6, 0.6, 0.6], [1.0, 1.0, 1.0], components=RGB, nominal=[1.0, 1.0, 1.0]),
    vector("object.color",
           "RGB colour (0-1) given to the task objects' geoms (every free body), replacing their material",
           [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], components=RGB, nominal=None),
    vector("table.color", "RGB colour (0-1) given to the table's geoms, replacing their wood material",
           [0.2, 0.2, 0.2], [0.9, 0.9, 0.9], components=RGB, nominal=None),
)



# Progress criteria from Meta-World v3's step `info` (every task's evaluate_state returns `near_object`,
# `obj_to_target` and `success`), in the order an episode meets them: a funnel. `halfway`: the object is at most
# half as far from its target as at the first step (task-agnostic, unlike `grasp_success`, which a push task never
# reports). Each criterion counts from the first step it held, with an event at that step.
PROGRESS_CRITERIA = ("near_object", "halfway", "success")


def task_protocol(opts: MetaworldOptions) -> TaskProtocol:
    """A Meta-World task's protocol: its progress criteria are the milestones; `never_reached` is the first one
    never met."""
    return TaskProtocol(
        task=f"metaworld:{opts.task}",
        success="Meta-World's own info['success'] (the task's evaluate_state) at any step; it ends the episode",
        milestones=PROGRESS_CRITERIA, failures=(*OBJECT_CODES, NEVER_REACHED),
        parameters=object_parameters(task=opts.task, max_steps=opts.max_steps))


_make_metaworld = register_environment(
    "metaworld", "evalfleet.sim.metaworld_env:MetaworldEnvironment", options=MetaworldOptions,
    summary="Meta-World v3 (MuJoCo, CPU): 50 Sawyer manipulation tasks with scripted experts",
    info=EnvironmentInfo(variations=VARIATIONS, protocol=task_protocol, cameras=CAMERAS, steps_past_success=True,
                         preload=("evalfleet.sim.metaworld_env", "metaworld.env_dict", "metaworld.policies")),
)


class MetaworldProgress:
    """One episode's progress in Arena's shape: overall_score (fraction of criteria met so far), all_complete,
    criteria_by_name ({name: {complete, step}}) and events ([{criterion, step}] when each first held).
    `update` changes `self.progress` in place and returns it; a new episode gets a new tracker."""

    __slots__ = ("progress", "_left", "_start_distance")

    def __init__(self) -> None:
        self.progress: dict[str, Any] = {
            "overall_score": 0.0, "all_complete": False,
            "criteria_by_name": {name: {"complete": False, "step": None} for name in PROGRESS_CRITERIA},
            "events": []}
        self._left = list(PROGRESS_CRITERIA)
        self._start_distance: float | None = None

    def _holds(self, name: str, info: dict[str, Any]) -> bool:
        if name == "halfway":
            distance = info.get("obj_to_target")
            if distance is None:
                return False
            return self._start_distance is not None and float(distance) <= 0.5 * self._start_distance
        return float(info.get(name, 0.0) or 0.0) > 0.0

    def update(self, info: dict[str, Any], step: int) -> dict[str, Any]:
        if self._start_distance is None and info.get("obj_to_target") is not None:
            self._start_distance = float(info["obj_to_target"])
        if self._left:
            met = [name for name in self._left if self._holds(name, info)]
            if met:
                progress = self.progress
                for name in met:
                    self._left.remove(name)
                    progress["criteria_by_name"][name] = {"complete": True, "step": step}
                    progress["events"].append({"criterion": name, "step": step})
                progress["overall_score"] = 1 - len(self._left) / len(PROGRESS_CRITERIA)
                progress["all_complete"] = not self._left
        return self.progress
