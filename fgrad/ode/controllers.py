"""Step-size controllers: a constant step, and diffrax's PID controller.

A controller proposes the first step (`init`) and, after each step, says
whether to keep it and how long the next one should be (`adapt`), from the
step's error estimate. Everything is written with `fgrad.numpy` on scalars,
so it stages into the solver's loop.

>>> import fgrad.ode
>>> fgrad.ode.PIDController(rtol=1e-6, atol=1e-9, pcoeff=0.3, icoeff=0.4)
PIDController(rtol=1e-06, atol=1e-09, pcoeff=0.3, icoeff=0.4, dcoeff=0.0)
"""
import numpy as np

from fgrad import numpy as fnp
from fgrad.errors import OdeArgumentError
from fgrad.lax import stop_gradient
from fgrad.tree import tree_leaves, tree_map

__all__ = ["ConstantStepSize", "PIDController", "rms_norm", "max_norm"]


def rms_norm(tree):
    """The root mean square over every entry of a pytree (diffrax's default)."""
    leaves = tree_leaves(tree)
    size = sum(int(np.prod(fnp.shape(x))) for x in leaves)
    if size == 0:
        return fnp.asarray(0.0)
    return fnp.sqrt(sum(fnp.sum(x * x) for x in leaves) / size)


def max_norm(tree):
    """The largest absolute entry of a pytree."""
    return fnp.max(fnp.stack([fnp.max(fnp.abs(x)) for x in tree_leaves(tree)]))


def _l2_norm(tree):
    return fnp.sqrt(sum(fnp.sum(x * x) for x in tree_leaves(tree)))


def initial_step(fun, t0, y0, f0, args, exponent, rtol, atol, norm):
    """Hairer, Norsett and Wanner's first step (Solving ODEs I, II.4): a step
    whose explicit Euler error would be about the tolerance, ``exponent`` being
    one over the error estimate's order."""
    scale = tree_map(lambda y: atol + rtol * fnp.abs(y), y0)
    d0 = norm(tree_map(fnp.divide, y0, scale))
    d1 = norm(tree_map(fnp.divide, f0, scale))
    small = fnp.logical_or(d0 < 1e-5, d1 < 1e-5)
    h0 = fnp.where(small, 1e-6, 0.01 * d0 / fnp.where(small, 1.0, d1))
    y1 = tree_map(lambda y, f: y + h0 * f, y0, f0)
    f1 = fun(t0 + h0, y1, args)
    d2 = norm(tree_map(lambda a, b, s: (a - b) / s, f1, f0, scale)) / h0
    d12 = fnp.maximum(d1, d2)
    tiny = d12 <= 1e-15
    h1 = fnp.where(tiny, fnp.maximum(1e-6, h0 * 1e-3),
                   (0.01 / fnp.where(tiny, 1.0, d12)) ** exponent)
    return stop_gradient(fnp.minimum(100.0 * h0, h1))


class ConstantStepSize:
    """Every step ``dt0`` long (the last one shortened to end at ``t1``).

    >>> import numpy as np, fgrad.ode
    >>> sol = fgrad.ode.solve(lambda t, y, a: -y, fgrad.ode.Euler(), 0.0, 1.0, 0.25,
    ...                       np.ones(1), stepsize_controller=fgrad.ode.ConstantStepSize())
    >>> int(sol.stats["num_steps"])
    4
    """
    adaptive = False

    def init(self, fun, t0, y0, f0, args, dt0, solver):
        if dt0 is None:
            raise OdeArgumentError("ConstantStepSize needs a step: pass dt0.")
        return fnp.asarray(dt0, dtype=float), ()

    def adapt(self, solver, y0, y1, err, dt, state):
        """(keep the step, the next step, the new state, the error ratio)."""
        return fnp.asarray(True), dt, state, fnp.asarray(0.0)

    def __repr__(self):
        return "ConstantStepSize()"


