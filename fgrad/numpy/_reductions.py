"""Reductions and scans built on the reduction primitives.

``var``/``std``/``average``/``ptp`` are composites of ``sum``, ``max`` and
``min``; ``median``/``percentile``/``quantile`` go through ``sort`` (a gather by
the sorting permutation), so their derivative lands on the selected elements.
"""
import math as _math

import numpy as _np

from fgrad.core.backend import array_module as _xp
from fgrad.core.backend import asarray_on as _asarray_on
from fgrad.core.backend import module_of_leaves as _module_of_leaves
from fgrad.core.errors import MissingRuleError, NumpyArgumentError
from fgrad.core.trace import Tracer as _Tracer
from fgrad.core.trace import get_aval as _get_aval
from fgrad.core.trace import plain_array as _plain_array
from fgrad.numpy import _manipulation as _fshape
from fgrad.numpy._arrays import asarray as _asarray
from fgrad.primitives import creation as _creation
from fgrad.primitives import elementwise as _ew
from fgrad.primitives import nn as _nn
from fgrad.primitives import reductions as _red
from fgrad.primitives import search as _search
from fgrad.primitives import shape as _shape
from fgrad.primitives.array_likes import contains_tracer
from fgrad.primitives.base import normalize_axis as _normalize_axis
from fgrad.primitives.indexing import slice_axis


def _with_dtype(result, dtype):
    return result if dtype is None else _ew.convert_element_type(result, dtype)


def _count(x, axis):
    shape = _get_aval(x).shape
    return _math.prod(shape[a] for a in _normalize_axis(axis, len(shape)))


def _ddof(ddof, correction):
    if correction is None:
        return ddof
    if ddof != 0:
        raise ValueError("pass ddof or correction, not both: correction is the Array "
                         "API standard's name for NumPy's ddof")
    return correction


def var(a, axis=None, dtype=None, ddof=0, keepdims=False, *, correction=None):
    """Variance over ``axis`` with ``ddof`` delta degrees of freedom
    (``correction``, the Array API standard's name for it).

    >>> var(_np.array([1.0, 2.0, 3.0, 4.0]), ddof=1)
    np.float64(1.6666666666666667)
    >>> var(_np.array([1.0, 2.0, 3.0, 4.0]), correction=1)
    np.float64(1.6666666666666667)
    """
    ddof = _ddof(ddof, correction)
    if not isinstance(a, _Tracer):
        return _xp(a).var(_plain_array(a), axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)
    if _get_aval(a).dtype.kind not in "fc":
        a = _ew.convert_element_type(a, _np.float64)
    centered = a - _red.mean(a, axis, keepdims=True)
    if _get_aval(a).dtype.kind == "c":
        squared = _ew.real(centered * _ew.conj(centered))
    else:
        squared = centered * centered
    n = _count(a, axis) - ddof
    return _with_dtype(_red.sum_(squared, axis, keepdims) / n, dtype)


def safe_sqrt(sq):
    """``sqrt(sq)`` whose derivative at ``sq == 0`` is 0 instead of nan.

    The double-where: sqrt's derivative is infinite at 0, so the zero case takes
    a branch whose input is a harmless 1 and whose output is 0, and no
    ``inf * 0 = nan`` reaches the gradient.
    """
    zero = _ew.equal(sq, 0)
    return _ew.where(zero, 0.0, _ew.sqrt(_ew.where(zero, 1.0, sq)))


def std(a, axis=None, dtype=None, ddof=0, keepdims=False, *, correction=None):
    """Standard deviation, ``sqrt(var)`` (``correction`` as `var`'s).

    Where the variance is 0 (a constant slice, a single element) the derivative
    is 0, autograd's finite choice, rather than ``inf * 0 = nan``.

    >>> import fgrad
    >>> fgrad.grad(std)(_np.ones(3))
    array([0., 0., 0.])
    """
    ddof = _ddof(ddof, correction)
    if not isinstance(a, _Tracer):
        return _xp(a).std(_plain_array(a), axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)
    return safe_sqrt(var(a, axis, dtype, ddof, keepdims))


