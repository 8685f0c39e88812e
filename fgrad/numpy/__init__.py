"""NumPy's API over fgrad primitives: ``import fgrad.numpy as fnp``.

Outside every transformation these functions return plain NumPy (or CuPy)
arrays at close to the cost of the NumPy call; inside one they bind primitives.
Functions that create arrays from nothing (``zeros``, ``arange``, ``random``) are
NumPy's own: they have no inputs to differentiate.
"""
import sys as _sys

import numpy as _np

from fgrad.core.trace import Tracer as _Tracer
from fgrad.core.trace import get_aval as _get_aval
from fgrad.numpy import _methods  # installs the array protocol on tracers
from fgrad.numpy._array_likes import wrap_namespace as _wrap_namespace
from fgrad.numpy._devices import on_device as _on_device
from fgrad.numpy._devices import place as _place
from fgrad.numpy._arrays import writable_like as _writable_like
from fgrad.numpy._manipulation import join as _join
from fgrad.primitives import creation as _creation
from fgrad.primitives import elementwise as _ew
from fgrad.primitives import float_steps as _float_steps
from fgrad.primitives import indexing as _indexing
from fgrad.primitives import products as _products
from fgrad.primitives import reductions as _red
from fgrad.primitives import shape as _shape
from fgrad.primitives.array_likes import lift as _lift

# -- passthrough: constants, dtypes, array creation ---------------------------
pi, e, inf, nan, newaxis = _np.pi, _np.e, _np.inf, _np.nan, _np.newaxis
float16, float32, float64 = _np.float16, _np.float32, _np.float64
complex64, complex128 = _np.complex64, _np.complex128
int8, int16, int32, int64, bool_ = _np.int8, _np.int16, _np.int32, _np.int64, _np.bool_
uint8, uint32, uint64 = _np.uint8, _np.uint32, _np.uint64
dtype, finfo, iinfo = _np.dtype, _np.finfo, _np.iinfo
zeros, ones, empty, eye, identity = (_np.zeros, _np.ones, _np.empty, _np.eye,
                                     _np.identity)
arange, random = _np.arange, _np.random

# -- elementwise ---------------------------------------------------------------
add, subtract, multiply, divide, power = (_ew.add, _ew.subtract, _ew.multiply,
                                          _ew.divide, _ew.power)
true_divide = divide
maximum, minimum, negative, square, sqrt = (_ew.maximum, _ew.minimum, _ew.negative,
                                            _ew.square, _ew.sqrt)
exp, log, log1p, expm1 = _ew.exp, _ew.log, _ew.log1p, _ew.expm1
sin, cos, tan, tanh, sinh, cosh, arctan = (_ew.sin, _ew.cos, _ew.tan, _ew.tanh,
                                           _ew.sinh, _ew.cosh, _ew.arctan)
absolute = abs = _ew.absolute
sign = _ew.sign
equal, not_equal, less, less_equal, greater, greater_equal = (
    _ew.equal, _ew.not_equal, _ew.less, _ew.less_equal, _ew.greater, _ew.greater_equal)
real, conj = _ew.real, _ew.conj
conjugate = conj
stop_gradient = _creation.stop_gradient


def zeros_like(a, dtype=None, *, device=None):
    """An array of zeros shaped like ``a`` (on its backend); of a traced ``a``, a
    tracer of its transformation, so that ``out[i] = v`` can update it.
    ``device``, as in the Array API, must be ``a``'s own (``"cpu"`` for NumPy
    data)."""
    out = _writable_like(a, _creation.zeros_like(a, dtype))
    return out if device is None else out.to_device(device)


def ones_like(a, dtype=None, *, device=None):
    """An array of ones shaped like ``a`` (on its backend), traced as `zeros_like`."""
    out = _writable_like(a, _creation.ones_like(a, dtype))
    return out if device is None else out.to_device(device)


# -- reductions ---------------------------------------------------------------

# the reductions every loss calls lift array-likes themselves: wrapping them
# (accepts_array_likes) would cost an extra call on their eager fast path
_SEQUENCES = (list, tuple)


def _lifts_array_likes(fn):
    fn.lifts_array_likes = True
    return fn


def _with_dtype(result, dtype):
    return result if dtype is None else _ew.convert_element_type(result, dtype)


