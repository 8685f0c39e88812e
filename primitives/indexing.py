"""Indexing (``x[idx]``) and the functional updates behind ``fgrad.at``.

An index is split into a static *spec* (slices, ints, None, Ellipsis: hashable
parameters) and its integer arrays, which are positional operands without a
derivative, so traced indices work the same way as constant ones. Boolean masks
are turned into integer arrays (their concrete value fixes the output's shape).

The VJP of gathering is scatter-adding (`scatter_add`), so repeated indices
accumulate; the VJP of scatter-adding is gathering again.
"""
import numpy as np

from fgrad.backend import array_module, asarray_on
from fgrad.core import Primitive, Tracer, Zero, get_aval

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

def _getitem_impl(x, *idx, spec):
    return x[_device_index(array_module(x), spec, idx)]


getitem_p = Primitive("getitem", _getitem_impl, _index_abstract, family=FAMILY)
getitem_p.def_vjp(lambda ct, ans, x, *idx, spec:
                  scatter_add(ct, idx, spec, get_aval(x).shape), reads=set())
getitem_p.def_jvp(lambda t, ans, x, *idx, spec: getitem_p.bind(t, *idx, spec=spec))


def getitem(x, index):
    """``x[index]``: basic slicing, integer arrays and boolean masks."""
    spec, arrays = parse_index(index)
    return getitem_p.bind(x, *arrays, spec=spec)


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
    return get_aval(np.broadcast_to(np.zeros((), np.result_type(x.dtype, v.dtype)),
                                    x.shape))


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
    if get_aval(v).weak_type:            # a Python scalar takes x's precision
        v = convert_element_type(v, get_aval(x).dtype)
    spec, arrays = parse_index(index)
    target = _index_abstract(get_aval(x), *map(get_aval, arrays), spec=spec)
    return x + scatter_add(broadcast_to(v, target.shape), arrays, spec,
                           get_aval(x).shape)


# Families use each other's functions in their rules; importing them last
# makes the cycle harmless (every name above exists by then).
from .creation import zeros_like  # noqa: E402
from .elementwise import convert_element_type, unbroadcast  # noqa: E402
from .shape import broadcast_to  # noqa: E402
