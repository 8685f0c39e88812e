"""Functions whose result's shape depends on the values: the ``unique`` family,
the set operations (``intersect1d``, ``union1d``, ``setdiff1d``, ``setxor1d``)
and the histograms.

fgrad's tracers under `grad` and `jvp` carry their concrete values, so these
run there: NumPy's own function decides, on the values, what the result holds,
and the traced data is then gathered (a value of ``unique`` is a copy of one
entry of the input, so its derivative flows to that entry: the first
occurrence), or, for histograms, the bin edges are recomputed from the traced
data range as NumPy's formula does (``linspace(min, max, bins + 1)``), weights
are summed per bin, and counts and indices are integer constants.

Under `jit` or `vmap` there are no values (or one per example, with a
different shape each), so these raise `ConcretizationError` /
`BatchedConversionError` saying so; ``unique`` and its NumPy 2 variants also take JAX's static
``size=`` (and ``fill_value=``), which works under both.
"""
import math as _math
import operator as _operator

import numpy as _np

from fgrad.core.backend import array_module as _xp
from fgrad.core.backend import asarray_on as _asarray_on
from fgrad.core.backend import module_of_leaves as _module_of_leaves
from fgrad.core.errors import BatchedConversionError as _BatchedConversionError
from fgrad.core.errors import ConcretizationError as _ConcretizationError
from fgrad.core.trace import Tracer as _Tracer
from fgrad.core.trace import get_aval as _get_aval
from fgrad.numpy._arrays import linspace as _linspace
from fgrad.numpy._manipulation import as_array as _as_array
from fgrad.numpy._manipulation import take as _take
from fgrad.numpy._positions import bincount as _bincount
from fgrad.numpy._reductions import argsort as _argsort
from fgrad.primitives import elementwise as _ew
from fgrad.primitives import reductions as _red
from fgrad.primitives import search as _search
from fgrad.primitives import shape as _shape
from fgrad.primitives.array_likes import contains_tracer as _contains_tracer
from fgrad.primitives.array_likes import lift as _lift
from fgrad.primitives.indexing import slice_axis as _slice_axis


# NumPy's own named tuple types (not public names in NumPy: taken from a call),
# so that a result has the same type, and pytree structure, traced or not
def _result_type_of(numpy_function):
    return type(numpy_function(_np.zeros(1)))


UniqueAllResult = _result_type_of(_np.unique_all)
UniqueCountsResult = _result_type_of(_np.unique_counts)
UniqueInverseResult = _result_type_of(_np.unique_inverse)


def _concrete(x, name):
    """The values behind ``x``'s eager tracers; under `jit` / `vmap` an error
    saying why ``name`` needs them."""
    sized = (" Or give the result a static size: unique(x, size=n, fill_value=...)"
             if name == "unique" else "")
    try:
        while isinstance(x, _Tracer):
            x = x.concrete()
    except _ConcretizationError:
        raise _ConcretizationError(
            f"fgrad.numpy.{name}{_Tracer.where_called()}: the shape of its result "
            "depends on the values, which jit does not know (it traces with shapes "
            "only). Call it outside the jitted function, on concrete arrays, or under "
            f"grad/jvp alone, where the values are known.{sized}") from None
    except _BatchedConversionError:
        raise _BatchedConversionError(
            f"fgrad.numpy.{name}{_Tracer.where_called()}: the shape of its result "
            "depends on the values, so under vmap each example would give a different "
            f"shape. Call it per example in a Python loop, outside vmap.{sized}") from None
    return x


def _array(x, name):
    """An array_like argument: ``(traced or plain array, its concrete values)``."""
    x = _as_array(_lift(x))
    return x, _concrete(x, name)


def _flat(x):
    return _shape.reshape(x, (-1,))


