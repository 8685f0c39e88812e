"""Array creation, dtypes and queries: NumPy's own, made to accept tracers.

Creation functions have no array inputs to differentiate, so they are NumPy's
(``zeros``, ``arange``, ``random`` ...). Queries (``shape``, ``ndim``) read the
abstract value of a tracer instead of converting it.
"""
import math as _math
import operator as _operator

import numpy as _np

from fgrad.core.backend import array_module as _xp
from fgrad.core.backend import asarray_on, module_of_leaves
from fgrad.core.trace import Tracer as _Tracer
from fgrad.core.trace import get_aval as _get_aval
from fgrad.core.trace import plain_array as _plain_array
from fgrad.numpy._devices import place as _place
from fgrad.primitives import creation as _creation
from fgrad.primitives import shape as _shape
from fgrad.primitives.array_likes import contains_tracer, lift, stack_nested
from fgrad.primitives.elementwise import convert_element_type as _convert_element_type
from fgrad.primitives.indexing import slice_axis as _slice_axis

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


def tril_indices_from(arr, k=0):
    """Indices of the lower triangle of the 2-d ``arr`` (its shape only)."""
    rows, cols = shape(arr)
    return _np.tril_indices(rows, k, cols)


def triu_indices_from(arr, k=0):
    """Indices of the upper triangle of the 2-d ``arr`` (its shape only)."""
    rows, cols = shape(arr)
    return _np.triu_indices(rows, k, cols)


def diag_indices_from(arr):
    """Indices of the main diagonal of the square ``arr`` (its shape only)."""
    sides = shape(arr)
    if len(set(sides)) != 1 or len(sides) < 2:
        raise ValueError("diag_indices_from needs an array of at least 2 dimensions, "
                         "all of equal length")
    return _np.diag_indices(sides[0], len(sides))


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
    """A copy of ``a``: of a traced value, a new tracer of the same value, which
    an in-place update of either leaves the other without."""
    # a subclass is copied as a plain array (np.matrix) or refused (masked)
    return a.clone() if isinstance(a, _Tracer) else _xp(a).copy(_plain_array(a))


# -- building arrays from sequences that may hold tracers --------------------------

def array(obj, dtype=None, copy=True):
    """``numpy.array``, which also accepts (nested) lists holding traced values."""
    if isinstance(obj, (list, tuple)) and contains_tracer(obj):
        return _with_dtype(stack_nested(obj), dtype)
    if contains_tracer(obj):                # a tracer, or a device array
        out = _with_dtype(obj, dtype)
        return out.clone() if out is obj and copy and isinstance(out, _Tracer) else out
    return _np.array(obj, dtype=dtype, copy=copy)


def asarray(obj, dtype=None, order=None, *, device=None, copy=None, like=None):
    """``numpy.asarray``; traced values pass through unchanged.

    ``copy=True`` gives a new array (of a tracer, a new name that an in-place
    update of either leaves apart); ``copy=False`` refuses, as NumPy does,
    where a copy cannot be avoided (a dtype to change).
    ``device`` must be the data's own (``"cpu"`` for NumPy data): a traced
    value is not moved inside a transformation (`fgrad.errors.DeviceError`).
    ``like=x`` puts host data on ``x``'s backend (the GPU for a CuPy ``x``),
    as NumPy's ``like=`` does: the way to build a constant next to device data.
    ``device`` and ``copy`` are the Array API standard's: ``device`` may name
    where the data already is (``"cpu"`` for NumPy data; `fgrad.device_put`
    moves it), or a traced value's device, which makes host data a constant of
    its transformation (fgrad.numpy._devices); ``copy=True`` always gives a new
    array (a new tracer of a traced value) and ``copy=False`` refuses a
    conversion that needs a copy.

    >>> import numpy as np
    >>> asarray([1.0, 2.0], like=np.zeros(1))
    array([1., 2.])
    >>> asarray([1.0, 2.0], device="cpu", copy=True)
    array([1., 2.])
    """
    if contains_tracer(obj):                # traced, or device data (lists included)
        out = array(obj, dtype, copy=False)
    elif like is not None:
        out = asarray_on(module_of_leaves([like]), obj)
        out = out if dtype is None else out.astype(dtype)
    elif copy is None and device is None:   # NumPy's own call, for host data
        return _np.asarray(obj, dtype=dtype, order=order)
    else:                                   # (NumPy 1's asarray has no copy=)
        out = _np.asarray(obj, dtype=dtype, order=order)
    if copy is False and out is not obj:
        why = f"the dtype changes to {_np.dtype(dtype)}" if dtype is not None \
            else f"a {type(obj).__name__} becomes an array"
        raise ValueError(f"asarray(copy=False) cannot avoid a copy: {why}. Pass "
                         "copy=None to copy only where needed.")
    if copy and out is obj:
        out = out.clone() if isinstance(out, _Tracer) else out.copy()
    return out if device is None else _place(out, device)


def _with_dtype(result, dtype):
    return result if dtype is None else _convert_element_type(result, dtype)


# -- the array type ------------------------------------------------------------------

