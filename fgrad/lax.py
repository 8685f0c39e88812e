"""``jax.lax`` for fgrad, with JAX's names and signatures: the structured
control flow that `jit` can stage (`fgrad.transforms.lax`), and the array
operations JAX programs use every day, written here as composites of fgrad's
primitives, so that every transformation reaches them.

>>> import fgrad
>>> float(fgrad.lax.fori_loop(0, 3, lambda i, acc: acc + i, 0.0))
3.0

Dynamic indices (`dynamic_slice`, `dynamic_update_slice` and their ``_in_dim``
forms) may be traced integers, as JAX's: under `jit` they are graph inputs,
under `vmap` one per example. Like JAX, a negative start counts from the end
(``start + dim``), and the start is then clamped into ``[0, dim - size]``, so
the window always lies inside the array (no error, whatever the index).
"""
import numpy as np

from fgrad import numpy as fnp
from fgrad.core.errors import ControlFlowError, LaxArgumentError
from fgrad.core.trace import get_aval, known_value
from fgrad.core.tree import tree_flatten, tree_unflatten
from fgrad.primitives.creation import stop_gradient as stop_gradient
from fgrad.primitives.indexing import getitem, set_at, slice_axis
from fgrad.transforms.lax import cond as cond
from fgrad.transforms.lax import fori_loop as fori_loop
from fgrad.transforms.lax import scan as scan
from fgrad.transforms.lax import switch as switch
from fgrad.transforms.lax import while_loop as while_loop
from fgrad.transforms.linear_solve import custom_linear_solve as custom_linear_solve
from fgrad.transforms.roots import custom_root as custom_root
from fgrad.transforms.roots import dense_solve as dense_solve
from fgrad.transforms.roots import fixed_point as fixed_point
from fgrad.transforms.vmap import vmap

__all__ = [
    "cond",
    "switch",
    "while_loop",
    "fori_loop",
    "scan",
    "custom_linear_solve",
    "custom_root",
    "fixed_point",
    "dense_solve",
    "map",
    "associative_scan",
    "dynamic_slice",
    "dynamic_slice_in_dim",
    "dynamic_index_in_dim",
    "dynamic_update_slice",
    "dynamic_update_slice_in_dim",
    "dynamic_update_index_in_dim",
    "select",
    "clamp",
    "top_k",
    "sort",
    "cumsum",
    "cumprod",
    "cummax",
    "cummin",
    "cumlogsumexp",
    "stop_gradient",
]


# -- loops over an axis: map, associative_scan -------------------------------------

def map(f, xs, *, batch_size=None):
    """``f`` applied to each slice of ``xs`` along its leading axis, the results
    stacked: a `scan` without a carry. With ``batch_size``, `vmap` of ``f`` runs
    on ``batch_size`` slices at a time (the remainder in one last call).

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> fgrad.lax.map(lambda x: fnp.sum(x ** 2), np.arange(6.0).reshape(3, 2))
    array([ 1., 13., 41.])
    """
    def step(_, x):
        return (), f(x)
    if batch_size is None:
        return scan(step, (), xs)[1]
    if int(batch_size) < 1:
        raise LaxArgumentError(f"map: batch_size={batch_size} must be a positive integer")
    leaves, tree = tree_flatten(xs)
    n = get_aval(leaves[0]).shape[0] if leaves else 0
    batches, rest = divmod(n, int(batch_size))
    batched = vmap(f)
    parts = []
    if batches or not rest:
        main = [fnp.reshape(slice_axis(x, 0, 0, batches * batch_size),
                            (batches, batch_size) + get_aval(x).shape[1:]) for x in leaves]
        _, ys = scan(lambda _, x: ((), batched(x)), (), tree_unflatten(tree, main))
        parts.append(_tree_map(lambda y: fnp.reshape(
            y, (batches * batch_size,) + get_aval(y).shape[2:]), ys))
    if rest:
        parts.append(batched(tree_unflatten(tree, [slice_axis(x, 0, n - rest, n)
                                                   for x in leaves])))
    if len(parts) == 1:
        return parts[0]
    return _tree_map(lambda a, b: fnp.concatenate([a, b]), *parts)


def _tree_map(f, *trees):
    leaves, tree = tree_flatten(trees[0])
    others = [tree_flatten(t)[0] for t in trees[1:]]
    return tree_unflatten(tree, [f(*xs) for xs in zip(leaves, *others)])


