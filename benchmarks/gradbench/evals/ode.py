"""GradBench's ``ode`` eval: ``s`` Runge-Kutta 4 steps of a linear chain ODE, and the
gradient of the last component of the solution with respect to the coefficients.

``y_0' = x_0`` and ``y_i' = x_i y_{i-1}``, from ``y(0) = 0`` to ``t = 2``.
"""

import numpy as np

import fgrad
import fgrad.numpy as fnp
from fgrad import lax

from benchmarks.gradbench.tool import timed


def rhs(x, y):
    return x * fnp.concatenate([fnp.ones(1), y[:-1]])


def solve(x, s):
    h = 2.0 / s

    def step(_, y):
        k1 = rhs(x, y)
        k2 = rhs(x, y + h / 2 * k1)
        k3 = rhs(x, y + h / 2 * k2)
        k4 = rhs(x, y + h * k3)
        return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

    return lax.fori_loop(0, s, step, fnp.zeros_like(x))


def last(x, s):
    return solve(x, s)[-1]


def _prepare(raw):
    return np.asarray(raw["x"], dtype=np.float64), raw["s"]


_primal = fgrad.jit(solve, static_argnums=1, compile="sync")
_gradient = fgrad.jit(fgrad.grad(last), static_argnums=1, compile="sync")

primal = timed(prepare=_prepare, output=lambda y: y.tolist())(lambda args: _primal(*args))
gradient = timed(prepare=_prepare, output=lambda g: g.tolist())(lambda args: _gradient(*args))