def average(a, axis=None, weights=None, returned=False, keepdims=False):
    """Weighted mean: ``sum(a * w) / sum(w)``, differentiable in ``a`` and ``w``.

    1-d ``weights`` along ``axis`` apply to every slice, as in NumPy.

    >>> float(average(_np.array([1.0, 3.0]), weights=_np.array([3.0, 1.0])))
    1.5
    """
    if not isinstance(a, _Tracer) and not isinstance(weights, _Tracer):
        return _xp(a).average(_plain_array(a), axis=axis, weights=weights, returned=returned,
                           keepdims=keepdims)
    if weights is None:
        avg = _red.mean(a, axis, keepdims)
        scale = _count(a, axis)
        return (avg, _creation.full_like(avg, scale)) if returned else avg
    a_aval, w_aval = _get_aval(a), _get_aval(weights)
    if w_aval.shape != a_aval.shape:
        if axis is None or w_aval.ndim != 1:
            raise TypeError("average: weights of a different shape than a need a "
                            "single axis and 1-d weights of that axis' length")
        ax = _normalize_axis(axis, a_aval.ndim)[0]
        shape = [1] * a_aval.ndim
        shape[ax] = w_aval.shape[0]
        weights = _shape.broadcast_to(_shape.reshape(weights, shape), a_aval.shape)
    total = _red.sum_(weights, axis, keepdims)
    avg = _red.sum_(a * weights, axis, keepdims) / total
    return (avg, _shape.broadcast_to(total, _get_aval(avg).shape)) if returned else avg


def ptp(a, axis=None, keepdims=False):
    """Peak to peak: ``max - min`` over ``axis``."""
    return _red.max_(a, axis, keepdims) - _red.min_(a, axis, keepdims)


def cumsum(a, axis=None, dtype=None):
    """Cumulative sum along ``axis`` (over the flattened array when None)."""
    return _red.cumsum(_with_dtype(a, dtype), axis)


def cumprod(a, axis=None, dtype=None):
    """Cumulative product; its derivative divides by ``a``, so it is nan where
    ``a`` holds a zero (``prod``'s derivative has no such restriction)."""
    return _red.cumprod(_with_dtype(a, dtype), axis)


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """``log(sum(b * exp(a)))`` over ``axis``, computed stably.

    This is the one implementation behind ``fgrad.numpy.logsumexp``,
    ``fgrad.scipy.special.logsumexp`` and (without ``b`` and ``return_sign``)
    ``fgrad.nn.logsumexp``: the ``logsumexp`` primitive, whose gradient is the
    softmax, and which stays finite (0) at ``-inf`` entries, also when a whole
    slice is ``-inf``. Weights ``b`` (possibly negative, then see
    ``return_sign``) scale the exponentials around the primitive's value, so
    they cannot overflow either.

    >>> float(logsumexp(_np.array([1000.0, 1000.0])))
    1000.6931471805599
    >>> logsumexp(_np.array([0.0, 0.0]), b=_np.array([1.0, -2.0]), return_sign=True)
    (np.float64(0.0), np.float64(-1.0))
    """
    if _get_aval(a).dtype.kind not in "fc":
        a = _ew.convert_element_type(a, _np.float64)
    if b is None:
        out = _nn.logsumexp(a, axis, keepdims)
        if not return_sign:
            return out
        return out, _ew.convert_element_type(_ew.not_equal(out, -_np.inf),
                                             _get_aval(out).dtype)
    # the unweighted value bounds every exponent (a - shift <= 0); held
    # constant, it only keeps exp in range
    shift = _creation.stop_gradient(_nn.logsumexp(a, axis, keepdims=True))
    shift = _ew.where(_ew.isfinite(shift), shift, 0.0)
    total = _red.sum_(_ew.exp(a - shift) * b, axis, keepdims)
    shift_out = shift if keepdims else _shape.reshape(shift, _get_aval(total).shape)
    # a zero total (a slice all -inf, or weights that cancel) is -inf with
    # derivative 0, not 0 * inf = nan: the double where
    empty = _ew.equal(total, 0)
    magnitude = _ew.absolute(_ew.where(empty, 1.0, total))
    out = _unpack_0d(_ew.where(empty, -_np.inf, _ew.log(magnitude) + shift_out))
    return (out, _unpack_0d(_ew.sign(total))) if return_sign else out


