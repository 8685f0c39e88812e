"""Indexing (``x[idx]``) and the functional updates behind ``fgrad.at``.

An index is split into a static *spec* (slices, ints, None, Ellipsis: hashable
parameters) and its integer arrays, which are positional operands without a
derivative, so traced indices work the same way as constant ones. Boolean masks
are turned into integer arrays (their concrete value fixes the output's shape).

The VJP of gathering is scatter-adding (`scatter_add`), so repeated indices
accumulate; the VJP of scatter-adding is gathering again.
"""
import operator

import numpy as np

from fgrad.core.backend import array_module, asarray_on, module_of_leaves
from fgrad.primitives.batching import axis_size, batch_to_front, move_axis
from fgrad.primitives.base import result_dtype
from fgrad.core.trace import Primitive, Tracer, Zero, get_aval

FAMILY = "primitives/indexing.py"


def parse_index(index):
    """``(spec, arrays)``: the static part of ``index`` and its index arrays."""
    if not isinstance(index, tuple):
        index = (index,)
    spec, arrays = [], []
    for item in index:
        if item is None:
            spec.append(("none",))
        elif item is Ellipsis:
            spec.append(("ellipsis",))
        elif isinstance(item, slice):
            spec.append(("slice", _static_int(item.start), _static_int(item.stop),
                         _static_int(item.step)))
        elif isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
            spec.append(("int", int(item)))
        else:
            dtype = get_aval(item).dtype if hasattr(item, "dtype") or \
                isinstance(item, Tracer) else np.asarray(item).dtype
            if dtype == np.bool_:
                mask = item.concrete() if isinstance(item, Tracer) else item
                for ix in array_module(mask).nonzero(mask):
                    spec.append(("array", len(arrays)))
                    arrays.append(ix)
            elif dtype.kind in "iu":
                spec.append(("array", len(arrays)))
                arrays.append(item if hasattr(item, "dtype") else np.asarray(item))
            else:
                raise IndexError(f"arrays used as indices must be of integer or boolean "
                                 f"type, got {dtype}")
    return tuple(spec), arrays


def _static_int(v):
    if v is None:
        return None
    if isinstance(v, Tracer):
        v = v.concrete()
    return int(v)


def build_index(spec, arrays):
    out = []
    for item in spec:
        kind = item[0]
        if kind == "slice":
            out.append(slice(item[1], item[2], item[3]))
        elif kind == "int":
            out.append(item[1])
        elif kind == "array":
            out.append(arrays[item[1]])
        elif kind == "none":
            out.append(None)
        else:
            out.append(Ellipsis)
    return tuple(out)


def _device_index(xp, spec, idx):
    # Index arrays built from host lists are NumPy arrays; a device operand gets
    # them copied once here, since CuPy (rightly) refuses NumPy arrays.
    if idx and xp is not np:
        idx = [asarray_on(xp, i) for i in idx]
    return build_index(spec, idx)


def _dummy_operand(aval):
    # a zero-strided array: indexing it costs nothing but the output's shape
    return np.broadcast_to(np.zeros((), aval.dtype), aval.shape)


def _index_abstract(x, *idx, spec):
    return get_aval(_dummy_operand(x)[build_index(spec, [np.zeros(a.shape, np.intp)
                                                        for a in idx])])


# -- gather: x[idx] -------------------------------------------------------------

_FULL = ("slice", None, None, None)


def _take_axis(spec, ndim):
    """The axis of ``x[spec]`` when it is ``take(x, index, axis)``: one index
    array, every other item a full slice; None otherwise.

    NumPy's general gather (``x[:, idx]``) lays its result out with the indexed
    axes first in memory and returns a transposed view, two to three times
    slower than ``take`` (a C-contiguous result) for a (28, 10000, 3) gather
    of (6400, 3) indices, and its non-contiguous result slows every reader.
    """
    items = [item for item in spec if item != _FULL]
    if len(items) != 1 or items[0] != ("array", 0) or len(spec) > ndim:
        return None
    return spec.index(items[0])


