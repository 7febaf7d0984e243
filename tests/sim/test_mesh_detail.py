"""Video frames with simplified meshes: no vertex moves further than the tolerance allows, the frame
looks like the full one, fewer faces are drawn, a mesh coming closer makes the copy finer again, and
a policy's own images (and depth) never see the simplified meshes."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from evalfleet.rollout.video import EpisodeVideo
from evalfleet.sim import mesh_detail
from evalfleet.sim.metaworld_env import MetaworldEnvironment
from evalfleet.sim.metaworld_spec import MetaworldOptions

SIZE = (96, 96)


@pytest.fixture(scope="module")
def env():
    env = MetaworldEnvironment(MetaworldOptions(task="pick-place-v3", max_steps=20))
    env.reset(3, {})
    for _ in range(5):
        env.step(np.array([0.5, -0.3, 0.2, 1.0]))
    yield env
    env.close()


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 10 * np.log10(255.0**2 / max(mse, 1e-12))


def test_clustering_moves_no_vertex_further_than_the_cell_diagonal(env):
    source = env.env.model
    mesh = int(np.argmax(source.mesh_facenum))  # the largest mesh (the Sawyer's base link)
    cell = 0.01
    model = mesh_detail.simplified_model(source, np.where(np.arange(source.nmesh) == mesh, cell, np.inf))
    first_face, first_vert = source.mesh_faceadr[mesh], source.mesh_vertadr[mesh]
    kept = int(model.mesh_facenum[mesh])
    assert 0 < kept < 0.5 * source.mesh_facenum[mesh]
    faces = np.asarray(model.mesh_face[first_face:first_face + kept])
    assert np.all((faces[:, 0] != faces[:, 1]) & (faces[:, 1] != faces[:, 2]) & (faces[:, 0] != faces[:, 2]))
    assert len(np.unique(np.sort(faces, axis=1), axis=0)) == kept  # no face twice
    count = source.mesh_vertnum[mesh]
    original = np.asarray(source.mesh_vert[first_vert:first_vert + count], dtype=float)
    moved = np.asarray(model.mesh_vert[first_vert:first_vert + count], dtype=float)
    drawn = np.unique(faces)
    # a drawn vertex is its cluster's mean: within the cell's diagonal of where it was
    shift = np.linalg.norm(moved[drawn] - original[drawn], axis=1)
    assert shift.max() <= mesh_detail.SQRT3 * cell + 1e-9 and shift.max() > 0
    # what is no longer drawn was thin: each dropped face had two corners in one cell
    full_faces = np.asarray(source.mesh_face[first_face:first_face + source.mesh_facenum[mesh]])
    cells = np.floor(original / cell).astype(np.int64)[full_faces]  # (faces, 3 corners, 3 axes)
    collapsed = np.array([(a == b).all(-1) for a, b in ((cells[:, 0], cells[:, 1]), (cells[:, 1], cells[:, 2]),
                                                         (cells[:, 0], cells[:, 2]))]).any(axis=0)
    assert kept <= np.count_nonzero(~collapsed)  # only collapsed faces went (and duplicates)
    # the other meshes and the source are untouched
    others = np.arange(source.nmesh) != mesh
    np.testing.assert_array_equal(model.mesh_facenum[others], source.mesh_facenum[others])
    assert source.mesh_facenum[mesh] > kept


def test_a_video_frame_looks_like_the_full_frame_and_draws_fewer_faces(env):
    full = env.render("corner", *SIZE)
    video = env.render_video("corner", *SIZE, mesh_tolerance_px=1.0)
    renderer = env._renderers[(*SIZE, 1.0)]
    simplified = renderer._simplified[renderer.camera_id("corner")][0]
    assert simplified.faces() < 0.8 * int(np.sum(env.env.model.mesh_facenum))
    assert _psnr(video, full) > 32.0  # x264 at its defaults loses more than this (about 33 dB on these frames)
    assert not np.array_equal(video, full)  # simplified, not the same picture by chance
    # the observation's renderer is a different one and still draws the full meshes, depth included
    again = env.render("corner", *SIZE)
    np.testing.assert_array_equal(again, full)
    with_depth = env._renderers.render(env.env.data, "corner", *SIZE, mesh_tolerance_px=1.0, depth=True)
    np.testing.assert_array_equal(with_depth["rgb"], full)  # measurements use the full meshes


def test_tolerance_scales_the_simplification(env):
    faces = {}
    for tolerance in (0.5, 2.0, 4.0):
        env.render_video("corner", *SIZE, mesh_tolerance_px=tolerance)
        renderer = env._renderers[(*SIZE, tolerance)]
        faces[tolerance] = renderer._simplified[renderer.camera_id("corner")][0].faces()
    assert faces[0.5] > faces[2.0] > faces[4.0]


def test_a_mesh_coming_closer_rebuilds_the_copy_with_finer_cells(env):
    import mujoco

    model = env.env.model
    camera = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "corner")
    data = env.env.data
    far = SimpleNamespace(geom_xpos=np.array(data.geom_xpos), cam_xpos=np.array(data.cam_xpos))
    meshes = mesh_detail.SimplifiedMeshes(model, camera, 224, 1.0)
    assert meshes.update(far) and meshes.builds == 1
    coarse = meshes.faces()
    assert not meshes.update(far)  # same distances: the copy stands
    toward = far.geom_xpos - far.cam_xpos[camera]
    slightly = SimpleNamespace(geom_xpos=far.cam_xpos[camera] + 0.95 * toward, cam_xpos=far.cam_xpos)
    assert not meshes.update(slightly)  # within REBUILD_SLACK
    close = SimpleNamespace(geom_xpos=far.cam_xpos[camera] + 0.4 * toward, cam_xpos=far.cam_xpos)
    cells_before = meshes.cells.copy()
    assert meshes.update(close) and meshes.builds == 2
    assert meshes.faces() > coarse
    finite = np.isfinite(cells_before) & (cells_before > 0)
    assert np.all(meshes.cells[finite] < cells_before[finite])
    assert not meshes.update(far)  # cells only shrink: moving away again keeps the finer copy


def test_a_camera_inside_a_mesh_keeps_that_mesh_whole(env):
    import mujoco

    model = env.env.model
    camera = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "gripperPOV")  # mounted on the gripper
    cells = mesh_detail.allowed_cells(model, env.env.data, camera, 224, 1.0,
                                      np.flatnonzero(model.geom_type == mujoco.mjtGeom.mjGEOM_MESH))
    assert np.any(cells == 0)  # the gripper's own meshes: the camera is within their bounding spheres
    simplified = mesh_detail.simplified_model(model, cells)
    whole = cells == 0
    np.testing.assert_array_equal(simplified.mesh_facenum[whole], model.mesh_facenum[whole])


def _grid_mesh(n: int) -> tuple[str, str, str]:
    """An n × n grid of vertices 1 mm apart as MJCF vertex, face and texcoord strings."""
    xs, ys = np.meshgrid(np.arange(n) * 0.001, np.arange(n) * 0.001)
    verts = np.stack([xs.ravel(), ys.ravel(), 0.0005 * np.sin(xs.ravel() * 3000)], axis=1)
    faces = []
    for r in range(n - 1):
        for c in range(n - 1):
            a, b, d, e = r * n + c, r * n + c + 1, (r + 1) * n + c, (r + 1) * n + c + 1
            faces += [(a, b, e), (a, e, d)]
    uv = np.stack([xs.ravel(), ys.ravel()], axis=1) / xs.max()
    def text(a):
        return " ".join(f"{v:g}" for v in np.ravel(a))
    return text(verts), text(faces), text(uv)


def test_kept_faces_keep_their_own_normals_and_texture_coordinates():
    import mujoco

    verts, faces, uv = _grid_mesh(12)  # 242 faces
    xml = f"""<mujoco><asset>
      <mesh name="plain" vertex="{verts}" face="{faces}"/>
      <mesh name="textured" vertex="{verts}" face="{faces}" texcoord="{uv}"/>
    </asset><worldbody>
      <geom type="mesh" mesh="plain"/><body pos="0.1 0 0"><geom type="mesh" mesh="textured"/></body>
    </worldbody></mujoco>"""
    model = mujoco.MjModel.from_xml_string(xml)
    plain, textured = (mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_MESH, n) for n in ("plain", "textured"))
    assert model.mesh_texcoordadr[textured] >= 0 and model.mesh_texcoordadr[plain] < 0
    simplified = mesh_detail.simplified_model(model, np.full(model.nmesh, 0.004))
    for mesh in (plain, textured):
        assert simplified.mesh_facenum[mesh] < model.mesh_facenum[mesh] / 4
    first, count = model.mesh_faceadr[textured], model.mesh_facenum[textured]
    kept = int(simplified.mesh_facenum[textured])
    for name in ("mesh_facetexcoord", "mesh_facenormal"):
        rows = {tuple(r) for r in getattr(model, name)[first:first + count]}
        assert {tuple(r) for r in getattr(simplified, name)[first:first + kept]} <= rows  # each from its own face


class _Env:
    def __init__(self):
        self.calls: list[tuple] = []

    def render(self, camera, height, width):
        self.calls.append(("render", camera))
        return np.zeros((height, width, 3), np.uint8)

    def render_video(self, camera, height, width, mesh_tolerance_px):
        self.calls.append(("render_video", camera, mesh_tolerance_px))
        return np.zeros((height, width, 3), np.uint8)


@pytest.mark.parametrize("tolerance, expected", [(1.5, ("render_video", "corner", 1.5)), (0.0, ("render", "corner"))])
def test_recording_asks_for_simplified_frames_unless_the_tolerance_is_zero(tmp_path, tolerance, expected):
    recording = SimpleNamespace(cameras=["corner"], width=32, height=32, fps=20, every_step=True,
                                mesh_tolerance_px=tolerance)
    video = EpisodeVideo(tmp_path, 0, recording)
    fake = _Env()
    video.add(fake)
    video.close()
    assert fake.calls == [expected]
