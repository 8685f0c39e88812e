"""Property-test specs for the NumPy surface of issue 17: array-likes that hold
traced values, creation from traced values, and the names added to match NumPy.

Imported at the end of `primitive_specs`, into whose `SPECS` it registers
(keyed by the fgrad.numpy name, so the coverage test finds them). References
are NumPy's own functions.
"""
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from primitive_specs import NONDIFF_SPECS, SPECS, Case, arrays, shapes, spaced, values

import fgrad.numpy as fnp
from fgrad.primitives import bessel as fbessel
from fgrad.primitives import search as fsearch


def _pair(max_dims=2):
    return hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=max_dims,
                                             max_side=3).flatmap(
        lambda bs: st.tuples(arrays(bs.input_shapes[0]), arrays(bs.input_shapes[1])))


# -- array-likes holding traced values -------------------------------------------------

# lists as NumPy code writes them (a Python float in one makes it float64, as in
# NumPy: those cases skip the float32 check)
SPECS["mean_of_list"] = shapes(max_dims=2).flatmap(
    lambda s: st.tuples(arrays(s), arrays(s))).map(
    lambda ab: Case(lambda a, b: fnp.mean([a, b, fnp.sin(a)], axis=0), ab,
                    lambda a, b: np.mean([a, b, np.sin(a)], axis=0)))
SPECS["append_list"] = st.tuples(arrays(()), arrays((3,))).map(
    lambda xy: Case(lambda x, y: fnp.append([x, 1.0], y), xy,
                    lambda x, y: np.append([x, 1.0], y), float32=False))
# nested lists mixing tracers and integer constants
SPECS["array_nested_list"] = st.tuples(arrays(()), arrays(())).map(
    lambda xy: Case(lambda x, y: fnp.array([[x, 0], [y * x, x]]) @ fnp.array([y, 2.0]), xy,
                    lambda x, y: np.array([[x, 0], [y * x, x]]) @ np.array([y, 2.0]),
                    float32=False))
SPECS["concatenate_nested_list"] = st.tuples(arrays(()), arrays((2,))).map(
    lambda xy: Case(lambda x, y: fnp.concatenate([[x, 1.0], y, (x * x,)]), xy,
                    lambda x, y: np.concatenate([[x, 1.0], y, (x * x,)]),
                    float32=False))


# -- creation from traced values ----------------------------------------------------------

@st.composite
def _full(draw):
    shape = draw(shapes(max_dims=2))
    fill = draw(arrays(shape[draw(st.integers(0, len(shape))):]))
    return Case(lambda g: fnp.full(shape, g), (fill,), lambda g: np.full(shape, g))


SPECS["full"] = _full()
SPECS["full_like_traced_fill"] = st.tuples(arrays((2, 3)), arrays((3,))).map(
    lambda xg: Case(lambda x, g: fnp.full_like(x, g) * x, xg,
                    lambda x, g: np.full_like(x, g) * x))


@st.composite
def _linspace(draw):
    (s_start, s_stop), _ = draw(hnp.mutually_broadcastable_shapes(
        num_shapes=2, max_dims=2, max_side=3))
    start, stop = draw(arrays(s_start)), draw(arrays(s_stop))
    num = draw(st.integers(1, 5))
    endpoint = draw(st.booleans())
    axis = draw(st.integers(-1, 0))
    return Case(lambda a, b: fnp.linspace(a, b, num, endpoint=endpoint, axis=axis),
                (start, stop),
                lambda a, b: np.linspace(a, b, num, endpoint=endpoint, axis=axis),
                tol={"rtol": 1e-6, "atol": 1e-6})


SPECS["linspace"] = _linspace()


# -- names added to match NumPy ------------------------------------------------------------

def _with_nans(x, mask):
    return np.where(mask, np.nan, x)


@st.composite
def _nan_pair(draw):
    (sx, sy), _ = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2,
                                                        max_side=3))
    x = draw(arrays(sx, spaced(-2, 2)))
    y = draw(arrays(sy, spaced(-2, 2))) + 0.0123      # never tied with x
    # nan on at most one side of each pair, where the other value then wins
    x = _with_nans(x, draw(hnp.arrays(np.bool_, sx)))
    return x, y


for _name in ("fmax", "fmin"):
    SPECS[_name] = _nan_pair().map(lambda xy, n=_name: Case(
        getattr(fnp, n), xy, getattr(np, n)))