def _getitem_impl(x, *idx, spec):
    xp = array_module(x)
    axis = _take_axis(spec, x.ndim) if len(idx) == 1 else None
    if axis is not None:
        return xp.take(x, _device_index(xp, spec, idx)[axis], axis=axis)
    return x[_device_index(xp, spec, idx)]


getitem_p = Primitive("getitem", _getitem_impl, _index_abstract, family=FAMILY)
# a view in NumPy when the index is basic (no index arrays: see `note_view`)
getitem_p.makes_view = True
getitem_p.lowering = lambda xp, spec: operator.itemgetter(build_index(spec, ())) \
    if not any(item[0] == "array" for item in spec) else None
getitem_p.def_vjp(lambda ct, ans, x, *idx, spec:
                  scatter_add(ct, idx, spec, get_aval(x).shape), reads=set())
getitem_p.def_jvp(lambda t, ans, x, *idx, spec: getitem_p.bind(t, *idx, spec=spec))


def getitem(x, index):
    """``x[index]``: basic slicing, integer arrays and boolean masks."""
    if _is_scalar_mask(index):
        # NumPy's x[True] and x[False]: a new leading axis, with one row or none
        # (array_api_extra's apply_where indexes 0-d values with a 0-d condition)
        return getitem(getitem(x, None), slice(0, 1 if bool(index) else 0))
    spec, arrays = parse_index(index)
    return getitem_p.bind(x, *arrays, spec=spec)


def _is_scalar_mask(index):
    if isinstance(index, (bool, np.bool_)):
        return True
    return (isinstance(index, (Tracer, np.ndarray)) and index.dtype == np.bool_
            and index.shape == ())


def slice_axis(x, axis, start, stop):
    """``x[..., start:stop, ...]`` along ``axis``."""
    spec = (("slice", None, None, None),) * axis + (("slice", start, stop, None),)
    return getitem_p.bind(x, spec=spec)


# -- scatter-add into zeros: the transpose of gather ----------------------------

def _scatter_add_impl(ct, *idx, spec, shape):
    xp = array_module(ct)
    out = xp.zeros(shape, ct.dtype)
    index = _device_index(xp, spec, idx)
    if idx:
        # repeated indices accumulate; cupy.add.at (CuPy >= 13, atomics on the
        # device) is the same call as NumPy's
        xp.add.at(out, index, ct)
    else:
        out[index] = ct                  # a basic index touches each element once
    return out


def _scatter_add_abstract(ct, *idx, spec, shape):
    return get_aval(np.broadcast_to(np.zeros((), ct.dtype), shape))


scatter_add_p = Primitive("scatter_add", _scatter_add_impl, _scatter_add_abstract,
                          family=FAMILY)
scatter_add_p.def_vjp(lambda ct, ans, t, *idx, spec, shape:
                      getitem_p.bind(ct, *idx, spec=spec), reads=set())
scatter_add_p.def_jvp(lambda t, ans, x, *idx, spec, shape:
                      scatter_add(t, idx, spec, shape))


def scatter_add(values, idx, spec, shape):
    """An array of zeros of ``shape`` with ``values`` added at the index."""
    return scatter_add_p.bind(values, *idx, spec=spec, shape=tuple(shape))


# -- set: a copy of x with x[idx] replaced ---------------------------------------

def _set_impl(x, v, *idx, spec):
    xp = array_module(x, v)
    out = xp.array(x, copy=True)
    out[_device_index(xp, spec, idx)] = v
    return out


def _set_abstract(x, v, *idx, spec):
    # the assignment casts the values to x's dtype, as _set_impl's does
    return get_aval(np.broadcast_to(np.zeros((), x.dtype), x.shape))


set_p = Primitive("set", _set_impl, _set_abstract, family=FAMILY)


def _set_vjp_value(ct, ans, x, v, *idx, spec):
    return unbroadcast(getitem_p.bind(ct, *idx, spec=spec), v)


set_p.def_vjp(lambda ct, ans, x, v, *idx, spec: set_p.bind(ct, 0, *idx, spec=spec),
              _set_vjp_value, reads=set())


def _set_jvp(tangents, ans, x, v, *idx, spec):
    tx, tv = tangents[0], tangents[1]
    base = zeros_like(ans) if type(tx) is Zero else tx
    return set_p.bind(base, 0 if type(tv) is Zero else tv, *idx, spec=spec)


