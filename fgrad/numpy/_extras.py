"""The rest of NumPy's everyday surface, as composites of fgrad.numpy functions:
elementwise extras (``fmax``, complex-part tests), axis helpers and NumPy 2's
array-API names, the index tricks ``r_`` / ``c_``, NumPy 2's scans and vector
products, and statistics and matrix builders (``cov``, ``vander``).

Each is differentiable wherever its building blocks are; outside every
transformation each calls the array module of its operands directly.
"""
import numpy as _np

from fgrad.core.backend import array_module as _xp
from fgrad.core.errors import NumpyArgumentError
from fgrad.core.trace import Tracer as _Tracer
from fgrad.core.trace import get_aval as _get_aval
from fgrad.numpy import _manipulation as _m
from fgrad.numpy import _reductions as _r
from fgrad.primitives import creation as _creation
from fgrad.primitives import elementwise as _ew
from fgrad.primitives import reductions as _red
from fgrad.primitives import shape as _shape
from fgrad.primitives.array_likes import contains_tracer, lift
from fgrad.primitives.base import normalize_axis as _normalize_axis
from fgrad.primitives.indexing import slice_axis as _slice_axis


def _traced(*args):
    return any(isinstance(a, _Tracer) for a in args)


# -- elementwise --------------------------------------------------------------------

def fmax(x1, x2):
    """Elementwise maximum that ignores nan: the other value wins where one is
    nan. The derivative follows `maximum` (ties share it evenly).

    >>> fmax(_np.array([1.0, _np.nan, 3.0]), _np.array([2.0, 0.5, _np.nan]))
    array([2. , 0.5, 3. ])
    """
    if not _traced(x1, x2):
        return _xp(x1, x2).fmax(x1, x2)
    return _ew.where(_ew.isnan(x2), x1, _ew.where(_ew.isnan(x1), x2, _ew.maximum(x1, x2)))


def fmin(x1, x2):
    """Elementwise minimum that ignores nan (see `fmax`)."""
    if not _traced(x1, x2):
        return _xp(x1, x2).fmin(x1, x2)
    return _ew.where(_ew.isnan(x2), x1, _ew.where(_ew.isnan(x1), x2, _ew.minimum(x1, x2)))


def iscomplex(x):
    """True where the imaginary part is non-zero (no derivative)."""
    if not isinstance(x, _Tracer):
        return _xp(x).iscomplex(x)
    if _get_aval(x).dtype.kind != "c":
        return _creation.zeros_like(x, _np.bool_)
    return _ew.not_equal(_ew.imag(x), 0)


def isreal(x):
    """True where the imaginary part is zero (no derivative)."""
    return _ew.logical_not(iscomplex(x))


def isposinf(x):
    """True at +inf (no derivative)."""
    if not isinstance(x, _Tracer):
        return _xp(x).isposinf(x)
    return _ew.logical_and(_ew.isinf(x), _ew.logical_not(_ew.signbit(x)))


def isneginf(x):
    """True at -inf (no derivative)."""
    if not isinstance(x, _Tracer):
        return _xp(x).isneginf(x)
    return _ew.logical_and(_ew.isinf(x), _ew.signbit(x))


def real_if_close(a, tol=100):
    """The real part of complex ``a`` when every imaginary part is within ``tol``
    machine epsilons of 0, else ``a``. Which one depends on the values, so it
    needs a concrete ``a`` (not under `jit`); the derivative flows through
    `real`.

    >>> real_if_close(_np.array([1.0 + 1e-17j, 2.0]))
    array([1., 2.])
    """
    if not isinstance(a, _Tracer):
        return _xp(a).real_if_close(a, tol)
    dtype = _get_aval(a).dtype
    if dtype.kind != "c":
        return a
    limit = tol * _np.finfo(dtype).eps if tol > 1 else tol
    if bool(_red.all_p.bind(_ew.less(_ew.absolute(_ew.imag(a)), limit), axis=None,
                            keepdims=False)):
        return _ew.real(a)
    return a


# -- axes and NumPy 2's array-API names -----------------------------------------------------

def rollaxis(a, axis, start=0):
    """Roll ``axis`` backwards until it lies before position ``start``
    (NumPy's older spelling of `moveaxis`).

    >>> rollaxis(_np.ones((2, 3, 4)), 2).shape
    (4, 2, 3)
    """
    ndim = _get_aval(a).ndim
    axis = _normalize_axis(axis, ndim)[0]
    if not -ndim <= start <= ndim:
        raise NumpyArgumentError(f"rollaxis: start {start} is out of bounds for "
                                 f"an array of {ndim} dimensions")
    start = start + ndim if start < 0 else start
    if start > axis:
        start -= 1
    return _m.moveaxis(a, axis, start) if axis != start else a


def matrix_transpose(x):
    """Swap the last two axes (NumPy 2's ``matrix_transpose``, ``x.mT``)."""
    if _get_aval(x).ndim < 2:
        raise NumpyArgumentError("matrix_transpose needs an array of at least 2 "
                                 "dimensions")
    return _shape.swap_last_axes(x)


