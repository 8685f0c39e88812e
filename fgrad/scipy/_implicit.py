"""What `fgrad.scipy.optimize`'s solvers share: a user function staged with its
parameters, SciPy called on host values, and the linear solves of implicit
derivatives (dense and checked for small problems, matrix-free Krylov beyond).

Private to `fgrad.scipy`.
"""
import numpy as np

import fgrad.numpy as fnp
from fgrad.core.errors import (
    ConcretizationError,
    ImplicitSolveError,
    OptionalDependencyError,
)
from fgrad.core.trace import Tracer, current_level, get_aval
from fgrad.core.tree import tree_flatten, tree_unflatten
from fgrad.primitives.callback import pure_callback
from fgrad.primitives.creation import stop_gradient
from fgrad.transforms.lax import while_loop
from fgrad.transforms.linear_solve import closure_convert
from fgrad.transforms.vmap import vmap

# at most this many unknowns, an implicit derivative builds the matrix (one
# batched Jacobian-vector product per unknown) and factorises it; beyond, it
# solves matrix-free by Krylov iterations (CG for a Hessian, BiCGSTAB otherwise)
DENSE_MAX = 100
# a matrix more ill-conditioned than this gives derivatives with no correct digits
MAX_CONDITION = 1e12


def scipy_optimize():
    try:
        import scipy.optimize
    except ImportError:
        raise OptionalDependencyError(
            "fgrad.scipy.optimize runs scipy.optimize, and SciPy is not installed: pip "
            "install 'fgrad[scipy]' (from a checkout: pip install '.[scipy]')") from None
    return scipy.optimize


# ---------------------------------------------------------------------------
# A user function with its parameters
# ---------------------------------------------------------------------------


class Staged:
    """``fun(x, *args)`` as a function of ``x`` and a flat list of parameters
    (``ops``): the array leaves of ``args`` followed by any traced values ``fun``
    closes over. ``call(x, ops)`` evaluates it under any transformation;
    ``host(ops)`` is a NumPy function of ``x`` for SciPy.

    Outside every transformation nothing is staged: ``fun`` is called as it is,
    so Python control flow on values works there.
    """

    def __init__(self, fun, x, args):
        self.fun, self.args = fun, tuple(args)
        leaves, self.tree = tree_flatten(self.args)
        self.arrays = [i for i, a in enumerate(leaves) if _is_array(a)]
        self.static = leaves
        arrays = [leaves[i] for i in self.arrays]
        self.closed = None
        if current_level() > 0:
            avals = [get_aval(x)] + [get_aval(a) for a in arrays]
            in_tree = tree_flatten((x,) + tuple(arrays))[1]
            try:
                self.closed = closure_convert(
                    lambda xa: fun(xa[0], *self._args(xa[1:])), in_tree, avals)
            except ConcretizationError as err:
                raise ConcretizationError(
                    f"fgrad.scipy.optimize stages {getattr(fun, '__name__', 'the function')}"
                    " (as jit would) to find the traced values it reads, because it is "
                    "called inside a transformation; Python control flow on array values "
                    "cannot be staged: write it with fgrad.numpy.where or fgrad.lax.cond. "
                    f"The staging error: {err}") from None
            self.ops = arrays + list(self.closed.consts)
        else:
            self.ops = arrays

    def _args(self, arrays):
        leaves = list(self.static)
        for i, a in zip(self.arrays, arrays):
            leaves[i] = a
        return tree_unflatten(self.tree, leaves)

    def call(self, x, ops):
        if self.closed is None:
            return self.fun(x, *self._args(ops))
        out = self.closed.apply([x] + list(ops), [])
        return tree_unflatten(self.closed.out_tree, out)

    def args_of(self, ops):
        """The user's ``args`` rebuilt from ``ops``."""
        return self._args(ops[:len(self.arrays)])


