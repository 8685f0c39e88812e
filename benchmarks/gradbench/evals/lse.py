"""GradBench's ``lse`` eval: log-sum-exp written from max, exp and sum, and its gradient."""

import numpy as np

import fgrad
import fgrad.numpy as fnp

from benchmarks.gradbench.tool import timed


def logsumexp(x):
    top = fnp.max(x)
    return top + fnp.log(fnp.sum(fnp.exp(x - top)))


def _x(raw):
    return np.asarray(raw["x"], dtype=np.float64)


_primal = fgrad.jit(logsumexp)
_gradient = fgrad.jit(fgrad.grad(logsumexp))

primal = timed(prepare=_x, output=float)(_primal)
gradient = timed(prepare=_x, output=lambda g: g.tolist())(_gradient)
