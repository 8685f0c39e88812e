"""The general (non-symmetric) eigendecomposition ``a = v diag(w) v^-1``.

Eigenvalues and eigenvectors of a real matrix are complex in general, so the
primitive always returns complex arrays (as JAX does; NumPy returns real ones
when every eigenvalue happens to be real, which no traced shape rule can know).

Derivatives, with ``X = v^-1 da v`` (autograd's and the standard perturbation
result): ``dw = diag(X)`` and ``dv = v (F * X)`` with
``F[i, j] = 1 / (w[j] - w[i])`` off the diagonal, then projected so every
column keeps unit norm (``re(v_j^H dv_j) = 0``), as NumPy normalises them. The
phase of each eigenvector is LAPACK's and otherwise arbitrary, so, as with
`eigh`, only phase-invariant functions of ``v`` have derivatives that match
finite differences; derivatives are infinite at repeated eigenvalues. The VJP
is the transpose of this JVP (fgrad's complex convention: no conjugation).
"""
import numpy as np

from fgrad.core.backend import array_module
from fgrad.core.trace import Primitive, ShapedArray, Zero, get_aval
from fgrad.primitives.elementwise import cast_like, conj, convert_element_type, real
from fgrad.primitives.linalg import (
    diag_embed,
    inverse_gaps,
    leading_batch_rule,
    matrix_diagonal,
    solve,
)
from fgrad.primitives.products import matmul
from fgrad.primitives.reductions import sum_
from fgrad.primitives.shape import swap_last_axes

FAMILY = "primitives/eig.py"


def complex_dtype(dtype):
    """The complex dtype of ``dtype``'s precision (complex64 for float32)."""
    return np.result_type(np.dtype(dtype) if np.dtype(dtype).kind in "fc"
                          else np.float64, np.complex64)


def _eig_abstract(a):
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"eig: expected a (..., n, n) stack of square matrices, "
                         f"got shape {a.shape}")
    dtype = complex_dtype(a.dtype)
    return ShapedArray(a.shape[:-1], dtype), ShapedArray(a.shape, dtype)


def _eig_impl(a):
    w, v = array_module(a).linalg.eig(a)
    dtype = complex_dtype(a.dtype)
    return w.astype(dtype, copy=False), v.astype(dtype, copy=False)


eig_p = Primitive("eig", _eig_impl, _eig_abstract, multiple_results=True, family=FAMILY)


def _is_zero(x):
    return x is None or type(x) is Zero


def _as_complex(x, like):
    return convert_element_type(x, get_aval(like).dtype)


def _eig_jvp(tangents, ans, a):
    w, v = ans
    da = _as_complex(tangents[0], w)
    x = solve(v, matmul(da, v))                       # v^-1 da v
    dv = matmul(v, inverse_gaps(w) * x)
    # keep each column at unit norm: remove the real part of v_j^H dv_j
    norm_change = real(sum_(conj(v) * dv, -2, True))
    return matrix_diagonal(x), dv - v * norm_change


def _eig_vjp(ct, ans, needed, a):
    w, v = ans
    ct_w, ct_v = ct
    inner = None
    if not _is_zero(ct_w):
        inner = diag_embed(_as_complex(ct_w, w))
    if not _is_zero(ct_v):
        ct_v = _as_complex(ct_v, v)
        # transpose of the unit-norm projection, then of dv = v (F * X)
        ct_v = ct_v - conj(v) * real(sum_(ct_v * v, -2, True))
        term = inverse_gaps(w) * matmul(swap_last_axes(v), ct_v)
        inner = term if inner is None else inner + term
    # the transpose of X = v^-1 da v: v^-T inner v^T
    vt = swap_last_axes(v)
    return (cast_like(solve(vt, matmul(inner, vt)), get_aval(a)),)


eig_p.def_vjp_joint(_eig_vjp)
eig_p.def_jvp_joint(_eig_jvp)
leading_batch_rule(eig_p)


def eig(a):
    """Eigenvalues and unit-norm eigenvectors (columns) of square matrices, both
    complex.

    >>> import numpy as np
    >>> eig(np.array([[2.0, 1.0], [0.0, 3.0]]))[0]
    array([2.+0.j, 3.+0.j])
    """
    return eig_p.bind(a)
