"""``scipy.optimize``'s solvers, differentiable with respect to their parameters.

SciPy does the numerics, on NumPy values, with the derivatives it asks for
(``jac``, ``hess``, ``hessp``, ``fprime``) supplied by fgrad when you do not
give them. Functions are written with `fgrad.numpy`. The solution is then
differentiable, in every mode and under `jit` and `vmap`, with respect to every
array in ``args`` (any pytree), every traced value the functions close over,
and ``xdata``/``ydata``/``sigma`` of `curve_fit`, by the implicit function
theorem at the solution (`fgrad.transforms.roots.implicit_root`): never by
differentiating SciPy's iterations.

- ``minimize``: the optimality conditions. Without constraints, the gradient
  is zero; variables held at a bound (L-BFGS-B, TNC, ...) stay there, so their
  derivative is zero and the rest solve with the Hessian of the free variables.
  With constraints (SLSQP, trust-constr, COBYLA, COBYQA), the KKT conditions of
  the active set: equality constraints and the inequalities that hold with
  equality and a positive multiplier (estimated by least squares at the
  solution); the solve is then over the variables and those multipliers.
- ``root``, ``root_scalar``, ``fixed_point``: ``F(x, args) = 0``.
- ``least_squares``, ``curve_fit``: the gradient of the cost, with the whole
  Hessian (not Gauss-Newton's), and the active bounds as for ``minimize``.

The linear solve of the implicit rule is dense (the matrix built from one
batched Jacobian-vector product per unknown, its condition number checked)
for at most `fgrad.scipy._implicit.DENSE_MAX` unknowns (100), and matrix-free
beyond (conjugate gradients on Hessian-vector products, BiCGSTAB for a root's
Jacobian); ``implicit_solve="dense"`` or ``"krylov"`` chooses. Constrained
problems always solve their KKT system densely.

Failure is loud: when SciPy reports no convergence, fgrad raises
`fgrad.errors.ConvergenceError` with SciPy's message (unless SciPy stopped
because floating point allows no further progress, at a point that checks
out as a solution to that precision: fgrad returns that one), and when the implicit
linear solve is singular, ill-conditioned or does not converge it raises
`fgrad.errors.ImplicitSolveError`; a wrong derivative is never returned.
Under `jit` the SciPy call is a `fgrad.pure_callback` that runs each call; under
`vmap` problems are solved one after another.

>>> import numpy as np, fgrad, fgrad.numpy as fnp
>>> def ridge(lam, X, y):
...     loss = lambda w, lam: fnp.sum((X @ w - y) ** 2) + lam * fnp.sum(w ** 2)
...     return minimize(loss, np.zeros(2), args=(lam,), method="BFGS").x
>>> X, y = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]), np.array([1.0, 2.0, 0.5])
>>> g = fgrad.grad(lambda lam: fnp.sum(ridge(lam, X, y)))(0.1)
>>> A = X.T @ X + 0.1 * np.eye(2)
>>> bool(np.isclose(g, -np.sum(np.linalg.solve(A, np.linalg.solve(A, X.T @ y)))))
True
"""
import inspect

import numpy as np

import fgrad.numpy as fnp
from fgrad.core.errors import ConvergenceError, ScipyArgumentError
from fgrad.core.trace import Tracer, get_aval
from fgrad.primitives.creation import stop_gradient
from fgrad.scipy._implicit import (
    Staged,
    any_traced,
    checked_dense_solve,
    on_host,
    scipy_optimize,
    spec,
    tangent_solver,
)
from fgrad.transforms.differentiation import grad, hessian, jacfwd, jvp, value_and_grad
from fgrad.transforms.roots import implicit_root

__all__ = ["minimize", "root", "root_scalar", "least_squares", "curve_fit",
           "fixed_point", "OptimizeResult", "RootResults"]


class OptimizeResult(dict):
    """SciPy's result record: a dict whose keys are also attributes (``res.x``,
    ``res.fun``, ``res.success``, ...)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    __setattr__ = dict.__setitem__
    __delattr__ = dict.__delitem__

    def __dir__(self):
        return list(self.keys())

    def __repr__(self):
        width = max(map(len, self), default=0) + 1
        return "\n".join(f"{k.rjust(width)}: {v!r}" for k, v in self.items())


class RootResults:
    """What `root_scalar` returns, as SciPy's ``RootResults``: ``root``,
    ``iterations``, ``function_calls``, ``converged``, ``flag``, ``method``."""

    def __init__(self, root, iterations, function_calls, flag, method):
        self.root, self.iterations, self.function_calls = root, iterations, function_calls
        self.flag, self.method = flag, method
        self.converged = flag == "converged"

    def __repr__(self):
        return (f"      converged: {self.converged}\n           flag: {self.flag}\n"
                f" function_calls: {self.function_calls}\n     iterations: "
                f"{self.iterations}\n           root: {self.root!r}\n         method: "
                f"{self.method}")


# ---------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------


def _vector(x0, name):
    x = x0 if isinstance(x0, Tracer) else np.asarray(x0)
    if not isinstance(x, Tracer) and x.dtype.kind in "biu":
        x = x.astype(np.float64)
    if get_aval(x).dtype.kind not in "fc":
        raise ScipyArgumentError(f"{name} must be real or complex numbers, got "
                                 f"dtype {get_aval(x).dtype}")
    return fnp.ravel(x)


def _failed(what, message, shortfall=None, limit="options={'maxiter': ...}"):
    """The error of a solver that stopped short; ``shortfall``, where SciPy
    stopped at a point fgrad checked, says why that point is not a solution;
    ``limit`` is how the solver's iteration limit is raised."""
    message = " ".join(str(message).split()).rstrip(".")     # SciPy's may wrap lines
    why = "" if shortfall is None else f" ({shortfall})"
    return ConvergenceError(
        f"scipy.optimize.{what} did not converge: {message}. Its result is not a "
        f"solution{why}, so fgrad returns no derivative of it: raise the iteration limit "
        f"({limit}), loosen the tolerance, or start closer.")


