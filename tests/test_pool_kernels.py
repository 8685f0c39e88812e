"""The compiled max-pooling loops of `fgrad.compiler.pool_kernels`, against
the same pooling and gradient written with NumPy reshapes."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fgrad
from fgrad import nn
from fgrad.compiler import native, pool_kernels
from fgrad.primitives import nn as _nn

pytestmark = pytest.mark.skipif(not native.available(), reason="needs llvmlite")


def _split(x, window):
    n, c, h, w = x.shape
    return x.reshape(n, c, h // window[0], window[0], w // window[1], window[1])


def _reference(ct, x, window):
    """The maximum of each window (NaN if it holds one) and the gradient
    ``ct * hit / count`` (NaN for a window whose maximum is NaN)."""
    blocks = _split(x, window)
    ans = np.max(blocks, axis=(3, 5))
    hit = (blocks == ans[:, :, :, None, :, None]).astype(x.dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)       # 0 / 0 where NaN wins
        dx = ct[:, :, :, None, :, None] * (hit / hit.sum(axis=(3, 5), keepdims=True))
    return ans, dx.reshape(x.shape)


@st.composite
def poolings(draw):
    window = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    n, c, oh, ow = (draw(st.integers(1, 3)) for _ in range(4))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    shape = (n, c, oh * window[0], ow * window[1])
    # few distinct values, so that windows tie; a NaN or an inf now and then
    x = rng.choice(np.array([-1.5, 0.0, 0.25, 3.0, np.inf, -np.inf, np.nan]),
                   size=shape, p=[.3, .25, .2, .15, .04, .03, .03]).astype(dtype)
    ct = rng.standard_normal((n, c, oh, ow)).astype(dtype)
    return ct, x, window


@settings(max_examples=80, deadline=None)
@given(poolings())
def test_max_and_its_gradient_are_numpys_bit_for_bit(case):
    ct, x, window = case
    ans, dx = _reference(ct, x, window)
    got = pool_kernels.max_pool(x, window)
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, ans)
    got_dx = pool_kernels.max_pool_scatter(ct, x, ans, window)
    assert got_dx.dtype == x.dtype
    np.testing.assert_array_equal(got_dx, dx)


def test_ties_share_and_nan_spreads():
    x = np.array([[[[2.0, 2.0, 1.0, np.nan],
                    [0.0, 2.0, 1.0, 5.0]]]])
    ans = pool_kernels.max_pool(x, (2, 2))
    np.testing.assert_array_equal(ans, [[[[2.0, np.nan]]]])
    dx = pool_kernels.max_pool_scatter(np.array([[[[3.0, 1.0]]]]), x, ans, (2, 2))
    np.testing.assert_array_equal(dx[..., :2], [[[[1.0, 1.0], [0.0, 1.0]]]])
    assert np.isnan(dx[..., 2:]).all()


def test_the_primitives_use_the_loops_for_numpy_floats_only():
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    assert _nn._pool_compiled((2, 2), x)
    assert _nn._pool_compiled((2, 2), x.astype(np.float32))
    assert not _nn._pool_compiled((2, 2), x.astype(np.int64))
    assert not _nn._pool_compiled((2, 2), x, x.astype(np.float32))      # mixed dtypes
    assert not _nn._pool_compiled((9, 9), x)          # past MAX_AREA: written out loads
    # the NumPy path and the loops agree on an integer input, which takes NumPy's
    np.testing.assert_array_equal(_nn.max_pool(x.astype(np.int64), (2, 2)),
                                  _nn.max_pool(x, (2, 2)).astype(np.int64))


def test_non_contiguous_input_and_gradient_of_max_pool2d():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 9, 8))[:, :, ::-1].transpose(0, 1, 3, 2)   # (2,3,8,9)
    ct = rng.standard_normal((2, 3, 4, 4))
    crop = np.ascontiguousarray(x[:, :, :8, :8])
    ans, dx = _reference(ct, crop, (2, 2))
    out, vjp = fgrad.vjp(lambda x: nn.max_pool2d(x, 2), x)
    np.testing.assert_array_equal(out, ans)
    (g,) = vjp(ct)
    np.testing.assert_array_equal(g[:, :, :8, :8], dx)
    assert not g[:, :, 8:].any() and not g[:, :, :, 8:].any()      # the cropped edge
