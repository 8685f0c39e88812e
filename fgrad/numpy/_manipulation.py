"""Shape manipulation and indexing, as composites of the shape primitives.

Everything here is built from ``reshape``, ``transpose``, ``broadcast_to``,
``concatenate``, ``getitem`` (a gather) and ``scatter_add``, so each function is
differentiable (to any order) without rules of its own. Indices, split points and
masks are computed with NumPy from static shapes: they are constants.
"""
import builtins as _builtins
import itertools as _itertools

import numpy as _np

from fgrad.core.backend import array_module as _xp
from fgrad.core.backend import asarray_on as _asarray_on
from fgrad.core.backend import module_of_leaves as _module_of_leaves
from fgrad.core.trace import Tracer as _Tracer
from fgrad.core.trace import get_aval as _get_aval
from fgrad.core.trace import plain_array as _plain_array
from fgrad.primitives import creation as _creation
from fgrad.primitives import elementwise as _ew
from fgrad.primitives import indexing as _indexing
from fgrad.primitives import reductions as _red
from fgrad.primitives import shape as _shape
from fgrad.primitives.base import normalize_axis as _normalize_axis


def as_array(x):
    """``x`` as an array: tracers and arrays as they are, anything else through NumPy."""
    return x if isinstance(x, _Tracer) or hasattr(x, "dtype") else _np.asarray(x)


def _axis(axis, ndim):
    return _normalize_axis(axis, ndim)[0]


def _along(axis, ndim, item):
    """An index tuple with ``item`` at ``axis`` and full slices elsewhere."""
    return (slice(None),) * axis + (item,) + (slice(None),) * (ndim - axis - 1)


def ravel(a, order="C"):
    """``a`` flattened to 1-d (C order)."""
    if order != "C":
        raise NotImplementedError("fgrad.numpy.ravel supports order='C' only")
    return _shape.reshape(a, (-1,))


def swapaxes(a, axis1, axis2):
    """``a`` with two axes interchanged."""
    ndim = _get_aval(a).ndim
    perm = list(range(ndim))
    i, j = _axis(axis1, ndim), _axis(axis2, ndim)
    perm[i], perm[j] = perm[j], perm[i]
    return _shape.transpose(a, perm)