def _unpack_0d(x):
    # NumPy (and scipy) hand back scalars, not 0-d arrays, from full reductions
    return x[()] if not isinstance(x, _Tracer) and getattr(x, "ndim", None) == 0 else x


# -- order statistics through sort ---------------------------------------------

# NumPy 2's quantile methods. Every one picks, per quantile, two neighbouring
# order statistics and a weight that depend on q and n alone, so the result is
# a fixed linear combination of sorted entries: differentiable through the
# sorting permutation. method -> (alpha, beta) of Hyndman & Fan's continuous
# family (virtual index n q + alpha + q (1 - alpha - beta) - 1).
_CONTINUOUS = {"interpolated_inverted_cdf": (0.0, 1.0), "hazen": (0.5, 0.5),
               "weibull": (0.0, 0.0), "median_unbiased": (1 / 3.0, 1 / 3.0),
               "normal_unbiased": (3 / 8.0, 3 / 8.0)}
# methods that select one order statistic, keeping the input's dtype
_DISCRETE = ("inverted_cdf", "closest_observation", "lower", "higher", "nearest")
QUANTILE_METHODS = ("linear", "averaged_inverted_cdf", "midpoint") \
    + tuple(_CONTINUOUS) + _DISCRETE


def _order_statistics(method, q, n):
    """``(lo, hi, gamma)``: the quantile ``q`` of ``n`` sorted values is
    ``lerp(s[lo], s[hi], gamma)``, computed as NumPy computes it."""
    if method in _DISCRETE:
        if method == "lower":
            k = _math.floor((n - 1) * q)
        elif method == "higher":
            k = _math.ceil((n - 1) * q)
        elif method == "nearest":
            k = int(round((n - 1) * q))        # halves to even, as NumPy's around
        else:
            # the boundaries of the inverted empirical CDF: the lower index
            # where the virtual index is an integer (and, for
            # closest_observation, odd), else the upper one
            index = n * q - 1 - (0.5 if method == "closest_observation" else 0.0)
            k = _math.floor(index)
            on_boundary = index - k == 0 and (method == "inverted_cdf" or k % 2 == 1)
            k = k if on_boundary else k + 1
        k = min(max(k, 0), n - 1)
        return k, k, 0.0
    if method == "linear":
        virtual = (n - 1) * q
    elif method == "midpoint":
        virtual = 0.5 * (_math.floor((n - 1) * q) + _math.ceil((n - 1) * q))
    elif method == "averaged_inverted_cdf":
        virtual = n * q - 1
    else:
        alpha, beta = _CONTINUOUS[method]
        virtual = n * q + (alpha + q * (1 - alpha - beta)) - 1
    if virtual >= n - 1:
        return n - 1, n - 1, 0.0
    if virtual < 0:
        return 0, 0, 0.0
    lo = _math.floor(virtual)
    gamma = virtual - lo
    if method == "averaged_inverted_cdf":
        gamma = 0.5 if gamma == 0 else 1.0
    elif method == "midpoint":
        gamma = 0.0 if virtual % 1 == 0 else 0.5
    return lo, lo + 1, gamma


def _check_method(method, name):
    if method not in QUANTILE_METHODS:
        raise NumpyArgumentError(
            f"{name}: method={method!r} is not one of NumPy's quantile methods "
            f"supported here: {', '.join(QUANTILE_METHODS)}")


