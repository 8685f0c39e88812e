"""Complex values in compiled code: the program tier and the fused kernels.

complex64 and complex128 arrays are loops of the program (and of the fused
kernels), their elements NumPy's interleaved parts. Each operation is
compared with the interpreted tier (NumPy's own loops) on a grid of parts
that holds zeros of both signs, the largest and smallest floats, inf and
NaN: bitwise for arithmetic, division, ``abs``, ``exp``, ``log``, ``sqrt``,
casts, comparisons and copies; to rounding for ``angle`` (NumPy's SIMD
``arctan2`` against the C library's), sums (in order, in complex128, where
NumPy sums pairwise) and products (SciPy's BLAS, where NumPy may call its
own). The gradients of real functions of complex values, the conventions of
`tests/test_complex.py`, run as programs too.
"""
import numpy as np
import pytest
from program_checks import agree, both
from test_complex import HOLOMORPHIC, NON_HOLOMORPHIC

import fgrad
import fgrad.numpy as fnp
from fgrad import lax
from fgrad.compiler import cpu_fusion, native
from fgrad.compiler.blas import gemm_table
from fgrad.compiler.complex_ir import LIBM_FUNCTIONS
from fgrad.compiler.program import PROGRAM_ENV

pytestmark = pytest.mark.skipif(not native.available(), reason="llvmlite missing")

COMPLEX = ["complex64", "complex128"]


def _grid(dtype):
    """Every pair of parts from a list of special and ordinary floats, then
    random values of magnitudes from 1e-3 to 1e3 (where rounding, a fused
    multiply-add's included, shows), and the same values in another order
    (the second operand)."""
    part = np.dtype(dtype).type(0).real.dtype
    info = np.finfo(part)
    values = np.array([0.0, -0.0, 1.0, -2.5, 0.75, 3.0e-3, info.max, -info.max,
                       info.tiny / 4, np.inf, -np.inf, np.nan], part)
    re, im = np.meshgrid(values, values)
    rng = np.random.default_rng(0)
    scale = 10.0 ** rng.uniform(-3, 3, (2, 400))
    z = np.empty(re.size + 400, dtype)
    z.real = np.concatenate([re.ravel(), rng.standard_normal(400) * scale[0]])
    z.imag = np.concatenate([im.ravel(), rng.standard_normal(400) * scale[1]])
    return z, np.roll(z[::-1], 7)


def _bitwise(got, want):
    """Equal part by part, NaN where NumPy has NaN (its payload aside)."""
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert (g.shape, g.dtype) == (w.shape, w.dtype)
        if g.dtype.kind == "c":
            np.testing.assert_array_equal(g.real, w.real)
            np.testing.assert_array_equal(g.imag, w.imag)
        else:
            np.testing.assert_array_equal(g, w)


_OPERATIONS = {
    "add": lambda z, w: z + w, "subtract": lambda z, w: z - w,
    "multiply": lambda z, w: z * w, "divide": lambda z, w: z / w,
    "negative": lambda z, w: -z, "square": lambda z, w: fnp.square(z),
    "conj": lambda z, w: fnp.conj(z), "parts": lambda z, w: (fnp.real(z), fnp.imag(z)),
    "abs": lambda z, w: fnp.abs(z),
    "compare": lambda z, w: (z == w, z != w),
    "predicates": lambda z, w: (fnp.isnan(z), fnp.isinf(z), fnp.isfinite(z)),
    "where": lambda z, w: fnp.where(fnp.real(z) > fnp.imag(w), z, w),
    "constants": lambda z, w: (z * 2.0 + 1j, (1.5 - 0.5j) / z, z - True),
    "casts": lambda z, w: (fnp.real(z).astype(z.dtype), z.astype(np.complex128),
                           (fnp.imag(w) > 0).astype(z.dtype), fnp.real(z) * w),
    "chain": lambda z, w: fnp.abs(z * w - z / (w + 1.0)) + fnp.real(fnp.conj(z) * z),
}
# the C library's cexp, clog, csqrt, csin, ..., as NumPy's, and NumPy's own
# formulas of those and of the real ones
for _name in list(LIBM_FUNCTIONS) + (["log2", "log10", "exp2", "expm1"] if LIBM_FUNCTIONS
                                     else []):
    _OPERATIONS[_name] = lambda z, w, fn=getattr(fnp, _name): fn(z)


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("name", sorted(_OPERATIONS))
def test_elementwise_operations_are_numpys_bit_for_bit(name, dtype):
    z, w = _grid(dtype)
    with np.errstate(all="ignore"):
        compiled, got, want = both(_OPERATIONS[name], z, w)
        direct = _OPERATIONS[name](z, w)
    assert compiled.callouts == []
    _bitwise(got, want)
    _bitwise(got, direct if isinstance(direct, tuple) else (direct,))