class _ArrayType(type):
    # isinstance(tracer, fnp.ndarray) is True, as isinstance(x, jax.Array) is;
    # Tracer itself keeps the plain `type` metaclass, so the isinstance(a, Tracer)
    # checks of every bind stay on CPython's fast path
    def __instancecheck__(cls, obj):
        return isinstance(obj, (_np.ndarray, _Tracer))

    def __subclasscheck__(cls, subclass):
        return issubclass(subclass, (_np.ndarray, _Tracer))


class ndarray(metaclass=_ArrayType):
    """NumPy's array type, for type checks that also accept traced arrays.

    ``isinstance(x, fnp.ndarray)`` is True for NumPy arrays and for tracers, so
    code that checks its argument's type keeps working under a transformation.
    Calling it builds a plain ``numpy.ndarray``.

    >>> import fgrad
    >>> isinstance(_np.ones(2), ndarray), isinstance([1.0], ndarray)
    (True, False)
    >>> float(fgrad.grad(lambda x: x * 2.0 if isinstance(x, ndarray) else x)(2.0))
    2.0
    >>> type(ndarray((2,)))
    <class 'numpy.ndarray'>
    """

    def __new__(cls, *args, **kwargs):
        return _np.ndarray(*args, **kwargs)


# -- creation from traced values -----------------------------------------------------

def full(shape, fill_value, dtype=None, order="C", *, device=None):
    """An array of ``shape`` filled with ``fill_value``, which may be traced.

    A traced fill value is broadcast, so derivatives flow back to it (to any
    order: a custom VJP rule may write ``fnp.full(x.shape, g)``).

    >>> import fgrad
    >>> float(fgrad.grad(lambda g: full((2, 3), g).sum())(1.0))
    6.0
    """
    if not contains_tracer(fill_value):
        return _np.full(shape, fill_value, dtype=dtype, order=order, device=device)
    fill_value = _with_dtype(lift(fill_value), dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return _on_device(_shape.broadcast_to(fill_value, shape), device)


def _on_device(x, device):
    # the Array API's device=: the data's own device, or a refusal to move it
    return x if device is None else x.to_device(device)


def writable_like(a, value):
    """``value``, a new array made like ``a``, as a tracer of ``a``'s
    transformation when ``a`` is traced.

    NumPy's ``*_like`` make a new array that code goes on to write into
    (``out = np.zeros_like(x); out[i] = ...``); a NumPy array cannot hold a
    traced value, but a tracer can be given a new one by the update."""
    if isinstance(a, _Tracer) and not (isinstance(value, _Tracer)
                                       and value.owner is a.owner):
        return a.owner.lift(value)          # (an enclosing trace's value under jit)
    return value


def full_like(a, fill_value, dtype=None, *, device=None):
    """An array shaped like ``a`` filled with ``fill_value`` (which may be traced:
    its derivative flows, while ``a`` contributes only its shape and dtype).

    >>> full_like(_np.zeros(2), 3.0)
    array([3., 3.])
    """
    if not contains_tracer(fill_value):
        return _on_device(writable_like(a, _creation.full_like(a, fill_value, dtype)), device)
    aval = _get_aval(a)
    fill_value = _convert_element_type(lift(fill_value), aval.dtype if dtype is None
                                       else dtype)
    out = _shape.broadcast_to(fill_value, aval.shape)
    # a new array, not a view of fill_value that an update would have to refuse
    return _on_device(out.clone() if isinstance(out, _Tracer) else out, device)


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *,
             device=None):
    """``num`` evenly spaced values from ``start`` to ``stop``, NumPy's
    ``linspace``; traced (array) endpoints are differentiable.

    >>> import fgrad
    >>> float(fgrad.grad(lambda b: linspace(0.0, b, 5).sum())(2.0))
    2.5
    """
    if not (contains_tracer(start) or contains_tracer(stop)):
        return _np.linspace(start, stop, num, endpoint, retstep, dtype, axis, device=device)
    num = _operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    start, stop = lift(start), lift(stop)
    computed = _np.result_type(*(_get_aval(v).dtype if hasattr(v, "dtype") else v
                                 for v in (start, stop)), float(num))
    start = _convert_element_type(start, computed)
    stop = _convert_element_type(stop, computed)
    div = num - 1 if endpoint else num
    bshape = _np.broadcast_shapes(_get_aval(start).shape, _get_aval(stop).shape)
    # the sample positions 0..num-1, a constant on the endpoints' backend
    positions = asarray_on(module_of_leaves([start, stop]), _np.arange(
        num, dtype=computed).reshape((-1,) + (1,) * len(bshape)))
    delta = stop - start
    step = delta / div if div > 0 else delta * _np.nan
    y = positions * step + start if div > 0 else positions * delta + start
    if endpoint and num > 1:
        # the last value is ``stop`` exactly, as in NumPy
        last = _shape.broadcast_to(stop, (1,) + bshape)
        y = _shape.concatenate([_slice_axis(y, 0, 0, num - 1), last], 0)
    y = _shape.broadcast_to(y, (num,) + bshape)
    if axis != 0:
        order = list(range(1, len(bshape) + 1))
        order.insert(axis % (len(bshape) + 1), 0)
        y = _shape.transpose(y, tuple(order))
    y = _on_device(_with_dtype(y, dtype), device)
    return (y, step) if retstep else y

