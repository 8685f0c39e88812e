"""Arrays made from others' shapes, and stop_gradient.

These have no derivative (``nondiff``): ``zeros_like(x)`` does not depend on the
values of ``x``, and `stop_gradient` declares that its output should be treated
as a constant.
"""
import numpy as np

from fgrad.core.backend import array_module
from fgrad.core.trace import Primitive, ShapedArray, Tracer, get_aval
from fgrad.core.tree import tree_flatten, tree_unflatten

FAMILY = "primitives/creation.py"


def _full_like_abstract(x, fill_value, dtype):
    return ShapedArray(x.shape, dtype)


def _full_like_impl(x, fill_value, dtype):
    # a list's shape too (np.zeros_like([1, 2]) is [0, 0]), not only an array's
    return array_module(x).full(get_aval(x).shape, fill_value, dtype)


full_like_p = Primitive("full_like", _full_like_impl, _full_like_abstract,
                        nondiff=True, family=FAMILY)
# its value depends only on the operand's shape: jit's compiler folds it to a constant
full_like_p.shape_only = True


def full_like(x, fill_value, dtype=None):
    """An array shaped like ``x``, on its backend, filled with ``fill_value``."""
    dtype = get_aval(x).dtype if dtype is None else np.dtype(dtype)
    return full_like_p.bind(x, fill_value=fill_value, dtype=dtype)


def zeros_like(x, dtype=None):
    return full_like(x, 0, dtype)


def ones_like(x, dtype=None):
    return full_like(x, 1, dtype)


stop_gradient_p = Primitive("stop_gradient", lambda x: x,
                            lambda x: x.strip_weak(), nondiff=True, family=FAMILY)


def stop_gradient(x):
    """``x``, treated as a constant by every transformation (zero derivative);
    of a pytree (a tuple of arrays, as a function returns), each of its leaves.

    >>> import fgrad, fgrad.numpy as fnp
    >>> float(fgrad.grad(lambda x: x * fgrad.stop_gradient(x))(3.0))
    3.0
    """
    if isinstance(x, (Tracer, np.ndarray)):
        return stop_gradient_p.bind(x)
    leaves, tree = tree_flatten(x)
    return tree_unflatten(tree, [stop_gradient_p.bind(leaf) for leaf in leaves])


def _full_like_batch(args, dims, fill_value, dtype):
    # The result does not depend on x's values, so every example gets the same
    # array: one example's shape (a view of x) is enough, and the output stays
    # unbatched until something batched meets it.
    (x,), (d,) = args, dims
    shape = get_aval(x).shape
    if shape[d] == 0:
        return full_like_p.bind(x, fill_value=fill_value, dtype=dtype), d
    if not isinstance(x, Tracer):       # one example's shape is all it takes
        return array_module(x).full(shape[:d] + shape[d + 1:], fill_value, dtype), None
    one = getitem_p.bind(x, spec=(("slice", None, None, None),) * d + (("int", 0),))
    return full_like_p.bind(one, fill_value=fill_value, dtype=dtype), None


full_like_p.batch = _full_like_batch
stop_gradient_p.batch = lambda args, dims: (stop_gradient_p.bind(args[0]), dims[0])


# Families use each other's functions in their rules; importing them last
# makes the cycle harmless (every name above exists by then).
from fgrad.primitives.indexing import getitem_p  # noqa: E402