@pytest.mark.skipif(not LIBM_FUNCTIONS, reason="cpow is called as x86-64 Linux's")
@pytest.mark.parametrize("dtype", COMPLEX)
def test_powers_are_numpys_npy_cpow(dtype):
    # NumPy's special cases: zero exponents and bases, integral real
    # exponents under 100 (products, a reciprocal), then the C library's cpow
    z, w = _grid(dtype)
    exponents = np.resize(np.array([0, 1, 2, 3, 4, 7, -1, -2, -3, -7, 99, -99, 100, 64,
                                    2.5, -0.5, 1e10, np.nan, np.inf], z.real.dtype), z.shape)
    e = exponents.astype(dtype)
    e.imag[::5] = 0.5

    def f(z, w, x, e):
        return z ** w, z ** x, z ** e, z ** 3, z ** -2, z ** 2.5, z ** (1 + 1j), 2.0 ** z
    with np.errstate(all="ignore"):
        compiled, got, want = both(f, z, w, exponents, e)
    assert compiled.callouts == []
    _bitwise(got, want)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_broadcasting_and_real_operands(dtype):
    z, w = _grid(dtype)
    x = np.linspace(-2.0, 3.0, 12).astype(z.real.dtype)

    def f(z, w, x):
        a, b = z[:144].reshape(12, 12), w[:12]
        return a * b, a / x[:, None], x * b + a, fnp.abs(a - x) * b[0]
    with np.errstate(all="ignore"):
        compiled, got, want = both(f, z, w, x)
    assert compiled.callouts == []
    _bitwise(got, want)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_angle_is_the_c_librarys_arctan2_equal_to_rounding(dtype):
    z, w = _grid(dtype)
    with np.errstate(all="ignore"):
        compiled, got, want = both(lambda z: fnp.angle(z * 2.0), z)
    assert compiled.callouts == []
    agree(got, want)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_sums_accumulate_in_complex128_and_copies_move_bits(dtype):
    rng = np.random.default_rng(0)
    z = (rng.standard_normal((5, 6, 7)) + 1j * rng.standard_normal((5, 6, 7))).astype(dtype)
    z[0, 0, 0] = complex(np.nan, 1.0)

    def f(z):
        return (fnp.sum(z), fnp.sum(z, axis=1), fnp.sum(z * 2.0, axis=(0, 2), keepdims=True),
                fnp.sum(fnp.abs(z)), z.transpose(2, 0, 1), z[1:, ::-2], z.reshape(30, 7).T,
                fnp.broadcast_to(z[0, 0], (3, 7)), fnp.concatenate([z, z * 1j], axis=1))
    compiled, got, want = both(f, z)
    assert compiled.callouts == []
    agree(got, want)
    _bitwise(got[4:], want[4:])                 # the copies: bit for bit
    np.testing.assert_allclose(got[1], np.sum(z, axis=1), rtol=1e-5)


def test_what_numpy_does_its_own_way_stays_a_callout():
    z, w = _grid("complex128")
    with np.errstate(all="ignore"):
        # NumPy's lexicographic maximum and order, a function NumPy writes
        # in its own way
        compiled, got, want = both(lambda z, w: (fnp.maximum(z, w), z < w, fnp.max(z),
                                                 fnp.log1p(z)), z, w)
    assert [c.split(": ")[1] for c in compiled.callouts] == [
        "maximum", "less", "max", "log1p"]
    _bitwise(got, want)


def _complex(rng, shape, dtype):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


@pytest.mark.skipif(gemm_table() is None, reason="SciPy's BLAS missing")
@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("a, b", [((3, 4), (4, 5)), ((4,), (4, 2)), ((2, 3, 4), (4,)),
                                  ((2, 1, 3, 4), (5, 4, 2)), ((40, 50), (50, 30))])