def associative_scan(fn, elems, reverse=False, axis=0):
    """All prefix combinations ``fn(... fn(fn(e0, e1), e2) ..., ek)`` along
    ``axis``, for an associative ``fn`` applied to whole slices (pytrees of
    arrays). ``reverse=True`` combines from the end instead (JAX's convention:
    the scan of the reversed elements, reversed).

    The scan takes ``log2(n)`` steps of ``fn`` over up to ``n`` elements each
    (Hillis and Steele's), a few calls of ``fn`` on whole arrays rather than
    ``n`` small ones.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> fgrad.lax.associative_scan(fnp.add, np.arange(1.0, 6.0))
    array([ 1.,  3.,  6., 10., 15.])
    """
    leaves, tree = tree_flatten(elems)
    if not leaves:
        return elems
    axis = axis % get_aval(leaves[0]).ndim
    lengths = {get_aval(x).shape[axis] for x in leaves}
    if len(lengths) != 1:
        raise ControlFlowError(f"associative_scan needs one length along axis {axis}: "
                               f"the elements have {sorted(lengths)}")
    n = lengths.pop()
    if reverse:
        leaves = [fnp.flip(x, axis) for x in leaves]
    shift = 1
    while shift < n:
        earlier = [slice_axis(x, axis, 0, n - shift) for x in leaves]
        later = [slice_axis(x, axis, shift, n) for x in leaves]
        combined, out_tree = tree_flatten(fn(tree_unflatten(tree, earlier),
                                             tree_unflatten(tree, later)))
        if out_tree != tree:
            raise ControlFlowError(f"associative_scan's fn must return the structure of "
                                   f"elems ({tree}), got {out_tree}")
        leaves = [fnp.concatenate([slice_axis(x, axis, 0, shift), c], axis)
                  for x, c in zip(leaves, combined)]
        shift *= 2
    if reverse:
        leaves = [fnp.flip(x, axis) for x in leaves]
    return tree_unflatten(tree, leaves)


# -- dynamic slicing ---------------------------------------------------------------

def _start(index, dim, size):
    """The start of a window of ``size`` in ``dim``, clamped as JAX clamps it: a
    Python int where the index is known, else a traced integer."""
    value = known_value(index)
    if value is not None:
        value = int(value)
        value = value + dim if value < 0 else value
        return min(max(value, 0), dim - size)
    index = fnp.where(index < 0, index + dim, index)
    return fnp.clip(index, 0, dim - size)


def _window(operand, start_indices, sizes):
    """The index of the window at ``start_indices`` of ``sizes``: slices where
    every start is known; else one block of index arrays, from the first traced
    start to the last (NumPy keeps an adjacent block of index arrays in place)."""
    shape = get_aval(operand).shape
    if not isinstance(start_indices, (tuple, list)):      # one 1-d array of starts
        start_indices = [start_indices[i] for i in range(len(shape))]
    if len(start_indices) != len(shape) or len(sizes) != len(shape):
        raise LaxArgumentError(
            f"a window of an array of shape {shape} needs {len(shape)} start indices "
            f"and sizes, one per axis; got {len(start_indices)} and {len(sizes)}")
    for dim, size in zip(shape, sizes):
        if not 0 <= size <= dim:
            raise LaxArgumentError(f"window sizes {tuple(sizes)} do not fit in an array of "
                                   f"shape {shape}: each must be in [0, its axis' length]")
    starts = [_start(i, d, s) for i, d, s in zip(start_indices, shape, sizes)]
    traced = [k for k, s in enumerate(starts) if not isinstance(s, int)]
    index = [slice(s, s + k) if isinstance(s, int) else None for s, k in zip(starts, sizes)]
    if traced:
        first, last = traced[0], traced[-1]
        block = last - first + 1
        for k in range(first, last + 1):
            shape_k = [1] * block
            shape_k[k - first] = sizes[k]
            index[k] = fnp.reshape(starts[k] + np.arange(sizes[k]), shape_k)
    return tuple(index)


def dynamic_slice(operand, start_indices, slice_sizes):
    """The window of ``operand`` of shape ``slice_sizes`` starting at
    ``start_indices`` (one per axis; may be traced), clamped into the array.

    >>> import numpy as np, fgrad
    >>> x = np.arange(10.0)
    >>> fgrad.lax.dynamic_slice(x, (2,), (3,)), fgrad.lax.dynamic_slice(x, (8,), (3,))
    (array([2., 3., 4.]), array([7., 8., 9.]))
    """
    sizes = tuple(int(s) for s in slice_sizes)
    return getitem(operand, _window(operand, start_indices, sizes))


