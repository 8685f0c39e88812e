"""The adaptive step loop: one `fgrad.lax.while_loop` over steps, saving the
solution at requested times by the solver's dense output.

The loop's carry is the time, the state, the derivative there (reused by the
next step: every solver here evaluates it at the step's end), the proposed
step, the controller's memory, the output buffers and the counters. One
iteration takes one step of ``min(dt, t1 - t)``, asks the controller whether
to keep it, and if kept fills every output time the step passed with the
interpolant, in an inner `while_loop`. Eager, the loop runs as Python (and
reverse mode records its operations); under `jit` it is one ``while_loop``
equation of the caller's graph, compiled with it; under `vmap` each example
steps on its own, finished ones frozen.

The loop runs forward in time (``t0 <= t1``); `fgrad.ode.solve` maps a
backward solve onto a forward one.
"""
from typing import NamedTuple

from fgrad import numpy as fnp
from fgrad.lax import dynamic_index_in_dim, dynamic_update_index_in_dim, while_loop
from fgrad.ode.status import RESULTS
from fgrad.tree import tree_leaves, tree_map

__all__ = ["integrate"]


def _all_finite(tree):
    leaves = tree_leaves(tree)
    ok = fnp.all(fnp.isfinite(leaves[0]))
    for x in leaves[1:]:
        ok = fnp.logical_and(ok, fnp.all(fnp.isfinite(x)))
    return ok


def _select(pred, new, old):
    return tree_map(lambda a, b: fnp.where(pred, a, b), new, old)


def _buffers(y0, ts, t0):
    """Output buffers: ``y0`` at the times at or before ``t0``, inf at the rest
    (as diffrax, what an unreached output time keeps if the solve stops)."""
    before = ts <= t0

    def leaf(y):
        shape = fnp.shape(y)
        mask = fnp.reshape(before, fnp.shape(ts) + (1,) * len(shape))
        return fnp.where(mask, y, fnp.inf)
    return tree_map(leaf, y0), fnp.sum(before.astype(int))


class Problem(NamedTuple):
    """What every step of one solve reads: ``dy/dt = fun(t, y, args)`` up to
    ``t1``, saved at the sorted times ``ts``."""
    fun: object
    solver: object
    controller: object
    t1: object
    ts: object
    args: object


class Attempt(NamedTuple):
    """One step tried from ``(t, y, f)``: kept or not, its size ``h``, its end
    and the stages its dense output reads."""
    keep: object
    finite: object
    t: object
    h: object
    t_new: object
    y: object
    y1: object
    f: object
    f1: object
    ks: object


def start(problem, t0, y0, dt0):
    """The loop's differentiable state ``(t, y, f, dt, controller memory)``
    at ``t0``."""
    f0 = problem.fun(t0, y0, problem.args)
    dt, ctrl = problem.controller.init(problem.fun, t0, y0, f0, problem.args, dt0,
                                       problem.solver)
    return (t0, y0, f0, dt, ctrl)


def attempt(problem, state):
    """One step of ``min(dt, t1 - t)`` from ``state``: the next state (the
    same place with a shorter step if the step is rejected) and the `Attempt`."""
    fun, solver, controller, t1, _, args = problem
    t, y, f, dt, ctrl = state
    last = dt >= t1 - t
    h = fnp.where(last, t1 - t, dt)
    t_new = fnp.where(last, t1, t + h)
    y1, f1, err, ks = solver.step(fun, t, y, f, h, args)
    keep, dt_next, ctrl_next, _ = controller.adapt(solver, y, y1, err, h, ctrl)
    finite = fnp.logical_and(_all_finite(y1), _all_finite(f1))
    keep = fnp.logical_and(keep, finite)
    # a step into NaN or inf is rejected; an adaptive solve retries shorter
    dt_next = fnp.where(finite, dt_next, 0.2 * h)
    state = (fnp.where(keep, t_new, t), _select(keep, y1, y), _select(keep, f1, f), dt_next,
             ctrl_next)
    return state, Attempt(keep, finite, t, h, t_new, y, y1, f, f1, ks)


def saved_through(problem, step, idx):
    """How many output times are filled once ``step`` is done: those up to its
    end if it is kept (the times are sorted)."""
    passed = fnp.sum((problem.ts <= step.t_new).astype(int))
    return fnp.where(step.keep, passed, idx)


def dense(problem, step, time):
    """The solution at ``time`` inside ``step``, by the solver's interpolant."""
    # h is 0 only for an example vmap keeps stepping after it finished
    theta = (time - step.t) / fnp.where(step.h > 0, step.h, 1.0)
    return problem.solver.interpolate(theta, step.h, step.y, step.y1, step.f, step.f1,
                                      step.ks)


