"""NumPy's legacy polynomial routines on coefficient arrays (highest power
first): ``polyval``, ``polyadd``, ``polysub``, ``polymul``, ``polyder``,
``polyint``, differentiable in every coefficient and point.

Each is a composite of fgrad.numpy functions; outside every transformation
each calls the operands' array module (NumPy's own routine).
"""
import numpy as _np

from fgrad.core.backend import array_module as _xp
from fgrad.core.backend import asarray_on as _asarray_on
from fgrad.core.backend import module_of_leaves as _module_of_leaves
from fgrad.core.trace import Tracer as _Tracer
from fgrad.core.trace import get_aval as _get_aval
from fgrad.numpy._signal import convolve as _convolve
from fgrad.primitives import shape as _shape
from fgrad.primitives.array_likes import lift as _lift
from fgrad.primitives.elementwise import convert_element_type as _convert
from fgrad.primitives.indexing import slice_axis as _slice_axis


def _traced(*args):
    return any(isinstance(a, _Tracer) for a in args)


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
    if not _traced(p):
        return _xp(p).polyder(p, m)
    p = _as_numpy_computes(_coefficients(p))
    for _ in range(m):
        n = max(_get_aval(p).shape[0] - 1, 0)     # NumPy: empty past the degree
        p = _slice_axis(p, 0, 0, n) * _descending(n, p)
    return p


def polyint(p, m=1, k=None):
    """The ``m``-th antiderivative of ``p``, integration constants ``k`` (0 by
    default; one per integration, the first integration's first)."""
    if not _traced(p, k):
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
