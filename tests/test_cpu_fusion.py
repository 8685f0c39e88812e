"""Fused CPU kernels under jit (LLVM): NumPy's semantics, the fallback, bad input."""
import json
import math
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fgrad
import fgrad.numpy as fnp
from fgrad.compiler import cpu_fusion
from fgrad.errors import InvalidInputError
from fgrad.transforms.jit import compiled_for

fused_only = pytest.mark.skipif(not cpu_fusion.enabled(),
                                reason="llvmlite missing or FGRAD_JIT_FUSE=0")


@pytest.fixture(autouse=True)
def always_fuse(monkeypatch):
    """Kernels cost nothing to call: every group of two or more operations is
    fused, so these small examples exercise the kernels (the cost model has
    its own test)."""
    monkeypatch.setattr(cpu_fusion, "KERNEL_CALL_NS", 0)
    monkeypatch.setattr(cpu_fusion, "KERNEL_ARRAY_NS", 0)


def _kernels(f_jit, *args):
    return f_jit.lower(*args).kernels


def _unfused(f, *args):
    return fgrad.jit(f, fuse=False)(*args)


def _same(got, want):
    assert np.asarray(got).dtype == np.asarray(want).dtype
    np.testing.assert_allclose(np.asarray(got, float), np.asarray(want, float),
                               rtol=1e-6 if np.asarray(want).dtype == np.float32 else 1e-13,
                               atol=0, equal_nan=True)


_SPECIAL = np.array([-2.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 3.0, np.nan, np.inf, -np.inf,
                     1e300])
_UNARY = ["sqrt", "exp", "expm1", "log", "log1p", "sin", "cos", "tanh", "arcsin",
          "arctanh", "floor", "rint", "isnan", "isinf", "signbit", "negative",
          "square", "absolute", "invert"]
_BINARY = ["add", "subtract", "multiply", "divide", "power", "maximum", "minimum",
           "less", "equal", "arctan2", "hypot", "fmod", "floor_divide", "remainder",
           "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"]


def _operands(dtype):
    if dtype == np.bool_:
        x = _SPECIAL > 0
    elif np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        x = np.array([info.min, info.max, 0, 1, 2, 3, 7, 100 % info.max, info.max - 1,
                      info.min + 1, 5, 9], dtype=dtype)
    else:
        x = _SPECIAL.astype(dtype)
    return x, np.roll(x, 5)


@fused_only
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int8, np.uint8, np.int64,
                                   np.bool_])
def test_every_operation_matches_numpy_with_nan_inf_and_wraparound(dtype):
    # each operation in a two-operation group (so it is fused), on special values:
    # NaN, inf, signed zeros, overflowing integers; dtypes exactly NumPy's
    x, y = _operands(dtype)
    fused = 0
    with np.errstate(all="ignore"):
        for name in _UNARY + _BINARY:
            fn = getattr(fnp, name)
            f = (lambda a, b, fn=fn: fn(a + b)) if name in _UNARY else \
                (lambda a, b, fn=fn: fn(a * b, b))
            try:
                want = _unfused(f, x, y)
            except Exception:               # not defined for this dtype in NumPy
                continue
            f_jit = fgrad.jit(f)
            _same(f_jit(x, y), want)
            fused += bool(_kernels(f_jit, x, y))
    assert fused >= 4


def _ulps(got, want):
    return np.abs(got - want) / np.spacing(np.abs(want))


@fused_only
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_powers_by_a_literal_two_three_or_four_are_products_within_two_ulps(dtype,
                                                                            monkeypatch):
    monkeypatch.setitem(cpu_fusion.ELEMENT_NS, "power", (100.0, 0.0))     # fused
    x = np.concatenate([np.random.default_rng(0).standard_normal(5000) * 10, _SPECIAL,
                        [1e-110, 5e-324, -1e300, 1e-160]]).astype(dtype)
    for n in (2, 3, 4):
        # (x ** 2 is square: an array of twos, as x ** 3's derivative has)
        f_jit = fgrad.jit(lambda a, n=n: fnp.power(a * 2.0, np.full(x.shape, n, dtype)))
        assert "pow" not in _kernels(f_jit, x)[0].source
        got = f_jit(x)
        with np.errstate(all="ignore"):
            want = np.power(x * dtype(2), n)
        assert got.dtype == want.dtype
        usual = np.isfinite(want) & (want != 0)
        assert np.max(_ulps(got[usual], want[usual])) <= 2.0
        # NaN, infinities and signed zeros exactly as NumPy's
        np.testing.assert_array_equal(got[~usual], want[~usual])
        np.testing.assert_array_equal(np.signbit(got[~usual]), np.signbit(want[~usual]))
    # any other exponent is the C library's pow
    assert "llvm.pow" in _kernels(fgrad.jit(lambda a: fnp.power(a * 2.0, 5)), x)[0].source