# A solver that stops because floating point allows no further progress
# (SciPy's "xtol is too small", "not making good progress", "precision loss",
# an iteration limit reached going back and forth between neighbouring floats)
# has found the solution if its point checks out: a minimum's gradient, or the
# Newton step from a root, within sqrt(machine epsilon) of the problem's scale.
# SciPy reports such ends as failures, with the point; fgrad accepts them
# exactly when the point checks out, and raises `ConvergenceError` otherwise.


def _relative_newton_step(F, x):
    """|J^-1 F(x)| / (1 + |x|) (largest components), the Newton step from ``x``
    towards a root of ``F`` relative to ``x``'s size; inf where the Jacobian is
    numerically singular (no step can be trusted) and 0 where ``F(x)`` is 0."""
    x = np.asarray(x)
    r = np.ravel(np.asarray(F(x)))
    if not np.isfinite(r).all():
        return np.inf
    if not r.any():
        return 0.0
    J = np.asarray(jacfwd(F)(x)).reshape(r.size, x.size)
    if r.size != x.size or not np.isfinite(J).all() or \
            np.linalg.cond(J) * np.finfo(x.dtype).eps >= 1:
        return np.inf
    step = np.linalg.solve(J, r)
    return float(np.max(np.abs(step)) / (1 + np.max(np.abs(x), initial=0.0)))


def _root_shortfall(F, x, name="fun"):
    """None where ``x`` is a root of ``F`` to floating point's precision (the
    Newton step from it within sqrt(machine epsilon) (1 + |x|)), else what
    the point lacks, for the error message (``name`` names ``F`` there)."""
    step = _relative_newton_step(F, x)
    bound = np.sqrt(np.finfo(np.asarray(x).dtype).eps)
    if step <= bound:
        return None
    if step == np.inf:
        return f"{name} is not zero there, and its Jacobian is singular"
    return (f"the Newton step from it is {step:.1e} times 1 + |x|, over sqrt(machine "
            f"epsilon) = {bound:.1e}")


def _counts(res, *names):
    return [np.asarray(int(res.get(name, 0) or 0), np.int64) for name in names]


def _int_specs(count):
    return [spec((), np.int64)] * count


def _split(ops, sizes):
    out, start = [], 0
    for size in sizes:
        out.append(ops[start:start + size])
        start += size
    return out


class _Messages:
    """The message of the SciPy call this solver made (known outside jit)."""

    def __init__(self):
        self.text = "converged (the SciPy message is not kept under jit)"


# ---------------------------------------------------------------------------
# minimize
# ---------------------------------------------------------------------------

_GRADIENT_FREE = {"nelder-mead", "powell", "cobyla", "cobyqa"}
_HESS_MATRIX = {"dogleg", "trust-exact"}
_HESS_PRODUCT = {"newton-cg", "trust-ncg", "trust-krylov", "trust-constr"}


def _method_name(method, bounds, constraints):
    if method is None:          # SciPy's own choice
        return "slsqp" if constraints else "l-bfgs-b" if bounds is not None else "bfgs"
    if callable(method):
        raise ScipyArgumentError("minimize: a custom method (a callable) cannot be "
                                 "differentiated by fgrad; pass one of SciPy's names")
    return method.lower()


def _bound_arrays(bounds, n):
    lb, ub = np.full(n, -np.inf), np.full(n, np.inf)
    if bounds is None:
        return lb, ub
    if hasattr(bounds, "lb"):                       # scipy.optimize.Bounds
        return (np.broadcast_to(np.asarray(bounds.lb, float), (n,)).copy(),
                np.broadcast_to(np.asarray(bounds.ub, float), (n,)).copy())
    for i, (lo, hi) in enumerate(bounds):
        lb[i] = -np.inf if lo is None else lo
        ub[i] = np.inf if hi is None else hi
    return lb, ub


def _constraint_dicts(constraints):
    """Every constraint as SciPy's dict form (``c(x) = 0`` or ``c(x) >= 0``)."""
    if isinstance(constraints, dict) or hasattr(constraints, "lb"):
        constraints = [constraints]
    out = []
    for c in constraints:
        if isinstance(c, dict):
            out.append(c)
            continue
        if hasattr(c, "A"):                         # LinearConstraint
            A = np.atleast_2d(np.asarray(c.A, float))
            fun = (lambda A: lambda x: A @ x)(A)
        else:                                        # NonlinearConstraint
            fun = c.fun
        lb, ub = np.asarray(c.lb, float), np.asarray(c.ub, float)
        for kind, sign, bound, use in (("eq", 1.0, lb, lb == ub),
                                       ("ineq", 1.0, lb, (lb != ub) & np.isfinite(lb)),
                                       ("ineq", -1.0, ub, (lb != ub) & np.isfinite(ub))):
            if np.any(use):
                out.append({"type": kind, "fun": _piece(fun, sign, bound, use)})
    return out


def _piece(fun, sign, bound, use):
    index = np.flatnonzero(np.broadcast_to(use, np.shape(use) or (1,)))
    bound = np.broadcast_to(bound, np.shape(use) or (1,))[index]

    def c(x, *args):
        return sign * (fnp.atleast_1d(fun(x, *args))[index] - bound)
    return c