def _nan_scan(fgrad_fn, np_fn, reduction=False):
    @st.composite
    def case(draw):
        shape = draw(shapes(max_dims=2))
        ndim = len(shape)
        axis = draw(st.none() | st.integers(-ndim, ndim - 1)) if ndim else None
        x = draw(arrays(shape, values(0.5, 1.5)))
        x = _with_nans(x, draw(hnp.arrays(np.bool_, shape)))
        return Case(lambda x: fgrad_fn(x, axis=axis), (x,), lambda x: np_fn(x, axis=axis))
    return case()


SPECS["nanprod"] = _nan_scan(fnp.nanprod, np.nanprod)
SPECS["nancumsum"] = _nan_scan(fnp.nancumsum, np.nancumsum)
SPECS["nancumprod"] = _nan_scan(fnp.nancumprod, np.nancumprod)


@st.composite
def _rollaxis(draw):
    shape = draw(shapes(min_dims=1))
    ndim = len(shape)
    axis = draw(st.integers(-ndim, ndim - 1))
    start = draw(st.integers(-ndim, ndim))
    return Case(lambda x: fnp.rollaxis(x, axis, start), (draw(arrays(shape)),),
                lambda x: np.rollaxis(x, axis, start))


SPECS["rollaxis"] = _rollaxis()
SPECS["matrix_transpose"] = shapes(min_dims=2).flatmap(arrays).map(
    lambda x: Case(fnp.matrix_transpose, (x,), np.matrix_transpose))


@st.composite
def _partition(draw):
    shape = draw(shapes(min_dims=1))
    kth = draw(st.integers(0, shape[-1] - 1))
    x = draw(arrays(shape, spaced(-5, 5), unique=True))

    # the kth element and the sums of each side: what NumPy specifies
    def summary(mod):
        def fn(x):
            p = mod.partition(x, kth)
            return mod.stack([mod.sum(p[..., :kth], -1), p[..., kth],
                              mod.sum(p[..., kth + 1:], -1)])
        return fn
    return Case(summary(fnp), (x,), summary(np))


SPECS["partition"] = _partition()


@st.composite
def _cumulative(draw, name):
    shape = draw(shapes(min_dims=1, max_dims=2))
    ndim = len(shape)
    axis = draw(st.integers(-ndim, ndim - 1)) if ndim > 1 else None
    include = draw(st.booleans())
    x = draw(arrays(shape, values(0.5, 1.5)))
    return Case(lambda x: getattr(fnp, name)(x, axis=axis, include_initial=include), (x,),
                lambda x: getattr(np, name)(x, axis=axis, include_initial=include))


SPECS["cumulative_sum"] = _cumulative("cumulative_sum")
SPECS["cumulative_prod"] = _cumulative("cumulative_prod")
SPECS["vecdot"] = st.tuples(st.integers(1, 3), _pair(max_dims=2)).flatmap(
    # batch shapes broadcast; the vector axis (last) has the same length n
    lambda d: st.tuples(arrays(d[1][0].shape + (d[0],)), arrays(d[1][1].shape + (d[0],))))\
    .map(lambda xy: Case(fnp.vecdot, xy, np.vecdot))


@st.composite
def _trapezoid(draw):
    shape = draw(shapes(min_dims=1, max_dims=2, min_side=2))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    y = draw(arrays(shape))
    if draw(st.booleans()):
        return Case(lambda y: fnp.trapezoid(y, dx=0.5, axis=axis), (y,),
                    lambda y: np.trapezoid(y, dx=0.5, axis=axis))
    x = np.cumsum(draw(arrays((shape[axis],), values(0.2, 1.0))))
    return Case(lambda y, x: fnp.trapezoid(y, x, axis=axis), (y, x),
                lambda y, x: np.trapezoid(y, x, axis=axis))


SPECS["trapezoid"] = _trapezoid()


# -- linalg.eig: phase-invariant functions of the eigenvectors ------------------------------

def _eig_summary(mod):
    def fn(a, b=None):
        a = a if b is None else a + 1j * b
        w, v = mod.linalg.eig(a)
        parts = [mod.real(w), mod.imag(w), mod.real(v * mod.conj(v))]   # |v|^2, smooth at 0
        return mod.concatenate([mod.reshape(p, (-1,)) for p in parts])
    return fn


