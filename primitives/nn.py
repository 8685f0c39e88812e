"""Neural-network primitives: fused where fusing is faster or more stable.

Each of these could be composed from elementwise primitives, but the composition
is either unstable (``log(sum(exp(x)))`` overflows, ``1 / (1 + exp(-x))``
overflows for large negative ``x``) or records several equations where one
suffices (``relu`` as ``maximum`` records a tie rule it never needs). The rest of
`fgrad.nn` is composed from these and the generic primitives.

Convolution and pooling rest on two linear primitives that are each other's
transpose: `im2col` gathers every receptive field of a (padded, strided,
dilated) NCHW input into a matrix, so a convolution is one matrix product;
`col2im` scatter-adds such a matrix back onto the input grid. The VJP of one is
the other. `conv2d` is that gather and product in one primitive (so that the
gathered matrix is not kept for the backward pass); its rules are written with
`im2col`, `col2im` and ``matmul``, so every derivative of any order stays inside
those primitives.
"""
import math

import numpy as np

from fgrad.core.backend import array_module, scipy_module
from fgrad.primitives.batching import (
    axis_size, batch_to_front, move_axis, reduction_batch_rule, unary_batch_rule,
)
from fgrad.core.trace import Primitive, ShapedArray, get_aval

from fgrad.primitives.base import dummy, normalize_axis
from fgrad.primitives.elementwise import (
    convert_element_type, equal, exp, greater, unbroadcast, where,
)
from fgrad.primitives.reductions import keepdims_like, sum_

FAMILY = "primitives/nn.py"


# ---------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------

def _same_abstract(x, **params):
    return ShapedArray(x.shape, x.dtype)


def _relu_impl(x):
    return array_module(x).maximum(x, 0)


relu_p = Primitive("relu", _relu_impl, _same_abstract, family=FAMILY)
# The derivative at 0 is taken to be 0, as in JAX and PyTorch.
relu_p.def_vjp(lambda ct, ans, x: where(greater(x, 0), ct, 0))
relu_p.def_jvp(lambda t, ans, x: where(greater(x, 0), t, 0))


def relu(x):
    """``max(x, 0)``, with derivative 0 at 0."""
    return relu_p.bind(x)


def _sigmoid_impl(x):
    # exp(-|x|) never overflows; the two branches agree at 0
    xp = array_module(x)
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + e), e / (1 + e))


sigmoid_p = Primitive("sigmoid", _sigmoid_impl, _same_abstract, family=FAMILY)
sigmoid_p.def_vjp(lambda ct, ans, x: ct * (ans * (1 - ans)))
sigmoid_p.def_jvp(lambda t, ans, x: t * (ans * (1 - ans)))


def sigmoid(x):
    """The logistic function ``1 / (1 + exp(-x))``, without overflow."""
    return sigmoid_p.bind(x)


def _softplus_impl(x):
    xp = array_module(x)
    return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))


softplus_p = Primitive("softplus", _softplus_impl, _same_abstract, family=FAMILY)
softplus_p.def_vjp(lambda ct, ans, x: ct * sigmoid(x))
softplus_p.def_jvp(lambda t, ans, x: t * sigmoid(x))


def softplus(x):
    """``log(1 + exp(x))``, without overflow."""
    return softplus_p.bind(x)


def _normal_cdf_impl(x):
    # scipy.special.ndtr, or cupyx.scipy.special.ndtr on the GPU
    return scipy_module(array_module(x), "special").ndtr(x)


_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
normal_cdf_p = Primitive("normal_cdf", _normal_cdf_impl, _same_abstract, family=FAMILY)
normal_cdf_p.def_vjp(lambda ct, ans, x: ct * (exp(-0.5 * (x * x)) * _INV_SQRT_2PI))
normal_cdf_p.def_jvp(lambda t, ans, x: t * (exp(-0.5 * (x * x)) * _INV_SQRT_2PI))


def normal_cdf(x):
    """The standard normal CDF ``Phi(x) = (1 + erf(x / sqrt 2)) / 2`` (needs SciPy,
    or CuPy's cupyx.scipy on the GPU)."""
    return normal_cdf_p.bind(x)


# ---------------------------------------------------------------------------
# Normalised exponentials over axes
# ---------------------------------------------------------------------------

def _axis_abstract(x, axis, keepdims):
    if keepdims:
        return ShapedArray(tuple(1 if i in axis else d for i, d in enumerate(x.shape)),
                           x.dtype)
    return ShapedArray(tuple(d for i, d in enumerate(x.shape) if i not in axis), x.dtype)