@_lifts_array_likes
def sum(a, axis=None, dtype=None, keepdims=False):
    """Sum of elements over ``axis``.

    >>> import numpy as np
    >>> sum(np.arange(6.0).reshape(2, 3), axis=0)
    array([3., 5., 7.])
    """
    if a.__class__ in _SEQUENCES:
        a = _lift(a)
    return _with_dtype(_red.sum_(a, axis, keepdims), dtype)


@_lifts_array_likes
def mean(a, axis=None, dtype=None, keepdims=False):
    """Arithmetic mean over ``axis``."""
    if a.__class__ in _SEQUENCES:
        a = _lift(a)
    return _with_dtype(_red.mean(a, axis, keepdims), dtype)


@_lifts_array_likes
def prod(a, axis=None, dtype=None, keepdims=False):
    """Product of elements over ``axis``."""
    if a.__class__ in _SEQUENCES:
        a = _lift(a)
    return _with_dtype(_red.prod(a, axis, keepdims), dtype)


@_lifts_array_likes
def max(a, axis=None, keepdims=False):
    """Maximum over ``axis``; tied maxima share the derivative equally."""
    if a.__class__ in _SEQUENCES:
        a = _lift(a)
    return _red.max_(a, axis, keepdims)


@_lifts_array_likes
def min(a, axis=None, keepdims=False):
    """Minimum over ``axis``; tied minima share the derivative equally."""
    if a.__class__ in _SEQUENCES:
        a = _lift(a)
    return _red.min_(a, axis, keepdims)


amax, amin = max, min

# -- shapes ---------------------------------------------------------------------


def reshape(a, /, shape=None, order="C", *, newshape=None, copy=None):
    """``a`` with a new shape (C order only); NumPy 2's signature, whose
    ``shape`` keyword the Array API standard calls, and ``copy=True`` for a
    new array rather than a view."""
    if order != "C":
        raise NotImplementedError("fgrad.numpy.reshape supports order='C' only")
    out = _shape.reshape(a, newshape if shape is None else shape)
    if copy:
        return out.clone() if isinstance(out, _Tracer) else out.copy()
    return out


def transpose(a, axes=None):
    """Permute the axes of ``a``."""
    return _shape.transpose(a, axes)


broadcast_to = _shape.broadcast_to
expand_dims, squeeze = _shape.expand_dims, _shape.squeeze


def concatenate(arrays, axis=0):
    """Join arrays along an existing axis (a new array, also of one array);
    ``axis=None`` joins them flattened, zero-dimensional ones too."""
    if axis is None:
        arrays, axis = [_shape.reshape(a, (-1,)) for a in arrays], 0
    return _join(arrays, axis)


def stack(arrays, axis=0):
    """Join arrays along a new axis."""
    return _shape.stack(arrays, axis)


def astype(x, dtype, /, *, copy=True, device=None):
    """``x`` converted to ``dtype``: a new array, as NumPy's, unless ``copy=False``
    and ``x`` has ``dtype`` already; ``device`` is where ``x`` is (the standard's
    keyword: fgrad moves data only in `fgrad.device_put`)."""
    out = _place(_ew.convert_element_type(x, dtype), device)
    if out is x and copy and hasattr(x, "copy"):
        return x.clone() if isinstance(x, _Tracer) else x.copy()
    return out


# -- products ---------------------------------------------------------------------
from fgrad.numpy._products import matmul  # noqa: E402


