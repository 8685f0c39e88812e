"""GradBench's ``particle`` eval: steer a charged particle to the origin.

A particle starts at (0, 8) with velocity (0.75, 0) and moves by Euler steps of
0.1 under the force ``-grad_x p(x; w)`` of two unit charges at (10, 10 - w) and
(10, 0) until it crosses the x axis; the control ``w`` minimises the square of
where it crosses, by gradient descent.  Both the force and the descent are
derivatives, in forward or reverse mode each (``ff``, ``fr``, ``rf``, ``rr``:
the descent's mode, then the force's).

With the descent in forward mode, the whole of it is one ``jit``: the flight
and the descent are staged loops (``control=lax``: see `optimize`), compiled
into one program at the first call.  Reverse mode through a staged loop is not
defined, so ``rf`` and ``rr`` run them as Python loops on values.
"""

import numpy as np

import fgrad
import fgrad.numpy as fnp
from fgrad import lax

from benchmarks.gradbench.evals.optimize import (
    EAGER, argmin, forward_gradient, reverse_gradient)
from benchmarks.gradbench.tool import timed

DT = 0.1


def miss_distance(w, force_gradient, control=EAGER):
    """Where the particle crosses the x axis, squared, for control ``w`` (shape (1,))."""
    charges = [fnp.stack([10.0, 10.0 - w[0]]), fnp.array([10.0, 0.0])]

    def potential(x):
        return sum(1 / fnp.sqrt(fnp.sum((x - charge) ** 2)) for charge in charges)

    def flying(state):
        x, velocity = state
        return (x + DT * velocity)[1] > 0

    def step(state):
        x, velocity = state
        acceleration = -force_gradient(potential, x)
        return x + DT * velocity, velocity + DT * acceleration

    start = (fnp.array([0.0, 8.0]), fnp.array([0.75, 0.0]))
    x, velocity = control.while_loop(flying, step, start)
    dt_final = -x[1] / velocity[1]
    return (x[0] + dt_final * velocity[0]) ** 2


def particle(w0, outer, inner, control=EAGER):
    return argmin(lambda w: miss_distance(w, inner, control), outer, w0, control)[0]


def _prepare(raw):
    return np.array([float(raw["w"])])


_MODES = {"f": forward_gradient, "r": reverse_gradient}


def _variant(name):
    outer, inner = _MODES[name[0]], _MODES[name[1]]
    if outer is forward_gradient:
        run = fgrad.jit(lambda w0: particle(w0, outer, inner, lax), compile="sync")
    else:
        def run(w0):
            return particle(w0, outer, inner)
    return timed(prepare=_prepare, output=float)(run)


ff, fr, rf, rr = (_variant(name) for name in ("ff", "fr", "rf", "rr"))