def _active_set(g, x, lb, ub, c, J, eq):
    """Which bounds and constraints hold with a positive multiplier at ``x``.

    Candidates are the equalities, the inequalities within 1e-6 of zero and the
    bounds within 1e-6 (relative) of ``x``; the multipliers solve
    ``g = sum mu_i grad c_i`` by least squares, and inequalities (and bounds)
    whose multiplier is not positive are dropped (twice, then kept).
    """
    n, m = x.size, c.size
    rows, kinds = [], []                 # kinds: ("c", j) / ("lo", i) / ("hi", i)
    for j in range(m):
        if eq[j] or c[j] <= 1e-6:
            rows.append(J[j]), kinds.append(("c", j))
    for i in range(n):
        if np.isfinite(lb[i]) and x[i] - lb[i] <= 1e-6 * (1 + abs(lb[i])):
            rows.append(np.eye(n)[i]), kinds.append(("lo", i))
        elif np.isfinite(ub[i]) and ub[i] - x[i] <= 1e-6 * (1 + abs(ub[i])):
            rows.append(-np.eye(n)[i]), kinds.append(("hi", i))
    tol = 1e-8 * (1 + np.max(np.abs(g), initial=0.0))
    mu = np.zeros(0)
    for _ in range(3):
        if not rows:
            break
        mu = np.linalg.lstsq(np.array(rows).T, g, rcond=None)[0]
        keep = [k == ("c", k[1]) and eq[k[1]] or mu_k > tol for k, mu_k in zip(kinds, mu)]
        if all(keep):
            break
        rows = [r for r, k in zip(rows, keep) if k]
        kinds = [k for k, keep_k in zip(kinds, keep) if keep_k]
    lower, upper = np.zeros(n), np.zeros(n)
    active, mult = np.zeros(m), np.zeros(m)
    for (kind, i), mu_k in zip(kinds, mu if rows else []):
        if kind == "lo":
            lower[i] = 1.0
        elif kind == "hi":
            upper[i] = 1.0
        else:
            active[i], mult[i] = 1.0, mu_k
    return lower, upper, active, mult


def minimize(fun, x0, args=(), method=None, jac=None, hess=None, hessp=None, bounds=None,
             constraints=(), tol=None, callback=None, options=None, *,
             implicit_solve="auto"):
    """``scipy.optimize.minimize``, with ``res.x`` (and ``res.fun``, ``res.jac``)
    differentiable in ``args`` and in what ``fun`` and the constraints close over.

    Every method SciPy offers may be named; gradient-based ones get ``jac``
    (and ``hess`` or ``hessp`` where they use one) from fgrad unless given.
    Bounds (``Bounds`` or pairs) and constraints (dicts, ``LinearConstraint``,
    ``NonlinearConstraint``) are handled in the derivative by their active
    set, as the module docstring says; the bounds themselves are constants.
    A gradient-free method's solution is only as accurate as its tolerance,
    and so is the derivative: tighten ``tol`` for those.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> def argmin(a):        # (x - a)^2 + x^4 / 4: x + x^3 / 2 = a ... at a = 1.5, x = 1
    ...     f = lambda x, a: fnp.sum((x - a) ** 2 + x ** 4 / 4)
    ...     return minimize(f, np.zeros(1), args=(a,), method="BFGS", tol=1e-12).x[0]
    >>> round(float(argmin(1.5)), 8), round(float(fgrad.grad(argmin)(1.5)), 8)
    (1.0, 0.4)
    """
    opt = scipy_optimize()
    args = args if isinstance(args, tuple) else (args,)
    constraints = _constraint_dicts(constraints)
    method = _method_name(method, bounds, constraints)
    if method in _GRADIENT_FREE and jac is True:
        raise ScipyArgumentError(f"minimize: method {method!r} uses no gradient, so "
                                 "jac=True is not meaningful")
    value = (lambda x, *a: fun(x, *a)[0]) if jac is True else fun
    x0 = _vector(x0, "x0")
    n = get_aval(x0).shape[0]
    objective = Staged(value, x0, args)
    cons = [Staged(c["fun"], x0, c.get("args", ())) for c in constraints]
    eq = np.concatenate([np.full(_size_of(c, x0), c_dict["type"] == "eq")
                         for c, c_dict in zip(cons, constraints)]) if cons else np.zeros(0, bool)
    m = eq.size
    lb, ub = _bound_arrays(bounds, n)
    sizes = [len(objective.ops)] + [len(c.ops) for c in cons]
    ops = objective.ops + [op for c in cons for op in c.ops]
    messages = _Messages()

    def all_constraints(x, parts):
        if not cons:
            return fnp.zeros(0)
        return fnp.concatenate([fnp.atleast_1d(c.call(x, p)) for c, p in zip(cons, parts)])

    def host(x0, *ops):
        parts = _split(ops, sizes)
        obj_ops, con_ops = parts[0], parts[1:]

        def f(x):
            return objective.call(x, obj_ops)
        scipy_fun, scipy_jac = _scipy_objective(fun, f, jac, objective, obj_ops, method)
        kwargs = dict(method=method, jac=scipy_jac, bounds=bounds, tol=tol,
                      callback=callback, options=options)
        if method in _HESS_MATRIX or method in _HESS_PRODUCT:
            user = objective.args_of(obj_ops)
            if hess is not None:
                kwargs["hess"] = hess if not callable(hess) else \
                    (lambda x: hess(x, *user))
            elif hessp is not None:
                kwargs["hessp"] = lambda x, p: hessp(x, p, *user)
            elif method in _HESS_MATRIX:
                kwargs["hess"] = lambda x: np.asarray(hessian(f)(x))
            else:
                kwargs["hessp"] = lambda x, p: np.asarray(
                    jvp(grad(f), (x,), (np.asarray(p, x.dtype),))[1])
        if constraints:
            kwargs["constraints"] = _scipy_constraints(cons, con_ops, constraints, method)
        res = opt.minimize(scipy_fun, np.asarray(x0), **kwargs)
        if not res.success:
            what = f"minimize(method={method!r})"
            if res.status != _MINIMIZE_PRECISION_ENDS.get(method):
                raise _failed(what, res.message)
            shortfall = _minimum_shortfall(res, f, lb, ub)
            if shortfall is not None:
                raise _failed(what, res.message, shortfall)
        messages.text = str(res.message)
        x = np.asarray(res.x, dtype=np.asarray(x0).dtype).reshape(n)
        value_at = np.asarray(res.fun, float).reshape(())
        g = np.asarray(res.jac, float).reshape(n) if "jac" in res and \
            np.size(res.jac) == n else np.asarray(grad(f)(x))
        if m or np.isfinite(lb).any() or np.isfinite(ub).any():
            c = np.asarray(all_constraints(x, con_ops))
            J = np.asarray(jacfwd(lambda x: all_constraints(x, con_ops))(x)).reshape(m, n)
            lower, upper, active, mu = _active_set(g, x, lb, ub, c, J, eq)
        else:
            lower, upper, active, mu = np.zeros(n), np.zeros(n), np.zeros(0), np.zeros(0)
        return [x, value_at, g, lower, upper, active, mu] + _counts(
            res, "nit", "nfev", "njev", "status")
    specs = [spec((n,), get_aval(x0).dtype), spec(()), spec((n,)), spec((n,)), spec((n,)),
             spec((m,)), spec((m,))] + _int_specs(4)
    x, value_at, g, lower, upper, active, mu, nit, nfev, njev, status = on_host(
        host, specs, x0, *ops)
    if any_traced(ops):
        x = _implicit_minimum(objective, cons, sizes, ops, x, lower, upper, active, mu,
                              implicit_solve)
    if any_traced(ops) or isinstance(x, Tracer):
        obj_ops = ops[:sizes[0]]
        value_at, g = value_and_grad(lambda x: objective.call(x, obj_ops))(x)
    return OptimizeResult(x=x, fun=value_at, jac=g, success=True, status=status,
                          message=messages.text, nit=nit, nfev=nfev, njev=njev)