def _gather_values(traced, values, wanted):
    """``traced``'s entries (1-d, values ``values``) equal to ``wanted``, each
    taken from its first occurrence: the derivative flows to that entry."""
    xp = _xp(values)
    distinct, first = xp.unique(values, return_index=True)
    at = xp.clip(xp.searchsorted(distinct, wanted), 0, max(distinct.size - 1, 0))
    return _take(traced, first[at]) if wanted.size else _slice_axis(traced, 0, 0, 0)


# -- unique -----------------------------------------------------------------------------

def _unique_of_size(ar, size, fill_value, return_index, return_inverse, return_counts,
                    equal_nan):
    """``unique`` with a static number of values, as JAX's ``size=``: sort, mark
    the first entry of each run of equal values, and find the k-th run's start
    by a binary search over the running count of marks. No value decides a
    shape, so this works under `jit` and `vmap` too."""
    ar = _as_array(_lift(ar))
    flat = _flat(ar)
    n = _get_aval(flat).shape[0]
    if n == 0:
        raise ValueError("unique with size=: the array is empty, so there is no value "
                         "to fill with")
    order = _argsort(flat, stable=True)      # stable: a run starts at its first occurrence
    s = _take(flat, order)
    same = _ew.equal(s[1:], s[:-1])
    if equal_nan and _get_aval(flat).dtype.kind in "fc":
        same = _ew.logical_or(same, _ew.logical_and(_ew.isnan(s[1:]), _ew.isnan(s[:-1])))
    first = _shape.concatenate([_constant_like(_np.ones(1, bool), flat),
                                _ew.logical_not(same)], 0)
    runs = _red.cumsum(_ew.convert_element_type(first, _np.int64), 0)   # 1, 1, 2, 3, 3, ...
    slots = _constant_like(_np.arange(1, size + 1), flat)
    start = _search.searchsorted(runs, slots, "left")        # where run k begins
    valid = _ew.less_equal(slots, runs[-1])
    at = _ew.minimum(start, n - 1)
    values = _take(s, at)
    values = _ew.where(valid, values, values[0] if fill_value is None else fill_value)
    out = [values]
    if return_index:
        out.append(_ew.where(valid, _take(order, at), 0))
    if return_inverse:
        # each entry's run, put back in the input's order (argsort inverts order)
        out.append(_shape.reshape(_take(runs - 1, _argsort(order)), _get_aval(ar).shape))
    if return_counts:
        end = _search.searchsorted(runs, slots, "right")
        out.append(_ew.where(valid, end - start, 0))
    return tuple(out) if len(out) > 1 else values


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None,
           *, equal_nan=True, sorted=True, size=None, fill_value=None):
    """NumPy's ``unique``: the distinct values (and, on request, the first
    indices, the inverse and the counts). Differentiable in ``ar``: each value
    is its first occurrence's. Needs concrete values (not under jit or vmap),
    unless ``size`` is given (JAX's extension): then exactly ``size`` values,
    the smallest first, padded with ``fill_value`` (default: the smallest
    value; indices and counts padded with 0), under `jit` and `vmap` too.

    >>> import fgrad
    >>> fgrad.grad(lambda x: unique(x).sum())(_np.array([2.0, 1.0, 2.0]))
    array([1., 1., 0.])
    >>> unique(_np.array([2.0, 1.0, 2.0]), size=3, fill_value=-1.0)
    array([ 1.,  2., -1.])
    """
    if size is not None:
        if axis is not None:
            raise ValueError("unique: size= works on the flattened array (axis=None)")
        return _unique_of_size(ar, _operator.index(size), fill_value, return_index,
                               return_inverse, return_counts, equal_nan)
    flags = {"return_index": return_index, "return_inverse": return_inverse,
             "return_counts": return_counts, "axis": axis, "equal_nan": equal_nan,
             "sorted": sorted}
    if not _contains_tracer(ar):
        return _xp(ar).unique(ar, **flags)
    ar, values = _array(ar, "unique")
    xp = _xp(values)
    if axis is None:
        out = xp.unique(values, **flags)
        found = out[0] if isinstance(out, tuple) else out
        picked = _gather_values(_flat(ar), xp.ravel(values), found)
    else:
        # along an axis NumPy always sorts: the first indices come in that order
        out = xp.unique(values, **{**flags, "return_index": True})
        picked = _take(ar, out[1], axis)
        if not return_index:
            out = out[:1] + out[2:]
        if len(out) == 1:
            return picked
    return (picked, *out[1:]) if isinstance(out, tuple) else picked


