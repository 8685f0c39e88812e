"""Neural-network functions: activations, losses, normalisation, convolution.

Everything here is a pure function of arrays: no layer objects, no hidden state.
Randomness (dropout, initializers) comes from an explicit `fgrad.random` key
(eagerly, a ``numpy.random.Generator`` or an integer seed too), and batch
normalisation returns its updated statistics instead of storing them. Each
function is either a primitive with its own fused rules (``primitives/nn.py``)
or a composition of primitives, so every function here works under ``grad``,
``jvp`` and their compositions.

>>> import numpy as np, fgrad
>>> logits = np.array([[2.0, 0.5, -1.0]])
>>> round(float(fgrad.nn.cross_entropy(logits, np.array([0]))), 4)
0.2413
"""
import math

import numpy as np

from fgrad import numpy as _fnp
from fgrad import random
from fgrad.core.errors import NNArgumentError
from fgrad.core.trace import get_aval
from fgrad.primitives import nn as _p
from fgrad.primitives.base import normalize_axis
from fgrad.primitives.creation import stop_gradient
from fgrad.primitives.elementwise import (
    convert_element_type,
    equal,
    expm1,
    greater,
    greater_equal,
    sqrt,
    tanh,
    where,
)
from fgrad.primitives.indexing import getitem
from fgrad.primitives.reductions import max_, mean, sum_
from fgrad.primitives.shape import expand_dims, reshape, transpose

__all__ = [
    "relu", "leaky_relu", "elu", "gelu", "silu", "swish", "sigmoid", "softplus",
    "log_sigmoid", "rsqrt", "softmax", "log_softmax", "logsumexp", "one_hot",
    "cross_entropy", "binary_cross_entropy_with_logits", "mse", "layer_norm",
    "rms_norm", "batch_norm", "dropout", "embedding", "conv1d", "conv2d",
    "max_pool2d", "avg_pool2d", "glorot_normal", "glorot_uniform", "he_normal",
    "he_uniform",
]

# ---------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------


def relu(x):
    """Rectified linear unit ``max(x, 0)``; its derivative at 0 is 0.

    >>> relu(np.array([-1.0, 0.0, 2.0]))
    array([0., 0., 2.])
    """
    return _p.relu(x)


def leaky_relu(x, negative_slope=0.01):
    """``x`` where ``x >= 0``, ``negative_slope * x`` elsewhere.

    >>> leaky_relu(np.array([-2.0, 3.0]), 0.1)
    array([-0.2,  3. ])
    """
    return where(greater_equal(x, 0), x, x * negative_slope)


def elu(x, alpha=1.0):
    """Exponential linear unit: ``x`` for ``x > 0``, ``alpha * (exp(x) - 1)`` else.

    >>> elu(np.array([-1.0, 2.0])).round(4)
    array([-0.6321,  2.    ])
    """
    # expm1 sees no positive x, so a large one cannot overflow it (an overflow
    # there would poison the gradient with inf * 0 = nan); a where, not
    # minimum(x, 0), so that at 0 expm1's whole slope counts, not half of it
    positive = greater(x, 0)
    return where(positive, x, alpha * expm1(where(positive, 0, x)))


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def gelu(x, approximate=False):
    """Gaussian error linear unit ``x * Phi(x)``.

    ``approximate=True`` uses the tanh form
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))``.

    >>> gelu(np.array([1.0])).round(4), gelu(np.array([1.0]), approximate=True).round(4)
    (array([0.8413]), array([0.8412]))
    """
    if approximate:
        inner = _SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x))
        return 0.5 * x * (1 + tanh(inner))
    return x * _p.normal_cdf(x)


def sigmoid(x):
    """The logistic function ``1 / (1 + exp(-x))``, without overflow.

    >>> sigmoid(np.array([0.0, 1000.0, -1000.0]))
    array([0.5, 1. , 0. ])
    """
    return _p.sigmoid(x)


def silu(x):
    """Sigmoid linear unit (swish) ``x * sigmoid(x)``.

    >>> silu(np.array([0.0, 1.0])).round(4)
    array([0.    , 0.7311])
    """
    return x * _p.sigmoid(x)


swish = silu