# minimize's statuses that say floating point allows no further progress: a
# line search that finds no lower point ("precision loss", L-BFGS-B's
# "ABNORMAL", TNC's "Linear search failed"), a trust region whose model
# predicts no improvement ("A bad approximation")
_MINIMIZE_PRECISION_ENDS = {"bfgs": 2, "cg": 2, "newton-cg": 2, "l-bfgs-b": 2, "tnc": 4,
                            "dogleg": 2, "trust-ncg": 2, "trust-krylov": 2, "trust-exact": 2}


def _minimum_shortfall(res, f, lb, ub):
    """None where ``res.x`` is a minimum of ``f`` to floating point's precision
    (its gradient below sqrt(machine epsilon) (1 + |f|), leaving out the
    components that push a variable at its bound, ``lb`` or ``ub``, outwards),
    else what it lacks, for the error message."""
    x = np.asarray(res.x)
    g = np.asarray(grad(f)(x))
    held = ((x <= lb) & (g > 0)) | ((x >= ub) & (g < 0))
    largest = float(np.max(np.abs(np.where(held, 0.0, g)), initial=0.0))
    bound = float(np.sqrt(np.finfo(x.dtype).eps) * (1 + abs(res.fun)))
    if largest <= bound:
        return None
    return f"its gradient is {largest:.1e}, over sqrt(machine epsilon) (1 + |f|) = {bound:.1e}"


def _size_of(con, x0):
    """How many values a constraint function returns."""
    if con.closed is not None:
        shape = con.closed.graph.outvars[0].aval.shape
    else:
        shape = get_aval(con.call(x0, con.ops)).shape
    return int(np.prod(shape, dtype=np.int64))


def _scipy_objective(fun, f, jac, objective, obj_ops, method):
    """The function and ``jac`` SciPy is given."""
    user = objective.args_of(obj_ops)
    if jac is True:
        return (lambda x: fun(x, *user)), True
    if callable(jac):
        return (lambda x: float(f(x))), (lambda x: jac(x, *user))
    if jac is not None or method in _GRADIENT_FREE:      # "2-point", ...
        return (lambda x: float(f(x))), jac
    value_grad = value_and_grad(f)

    def both(x):
        v, g = value_grad(x)
        return float(v), np.asarray(g, dtype=float)
    return both, True


def _scipy_constraints(cons, con_ops, constraints, method):
    """The constraints SciPy is given: NumPy functions, with fgrad's Jacobian
    unless the user gave one (or the method uses none)."""
    out = []
    for con, ops, c in zip(cons, con_ops, constraints):
        def fun(x, con=con, ops=ops):
            return np.asarray(fnp.atleast_1d(con.call(x, ops)))
        entry = {"type": c["type"], "fun": fun}
        if callable(c.get("jac")):
            entry["jac"] = (lambda x, j=c["jac"], user=con.args_of(ops): j(x, *user))
        elif method not in _GRADIENT_FREE:
            entry["jac"] = (lambda x, con=con, ops=ops: np.atleast_2d(np.asarray(
                jacfwd(lambda x: fnp.atleast_1d(con.call(x, ops)))(x))))
        out.append(entry)
    return out


def _implicit_minimum(objective, cons, sizes, ops, x, lower, upper, active, mu, choice):
    """``x`` made differentiable in ``ops`` by the optimality (KKT) conditions.

    The masks and the anchor (the solution, without derivative) are passed as
    parameters, not closed over: the residual is evaluated again wherever its
    derivative is taken (inside jit's staged derivatives too), on those values.
    """
    n = get_aval(x).shape[0]
    masks = [1.0 - lower - upper, stop_gradient(x)] + ([active] if cons else [])
    count = len(ops)

    def pinned(x, free, anchor):          # variables at a bound stay there
        return free * x + (1.0 - free) * anchor

    if not cons:
        def residual(x, params):
            ops, (free, anchor) = params[:count], params[count:]
            obj_ops = ops[:sizes[0]]
            g = grad(lambda y: objective.call(y, obj_ops))(pinned(x, free, anchor))
            return free * g + (1.0 - free) * (x - anchor)
        solver = tangent_solver(choice, n, True, "Hessian")
        return implicit_root(residual, x, list(ops) + masks, solver, symmetric=True,
                             closed=True)

    def constraint_values(y, parts):
        return fnp.concatenate([fnp.atleast_1d(con.call(y, p))
                                for con, p in zip(cons, parts[1:])])

    def kkt(z, params):
        (x, mu_), (free, anchor, active) = z, params[count:]
        parts = _split(params[:count], sizes)
        y = pinned(x, free, anchor)

        def lagrangian(y):
            return objective.call(y, parts[0]) - fnp.sum(active * mu_ *
                                                         constraint_values(y, parts))
        g = grad(lagrangian)(y)
        return (free * g + (1.0 - free) * (x - anchor),
                -active * constraint_values(y, parts) + (1.0 - active) * mu_)
    solution = implicit_root(kkt, (x, mu), list(ops) + masks,
                             checked_dense_solve("KKT matrix"), symmetric=True, closed=True)
    return solution[0]


