"""The host side of `fgrad.scipy.integrate`: SciPy's solvers on NumPy values,
the adjoint passes that differentiate them, and how a call reaches SciPy under
a transformation (directly on concrete values, as a `fgrad.pure_callback`
under `jit` and `vmap`, refused under a second derivative).

Private to `fgrad.scipy`; `fgrad.scipy.integrate` is the public face.

>>> import numpy as np
>>> leaves, rebuild, key = flat_args(([np.ones(2), 3], "name"))
>>> len(leaves), rebuild([np.zeros(2)])
(1, ([array([0., 0.]), 3], 'name'))
"""
import bisect
import collections
import numbers
import warnings

import numpy as np

import fgrad.numpy as fnp
from fgrad.core.errors import ConcretizationError, IntegrationError, MissingRuleError
from fgrad.core.errors import OptionalDependencyError, ScipyArgumentError
from fgrad.core.trace import ShapedArray, Tracer, get_aval
from fgrad.core.tree import tree_flatten, tree_leaves, tree_unflatten
from fgrad.interpreters.batching import BatchTracer
from fgrad.interpreters.staging import StagingTracer
from fgrad.primitives.callback import pure_callback
from fgrad.transforms.differentiation import jacrev, vjp
from fgrad.transforms.jit import jit

#: the methods whose adjoint pass gets the adjoint system's Jacobian
IMPLICIT = ("Radau", "BDF", "LSODA")


def host_call(name, host, result_shape_dtypes, *args):
    """``host(*args)`` on NumPy values: called directly when every argument is
    concrete; under `jit` or `vmap`, a `pure_callback` (run when the compiled
    code runs; once per example under vmap) with results shaped as
    ``result_shape_dtypes``."""
    if not staged_or_batched(name, args):
        return host(*args)
    return pure_callback(host, result_shape_dtypes, *args)


def staged_or_batched(name, values):
    """Whether ``values`` hold tracers of `jit` or `vmap` (False when all are
    concrete). A tracer of a derivative (a second derivative, forward mode) is
    refused with `MissingRuleError`: SciPy's solve has no derivative of its own."""
    tracers = [x for x in tree_leaves(values) if isinstance(x, Tracer)]
    if tracers and not all(isinstance(x, (StagingTracer, BatchTracer)) for x in tracers):
        raise MissingRuleError(
            f"fgrad.scipy.integrate.{name} differentiates once, in reverse mode: SciPy "
            "solves it on host values, so a second derivative or forward mode of it is "
            "not available. Differentiate a fixed-step integrator written with "
            "fgrad.numpy where you need those.")
    return bool(tracers)


def is_traced(*values):
    """Whether any leaf of ``values`` is a tracer (of any transformation)."""
    return any(isinstance(x, Tracer) for x in tree_leaves(values))


def host_value(value, name):
    """What the right-hand side returned on host values, as a NumPy array. A
    tracer there means it closed over a value a transformation is tracing:
    refused, since its derivative (or, under jit, its value) cannot reach SciPy."""
    if is_traced(value):
        raise ScipyArgumentError(
            f"{name}: the right-hand side returned a traced value: it uses a value that "
            "grad, jit or vmap is tracing, closed over instead of passed in args. Pass "
            "it in args=(...), so that its derivative is taken and its value reaches "
            "SciPy.")
    return np.asarray(value, dtype=np.float64)


def like(value, dtype=None):
    """The shape and dtype of ``value`` (an array or tracer), as `pure_callback`
    declares a result."""
    aval = get_aval(value)
    return ShapedArray(aval.shape, dtype or aval.dtype)


def like_primals(cts, primals):
    """Each cotangent in its primal's shape and dtype (a float32 y0 gets a
    float32 one)."""
    return tuple(np.reshape(c, np.shape(p)).astype(np.result_type(p), copy=False)
                 for c, p in zip(cts, primals))