# NumPy 2's unique_* take no size; ``size=`` / ``fill_value=`` are JAX's, as in
# `unique`. Their values come smallest first: NumPy 2.3's own may come in any order
# (the standard allows it: NumPy's hash table gives [1, 0] for [0, 1]), but Array API
# code searches them (scikit-learn's LabelEncoder: ``searchsorted(classes_, y)``),
# as array_api_compat's NumPy namespace, which sorts, lets it

def unique_values(x, /, *, size=None, fill_value=None):
    """The distinct values of ``x`` (NaNs each distinct), smallest first: NumPy
    2's ``unique_values``, sorted.

    >>> unique_values(_np.array([1, 0, 1]))
    array([0, 1])
    """
    return unique(x, equal_nan=False, size=size, fill_value=fill_value)


def unique_counts(x, /, *, size=None, fill_value=None):
    """``(values, counts)`` of the distinct values (a named tuple, NumPy 2)."""
    return UniqueCountsResult(*unique(x, return_counts=True, equal_nan=False, size=size,
                                      fill_value=fill_value))


def unique_inverse(x, /, *, size=None, fill_value=None):
    """``(values, inverse_indices)``: ``values[inverse_indices]`` rebuilds ``x``."""
    return UniqueInverseResult(*unique(x, return_inverse=True, equal_nan=False, size=size,
                                       fill_value=fill_value))


def unique_all(x, /, *, size=None, fill_value=None):
    """``(values, indices, inverse_indices, counts)`` (a named tuple, NumPy 2)."""
    return UniqueAllResult(*unique(x, return_index=True, return_inverse=True,
                                   return_counts=True, equal_nan=False, size=size,
                                   fill_value=fill_value))


# -- set operations on 1-d arrays --------------------------------------------------------

def _both(ar1, ar2, name):
    (a, va), (b, vb) = _array(ar1, name), _array(ar2, name)
    return _flat(a), _xp(va).ravel(va), _flat(b), _xp(vb).ravel(vb)


def _joined(a, b):
    """``a`` and ``b`` (1-d) end to end, in one dtype."""
    dtype = _np.result_type(_get_aval(a).dtype, _get_aval(b).dtype)
    return _shape.concatenate([_ew.convert_element_type(a, dtype),
                               _ew.convert_element_type(b, dtype)], 0)


def intersect1d(ar1, ar2, assume_unique=False, return_indices=False):
    """The sorted values in both ``ar1`` and ``ar2``, taken from ``ar1`` (the
    derivative flows there); ``return_indices`` as NumPy."""
    if not _contains_tracer(ar1) and not _contains_tracer(ar2):
        return _xp(ar1, ar2).intersect1d(ar1, ar2, assume_unique, return_indices)
    a, va, b, vb = _both(ar1, ar2, "intersect1d")
    _, in1, in2 = _xp(va).intersect1d(va, vb, assume_unique, return_indices=True)
    dtype = _np.result_type(_get_aval(a).dtype, _get_aval(b).dtype)
    picked = _ew.convert_element_type(_take(a, in1), dtype)
    return (picked, in1, in2) if return_indices else picked


def union1d(ar1, ar2):
    """The sorted values in either array (from their first occurrence, ``ar1`` first)."""
    if not _contains_tracer(ar1) and not _contains_tracer(ar2):
        return _xp(ar1, ar2).union1d(ar1, ar2)
    a, _, b, _ = _both(ar1, ar2, "union1d")
    return unique(_joined(a, b))


