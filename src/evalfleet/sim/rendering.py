"""Offscreen MuJoCo rendering on CPU (or GPU where EGL finds one).

Backend: `MUJOCO_GL` when the user set it to `egl` or `osmesa`; otherwise decided at the first render
in a process by probing EGL, then OSMesa, each in a short subprocess (a broken EGL can leave PyOpenGL
unusable for another platform, so the probe never runs in-process). The choice is written to
`MUJOCO_GL`/`PYOPENGL_PLATFORM` before any GL module is imported, so worker processes started later
inherit it and skip the probe. Renderers are created lazily, inside the process that renders (never
pickled or shared across processes), and closed explicitly (also at exit, before EGL terminates).
Renderers of one size in one thread share a GL context (each keeps its own MjrContext and framebuffer in
it), and a closed renderer's context is kept for the next renderer of the same size in the process (up to
`MAX_IDLE_CONTEXTS`): on a software GL, building a model's MjrContext in a context that has hosted one
before costs about a third of doing so in a fresh one (0.10–0.12 s against 0.27–0.30 s for a Meta-World
model): a worker holding several Runs' envs, a new env instance, a worker switching Runs.

Quality `fast` (the default) turns off shadows, reflections, the skybox and multisampling; `default`
keeps the model's own visual settings. `mesh_tolerance_px` > 0 (video frames) draws RGB with meshes
simplified per camera to what that many pixels can show (sim/mesh_detail.py; depth and segmentation
always use the full meshes). Images come back the right way up: row 0 is the top, and a camera mounted
upside down (Meta-World's `corner*` cameras point their up axis at the floor) is
turned 180 degrees (`is_upside_down`), so the floor is at the bottom of every image.
Install the system libraries with `scripts/install-render-deps.sh`.
"""

from __future__ import annotations

import atexit
import importlib
import os
import subprocess
import threading
import weakref
from typing import Any, Callable, Literal

import numpy as np

from evalfleet.interpreter import python_command

Quality = Literal["fast", "default"]
BACKENDS = ("egl", "osmesa")

_PROBE = """
import mujoco
from mujoco import {backend} as gl
m = mujoco.MjModel.from_xml_string('<mujoco><worldbody><light pos="0 0 2"/><geom size=".1"/></worldbody></mujoco>')
d = mujoco.MjData(m); mujoco.mj_forward(m, d)
ctx = gl.GLContext(16, 16); ctx.make_current()
con = mujoco.MjrContext(m, mujoco.mjtFontScale.mjFONTSCALE_50)
mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, con)
scn = mujoco.MjvScene(m, 100); cam = mujoco.MjvCamera()
mujoco.mjv_updateScene(m, d, mujoco.MjvOption(), None, cam, mujoco.mjtCatBit.mjCAT_ALL, scn)
mujoco.mjr_render(mujoco.MjrRect(0, 0, 16, 16), scn, con)
con.free(); ctx.free()
print("render-ok")
"""

_backend: str | None = None
_live: "weakref.WeakSet[OffscreenRenderer]" = weakref.WeakSet()
MAX_IDLE_CONTEXTS = 4
_idle_contexts: dict[tuple[int, int], list[Any]] = {}  # (width, height) → GL contexts of closed renderers
# (thread, width, height) → [the GL context the live renderers of that size in that thread share, how many]:
# a GL context is current in one thread at a time, so renderers in different threads never share one
_shared_contexts: dict[tuple[int, int, int], list[Any]] = {}
_closing = False  # at exit: free contexts instead of keeping them
_atexit_registered = False


class RenderingUnavailable(RuntimeError):
    pass


