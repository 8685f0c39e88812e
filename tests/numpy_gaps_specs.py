"""Property-test specs for the fgrad.numpy functions of issue 3's second round:
more elementwise functions, nan-aware reductions, signal helpers and quantile
methods.

Imported at the end of `primitive_specs`, into whose `SPECS` / `NONDIFF_SPECS`
it registers (keyed by the fgrad.numpy name, so the coverage test finds them).
References are NumPy's own functions.
"""
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fgrad.numpy as fnp
from fgrad.testing.strategies import broadcasting_arrays
from primitive_specs import (NONDIFF_SPECS, SPECS, Case, _nondiff, arrays,
                             away_from_zero, shapes, spaced, values)
from fgrad.numpy._reductions import QUANTILE_METHODS


def _pair(dx, dy, max_dims=3):
    return broadcasting_arrays(dx, dy, max_dims=max_dims)


def _joined(*parts):
    mod = fnp if any(not isinstance(p, np.ndarray) for p in parts) else np
    return mod.concatenate([mod.reshape(p, (-1,)) for p in parts])


# -- elementwise -------------------------------------------------------------------

SPECS["copysign"] = _pair(away_from_zero(-2, 2), away_from_zero(-2, 2)).map(
    lambda xy: Case(fnp.copysign, xy, np.copysign))
# the derivative in x1 is zero away from the step; in x2 it is 1 where x1 == 0
SPECS["heaviside"] = _pair(away_from_zero(-2, 2), values()).map(
    lambda xy: Case(fnp.heaviside, xy, np.heaviside))
SPECS["heaviside_at_zero"] = _pair(st.sampled_from([-1.0, 0.0, 1.5]), values()).map(
    # asarray(like=): the constant goes where x2 is (the device, under the
    # stand-in and CuPy runs), as a user's constant must
    lambda xy: Case(lambda x2: fnp.heaviside(fnp.asarray(xy[0], x2.dtype, like=x2), x2),
                    (xy[1],),
                    lambda x2: np.heaviside(xy[0].astype(x2.dtype), x2)))
SPECS["ldexp"] = _pair(values(), st.integers(-3, 3).map(float)).map(
    lambda xn: Case(lambda x: fnp.ldexp(x, fnp.asarray(xn[1], np.int64, like=x)), (xn[0],),
                    lambda x: np.ldexp(x, xn[1].astype(np.int64))))
# spaced values: never a power of two, where the mantissa jumps
SPECS["frexp"] = shapes().flatmap(lambda s: arrays(s, spaced())).map(
    lambda x: Case(lambda x: fnp.frexp(x)[0], (x,), lambda x: np.frexp(x)[0]))
NONDIFF_SPECS["frexp_exponent"] = _nondiff(lambda x: fnp.frexp(x)[1],
                                           lambda x: np.frexp(x)[1])
SPECS["modf"] = shapes().flatmap(lambda s: arrays(s, spaced())).map(
    lambda x: Case(lambda x: fnp.stack(fnp.modf(x)), (x,),
                   lambda x: np.stack(np.modf(x))))
# |x| < y keeps x / y off the integers, where floor_divide and remainder jump
SPECS["divmod"] = _pair(away_from_zero(-2, 2, 0.1), values(2.5, 3.0)).map(
    lambda xy: Case(lambda x, y: fnp.stack(fnp.broadcast_arrays(*fnp.divmod(x, y))),
                    xy, lambda x, y: np.stack(np.broadcast_arrays(*np.divmod(x, y)))))


def _ints(x, scale=10.0):
    return fnp.astype(x * scale, np.int64)


def _np_ints(x, scale=10.0):
    return (x * scale).astype(np.int64)


for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    NONDIFF_SPECS[_name] = _nondiff(
        lambda x, y, f=getattr(fnp, _name): f(_ints(x), _ints(y)),
        lambda x, y, f=getattr(np, _name): f(_np_ints(x), _np_ints(y)), 2)
NONDIFF_SPECS["invert"] = _nondiff(lambda x: fnp.invert(_ints(x)),
                                   lambda x: np.invert(_np_ints(x)))
for _name in ("gcd", "lcm"):
    NONDIFF_SPECS[_name] = _nondiff(
        lambda x, y, f=getattr(fnp, _name): f(_ints(x), _ints(y)),
        lambda x, y, f=getattr(np, _name): f(_np_ints(x), _np_ints(y)), 2)
if hasattr(np, "bitwise_count"):           # NumPy >= 2.0
    NONDIFF_SPECS["bitwise_count"] = _nondiff(lambda x: fnp.bitwise_count(_ints(x)),
                                              lambda x: np.bitwise_count(_np_ints(x)))
