"""NumPy's legacy polynomial routines on coefficient arrays (highest power
first): ``polyval``, ``polyadd``, ``polysub``, ``polymul``, ``polyder``,
``polyint``, ``poly``, ``polydiv``, ``polyfit`` and ``roots``, differentiable
in every coefficient, root and point.

Each is a composite of fgrad.numpy functions; outside every transformation
each calls the operands' array module (NumPy's own routine).
"""
import numpy as _np

from fgrad.core.backend import array_module as _xp
from fgrad.core.backend import asarray_on as _asarray_on
from fgrad.core.backend import module_of_leaves as _module_of_leaves
from fgrad.core.trace import Tracer as _Tracer
from fgrad.core.trace import get_aval as _get_aval
from fgrad.core.trace import known_value as _known_value
from fgrad.numpy import linalg as _linalg
from fgrad.numpy._extras import vander as _vander
from fgrad.numpy._manipulation import as_array as _as_array
from fgrad.numpy._signal import convolve as _convolve
from fgrad.primitives import elementwise as _ew
from fgrad.primitives import shape as _shape
from fgrad.primitives.array_likes import lift as _lift
from fgrad.primitives.elementwise import convert_element_type as _convert
from fgrad.primitives.elementwise import sqrt as _sqrt
from fgrad.primitives.indexing import slice_axis as _slice_axis
from fgrad.primitives.reductions import sum_ as _sum_


def _traced(*args):
    return any(isinstance(a, _Tracer) for a in args)


def _array(x, min_ndim=0):
    """An array_like argument as an array (lists holding tracers stacked)."""
    x = _as_array(_lift(x))
    return _shape.reshape(x, (1,)) if min_ndim and _get_aval(x).ndim == 0 else x


def _coefficients(p):
    return _shape.reshape(_lift(p), (-1,)) if isinstance(p, (list, tuple, _Tracer)) \
        else p


def polyval(p, x):
    """The polynomial with coefficients ``p`` (highest power first) at ``x``,
    by Horner's rule.

    >>> polyval(_np.array([1.0, 0.0, -2.0]), _np.array([0.0, 2.0]))
    array([-2.,  2.])
    """
    if not _traced(p, x):
        return _xp(p, x).polyval(p, x)
    p = _coefficients(p)
    out = x * 0.0
    for k in range(_get_aval(p).shape[0]):
        out = out * x + p[k]
    return out


def _constant(values, like):
    """Host numbers (static coefficients: powers, zeros) on ``like``'s backend."""
    return _asarray_on(_module_of_leaves([like]), _np.asarray(values,
                                                              _get_aval(like).dtype))


def _zeros(n, like):
    return _constant(_np.zeros(n), like)


def _descending(n, like):
    """``n, n-1, ..., 1``: the powers that derivatives and integrals bring down."""
    return _constant(_np.arange(n, 0, -1), like)


def _as_numpy_computes(p):
    # NumPy multiplies or divides by integer powers: float32 becomes float64
    return _convert(p, _np.result_type(_get_aval(p).dtype, _np.int64, 1.0))


def _pad_front(p, length):
    n = _get_aval(p).shape[0]
    if n == length:
        return p
    return _shape.concatenate([_zeros(length - n, p), p], 0)


def polyadd(a1, a2):
    """The sum of two polynomials (coefficients aligned at the constant term)."""
    if not _traced(a1, a2):
        return _xp(a1, a2).polyadd(a1, a2)
    a1, a2 = _coefficients(a1), _coefficients(a2)
    n = max(_get_aval(a1).shape[0], _get_aval(a2).shape[0])
    return _pad_front(a1, n) + _pad_front(a2, n)


def polysub(a1, a2):
    """The difference of two polynomials."""
    if not _traced(a1, a2):
        return _xp(a1, a2).polysub(a1, a2)
    return polyadd(a1, -_coefficients(a2))


def polymul(a1, a2):
    """The product of two polynomials: the convolution of their coefficients.

    Under a transformation leading zero coefficients are kept (NumPy drops
    them, which makes the length depend on the values).
    """
    if not _traced(a1, a2):
        return _xp(a1, a2).polymul(a1, a2)
    return _convolve(_coefficients(a1), _coefficients(a2))


def polyder(p, m=1):
    """The ``m``-th derivative of the polynomial ``p``."""
    if not _traced(p) and hasattr(_xp(p), "polyder"):      # else: the formula below
        return _xp(p).polyder(p, m)
    p = _as_numpy_computes(_coefficients(p))
    for _ in range(m):
        n = max(_get_aval(p).shape[0] - 1, 0)     # NumPy: empty past the degree
        p = _slice_axis(p, 0, 0, n) * _descending(n, p)
    return p