# -- the rest of NumPy's surface, from private modules ---------------------------
from fgrad.numpy._arrays import (  # noqa: E402,F401
    array,
    asarray,
    bool,
    can_cast,
    complex_,
    copy,
    diag_indices,
    diag_indices_from,
    euler_gamma,
    float_,
    floating,
    full,
    full_like,
    geomspace,
    indices,
    inexact,
    int_,
    integer,
    intp,
    iscomplexobj,
    isrealobj,
    isscalar,
    issubdtype,
    linspace,
    logspace,
    ndarray,
    ndim,
    number,
    promote_types,
    result_type,
    shape,
    signedinteger,
    size,
    tri,
    tril_indices,
    tril_indices_from,
    triu_indices,
    triu_indices_from,
    uint16,
    unsignedinteger,
)
from fgrad.numpy._elementwise import (  # noqa: E402,F401
    allclose,
    angle,
    around,
    array_equal,
    clip,
    deg2rad,
    degrees,
    fabs,
    fix,
    float_power,
    isclose,
    nan_to_num,
    positive,
    rad2deg,
    radians,
    reciprocal,
    round,
    sinc,
)
from fgrad.numpy._extras import (  # noqa: E402,F401
    c_,
    corrcoef,
    cov,
    cumulative_prod,
    cumulative_sum,
    diagflat,
    fmax,
    fmin,
    iscomplex,
    isneginf,
    isposinf,
    isreal,
    matrix_transpose,
    matvec,
    partition,
    r_,
    real_if_close,
    rollaxis,
    trapezoid,
    unstack,
    vander,
    vecdot,
    vecmat,
)
from fgrad.numpy._manipulation import (  # noqa: E402,F401
    append,
    array_split,
    atleast_1d,
    atleast_2d,
    atleast_3d,
    broadcast_arrays,
    column_stack,
    diag,
    diagonal,
    dsplit,
    dstack,
    flip,
    fliplr,
    flipud,
    hsplit,
    hstack,
    meshgrid,
    moveaxis,
    pad,
    ravel,
    repeat,
    roll,
    rot90,
    row_stack,
    select,
    sort,
    split,
    swapaxes,
    take,
    take_along_axis,
    tile,
    trace,
    tril,
    triu,
    vsplit,
    vstack,
)
from fgrad.numpy._nan_functions import (  # noqa: E402,F401
    nanargmax,
    nanargmin,
    nancumprod,
    nancumsum,
    nanmedian,
    nanpercentile,
    nanprod,
    nanquantile,
)
from fgrad.numpy._passthrough import EXPORTS as _PASSTHROUGH  # noqa: E402
from fgrad.primitives.bessel import i0  # noqa: E402,F401  (no SciPy needed)
from fgrad.numpy._value_shapes import (  # noqa: E402,F401
    histogram,
    histogram2d,
    histogram_bin_edges,
    histogramdd,
    intersect1d,
    setdiff1d,
    setxor1d,
    union1d,
    unique,
    unique_all,
    unique_counts,
    unique_inverse,
    unique_values,
)
from fgrad.numpy._polynomials import (  # noqa: E402,F401
    poly,
    polyadd,
    polyder,
    polydiv,
    polyfit,
    polyint,
    polymul,
    polysub,
    polyval,
    roots,
)
from fgrad.numpy._positions import (  # noqa: E402,F401
    argpartition,
    array_equiv,
    asarray_chkfinite,
    bincount,
    block,
    choose,
    compress,
    delete,
    digitize,
    extract,
    insert,
    isin,
    lexsort,
    resize,
    sort_complex,
    trim_zeros,
    unwrap,
)
from fgrad.numpy._reductions import (  # noqa: E402,F401
    all,
    any,
    argmax,
    argmin,
    argsort,
    argwhere,
    average,
    count_nonzero,
    cumprod,
    cumsum,
    diff,
    flatnonzero,
    logsumexp,
    median,
    nanmax,
    nanmean,
    nanmin,
    nanstd,
    nansum,
    nanvar,
    nonzero,
    percentile,
    ptp,
    quantile,
    searchsorted,
    std,
    var,
)
from fgrad.numpy._signal import convolve, correlate, ediff1d, gradient, interp  # noqa: E402,F401
from fgrad.numpy._ufuncs import (  # noqa: E402,F401
    bitwise_and,
    bitwise_invert,
    bitwise_left_shift,
    bitwise_not,
    bitwise_or,
    bitwise_right_shift,
    bitwise_xor,
    copysign,
    divmod,
    frexp,
    gcd,
    heaviside,
    invert,
    lcm,
    ldexp,
    left_shift,
    modf,
    right_shift,
)

if hasattr(_ew, "bitwise_count"):          # NumPy >= 2.0 has the ufunc
    bitwise_count = _ew.bitwise_count

arcsin, arccos, arcsinh, arccosh, arctanh = (_ew.arcsin, _ew.arccos, _ew.arcsinh,
                                             _ew.arccosh, _ew.arctanh)