def partition(a, kth, axis=-1, kind="introselect", order=None):
    """``a`` with each ``kth`` element where sorting would put it, smaller ones
    before and larger ones after.

    Outside transformations this is NumPy's; under one the result is fully
    sorted along ``axis``, which is one valid partition (NumPy leaves the order
    within each side unspecified). The derivative follows the permutation.
    """
    if not isinstance(a, _Tracer):
        if _xp(a) is not _np and order is None:     # CuPy's takes no kind= (one kind)
            return _xp(a).partition(a, kth, axis=axis)
        return _xp(a).partition(a, kth, axis=axis, kind=kind, order=order)
    return _m.sort(a, axis)


# -- index tricks -------------------------------------------------------------------------

class _Concatenator:
    """``r_[...]`` / ``c_[...]`` that also accept traced elements."""

    def __init__(self, numpy_version, columns):
        self._numpy = numpy_version
        self._columns = columns

    def __getitem__(self, key):
        items = key if isinstance(key, tuple) else (key,)
        if not any(contains_tracer(item) for item in items):
            return self._numpy[key]
        parts = []
        for item in items:
            if isinstance(item, str):
                raise NumpyArgumentError(
                    "r_/c_ with traced elements take no directive strings "
                    f"({item!r}); use fnp.concatenate / fnp.stack with an axis")
            if isinstance(item, slice):
                item = self._numpy[item]
            item = lift(item)
            ndim = _get_aval(item).ndim
            if self._columns:
                # c_: 1-d items become columns, and everything joins on the last axis
                item = _shape.reshape(item, (-1, 1)) if ndim < 2 else item
            elif ndim == 0:
                item = _shape.reshape(item, (1,))
            parts.append(item)
        return _shape.concatenate(parts, -1 if self._columns else 0)

    def __len__(self):
        return 0


r_ = _Concatenator(_np.r_, columns=False)
c_ = _Concatenator(_np.c_, columns=True)


# -- NumPy 2's scans and vector products ------------------------------------------------

def _cumulative(scan, x, axis, dtype, include_initial, initial):
    ndim = _get_aval(x).ndim
    if axis is None:
        if ndim > 1:
            raise NumpyArgumentError("cumulative_sum / cumulative_prod need axis= for "
                                     "an array of more than one dimension")
        axis = 0
    out = scan(x, axis, dtype)
    if not include_initial:
        return out
    axis = _normalize_axis(axis, ndim)[0]
    # the initial value, shaped like one slice along axis, on out's backend
    first = _creation.full_like(_red.sum_(out, axis, True), initial)
    return _shape.concatenate([first, out], axis)


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    """NumPy 2's ``cumulative_sum``: `cumsum` with an optional leading 0.

    >>> cumulative_sum(_np.array([1.0, 2.0]), include_initial=True)
    array([0., 1., 3.])
    """
    return _cumulative(_r.cumsum, x, axis, dtype, include_initial, 0)


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
    """NumPy 2's ``cumulative_prod``: `cumprod` with an optional leading 1."""
    return _cumulative(_r.cumprod, x, axis, dtype, include_initial, 1)


def vecdot(x1, x2, /, *, axis=-1):
    """Dot products of vectors along ``axis`` (the first argument conjugated),
    broadcast over the rest.

    >>> vecdot(_np.array([[1.0, 2.0]]), _np.array([3.0, 4.0]))
    array([11.])
    """
    if not _traced(x1, x2) and hasattr(_xp(x1, x2), "vecdot"):
        return _xp(x1, x2).vecdot(x1, x2, axis=axis)
    a1, a2 = _get_aval(x1), _get_aval(x2)
    if min(a1.ndim, a2.ndim) == 0 or a1.shape[axis] != a2.shape[axis]:
        raise ValueError(f"vecdot: x1 of shape {a1.shape} and x2 of shape {a2.shape} "
                         f"must have the same length along axis {axis}")
    if a1.dtype.kind == "c":
        x1 = _ew.conj(x1)
    out = _red.sum_(_ew.multiply(x1, x2), axis, False)
    # the arguments' dtype, where sum would widen small integers (and count booleans)
    return _ew.convert_element_type(out, _np.result_type(a1.dtype, a2.dtype))


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """The integral of ``y`` by the trapezoidal rule along ``axis``, with sample
    points ``x`` or spacing ``dx``; differentiable in ``y`` and ``x``.

    >>> float(trapezoid(_np.array([1.0, 2.0, 3.0])))
    4.0
    """
    if not _traced(y, x, dx):
        return _xp(y, x).trapezoid(y, x, dx, axis)
    ndim = _get_aval(y).ndim
    axis = _normalize_axis(axis, ndim)[0]
    n = _get_aval(y).shape[axis]
    if x is None:
        d = dx
    else:
        d = _r.diff(x, axis=-1 if _get_aval(x).ndim == 1 else axis)
        if _get_aval(x).ndim == 1 and axis != ndim - 1:
            d = _shape.reshape(d, (-1,) + (1,) * (ndim - 1 - axis))
    return _red.sum_(d * (_slice_axis(y, axis, 1, n) + _slice_axis(y, axis, 0, n - 1))
                     / 2.0, axis, False)