# ---------------------------------------------------------------------------
# Roots
# ---------------------------------------------------------------------------

_ROOT_JAC = {"hybr", "lm"}            # root methods that use a Jacobian
# root's statuses that say floating point allows no further progress (MINPACK's):
# hybr's "xtol is too small" and "not making good progress" (from the last five
# Jacobians, or ten iterations); lm's ftol, xtol or gtol "is too small"
_ROOT_PRECISION_ENDS = {"hybr": (3, 4, 5), "lm": (6, 7, 8)}
# the option that limits a root method's work, where it is not ``maxiter``
_ROOT_LIMIT = {"hybr": "maxfev", "df-sane": "maxfev"}


def root(fun, x0, args=(), method="hybr", jac=None, tol=None, callback=None,
         options=None, *, implicit_solve="auto"):
    """``scipy.optimize.root``, with ``res.x`` differentiable in ``args``: the
    derivative solves with the Jacobian of ``fun`` at the root (dense up to
    100 unknowns, BiCGSTAB beyond). ``hybr`` and ``lm`` get the Jacobian from
    fgrad unless ``jac`` is given. ``res.x`` is 1-d, as SciPy's.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> def equilibrium(k):         # x0 + x1 = 1, x1 = k x0^2
    ...     f = lambda x, k: fnp.stack([x[0] + x[1] - 1, x[1] - k * x[0] ** 2])
    ...     return root(f, np.array([0.5, 0.5]), args=(k,), tol=1e-12).x
    >>> np.round(equilibrium(2.0), 6)
    array([0.5, 0.5])
    >>> np.round(fgrad.jacfwd(equilibrium)(2.0), 6)    # dx/dk
    array([-0.083333,  0.083333])
    """
    opt = scipy_optimize()
    args = args if isinstance(args, tuple) else (args,)
    method = method.lower() if isinstance(method, str) else method
    value = (lambda x, *a: fun(x, *a)[0]) if jac is True else fun
    x0 = _vector(x0, "x0")
    n = get_aval(x0).shape[0]
    system = Staged(value, x0, args)
    messages = _Messages()

    def host(x0, *ops):
        def F(x):
            return system.call(x, ops)
        user = system.args_of(ops)
        if jac is True:
            scipy_fun, scipy_jac = (lambda x: fun(x, *user)), True
        elif callable(jac):
            scipy_fun, scipy_jac = (lambda x: np.asarray(F(x))), (lambda x: jac(x, *user))
        elif method in _ROOT_JAC:
            scipy_fun, scipy_jac = (lambda x: np.asarray(F(x))), (
                lambda x: np.asarray(jacfwd(F)(x)))
        else:
            scipy_fun, scipy_jac = (lambda x: np.asarray(F(x))), None
        res = opt.root(scipy_fun, np.asarray(x0), method=method, jac=scipy_jac, tol=tol,
                       callback=callback, options=options)
        x = np.asarray(res.x, np.asarray(x0).dtype).reshape(n)
        if not res.success:
            limit = f"options={{{_ROOT_LIMIT.get(method, 'maxiter')!r}: ...}}"
            if res.get("status") not in _ROOT_PRECISION_ENDS.get(method, ()):
                raise _failed(f"root(method={method!r})", res.message, limit=limit)
            shortfall = _root_shortfall(F, x)
            if shortfall is not None:
                raise _failed(f"root(method={method!r})", res.message, shortfall, limit)
        messages.text = str(res.message)
        return [x] + _counts(res, "nfev", "njev", "status")
    specs = [spec((n,), get_aval(x0).dtype)] + _int_specs(3)
    x, nfev, njev, status = on_host(host, specs, x0, *system.ops)
    if any_traced(system.ops):
        x = implicit_root(lambda x, ops: system.call(x, ops), x, system.ops,
                          tangent_solver(implicit_solve, n, False, "Jacobian"), closed=True)
    return OptimizeResult(x=x, fun=system.call(x, system.ops), success=True,
                          status=status, message=messages.text, nfev=nfev, njev=njev)


def _scalar_solve(g, y):
    return checked_dense_solve("derivative")(g, y)


