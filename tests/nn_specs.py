"""Property-test specs for `fgrad.nn`: its primitives and its composites.

Imported at the end of `primitive_specs`, into whose `SPECS` it registers. Each
reference is NumPy (or scipy) written here, independently of fgrad's own
implementation: convolution by a sum over kernel offsets, not by im2col.
"""
import numpy as np
import scipy.special as sc
from hypothesis import strategies as st

import fgrad
import fgrad.numpy as fnp
from fgrad import nn
from primitive_specs import SPECS, Case, arrays, away_from, shapes, spec, values
from fgrad.nn import _padding


def _elementwise(f, ref, domain=None, **kw):
    return shapes().flatmap(lambda s: arrays(s, domain)).map(
        lambda x: Case(f, (x,), ref, **kw))


def _spaced_unique(draw_seed, shape, step=0.1):
    """A permutation of a grid: distinct values 0.1 apart, so no ties or kinks."""
    n = int(np.prod(shape))
    rng = np.random.default_rng(draw_seed)
    return ((rng.permutation(n) - n / 2) * step + 0.013).reshape(shape)


def _away(lo, hi, gap=0.05):
    return away_from((0.0,), gap, lo, hi)


# -- activations ------------------------------------------------------------------

SPECS["relu"] = _elementwise(nn.relu, lambda x: np.maximum(x, 0), _away(-2, 2))
SPECS["sigmoid"] = _elementwise(nn.sigmoid, sc.expit, values(-4, 4))
SPECS["softplus"] = _elementwise(nn.softplus, lambda x: np.logaddexp(0, x), values(-4, 4))
SPECS["normal_cdf"] = _elementwise(fgrad.primitives.nn.normal_cdf, sc.ndtr, values(-3, 3))
SPECS["nn.leaky_relu"] = _elementwise(lambda x: nn.leaky_relu(x, 0.2),
                                      lambda x: np.where(x >= 0, x, 0.2 * x),
                                      _away(-2, 2))
SPECS["nn.elu"] = _elementwise(nn.elu, lambda x: np.where(x > 0, x, np.expm1(x)),
                               _away(-2, 2))
SPECS["nn.gelu"] = _elementwise(nn.gelu, lambda x: x * sc.ndtr(x))
SPECS["nn.gelu_tanh"] = _elementwise(
    lambda x: nn.gelu(x, approximate=True),
    lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))))
SPECS["nn.silu"] = _elementwise(nn.silu, lambda x: x * sc.expit(x))
SPECS["nn.log_sigmoid"] = _elementwise(nn.log_sigmoid, sc.log_expit, values(-4, 4))
SPECS["nn.rsqrt"] = _elementwise(nn.rsqrt, lambda x: 1 / np.sqrt(x), values(0.3, 3))


# -- over an axis --------------------------------------------------------------------

def _with_axis(f, ref, min_dims=1):
    def build(d):
        x, axis, keepdims = d
        return Case(lambda x: f(x, axis, keepdims), (x,), lambda x: ref(x, axis, keepdims))
    return shapes(min_dims=min_dims).flatmap(lambda s: st.tuples(
        arrays(s, values(-3, 3)), st.integers(-len(s), len(s) - 1) if s else st.none(),
        st.booleans())).map(build)


SPECS["nn.logsumexp"] = _with_axis(nn.logsumexp, lambda x, a, k: np.log(np.sum(
    np.exp(x), a, keepdims=k)), min_dims=0)
SPECS["softmax"] = _with_axis(lambda x, a, k: nn.softmax(x, a),
                              lambda x, a, k: sc.softmax(x, a))
SPECS["nn.log_softmax"] = _with_axis(lambda x, a, k: nn.log_softmax(x, a),
                                     lambda x, a, k: sc.log_softmax(x, a))


@spec("nn.logsumexp_tuple_axis")
def _lse_tuple(name):
    return st.just(Case(lambda x: nn.logsumexp(x, (0, 2)),
                        (np.linspace(-2, 2, 24).reshape(2, 3, 4),),
                        lambda x: sc.logsumexp(x, (0, 2))))


# -- losses ------------------------------------------------------------------------------

def _np_log_softmax(z):
    m = z.max(-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))


