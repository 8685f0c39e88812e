"""GradBench's ``ba`` eval (bundle adjustment, from ADBench): reprojection and weight
errors of ``p`` observations, and their sparse Jacobian.

The input describes one camera, point, weight and feature, to be repeated ``n``,
``m`` and ``p`` times; observation ``i`` sees camera ``i % n`` and point
``i % m``.  The whole problem is built and every observation differentiated
(the eval forbids exploiting the repetition); only the output is abridged, as
the eval asks: the first 30 and the last entry of the Jacobian in compressed
sparse row form.  Each observation's 2 x 15 block (11 camera parameters, 3
point coordinates, its weight) comes from 15 ``jvp``s of the reprojection
error written elementwise over all observations (`jacobian_blocks`); one
jitted function gathers each observation's parameters and returns every
value of the Jacobian (`jacobian_values`), so that the compiled program
writes each straight into the array returned.
"""

import numpy as np

import fgrad
import fgrad.numpy as fnp

from benchmarks.gradbench.tool import timed

N_CAM = 11


def cross(a, b):
    return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]


def rotate(rotation, point):
    """Rodrigues' formula (its first-order form for a zero rotation), on lists of
    three coordinates, each an array over the observations."""
    squared = rotation[0] ** 2 + rotation[1] ** 2 + rotation[2] ** 2
    zero = squared == 0
    theta = fnp.sqrt(fnp.where(zero, 1.0, squared))
    axis = [r / theta for r in rotation]
    cos, sin = fnp.cos(theta), fnp.sin(theta)
    along = (axis[0] * point[0] + axis[1] * point[1] + axis[2] * point[2]) * (1 - cos)
    turned = cross(axis, point)
    small = cross(rotation, point)
    return [fnp.where(zero, point[i] + small[i],
                      point[i] * cos + turned[i] * sin + axis[i] * along) for i in range(3)]


def reprojection_error(camera, point, weight, feature):
    """Both coordinates of each observation's weighted reprojection error.

    ``camera`` is 11 arrays (rotation, centre, focal length, principal point,
    two distortion coefficients) and ``point`` 3, each holding one value per
    observation, so every operation here is elementwise over the observations."""
    seen = rotate(camera[0:3], [point[i] - camera[3 + i] for i in range(3)])
    x, y = seen[0] / seen[2], seen[1] / seen[2]
    radius = x * x + y * y
    distortion = 1 + camera[9] * radius + camera[10] * radius * radius
    return fnp.stack([weight * (x * distortion * camera[6] + camera[7] - feature[:, 0]),
                      weight * (y * distortion * camera[6] + camera[8] - feature[:, 1])])


def weight_error(weight):
    return 1 - weight * weight


def observed(cams, points, weights, obs):
    """The 15 differentiated inputs of each observation, one array per input:
    each camera and point parameter gathered for every observation."""
    return [cams[:, k][obs[:, 0]] for k in range(N_CAM)] + \
        [points[:, k][obs[:, 1]] for k in range(3)] + [weights]


def objective_errors(parameters, features):
    return (reprojection_error(parameters[:11], parameters[11:14], parameters[14], features).T,
            weight_error(parameters[14]))


def jacobian_blocks(parameters, features):
    """Each observation's 2 x 15 Jacobian block, as (observations, 2, 15).

    An observation's errors depend on its own inputs only, so one ``jvp`` in
    input ``j`` (the others held fixed) with a tangent of ones gives column
    ``j`` of all the blocks at once."""
    def column(j):
        def errors(x):
            inputs = parameters[:j] + [x] + parameters[j + 1:]
            return reprojection_error(inputs[:11], inputs[11:14], inputs[14], features)
        return fgrad.jvp(errors, (parameters[j],), (fnp.ones_like(parameters[j]),))[1]

    return fnp.transpose(fnp.stack([column(j) for j in range(len(parameters))]), (2, 1, 0))


def objective_of_problem(cams, points, weights, features, obs):
    return objective_errors(observed(cams, points, weights, obs), features)


def jacobian_values(cams, points, weights, features, obs):
    """The Jacobian's nonzero values in compressed sparse row order: each
    observation's block, row by row, then each weight error's derivative."""
    blocks = jacobian_blocks(observed(cams, points, weights, obs), features)
    return fnp.concatenate([fnp.reshape(blocks, -1),
                            fgrad.vmap(fgrad.grad(weight_error))(weights)])


_objective = fgrad.jit(objective_of_problem, compile="sync")
_values = fgrad.jit(jacobian_values, compile="sync")


def objective_of(problem):
    return _objective(*problem)


def sparse_jacobian(problem):
    """The Jacobian in compressed sparse rows: (row offsets, columns, values).

    Rows ``2i`` and ``2i + 1`` hold observation ``i``'s block (15 entries
    each), then row ``2p + i`` its weight error's derivative; the columns
    and offsets are filled in place, not concatenated from pieces."""
    cams, points, weights, features, obs = problem
    n, m, p = len(cams), len(points), len(weights)
    values = _values(*problem)
    # 32-bit indices where they fit, as SciPy's sparse matrices and ADBench's
    # C++ (half the memory to write)
    index = np.int32 if max(31 * p, N_CAM * n + 3 * m + p) <= np.iinfo(np.int32).max \
        else np.intp
    columns = np.empty(31 * p, dtype=index)
    blocks = columns[:30 * p].reshape(p, 2, 15)
    blocks[:, :, :N_CAM] = (N_CAM * obs[:, 0]).astype(index)[:, None, None] + \
        np.arange(N_CAM, dtype=index)
    blocks[:, :, N_CAM:14] = (N_CAM * n + 3 * obs[:, 1]).astype(index)[:, None, None] + \
        np.arange(3, dtype=index)
    columns[30 * p:] = N_CAM * n + 3 * m + np.arange(p, dtype=index)
    blocks[:, :, 14] = columns[30 * p:, None]
    offsets = np.empty(3 * p + 1, dtype=index)
    offsets[:2 * p + 1] = 15 * np.arange(2 * p + 1, dtype=index)
    offsets[2 * p + 1:] = 30 * p + np.arange(1, p + 1, dtype=index)
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


objective = timed(prepare=_prepare, output=_objective_output)(objective_of)
jacobian = timed(prepare=_prepare, output=_jacobian_output)(sparse_jacobian)
