"""SciPy's ODE solvers, ``odeint`` and ``solve_ivp``, with gradients by the
adjoint method.

Both take SciPy's call -- ``odeint(func, y0, t, args=(), ...)`` with
``func(y, t, *args)``, ``solve_ivp(fun, t_span, y0, method=..., ...)`` with
``fun(t, y, *args)``, written with `fgrad.numpy` -- and SciPy solves them.
Reverse mode (`fgrad.grad`, `fgrad.vjp`) differentiates the solution with
respect to ``y0``, the output times and every array in ``args`` (pytrees such
as a list of ``(W, b)`` layers too) by solving the adjoint equations backwards
with SciPy, interval by interval:

    da/dt = -a^T df/dy,   dargs_bar/dt = -a^T df/dargs,   a(t_i) += ct_i

The vector-Jacobian products of ``func`` come from `fgrad.vjp`. `solve_ivp`
reads ``y(t)`` from the forward solve's dense output; `odeint` integrates it
backwards from the solution at the output times.

Under `jit` and `vmap` the solves run as host callbacks (`fgrad.pure_callback`,
one problem at a time under vmap), their derivatives too. Forward mode and
second derivatives are not provided: asking for them raises an error that says
so, never a silent zero.

>>> import numpy as np, fgrad
>>> decay = lambda y, t, k: -k * y
>>> ts = np.array([0.0, 1.0])
>>> round(float(odeint(decay, 1.0, ts, args=(0.5,))[-1, 0]), 6)
0.606531
>>> round(float(fgrad.grad(lambda k: odeint(decay, 1.0, ts, args=(k,))[-1, 0])(0.5)), 5)
-0.60653
"""
import functools as _functools

import numpy as _np

import fgrad.numpy as _fnp
from fgrad.core.errors import ScipyArgumentError as _ScipyArgumentError
from fgrad.core.trace import ShapedArray as _ShapedArray
from fgrad.scipy import _ode
from fgrad.transforms.custom import custom_vjp as _custom_vjp

# what forward mode through the solvers says to their callers (`custom_vjp`'s
# reverse_only)
_REVERSE_ONLY = ("fgrad.scipy.integrate.{} is solved by SciPy and differentiated by "
                 "the adjoint method, a reverse-mode rule (a second derivative, such as "
                 "fgrad.hessian, is not available either)")
# SciPy options the adjoint cannot honour (it needs the plain solution array)
_REFUSED = ("Dfun", "col_deriv", "full_output", "ml", "mu")
_METHODS = ("RK45", "RK23", "DOP853", "Radau", "BDF", "LSODA")


def odeint(func, y0, t, args=(), tfirst=False, **options):
    """Integrate ``dy/dt = func(y, t, *args)`` from ``y0`` over the times ``t``
    (SciPy's call); reverse-mode derivatives in ``y0``, ``t`` and ``args``.

    ``options`` are SciPy's (``rtol``, ``atol``, ``mxstep``, ``hmax``, ...); the
    adjoint pass uses the same tolerances. Returns an array of shape
    ``(len(t),) + shape(y0)``.
    """
    refused = [name for name in _REFUSED if options.get(name)]
    if refused:
        raise _ScipyArgumentError(
            f"odeint: {', '.join(refused)} is not supported by fgrad.scipy.integrate."
            "odeint (its derivative needs the plain solution); leave it out -- fgrad "
            "computes the Jacobian products it needs from func")
    leaves, rebuild, _ = _ode.flat_args(args)
    if tfirst:
        def rhs(y, s, *leaves):
            return func(s, y, *rebuild(leaves))
    else:
        def rhs(y, s, *leaves):
            return func(y, s, *rebuild(leaves))
    return _odeint_with_adjoint(rhs, options)(y0, t, *leaves)


def _odeint_with_adjoint(func, options):
    def solve(y0, t, *args):
        # on host values, as SciPy's odeint does: y0 at least 1-d, float64
        y0 = _np.atleast_1d(_np.asarray(y0, dtype=_np.float64))

        def rhs(y, s):
            return _ode.host_value(func(y.reshape(y0.shape), s, *args), "odeint").ravel()
        ys = _ode.lsoda(rhs, y0.ravel(), _np.asarray(t, dtype=_np.float64), options, "solve")
        return ys.reshape((-1,) + y0.shape)

    def adjoint(ys, t, y0, args, ct):
        cts = _ode.odeint_adjoint(func, ys, _np.asarray(t, dtype=_np.float64), args,
                                  _np.asarray(ct, dtype=_np.float64), options)
        return _ode.like_primals(cts, (y0, t, *args))

    def solution(y0, t, args):
        shape = (_np.shape(t)[0],) + (_np.shape(y0) or (1,))
        return _ode.host_call("odeint", solve, _ShapedArray(shape, _np.float64), y0, t, *args)

    @_functools.partial(_custom_vjp, reverse_only=_REVERSE_ONLY.format("odeint"))
    def odeint(y0, t, *args):        # the name error messages show
        return solution(y0, t, args)

    def forward(y0, t, *args):
        ys = solution(y0, t, args)
        return ys, (ys, t, y0, args)

    def backward(residuals, ct):
        ys, t, y0, args = residuals
        like = tuple(_ode.like(p) for p in (y0, t, *args))
        return _ode.host_call("odeint", adjoint, like, ys, t, y0, list(args), ct)

    odeint.defvjp(forward, backward)
    return odeint


