"""Functions whose result is laid out by positions: ``resize``, ``delete``,
``insert``, ``block``, ``choose``, ordering (``sort_complex``, ``lexsort``,
``argpartition``), searches (``digitize``, ``isin``), ``unwrap`` and the
selections by a condition (``compress``, ``extract``, ``trim_zeros``,
``bincount``).

The positions come from static shapes or from concrete values (conditions,
indices: those need a concrete value, so not `jit`); the traced data is then
gathered, so derivatives flow to the entries kept.
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


def _concrete_value(x):
    """The value behind eager tracers: a condition or index that picks entries
    (it has no derivative; under `jit` there is none, and this raises)."""
    while isinstance(x, _Tracer):
        x = x.concrete()
    return x


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
        if _xp(a) is not _np and order is None:     # CuPy's takes no kind= (one kind)
            return _xp(a).argpartition(a, kth, axis=axis)
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
