"""GradBench's ``saddle`` eval: a saddle point by nested gradient descent.

``min_p max_q f(p, q)`` for ``f = (x1^2 + y1^2) - (x2^2 + y2^2)`` with
``p = (x1, y1)`` and ``q = (x2, y2)``: the outer
descent differentiates a cost that itself runs the inner ascent, in forward or
reverse mode each (``ff``, ``fr``, ``rf``, ``rr``: outer mode, inner mode).
"""

import numpy as np

import fgrad.numpy as fnp

from benchmarks.gradbench.evals.optimize import argmax, argmin, forward_gradient, reverse_gradient
from benchmarks.gradbench.tool import timed


def f(p, q):
    return (p[0] ** 2 + p[1] ** 2) - (q[0] ** 2 + q[1] ** 2)


def saddle(start, outer, inner):
    def worst_case(p):
        q = argmax(lambda q: f(p, q), inner, start)
        return f(p, q)

    p = argmin(worst_case, outer, start)
    q = argmax(lambda q: f(p, q), outer, start)
    return fnp.concatenate([p, q])


def _prepare(raw):
    return np.asarray(raw["start"], dtype=np.float64)


_MODES = {"f": forward_gradient, "r": reverse_gradient}


def _variant(name):
    outer, inner = _MODES[name[0]], _MODES[name[1]]
    return timed(prepare=_prepare, output=lambda r: np.asarray(r).tolist())(
        lambda start: saddle(start, outer, inner))


ff, fr, rf, rr = (_variant(name) for name in ("ff", "fr", "rf", "rr"))
