"""``scipy.linalg`` matrix functions as primitives: ``expm`` and ``logm``.

For a primary matrix function f (exp, log, sqrt) the Frechet derivative
L_f(A, E) -- the directional derivative of f at A along E -- is the top-right
block of f of a block matrix:

    f([[A, E], [0, A]]) = [[f(A), L_f(A, E)], [0, f(A)]]

So the JVP evaluates the same primitive on a matrix twice the size, and the
VJP is L_f(A^T, ct) (f has real Taylor coefficients, so the adjoint of L_f(A, .)
is L_f(A^T, .)). Both are bound primitives: every order differentiates.
"""
import numpy as np

from fgrad.core.backend import array_module
from fgrad.core.trace import Primitive, ShapedArray, get_aval

from fgrad.primitives.elementwise import cast_like
from fgrad.primitives.shape import concatenate, transpose
from fgrad.primitives.special import per_example_rule, scipy_function, scipy_module

FAMILY = "primitives/scipy_linalg.py"


def _square_abstract(name):
    def abstract(a):
        if a.ndim != 2 or a.shape[0] != a.shape[1]:
            raise ValueError(f"{name}: expected a square (n, n) matrix, got shape {a.shape}")
        return ShapedArray(a.shape, np.result_type(a.dtype, np.float32))
    return abstract


def _real_if_input_real(name, a, out):
    # scipy's logm of a real matrix returns complex when the logarithm is not
    # real; fgrad keeps the input's dtype kind, so that case is refused
    if out.dtype.kind == "c" and a.dtype.kind != "c":
        xp = array_module(out)
        if float(xp.abs(out.imag).max()) > 1e-12 * max(float(xp.abs(out).max()), 1.0):
            raise ValueError(f"{name}: the matrix has no real {name} (a negative real "
                             f"eigenvalue); pass it as a complex matrix")
        out = out.real
    return out


def _matrix_function(name):
    def impl(a):
        out = scipy_function("linalg", name, a)(a)
        out = out[0] if isinstance(out, tuple) else out
        out = _real_if_input_real(name, a, out)
        return out.astype(_square_abstract(name)(get_aval(a)).dtype, copy=False)

    prim = Primitive(name, impl, _square_abstract(name), family=FAMILY)

    def frechet(a, e):
        n = get_aval(a).shape[0]
        zero = a * 0
        block = concatenate([concatenate([a, e], 1), concatenate([zero, a], 1)], 0)
        return prim.bind(block)[:n, n:]

    prim.def_vjp(lambda ct, ans, a: cast_like(frechet(transpose(a), ct), get_aval(a)))
    prim.def_jvp(lambda t, ans, a: frechet(a, t))
    per_example_rule(prim)
    return prim


expm_p = _matrix_function("expm")
logm_p = _matrix_function("logm")


def expm(a):
    """The matrix exponential."""
    return expm_p.bind(a)


def logm(a):
    """The principal matrix logarithm."""
    return logm_p.bind(a)


# -- LU factorization ----------------------------------------------------------------
#
# P a = L U with L unit lower triangular; ``lu`` packs L's strict lower part and U.
# `lu_pivots` finds LAPACK's row interchanges and `pivot_permutation` turns
# them into the permutation (integer arrays, no derivative: the pivots are
# piecewise constant in a); `lu_factor` takes the permutation as an operand, so
# vmap and jit carry it like any array. With F = L^-1 P da U^-1:
# dL = L tril(F, -1) and dU = triu(F) U.

def _pivots_impl(a):
    _, piv = scipy_module("linalg", a).lu_factor(a)
    return piv


def _permutation_impl(piv):
    # LAPACK's "row i was swapped with row piv[i]", applied in order
    xp = array_module(piv)
    host = xp.asnumpy(piv) if hasattr(xp, "asnumpy") else np.asarray(piv)
    perm = np.arange(len(host))
    for i, p in enumerate(host):
        perm[[i, p]] = perm[[p, i]]
    return xp.asarray(perm)


lu_pivots_p = Primitive("lu_pivots", _pivots_impl,
                        lambda a: ShapedArray(a.shape[:1], np.dtype(np.int32)),
                        nondiff=True, family=FAMILY)
pivot_permutation_p = Primitive("pivot_permutation", _permutation_impl,
                                lambda piv: ShapedArray(piv.shape, np.dtype(np.int64)),
                                nondiff=True, family=FAMILY)
per_example_rule(lu_pivots_p)
per_example_rule(pivot_permutation_p)


def _lu_impl(a, perm):
    lu, _ = scipy_module("linalg", a).lu_factor(a)
    return lu.astype(_square_abstract("lu_factor")(get_aval(a)).dtype, copy=False)


lu_factor_p = Primitive("lu_factor", _lu_impl,
                        lambda a, perm: _square_abstract("lu_factor")(a), family=FAMILY)


def _triangle(x, k):
    # the entries on and below diagonal k (k = -1: strictly below)
    n = get_aval(x).shape[-1]
    return x * tri_like_p.bind(x, n=n, m=n, k=k, dtype=get_aval(x).dtype)


def _upper(x):
    return x - _triangle(x, -1)


def lu_unpack(lu):
    """``(L, U)`` from a packed factor (L with its unit diagonal)."""
    return _triangle(lu, -1) + identity_like(lu, get_aval(lu).shape[-1]), _upper(lu)


def _lu_jvp(t, ans, a, perm):
    low, up = lu_unpack(ans)
    y = solve_triangular(low, getitem(t, perm), True, 0)             # L^-1 P da
    f = transpose(solve_triangular(up, transpose(y), False, 1))       # ... U^-1
    return matmul(low, _triangle(f, -1)) + matmul(_upper(f), up)


def _lu_vjp(ct, ans, a, perm):
    low, up = lu_unpack(ans)
    ct_f = (_triangle(matmul(transpose(low), _triangle(ct, -1)), -1)
            + _upper(matmul(_upper(ct), transpose(up))))
    z = solve_triangular(low, ct_f, True, 1)                          # L^-T ct_f
    w = transpose(solve_triangular(up, transpose(z), False, 0))       # ... U^-T
    return cast_like(getitem(w, argsort_p.bind(perm, axis=0, kind=None)), get_aval(a))  # P^T w


lu_factor_p.def_jvp(_lu_jvp, None)
lu_factor_p.def_vjp(_lu_vjp, None)
per_example_rule(lu_factor_p)


def lu_pivots(a):
    """LAPACK's row interchanges of partial pivoting (SciPy's ``piv``)."""
    return lu_pivots_p.bind(a)


def pivot_permutation(piv):
    """The permutation ``perm`` of the interchanges ``piv``: ``a[perm] = L U``."""
    return pivot_permutation_p.bind(piv)


def lu_factor(a, perm):
    """The packed LU factor of ``a`` whose rows are pivoted by ``perm``."""
    return lu_factor_p.bind(a, perm)


from fgrad.primitives.einsum import identity_like  # noqa: E402
from fgrad.primitives.indexing import getitem  # noqa: E402
from fgrad.primitives.linalg import tri_like_p  # noqa: E402
from fgrad.primitives.products import matmul  # noqa: E402
from fgrad.primitives.reductions import argsort_p  # noqa: E402
from fgrad.primitives.special import solve_triangular  # noqa: E402
