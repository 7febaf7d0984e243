"""Meshes simplified to what a camera can show: level of detail for video frames.

On a software rasteriser (llvmpipe, the CPU default) a frame's cost is the meshes' vertex work, not
its pixels: Meta-World's Sawyer has 67k mesh faces, 90% of a 224 px frame's time, most of them
far smaller than a pixel of a scene camera. `SimplifiedMeshes` keeps, per camera, a copy of the model
whose meshes are merged by vertex clustering: vertices in one grid cell become one (their mean),
faces that collapse (two corners in one cell: thinner than a cell) are dropped. The cell of each mesh
is chosen from its distance to the camera so that no drawn vertex moves more than `tolerance_px`
pixels in the image (the cell's diagonal, √3 × its side, is at most that many pixels at the mesh's
nearest point), and what is dropped was thinner than that. Only the MjrContext is built from the copy:
the scene still comes from the real model and data (a scene geom names its mesh by id, and the copy
keeps every id), so poses, colours and materials are the real ones, and a kept face keeps its own
corners' normals and texture coordinates (only its vertices move, within their cells).

Distances change as the robot moves: each frame checks them (a dozen mesh geoms, microseconds), and
when a mesh has come closer than its cell allows (by more than `REBUILD_SLACK`), the copy is
simplified again from the real meshes with the smaller cells. Cells only shrink, so a Run's
renderer settles after the first episodes. Used for video frames only: a policy's observations are
always rendered from the full meshes.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

MIN_FACES = 64  # smaller meshes are not worth simplifying
REBUILD_SLACK = 1.25  # a mesh may come this much closer than its cell allows before the copy is rebuilt
SQRT3 = float(np.sqrt(3.0))


def pixel_size(model: Any, camera: int, height: int, distances: np.ndarray) -> np.ndarray:
    """World size (metres) of one image pixel at each distance from a camera rendered `height` pixels
    high (perspective: grows with distance; orthographic: `fovy` is the view's height in metres)."""
    if bool(model.cam_orthographic[camera]):
        return np.full_like(distances, float(model.cam_fovy[camera]) / height)
    half_fov = np.deg2rad(float(model.cam_fovy[camera])) / 2
    return 2.0 * np.maximum(distances, 0.0) * np.tan(half_fov) / height


def allowed_cells(model: Any, data: Any, camera: int, height: int, tolerance_px: float,
                  mesh_geoms: np.ndarray) -> np.ndarray:
    """Per mesh (model.nmesh), the largest clustering cell (metres) that keeps each of its vertices
    within `tolerance_px` pixels of where it is, as seen from `camera` now (0: keep it whole;
    inf: no geom shows it). A mesh used by several geoms takes its nearest geom's cell."""
    cells = np.full(model.nmesh, np.inf)
    if len(mesh_geoms) == 0:
        return cells
    offsets = data.geom_xpos[mesh_geoms] - data.cam_xpos[camera]
    nearest = np.linalg.norm(offsets, axis=1) - model.geom_rbound[mesh_geoms]  # bounding sphere's surface
    cell = tolerance_px * pixel_size(model, camera, height, nearest) / SQRT3
    np.minimum.at(cells, model.geom_dataid[mesh_geoms], cell)
    return cells


def cluster_mesh(model: Any, source: Any, mesh: int, cell: float) -> int:
    """Write into `model` (a copy of `source`) mesh `mesh` of `source` clustered on a grid of `cell`
    metres; returns its number of faces. The copy's face and vertex arrays keep their sizes: the
    mesh's first faces are the kept ones and its face count says how many (the rest are unused)."""
    first_face, num_faces = source.mesh_faceadr[mesh], source.mesh_facenum[mesh]
    first_vert, num_verts = source.mesh_vertadr[mesh], source.mesh_vertnum[mesh]
    verts = np.asarray(source.mesh_vert[first_vert:first_vert + num_verts], dtype=np.float64)
    faces = np.asarray(source.mesh_face[first_face:first_face + num_faces])
    normals = np.asarray(source.mesh_facenormal[first_face:first_face + num_faces])
    keys = np.floor(verts / cell).astype(np.int64)
    _, representative, cluster = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    cluster = cluster.ravel()
    if len(representative) == num_verts:  # nothing merges at this cell size
        model.mesh_facenum[mesh] = num_faces
        return int(num_faces)
    sums = np.zeros((len(representative), 3))
    np.add.at(sums, cluster, verts)
    counts = np.bincount(cluster, minlength=len(representative))
    positions = np.array(source.mesh_vert[first_vert:first_vert + num_verts])
    positions[representative] = sums / counts[:, None]
    model.mesh_vert[first_vert:first_vert + num_verts] = positions
    merged = representative[cluster][faces]
    keep = (merged[:, 0] != merged[:, 1]) & (merged[:, 1] != merged[:, 2]) & (merged[:, 0] != merged[:, 2])
    kept_faces = np.flatnonzero(keep)
    _, unique = np.unique(np.sort(merged[kept_faces], axis=1), axis=0, return_index=True)
    kept_faces = kept_faces[np.sort(unique)]  # each surviving face once, in the mesh's order
    kept = len(kept_faces)
    model.mesh_face[first_face:first_face + kept] = merged[kept_faces]
    # a kept face shades and textures as it did: its own corners' normals and texture coordinates
    model.mesh_facenormal[first_face:first_face + kept] = normals[kept_faces]
    if source.mesh_texcoordadr[mesh] >= 0:
        texcoords = np.asarray(source.mesh_facetexcoord[first_face:first_face + num_faces])
        model.mesh_facetexcoord[first_face:first_face + kept] = texcoords[kept_faces]
    model.mesh_facenum[mesh] = kept
    return kept


def simplified_model(source: Any, cells: np.ndarray) -> Any:
    """A copy of `source` whose meshes are clustered with `cells` (metres per mesh; 0 or inf: whole,
    inf being a mesh no geom shows). Meshes under MIN_FACES faces stay whole."""
    model = copy.copy(source)
    for mesh in range(source.nmesh):
        cell = float(cells[mesh])
        if cell > 0 and np.isfinite(cell) and source.mesh_facenum[mesh] >= MIN_FACES:
            cluster_mesh(model, source, mesh, cell)
    return model


class SimplifiedMeshes:
    """One camera's simplified copy of a model, rebuilt when a mesh comes closer than its cell allows."""

    def __init__(self, model: Any, camera: int, height: int, tolerance_px: float):
        import mujoco

        self.source = model
        self.camera = camera
        self.height = height
        self.tolerance_px = float(tolerance_px)
        self.mesh_geoms = np.flatnonzero(np.asarray(model.geom_type) == int(mujoco.mjtGeom.mjGEOM_MESH))
        self.cells = np.full(model.nmesh, np.inf)  # the cells the current copy was built with
        self.model: Any = None
        self.builds = 0

    def update(self, data: Any) -> bool:
        """Check this frame's distances; True when the copy was (re)built and its MjrContext must be
        made again."""
        allowed = allowed_cells(self.source, data, self.camera, self.height, self.tolerance_px, self.mesh_geoms)
        if self.model is not None and not np.any(self.cells > REBUILD_SLACK * allowed):
            return False
        self.cells = np.minimum(self.cells, allowed)
        self.model = simplified_model(self.source, self.cells)
        self.builds += 1
        return True

    def faces(self) -> int:
        return int(np.sum(self.model.mesh_facenum)) if self.model is not None else int(np.sum(self.source.mesh_facenum))