def test_products_are_zgemm_and_cgemm_calls(a, b, dtype):
    rng = np.random.default_rng(1)
    a, b = _complex(rng, a, dtype), _complex(rng, b, dtype)

    def f(a, b):
        return a @ b, fnp.einsum("...ij,...jk->...ik", a[..., None, :], b[..., None]) \
            if a.ndim == b.ndim == 1 else a @ b * 1j
    compiled, got, want = both(f, a, b)
    assert compiled.callouts == []
    agree(got, want)
    tol = 1e-5 if dtype == "complex64" else 1e-12
    np.testing.assert_allclose(got[0], a @ b, rtol=tol, atol=tol)


@pytest.mark.skipif(gemm_table() is None, reason="SciPy's BLAS missing")
@pytest.mark.parametrize("dtype", COMPLEX)
def test_the_gradient_of_a_real_function_of_complex_values_has_no_callouts(dtype):
    rng = np.random.default_rng(2)
    z, w = _complex(rng, (3, 4), dtype), _complex(rng, (5, 4), dtype)
    x = rng.standard_normal(4).astype(z.real.dtype)

    def loss(z, w, x):
        h = fnp.exp(1j * x) * z @ w.T / (2.0 + fnp.conj(z[:, :1]))
        return fnp.sum(fnp.abs(h) ** 2) + fnp.sum(fnp.real(fnp.sqrt(h + 3.0) * fnp.log(w[:, 0])))
    grad = fgrad.grad(loss, argnums=(0, 1, 2))
    compiled, got, want = both(grad, z, w, x)
    assert compiled.callouts == [] or not LIBM_FUNCTIONS
    agree(got, want)
    assert [g.dtype for g in got] == [z.dtype, w.dtype, x.dtype]


def _point(z, dtype):
    return np.asarray(z, dtype)


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("name", sorted(HOLOMORPHIC) + sorted(NON_HOLOMORPHIC))
def test_every_complex_function_and_its_gradient_as_one_program(name, dtype):
    f, z = {**HOLOMORPHIC, **NON_HOLOMORPHIC}[name]
    z = _point(z, dtype)
    _, got, want = both(f, z)
    agree(got, want)

    def scalar(z):
        y = f(z)
        return fnp.sum(fnp.real(y) * 1.5 + fnp.imag(y * 1j))
    _, got, want = both(fgrad.grad(scalar), z)
    agree(got, want)


_ROWS = np.array([0, 2, -1, 2])


