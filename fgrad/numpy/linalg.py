"""``numpy.linalg`` over fgrad primitives: ``fnp.linalg.solve``, ``svd``, ``norm``, ...

Every function is batched over leading axes like NumPy's, and differentiable in
forward and reverse mode to any order, for real and complex inputs (complex
derivatives follow JAX's convention: see the complex numbers page). Notes (see
`fgrad.primitives.linalg`):

- ``eigh`` and ``cholesky`` read the Hermitian part of their input,
  ``(a + a^H) / 2`` (``(a + a.T) / 2`` for real ``a``), as JAX does (NumPy reads
  one triangle). For Hermitian input the values are NumPy's.
- ``eigh`` derivatives are infinite for repeated eigenvalues and ``svd``'s for
  repeated (or, with ``m != n``, zero) singular values: the eigen/singular
  vectors are not unique there. Functions of the spectrum alone that are
  symmetric in it (``norm(a, 'nuc')``, ``sum(eigvalsh(a))``) are fine when
  values are distinct.
- Complex eigenvectors and singular vectors carry an arbitrary phase each
  (real ones a sign). Derivatives fix it by JAX's convention, not LAPACK's, so
  differentiate phase-invariant functions of them: ``abs(v) ** 2``, projectors
  ``v @ v.conj().T``, reconstructions ``u * s @ vh``.
- ``svd(full_matrices=True)`` (NumPy's default) of a rectangular matrix
  differentiates too: the extra columns of ``U`` (rows of ``Vh``) are only
  determined as a basis of the orthogonal complement, and their derivative is
  the smallest rotation keeping them orthogonal to the rest, so functions of
  the complement's projector (and a single real extra vector up to its sign)
  are exact. JAX raises NotImplementedError here.
- ``qr`` differentiates tall, square and wide matrices (for ``m < n`` through
  the first ``m`` columns, as ``r = [r_x | q^H y]``).
- ``lstsq`` (2-D, like NumPy's) computes ``pinv(a) @ b``; its ``rank`` needs a
  concrete value, so it does not work under ``jit``.
"""
from collections import namedtuple as _namedtuple

import numpy as _np

from fgrad.core.backend import array_module as _xp
from fgrad.core.trace import Tracer as _Tracer
from fgrad.core.trace import get_aval as _get_aval
from fgrad.core.trace import known_value as _known_value
from fgrad.numpy._arrays import asarray as _asarray
from fgrad.numpy._extras import matrix_transpose, vecdot  # noqa: F401  (re-exported)
from fgrad.numpy._manipulation import diagonal as _diagonal_of
from fgrad.numpy._manipulation import trace as _trace_of
from fgrad.numpy._products import cross as _cross
from fgrad.numpy._products import outer as _outer
from fgrad.numpy._products import tensordot  # noqa: F401  (re-exported)
from fgrad.numpy._reductions import safe_sqrt as _safe_sqrt
from fgrad.primitives import creation as _creation
from fgrad.primitives import eig as _eig
from fgrad.primitives import einsum as _einsum
from fgrad.primitives import elementwise as _ew
from fgrad.primitives import linalg as _la
from fgrad.primitives import reductions as _red
from fgrad.primitives import shape as _shape
from fgrad.primitives.indexing import slice_axis as _slice_axis
from fgrad.primitives.products import matmul as _matmul

LinAlgError = _np.linalg.LinAlgError

SlogdetResult = _namedtuple("SlogdetResult", ["sign", "logabsdet"])
EighResult = _namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
EigResult = _namedtuple("EigResult", ["eigenvalues", "eigenvectors"])
QRResult = _namedtuple("QRResult", ["Q", "R"])
SVDResult = _namedtuple("SVDResult", ["U", "S", "Vh"])


def _as_array(x):
    return x if hasattr(x, "dtype") else _asarray(x, dtype=float)


def _symmetrize(a):
    # the Hermitian part (a + a^H) / 2; the symmetric part for real a
    return (a + _la.conj_transpose(a)) * 0.5