def moveaxis(a, source, destination):
    """``a`` with axes moved from ``source`` to ``destination`` positions."""
    ndim = _get_aval(a).ndim
    src = [source] if isinstance(source, (int, _np.integer)) else list(source)
    dst = [destination] if isinstance(destination, (int, _np.integer)) \
        else list(destination)
    if len(src) != len(dst):
        raise ValueError("moveaxis: source and destination must have the same "
                         "number of elements")
    src = [_axis(s, ndim) for s in src]
    dst = [_axis(d, ndim) for d in dst]
    order = [i for i in range(ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return _shape.transpose(a, order)


def broadcast_arrays(*args):
    """The arguments broadcast against each other (a tuple)."""
    args = [as_array(a) for a in args]
    shape = _np.broadcast_shapes(*(_get_aval(a).shape for a in args))
    return tuple(_shape.broadcast_to(a, shape) for a in args)


def _atleast(arys, fix):
    out = [fix(as_array(a)) for a in arys]
    return out[0] if len(out) == 1 else tuple(out)


def atleast_1d(*arys):
    """Each input viewed with at least one dimension."""
    return _atleast(arys, lambda a: _shape.reshape(a, (1,)) if _get_aval(a).ndim == 0
                    else a)


def atleast_2d(*arys):
    """Each input viewed with at least two dimensions (1-d becomes a row)."""
    def fix(a):
        shape = _get_aval(a).shape
        return _shape.reshape(a, (1,) * (2 - len(shape)) + shape) if len(shape) < 2 else a
    return _atleast(arys, fix)


def atleast_3d(*arys):
    """Each input with at least three dimensions: ``(n,)`` -> ``(1, n, 1)``,
    ``(m, n)`` -> ``(m, n, 1)``."""
    def fix(a):
        shape = _get_aval(a).shape
        if len(shape) == 0:
            return _shape.reshape(a, (1, 1, 1))
        if len(shape) == 1:
            return _shape.reshape(a, (1,) + shape + (1,))
        if len(shape) == 2:
            return _shape.reshape(a, shape + (1,))
        return a
    return _atleast(arys, fix)


def _listify(x):
    return list(x) if isinstance(x, tuple) else [x]


def join(arrays, axis):
    """``concatenate(arrays, axis)`` as NumPy's joins return it: a new array,
    also of one array (which the primitive's shortcut returns as it is), so an
    in-place update of the result leaves the input."""
    arrays = list(arrays)
    out = _shape.concatenate(arrays, axis)
    if len(arrays) == 1 and out is arrays[0]:
        return out.clone() if isinstance(out, _Tracer) else out.copy()
    return out


def hstack(tup):
    """Join horizontally: along axis 1, or axis 0 for 1-d inputs."""
    arrs = [atleast_1d(a) for a in tup]
    axis = 0 if arrs and _get_aval(arrs[0]).ndim == 1 else 1
    return join(arrs, axis)


def vstack(tup):
    """Join vertically: 1-d inputs become rows."""
    return join([atleast_2d(a) for a in tup], 0)


row_stack = vstack


def dstack(tup):
    """Join along the third axis."""
    return join([atleast_3d(a) for a in tup], 2)


def column_stack(tup):
    """1-d inputs become columns of a 2-d result; 2-d inputs join along axis 1."""
    arrs = []
    for a in tup:
        a = as_array(a)
        shape = _get_aval(a).shape
        arrs.append(_shape.reshape(a, shape + (1,)) if len(shape) < 2 else a)
    return join([atleast_2d(a) for a in arrs], 1)


def _split_points(n, indices_or_sections, exact):
    if isinstance(indices_or_sections, (int, _np.integer)):
        k = int(indices_or_sections)
        if k <= 0:
            raise ValueError("number of sections must be larger than 0")
        if exact and n % k:
            raise ValueError("array split does not result in an equal division: "
                             "use array_split for unequal parts")
        base, extra = divmod(n, k)
        sizes = [base + 1] * extra + [base] * (k - extra)
        return [0] + list(_itertools.accumulate(sizes))
    return [0] + [int(i) for i in indices_or_sections] + [n]


def _split(ary, indices_or_sections, axis, exact):
    ary = as_array(ary)
    ndim = _get_aval(ary).ndim
    axis = _axis(axis, ndim)
    n = _get_aval(ary).shape[axis]
    points = _split_points(n, indices_or_sections, exact)
    out = []
    for start, stop in zip(points[:-1], points[1:]):
        start, stop = _builtins.min(int(start), n), _builtins.min(int(stop), n)
        out.append(_indexing.getitem(ary, _along(axis, ndim, slice(start,
                                                                   _builtins.max(start, stop)))))
    return out


def split(ary, indices_or_sections, axis=0):
    """Split into equal sections (an int) or at the given indices."""
    return _split(ary, indices_or_sections, axis, exact=True)


def array_split(ary, indices_or_sections, axis=0):
    """Like `split`, but sections may differ in length by one."""
    return _split(ary, indices_or_sections, axis, exact=False)


def hsplit(ary, indices_or_sections):
    """Split along axis 1 (axis 0 for 1-d arrays)."""
    axis = 1 if _get_aval(as_array(ary)).ndim > 1 else 0
    return split(ary, indices_or_sections, axis)


def vsplit(ary, indices_or_sections):
    """Split along axis 0 (for arrays of at least 2 dimensions)."""
    if _get_aval(as_array(ary)).ndim < 2:
        raise ValueError("vsplit only works on arrays of 2 or more dimensions")
    return split(ary, indices_or_sections, 0)


def dsplit(ary, indices_or_sections):
    """Split along axis 2 (for arrays of at least 3 dimensions)."""
    if _get_aval(as_array(ary)).ndim < 3:
        raise ValueError("dsplit only works on arrays of 3 or more dimensions")
    return split(ary, indices_or_sections, 2)


def tile(A, reps):
    """``A`` repeated ``reps`` times along each axis (a broadcast and a reshape)."""
    A = as_array(A)
    reps = (int(reps),) if isinstance(reps, (int, _np.integer)) else tuple(map(int, reps))
    shape = _get_aval(A).shape
    d = _builtins.max(len(shape), len(reps))
    shape = (1,) * (d - len(shape)) + shape
    reps = (1,) * (d - len(reps)) + reps
    interleaved = tuple(v for pair in zip([1] * d, shape) for v in pair)
    target = tuple(v for pair in zip(reps, shape) for v in pair)
    out = _shape.broadcast_to(_shape.reshape(A, interleaved), target)
    return _shape.reshape(out, tuple(r * s for r, s in zip(reps, shape)))


def repeat(a, repeats, axis=None):
    """Each element repeated ``repeats`` times (a gather with a constant index)."""
    a = as_array(a)
    if axis is None:
        a, axis = ravel(a), 0
    axis = _axis(axis, _get_aval(a).ndim)
    n = _get_aval(a).shape[axis]
    xp = _xp(a)
    index = xp.repeat(xp.arange(n), _concrete(repeats))
    return take(a, index, axis)


def take(a, indices, axis=None):
    """Elements of ``a`` at ``indices`` along ``axis`` (of the flattened array if
    None); repeated indices accumulate in the derivative."""
    a = as_array(a)
    if axis is None:
        a, axis = ravel(a), 0
    ndim = _get_aval(a).ndim
    axis = _axis(axis, ndim)
    return _indexing.getitem(a, (slice(None),) * axis + (indices,))


def take_along_axis(arr, indices, axis):
    """``arr`` gathered with ``indices`` (same ndim) along ``axis``, as after
    ``argsort``; the derivative scatters back through the same indices."""
    arr = as_array(arr)
    if axis is None:
        arr, axis = ravel(arr), 0
    ndim = _get_aval(arr).ndim
    axis = _axis(axis, ndim)
    idx_shape = _get_aval(indices).shape
    if len(idx_shape) != ndim:
        raise ValueError(f"take_along_axis: indices have {len(idx_shape)} dimensions "
                         f"but arr has {ndim}; they must match")
    index = []
    for i in range(ndim):
        if i == axis:
            index.append(indices)
        else:
            shape = [1] * ndim
            shape[i] = _get_aval(arr).shape[i]
            index.append(_xp(arr).arange(shape[i]).reshape(shape))
    return _indexing.getitem(arr, tuple(index))


def sort(a, axis=-1, kind=None, stable=None, *, descending=False):
    """``a`` sorted along ``axis`` (largest first with the Array API's
    ``descending=True``): a gather by the sorting permutation, so the derivative
    of each output element goes to the input element it came from.

    >>> import fgrad.numpy as fnp, numpy as np
    >>> fnp.sort(np.array([2.0, 3.0, 1.0]), descending=True)
    array([3., 2., 1.])
    """
    if not isinstance(a, _Tracer) and not descending:
        xp = _xp(a)
        if xp is _np:
            return xp.sort(_plain_array(a), axis=axis, kind=kind, stable=stable)
        # CuPy's sort takes no stable= and is stable whatever kind says
        return xp.sort(a, axis=axis, **({} if kind is None else {"kind": kind}))
    if axis is None:
        a, axis = ravel(a), 0
    axis = _axis(axis, _get_aval(a).ndim)
    return take_along_axis(a, sorting_permutation(a, axis, kind, stable, descending), axis)


def sorting_permutation(a, axis, kind=None, stable=None, descending=False):
    """The indices that sort ``a`` along the (normalized) ``axis``; for
    ``descending``, largest first with equal elements in their order in ``a``
    (as the Array API's stable sort asks): the ascending order of ``a``
    reversed, itself reversed and counted from the end."""
    kind = "stable" if stable or kind in ("stable", "mergesort") else None
    if not descending:
        return _red.argsort_p.bind(a, axis=axis, kind=kind)
    ndim = _get_aval(a).ndim
    backwards = tuple(slice(None, None, -1) if i == axis else slice(None)
                      for i in range(ndim))
    perm = _red.argsort_p.bind(_indexing.getitem(a, backwards), axis=axis, kind=kind)
    return (_get_aval(a).shape[axis] - 1) - _indexing.getitem(perm, backwards)


def flip(m, axis=None):
    """``m`` with the order of elements reversed along ``axis`` (all if None)."""
    m = as_array(m)
    ndim = _get_aval(m).ndim
    axes = _normalize_axis(axis, ndim)
    return _indexing.getitem(m, tuple(slice(None, None, -1) if i in axes
                                      else slice(None) for i in range(ndim)))


def fliplr(m):
    """Reverse the columns (axis 1)."""
    return flip(m, 1)


def flipud(m):
    """Reverse the rows (axis 0)."""
    return flip(m, 0)


def roll(a, shift, axis=None):
    """Elements shifted cyclically along ``axis`` (of the flattened array if None)."""
    a = as_array(a)
    if axis is None:
        return _shape.reshape(roll(ravel(a), shift, 0), _get_aval(a).shape)
    shifts = [shift] if isinstance(shift, (int, _np.integer)) else list(shift)
    axes = [axis] if isinstance(axis, (int, _np.integer)) else list(axis)
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    if len(axes) == 1:
        axes = axes * len(shifts)
    ndim = _get_aval(a).ndim
    for s, ax in zip(shifts, axes):
        ax = _axis(ax, ndim)
        n = _get_aval(a).shape[ax]
        s = int(s) % n if n else 0
        if s:
            a = _shape.concatenate([_indexing.slice_axis(a, ax, n - s, n),
                                    _indexing.slice_axis(a, ax, 0, n - s)], ax)
    return a


def rot90(m, k=1, axes=(0, 1)):
    """``m`` rotated by 90 degrees ``k`` times in the plane of ``axes``."""
    m = as_array(m)
    ndim = _get_aval(m).ndim
    a0, a1 = _axis(axes[0], ndim), _axis(axes[1], ndim)
    if a0 == a1:
        raise ValueError("rot90: axes must be different")
    k %= 4
    if k == 0:
        return m
    if k == 2:
        return flip(flip(m, a0), a1)
    perm = list(range(ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return _shape.transpose(flip(m, a1), perm)
    return flip(_shape.transpose(m, perm), a1)


def pad(array, pad_width, mode="constant", constant_values=0):
    """``array`` padded with ``mode`` ``'constant'``, ``'edge'`` or ``'reflect'``.

    The padding is concatenated on, so the derivative of the padded entries
    flows back to the elements they copy (``edge``, ``reflect``).
    """
    array = as_array(array)
    if not isinstance(array, _Tracer):
        kw = {"constant_values": constant_values} if mode == "constant" else {}
        return _xp(array).pad(array, pad_width, mode=mode, **kw)
    if mode not in ("constant", "edge", "reflect"):
        raise NotImplementedError(f"fgrad.numpy.pad supports modes 'constant', 'edge' "
                                  f"and 'reflect', not {mode!r}")
    ndim = _get_aval(array).ndim
    widths, values = _pad_params(pad_width, constant_values, ndim)
    out = array
    for ax in range(ndim):
        before, after = (int(w) for w in widths[ax])
        if not before and not after:
            continue
        n = _get_aval(out).shape[ax]
        parts = []
        if mode == "constant":
            def block(width, value, out=out, ax=ax):
                shape = list(_get_aval(out).shape)
                shape[ax] = width
                edge = _creation.full_like(_indexing.slice_axis(out, ax, 0, 1),
                                           value.item())
                return _shape.broadcast_to(edge, shape)
            head = block(before, values[ax][0]) if before else None
            tail = block(after, values[ax][1]) if after else None
        elif mode == "edge":
            def block(width, start, out=out, ax=ax):
                shape = list(_get_aval(out).shape)
                shape[ax] = width
                return _shape.broadcast_to(
                    _indexing.slice_axis(out, ax, start, start + 1), shape)
            head = block(before, 0) if before else None
            tail = block(after, n - 1) if after else None
        else:
            if before >= n or after >= n:
                raise NotImplementedError("fgrad.numpy.pad: 'reflect' padding wider "
                                          "than the axis length minus one")
            head = take(out, list(range(before, 0, -1)), ax) if before else None
            tail = take(out, list(range(n - 2, n - 2 - after, -1)), ax) if after else None
        parts = [p for p in (head, out, tail) if p is not None]
        out = _shape.concatenate(parts, ax)
    return out


def tril(m, k=0):
    """The lower triangle of (the last two axes of) ``m``; zeros above."""
    shape = _get_aval(m).shape
    mask = _module_of_leaves([m]).tri(shape[-2], shape[-1], k, dtype=bool)
    return _ew.where(mask, m, 0)


def triu(m, k=0):
    """The upper triangle of (the last two axes of) ``m``; zeros below."""
    shape = _get_aval(m).shape
    mask = _module_of_leaves([m]).tri(shape[-2], shape[-1], k - 1, dtype=bool)
    return _ew.where(mask, 0, m)


def diagonal(a, offset=0, axis1=0, axis2=1):
    """The diagonal of the ``axis1``/``axis2`` planes, as a last axis."""
    ndim = _get_aval(a).ndim
    i, j = _axis(axis1, ndim), _axis(axis2, ndim)
    if i == j:
        raise ValueError("diagonal: axis1 and axis2 cannot be the same")
    moved = _shape.transpose(a, [d for d in range(ndim) if d not in (i, j)] + [i, j])
    rows, cols = _get_aval(moved).shape[-2:]
    n = _builtins.max(0, _builtins.min(rows + _builtins.min(offset, 0),
                                       cols - _builtins.max(offset, 0)))
    xp = _xp(a)
    r = xp.arange(n) + _builtins.max(-offset, 0)
    c = xp.arange(n) + _builtins.max(offset, 0)
    return _indexing.getitem(moved, (Ellipsis, r, c))


def trace(a, offset=0, axis1=0, axis2=1, dtype=None):
    """Sum along a diagonal."""
    out = _red.sum_(diagonal(a, offset, axis1, axis2), -1)
    return out if dtype is None else _ew.convert_element_type(out, dtype)


def diag(v, k=0):
    """The ``k``-th diagonal of a 2-d ``v``, or a 2-d array with 1-d ``v`` on it."""
    v = as_array(v)
    aval = _get_aval(v)
    if aval.ndim == 2:
        return diagonal(v, k)
    if aval.ndim != 1:
        raise ValueError("diag: input must be 1-d or 2-d")
    n = aval.shape[0] + abs(k)
    xp = _xp(v)
    r = xp.arange(aval.shape[0]) + _builtins.max(-k, 0)
    c = xp.arange(aval.shape[0]) + _builtins.max(k, 0)
    return _indexing.scatter_add(v, (r, c), (("array", 0), ("array", 1)), (n, n))


def select(condlist, choicelist, default=0):
    """The first choice whose condition holds, elementwise (``default`` if none)."""
    if len(condlist) != len(choicelist):
        raise ValueError("select: condlist and choicelist must have the same length")
    # conditions carry no derivative: their values, on the choices' backend
    xp = _module_of_leaves(list(choicelist) + list(condlist))
    condlist = [_asarray_on(xp, _concrete(c)) for c in condlist]
    if not any(isinstance(c, _Tracer) for c in list(choicelist) + [default]):
        return xp.select(condlist, [_asarray_on(xp, c) for c in choicelist], default)
    out = default
    for cond, choice in reversed(list(zip(condlist, choicelist))):
        out = _ew.where(cond, choice, out)
    if _get_aval(out).shape != _np.broadcast_shapes(
            *(_get_aval(x).shape for x in list(condlist) + list(choicelist))):
        out = broadcast_arrays(out, *choicelist, *condlist)[0]
    return out


def append(arr, values, axis=None):
    """``values`` appended to ``arr`` (both flattened if ``axis`` is None)."""
    if axis is None:
        return _shape.concatenate([ravel(as_array(arr)), ravel(as_array(values))], 0)
    return _shape.concatenate([as_array(arr), as_array(values)], axis)


def meshgrid(*xi, indexing="xy", sparse=False, copy=True):
    """Coordinate arrays from 1-d coordinate vectors (a broadcast of each)."""
    if indexing not in ("xy", "ij"):
        raise ValueError("meshgrid: indexing must be 'xy' or 'ij'")
    ndim = len(xi)
    shapes = [_get_aval(as_array(x)).size for x in xi]
    out = []
    for i, x in enumerate(xi):
        shape = [1] * ndim
        shape[i] = shapes[i]
        if indexing == "xy" and ndim > 1 and i < 2:
            shape[0], shape[1] = shape[1], shape[0]
        out.append(_shape.reshape(as_array(x), shape))
    if indexing == "xy" and ndim > 1:
        shapes[0], shapes[1] = shapes[1], shapes[0]
    if not sparse:
        out = [_shape.broadcast_to(o, tuple(shapes)) for o in out]
    return tuple(out)


def _pad_params(pad_width, constant_values, ndim):
    """Per-axis ``(before, after)`` widths and values: static parameters."""
    widths = _np.broadcast_to(_np.asarray(pad_width, dtype=_np.int64), (ndim, 2))
    values = _np.broadcast_to(_np.asarray(constant_values), (ndim, 2))
    return widths, values


def _concrete(x):
    while isinstance(x, _Tracer):
        x = x.concrete()
    return x