for _name in ("left_shift", "right_shift"):
    NONDIFF_SPECS[_name] = _nondiff(
        lambda x, y, f=getattr(fnp, _name): f(_ints(x), _ints(fnp.abs(y), 2.0)),
        lambda x, y, f=getattr(np, _name): f(_np_ints(x), _np_ints(np.abs(y), 2.0)), 2)


# -- clip with NumPy 2's keywords -----------------------------------------------------

@st.composite
def _clip_keywords(draw):
    bs = draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=2, max_side=3))
    x = draw(arrays(bs.input_shapes[0], spaced(-2, 2)))
    lo = draw(arrays(bs.input_shapes[1], spaced(-1.45, -0.05)))
    hi = draw(arrays(bs.input_shapes[2], spaced(0.05, 1.45)))
    which = draw(st.sampled_from(["min", "max", "both"]))
    if which == "min":
        return Case(lambda x, lo: fnp.clip(x, min=lo), (x, lo),
                    lambda x, lo: np.clip(x, min=lo))
    if which == "max":
        return Case(lambda x, hi: fnp.clip(x, max=hi), (x, hi),
                    lambda x, hi: np.clip(x, max=hi))
    return Case(lambda x, lo, hi: fnp.clip(x, min=lo, max=hi), (x, lo, hi),
                lambda x, lo, hi: np.clip(x, min=lo, max=hi))


SPECS["clip_keywords"] = _clip_keywords()


# -- nan-aware reductions -------------------------------------------------------------

def _nan_reduction(fgrad_fn, np_fn, keep=1, **kw):
    """``fn(x, axis, keepdims, **kw)`` over None or one axis, on distinct values
    with nan sprinkled in; the first ``keep`` entries of every reduced slice stay
    numbers, so no result is nan (finite differences need finite outputs)."""
    @st.composite
    def case(draw):
        shape = draw(shapes(min_dims=int(keep > 1), min_side=keep))
        ndim = len(shape)
        axis = draw(st.none() | st.integers(-ndim, ndim - 1)) if ndim else None
        keepdims = draw(st.booleans())
        extra = draw(st.fixed_dictionaries(kw))
        x = draw(arrays(shape, spaced(-5, 5), unique=True))
        nan = draw(hnp.arrays(np.bool_, shape))
        if axis is None:
            nan.reshape(-1)[:keep] = False
        else:
            index = [slice(None)] * ndim
            index[axis] = slice(0, keep)
            nan[tuple(index)] = False
        x = np.where(nan, np.nan, x)
        return Case(lambda x: fgrad_fn(x, axis=axis, keepdims=keepdims, **extra), (x,),
                    lambda x: np_fn(x, axis=axis, keepdims=keepdims, **extra))
    return case()


SPECS["nanmax"] = _nan_reduction(fnp.nanmax, np.nanmax)
SPECS["nanmin"] = _nan_reduction(fnp.nanmin, np.nanmin)
SPECS["nanvar"] = _nan_reduction(fnp.nanvar, np.nanvar, keep=2,
                                 ddof=st.sampled_from([0, 1]))
SPECS["nanstd"] = _nan_reduction(fnp.nanstd, np.nanstd, keep=2,
                                 ddof=st.sampled_from([0, 1]))
SPECS["nanmean_with_nans"] = _nan_reduction(fnp.nanmean, np.nanmean)


# equal maxima share the derivative, nan entries get none
_NAN_TIES = np.array([1.0, np.nan, 3.0, 3.0, np.nan])
SPECS["nanmax_ties"] = st.just(Case(lambda x: fnp.nanmax(x) * 1.0 + fnp.nanmin(x) * 2.0,
                                    (_NAN_TIES,),
                                    lambda x: np.nanmax(x) + np.nanmin(x) * 2.0, order=0))


# -- sequences: convolution, interpolation, finite differences -------------------------

def _sequences(fgrad_fn, np_fn, transform=None):
    @st.composite
    def case(draw):
        n, m = draw(st.integers(1, 5)), draw(st.integers(1, 5))
        mode = draw(st.sampled_from(["full", "same", "valid"]))
        a, v = draw(arrays((n,))), draw(arrays((m,)))
        return Case(lambda a, v: fgrad_fn(a, v, mode), (a, v),
                    lambda a, v: np_fn(a, v, mode))
    return case()


SPECS["convolve"] = _sequences(fnp.convolve, np.convolve)
SPECS["correlate"] = _sequences(fnp.correlate, np.correlate)
# complex operands: correlate conjugates v, as NumPy does
SPECS["correlate_complex"] = _sequences(
    lambda a, v, mode: fnp.real(fnp.correlate(a * (1 + 0.5j), v * (0.3 - 1j), mode))
    + fnp.imag(fnp.correlate(a * 1j, v + 0.7j, mode)),
    lambda a, v, mode: np.real(np.correlate(a * (1 + 0.5j), v * (0.3 - 1j), mode))
    + np.imag(np.correlate(a * 1j, v + 0.7j, mode)))

