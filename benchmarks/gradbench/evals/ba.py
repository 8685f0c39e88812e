"""GradBench's ``ba`` eval (bundle adjustment, from ADBench): reprojection and weight
errors of ``p`` observations, and their sparse Jacobian.

The input describes one camera, point, weight and feature, to be repeated ``n``,
``m`` and ``p`` times; observation ``i`` sees camera ``i % n`` and point
``i % m``.  The whole problem is built and every observation differentiated
(the eval forbids exploiting the repetition); only the output is abridged, as
the eval asks: the first 30 and the last entry of the Jacobian in compressed
sparse row form.  Each observation's 2 x 15 block (11 camera parameters, 3
point coordinates, its weight) is ``jacfwd`` of the reprojection error,
``vmap``-ed over the observations.
"""

import numpy as np

import fgrad
import fgrad.numpy as fnp

from benchmarks.gradbench.tool import timed

N_CAM = 11


def rotate(rotation, point):
    """Rodrigues' formula (the first-order form for a zero rotation)."""
    squared = fnp.sum(rotation * rotation)
    zero = squared == 0
    theta = fnp.sqrt(fnp.where(zero, 1.0, squared))
    axis = rotation / theta
    cos, sin = fnp.cos(theta), fnp.sin(theta)
    rotated = (point * cos + fnp.cross(axis, point) * sin
               + axis * fnp.sum(axis * point) * (1 - cos))
    return fnp.where(zero, point + fnp.cross(rotation, point), rotated)


def reprojection_error(camera, point, weight, feature):
    projected = rotate(camera[0:3], point - camera[3:6])
    projected = projected[:2] / projected[2]
    radius = fnp.sum(projected * projected)
    projected = projected * (1 + camera[9] * radius + camera[10] * radius * radius)
    return weight * (projected * camera[6] + camera[7:9] - feature)


def weight_error(weight):
    return 1 - weight * weight


def objective_errors(problem):
    cams, points, weights, features, obs = problem
    reproj = fgrad.vmap(reprojection_error)(cams[obs[:, 0]], points[obs[:, 1]], weights,
                                           features)
    return reproj, weight_error(weights)


_blocks = fgrad.jit(fgrad.vmap(fgrad.jacfwd(reprojection_error, argnums=(0, 1, 2))))
_weight_derivatives = fgrad.jit(fgrad.vmap(fgrad.grad(weight_error)))
_objective = fgrad.jit(objective_errors)


def sparse_jacobian(problem):
    """The Jacobian in compressed sparse rows: (row offsets, columns, values)."""
    cams, points, weights, features, obs = problem
    n, m, p = len(cams), len(points), len(weights)
    d_cam, d_point, d_weight = _blocks(cams[obs[:, 0]], points[obs[:, 1]], weights, features)
    block = np.concatenate([d_cam, d_point, d_weight[:, :, None]], axis=2)    # (p, 2, 15)
    values = np.concatenate([block.ravel(), _weight_derivatives(weights)])
    columns_of_row = np.concatenate([N_CAM * obs[:, :1] + np.arange(N_CAM),
                                     N_CAM * n + 3 * obs[:, 1:] + np.arange(3),
                                     N_CAM * n + 3 * m + np.arange(p)[:, None]], axis=1)
    columns = np.concatenate([np.repeat(columns_of_row, 2, axis=0).ravel(),
                              N_CAM * n + 3 * m + np.arange(p)])
    offsets = np.concatenate([15 * np.arange(2 * p + 1), 30 * p + np.arange(1, p + 1)])
    return offsets, columns, values


def _prepare(raw):
    n, m, p = raw["n"], raw["m"], raw["p"]
    obs = np.stack([np.arange(p) % n, np.arange(p) % m], axis=1)
    return (np.tile(np.asarray(raw["cam"], dtype=np.float64), (n, 1)),
            np.tile(np.asarray(raw["x"], dtype=np.float64), (m, 1)),
            np.full(p, float(raw["w"])),
            np.tile(np.asarray(raw["feat"], dtype=np.float64), (p, 1)),
            obs)


def _objective_output(errors):
    reproj, w_err = errors
    return {"reproj_error": {"elements": reproj[0].tolist(), "repeated": len(reproj)},
            "w_err": {"element": float(w_err[0]), "repeated": len(w_err)}}


def _jacobian_output(jacobian):
    def abridged(values):
        return np.concatenate([values[:30], values[-1:]]).tolist()
    offsets, columns, values = jacobian
    return {"rows": abridged(offsets), "cols": abridged(columns), "vals": abridged(values)}


objective = timed(prepare=_prepare, output=_objective_output)(_objective)
jacobian = timed(prepare=_prepare, output=_jacobian_output)(sparse_jacobian)