def quantile(a, q, axis=None, keepdims=False, method="linear", *, weights=None):
    """The ``q``-th quantiles (0 <= q <= 1) of ``a`` over ``axis``.

    ``method`` is any of NumPy 2's: ``'linear'`` (default), ``'lower'``,
    ``'higher'``, ``'nearest'``, ``'midpoint'``, the continuous
    ``'interpolated_inverted_cdf'``, ``'hazen'``, ``'weibull'``,
    ``'median_unbiased'``, ``'normal_unbiased'``, and the discrete
    ``'inverted_cdf'``, ``'averaged_inverted_cdf'``, ``'closest_observation'``.
    Differentiable in ``a`` through the sorting permutation: the derivative
    goes to the (one or two) order statistics each quantile is made of.

    >>> float(quantile(_np.array([3.0, 1.0, 2.0, 4.0]), 0.5))
    2.5
    >>> float(quantile(_np.array([3.0, 1.0, 2.0, 4.0]), 0.5, method="lower"))
    2.0

    ``weights`` (NumPy 2, with ``method='inverted_cdf'`` only): the first sorted
    value whose cumulative weight reaches ``q`` of the total. The weights pick
    which value that is, so they get no derivative.

    >>> float(quantile(_np.array([1.0, 2.0, 3.0]), 0.5, method="inverted_cdf",
    ...                weights=_np.array([1.0, 0.0, 3.0])))
    3.0
    """
    _check_method(method, "quantile")
    if weights is not None and method != "inverted_cdf":
        raise NumpyArgumentError(
            f"quantile: weights= needs method='inverted_cdf' (as in NumPy), got {method!r}")
    if not (isinstance(a, _Tracer) or isinstance(weights, _Tracer) or contains_tracer(q)):
        xp = _xp(a)
        extra = {} if weights is None else {"weights": _asarray_on(xp, weights)}
        out = xp.quantile(a, _levels_on(xp, q), axis=axis, keepdims=keepdims,
                          method=method, **extra)
        return _numpy_shape(out, a, q, axis, keepdims)
    if weights is not None:
        return _weighted_quantile(a, _static_floats(q), axis, keepdims, weights)
    out = _quantile(a, _static_floats(q), axis, keepdims, method)
    # NumPy keeps a's precision for a Python float q, and for methods that pick
    # one order statistic; it promotes to q's float64 otherwise
    if type(q) in (int, float) or method in _DISCRETE:
        return out
    return _ew.convert_element_type(out, _np.result_type(_get_aval(out).dtype,
                                                         _np.float64))


def _static_floats(q, name="quantile"):
    """``q`` (a number, nested list or host array) as a NumPy float64 array: a
    static parameter, like an axis, not data. A traced ``q`` is refused rather
    than read as a constant, which would drop its derivative silently."""
    if contains_tracer(q):
        raise MissingRuleError(
            f"{name}: no derivative with respect to its argument q (the quantile "
            "levels) is defined: q is a static parameter. Pass q as a Python number "
            "or a NumPy array computed outside the transformation.")
    return _np.asarray(_concrete(q), dtype=_np.float64)


def _lerp(low, high, gamma):
    # NumPy's form: from the nearer end, so gamma = 1 gives high exactly
    if gamma >= 0.5:
        return high - (high - low) * (1 - gamma)
    return low + (high - low) * gamma


def _quantile(a, q_arr, axis, keepdims, method="linear"):
    if ((q_arr < 0) | (q_arr > 1)).any():
        raise ValueError("quantiles must be in the range [0, 1]")
    ndim = _get_aval(a).ndim
    if axis is None:
        x = _shape.reshape(a, (-1,))
        ax = 0
    else:
        axes = _normalize_axis(axis, ndim)
        if len(axes) != 1:
            raise NotImplementedError("fgrad.numpy.quantile reduces one axis or all")
        x, ax = a, axes[0]
    s = _fshape.sort(x, axis=ax)
    n = _get_aval(s).shape[ax]
    results = []
    for qk in q_arr.ravel():
        lo, hi, gamma = _order_statistics(method, float(qk), n)
        low = _fshape.take(s, lo, axis=ax)
        value = low if hi == lo else _lerp(low, _fshape.take(s, hi, axis=ax), gamma)
        if keepdims:
            if axis is None:
                value = _shape.reshape(value, (1,) * ndim)
            else:
                value = _shape.expand_dims(value, ax)
        results.append(value)
    if q_arr.ndim == 0:
        return results[0]
    out = _shape.stack(results, axis=0)
    return _shape.reshape(out, q_arr.shape + _get_aval(results[0]).shape)