@st.composite
def _eig(draw):
    n = draw(st.integers(1, 3))
    batch = draw(st.sampled_from([(), (2,)]))
    # spread diagonal + a dense perturbation: distinct eigenvalues, some complex
    # pairs, and never a triangular matrix (whose eigenvalue order LAPACK
    # changes under the finite-difference steps)
    spread = np.diag(np.linspace(0.0, 1.5 * (n - 1), n))
    dense = 0.3 * np.cos(np.arange(1.0, n * n + 1)).reshape(n, n)
    a = spread + dense + 0.4 * draw(arrays(batch + (n, n)))
    if draw(st.booleans()):
        # a fixed imaginary part too: at b = 0 a real matrix's complex pair is
        # exactly conjugate, and which of the two LAPACK lists first flips
        # under the finite-difference steps
        b = 0.2 * np.sin(np.arange(1.0, n * n + 1)).reshape(n, n) \
            + 0.4 * draw(arrays(batch + (n, n)))
        return Case(_eig_summary(fnp), (a, b), _eig_summary(np),
                    tol={"atol": 1e-4, "rtol": 1e-4})
    return Case(_eig_summary(fnp), (a,), _eig_summary(np), tol={"atol": 1e-4, "rtol": 1e-4})


SPECS["eig"] = _eig()


# -- numpy.linalg's array-API names and the tensor helpers ------------------------------------

def _linalg_case(call, *arg_shapes, tol=None, well=None):
    """``call(module, *args)`` on fgrad.numpy and NumPy, for arguments of the
    given shapes (``well`` transforms them, e.g. towards invertible)."""
    def build(args):
        args = tuple(well(a) for a in args) if well else args
        return Case(lambda *a: call(fnp, *a), args, lambda *a: call(np, *a),
                    tol=tol or {})
    return st.tuples(*(arrays(s) for s in arg_shapes)).map(build)


def _invertible(a):
    # distinct singular values and column sums (no ties for max / min / svd),
    # and no zero entry (where abs, in the 1- and inf-norms, has its kink)
    n = a.shape[-1]
    dense = 0.3 + 0.1 * np.cos(np.arange(1.0, n * n + 1)).reshape(n, n)
    return a * 0.05 + dense + np.diag(np.linspace(2.0, 4.0, n))


_TOL = {"atol": 1e-4, "rtol": 1e-4}
SPECS["linalg.cross"] = _linalg_case(lambda m, x, y: m.linalg.cross(x, y), (2, 3), (3,))
SPECS["linalg.diagonal"] = _linalg_case(lambda m, x: m.linalg.diagonal(x, offset=1), (2, 3, 3))
SPECS["linalg.trace"] = _linalg_case(lambda m, x: m.linalg.trace(x), (2, 3, 3))
SPECS["linalg.outer"] = _linalg_case(lambda m, x, y: m.linalg.outer(x, y), (3,), (2,))
SPECS["linalg.matrix_norm"] = st.sampled_from(["fro", "nuc", 1, np.inf]).flatmap(
    lambda o: _linalg_case(lambda m, x: m.linalg.matrix_norm(x, ord=o), (2, 3, 3),
                           well=_invertible, tol=_TOL))
SPECS["linalg.vector_norm"] = st.sampled_from([None, 1, (0, 2)]).flatmap(
    lambda ax: _linalg_case(lambda m, x: m.linalg.vector_norm(x, axis=ax, ord=3,
                                                              keepdims=ax == 1),
                            (2, 3, 2), well=lambda a: a + 3.0))
SPECS["linalg.multi_dot"] = _linalg_case(
    lambda m, v, a, b, w: m.linalg.multi_dot([v, a, b, w]), (3,), (3, 2), (2, 4), (4,))
SPECS["linalg.cond"] = st.sampled_from([None, 1, -2, "fro"]).flatmap(
    lambda p: _linalg_case(lambda m, x: m.linalg.cond(x, p), (2, 2), well=_invertible,
                           tol=_TOL))
SPECS["linalg.tensorsolve"] = _linalg_case(
    lambda m, a, b: m.linalg.tensorsolve(a, b), (6, 2, 3), (6,),
    well=lambda a: _invertible(a.reshape(6, 6)).reshape(a.shape) if a.size == 36 else a,
    tol=_TOL)
SPECS["linalg.tensorinv"] = _linalg_case(
    lambda m, a: m.linalg.tensorinv(a, 2), (2, 3, 6),
    well=lambda a: _invertible(a.reshape(6, 6)).reshape(a.shape), tol=_TOL)


# -- nan-ignoring quantiles ------------------------------------------------------------------

