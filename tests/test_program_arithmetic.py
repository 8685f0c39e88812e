"""Float ``//`` and ``%``, integer powers and float-to-integer casts in compiled
code: loops of the fused kernels' IR (`fgrad.compiler.kernel_ir`), in a
program and in the kernels tier, never callouts, with NumPy's answers.

Each is compared bit for bit with the interpreted tier (NumPy's own loops) on
NaN, inf, signed zeros and values out of an integer's range; the one
difference allowed is the sign and payload of the NaN that ``%`` or ``//``
of two NaNs gives (NumPy's compiled ``npy_divmod`` picks one of them as its
compiler ordered the operations).
"""
import platform

import numpy as np
import pytest
from program_checks import agree, both

import fgrad
import fgrad.numpy as fnp
from fgrad.compiler import native
from fgrad.compiler.program import PROGRAM_ENV

pytestmark = pytest.mark.skipif(not native.available(), reason="llvmlite missing")
x86_only = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                              reason="NumPy's out-of-range float -> int casts are x86's")

_SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.3, -0.3, 7.5, -7.5, 1e300,
            -1e300, 5e-324, 3.0, -3.0, 0.1, 2.0 ** 60, 3e9, 300.7, -1.9, 2.0 ** 31,
            -2.0 ** 31 - 1, 2.0 ** 63, -2.0 ** 63, 1e19, 70000.5]


def _pairs(dtype):
    with np.errstate(over="ignore"):
        values = np.array(_SPECIAL).astype(dtype)
    return np.repeat(values, len(values)), np.tile(values, len(values))


def _bits(x):
    return np.asarray(x).view(f"u{np.asarray(x).itemsize}")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_float_floor_divide_and_remainder_are_numpys(dtype):
    x, y = _pairs(dtype)
    with np.errstate(all="ignore"):
        compiled, got, want = both(lambda x, y: (x // y, x % y, fnp.floor_divide(x, 0.7),
                                                 fnp.remainder(x, -0.3)), x, y)
        numpy_own = (x // y, x % y, x // dtype_(dtype, 0.7), x % dtype_(dtype, -0.3))
    assert compiled.callouts == []
    both_nan = np.isnan(x) & np.isnan(y)
    for g, w, n in zip(got, want, numpy_own):
        assert g.dtype == w.dtype == n.dtype
        np.testing.assert_array_equal(_bits(g)[~both_nan], _bits(w)[~both_nan])
        np.testing.assert_array_equal(g, n)          # NaN where NumPy's is NaN
    # random operands of every size, bitwise
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(5000) * rng.choice([1e-3, 1.0, 1e3, 1e20], 5000)).astype(dtype)
    y = (rng.standard_normal(5000) * rng.choice([1e-3, 1.0, 1e3, 1e-20], 5000)).astype(dtype)
    with np.errstate(all="ignore"):
        compiled, got, want = both(lambda x, y: (x // y, x % y), x, y)
    agree(got, want, exact=True)


def dtype_(dtype, value):
    return np.dtype(dtype).type(value)


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16",
                                   "uint32", "uint64"])
def test_integer_powers_wrap_as_numpys(dtype):
    x = np.random.default_rng(1).integers(-100, 100, 64).astype(dtype)
    for e in (0, 1, 2, 3, 5, 13, 63):
        compiled, got, want = both(lambda x, e=e: x ** e, x)
        assert compiled.callouts == []
        agree(got, want, exact=True)
    # an unsigned exponent is never negative: a loop too
    e = np.arange(64, dtype=np.uint8)
    compiled, got, want = both(lambda x, e: x ** e, x, e)
    assert compiled.callouts == []
    agree(got, want, exact=True)


def test_a_negative_integer_power_raises_numpys_error():
    # a signed exponent not known when compiling stays NumPy's, which raises
    x, e = np.arange(4), np.array([1, 2, -1, 0])
    compiled, got, want = both(lambda x, e: x ** e, x, np.abs(e))
    assert [c.split(": ")[1] for c in compiled.callouts] == ["power"]
    for run in (compiled.call, lambda *a: fgrad.jit(lambda x, e: x ** e)(*a)):
        with pytest.raises(ValueError, match="Integers to negative integer powers"):
            run(x, e)


@x86_only
@pytest.mark.parametrize("source", ["float64", "float32"])
def test_float_to_integer_casts_are_numpys_on_x86(source):
    # truncated into 32 bits (64 for int64); NaN and out of range the least
    # integer, whose low bits narrower integers keep
    x, _ = _pairs(source)
    for target in ("int8", "int16", "int32", "int64", "uint8", "uint16", "float32"):
        with np.errstate(all="ignore"):
            compiled, got, want = both(lambda x, t=target: x.astype(t), x)
        assert compiled.callouts == [], target
        agree(got, want, exact=True)
    for target in ("uint32", "uint64"):        # NumPy's own loops disagree: NumPy's code
        with np.errstate(all="ignore"):
            compiled, _, _ = both(lambda x, t=target: x.astype(t), x)
        assert [c.split(": ")[1] for c in compiled.callouts] == ["convert_element_type"]


def test_gradients_under_jit_are_one_program(monkeypatch):
    monkeypatch.setenv(PROGRAM_ENV, "all")

    def loss(x):
        k = (x * 3.0).astype(np.int32)
        return fnp.sum((x % 0.75) * x + (x // 0.5) * x ** 2 + (k ** 3) * x)
    x = np.linspace(-2.1, 2.3, 9)
    grad = fgrad.jit(fgrad.grad(loss), compile="sync")
    for _ in range(2):
        got = grad(x)
    (info,) = grad.compile_info()
    assert info.tier == "program" and info.callouts == ()
    np.testing.assert_array_equal(got, fgrad.grad(loss)(x))


@pytest.mark.parametrize("dtype", ["float64", "float32", "int8", "int64", "uint8"])
def test_sign_is_numpys(dtype):
    # 1, -1, or 0 (+0.0 for both zeros), a NaN itself (its payload kept)
    with np.errstate(all="ignore"):
        x = np.array(_SPECIAL).astype(dtype)
    compiled, got, want = both(lambda x: fnp.sign(x) * 1, x)
    assert compiled.callouts == []
    agree(got, want, exact=True)
    np.testing.assert_array_equal(_bits(got[0]), _bits(np.sign(x)))