def _probe(backend: str) -> tuple[bool, str]:
    env = dict(os.environ, MUJOCO_GL=backend, PYOPENGL_PLATFORM=backend)
    try:
        proc = subprocess.run(
            # -P: `-c` would put the working folder first on sys.path (a ./mujoco.py there would run)
            [*python_command(), "-c", _PROBE.format(backend=backend)], env=env, capture_output=True, text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    if "render-ok" in proc.stdout:
        return True, ""
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    return False, lines[-1] if lines else f"exit {proc.returncode}"


def gl_backend() -> str:
    """The GL backend this process renders with (decided once, see the module docstring)."""
    global _backend
    if _backend is not None:
        return _backend
    explicit = os.environ.get("MUJOCO_GL", "").strip().lower()
    if explicit in BACKENDS:
        _backend = explicit
    else:
        reasons = []
        for candidate in BACKENDS:
            ok, why = _probe(candidate)
            if ok:
                _backend = candidate
                break
            reasons.append(f"{candidate}: {why}")
        else:
            raise RenderingUnavailable(
                "no offscreen OpenGL backend works here (" + "; ".join(reasons) + "); "
                "run scripts/install-render-deps.sh (Mesa EGL + OSMesa) or set MUJOCO_GL"
            )
        os.environ["MUJOCO_GL"] = _backend  # children inherit the decision
    platform = os.environ.get("PYOPENGL_PLATFORM")
    if platform and platform.lower() != _backend:
        raise RenderingUnavailable(f"PYOPENGL_PLATFORM={platform} conflicts with MUJOCO_GL={_backend}; unset one")
    os.environ["PYOPENGL_PLATFORM"] = _backend
    return _backend


def _gl_context_class() -> Any:
    return importlib.import_module(f"mujoco.{gl_backend()}").GLContext


def _gl_context(width: int, height: int) -> Any:
    """The GL context for a new renderer of this size: the one this thread's live renderers of the size share,
    else a kept one, else a new one."""
    key = (threading.get_ident(), width, height)
    shared = _shared_contexts.get(key)
    if shared is None:
        idle = _idle_contexts.get((width, height))
        shared = _shared_contexts[key] = [idle.pop() if idle else _gl_context_class()(width, height), 0]
    shared[1] += 1
    return shared[0]


def _release_gl_context(context: Any, width: int, height: int, broken: bool = False) -> None:
    """A renderer of this size is done with `context`: once no live renderer shares it, keep it for the next
    renderer of this size, or free it (`broken`: freeing an MjrContext in it failed)."""
    key = next((k for k, (c, _) in _shared_contexts.items() if c is context), None)
    if key is not None:
        _shared_contexts[key][1] -= 1
        if _shared_contexts[key][1] > 0:
            return  # another renderer still draws in it
        del _shared_contexts[key]
    if broken or _closing or sum(len(v) for v in _idle_contexts.values()) >= MAX_IDLE_CONTEXTS:
        context.free()
    else:
        _idle_contexts.setdefault((width, height), []).append(context)



def free_idle_contexts() -> None:
    """Free the GL contexts kept for later renderers."""
    for contexts in _idle_contexts.values():
        for context in contexts:
            try:
                context.free()
            except Exception:  # at exit another library may have ended the EGL display first
                if not _closing:
                    raise
                # Nothing left to free; without this the context's __del__ would try (and print) again.
                context._context = None
    _idle_contexts.clear()


def _close_all() -> None:
    global _closing
    _closing = True
    for renderer in list(_live):
        renderer.close()
    free_idle_contexts()


class OffscreenRenderer:
    """Renders named cameras of one MjModel at one size: RGB, and on request depth and segmentation."""

    def __init__(self, model: Any, width: int, height: int, quality: Quality = "fast",
                 mesh_tolerance_px: float = 0.0):
        import mujoco

        global _atexit_registered
        self._mj = mujoco
        self.model = model
        self.width, self.height = int(width), int(height)
        self.quality = quality
        # > 0: RGB frames draw each camera's meshes simplified to this many pixels (sim/mesh_detail.py)
        self.mesh_tolerance_px = float(mesh_tolerance_px)
        vis = model.vis
        vis.global_.offwidth = max(int(vis.global_.offwidth), self.width)
        vis.global_.offheight = max(int(vis.global_.offheight), self.height)
        self._gl = _gl_context(self.width, self.height)
        self._gl.make_current()
        self._ctx: Any = None  # the full model's MjrContext, made on first use
        self._simplified: dict[int, list[Any]] = {}  # camera id → [SimplifiedMeshes, its MjrContext]
        if self.mesh_tolerance_px <= 0:
            self._ctx = self._make_context(model)
        self._scene = mujoco.MjvScene(model, maxgeom=2000)
        if quality == "fast":
            flags = mujoco.mjtRndFlag
            for flag in (flags.mjRND_SHADOW, flags.mjRND_REFLECTION, flags.mjRND_SKYBOX):
                self._scene.flags[flag] = 0
        self._option = mujoco.MjvOption()
        self._camera = mujoco.MjvCamera()
        self._camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self._rect = mujoco.MjrRect(0, 0, self.width, self.height)
        self._rgb = np.empty((self.height, self.width, 3), dtype=np.uint8)
        self._depth = np.empty((self.height, self.width), dtype=np.float32)
        self._closed = False
        _live.add(self)
        if not _atexit_registered:  # registered after the first GL context: runs before EGL's own atexit
            atexit.register(_close_all)
            _atexit_registered = True

    def _make_context(self, model: Any) -> Any:
        """An MjrContext of `model` in this renderer's (current) GL context."""
        mujoco = self._mj
        vis = model.vis
        nominal_samples = int(vis.quality.offsamples)
        if self.quality == "fast":
            vis.quality.offsamples = 0
        try:
            return mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_50)
        finally:
            vis.quality.offsamples = nominal_samples  # the context keeps its own copy

    def _context_for(self, data: Any, camera: int, full: bool) -> Any:
        """The MjrContext to draw `camera` with: the full model's, or this camera's simplified copy
        (made, or made again when a mesh came closer, from this frame's distances)."""
        if full or self.mesh_tolerance_px <= 0:
            if self._ctx is None:
                self._ctx = self._make_context(self.model)
            return self._ctx
        from evalfleet.sim.mesh_detail import SimplifiedMeshes

        entry = self._simplified.get(camera)
        if entry is None:
            entry = self._simplified[camera] = [
                SimplifiedMeshes(self.model, camera, self.height, self.mesh_tolerance_px), None]
        if entry[0].update(data):
            if entry[1] is not None:
                entry[1].free()
                entry[1] = None
            entry[1] = self._make_context(entry[0].model)
        return entry[1]

    def camera_id(self, camera: str | int) -> int:
        if isinstance(camera, int):
            return camera
        cam = self._mj.mj_name2id(self.model, self._mj.mjtObj.mjOBJ_CAMERA, camera)
        if cam < 0:
            names = [self.model.camera(i).name for i in range(self.model.ncam)]
            raise ValueError(f"unknown camera {camera!r}; this model has {', '.join(names)}")
        return cam

    def render(
        self, data: Any, camera: str | int, *, depth: bool = False, segmentation: bool = False
    ) -> dict[str, np.ndarray]:
        """{"rgb": uint8 H×W×3} plus "depth" (float32 H×W, metres along the optical axis) and
        "segmentation" (int32 H×W×2: object id, mjtObj type; -1 for background) when asked."""
        mj = self._mj
        if self._closed:
            raise RuntimeError("renderer is closed")
        self._gl.make_current()
        self._camera.fixedcamid = self.camera_id(camera)
        mj.mjv_updateScene(self.model, data, self._option, None, self._camera, mj.mjtCatBit.mjCAT_ALL, self._scene)
        out: dict[str, np.ndarray] = {}
        upside_down = is_upside_down(data, self._camera.fixedcamid)

        def orient(a: np.ndarray) -> np.ndarray:  # OpenGL rows run bottom-up
            return (a[:, ::-1] if upside_down else a[::-1]).copy()

        # depth and segmentation are measurements: always of the full meshes
        ctx = self._context_for(data, self._camera.fixedcamid, full=depth or segmentation)
        mj.mjr_setBuffer(mj.mjtFramebuffer.mjFB_OFFSCREEN, ctx)  # each context has its own framebuffer
        mj.mjr_render(self._rect, self._scene, ctx)
        mj.mjr_readPixels(self._rgb, self._depth if depth else None, self._rect, ctx)
        out["rgb"] = orient(self._rgb)
        if depth:
            extent = float(self.model.stat.extent)
            near = float(self.model.vis.map.znear) * extent
            far = float(self.model.vis.map.zfar) * extent
            z = orient(self._depth).astype(np.float64)
            out["depth"] = (near / (1.0 - z * (1.0 - near / far))).astype(np.float32)
        if segmentation:
            flags = mj.mjtRndFlag
            self._scene.flags[flags.mjRND_SEGMENT] = 1
            self._scene.flags[flags.mjRND_IDCOLOR] = 1
            try:
                mj.mjr_render(self._rect, self._scene, ctx)
                mj.mjr_readPixels(self._rgb, None, self._rect, ctx)
            finally:
                self._scene.flags[flags.mjRND_SEGMENT] = 0
                self._scene.flags[flags.mjRND_IDCOLOR] = 0
            img = orient(self._rgb).astype(np.int32)
            segid = img[..., 0] + (img[..., 1] << 8) + (img[..., 2] << 16)  # scene geom index + 1; 0 background
            table = np.full((self._scene.ngeom + 1, 2), -1, dtype=np.int32)
            for i in range(self._scene.ngeom):
                g = self._scene.geoms[i]
                if 0 <= g.segid < self._scene.ngeom:
                    table[g.segid + 1] = (g.objid, g.objtype)
            out["segmentation"] = table[np.clip(segid, 0, self._scene.ngeom)]
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._gl.make_current()
            contexts = [self._ctx] + [entry[1] for entry in self._simplified.values()]
            self._ctx, self._simplified = None, {}
            for ctx in contexts:
                if ctx is not None:
                    ctx.free()
        except Exception:
            _release_gl_context(self._gl, self.width, self.height, broken=True)
            raise
        else:
            _release_gl_context(self._gl, self.width, self.height)
        finally:
            _live.discard(self)

    def __del__(self) -> None:  # best effort; explicit close() is the normal path
        try:
            self.close()
        except Exception:  # noqa: BLE001 - a finalizer must not raise
            pass