def _vector_arguments(name, rng):
    """Arguments that test ``name``'s vector form: random ones over its whole
    range, the hard cases of its reduction, tiny ones and its limit."""
    tiny = rng.standard_normal(1000) * 1e-9
    if name in ("sin", "cos"):
        # the floats nearest to multiples of pi/2, where the reduction must
        # keep every bit of pi/2
        k = np.arange(-60000, 60000, 7.0)
        hard = [rng.uniform(-4, 4, 20000), rng.uniform(-1e5, 1e5, 20000), k * (np.pi / 2),
                np.nextafter(k * np.pi, np.inf), [1e5, -1e5]]
    elif name == "exp":
        hard = [rng.uniform(-700, 700, 20000), rng.uniform(-1, 1, 20000),
                np.arange(-1000, 1000) * np.log(2), [700.0, -700.0]]
    else:           # tanh: both sides of the switch at 0.625, and where it is 1
        hard = [rng.uniform(-25, 25, 20000), rng.uniform(-1, 1, 20000),
                rng.uniform(0.6, 0.65, 5000), [0.625, -0.625, 19.0, 40.0, 1e300]]
    return np.concatenate(hard + [tiny, [5e-324, -5e-324, 1e-300]])


@fused_only
@pytest.mark.parametrize("name", ["sin", "cos", "exp", "tanh"])
def test_vector_functions_agree_with_numpy_to_two_ulps(name, monkeypatch):
    # priced so that the kernel wins: this test is about the functions
    monkeypatch.setitem(cpu_fusion.ELEMENT_NS, name, (100.0, 0.0))
    x = _vector_arguments(name, np.random.default_rng(0))
    # x / 2 * 2 is exact: two operations, so the function is in a kernel
    f_jit = fgrad.jit(lambda half: getattr(fnp, name)(half * 2.0))
    got = f_jit(x / 2)
    assert "vector_" + name in _kernels(f_jit, x / 2)[0].source
    want = getattr(np, name)(x)
    assert np.max(_ulps(got, want)) <= 2.0
    # signed zeros: sin(-0.0) is -0.0
    zeros = np.array([0.0, -0.0])
    np.testing.assert_array_equal(np.signbit(f_jit(zeros / 2)),
                                  np.signbit(getattr(np, name)(zeros)))
    # float32 computes in float64 and rounds once
    x32 = x[:20000].astype(np.float32)
    got32 = f_jit(x32 / np.float32(2))
    assert got32.dtype == np.float32
    want32 = getattr(np, name)(x32.astype(np.float64)).astype(np.float32)
    finite = np.isfinite(want32)              # exp overflows float32 past 88.7
    assert np.max(_ulps(got32[finite], want32[finite])) <= 1.0
    np.testing.assert_array_equal(got32[~finite], want32[~finite])


@fused_only
def test_beyond_the_vector_range_the_kernel_reruns_with_numpy_functions(monkeypatch):
    for name in ("exp", "tanh"):
        monkeypatch.setitem(cpu_fusion.ELEMENT_NS, name, (100.0, 0.0))
    # an argument past a vector function's limit, nan or inf anywhere: the
    # whole loop again with the C library's functions
    def f(x):
        return fnp.sin(x) * fnp.exp(x * 0.5), fnp.sum(fnp.cos(x) + fnp.tanh(x))
    f_jit = fgrad.jit(f)
    for odd in (1e5 * (1 + 2 ** -40), 1e22, 1500.0, -1500.0, np.nan, np.inf, -np.inf):
        x = np.linspace(-3.0, 3.0, 101)
        x[50] = odd
        with np.errstate(all="ignore"):
            got, total = f_jit(x)
            want, want_total = _unfused(f, x)
        # the rerun computes with the C library's sin, NumPy with its
        # own loops: equal to rounding, and the odd element too (which the
        # vector functions would get wrong or not at all)
        _same(got, want)
        _same(got[50], want[50])
        np.testing.assert_allclose(total, want_total, rtol=1e-13, equal_nan=True)


