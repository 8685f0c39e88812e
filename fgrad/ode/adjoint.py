"""How a solve is differentiated in reverse mode: through its steps (as
recorded, or replayed from checkpoints), or by the continuous adjoint.

`DirectAdjoint` differentiates the solver's own operations: forward mode
(`jvp`, `jacfwd`) anywhere, reverse mode outside `jit` and `vmap` by
recording every step (the loop runs as Python), and inside them (where the
loop is one staged `while_loop`) by `RecursiveCheckpointAdjoint`'s replay;
second order in every mode. Its derivative is that of the discrete solution,
exact to rounding.

`BacksolveAdjoint` gives the solve a `custom_vjp`: the forward pass keeps only
the solution at the output times; the reverse pass integrates the adjoint
system backwards between them,

    dy/dtau = -f,   da/dtau = a^T df/dy,   dp_bar/dtau = a^T df/dp,   tau = -t,

re-solving ``y`` alongside (as `jax.experimental.ode.odeint`), and adds the
loss's cotangent at each output time. Memory is that of the outputs, whatever
the number of steps, and it runs under `jit`; its gradient is accurate to the
tolerances (not the discrete solution's exact derivative), and re-solving
``y`` backwards is unstable for strongly dissipative or stiff problems.
Reverse mode only (`jvp` of it raises, as JAX's odeint).
"""
import functools
import math

from fgrad import numpy as fnp
from fgrad.core.trace import Tracer, get_aval, is_float_dtype, trace_state
from fgrad.errors import OdeArgumentError
from fgrad.interpreters.batching import BatchTrace
from fgrad.lax import (
    cond,
    dynamic_index_in_dim,
    dynamic_update_index_in_dim,
    scan,
    while_loop,
)
from fgrad.ode.integrate import Problem, attempt, dense, integrate, saved_through, start
from fgrad.ode.status import raise_if_failed
from fgrad.transforms.custom import custom_jvp, custom_vjp
from fgrad.transforms.differentiation import jvp, vjp
from fgrad.transforms.vmap import vmap
from fgrad.tree import tree_flatten, tree_leaves, tree_map, tree_unflatten

__all__ = ["DirectAdjoint", "BacksolveAdjoint", "RecursiveCheckpointAdjoint", "solve_at_times",
           "solve_checkpointed", "staged"]


class DirectAdjoint:
    """Differentiate through the solver's steps (the default): every mode and
    order. Outside `jit` and `vmap` the step loop runs as Python and reverse
    mode records it; inside them (``jit(grad(...))``, ``grad(jit(...))``),
    where the loop is one staged `while_loop`, reverse mode replays the steps
    from checkpoints instead, as `RecursiveCheckpointAdjoint` (the same
    derivative).

    >>> import numpy as np, fgrad, fgrad.ode
    >>> def y1(k):
    ...     return fgrad.ode.solve(lambda t, y, k: -k * y, fgrad.ode.Tsit5(), 0.0, 1.0, 0.1,
    ...                            np.ones(1), k, adjoint=fgrad.ode.DirectAdjoint()).ys[0, 0]
    >>> float(np.round(fgrad.grad(y1)(1.0), 6))      # -t exp(-k t) at t = 1
    -0.367879
    """

    def __repr__(self):
        return "DirectAdjoint()"


class BacksolveAdjoint:
    """The continuous adjoint: reverse mode by a backward solve of the adjoint
    system with the same solver and controller, memory independent of the
    number of steps, under `jit` too.

    >>> import numpy as np, fgrad, fgrad.ode
    >>> def y1(k):
    ...     return fgrad.ode.solve(lambda t, y, k: -k * y, fgrad.ode.Tsit5(), 0.0, 1.0, None,
    ...                            np.ones(1), k, adjoint=fgrad.ode.BacksolveAdjoint(),
    ...                            stepsize_controller=fgrad.ode.PIDController(1e-10, 1e-10)
    ...                            ).ys[0, 0]
    >>> float(np.round(fgrad.jit(fgrad.grad(y1))(1.0), 6))
    -0.367879
    """

    def __repr__(self):
        return "BacksolveAdjoint()"