def polyint(p, m=1, k=None):
    """The ``m``-th antiderivative of ``p``, integration constants ``k`` (0 by
    default; one per integration, the first integration's first)."""
    if not _traced(p, k) and hasattr(_xp(p), "polyint"):   # (CuPy has none)
        return _xp(p).polyint(p, m, k)
    p = _as_numpy_computes(_coefficients(p))
    # one constant per integration; a single one serves every integration
    ks = _shape.reshape(_lift(k), (-1,)) if _traced(k) or isinstance(k, (list, tuple)) \
        and _traced(*k) else (_zeros(m, p) if k is None else _constant(k, p))
    ks = _shape.reshape(ks, (-1,))
    if _get_aval(ks).shape[0] == 1 and m > 1:
        ks = _shape.broadcast_to(ks, (m,))
    for i in range(m):
        n = _get_aval(p).shape[0]
        p = _shape.concatenate([p / _descending(n, p),
                                _slice_axis(ks, 0, i, i + 1)], 0)
    return p


# -- from roots to coefficients and back, division, least-squares fits ------------------

def poly(seq_of_zeros):
    """The coefficients of the monic polynomial with the given roots (or, for a
    square matrix, of its characteristic polynomial, through ``eigvals``).

    Under a transformation complex roots give complex coefficients (NumPy
    returns the real part when the roots come in conjugate pairs, which
    depends on the values); a real matrix gives real ones, as in NumPy.

    >>> poly(_np.array([1.0, 2.0]))
    array([ 1., -3.,  2.])
    """
    if not _traced(seq_of_zeros):
        return _xp(seq_of_zeros).poly(seq_of_zeros)
    zeros = _array(seq_of_zeros)
    shape = _get_aval(zeros).shape
    real_matrix = False
    if len(shape) == 2 and shape[0] == shape[1] and shape[0] != 0:
        real_matrix = _get_aval(zeros).dtype.kind != "c"
        zeros = _linalg.eigvals(zeros)
    elif len(shape) == 0:
        zeros = _shape.reshape(zeros, (1,))
    elif len(shape) != 1:
        raise ValueError("input must be 1d or non-empty square 2d array.")
    if _get_aval(zeros).dtype.kind not in "fc":
        zeros = _convert(zeros, _np.float64)
    if _get_aval(zeros).shape[0] == 0:
        return 1.0
    # multiply by (x - zero) for each zero: a_k - zero * a_{k-1}, as NumPy's
    # convolution with [1, -zero] computes it
    coefficients = _constant([1.0], zeros)
    end = _zeros(1, zeros)
    for k in range(_get_aval(zeros).shape[0]):
        shifted = _shape.concatenate([end, coefficients * zeros[k]], 0)
        coefficients = _shape.concatenate([coefficients, end], 0) - shifted
    return _ew.real(coefficients) if real_matrix else coefficients


def polydiv(u, v):
    """Quotient and remainder of the polynomial division ``u / v``.

    Under a transformation the remainder has ``len(v) - 1`` coefficients (at
    least one): NumPy also drops further leading coefficients that happen to be
    within 1e-8 of zero, which depends on the values.

    >>> polydiv(_np.array([1.0, -3.0, 2.0]), _np.array([1.0, -1.0]))
    (array([ 1., -2.]), array([0.]))
    """
    if not _traced(u, v) and hasattr(_xp(u, v), "polydiv"):
        return _xp(u, v).polydiv(u, v)
    u, v = _array(u, 1) + 0.0, _array(v, 1) + 0.0
    dtype = _np.result_type(_get_aval(u).dtype, _get_aval(v).dtype)
    u, v = _convert(u, dtype), _convert(v, dtype)
    m, n = _get_aval(u).shape[0] - 1, _get_aval(v).shape[0] - 1
    scale = 1.0 / v[0]
    remainder = [u[i] for i in range(m + 1)]
    quotient = []
    for k in range(m - n + 1):          # long division, one coefficient at a time
        d = scale * remainder[k]
        quotient.append(d)
        for j in range(n + 1):
            remainder[k + j] = remainder[k + j] - d * v[j]
    # the leading m - n + 1 entries of the remainder are zero by construction
    remainder = remainder[max(m - n + 1, 0):] or remainder[-1:]
    return (_shape.stack(quotient, 0) if quotient else _zeros(1, u),
            _shape.stack(remainder, 0))