set_p.def_jvp_joint(_set_jvp)


def set_at(x, index, v):
    spec, arrays = parse_index(index)
    return set_p.bind(x, v, *arrays, spec=spec)


def add_at(x, index, v):
    spec, arrays = parse_index(index)
    if get_aval(v).weak_type and not isinstance(v, Tracer):
        # a Python number takes x's precision and, made from x, its device: a
        # NumPy copy of it would not add into a CuPy x
        v = getitem_p.bind(full_like(x, v), *arrays, spec=spec)
    elif get_aval(v).weak_type:
        v = convert_element_type(v, get_aval(x).dtype)
    target = _index_abstract(get_aval(x), *map(get_aval, arrays), spec=spec)
    return x + scatter_add(broadcast_to(v, target.shape), arrays, spec,
                           get_aval(x).shape)


# -- scatter_min / scatter_max: x[idx] = minimum(x[idx], v), repeats combined ----
#
# Each position's derivative is split evenly among everything that attains its
# extremum: x's own entry and every value sent there, as the max/min reductions
# and maximum/minimum split ties.

def _scatter_extremum_impl(name):
    def impl(x, v, *idx, spec):
        xp = array_module(x, v)
        out = xp.array(x, copy=True)
        index = _device_index(xp, spec, idx)
        if xp is np:
            # ufunc.at applies every repeated position in turn
            getattr(xp, name).at(out, index, v)
            return out
        # cupy.maximum.at / minimum.at round float64 through float32 (seen on
        # CuPy 14: -4.887 came back as -4.88700008): sort the values by their
        # target position instead, and keep each position's extremum
        positions = xp.arange(out.size).reshape(out.shape)[index]
        positions, values = xp.broadcast_arrays(positions, xp.asarray(v, out.dtype))
        positions, values = positions.ravel(), values.ravel()
        # by position, then by value (negated for the minimum of floats), so each
        # position's extremum is its last entry, and a NaN (sorted last) wins
        # as it does in np.maximum.at / np.minimum.at
        negate = name == "minimum" and values.dtype.kind == "f"
        order = xp.lexsort(xp.stack([-values if negate else values, positions]))
        positions, values = positions[order], values[order]
        if positions.size:
            edge = positions[1:] != positions[:-1]
            if name == "maximum" or negate:
                keep = xp.concatenate([edge, xp.ones(1, bool)])     # the last
            else:
                keep = xp.concatenate([xp.ones(1, bool), edge])     # integers: the first
            flat = out.reshape(-1)
            where = positions[keep]
            flat[where] = getattr(xp, name)(flat[where], values[keep])
        return out
    return impl


def _extremum_shares(ans, x, v, idx, spec):
    """The shares of x's entries and of the values in each position's derivative."""
    dtype = get_aval(ans).dtype
    x_wins = convert_element_type(equal(x, ans), dtype)
    v_wins = convert_element_type(equal(v, getitem_p.bind(ans, *idx, spec=spec)), dtype)
    count = x_wins + scatter_add(v_wins, idx, spec, get_aval(x).shape)
    return x_wins / count, v_wins / getitem_p.bind(count, *idx, spec=spec)


def _scatter_extremum_vjp(ct, ans, needed, x, v, *idx, spec):
    x_share, v_share = _extremum_shares(ans, x, v, idx, spec)
    return ((ct * x_share if needed[0] else None),
            # v may broadcast against x[idx] (batching pads it), as in set
            (unbroadcast(getitem_p.bind(ct, *idx, spec=spec) * v_share, v)
             if needed[1] else None)) + (None,) * len(idx)


def _scatter_extremum_jvp(tangents, ans, x, v, *idx, spec):
    tx, tv = tangents[0], tangents[1]
    x_share, v_share = _extremum_shares(ans, x, v, idx, spec)
    out = None if type(tx) is Zero else tx * x_share
    if type(tv) is not Zero:
        term = scatter_add(tv * v_share, idx, spec, get_aval(x).shape)
        out = term if out is None else out + term
    return out