def flat_args(args):
    """The numeric leaves of ``args`` (a tuple of pytrees), a function that puts
    new leaves back into its structure, and a hashable key of what that function
    does (None where a fixed leaf is unhashable). Leaves that are not
    floating-point numbers or arrays (ints, strings, functions) stay as they
    are, undifferentiated."""
    leaves, treedef = tree_flatten(tuple(args))
    numeric = [i for i, leaf in enumerate(leaves) if differentiable(leaf)]
    fixed = [(i, leaf) for i, leaf in enumerate(leaves) if i not in numeric]
    template = [None] * len(leaves)       # the numeric values are not kept
    for i, leaf in fixed:
        template[i] = leaf

    def rebuild(values):
        full = list(template)
        for i, value in zip(numeric, values):
            full[i] = value
        return tree_unflatten(treedef, full)
    key = (treedef, tuple(numeric), tuple(fixed))
    try:
        hash(key)
    except TypeError:
        key = None
    return [leaves[i] for i in numeric], rebuild, key


def differentiable(leaf):
    """Whether a leaf of ``args`` is differentiated: a tracer, a float or
    complex number or array (not an int, a bool, a string or a function)."""
    if isinstance(leaf, Tracer):
        return True
    if isinstance(leaf, (bool, np.bool_, numbers.Integral)):
        return False
    if isinstance(leaf, numbers.Number):
        return True
    dtype = getattr(leaf, "dtype", None)
    return dtype is not None and np.issubdtype(dtype, np.inexact)


def scipy_integrate():
    """``scipy.integrate``, or `OptionalDependencyError` saying how to install it."""
    try:
        import scipy.integrate
    except ImportError:
        raise OptionalDependencyError(
            "fgrad.scipy.integrate.odeint is solved by scipy.integrate, and SciPy is not "
            "installed: pip install 'fgrad[scipy]' (from a checkout: pip install "
            "'.[scipy]')") from None
    return scipy.integrate


def check_no_nan(values, where, time):
    """Raise `IntegrationError` if ``values`` holds a NaN (``where`` names the pass)."""
    # SciPy's solvers loop on a NaN or fail obscurely: stop at the first one
    if np.isnan(np.vdot(values, values)):      # one number: NaN iff any entry is
        raise IntegrationError(
            f"{where} met NaN at t={float(time):g}. Check the right-hand side for a "
            "0/0, a log or sqrt of a negative number, or an overflow in this time range.")


def lsoda(rhs, y0, t, options, what):
    """SciPy's odeint of ``rhs(y, t)``, raising `IntegrationError` where SciPy
    only warns (``what`` names the pass in the message)."""
    def checked(y, s):
        dy = rhs(y, s)
        check_no_nan(dy, f"odeint's {what}", s)
        return dy
    with warnings.catch_warnings():
        # SciPy warns and returns what it has; the error below replaces the warning
        warnings.simplefilter("ignore", scipy_integrate().ODEintWarning)
        ys, info = scipy_integrate().odeint(checked, y0, t, full_output=True, **options)
    if info["message"] != "Integration successful.":
        reached = info["tcur"][-1] if len(info["tcur"]) else t[0]
        raise IntegrationError(
            f"odeint's {what} failed near t={reached:g}: LSODA says {info['message']!r}. "
            "Raise mxstep, loosen rtol/atol, or check func for a blow-up or a "
            "singularity in this time range.")
    return ys


def odeint_adjoint(func, ys, t, args, ct, options):
    """`odeint`'s cotangents of ``(y0, t, *args)`` given the solution ``ys`` and
    its cotangent ``ct``: ``[y, a, args_bar]`` integrated backwards by LSODA, one
    output interval at a time, from the stored solution."""
    shape, n = ys.shape[1:], int(np.prod(ys.shape[1:], dtype=int))
    args = [np.asarray(a, dtype=np.float64) for a in args]
    sizes = [a.size for a in args]

    def f(y, s):
        return np.asarray(func(y, s, *args), dtype=np.float64)

    def augmented(state, s):
        # state = [y, a, args_bar]: y runs backwards along f, a and args_bar
        # along minus the vector-Jacobian products of f
        y, a = state[:n].reshape(shape), state[n:2 * n].reshape(shape)
        dy, pullback = vjp(lambda y, *p: func(y, s, *p), y, *args)
        cts = pullback(a)
        return np.concatenate([np.ravel(dy)] + [-np.ravel(c) for c in cts])

    a = np.zeros(shape)
    args_bar = np.zeros(sum(sizes))
    t_bar = np.zeros(len(t))
    for i in range(len(t) - 1, 0, -1):
        a = a + ct[i]
        t_bar[i] = np.vdot(ct[i], f(ys[i], t[i]))        # y(t_i) moves along f
        state = np.concatenate([ys[i].ravel(), a.ravel(), args_bar])
        state = lsoda(augmented, state, np.array([t[i], t[i - 1]]), options,
                       "adjoint pass (func's vector-Jacobian products)")[-1]
        a, args_bar = state[n:2 * n].reshape(shape), state[2 * n:]
    # moving t_0 with y(t_0) held shifts the whole solution: -a(t_0) . f(y0, t_0)
    t_bar[0] = -np.vdot(a, f(ys[0], t[0]))
    y0_bar = a + ct[0]
    splits = np.split(args_bar, np.cumsum(sizes)[:-1]) if args else []
    return (y0_bar, t_bar, *(s.reshape(p.shape) for s, p in zip(splits, args)))