def root_scalar(f, args=(), method=None, bracket=None, fprime=None, fprime2=None,
                x0=None, x1=None, xtol=None, rtol=None, maxiter=None, options=None):
    """``scipy.optimize.root_scalar`` (bracketing methods included), with
    ``.root`` differentiable in ``args``: ``-(df/dargs) / (df/dx)`` at the
    root. ``newton`` and ``halley`` get ``fprime`` (and ``fprime2``) from fgrad
    unless given; a root where ``df/dx = 0`` raises
    `fgrad.errors.ImplicitSolveError`.

    >>> import numpy as np, fgrad
    >>> r = lambda a: root_scalar(lambda x, a: x ** 3 - a, args=(a,), bracket=(0, 5),
    ...                           xtol=1e-14).root
    >>> round(float(r(8.0)), 10), round(float(fgrad.grad(r)(8.0)), 10)
    (2.0, 0.0833333333)
    """
    opt = scipy_optimize()
    args = args if isinstance(args, tuple) else (args,)
    value = (lambda x, *a: f(x, *a)[0]) if fprime is True or fprime2 is True else f
    problem = Staged(value, np.float64(1.0), args)      # x: a float64 scalar
    state = {"method": method}
    initial = [v for v in (x0, x1) if v is not None] + (
        list(bracket) if bracket is not None else [])

    def host(*flat):
        starts, ops = flat[:len(initial)], flat[len(initial):]
        it = iter(starts)
        x0_, x1_ = (next(it) if x0 is not None else None,
                    next(it) if x1 is not None else None)
        bracket_ = (float(next(it)), float(next(it))) if bracket is not None else None

        def F(x):
            return problem.call(x, ops)
        user = problem.args_of(ops)
        kw = dict(method=method, bracket=bracket_, x0=None if x0_ is None else float(x0_),
                  x1=None if x1_ is None else float(x1_), xtol=xtol, rtol=rtol,
                  maxiter=maxiter, options=options)
        wants_d1 = method in ("newton", "halley") and fprime is None
        if fprime is True or fprime2 is True:
            kw.update(fprime=fprime, fprime2=fprime2)
            res = opt.root_scalar(lambda x: f(x, *user), **kw)
        else:
            kw["fprime"] = (lambda x: float(grad(F)(np.float64(x)))) if wants_d1 else (
                None if fprime is None else (lambda x: fprime(x, *user)))
            if method == "halley" and fprime2 is None:
                kw["fprime2"] = lambda x: float(grad(grad(F))(np.float64(x)))
            elif fprime2 is not None:
                kw["fprime2"] = lambda x: fprime2(x, *user)
            res = opt.root_scalar(lambda x: float(F(x)), **kw)
        if not res.converged:
            # "convergence error": the iteration limit, or (secant) two points
            # with one value: at a root, the ends of floating point's precision
            if res.flag != "convergence error":
                raise _failed(f"root_scalar(method={res.method!r})", res.flag,
                              limit="maxiter=...")
            shortfall = _root_shortfall(F, np.float64(res.root), "f")
            if shortfall is not None:
                raise _failed(f"root_scalar(method={res.method!r})", res.flag, shortfall,
                              "maxiter=...")
        state["method"] = res.method
        return [np.float64(res.root)] + _counts(vars(res), "iterations", "function_calls")
    specs = [spec(())] + _int_specs(2)
    x, iterations, calls = on_host(host, specs, *initial, *problem.ops)
    if any_traced(problem.ops):
        x = implicit_root(lambda x, ops: problem.call(x, ops), x, problem.ops,
                          _scalar_solve, closed=True)
    return RootResults(x, iterations, calls, "converged", state["method"])


def fixed_point(func, x0, args=(), xtol=1e-08, maxiter=500, method="del2", *,
                implicit_solve="auto"):
    """``scipy.optimize.fixed_point``: ``x`` with ``func(x, *args) = x``,
    differentiable in ``args`` (the derivative solves with ``I - dfunc/dx``).
    SciPy's failure to converge raises `fgrad.errors.ConvergenceError`.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> x = lambda a: fixed_point(lambda x, a: fnp.cos(a * x), 0.5, args=(a,))
    >>> round(float(x(1.0)), 8), round(float(fgrad.grad(x)(1.0)), 8)
    (0.73908513, -0.29747434)
    """
    opt = scipy_optimize()
    args = args if isinstance(args, tuple) else (args,)
    shape = get_aval(x0).shape
    x0v = _vector(x0, "x0")
    n = get_aval(x0v).shape[0]

    def flat_func(x, *a):
        return fnp.ravel(func(fnp.reshape(x, shape), *a))
    problem = Staged(flat_func, x0v, args)

    def host(x0, *ops):
        # SciPy's error does not carry its last point: the point evaluated
        # closest to being fixed stands in for it
        closest = [np.inf, None]

        def step(x):
            x = np.asarray(x, float).reshape(n)
            fx = np.asarray(problem.call(x, ops))
            distance = np.max(np.abs(fx - x), initial=0.0)
            if distance < closest[0]:
                closest[:] = distance, x
            return fx
        try:
            x = opt.fixed_point(step, np.asarray(x0), xtol=xtol, maxiter=maxiter,
                                method=method)
        except RuntimeError as err:
            x = closest[1]
            shortfall = "no point evaluated was finite" if x is None else _root_shortfall(
                lambda x: problem.call(x, ops) - x, x, "func(x) - x")
            if shortfall is not None:
                raise _failed("fixed_point", str(err), shortfall, "maxiter=...") from None
        return np.asarray(x, np.asarray(x0).dtype).reshape(n)
    x = on_host(host, spec((n,), get_aval(x0v).dtype), x0v, *problem.ops)
    if any_traced(problem.ops):
        x = implicit_root(lambda x, ops: problem.call(x, ops) - x, x, problem.ops,
                          tangent_solver(implicit_solve, n, False, "fixed-point Jacobian"),
                          closed=True)
    return fnp.reshape(x, shape)


# ---------------------------------------------------------------------------
# Least squares and curve fitting
# ---------------------------------------------------------------------------


def _rho(loss, z):
    """SciPy's robust losses of ``z = (r / f_scale)**2``."""
    if loss == "linear":
        return z
    if loss == "soft_l1":
        return 2 * (fnp.sqrt(1 + z) - 1)
    if loss == "huber":
        return fnp.where(z <= 1, z, 2 * fnp.sqrt(fnp.maximum(z, 1.0)) - 1)
    if loss == "cauchy":
        return fnp.log1p(z)
    if loss == "arctan":
        return fnp.arctan(z)
    raise ScipyArgumentError(f"least_squares: loss={loss!r} is not one of SciPy's "
                             "named losses (a callable loss cannot be differentiated)")


def _cost(residuals, loss, f_scale):
    r = residuals
    return 0.5 * f_scale ** 2 * fnp.sum(_rho(loss, (r / f_scale) ** 2))