# ---------------------------------------------------------------------------
# solve_ivp


class OdeResult(dict):
    """`solve_ivp`'s result, as SciPy's: a dict whose keys read as attributes.

    ``t`` (times), ``y`` (the solution, shape ``(n, len(t))``), ``sol``
    (`OdeSolution` or None), ``t_events`` and ``y_events`` (None: events are
    not supported), ``nfev``, ``njev``, ``nlu``, ``status``, ``message`` and
    ``success``.
    """

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __dir__(self):
        return list(self.keys())


class OdeSolution:
    """The continuous solution of `solve_ivp(..., dense_output=True)`:
    ``sol(t)`` is ``y(t)`` for a time or an array of times (shape ``(n,)`` or
    ``(n, len(t))``), differentiable like ``res.y`` in ``y0``, ``args``,
    ``t_span`` and ``t``. ``t_min``, ``t_max`` and ``ts`` are SciPy's.
    """

    def __init__(self, problem, y0, span, leaves):
        self._problem, self._inputs = problem, (y0, span, leaves)
        scipy_sol = problem.dense
        self.t_min, self.t_max, self.ts = scipy_sol.t_min, scipy_sol.t_max, scipy_sol.ts

    def __call__(self, t):
        y0, span, leaves = self._inputs
        return self._problem.evaluate(y0, span, _as_array(t), *leaves)


def solve_ivp(fun, t_span, y0, method="RK45", t_eval=None, dense_output=False,
              events=None, vectorized=False, args=None, **options):
    """Solve ``dy/dt = fun(t, y, *args)`` from ``y0`` over ``t_span`` (SciPy's
    call and result); reverse-mode derivatives of ``res.y`` and ``res.sol(t)`` in
    ``y0``, every array in ``args`` (pytrees too), ``t_eval`` and ``t_span``.

    ``method`` is one of RK45, RK23, DOP853, Radau, BDF and LSODA; ``options``
    are SciPy's (``rtol``, ``atol``, ``max_step``, ``first_step``, ``jac``, ...).
    The derivative is the continuous adjoint, integrated backwards by the same
    method at the same tolerances along the forward solve's dense output;
    ``fun``'s vector-Jacobian products (and, for Radau, BDF and LSODA, the
    adjoint system's Jacobian) come from fgrad. With ``t_eval=None`` the
    solver's own times in ``res.t`` are held fixed, except the ends of
    ``t_span``. A failed solve, forward or adjoint, raises
    `fgrad.errors.IntegrationError` where SciPy returns ``success=False``;
    ``events`` are refused.

    >>> import numpy as np, fgrad
    >>> decay = lambda t, y, k: -k * y
    >>> res = solve_ivp(decay, (0.0, 1.0), np.array([1.0]), args=(0.5,), rtol=1e-8)
    >>> round(float(res.y[0, -1]), 6)
    0.606531
    >>> final = lambda k: solve_ivp(decay, (0.0, 1.0), np.array([1.0]), args=(k,),
    ...                             rtol=1e-8, atol=1e-10).y[0, -1]
    >>> round(float(fgrad.grad(final)(0.5)), 5)
    -0.60653
    """
    if events is not None:
        raise _ScipyArgumentError(
            "solve_ivp: events are not supported by fgrad.scipy.integrate.solve_ivp (an "
            "event time's derivative is not provided). Leave events out: integrate to a "
            "fixed end with dense_output=True and locate the crossing on res.sol, or call "
            "scipy.integrate.solve_ivp directly where no derivative is needed.")
    if method not in _METHODS:
        raise _ScipyArgumentError(
            f"solve_ivp: method={method!r} is not one fgrad can differentiate; pass one "
            f"of {', '.join(_METHODS)} by name.")
    if args is not None and not isinstance(args, (tuple, list)):
        raise _ScipyArgumentError(
            f"solve_ivp: args must be a tuple (as SciPy's), got {type(args).__name__}; "
            "write args=(k,) for a single argument.")
    leaves, rebuild, key = _ode.flat_args(args or ())
    problem = _InitialValueProblem(fun, rebuild, method, vectorized, dense_output, options,
                                   key)
    span = _as_array(t_span)
    observed = _np.empty(0) if t_eval is None else _as_array(t_eval)
    y0 = _as_array(y0)
    t, y = problem.solve(y0, span, observed, *leaves)
    result = OdeResult(problem.summary)     # counts are None under jit and vmap
    result.update(t=t, y=y, t_events=None, y_events=None,
                  sol=OdeSolution(problem, y0, span, leaves) if dense_output else None)
    return result


