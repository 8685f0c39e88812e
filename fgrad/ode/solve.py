"""`solve`: diffrax's ``diffeqsolve`` for fgrad, with its arguments.

>>> import numpy as np, fgrad.ode
>>> sol = fgrad.ode.solve(lambda t, y, k: {"a": -k * y["a"]}, fgrad.ode.Tsit5(), 0.0, 2.0, 0.1,
...                       {"a": np.ones(2)}, 0.5, saveat=fgrad.ode.SaveAt(ts=[1.0, 2.0]),
...                       stepsize_controller=fgrad.ode.PIDController(rtol=1e-8, atol=1e-8))
>>> np.round(sol.ys["a"][:, 0], 6), int(sol.result)
(array([0.606531, 0.367879]), 0)
"""
import numpy as np

from fgrad import numpy as fnp
from fgrad.core.trace import known_value
from fgrad.errors import OdeArgumentError
from fgrad.ode.adjoint import (
    BacksolveAdjoint,
    DirectAdjoint,
    RecursiveCheckpointAdjoint,
    solve_at_times,
    solve_checkpointed,
    staged,
)
from fgrad.ode.controllers import ConstantStepSize
from fgrad.ode.integrate import evaluate_steps, integrate
from fgrad.ode.status import RESULTS, raise_if_failed
from fgrad.transforms.vmap import vmap
from fgrad.tree import tree_map

__all__ = ["solve", "ODETerm", "SaveAt", "Solution"]


class ODETerm:
    """The vector field ``dy/dt = vector_field(t, y, args)`` (diffrax's name);
    `solve` takes the function itself too."""

    def __init__(self, vector_field):
        self.vector_field = vector_field


class SaveAt:
    """Where `solve` saves the solution: at ``t0``, at ``t1`` and at the times
    ``ts`` (between ``t0`` and ``t1``, in the direction of the solve); with
    ``dense=True`` it keeps every step, so that ``Solution.evaluate(t)``
    gives the solution at any ``t`` by the solver's interpolant.

    >>> import fgrad.ode
    >>> fgrad.ode.SaveAt(t0=True, ts=[0.5])
    SaveAt(t0=True, t1=False, ts=[0.5], dense=False)
    """

    def __init__(self, *, t0=False, t1=False, ts=None, dense=False):
        if not (t0 or t1 or ts is not None or dense):
            raise OdeArgumentError("SaveAt saves nothing: pass t0=True, t1=True, ts=[...] or "
                                   "dense=True.")
        self.t0, self.t1, self.ts, self.dense = bool(t0), bool(t1), ts, bool(dense)

    def __repr__(self):
        return f"SaveAt(t0={self.t0}, t1={self.t1}, ts={self.ts!r}, dense={self.dense})"


class Solution:
    """What `solve` returns: ``ts`` (the save times), ``ys`` (the solution
    there: ``y0``'s pytree with a leading time axis; both None if only
    ``SaveAt(dense=True)`` was asked), ``stats`` (step counts), ``result`` (a
    `RESULTS` code, 0 for success: read it with ``throw=False``), ``t0``,
    ``t1``, and `evaluate` with ``SaveAt(dense=True)``."""

    def __init__(self, ts, ys, stats, result, t0, t1, interpolation=None):
        self.ts, self.ys, self.stats, self.result, self.t0, self.t1 = ts, ys, stats, result, \
            t0, t1
        self.interpolation = interpolation

    def evaluate(self, t0, t1=None):
        """The solution at time ``t0`` (a scalar or a 1-d array of times: a
        leading axis), or ``y(t1) - y(t0)`` given ``t1``, by the solver's
        interpolant on the step that holds it, as diffrax's; needs
        ``SaveAt(dense=True)``.

        >>> import numpy as np, fgrad.ode
        >>> sol = fgrad.ode.solve(lambda t, y, a: -y, fgrad.ode.Tsit5(), 0.0, 2.0, None,
        ...                       np.ones(1), saveat=fgrad.ode.SaveAt(dense=True),
        ...                       stepsize_controller=fgrad.ode.PIDController(1e-10, 1e-10))
        >>> bool(np.allclose(sol.evaluate(np.array([0.5, 1.5]))[:, 0], np.exp([-0.5, -1.5])))
        True
        >>> float(np.round(sol.evaluate(0.5, 1.5)[0], 8))          # y(1.5) - y(0.5)
        -0.3834005
        """
        if self.interpolation is None:
            raise OdeArgumentError("Solution.evaluate needs the steps: solve with "
                                   "saveat=SaveAt(dense=True).")
        if t1 is not None:
            return tree_map(fnp.subtract, self.evaluate(t1), self.evaluate(t0))
        solver, steps, count, direction = self.interpolation
        t0 = fnp.asarray(t0, dtype=float)

        def at(time):
            return evaluate_steps(solver, steps, count, direction * time)
        if fnp.ndim(t0) == 0:
            return at(t0)
        if fnp.ndim(t0) != 1:
            raise OdeArgumentError(f"Solution.evaluate takes a time or a 1-d array of times, "
                                   f"got shape {fnp.shape(t0)}.")
        return vmap(at)(t0)

    @property
    def message(self):
        """The result as words (outside jit)."""
        return RESULTS.message(self.result)

    def __repr__(self):
        return f"Solution(ts={self.ts!r}, result={self.result!r}, stats={self.stats!r})"


