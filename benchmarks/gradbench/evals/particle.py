"""GradBench's ``particle`` eval: steer a charged particle to the origin.

A particle starts at (0, 8) with velocity (0.75, 0) and moves by Euler steps of
0.1 under the force ``-grad_x p(x; w)`` of two unit charges at (10, 10 - w) and
(10, 0) until it crosses the x axis; the control ``w`` minimises the square of
where it crosses, by gradient descent.  Both the force and the descent are
derivatives, in forward or reverse mode each (``ff``, ``fr``, ``rf``, ``rr``:
the descent's mode, then the force's).
"""

import numpy as np

import fgrad.numpy as fnp

from benchmarks.gradbench.evals.optimize import argmin, forward_gradient, reverse_gradient
from benchmarks.gradbench.tool import timed

DT = 0.1


def miss_distance(w, force_gradient):
    """Where the particle crosses the x axis, squared, for control ``w`` (shape (1,))."""
    charges = [fnp.stack([10.0, 10.0 - w[0]]), fnp.array([10.0, 0.0])]

    def potential(x):
        return sum(1 / fnp.sqrt(fnp.sum((x - charge) ** 2)) for charge in charges)

    x, velocity = fnp.array([0.0, 8.0]), fnp.array([0.75, 0.0])
    while True:
        acceleration = -force_gradient(potential, x)
        x_new = x + DT * velocity
        if not x_new[1] > 0:
            break
        x, velocity = x_new, velocity + DT * acceleration
    dt_final = -x[1] / velocity[1]
    return (x[0] + dt_final * velocity[0]) ** 2


def particle(w0, outer, inner):
    return argmin(lambda w: miss_distance(w, inner), outer, w0)[0]


def _prepare(raw):
    return np.array([float(raw["w"])])


_MODES = {"f": forward_gradient, "r": reverse_gradient}


def _variant(name):
    outer, inner = _MODES[name[0]], _MODES[name[1]]
    return timed(prepare=_prepare, output=float)(lambda w0: particle(w0, outer, inner))


ff, fr, rf, rr = (_variant(name) for name in ("ff", "fr", "rf", "rr"))