def integrate(fun, solver, controller, t0, t1, y0, args, ts, dt0, max_steps,
              interval_steps=None, keep_steps=False):
    """Solve ``dy/dt = fun(t, y, args)`` from ``(t0, y0)`` to ``t1 >= t0``.

    Returns ``(ys, y1, stats, status, t_reached, steps)``: the solution at
    the sorted times ``ts`` (a leading axis on every leaf of ``y0``), at
    ``t1``, the step counts, a `RESULTS` code, the time the loop stopped at,
    and with ``keep_steps=True`` every kept step's `Attempt` (its fields with
    a leading axis of ``max_steps``, in order; None otherwise), which is what
    the dense output reads.
    ``max_steps`` bounds the steps (kept and rejected) in all;
    ``interval_steps`` (odeint's ``mxstep``), those between output times.
    """
    t0 = fnp.asarray(t0, dtype=float)
    problem = Problem(fun, solver, controller, fnp.asarray(t1, dtype=float),
                      fnp.asarray(ts, dtype=float), args)
    t1, ts = problem.t1, problem.ts
    state = start(problem, t0, y0, dt0)
    ys, idx = _buffers(y0, ts, t0)
    status = fnp.where(_all_finite(state[2]), RESULTS.SUCCESSFUL, RESULTS.NONFINITE)
    zero = fnp.asarray(0)
    steps = None
    if keep_steps:
        def rows(like):
            return tree_map(lambda v: fnp.zeros((max_steps,) + fnp.shape(v),
                                                fnp.asarray(v).dtype), like)
        no, time, f = fnp.asarray(False), fnp.zeros(()), state[2]
        # an unused step starts at +inf, so the steps stay sorted by start time
        steps = Attempt(*rows((no, no)), rows(time) + fnp.inf, *rows((time, time, y0, y0, f, f)),
                        rows([f] * (len(solver.a) + 1)))
    carry = (state, idx, ys, zero, zero, zero, status, steps)

    def keep_going(c):
        t, status = c[0][0], c[6]
        return fnp.logical_and(t < t1, status == RESULTS.SUCCESSFUL)

    def one_step(c):
        state, idx, ys, n, n_kept, n_since, status, steps = c
        state, step = attempt(problem, state)
        if steps is not None:
            steps = _record(steps, step, n_kept)
        idx_next = saved_through(problem, step, idx)

        def save(s):
            i, ys = s
            y_i = dense(problem, step, dynamic_index_in_dim(ts, i, keepdims=False))
            ys = tree_map(lambda buf, v: dynamic_update_index_in_dim(buf, v, i, 0), ys, y_i)
            return i + 1, ys
        if fnp.shape(ts)[0]:            # else dense output only: nothing to save
            _, ys = while_loop(lambda s: s[0] < idx_next, save, (idx, ys))
        n = n + 1
        n_kept = n_kept + step.keep.astype(int)
        n_since = fnp.where(idx_next > idx, 0, n_since + 1)
        status = _status(problem, step, state, n, n_since, max_steps, interval_steps)
        return state, idx_next, ys, n, n_kept, n_since, status, steps

    state, _, ys, n, n_kept, _, status, steps = while_loop(keep_going, one_step, carry)
    stats = {"num_steps": n, "num_accepted_steps": n_kept, "num_rejected_steps": n - n_kept,
             "max_steps": max_steps}
    return ys, state[1], stats, status, state[0], steps


def _record(steps, step, k):
    """``step`` written at row ``k`` of ``steps`` if it was kept."""
    def write(buf, v):
        old = dynamic_index_in_dim(buf, k, keepdims=False)
        return dynamic_update_index_in_dim(buf, fnp.where(step.keep, v, old), k, 0)
    return tree_map(write, steps, step)


def evaluate_steps(solver, steps, count, time):
    """The solution at ``time`` from the kept steps ``steps`` (``count`` of
    them, as `integrate` records them): the interpolant of the step that
    contains it (the first or last step's, outside them)."""
    i = fnp.sum((steps.t <= time).astype(int)) - 1
    i = fnp.clip(i, 0, fnp.maximum(count - 1, 0))
    step = tree_map(lambda buf: dynamic_index_in_dim(buf, i, keepdims=False), steps)
    theta = (time - step.t) / fnp.where(step.h > 0, step.h, 1.0)
    return solver.interpolate(theta, step.h, step.y, step.y1, step.f, step.f1, step.ks)


def _status(problem, step, state, n, n_since, max_steps, interval_steps):
    """What stops the loop after ``step``, first reason first (0: nothing)."""
    controller = problem.controller
    t, dt_next = step.t, state[3]
    stuck = fnp.logical_and(fnp.logical_not(step.keep), t + dt_next <= t)
    code = fnp.where(fnp.logical_and(stuck, fnp.logical_not(step.finite)), RESULTS.NONFINITE,
                     fnp.where(stuck, RESULTS.DT_UNDERFLOW, RESULTS.SUCCESSFUL))
    if not controller.adaptive:
        code = fnp.where(step.finite, code, RESULTS.NONFINITE)
    if getattr(controller, "dtmin", None) is not None and not controller.force_dtmin:
        code = fnp.where(fnp.logical_and(code == 0, dt_next < controller.dtmin),
                         RESULTS.DT_MIN_REACHED, code)
    unfinished = state[0] < problem.t1
    too_many = fnp.asarray(False) if max_steps is None else n >= max_steps
    if interval_steps is not None:
        too_many = fnp.logical_or(too_many, n_since >= interval_steps)
    stop = fnp.logical_and(code == 0, fnp.logical_and(unfinished, too_many))
    return fnp.where(stop, RESULTS.MAX_STEPS_REACHED, code)