def dynamic_slice_in_dim(operand, start_index, slice_size, axis=0):
    """`dynamic_slice` along one ``axis``: ``slice_size`` entries from
    ``start_index`` (clamped), everything along the other axes.

    >>> import numpy as np, fgrad
    >>> fgrad.lax.dynamic_slice_in_dim(np.arange(6.0).reshape(2, 3), 1, 2, axis=1)
    array([[1., 2.],
           [4., 5.]])
    """
    shape = get_aval(operand).shape
    axis = axis % len(shape)
    starts = [0] * len(shape)
    starts[axis] = start_index
    sizes = list(shape)
    sizes[axis] = int(slice_size)
    return dynamic_slice(operand, starts, sizes)


def dynamic_index_in_dim(operand, index, axis=0, keepdims=True):
    """The entry at ``index`` (clamped; may be traced) along ``axis``, that axis
    kept with length 1 unless ``keepdims=False``.

    >>> import numpy as np, fgrad
    >>> fgrad.lax.dynamic_index_in_dim(np.arange(4.0), -1, keepdims=False)
    array(3.)
    """
    out = dynamic_slice_in_dim(operand, index, 1, axis)
    return out if keepdims else fnp.squeeze(out, axis)


def dynamic_update_slice(operand, update, start_indices):
    """A copy of ``operand`` with ``update`` written at ``start_indices`` (one per
    axis; may be traced), the window clamped into the array; ``update`` takes
    ``operand``'s dtype.

    >>> import numpy as np, fgrad
    >>> fgrad.lax.dynamic_update_slice(np.zeros(5), np.ones(2), (4,))
    array([0., 0., 0., 1., 1.])
    """
    sizes = get_aval(update).shape
    update = fnp.astype(update, get_aval(operand).dtype)
    return set_at(operand, _window(operand, start_indices, sizes), update)


def dynamic_update_slice_in_dim(operand, update, start_index, axis):
    """`dynamic_update_slice` with the start given along one ``axis`` (0 along
    the others).

    >>> import numpy as np, fgrad
    >>> fgrad.lax.dynamic_update_slice_in_dim(np.zeros((2, 3)), np.ones((2, 1)), 1, 1)
    array([[0., 1., 0.],
           [0., 1., 0.]])
    """
    ndim = get_aval(operand).ndim
    starts = [0] * ndim
    starts[axis % ndim] = start_index
    return dynamic_update_slice(operand, update, starts)


def dynamic_update_index_in_dim(operand, update, index, axis):
    """``operand`` with the entry at ``index`` along ``axis`` replaced by
    ``update`` (which may leave out that axis).

    >>> import numpy as np, fgrad
    >>> fgrad.lax.dynamic_update_index_in_dim(np.zeros((3, 2)), np.ones(2), 1, 0)
    array([[0., 0.],
           [1., 1.],
           [0., 0.]])
    """
    ndim = get_aval(operand).ndim
    axis = axis % ndim
    if get_aval(update).ndim == ndim - 1:
        update = fnp.expand_dims(update, axis)
    return dynamic_update_slice_in_dim(operand, update, index, axis)


# -- selection ---------------------------------------------------------------------

def select(pred, on_true, on_false):
    """``on_true`` where the boolean ``pred`` holds, else ``on_false``.

    JAX requires equal shapes (or a scalar ``pred``); fgrad broadcasts, as
    ``fnp.where`` does.

    >>> import numpy as np, fgrad
    >>> fgrad.lax.select(np.array([True, False]), np.ones(2), np.zeros(2))
    array([1., 0.])
    """
    return fnp.where(pred, on_true, on_false)


def clamp(min, x, max):
    """``x`` clamped into ``[min, max]`` (JAX's argument order). As JAX's, the
    derivative goes to ``x`` strictly inside, to ``min`` where ``min > x`` (and
    ``min < max``), to ``max`` where ``max < x``: at a tie, to none of them.

    >>> import numpy as np, fgrad
    >>> fgrad.lax.clamp(0.0, np.array([-1.0, 0.5, 2.0]), 1.0)
    array([0. , 0.5, 1. ])
    """
    inside = fnp.logical_and(x > min, x < max)
    below = fnp.logical_and(min > x, min < max)
    # the value at a tie, or where min > max, is right; its derivative is zero
    rest = stop_gradient(fnp.minimum(fnp.maximum(x, min), max))
    return fnp.where(inside, x, fnp.where(below, min, fnp.where(max < x, max, rest)))