asin, acos, asinh, acosh, atanh, atan = arcsin, arccos, arcsinh, arccosh, arctanh, arctan
exp2, log2, log10, cbrt = _ew.exp2, _ew.log2, _ew.log10, _ew.cbrt
logaddexp, logaddexp2, arctan2, hypot = (_ew.logaddexp, _ew.logaddexp2, _ew.arctan2,
                                         _ew.hypot)
atan2 = arctan2
remainder, fmod = _ew.remainder, _ew.fmod
mod = remainder
imag = _ew.imag
floor, ceil, rint, trunc, signbit = _ew.floor, _ew.ceil, _ew.rint, _ew.trunc, _ew.signbit
isnan, isinf, isfinite = _ew.isnan, _ew.isinf, _ew.isfinite
logical_and, logical_or, logical_xor, logical_not = (
    _ew.logical_and, _ew.logical_or, _ew.logical_xor, _ew.logical_not)
floor_divide = _ew.floor_divide


# functions whose list arguments are sequences of separate arrays
_SEQUENCE_FUNCTIONS = ("concatenate", "concat", "stack", "hstack", "vstack", "dstack",
                       "column_stack", "row_stack", "select", "choose")


def empty_like(prototype, dtype=None, *, device=None):
    """Like ``numpy.empty_like``, but filled with zeros (there is no uninitialised
    memory in a functional program); traced as `zeros_like`."""
    return zeros_like(prototype, dtype, device=device)



# -- einsum and the products built on it, linalg, fft --------------------------------
from fgrad.numpy import fft, linalg  # noqa: E402
from fgrad.numpy._products import (  # noqa: E402,F401
    cross,
    einsum,
    einsum_path,
    inner,
    kron,
    outer,
    tensordot,
    vdot,
)
from fgrad.numpy._products import dot  # noqa: E402,F401

spacing, nextafter = _float_steps.spacing, _float_steps.nextafter

# NumPy's utilities that are not array math (errstate, printoptions, scalar types)
globals().update(_PASSTHROUGH)
# NumPy 2's array-API spellings
permute_dims, concat, pow = transpose, concatenate, power

# every function takes lists holding tracers where NumPy takes array_like
_wrap_namespace(globals(), _SEQUENCE_FUNCTIONS)
_wrap_namespace(linalg.__dict__, ("multi_dot",))
_wrap_namespace(fft.__dict__, ())

_ONLY_CONDITION = object()


def where(condition, x1=_ONLY_CONDITION, x2=_ONLY_CONDITION, /):
    """``x1`` where ``condition`` holds, else ``x2`` (differentiable in both);
    with the condition alone, NumPy's ``where(condition)``: `nonzero`.

    >>> import fgrad.numpy as fnp, numpy as np
    >>> fnp.where(np.array([True, False]), 1.0, 2.0), fnp.where(np.array([0, 3]))
    (array([1., 2.]), (array([1]),))
    """
    if x1 is _ONLY_CONDITION and x2 is _ONLY_CONDITION:
        return nonzero(condition)
    if x1 is _ONLY_CONDITION or x2 is _ONLY_CONDITION:
        raise ValueError("where: pass both x1 and x2, or the condition alone")
    return _ew.where(condition, x1, x2)


# the standard's ``device=``: Array API code makes its arrays on its input's device
# (``xp.zeros(n, device=x.device)``), which for a traced x makes constants of its
# transformation (fgrad.numpy._devices)
_CREATION_FUNCTIONS = ("zeros", "ones", "empty", "eye", "full", "arange", "linspace",
                       "zeros_like", "ones_like", "empty_like", "full_like")
for _name in _CREATION_FUNCTIONS:
    globals()[_name] = _on_device(globals()[_name])

# The Array API standard's version this namespace answers for (NumPy's), and the
# namespace tracers name in ``__array_namespace__``
__array_api_version__ = _methods.API_VERSIONS[-1]
from fgrad.numpy._namespace_info import (  # noqa: E402,F401
    ArrayNamespaceInfo as __array_namespace_info__,
)

# Tracers route NumPy's own functions (``np.sin(tracer)``) to this namespace.
_Tracer.numpy_namespace = _sys.modules[__name__]
_methods.install(_Tracer.numpy_namespace)