@fused_only
def test_a_kernel_writing_many_arrays_keeps_the_c_library():
    # LLVM leaves such a loop scalar, where the branch-free vector functions
    # lose to the C library's
    def f(x):
        values = [fnp.sin(x * (1.0 + k)) for k in range(cpu_fusion.MAX_VECTOR_OUTPUTS + 1)]
        return [v * 2.0 for v in values] + [fnp.sum(sum(values) ** 2)]
    x = np.linspace(-1, 1, cpu_fusion.MIN_VECTOR_ELEMENTS)
    f_jit = fgrad.jit(f)
    (kernel,) = _kernels(f_jit, x)
    assert "vector_sin" not in kernel.source and "llvm.sin" in kernel.source
    for got, want in zip(f_jit(x), _unfused(f, x)):
        _same(got, want)


@fused_only
def test_a_kernel_of_few_elements_keeps_the_c_library():
    # its SIMD loop would hardly run, and the vector loop and its fallback
    # would add to its compile time
    def f(x):
        return fnp.sum(fnp.sin(x) * x + 1.0)
    n = cpu_fusion.MIN_VECTOR_ELEMENTS
    for size, vectorised in ((n - 1, False), (n, True)):
        x = np.linspace(-1, 1, size)
        f_jit = fgrad.jit(f)
        (kernel,) = _kernels(f_jit, x)
        assert ("vector_sin" in kernel.source) == vectorised
        _same(f_jit(x), _unfused(f, x))


@fused_only
def test_float32_stays_float32_and_python_scalars_do_not_promote():
    x = np.linspace(-1, 1, 7, dtype=np.float32)
    f_jit = fgrad.jit(lambda x: fnp.tanh(x * 2.5 + 1.0) - x / 3.0)
    out = f_jit(x)
    assert out.dtype == np.float32 and len(_kernels(f_jit, x)) == 1
    _same(out, _unfused(lambda x: fnp.tanh(x * 2.5 + 1.0) - x / 3.0, x))


@fused_only
def test_mixed_dtypes_promote_as_numpy_does():
    i = np.arange(6, dtype=np.int32)
    h = np.linspace(0, 1, 6, dtype=np.float32)
    d = np.linspace(0, 1, 6)
    for f in (lambda i, h, d: i * h + h, lambda i, h, d: (i + 1) * d - h,
              lambda i, h, d: fnp.where(i > 2, h * 2.0, d + 1.0)):
        _same(fgrad.jit(f)(i, h, d), _unfused(f, i, h, d))


@fused_only
@pytest.mark.parametrize("reduce", ["sum", "max", "min", "mean"])
def test_a_full_reduction_ends_the_group(reduce):
    x = np.linspace(-2, 2, 11)
    f = lambda x: getattr(fnp, reduce)(fnp.sin(x) ** 2 + x)    # noqa: E731
    f_jit = fgrad.jit(f)
    (kernel,) = _kernels(f_jit, x)
    assert kernel.reductions and '%"k"' not in kernel.source      # one loop
    out = f_jit(x)
    assert type(out) is type(_unfused(f, x))
    _same(out, _unfused(f, x))
    x[3] = np.nan                              # NaN propagates through max and min
    assert np.isnan(f_jit(x))


@fused_only
def test_reductions_keep_numpy_dtypes_and_keepdims():
    i = np.arange(-5, 7, dtype=np.int8).reshape(3, 4)
    x = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    for f, args in ((lambda i: fnp.sum(i * 3), (i,)),
                    (lambda i: fnp.max(i - 1, keepdims=True), (i,)),
                    (lambda x: fnp.sum(fnp.exp(x) * 2.0, axis=(0, 1), keepdims=True), (x,)),
                    (lambda x: fnp.sum(x * x, axis=1), (x,))):   # a partial sum: not fused
        out = fgrad.jit(f)(*args)
        want = _unfused(f, *args)
        assert out.shape == want.shape
        _same(out, want)