def softplus(x):
    """``log(1 + exp(x))`` without overflow; its derivative is `sigmoid`.

    >>> softplus(np.array([0.0, 1000.0])).round(4).tolist()
    [0.6931, 1000.0]
    """
    return _p.softplus(x)


def log_sigmoid(x):
    """``log(sigmoid(x)) = -softplus(-x)``, finite for very negative ``x``.

    >>> log_sigmoid(np.array([-1000.0]))
    array([-1000.])
    """
    return -_p.softplus(-x)


def rsqrt(x):
    """``1 / sqrt(x)``.

    >>> rsqrt(np.array([4.0]))
    array([0.5])
    """
    return 1 / sqrt(x)


# ---------------------------------------------------------------------------
# Normalised exponentials
# ---------------------------------------------------------------------------


def logsumexp(x, axis=None, keepdims=False):
    """``log(sum(exp(x), axis))``, stable for large inputs (value and gradient).

    >>> round(float(logsumexp(np.array([1000.0, 1000.0]))) - 1000.0, 6)
    0.693147
    """
    return _p.logsumexp(x, axis, keepdims)


def softmax(x, axis=-1):
    """``exp(x) / sum(exp(x), axis)``; rows sum to one.

    >>> softmax(np.array([0.0, np.log(3.0)]))
    array([0.25, 0.75])
    """
    return _p.softmax(x, axis)


def log_softmax(x, axis=-1):
    """``x - logsumexp(x, axis)``, stable where ``log(softmax(x))`` is not.

    >>> log_softmax(np.array([0.0, 0.0])).round(4)
    array([-0.6931, -0.6931])
    """
    return x - _p.logsumexp(x, axis, keepdims=True)


def one_hot(labels, num_classes, dtype=np.float64):
    """One-hot encoding of integer ``labels`` along a new last axis.

    Labels outside ``[0, num_classes)`` encode as all zeros.

    >>> one_hot(np.array([0, 2]), 3)
    array([[1., 0., 0.],
           [0., 0., 1.]])
    """
    labels = _integer_labels(labels, "one_hot")
    classes = _like(list(range(int(num_classes))), labels)
    return convert_element_type(equal(expand_dims(labels, -1), classes), dtype)


def _like(host_value, like):
    """A host constant (class indices, labels, a mask) on ``like``'s backend: a
    deliberate copy to the device when ``like`` lives there."""
    return _fnp.asarray(host_value, like=like)


def _integer_labels(labels, fname):
    if not hasattr(labels, "dtype") and not isinstance(labels, (list, tuple, int)):
        raise NNArgumentError(f"{fname}: labels must be an integer array, got "
                              f"{type(labels).__name__}")
    if not hasattr(labels, "dtype"):
        labels = _like(labels, None)
    if get_aval(labels).dtype.kind not in "iu":
        raise NNArgumentError(
            f"{fname}: labels must have an integer dtype, got "
            f"{get_aval(labels).dtype}. Convert class indices with "
            "labels.astype(int); pass probabilities as a float array of the "
            "logits' shape instead.")
    return labels


# ---------------------------------------------------------------------------
# Losses
# ---------------------------------------------------------------------------

_REDUCTIONS = ("mean", "sum", "none")


def _reduce(loss, reduction, fname):
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return sum_(loss)
    if reduction == "none":
        return loss
    raise NNArgumentError(f"{fname}: reduction must be one of {_REDUCTIONS}, "
                          f"got {reduction!r}")