def _scatter_extremum(name):
    prim = Primitive(f"scatter_{name[:3]}", _scatter_extremum_impl(name),
                     _set_abstract, family=FAMILY)
    prim.def_vjp_joint(_scatter_extremum_vjp)
    prim.def_jvp_joint(_scatter_extremum_jvp)
    return prim


scatter_min_p = _scatter_extremum("minimum")
scatter_max_p = _scatter_extremum("maximum")


def extremum_at(x, index, v, which):
    """A copy of ``x`` with ``x[index]`` replaced by its ``which`` ("min" or
    "max") with ``v``; values sent to one position repeatedly all take part."""
    prim = scatter_min_p if which == "min" else scatter_max_p
    spec, arrays = parse_index(index)
    dtype = result_dtype(np.minimum, [get_aval(x), get_aval(v)])
    x, v = convert_element_type(x, dtype), convert_element_type(v, dtype)
    target = _index_abstract(get_aval(x), *map(get_aval, arrays), spec=spec)
    return prim.bind(x, broadcast_to(v, target.shape), *arrays, spec=spec)


# -- batching rules ------------------------------------------------------------
#
# Unbatched indices: a full slice is prepended for the batch axis (moved to the
# front of x), and the batch axis of the result lands where NumPy's placement of
# advanced indices puts it. Batched indices: the batch axis itself is indexed
# by an ``arange`` that broadcasts against the index arrays, so example i reads
# only its own slice; NumPy then puts the broadcast (batch-first) axes in front.


def _iota(size, rank, like):
    # a constant index, not data: it depends only on the batch size; made on
    # the backend of the array it indexes
    iota = asarray_on(module_of_leaves([like]), list(range(size)))
    return iota.reshape((size,) + (1,) * rank)


def _advanced_layout(spec, ndim):
    """For an index holding arrays: ``(adjacent, pre)``, whether its advanced
    items (arrays and ints) are adjacent, and how many result axes come before
    them when they are (NumPy keeps adjacent advanced axes in place)."""
    adv = [i for i, item in enumerate(spec) if item[0] in ("array", "int")]
    adjacent = adv == list(range(adv[0], adv[-1] + 1))
    consumed = sum(item[0] in ("slice", "int", "array") for item in spec)
    pre = 0
    for item in spec[:adv[0]]:
        if item[0] in ("slice", "none"):
            pre += 1
        elif item[0] == "ellipsis":
            pre += ndim - consumed
    return adjacent, pre


def _unbatched(x, d):
    aval = get_aval(x)
    if d is None:
        return aval
    return type(aval)(aval.shape[:d] + aval.shape[d + 1:], aval.dtype)


def _batched_index(x, x_ndim, idx, idims, spec, size, g):
    """Index arrays and spec reading example i's own slice of a batch-first x.

    Also returns the permutation that turns the gathered result (batch axis and
    index axes first) into the batch-first per-example layout, or None when the
    two agree: they differ when the index axes follow ``pre`` sliced axes.
    """
    rank = max((_unbatched(i, d).ndim for i, d in zip(idx, idims)), default=0)
    arrays = [i if d is None else batch_to_front(i, d, size, rank)
              for i, d in zip(idx, idims)]
    arrays.append(_iota(size, rank, x))
    new_spec = (("array", len(arrays) - 1),) + spec
    adjacent, pre = _advanced_layout(spec, x_ndim)
    perm = None
    if adjacent and pre:
        perm = ((0,) + tuple(range(1 + rank, 1 + rank + pre))
                + tuple(range(1, 1 + rank)) + tuple(range(1 + rank + pre, 1 + g)))
    return arrays, new_spec, perm


def _unbatched_index_position(spec, x_ndim, idx):
    """Where the batch axis of a front-batched x lands after ``(:,) + spec``."""
    if not idx:
        return 0
    adjacent, _ = _advanced_layout(spec, x_ndim)
    if adjacent:
        return 0
    return len(np.broadcast_shapes(*(get_aval(i).shape for i in idx)))


def _gathered_ndim(x, dx, idx, idims, spec):
    return _index_abstract(_unbatched(x, dx), *(_unbatched(i, d) for i, d in
                                                zip(idx, idims)), spec=spec).ndim