@st.composite
def _reduction_layout(draw):
    """``(shape, axis, keepdims)`` of a reduction over one axis or all."""
    shape = draw(shapes(min_dims=1, max_dims=2))
    return shape, draw(st.none() | st.integers(-len(shape), len(shape) - 1)), \
        draw(st.booleans())


@st.composite
def _nan_quantile(draw, name, scale):
    shape, axis, keepdims = draw(_reduction_layout())
    ndim = len(shape)
    method = draw(st.sampled_from(["linear", "lower", "higher", "nearest", "midpoint"]))
    q = draw(st.sampled_from([0.0, 0.2, 0.5, 0.9, 1.0, (0.25, 0.75)]))
    q = np.asarray(q) * scale if isinstance(q, tuple) else q * scale
    x = draw(arrays(shape, spaced(-5, 5), unique=True))
    nan = draw(hnp.arrays(np.bool_, shape))
    # the first entry of every reduced slice stays a number: no all-nan slice
    if axis is None:
        nan.reshape(-1)[0] = False
    else:
        index = [slice(None)] * ndim
        index[axis] = 0
        nan[tuple(index)] = False
    x = np.where(nan, np.nan, x)
    if name == "nanmedian":
        return Case(lambda x: fnp.nanmedian(x, axis=axis, keepdims=keepdims), (x,),
                    lambda x: np.nanmedian(x, axis=axis, keepdims=keepdims))
    # an array q makes NumPy compute in float64: no float32 check then
    return Case(lambda x: getattr(fnp, name)(x, q, axis=axis, keepdims=keepdims,
                                             method=method), (x,),
                lambda x: getattr(np, name)(x, q, axis=axis, keepdims=keepdims,
                                            method=method),
                float32=not isinstance(q, np.ndarray))


SPECS["nanquantile"] = _nan_quantile("nanquantile", 1.0)
SPECS["nanpercentile"] = _nan_quantile("nanpercentile", 100.0)
SPECS["nanmedian"] = _nan_quantile("nanmedian", 1.0)   # q unused


# -- quantile / percentile weights= (NumPy 2, inverted_cdf) -----------------------------------

@st.composite
def _weighted_quantile(draw, name, scale):
    shape, axis, keepdims = draw(_reduction_layout())
    ndim = len(shape)
    q = draw(st.sampled_from([0.0, 0.3, 0.5, 1.0, (0.2, 0.8)]))
    q = np.asarray(q) * scale if isinstance(q, tuple) else q * scale
    x = draw(arrays(shape, spaced(-5, 5), unique=True))
    along = axis is not None and ndim > 1 and draw(st.booleans())
    w_shape = (shape[axis],) if along else shape
    # the weights are constants: they choose which value, with no derivative
    w = draw(arrays(w_shape, st.sampled_from([0.0, 0.5, 1.0, 2.0])))
    # never all zero along a reduced slice
    if axis is None or along:
        w.reshape(-1)[-1] = 1.0
    else:
        index = [slice(None)] * ndim
        index[axis] = -1
        w[tuple(index)] = 1.0
    kw = {"axis": axis, "keepdims": keepdims, "method": "inverted_cdf", "weights": w}
    return Case(lambda x: getattr(fnp, name)(x, q, **kw), (x,),
                lambda x: getattr(np, name)(x, q, **kw), float32=not isinstance(q, np.ndarray))


SPECS["quantile_weights"] = _weighted_quantile("quantile", 1.0)
SPECS["percentile_weights"] = _weighted_quantile("percentile", 100.0)


# -- the searchsorted primitive (interp's segment search) ------------------------------------

@st.composite
def _searchsorted(draw):
    a = np.sort(draw(arrays((draw(st.integers(1, 5)),), spaced(-2, 2), unique=True)))
    v = draw(arrays(draw(shapes(max_dims=2)), spaced(-2.5, 2.5)))
    side = draw(st.sampled_from(["left", "right"]))
    return (lambda a, v: fsearch.searchsorted(a, v, side),
            lambda a, v: np.searchsorted(a, v, side), (a, v))


NONDIFF_SPECS["searchsorted"] = _searchsorted()


# -- convolve / correlate on long operands: the FFT path ------------------------------------

@st.composite
def _long_sequences(draw):
    name = draw(st.sampled_from(["convolve", "correlate"]))
    mode = draw(st.sampled_from(["full", "same", "valid"]))
    n, m = draw(st.integers(65, 90)), draw(st.integers(65, 90))
    a, v = draw(arrays((n,))), draw(arrays((m,)))
    return Case(lambda a, v: getattr(fnp, name)(a, v, mode), (a, v),
                lambda a, v: getattr(np, name)(a, v, mode))


