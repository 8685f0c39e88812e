"""GradBench's ``saddle`` eval: a saddle point by nested gradient descent.

``min_p max_q f(p, q)`` for ``f = (x1^2 + y1^2) - (x2^2 + y2^2)`` with
``p = (x1, y1)`` and ``q = (x2, y2)``: the outer
descent differentiates a cost that itself runs the inner ascent, in forward or
reverse mode each (``ff``, ``fr``, ``rf``, ``rr``: outer mode, inner mode).

With the outer descent in forward mode, the whole of it is one ``jit``: the
descents are staged (``control=lax``: see `optimize`) and compiled into one
program at the first call.  Reverse mode through a staged loop is not defined,
so ``rf`` and ``rr`` run their descents as Python loops on values.
"""

import numpy as np

import fgrad
import fgrad.numpy as fnp
from fgrad import lax

from benchmarks.gradbench.evals.optimize import (
    EAGER, argmax, argmin, forward_gradient, reverse_gradient)
from benchmarks.gradbench.tool import timed


def f(p, q):
    return (p[0] ** 2 + p[1] ** 2) - (q[0] ** 2 + q[1] ** 2)


def saddle(start, outer, inner, control=EAGER):
    def worst_case(p):
        q = argmax(lambda q: f(p, q), inner, start, control)
        return f(p, q)

    p = argmin(worst_case, outer, start, control)
    q = argmax(lambda q: f(p, q), outer, start, control)
    return fnp.concatenate([p, q])


def _prepare(raw):
    return np.asarray(raw["start"], dtype=np.float64)


_MODES = {"f": forward_gradient, "r": reverse_gradient}


def _variant(name):
    outer, inner = _MODES[name[0]], _MODES[name[1]]
    if outer is forward_gradient:
        run = fgrad.jit(lambda start: saddle(start, outer, inner, lax), compile="sync")
    else:
        def run(start):
            return saddle(start, outer, inner)
    return timed(prepare=_prepare, output=lambda r: np.asarray(r).tolist())(run)


ff, fr, rf, rr = (_variant(name) for name in ("ff", "fr", "rf", "rr"))