def setdiff1d(ar1, ar2, assume_unique=False):
    """The values of ``ar1`` not in ``ar2`` (sorted and unique unless
    ``assume_unique``), from ``ar1``."""
    if not _contains_tracer(ar1) and not _contains_tracer(ar2):
        return _xp(ar1, ar2).setdiff1d(ar1, ar2, assume_unique)
    a, va, _, vb = _both(ar1, ar2, "setdiff1d")
    xp = _xp(va)
    if assume_unique:
        return _take(a, xp.flatnonzero(~xp.isin(va, vb)))
    return _gather_values(a, va, xp.setdiff1d(va, vb))


def setxor1d(ar1, ar2, assume_unique=False):
    """The sorted values in exactly one of the arrays."""
    if not _contains_tracer(ar1) and not _contains_tracer(ar2):
        return _xp(ar1, ar2).setxor1d(ar1, ar2, assume_unique)
    a, va, b, vb = _both(ar1, ar2, "setxor1d")
    xp = _xp(va)
    joined = _joined(a, b)
    return _gather_values(joined, xp.concatenate([va, vb]).astype(_get_aval(joined).dtype),
                          xp.setxor1d(va, vb, assume_unique))


# -- histograms ----------------------------------------------------------------------------

def _edges(column, values, bins, limits, computed):
    """The bin edges of one dimension, differentiable as NumPy computes them:
    explicit edges as given; a bin count (or estimator name) over ``limits``,
    or else over the data range ``[min, max]`` (widened by 0.5 each way when
    they are equal), spread by ``linspace``. ``computed`` are NumPy's edges."""
    if isinstance(bins, (list, tuple, _Tracer)) or getattr(bins, "ndim", 0) == 1:
        return _lift(bins) if _contains_tracer(bins) else computed
    if limits is not None:
        first, last = limits
        if not _contains_tracer(limits):
            return computed
    elif values.size == 0:
        return computed
    else:
        first, last = _red.min_(column, None, False), _red.max_(column, None, False)
        if values.min() == values.max():
            first, last = first - 0.5, last + 0.5
    return _linspace(first, last, computed.shape[0], dtype=computed.dtype)


def _bin_sums(columns, edges, weights):
    """The sums of ``weights`` per multi-dimensional bin, as NumPy's
    ``histogramdd`` bins them (right edges inclusive at the last bin; values
    outside the edges dropped)."""
    xp = _xp(columns[0])
    index = []
    for v, e in zip(columns, edges):
        k = xp.searchsorted(e, v, side="right")
        k[v == e[-1]] -= 1
        index.append(k)
    sizes = tuple(len(e) + 1 for e in edges)
    flat = xp.ravel_multi_index(tuple(index), sizes) if index[0].size \
        else xp.zeros(0, xp.int64)
    sums = _shape.reshape(_bincount(flat, _flat(weights), minlength=_math.prod(sizes)),
                          sizes)
    for axis, size in enumerate(sizes):
        sums = _slice_axis(sums, axis, 1, size - 1)
    return sums


def _density(hist, edges):
    """NumPy's density: the counts over each bin's volume, over the total."""
    total = _red.sum_(hist, None, False)
    for axis, e in enumerate(edges):
        width = _ew.convert_element_type(e[1:] - e[:-1], _np.float64)
        shape = [1] * len(edges)
        shape[axis] = -1
        hist = hist / _shape.reshape(width, tuple(shape))
    return hist / total


def _constant_like(value, like):
    return _asarray_on(_module_of_leaves([like]), value)


def histogram_bin_edges(a, bins=10, range=None, weights=None):
    """NumPy's bin edges for ``a``: differentiable in ``a`` through its range
    (``min`` and ``max``) when they come from the data, and in explicit edges."""
    if not any(_contains_tracer(v) for v in (a, bins, range, weights)):
        return _xp(a).histogram_bin_edges(a, bins, range, weights)
    a, values = _array(a, "histogram_bin_edges")
    computed = _xp(values).histogram_bin_edges(
        values, _concrete(_lift(bins), "histogram_bin_edges"),
        _concrete(range, "histogram_bin_edges"), _concrete(_lift(weights), "histogram_bin_edges"))
    return _edges(_flat(a), values, bins, range, computed)


