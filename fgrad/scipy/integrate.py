"""``scipy.integrate.odeint`` with gradients by the adjoint method.

`odeint` takes SciPy's call -- ``odeint(func, y0, t, args=(), ...)`` with
``func(y, t, *args)`` written with `fgrad.numpy` -- and SciPy's LSODA solves it.
Reverse mode (`fgrad.grad`, `fgrad.vjp`) differentiates the solution with
respect to ``y0``, the time points ``t`` and every array in ``args`` (pytrees
such as a list of ``(W, b)`` layers too) by solving
the adjoint equations backwards, interval by interval, with the same solver:

    da/dt = -a^T df/dy,   dargs_bar/dt = -a^T df/dargs,   a(t_i) += ct_i

The vector-Jacobian products of ``func`` come from `fgrad.vjp`. Only the
solution at the requested times is kept between the passes, so memory does not
grow with the number of solver steps.

Forward mode, second derivatives and vmap of `odeint` are not provided: the
adjoint pass runs SciPy on host values. Asking for them raises an error that
says so, never a silent zero.

>>> import numpy as np, fgrad
>>> decay = lambda y, t, k: -k * y
>>> ts = np.array([0.0, 1.0])
>>> round(float(odeint(decay, 1.0, ts, args=(0.5,))[-1, 0]), 6)
0.606531
>>> round(float(fgrad.grad(lambda k: odeint(decay, 1.0, ts, args=(k,))[-1, 0])(0.5)), 5)
-0.60653
"""
import bisect as _bisect
import numbers as _numbers
import warnings as _warnings

import numpy as _np

import fgrad.numpy as _fnp
from fgrad.core.errors import ConcretizationError as _ConcretizationError
from fgrad.core.errors import IntegrationError as _IntegrationError
from fgrad.core.errors import MissingRuleError as _MissingRuleError
from fgrad.core.errors import OptionalDependencyError as _OptionalDependencyError
from fgrad.core.errors import ScipyArgumentError as _ScipyArgumentError
from fgrad.core.trace import Tracer as _Tracer
from fgrad.core.tree import tree_flatten as _tree_flatten
from fgrad.core.tree import tree_unflatten as _tree_unflatten
from fgrad.transforms.custom import custom_vjp as _custom_vjp
from fgrad.transforms.differentiation import jacrev as _jacrev
from fgrad.transforms.jit import jit as _jit
from fgrad.transforms.differentiation import vjp as _vjp

# SciPy options the adjoint cannot honour (it needs the plain solution array)
_REFUSED = ("Dfun", "col_deriv", "full_output", "ml", "mu")


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
    leaves, rebuild = _flat_args(args)
    if tfirst:
        def rhs(y, s, *leaves):
            return func(s, y, *rebuild(leaves))
    else:
        def rhs(y, s, *leaves):
            return func(y, s, *rebuild(leaves))
    return _with_adjoint(rhs, options)(y0, t, *leaves)


def _flat_args(args):
    """The numeric leaves of ``args`` (a tuple of pytrees), and a function that
    puts new leaves back into its structure. Leaves that are not floating-point
    numbers or arrays (ints, strings, functions) stay as they are, undifferentiated."""
    leaves, treedef = _tree_flatten(tuple(args))
    numeric = [i for i, leaf in enumerate(leaves) if _differentiable(leaf)]

    def rebuild(values):
        full = list(leaves)
        for i, value in zip(numeric, values):
            full[i] = value
        return _tree_unflatten(treedef, full)
    return [leaves[i] for i in numeric], rebuild


def _differentiable(leaf):
    if isinstance(leaf, _Tracer):
        return True
    if isinstance(leaf, (bool, _np.bool_, _numbers.Integral)):
        return False
    if isinstance(leaf, _numbers.Number):
        return True
    dtype = getattr(leaf, "dtype", None)
    return dtype is not None and _np.issubdtype(dtype, _np.inexact)


def _integrate(func, y0, t, args, options):
    y0 = _np.atleast_1d(_np.asarray(y0, dtype=_np.float64))     # as SciPy's

    def rhs(y, s):
        return _np.asarray(func(y.reshape(y0.shape), s, *args), dtype=_np.float64).ravel()
    ys = _lsoda(rhs, y0.ravel(), _np.asarray(t, dtype=_np.float64), options, "solve")
    return ys.reshape((-1,) + y0.shape)