SPECS["convolve_fft"] = _long_sequences()


@st.composite
def _interp_knots(draw):
    # knots near a fixed grid that the spaced() draws of x never reach
    # (the x grid sits 0.013 from each knot: moves stay within 0.006 of it)
    knots = np.array([-1.5, -0.4, 0.3, 0.6, 1.2]) + draw(arrays((5,), values(-0.006, 0.006)))
    x = draw(arrays(draw(shapes(max_dims=2)), spaced(-2.5, 2.5)))
    fp = draw(arrays((5,)))
    return Case(lambda x, xp, fp: fnp.interp(x, xp, fp), (x, knots, fp),
                lambda x, xp, fp: np.interp(x, xp, fp), float32=False)


SPECS["interp_knots"] = _interp_knots()


# -- statistics and matrix builders ------------------------------------------------------------

@st.composite
def _cov(draw, name):
    rows, cols = draw(st.integers(1, 3)), draw(st.integers(3, 5))
    m = draw(arrays((rows, cols)))
    rowvar = draw(st.booleans())
    if not rowvar:
        m = m.T
    with_y = draw(st.booleans())
    # a fixed irregular pattern: no variable is constant, none collinear
    m = m * 0.3 + np.sin(np.arange(m.size) * 1.7).reshape(m.shape)
    kw = {"rowvar": rowvar}
    if name == "cov":
        kw["ddof"] = draw(st.sampled_from([None, 0, 2]))
    if with_y:
        y = draw(arrays(m.shape)) * 0.3 + np.cos(np.arange(m.size) * 2.3).reshape(m.shape)
        return Case(lambda m, y: getattr(fnp, name)(m, y, **kw), (m, y),
                    lambda m, y: getattr(np, name)(m, y, **kw), tol=_TOL, float32=False)
    # NumPy computes covariances in float64 whatever the input: no float32 check
    return Case(lambda m: getattr(fnp, name)(m, **kw), (m,),
                lambda m: getattr(np, name)(m, **kw), tol=_TOL, float32=False)


SPECS["cov"] = _cov("cov")
SPECS["corrcoef"] = _cov("corrcoef")
SPECS["diagflat"] = st.tuples(shapes(max_dims=2), st.integers(-2, 2)).flatmap(
    lambda d: arrays(d[0]).map(lambda v: Case(lambda v: fnp.diagflat(v, d[1]), (v,),
                                              lambda v: np.diagflat(v, d[1]))))
SPECS["vander"] = st.tuples(shapes(min_dims=1, max_dims=1), st.sampled_from([None, 2, 4]),
                            st.booleans()).flatmap(
    lambda d: arrays(d[0]).map(lambda x: Case(
        lambda x: fnp.vander(x, d[1], d[2]), (x,), lambda x: np.vander(x, d[1], d[2]),
        float32=False)))               # NumPy's vander promotes float32 to float64
SPECS["unstack"] = shapes(min_dims=1).flatmap(arrays).map(lambda x: Case(
    lambda x: fnp.stack(fnp.unstack(x, axis=-1)), (x,),
    lambda x: np.stack(np.unstack(x, axis=-1))))
SPECS["matvec"] = st.tuples(st.integers(1, 3), st.integers(1, 3), _pair(max_dims=1)).flatmap(
    lambda d: st.tuples(arrays(d[2][0].shape + (d[0], d[1])), arrays(d[2][1].shape + (d[1],))))\
    .map(lambda ab: Case(fnp.matvec, ab, np.matvec))
SPECS["vecmat"] = st.tuples(st.integers(1, 3), st.integers(1, 3), _pair(max_dims=1)).flatmap(
    lambda d: st.tuples(arrays(d[2][0].shape + (d[0],)), arrays(d[2][1].shape + (d[0], d[1]))))\
    .map(lambda ab: Case(fnp.vecmat, ab, np.vecmat))


# -- reshaping by positions, ordering, unwrapping, assembling ---------------------------------

SPECS["resize"] = st.tuples(shapes(max_dims=2), shapes(max_dims=2)).flatmap(
    lambda d: arrays(d[0]).map(lambda x: Case(lambda x: fnp.resize(x, d[1]), (x,),
                                              lambda x: np.resize(x, d[1]))))


