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
import numbers as _numbers
import warnings as _warnings

import numpy as _np

from fgrad.core.errors import IntegrationError as _IntegrationError
from fgrad.core.errors import MissingRuleError as _MissingRuleError
from fgrad.core.errors import OptionalDependencyError as _OptionalDependencyError
from fgrad.core.errors import ScipyArgumentError as _ScipyArgumentError
from fgrad.core.trace import Tracer as _Tracer
from fgrad.core.tree import tree_flatten as _tree_flatten
from fgrad.core.tree import tree_unflatten as _tree_unflatten
from fgrad.transforms.custom import custom_vjp as _custom_vjp
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
    if _np.isnan(values).any():
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
        _refuse_traced(y0, t, *args)
        return _integrate(func, y0, t, args, options)

    def forward(y0, t, *args):
        _refuse_traced(y0, t, *args)
        ys = _integrate(func, y0, t, args, options)
        return ys, (ys, t, y0, args)

    def backward(residuals, ct):
        ys, t, y0, args = residuals
        _refuse_traced(ct)
        cts = _adjoint(func, ys, _np.asarray(t, dtype=_np.float64), args,
                       _np.asarray(ct, dtype=_np.float64), options)
        # each cotangent in its primal's dtype (a float32 y0 gets a float32 one)
        return tuple(c.reshape(_np.shape(p)).astype(_np.result_type(p), copy=False)
                     for c, p in zip(cts, (y0, t, *args)))

    odeint.defvjp(forward, backward)
    return odeint


def _refuse_traced(*values):
    # a tracer here belongs to a transformation around the one odeint handles:
    # a second derivative, forward mode, vmap or jit
    if any(isinstance(v, _Tracer) for v in values):
        raise _MissingRuleError(
            "fgrad.scipy.integrate.odeint differentiates once, in reverse mode: SciPy "
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