def _weighted_quantile(a, q_arr, axis, keepdims, weights):
    if ((q_arr < 0) | (q_arr > 1)).any():
        raise ValueError("quantiles must be in the range [0, 1]")
    # the constant side goes to the traced side's backend
    if not isinstance(a, _Tracer):
        a = _asarray_on(_xp(weights), a)
    if not contains_tracer(weights):
        weights = _asarray_on(_module_of_leaves([a]), weights)
    ndim = _get_aval(a).ndim
    w = _creation.stop_gradient(weights)
    if axis is None:
        x, w, ax = _shape.reshape(a, (-1,)), _shape.reshape(w, (-1,)), 0
    else:
        axes = _normalize_axis(axis, ndim)
        if len(axes) != 1:
            raise NotImplementedError("fgrad.numpy.quantile reduces one axis or all")
        x, ax = a, axes[0]
        if _get_aval(w).ndim == 1 and ndim > 1:       # weights along the axis
            w = _shape.reshape(w, tuple(-1 if i == ax else 1 for i in range(ndim)))
    w = _shape.broadcast_to(w, _get_aval(x).shape)
    order = argsort(x, axis=ax)
    s = _fshape.take_along_axis(x, order, ax)
    cdf = _red.cumsum(_ew.convert_element_type(_fshape.take_along_axis(w, order, ax),
                                               _np.float64), ax)
    n = _get_aval(cdf).shape[ax]
    cdf = cdf / slice_axis(cdf, ax, n - 1, n)                  # normalised, as NumPy's
    # leading zero weights never hold the quantile, not even q = 0 (NumPy's rule)
    zero = _ew.equal(cdf, 0)
    last = n - 1
    results = []
    for qk in q_arr.ravel():
        # the first position whose cumulative weight reaches q
        below = _ew.convert_element_type(
            _ew.logical_or(_ew.less(cdf, float(qk)), zero), _np.int64)
        k = _ew.minimum(_red.sum_(below, ax, True), last)
        value = _fshape.take_along_axis(s, k, ax)
        if not keepdims:
            value = _shape.squeeze(value, (ax,))
        elif axis is None:
            value = _shape.reshape(value, (1,) * ndim)
        results.append(value)
    if q_arr.ndim == 0:
        return results[0]
    return _shape.reshape(_shape.stack(results, axis=0),
                          q_arr.shape + _get_aval(results[0]).shape)


def percentile(a, q, axis=None, keepdims=False, method="linear", *, weights=None):
    """The ``q``-th percentiles (0 <= q <= 100); see `quantile` for ``method``
    and ``weights``."""
    _check_method(method, "percentile")
    if not (isinstance(a, _Tracer) or isinstance(weights, _Tracer) or contains_tracer(q)):
        xp = _xp(a)
        extra = {} if weights is None else {"weights": _asarray_on(xp, weights)}
        return _numpy_shape(
            xp.percentile(a, _levels_on(xp, q), axis=axis, keepdims=keepdims,
                          method=method, **extra),
            a, q, axis, keepdims)
    return quantile(a, q / 100 if type(q) in (int, float)
                    else _static_floats(q) / 100, axis, keepdims, method,
                    weights=weights)


def median(a, axis=None, keepdims=False):
    """The median over ``axis``: the 0.5 quantile."""
    if not isinstance(a, _Tracer):
        return _numpy_shape(_xp(a).median(_plain_array(a), axis=axis, keepdims=keepdims),
                            a, 0.5, axis, keepdims)
    return quantile(a, 0.5, axis, keepdims)


def _levels_on(xp, q):
    """Quantile levels for ``xp``'s quantile: a Python number as it is, else an
    array on its device, flat where q has more than one axis (CuPy takes 0-d and
    1-d q only; `_numpy_shape` gives the result q's shape back)."""
    if type(q) in (int, float):
        return q
    q = _asarray_on(xp, q)
    return q.ravel() if xp is not _np and q.ndim > 1 else q


