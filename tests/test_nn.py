"""fgrad.nn beyond the property specs: stability at extreme inputs, scipy and
PyTorch oracles, explicit randomness, running statistics, and error messages."""
import numpy as np
import pytest
import scipy.special as sc
from hypothesis import given, strategies as st

import fgrad
import fgrad.numpy as fnp
from fgrad import nn
from fgrad.errors import NNArgumentError
from fgrad.primitives import nn as prims
from nn_specs import conv_configs, np_conv2d, np_pool, resolve_padding

try:
    import torch
    import torch.nn.functional as F
except ImportError:                       # torch is optional (the bench extra)
    torch = None


# -- stability ------------------------------------------------------------------------

def test_logsumexp_value_and_gradient_do_not_overflow():
    x = np.array([1000.0, 1000.0, -1000.0])
    assert np.isclose(nn.logsumexp(x), 1000.0 + np.log(2))
    g = fgrad.grad(nn.logsumexp)(x)
    np.testing.assert_allclose(g, [0.5, 0.5, 0.0])
    _, t = fgrad.jvp(nn.logsumexp, (x,), (np.ones(3),))
    assert np.isclose(t, 1.0)


def test_logsumexp_of_all_minus_infinity_is_minus_infinity():
    with np.errstate(divide="ignore"):           # log(0) = -inf is the answer
        assert nn.logsumexp(np.array([-np.inf, -np.inf])) == -np.inf


@pytest.mark.parametrize("f", [nn.sigmoid, nn.softplus, nn.log_sigmoid, nn.silu,
                               nn.elu, lambda x: nn.cross_entropy(x[None], np.array([0]))])
def test_extreme_inputs_give_finite_gradients(f):
    x = np.array([-800.0, 800.0])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        g = fgrad.grad(lambda x: fnp.sum(f(x)))(x)
    assert np.all(np.isfinite(g))


@pytest.mark.parametrize("fgrad_fn, scipy_fn", [
    (nn.sigmoid, sc.expit), (nn.log_sigmoid, sc.log_expit),
    (nn.softmax, sc.softmax), (nn.log_softmax, sc.log_softmax),
    (lambda x: nn.logsumexp(x, -1), lambda x: sc.logsumexp(x, -1)),
    (lambda x: nn.gelu(x), lambda x: x * sc.ndtr(x)),
])
def test_against_scipy_at_large_magnitudes(fgrad_fn, scipy_fn):
    x = np.array([[-300.0, -20.0, 0.0, 3.0, 40.0, 700.0]])
    np.testing.assert_allclose(fgrad_fn(x), scipy_fn(x), rtol=1e-12, atol=1e-300)


def test_relu_derivative_at_zero_is_zero():
    assert fgrad.grad(lambda x: nn.relu(x))(0.0) == 0.0


# -- losses ---------------------------------------------------------------------------------

def test_cross_entropy_integer_labels_equal_one_hot_targets():
    rng = np.random.default_rng(0)
    logits, labels = rng.standard_normal((5, 4)), rng.integers(0, 4, 5)
    a = nn.cross_entropy(logits, labels, reduction="sum")
    b = nn.cross_entropy(logits, nn.one_hot(labels, 4), reduction="sum")
    assert np.isclose(a, b)
    np.testing.assert_allclose(fgrad.grad(lambda z: nn.cross_entropy(z, labels))(logits),
                               (sc.softmax(logits, -1) - np.eye(4)[labels]) / 5)


def test_cross_entropy_over_a_leading_class_axis():
    rng = np.random.default_rng(1)
    logits, labels = rng.standard_normal((3, 2, 5)), rng.integers(0, 3, (2, 5))
    moved = np.moveaxis(logits, 0, -1)
    np.testing.assert_allclose(nn.cross_entropy(logits, labels, axis=0, reduction="none"),
                               nn.cross_entropy(moved, labels, reduction="none"))


def test_label_smoothing_matches_torch_formula():
    logits = np.array([[2.0, -1.0, 0.5]])
    eps = 0.1
    expected = -((1 - eps) * sc.log_softmax(logits)[0, 2] + eps / 3 * sc.log_softmax(
        logits).sum())
    assert np.isclose(nn.cross_entropy(logits, np.array([2]), label_smoothing=eps), expected)