def solve(a, b):
    """Solve ``a @ x = b``; ``b`` is a vector only when it is 1-D (NumPy 2 rule).

    >>> import numpy as np
    >>> solve(np.diag([2.0, 4.0]), np.array([2.0, 2.0]))
    array([1. , 0.5])
    """
    a, b = _as_array(a), _as_array(b)
    # outside transformations NumPy's solve, bitwise; under one, a solve whose
    # factors the derivative reuses
    solve_ = _la.solve if isinstance(a, _Tracer) or isinstance(b, _Tracer) \
        else _la.solve_p.bind
    if _get_aval(b).ndim == 1:
        return _shape.reshape(solve_(a, _shape.reshape(b, (-1, 1))),
                              _np.broadcast_shapes(_get_aval(a).shape[:-1]))
    return solve_(a, b)


def inv(a):
    """Inverse of each square matrix.

    >>> import numpy as np
    >>> inv(np.diag([2.0, 4.0]))
    array([[0.5 , 0.  ],
           [0.  , 0.25]])
    """
    return _la.inv(_as_array(a))


def det(a):
    """Determinant of each square matrix.

    >>> import numpy as np
    >>> float(det(np.diag([2.0, 3.0])))
    6.0
    """
    return _la.det(_as_array(a))


def slogdet(a):
    """``(sign, logabsdet)``; differentiable through ``logabsdet``.

    >>> import numpy as np
    >>> slogdet(np.diag([-2.0, 1.0])).sign
    np.float64(-1.0)
    """
    return SlogdetResult(*_la.slogdet(_as_array(a)))


def cholesky(a, upper=False):
    """Cholesky factor of each Hermitian positive-definite matrix (lower by
    default; ``upper=True`` gives its conjugate transpose).

    >>> import numpy as np
    >>> cholesky(np.diag([4.0, 9.0]))
    array([[2., 0.],
           [0., 3.]])
    """
    low = _la.cholesky(_symmetrize(_as_array(a)))
    return _la.conj_transpose(low) if upper else low


def qr(a, mode="reduced"):
    """Reduced QR decomposition (``mode='reduced'`` or ``'r'``), of any shape.

    >>> import numpy as np
    >>> qr(np.eye(2)).R.shape
    (2, 2)
    """
    if mode not in ("reduced", "r"):
        raise ValueError(f"fgrad.numpy.linalg.qr supports mode='reduced' and 'r', "
                         f"got {mode!r}")
    q, r = _la.qr(_as_array(a))
    return r if mode == "r" else QRResult(q, r)


def eigh(a, UPLO="L"):
    """Eigenvalues (ascending) and eigenvectors of Hermitian (symmetric) matrices.

    The input's Hermitian part is used (``UPLO`` has no effect); derivatives
    assume distinct eigenvalues.

    >>> import numpy as np
    >>> eigh(np.diag([2.0, 1.0])).eigenvalues
    array([1., 2.])
    """
    return EighResult(*_la.eigh(_symmetrize(_as_array(a))))


def eigvalsh(a, UPLO="L"):
    """Eigenvalues of symmetric matrices, ascending."""
    return eigh(a, UPLO).eigenvalues


def eig(a):
    """Eigenvalues and unit-norm eigenvectors (columns) of general square
    matrices, real or complex, batched; differentiable in both.

    Under a transformation both are complex (the shape rule cannot know that
    every eigenvalue of a real matrix is real, as NumPy checks on the values);
    outside one this is NumPy's ``eig``. Only phase-invariant functions of the
    eigenvectors have meaningful derivatives (see the module notes).

    >>> import numpy as np, fgrad
    >>> a = np.array([[2.0, 1.0], [0.0, 3.0]])
    >>> g = fgrad.grad(lambda a: eigvals(a).real.sum())(a)   # the trace's gradient
    >>> np.allclose(g, np.eye(2))
    True
    """
    if not isinstance(a, _Tracer):
        return EigResult(*_xp(a).linalg.eig(a))
    return EigResult(*_eig.eig(_as_array(a)))


