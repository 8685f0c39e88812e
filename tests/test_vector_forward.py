"""sin, cos, exp and tanh of large arrays under grad: the kernels' vector functions."""
import gc

import numpy as np
import pytest
from standin_backend import registered, to_numpy, to_standin

import fgrad
import fgrad.numpy as fnp
from fgrad.compiler import cpu_fusion
from fgrad.compiler.tiers import wait_all
from fgrad.compiler.vector_forward import MIN_BYTES, forward_impls

needs_kernels = pytest.mark.skipif(not forward_impls() or not cpu_fusion.enabled(),
                                   reason="llvmlite missing or FGRAD_JIT_FUSE=0")
FUNCTIONS = ("sin", "cos", "exp", "tanh")


def _large(dtype=np.float64, special=False):
    n = MIN_BYTES // np.dtype(dtype).itemsize + 3       # not a multiple of the SIMD width
    x = np.random.default_rng(0).uniform(-8, 8, n).astype(dtype)
    if special:
        x[[5, 77, 1000]] = [np.nan, np.inf, 1e300 if dtype == np.float64 else 3e38]
    return x


def _impl(name):
    (impl,) = [f for p, f in forward_impls().items() if p.name == name]
    impl(_large())                  # the first call asks for the kernel
    wait_all()
    return impl


@needs_kernels
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf-huge"])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_forward_values_are_numpys_within_two_ulps(name, dtype, special):
    impl, x = _impl(name), _large(dtype, special)
    with np.errstate(all="ignore"):
        got, want = impl(x), getattr(np, name)(x)
    assert got.dtype == want.dtype and got.shape == want.shape and got is not x
    if special and name != "tanh":
        # a nan or inf among the values: NumPy's array, bit for bit
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_array_max_ulp(got, want, maxulp=2)


@needs_kernels
@pytest.mark.parametrize("name, message", [("sin", "invalid value"), ("exp", "overflow")])
def test_numpys_floating_point_warnings_and_errors_stay(name, message):
    impl, x = _impl(name), _large(special=True)
    with pytest.warns(RuntimeWarning, match=message):
        impl(x)
    with np.errstate(all="raise"), pytest.raises(FloatingPointError, match=message):
        fgrad.grad(lambda x: fnp.sum(getattr(fnp, name)(x)))(x)


@needs_kernels
@pytest.mark.parametrize("name", FUNCTIONS)
def test_under_grad_large_arrays_take_the_kernel_and_everything_else_numpy(name):
    impl = _impl(name)
    fn, np_fn = getattr(fnp, name), getattr(np, name)
    x = _large()
    value, grad = fgrad.value_and_grad(lambda x: fnp.sum(fn(x) * x))(x)
    # the value is the kernel's, the gradient agrees with NumPy's to rounding
    assert value == np.sum(impl(x) * x)
    np.testing.assert_allclose(value, np.sum(np_fn(x) * x), rtol=1e-13)
    h = 1e-6
    fd = (np_fn(x + h) - np_fn(x - h)) / (2 * h)
    np.testing.assert_allclose(grad, np_fn(x) + x * fd, rtol=1e-6, atol=1e-6)
    # outside a gradient, and below the size, NumPy's own values, bit for bit
    np.testing.assert_array_equal(fn(x), np_fn(x))
    small = x[:1000]
    value_small, _ = fgrad.value_and_grad(lambda x: fnp.sum(fn(x) * x))(small)
    assert value_small == np.sum(np_fn(small) * small)


@needs_kernels
def test_other_dtypes_and_layouts_and_backends_keep_the_primitives_own_impl():
    impl = _impl("sin")
    x = _large()
    # a transposed (non-contiguous) view: computed in its own layout
    square = np.resize(x, 1024 * 1024).reshape(1024, 1024).T
    np.testing.assert_array_max_ulp(impl(square), np.sin(square), maxulp=2)
    assert impl(square).shape == square.shape
    ints = np.arange(MIN_BYTES // 8, dtype=np.int64)
    np.testing.assert_array_equal(impl(ints), np.sin(ints))        # NumPy's
    # an array another backend holds goes to the primitive's own impl
    with registered():
        device = to_standin(x)
        value, grad = fgrad.value_and_grad(lambda x: fnp.sum(fnp.sin(x)))(device)
        np.testing.assert_array_equal(to_numpy(value), np.sum(np.sin(x)))
        np.testing.assert_array_equal(to_numpy(grad), np.cos(x))


def test_without_kernels_the_reverse_trace_keeps_numpys_functions(monkeypatch):
    monkeypatch.setenv("FGRAD_JIT_FUSE", "0")
    x = _large()
    value, _ = fgrad.value_and_grad(lambda x: fnp.sum(fnp.sin(x)))(x)
    assert value == np.sum(np.sin(x))


@needs_kernels
def test_a_kernel_outlives_the_compiled_kernels_cache():
    # the impl holds its kernel's machine code, whatever the cache drops
    impl, x = _impl("exp"), _large()
    cpu_fusion.native_kernel.cache_clear()
    gc.collect()
    np.testing.assert_array_max_ulp(impl(x), np.exp(x), maxulp=2)
