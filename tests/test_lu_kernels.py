"""The kept LU factors of `fgrad.compiler.lu_kernels`: LAPACK's, whichever way
they are computed (several matrices at once by `fgrad.compiler.lu_ir`'s
kernel, or one ``getrf`` call a matrix), and the solves with them."""
import numpy as np
import pytest

scipy_linalg = pytest.importorskip("scipy.linalg")

from fgrad.compiler import lu_ir, lu_kernels, native

pytestmark = pytest.mark.skipif(not native.available(), reason="llvmlite missing")

RNG = np.random.default_rng(7)


def _lapack(a):
    """``(lu, piv)`` of SciPy's ``getrf`` of each a^T, stored as `factor` keeps them."""
    stack = a.reshape((-1,) + a.shape[-2:])
    factors = [scipy_linalg.lu_factor(m.T, check_finite=False) for m in stack]
    lu = np.stack([f[0].T for f in factors]).reshape(a.shape)
    piv = np.stack([f[1] + 1 for f in factors]).reshape(a.shape[:-1])
    return lu, piv


# counts around the lanes (4 doubles, 8 floats) leave unused lanes in the last chunk;
# n past LANES_MAX_N goes to getrf
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("count", [1, 3, 4, 5, 8, 9, 17])
@pytest.mark.parametrize("n", [1, 2, 7, 32, lu_kernels.LANES_MAX_N,
                               lu_kernels.LANES_MAX_N + 1])
def test_factors_and_pivots_are_lapacks(dtype, count, n):
    a = RNG.standard_normal((count, n, n)).astype(dtype)
    lu, piv = lu_kernels.factor(a)
    want_lu, want_piv = _lapack(a)
    np.testing.assert_array_equal(piv, want_piv)
    tol = 1e-4 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(lu, want_lu, rtol=tol, atol=tol * n)
    assert lu.dtype == dtype and piv.dtype == np.int32


def _lapack_info(a):
    """LAPACK's ``info`` of each a^T: the 1-based column of the first zero pivot."""
    getrf = scipy_linalg.lapack.get_lapack_funcs("getrf", (a,))
    return np.array([getrf(m.T)[2] for m in a.reshape((-1,) + a.shape[-2:])])


@pytest.mark.parametrize("n", [4, lu_kernels.LANES_MAX_N + 1])
def test_each_matrix_is_factored_on_its_own(n):
    # the same matrix gives the same factors bit for bit wherever it is in the
    # stack (lane and chunk), whatever its neighbours hold: singular, NaN
    m = RNG.standard_normal((n, n))
    stack = RNG.standard_normal((11, n, n))
    stack[[0, 5, 10]] = m
    stack[3] = 0.0
    stack[6, 1, 1] = np.nan
    lu, piv, info = lu_kernels.factor_all(stack)
    assert info.tolist() == [0, 0, 0, 1] + [0] * 7
    for k in (5, 10):
        np.testing.assert_array_equal(lu[k], lu[0])
        np.testing.assert_array_equal(piv[k], piv[0])
    np.testing.assert_allclose(lu[0], _lapack(m)[0], rtol=1e-11, atol=1e-11)
    assert np.isnan(lu[6]).any() and not np.isnan(np.delete(lu, 6, axis=0)).any()


@pytest.mark.parametrize("n", [4, lu_kernels.LANES_MAX_N + 1])
def test_singular_matrices_report_lapacks_column(n):
    a = RNG.standard_normal((5, n, n))
    a[1, :, 2] = 0.0                # a^T's third row is zero
    a[4] = np.outer(np.arange(1.0, n + 1), np.ones(n))     # rank one
    info = lu_kernels.factor_all(a)[2]
    np.testing.assert_array_equal(info, _lapack_info(a))
    assert info[1] > 0 and info[4] > 0 and not info[[0, 2, 3]].any()
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        lu_kernels.factor(a)


def test_factor_reads_views_and_stacked_axes():
    base = RNG.standard_normal((2, 3, 8, 8))
    view = np.swapaxes(base, -1, -2)[:, ::2]      # neither C- nor F-ordered
    lu, piv = lu_kernels.factor(view)
    want_lu, want_piv = _lapack(np.ascontiguousarray(view))
    assert lu.shape == view.shape and piv.shape == view.shape[:-1]
    np.testing.assert_array_equal(piv, want_piv)
    np.testing.assert_allclose(lu, want_lu, rtol=1e-11, atol=1e-11)
    assert lu_kernels.factor(np.zeros((0, 3, 3)))[0].shape == (0, 3, 3)


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("n, k", [(1, 1), (5, 1), (32, 8), (lu_kernels.LANES_MAX_N + 3, 2)])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32, np.complex64])
def test_solves_with_the_factors_are_numpys(transpose, n, k, dtype):
    a = RNG.standard_normal((6, n, n)) + 2 * np.sqrt(n) * np.eye(n)
    b = RNG.standard_normal((6, n, k))
    if np.dtype(dtype).kind == "c":
        a, b = a + 1j * RNG.standard_normal(a.shape), b - 1j * RNG.standard_normal(b.shape)
    a, b = a.astype(dtype), b.astype(dtype)
    x = lu_kernels.solve(*lu_kernels.factor(a), b, transpose=transpose)
    want = np.linalg.solve(np.swapaxes(a, -1, -2) if transpose else a, b)
    tol = 1e-4 if dtype in (np.float32, np.complex64) else 1e-10
    assert x.dtype == dtype
    np.testing.assert_allclose(x, want, rtol=tol, atol=tol)


def test_solves_broadcast_factors_and_right_hand_sides():
    # one matrix against a stack of right-hand sides, a stack against one,
    # and stacks that broadcast along an axis each
    a = RNG.standard_normal((3, 1, 4, 4)) + 4 * np.eye(4)
    b = RNG.standard_normal((1, 2, 4, 3))
    for a_, b_ in ((a[0, 0], b), (a, b[0, 0]), (a, b)):
        x = lu_kernels.solve(*lu_kernels.factor(a_), b_, transpose=False)
        np.testing.assert_allclose(x, np.linalg.solve(a_, b_), rtol=1e-12, atol=1e-12)


def test_lanes_fill_a_register():
    assert lu_ir.lanes(np.float64) * 8 == lu_ir.lanes(np.float32) * 4 == lu_ir.REGISTER_BYTES