def _lsoda(rhs, y0, t, options, what):
    """SciPy's odeint, raising `IntegrationError` where SciPy only warns."""
    def checked(y, s):
        dy = rhs(y, s)
        _check_no_nan(dy, f"odeint's {what}", s)
        return dy
    with _warnings.catch_warnings():
        # SciPy warns and returns what it has; the error below replaces the warning
        _warnings.simplefilter("ignore", _scipy_integrate().ODEintWarning)
        ys, info = _scipy_integrate().odeint(checked, y0, t, full_output=True, **options)
    if info["message"] != "Integration successful.":
        reached = info["tcur"][-1] if len(info["tcur"]) else t[0]
        raise _IntegrationError(
            f"odeint's {what} failed near t={reached:g}: LSODA says {info['message']!r}. "
            "Raise mxstep, loosen rtol/atol, or check func for a blow-up or a "
            "singularity in this time range.")
    return ys


def _check_no_nan(values, where, time):
    # SciPy's solvers loop on a NaN or fail obscurely: stop at the first one
    if _np.isnan(_np.vdot(values, values)):      # one number: NaN iff any entry is
        raise _IntegrationError(
            f"{where} met NaN at t={float(time):g}. Check the right-hand side for a "
            "0/0, a log or sqrt of a negative number, or an overflow in this time range.")


def _scipy_integrate():
    try:
        import scipy.integrate
    except ImportError:
        raise _OptionalDependencyError(
            "fgrad.scipy.integrate.odeint is solved by scipy.integrate, and SciPy is not "
            "installed: pip install 'fgrad[scipy]' (from a checkout: pip install "
            "'.[scipy]')") from None
    return scipy.integrate


def _with_adjoint(func, options):
    @_custom_vjp
    def odeint(y0, t, *args):        # the name error messages show
        _refuse_traced("odeint", y0, t, *args)
        return _integrate(func, y0, t, args, options)

    def forward(y0, t, *args):
        _refuse_traced("odeint", y0, t, *args)
        ys = _integrate(func, y0, t, args, options)
        return ys, (ys, t, y0, args)

    def backward(residuals, ct):
        ys, t, y0, args = residuals
        _refuse_traced("odeint", ct)
        cts = _adjoint(func, ys, _np.asarray(t, dtype=_np.float64), args,
                       _np.asarray(ct, dtype=_np.float64), options)
        # each cotangent in its primal's dtype (a float32 y0 gets a float32 one)
        return tuple(c.reshape(_np.shape(p)).astype(_np.result_type(p), copy=False)
                     for c, p in zip(cts, (y0, t, *args)))

    odeint.defvjp(forward, backward)
    return odeint


def _refuse_traced(name, *values):
    # a tracer here belongs to a transformation around the one the adjoint
    # handles: a second derivative, forward mode, vmap or jit
    if any(isinstance(v, _Tracer) for v in values):
        raise _MissingRuleError(
            f"fgrad.scipy.integrate.{name} differentiates once, in reverse mode: SciPy "
            "solves it on host values, so a second derivative, forward mode, vmap or "
            "jit of it is not available. Differentiate a fixed-step integrator written "
            "with fgrad.numpy where you need those.")


def _adjoint(func, ys, t, args, ct, options):
    """Cotangents of (y0, t, *args) given the solution ``ys`` and its cotangent."""
    shape, n = ys.shape[1:], int(_np.prod(ys.shape[1:], dtype=int))
    args = [_np.asarray(a, dtype=_np.float64) for a in args]
    sizes = [a.size for a in args]

    def f(y, s):
        return _np.asarray(func(y, s, *args), dtype=_np.float64)

    def augmented(state, s):
        # state = [y, a, args_bar]: y runs backwards along f, a and args_bar
        # along minus the vector-Jacobian products of f
        y, a = state[:n].reshape(shape), state[n:2 * n].reshape(shape)
        dy, pullback = _vjp(lambda y, *p: func(y, s, *p), y, *args)
        cts = pullback(a)
        return _np.concatenate([_np.ravel(dy)] + [-_np.ravel(c) for c in cts])

    a = _np.zeros(shape)
    args_bar = _np.zeros(sum(sizes))
    t_bar = _np.zeros(len(t))
    for i in range(len(t) - 1, 0, -1):
        a = a + ct[i]
        t_bar[i] = _np.vdot(ct[i], f(ys[i], t[i]))        # y(t_i) moves along f
        state = _np.concatenate([ys[i].ravel(), a.ravel(), args_bar])
        state = _lsoda(augmented, state, _np.array([t[i], t[i - 1]]), options,
                       "adjoint pass (func's vector-Jacobian products)")[-1]
        a, args_bar = state[n:2 * n].reshape(shape), state[2 * n:]
    # moving t_0 with y(t_0) held shifts the whole solution: -a(t_0) . f(y0, t_0)
    t_bar[0] = -_np.vdot(a, f(ys[0], t[0]))
    y0_bar = a + ct[0]
    splits = _np.split(args_bar, _np.cumsum(sizes)[:-1]) if args else []
    return (y0_bar, t_bar, *(s.reshape(p.shape) for s, p in zip(splits, args)))