def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """The least-squares polynomial fit of degree ``deg`` to the points
    ``(x, y)`` (``y`` 1-d, or 2-d with one data set per column), as NumPy
    computes it: the Vandermonde columns scaled to unit norm, then the
    pseudo-inverse solution that ``linalg.lstsq`` gives, with weights ``w``
    and the covariance ``cov=True`` / ``"unscaled"``. Differentiable in ``x``,
    ``y`` and ``w``; under `jit` too (with ``full=True``, the rank is an
    array and the residuals are those `linalg.lstsq` gives under `jit`).
    NumPy's ``RankWarning`` is not raised under a transformation.

    >>> polyfit(_np.array([0.0, 1.0, 2.0]), _np.array([1.0, 3.0, 5.0]), 1)
    array([2., 1.])
    """
    if not _traced(x, y, w):
        return _xp(x, y, w).polyfit(x, y, deg, rcond, full, w, cov)
    x, y = _array(x) + 0.0, _array(y) + 0.0
    order = int(deg) + 1
    if deg < 0:
        raise ValueError("expected deg >= 0")
    if _get_aval(x).ndim != 1:
        raise TypeError("expected 1D vector for x")
    if _get_aval(x).shape[0] == 0:
        raise TypeError("expected non-empty vector for x")
    if _get_aval(y).ndim not in (1, 2):
        raise TypeError("expected 1D or 2D array for y")
    if _get_aval(x).shape[0] != _get_aval(y).shape[0]:
        raise TypeError("expected x and y to have same length")
    points = _get_aval(x).shape[0]
    if rcond is None:
        rcond = points * _np.finfo(_get_aval(x).dtype).eps
    lhs, rhs = _vander(x, order), y
    if w is not None:
        w = _array(w) + 0.0
        if _get_aval(w).ndim != 1:
            raise TypeError("expected a 1-d array for weights")
        if _get_aval(w).shape[0] != points:
            raise TypeError("expected w and y to have the same length")
        lhs = lhs * w[:, None]
        rhs = rhs * (w[:, None] if _get_aval(rhs).ndim == 2 else w)
    scale = _sqrt(_sum_(lhs * lhs, 0, False))
    lhs = lhs / scale
    if full:
        solution, residuals, rank, s = _linalg.lstsq(lhs, rhs, rcond)
    else:
        solution = _linalg.pinv(lhs, rcond) @ rhs          # lstsq's solution
    c = _shape.transpose(_shape.transpose(solution) / scale)
    if full:
        return c, residuals, rank, s, rcond
    if not cov:
        return c
    base = _linalg.inv(_shape.transpose(lhs) @ lhs) / (scale[:, None] * scale[None, :])
    if cov == "unscaled":
        factor = 1.0
    else:
        if points <= order:
            raise ValueError("the number of data points must exceed order "
                             "to scale the covariance matrix")
        residuals = _sum_(_ew.square(rhs - lhs @ solution), 0, False)
        factor = residuals / (points - order)
    return c, base * factor if _get_aval(y).ndim == 1 else base[:, :, None] * factor


def roots(p):
    """The roots of the polynomial with coefficients ``p``: the eigenvalues of
    its companion matrix, differentiable in ``p`` (at simple roots).

    Under a transformation the roots are complex (as `linalg.eig`'s
    eigenvalues are; NumPy returns real ones when every root is real), and
    zero roots come from the companion matrix, where LAPACK places them (NumPy
    strips trailing zero coefficients and appends exact zeros, whose derivative
    would then be lost). Leading zero coefficients are dropped as in NumPy when
    the values are concrete; under `jit` or `vmap` they cannot be seen, so the
    leading coefficient must be nonzero there.

    >>> roots(_np.array([1.0, -3.0, 2.0]))
    array([2., 1.])
    """
    if not _traced(p):
        return _xp(p).roots(p)
    p = _array(p, 1)
    if _get_aval(p).ndim != 1:
        raise ValueError("Input must be a rank-1 array.")
    if _get_aval(p).dtype.kind not in "fc":
        p = _convert(p, _np.float64)
    values = _known_value(p)
    if values is not None:
        nonzero = _xp(values).flatnonzero(values)
        if nonzero.size == 0:
            return _xp(values).array([])
        p = _slice_axis(p, 0, int(nonzero[0]), _get_aval(p).shape[0])
    n = _get_aval(p).shape[0]
    if n < 2:
        return _convert(_zeros(0, p), _np.result_type(_get_aval(p).dtype, _np.complex64))
    # the companion matrix: -p[1:] / p[0] on top, ones below the diagonal
    top = _shape.reshape(-_slice_axis(p, 0, 1, n) / p[0], (1, n - 1))
    below = _constant(_np.eye(n - 2, n - 1), p)
    return _linalg.eigvals(_shape.concatenate([top, below], 0))