@fused_only
def test_broadcast_inputs_bias_rows_scalars_and_columns():
    x = np.linspace(-1, 1, 12).reshape(3, 4)
    row, col, one = np.linspace(0, 1, 4), np.linspace(0, 1, 3).reshape(3, 1), np.ones((1, 1))
    f = lambda x, r, c, o: fnp.tanh(x * r + c) * o - r         # noqa: E731
    f_jit = fgrad.jit(f)
    _same(f_jit(x, row, col, one), _unfused(f, x, row, col, one))
    _same(f_jit(x.T.copy().T, row, col, one), _unfused(f, x, row, col, one))




@fused_only
@pytest.mark.parametrize("shape", [(2, 3, 4), (0, 4), (3, 0), (5, 1)])
def test_trailing_broadcasts_of_several_lengths_share_one_inner_loop(shape):
    # inputs broadcast along leading axes (a bias row, a (3, 4) plane) are
    # read along an inner loop over the longest one's length, not at i modulo
    # their size; shorter ones take the modulo of the inner index
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    short, plane = rng.standard_normal(shape[-1:]), rng.standard_normal(shape[-2:])
    padded = rng.standard_normal((1,) + shape[-2:])
    f = lambda x, s, p, q: fnp.tanh(x * s + p) - q * s        # noqa: E731
    f_jit = fgrad.jit(f)
    _same(f_jit(x, short, plane, padded), _unfused(f, x, short, plane, padded))
    if x.size and len(shape) == 3:
        (kernel,) = _kernels(f_jit, x, short, plane, padded)
        assert '%"k" = phi' in kernel.source and 'urem i64 %"k"' in kernel.source
        assert 'urem i64 %"i"' not in kernel.source


@fused_only
@settings(max_examples=20, deadline=None)
@given(hnp.mutually_broadcastable_shapes(num_shapes=4, min_dims=0, max_dims=3, max_side=4),
       st.booleans())
