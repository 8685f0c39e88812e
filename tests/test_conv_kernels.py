"""The compiled im2col and col2im loops of `fgrad.compiler.conv_kernels`,
against the same gathers written with `numpy.pad` and slicing."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fgrad.compiler import conv_kernels, native
from fgrad.primitives import nn as _nn

pytestmark = pytest.mark.skipif(not native.available(), reason="needs llvmlite")


def _reference(x, kernel, stride, dilation, padding, pad_value):
    """Receptive fields (C, kh, kw, N, OH, OW) of NCHW ``x``, by slicing."""
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple(padding), constant_values=pad_value)
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    fields = [[xp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                  j * dw:j * dw + sw * (ow - 1) + 1:sw] for j in range(kw)] for i in range(kh)]
    return np.array(fields).transpose(3, 0, 1, 2, 4, 5)      # (C, kh, kw, N, OH, OW)


@st.composite
def gathers(draw):
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(2))
    hw = tuple(d * (k - 1) + 1 + draw(st.integers(0, 5)) for d, k in zip(dilation, kernel))
    shape = (draw(st.integers(1, 5)), draw(st.integers(1, 3))) + hw
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    x = np.random.default_rng(draw(st.integers(0, 2**16))).standard_normal(shape).astype(dtype)
    pad_value = draw(st.sampled_from([0.0, -np.inf, 2.5]))
    return x, kernel, stride, dilation, padding, pad_value


@settings(max_examples=60, deadline=None)
@given(gathers())
def test_im2col_loops_gather_what_slicing_gathers(case):
    x, kernel, stride, dilation, padding, pad_value = case
    want = _reference(x, kernel, stride, dilation, padding, pad_value)
    out_hw = want.shape[4:]
    planes = conv_kernels.im2col_planes(x, kernel, stride, dilation, padding, pad_value,
                                        out_hw)
    np.testing.assert_array_equal(planes, want)
    rows = conv_kernels.im2col(np.ascontiguousarray(x.transpose(1, 2, 3, 0)), kernel,
                               stride, dilation, padding, pad_value, out_hw)
    np.testing.assert_array_equal(rows, want.transpose(0, 1, 2, 4, 5, 3))
    assert planes.dtype == rows.dtype == x.dtype


@settings(max_examples=60, deadline=None)
@given(gathers())
def test_col2im_loop_adds_back_what_im2col_gathered(case):
    # col2im is im2col's transpose: <im2col(x), c> == <x, col2im(c)> for every c,
    # checked against the slicing impl that runs without the compiled loops
    x, kernel, stride, dilation, padding, _ = case
    out_hw = _reference(x, kernel, stride, dilation, padding, 0.0).shape[4:]
    n, c = x.shape[:2]
    cols = np.random.default_rng(1).standard_normal((c,) + kernel + out_hw + (n,))
    cols = cols.astype(x.dtype)
    back = conv_kernels.col2im(cols, x.shape[2:], stride, dilation, padding)
    assert back.shape == (c,) + x.shape[2:] + (n,) and back.dtype == x.dtype
    gathered = _reference(x.astype(np.float64), kernel, stride, dilation, padding, 0.0)
    tol = 1e-4 if x.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(np.sum(gathered.transpose(0, 1, 2, 4, 5, 3) * cols),
                               np.sum(x.transpose(1, 2, 3, 0) * back), rtol=tol, atol=tol)


def test_primitives_use_the_loops_on_numpy_floats_only():
    x = np.ones((2, 1, 4, 4))
    cols = _nn.im2col(x, (2, 2))
    assert cols.shape == (1, 2, 2, 3, 3, 2) and (cols == 1).all()
    # integers (and other backends) take the slicing path, with the same result
    np.testing.assert_array_equal(_nn.im2col(x.astype(np.int64), (2, 2)), cols)
    np.testing.assert_array_equal(
        _nn.col2im(cols, x.shape, (2, 2)),
        [[[[1, 2, 2, 1], [2, 4, 4, 2], [2, 4, 4, 2], [1, 2, 2, 1]]]] * 2)