@st.composite
def _delete(draw):
    shape = draw(shapes(min_dims=1, max_dims=2, min_side=2))
    axis = draw(st.none() | st.integers(-len(shape), len(shape) - 1))
    n = int(np.prod(shape)) if axis is None else shape[axis]
    obj = draw(st.sampled_from([0, -1, slice(0, None, 2), [0, n - 1]]))
    return Case(lambda x: fnp.delete(x, obj, axis), (draw(arrays(shape)),),
                lambda x: np.delete(x, obj, axis))


SPECS["delete"] = _delete()
# distinct real parts, some shared: the order is fixed away from ties
SPECS["sort_complex"] = st.tuples(arrays((4,), spaced(-2, 2), unique=True),
                                  arrays((4,), spaced(-2, 2), unique=True)).map(
    lambda ab: Case(lambda a, b: fnp.real(fnp.sort_complex(fnp.round(a) + 1j * b)) * 1.0
                    + fnp.imag(fnp.sort_complex(fnp.round(a) + 1j * b)), ab,
                    lambda a, b: np.real(np.sort_complex(np.round(a) + 1j * b))
                    + np.imag(np.sort_complex(np.round(a) + 1j * b))))


@st.composite
def _unwrap(draw):
    steps = draw(arrays((draw(st.integers(1, 6)),), values(-6.0, 6.0)))
    # keep every jump away from the wrap points (odd multiples of pi)
    steps = np.where(np.abs(np.remainder(steps + np.pi, 2 * np.pi) - np.pi) < 0.1,
                     steps + 0.3, steps)
    return Case(lambda p: fnp.unwrap(p), (np.cumsum(steps),), lambda p: np.unwrap(p))


SPECS["unwrap"] = _unwrap()


@st.composite
def _choose(draw):
    shape = draw(shapes(max_dims=2))
    k = draw(st.integers(1, 3))
    index = draw(hnp.arrays(np.int64, shape, elements=st.integers(0, k - 1)))
    choices = tuple(draw(arrays(shape)) for _ in range(k))
    return Case(lambda *c: fnp.choose(index, list(c)), choices,
                lambda *c: np.choose(index, list(c)))


SPECS["choose"] = _choose()
SPECS["block"] = st.tuples(arrays((2, 2)), arrays((2, 1)), arrays((1, 3))).map(
    lambda abc: Case(lambda a, b, c: fnp.block([[a, b], [c]]), abc,
                     lambda a, b, c: np.block([[a, b], [c]])))


@st.composite
def _hermitian_fft(draw):
    n = draw(st.sampled_from([None, 4, 5]))
    norm = draw(st.sampled_from([None, "ortho", "forward"]))
    a, b = draw(arrays((4,))), draw(arrays((4,)))
    if draw(st.booleans()):
        return Case(lambda a, b: fnp.fft.hfft(a + 1j * b, n, norm=norm), (a, b),
                    lambda a, b: np.fft.hfft(a + 1j * b, n, norm=norm), tol=_TOL)
    return Case(lambda a: fnp.real(fnp.fft.ihfft(a, n, norm=norm)) + fnp.imag(
        fnp.fft.ihfft(a, n, norm=norm)), (a,),
        lambda a: np.real(np.fft.ihfft(a, n, norm=norm)) + np.imag(
            np.fft.ihfft(a, n, norm=norm)), tol=_TOL)


SPECS["fft.hfft"] = _hermitian_fft()


# -- the floating-point grid ----------------------------------------------------------------

NONDIFF_SPECS["spacing"] = shapes().flatmap(lambda s: arrays(s, spaced())).map(
    lambda x: (fnp.spacing, np.spacing, (x,)))
SPECS["nextafter"] = _pair(max_dims=2).map(lambda xy: Case(
    lambda x, y: fnp.nextafter(x, y) * 1.0, xy, lambda x, y: np.nextafter(x, y) * 1.0))


@st.composite
def _insert(draw):
    shape = draw(shapes(min_dims=1, max_dims=2))
    axis = draw(st.none() | st.integers(-len(shape), len(shape) - 1))
    n = int(np.prod(shape)) if axis is None else shape[axis]
    obj = draw(st.sampled_from([0, n, [0, n], slice(0, None, 2)]))
    values = draw(arrays(draw(st.sampled_from([(), (1,)]))))
    return Case(lambda x, v: fnp.insert(x, obj, v, axis), (draw(arrays(shape)), values),
                lambda x, v: np.insert(x, obj, v, axis))