def _is_array(x):
    if isinstance(x, Tracer):
        return True
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return isinstance(x, float) and not isinstance(x, bool)
    return np.dtype(dtype).kind in "fc"


def any_traced(leaves):
    return any(isinstance(x, Tracer) for x in leaves)


def on_host(host_fn, specs, *arrays):
    """``host_fn(*arrays)`` on NumPy values without derivatives: a plain call,
    or a `pure_callback` where any value is traced (jit, vmap, grad)."""
    if not any_traced(arrays):
        return host_fn(*[np.asarray(a) for a in arrays])
    return pure_callback(host_fn, specs, *[stop_gradient(a) for a in arrays])


def spec(shape, dtype=np.float64):
    return get_aval(np.empty(shape, dtype))


# ---------------------------------------------------------------------------
# Linear solves for implicit derivatives
# ---------------------------------------------------------------------------


def _ravel(tree):
    leaves = tree_flatten(tree)[0]
    return fnp.concatenate([fnp.ravel(x) for x in leaves]) if len(leaves) > 1 \
        else fnp.ravel(leaves[0])


def _condition_check(what):
    def check(matrix):
        if not np.all(np.isfinite(matrix)):
            raise ImplicitSolveError(
                f"the {what} at the solution has non-finite entries, so its implicit "
                "derivative is undefined: check the function for NaN or inf there.")
        cond = np.linalg.cond(matrix) if matrix.size else 1.0
        if not cond <= MAX_CONDITION:
            raise ImplicitSolveError(
                f"the {what} at the solution is singular or ill-conditioned (condition "
                f"number {cond:.3g} > {MAX_CONDITION:.0e}): the solution is not a smooth "
                "function of the parameters there (a flat or degenerate optimum, a "
                "multiple root), so no derivative is returned. Regularise the problem "
                "or fix the directions it leaves free.")
        return np.zeros((), matrix.dtype)
    return check


def checked_dense_solve(what):
    """`fgrad.lax.dense_solve` after a check of the matrix's condition number,
    which raises `ImplicitSolveError` rather than return a meaningless solve."""
    def solve(g, y):
        leaves = tree_flatten(y)[0]
        size = sum(int(np.prod(get_aval(x).shape)) for x in leaves)
        dtype = np.result_type(*[get_aval(x).dtype for x in leaves])
        like = tree_unflatten(tree_flatten(y)[1], leaves)

        def column(e):
            return _ravel(g(_unravel_like(e, like)))
        # the columns of the matrix, one batched product per basis vector
        matrix = fnp.transpose(vmap(column)(np.eye(size, dtype=dtype)))
        # the check's zero is added to the result, so a compiler keeps the check
        zero = pure_callback(_condition_check(what), spec((), dtype),
                             stop_gradient(matrix))
        x = fnp.linalg.solve(matrix, _ravel(y)) + zero
        return _unravel_like(x, like)
    return solve


def _unravel_like(vector, like):
    leaves, tree = tree_flatten(like)
    out, start = [], 0
    for x in leaves:
        shape = get_aval(x).shape
        size = int(np.prod(shape, dtype=np.int64))
        out.append(fnp.reshape(vector[start:start + size], shape))
        start += size
    return tree_unflatten(tree, out)


def _krylov_check(what, maxiter):
    def check(k, residual, bound, broke):
        if broke or not residual <= bound:
            why = ("broke down (the matrix is not positive definite, or singular)"
                   if broke else f"did not converge in {maxiter} iterations")
            raise ImplicitSolveError(
                f"the matrix-free solve with the {what} at the solution {why} "
                f"(residual {float(residual):.3g}, tolerance {float(bound):.3g}): the "
                "solution may be a saddle point or a degenerate optimum, where no "
                "derivative exists; or pass implicit_solve='dense' for a direct solve.")
        return np.zeros((), np.float64)
    return check


def _dot(a, b):
    return fnp.sum(a * b)