class RecursiveCheckpointAdjoint:
    """Reverse mode through the solver's steps, under `jit` too, in memory
    bounded by ``checkpoints``: the forward solve keeps nothing but the step
    count; the reverse pass replays the steps from the initial state, storing
    at most ``checkpoints`` loop states (`bisection_move`'s schedule), and
    runs each step's vector-Jacobian product backwards. The default,
    ``log2(max_steps) + 1`` as diffrax's, replays ``n`` steps in about
    ``(n / 2) log2 n`` steps; one checkpoint replays ``n^2 / 2``. The
    gradient is the exact derivative of the computed solution, as
    `DirectAdjoint`'s.
    Forward mode differentiates the steps themselves; second order works in
    every order of the two modes, under `jit` too (reverse over forward: the
    replay differentiated in forward mode).

    >>> import numpy as np, fgrad, fgrad.ode
    >>> def y1(k):
    ...     return fgrad.ode.solve(lambda t, y, k: -k * y, fgrad.ode.Tsit5(), 0.0, 1.0, 0.1,
    ...                            np.ones(1), k, max_steps=64,
    ...                            adjoint=fgrad.ode.RecursiveCheckpointAdjoint(checkpoints=4),
    ...                            stepsize_controller=fgrad.ode.PIDController(1e-8, 1e-8)
    ...                            ).ys[0, 0]
    >>> float(np.round(fgrad.jit(fgrad.grad(y1))(1.0), 6))
    -0.367879
    """

    def __init__(self, checkpoints=None):
        self.checkpoints = checkpoints

    def __repr__(self):
        return f"RecursiveCheckpointAdjoint(checkpoints={self.checkpoints})"


def staged(tree):
    """True if ``tree`` holds traced values and a staging trace (`jit`, a
    `fgrad.lax` loop's body) or `vmap` is open: there the step loop is one
    ``while_loop`` equation, which reverse mode cannot record, whether the
    `grad` runs inside the `jit` or `vmap` or outside it."""
    if not any(isinstance(x, Tracer) for x in tree_leaves(tree)):
        return False
    return any(getattr(trace, "staging", False) or isinstance(trace, BatchTrace)
               for trace in trace_state.trace_stack)


def _pairing(problem, step, ct_ys, first, last):
    """``sum(ct_ys[i] . y(ts[i]))`` over the outputs ``first <= i < last`` that
    ``step`` filled, by its dense output (every output time computed, the
    others masked away: the step's share of the loss's linearisation)."""
    values = vmap(lambda time: dense(problem, step, time))(problem.ts)
    index = fnp.arange(fnp.shape(problem.ts)[0])
    mine = fnp.logical_and(index >= first, index < last)
    total = 0.0
    for ct, v in zip(tree_leaves(ct_ys), tree_leaves(values)):
        mask = fnp.reshape(mine, fnp.shape(mine) + (1,) * (fnp.ndim(v) - 1))
        total = total + fnp.sum(fnp.where(mask, ct * v, 0.0))
    return total


def _vjp_of_floats(fun, *primals):
    """`vjp` of ``fun`` in the float leaves of ``primals`` only: ``(out,
    pullback)``, the pullback giving zeros for the others (an integer in
    ``args``, a count or a flag, has no derivative, and `vjp` refuses it)."""
    leaves, tree = tree_flatten(primals)
    floats = [is_float_dtype(get_aval(x).dtype) for x in leaves]

    def of_floats(*xs):
        given = iter(xs)
        return fun(*tree_unflatten(tree, [next(given) if f else x
                                          for x, f in zip(leaves, floats)]))
    out, pullback = vjp(of_floats, *[x for x, f in zip(leaves, floats) if f])

    def all_leaves(ct):
        cts = iter(pullback(ct))
        return tree_unflatten(tree, [next(cts) if f else _zero_cotangent(x)
                                     for x, f in zip(leaves, floats)])
    return out, all_leaves


def _zero_cotangent(x):
    """A zero cotangent for ``x``: of its dtype if a float, else a float (a
    sum of cotangents, carried by a loop, keeps its dtype)."""
    if is_float_dtype(get_aval(x).dtype):
        return fnp.zeros_like(x)
    return fnp.zeros(fnp.shape(x))


def default_checkpoints(max_steps):
    """diffrax's default: about ``log2(max_steps)`` stored states, enough for
    the bisection schedule to replay ``n`` steps in ``O(n log n)`` steps."""
    return max(2, math.ceil(math.log2(max(max_steps, 2))) + 1)