def test_loss_errors_say_what_to_pass():
    with pytest.raises(NNArgumentError, match="integer labels must have shape"):
        nn.cross_entropy(np.zeros((2, 3)), np.array([0, 1, 2]))
    with pytest.raises(NNArgumentError, match="probability targets must have the logits"):
        nn.cross_entropy(np.zeros((2, 3)), np.zeros((2, 2)))
    with pytest.raises(NNArgumentError, match="reduction must be one of"):
        nn.mse(np.zeros(2), np.zeros(2), reduction="avg")
    with pytest.raises(NNArgumentError, match="labels must have an integer dtype"):
        nn.one_hot(np.array([0.0, 1.0]), 2)
    with pytest.raises(NNArgumentError, match="same shape"):
        nn.binary_cross_entropy_with_logits(np.zeros(2), np.zeros(3))
    with pytest.raises(NNArgumentError, match="label_smoothing must lie"):
        nn.cross_entropy(np.zeros((1, 2)), np.array([0]), label_smoothing=2.0)


# -- normalisation, randomness --------------------------------------------------------------

def test_batch_norm_running_statistics_and_evaluation():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 3, 2, 2)) * 2 + 1
    rm, rv = np.zeros(3), np.ones(3)
    y, (m, v) = nn.batch_norm(x, np.ones(3), np.zeros(3), rm, rv, training=True,
                              momentum=0.8)
    np.testing.assert_allclose(m, 0.2 * x.mean((0, 2, 3)))
    np.testing.assert_allclose(v, 0.8 + 0.2 * x.var((0, 2, 3), ddof=1))
    np.testing.assert_allclose(y.mean((0, 2, 3)), 0, atol=1e-12)
    y_eval, stats = nn.batch_norm(x, None, None, m, v, training=False)
    assert stats[0] is m and stats[1] is v
    np.testing.assert_allclose(y_eval, (x - m[:, None, None]) / np.sqrt(v[:, None, None]
                                                                       + 1e-5))
    with pytest.raises(NNArgumentError, match=r"running_mean must have shape \(3,\)"):
        nn.batch_norm(x, None, None, np.zeros(2), rv, training=True)


def test_batch_norm_running_statistics_carry_no_gradient():
    x = np.random.default_rng(0).standard_normal((4, 2))
    g = fgrad.grad(lambda x: fnp.sum(nn.batch_norm(x, None, None, np.zeros(2), np.ones(2),
                                                   training=True)[1][0]))(x)
    np.testing.assert_array_equal(g, 0)


def test_dropout_is_determined_by_its_generator():
    x = np.ones((100, 100))
    a = nn.dropout(x, 0.3, np.random.default_rng(5))
    b = nn.dropout(x, 0.3, 5)
    np.testing.assert_array_equal(a, b)
    assert set(np.unique(a)) == {0.0, 1 / 0.7}
    assert abs((a == 0).mean() - 0.3) < 0.03
    assert nn.dropout(x, 0.3, None, deterministic=True) is x
    g = fgrad.grad(lambda x: fnp.sum(nn.dropout(x, 0.5, 1)))(x)
    np.testing.assert_array_equal(g, nn.dropout(x, 0.5, 1))


def test_dropout_refuses_hidden_randomness():
    with pytest.raises(NNArgumentError, match="explicit source of randomness"):
        nn.dropout(np.ones(3), 0.5, None)
    with pytest.raises(NNArgumentError, match=r"rate must lie in \[0, 1\)"):
        nn.dropout(np.ones(3), 1.0, 0)


@pytest.mark.parametrize("init, var", [
    (nn.glorot_normal, lambda fi, fo: 2 / (fi + fo)),
    (nn.glorot_uniform, lambda fi, fo: 2 / (fi + fo)),
    (nn.he_normal, lambda fi, fo: 2 / fi),
    (nn.he_uniform, lambda fi, fo: 2 / fi),
])
@pytest.mark.parametrize("shape, fans", [((300, 200), (300, 200)),
                                          ((64, 16, 5, 5), (400, 1600))])
def test_initializer_variance(init, var, shape, fans):
    w = init(np.random.default_rng(0), shape)
    assert w.shape == shape and w.dtype == np.float32
    assert abs(w.var() / var(*fans) - 1) < 0.05
    np.testing.assert_array_equal(w, init(np.random.default_rng(0), shape))


@pytest.mark.parametrize("init, var", [
    (nn.glorot_normal, lambda fi, fo: 2 / (fi + fo)),
    (nn.glorot_uniform, lambda fi, fo: 2 / (fi + fo)),
    (nn.he_normal, lambda fi, fo: 2 / fi),
    (nn.he_uniform, lambda fi, fo: 2 / fi),
])
def test_initializers_take_keys(init, var):
    key = fgrad.random.key(11)
    w = init(key, (300, 200))
    assert w.shape == (300, 200) and w.dtype == np.float32
    assert abs(w.var() / var(300, 200) - 1) < 0.05
    np.testing.assert_array_equal(w, init(key, (300, 200)))
    np.testing.assert_array_equal(w, fgrad.jit(lambda k: init(k, (300, 200)))(key))