SPECS["insert"] = _insert()


# -- polynomials ------------------------------------------------------------------------------

@st.composite
def _polynomials(draw, name):
    p = draw(arrays((draw(st.integers(1, 4)),)))
    if name in ("polyder", "polyint"):
        m = draw(st.integers(1, 3))
        # NumPy computes these in float64 whatever the input: no float32 check
        return Case(lambda p: getattr(fnp, name)(p, m), (p,),
                    lambda p: getattr(np, name)(p, m), float32=False)
    other = draw(arrays(draw(shapes(max_dims=2)) if name == "polyval"
                        else (draw(st.integers(1, 4)),)))
    if name == "polymul":
        # NumPy's polymul drops leading zero coefficients (a value-dependent
        # length); fgrad keeps them: leading coefficients here are non-zero
        p[0], other[0] = p[0] + 3.0, other[0] + 3.0
    return Case(getattr(fnp, name), (p, other), getattr(np, name))


for _name in ("polyval", "polyadd", "polysub", "polymul", "polyder", "polyint"):
    SPECS[_name] = _polynomials(_name)


# -- the modified Bessel functions, without SciPy -----------------------------------------

def _bessel_i_by_quadrature(n, x):
    """I_n(x) = (1/pi) int_0^pi exp(x cos t) cos(n t) dt by the trapezoidal rule,
    exact to rounding for this periodic integrand: an independent reference."""
    t = np.linspace(0.0, np.pi, 401)
    f = np.exp(np.multiply.outer(x, np.cos(t))) * np.cos(n * t)
    return np.trapezoid(f, t, axis=-1) / np.pi


@st.composite
def _bessel_i(draw):
    # both sides of the switch from the series to the asymptotic expansion (25)
    n = draw(st.integers(0, 2))
    x = draw(arrays(draw(shapes(max_dims=2)), st.one_of(values(-3, 3), values(-30, 30))))
    if n == 0:
        return Case(fnp.i0, (x,), np.i0, tol={"rtol": 1e-6, "atol": 1e-6})
    # x**n g_n(x) = I_n(x); g_n itself is finite at 0, where its derivatives are checked
    return Case(lambda x: fnp.prod([x] * n, axis=0) * fbessel.bessel_i_over_power(x, n), (x,),
                lambda x: _bessel_i_by_quadrature(n, x).astype(x.dtype),
                tol={"rtol": 1e-6, "atol": 1e-6})


SPECS["bessel_i_over_power"] = _bessel_i()


# -- roots, division and fits of polynomials ---------------------------------------------------

@st.composite
def _poly(draw):
    if draw(st.booleans()):
        # roots a grid step apart (the coefficients are smooth in them anyway)
        r = draw(arrays((draw(st.integers(1, 4)),), spaced(-2, 2), unique=True))
        return Case(fnp.poly, (r,), np.poly)
    # a square matrix with distinct eigenvalues (some complex pairs): its
    # characteristic polynomial, through eigvals
    n = draw(st.integers(1, 3))
    a = np.diag(np.linspace(0.0, 1.5 * (n - 1), n)) \
        + 0.3 * np.cos(np.arange(1.0, n * n + 1)).reshape(n, n) + 0.4 * draw(arrays((n, n)))
    return Case(fnp.poly, (a,), np.poly, tol=_TOL)


SPECS["poly"] = _poly()


def _quotient_and_remainder(mod):
    return lambda u, v: mod.concatenate(mod.polydiv(u, v))


@st.composite
def _polydiv(draw):
    v = draw(arrays((draw(st.integers(1, 3)),)))
    v[0] += np.copysign(2.0, v[0])                    # away from zero: it divides
    if len(v) > 1 and draw(st.booleans()):
        # deg u < deg v: the quotient is 0, the remainder u (leading entry non-zero)
        u = draw(arrays((draw(st.integers(1, len(v) - 1)),)))
        u[0] += np.copysign(2.0, u[0])
    else:
        # u = q v + r with a remainder whose leading coefficient is far from
        # zero (NumPy trims leading coefficients within 1e-8 of it)
        q = draw(arrays((draw(st.integers(1, 3)),)))
        r = draw(arrays((len(v) - 1,)))
        if r.size:
            r[0] += np.copysign(2.0, r[0])
        u = np.polyadd(np.polymul(q, v), r)
    # in float32 NumPy keeps the rounding left in the remainder's leading entries
    # (above its 1e-8 threshold), so its lengths differ from float64's: no float32 check
    return Case(_quotient_and_remainder(fnp), (u, v), _quotient_and_remainder(np), tol=_TOL,
                float32=False)