def _as_array(x):
    # time points or y0 as an array (ints made floats), keeping traced ones traced
    if _ode.is_traced(x):
        return _fnp.asarray(x)
    x = _np.asarray(x)
    return x if _np.issubdtype(x.dtype, _np.inexact) else x.astype(_np.float64)


class _InitialValueProblem:
    """One `solve_ivp` call: its forward solve (kept for the result's summary
    and dense output) and the adjoint rules of ``res.y`` and ``res.sol(t)``."""

    def __init__(self, fun, rebuild, method, vectorized, dense_output, options, key):
        self.fun, self.rebuild, self.method = fun, rebuild, method
        self.vectorized, self.dense_output, self.options = vectorized, dense_output, options
        self.rhs = _right_hand_side(fun, rebuild, vectorized)
        key = None if key is None else (fun, vectorized, key)
        try:
            hash(key)
        except TypeError:               # an unhashable callable object
            key = None
        self.derivatives = _ode.derivatives_of(self.rhs, key)
        self.summary = dict.fromkeys(("nfev", "njev", "nlu"))
        self.summary.update(status=0, success=True, message=_SUCCESS)
        self.dense = None

        @_functools.partial(_custom_vjp, reverse_only=_REVERSE_ONLY.format("solve_ivp"))
        def solve_ivp(y0, span, observed, *leaves):      # the name error messages show
            return self.solution(y0, span, observed, leaves, self.dense_output)

        def solve_forward(y0, span, observed, *leaves):
            t, y = self.solution(y0, span, observed, leaves, True)
            return (t, y), (y0, span, observed, leaves, t, y)
        solve_ivp.defvjp(solve_forward, self.solve_backward)
        self.solve = solve_ivp

        @_functools.partial(_custom_vjp, reverse_only=_REVERSE_ONLY.format(
            "solve_ivp's dense output (res.sol)"))
        def solve_ivp_solution(y0, span, t, *leaves):
            return self.dense(t)

        def evaluate_forward(y0, span, t, *leaves):
            y = self.dense(t)
            return y, (y0, span, t, leaves, y)
        solve_ivp_solution.defvjp(evaluate_forward, self.evaluate_backward)
        self.evaluate = solve_ivp_solution

    def scipy_solve(self, y0, span, observed, leaves, dense):
        """SciPy's ``solve_ivp`` on host values; its result."""
        args = self.rebuild(leaves)
        # where the solver last evaluated fun: where it failed, to within a
        # step (res.t holds only the t_eval points reached, none if it failed
        # before the first)
        reached = [float(span[0])]

        def f(t, y):
            reached[0] = t
            dy = _ode.host_value(self.fun(t, y, *args), "solve_ivp")
            _ode.check_no_nan(dy, f"solve_ivp's solve ({self.method})", t)
            return dy
        options = dict(self.options)
        if callable(options.get("jac")):
            jac = options["jac"]
            options["jac"] = lambda t, y: jac(t, y, *args)
        t0, t1 = (float(s) for s in span)
        res = _ode.scipy_integrate().solve_ivp(
            f, (t0, t1), y0, method=self.method, t_eval=observed if _np.size(observed) else None,
            dense_output=dense, vectorized=self.vectorized, **options)
        if res.status < 0:
            raise _ode.IntegrationError(
                f"solve_ivp's solve ({self.method}) failed near t={reached[0]:g} of "
                f"t_span=({t0:g}, {t1:g}): SciPy says {res.message!r}. Check fun for a "
                "blow-up there; loosen rtol/atol, or try a stiff method (Radau, BDF, "
                "LSODA) if the steps became tiny.")
        return res

    def solution(self, y0, span, observed, leaves, dense):
        """``(t, y)``: solved here on concrete values (keeping SciPy's summary and
        dense output), or by a host callback under jit or vmap."""
        if _np.iscomplexobj(_ode.like(y0)):
            raise _ScipyArgumentError(
                "solve_ivp: a complex y0 is not supported by fgrad.scipy.integrate."
                "solve_ivp; integrate its real and imaginary parts as a real system of "
                "twice the size.")
        if not _ode.staged_or_batched("solve_ivp", (y0, span, observed, leaves)):
            res = self.scipy_solve(y0, span, observed, leaves, dense)
            self.summary = {key: res[key] for key in _SUMMARY}
            self.dense = res.sol
            return res.t, res.y
        m = _ode.like(observed).shape[0]
        if not m or self.dense_output:
            raise _ScipyArgumentError(
                "solve_ivp under jit or vmap needs t_eval and no dense_output: the "
                "number of steps SciPy takes, and so the shape of res.t and res.y, is "
                "only known when it runs. Pass the output times as t_eval.")
        shapes = (_ShapedArray((m,), _np.float64),
                  _ShapedArray((_ode.like(y0).shape[0], m), _np.float64))

        def solve(y0, span, observed, leaves):
            res = self.scipy_solve(y0, span, observed, leaves, False)
            return res.t, res.y
        return _ode.host_call("solve_ivp", solve, shapes, y0, span, observed, list(leaves))

    def cotangents(self, dense, y0, span, observed, leaves, t, y, ct_t, ct_y):
        """The cotangents of ``(y0, span, observed, *leaves)`` from those of
        ``(t, y)``, on host values."""
        ct_t, ct_y = (_np.asarray(c, dtype=_np.float64) for c in (ct_t, ct_y))
        has_t_eval = bool(_np.size(observed))
        times = _np.asarray(observed if has_t_eval else t, dtype=_np.float64)
        y0_bar, t0_bar, times_bar, leaves_bar = _ode.ivp_adjoint(
            self, dense, leaves, span, _np.asarray(y0, dtype=_np.float64), times, y, ct_y)
        times_bar = times_bar + ct_t
        if has_t_eval:           # y(t_eval) does not depend on where the solve ends
            span_bar, observed_bar = _np.array([t0_bar, 0.0]), times_bar
        else:                    # the solver's own times move only at the ends
            span_bar = _np.array([t0_bar + times_bar[0], times_bar[-1]])
            observed_bar = _np.zeros(0)
        return _ode.like_primals((y0_bar, span_bar, observed_bar, *leaves_bar),
                                 (y0, span, observed, *leaves))

    def solve_backward(self, residuals, ct):
        y0, span, observed, leaves, t, y = residuals
        inputs = (y0, span, observed, list(leaves), t, y, *ct)
        if not _ode.staged_or_batched("solve_ivp", inputs):
            return self.cotangents(self.dense, *inputs)

        def adjoint(y0, span, observed, leaves, t, y, ct_t, ct_y):
            # under jit or vmap nothing survives between the callbacks: solve
            # again, for the dense output the adjoint reads
            dense = self.scipy_solve(y0, span, observed, leaves, True).sol
            return self.cotangents(dense, y0, span, observed, leaves, t, y, ct_t, ct_y)
        like = tuple(_ode.like(p) for p in (y0, span, observed, *leaves))
        return _ode.host_call("solve_ivp", adjoint, like, *inputs)

    def evaluate_backward(self, residuals, ct):
        y0, span, t, leaves, y = residuals
        n = _np.shape(y)[0]
        times = _np.atleast_1d(_np.asarray(t, dtype=_np.float64))
        y0_bar, t0_bar, times_bar, leaves_bar = _ode.ivp_adjoint(
            self, self.dense, leaves, span, _np.asarray(y0, dtype=_np.float64), times,
            _np.reshape(y, (n, -1)), _np.reshape(_np.asarray(ct, dtype=_np.float64), (n, -1)))
        return _ode.like_primals((y0_bar, _np.array([t0_bar, 0.0]), times_bar, *leaves_bar),
                                 (y0, span, t, *leaves))


def _right_hand_side(fun, rebuild, vectorized):
    # fun(t, y, *args) as a 1-d array, args rebuilt from their leaves; it keeps
    # nothing of one call's problem, so its staged derivatives can be shared
    def rhs(t, y, leaves):
        args = rebuild(leaves)
        if vectorized:           # fun takes a column of states
            return _fnp.reshape(fun(t, y[:, None], *args), (-1,))
        return _fnp.asarray(fun(t, y, *args))
    return rhs


_SUMMARY = ("nfev", "njev", "nlu", "status", "message", "success")
_SUCCESS = "The solver successfully reached the end of the integration interval."
