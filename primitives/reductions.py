"""Reductions over axes: sum, max, min, prod (and mean, built on sum)."""
import math

import operator

import numpy as np

from fgrad.core.backend import array_module
from fgrad.core.trace import Primitive, ShapedArray, get_aval, plain_array

from fgrad.primitives.base import normalize_axis, result_dtype
from fgrad.primitives.batching import reduction_batch_rule, single_axis_batch_rule

FAMILY = "primitives/reductions.py"


def _reduced_shape(shape, axis, keepdims):
    if keepdims:
        return tuple(1 if i in axis else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axis)


def _reduction(name):
    np_fn = getattr(np, name)

    def impl(x, axis, keepdims):
        # the array's own method is NumPy's C entry point; np.sum adds a Python layer
        method = getattr(x, name, None)
        if method is None:                  # a Python scalar
            return getattr(array_module(x), name)(x, axis=axis, keepdims=keepdims)
        return method(axis=axis, keepdims=keepdims)

    def abstract(x, axis, keepdims):
        if name in ("max", "min") and any(x.shape[a] == 0 for a in axis):
            raise ValueError(f"{name} of an empty axis has no identity: pass a "
                             "non-empty array")
        return ShapedArray(_reduced_shape(x.shape, axis, keepdims),
                           result_dtype(lambda d: np_fn(np.reshape(d, (1,))), [x]))
    prim = Primitive(name, impl, abstract, family=FAMILY)
    prim.batch = reduction_batch_rule(prim)
    # ndarray.sum/max/... straight from C (np.sum adds a Python wrapper layer)
    prim.lowering = lambda xp, axis, keepdims: operator.methodcaller(
        name, axis=axis, keepdims=keepdims)
    return prim


def keepdims_like(ct, x, axis, keepdims):
    """Re-insert the reduced axes of ``ct`` so it broadcasts against ``x``."""
    if keepdims or not get_aval(ct).shape:
        return ct        # a 0-d cotangent (a full reduction) broadcasts as it is
    return reshape(ct, _reduced_shape(get_aval(x).shape, axis, True))


def _broadcast_back(ct, x, axis, keepdims):
    return broadcast_to(keepdims_like(ct, x, axis, keepdims), get_aval(x).shape)


sum_p = _reduction("sum")
sum_p.def_vjp(lambda ct, ans, x, axis, keepdims: _broadcast_back(ct, x, axis, keepdims),
              reads=[set()])
sum_p.def_jvp(lambda t, ans, x, axis, keepdims: sum_(t, axis, keepdims))


def _extremum_hits(ans, x, axis, keepdims, count_keepdims):
    """``(hit, count)``: where ``x`` equals its extremum ``ans`` (1 or 0 in
    ``ans``'s dtype), and how many elements do along ``axis`` (its reduced
    axes kept if ``count_keepdims``). Every element equal to the extremum
    shares the derivative equally, so a tie between k elements sends 1/k of
    it to each.

    The division is by the reduced count, not of the whole mask: the
    Hessian-vector product of kmeans' nearest-centroid cost divided its
    n x k mask element by element. (The mask is not left bool: a sum of
    bools is an integer reduction, outside the whole-graph compiler's table.)
    """
    dtype = get_aval(ans).dtype
    hit = convert_element_type(equal(x, keepdims_like(ans, x, axis, keepdims)), dtype)
    return hit, sum_(hit, axis, keepdims=count_keepdims)


def _extremum_rules(prim):
    def vjp(ct, ans, x, axis, keepdims):
        hit, count = _extremum_hits(ans, x, axis, keepdims, True)
        return hit * (keepdims_like(ct, x, axis, keepdims) / count)

    def jvp(t, ans, x, axis, keepdims):
        hit, count = _extremum_hits(ans, x, axis, keepdims, keepdims)
        return sum_(t * hit, axis, keepdims) / count

    prim.def_vjp(vjp, reads=[{0, "ans"}])
    prim.def_jvp(jvp)


max_p = _reduction("max")
min_p = _reduction("min")
_extremum_rules(max_p)
_extremum_rules(min_p)

prod_p = _reduction("prod")