def test_any_mix_of_broadcast_inputs_matches_numpy(shapes, backward):
    # rows, columns, planes and scalars of every split of the group's shape,
    # in one kernel: each is read along the nested loop, at k modulo its
    # size, or broadcast out first, and the values are NumPy's
    rng = np.random.default_rng(0)
    args = [rng.uniform(-2, 2, s) for s in shapes.input_shapes]

    def f(a, b, c, d):
        return fnp.tanh(a * b + c) * (1.0 - d * a) + c * d

    if backward:
        g = fgrad.grad(lambda *xs: fnp.sum(f(*xs) * 1.5), (0, 1, 2, 3))
        for got, want in zip(fgrad.jit(g)(*args), g(*args)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    else:
        # the vector tanh may differ from NumPy's in its last bit, and the sum
        # of two terms of order one can cancel: an absolute tolerance too
        np.testing.assert_allclose(fgrad.jit(f)(*args), _unfused(f, *args),
                                   rtol=1e-13, atol=1e-14)


@fused_only
@pytest.mark.parametrize("shape,column,row", [
    ((6, 4), (6, 1), (4,)),             # a value per row, and a bias row
    ((6, 4), (6, 1), None),             # a value per row alone
    ((2, 3, 4), (2, 3, 1), (4,)),
    ((2, 3, 4), (2, 1, 1), (3, 4)),     # broadcast along the same trailing axes
    ((2, 3, 4), (2, 1, 1), (4,)),       # along other axes: broadcast out first
    ((5, 1, 4), (5, 1, 1), (4,)),
    ((0, 4), (0, 1), (4,))])
def test_columns_are_read_once_per_row_of_the_inner_loop(shape, column, row):
    rng = np.random.default_rng(1)
    x, c = rng.standard_normal(shape), rng.standard_normal(column)
    r = rng.standard_normal(row) if row else np.float64(0.5)
    f = lambda x, c, r: fnp.tanh(x * c) * (1.0 - x * x) + x * r      # noqa: E731
    f_jit = fgrad.jit(f)
    _same(f_jit(x, c, r), _unfused(f, x, c, r))
    if x.size:
        (kernel,) = _kernels(f_jit, x, c, r)
        inner = math.prod(shape) // math.prod(column)
        read_per_row = row is None or inner == math.prod(row)
        assert ("float64:prefix" in kernel.source) == read_per_row
        assert ("float64:at" in kernel.source) == (not read_per_row)


@fused_only
@pytest.mark.parametrize("shape,others", [
    ((4, 5, 3), [(5, 1), (4, 5, 1), (5, 3)]),        # ht's last kernel: columns in a stack
    ((2, 3, 4, 5), [(2, 1, 4, 1), (3, 1, 1), (1, 4, 5)]),
    ((3, 4), [(3, 1), (1, 4), (1, 1)])])
def test_inputs_broadcast_along_inner_axes_are_read_in_place(shape, others):
    # an input broadcast along axes other than leading or trailing ones is
    # read at offsets computed from the element's index, not broadcast out to
    # a full array first; a strided view of one is made contiguous (not full)
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape)
    ys = [rng.standard_normal(s) for s in others]
    strided = [np.repeat(y, 2, axis=-1)[..., ::2] for y in ys]

    def f(x, a, b, c):
        return fnp.tanh(x * a + b) - c * a
    f_jit = fgrad.jit(f)
    want = _unfused(f, x, *ys)
    # to rounding: the C library's tanh and NumPy's differ in the last bit
    np.testing.assert_allclose(f_jit(x, *ys), want, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(f_jit(x, *strided), want, rtol=1e-13, atol=1e-15)
    (kernel,) = _kernels(f_jit, x, *ys)
    assert "float64:copy" not in kernel.source
    assert ("float64:at" in kernel.source) == (shape != (3, 4))
    g = fgrad.grad(lambda x, *ys: fnp.sum(f(x, *ys) ** 2), (0, 1, 2, 3))
    for got, want in zip(fgrad.jit(g)(x, *ys), g(x, *ys)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("shape,group,terms", [
    ((6400, 1), (28, 6400, 3), ((3, 6400, 1),)),
    ((28, 6400, 1), (28, 6400, 3), ((3, None, 1),)),
    ((28, 1, 3), (28, 5, 3), ((15, None, 3), (1, 3, 1))),
    ((2, 1, 4, 1), (2, 3, 4, 5), ((60, None, 4), (5, 4, 1))),
    ((1,), (5,), ())])
def test_broadcast_offsets_merge_whole_runs_and_drop_broadcast_axes(shape, group, terms):
    assert cpu_fusion.broadcast_offset(shape, group) == ("at", terms)
    flat = np.arange(math.prod(shape)).reshape(shape)
    want = np.broadcast_to(flat, group).ravel()
    got = [sum((i // p % (n if n else i // p + 1)) * s for p, n, s in terms)
           for i in range(math.prod(group))]
    np.testing.assert_array_equal(got, want)
@fused_only
def test_a_long_chain_is_cut_into_bounded_kernels_with_the_same_result(monkeypatch):
    monkeypatch.setattr(cpu_fusion, "MAX_KERNEL_OPS", 64)

    def f(x):
        for k in range(130):
            x = fnp.sin(x) * 1.01 if k % 2 else x + 0.1
        return fnp.sum(x)
    x = np.linspace(-1, 1, 5)
    f_jit = fgrad.jit(f)
    kernels = _kernels(f_jit, x)
    assert len(kernels) >= 2 and max(k.size for k in kernels) <= cpu_fusion.MAX_KERNEL_OPS
    _same(f_jit(x), _unfused(f, x))
    got = fgrad.jit(fgrad.grad(f))(x)
    _same(got, fgrad.grad(f)(x))


@fused_only
def test_a_kernel_writes_into_a_dying_intermediate_never_into_an_input():
    def f(x, w, c):
        h = x @ w                           # a new array, dying at the kernel
        return (c * 2.0) * (1.0 - h * h) + c
    x, w = np.linspace(-1, 1, 12).reshape(4, 3), np.linspace(0, 1, 6).reshape(3, 2)
    c = np.linspace(2, 3, 8).reshape(4, 2)
    for a in (x, w, c):
        a.flags.writeable = False           # writing into an input would raise
    f_jit = fgrad.jit(f)
    source = f_jit.lower(x, w, c).source
    product = source.split(" = matmul")[0].split()[-1]
    assert f"out={product})" in source and "out=a" not in source
    want = (c * 2.0) * (1.0 - (x @ w) ** 2) + c
    for _ in range(2):
        np.testing.assert_allclose(f_jit(x, w, c), want, rtol=1e-14)
    # a dying buffer of another layout is not written into: the kernel
    # writes flat arrays, and a ufunc's result on a transposed view keeps
    # the view's order
    def g(x, b, w, c):
        h = fnp.transpose(x) + b            # one operation: a ufunc's new array
        return h @ w, (h * 2.0 + 1.0) * c   # read by a matmul, then by a kernel
    xt, b3 = np.linspace(-1, 1, 12).reshape(3, 4), np.linspace(-0.5, 0.5, 3)
    w3, c4 = np.ones((3, 2)), np.linspace(1, 2, 12).reshape(4, 3)
    g_jit = fgrad.jit(g)
    h = xt.T + b3
    assert ", out=" in g_jit.lower(xt, b3, w3, c4).source
    for got, want in zip(g_jit(xt, b3, w3, c4), (h @ w3, (h * 2.0 + 1.0) * c4)):
        np.testing.assert_allclose(got, want, rtol=1e-14)
    # a kernel that may run its loop twice (vector functions) rereads its
    # inputs: it writes into none of them
    g_jit = fgrad.jit(lambda x, w: fnp.sin(x @ w) * 2.0 + 1.0)
    big_x = np.linspace(-1, 1, 512 * 3).reshape(512, 3)
    (kernel,) = _kernels(g_jit, big_x, w)
    assert "vector_sin" in kernel.source and "out=" not in g_jit.lower(big_x, w).source
    np.testing.assert_allclose(g_jit(big_x, w), np.sin(big_x @ w) * 2.0 + 1.0, rtol=1e-14)


@fused_only
def test_values_read_outside_the_group_are_written_out():
    # the sum may not take the kernel's place: the matmul between reads the group
    def f(x, w):
        h = fnp.tanh(x * 2.0 + 1.0)
        return fnp.sum(h @ w) + fnp.sum(h)
    x, w = np.linspace(-1, 1, 6).reshape(2, 3), np.ones((3, 2))
    _same(fgrad.jit(f)(x, w), _unfused(f, x, w))
    _same(fgrad.jit(fgrad.grad(f))(x, w), fgrad.grad(f)(x, w))


@fused_only
def test_a_reduction_read_before_the_next_one_ends_the_kernel_there():
    # the kernel stands where its last reduction stood: a reduction whose value
    # is read before a later one must not be moved past that reader
    def f(x, c):
        u = fnp.sin(x)
        v, w = u * 2.0, fnp.exp(u) * 3.0
        first = fnp.stack([fnp.sum(v), c])       # not fusable: stays between the sums
        return fnp.max(first) + fnp.sum(w)
    x, c = np.linspace(0, 1, 8), np.array(2.0)
    _same(fgrad.jit(f)(x, c), _unfused(f, x, c))
    grads = fgrad.jit(fgrad.grad(f, argnums=(0, 1)))(x, c)
    for got, want in zip(grads, fgrad.grad(f, argnums=(0, 1))(x, c)):
        _same(got, want)


@fused_only
def test_kernels_are_cached_by_their_loop_and_safe_across_threads():
    x = np.linspace(0, 1, 9)
    (a,) = _kernels(fgrad.jit(lambda x: fnp.exp(fnp.sin(x))), x)
    (b,) = _kernels(fgrad.jit(lambda y: fnp.exp(fnp.sin(y))), x + 1)
    assert a.fn is b.fn
    # threads calling one kernel at once get their own results
    f_jit = fgrad.jit(lambda x: fnp.sin(x) * x + x * 2.0 - 1.0)
    inputs = [np.full(10_000, float(k)) for k in range(4)]
    assert len(_kernels(f_jit, inputs[0])) == 1
    results = [None] * 4

    def work(k):
        results[k] = f_jit(inputs[k])
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        x = inputs[k]
        np.testing.assert_allclose(results[k], np.sin(x) * x + x * 2.0 - 1.0, rtol=1e-15)


@fused_only
def test_compiled_code_refuses_a_shape_or_dtype_it_was_not_built_for():
    f_jit = fgrad.jit(lambda x, y: fnp.sin(x) * y + 1.0)
    x = np.ones(4)
    f_jit(x, x)
    compiled = compiled_for(next(iter(f_jit._cache.values())).graph, np)
    with pytest.raises(InvalidInputError, match=r"built for float64\[4\].*received "
                                                r"float64\[2\]"):
        compiled(np.ones(2), np.ones(2))
    with pytest.raises(InvalidInputError, match=r"received int64\[4\]"):
        compiled(x, np.ones(4, dtype=np.int64))
    # through jit itself, a new shape or dtype retraces
    _same(f_jit(np.ones(2), np.ones(2)), np.sin(np.ones(2)) + 1.0)
    assert f_jit(np.ones(3, np.float32), np.ones(3, np.float32)).dtype == np.float32
    assert f_jit.cache_info().traces == 3


def test_the_cost_model_leaves_slow_functions_on_large_arrays_to_numpy(monkeypatch):
    monkeypatch.undo()                   # the real costs
    # two NumPy calls on an RNN state cost less than a kernel call with its
    # checks; a long arithmetic chain on the same array wins
    tanh_add = fgrad.make_graph(lambda a, b: fnp.tanh(a + b))(np.ones((8, 32)), np.ones(32))
    assert not cpu_fusion.worth_fusing(tanh_add.eqns, 2, 1, 256)
    chain = fgrad.make_graph(lambda a: fnp.tanh(a * 2.0 + a * a - 1.0) * a)(np.ones(4))
    assert cpu_fusion.worth_fusing(chain.eqns, 1, 1, 4)            # dispatch-bound
    assert cpu_fusion.worth_fusing(chain.eqns[:-2], 1, 1, 10_000)   # memory-bound


def test_fusion_off_gives_exactly_the_numpy_code(monkeypatch):
    f = lambda x: fnp.sum(fnp.sin(x) * 2.0 + x)      # noqa: E731
    x = np.linspace(0, 1, 5)
    off = fgrad.jit(f, fuse=False).lower(x)
    assert not off.kernels and "cpu_fused" not in off.source and "sin" in off.source
    monkeypatch.setenv(cpu_fusion.FUSE_ENV, "0")
    assert not cpu_fusion.enabled()
    by_env = fgrad.jit(f).lower(x)
    assert by_env.source == off.source and not by_env.kernels
    # and under grad: the backward half of a fuse=False function stays unfused
    g = fgrad.jit(f, fuse=False)
    monkeypatch.delenv(cpu_fusion.FUSE_ENV)
    np.testing.assert_allclose(fgrad.grad(g)(x), 2 * np.cos(x) + 1)
    (entry,) = g._cache.values()
    split = entry.graph.compiled[("vjp split", (True,))]
    assert all(not cpu_fusion.cpu_kernels(c) for graph in split._seeded.values()
               for key, c in graph.compiled.items() if isinstance(key, tuple))


def test_without_llvmlite_installed_jit_runs_the_numpy_code():
    # a fresh interpreter in which llvmlite cannot be imported, as after pip
    # install fgrad without the jit extra
    code = ("import sys, json; sys.modules['llvmlite'] = None\n"
            "import numpy as np, fgrad, fgrad.numpy as fnp\n"
            "from fgrad.compiler import cpu_fusion\n"
            "f = fgrad.jit(lambda x: fnp.sum(fnp.sin(x) * 2.0 + x))\n"
            "x = np.linspace(0, 1, 5)\n"
            "print(json.dumps([cpu_fusion.enabled(), len(f.lower(x).kernels),\n"
            "                  float(f(x)), fgrad.jit(fgrad.grad(f))(x).tolist()]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    enabled, n_kernels, value, grad = json.loads(out)
    assert not enabled and n_kernels == 0
    x = np.linspace(0, 1, 5)
    np.testing.assert_allclose(value, np.sum(np.sin(x) * 2.0 + x), rtol=1e-15)
    np.testing.assert_allclose(grad, 2 * np.cos(x) + 1, rtol=1e-15)


_NO_NUMBA_RUN = """
import sys, json
sys.modules['numba'] = None             # importing it raises
import numpy as np, fgrad, fgrad.numpy as fnp
from fgrad.compiler import cpu_fusion
f = fgrad.jit(fgrad.grad(lambda x: fnp.sum(fnp.tanh(fnp.sin(x) * 2.0 + x) ** 2)))
x = np.linspace(-3, 3, 1000)
f(x)
f.wait_compiled()
(kernel,) = f.lower(x).kernels
print(json.dumps([f.compile_info()[0].tier, kernel.fn.loaded, f(x).tolist()]))
"""


@fused_only
def test_kernels_compile_and_load_from_the_disk_cache_without_numba(tmp_path):
    # two fresh interpreters in which numba cannot be imported, on one disk
    # cache: the first compiles the kernel, the second loads its machine code
    env = {**os.environ, "FGRAD_KERNEL_CACHE": str(tmp_path), "FGRAD_JIT_COMPILE": "background"}
    runs = [json.loads(subprocess.run([sys.executable, "-c", _NO_NUMBA_RUN], env=env,
                                      capture_output=True, text=True, check=True).stdout)
            for _ in range(2)]
    assert [run[:2] for run in runs] == [["kernels", False], ["kernels", True]]
    x = np.linspace(-3, 3, 1000)
    assert runs[0][2] == runs[1][2]
    t = np.tanh(np.sin(x) * 2.0 + x)
    np.testing.assert_allclose(runs[0][2], 2 * t * (1 - t ** 2) * (2 * np.cos(x) + 1),
                               rtol=1e-12, atol=1e-14)
    assert any(name.startswith("native-") for name in os.listdir(tmp_path))


@fused_only
@pytest.mark.parametrize("n, size", [(20, 100), (20, 10_000), (70, 100)])
def test_a_group_reading_many_arrays_is_one_kernel(n, size):
    # a kernel reads up to MAX_KERNEL_INPUTS (64) arrays, at any size
    rng = np.random.default_rng(3)
    xs = [rng.uniform(0.5, 1.5, size) for _ in range(n)]

    def f(*xs):
        total = xs[0]
        for x in xs[1:]:
            total = total * 0.5 + fnp.sin(x) * total
        return total
    f_jit = fgrad.jit(f)
    np.testing.assert_allclose(f_jit(*xs), _unfused(f, *xs), rtol=1e-13)
    kernels = _kernels(f_jit, *xs)
    one = len(kernels) == 1 and len(kernels[0].plan.inputs) == n
    assert one == (n <= cpu_fusion.MAX_KERNEL_INPUTS)


@fused_only
def test_a_strided_input_read_by_several_kernels_is_made_contiguous_once():
    # each kernel would copy a strided input to read it flat: the graph makes
    # it contiguous once, before the kernels (an input contiguous already is
    # passed as it is)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((100, 400))[:, ::2]
    y = rng.standard_normal((100, 200))

    def f(x, y):
        a = (x * y + 1.0) * x
        b = fnp.sum(a, axis=0, keepdims=True)      # a partial sum: between two kernels
        return (x + b) * (x - 2.0)
    f_jit = fgrad.jit(f)
    want = _unfused(f, x, y)
    np.testing.assert_allclose(f_jit(x, y), want, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(f_jit(np.ascontiguousarray(x), y), want, rtol=1e-13, atol=1e-13)
    lowered = f_jit.lower(x, y)
    assert len(lowered.kernels) == 2
    names = [e.prim.name for e in lowered.optimized.eqns]
    assert names == ["contiguous", "cpu_fused", "sum", "cpu_fused"]   # x's; y has one reader
    assert lowered.optimized.eqns[0].invars[0] is lowered.optimized.invars[0]
    small = fgrad.jit(f).lower(x[:10], y[:10])
    assert "contiguous" not in [e.prim.name for e in small.optimized.eqns]