def _getitem_batch(args, dims, spec):
    x, idx = args[0], args[1:]
    dx, idims = dims[0], dims[1:]
    x_ndim = _unbatched(x, dx).ndim
    if all(d is None for d in idims):
        out = getitem_p.bind(move_axis(x, dx, 0), *idx, spec=(_FULL,) + spec)
        return out, _unbatched_index_position(spec, x_ndim, idx)
    size = axis_size(args, dims)
    g = _gathered_ndim(x, dx, idx, idims, spec)
    arrays, new_spec, perm = _batched_index(x, x_ndim, idx, idims, spec, size, g)
    out = getitem_p.bind(batch_to_front(x, dx, size), *arrays, spec=new_spec)
    return (out if perm is None else transpose(out, perm)), 0


def _to_gathered(v, dv, size, g, position, perm=None):
    """A value (or cotangent) for the indexed positions, per example shaped to
    broadcast against the gathered result, laid out like the batched gathered
    result: batch axis at ``position``, then ``perm`` undone."""
    shape = get_aval(v).shape
    if dv is None and perm is None and len(shape) <= g - position:
        return v                     # right-aligned, it never reaches the batch axis
    if dv is None:
        v = reshape(v, (1,) * (g + 1 - len(shape)) + shape)
    else:
        v = batch_to_front(v, dv, size, g)
    if perm is not None:
        v = transpose(v, tuple(sorted(range(len(perm)), key=perm.__getitem__)))
    return move_axis(v, 0, position)


def _scatter_add_batch(args, dims, spec, shape):
    ct, idx = args[0], args[1:]
    dct, idims = dims[0], dims[1:]
    size = axis_size(args, dims)
    g = _unbatched(ct, dct).ndim
    if all(d is None for d in idims):
        position = _unbatched_index_position(spec, len(shape), idx)
        ct = _to_gathered(ct, dct, size, g, position)
        return scatter_add_p.bind(ct, *idx, spec=(_FULL,) + spec,
                                  shape=(size,) + shape), 0
    arrays, new_spec, perm = _batched_index(ct, len(shape), idx, idims, spec, size, g)
    ct = _to_gathered(ct, dct, size, g, 0, perm)
    return scatter_add_p.bind(ct, *arrays, spec=new_spec, shape=(size,) + shape), 0


def _update_batch_rule(prim):
    """Batching for a primitive ``prim(x, v, *idx, spec)`` writing ``v`` into
    a copy of ``x`` at the index (set, scatter_min, scatter_max)."""
    def rule(args, dims, spec):
        x, v, idx = args[0], args[1], args[2:]
        dx, dv, idims = dims[0], dims[1], dims[2:]
        size = axis_size(args, dims)
        x_ndim = _unbatched(x, dx).ndim
        g = _gathered_ndim(x, dx, idx, idims, spec)
        x = batch_to_front(x, dx, size)
        if all(d is None for d in idims):
            position = _unbatched_index_position(spec, x_ndim, idx)
            v = _to_gathered(v, dv, size, g, position)
            return prim.bind(x, v, *idx, spec=(_FULL,) + spec), 0
        arrays, new_spec, perm = _batched_index(x, x_ndim, idx, idims, spec, size, g)
        v = _to_gathered(v, dv, size, g, 0, perm)
        return prim.bind(x, v, *arrays, spec=new_spec), 0
    return rule


getitem_p.batch = _getitem_batch
scatter_add_p.batch = _scatter_add_batch
set_p.batch = _update_batch_rule(set_p)
scatter_min_p.batch = _update_batch_rule(scatter_min_p)
scatter_max_p.batch = _update_batch_rule(scatter_max_p)


# Families use each other's functions in their rules; importing them last
# makes the cycle harmless (every name above exists by then).
from fgrad.primitives.creation import full_like, zeros_like  # noqa: E402
from fgrad.primitives.elementwise import convert_element_type, equal, unbroadcast  # noqa: E402
from fgrad.primitives.shape import broadcast_to  # noqa: E402
from fgrad.primitives.shape import reshape, transpose  # noqa: E402
