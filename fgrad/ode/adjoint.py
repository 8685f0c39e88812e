"""How a solve is differentiated in reverse mode: through its steps, or by
the continuous adjoint.

`DirectAdjoint` differentiates the solver's own operations: forward mode
(`jvp`, `jacfwd`) anywhere, reverse mode outside `jit` (where the step loop
runs as Python and every step is recorded), and every order. Its derivative
is that of the discrete solution, exact to rounding.

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
from fgrad import numpy as fnp
from fgrad.lax import dynamic_index_in_dim, scan
from fgrad.ode.integrate import integrate
from fgrad.ode.status import raise_if_failed
from fgrad.transforms.custom import custom_vjp
from fgrad.transforms.differentiation import vjp
from fgrad.tree import tree_leaves, tree_map

__all__ = ["DirectAdjoint", "BacksolveAdjoint", "solve_at_times"]


class DirectAdjoint:
    """Differentiate through the solver's steps (the default): every mode and
    order; reverse mode outside `jit` only (the step loop's length is known
    there, not while staging).

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
        y_dot, pullback = vjp(lambda y, t, args: fun(t, y, args), y, -tau, args)
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
            fnp.reshape(tau1, (1,)), None, max_steps, interval_steps)
        raise_if_failed(status, -t_reached, what + " (the adjoint pass of its derivative)")
        _, a, t0_bar, args_bar = state
        a = tree_map(fnp.add, a, at(ct, i - 1))
        return (a, t0_bar, args_bar), t_bar

    start = (at(ct, m - 1), fnp.zeros(()), tree_map(fnp.zeros_like, args))
    (a, t0_bar, args_bar), ts_bar = scan(interval, start, fnp.arange(m - 1, 0, -1))
    ts_bar = fnp.concatenate([fnp.reshape(t0_bar, (1,)), fnp.flip(ts_bar, 0)])
    return a, ts_bar, args_bar
