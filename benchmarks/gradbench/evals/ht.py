"""GradBench's ``ht`` eval (hand tracking, from ADBench): residuals between observed
points and a skinned hand model posed by 26 parameters, and their Jacobian.

``objective`` returns the residuals flattened (three per correspondence).
``jacobian`` returns, per residual, its derivatives in the 26 pose parameters,
preceded in the "complicated" variant by its two derivatives in its own
correspondence's barycentric coordinates ``us`` (every other entry of that
block-diagonal part is zero, so it is sent compressed to two columns).  All
columns come from one ``vmap`` of ``jvp``: each tangent is a unit pose
direction or one ``us`` coordinate set to one for every correspondence.
"""

import functools

import numpy as np

import fgrad
import fgrad.numpy as fnp

from benchmarks.gradbench.tool import timed

N_THETA = 26


@functools.lru_cache(maxsize=None)
def pose_layout(n_bones):
    """Where each pose parameter comes from: an index into ``theta`` extended by a
    zero and a one, for each entry of the (n_bones + 3, 3) pose matrix."""
    zero, one = N_THETA, N_THETA + 1
    layout = np.full((n_bones + 3, 3), zero, dtype=np.intp)
    layout[0] = [0, 1, 2]                  # global rotation (angle-axis)
    layout[1] = one                        # global scale
    layout[2] = [3, 4, 5]                  # global translation
    i_theta, row = 6, 5
    for _finger in range(5):
        for joint in range(3):
            layout[row, 0] = i_theta
            i_theta += 1
            if joint == 0:
                layout[row, 1] = i_theta
                i_theta += 1
            row += 1
        row += 1
    return layout


@functools.lru_cache(maxsize=None)
def bone_levels(parents):
    """The bones by depth in the tree: the roots, then for each further depth
    its bones and where their parents are among the bones before it (in this
    order), and where each bone ends up in that order.

    >>> roots, levels, bone_order = bone_levels((-1, 0, 1, 0))
    >>> roots, [(bones.tolist(), parents.tolist()) for bones, parents in levels]
    (array([0]), [([1, 3], [0, 0]), ([2], [1])])
    >>> bone_order.tolist()
    [0, 1, 3, 2]
    """
    depth = []
    for parent in parents:
        depth.append(0 if parent == -1 else depth[parent] + 1)
    order = sorted(range(len(parents)), key=lambda bone: depth[bone])
    at = {bone: position for position, bone in enumerate(order)}
    levels = []
    for level in range(1, max(depth) + 1):
        bones = [bone for bone in order if depth[bone] == level]
        levels.append((np.array(bones), np.array([at[parents[bone]] for bone in bones])))
    roots = np.array([bone for bone in order if depth[bone] == 0])
    return roots, levels, np.array([at[bone] for bone in range(len(parents))])


def euler_rotations(angles):
    """Rz @ Ry @ Rx for each row (x, z, y) of ``angles``: (bones, 3, 3), the
    product written out."""
    tx, tz, ty = angles[:, 0], angles[:, 1], angles[:, 2]
    cx, sx, cy, sy, cz, sz = (fnp.cos(tx), fnp.sin(tx), fnp.cos(ty), fnp.sin(ty),
                              fnp.cos(tz), fnp.sin(tz))
    return fnp.stack([cz * cy, cz * sy * sx - sz * cx, cz * sy * cx + sz * sx,
                      sz * cy, sz * sy * sx + cz * cx, sz * sy * cx - cz * sx,
                      -sy, cy * sx, cy * cx], axis=1).reshape(-1, 3, 3)


def angle_axis_rotation(angle_axis):
    """Rodrigues' rotation matrix; the identity for angles below 1e-4."""
    norm = fnp.sqrt(fnp.sum(angle_axis * angle_axis))
    small = norm < 1e-4
    safe = fnp.where(small, 1.0, norm)
    x, y, z = angle_axis[0] / safe, angle_axis[1] / safe, angle_axis[2] / safe
    s, c = fnp.sin(safe), fnp.cos(safe)
    rotation = fnp.stack([
        x * x + (1 - x * x) * c, x * y * (1 - c) - z * s, x * z * (1 - c) + y * s,
        x * y * (1 - c) + z * s, y * y + (1 - y * y) * c, y * z * (1 - c) - x * s,
        x * z * (1 - c) - y * s, z * y * (1 - c) + x * s, z * z + (1 - z * z) * c,
    ]).reshape(3, 3)
    return fnp.where(small, fnp.eye(3), rotation)