def solve_checkpointed(fun, solver, controller, t0, t1, y0, args, ts, dt0, max_steps,
                       checkpoints, throw, what):
    """`integrate`'s ``(ys, stats, status, t_reached)`` with the
    `RecursiveCheckpointAdjoint` derivative of ``ys`` in ``y0``, ``args``,
    ``t0``, ``t1`` and ``ts``: forward mode through the steps, reverse mode by
    replaying them from at most ``checkpoints`` stored states, and reverse
    mode of either (second order) by forward mode through the replay."""
    if max_steps is None:
        raise OdeArgumentError("RecursiveCheckpointAdjoint needs a finite max_steps (its "
                               "checkpoints are spread over them).")
    capacity = default_checkpoints(max_steps) if checkpoints is None else int(checkpoints)
    if capacity < 1:
        raise OdeArgumentError(f"RecursiveCheckpointAdjoint(checkpoints={checkpoints}): "
                               "at least one checkpoint (the initial state) is needed.")

    def forward(x):
        y0, args, t0, t1, ts = x
        ys, _, stats, status, t_reached, _ = integrate(fun, solver, controller, t0, t1, y0,
                                                    args, ts, dt0, max_steps)
        if throw:
            raise_if_failed(status, t_reached, what)
        return ys, stats["num_steps"], stats["num_accepted_steps"], status, t_reached

    def replay(x, ct_ys, n):
        return _replay_backwards(fun, solver, controller, dt0, capacity, x, n, ct_ys)

    # The rule is a custom_vjp function too, so that a reverse trace outside
    # this one (grad of grad) meets rules, never a staged while_loop.
    @functools.partial(custom_vjp, jvp_of_fun=True)
    def pullback(x, ct_ys, n):
        return replay(x, ct_ys, n)

    def pullback_bwd(res, ct_x):
        # the replay is J(x)^T ct_ys, J the solution's Jacobian; its VJP for a
        # cotangent w is (J(x) w, sum_i ct_ys_i H_i w) with H_i the symmetric
        # Hessians: both forward-mode derivatives (the second through the replay)
        x, ct_ys, n = res
        _, ct_ys_bar = jvp(lambda x: forward(x)[0], (x,), (ct_x,))
        _, x_bar = jvp(lambda x: replay(x, ct_ys, n), (x,), (ct_x,))
        return x_bar, ct_ys_bar, None
    pullback.defvjp(lambda x, ct_ys, n: (replay(x, ct_ys, n), (x, ct_ys, n)), pullback_bwd)

    # forward mode differentiates the steps, as one custom_vjp function of
    # (x, x_dot), so that reverse mode over it (jacrev(jacfwd)) meets rules,
    # never the tangents' staged while_loop
    @functools.partial(custom_vjp, jvp_of_fun=True)
    def linearized(x, x_dot):
        return jvp(forward, (x,), (x_dot,))

    def linearized_fwd(x, x_dot):
        out = linearized(x, x_dot)  # differentiable again by an outer reverse trace
        return out, (x, x_dot, out[0][1])

    def linearized_bwd(res, ct):
        # the outputs are ys and ys_dot = J(x) x_dot. ys_dot's VJP for a
        # cotangent w is J^T w in x_dot (the replay) and sum_i w_i H_i x_dot
        # in x (H_i symmetric: forward mode through the replay); ys's adds J^T
        # ct_ys in x. The replay is linear in its cotangent, so one forward
        # pass through it at (x, w) along (x_dot, ct_ys) gives both
        x, x_dot, n = res
        (ct_ys, *_), (w, *_) = ct
        x_dot_bar, x_bar = jvp(lambda x, w: replay(x, w, n), (x, w), (x_dot, ct_ys))
        return x_bar, x_dot_bar
    linearized.defvjp(linearized_fwd, linearized_bwd)

    @custom_jvp
    def solved(x):
        return forward(x)

    @solved.defjvp
    def solved_jvp(primals, tangents):
        return linearized(primals[0], tangents[0])

    # reverse mode keeps nothing but the inputs and the step count, and replays
    @functools.partial(custom_vjp, jvp_of_fun=True)
    def run(x):
        return solved(x)

    def run_fwd(x):
        out = run(x)                # differentiable again by an outer reverse trace
        return out, (x, out[1])

    run.defvjp(run_fwd, lambda res, ct: (pullback(res[0], ct[0], res[1]),))
    ys, n, n_kept, status, t_reached = run((y0, args, t0, t1, ts))
    stats = {"num_steps": n, "num_accepted_steps": n_kept, "num_rejected_steps": n - n_kept,
             "max_steps": max_steps}
    return ys, stats, status, t_reached