# ---------------------------------------------------------------------------
# solve_ivp

_METHODS = ("RK45", "RK23", "DOP853", "Radau", "BDF", "LSODA")
_IMPLICIT = ("Radau", "BDF", "LSODA")
# options of the forward solve only: the adjoint has its own right-hand side
_FORWARD_ONLY = ("jac", "jac_sparsity", "lband", "uband", "first_step")


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
    leaves, rebuild = _flat_args(args or ())
    problem = _InitialValueProblem(fun, rebuild, method, vectorized, dense_output, options)
    span = _as_array(t_span)
    observed = _np.empty(0) if t_eval is None else _as_array(t_eval)
    y0 = _as_array(y0)
    t, y = problem.solve(y0, span, observed, *leaves)
    result = OdeResult(problem.summary)
    result.update(t=t, y=y, t_events=None, y_events=None,
                  sol=OdeSolution(problem, y0, span, leaves) if dense_output else None)
    return result


def _as_array(x):
    # time points or y0 as an array (ints made floats), keeping traced ones traced
    if any(isinstance(leaf, _Tracer) for leaf in _tree_flatten(x)[0]):
        return _fnp.asarray(x)
    x = _np.asarray(x)
    return x if _np.issubdtype(x.dtype, _np.inexact) else x.astype(_np.float64)


class _InitialValueProblem:
    """One `solve_ivp` call: its forward solve (kept for the result's summary
    and dense output) and the adjoint rules of ``res.y`` and ``res.sol(t)``."""

    def __init__(self, fun, rebuild, method, vectorized, dense_output, options):
        self.fun, self.rebuild, self.method = fun, rebuild, method
        self.vectorized, self.dense_output, self.options = vectorized, dense_output, options
        self.has_t_eval = False
        self.summary = self.dense = self.t_end = None

        @_custom_vjp
        def solve_ivp(y0, span, observed, *leaves):      # the name error messages show
            return self.forward(y0, span, observed, leaves, self.dense_output)[:2]

        def solve_forward(y0, span, observed, *leaves):
            t, y = self.forward(y0, span, observed, leaves, True)
            return (t, y), (y0, span, observed, leaves, t, y)
        solve_ivp.defvjp(solve_forward, self.solve_backward)
        self.solve = solve_ivp

        @_custom_vjp
        def solve_ivp_solution(y0, span, t, *leaves):
            _refuse_traced("solve_ivp", y0, span, t, *leaves)
            return self.dense(t)

        def evaluate_forward(y0, span, t, *leaves):
            y = solve_ivp_solution(y0, span, t, *leaves)
            return y, (y0, span, t, leaves, y)
        solve_ivp_solution.defvjp(evaluate_forward, self.evaluate_backward)
        self.evaluate = solve_ivp_solution

    def rhs(self, t, y, leaves):
        """``fun(t, y, *args)`` as a 1-d array, with ``args`` rebuilt from ``leaves``."""
        args = self.rebuild(leaves)
        if self.vectorized:       # fun takes a column of states
            return _fnp.reshape(self.fun(t, y[:, None], *args), (-1,))
        return _fnp.asarray(self.fun(t, y, *args))

    def forward(self, y0, span, observed, leaves, dense):
        """SciPy's solve on host values; returns ``(t, y)`` and keeps the rest."""
        _refuse_traced("solve_ivp", y0, span, observed, *leaves)
        if _np.iscomplexobj(y0):
            raise _ScipyArgumentError(
                "solve_ivp: a complex y0 is not supported by fgrad.scipy.integrate."
                "solve_ivp; integrate its real and imaginary parts as a real system of "
                "twice the size.")
        args = self.rebuild(leaves)

        def f(t, y):
            dy = _np.asarray(self.fun(t, y, *args))
            _check_no_nan(dy, f"solve_ivp's solve ({self.method})", t)
            return dy
        options = dict(self.options)
        if callable(options.get("jac")):
            jac = options["jac"]
            options["jac"] = lambda t, y: jac(t, y, *args)
        self.has_t_eval = bool(_np.size(observed))
        self.t_end = float(span[1])
        res = _scipy_integrate().solve_ivp(
            f, (float(span[0]), self.t_end), y0, method=self.method,
            t_eval=observed if self.has_t_eval else None, dense_output=dense,
            vectorized=self.vectorized, **options)
        if res.status < 0:
            raise _IntegrationError(
                f"solve_ivp's solve ({self.method}) failed at t={res.t[-1]:g} of "
                f"t_span=({float(span[0]):g}, {self.t_end:g}): SciPy says "
                f"{res.message!r}. Check fun for a blow-up there; loosen rtol/atol, or "
                "try a stiff method (Radau, BDF, LSODA) if the steps became tiny.")
        self.summary = {key: res[key] for key in
                        ("nfev", "njev", "nlu", "status", "message", "success")}
        self.dense = res.sol
        return res.t, res.y

    def solve_backward(self, residuals, ct):
        y0, span, observed, leaves, t, y = residuals
        ct_t, ct_y = (_np.asarray(c, dtype=_np.float64) for c in ct)
        _refuse_traced("solve_ivp", ct_t, ct_y)
        times = observed if self.has_t_eval else t
        y0_bar, t0_bar, times_bar, leaves_bar = _ivp_adjoint(
            self, leaves, float(span[0]), _np.asarray(y0, dtype=_np.float64), times, y, ct_y)
        times_bar = times_bar + ct_t
        if self.has_t_eval:      # y(t_eval) does not depend on where the solve ends
            span_bar, observed_bar = _np.array([t0_bar, 0.0]), times_bar
        else:                    # the solver's own times move only at the ends
            span_bar = _np.array([t0_bar + times_bar[0], times_bar[-1]])
            observed_bar = _np.zeros(0)
        return _like_primals((y0_bar, span_bar, observed_bar, *leaves_bar),
                             (y0, span, observed, *leaves))

    def evaluate_backward(self, residuals, ct):
        y0, span, t, leaves, y = residuals
        _refuse_traced("solve_ivp", ct)
        n = _np.shape(y)[0]
        times = _np.atleast_1d(_np.asarray(t, dtype=_np.float64))
        y0_bar, t0_bar, times_bar, leaves_bar = _ivp_adjoint(
            self, leaves, float(span[0]), _np.asarray(y0, dtype=_np.float64), times,
            _np.reshape(y, (n, -1)), _np.reshape(_np.asarray(ct, dtype=_np.float64), (n, -1)))
        return _like_primals((y0_bar, _np.array([t0_bar, 0.0]), times_bar, *leaves_bar),
                             (y0, span, t, *leaves))