def vertex_positions(theta, model):
    pose = fnp.concatenate([theta, fnp.array([0.0, 1.0])])[pose_layout(model["n_bones"])]
    rotations = euler_rotations(pose[3:])
    base = model["base_relatives"]
    relatives = fnp.concatenate([base[:, :, :3] @ rotations, base[:, :, 3:]], axis=2)
    # each bone's transform is its parent's times its own: all the bones of one
    # depth in the tree at once (five products for the hand's 22 bones)
    roots, levels, bone_order = bone_levels(model["parents"])
    absolutes = relatives[roots]
    for bones, parents in levels:
        absolutes = fnp.concatenate([absolutes, absolutes[parents] @ relatives[bones]])
    transforms = (absolutes[bone_order] @ model["inverse_base_absolutes"])[:, :3, :]
    # each vertex moves by the weighted sum of its bones' transforms (einsum, not @:
    # NumPy runs a stack of small matrix products far slower than one large one)
    blended = fnp.einsum("vb,bk->vk", model["weights"], transforms.reshape(-1, 12))
    positions = fnp.einsum("vij,vj->vi", blended.reshape(-1, 3, 4), model["base_positions"])
    if model["is_mirrored"]:
        positions = positions * fnp.array([-1.0, 1.0, 1.0])
    rotation = angle_axis_rotation(pose[0]) * pose[1][None, :]
    return positions @ rotation.T + pose[2]


def residuals(theta, us, model, data):
    vertices = vertex_positions(theta, model)
    if data["triangles"] is None:
        return data["points"] - vertices[data["correspondences"]]
    # each corner of each point's triangle, (points, 3)
    corners = [vertices[data["triangles"][:, k]] for k in range(3)]
    u0, u1 = us[:, 0:1], us[:, 1:2]
    on_hand = u0 * corners[0] + u1 * corners[1] + (1 - u0 - u1) * corners[2]
    return data["points"] - on_hand


def jacobian_columns(theta, us, model, data):
    """(residuals, columns): one jvp per pose parameter and per ``us`` coordinate."""
    complicated = data["triangles"] is not None
    n_us = 2 if complicated else 0
    theta_tangents = np.concatenate([np.zeros((n_us, N_THETA)), np.eye(N_THETA)])
    us_tangents = np.zeros((n_us + N_THETA,) + us.shape)
    for column in range(n_us):
        us_tangents[column, :, column] = 1.0

    def column(theta_dot, us_dot):
        return fgrad.jvp(lambda t, u: residuals(t, u, model, data), (theta, us),
                         (theta_dot, us_dot))[1].ravel()

    return fgrad.vmap(column)(theta_tangents, us_tangents).T


def vertices_used(model, seen):
    """The model's vertices that ``seen`` (correspondences or triangles)
    names, as (base positions, weights, ``seen`` renumbered to them): the
    residuals depend on no other vertex (hand1's triangles use 300 of
    10,000). Part of every timed run, as it depends on the input."""
    used, at = np.unique(seen, return_inverse=True)
    return model["base_positions"][used], model["weights"][used], at.reshape(seen.shape)


def _prepare(raw):
    raw_model = raw["data"]["model"]
    model = {
        "n_bones": len(raw_model["parents"]),
        "parents": tuple(raw_model["parents"]),
        "is_mirrored": bool(raw_model["is_mirrored"]),
        **{name: np.asarray(raw_model[name], dtype=np.float64)
           for name in ("base_relatives", "inverse_base_absolutes", "base_positions",
                        "weights")},
    }
    correspondences = np.asarray(raw["data"]["correspondences"], dtype=np.intp)
    us = np.asarray(raw["us"], dtype=np.float64).reshape(-1, 2)
    triangles = np.asarray(raw_model["triangles"], dtype=np.intp)[correspondences] \
        if len(us) else None
    points = np.asarray(raw["data"]["points"], dtype=np.float64)
    seen = correspondences if triangles is None else triangles

    def posed(function):
        """``function(theta, us, model, data)`` of the vertices used alone."""
        def of_used(t, u, positions, weights, at):
            data = {"points": points,
                    "correspondences": at if triangles is None else None,
                    "triangles": None if triangles is None else at}
            return function(t, u, dict(model, base_positions=positions, weights=weights),
                            data)
        return of_used

    run_objective = fgrad.jit(posed(lambda *a: residuals(*a).ravel()))
    run_jacobian = fgrad.jit(posed(jacobian_columns), compile="sync")
    theta = np.asarray(raw["theta"], dtype=np.float64)
    return theta, us, lambda t, u: run_objective(t, u, *vertices_used(model, seen)), \
        lambda t, u: run_jacobian(t, u, *vertices_used(model, seen))


objective = timed(prepare=_prepare, output=lambda r: r.tolist())(
    lambda args: args[2](args[0], args[1]))
jacobian = timed(prepare=_prepare, output=lambda j: j.tolist())(
    lambda args: args[3](args[0], args[1]))