def _save_times(saveat, t0, t1):
    parts = []
    if saveat.t0:
        parts.append(fnp.reshape(t0, (1,)))
    if saveat.ts is not None:
        ts = fnp.asarray(saveat.ts, dtype=float)
        if fnp.ndim(ts) != 1:
            raise OdeArgumentError(f"SaveAt(ts=...) must be 1-d, got shape {fnp.shape(ts)}.")
        parts.append(ts)
    if saveat.t1:
        parts.append(fnp.reshape(t1, (1,)))
    if not parts:                       # dense output only
        return fnp.zeros((0,))
    return parts[0] if len(parts) == 1 else fnp.concatenate(parts)


def _check_times(ts, t0, t1):
    """Refuse output times out of order or outside ``[t0, t1]``, where known."""
    ts, t0, t1 = known_value(ts), known_value(t0), known_value(t1)
    if ts is None or t0 is None or t1 is None:
        return
    ts, lo, hi = np.asarray(ts, dtype=float), min(float(t0), float(t1)), max(float(t0),
                                                                              float(t1))
    direction = 1.0 if float(t1) >= float(t0) else -1.0
    if np.any(np.diff(ts) * direction < 0):
        raise OdeArgumentError(f"SaveAt(ts=...) must run from t0 to t1 in order, got {ts}.")
    if ts.size and (ts.min() < lo or ts.max() > hi):
        raise OdeArgumentError(f"SaveAt(ts=...) must lie in [{lo}, {hi}] (between t0 and "
                               f"t1), got {ts}.")


def _direction(t0, t1):
    """+1.0 where t1 >= t0 is known (no time change needed), else a value."""
    a, b = known_value(t0), known_value(t1)
    if a is not None and b is not None:
        return 1.0 if float(b) >= float(a) else -1.0
    return fnp.where(t1 >= t0, 1.0, -1.0)


