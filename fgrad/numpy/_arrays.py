"""Array creation, dtypes and queries: NumPy's own, made to accept tracers.

Creation functions have no array inputs to differentiate, so they are NumPy's
(``zeros``, ``arange``, ``random`` ...). Queries (``shape``, ``ndim``) read the
abstract value of a tracer instead of converting it.
"""
import math as _math

import numpy as _np

from fgrad.backend import array_module as _xp
from fgrad.core import Tracer as _Tracer, get_aval as _get_aval

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
    return a if isinstance(a, _Tracer) else _xp(a).copy(a)