@pytest.mark.parametrize("dtype", COMPLEX)
def test_gathers_scatters_and_sets_of_complex_values_are_loops(dtype):
    # copies move each element's bits (NaN parts included); a scatter adds
    # part by part, repeated indices in numpy.add.at's order: bitwise NumPy's
    z, w = _grid(dtype)
    x, v = z[:20].reshape(4, 5), w[:20].reshape(4, 5)
    rows, cols = np.array([[2, 0], [2, -1]]), np.array([[1, 3], [1, 0]], np.uint8)
    cases = {
        "Gather": [lambda x, v: x[_ROWS], lambda x, v: fnp.take(x, _ROWS, axis=1),
                   lambda x, v: x[rows, cols], lambda x, v: x[:, rows]],
        "ScatterAdd": [lambda x, v: fgrad.at(fnp.zeros_like(x))[:, _ROWS].add(v[:, :4]),
                       lambda x, v: fgrad.at(x)[rows, cols].add(v[:2, :2])],
        "Set": [lambda x, v: fgrad.at(x)[_ROWS].set(v),    # row 2 twice: the last wins
                lambda x, v: fgrad.at(x)[:, _ROWS].set(v[0, 1]),
                lambda x, v: fgrad.at(x)[rows, cols].set(v[:2, :2])],
    }
    for step, funs in cases.items():
        for fun in funs:
            with np.errstate(all="ignore"):
                compiled, got, want = both(fun, x, v)
            assert compiled.callouts == []
            assert step in {type(s).__name__ for s in compiled.steps}
            _bitwise(got, want)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_repeated_complex_indices_sum_in_numpys_order(dtype):
    # many values of mixed magnitudes at one index: any other order of the
    # sum would round otherwise
    rng = np.random.default_rng(3)
    v = (_complex(rng, (64, 3), dtype) * 10.0 ** rng.uniform(-6, 6, (64, 1))).astype(dtype)
    index = rng.integers(0, 2, 64)

    def f(v):
        return fgrad.at(fnp.zeros((2, 3), v.dtype))[index].add(v)
    compiled, got, want = both(f, v)
    assert compiled.callouts == []
    _bitwise(got, want)
    expected = np.zeros((2, 3), dtype)
    np.add.at(expected, index, v)
    _bitwise(got, (expected,))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_the_gradient_of_a_real_loss_through_complex_indexing(dtype):
    # the gather's transpose is a scatter-add of the complex cotangent, the
    # set's a set of a literal 0
    rng = np.random.default_rng(4)
    z = _complex(rng, (4, 5), dtype)
    x = rng.standard_normal(5).astype(z.real.dtype)

    def loss(z, x):
        y = z[_ROWS][:, :4] * fnp.take(z, _ROWS, axis=1).T * x[:4]
        s = fgrad.at(z)[_ROWS[:2]].set(z[3] * 2.0) * x      # one row for two: broadcast
        return fnp.sum(fnp.abs(y) ** 2) + fnp.sum(fnp.real(z[_ROWS, _ROWS] * (2 - 1j))) \
            + fnp.sum(fnp.real(s * fnp.conj(s)))
    compiled, got, want = both(fgrad.grad(loss, argnums=(0, 1)), z, x)
    assert compiled.callouts == []
    assert {"Gather", "ScatterAdd", "Set"} <= {type(s).__name__ for s in compiled.steps}
    _bitwise(got[:1], want[:1])
    agree(got[1:], want[1:])        # x's: a float sum, in order where NumPy's is pairwise


@pytest.mark.parametrize("dtype", COMPLEX)
def test_loops_carry_complex_values(dtype):
    z = (np.linspace(-1.0, 1.0, 6) + 0.5j).astype(dtype)

    def f(z):
        return lax.scan(lambda h, x: (h * x * 0.5 + 1j, fnp.abs(h)), z[0] * 0, z)
    compiled, got, want = both(f, z)
    assert compiled.callouts == []
    _bitwise(got, want)
    compiled, got, want = both(fgrad.grad(lambda x: fnp.sum(f(x * (1 + 1j))[1])),
                               z.real.copy())
    assert compiled.callouts == []
    agree(got, want)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_under_jit_every_graph_a_program(dtype, monkeypatch):
    monkeypatch.setenv(PROGRAM_ENV, "all")
    z, w = _grid(dtype)
    f = fgrad.jit(lambda z, w: fnp.abs(z * w + 1j) / fnp.sum(fnp.conj(w[:4]) * w[:4]),
                  compile="sync")
    with np.errstate(all="ignore"):
        want = f(z, w)
        (info,) = f.compile_info()
        assert info.tier == "program" and info.callouts == ()
        agree([f(z, w)], [want])


@pytest.mark.skipif(not cpu_fusion.enabled(), reason="llvmlite missing or FGRAD_JIT_FUSE=0")
@pytest.mark.parametrize("dtype", COMPLEX)
def test_fused_kernels_compute_complex_groups(dtype, monkeypatch):
    # kernels at any price, and no program to run instead
    monkeypatch.setattr(cpu_fusion, "KERNEL_CALL_NS", 0)
    monkeypatch.setenv(PROGRAM_ENV, "0")
    z, w = _grid(dtype)

    def f(z, w):
        # complex constants are the kernel's constants, as real ones are
        y = z * w - z / (w + 1.0) + fnp.conj(z) * (0.5 - 2j)
        return y, fnp.abs(y) * fnp.real(w), fnp.sum(y * 2.0)
    for z, w in ((z, w), (z[3], w[3])):         # arrays, and 0-d ones
        f_jit = fgrad.jit(f)
        with np.errstate(all="ignore"):
            got, want = f_jit(z, w), fgrad.jit(f, fuse=False)(z, w)
        assert f_jit.lower(z, w).kernels
        _bitwise(got[:2], want[:2])
        agree(got[2:], want[2:])