def eigvals(a):
    """Eigenvalues of general square matrices (see `eig`); derivative
    ``dw = diag(v^-1 da v)``."""
    if not isinstance(a, _Tracer):
        return _xp(a).linalg.eigvals(a)
    return _eig.eig(_as_array(a))[0]


def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """Singular value decomposition ``(U, S, Vh)`` (or ``S`` alone).

    Derivatives need distinct singular values. With ``full_matrices=True`` on a
    rectangular matrix, the extra vectors are differentiated as a basis of the
    orthogonal complement (see the module notes).

    >>> import numpy as np
    >>> svd(np.diag([1.0, 3.0]), compute_uv=False)
    array([3., 1.])
    """
    a = _as_array(a)
    if not compute_uv:
        full_matrices = False
    u, s, vh = _la.svd(a, full_matrices)
    return SVDResult(u, s, vh) if compute_uv else s


def svdvals(x):
    """Singular values of each matrix, descending."""
    return svd(x, compute_uv=False)


def pinv(a, rcond=None, hermitian=False, *, rtol=_np._NoValue):
    """Moore-Penrose pseudo-inverse; derivatives assume a locally constant rank.

    Singular values below ``rcond`` (or ``rtol``, the Array API standard's
    name) times the largest are taken as zero; ``rtol=None`` is the standard's
    default, ``max(m, n) * eps``, NumPy's own default ``1e-15``.

    >>> import numpy as np
    >>> pinv(np.array([[2.0], [0.0]]))
    array([[0.5, 0. ]])
    """
    a = _as_array(a)
    if rtol is _np._NoValue:
        return _la.pinv(a, rcond, hermitian)
    if rcond is not None:
        raise ValueError("pinv takes rcond or rtol, not both: rtol is the Array "
                         "API standard's name for rcond")
    aval = _get_aval(a)
    if rtol is None:
        return _la.pinv(a, max(aval.shape[-2:]) * _np.finfo(aval.dtype).eps, hermitian)
    # one tolerance per matrix (an array broadcast against the leading axes)
    if isinstance(rtol, _Tracer) and _known_value(rtol) is None:
        if not aval.size:                   # nothing to cut: the empty result
            return _la.pinv(a, None, hermitian)
        return _pinv_cut_by_traced_tolerance(a, rtol)
    tol = _tolerance_value(rtol)
    tols = _xp(tol).broadcast_to(tol, aval.shape[:-2]).ravel()
    if tols.size == 0 or (tols == tols[0]).all():
        return _la.pinv(a, float(tols[0]) if tols.size else None, hermitian)
    flat = _shape.reshape(a, (-1,) + aval.shape[-2:])
    each = [_la.pinv(_slice_axis(flat, 0, i, i + 1), float(t), hermitian)
            for i, t in enumerate(tols)]
    return _shape.reshape(_shape.concatenate(each, 0),
                          aval.shape[:-2] + (aval.shape[-1], aval.shape[-2]))


def _pinv_cut_by_traced_tolerance(a, rtol):
    """pinv of ``a`` whose cut-off ``rtol`` has no value here (under jit, or one
    per example under vmap): from the SVD, as NumPy computes it, the singular
    values at or below ``rtol`` times the largest taken as zero. Its derivative
    is the SVD's (distinct singular values); ``rtol`` is not differentiated."""
    u, s, vh = svd(a, full_matrices=False)
    rtol = _creation.stop_gradient(_asarray(rtol))
    kept = _ew.greater(s, rtol[..., None] * _red.max_(s, -1, True))
    inverse = _ew.where(kept, 1.0 / _ew.where(kept, s, 1.0), 0.0)
    return _matmul(_ew.conj(matrix_transpose(vh)) * inverse[..., None, :],
                   _ew.conj(matrix_transpose(u)))