def is_upside_down(data: Any, camera: int) -> bool:
    """True when the camera's up axis points down in the world (its images are turned 180 degrees)."""
    return bool(np.asarray(data.cam_xmat[camera]).reshape(3, 3)[2, 1] < -0.1)


def camera_intrinsics(model: Any, camera: int, width: int, height: int) -> tuple[float, float, float, float]:
    """(fx, fy, cx, cy) in pixels of a MuJoCo camera rendered at width × height (square pixels;
    `fovy` is the vertical field of view)."""
    fovy = np.deg2rad(float(model.cam_fovy[camera]))
    f = 0.5 * height / np.tan(fovy / 2)
    return f, f, (width - 1) / 2.0, (height - 1) / 2.0


def back_project(
    depth: np.ndarray, pixels: tuple[np.ndarray, np.ndarray], intrinsics: tuple[float, float, float, float],
    cam_pos: np.ndarray, cam_mat: np.ndarray, upside_down: bool = False,
) -> np.ndarray:
    """World points (N×3) of image pixels (rows, cols) with their depth, for a MuJoCo camera at
    cam_pos with rotation cam_mat (columns: camera x right, y up, z backwards); `upside_down`: the
    image was turned 180 degrees by the renderer."""
    fx, fy, cx, cy = intrinsics
    rows, cols = pixels
    d = depth[rows, cols].astype(np.float64)
    x = (cols - cx) / fx * d
    y = -(rows - cy) / fy * d
    if upside_down:
        x, y = -x, -y
    local = np.stack([x, y, -d], axis=1)
    return local @ np.asarray(cam_mat).reshape(3, 3).T + np.asarray(cam_pos)