def solve(terms, solver, t0, t1, dt0, y0, args=None, *, saveat=None,
          stepsize_controller=None, adjoint=None, max_steps=4096, throw=True):
    """Solve ``dy/dt = f(t, y, args)`` from ``y(t0) = y0`` to ``t1``, in the
    caller's graph (diffrax's ``diffeqsolve``, same argument order).

    ``terms``: the vector field ``f(t, y, args)`` or an `ODETerm`; ``y0`` and
    ``args`` any pytrees. ``solver``: `Tsit5`, `Dopri5`, `Dopri8`, `Heun`,
    `Midpoint`, `Euler`, `RK4`; `Kvaerno5`, `Kvaerno3` for stiff problems.
    ``dt0``: the first step (None: chosen from the problem by the adaptive
    controller); negative when ``t1 < t0``.
    ``saveat``: `SaveAt` (default: ``t1`` only). ``stepsize_controller``:
    `ConstantStepSize` (the default, as diffrax) or `PIDController`.
    ``adjoint``: `DirectAdjoint` (default: every mode; reverse mode under
    jit or vmap replays from checkpoints), `RecursiveCheckpointAdjoint`
    (bounded memory) or `BacksolveAdjoint` (the continuous adjoint).
    ``max_steps``: kept and rejected steps in all. ``throw``: raise
    `fgrad.errors.IntegrationError` on failure (at run time under jit),
    else report it in ``Solution.result``.

    >>> import numpy as np, fgrad.ode
    >>> sol = fgrad.ode.solve(lambda t, y, args: -y, fgrad.ode.Dopri5(), 0.0, 1.0, None,
    ...                       np.array([1.0]), stepsize_controller=fgrad.ode.PIDController(
    ...                           rtol=1e-8, atol=1e-8))
    >>> float(np.round(sol.ys[0, 0], 8)), sol.ts
    (0.36787944, array([1.]))
    """
    fun = terms.vector_field if isinstance(terms, ODETerm) else terms
    saveat = SaveAt(t1=True) if saveat is None else saveat
    controller = ConstantStepSize() if stepsize_controller is None else stepsize_controller
    adjoint = DirectAdjoint() if adjoint is None else adjoint
    t0 = fnp.asarray(t0, dtype=float)
    t1 = fnp.asarray(t1, dtype=float)
    ts = _save_times(saveat, t0, t1)
    _check_times(ts, t0, t1)
    direction = _direction(t0, t1)
    if direction == 1.0:
        field, tau0, tau1, taus, dtau0 = fun, t0, t1, ts, dt0
    else:
        def field(tau, y, args):
            return tree_map(lambda v: direction * v, fun(direction * tau, y, args))
        tau0, tau1, taus = direction * t0, direction * t1, direction * ts
        dtau0 = None if dt0 is None else direction * dt0
    if saveat.dense:
        if not isinstance(adjoint, DirectAdjoint):
            raise OdeArgumentError(f"SaveAt(dense=True) keeps every step, which {adjoint!r} "
                                   "does not: use DirectAdjoint() (the default).")
        if max_steps is None:
            raise OdeArgumentError("SaveAt(dense=True) needs a finite max_steps (the steps "
                                   "are kept in arrays of that length).")
    if isinstance(adjoint, BacksolveAdjoint):
        if not throw:
            raise OdeArgumentError("BacksolveAdjoint raises on a failed solve (its reverse "
                                   "pass needs a solution): use throw=True, or "
                                   "DirectAdjoint for throw=False.")
        times = fnp.concatenate([fnp.reshape(tau0, (1,)), taus])
        ys = solve_at_times(field, solver, controller, y0, times, args, max_steps=max_steps,
                            what="fgrad.ode.solve")
        ys = tree_map(lambda y: y[1:], ys)
        n = fnp.asarray(-1)                # the step counts are not kept
        stats = {"num_steps": n, "num_accepted_steps": n, "num_rejected_steps": n,
                 "max_steps": max_steps}
        return Solution(ts, ys, stats, fnp.asarray(RESULTS.SUCCESSFUL), t0, t1)
    if isinstance(adjoint, DirectAdjoint) and max_steps is not None and not saveat.dense \
            and staged((y0, args, t0, t1, ts)):
        adjoint = RecursiveCheckpointAdjoint()
    if isinstance(adjoint, RecursiveCheckpointAdjoint):
        ys, stats, status, t_reached = solve_checkpointed(
            field, solver, controller, tau0, tau1, y0, args, taus, dtau0, max_steps,
            adjoint.checkpoints, throw, "fgrad.ode.solve")
        return Solution(ts, ys, stats, status, t0, t1)
    if not isinstance(adjoint, DirectAdjoint):
        raise OdeArgumentError(f"solve: adjoint must be DirectAdjoint(), "
                               f"RecursiveCheckpointAdjoint() or BacksolveAdjoint(), got "
                               f"{adjoint!r}.")
    ys, _, stats, status, t_reached, steps = integrate(
        field, solver, controller, tau0, tau1, y0, args, taus, dtau0, max_steps,
        keep_steps=saveat.dense)
    if throw:
        raise_if_failed(status, direction * t_reached, "fgrad.ode.solve")
    interpolation = None
    if saveat.dense:
        interpolation = (solver, steps, stats["num_accepted_steps"], direction)
        if fnp.shape(ts)[0] == 0:
            ts = ys = None
    return Solution(ts, ys, stats, status, t0, t1, interpolation)