def _numpy_shape(out, a, q, axis, keepdims):
    """A device library's order statistic in the shape NumPy gives: ``q``'s
    shape, then ``a``'s without (or, with keepdims, with ones for) the reduced
    axes. (NumPy's own result is returned as it is.)"""
    if _xp(out) is _np:
        return out
    shape = _get_aval(a).shape
    axes = range(len(shape)) if axis is None else _normalize_axis(axis, len(shape))
    rest = tuple(1 if i in axes else n for i, n in enumerate(shape)) if keepdims \
        else tuple(n for i, n in enumerate(shape) if i not in axes)
    expected = (q.shape if hasattr(q, "shape") else _np.shape(q)) + rest
    return out if out.shape == expected else out.reshape(expected)


# -- without derivative -----------------------------------------------------------

def _axis_param(axis, ndim):
    if axis is None:
        return None
    return _red.reduced_axes(axis, ndim)


def all(a, axis=None, keepdims=False):
    """True where every element along ``axis`` is nonzero (no derivative)."""
    return _red.all_p.bind(a, axis=_axis_param(axis, _get_aval(a).ndim),
                           keepdims=bool(keepdims))


def any(a, axis=None, keepdims=False):
    """True where some element along ``axis`` is nonzero (no derivative)."""
    return _red.any_p.bind(a, axis=_axis_param(axis, _get_aval(a).ndim),
                           keepdims=bool(keepdims))


def _single_axis(axis, ndim):
    return None if axis is None else _normalize_axis(axis, ndim)[0]


def argmax(a, axis=None, keepdims=False):
    """Index of the maximum along ``axis`` (no derivative)."""
    return _red.argmax_p.bind(a, axis=_single_axis(axis, _get_aval(a).ndim),
                              keepdims=bool(keepdims))


def argmin(a, axis=None, keepdims=False):
    """Index of the minimum along ``axis`` (no derivative)."""
    return _red.argmin_p.bind(a, axis=_single_axis(axis, _get_aval(a).ndim),
                              keepdims=bool(keepdims))


def argsort(a, axis=-1, kind=None, stable=None, *, descending=False):
    """The permutation that sorts ``a`` along ``axis`` (no derivative); with the
    Array API's ``descending=True``, largest first, ties in their order in ``a``.

    >>> import fgrad.numpy as fnp, numpy as np
    >>> fnp.argsort(np.array([2.0, 3.0, 2.0]), descending=True, stable=True)
    array([1, 0, 2])
    """
    if axis is None:
        a, axis = _shape.reshape(a, (-1,)), 0
    axis = _normalize_axis(axis, _get_aval(a).ndim)[0]
    return _fshape.sorting_permutation(a, axis, kind, stable, descending)


def count_nonzero(a, axis=None, keepdims=False):
    """How many elements are nonzero (no derivative); of a traced ``a``, a sum of
    ``a != 0``, so that it stages under jit and batches under vmap."""
    if not isinstance(a, _Tracer):
        return _xp(a).count_nonzero(a, axis=axis, keepdims=keepdims)
    nonzero = _ew.convert_element_type(_ew.not_equal(a, 0), _np.intp)
    return _red.sum_(nonzero, axis, keepdims)


def _concrete(x):
    while isinstance(x, _Tracer):
        x = x.concrete()
    return x