def cross_entropy(logits, targets, *, axis=-1, label_smoothing=0.0, reduction="mean"):
    """Softmax cross-entropy between ``logits`` and ``targets``.

    ``targets`` are either integer class indices (the shape of ``logits``
    without ``axis``) or probabilities (the shape of ``logits``).
    ``label_smoothing=eps`` mixes the targets with the uniform distribution:
    ``(1 - eps) * targets + eps / num_classes``. ``reduction`` is ``"mean"``
    (over examples), ``"sum"`` or ``"none"``.

    >>> logits = np.array([[0.0, 0.0], [0.0, 0.0]])
    >>> round(float(cross_entropy(logits, np.array([0, 1]))), 4)
    0.6931
    """
    aval = get_aval(logits)
    axis = normalize_axis(axis, aval.ndim)[0]
    classes = aval.shape[axis]
    if not hasattr(targets, "dtype"):
        targets = _like(targets, None)
    t_aval = get_aval(targets)
    if t_aval.dtype.kind in "iu":
        expected = aval.shape[:axis] + aval.shape[axis + 1:]
        if t_aval.shape != expected:
            raise NNArgumentError(
                f"cross_entropy: integer labels must have shape {expected} (logits "
                f"{aval.shape} without axis {axis}), got {t_aval.shape}")
        # integer labels made on the host go to the logits' device, like indices
        targets = one_hot(_like(targets, logits), classes, aval.dtype)
        if axis != aval.ndim - 1:
            targets = _move_last_to(targets, axis)
    elif t_aval.shape != aval.shape:
        raise NNArgumentError(
            f"cross_entropy: probability targets must have the logits' shape "
            f"{aval.shape}, got {t_aval.shape}; pass class indices as integers")
    if label_smoothing:
        if not 0.0 <= label_smoothing <= 1.0:
            raise NNArgumentError(f"cross_entropy: label_smoothing must lie in "
                                  f"[0, 1], got {label_smoothing}")
        targets = targets * (1.0 - label_smoothing) + label_smoothing / classes
    loss = -sum_(targets * log_softmax(logits, axis), axis)
    return _reduce(loss, reduction, "cross_entropy")


def _move_last_to(x, axis):
    ndim = get_aval(x).ndim
    order = list(range(ndim - 1))
    order.insert(axis, ndim - 1)
    return transpose(x, tuple(order))


def binary_cross_entropy_with_logits(logits, targets, *, reduction="mean"):
    """``-(y log sigmoid(x) + (1 - y) log(1 - sigmoid(x)))``, computed stably
    as ``softplus(x) - x y``.

    >>> round(float(binary_cross_entropy_with_logits(np.array([0.0]), np.array([1.0]))), 4)
    0.6931
    """
    if get_aval(logits).shape != get_aval(targets).shape:
        raise NNArgumentError(
            f"binary_cross_entropy_with_logits: logits {get_aval(logits).shape} and "
            f"targets {get_aval(targets).shape} must have the same shape")
    return _reduce(_p.softplus(logits) - logits * targets, reduction,
                   "binary_cross_entropy_with_logits")


def mse(predictions, targets, *, reduction="mean"):
    """Squared error ``(predictions - targets) ** 2``, averaged by default.

    >>> float(mse(np.array([1.0, 3.0]), np.array([0.0, 0.0])))
    5.0
    """
    diff = predictions - targets
    return _reduce(diff * diff, reduction, "mse")


# ---------------------------------------------------------------------------
# Normalisation
# ---------------------------------------------------------------------------


def layer_norm(x, scale=None, offset=None, *, axis=-1, eps=1e-5):
    """Normalise over ``axis`` to zero mean and unit variance, then
    ``* scale + offset`` (each broadcasting against the normalised axes).

    >>> layer_norm(np.array([[1.0, 3.0]])).round(3)
    array([[-1.,  1.]])
    """
    mu = mean(x, axis, keepdims=True)
    centred = x - mu
    var = mean(centred * centred, axis, keepdims=True)
    y = centred * rsqrt(var + eps)
    return _affine(y, scale, offset)


def rms_norm(x, scale=None, *, axis=-1, eps=1e-6):
    """Divide by the root mean square over ``axis``, then ``* scale``.

    >>> rms_norm(np.array([[3.0, 4.0]])).round(3)
    array([[0.849, 1.131]])
    """
    y = x * rsqrt(mean(x * x, axis, keepdims=True) + eps)
    return _affine(y, scale, None)


def _affine(y, scale, offset):
    if scale is not None:
        y = y * scale
    if offset is not None:
        y = y + offset
    return y


