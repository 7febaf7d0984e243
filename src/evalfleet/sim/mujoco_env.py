"""What the MuJoCo adapters (robosuite, LIBERO, ALOHA, Meta-World) share: camera frames of the current
state from evalfleet's offscreen renderer, the cameras of an observation, and closing.

An adapter sets `self.env` (the benchmark's own env, closed with it) and `self._renderers` (a
`rendering.RendererCache` of its model) and provides `data` (the MjData it steps); `mujoco_camera`
maps an evalfleet camera name to MuJoCo's where they differ.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from evalfleet.sim.base import EnvironmentBase
from evalfleet.sim.rendering import RendererCache


class MujocoEnvironment(EnvironmentBase):
    env: Any  # the benchmark's own env
    data: Any  # the MjData it steps (each adapter's property)
    _renderers: RendererCache

    def mujoco_camera(self, camera: str) -> str:
        return camera

    def render(self, camera: str, height: int | None = None, width: int | None = None) -> np.ndarray:
        """A named camera of the current state, uint8 H×W×3 the right way up (evalfleet's renderer)."""
        return self._renderers.rgb(self.data, self.mujoco_camera(camera), height, width)

    def render_video(self, camera: str, height: int | None = None, width: int | None = None,
                     mesh_tolerance_px: float = 0.0) -> np.ndarray:
        """A video frame of a named camera: uint8 H×W×3, meshes simplified to `mesh_tolerance_px` pixels
        (sim/mesh_detail.py; 0: whole)."""
        return self._renderers.rgb(self.data, self.mujoco_camera(camera), height, width, mesh_tolerance_px)

    def camera_images(self, out: dict[str, Any], is_wrist: Callable[[str], bool]) -> dict[str, Any]:
        """`out` with every camera the Run lists rendered into `observation/images/<camera>`; the first
        also `observation/image`, the first one `is_wrist` names also `observation/wrist_image`."""
        wrist_done = False
        for i, camera in enumerate(self.cameras or ()):
            image = self.render(camera)
            out[f"observation/images/{camera}"] = image
            if i == 0:
                out["observation/image"] = image
            if not wrist_done and is_wrist(camera):
                out["observation/wrist_image"] = image
                wrist_done = True
        return out

    def close(self) -> None:
        self._renderers.close()
        self.env.close()
