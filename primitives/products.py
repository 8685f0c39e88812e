"""Matrix products: matmul (with NumPy's 1-d and batch broadcasting), and dot."""
import math

import numpy as np

from fgrad.core.backend import array_module
from fgrad.primitives.batching import axis_size, batch_to_front, move_axis, unbatched_ndim
from fgrad.core.trace import Primitive, ShapedArray, get_aval

from fgrad.primitives.base import dummy

FAMILY = "primitives/products.py"


def _matmul_abstract(a, b):
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: operands must be at least 1-d; use multiply (*) "
                         "for scalars")
    a_shape = (1,) + a.shape if a.ndim == 1 else a.shape
    b_shape = b.shape + (1,) if b.ndim == 1 else b.shape
    if a_shape[-1] != b_shape[-2]:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned "
                         f"({a_shape[-1]} != {b_shape[-2]})")
    batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    shape = batch + (a_shape[-2],) * (a.ndim > 1) + (b_shape[-1],) * (b.ndim > 1)
    return ShapedArray(shape, np.result_type(dummy(a), dummy(b)))


matmul_p = Primitive("matmul", lambda a, b: array_module(a, b).matmul(a, b),
                     _matmul_abstract, family=FAMILY)


def _matmul_vjp_a(ct, ans, a, b):
    a_nd, b_nd = get_aval(a).ndim, get_aval(b).ndim
    if a_nd == 1 and b_nd == 1:
        ct_a = ct * b
    elif b_nd == 1:                          # (..., n, k) @ (k,) -> (..., n)
        ct_a = expand_dims(ct, -1) * b
    elif a_nd == 1 and b_nd == 2:            # (k,) @ (k, m) -> (m,): b @ ct
        ct_a = matmul(b, ct)
    elif a_nd == 1:                          # (k,) @ (..., k, m) -> (..., m)
        ct_a = reshape(matmul(b, expand_dims(ct, -1)), get_aval(ct).shape[:-1]
                       + (get_aval(b).shape[-2],))
    else:
        ct_a = matmul(ct, swap_last_axes(b))
    return unbroadcast(ct_a, a)


def _matmul_vjp_b(ct, ans, a, b):
    a_nd, b_nd = get_aval(a).ndim, get_aval(b).ndim
    if a_nd == 1 and b_nd == 1:
        ct_b = ct * a
    elif a_nd == 1:                          # (k,) @ (..., k, m) -> (..., m)
        ct_b = expand_dims(a, -1) * expand_dims(ct, -2)
    elif b_nd == 1 and a_nd == 2:            # (n, k) @ (k,) -> (n,): ct @ a
        ct_b = matmul(ct, a)
    elif b_nd == 1:                          # (..., n, k) @ (k,) -> (..., n)
        a_t = swap_last_axes(a)
        ct_b = reshape(matmul(a_t, expand_dims(ct, -1)), get_aval(a_t).shape[:-1])
    else:
        ct_b = matmul(swap_last_axes(a), ct)
    return unbroadcast(ct_b, b)


matmul_p.lowering = lambda xp: xp.matmul
matmul_p.def_vjp(_matmul_vjp_a, _matmul_vjp_b, reads=[{1}, {0}])
matmul_p.def_jvp(lambda t, ans, a, b: matmul(t, b), lambda t, ans, a, b: matmul(a, t))


def matmul(a, b):
    """NumPy's ``a @ b``."""
    return matmul_p.bind(a, b)


def dot(a, b):
    """NumPy's ``dot``: products over the last axis of ``a`` and the second-to-last
    of ``b`` (the last if ``b`` is 1-d); scalars multiply."""
    a_aval, b_aval = get_aval(a), get_aval(b)
    if a_aval.ndim == 0 or b_aval.ndim == 0:
        return multiply(a, b)       # not `a * b`: NumPy's operator on two arrays
    if b_aval.ndim <= 2:
        return matmul(a, b)
    # N-d b: contract with its axis -2, keeping b's other axes in order.
    k = b_aval.shape[-2]
    rest = b_aval.shape[:-2] + b_aval.shape[-1:]
    b2 = reshape(moveaxis_to_front(b, b_aval.ndim - 2), (k, math.prod(rest)))  # not -1:
    # an empty b has no size to infer it from
    return reshape(matmul(a, b2), a_aval.shape[:-1] + rest)


def _matmul_batch(args, dims):
    """Fold the batch axis into matmul's own batch dimensions (or its rows and
    columns), moving it only when it sits inside the multiplied matrices."""
    (a, b), (da, db) = args, dims
    ra, rb = unbatched_ndim(a, da), unbatched_ndim(b, db)
    if db is None:
        if ra == 1:                  # a stack of row vectors is a matrix
            return matmul(move_axis(a, da, 0), b), max(rb - 2, 0)
        if da <= ra - 2 and max(rb - 2, 0) <= ra - 2 - da:
            return matmul(a, b), da  # already one of a's batch dimensions
    elif da is None:
        if rb == 1:                  # a stack of column vectors is a matrix
            return matmul(a, move_axis(b, db, 1)), (ra - 1 if ra > 1 else 0)
        if db <= rb - 3 and max(ra - 2, 0) <= rb - 3 - db:
            return matmul(a, b), db
    # Both batched (or the batch sits among the matrix axes): batch axes first,
    # vectors as matrices, batch dimensions padded to a common rank.
    size = axis_size(args, dims)
    stack_rank = max(ra - 2, rb - 2, 0)
    out_shape = _matmul_abstract(_unbatched_aval(a, da), _unbatched_aval(b, db)).shape
    if da is not None:
        a = batch_to_front(a, da, size)
        if ra == 1:
            a = reshape(a, (size, 1, get_aval(a).shape[1]))
        a = batch_to_front(a, 0, size, stack_rank + 2)
    if db is not None:
        b = batch_to_front(b, db, size)
        if rb == 1:
            b = reshape(b, get_aval(b).shape + (1,))
        b = batch_to_front(b, 0, size, stack_rank + 2)
    return reshape(matmul(a, b), (size,) + out_shape), 0


def _unbatched_aval(x, d):
    aval = get_aval(x)
    if d is None:
        return aval
    return ShapedArray(aval.shape[:d] + aval.shape[d + 1:], aval.dtype)


matmul_p.batch = _matmul_batch


# Families use each other's functions in their rules; importing them last
# makes the cycle harmless (every name above exists by then).
from fgrad.primitives.elementwise import multiply, unbroadcast  # noqa: E402
from fgrad.primitives.shape import (  # noqa: E402
    expand_dims, moveaxis_to_front, reshape, swap_last_axes,
)