def vector_norm(x, ord=2, axis=None, keepdims=False):
    """The vector ``ord``-norm over ``axis`` (all axes if None), with a finite
    gradient at zero (0, a subgradient) instead of nan.

    ``fgrad.numpy.linalg.norm`` uses this for vectors. The square root (or
    ``1/ord`` power) is taken behind a double ``where``, so the zero vector
    never reaches it.

    >>> import fgrad
    >>> fgrad.grad(vector_norm)(_np.zeros(2))
    array([0., 0.])
    """
    if _get_aval(x).dtype.kind not in "fc":
        x = _ew.convert_element_type(x, _np.float64)
    if ord == 2 or ord is None:
        magnitude2 = _ew.real(x * _ew.conj(x)) if _get_aval(x).dtype.kind == "c" \
            else x * x
        return _safe_root(_red.sum_(magnitude2, axis, keepdims), 2)
    a = _ew.absolute(x)
    if ord == _np.inf:
        return _red.max_(a, axis, keepdims)
    if ord == -_np.inf:
        return _red.min_(a, axis, keepdims)
    if ord == 0:
        return _red.sum_(_ew.convert_element_type(_ew.not_equal(a, 0),
                                                  _get_aval(a).dtype), axis, keepdims)
    if ord == 1:
        return _red.sum_(a, axis, keepdims)
    return _safe_root(_red.sum_(a ** ord, axis, keepdims), ord)


def _safe_root(s, p):
    positive = _ew.greater(s, 0)
    safe = _ew.where(positive, s, 1.0)
    root = _ew.sqrt(safe) if p == 2 else safe ** (1.0 / p)
    return _ew.where(positive, root, 0.0)


def nansum(a, axis=None, keepdims=False):
    """Sum treating nan as zero; nan entries get a zero derivative."""
    if not isinstance(a, _Tracer):
        return _xp(a).nansum(_plain_array(a), axis=axis, keepdims=keepdims)
    return _red.sum_(_ew.where(_ew.isnan(a), 0.0, a), axis, keepdims)


def nanmean(a, axis=None, keepdims=False):
    """Mean of the entries that are not nan."""
    if not isinstance(a, _Tracer):
        return _xp(a).nanmean(_plain_array(a), axis=axis, keepdims=keepdims)
    present = _ew.logical_not(_ew.isnan(a))
    count = _red.sum_(_ew.convert_element_type(present, _get_aval(a).dtype), axis,
                      keepdims)
    return nansum(a, axis, keepdims) / count


def _nan_extremum(a, axis, keepdims, reduce, fill):
    if _get_aval(a).dtype.kind not in "fc":
        return reduce(a, axis, keepdims)        # integers hold no nan
    nan = _ew.isnan(a)
    # nan entries become the identity of the reduction, so they never win and
    # receive no derivative; ties among the rest split it as in max/min
    out = reduce(_ew.where(nan, fill, a), axis, keepdims)
    return _ew.where(_red.all_p.bind(nan, axis=_axis_param(axis, _get_aval(a).ndim),
                                     keepdims=bool(keepdims)), _np.nan, out)


def nanmax(a, axis=None, keepdims=False):
    """Maximum over ``axis`` ignoring nan (nan where a slice is all nan).

    nan entries get a zero derivative; tied maxima share it evenly, as in `max`.

    >>> import fgrad
    >>> fgrad.grad(nanmax)(_np.array([1.0, _np.nan, 3.0, 3.0]))
    array([0. , 0. , 0.5, 0.5])
    """
    if not isinstance(a, _Tracer):
        return _xp(a).nanmax(_plain_array(a), axis=axis, keepdims=keepdims)
    return _nan_extremum(a, axis, keepdims, _red.max_, -_np.inf)


def nanmin(a, axis=None, keepdims=False):
    """Minimum over ``axis`` ignoring nan; see `nanmax`."""
    if not isinstance(a, _Tracer):
        return _xp(a).nanmin(_plain_array(a), axis=axis, keepdims=keepdims)
    return _nan_extremum(a, axis, keepdims, _red.min_, _np.inf)