def batch_norm(x, scale, offset, running_mean, running_var, *, training,
               momentum=0.9, eps=1e-5, axis=1):
    """Batch normalisation over every axis but the channel ``axis``.

    Returns ``(y, (new_running_mean, new_running_var))``. In training the batch's
    statistics normalise ``x`` and the running ones move towards them
    (``new = momentum * old + (1 - momentum) * batch``, the variance unbiased);
    otherwise the running statistics normalise and come back unchanged. The
    running statistics carry no gradient.

    >>> x = np.array([[1.0], [3.0]])
    >>> y, (m, v) = batch_norm(x, None, None, np.zeros(1), np.ones(1),
    ...                        training=True, axis=1)
    >>> y.round(3), m, v
    (array([[-1.],
           [ 1.]]), array([0.2]), array([1.1]))
    """
    aval = get_aval(x)
    axis = normalize_axis(axis, aval.ndim)[0]
    reduce_axes = tuple(i for i in range(aval.ndim) if i != axis)
    channels = aval.shape[axis]
    stat_shape = tuple(channels if i == axis else 1 for i in range(aval.ndim))
    for name, value in (("running_mean", running_mean), ("running_var", running_var)):
        if get_aval(value).shape != (channels,):
            raise NNArgumentError(f"batch_norm: {name} must have shape ({channels},) "
                                  f"(one entry per channel on axis {axis}), got "
                                  f"{get_aval(value).shape}")
    if training:
        mu = mean(x, reduce_axes, keepdims=True)
        centred = x - mu
        var = mean(centred * centred, reduce_axes, keepdims=True)
        count = aval.size // channels
        batch_mean = stop_gradient(reshape(mu, (channels,)))
        batch_var = stop_gradient(reshape(var, (channels,))) * (count / max(count - 1, 1))
        new_stats = (momentum * running_mean + (1 - momentum) * batch_mean,
                     momentum * running_var + (1 - momentum) * batch_var)
    else:
        centred = x - reshape(running_mean, stat_shape)
        var = reshape(running_var, stat_shape)
        new_stats = (running_mean, running_var)
    y = centred * rsqrt(var + eps)
    if scale is not None:
        y = y * reshape(scale, stat_shape)
    if offset is not None:
        y = y + reshape(offset, stat_shape)
    return y, new_stats


# ---------------------------------------------------------------------------
# Randomness: always explicit
# ---------------------------------------------------------------------------


def _is_key(source):
    aval = get_aval(source) if hasattr(source, "dtype") else None
    return aval is not None and aval.dtype == np.uint32 and aval.shape == (2,)


def _generator(rng, fname):
    """The NumPy Generator behind ``rng`` (a Generator or an int seed), drawn
    from eagerly; under jit or vmap a Generator is refused."""
    if isinstance(rng, (np.random.Generator, np.random.RandomState)) or (
            isinstance(rng, (int, np.integer)) and not isinstance(rng, bool)):
        return random.numpy_generator(rng, f"fgrad.nn.{fname}'s random source")
    raise NNArgumentError(
        f"{fname} needs an explicit source of randomness: pass a fgrad.random key "
        f"(fgrad.random.key(seed), split for each call), or eagerly a "
        f"numpy.random.Generator or an integer seed; got {type(rng).__name__}. fgrad "
        "keeps no hidden random state.")


def dropout(x, rate, key, *, deterministic=False):
    """Zero each element with probability ``rate`` and scale the rest by
    ``1 / (1 - rate)``; the identity when ``deterministic`` (evaluation).

    ``key`` is a `fgrad.random` key (split it for every call): the element is
    kept where ``fgrad.random.uniform(key, x.shape, x.dtype) < 1 - rate``, as
    in Flax, so a key gives the same mask under jit and vmap. Eagerly, a
    ``numpy.random.Generator`` (advanced by the call) or an integer seed
    works too; under jit or vmap a Generator raises `StatefulRandomnessError`.

    >>> dropout(np.ones(4), 0.5, fgrad.random.key(0))
    array([2., 2., 0., 0.])
    """
    if not 0.0 <= rate < 1.0:
        raise NNArgumentError(f"dropout: rate must lie in [0, 1), got {rate}")
    if deterministic or rate == 0.0:
        return x
    aval = get_aval(x)
    dtype = aval.dtype if aval.dtype.kind in "fc" else np.dtype(np.float64)
    if _is_key(key):
        keep = random.uniform(key, aval.shape, dtype.type(0).real.dtype) < 1.0 - rate
    else:
        keep = _like(_generator(key, "dropout").random(aval.shape) >= rate, x)
    # x times a float mask, not a select: NumPy's where() takes four times as
    # long, and the backward pass's kernel reads the mask as floats (as in
    # PyTorch, an infinite input that is dropped gives nan)
    return x * (convert_element_type(keep, dtype) * (1.0 / (1.0 - rate)))