def krylov_solve(what, symmetric, rtol=1e-10):
    """A matrix-free ``tangent_solve``: conjugate gradients when ``symmetric``
    (a Hessian, positive definite at a strict minimum), BiCGSTAB otherwise.
    Failure raises `ImplicitSolveError` (at run time under `jit`)."""
    def solve(g, y):
        b = _ravel(y)
        n = get_aval(b).shape[0]
        maxiter = 10 * n + 10

        def mv(v):
            return _ravel(g(_unravel_like(v, y)))
        bound = rtol * fnp.sqrt(_dot(b, b))
        x0 = b * 0.0
        if symmetric:
            x, k, res, broke = _cg(mv, b, x0, bound, maxiter)
        else:
            x, k, res, broke = _bicgstab(mv, b, x0, bound, maxiter)
        zero = pure_callback(_krylov_check(what, maxiter), spec(()), stop_gradient(k),
                             stop_gradient(res), stop_gradient(bound), stop_gradient(broke))
        return _unravel_like(x + zero, y)
    return solve


def _cg(mv, b, x, bound, maxiter):
    r = b - mv(x)

    def cond(s):
        x, r, p, rr, k, broke = s
        return (fnp.sqrt(rr) > bound) & (k < maxiter) & ~broke

    def body(s):
        x, r, p, rr, k, _ = s
        ap = mv(p)
        pap = _dot(p, ap)
        broke = ~(pap > 0)
        alpha = rr / fnp.where(broke, 1.0, pap)
        x, r = x + alpha * p, r - alpha * ap
        rr_new = _dot(r, r)
        return x, r, r + rr_new / rr * p, rr_new, k + 1, broke
    rr = _dot(r, r)
    x, r, _, rr, k, broke = while_loop(cond, body, (x, r, r, rr, 0, rr < 0))
    return x, k, fnp.sqrt(rr), broke


def _bicgstab(mv, b, x, bound, maxiter):
    r = b - mv(x)
    r_hat = r

    def cond(s):
        x, r, p, v, rho, alpha, omega, k, broke = s
        return (fnp.sqrt(_dot(r, r)) > bound) & (k < maxiter) & ~broke

    def body(s):
        x, r, p, v, rho, alpha, omega, k, _ = s
        rho_new = _dot(r_hat, r)
        beta = rho_new / rho * alpha / omega
        p = r + beta * (p - omega * v)
        v = mv(p)
        denom = _dot(r_hat, v)
        broke = (denom == 0) | (rho_new == 0)
        alpha = rho_new / fnp.where(broke, 1.0, denom)
        s_ = r - alpha * v
        t = mv(s_)
        tt = _dot(t, t)
        omega = fnp.where(tt > 0, _dot(t, s_) / fnp.where(tt > 0, tt, 1.0), 0.0)
        x = x + alpha * p + omega * s_
        r = s_ - omega * t
        broke = broke | ((omega == 0) & (fnp.sqrt(_dot(r, r)) > bound))
        return x, r, p, v, rho_new, alpha, omega, k + 1, broke
    one = fnp.ones((), get_aval(b).dtype)
    state = (x, r, b * 0.0, b * 0.0, one, one, one, np.int64(0), fnp.zeros((), bool))
    x, r, *_, k, broke = while_loop(cond, body, state)
    return x, k, fnp.sqrt(_dot(r, r)), broke


def tangent_solver(choice, size, symmetric, what):
    """The ``tangent_solve`` for ``size`` unknowns: ``choice`` is ``"auto"``
    (dense up to `DENSE_MAX` unknowns, Krylov beyond), ``"dense"``, or
    ``"krylov"``."""
    if choice not in ("auto", "dense", "krylov"):
        raise ValueError(f"implicit_solve must be 'auto', 'dense' or 'krylov', got "
                         f"{choice!r}")
    if choice == "dense" or (choice == "auto" and size <= DENSE_MAX):
        return checked_dense_solve(what)
    return krylov_solve(what, symmetric)
