"""The rest of NumPy's everyday surface, as composites of fgrad.numpy functions:
nan-ignoring extrema and scans, complex-part tests, axis helpers, aliases of
NumPy 2's array-API names, ``partition`` and the index tricks ``r_`` / ``c_``.

Each is differentiable wherever its building blocks are; outside every
transformation each calls NumPy directly.
"""
import numpy as _np

from fgrad.core.backend import array_module as _xp
from fgrad.core.backend import asarray_on as _asarray_on
from fgrad.core.backend import module_of_leaves as _module_of_leaves
from fgrad.core.errors import NumpyArgumentError
from fgrad.core.trace import Tracer as _Tracer
from fgrad.core.trace import get_aval as _get_aval
from fgrad.numpy import _manipulation as _m
from fgrad.numpy import _reductions as _r
from fgrad.primitives import creation as _creation
from fgrad.primitives import elementwise as _ew
from fgrad.primitives import indexing as _indexing
from fgrad.primitives import reductions as _red
from fgrad.primitives import search as _search
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


# -- nan-ignoring reductions and scans -------------------------------------------------

def _nan_to(a, fill):
    if _get_aval(a).dtype.kind not in "fc":
        return a
    return _ew.where(_ew.isnan(a), fill, a)


def nanprod(a, axis=None, keepdims=False):
    """Product treating nan as 1; nan entries get a zero derivative."""
    if not isinstance(a, _Tracer):
        return _xp(a).nanprod(a, axis=axis, keepdims=keepdims)
    return _red.prod(_nan_to(a, 1.0), axis, keepdims)


def nancumsum(a, axis=None):
    """Cumulative sum treating nan as 0."""
    if not isinstance(a, _Tracer):
        return _xp(a).nancumsum(a, axis=axis)
    return _r.cumsum(_nan_to(a, 0.0), axis)


def nancumprod(a, axis=None):
    """Cumulative product treating nan as 1."""
    if not isinstance(a, _Tracer):
        return _xp(a).nancumprod(a, axis=axis)
    return _r.cumprod(_nan_to(a, 1.0), axis)


def nanargmax(a, axis=None, keepdims=False):
    """Index of the maximum ignoring nan (no derivative)."""
    if not isinstance(a, _Tracer):
        return _xp(a).nanargmax(a, axis=axis, keepdims=keepdims)
    return _r.argmax(_nan_to(a, -_np.inf), axis, keepdims)


def nanargmin(a, axis=None, keepdims=False):
    """Index of the minimum ignoring nan (no derivative)."""
    if not isinstance(a, _Tracer):
        return _xp(a).nanargmin(a, axis=axis, keepdims=keepdims)
    return _r.argmin(_nan_to(a, _np.inf), axis, keepdims)


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
    if not _traced(x1, x2):
        return _xp(x1, x2).vecdot(x1, x2, axis=axis)
    if _get_aval(x1).dtype.kind == "c":
        x1 = _ew.conj(x1)
    return _red.sum_(_ew.multiply(x1, x2), axis, False)


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


# -- nan-ignoring quantiles ------------------------------------------------------------------

# the methods whose order statistics follow from the count of numbers in a slice
NAN_QUANTILE_METHODS = ("linear", "lower", "higher", "nearest", "midpoint")


def _floor_int(x):
    return _ew.convert_element_type(_ew.floor(x), _np.int64)


def _nan_order_statistics(virtual, count, method):
    """``(lo, hi, gamma)`` as arrays, per slice with ``count`` numbers."""
    last = _ew.maximum(count - 1, 0)
    lo = _floor_int(virtual)
    frac = virtual - _ew.floor(virtual)
    if method == "lower":
        hi, gamma = lo, frac * 0
    elif method == "higher":
        lo = _ew.convert_element_type(_ew.ceil(virtual), _np.int64)
        hi, gamma = lo, frac * 0
    elif method == "nearest":
        lo = _ew.convert_element_type(_ew.rint(virtual), _np.int64)
        hi, gamma = lo, frac * 0
    else:
        hi = lo + 1
        gamma = _ew.where(_ew.equal(frac, 0), 0.0, 0.5) if method == "midpoint" else frac
    return _ew.minimum(lo, last), _ew.minimum(hi, last), gamma