def _like_primals(cts, primals):
    # each cotangent in its primal's shape and dtype (a float32 y0 gets a float32 one)
    return tuple(_np.reshape(c, _np.shape(p)).astype(_np.result_type(p), copy=False)
                 for c, p in zip(cts, primals))


def _ivp_adjoint(problem, leaves, t0, y0, times, states, cts):
    """Cotangents ``(y0, t0, times, leaves)`` of the solution ``states`` at
    ``times`` (columns), given their cotangents ``cts``: the adjoint
    ``[a, args_bar]`` runs from the last time back to ``t0`` along the forward
    dense output, jumping by ``cts[:, j]`` at ``times[j]``."""
    field = _AdjointField(problem, leaves)
    n = y0.size
    z = _np.zeros(n + field.size)
    times_bar = _np.zeros(len(times))
    direction = 1.0 if problem.t_end >= t0 else -1.0
    current = None
    for j in _np.argsort(direction * times, kind="stable")[::-1]:
        if not cts[:, j].any():
            continue
        if current is not None and times[j] != current:
            z = field.integrate(z, current, times[j])
        current = times[j]
        z[:n] += cts[:, j]
        times_bar[j] = _np.vdot(cts[:, j], field.f(times[j], states[:, j]))
    if current is not None and current != t0:
        z = field.integrate(z, current, t0)
    # moving t0 with y(t0) held shifts the whole solution: -a(t0) . f(t0, y0)
    t0_bar = -_np.vdot(z[:n], field.f(t0, y0))
    return z[:n], t0_bar, times_bar, field.split(z[n:])