def _prod_of_others(x, axis):
    """For each element, the product of the other elements along ``axis``.

    Built from exclusive cumulative products from both ends, so it is exact when
    ``x`` holds zeros (where ``prod / x`` would give nan).
    """
    aval = get_aval(x)
    rest = tuple(i for i in range(aval.ndim) if i not in axis)
    perm = rest + axis
    moved = transpose(x, perm)
    lead = tuple(aval.shape[i] for i in rest)
    flat = reshape(moved, lead + (-1,))
    last = len(lead)
    before = _exclusive_cumprod(flat, last, reverse=False)
    after = _exclusive_cumprod(flat, last, reverse=True)
    others = reshape(before * after, get_aval(moved).shape)
    return transpose(others, tuple(sorted(range(len(perm)), key=perm.__getitem__)))


def _exclusive_cumprod(x, axis, reverse):
    n = get_aval(x).shape[axis]
    one = ones_like(slice_axis(x, axis, 0, 1))
    if n <= 1:
        return one if n else x
    if reverse:
        inner = flip_axis(cumprod(flip_axis(slice_axis(x, axis, 1, n), axis), axis), axis)
        return concatenate([inner, one], axis)
    return concatenate([one, cumprod(slice_axis(x, axis, 0, n - 1), axis)], axis)


def flip_axis(x, axis):
    spec = (("slice", None, None, None),) * axis + (("slice", None, None, -1),)
    return getitem_p.bind(x, spec=spec)


prod_p.def_vjp(lambda ct, ans, x, axis, keepdims:
               _broadcast_back(ct, x, axis, keepdims) * _prod_of_others(x, axis),
               reads=[{0}])
prod_p.def_jvp(lambda t, ans, x, axis, keepdims:
               sum_(t * _prod_of_others(x, axis), axis, keepdims))


# ---------------------------------------------------------------------------
# Scans: cumsum, cumprod (along one axis; None means over the flattened array)
# ---------------------------------------------------------------------------


def _scan(name):
    def impl(x, axis):
        return getattr(array_module(x), name)(x, axis=axis)

    def abstract(x, axis):
        return ShapedArray(x.shape, result_dtype(
            lambda d: getattr(np, name)(np.reshape(d, (1,))), [x]))
    prim = Primitive(name, impl, abstract, family=FAMILY)
    prim.batch = single_axis_batch_rule(prim)
    return prim


def _reverse_cumsum(ct, axis):
    return flip_axis(cumsum(flip_axis(ct, axis), axis), axis)


cumsum_p = _scan("cumsum")
cumsum_p.def_vjp(lambda ct, ans, x, axis: _reverse_cumsum(ct, axis), reads=[set()])
cumsum_p.def_jvp(lambda t, ans, x, axis: cumsum(t, axis))

cumprod_p = _scan("cumprod")


def _shift(y, axis, steps, fill, reverse):
    """``y`` moved ``steps`` places along ``axis`` (towards the end, or towards
    the start when ``reverse``), the vacated places holding ``fill``."""
    n = get_aval(y).shape[axis]
    pad = full_like(slice_axis(y, axis, 0, steps), fill)
    if reverse:
        return concatenate([slice_axis(y, axis, steps, n), pad], axis)
    return concatenate([pad, slice_axis(y, axis, 0, n - steps)], axis)


def _linear_scan(a, b, axis, reverse=False):
    """``y`` with ``y_i = a_i * y_(i-1) + b_i`` along ``axis`` (``y_(i+1)`` when
    ``reverse``), starting from 0.

    Recursive doubling composes the affine maps ``y -> a y + b`` pairwise in
    log2(n) rounds of products and shifts. There is no division, so the result
    is exact where ``a`` has zeros, and it differentiates again.
    """
    n = get_aval(b).shape[axis]
    steps = 1
    while steps < n:
        b = b + a * _shift(b, axis, steps, 0, reverse)
        if 2 * steps < n:
            a = a * _shift(a, axis, steps, 1, reverse)
        steps *= 2
    return b


# ans_i = ans_(i-1) * x_i, so by the product rule the tangent follows the linear
# recurrence dans_i = x_i dans_(i-1) + ans_(i-1) dx_i, and the cotangent its
# transpose, run backwards. Unlike ans / x (the textbook rule), this is exact
# when x holds zeros, to any order.
def _cumprod_vjp(ct, ans, x, axis):
    later = _shift(x, axis, 1, 0, reverse=True)            # x_(i+1)
    return _exclusive_cumprod(x, axis, reverse=False) * _linear_scan(
        later, ct, axis, reverse=True)