def nanquantile(a, q, axis=None, keepdims=False, method="linear"):
    """The ``q``-th quantiles of the numbers in ``a`` (nan entries ignored) over
    ``axis``; nan for an all-nan slice.

    Sorting puts nan last, so each slice's order statistics sit among its first
    ``count`` entries; their indices are computed from the count (no derivative)
    and the values gathered, so the derivative goes to the selected numbers and
    works under `jit`. ``method`` is one of ``linear``, ``lower``, ``higher``,
    ``nearest``, ``midpoint``.

    >>> float(nanquantile(_np.array([3.0, _np.nan, 1.0, 2.0]), 0.5))
    2.0
    """
    if not isinstance(a, _Tracer):
        xp = _xp(a)
        return xp.nanquantile(a, q if type(q) in (int, float) else _asarray_on(xp, q),
                              axis=axis, keepdims=keepdims, method=method)
    if method not in NAN_QUANTILE_METHODS:
        raise NumpyArgumentError(
            f"nanquantile: method={method!r} is not supported under transformations; "
            f"use one of {', '.join(NAN_QUANTILE_METHODS)}")
    q_arr = _np.asarray(q, dtype=_np.float64)
    if ((q_arr < 0) | (q_arr > 1)).any():
        raise ValueError("quantiles must be in the range [0, 1]")
    ndim = _get_aval(a).ndim
    if axis is None:
        x, ax = _shape.reshape(a, (-1,)), 0
    else:
        axes = _normalize_axis(axis, ndim)
        if len(axes) != 1:
            raise NotImplementedError("fgrad.numpy.nanquantile reduces one axis or all")
        x, ax = a, axes[0]
    s = _m.sort(x, axis=ax)                                   # nan sorts last
    count = _red.sum_(_ew.convert_element_type(_ew.logical_not(_ew.isnan(x)), _np.int64),
                      ax, True)
    empty = _ew.equal(count, 0)
    results = []
    for qk in q_arr.ravel():
        virtual = _ew.convert_element_type(_ew.maximum(count - 1, 0), _np.float64) * float(qk)
        lo, hi, gamma = _nan_order_statistics(virtual, count, method)
        low, high = _m.take_along_axis(s, lo, ax), _m.take_along_axis(s, hi, ax)
        gamma = _ew.convert_element_type(gamma, _get_aval(s).dtype)
        value = _ew.where(empty, _np.nan, low + (high - low) * gamma)
        if not keepdims:
            value = _shape.squeeze(value, (ax,))
        elif axis is None:
            value = _shape.reshape(value, (1,) * ndim)
        results.append(value)
    out = results[0] if q_arr.ndim == 0 else _shape.reshape(
        _shape.stack(results, axis=0), q_arr.shape + _get_aval(results[0]).shape)
    # as `quantile`: an array q promotes the interpolating methods to float64
    if type(q) in (int, float) or method in ("lower", "higher", "nearest"):
        return out
    return _ew.convert_element_type(out, _np.result_type(_get_aval(out).dtype, _np.float64))


def nanpercentile(a, q, axis=None, keepdims=False, method="linear"):
    """The ``q``-th percentiles (0 <= q <= 100) ignoring nan; see `nanquantile`."""
    if not isinstance(a, _Tracer):
        xp = _xp(a)
        return xp.nanpercentile(a, q if type(q) in (int, float) else _asarray_on(xp, q),
                                axis=axis, keepdims=keepdims, method=method)
    return nanquantile(a, q / 100 if type(q) in (int, float)
                       else _np.asarray(q, dtype=_np.float64) / 100, axis, keepdims, method)


def nanmedian(a, axis=None, keepdims=False):
    """The median ignoring nan (see `nanquantile`)."""
    if not isinstance(a, _Tracer):
        return _xp(a).nanmedian(a, axis=axis, keepdims=keepdims)
    return nanquantile(a, 0.5, axis, keepdims)


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
    if not _traced(x1, x2):
        return _xp(x1, x2).matvec(x1, x2)
    return _shape.squeeze(x1 @ _shape.expand_dims(x2, -1), (-1,))


def vecmat(x1, x2, /):
    """Vector-matrix products (the vector conjugated), broadcast (NumPy 2)."""
    if not _traced(x1, x2):
        return _xp(x1, x2).vecmat(x1, x2)
    if _get_aval(x1).dtype.kind == "c":
        x1 = _ew.conj(x1)
    return _shape.squeeze(_shape.expand_dims(x1, -2) @ x2, (-2,))


# -- reshaping by value positions -------------------------------------------------------------