def least_squares(fun, x0, jac=None, bounds=(-np.inf, np.inf), method="trf", ftol=1e-08,
                  xtol=1e-08, gtol=1e-08, x_scale=None, loss="linear", f_scale=1.0,
                  diff_step=None, tr_solver=None, tr_options=None, jac_sparsity=None,
                  max_nfev=None, verbose=0, args=(), kwargs=None, callback=None,
                  workers=None, *, implicit_solve="auto"):
    """``scipy.optimize.least_squares``, with ``res.x`` differentiable in
    ``args`` and ``kwargs``: the gradient of the cost (robust ``loss`` and
    ``f_scale`` included) is zero at the free variables, solved with its
    whole Hessian; variables SciPy reports at a bound (``active_mask``) keep a
    zero derivative. One difference from SciPy: ``jac=None`` (the default) is
    fgrad's exact Jacobian; pass ``"2-point"`` for SciPy's finite differences.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> t = np.linspace(0, 1, 5)
    >>> def rate(y):
    ...     r = lambda k, y: fnp.exp(-k[0] * t) - y
    ...     return least_squares(r, np.array([1.0]), args=(y,)).x[0]
    >>> y = np.exp(-2.0 * t)
    >>> round(float(rate(y)), 6), round(float(fgrad.grad(lambda y: rate(y))(y)[1]), 6)
    (2.0, -1.470062)
    """
    opt = scipy_optimize()
    args = args if isinstance(args, tuple) else (args,)
    kwargs = dict(kwargs or {})
    names = sorted(kwargs)
    x0 = _vector(x0, "x0")
    n = get_aval(x0).shape[0]

    def residual_fn(x, *flat):
        return fnp.ravel(fun(x, *flat[:len(args)], **dict(zip(names, flat[len(args):]))))
    problem = Staged(residual_fn, x0, args + tuple(kwargs[k] for k in names))
    cost_of = Staged(lambda x, *a: _cost(residual_fn(x, *a), loss, f_scale), x0,
                     args + tuple(kwargs[k] for k in names))
    messages = _Messages()

    def host(x0, *ops):
        def r(x):
            return problem.call(x, ops)
        scipy_jac = jac if jac is not None else (lambda x: np.asarray(jacfwd(r)(x)))
        res = opt.least_squares(
            lambda x: np.asarray(r(x)), np.asarray(x0), jac=scipy_jac, bounds=bounds,
            method=method, ftol=ftol, xtol=xtol, gtol=gtol,
            **({} if x_scale is None else {"x_scale": x_scale}), loss=loss,
            f_scale=f_scale, diff_step=diff_step, tr_solver=tr_solver,
            tr_options=tr_options, jac_sparsity=jac_sparsity, max_nfev=max_nfev,
            verbose=verbose, callback=callback, workers=workers)
        what = f"least_squares(method={method!r})"
        if not res.success:
            # status 0, the evaluation limit, is the end where no tolerance can
            # be met (gtol alone, below what floating point resolves)
            if res.status != 0:
                raise _failed(what, res.message, limit="max_nfev=...")
            shortfall = _optimum_shortfall(r, lambda x: cost_of.call(x, ops),
                                           np.asarray(res.x), np.asarray(res.active_mask) == 0)
            if shortfall is not None:
                raise _failed(what, res.message, shortfall, "max_nfev=...")
        messages.text = str(res.message)
        mask = np.asarray(res.active_mask, float)
        return [np.asarray(res.x, np.asarray(x0).dtype).reshape(n), (mask < 0) * 1.0,
                (mask > 0) * 1.0] + _counts(res, "nfev", "njev", "status")
    specs = [spec((n,), get_aval(x0).dtype), spec((n,)), spec((n,))] + _int_specs(3)
    x, lower, upper, nfev, njev, status = on_host(host, specs, x0, *problem.ops)
    if any_traced(problem.ops):
        x = _implicit_minimum(cost_of, [], [len(cost_of.ops)], cost_of.ops, x, lower,
                              upper, None, None, implicit_solve)
    r = problem.call(x, problem.ops)
    J = jacfwd(lambda x: problem.call(x, problem.ops))(x)
    g = grad(lambda x: cost_of.call(x, cost_of.ops))(x)
    return OptimizeResult(x=x, cost=_cost(r, loss, f_scale), fun=r, jac=J, grad=g,
                          optimality=fnp.max(fnp.abs(g * (1 - lower - upper))),
                          active_mask=(upper - lower).astype(np.int64), nfev=nfev,
                          njev=njev, status=status, message=messages.text, success=True)


def _optimum_shortfall(r, cost, x, free):
    """None where ``x`` is a least-squares optimum of the residuals ``r(x)``
    to floating point's precision, else what it lacks: the gradient of
    ``cost`` in each ``free`` variable within sqrt(machine epsilon) |J_j| |r|
    (the cosine of the angle between the residuals and a column of the
    Jacobian, MINPACK's ``gtol`` measure, which no scaling of the problem
    changes)."""
    residuals = np.asarray(r(x))
    J = np.asarray(jacfwd(r)(x)).reshape(residuals.size, x.size)
    g = np.asarray(grad(cost)(x))
    scale = np.linalg.norm(J, axis=0) * np.linalg.norm(residuals)
    cosine = np.max(np.abs(g[free]) / np.where(scale[free] > 0, scale[free], 1.0),
                    initial=0.0)
    bound = np.sqrt(np.finfo(x.dtype).eps)
    if cosine <= bound:
        return None
    return (f"the gradient of the cost is {cosine:.1e} times |column of J| |residuals|, "
            f"over sqrt(machine epsilon) = {bound:.1e}")


def _curve_fit_precision_end(message):
    """The status of a precision-limited end that SciPy's curve_fit raised
    for (its message without "Optimal parameters not found: "): MINPACK's
    6, 7, 8 ("ftol / xtol / gtol is too small") with lm, 0 (the evaluation
    limit, as `least_squares`) with trf and dogbox; None for any other end."""
    for status, name in ((6, "ftol="), (7, "xtol="), (8, "gtol=")):
        if message.startswith(name) and "is too small" in message:
            return status
    if message.startswith("The maximum number of function evaluations is exceeded"):
        return 0
    return None


def _parameter_count(f):
    params = [p for p in inspect.signature(f).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(f).parameters.values()) \
            or len(params) < 2:
        raise ScipyArgumentError("curve_fit: cannot tell how many parameters f takes: "
                                 "give p0")
    return len(params) - 1