def _tolerance_value(tol):
    # a cut-off, not differentiated (the result is piecewise constant in it); an
    # array is read for its value where the transformation has one
    value = _known_value(tol) if isinstance(tol, _Tracer) else tol
    return _xp(value).asarray(value)


def matrix_power(a, n):
    """``a`` multiplied by itself ``n`` times (``inv(a)`` for negative ``n``).

    >>> import numpy as np
    >>> matrix_power(np.array([[1.0, 1.0], [0.0, 1.0]]), 3)
    array([[1., 3.],
           [0., 1.]])
    """
    a = _as_array(a)
    n = int(n)
    aval = _get_aval(a)
    if aval.ndim < 2 or aval.shape[-1] != aval.shape[-2]:
        raise ValueError(f"matrix_power: expected square matrices, got shape "
                         f"{aval.shape}")
    if n == 0:
        eye = _einsum.identity_like(a, aval.shape[-1])
        return _shape.broadcast_to(eye, aval.shape)
    if n < 0:
        a, n = _la.inv(a), -n
    result = None
    while n:                                  # square-and-multiply
        if n & 1:
            result = a if result is None else _matmul(result, a)
        n >>= 1
        if n:
            a = _matmul(a, a)
    return result


def _abs(x):
    return _ew.absolute(x)


def _abs_squared(x):
    if _get_aval(x).dtype.kind == "c":
        return _ew.real(x * _ew.conj(x))
    return x * x


def _safe_root(total, p):
    zero = _ew.equal(total, 0)
    return _ew.where(zero, 0.0, _ew.power(_ew.where(zero, 1.0, total), 1.0 / p))


def _vector_norm(x, ord, axis, keepdims):
    if ord is None or ord == 2:
        return _safe_sqrt(_red.sum_(_abs_squared(x), axis, keepdims))
    if ord == _np.inf:
        return _red.max_(_abs(x), axis, keepdims)
    if ord == -_np.inf:
        return _red.min_(_abs(x), axis, keepdims)
    if ord == 0:
        nonzero = _ew.convert_element_type(_ew.not_equal(x, 0),
                                           _la.real_dtype(_get_aval(x).dtype))
        return _red.sum_(nonzero, axis, keepdims)
    if ord == 1:
        return _red.sum_(_abs(x), axis, keepdims)
    if isinstance(ord, str):
        raise ValueError(f"norm: invalid norm order {ord!r} for vectors")
    p = float(ord)
    return _safe_root(_red.sum_(_ew.power(_abs(x), p), axis, keepdims), p)


def _matrix_norm(x, ord, axes, keepdims):
    row, col = axes
    ndim = _get_aval(x).ndim
    if ord in (None, "fro", "f"):
        out = _safe_sqrt(_red.sum_(_abs_squared(x), axes, False))
    elif ord in (2, -2, "nuc"):
        rest = tuple(i for i in range(ndim) if i not in axes)
        s = svd(_shape.transpose(x, rest + (row, col)), compute_uv=False)
        out = (_red.sum_(s, -1) if ord == "nuc" else
               _red.max_(s, -1) if ord == 2 else _red.min_(s, -1))
    elif ord in (1, -1, _np.inf, -_np.inf):
        summed, other = (row, col) if ord in (1, -1) else (col, row)
        sums = _red.sum_(_abs(x), summed, True)
        pick = _red.max_ if ord in (1, _np.inf) else _red.min_
        out = _red.sum_(pick(sums, other, True), (row, col), False)
    else:
        raise ValueError(f"norm: invalid norm order {ord!r} for matrices")
    if keepdims:
        shape = list(_get_aval(x).shape)
        shape[row] = shape[col] = 1
        out = _shape.reshape(out, tuple(shape))
    return out