def resize(a, new_shape):
    """``a`` flattened, repeated cyclically to fill ``new_shape`` (NumPy's
    ``resize``); differentiable as the gather it is."""
    if not isinstance(a, _Tracer):
        return _xp(a).resize(a, new_shape)
    new_shape = (new_shape,) if isinstance(new_shape, int) else tuple(new_shape)
    flat = _shape.reshape(a, (-1,))
    size, total = _get_aval(flat).shape[0], int(_np.prod(new_shape))
    if size == 0 or total == 0:
        # nothing to repeat (NumPy fills with zeros), or nothing to fill: a zero
        # on a's backend, broadcast
        return _shape.broadcast_to(_red.sum_(flat, None, False) * 0, new_shape)
    return _shape.reshape(_m.take(flat, _np.arange(total) % size), new_shape)


def delete(arr, obj, axis=None):
    """``arr`` without the entries ``obj`` (an index, slice or index list, a
    static parameter) along ``axis`` (of the flattened array when None)."""
    if not isinstance(arr, _Tracer):
        return _xp(arr).delete(arr, obj, axis)
    if axis is None:
        arr, axis = _shape.reshape(arr, (-1,)), 0
    n = _get_aval(arr).shape[axis]
    kept = _np.delete(_np.arange(n), obj)
    return _m.take(arr, kept, axis)


def sort_complex(a):
    """``a`` sorted by real part, then imaginary part, as complex numbers."""
    if not isinstance(a, _Tracer):
        return _xp(a).sort_complex(a)
    dtype = _np.result_type(_get_aval(a).dtype, _np.complex64)
    a = _ew.convert_element_type(a, dtype)
    # two stable sorts: by the secondary key, then by the primary one
    a = _m.take_along_axis(a, _r.argsort(_ew.imag(a), -1, kind="stable"), -1)
    return _m.take_along_axis(a, _r.argsort(_ew.real(a), -1, kind="stable"), -1)


def unwrap(p, discont=None, axis=-1, *, period=2 * _np.pi):
    """``p`` with jumps larger than ``discont`` (default ``period / 2``) along
    ``axis`` replaced by their ``period`` complement. The corrections are
    multiples of ``period`` (piecewise constant), so the derivative is 1."""
    if not isinstance(p, _Tracer):
        return _xp(p).unwrap(p, discont, axis, period=period)
    if _get_aval(p).dtype.kind not in "fc":
        p = _ew.convert_element_type(p, _np.float64)
    half = period / 2
    discont = half if discont is None else discont
    d = _r.diff(_creation.stop_gradient(p), axis=axis)
    wrapped = _ew.remainder(d + half, period) - half
    # NumPy's tie rule: a jump of exactly +half stays +half
    wrapped = _ew.where(_ew.logical_and(_ew.equal(wrapped, -half), _ew.greater(d, 0)),
                        half, wrapped)
    correction = _ew.where(_ew.less(_ew.absolute(d), discont), 0.0, wrapped - d)
    ax = _normalize_axis(axis, _get_aval(p).ndim)[0]
    first = _slice_axis(_creation.zeros_like(p), ax, 0, 1)
    return p + _shape.concatenate([first, _r.cumsum(correction, ax)], ax)


def choose(a, choices, mode="raise"):
    """``choices[a[i]][i]`` elementwise (the index array ``a`` has no
    derivative; the chosen values do)."""
    if not _traced(a) and not contains_tracer(choices):
        return _xp(a).choose(a, choices, mode=mode)
    if mode != "raise":
        raise NumpyArgumentError("choose: only mode='raise' is supported under "
                                 "transformations")
    stacked = _shape.stack(_m.broadcast_arrays(a, *[lift(c) for c in choices])[1:], 0)
    index = _shape.expand_dims(_shape.broadcast_to(
        a, _get_aval(stacked).shape[1:]), 0)
    return _shape.squeeze(_m.take_along_axis(stacked, index, 0), (0,))


def block(arrays):
    """Assemble an array from nested lists of blocks, the innermost lists joined
    along the last axis (NumPy's ``block``); differentiable in every block."""
    if not contains_tracer(arrays):
        return _np.block(arrays)

    def depth(x):
        return 1 + depth(x[0]) if isinstance(x, list) and x else 0

    levels = depth(arrays)
    ndim = max(levels, max(_get_aval(lift(leaf)).ndim for leaf in _leaves(arrays)))

    def assemble(x, level):
        if not isinstance(x, list):
            x = lift(x)
            shape = _get_aval(x).shape
            return _shape.reshape(x, (1,) * (ndim - len(shape)) + shape)
        return _shape.concatenate([assemble(item, level + 1) for item in x],
                                  level - levels)
    return assemble(arrays, 0)