def _whitened(r, sigma):
    """Residuals divided by ``sigma`` (1-d) or by the Cholesky factor of the
    covariance ``sigma`` (2-d), as SciPy does."""
    if sigma is None:
        return r
    if get_aval(sigma).ndim == 1:
        return r / sigma
    L = fnp.linalg.cholesky(sigma)
    return fnp.linalg.solve(L, r[:, None])[:, 0]


def curve_fit(f, xdata, ydata, p0=None, sigma=None, absolute_sigma=False,
              check_finite=None, bounds=(-np.inf, np.inf), method=None, jac=None, *,
              full_output=False, nan_policy=None, implicit_solve="auto", **kwargs):
    """``scipy.optimize.curve_fit``: ``(popt, pcov)``, both differentiable in
    ``ydata``, ``sigma`` and floating ``xdata`` (and in what ``f`` closes
    over). ``popt`` by the implicit rule on the weighted least-squares
    gradient; ``pcov`` is SciPy's formula written with `fgrad.numpy` at
    ``popt`` (the pseudo-inverse of ``J^T J``, scaled by the reduced chi-square
    unless ``absolute_sigma``), so error propagation differentiates too.
    ``jac`` defaults to fgrad's exact Jacobian. With ``full_output=True`` the
    result is ``(popt, pcov, infodict, mesg, ier)`` as in SciPy, where
    ``infodict`` holds ``fvec`` and ``nfev``.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> x = np.linspace(0, 1, 6)
    >>> model = lambda x, a, b: a * fnp.exp(b * x)
    >>> y = 2 * np.exp(-x)
    >>> popt, pcov = curve_fit(model, x, y, p0=[1.0, 0.0])
    >>> np.round(popt, 8)
    array([ 2., -1.])
    >>> dpopt_dy = fgrad.jacrev(lambda y: curve_fit(model, x, y, p0=[1.0, 0.0])[0])(y)
    >>> dpopt_dy.shape
    (2, 6)
    """
    opt = scipy_optimize()
    p0 = _vector(np.ones(_parameter_count(f)) if p0 is None else p0, "p0")
    n = get_aval(p0).shape[0]
    ydata = ydata if isinstance(ydata, Tracer) else np.asarray(ydata, float)
    data = (xdata, ydata, sigma)

    def residuals(p, xdata, ydata, sigma):
        model = fnp.ravel(f(xdata, *[p[i] for i in range(n)]))
        return _whitened(model - fnp.ravel(ydata), sigma)
    problem = Staged(residuals, p0, data)
    cost_of = Staged(lambda p, *d: 0.5 * fnp.sum(residuals(p, *d) ** 2), p0, data)
    messages = _Messages()
    pair = (bounds.lb, bounds.ub) if hasattr(bounds, "lb") else bounds
    lb, ub = (np.broadcast_to(np.asarray(b, float), (n,)) for b in pair)
    bounded = bool(np.any(np.isfinite(lb)) or np.any(np.isfinite(ub)))

    def host(p0, *ops):
        xd, yd, sg = problem.args_of(ops)
        # the parameters SciPy tried: its error does not carry where it stopped
        tried = []

        def model(x, *p):
            tried.append(np.asarray(p, float))
            return np.asarray(f(x, *p))

        def model_jac(x, *p):
            return np.asarray(jacfwd(lambda q: fnp.ravel(f(x, *[q[i] for i in range(n)])))(
                np.asarray(p, float))).reshape(-1, n)
        try:
            out = opt.curve_fit(model, xd, yd, p0=np.asarray(p0), sigma=sg,
                                absolute_sigma=absolute_sigma, check_finite=check_finite,
                                bounds=bounds, method=method,
                                jac=model_jac if jac is None else jac, full_output=True,
                                nan_policy=nan_policy, **kwargs)
            popt, _, info, mesg, ier = out
            nfev = info.get("nfev", 0)
        except RuntimeError as err:         # SciPy's "Optimal parameters not found"
            mesg = " ".join(str(err).split(": ", 1)[-1].split())
            ier = _curve_fit_precision_end(mesg)
            if ier is None or not tried:
                raise _failed("curve_fit", mesg, limit="maxfev=...") from None
            # where it stopped: the parameters tried with the least cost
            popt = min(tried, key=lambda p: float(cost_of.call(p, ops)))
            nfev = len(tried)
        p = np.asarray(popt, float).reshape(n)
        at = np.isfinite(lb) & (p - lb <= 1e-6 * (1 + np.abs(lb))) if bounded else \
            np.zeros(n, bool)
        above = np.isfinite(ub) & (ub - p <= 1e-6 * (1 + np.abs(ub))) if bounded else \
            np.zeros(n, bool)
        if ier not in (1, 2, 3, 4):
            shortfall = _optimum_shortfall(lambda p: problem.call(p, ops),
                                           lambda p: cost_of.call(p, ops), p, ~(at | above))
            if shortfall is not None:
                raise _failed("curve_fit", mesg, shortfall, "maxfev=...")
        messages.text = str(mesg)
        return [p, at * 1.0, above * 1.0, np.asarray(nfev, np.int64),
                np.asarray(ier, np.int64)]
    specs = [spec((n,)), spec((n,)), spec((n,))] + _int_specs(2)
    popt, lower, upper, nfev, ier = on_host(host, specs, p0, *problem.ops)
    if any_traced(problem.ops):
        popt = _implicit_minimum(cost_of, [], [len(cost_of.ops)], cost_of.ops, popt,
                                 lower, upper, None, None, implicit_solve)
    r = problem.call(popt, problem.ops)
    J = jacfwd(lambda p: problem.call(p, problem.ops))(popt)
    pinv_j = fnp.linalg.pinv(J)
    pcov = pinv_j @ fnp.transpose(pinv_j)
    m = get_aval(r).shape[0]
    if not absolute_sigma:
        pcov = pcov * (fnp.sum(r ** 2) / (m - n)) if m > n else pcov * np.inf
    if full_output:
        return popt, pcov, {"fvec": r, "nfev": nfev}, messages.text, ier
    return popt, pcov