SPECS["polydiv"] = _polydiv()


def _fit_summary(mod, deg, w, cov):
    def fn(x, y, *weights):
        out = mod.polyfit(x, y, deg, w=weights[0] if weights else None, cov=cov)
        return mod.concatenate([mod.ravel(o) for o in out]) if cov else out
    return fn


@st.composite
def _polyfit(draw):
    points = draw(st.integers(4, 6))
    deg = draw(st.integers(0, 2))
    x = draw(arrays((points,), spaced(-2, 2), unique=True))
    y = draw(arrays((points,) + draw(st.sampled_from([(), (2,)]))))
    cov = draw(st.sampled_from([False, True, "unscaled"]))
    args = (x, y)
    if draw(st.booleans()):
        args += (draw(arrays((points,), values(0.5, 2.0))),)
    # NumPy's Vandermonde matrix promotes float32 to float64: no float32 check
    return Case(_fit_summary(fnp, deg, len(args) == 3, cov), args,
                _fit_summary(np, deg, len(args) == 3, cov), tol=_TOL, float32=False)


SPECS["polyfit"] = _polyfit()


def _sorted_roots(mod):
    # sorted by real part (distinct here), as real and imaginary parts: the
    # order LAPACK returns them in is not NumPy's promise
    def fn(p):
        r = mod.sort_complex(mod.roots(p))
        return mod.concatenate([mod.real(r), mod.imag(r)])
    return fn


@st.composite
def _roots(draw):
    centres = draw(st.lists(st.sampled_from([-2.0, -1.3, -0.6, 0.0, 0.4, 1.1, 1.9]),
                            min_size=1, max_size=3, unique=True))
    zeros = []
    for c in centres:
        # a real root, or a complex pair (with centres 0.6 apart, roots stay simple)
        spread = draw(st.sampled_from([0.0, 0.5, 1.2]))
        zeros += [c + 1j * spread, c - 1j * spread] if spread and len(zeros) < 3 else [c]
    scale = draw(st.sampled_from([1.0, -0.5, 2.0]))
    # NumPy's sort_complex makes real float32 roots complex128: no float32 check
    return Case(_sorted_roots(fnp), (scale * np.real(np.poly(zeros)),), _sorted_roots(np),
                tol=_TOL, float32=False)


SPECS["roots"] = _roots()


# -- unique with a static size (JAX's size=): works under jit and vmap ------------------------

def _unique_of_size_reference(x, size, flags):
    """NumPy's unique, cut or padded to ``size`` (values with the smallest one,
    indices and counts with 0), as fgrad's size= promises."""
    out = np.unique(x, **flags)
    out = out if isinstance(out, tuple) else (out,)
    values = out[0]
    pad = max(size - len(values), 0)
    padded = [np.concatenate([values[:size], np.full(pad, values[0], values.dtype)])]
    asked = [k for k in ("return_index", "return_inverse", "return_counts") if flags.get(k)]
    for name, extra in zip(asked, out[1:]):
        padded.append(extra if name == "return_inverse"
                      else np.concatenate([extra[:size], np.zeros(pad, extra.dtype)]))
    return padded


@st.composite
def _unique_size(draw):
    x = draw(arrays((draw(st.integers(1, 5)),), spaced(-2, 2), unique=True))
    idx = np.asarray(draw(st.lists(st.integers(0, len(x) - 1), max_size=3)), np.int64)
    size = draw(st.integers(1, 7))
    flags = {k: draw(st.booleans()) for k in ("return_index", "return_inverse",
                                             "return_counts")}
    flags = {k: v for k, v in flags.items() if v}

    # everything as one array of x's dtype (values, then the integer results)
    def fgrad_fn(x):
        out = fnp.unique(fnp.concatenate([x[idx], x]), size=size, **flags)
        out = out if isinstance(out, tuple) else (out,)
        return fnp.concatenate([out[0]] + [fnp.astype(o, x.dtype) for o in out[1:]])

    def numpy_fn(x):
        out = _unique_of_size_reference(np.concatenate([x[idx], x]), size, flags)
        return np.concatenate([out[0]] + [o.astype(x.dtype) for o in out[1:]])
    return Case(fgrad_fn, (x,), numpy_fn)


SPECS["unique_size"] = _unique_size()