def norm(x, ord=None, axis=None, keepdims=False):
    """Vector or matrix norm (NumPy's orders); the 2-norm has gradient 0 at 0.

    >>> import numpy as np
    >>> float(norm(np.array([3.0, 4.0])))
    5.0
    """
    x = _as_array(x)
    ndim = _get_aval(x).ndim
    if _get_aval(x).dtype.kind not in "fc":
        x = _ew.convert_element_type(x, _np.float64)
    if axis is None:
        if ord is None:
            out = _safe_sqrt(_red.sum_(_abs_squared(x)))
            return _shape.reshape(out, (1,) * ndim) if keepdims else out
        if ndim == 1:
            return _vector_norm(x, ord, (0,), keepdims)
        if ndim == 2:
            return _matrix_norm(x, ord, (0, 1), keepdims)
        raise ValueError("norm: improper number of dimensions to norm; pass axis")
    if isinstance(axis, (int, _np.integer)):
        axis = (int(axis),)
    axis = tuple(int(a) % ndim for a in axis)
    if len(axis) == 1:
        return _vector_norm(x, ord, axis, keepdims)
    if len(axis) == 2:
        if axis[0] == axis[1]:
            raise ValueError("norm: duplicate axes given")
        return _matrix_norm(x, ord, axis, keepdims)
    raise ValueError(f"norm: axis must name 1 or 2 axes, got {axis}")


def lstsq(a, b, rcond=None):
    """Least-squares solution ``(x, residuals, rank, s)`` of ``a @ x = b`` (2-D).

    ``x`` is ``pinv(a, rcond) @ b`` and differentiable, as are the residuals and
    the singular values ``s``; ``rank`` is an integer array. NumPy returns the
    residuals only when ``a`` has full column rank and more rows than columns;
    under `jit` and `vmap` the rank is not known while tracing, so the residuals
    are returned whenever ``a`` has more rows than columns (as JAX does).

    >>> import numpy as np
    >>> lstsq(np.array([[1.0], [1.0]]), np.array([1.0, 3.0]))[0]
    array([2.])
    """
    a, b = _as_array(a), _as_array(b)
    m, n = _get_aval(a).shape
    s = svd(a, compute_uv=False)
    eps = _np.finfo(_get_aval(s).dtype).eps
    cutoff = (eps * max(m, n) if rcond is None or rcond < 0 else rcond)
    x = _matmul(pinv(a, cutoff), b)
    # an empty a has no singular values, and rank 0 (a sum over none of them)
    large = _ew.greater(s, cutoff * _red.max_(s)) if min(m, n) else _ew.greater(s, 0)
    rank = _red.sum_(_ew.convert_element_type(large, _np.int64))
    known_rank = _known_value(rank)           # None under jit and vmap
    if m > n and (known_rank is None or known_rank == n):
        residuals = _red.sum_(_abs_squared(b - _matmul(a, x)), 0)
        if _get_aval(b).ndim == 1:
            residuals = _shape.reshape(residuals, (1,))
    else:
        residuals = _slice_axis(_ew.convert_element_type(s, _get_aval(x).dtype), 0, 0, 0)
    return x, residuals, rank, s


# -- NumPy 2's array-API names ----------------------------------------------------------

matmul = _matmul


def outer(x1, x2, /):
    """Outer product of two vectors (1-d only, unlike ``numpy.outer``)."""
    if _get_aval(x1).ndim != 1 or _get_aval(x2).ndim != 1:
        raise ValueError("linalg.outer: both inputs must be 1-dimensional")
    return _outer(x1, x2)


def cross(x1, x2, /, *, axis=-1):
    """Cross product of 3-vectors along ``axis``."""
    if _get_aval(x1).shape[axis] != 3 or _get_aval(x2).shape[axis] != 3:
        raise ValueError("linalg.cross: both inputs must have 3 elements along axis")
    return _cross(x1, x2, axis=axis)


def diagonal(x, /, *, offset=0):
    """The diagonals of the matrices in ``x`` (its last two axes)."""
    return _diagonal_of(x, offset, -2, -1)


def trace(x, /, *, offset=0, dtype=None):
    """The traces of the matrices in ``x`` (its last two axes)."""
    return _trace_of(x, offset, -2, -1, dtype)