def top_k(operand, k):
    """The ``k`` largest entries along the last axis, largest first, and their
    indices (int32, as JAX's); ties keep their order, NaN counts as largest.

    >>> import numpy as np, fgrad
    >>> fgrad.lax.top_k(np.array([1.0, 4.0, 2.0, 4.0]), 2)
    (array([4., 4.]), array([1, 3], dtype=int32))
    """
    n = get_aval(operand).shape[-1]
    if not 0 <= k <= n:
        raise LaxArgumentError(f"top_k: k={k} must be in [0, {n}], the last axis' length")
    # a stable ascending sort of the reversed entries, read backwards: largest
    # first, and of equal entries the first one first
    ascending = fnp.argsort(fnp.flip(operand, -1), axis=-1, stable=True)
    last = get_aval(operand).ndim - 1
    indices = (n - 1) - slice_axis(fnp.flip(ascending, -1), last, 0, k)
    indices = fnp.astype(indices, np.int32)
    return fnp.take_along_axis(operand, indices, -1), indices


def sort(operand, dimension=-1, is_stable=True, num_keys=1):
    """``operand`` sorted along ``dimension``; given a sequence of arrays, all of
    them permuted by the lexicographic order of the first ``num_keys``. The
    sort is always stable. NaN sorts last, as in JAX; ``-0.0`` and ``0.0`` are
    equal (JAX puts ``-0.0`` first).

    >>> import numpy as np, fgrad
    >>> fgrad.lax.sort((np.array([2, 1, 2]), np.array([0.0, 1.0, 2.0])), num_keys=1)
    (array([1, 2, 2]), array([1., 0., 2.]))
    """
    if not isinstance(operand, (tuple, list)):
        return fnp.sort(operand, axis=dimension, stable=True)
    operands = list(operand)
    if not 1 <= num_keys <= len(operands):
        raise LaxArgumentError(f"sort: num_keys={num_keys} must be between 1 and the "
                               f"number of operands, {len(operands)}")
    keys = operands[:num_keys]
    order = fnp.argsort(keys[0], axis=dimension, stable=True) if num_keys == 1 else \
        fnp.lexsort(keys[::-1], axis=dimension)
    return tuple(fnp.take_along_axis(x, order, dimension) for x in operands)


# -- cumulative reductions -----------------------------------------------------------

def _cumulative(np_fn, operand, axis, reverse):
    if reverse:
        return fnp.flip(np_fn(fnp.flip(operand, axis), axis=axis), axis)
    return np_fn(operand, axis=axis)


def cumsum(operand, axis=0, reverse=False):
    """Running sums along ``axis`` (from the end if ``reverse``).

    >>> import numpy as np, fgrad
    >>> fgrad.lax.cumsum(np.arange(4.0), reverse=True)
    array([6., 6., 5., 3.])
    """
    return _cumulative(fnp.cumsum, operand, axis, reverse)


def cumprod(operand, axis=0, reverse=False):
    """Running products along ``axis`` (from the end if ``reverse``).

    >>> import numpy as np, fgrad
    >>> fgrad.lax.cumprod(np.array([1.0, 2.0, 3.0]))
    array([1., 2., 6.])
    """
    return _cumulative(fnp.cumprod, operand, axis, reverse)


def cummax(operand, axis=0, reverse=False):
    """Running maxima along ``axis``: an `associative_scan` of ``maximum``, so
    that, as in JAX, tied entries share the derivative.

    >>> import numpy as np, fgrad
    >>> fgrad.lax.cummax(np.array([1.0, 3.0, 2.0, 5.0]))
    array([1., 3., 3., 5.])
    """
    return associative_scan(fnp.maximum, operand, reverse, axis)


def cummin(operand, axis=0, reverse=False):
    """Running minima along ``axis`` (an `associative_scan` of ``minimum``).

    >>> import numpy as np, fgrad
    >>> fgrad.lax.cummin(np.array([3.0, 1.0, 2.0]))
    array([3., 1., 1.])
    """
    return associative_scan(fnp.minimum, operand, reverse, axis)


def cumlogsumexp(operand, axis=0, reverse=False):
    """Running ``log(sum(exp(...)))`` along ``axis``, without overflow (an
    `associative_scan` of ``logaddexp``).

    >>> import numpy as np, fgrad
    >>> fgrad.lax.cumlogsumexp(np.array([1000.0, 1000.0]))
    array([1000.        , 1000.69314718])
    """
    return associative_scan(fnp.logaddexp, operand, reverse, axis)