def bisection_move(top_step, target, height, capacity):
    """The replay's next move, from the stored state of step ``top_step`` (the
    latest stored, ``height`` states stored) towards the step ``target``
    whose VJP is next: ``(to, store, differentiate)``. Advance to step
    ``to``; store the state there (halfway to ``target``) while a slot is
    free; differentiate the step there once ``to == target``. With ``c``
    slots, ``n`` steps replay in ``O(n log n)`` steps if ``2^c >= n``
    (Griewank's bisection schedule), ``O(n^2 / 2^c)`` otherwise.

    >>> [tuple(int(v) for v in bisection_move(0, 7, 1, 3)),
    ...  tuple(int(v) for v in bisection_move(4, 7, 3, 3))]
    [(4, 1, 0), (7, 0, 1)]
    """
    full = height >= capacity
    halfway = top_step + (target - top_step + 1) // 2
    to = fnp.where(top_step == target, target, fnp.where(full, target, halfway))
    differentiate = to == target
    store = fnp.logical_not(differentiate)
    return to, store, differentiate


def _replay_backwards(fun, solver, controller, dt0, capacity, x, n, ct_ys):
    """The cotangents of ``x = (y0, args, t0, t1, ts)`` from those of the
    saved solution, ``ct_ys``, replaying the ``n`` steps from at most
    ``capacity`` stored loop states (`bisection_move`'s schedule)."""
    y0, args, t0, t1, ts = x
    ts = fnp.asarray(ts, dtype=float)
    problem = Problem(fun, solver, controller, t1, ts, args)

    def advance(state, idx, count):
        def one(c):
            j, state, idx = c
            state, attempted = attempt(problem, state)
            return j + 1, state, saved_through(problem, attempted, idx)
        return while_loop(lambda c: c[0] < count, one, (0, state, idx))[1:]

    def step_vjp(state, idx, ct_state, acc):
        """The cotangents of one step's input state, and of (args, t1, ts) added."""
        def step(state, args, t1, ts):
            problem = Problem(fun, solver, controller, t1, ts, args)
            state_next, attempted = attempt(problem, state)
            last = saved_through(problem, attempted, idx)
            return state_next, _pairing(problem, attempted, ct_ys, idx, last)
        _, pullback = _vjp_of_floats(step, state, args, t1, ts)
        ct_state, *cts = pullback((ct_state, fnp.ones(())))
        return ct_state, tree_map(fnp.add, acc, tuple(cts))

    state0 = start(problem, t0, y0, dt0)
    idx0 = fnp.sum((ts <= t0).astype(int))
    stored = tree_map(lambda v: fnp.zeros((capacity,) + fnp.shape(v), fnp.asarray(v).dtype),
                      (state0, idx0))
    stored = tree_map(lambda buf, v: dynamic_update_index_in_dim(buf, v, 0, 0), stored,
                      (state0, idx0))
    steps = dynamic_update_index_in_dim(fnp.zeros((capacity,), int), 0, 0, 0)

    def move(c):
        target, height, steps, stored, ct_state, acc = c
        top = height - 1
        top_step = dynamic_index_in_dim(steps, top, keepdims=False)
        state, idx = tree_map(lambda buf: dynamic_index_in_dim(buf, top, keepdims=False),
                              stored)
        to, store, differentiate = bisection_move(top_step, target, height, capacity)
        state, idx = advance(state, idx, to - top_step)
        slot = fnp.where(store, height, top)

        def write(buf, v):
            return dynamic_update_index_in_dim(
                buf, fnp.where(store, v, dynamic_index_in_dim(buf, slot, keepdims=False)),
                slot, 0)
        stored = tree_map(write, stored, (state, idx))
        steps = write(steps, to)
        ct_state, acc = cond(differentiate, lambda *a: step_vjp(*a),
                             lambda s, i, ct, acc: (ct, acc), state, idx, ct_state, acc)
        # the stored state of the step just differentiated is not needed again
        popped = fnp.logical_and(differentiate, top_step == target)
        height = height + store.astype(int) - popped.astype(int)
        return target - differentiate.astype(int), height, steps, stored, ct_state, acc

    zeros = tree_map(_zero_cotangent, (state0, (args, t1, ts)))
    _, _, _, _, ct_state, (ct_args, ct_t1, ct_ts) = while_loop(
        lambda c: c[0] >= 0, move, (n - 1, fnp.asarray(1), steps, stored) + zeros)

    def begin(y0, args, t0):
        state = start(Problem(fun, solver, controller, t1, ts, args), t0, y0, dt0)
        at_start = fnp.reshape(ts <= t0, fnp.shape(ts))
        total = 0.0
        for ct, y in zip(tree_leaves(ct_ys), tree_leaves(y0)):
            mask = fnp.reshape(at_start, fnp.shape(at_start) + (1,) * fnp.ndim(y))
            total = total + fnp.sum(fnp.where(mask, ct * y, 0.0))
        return state, total
    _, pullback = _vjp_of_floats(begin, y0, args, fnp.asarray(t0, dtype=float))
    ct_y0, ct_args0, ct_t0 = pullback((ct_state, fnp.ones(())))
    return ct_y0, tree_map(fnp.add, ct_args, ct_args0), ct_t0, ct_t1, ct_ts


