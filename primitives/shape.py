"""Shape primitives: reshape, transpose, broadcast_to, concatenate.

``expand_dims``, ``squeeze`` and ``stack`` are built from these, so they need no
rules of their own.
"""
import functools
import math
import operator

import numpy as np

from fgrad.core.backend import array_module
from fgrad.core.trace import Primitive, ShapedArray, Zero, get_aval

from fgrad.primitives.base import normalize_axis
from fgrad.primitives.batching import axis_size, move_axis

FAMILY = "primitives/shape.py"


# -- reshape -----------------------------------------------------------------

def _reshape_abstract(x, shape):
    if math.prod(shape) != math.prod(x.shape):
        raise ValueError(f"cannot reshape an array of shape {x.shape} (size "
                         f"{math.prod(x.shape)}) into shape {shape}")
    return ShapedArray(shape, x.dtype)


reshape_p = Primitive("reshape", lambda x, shape: array_module(x).reshape(x, shape),
                      _reshape_abstract, family=FAMILY)
reshape_p.lowering = lambda xp, shape: operator.methodcaller("reshape", shape)
# views in NumPy (see `Primitive.makes_view`): so are transpose and broadcast_to
reshape_p.makes_view = True
reshape_p.def_vjp(lambda ct, ans, x, shape: reshape(ct, get_aval(x).shape), reads=[set()])
reshape_p.def_jvp(lambda t, ans, x, shape: reshape(t, shape))


def reshape(x, shape):
    """``x`` with a new shape (one ``-1`` allowed), a no-op if it already has it."""
    aval = get_aval(x)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(map(int, shape))
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        shape = tuple(aval.size // known if known and d == -1 else d for d in shape)
    if shape == aval.shape:
        return x
    return reshape_p.bind(x, shape=shape)


# -- transpose ---------------------------------------------------------------

def _transpose_abstract(x, axes):
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"axes {axes} are not a permutation of {x.ndim} axes")
    return ShapedArray(tuple(x.shape[a] for a in axes), x.dtype)


transpose_p = Primitive("transpose",
                        lambda x, axes: array_module(x).transpose(x, axes),
                        _transpose_abstract, family=FAMILY)
transpose_p.makes_view = True
transpose_p.lowering = lambda xp, axes: operator.methodcaller("transpose", axes)
transpose_p.def_vjp(lambda ct, ans, x, axes: transpose(
    ct, tuple(sorted(range(len(axes)), key=axes.__getitem__))), reads=[set()])
transpose_p.def_jvp(lambda t, ans, x, axes: transpose(t, axes))


def transpose(x, axes=None):
    """Permute the axes (reverse them when ``axes`` is None)."""
    ndim = get_aval(x).ndim
    axes = tuple(range(ndim))[::-1] if axes is None else \
        tuple(int(a) % ndim if ndim else int(a) for a in axes)
    if axes == tuple(range(ndim)):
        return x
    return transpose_p.bind(x, axes=axes)


def swap_last_axes(x):
    ndim = get_aval(x).ndim
    return transpose(x, tuple(range(ndim - 2)) + (ndim - 1, ndim - 2))


# -- broadcast_to --------------------------------------------------------------

def _broadcast_to_abstract(x, shape):
    try:
        np.broadcast_shapes(x.shape, shape)
    except ValueError:
        raise ValueError(f"cannot broadcast shape {x.shape} to {shape}") from None
    if np.broadcast_shapes(x.shape, shape) != shape:
        raise ValueError(f"cannot broadcast shape {x.shape} to {shape}")
    return ShapedArray(shape, x.dtype)


broadcast_to_p = Primitive(
    "broadcast_to", lambda x, shape: array_module(x).broadcast_to(x, shape),
    _broadcast_to_abstract, family=FAMILY)


def _unbroadcast(ct, ans, x, shape):
    return unbroadcast(ct, x)


broadcast_to_p.makes_view = True
broadcast_to_p.lowering = lambda xp, shape: functools.partial(xp.broadcast_to, shape=shape)
broadcast_to_p.def_vjp(_unbroadcast, reads=[set()])
broadcast_to_p.def_jvp(lambda t, ans, x, shape: broadcast_to(t, shape))


def broadcast_to(x, shape):
    """``x`` broadcast to ``shape`` (a read-only view on NumPy)."""
    shape = tuple(map(int, shape))
    if get_aval(x).shape == shape:
        return x
    return broadcast_to_p.bind(x, shape=shape)


# -- concatenate ---------------------------------------------------------------

