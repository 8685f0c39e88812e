"""GradBench's ``gmm`` eval: the log posterior of a Gaussian mixture with a Wishart
prior on its precision matrices, and its gradient.

The formulas are the simplified ones of the eval's README: each precision
matrix is ``Q^T Q`` with ``Q`` lower triangular, ``exp(q)`` on its diagonal and
``l`` below it, column by column.
"""

import functools
import math

import numpy as np

import fgrad
import fgrad.numpy as fnp
from fgrad.scipy.special import logsumexp

from benchmarks.gradbench.tool import timed


@functools.lru_cache(maxsize=None)
def lower_layout(d):
    """Where ``l``'s entries go in a d x d matrix (column by column below the
    diagonal): an index into ``l`` for each entry and a mask of the strict lower part."""
    index = np.zeros((d, d), dtype=np.intp)
    mask = np.zeros((d, d))
    position = 0
    for column in range(d):
        for row in range(column + 1, d):
            index[row, column] = position
            mask[row, column] = 1.0
            position += 1
    return index, mask


def log_posterior(params, x, gamma, m):
    alpha, mu, q, l = params["alpha"], params["mu"], params["q"], params["l"]
    n, d = x.shape
    k = alpha.shape[0]
    index, mask = lower_layout(d)
    diagonal = fnp.exp(q)
    lower = l[:, index] * mask if d > 1 else fnp.zeros((k, d, d))
    Q = lower + diagonal[:, :, None] * fnp.eye(d)                   # (k, d, d)
    # Q (x - mu) as Q x - Q mu: every component's Q x is one matrix product, and
    # no (k, n, d) array of centred points is made (or differentiated)
    Qx = (x @ Q.reshape(k * d, d).T).reshape(n, k, d)
    Qmu = fnp.einsum("kij,kj->ki", Q, mu)                           # (k, d)
    mahalanobis = fnp.sum((Qx - Qmu) ** 2, axis=2)                  # (n, k)
    beta = alpha + fnp.sum(q, axis=1) - mahalanobis / 2
    likelihood = (fnp.sum(logsumexp(beta, axis=1))
                  - n * (d / 2 * math.log(2 * math.pi) + logsumexp(alpha)))
    dof = d + m + 1
    prior = (k * (dof * d * math.log(gamma / math.sqrt(2)) - multigammaln(dof / 2, d))
             - gamma ** 2 / 2 * (fnp.sum(diagonal ** 2) + fnp.sum(l ** 2))
             + m * fnp.sum(q))
    return likelihood + prior


def multigammaln(a, d):
    """log of the multivariate gamma function (a constant here: no derivative needed)."""
    return d * (d - 1) / 4 * math.log(math.pi) + sum(math.lgamma(a - j / 2) for j in range(d))


def _prepare(raw):
    params = {name: np.asarray(raw[name], dtype=np.float64) for name in ("alpha", "mu", "q", "l")}
    return params, np.asarray(raw["x"], dtype=np.float64), float(raw["gamma"]), int(raw["m"])


_objective = fgrad.jit(log_posterior, static_argnums=(2, 3))
_jacobian = fgrad.jit(fgrad.grad(log_posterior), static_argnums=(2, 3))

objective = timed(prepare=_prepare, output=float)(lambda args: _objective(*args))
jacobian = timed(prepare=_prepare, output=lambda g: {name: g[name].tolist() for name in g})(
    lambda args: _jacobian(*args))