def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    """The norm of each matrix in ``x`` (its last two axes)."""
    return norm(x, ord, (-2, -1), keepdims)


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    """The vector norm over ``axis`` (every axis when None, as one vector).

    >>> float(vector_norm(_np.ones((2, 2))))
    2.0
    """
    x = _as_array(x)
    ndim = _get_aval(x).ndim
    axes = tuple(range(ndim)) if axis is None else (
        (axis,) if isinstance(axis, (int, _np.integer)) else tuple(axis))
    axes = tuple(int(a) % ndim for a in axes) if ndim else ()
    if len(axes) == 1:
        return norm(x, ord, axes[0], keepdims)
    # several axes: one vector, moved to the end and flattened
    rest = [i for i in range(ndim) if i not in axes]
    flat = _shape.reshape(_shape.transpose(x, tuple(rest) + axes),
                          tuple(_get_aval(x).shape[i] for i in rest) + (-1,))
    out = norm(flat, ord, -1, False)
    if keepdims:
        shape = [1 if i in axes else n for i, n in enumerate(_get_aval(x).shape)]
        out = _shape.reshape(out, tuple(shape))
    return out


def multi_dot(arrays, *, out=None):
    """The product of a chain of matrices (a 1-d first or last one is a vector).

    Multiplied left to right; NumPy picks the cheapest order, which gives the
    same values up to rounding.
    """
    if out is not None:
        raise ValueError("linalg.multi_dot: out= is not supported (arrays are immutable)")
    if len(arrays) < 2:
        raise ValueError("linalg.multi_dot: expecting at least two arrays")
    result = _as_array(arrays[0])
    for a in arrays[1:]:
        result = _matmul(result, _as_array(a))
    return result


def cond(x, p=None):
    """The condition number of each matrix: ``s_max / s_min`` for ``p`` None or
    2 (-2: the inverse), else ``norm(x, p) * norm(inv(x), p)``."""
    x = _as_array(x)
    if p is None or p in (2, -2):
        s = svd(x, compute_uv=False)
        big, small = _red.max_(s, -1, False), _red.min_(s, -1, False)
        return small / big if p == -2 else big / small
    return matrix_norm(x, ord=p) * matrix_norm(inv(x), ord=p)


def matrix_rank(A, tol=None, hermitian=False, *, rtol=None):
    """The number of singular values above a tolerance (no derivative: an integer)."""
    A = _as_array(A)
    if _get_aval(A).ndim < 2:
        return _red.sum_(_ew.convert_element_type(_ew.not_equal(A, 0), _np.int64))
    s = svd(A, compute_uv=False)
    if tol is None:
        m, n = _get_aval(A).shape[-2:]
        factor = max(m, n) * _np.finfo(_get_aval(s).dtype).eps if rtol is None else rtol
        tol = _red.max_(s, -1, True) * factor
    elif not isinstance(tol, (int, float)):
        tol = _shape.expand_dims(tol, -1)
    return _red.sum_(_ew.convert_element_type(_ew.greater(s, tol), _np.int64), -1)


def tensorsolve(a, b, axes=None):
    """Solve ``tensordot(a, x, x.ndim) = b`` for ``x``."""
    a, b = _as_array(a), _as_array(b)
    if axes is not None:
        rest = [i for i in range(_get_aval(a).ndim) if i not in axes]
        a = _shape.transpose(a, tuple(rest) + tuple(axes))
    b_shape = _get_aval(b).shape
    x_shape = _get_aval(a).shape[len(b_shape):]
    n = int(_np.prod(b_shape))
    x = solve(_shape.reshape(a, (n, -1)), _shape.reshape(b, (n,)))
    return _shape.reshape(x, x_shape)


def tensorinv(a, ind=2):
    """The inverse of ``a`` seen as a matrix of its first ``ind`` axes by the rest."""
    a = _as_array(a)
    shape = _get_aval(a).shape
    rows = int(_np.prod(shape[:ind]))
    return _shape.reshape(inv(_shape.reshape(a, (rows, -1))), shape[ind:] + shape[:ind])