@spec("nn.cross_entropy")
def _cross_entropy(name):
    def build(d):
        (n, c), seed, smoothing, reduction, probs = d
        rng = np.random.default_rng(seed)
        logits = rng.standard_normal((n, c))
        if probs:
            t = rng.random((n, c))
            targets = t / t.sum(-1, keepdims=True)
        else:
            targets = rng.integers(0, c, n)
        def ref(z, *t):
            tgt = t[0] if probs else np.eye(c)[targets]
            tgt = tgt * (1 - smoothing) + smoothing / c
            loss = -(tgt * _np_log_softmax(z)).sum(-1)
            return {"mean": loss.mean(), "sum": loss.sum(), "none": loss}[reduction]

        def f(z, *t):
            return nn.cross_entropy(z, t[0] if probs else targets,
                                    label_smoothing=smoothing, reduction=reduction)
        # probability targets are an argument (so they live on the test's
        # device); integer labels stay host data, which fgrad moves like indices
        return Case(f, (logits, targets) if probs else (logits,), ref)
    return st.tuples(st.tuples(st.integers(1, 4), st.integers(2, 5)), st.integers(0, 99),
                     st.sampled_from([0.0, 0.1]), st.sampled_from(["mean", "sum", "none"]),
                     st.booleans()).map(build)


@spec("nn.binary_cross_entropy_with_logits")
def _bce(name):
    return shapes().flatmap(lambda s: st.tuples(arrays(s, values(-5, 5)),
                                                arrays(s, values(0, 1)))).map(
        lambda xy: Case(nn.binary_cross_entropy_with_logits, xy,
                        lambda x, y: np.mean(-(y * np.log(sc.expit(x))
                                               + (1 - y) * np.log(sc.expit(-x))))))


@spec("nn.mse")
def _mse(name):
    return shapes().flatmap(lambda s: st.tuples(arrays(s), arrays(s))).map(
        lambda xy: Case(nn.mse, xy, lambda x, y: np.mean((x - y) ** 2)))


# -- normalisation -------------------------------------------------------------------------

def _np_norm(x, axis, eps):
    mu = x.mean(axis, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis, keepdims=True) + eps)


@spec("nn.layer_norm")
def _layer_norm(name):
    def build(d):
        x, g, b = d
        return Case(lambda x, g, b: nn.layer_norm(x, g, b), (x, g, b),
                    lambda x, g, b: _np_norm(x, -1, 1e-5) * g + b)
    # distinct values: a near-constant row has a near-singular variance
    return shapes(min_dims=1).filter(lambda s: s[-1] > 1).flatmap(lambda s: st.tuples(
        st.integers(0, 999).map(lambda seed: _spaced_unique(seed, s, 0.3)),
        arrays(s[-1:], values(0.5, 2)), arrays(s[-1:]))).map(build)


@spec("nn.rms_norm")
def _rms_norm(name):
    return shapes(min_dims=1).flatmap(lambda s: st.tuples(
        arrays(s, _away(-2, 2, 0.3)), arrays(s[-1:]))).map(lambda d: Case(
            lambda x, g: nn.rms_norm(x, g), d,
            lambda x, g: x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g))


@spec("nn.batch_norm")
def _batch_norm(name):
    def build(d):
        x, g, b = d
        # running statistics made from an argument, so they share its device
        return Case(lambda x, g, b: nn.batch_norm(x, g, b, fnp.zeros_like(b),
                                                  fnp.ones_like(b), training=True)[0],
                    (x, g, b),
                    lambda x, g, b: _np_norm(x, (0, 2), 1e-5) * g[:, None] + b[:, None])
    return st.tuples(st.integers(2, 3), st.integers(1, 3), st.integers(1, 3)).flatmap(
        lambda s: st.tuples(st.integers(0, 999).map(lambda seed: _spaced_unique(seed, s, 0.3)),
                            arrays(s[1:2], values(0.5, 2)),
                            arrays(s[1:2]))).map(build)


@spec("nn.embedding")
def _embedding(name):
    def build(d):
        table, ids = d
        return Case(lambda t: nn.embedding(t, ids), (table,), lambda t: t[ids])
    return st.tuples(st.integers(1, 4), st.integers(1, 3)).flatmap(
        lambda s: st.tuples(arrays(s), st.lists(st.integers(0, s[0] - 1), min_size=1,
                                                max_size=5).map(np.array))).map(build)


# -- convolution and pooling -----------------------------------------------------------------