def ivp_adjoint(problem, dense, leaves, span, y0, times, states, cts):
    """Cotangents ``(y0, t0, times, leaves)`` of the solution ``states`` at
    ``times`` (columns), given their cotangents ``cts``: the adjoint
    ``[a, args_bar]`` runs from the last time back to ``t0`` along the forward
    dense output, jumping by ``cts[:, j]`` at ``times[j]``."""
    field = AdjointField(problem, dense, leaves)
    t0 = float(span[0])
    n = y0.size
    z = np.zeros(n + field.size)
    times_bar = np.zeros(len(times))
    direction = 1.0 if float(span[1]) >= t0 else -1.0
    current = None
    for j in np.argsort(direction * times, kind="stable")[::-1]:
        if not cts[:, j].any():
            continue
        if current is not None and times[j] != current:
            z = field.integrate(z, current, times[j])
        current = times[j]
        z[:n] += cts[:, j]
        times_bar[j] = np.vdot(cts[:, j], field.f(times[j], states[:, j]))
    if current is not None and current != t0:
        z = field.integrate(z, current, t0)
    # moving t0 with y(t0) held shifts the whole solution: -a(t0) . f(t0, y0)
    t0_bar = -np.vdot(z[:n], field.f(t0, y0))
    return z[:n], t0_bar, times_bar, field.split(z[n:])


class AdjointField:
    """The adjoint system ``d[a, args_bar]/dt = -[J^T a, F_args^T a]`` along the
    forward solution, its Jacobian (for the implicit methods), and SciPy's
    solver stepping it backwards."""

    def __init__(self, problem, dense, leaves):
        self.problem = problem
        self.leaves = [np.asarray(leaf, dtype=np.float64) for leaf in leaves]
        self.sizes = [leaf.size for leaf in self.leaves]
        self.size = sum(self.sizes)
        self.derivatives = problem.derivatives
        # the forward solution's pieces, found by bisection: SciPy's
        # OdeSolution.__call__ costs several times the piece's own evaluation
        self.sign = 1.0 if dense.ts[-1] >= dense.ts[0] else -1.0
        self.breaks = [self.sign * float(t) for t in dense.ts]
        self.pieces = dense.interpolants

    def f(self, t, y):
        """``fun(t, y, *args)`` on host values."""
        return np.asarray(self.problem.rhs(t, y, self.leaves), dtype=np.float64)

    def split(self, flat):
        """``args_bar`` (flat) as one array per leaf."""
        parts = np.split(flat, np.cumsum(self.sizes)[:-1]) if self.leaves else []
        return [part.reshape(leaf.shape) for part, leaf in zip(parts, self.leaves)]

    def y(self, t):
        """The forward solution at ``t``."""
        i = bisect.bisect_left(self.breaks, self.sign * t) - 1
        return self.pieces[min(max(i, 0), len(self.pieces) - 1)](t)

    def field(self, t, z):
        y = self.y(t)
        dz = self.derivatives("pullback", np.asarray(t, dtype=np.float64), y, z[:y.size],
                              *self.leaves)
        check_no_nan(dz, f"solve_ivp's adjoint pass ({self.problem.method}: fun's "
                          "vector-Jacobian products)", t)
        return dz

    def jacobian(self, t, z):
        y = self.y(t)
        n = y.size
        jac = np.zeros((z.size, z.size))
        jac[:, :n] = self.derivatives("jacobian", np.asarray(t, dtype=np.float64), y,
                                      *self.leaves)
        return jac

    def forward_step(self, t):
        """The length of the forward solve's step that contains ``t``."""
        i = min(max(bisect.bisect_left(self.breaks, self.sign * t), 1), len(self.breaks) - 1)
        return self.breaks[i] - self.breaks[i - 1]

    def integrate(self, z, t_from, t_to):
        method, options = self.problem.method, self.problem.options
        kwargs = {key: options[key] for key in ("rtol", "max_step", "min_step")
                  if key in options}
        if "atol" in options:        # one tolerance for a and args_bar alike
            kwargs["atol"] = float(np.min(options["atol"]))
        if method in IMPLICIT:
            kwargs["jac"] = self.jacobian
        # the forward solve's step there: SciPy's own first guess scales with
        # atol when args_bar starts at zero, and creeps up from a tiny step
        kwargs["first_step"] = min(self.forward_step(t_from), abs(t_to - t_from))
        solver = getattr(scipy_integrate(), method)(self.field, t_from, z, t_to, **kwargs)
        message = None
        while solver.status == "running":
            message = solver.step()
        if solver.status == "failed":
            raise IntegrationError(
                f"solve_ivp's adjoint pass ({method}) failed at t={solver.t:g}, integrating "
                f"back from t={t_from:g} to t={t_to:g}: SciPy says {message!r}. Tighten "
                "rtol/atol of the solve, or try a stiff method (Radau, BDF, LSODA).")
        return solver.y