# its nested lists are blocks of different shapes: fgrad.numpy must not stack them
block.lifts_array_likes = True


def _leaves(x):
    if isinstance(x, list):
        for item in x:
            yield from _leaves(item)
    else:
        yield x


def array_equiv(a1, a2):
    """True when ``a1`` and ``a2`` broadcast to each other and are equal
    everywhere (no derivative)."""
    a1, a2 = lift(a1), lift(a2)
    try:
        _np.broadcast_shapes(_get_aval(a1).shape, _get_aval(a2).shape)
    except ValueError:
        return False
    return _red.all_p.bind(_ew.equal(a1, a2), axis=None, keepdims=False)


def asarray_chkfinite(a, dtype=None):
    """``asarray(a)``, refusing inf and nan (which needs concrete values: not
    under `jit`)."""
    if not contains_tracer(a):
        return _np.asarray_chkfinite(a, dtype)
    a = lift(a)
    if dtype is not None:
        a = _ew.convert_element_type(a, dtype)
    if not bool(_red.all_p.bind(_ew.isfinite(a), axis=None, keepdims=False)):
        raise ValueError("array must not contain infs or NaNs")
    return a


def insert(arr, obj, values, axis=None):
    """``arr`` with ``values`` inserted before the indices ``obj`` along ``axis``
    (of the flattened array when None), as NumPy's ``insert``; differentiable
    in ``arr`` and ``values``.

    NumPy itself lays out the result, on index arrays: where each output entry
    comes from, ``arr`` or ``values``; the traced data is then gathered.

    >>> insert(_np.array([1.0, 2.0]), 1, 5.0)
    array([1., 5., 2.])
    """
    if not _traced(arr) and not contains_tracer(values):
        return _xp(arr).insert(arr, obj, values, axis)
    arr, values = lift(arr), lift(values)
    arr_shape, val_shape = _get_aval(arr).shape, _get_aval(values).shape
    n_arr, n_val = int(_np.prod(arr_shape)), int(_np.prod(val_shape))
    from_arr = _np.insert(_np.arange(n_arr).reshape(arr_shape), obj,
                          _np.full(val_shape, -1), axis)
    from_val = _np.insert(_np.full(arr_shape, -1), obj,
                          _np.arange(n_val).reshape(val_shape), axis)
    inserted = from_val >= 0
    mask = _asarray_on(_module_of_leaves([arr, values]), inserted.reshape(-1))
    flat_arr = _shape.reshape(arr, (-1,))
    flat_val = _ew.convert_element_type(_shape.reshape(values, (-1,)), _get_aval(arr).dtype)
    # every output entry gathers from both sources (index 0 where it does not
    # come from one), and `where` keeps the right one
    picked_arr = _m.take(flat_arr, _np.maximum(from_arr, 0).reshape(-1)) if n_arr else None
    picked_val = _m.take(flat_val, _np.maximum(from_val, 0).reshape(-1)) if n_val else None
    if picked_arr is None:
        out = picked_val
    elif picked_val is None:
        out = picked_arr
    else:
        out = _ew.where(mask, picked_val, picked_arr)
    return _shape.reshape(out, inserted.shape)


# -- index-valued searches (no derivative) ------------------------------------------------------

def digitize(x, bins, right=False):
    """The index of the bin each ``x`` falls in (no derivative); ``bins``
    increasing (decreasing bins need concrete values).

    >>> digitize(_np.array([0.5, 1.5, 3.0]), _np.array([1.0, 2.0]))
    array([0, 1, 2])
    """
    if not _traced(x, bins):
        return _xp(x, bins).digitize(x, bins, right)
    bins = lift(bins)
    if not isinstance(bins, _Tracer) and _get_aval(bins).shape[0] > 1 \
            and bool(bins[0] > bins[-1]):
        n = _get_aval(bins).shape[0]
        return n - _search.searchsorted(_m.flip(bins, 0), x, "left" if right else "right")
    return _search.searchsorted(bins, x, "left" if right else "right")


