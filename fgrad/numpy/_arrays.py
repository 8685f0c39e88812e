"""Array creation, dtypes and queries: NumPy's own, made to accept tracers.

Creation functions have no array inputs to differentiate, so they are NumPy's
(``zeros``, ``arange``, ``random`` ...). Queries (``shape``, ``ndim``) read the
abstract value of a tracer instead of converting it.
"""
import builtins as _builtins
import math as _math

import numpy as _np

from fgrad.core.backend import array_module as _xp
from fgrad.core.backend import asarray_on, module_of_leaves
from fgrad.core.trace import Tracer as _Tracer
from fgrad.core.trace import get_aval as _get_aval
from fgrad.core.trace import plain_array as _plain_array
from fgrad.primitives import shape as _shape
from fgrad.primitives.elementwise import convert_element_type as _convert_element_type

bool = _np.bool_
int_, float_, complex_, intp, uint16 = _np.int64, _np.float64, _np.complex128, \
    _np.intp, _np.uint16
number, inexact, floating, integer = _np.number, _np.inexact, _np.floating, _np.integer
signedinteger, unsignedinteger = _np.signedinteger, _np.unsignedinteger
euler_gamma = _np.euler_gamma
issubdtype, promote_types, can_cast = _np.issubdtype, _np.promote_types, _np.can_cast
logspace, geomspace, tri, indices = _np.logspace, _np.geomspace, _np.tri, _np.indices
tril_indices, triu_indices, diag_indices = (_np.tril_indices, _np.triu_indices,
                                            _np.diag_indices)


def shape(a):
    """The shape of ``a`` (a tracer's, without converting it)."""
    return a.shape if hasattr(a, "shape") else _np.shape(a)


def ndim(a):
    """The number of dimensions of ``a``."""
    return a.ndim if hasattr(a, "ndim") else _np.ndim(a)


def size(a, axis=None):
    """The number of elements of ``a`` (along ``axis`` if given)."""
    if not hasattr(a, "shape"):
        return _np.size(a, axis)
    return int(_math.prod(a.shape)) if axis is None else a.shape[axis]


def result_type(*arrays_and_dtypes):
    """NumPy's ``result_type``; tracers count by their dtype."""
    return _np.result_type(*(_get_aval(a).dtype if isinstance(a, _Tracer) else a
                             for a in arrays_and_dtypes))


def isscalar(element):
    """True for Python and NumPy scalars (a traced value is never one)."""
    return False if isinstance(element, _Tracer) else _np.isscalar(element)


def iscomplexobj(x):
    """True when ``x`` has a complex dtype."""
    return _get_aval(x).dtype.kind == "c" if isinstance(x, _Tracer) \
        else _np.iscomplexobj(x)


def isrealobj(x):
    """True when ``x`` does not have a complex dtype."""
    return not iscomplexobj(x)


def copy(a):
    """A copy of ``a``; arrays are immutable under transformations, so a traced
    value is returned as is."""
    # a subclass is copied as a plain array (np.matrix) or refused (masked)
    return a if isinstance(a, _Tracer) else _xp(a).copy(_plain_array(a))


# -- building arrays from sequences that may hold tracers --------------------------

def _contains_tracer(obj):
    # tracers, and device (CuPy) arrays, which NumPy must not convert either
    if isinstance(obj, _Tracer) or (hasattr(obj, "dtype") and not isinstance(
            obj, (_np.ndarray, _np.generic))):
        return True
    if isinstance(obj, (list, tuple)):
        return _builtins.any(_contains_tracer(o) for o in obj)
    return False


def _leaves_of(obj):
    if isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _leaves_of(o)
    else:
        yield obj


def _stack_nested(obj, xp):
    if isinstance(obj, (list, tuple)):
        return _shape.stack([_stack_nested(o, xp) for o in obj])
    if _contains_tracer(obj):
        return obj
    return asarray_on(xp, obj)


def array(obj, dtype=None, copy=True):
    """``numpy.array``, which also accepts (nested) lists holding traced values."""
    if isinstance(obj, (list, tuple)) and _contains_tracer(obj):
        xp = module_of_leaves(list(_leaves_of(obj)))
        return _with_dtype(_stack_nested(obj, xp), dtype)
    if isinstance(obj, _Tracer):
        return _with_dtype(obj, dtype)
    return _np.array(obj, dtype=dtype, copy=copy)


def asarray(obj, dtype=None, *, like=None):
    """``numpy.asarray``; traced values pass through unchanged.

    ``like=x`` puts host data on ``x``'s backend (the GPU for a CuPy ``x``),
    as NumPy's ``like=`` does: the way to build a constant next to device data.

    >>> import numpy as np
    >>> asarray([1.0, 2.0], like=np.zeros(1))
    array([1., 2.])
    """
    if isinstance(obj, _Tracer) or (isinstance(obj, (list, tuple))
                                    and _contains_tracer(obj)):
        return array(obj, dtype)
    if like is not None:
        out = asarray_on(module_of_leaves([like]), obj)
        return out if dtype is None else out.astype(dtype)
    return _np.asarray(obj, dtype=dtype)



def _with_dtype(result, dtype):
    return result if dtype is None else _convert_element_type(result, dtype)