def test_dropout_takes_a_key_and_keeps_the_dtype():
    x = np.ones((100, 100), np.float32)
    key = fgrad.random.key(5)
    a = nn.dropout(x, 0.3, key)
    assert a.dtype == np.float32
    assert set(np.unique(a)) == {np.float32(0.0), np.float32(1 / 0.7)}
    assert abs((a == 0).mean() - 0.3) < 0.03
    # the mask is uniform < 1 - rate, as Flax's dropout draws it
    np.testing.assert_array_equal(a != 0, fgrad.random.uniform(key, x.shape, np.float32) < 0.7)
    np.testing.assert_array_equal(fgrad.jit(lambda x, k: nn.dropout(x, 0.3, k))(x, key), a)


def test_initializer_errors():
    with pytest.raises(NNArgumentError, match="explicit source of randomness: pass a "
                       "fgrad.random key"):
        nn.he_normal(np.random, (2, 2))
    with pytest.raises(NNArgumentError, match="at least 2 axes"):
        nn.glorot_uniform(0, (5,))


def test_embedding_gradient_accumulates_repeated_ids():
    table = np.arange(6.0).reshape(3, 2)
    g = fgrad.grad(lambda t: fnp.sum(nn.embedding(t, np.array([1, 1, 2]))))(table)
    np.testing.assert_array_equal(g, [[0, 0], [2, 2], [1, 1]])
    with pytest.raises(NNArgumentError, match="integer dtype"):
        nn.embedding(table, np.array([0.0]))


# -- convolution and pooling ----------------------------------------------------------------

@given(conv_configs(max_groups=3), st.integers(0, 2 ** 16))
def test_conv2d_values_and_gradients_match_torch(cfg, seed):
    if torch is None:
        pytest.skip("torch not installed")
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal(cfg["x_shape"]), rng.standard_normal(cfg["w_shape"])
    b = rng.standard_normal(cfg["w_shape"][0])
    kw = dict(stride=cfg["stride"], dilation=cfg["dilation"], groups=cfg["groups"])
    pads = resolve_padding(cfg["padding"], x.shape[2:], w.shape[2:], cfg["stride"],
                           cfg["dilation"])
    out, vjp_fn = fgrad.vjp(lambda x, w, b: nn.conv2d(x, w, b, padding=cfg["padding"],
                                                      **kw), x, w, b)
    np.testing.assert_allclose(out, np_conv2d(x, w, b, cfg["stride"], pads,
                                              cfg["dilation"], cfg["groups"]),
                               rtol=1e-10, atol=1e-10)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    (lo_h, hi_h), (lo_w, hi_w) = pads
    t_out = F.conv2d(F.pad(tx, (lo_w, hi_w, lo_h, hi_h)), tw, tb, **kw)
    ct = rng.standard_normal(out.shape)
    t_out.backward(torch.tensor(ct))
    for mine, theirs in zip(vjp_fn(ct), (tx, tw, tb)):
        np.testing.assert_allclose(mine, theirs.grad.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", ["max", "avg"])
@given(st.integers(1, 3), st.integers(1, 3), st.integers(0, 1), st.integers(0, 3),
       st.integers(0, 2 ** 16))
def test_pooling_matches_torch(kind, k, s, pad, extra, seed):
    if torch is None:
        pytest.skip("torch not installed")
    pad = min(pad, k // 2)                       # torch's limit
    x = np.random.default_rng(seed).permutation(2 * 3 * (k + extra) ** 2).reshape(
        2, 3, k + extra, k + extra) * 0.1
    fn = nn.max_pool2d if kind == "max" else nn.avg_pool2d
    tfn = F.max_pool2d if kind == "max" else F.avg_pool2d
    out, vjp_fn = fgrad.vjp(lambda x: fn(x, k, s + 1, padding=pad), x)
    tx = torch.tensor(x, requires_grad=True)
    t_out = tfn(tx, k, s + 1, padding=pad)
    np.testing.assert_allclose(out, t_out.detach().numpy(), rtol=1e-12)
    ct = np.random.default_rng(seed + 1).standard_normal(out.shape)
    t_out.backward(torch.tensor(ct))
    np.testing.assert_allclose(vjp_fn(ct)[0], tx.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_same_padding_keeps_the_size_at_stride_one():
    x = np.ones((1, 2, 7, 6))
    for k, d in [(3, 1), (4, 1), (3, 2), (2, 3)]:
        assert nn.conv2d(x, np.ones((4, 2, k, k)), padding="same", dilation=d).shape == \
            (1, 4, 7, 6)
    assert nn.conv2d(x, np.ones((1, 2, 3, 3)), padding="same", stride=2).shape == \
        (1, 1, 4, 3)


def test_conv_hessian_vector_product_runs_through_col2im():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3))
    f = lambda w: fnp.sum(nn.conv2d(x, w, padding=1) ** 2)  # noqa: E731
    hvp = fgrad.jvp(fgrad.grad(f), (w,), (np.ones_like(w),))[1]
    # f is quadratic in w, so its HVP is the gradient at w = ones scaled by 1
    np.testing.assert_allclose(hvp, fgrad.grad(f)(np.ones_like(w)), rtol=1e-10)


def test_conv_and_pool_errors_name_the_problem():
    x = np.ones((1, 4, 5, 5))
    with pytest.raises(NNArgumentError, match="must divide by groups"):
        nn.conv2d(x, np.ones((3, 2, 3, 3)), groups=2)
    with pytest.raises(NNArgumentError, match=r"x must be \(N, C, H, W\)"):
        nn.conv2d(np.ones((4, 5, 5)), np.ones((1, 4, 3, 3)))
    with pytest.raises(NNArgumentError, match="padded input has only 5"):
        nn.conv2d(x, np.ones((1, 4, 3, 3)), dilation=3)
    with pytest.raises(NNArgumentError, match="padding must be 'same', 'valid'"):
        nn.conv2d(x, np.ones((1, 4, 3, 3)), padding="full")
    with pytest.raises(NNArgumentError, match="stride must be a positive int"):
        nn.max_pool2d(x, 2, 0)
    with pytest.raises(NNArgumentError, match=r"b must have shape \(1,\)"):
        nn.conv2d(x, np.ones((1, 4, 3, 3)), np.ones(2))


def test_conv1d_matches_torch():
    if torch is None:
        pytest.skip("torch not installed")
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 4, 9)), rng.standard_normal((6, 2, 3))
    out = nn.conv1d(x, w, stride=2, padding=1, dilation=2, groups=2)
    expected = F.conv1d(torch.tensor(x), torch.tensor(w), stride=2, padding=1,
                        dilation=2, groups=2).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_max_pool_pads_with_minus_infinity():
    x = -np.ones((1, 1, 2, 2))
    np.testing.assert_array_equal(nn.max_pool2d(x, 2, 1, padding=1), -np.ones((1, 1, 3, 3)))
    np.testing.assert_allclose(nn.avg_pool2d(x, 2, 1, padding=1)[0, 0, 0, 0], -0.25)