def isin(element, test_elements, assume_unique=False, invert=False, *, kind=None):
    """True where ``element`` equals one of ``test_elements`` (no derivative).

    >>> isin(_np.array([1.0, 2.0, 3.0]), [2.0, 5.0])
    array([False,  True, False])
    """
    if not _traced(element) and not contains_tracer(test_elements):
        return _xp(element).isin(element, test_elements, assume_unique=assume_unique,
                                 invert=invert, kind=kind)
    element, tests = lift(element), _shape.reshape(lift(_m.as_array(test_elements)), (-1,))
    if not contains_tracer(tests):
        tests = _asarray_on(_module_of_leaves([element]), tests)
    found = _red.any_p.bind(_ew.equal(_shape.expand_dims(element, -1), tests), axis=(-1,),
                            keepdims=False) if _get_aval(tests).shape[0] else \
        _creation.zeros_like(element, _np.bool_)
    return _ew.logical_not(found) if invert else found


def argpartition(a, kth, axis=-1, kind="introselect", order=None):
    """Indices that would partition ``a`` (no derivative); under a
    transformation the full sorting permutation, one valid answer."""
    if not isinstance(a, _Tracer):
        return _xp(a).argpartition(a, kth, axis=axis, kind=kind, order=order)
    return _r.argsort(a, axis)


def lexsort(keys, axis=-1):
    """The stable sort by several keys, the last one primary (no derivative)."""
    if not contains_tracer(keys):
        return _xp(keys).lexsort(keys, axis)
    keys = [lift(k) for k in keys] if isinstance(keys, (list, tuple)) else \
        [keys[i] for i in range(_get_aval(keys).shape[0])]
    order = _r.argsort(keys[0], axis, kind="stable")
    for key in keys[1:]:
        sorted_key = _m.take_along_axis(key, order, axis)
        order = _m.take_along_axis(order, _r.argsort(sorted_key, axis, kind="stable"), axis)
    return order


# -- selections by concrete conditions, counts ------------------------------------------------

def _concrete_value(x):
    """The value behind eager tracers: a condition or index that picks entries
    (it has no derivative; under `jit` there is none, and this raises)."""
    while isinstance(x, _Tracer):
        x = x.concrete()
    return x


def compress(condition, a, axis=None):
    """The slices of ``a`` along ``axis`` where ``condition`` holds (the
    condition's values pick the slices, so they must be concrete);
    differentiable in ``a``."""
    if not isinstance(a, _Tracer) and not isinstance(condition, _Tracer):
        return _xp(a).compress(condition, a, axis)
    cond = _concrete_value(condition)
    keep = _xp(cond).flatnonzero(cond)
    if axis is None:
        a, axis = _shape.reshape(a, (-1,)), 0
    return _m.take(a, keep, axis)


def extract(condition, arr):
    """The entries of ``arr`` where ``condition`` is true, flattened (the
    condition must be concrete); differentiable in ``arr``."""
    cond = _concrete_value(lift(condition))
    return compress(_xp(cond).ravel(cond), _shape.reshape(lift(arr), (-1,)))


def bincount(x, weights=None, minlength=0):
    """How often each non-negative integer occurs in ``x`` (which must be
    concrete); with ``weights``, their sums per value, differentiable in the
    weights.

    >>> bincount(_np.array([0, 2, 2]), weights=_np.array([0.5, 1.0, 2.0]))
    array([0.5, 0. , 3. ])
    """
    if not isinstance(x, _Tracer) and not isinstance(weights, _Tracer):
        return _xp(x, weights).bincount(x, weights, minlength)
    values = _concrete_value(x)
    length = max(int(values.max()) + 1 if values.size else 0, minlength)
    if weights is None:
        return _xp(values).bincount(values, None, minlength)
    weights = lift(weights)
    zeros = _creation.zeros_like(_shape.broadcast_to(_red.sum_(weights, None, False) * 0,
                                                     (length,)))
    return _indexing.add_at(zeros, values, weights)


def trim_zeros(filt, trim="fb"):
    """The 1-d ``filt`` without its leading (``'f'``) and/or trailing (``'b'``)
    zeros; where it starts and ends depends on the values, which must be
    concrete. Differentiable in the entries kept."""
    if not isinstance(filt, _Tracer):
        return _xp(filt).trim_zeros(filt, trim)
    values = _concrete_value(filt)
    nonzero = _xp(values).flatnonzero(values)
    if nonzero.size == 0:
        return _slice_axis(filt, 0, 0, 0)
    start = int(nonzero[0]) if "f" in trim.lower() else 0
    stop = int(nonzero[-1]) + 1 if "b" in trim.lower() else _get_aval(filt).shape[0]
    return _slice_axis(filt, 0, start, stop)
