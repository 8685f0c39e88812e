"""GradBench's ``llsq`` eval: a polynomial least-squares objective and its gradient.

``y(x) = 1/2 sum_i (s_i - sum_j x_j t_i^j)^2`` with ``t`` evenly spaced on
[-1, 1] and ``s = sign(t)``: the design matrix of powers of ``t`` times ``x``.
"""

import numpy as np

import fgrad
import fgrad.numpy as fnp

from benchmarks.gradbench.tool import timed


def llsq(x, n):
    t = fnp.linspace(-1.0, 1.0, n)
    powers = t[:, None] ** fnp.arange(x.shape[0])
    residual = fnp.sign(t) - powers @ x
    return fnp.sum(residual * residual) / 2


def _prepare(raw):
    return np.asarray(raw["x"], dtype=np.float64), raw["n"]


_primal = fgrad.jit(llsq, static_argnums=1)
_gradient = fgrad.jit(fgrad.grad(llsq), static_argnums=1)

primal = timed(prepare=_prepare, output=float)(lambda args: _primal(*args))
gradient = timed(prepare=_prepare, output=lambda g: g.tolist())(lambda args: _gradient(*args))