# -- statistics, matrix builders, products with matrices --------------------------------------

def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None,
        *, dtype=None):
    """The covariance matrix of the variables in the rows (``rowvar``) of ``m``
    (and ``y``); differentiable in the observations. Frequency or analytic
    weights are not supported under transformations.

    >>> cov(_np.array([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]]))
    array([[ 1., -1.],
           [-1.,  1.]])
    """
    if not _traced(m, y):
        return _xp(m, y).cov(m, y, rowvar, bias, ddof, fweights, aweights, dtype=dtype)
    if fweights is not None or aweights is not None:
        raise NumpyArgumentError("cov: fweights / aweights are not supported under "
                                 "transformations")
    x = _m.atleast_2d(lift(m))
    if not rowvar and _get_aval(x).shape[0] != 1:
        x = _shape.transpose(x, (1, 0))
    if y is not None:
        y = _m.atleast_2d(lift(y))
        if not rowvar and _get_aval(y).shape[0] != 1:
            y = _shape.transpose(y, (1, 0))
        x = _shape.concatenate([x, y], 0)
    # NumPy computes covariances in at least float64
    x = _ew.convert_element_type(x, _np.result_type(_get_aval(x).dtype, _np.float64))
    n = _get_aval(x).shape[1]
    ddof = (0 if bias else 1) if ddof is None else ddof
    centred = x - _red.mean(x, 1, True)
    right = _ew.conj(centred) if _get_aval(centred).dtype.kind == "c" else centred
    out = (centred @ _shape.transpose(right, (1, 0))) / (n - ddof)
    out = _shape.squeeze(out, None) if _get_aval(out).shape == (1, 1) else out
    return out if dtype is None else _ew.convert_element_type(out, dtype)


def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    """Pearson correlation coefficients: `cov` scaled by the standard deviations
    (clipped to [-1, 1] for real input, as NumPy does)."""
    if not _traced(x, y):
        return _xp(x, y).corrcoef(x, y, rowvar, dtype=dtype)
    c = cov(x, y, rowvar, dtype=dtype)
    if _get_aval(c).ndim == 0:
        return c / c
    d = _ew.sqrt(_ew.real(_m.diagonal(c, 0, 0, 1)))
    c = c / _shape.expand_dims(d, 1) / _shape.expand_dims(d, 0)
    if _get_aval(c).dtype.kind != "c":
        c = _ew.minimum(_ew.maximum(c, -1.0), 1.0)
    return c


def diagflat(v, k=0):
    """A 2-d array with the flattened ``v`` on its ``k``-th diagonal."""
    return _m.diag(_shape.reshape(lift(v), (-1,)), k)


def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of the 1-d ``x``: columns ``x**(N-1), ..., x, 1``
    (reversed when ``increasing``); differentiable in ``x``."""
    if not isinstance(x, _Tracer):
        return _xp(x).vander(x, N, increasing)
    n = _get_aval(x).shape[0] if N is None else N
    # NumPy's dtype: x's promoted with the integers (float32 becomes float64)
    x = _ew.convert_element_type(x, _np.promote_types(_get_aval(x).dtype, _np.int64))
    powers = _np.arange(n) if increasing else _np.arange(n)[::-1]
    # x**0 is the constant 1 (power's derivative p * x**(p-1) is nan at x = 0)
    return _shape.stack([_creation.ones_like(x) if p == 0 else x if p == 1
                         else _ew.power(x, int(p)) for p in powers], 1)


def unstack(x, /, *, axis=0):
    """The slices of ``x`` along ``axis``, as a tuple (NumPy 2)."""
    x = lift(x)
    return tuple(_m.take(x, i, axis) for i in range(_get_aval(x).shape[axis]))


def matvec(x1, x2, /):
    """Matrix-vector products over the last axes, broadcast (NumPy 2)."""
    if not _traced(x1, x2) and hasattr(_xp(x1, x2), "matvec"):   # CuPy has none
        return _xp(x1, x2).matvec(x1, x2)
    return _shape.squeeze(x1 @ _shape.expand_dims(x2, -1), (-1,))


def vecmat(x1, x2, /):
    """Vector-matrix products (the vector conjugated), broadcast (NumPy 2)."""
    if not _traced(x1, x2) and hasattr(_xp(x1, x2), "vecmat"):   # CuPy has none
        return _xp(x1, x2).vecmat(x1, x2)
    if _get_aval(x1).dtype.kind == "c":
        x1 = _ew.conj(x1)
    return _shape.squeeze(_shape.expand_dims(x1, -2) @ x2, (-2,))