def np_conv2d(x, w, b, stride, pads, dilation, groups):
    """Reference convolution: one einsum per group and kernel offset."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple(pads))
    oh = (xp.shape[2] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (xp.shape[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow), np.result_type(x, w))
    og = o // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                r, s = i * dilation[0], j * dilation[1]
                patch = xp[:, g * cg:(g + 1) * cg, r:r + stride[0] * (oh - 1) + 1:stride[0],
                           s:s + stride[1] * (ow - 1) + 1:stride[1]]
                out[:, g * og:(g + 1) * og] += np.einsum(
                    "nchw,oc->nohw", patch, w[g * og:(g + 1) * og, :, i, j])
    return out if b is None else out + b[None, :, None, None]


def np_pool(x, window, stride, pads, dilation, kind):
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple(pads), constant_values=fill)
    kh, kw = window
    oh = (xp.shape[2] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (xp.shape[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    parts = [xp[:, :, i * dilation[0]:i * dilation[0] + stride[0] * (oh - 1) + 1:stride[0],
                j * dilation[1]:j * dilation[1] + stride[1] * (ow - 1) + 1:stride[1]]
             for i in range(kh) for j in range(kw)]
    return np.max(parts, 0) if kind == "max" else np.mean(parts, 0)


def resolve_padding(padding, sizes, kernel, stride, dilation):
    return _padding(padding, sizes, kernel, stride, dilation, "test")


@st.composite
def conv_configs(draw, max_groups=2):
    groups = draw(st.integers(1, max_groups))
    cg, og = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = draw(st.one_of(st.integers(0, 2), st.sampled_from(["same", "valid"]),
                             st.tuples(st.tuples(st.integers(0, 2), st.integers(0, 2)),
                                       st.tuples(st.integers(0, 2), st.integers(0, 2)))))
    size = tuple(d * (k - 1) + 1 + draw(st.integers(0, 3))
                 for d, k in zip(dilation, kernel))
    n = draw(st.integers(1, 2))
    return dict(x_shape=(n, cg * groups) + size, w_shape=(og * groups, cg) + kernel,
                groups=groups, stride=stride, dilation=dilation, padding=padding)


@spec("im2col", "col2im", "conv2d", "nn.conv2d")
def _conv2d(name):
    def build(d):
        cfg, (x, w, b) = d
        kw = dict(stride=cfg["stride"], padding=cfg["padding"], dilation=cfg["dilation"],
                  groups=cfg["groups"])
        pads = resolve_padding(cfg["padding"], x.shape[2:], w.shape[2:], cfg["stride"],
                               cfg["dilation"])

        def f(x, w, b):
            out = nn.conv2d(x, w, b, **kw)
            # through col2im twice more: the input gradient of a convolution,
            # made a function of x and w, exercises col2im's own rules
            return out * 1.0 if name != "col2im" else \
                fgrad.vjp(lambda x: nn.conv2d(x, w, None, **kw), x)[1](out)[0]
        def ref(x, w, b):
            out = np_conv2d(x, w, b, cfg["stride"], pads, cfg["dilation"], cfg["groups"])
            if name != "col2im":
                return out
            return _np_conv_input_grad(x.shape, w, out, cfg, pads)
        return Case(f, (x, w, b), ref)
    return conv_configs().flatmap(lambda cfg: st.tuples(st.just(cfg), st.tuples(
        arrays(cfg["x_shape"]), arrays(cfg["w_shape"]),
        arrays((cfg["w_shape"][0],))))).map(build)


def _np_conv_input_grad(x_shape, w, ct, cfg, pads):
    """The VJP of np_conv2d with respect to x: a scatter over kernel offsets."""
    n, c, h, wd = x_shape
    o, cg, kh, kw = w.shape
    (lo_h, hi_h), (lo_w, hi_w) = pads
    out = np.zeros((n, c, h + lo_h + hi_h, wd + lo_w + hi_w))
    oh, ow = ct.shape[2:]
    og = o // cfg["groups"]
    st_, dl = cfg["stride"], cfg["dilation"]
    for g in range(cfg["groups"]):
        for i in range(kh):
            for j in range(kw):
                r, s = i * dl[0], j * dl[1]
                out[:, g * cg:(g + 1) * cg, r:r + st_[0] * (oh - 1) + 1:st_[0],
                    s:s + st_[1] * (ow - 1) + 1:st_[1]] += np.einsum(
                        "nohw,oc->nchw", ct[:, g * og:(g + 1) * og],
                        w[g * og:(g + 1) * og, :, i, j])
    return out[:, :, lo_h:lo_h + h, lo_w:lo_w + wd]


@spec("nn.conv1d")
def _conv1d(name):
    def build(d):
        (n, c, o, k, extra, stride, dil, pad), seed = d
        L = dil * (k - 1) + 1 + extra
        rng = np.random.default_rng(seed)
        x, w, b = rng.standard_normal((n, c, L)), rng.standard_normal((o, c, k)), \
            rng.standard_normal(o)
        pads = resolve_padding(pad, (L,), (k,), (stride,), (dil,))
        return Case(lambda x, w, b: nn.conv1d(x, w, b, stride=stride, padding=pad,
                                              dilation=dil), (x, w, b),
                    lambda x, w, b: np_conv2d(x[:, :, None], w[:, :, None], b, (1, stride),
                                              ((0, 0),) + pads, (1, dil), 1)[:, :, 0])
    return st.tuples(st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(1, 2),
                               st.integers(1, 3), st.integers(0, 4), st.integers(1, 2),
                               st.integers(1, 2), st.sampled_from([0, 1, "same"])),
                     st.integers(0, 99)).map(build)


def _pool_spec(kind):
    fn = nn.max_pool2d if kind == "max" else nn.avg_pool2d

    @st.composite
    def case(draw):
        window = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        stride = draw(st.one_of(st.none(), st.tuples(st.integers(1, 2), st.integers(1, 2))))
        dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
        padding = draw(st.one_of(st.integers(0, 1), st.just("same")))
        size = tuple(d * (k - 1) + 1 + draw(st.integers(0, 3))
                     for d, k in zip(dilation, window))
        shape = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) + size
        x = _spaced_unique(draw(st.integers(0, 2 ** 16)), shape)
        pads = resolve_padding(padding, size, window, stride or window, dilation)
        expected = np_pool(x, window, stride or window, pads, dilation, kind)
        # a window lying wholly in the padding has no input to differentiate
        if not np.all(np.isfinite(expected)):
            padding, pads = 0, ((0, 0), (0, 0))
        return Case(lambda x: fn(x, window, stride, padding=padding, dilation=dilation),
                    (x,), lambda x: np_pool(x, window, stride or window, pads, dilation,
                                            kind))
    return case()


SPECS["nn.max_pool2d"] = _pool_spec("max")
SPECS["nn.avg_pool2d"] = _pool_spec("avg")


@st.composite
def _window_case(draw, inverse):
    window = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    n, c, oh, ow = (draw(st.integers(1, 2)) for _ in range(4))
    x = draw(arrays((n, c, oh * window[0], ow * window[1])))

    def np_windows(x):
        split = x.reshape(n, c, oh, window[0], ow, window[1])
        return split.transpose(3, 5, 0, 1, 2, 4).reshape((-1, n, c, oh, ow))
    if not inverse:
        return Case(lambda x: fgrad.primitives.nn.windows(x, window), (x,), np_windows)
    g = np_windows(x)

    def np_unwindows(g):
        split = g.reshape(window + (n, c, oh, ow))
        return split.transpose(2, 3, 4, 0, 5, 1).reshape(x.shape)
    return Case(lambda g: fgrad.primitives.nn.unwindows(g, window), (g,), np_unwindows)


# the tiling pooling windows and their inverse (what max_pool2d's gradient copies back)
SPECS["windows"] = _window_case(False)
SPECS["unwindows"] = _window_case(True)


def _np_max_pool_weights(x, ans, window):
    """NumPy reference: (N, C, OH, kh, OW, kw) shares of each window's derivative,
    1/k for each of the k elements equal to its maximum."""
    (n, c, oh, ow), (kh, kw) = ans.shape, window
    hit = x.reshape(n, c, oh, kh, ow, kw) == ans[:, :, :, None, :, None]
    return hit / hit.sum(axis=(3, 5), keepdims=True)


@st.composite
def _max_pool_case(draw, kind):
    window = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    n, c, oh, ow = (draw(st.integers(1, 2)) for _ in range(4))
    shape = (n, c, oh * window[0], ow * window[1])

    def np_max_pool(x):
        return x.reshape(n, c, oh, window[0], ow, window[1]).max(axis=(3, 5))
    if kind == "max_pool":
        # distinct values: finite differences need the maximum away from a tie
        x = _spaced_unique(draw(st.integers(0, 2 ** 16)), shape)
        return Case(lambda x: fgrad.primitives.nn.max_pool(x, window), (x,), np_max_pool)
    # few distinct values, so that windows tie; the derivative is taken in the
    # linear argument only (x and ans fix the weights)
    x = draw(arrays(shape, st.sampled_from([-1.0, 0.0, 0.5, 2.0])))
    ans = np_max_pool(x)
    weights = _np_max_pool_weights(x, ans, window)
    if kind == "max_pool_scatter":
        def np_scatter(ct):
            return (weights * ct[:, :, :, None, :, None]).reshape(shape)
        ct = draw(arrays(ans.shape))
        return Case(lambda ct: fgrad.primitives.nn.max_pool_scatter(
            ct, *_like(ct, x, ans), window), (ct,), np_scatter)

    def np_gather(t):
        return (weights * t.reshape(weights.shape)).sum(axis=(3, 5))
    return Case(lambda t: fgrad.primitives.nn.max_pool_gather(t, *_like(t, x, ans), window),
                (draw(arrays(shape)),), np_gather)


def _like(v, *constants):
    """``constants`` on ``v``'s device and in its dtype (float32 cases then
    take the compiled loops, which want one dtype)."""
    return tuple(fnp.asarray(c, v.dtype, like=v) for c in constants)


# max pooling over tiling windows, its gradient (ties share) and that gradient's transpose
for _name in ("max_pool", "max_pool_scatter", "max_pool_gather"):
    SPECS[_name] = _max_pool_case(_name)