# knots on a grid the spaced() draws of x never touch, where the slope jumps
_KNOTS = np.array([-1.5, -0.4, 0.3, 0.6, 1.2])


@st.composite
def _interp(draw):
    x = draw(arrays(draw(shapes(max_dims=2)), spaced(-2.5, 2.5)))
    fp = draw(arrays((_KNOTS.size,)))
    kind = draw(st.sampled_from(["plain", "left_right", "period"]))
    kw = {"plain": {}, "left_right": {"left": -3.0, "right": 0.25},
          "period": {"period": 2.2}}[kind]
    # np.interp computes in float64 whatever it is given
    return Case(lambda x, fp: fnp.interp(x, fnp.asarray(_KNOTS, like=x), fp, **kw), (x, fp),
                lambda x, fp: np.interp(x, _KNOTS, fp, **kw), float32=False)


SPECS["interp"] = _interp()


@st.composite
def _gradient(draw):
    shape = draw(shapes(min_dims=1, max_dims=3, min_side=3))
    f = draw(arrays(shape))
    ndim = len(shape)
    edge_order = draw(st.sampled_from([1, 2]))
    axis = draw(st.none() | st.integers(-ndim, ndim - 1)
                | st.just(tuple(range(ndim))[::-1]))
    n_axes = ndim if axis is None else (1 if isinstance(axis, int) else len(axis))
    axes = range(ndim) if axis is None else (
        [axis % ndim] if isinstance(axis, int) else axis)
    spacing = draw(st.sampled_from(["none", "scalar", "each"]))
    if spacing == "none":
        varargs = ()
    elif spacing == "scalar":
        varargs = (0.5,)
    else:
        varargs = tuple(np.cumsum(np.linspace(0.5, 1.5, shape[ax])) if k % 2 == 0
                        else 2.0 for k, ax in enumerate(axes))
        assert len(varargs) == n_axes

    def stacked(mod):
        def fn(f):
            out = mod.gradient(f, *varargs, axis=axis, edge_order=edge_order)
            return mod.stack(out) if isinstance(out, (tuple, list)) else out
        return fn
    return Case(stacked(fnp), (f,), stacked(np))


SPECS["gradient"] = _gradient()


@st.composite
def _ediff1d(draw):
    x = draw(arrays(draw(shapes(max_dims=2))))
    begin = draw(st.none() | arrays(draw(shapes(max_dims=1))))
    end = draw(st.none() | arrays(draw(shapes(max_dims=1))))
    args = (x,) + tuple(e for e in (begin, end) if e is not None)

    def call(mod):
        def fn(x, *extra):
            extra = list(extra)
            b = extra.pop(0) if begin is not None else None
            e = extra.pop(0) if end is not None else None
            return mod.ediff1d(x, to_end=e, to_begin=b)
        return fn
    return Case(call(fnp), args, call(np))


SPECS["ediff1d"] = _ediff1d()


# -- quantile methods ---------------------------------------------------------------------

@st.composite
def _quantile_methods(draw, fgrad_fn, np_fn, scale):
    shape = draw(shapes())
    ndim = len(shape)
    axis = draw(st.none() | st.integers(-ndim, ndim - 1)) if ndim else None
    keepdims = draw(st.booleans())
    method = draw(st.sampled_from(QUANTILE_METHODS))
    q = draw(st.sampled_from([0.0, 0.1, 0.25, 1 / 3, 0.5, 0.8, 1.0])) * scale
    x = draw(arrays(shape, spaced(-5, 5), unique=True))
    return Case(lambda x: fgrad_fn(x, q, axis=axis, keepdims=keepdims, method=method),
                (x,), lambda x: np_fn(x, q, axis=axis, keepdims=keepdims, method=method))


SPECS["quantile_methods"] = _quantile_methods(fnp.quantile, np.quantile, 1.0)
SPECS["percentile_methods"] = _quantile_methods(fnp.percentile, np.percentile, 100.0)


# -- logsumexp with weights (the primitive carries the unweighted case) --------------------

@st.composite
def _logsumexp_weighted(draw):
    import scipy.special as ss
    shape = draw(shapes(min_dims=1))
    ndim = len(shape)
    axis = draw(st.none() | st.integers(-ndim, ndim - 1))
    keepdims = draw(st.booleans())
    x = draw(arrays(shape))
    b = draw(arrays(shape[draw(st.integers(0, ndim)):], values(0.3, 2.0)))
    return Case(lambda x, b: fnp.logsumexp(x, axis=axis, b=b, keepdims=keepdims), (x, b),
                lambda x, b: ss.logsumexp(x, axis=axis, b=b, keepdims=keepdims))


SPECS["logsumexp_weighted"] = _logsumexp_weighted()