def _concatenate_abstract(*xs, axis):
    first = xs[0]
    for i, x in enumerate(xs):
        if x.ndim != first.ndim or any(
                a != b for k, (a, b) in enumerate(zip(x.shape, first.shape)) if k != axis):
            raise ValueError(f"concatenate: input {i} has shape {x.shape}, which does "
                             f"not match input 0's {first.shape} off axis {axis}")
    shape = list(first.shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    return ShapedArray(shape, np.result_type(*(x.dtype for x in xs)))


concatenate_p = Primitive(
    "concatenate", lambda *xs, axis: array_module(*xs).concatenate(xs, axis=axis),
    _concatenate_abstract, family=FAMILY)


def _concatenate_vjp(ct, ans, needed, *xs, axis):
    out, start = [], 0
    for need, x in zip(needed, xs):
        aval = get_aval(x)
        stop = start + aval.shape[axis]
        out.append(cast_like(slice_axis(ct, axis, start, stop), aval) if need else None)
        start = stop
    return tuple(out)


def _concatenate_jvp(tangents, ans, *xs, axis):
    aval = get_aval(ans)
    parts = [zeros_like(x, aval.dtype) if type(t) is Zero else cast_like(t, aval)
             for t, x in zip(tangents, xs)]
    return concatenate(parts, axis)


concatenate_p.def_vjp_joint(_concatenate_vjp, reads=set())
concatenate_p.def_jvp_joint(_concatenate_jvp)


def concatenate(xs, axis=0):
    """Join arrays along an existing axis."""
    xs = tuple(xs)
    if not xs:
        raise ValueError("need at least one array to concatenate")
    ndim = get_aval(xs[0]).ndim
    if ndim == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    if len(xs) == 1:
        return xs[0]
    return concatenate_p.bind(*xs, axis=normalize_axis(axis, ndim)[0])


# -- composites ----------------------------------------------------------------

def expand_dims(x, axis):
    """Insert length-1 axes at the positions ``axis`` of the result."""
    shape = list(get_aval(x).shape)
    axes = normalize_axis(axis, len(shape) + (1 if isinstance(axis, int) else len(axis)))
    for a in axes:
        shape.insert(a, 1)
    return reshape(x, shape)


def squeeze(x, axis=None):
    """Remove length-1 axes (all of them, or those in ``axis``)."""
    shape = get_aval(x).shape
    axes = tuple(i for i, d in enumerate(shape) if d == 1) if axis is None \
        else normalize_axis(axis, len(shape))
    for a in axes:
        if shape[a] != 1:
            raise ValueError(f"cannot squeeze axis {a} of length {shape[a]}")
    return reshape(x, [d for i, d in enumerate(shape) if i not in axes])


def stack(xs, axis=0):
    """Join arrays along a new axis."""
    xs = tuple(xs)
    if not xs:
        raise ValueError("need at least one array to stack")
    shapes = {get_aval(x).shape for x in xs}
    if len(shapes) > 1:
        raise ValueError(f"all input arrays must have the same shape, got {sorted(shapes)}")
    ndim = get_aval(xs[0]).ndim + 1
    axis = normalize_axis(axis, ndim)[0]
    expanded = [expand_dims(x, axis) for x in xs]
    if len(expanded) == 1:
        return expanded[0]
    return concatenate_p.bind(*expanded, axis=axis)


def moveaxis_to_front(x, axis):
    ndim = get_aval(x).ndim
    return transpose(x, (axis,) + tuple(i for i in range(ndim) if i != axis))


# -- batching rules ----------------------------------------------------------------

def _reshape_batch(args, dims, shape):
    (x,), (d,) = args, dims
    x = move_axis(x, d, 0)
    return reshape(x, get_aval(x).shape[:1] + shape), 0


def _transpose_batch(args, dims, axes):
    # the batch axis keeps its position; the permuted axes move around it
    (x,), (d,) = args, dims
    perm = [a + (a >= d) for a in axes]
    perm.insert(d, d)
    return transpose(x, tuple(perm)), d


def _broadcast_to_batch(args, dims, shape):
    # x lines up with the target right-aligned, so its batch axis lands at
    # d + (number of new leading axes) and broadcasting can keep it there
    (x,), (d,) = args, dims
    aval = get_aval(x)
    position = d + len(shape) - (aval.ndim - 1)
    target = shape[:position] + (aval.shape[d],) + shape[position:]
    return broadcast_to(x, target), position


def _concatenate_batch(args, dims, axis):
    size = axis_size(args, dims)
    position = next(d for d in dims if d is not None)
    parts = []
    for x, d in zip(args, dims):
        if d is None:
            shape = get_aval(x).shape
            x = broadcast_to(expand_dims(x, position),
                             shape[:position] + (size,) + shape[position:])
        else:
            x = move_axis(x, d, position)
        parts.append(x)
    return concatenate_p.bind(*parts, axis=axis + (axis >= position)), position


reshape_p.batch = _reshape_batch
transpose_p.batch = _transpose_batch
broadcast_to_p.batch = _broadcast_to_batch
concatenate_p.batch = _concatenate_batch


# Families use each other's functions in their rules; importing them last
# makes the cycle harmless (every name above exists by then).
from fgrad.primitives.creation import zeros_like  # noqa: E402
from fgrad.primitives.elementwise import cast_like, unbroadcast  # noqa: E402
from fgrad.primitives.indexing import slice_axis  # noqa: E402