class Derivatives:
    """The derivatives of a right-hand side ``rhs(t, y, leaves)`` the adjoint
    pass needs, staged by `jit` once: ``derivatives("pullback", t, y, a,
    *leaves)`` is the adjoint field ``-[J^T a, F_args^T a]`` (flat),
    ``derivatives("jacobian", t, y, *leaves)`` its Jacobian in ``a``,
    ``-[J, F_args]^T``. A right-hand side with Python control flow on values,
    which jit cannot stage, is traced at each call instead."""

    def __init__(self, rhs):
        self.rhs, self.stageable = rhs, True
        # on an ODE's small arrays jit's unfused code is the quicker: Lotka-
        # Volterra's pullback 77 us a call against 105 us fused, a 552-parameter
        # neural ODE's 40 against 62 (under load)
        self.staged = {"pullback": jit(self.pullback, fuse=False),
                       "jacobian": jit(self.jacobian, fuse=False)}

    def __call__(self, name, *inputs):
        if self.stageable:
            try:
                return self.staged[name](*inputs)
            except ConcretizationError:
                self.stageable = False
        return getattr(self, name)(*inputs)

    def pullback(self, t, y, a, *leaves):
        """``-[J^T a, F_args^T a]`` at ``(t, y)``, flat."""
        _, pullback = vjp(lambda y, *p: self.rhs(t, y, p), y, *leaves)
        return -fnp.concatenate([fnp.ravel(c) for c in pullback(a)])

    def jacobian(self, t, y, *leaves):
        """``-[J, F_args]^T`` at ``(t, y)``, shape ``(n + args size, n)``."""
        argnums = tuple(range(1 + len(leaves)))
        blocks = jacrev(lambda y, *p: self.rhs(t, y, p), argnums=argnums)(y, *leaves)
        return -fnp.concatenate([fnp.reshape(b, (y.size, -1)) for b in blocks], axis=1).T


# right-hand side -> its staged Derivatives, so that a loss solved again and
# again (an optimisation loop) stages them once; bounded, least recently used
# first out
_DERIVATIVES = collections.OrderedDict()
DERIVATIVES_CACHE_SIZE = 32


def derivatives_of(rhs, key):
    """The `Derivatives` of ``rhs``, shared by every call with the same ``key``
    (None: not shared)."""
    if key is None:
        return Derivatives(rhs)
    found = _DERIVATIVES.pop(key, None) or Derivatives(rhs)
    _DERIVATIVES[key] = found
    while len(_DERIVATIVES) > DERIVATIVES_CACHE_SIZE:
        _DERIVATIVES.popitem(last=False)
    return found