def _cumprod_jvp(t, ans, x, axis):
    return _linear_scan(x, _exclusive_cumprod(x, axis, reverse=False) * t, axis)


cumprod_p.def_vjp(_cumprod_vjp, reads=[{0}])
cumprod_p.def_jvp(_cumprod_jvp)


def _scanner(prim):
    def scan(x, axis=None):
        if axis is None:
            x = reshape(x, (-1,))
            axis = 0
        return prim.bind(x, axis=normalize_axis(axis, get_aval(x).ndim)[0])
    scan.__name__ = prim.name
    return scan


cumsum = _scanner(cumsum_p)
cumprod = _scanner(cumprod_p)


# ---------------------------------------------------------------------------
# Without derivative: index-valued and boolean reductions
# ---------------------------------------------------------------------------


def _nondiff_function(name):
    """A primitive for ``xp.<name>(x, **params)`` with no derivative."""
    def impl(x, **params):
        return getattr(array_module(x), name)(x, **params)

    def abstract(x, **params):
        dummy = np.broadcast_to(np.zeros((), x.dtype), x.shape)
        return get_aval(np.asarray(getattr(np, name)(dummy, **params)))
    return Primitive(name, impl, abstract, nondiff=True, family=FAMILY)


argmax_p = _nondiff_function("argmax")
argmin_p = _nondiff_function("argmin")
argsort_p = _nondiff_function("argsort")
all_p = _nondiff_function("all")
any_p = _nondiff_function("any")
argmax_p.batch = single_axis_batch_rule(argmax_p, reduces=True)
argmin_p.batch = single_axis_batch_rule(argmin_p, reduces=True)
argsort_p.batch = single_axis_batch_rule(argsort_p)     # argsort's axis is an int
all_p.batch = reduction_batch_rule(all_p)
any_p.batch = reduction_batch_rule(any_p)


def reduced_axes(axis, ndim):
    """The axes a reduction sums over: `normalize_axis`, except that an int
    axis 0 or -1 of a 0-d array reduces nothing, as in NumPy's ufunc reductions
    (``np.sum(np.float64(1), axis=0)``), whose methods refuse the tuple ``(0,)``."""
    if ndim == 0 and isinstance(axis, (int, np.integer)) and axis in (0, -1):
        return ()
    return normalize_axis(axis, ndim)


def _reducer(prim):
    def reduce(x, axis=None, keepdims=False):
        return prim.bind(x, axis=reduced_axes(axis, get_aval(x).ndim),
                         keepdims=bool(keepdims))
    reduce.__name__ = prim.name
    return reduce


sum_ = _reducer(sum_p)
max_ = _reducer(max_p)
min_ = _reducer(min_p)
prod = _reducer(prod_p)


def mean(x, axis=None, keepdims=False):
    """Arithmetic mean: ``sum / count``, in float64 for integer inputs."""
    x = plain_array(x)              # a masked array is refused before its axes are read
    aval = get_aval(x)
    if aval.ndim == 0 and axis is not None and axis != ():
        raise np.exceptions.AxisError(0, 0)     # NumPy's mean has no 0-d leniency
    if aval.dtype.kind not in "biufc":
        raise TypeError(f"mean of a non-numeric array (dtype {aval.dtype}): pass "
                        "numbers (None or strings have no mean)")
    axes = normalize_axis(axis, aval.ndim)
    count = math.prod(aval.shape[a] for a in axes)
    if aval.dtype.kind not in "fc":
        x = convert_element_type(x, np.float64)
    total = sum_(x, axes, keepdims)
    return total / count if count else total * np.nan


# Families use each other's functions in their rules; importing them last
# makes the cycle harmless (every name above exists by then).
from fgrad.primitives.elementwise import convert_element_type, equal  # noqa: E402
from fgrad.primitives.shape import broadcast_to, reshape  # noqa: E402
from fgrad.primitives.creation import full_like, ones_like  # noqa: E402
from fgrad.primitives.indexing import getitem_p, slice_axis  # noqa: E402
from fgrad.primitives.shape import concatenate, transpose  # noqa: E402
