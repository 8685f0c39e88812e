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


def integrate(fun, solver, controller, t0, t1, y0, args, ts, dt0, max_steps,
              interval_steps=None):
    """Solve ``dy/dt = fun(t, y, args)`` from ``(t0, y0)`` to ``t1 >= t0``.

    Returns ``(ys, y1, stats, status, t_reached)``: the solution at the sorted
    times ``ts`` (a leading axis on every leaf of ``y0``), at ``t1``, the
    step counts, a `RESULTS` code and the time the loop stopped at.
    ``max_steps`` bounds the steps (kept and rejected) in all;
    ``interval_steps`` (odeint's ``mxstep``), those between output times.
    """
    t0 = fnp.asarray(t0, dtype=float)
    t1 = fnp.asarray(t1, dtype=float)
    ts = fnp.asarray(ts, dtype=float)
    m = fnp.shape(ts)[0]
    f0 = fun(t0, y0, args)
    dt, ctrl = controller.init(fun, t0, y0, f0, args, dt0, solver)
    ys, idx = _buffers(y0, ts, t0)
    status = fnp.where(_all_finite(f0), RESULTS.SUCCESSFUL, RESULTS.NONFINITE)
    zero = fnp.asarray(0)
    carry = (t0, y0, f0, dt, ctrl, idx, ys, zero, zero, zero, status)

    def keep_going(c):
        t, status = c[0], c[-1]
        return fnp.logical_and(t < t1, status == RESULTS.SUCCESSFUL)

    def one_step(c):
        t, y, f, dt, ctrl, idx, ys, n, n_kept, n_since, status = c
        last = dt >= t1 - t
        h = fnp.where(last, t1 - t, dt)
        t_new = fnp.where(last, t1, t + h)
        y1, f1, err, ks = solver.step(fun, t, y, f, h, args)
        keep, dt_next, ctrl_next, _ = controller.adapt(solver, y, y1, err, h, ctrl)
        finite = fnp.logical_and(_all_finite(y1), _all_finite(f1))
        keep = fnp.logical_and(keep, finite)
        # a step into NaN or inf is rejected; an adaptive solve retries shorter
        dt_next = fnp.where(finite, dt_next, 0.2 * h)

        def more_to_save(s):
            i = s[0]
            due = dynamic_index_in_dim(ts, i, keepdims=False) <= t_new
            return fnp.logical_and(fnp.logical_and(keep, i < m), due)

        def save(s):
            i, ys = s
            # h is 0 only for an example vmap keeps stepping after it finished
            theta = (dynamic_index_in_dim(ts, i, keepdims=False) - t) / fnp.where(h > 0, h, 1.0)
            y_i = solver.interpolate(theta, h, y, y1, f, f1, ks)
            ys = tree_map(lambda buf, v: dynamic_update_index_in_dim(buf, v, i, 0), ys, y_i)
            return i + 1, ys
        idx_next, ys = while_loop(more_to_save, save, (idx, ys))
        n = n + 1
        n_kept = n_kept + keep.astype(int)
        n_since = fnp.where(idx_next > idx, 0, n_since + 1)
        t_next = fnp.where(keep, t_new, t)
        # what stops the loop, first reason first
        stuck = fnp.logical_and(fnp.logical_not(keep), t + dt_next <= t)
        code = fnp.where(fnp.logical_and(stuck, fnp.logical_not(finite)), RESULTS.NONFINITE,
                         fnp.where(stuck, RESULTS.DT_UNDERFLOW, RESULTS.SUCCESSFUL))
        if not controller.adaptive:
            code = fnp.where(finite, code, RESULTS.NONFINITE)
        if getattr(controller, "dtmin", None) is not None and not controller.force_dtmin:
            code = fnp.where(fnp.logical_and(code == 0, dt_next < controller.dtmin),
                             RESULTS.DT_MIN_REACHED, code)
        unfinished = t_next < t1
        too_many = fnp.asarray(False) if max_steps is None else n >= max_steps
        if interval_steps is not None:
            too_many = fnp.logical_or(too_many, n_since >= interval_steps)
        stop = fnp.logical_and(code == 0, fnp.logical_and(unfinished, too_many))
        code = fnp.where(stop, RESULTS.MAX_STEPS_REACHED, code)
        return (t_next, _select(keep, y1, y), _select(keep, f1, f), dt_next, ctrl_next,
                idx_next, ys, n, n_kept, n_since, code)

    t, y1, _, _, _, _, ys, n, n_kept, _, status = while_loop(keep_going, one_step, carry)
    stats = {"num_steps": n, "num_accepted_steps": n_kept, "num_rejected_steps": n - n_kept,
             "max_steps": max_steps}
    return ys, y1, stats, status, t