class RendererCache:
    """An environment's offscreen renderers: one per image size for its MuJoCo model, each made on first use
    (so inside the process that renders) and kept for the next frame."""

    def __init__(self, model: Callable[[], Any], default_hw: tuple[int, int], quality: Quality = "fast"):
        self.model = model  # read when a renderer is made: some simulators rebuild their model
        self.default_hw = default_hw
        self.quality = quality
        self._renderers: dict[tuple, OffscreenRenderer] = {}  # (h, w) or (h, w, mesh tolerance)

    def render(self, data: Any, camera: str | int, height: int | None = None, width: int | None = None,
               mesh_tolerance_px: float = 0.0, **kinds: bool) -> dict[str, np.ndarray]:
        """The renderer's dict ({"rgb", "depth"?, "segmentation"?}) of `camera` at height × width;
        `mesh_tolerance_px` > 0: meshes simplified to that many pixels (a renderer of its own)."""
        size = (int(height or self.default_hw[0]), int(width or self.default_hw[1]))
        tolerance = max(float(mesh_tolerance_px), 0.0)
        key = size if tolerance == 0 else (*size, tolerance)
        renderer = self._renderers.get(key)
        if renderer is None:
            renderer = self._renderers[key] = OffscreenRenderer(
                self.model(), size[1], size[0], self.quality, mesh_tolerance_px=tolerance)
        return renderer.render(data, camera, **kinds)

    def rgb(self, data: Any, camera: str | int, height: int | None = None, width: int | None = None,
            mesh_tolerance_px: float = 0.0) -> np.ndarray:
        return self.render(data, camera, height, width, mesh_tolerance_px)["rgb"]

    def __getitem__(self, size: tuple[int, int]) -> OffscreenRenderer:
        return self._renderers[size]

    def __len__(self) -> int:  # how many renderers exist (none until something renders)
        return len(self._renderers)

    def close(self) -> None:
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()
