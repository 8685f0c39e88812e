"""Array-likes that hold traced values: lists such as ``[x, 1.0]`` as arrays.

NumPy functions take "array_like" arguments: nested lists and tuples of
scalars and arrays. NumPy cannot convert a list whose elements are tracers (a
tracer refuses ``__array__``: that would drop its derivative), so fgrad stacks
such a list into one traced array first (`lift`), with `stack`, so the
derivative flows to every element. Lists holding no tracer are left alone.
"""
import builtins

import numpy as np

from fgrad.core.backend import asarray_on, module_of_leaves
from fgrad.core.trace import Tracer, get_aval
from fgrad.primitives import elementwise, shape


def contains_tracer(obj):
    """True when ``obj`` is, or (nested) holds, a tracer or a device array.

    Device (CuPy) arrays count as well: NumPy must not convert them either.
    """
    if _on_device_or_traced(obj):
        return True
    if isinstance(obj, (list, tuple)):
        return builtins.any(contains_tracer(o) for o in obj)
    return False


def leaves_of(obj):
    """The non-sequence elements of a nested list/tuple, in order."""
    if isinstance(obj, (list, tuple)):
        for o in obj:
            yield from leaves_of(o)
    else:
        yield obj


def _stack_nested(obj, xp, dtype):
    if isinstance(obj, (list, tuple)):
        return shape.stack([_stack_nested(o, xp, dtype) for o in obj])
    if _on_device_or_traced(obj):
        return elementwise.convert_element_type(obj, dtype)
    return asarray_on(xp, np.asarray(obj, dtype=dtype))


def _on_device_or_traced(obj):
    return isinstance(obj, Tracer) or (hasattr(obj, "dtype") and not isinstance(
        obj, (np.ndarray, np.generic)))


def stack_nested(obj):
    """A nested list/tuple holding tracers as one (traced) array, built by
    `stack` so derivatives flow to every element; its other elements become
    constants on the tracers' backend.

    The dtype is the one ``numpy.array`` gives the same list of arrays, where
    a Python float counts as float64: ``[x32, 1.0]`` is float64, as in NumPy.
    """
    leaves = list(leaves_of(obj))
    dtype = np.result_type(*(get_aval(x).dtype if hasattr(x, "dtype") else np.asarray(x)
                             for x in leaves))
    return _stack_nested(obj, module_of_leaves(leaves), dtype)


def lift(obj):
    """``obj`` as an array when it is a list/tuple holding a tracer, else ``obj``."""
    if (type(obj) is list or type(obj) is tuple) and contains_tracer(obj):
        return stack_nested(obj)
    return obj


def lift_elements(obj):
    """A sequence of separate arrays (``concatenate``'s argument) holding tracers,
    each element lifted alone."""
    if (type(obj) is list or type(obj) is tuple) and contains_tracer(obj):
        return [lift(o) for o in obj]
    return obj