def nanvar(a, axis=None, dtype=None, ddof=0, keepdims=False):
    """Variance of the entries that are not nan, with ``ddof`` delta degrees
    of freedom (nan where fewer than ``ddof + 1`` entries remain).

    nan entries get a zero derivative.

    >>> nanvar(_np.array([1.0, _np.nan, 3.0]))
    np.float64(1.0)
    """
    if not isinstance(a, _Tracer):
        return _xp(a).nanvar(_plain_array(a), axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)
    if _get_aval(a).dtype.kind not in "fc":
        return var(a, axis, dtype, ddof, keepdims)
    present = _ew.logical_not(_ew.isnan(a))
    real_dtype = _np.finfo(_get_aval(a).dtype).dtype
    count = _red.sum_(_ew.convert_element_type(present, real_dtype), axis, True)
    mean_ = nansum(a, axis, keepdims=True) / count
    centered = _ew.where(present, a - mean_, 0.0)
    if _get_aval(a).dtype.kind == "c":
        squared = _ew.real(centered * _ew.conj(centered))
    else:
        squared = centered * centered
    dof = count - ddof
    # NumPy's nan (not a negative or infinite variance) when no degree of
    # freedom is left
    dof = _ew.where(_ew.greater(dof, 0), dof, _np.nan)
    if not keepdims:
        dof = _shape.reshape(dof, _get_aval(_red.sum_(squared, axis, False)).shape)
    return _with_dtype(_red.sum_(squared, axis, keepdims) / dof, dtype)


def nanstd(a, axis=None, dtype=None, ddof=0, keepdims=False):
    """Standard deviation of the entries that are not nan, ``sqrt(nanvar)``."""
    if not isinstance(a, _Tracer):
        return _xp(a).nanstd(_plain_array(a), axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)
    return safe_sqrt(nanvar(a, axis, dtype, ddof, keepdims))


def diff(a, n=1, axis=-1, prepend=None, append=None):
    """The ``n``-th discrete difference along ``axis``, of ``a`` with
    ``prepend`` and ``append`` joined before and after it along that axis
    (scalars are broadcast to one slice), differentiable in all three.

    >>> diff(_np.array([1.0, 4.0, 9.0]), prepend=0.0)
    array([1., 3., 5.])
    """
    if not isinstance(a, _Tracer) and not hasattr(a, "dtype"):
        a = _asarray(a)                         # a list
    ndim = _get_aval(a).ndim
    ax = _normalize_axis(axis, ndim)[0]
    if prepend is not None or append is not None:
        a = _with_ends(a, ax, prepend, append)
    # NumPy's diff of booleans is "changed" (not_equal): booleans do not subtract
    step = _ew.not_equal if _get_aval(a).dtype == _np.bool_ else _ew.subtract
    for _ in range(n):
        length = _get_aval(a).shape[ax]
        a = step(slice_axis(a, ax, 1, length), slice_axis(a, ax, 0, _builtins_max(length - 1, 0)))
    return a


def _with_ends(a, axis, prepend, append):
    shape = list(_get_aval(a).shape)
    parts = []
    for end in (prepend, a, append):
        if end is None:
            continue
        if not isinstance(end, _Tracer) and not hasattr(end, "dtype"):
            end = _asarray(end)
        if _get_aval(end).ndim == 0:        # a scalar: one slice of it
            end = _shape.broadcast_to(end, tuple(shape[:axis] + [1] + shape[axis + 1:]))
        parts.append(end)
    return _shape.concatenate(parts, axis)


def _builtins_max(a, b):
    return a if a > b else b


# -- index-valued, data-dependent results: NumPy on the values -------------------

def nonzero(a):
    """Indices of the nonzero elements (no derivative)."""
    a = _concrete(a)
    return _xp(a).nonzero(_plain_array(a))


def flatnonzero(a):
    """Indices of the nonzero elements of the flattened array."""
    a = _concrete(a)
    return _xp(a).flatnonzero(_plain_array(a))


def argwhere(a):
    """Indices of the nonzero elements, one row each."""
    a = _concrete(a)
    return _xp(a).argwhere(_plain_array(a))


def searchsorted(a, v, side="left", sorter=None):
    """Where ``v`` would be inserted into sorted ``a`` (no derivative); a
    primitive for a traced 1-d ``a`` or ``v`` without ``sorter``, so it works
    under `jit`."""
    if sorter is None and (isinstance(a, _Tracer) or isinstance(v, _Tracer)) \
            and _get_aval(a).ndim == 1:
        return _search.searchsorted(a, v, side)
    a, v = _concrete(a), _concrete(v)
    return _xp(a, v).searchsorted(a, v, side=side, sorter=sorter)


