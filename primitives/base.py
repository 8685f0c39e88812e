"""Helpers the primitive families share: shape rules and broadcasting."""
import numpy as np

from fgrad.core.errors import NumpyArgumentError
from fgrad.core.trace import ShapedArray, get_aval


def broadcast_shapes(*avals):
    """NumPy's broadcasting of the avals' shapes, without building arrays."""
    ndim = max((len(a.shape) for a in avals), default=0)
    out = [1] * ndim
    for a in avals:
        offset = ndim - len(a.shape)
        for i, d in enumerate(a.shape):
            current = out[offset + i]
            if current == 1:
                out[offset + i] = d
            elif d != 1 and d != current:
                shapes = ", ".join(str(b.shape) for b in avals)
                raise ValueError(f"operands could not be broadcast together with "
                                 f"shapes {shapes}")
    return tuple(out)


def dummy(aval):
    """A 0-d stand-in of ``aval``'s dtype (a Python scalar for weak types)."""
    if aval.weak_type:
        return {"b": True, "i": 1, "u": 1, "f": 1.0, "c": 1.0j}[aval.dtype.kind]
    return np.ones((), aval.dtype)


def result_dtype(np_fn, avals, **params):
    """The dtype NumPy's ``np_fn`` gives for inputs of these dtypes (NEP 50)."""
    with np.errstate(all="ignore"):
        return np.result_type(np_fn(*(dummy(a) for a in avals), **params))


def elementwise_abstract(np_fn):
    def abstract(*avals, **params):
        return ShapedArray(broadcast_shapes(*avals),
                           result_dtype(np_fn, avals, **params))
    return abstract


def normalize_axis(axis, ndim):
    """``axis`` (None, int or tuple) as a sorted tuple of non-negative ints."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (axis,)
    out = []
    for a in axis:
        a = int(a)
        if not -ndim <= a < max(ndim, 1) and not (ndim == 0 and a in (0, -1)):
            raise np.exceptions.AxisError(a, ndim)
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise NumpyArgumentError(f"axis={tuple(axis)} names an axis twice: list each "
                                 "axis once")
    return tuple(sorted(out))


def aval_of(x):
    return get_aval(x)