def embedding(table, ids):
    """Rows of ``table`` picked by integer ``ids``: ``table[ids]``.

    The gradient scatter-adds into the table, so repeated ids accumulate.

    >>> embedding(np.arange(6.0).reshape(3, 2), np.array([2, 0]))
    array([[4., 5.],
           [0., 1.]])
    """
    ids = _integer_labels(ids, "embedding")
    return getitem(table, ids)


# ---------------------------------------------------------------------------
# Convolution and pooling (NCHW)
# ---------------------------------------------------------------------------


def _tuple(v, n, what, fname):
    if isinstance(v, (int, np.integer)):
        v = (int(v),) * n
    v = tuple(int(a) for a in v)
    if len(v) != n or any(a < 1 for a in v):
        raise NNArgumentError(f"{fname}: {what} must be a positive int or {n} of "
                              f"them, got {v}")
    return v


def _padding(padding, sizes, kernel, stride, dilation, fname):
    """Per spatial axis ``(lo, hi)`` from an int, pairs, ``"valid"`` or ``"same"``."""
    n = len(sizes)
    if isinstance(padding, str):
        mode = padding.lower()
        if mode == "valid":
            return ((0, 0),) * n
        if mode != "same":
            raise NNArgumentError(f"{fname}: padding must be 'same', 'valid', an int "
                                  f"or (lo, hi) pairs, got {padding!r}")
        pads = []
        for size, k, s, d in zip(sizes, kernel, stride, dilation):
            # output ceil(size / stride), the surplus split with the extra cell
            # at the end (as in TensorFlow and JAX)
            out = -(-size // s)
            total = max((out - 1) * s + d * (k - 1) + 1 - size, 0)
            pads.append((total // 2, total - total // 2))
        return tuple(pads)
    if isinstance(padding, (int, np.integer)):
        return ((int(padding), int(padding)),) * n
    pads = tuple((int(p), int(p)) if isinstance(p, (int, np.integer)) else
                 tuple(int(a) for a in p) for p in padding)
    if len(pads) != n or any(len(p) != 2 or min(p) < 0 for p in pads):
        raise NNArgumentError(f"{fname}: padding must give {n} non-negative ints or "
                              f"(lo, hi) pairs, got {padding!r}")
    return pads


def _check_window(sizes, kernel, dilation, pads, fname):
    for size, k, d, (lo, hi) in zip(sizes, kernel, dilation, pads):
        if size + lo + hi < d * (k - 1) + 1:
            raise NNArgumentError(
                f"{fname}: the window (size {k}, dilation {d}) spans "
                f"{d * (k - 1) + 1} cells but the padded input has only "
                f"{size + lo + hi}; pad more or use a smaller window")


def conv2d(x, w, b=None, *, stride=1, padding=0, dilation=1, groups=1):
    """2-d convolution (cross-correlation, as in every deep-learning library).

    ``x`` is (N, C, H, W), ``w`` is (O, C / groups, kh, kw), ``b`` is (O,) or
    None; the result is (N, O, OH, OW). ``padding`` is an int, ``(ph, pw)``,
    ``((top, bottom), (left, right))``, ``"valid"`` or ``"same"`` (output
    ``ceil(H / stride)``). Computed as one matrix product per group over the
    receptive fields gathered by ``im2col``; the input's gradient is the
    matching scatter ``col2im``.

    >>> x = np.arange(16.0).reshape(1, 1, 4, 4)
    >>> conv2d(x, np.ones((1, 1, 2, 2)), stride=2)
    array([[[[10., 18.],
             [42., 50.]]]])
    """
    fname = "conv2d"
    xa, wa = get_aval(x), get_aval(w)
    if xa.ndim != 4 or wa.ndim != 4:
        raise NNArgumentError(f"{fname}: x must be (N, C, H, W) and w (O, C/groups, "
                              f"kh, kw); got x {xa.shape} and w {wa.shape}")
    _, c, h, wd = xa.shape
    o, cg, kh, kw = wa.shape
    if groups < 1 or c % groups or o % groups or c // groups != cg:
        raise NNArgumentError(
            f"{fname}: with groups={groups}, x's {c} channels and w's {o} filters "
            f"must divide by groups, and w's second axis must be {c}/{groups}; "
            f"got w {wa.shape}")
    stride = _tuple(stride, 2, "stride", fname)
    dilation = _tuple(dilation, 2, "dilation", fname)
    pads = _padding(padding, (h, wd), (kh, kw), stride, dilation, fname)
    _check_window((h, wd), (kh, kw), dilation, pads, fname)
    out = _p.conv2d(x, w, stride, dilation, pads, groups)
    if b is not None:
        if get_aval(b).shape != (o,):
            raise NNArgumentError(f"{fname}: b must have shape ({o},), got "
                                  f"{get_aval(b).shape}")
        out = out + reshape(b, (1, o, 1, 1))
    return out


def conv1d(x, w, b=None, *, stride=1, padding=0, dilation=1, groups=1):
    """1-d convolution: ``x`` (N, C, L), ``w`` (O, C / groups, k) -> (N, O, OL).

    >>> conv1d(np.arange(5.0).reshape(1, 1, 5), np.ones((1, 1, 2)))
    array([[[1., 3., 5., 7.]]])
    """
    xa, wa = get_aval(x), get_aval(w)
    if xa.ndim != 3 or wa.ndim != 3:
        raise NNArgumentError(f"conv1d: x must be (N, C, L) and w (O, C/groups, k); "
                              f"got x {xa.shape} and w {wa.shape}")
    if isinstance(padding, str):
        pads = _padding(padding, xa.shape[2:], wa.shape[2:],
                        _tuple(stride, 1, "stride", "conv1d"),
                        _tuple(dilation, 1, "dilation", "conv1d"), "conv1d")
    else:
        pads = _padding(padding if not isinstance(padding, (int, np.integer))
                        else (padding,), xa.shape[2:], wa.shape[2:], (1,), (1,),
                        "conv1d")
    out = conv2d(expand_dims(x, 2), expand_dims(w, 2), b,
                 stride=(1,) + _tuple(stride, 1, "stride", "conv1d"),
                 padding=((0, 0),) + pads,
                 dilation=(1,) + _tuple(dilation, 1, "dilation", "conv1d"),
                 groups=groups)
    return reshape(out, get_aval(out).shape[:2] + get_aval(out).shape[3:])


def _pool(x, window, stride, padding, dilation, pad_value, reduce, tiled, fname):
    """``reduce(windows, axes)`` over each pooling window of NCHW ``x``, (N, C, OH, OW);
    ``tiled(x, window)`` does the same for windows that tile ``x``."""
    xa = get_aval(x)
    if xa.ndim != 4:
        raise NNArgumentError(f"{fname}: x must be (N, C, H, W), got {xa.shape}")
    window = _tuple(window, 2, "window", fname)
    stride = window if stride is None else _tuple(stride, 2, "stride", fname)
    dilation = _tuple(dilation, 2, "dilation", fname)
    pads = _padding(padding, xa.shape[2:], window, stride, dilation, fname)
    _check_window(xa.shape[2:], window, dilation, pads, fname)
    if stride == window and dilation == (1, 1) and not any(lo or hi for lo, hi in pads):
        # windows that tile the input (the usual pooling) are a reshape of it:
        # the windows primitive puts each window offset first, (kh*kw, N, C,
        # OH, OW), so the reduction is elementwise over whole planes (NumPy
        # reduces the plain reshape's short inner axes some 15x slower), and
        # max_pool reads the windows where they are, its gradient in one pass.
        # im2col's strided copies and col2im's scatter cost several times that.
        (h, w), (kh, kw) = xa.shape[2:], window
        oh, ow = h // kh, w // kw
        if (oh * kh, ow * kw) != (h, w):
            x = getitem(x, (slice(None), slice(None), slice(0, oh * kh), slice(0, ow * kw)))
        return tiled(x, window)
    cols = _p.im2col(x, window, stride, dilation, pads, pad_value)
    return transpose(reduce(cols, (1, 2)), (3, 0, 1, 2))


def max_pool2d(x, window, stride=None, *, padding=0, dilation=1):
    """Maximum over each ``window`` of NCHW ``x`` (``stride`` defaults to the
    window). Padded cells hold ``-inf``, so they never win. Tied maxima share the
    gradient equally.

    >>> max_pool2d(np.arange(16.0).reshape(1, 1, 4, 4), 2)
    array([[[[ 5.,  7.],
             [13., 15.]]]])
    """
    return _pool(x, window, stride, padding, dilation, -np.inf, max_, _p.max_pool,
                 "max_pool2d")


def _tiled_mean(x, window):
    return mean(_p.windows(x, window), 0)


def avg_pool2d(x, window, stride=None, *, padding=0, dilation=1):
    """Mean over each ``window`` of NCHW ``x``; padded cells count as zeros
    (PyTorch's ``count_include_pad=True``).

    >>> avg_pool2d(np.arange(16.0).reshape(1, 1, 4, 4), 2)
    array([[[[ 2.5,  4.5],
             [10.5, 12.5]]]])
    """
    return _pool(x, window, stride, padding, dilation, 0.0, mean, _tiled_mean,
                 "avg_pool2d")


# ---------------------------------------------------------------------------
# Initializers: explicit key (or Generator) in, array out
# ---------------------------------------------------------------------------


def _fans(shape, fname):
    """(fan_in, fan_out): dense weights are (in, out), convolution weights
    (out, in, *kernel), as `conv2d` takes them."""
    shape = tuple(int(d) for d in shape)
    if len(shape) < 2:
        raise NNArgumentError(f"{fname}: a weight shape needs at least 2 axes, got "
                              f"{shape}")
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def _normal_init(source, shape, dtype, std, fname):
    shape = tuple(int(d) for d in shape)
    if _is_key(source):
        return random.normal(source, shape, dtype) * np.asarray(std, dtype)
    return (_generator(source, fname).standard_normal(shape) * std).astype(dtype)


def _uniform_init(source, shape, dtype, limit, fname):
    shape = tuple(int(d) for d in shape)
    if _is_key(source):
        return random.uniform(source, shape, dtype, -limit, limit)
    return _generator(source, fname).uniform(-limit, limit, shape).astype(dtype)


def glorot_normal(key, shape, dtype=np.float32):
    """Normal with variance ``2 / (fan_in + fan_out)`` (Glorot & Bengio).
    ``key``: a `fgrad.random` key, or eagerly a NumPy Generator or int seed.

    >>> glorot_normal(fgrad.random.key(0), (3, 4)).shape
    (3, 4)
    """
    fan_in, fan_out = _fans(shape, "glorot_normal")
    return _normal_init(key, shape, dtype, math.sqrt(2.0 / (fan_in + fan_out)),
                        "glorot_normal")


def glorot_uniform(key, shape, dtype=np.float32):
    """Uniform on ``±sqrt(6 / (fan_in + fan_out))`` (Glorot & Bengio).

    >>> bool(abs(glorot_uniform(fgrad.random.key(0), (3, 4))).max() <= np.sqrt(6 / 7))
    True
    """
    fan_in, fan_out = _fans(shape, "glorot_uniform")
    return _uniform_init(key, shape, dtype, math.sqrt(6.0 / (fan_in + fan_out)),
                         "glorot_uniform")


def he_normal(key, shape, dtype=np.float32):
    """Normal with variance ``2 / fan_in`` (He et al.), for ReLU networks.

    >>> he_normal(fgrad.random.key(0), (8, 1, 3, 3)).dtype
    dtype('float32')
    """
    fan_in, _ = _fans(shape, "he_normal")
    return _normal_init(key, shape, dtype, math.sqrt(2.0 / fan_in), "he_normal")


def he_uniform(key, shape, dtype=np.float32):
    """Uniform on ``±sqrt(6 / fan_in)`` (He et al.).

    >>> bool(abs(he_uniform(0, (4, 2))).max() <= np.sqrt(6 / 4))
    True
    """
    fan_in, _ = _fans(shape, "he_uniform")
    return _uniform_init(key, shape, dtype, math.sqrt(6.0 / fan_in), "he_uniform")
