"""``searchsorted`` as a primitive: where values would be inserted into a
sorted 1-d array, an integer result without derivative.

A primitive (not NumPy on concrete values) so that `interp` and friends find
their segments under `jit` too, in ``O(len(a) + v.size)`` memory instead of
comparing every value with every knot.
"""
import numpy as np

from fgrad.core.backend import array_module
from fgrad.core.trace import Primitive, ShapedArray, get_aval
from fgrad.primitives.batching import move_axis
from fgrad.primitives.elementwise import convert_element_type, greater, greater_equal
from fgrad.primitives.reductions import sum_
from fgrad.primitives.shape import expand_dims, reshape

FAMILY = "primitives/search.py"


def _abstract(a, v, side):
    if a.ndim != 1:
        raise ValueError(f"searchsorted: a must be 1-d, got shape {a.shape}")
    return ShapedArray(v.shape, np.int64)


def _impl(a, v, side):
    return array_module(a, v).searchsorted(a, v, side=side).astype(np.int64, copy=False)


searchsorted_p = Primitive("searchsorted", _impl, _abstract, nondiff=True, family=FAMILY)


def _batch(args, dims, side):
    a, v = args
    da, dv = dims
    if da is None:                      # one sorted array, many values: as is
        return searchsorted_p.bind(a, v, side=side), dv
    # a sorted array per example: count, per value, the entries before it
    a = move_axis(a, da, 0)
    v = expand_dims(v if dv is None else move_axis(v, dv, 0), -1)
    # a: (batch, 1, ..., 1, n) against v: ([batch,] ..., 1)
    size, n = get_aval(a).shape
    extra = get_aval(v).ndim - (2 if dv is not None else 1)
    if dv is None:
        v = expand_dims(v, 0)
    a = reshape(a, (size,) + (1,) * extra + (n,))
    before = greater_equal(v, a) if side == "right" else greater(v, a)
    return sum_(convert_element_type(before, np.int64), -1, False), 0


searchsorted_p.batch = _batch


def searchsorted(a, v, side="left"):
    """Indices where the values ``v`` would be inserted into the sorted 1-d ``a``.

    >>> import numpy as np
    >>> searchsorted(np.array([1.0, 2.0, 3.0]), np.array([2.5, 0.0]))
    array([2, 0])
    """
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    return searchsorted_p.bind(a, v, side=side)