def histogram(a, bins=10, range=None, density=None, weights=None):
    """``(hist, bin_edges)`` as NumPy's ``histogram``: the counts are integer
    constants; with ``weights`` their sums per bin (differentiable in the
    weights); the edges (and ``density``) differentiable in the data range.
    Needs concrete values of ``a`` (not under jit or vmap).

    >>> import fgrad
    >>> x = _np.array([0.0, 1.0, 3.0, 4.0])
    >>> fgrad.grad(lambda x: histogram(x, bins=2)[1][1])(x)   # the mid edge
    array([0.5, 0. , 0. , 0.5])
    """
    if not any(_contains_tracer(v) for v in (a, bins, range, weights)):
        return _xp(a).histogram(a, bins, range, density, weights)
    a, values = _array(a, "histogram")
    counts, computed = _xp(values).histogram(values, _concrete(_lift(bins), "histogram"),
                                             _concrete(range, "histogram"))
    edges = _edges(_flat(a), values, bins, range, computed)
    if weights is None:
        hist = _constant_like(counts, edges)
    else:
        weights = _lift(weights)
        hist = _bin_sums([_xp(values).ravel(values)], [computed], weights)
        hist = _ew.convert_element_type(hist, _get_aval(weights).dtype)
    return (_density(hist, [edges]) if density else hist), edges


def _columns(sample, name):
    """A histogramdd sample as its columns: ``(traced, values)`` per dimension."""
    if isinstance(sample, (list, tuple)):
        return [_array(s, name) for s in sample]
    sample, values = _array(sample, name)
    if _get_aval(sample).ndim < 2:
        return [(_flat(sample), _xp(values).ravel(values))]
    return [(_take(sample, i, 1), values[:, i]) for i in range(_get_aval(sample).shape[1])]


def histogramdd(sample, bins=10, range=None, density=None, weights=None):
    """``(hist, edges)`` as NumPy's ``histogramdd`` (float counts): the counts are
    constants, weighted sums differentiable in the weights, and the edges (and
    ``density``) differentiable in each dimension's data range. Needs
    concrete sample values (not under jit or vmap)."""
    if not any(_contains_tracer(v) for v in (sample, bins, range, weights)):
        return _xp(sample).histogramdd(sample, bins, range, density, weights)
    columns = _columns(sample, "histogramdd")
    plain = [v for _, v in columns]
    dims = len(columns)
    # NumPy's reading of bins: a sequence has one entry per dimension
    per_dim_bins = list(bins) if hasattr(bins, "__len__") and not isinstance(bins, str) \
        else [bins] * dims
    per_dim_range = range if range is not None else [None] * dims
    counts, computed = _xp(plain[0]).histogramdd(
        _xp(plain[0]).stack(plain, 1),
        [_concrete(_lift(b), "histogramdd") for b in per_dim_bins],
        _concrete(range, "histogramdd"))
    edges = [_edges(c, v, b, r, e) for (c, v), b, r, e in
             zip(columns, per_dim_bins, per_dim_range, computed)]
    if weights is None:
        hist = _constant_like(counts, columns[0][0])
    else:
        hist = _ew.convert_element_type(_bin_sums(plain, computed, _lift(weights)),
                                        _np.float64)
    return (_density(hist, edges) if density else hist), edges


def histogram2d(x, y, bins=10, range=None, density=None, weights=None):
    """``(H, xedges, yedges)`` as NumPy's ``histogram2d`` (see `histogramdd`)."""
    if not any(_contains_tracer(v) for v in (x, y, bins, range, weights)):
        return _xp(x, y).histogram2d(x, y, bins, range, density, weights)
    try:
        n = len(bins)
    except TypeError:
        n = 1
    if n not in (1, 2):                     # one array of edges for both
        bins = [bins, bins]
    hist, edges = histogramdd([x, y], bins, range, density, weights)
    return hist, edges[0], edges[1]