def test_np_pool_reference_agrees_on_a_hand_example():
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    np.testing.assert_array_equal(np_pool(x, (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1),
                                          "max")[0, 0], [[5, 7], [13, 15]])


def test_pooling_primitives_name_the_shapes_they_expect():
    # the shapes are checked where the primitives are staged (fgrad.nn checks its
    # users' arguments before it binds them)
    x, pooled = np.zeros((1, 1, 4, 4)), np.zeros((1, 1, 2, 2))

    def staged(f, *args):
        return fgrad.jit(f)(*args)
    with pytest.raises(ValueError, match=r"windows expects an NCHW array whose H and W are "
                                         r"multiples of the window \(3, 3\)"):
        staged(lambda x: prims.windows(x, (3, 3)), x)
    with pytest.raises(ValueError, match=r"unwindows expects \(kh\*kw, N, C, OH, OW\)"):
        staged(lambda g: prims.unwindows(g, (2, 2)), np.zeros((3, 1, 1, 2, 2)))
    with pytest.raises(ValueError, match=r"windows expects an NCHW array"):
        staged(lambda x: prims.max_pool(x, (2, 2)), np.zeros((1, 4, 4)))
    with pytest.raises(ValueError, match=r"max_pool_scatter expects ct and ans of the pooled "
                                         r"shape \(1, 1, 2, 2\), got \(1, 1, 2, 1\)"):
        staged(lambda ct: prims.max_pool_scatter(ct, x, pooled, (2, 2)), np.zeros((1, 1, 2, 1)))
    with pytest.raises(ValueError, match=r"max_pool_gather expects t of x's shape "
                                         r"\(1, 1, 4, 4\) and ans of the pooled shape"):
        staged(lambda t: prims.max_pool_gather(t, x, pooled, (2, 2)), np.zeros((1, 1, 4, 2)))
