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
the other, so a convolution's input gradient is a scatter and every derivative of
any order stays inside these two primitives and ``matmul``.
"""
import math

import numpy as np

from fgrad.core.backend import array_module, scipy_module
from fgrad.primitives.batching import move_axis, reduction_batch_rule, unary_batch_rule
from fgrad.core.trace import Primitive, ShapedArray, get_aval

from fgrad.primitives.base import normalize_axis
from fgrad.primitives.elementwise import (
    convert_element_type, equal, exp, greater, where,
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
# (C, kh, kw, N, OH, OW). Putting (C, kh, kw) first makes a convolution one
# matrix product per group, ``w.reshape(G, O/G, C/G*kh*kw) @
# cols.reshape(G, C/G*kh*kw, N*OH*OW)``, with no transpose of the big operand.
# Params: kernel, stride, dilation (pairs), padding ((lo, hi), (lo, hi)), and for
# im2col the value padded cells hold (0 for convolution, -inf for max pooling).


def output_size(size, k, stride, dilation, lo, hi):
    return (size + lo + hi - dilation * (k - 1) - 1) // stride + 1


def _cols_shape(shape, kernel, stride, dilation, padding):
    n, c, h, w = shape
    oh, ow = (output_size(s, k, st, d, lo, hi) for s, k, st, d, (lo, hi) in
              zip((h, w), kernel, stride, dilation, padding))
    return (c, kernel[0], kernel[1], n, oh, ow)


def _im2col_impl(x, kernel, stride, dilation, padding, pad_value):
    xp = array_module(x)
    if any(lo or hi for lo, hi in padding):
        x = xp.pad(x, ((0, 0), (0, 0)) + tuple(padding), constant_values=pad_value)
    shape = _cols_shape(x.shape, kernel, stride, dilation, ((0, 0), (0, 0)))
    oh, ow = shape[-2:]
    out = xp.empty(shape, x.dtype)
    # one strided copy per kernel offset (kh*kw of them), never one per element;
    # plain slicing works on every backend, unlike stride tricks
    for i in range(kernel[0]):
        r = i * dilation[0]
        for j in range(kernel[1]):
            s = j * dilation[1]
            out[:, i, j] = x[:, :, r:r + stride[0] * (oh - 1) + 1:stride[0],
                             s:s + stride[1] * (ow - 1) + 1:stride[1]].transpose(1, 0, 2, 3)
    return out


def _im2col_abstract(x, kernel, stride, dilation, padding, pad_value):
    if x.ndim != 4:
        raise ValueError(f"im2col expects an NCHW array, got shape {x.shape}")
    shape = _cols_shape(x.shape, kernel, stride, dilation, padding)
    if min(shape[-2:]) < 1:
        raise ValueError(f"a {kernel} window (dilation {dilation}) does not fit in "
                         f"the padded {x.shape[2:]} input")
    return ShapedArray(shape, x.dtype)


im2col_p = Primitive("im2col", _im2col_impl, _im2col_abstract, family=FAMILY)


def _col2im_impl(cols, shape, kernel, stride, dilation, padding):
    xp = array_module(cols)
    n, c, h, w = shape
    (lo_h, hi_h), (lo_w, hi_w) = padding
    out = xp.zeros((n, c, h + lo_h + hi_h, w + lo_w + hi_w), cols.dtype)
    oh, ow = cols.shape[-2:]
    # one strided add per kernel offset (kh*kw of them), never one per element
    for i in range(kernel[0]):
        r = i * dilation[0]
        for j in range(kernel[1]):
            s = j * dilation[1]
            out[:, :, r:r + stride[0] * (oh - 1) + 1:stride[0],
                s:s + stride[1] * (ow - 1) + 1:stride[1]] += \
                cols[:, i, j].transpose(1, 0, 2, 3)
    return out[:, :, lo_h:lo_h + h, lo_w:lo_w + w]


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
    """Every receptive field of NCHW ``x``, as an array (C, kh, kw, N, OH, OW)."""
    return im2col_p.bind(x, kernel=_pair(kernel), stride=_pair(stride),
                         dilation=_pair(dilation),
                         padding=tuple(_pair(p) for p in padding),
                         pad_value=float(pad_value))


def col2im(cols, shape, kernel, stride=(1, 1), dilation=(1, 1),
           padding=((0, 0), (0, 0))):
    """Scatter-add columns (C, kh, kw, N, OH, OW) back onto an NCHW ``shape``."""
    return col2im_p.bind(cols, shape=_pair(shape), kernel=_pair(kernel),
                         stride=_pair(stride), dilation=_pair(dilation),
                         padding=tuple(_pair(p) for p in padding))


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
    return _split_axis(im2col_p.bind(x, **params), 3, size), 3


def _col2im_batch(args, dims, *, shape, **params):
    (cols,), (d,) = args, dims
    cols, size = _merge_into(cols, d, 3)
    out = col2im_p.bind(cols, shape=(size * shape[0],) + tuple(shape[1:]), **params)
    return _split_axis(out, 0, size), 0


def _install_batch_rules():
    for prim in (relu_p, sigmoid_p, softplus_p, normal_cdf_p):
        prim.batch = unary_batch_rule(prim)
    logsumexp_p.batch = reduction_batch_rule(logsumexp_p)
    softmax_p.batch = _softmax_batch
    im2col_p.batch = _im2col_batch
    col2im_p.batch = _col2im_batch


_install_batch_rules()


# Families use each other's functions in their rules; importing them last
# makes the cycle harmless (every name above exists by then).
from fgrad.primitives.shape import reshape  # noqa: E402