def _logsumexp_impl(x, axis, keepdims):
    xp = array_module(x)
    m = xp.max(x, axis=axis, keepdims=True)
    # a slice that is all -inf has sum 0: keep its shift finite so the result
    # is -inf rather than nan
    m = xp.where(xp.isfinite(m), m, 0)
    out = xp.log(xp.sum(xp.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else xp.squeeze(out, axis=axis)


logsumexp_p = Primitive("logsumexp", _logsumexp_impl, _axis_abstract, family=FAMILY)


def _softmax_weights(ans, x, axis, keepdims):
    # exp(x - logsumexp(x)) <= 1: the gradient cannot overflow however large x is.
    # A slice that is all -inf has ans = -inf; shifting it by 0 instead gives
    # weights exp(-inf) = 0 rather than exp(-inf + inf) = nan.
    shift = keepdims_like(ans, x, axis, keepdims)
    return exp(x - where(equal(shift, -np.inf), 0.0, shift))


logsumexp_p.def_vjp(lambda ct, ans, x, axis, keepdims:
                    keepdims_like(ct, x, axis, keepdims)
                    * _softmax_weights(ans, x, axis, keepdims))
logsumexp_p.def_jvp(lambda t, ans, x, axis, keepdims:
                    sum_(t * _softmax_weights(ans, x, axis, keepdims), axis, keepdims))


def logsumexp(x, axis=None, keepdims=False):
    """``log(sum(exp(x), axis))`` computed without overflow."""
    return logsumexp_p.bind(x, axis=normalize_axis(axis, get_aval(x).ndim),
                            keepdims=bool(keepdims))


def _softmax_impl(x, axis):
    xp = array_module(x)
    e = xp.exp(x - xp.max(x, axis=axis, keepdims=True))
    return e / xp.sum(e, axis=axis, keepdims=True)


softmax_p = Primitive("softmax", _softmax_impl,
                      lambda x, axis: ShapedArray(x.shape, x.dtype), family=FAMILY)
softmax_p.def_vjp(lambda ct, ans, x, axis:
                  ans * (ct - sum_(ct * ans, axis, keepdims=True)))
softmax_p.def_jvp(lambda t, ans, x, axis:
                  ans * (t - sum_(t * ans, axis, keepdims=True)))


def softmax(x, axis=-1):
    """``exp(x) / sum(exp(x), axis)``, shifted by the maximum for stability."""
    return softmax_p.bind(x, axis=normalize_axis(axis, get_aval(x).ndim))


# ---------------------------------------------------------------------------
# Receptive fields: im2col and its transpose col2im
# ---------------------------------------------------------------------------
#
# Layout: an NCHW input of shape (N, C, H, W) becomes columns of shape
# (C, kh, kw, OH, OW, N). Putting (C, kh, kw) first makes a convolution one
# matrix product per group, ``w.reshape(G, O/G, C/G*kh*kw) @
# cols.reshape(G, C/G*kh*kw, OH*OW*N)``, with no transpose of the big operand.
# Putting the batch last makes every kernel offset's block of columns a slice
# of the input seen as (C, H, W, N) whose contiguous runs are OW*N long (with
# stride 1), where an (N, C, H, W) slice has runs only OW long: NumPy's copies
# and adds pay a fixed cost per run, which made the gather and, more so, the
# scatter's adds several times slower at LeNet's sizes (OW = 10 or 28).
# Params: kernel, stride, dilation (pairs), padding ((lo, hi), (lo, hi)), and for
# im2col the value padded cells hold (0 for convolution, -inf for max pooling).


def output_size(size, k, stride, dilation, lo, hi):
    return (size + lo + hi - dilation * (k - 1) - 1) // stride + 1


def _cols_shape(shape, kernel, stride, dilation, padding):
    n, c, h, w = shape
    oh, ow = (output_size(s, k, st, d, lo, hi) for s, k, st, d, (lo, hi) in
              zip((h, w), kernel, stride, dilation, padding))
    return (c, kernel[0], kernel[1], oh, ow, n)


def _offset_slices(i, j, out_shape, stride, dilation):
    """The (H, W) slices of the padded input that kernel offset (i, j) reads
    for an output of spatial shape ``out_shape`` = (OH, OW)."""
    (oh, ow), r, s = out_shape, i * dilation[0], j * dilation[1]
    return (slice(r, r + stride[0] * (oh - 1) + 1, stride[0]),
            slice(s, s + stride[1] * (ow - 1) + 1, stride[1]))


# Filled once, when `fgrad.compiler.conv_kernels` is imported (the compiler owns
# compiled code): "im2col" and "col2im" loops on NumPy arrays of the "dtypes"
# listed, working on the input laid out (C, H, W, N), and "planes", im2col's
# columns ordered (C, kh, kw, N, OH, OW) from NCHW. Without them (no llvmlite,
# another backend) the impls below slice. Nothing else writes here.
_CONV_KERNELS = {}


def register_conv_kernels(im2col, planes, col2im, dtypes):
    """Install the NumPy backend's compiled im2col and col2im loops (see
    `fgrad.compiler.conv_kernels`), for arrays of ``dtypes``."""
    _CONV_KERNELS.update(im2col=im2col, planes=planes, col2im=col2im,
                         dtypes=frozenset(dtypes))


def _compiled(x):
    return isinstance(x, np.ndarray) and x.dtype in _CONV_KERNELS.get("dtypes", ())


def _receptive_fields(x, kernel, stride, dilation, padding, pad_value, batch_last=True):
    """im2col's impl: (C, kh, kw, OH, OW, N); with ``batch_last=False`` the same
    columns ordered (C, kh, kw, N, OH, OW), as `conv2d`'s forward pass uses them."""
    xp = array_module(x)
    if _compiled(x):
        oh, ow = _cols_shape(x.shape, kernel, stride, dilation, padding)[3:5]
        if not batch_last:
            return _CONV_KERNELS["planes"](xp.ascontiguousarray(x), kernel, stride,
                                           dilation, padding, pad_value, (oh, ow))
        return _CONV_KERNELS["im2col"](xp.ascontiguousarray(x.transpose(1, 2, 3, 0)),
                                       kernel, stride, dilation, padding, pad_value,
                                       (oh, ow))
    h, w = x.shape[2:]
    (lo_h, hi_h), (lo_w, hi_w) = padding
    c, kh, kw, oh, ow, n = _cols_shape(x.shape, kernel, stride, dilation, padding)
    grid = (h + lo_h + hi_h, w + lo_w + hi_w)
    inner = (slice(lo_h, lo_h + h), slice(lo_w, lo_w + w))
    # one copy of the (small) input, padded, to (C, H, W, N) or (C, N, H, W);
    # then one strided copy per kernel offset (kh*kw of them), never one per
    # element. Plain slicing works on every backend, unlike stride tricks.
    if batch_last:
        padded = xp.full((c,) + grid + (n,), pad_value, x.dtype)
        padded[(slice(None),) + inner] = x.transpose(1, 2, 3, 0)
        lead, out = (slice(None),), xp.empty((c, kh, kw, oh, ow, n), x.dtype)
    else:
        padded = xp.full((c, n) + grid, pad_value, x.dtype)
        padded[(slice(None), slice(None)) + inner] = x.transpose(1, 0, 2, 3)
        lead, out = (slice(None),) * 2, xp.empty((c, kh, kw, n, oh, ow), x.dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, i, j] = padded[lead + _offset_slices(i, j, (oh, ow), stride, dilation)]
    return out


def _im2col_abstract(x, kernel, stride, dilation, padding, pad_value):
    if x.ndim != 4:
        raise ValueError(f"im2col expects an NCHW array, got shape {x.shape}")
    shape = _cols_shape(x.shape, kernel, stride, dilation, padding)
    if min(shape[3:5]) < 1:
        raise ValueError(f"a {kernel} window (dilation {dilation}) does not fit in "
                         f"the padded {x.shape[2:]} input")
    return ShapedArray(shape, x.dtype)


im2col_p = Primitive("im2col", _receptive_fields, _im2col_abstract, family=FAMILY)


def _col2im_impl(cols, shape, kernel, stride, dilation, padding):
    xp = array_module(cols)
    n, c, h, w = shape
    if _compiled(cols):
        xt = _CONV_KERNELS["col2im"](xp.ascontiguousarray(cols), (h, w), stride, dilation,
                                     padding)
        return xp.ascontiguousarray(xt.transpose(3, 0, 1, 2))
    (lo_h, hi_h), (lo_w, hi_w) = padding
    # accumulated as (C, H, W, N), whose slices have long contiguous runs (see
    # the layout above); one strided add per kernel offset, then one copy to NCHW
    out = xp.zeros((c, h + lo_h + hi_h, w + lo_w + hi_w, n), cols.dtype)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            out[(slice(None),) + _offset_slices(i, j, cols.shape[3:5], stride,
                                                dilation)] += cols[:, i, j]
    return xp.ascontiguousarray(out[:, lo_h:lo_h + h, lo_w:lo_w + w].transpose(3, 0, 1, 2))


def _col2im_abstract(cols, shape, kernel, stride, dilation, padding):
    expected = _cols_shape(shape, kernel, stride, dilation, padding)
    if cols.shape != expected:
        raise ValueError(f"col2im expects columns of shape {expected}, got {cols.shape}")
    return ShapedArray(shape, cols.dtype)


col2im_p = Primitive("col2im", _col2im_impl, _col2im_abstract, family=FAMILY)

im2col_p.def_vjp(lambda ct, ans, x, kernel, stride, dilation, padding, pad_value:
                 col2im(ct, get_aval(x).shape, kernel, stride, dilation, padding))
im2col_p.def_jvp(lambda t, ans, x, kernel, stride, dilation, padding, pad_value:
                 im2col(t, kernel, stride, dilation, padding, 0.0))
col2im_p.def_vjp(lambda ct, ans, cols, shape, kernel, stride, dilation, padding:
                 im2col(ct, kernel, stride, dilation, padding, 0.0))
col2im_p.def_jvp(lambda t, ans, cols, shape, kernel, stride, dilation, padding:
                 col2im(t, shape, kernel, stride, dilation, padding))


def _pair(v):
    return tuple(int(a) for a in v)


def im2col(x, kernel, stride=(1, 1), dilation=(1, 1), padding=((0, 0), (0, 0)),
           pad_value=0.0):
    """Every receptive field of NCHW ``x``, as an array (C, kh, kw, OH, OW, N)."""
    return im2col_p.bind(x, kernel=_pair(kernel), stride=_pair(stride),
                         dilation=_pair(dilation),
                         padding=tuple(_pair(p) for p in padding),
                         pad_value=float(pad_value))


def col2im(cols, shape, kernel, stride=(1, 1), dilation=(1, 1),
           padding=((0, 0), (0, 0))):
    """Scatter-add columns (C, kh, kw, OH, OW, N) back onto an NCHW ``shape``."""
    return col2im_p.bind(cols, shape=_pair(shape), kernel=_pair(kernel),
                         stride=_pair(stride), dilation=_pair(dilation),
                         padding=tuple(_pair(p) for p in padding))


# ---------------------------------------------------------------------------
# Pooling windows that tile the input
# ---------------------------------------------------------------------------
#
# windows(x) lays NCHW ``x`` (H, W multiples of the window) out as
# (kh*kw, N, C, OH, OW): window offset first, so a pooling reduction is
# elementwise over whole planes. unwindows is its inverse (and transpose). As
# reshape, transpose, reshape, the way back was a copy of a transposed view
# whose innermost axis is the window's width (2): NumPy copied it two elements
# at a time (0.7 ms for LeNet's first pooling gradient), where one strided
# copy per window offset takes 0.2 ms. Params: window (kh, kw).


def _windows_impl(x, window):
    xp = array_module(x)
    (n, c, h, w), (kh, kw) = x.shape, window
    split = x.reshape(n, c, h // kh, kh, w // kw, kw)
    out = xp.empty((kh, kw, n, c, h // kh, w // kw), x.dtype)
    for i in range(kh):
        for j in range(kw):
            out[i, j] = split[:, :, :, i, :, j]
    return out.reshape((kh * kw,) + out.shape[2:])


def _unwindows_impl(g, window):
    xp = array_module(g)
    (_, n, c, oh, ow), (kh, kw) = g.shape, window
    out = xp.empty((n, c, oh, kh, ow, kw), g.dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, :, :, i, :, j] = g[i * kw + j]
    return out.reshape(n, c, oh * kh, ow * kw)


def _windows_abstract(x, window):
    if x.ndim != 4 or x.shape[2] % window[0] or x.shape[3] % window[1]:
        raise ValueError(f"windows expects an NCHW array whose H and W are multiples "
                         f"of the window {window}, got shape {x.shape}")
    n, c, h, w = x.shape
    return ShapedArray((window[0] * window[1], n, c, h // window[0], w // window[1]),
                       x.dtype)


def _unwindows_abstract(g, window):
    if g.ndim != 5 or g.shape[0] != window[0] * window[1]:
        raise ValueError(f"unwindows expects (kh*kw, N, C, OH, OW) for the window "
                         f"{window}, got shape {g.shape}")
    _, n, c, oh, ow = g.shape
    return ShapedArray((n, c, oh * window[0], ow * window[1]), g.dtype)


windows_p = Primitive("windows", _windows_impl, _windows_abstract, family=FAMILY)
unwindows_p = Primitive("unwindows", _unwindows_impl, _unwindows_abstract, family=FAMILY)
windows_p.def_vjp(lambda ct, ans, x, window: unwindows(ct, window), reads=[set()])
windows_p.def_jvp(lambda t, ans, x, window: windows(t, window))
unwindows_p.def_vjp(lambda ct, ans, g, window: windows(ct, window), reads=[set()])
unwindows_p.def_jvp(lambda t, ans, g, window: unwindows(t, window))


def windows(x, window):
    """The tiling ``window`` (kh, kw) of NCHW ``x`` as (kh*kw, N, C, OH, OW),
    window offset first (H and W multiples of the window).

    >>> windows(np.arange(4.0).reshape(1, 1, 2, 2), (1, 2))[:, 0, 0]
    array([[[0.],
            [2.]],
    <BLANKLINE>
           [[1.],
            [3.]]])
    """
    return windows_p.bind(x, window=_pair(window))


def unwindows(g, window):
    """`windows`' inverse: (kh*kw, N, C, OH, OW) back to NCHW.

    >>> x = np.arange(8.0).reshape(1, 2, 2, 2)
    >>> bool((unwindows(windows(x, (2, 1)), (2, 1)) == x).all())
    True
    """
    return unwindows_p.bind(g, window=_pair(window))


# ---------------------------------------------------------------------------
# Max pooling over windows that tile the input
# ---------------------------------------------------------------------------
#
# max_pool(x) is max(windows(x), 0) as one primitive, so that its gradient
# can be one pass too: max_pool_scatter(ct, x, ans) sends each window's
# cotangent to the elements equal to its maximum, shared equally among ties
# (``max``'s rule), and writes the NCHW result directly; its transpose in ct,
# max_pool_gather(t, x, ans), is the JVP. As max, windows, equal, sum, divide,
# multiply and unwindows, LeNet's first pooling gradient made seven passes
# over the layer's activations (about 1.5 ms a step on this machine). Both
# weights are piecewise constant in x and ans: their derivative there is zero
# wherever it is defined, as ``equal``'s is. Params: window (kh, kw).

# Filled once, when `fgrad.compiler.pool_kernels` is imported: "max" and
# "scatter" loops on NumPy arrays of the "dtypes" listed, for windows
# of at most "max_area" elements. Nothing else writes here.
_POOL_KERNELS = {}


def register_pool_kernels(max_pool, scatter, dtypes, max_area):
    """Install the NumPy backend's compiled max-pooling loops (see
    `fgrad.compiler.pool_kernels`) for arrays of ``dtypes`` and windows of at
    most ``max_area`` elements."""
    _POOL_KERNELS.update(max=max_pool, scatter=scatter, dtypes=frozenset(dtypes),
                         max_area=max_area)


def _pool_compiled(window, *arrays):
    dtype = arrays[0].dtype
    return (window[0] * window[1] <= _POOL_KERNELS.get("max_area", 0)
            and dtype in _POOL_KERNELS["dtypes"]
            and all(isinstance(a, np.ndarray) and a.dtype == dtype for a in arrays))


def _max_pool_impl(x, window):
    if _pool_compiled(window, x):
        return _POOL_KERNELS["max"](x, window)
    return _windows_impl(x, window).max(axis=0)


def _max_pool_weights(x, ans, window, dtype):
    """Each window element's share of its window's derivative: 1/k for the k
    elements equal to the maximum, 0 elsewhere (kh*kw, N, C, OH, OW)."""
    hit = (_windows_impl(x, window) == ans).astype(dtype)
    return hit / hit.sum(axis=0)


def _max_pool_scatter_impl(ct, x, ans, window):
    if _pool_compiled(window, ct, x, ans):
        return _POOL_KERNELS["scatter"](ct, x, ans, window)
    return _unwindows_impl(ct * _max_pool_weights(x, ans, window, ct.dtype), window)


def _max_pool_gather_impl(t, x, ans, window):
    return (_windows_impl(t, window) * _max_pool_weights(x, ans, window, t.dtype)).sum(0)


def _max_pool_abstract(x, window):
    return ShapedArray(_windows_abstract(x, window).shape[1:], x.dtype)


def _max_pool_scatter_abstract(ct, x, ans, window):
    pooled = _max_pool_abstract(x, window).shape
    if ct.shape != pooled or ans.shape != pooled:
        raise ValueError(f"max_pool_scatter expects ct and ans of the pooled shape "
                         f"{pooled}, got {ct.shape} and {ans.shape}")
    return ShapedArray(x.shape, ct.dtype)


def _max_pool_gather_abstract(t, x, ans, window):
    if t.shape != x.shape or ans.shape != _max_pool_abstract(x, window).shape:
        raise ValueError(f"max_pool_gather expects t of x's shape {x.shape} and ans "
                         f"of the pooled shape, got {t.shape} and {ans.shape}")
    return ShapedArray(ans.shape, t.dtype)


def _no_derivative(*args, **params):
    return None          # the weights are piecewise constant in x and ans


max_pool_p = Primitive("max_pool", _max_pool_impl, _max_pool_abstract, family=FAMILY)
max_pool_scatter_p = Primitive("max_pool_scatter", _max_pool_scatter_impl,
                               _max_pool_scatter_abstract, family=FAMILY)
max_pool_gather_p = Primitive("max_pool_gather", _max_pool_gather_impl,
                              _max_pool_gather_abstract, family=FAMILY)
max_pool_p.def_vjp(lambda ct, ans, x, window: max_pool_scatter(ct, x, ans, window),
                   reads=[{0, "ans"}])
max_pool_p.def_jvp(lambda t, ans, x, window: max_pool_gather(t, x, ans, window))


def max_pool(x, window):
    """The maximum of each tiling ``window`` (kh, kw) of NCHW ``x`` (H and W
    multiples of the window), (N, C, OH, OW).

    >>> max_pool(np.arange(8.0).reshape(1, 1, 2, 4), (2, 2))
    array([[[[5., 7.]]]])
    """
    return max_pool_p.bind(x, window=_pair(window))


def max_pool_scatter(ct, x, ans, window):
    """`max_pool`'s VJP: each window's cotangent ``ct`` sent to the elements of
    ``x`` equal to its maximum ``ans``, shared equally among ties (NCHW).

    >>> x = np.array([[[[1.0, 3.0, 3.0, 0.0]]]])
    >>> max_pool_scatter(np.array([[[[4.0, 2.0]]]]), x, max_pool(x, (1, 2)), (1, 2))
    array([[[[0., 4., 2., 0.]]]])
    """
    return max_pool_scatter_p.bind(ct, x, ans, window=_pair(window))


def max_pool_gather(t, x, ans, window):
    """`max_pool`'s JVP, `max_pool_scatter`'s transpose: each window's
    tangent ``t`` at its maximum (the mean of ``t`` over tied maxima).

    >>> x = np.array([[[[1.0, 3.0, 3.0, 3.0]]]])
    >>> t = np.array([[[[5.0, 6.0, 1.0, 2.0]]]])
    >>> max_pool_gather(t, x, max_pool(x, (1, 2)), (1, 2))
    array([[[[6. , 1.5]]]])
    """
    return max_pool_gather_p.bind(t, x, ans, window=_pair(window))


def _linear_rules(prim, itself, transpose):
    """Rules of scatter or gather, linear in their first argument (whose
    transpose is the other): its tangent maps through ``itself``, its
    cotangent through ``transpose``."""
    prim.def_vjp(lambda ct, ans, v, x, pooled, window: transpose(ct, x, pooled, window),
                 _no_derivative, _no_derivative, reads=[{1, 2}, set(), set()])
    prim.def_jvp(lambda t, ans, v, x, pooled, window: itself(t, x, pooled, window),
                 _no_derivative, _no_derivative)


_linear_rules(max_pool_scatter_p, max_pool_scatter, max_pool_gather)
_linear_rules(max_pool_gather_p, max_pool_gather, max_pool_scatter)


# ---------------------------------------------------------------------------
# Convolution: one matrix product over the receptive fields
# ---------------------------------------------------------------------------
#
# conv2d(x, w) = w.reshape(G, O/G, C/G*kh*kw) @ im2col(x).reshape(G, C/G*kh*kw,
# OH*OW*N), as (N, O, OH, OW). It is a primitive, not that composition, for
# memory: the composition keeps the columns (kh*kw times the input) alive from
# the forward pass to the weight's gradient, where this keeps only x, and its
# weight rule gathers them again (one more im2col). In the LeNet benchmark the
# columns of the two layers were 18 MB of a 27 MB peak; without them the peak is
# 15 MB, and the allocator no longer hands the pages back between steps, which
# had cost some 3,000 page faults (several milliseconds) per step.
# The rules are that composition's rules: the input's cotangent is a col2im, the
# weight's a product with im2col(x); the JVP is the convolution of the tangents.
# Params: stride, dilation (pairs), padding ((lo, hi), (lo, hi)), groups.


def _conv_matrix(w, groups):
    """w (O, C/G, kh, kw) as (G, O/G, C/G*kh*kw), or (O, C*kh*kw) for one group."""
    o = get_aval(w).shape[0]
    lead = (groups,) if groups > 1 else ()
    return reshape(w, lead + (o // groups, -1))


def _conv_ct_matrix(ct, groups):
    """An (N, O, OH, OW) cotangent as (G, O/G, OH*OW*N) columns, im2col's order."""
    n, o, oh, ow = get_aval(ct).shape
    lead = (groups,) if groups > 1 else ()
    return reshape(transpose(ct, (1, 2, 3, 0)), lead + (o // groups, oh * ow * n))


def _conv2d_impl(x, w, stride, dilation, padding, groups):
    xp = array_module(x, w)
    o, cg, kh, kw = w.shape
    # the columns ordered (N, OH, OW) (not im2col's (OH, OW, N)): the product
    # is then (O, N, OH*OW), and its copy to NCHW moves whole OH*OW planes,
    # where from (O, OH, OW, N) it moves one element at a time
    cols = _receptive_fields(x, (kh, kw), stride, dilation, padding, 0.0, batch_last=False)
    n, oh, ow = cols.shape[3:]
    # 2-d matmul when there is one group: NumPy sends 2-d products to BLAS
    lead = (groups,) if groups > 1 else ()
    out = xp.matmul(w.reshape(lead + (o // groups, cg * kh * kw)),
                    cols.reshape(lead + (cg * kh * kw, n * oh * ow)))
    # one copy to NCHW order: the elementwise code that follows (bias, relu,
    # their fused gradients) runs on flat C-ordered arrays, and would copy a
    # view of another order once for each kernel reading it
    return xp.ascontiguousarray(out.reshape(o, n, oh, ow).transpose(1, 0, 2, 3))


def _conv2d_abstract(x, w, stride, dilation, padding, groups):
    if x.ndim != 4 or w.ndim != 4 or x.shape[1] != w.shape[1] * groups \
            or w.shape[0] % groups:
        raise ValueError(f"conv2d expects x (N, C, H, W) and w (O, C/{groups}, kh, kw) "
                         f"with O divisible by {groups}, got {x.shape} and {w.shape}")
    oh, ow, n = _im2col_abstract(x, w.shape[2:], stride, dilation, padding, 0.0).shape[3:]
    return ShapedArray((n, w.shape[0], oh, ow), np.result_type(dummy(x), dummy(w)))


conv2d_p = Primitive("conv2d", _conv2d_impl, _conv2d_abstract, family=FAMILY)


def _conv2d_vjp_x(ct, ans, x, w, stride, dilation, padding, groups):
    c, kh, kw, oh, ow, n = _cols_shape(get_aval(x).shape, get_aval(w).shape[2:], stride,
                                       dilation, padding)
    cols_ct = matmul(swap_last_axes(_conv_matrix(w, groups)), _conv_ct_matrix(ct, groups))
    cols_ct = reshape(cols_ct, (c, kh, kw, oh, ow, n))
    return unbroadcast(col2im(cols_ct, get_aval(x).shape, (kh, kw), stride, dilation,
                              padding), x)


def _conv2d_vjp_w(ct, ans, x, w, stride, dilation, padding, groups):
    o, cg, kh, kw = get_aval(w).shape
    cols = im2col(x, (kh, kw), stride, dilation, padding, 0.0)
    lead = (groups,) if groups > 1 else ()
    cols = reshape(cols, lead + (cg * kh * kw, -1))
    ct_w = matmul(_conv_ct_matrix(ct, groups), swap_last_axes(cols))
    return unbroadcast(reshape(ct_w, (o, cg, kh, kw)), w)


conv2d_p.def_vjp(_conv2d_vjp_x, _conv2d_vjp_w, reads=[{1}, {0}])
conv2d_p.def_jvp(lambda t, ans, x, w, **params: conv2d_p.bind(t, w, **params),
                 lambda t, ans, x, w, **params: conv2d_p.bind(x, t, **params))


def conv2d(x, w, stride=(1, 1), dilation=(1, 1), padding=((0, 0), (0, 0)), groups=1):
    """The cross-correlation of NCHW ``x`` with ``w`` (O, C/groups, kh, kw), (N, O, OH, OW)."""
    return conv2d_p.bind(x, w, stride=_pair(stride), dilation=_pair(dilation),
                         padding=tuple(_pair(p) for p in padding), groups=int(groups))


def as_float(x, like):
    """``x`` (booleans, integers) converted to the floating dtype of ``like``."""
    return convert_element_type(x, get_aval(like).dtype)


# ---------------------------------------------------------------------------
# Batching rules (vmap)
# ---------------------------------------------------------------------------

def _softmax_batch(args, dims, *, axis):
    (x,), (d,) = args, dims
    return softmax_p.bind(x, axis=tuple(a + (a >= d) for a in axis)), d


def _merge_into(x, d, target):
    """Fold batch axis ``d`` of ``x`` into axis ``target`` (of the unbatched
    array), batch-major: ``(..., B, N, ...) -> (..., B*N, ...)``."""
    x = move_axis(x, d, target)
    shape = get_aval(x).shape
    return reshape(x, shape[:target] + (shape[target] * shape[target + 1],)
                   + shape[target + 2:]), shape[target]


def _split_axis(x, axis, size):
    shape = get_aval(x).shape
    return reshape(x, shape[:axis] + (size, shape[axis] // size) + shape[axis + 1:])


def _im2col_batch(args, dims, **params):
    # examples become more images: (B, N, C, H, W) -> (B*N, C, H, W)
    (x,), (d,) = args, dims
    x, size = _merge_into(x, d, 0)
    return _split_axis(im2col_p.bind(x, **params), 5, size), 5


def _col2im_batch(args, dims, *, shape, **params):
    (cols,), (d,) = args, dims
    cols, size = _merge_into(cols, d, 5)
    out = col2im_p.bind(cols, shape=(size * shape[0],) + tuple(shape[1:]), **params)
    return _split_axis(out, 0, size), 0


def _windows_batch(args, dims, window):
    # examples become more images: (B, N, C, H, W) -> (B*N, C, H, W)
    (x,), (d,) = args, dims
    x, size = _merge_into(x, d, 0)
    return _split_axis(windows_p.bind(x, window=window), 1, size), 1


def _unwindows_batch(args, dims, window):
    (g,), (d,) = args, dims
    g, size = _merge_into(g, d, 1)
    return _split_axis(unwindows_p.bind(g, window=window), 0, size), 0


def _max_pool_batch(args, dims, window):
    (x,), (d,) = args, dims
    x, size = _merge_into(x, d, 0)
    return _split_axis(max_pool_p.bind(x, window=window), 0, size), 0


def _max_pool_linear_batch(prim):
    """scatter's and gather's rule: every argument's examples become more
    images, (B, N, ...) -> (B*N, ...); an unbatched one is broadcast first."""
    def rule(args, dims, window):
        size = axis_size(args, dims)
        merged = [_merge_into(batch_to_front(a, d, size), 0, 0)[0] for a, d in zip(args, dims)]
        return _split_axis(prim.bind(*merged, window=window), 0, size), 0
    return rule


def _conv2d_batch(args, dims, *, groups, **params):
    (x, w), (dx, dw) = args, dims
    if dw is None:
        # examples become more images: (B, N, C, H, W) -> (B*N, C, H, W)
        x, size = _merge_into(x, dx, 0)
        return _split_axis(conv2d_p.bind(x, w, groups=groups, **params), 0, size), 0
    # a batch of kernels: each member is a group of its own, reading its own
    # copy of the input's channels, (N, B*C, H, W) and (B*O, C/G, kh, kw)
    size = axis_size(args, dims)
    x = batch_to_front(x, dx, size)
    x, _ = _merge_into(x, 0, 1)
    w, _ = _merge_into(w, dw, 0)
    out = conv2d_p.bind(x, w, groups=groups * size, **params)
    return _split_axis(out, 1, size), 1


def _install_batch_rules():
    for prim in (relu_p, sigmoid_p, softplus_p, normal_cdf_p):
        prim.batch = unary_batch_rule(prim)
    logsumexp_p.batch = reduction_batch_rule(logsumexp_p)
    softmax_p.batch = _softmax_batch
    im2col_p.batch = _im2col_batch
    col2im_p.batch = _col2im_batch
    windows_p.batch = _windows_batch
    unwindows_p.batch = _unwindows_batch
    max_pool_p.batch = _max_pool_batch
    max_pool_scatter_p.batch = _max_pool_linear_batch(max_pool_scatter_p)
    max_pool_gather_p.batch = _max_pool_linear_batch(max_pool_gather_p)
    conv2d_p.batch = _conv2d_batch


_install_batch_rules()


# Families use each other's functions in their rules; importing them last
# makes the cycle harmless (every name above exists by then).
from fgrad.primitives.products import matmul  # noqa: E402
from fgrad.primitives.shape import reshape, swap_last_axes, transpose  # noqa: E402