def _neg(tree):
    return tree_map(fnp.negative, tree)


def _forward(fun, solver, controller, max_steps, interval_steps, what, y0, ts, args):
    """The solution at ``ts`` (``ts[0]`` the start: ``ys[0] = y0``)."""
    ys, _, _, status, t_reached, _ = integrate(fun, solver, controller, ts[0], ts[-1], y0, args,
                                            ts, None, max_steps, interval_steps)
    raise_if_failed(status, t_reached, what)
    return ys


def solve_at_times(fun, solver, controller, y0, ts, args, *, max_steps, interval_steps=None,
                   what="fgrad.ode.odeint"):
    """The solution at the increasing times ``ts`` (``ts[0]`` the start), with
    the `BacksolveAdjoint` derivative in ``y0``, ``ts`` and ``args``;
    raises `fgrad.errors.IntegrationError` if a solve fails."""
    config = (fun, solver, controller, max_steps, interval_steps, what)

    @custom_vjp
    def at_times(y0, ts, args):
        return _forward(*config, y0, ts, args)

    def fwd(y0, ts, args):
        ys = _forward(*config, y0, ts, args)
        return ys, (ys, ts, args)

    def bwd(residuals, ct):
        return _backward(*config, residuals, ct)
    at_times.defvjp(fwd, bwd)
    return at_times(y0, ts, args)


def _backward(fun, solver, controller, max_steps, interval_steps, what, residuals, ct):
    ys, ts, args = residuals
    m = fnp.shape(ts)[0]

    def adjoint_field(tau, state, args):
        y, a, _, _ = state
        y_dot, pullback = _vjp_of_floats(lambda y, t, args: fun(t, y, args), y, -tau, args)
        a_y, a_t, a_args = pullback(a)
        return _neg(y_dot), a_y, a_t, a_args

    def at(tree, i):
        return tree_map(lambda x: dynamic_index_in_dim(x, i, keepdims=False), tree)

    def dot(a, b):
        return sum(fnp.sum(x * y) for x, y in zip(tree_leaves(a), tree_leaves(b)))

    def interval(carry, i):
        a, t0_bar, args_bar = carry
        t_i, t_before = at(ts, i), at(ts, i - 1)
        t_bar = dot(fun(t_i, at(ys, i), args), at(ct, i))
        state = (at(ys, i), a, t0_bar - t_bar, args_bar)
        tau0, tau1 = -t_i, -t_before
        _, state, _, status, t_reached, _ = integrate(
            adjoint_field, solver, controller, tau0, tau1, state, args,
            fnp.zeros((0,)), None, max_steps, interval_steps)
        raise_if_failed(status, -t_reached, what + " (the adjoint pass of its derivative)")
        _, a, t0_bar, args_bar = state
        a = tree_map(fnp.add, a, at(ct, i - 1))
        return (a, t0_bar, args_bar), t_bar

    start = (at(ct, m - 1), fnp.zeros(()), tree_map(_zero_cotangent, args))
    (a, t0_bar, args_bar), ts_bar = scan(interval, start, fnp.arange(m - 1, 0, -1))
    ts_bar = fnp.concatenate([fnp.reshape(t0_bar, (1,)), fnp.flip(ts_bar, 0)])
    return a, ts_bar, args_bar
