"""GradBench's ``kmeans`` eval: the k-means cost and one Newton direction.

The cost sums each point's squared distance to its nearest centroid.  Its
Hessian in the centroids is diagonal, so the Hessian-vector product with a
vector of ones is that diagonal: ``dir`` is the gradient divided by it.
"""

import numpy as np

import fgrad
import fgrad.numpy as fnp

from benchmarks.gradbench.tool import timed


def kmeans_cost(points, centroids):
    # |p - c|^2 = |p|^2 + |c|^2 - 2 p.c, one matrix product for all pairs
    distances = (fnp.sum(points * points, axis=1)[:, None]
                 + fnp.sum(centroids * centroids, axis=1)[None, :]
                 - 2 * points @ centroids.T)
    return fnp.sum(fnp.min(distances, axis=1))


def newton_direction(points, centroids):
    gradient = fgrad.grad(kmeans_cost, argnums=1)
    g, hessian_diagonal = fgrad.jvp(lambda c: gradient(points, c), (centroids,),
                                    (fnp.ones_like(centroids),))
    return g / hessian_diagonal


def _prepare(raw):
    return (np.asarray(raw["points"], dtype=np.float64),
            np.asarray(raw["centroids"], dtype=np.float64))


_cost = fgrad.jit(kmeans_cost, compile="sync")
_direction = fgrad.jit(newton_direction, compile="sync")

# The eval's two functions are called ``cost`` and ``dir``.
cost = timed(prepare=_prepare, output=float)(lambda args: _cost(*args))
dir = timed(prepare=_prepare, output=lambda d: d.tolist())(  # noqa: A001 (the eval's name)
    lambda args: _direction(*args))