class _AdjointField:
    """The adjoint system ``d[a, args_bar]/dt = -[J^T a, F_args^T a]`` along the
    forward solution, its Jacobian (for the implicit methods), and SciPy's
    solver stepping it backwards."""

    def __init__(self, problem, leaves):
        self.problem = problem
        self.leaves = [_np.asarray(leaf, dtype=_np.float64) for leaf in leaves]
        self.sizes = [leaf.size for leaf in self.leaves]
        self.size = sum(self.sizes)
        self.stageable, self.compiled = True, {}
        # the forward solution's pieces, found by bisection: SciPy's
        # OdeSolution.__call__ costs several times the piece's own evaluation
        dense = problem.dense
        self.sign = 1.0 if dense.ts[-1] >= dense.ts[0] else -1.0
        self.breaks = [self.sign * float(t) for t in dense.ts]
        self.pieces = dense.interpolants

    def f(self, t, y):
        return _np.asarray(self.problem.rhs(t, y, self.leaves), dtype=_np.float64)

    def split(self, flat):
        parts = _np.split(flat, _np.cumsum(self.sizes)[:-1]) if self.leaves else []
        return [part.reshape(leaf.shape) for part, leaf in zip(parts, self.leaves)]

    def y(self, t):
        """The forward solution at ``t``."""
        i = _bisect.bisect_left(self.breaks, self.sign * t) - 1
        return self.pieces[min(max(i, 0), len(self.pieces) - 1)](t)

    def field(self, t, z):
        y = self.y(t)
        dz = self.staged("pullback", _np.asarray(t, dtype=_np.float64), y, z[:y.size],
                         *self.leaves)
        _check_no_nan(dz, f"solve_ivp's adjoint pass ({self.problem.method}: fun's "
                          "vector-Jacobian products)", t)
        return dz

    def jacobian(self, t, z):
        y = self.y(t)
        n = y.size
        jac = _np.zeros((z.size, z.size))
        jac[:, :n] = self.staged("jacobian", _np.asarray(t, dtype=_np.float64), y, *self.leaves)
        return jac

    def pullback(self, t, y, a, *leaves):
        """The adjoint field ``-[J^T a, F_args^T a]`` of ``fun`` at ``(t, y)``, flat."""
        _, pullback = _vjp(lambda y, *p: self.problem.rhs(t, y, p), y, *leaves)
        return -_fnp.concatenate([_fnp.ravel(c) for c in pullback(a)])

    def jacobian_blocks(self, t, y, *leaves):
        """The adjoint field's Jacobian in ``a``: ``-[J, F_args]^T``, shape
        ``(n + args size, n)``."""
        argnums = tuple(range(1 + len(leaves)))
        blocks = _jacrev(lambda y, *p: self.problem.rhs(t, y, p), argnums=argnums)(y, *leaves)
        return -_fnp.concatenate([_fnp.reshape(b, (y.size, -1)) for b in blocks], axis=1).T

    def staged(self, name, *inputs):
        # the adjoint calls fun's derivatives hundreds of times at one shape:
        # jit stages them once (about 20x faster than tracing each call); fun
        # with Python control flow on values cannot be staged and runs as is
        function = {"pullback": self.pullback, "jacobian": self.jacobian_blocks}[name]
        if self.stageable:
            if name not in self.compiled:
                self.compiled[name] = _jit(function)
            try:
                return self.compiled[name](*inputs)
            except _ConcretizationError:
                self.stageable = False
        return function(*inputs)

    def forward_step(self, t):
        """The length of the forward solve's step that contains ``t``."""
        i = min(max(_bisect.bisect_left(self.breaks, self.sign * t), 1), len(self.breaks) - 1)
        return self.breaks[i] - self.breaks[i - 1]

    def integrate(self, z, t_from, t_to):
        method, options = self.problem.method, self.problem.options
        kwargs = {key: options[key] for key in ("rtol", "max_step", "min_step")
                  if key in options}
        if "atol" in options:        # one tolerance for a and args_bar alike
            kwargs["atol"] = float(_np.min(options["atol"]))
        if method in _IMPLICIT:
            kwargs["jac"] = self.jacobian
        # the forward solve's step there: SciPy's own first guess scales with
        # atol when args_bar starts at zero, and creeps up from a tiny step
        kwargs["first_step"] = min(self.forward_step(t_from), abs(t_to - t_from))
        solver = getattr(_scipy_integrate(), method)(self.field, t_from, z, t_to, **kwargs)
        message = None
        while solver.status == "running":
            message = solver.step()
        if solver.status == "failed":
            raise _IntegrationError(
                f"solve_ivp's adjoint pass ({method}) failed at t={solver.t:g}, integrating "
                f"back from t={t_from:g} to t={t_to:g}: SciPy says {message!r}. Tighten "
                "rtol/atol of the solve, or try a stiff method (Radau, BDF, LSODA).")
        return solver.y
