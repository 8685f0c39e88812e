"""NumPy's nan-ignoring functions beyond the reductions: ``nanprod``, the
nan scans, ``nanargmax``/``nanargmin`` and the nan quantiles.

nan entries become the identity of the operation (0 for sums, 1 for products)
or sort last, so they receive no derivative; the numbers around them do.
"""
import numpy as _np

from fgrad.core.backend import array_module as _xp
from fgrad.core.backend import asarray_on as _asarray_on
from fgrad.core.errors import NumpyArgumentError
from fgrad.core.trace import Tracer as _Tracer
from fgrad.core.trace import get_aval as _get_aval
from fgrad.numpy import _manipulation as _m
from fgrad.numpy import _reductions as _r
from fgrad.primitives import elementwise as _ew
from fgrad.primitives import reductions as _red
from fgrad.primitives import shape as _shape
from fgrad.primitives.base import normalize_axis as _normalize_axis

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
    if not isinstance(a, _Tracer) and hasattr(_xp(a), "nanquantile"):   # (CuPy has none)
        xp = _xp(a)
        return xp.nanquantile(a, q if type(q) in (int, float) else _asarray_on(xp, q),
                              axis=axis, keepdims=keepdims, method=method)
    if method not in NAN_QUANTILE_METHODS:
        raise NumpyArgumentError(
            f"nanquantile: method={method!r} is not supported under transformations "
            f"(nor on device arrays whose library lacks nanquantile, such as CuPy's); "
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
    if not isinstance(a, _Tracer) and hasattr(_xp(a), "nanpercentile"):
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