class PIDController:
    """Adaptive steps, sized so that ``norm(error / (atol + rtol * |y|))``
    stays near one, with diffrax's PID control of the step size.

    The error is scaled entry by entry by ``atol + rtol * max(|y0|, |y1|)``
    and reduced by ``norm`` (root mean square by default); a step whose
    scaled error is at most 1 is kept. The next step is the last one times

        safety * r_n ** b1 * r_{n-1} ** b2 * r_{n-2} ** b3,

    ``r`` the inverse scaled errors of the last three kept steps, ``b1 =
    (p + i + d) / k``, ``b2 = -(p + 2d) / k``, ``b3 = d / k``, ``k`` the
    error estimate's order (the solver's order plus one, as diffrax), the
    factor clipped to ``[factormin, factormax]`` (at least 1 after a kept
    step). The default ``icoeff=1`` alone is the classical I controller;
    ``pcoeff=0.3, icoeff=0.4`` is a good PI controller for mildly stiff
    problems. ``dtmin``/``dtmax`` bound the step; a step driven under
    ``dtmin`` is taken at ``dtmin`` (``force_dtmin=True``) or stops the
    solve with a status (``False``).

    >>> import numpy as np, fgrad.ode
    >>> sol = fgrad.ode.solve(lambda t, y, a: -y, fgrad.ode.Tsit5(), 0.0, 1.0, 0.1,
    ...                       np.ones(1), stepsize_controller=fgrad.ode.PIDController(
    ...                           rtol=1e-8, atol=1e-8))
    >>> float(abs(sol.ys[0, 0] - np.exp(-1.0))) < 1e-8
    True
    """
    adaptive = True

    def __init__(self, rtol, atol, pcoeff=0.0, icoeff=1.0, dcoeff=0.0, dtmin=None,
                 dtmax=None, force_dtmin=True, factormin=0.2, factormax=10.0,
                 norm=rms_norm, safety=0.9, error_order=None):
        self.rtol, self.atol = float(rtol), float(atol)
        self.pcoeff, self.icoeff, self.dcoeff = float(pcoeff), float(icoeff), float(dcoeff)
        self.dtmin, self.dtmax, self.force_dtmin = dtmin, dtmax, force_dtmin
        self.factormin, self.factormax = float(factormin), float(factormax)
        self.norm, self.safety, self.error_order = norm, float(safety), error_order
        if self.rtol < 0 or self.atol < 0 or self.rtol + self.atol == 0:
            raise OdeArgumentError(f"PIDController: rtol={rtol} and atol={atol} must be "
                                   "non-negative and not both zero.")

    def _order(self, solver):
        return solver.order + 1 if self.error_order is None else self.error_order

    def init(self, fun, t0, y0, f0, args, dt0, solver):
        if not solver.adaptive:
            raise OdeArgumentError(
                f"{solver!r} has no error estimate, so PIDController cannot size its "
                "steps: use stepsize_controller=ConstantStepSize() with a dt0, or an "
                "adaptive solver (Tsit5, Dopri5, Heun).")
        if dt0 is None:
            dt = initial_step(fun, t0, y0, f0, args, 1.0 / self._order(solver),
                              self.rtol, self.atol, self.norm)
        else:
            dt = fnp.asarray(dt0, dtype=float)
        dt = self._clip(dt)
        return dt, (fnp.asarray(1.0), fnp.asarray(1.0))

    def _clip(self, dt):
        if self.dtmax is not None:
            dt = fnp.minimum(dt, self.dtmax)
        if self.dtmin is not None and self.force_dtmin:
            dt = fnp.maximum(dt, self.dtmin)
        return dt

    def scaled_error(self, y0, y1, err):
        """``norm(err / (atol + rtol * max(|y0|, |y1|)))``."""
        return self.norm(tree_map(
            lambda a, b, e: e / (self.atol + self.rtol * fnp.maximum(fnp.abs(a), fnp.abs(b))),
            y0, y1, err))

    def adapt(self, solver, y0, y1, err, dt, state):
        """(keep the step, the next step, the new state, the scaled error)."""
        prev, prev_prev = state
        inv_order = 1.0 / self._order(solver)
        ratio = stop_gradient(self.scaled_error(y0, y1, err))
        keep = ratio <= 1.0
        if self.dtmin is not None and self.force_dtmin:
            keep = fnp.logical_or(keep, dt <= self.dtmin)
        finite = fnp.isfinite(ratio)
        # a zero or non-finite error leaves the controller's memory as it was
        usable = fnp.logical_and(finite, ratio > 0)
        inv = fnp.where(usable, 1.0 / fnp.where(usable, ratio, 1.0), 0.0)
        b1 = (self.pcoeff + self.icoeff + self.dcoeff) * inv_order
        b2 = -(self.pcoeff + 2.0 * self.dcoeff) * inv_order
        b3 = self.dcoeff * inv_order
        factor = self.safety * inv ** b1
        if b2 != 0:
            factor = factor * prev ** b2
        if b3 != 0:
            factor = factor * prev_prev ** b3
        factor = fnp.where(ratio == 0, self.factormax, factor)
        factor = fnp.clip(factor, fnp.where(keep, 1.0, self.factormin), self.factormax)
        dt_next = self._clip(dt * factor)
        remember = fnp.logical_and(keep, usable)
        state = (fnp.where(remember, inv, prev), fnp.where(remember, prev, prev_prev))
        return keep, dt_next, state, ratio

    def __repr__(self):
        return (f"PIDController(rtol={self.rtol}, atol={self.atol}, pcoeff={self.pcoeff}, "
                f"icoeff={self.icoeff}, dcoeff={self.dcoeff})")


class JaxOdeintController(PIDController):
    """`jax.experimental.ode.odeint`'s controller: an I controller with error
    exponent 1/5, safety 0.9, growth at most 10, shrinking at most 0.2 after a
    rejected step (none after a kept one), steps at most ``hmax``."""

    def __init__(self, rtol, atol, hmax):
        super().__init__(rtol, atol, error_order=5.0,
                         dtmax=None if not np.isfinite(hmax) else float(hmax))

    def init(self, fun, t0, y0, f0, args, dt0, solver):
        dt = initial_step(fun, t0, y0, f0, args, 1.0 / 5.0, self.rtol, self.atol, _l2_norm)
        return self._clip(dt), ()

    def adapt(self, solver, y0, y1, err, dt, state):
        ratio = stop_gradient(self.scaled_error(y0, y1, err))
        keep = ratio <= 1.0
        shrink = fnp.where(keep, 1.0, 0.2)
        inv = 1.0 / fnp.where(ratio > 0, ratio, 1.0)
        factor = fnp.minimum(10.0, fnp.maximum(0.9 * inv ** 0.2, shrink))
        factor = fnp.where(ratio == 0, 10.0, factor)
        factor = fnp.where(fnp.isfinite(ratio), factor, 0.2)
        return keep, self._clip(dt * factor), state, ratio
