"""inv, eigh, qr and svd in a compiled program: NumPy's own LAPACK calls
(`fgrad.compiler.program_linalg`), never callouts, and their derivatives'
pieces (the identity, triangular masks, solves with several right-hand sides)
with them.

Each is compared with the interpreted tier (NumPy's linalg, which calls the
same LAPACK drivers on the same float64 copies) and with NumPy itself: equal
to rounding (bitwise where NumPy's LAPACK and SciPy's are builds that compute
alike), the same dtypes and shapes, and where LAPACK fails, NumPy's error.
"""
import numpy as np
import pytest
from program_checks import agree, both

import fgrad
import fgrad.numpy as fnp
from fgrad.testing import check_grads
from fgrad.compiler import native
from fgrad.compiler.blas import gemm_table
from fgrad.compiler.codegen import generate
from fgrad.compiler.passes import optimize
from fgrad.compiler.program import PROGRAM_ENV, compile_program

pytestmark = [pytest.mark.skipif(not native.available(), reason="llvmlite missing"),
              pytest.mark.skipif(gemm_table() is None, reason="SciPy's Cython LAPACK missing")]


def _tuple(f):
    return lambda a: tuple(f(a))


_DECOMPOSITIONS = {
    "inv": fnp.linalg.inv,
    "eigh": _tuple(fnp.linalg.eigh),
    "qr": _tuple(fnp.linalg.qr),
    "svd": _tuple(lambda a: fnp.linalg.svd(a, full_matrices=False)),
    "svd_full": _tuple(lambda a: fnp.linalg.svd(a, full_matrices=True)),
}
_STEP = {"inv": "Inverse", "eigh": "Eigh", "qr": "QR", "svd": "SVD", "svd_full": "SVD"}
_SQUARE_ONLY = {"inv", "eigh"}


def _matrices(shape, dtype, seed=0):
    a = np.random.default_rng(seed).standard_normal(shape)
    if shape[-1] == shape[-2]:
        a = a + np.swapaxes(a, -1, -2)          # symmetric: eigh reads one triangle
    return a.astype(dtype)


def _shapes(name):
    square = [(1, 1), (3, 3), (2, 5, 5), (2, 3, 4, 4), (40, 40)]
    return square if name in _SQUARE_ONLY else square + [(6, 4), (4, 6), (2, 7, 3), (3, 2, 7)]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(_DECOMPOSITIONS))
def test_decompositions_are_lapack_calls_as_numpys(name, dtype):
    fun = _DECOMPOSITIONS[name]
    for shape in _shapes(name):
        a = _matrices(shape, dtype)
        compiled, got, want = both(fun, a)
        assert compiled.callouts == []
        assert _STEP[name] in {type(s).__name__ for s in compiled.steps}
        # float32 computed in float64 and rounded, as NumPy's linalg does
        agree(got, want)
        numpy_own = getattr(np.linalg, name.split("_")[0])(
            a, **({"full_matrices": name == "svd_full"} if name.startswith("svd") else {}))
        agree(got, (numpy_own,) if name == "inv" else tuple(numpy_own))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_derivatives_through_decompositions_have_no_callouts(dtype):
    def loss(f):
        return lambda a: sum(fnp.sum(fnp.sin(x)) for x in fgrad.tree.tree_leaves(f(a)))
    for name, fun in _DECOMPOSITIONS.items():
        for shape in [(4, 4), (2, 3, 3)] if name in _SQUARE_ONLY else [(4, 4), (5, 3), (2, 3, 5)]:
            a = _matrices(shape, dtype, seed=3)
            compiled, got, want = both(fgrad.grad(loss(fun)), a)
            assert compiled.callouts == [], (name, shape, compiled.callouts)
            agree(got, want)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gradients_under_jit_are_one_program(dtype, monkeypatch):
    # jit's own path (staging, the optimiser, the program tier) against the
    # interpreted gradient, and against finite differences
    monkeypatch.setenv(PROGRAM_ENV, "all")
    a = _matrices((3, 4, 4), "float64", seed=5)
    a = a + 8 * np.eye(4)                        # well apart eigenvalues, well-conditioned

    def loss(a):
        # (products, not integer powers: a float32 power's derivative casts
        # from float64, which is a callout of its own)
        w, v = fnp.linalg.eigh(a)
        q, r = fnp.linalg.qr(a)
        u, s, vh = fnp.linalg.svd(a)
        inv = fnp.linalg.inv(a)
        return sum(fnp.sum(x * x * x) for x in (w, v, inv, r, q, s, u @ vh))
    grad = fgrad.jit(fgrad.grad(loss), compile="sync")
    x = a.astype(dtype)
    for _ in range(2):                           # the first call may run before the program
        got = grad(x)
    (info,) = grad.compile_info()
    assert info.tier == "program" and info.callouts == ()
    assert got.dtype == np.dtype(dtype)
    tol = 1e-3 if dtype == "float32" else 1e-9
    np.testing.assert_allclose(got, fgrad.grad(loss)(x), rtol=tol, atol=tol)
    if dtype == "float64":
        check_grads(loss, (a,), order=1, modes=("rev",))


def _singular():
    a = _matrices((3, 5, 5), "float64") + 10 * np.eye(5)
    a[1, 2] = 3 * a[1, 4]
    return a


@pytest.mark.parametrize("fun, bad, error", [
    (fnp.linalg.inv, _singular(), "Singular matrix"),
    (_tuple(fnp.linalg.eigh), np.full((2, 4, 4), np.nan), "Eigenvalues did not converge"),
    (_tuple(fnp.linalg.svd), np.full((2, 4, 3), np.nan), "SVD did not converge")])
def test_a_matrix_lapack_fails_on_raises_numpys_error(fun, bad, error):
    # the program notes LAPACK's info and runs the equation again by NumPy's
    # code, which raises; other matrices still come out of the program
    graph = optimize(fgrad.make_graph(fun)(np.ones(bad.shape)), np)
    compiled = compile_program(graph)
    assert compiled.callouts == []
    for run in (compiled.call, generate(graph, np).fn):
        with pytest.raises(np.linalg.LinAlgError, match=error):
            run(bad)
    good = _matrices(bad.shape, "float64") + 10 * np.eye(bad.shape[-2], bad.shape[-1])
    agree(compiled.call(good), generate(graph, np).fn(good))


def test_qr_and_inv_of_nan_are_numpys_nans():
    # LAPACK reports nothing wrong: NaN results, as NumPy's
    nan = np.full((4, 4), np.nan)
    for fun in (fnp.linalg.inv, _tuple(fnp.linalg.qr)):
        compiled, got, want = both(fun, nan)
        assert compiled.callouts == []
        agree(got, want, exact=True)


def test_several_right_hand_sides_of_few_small_systems_are_getrs():
    a = _matrices((2, 5, 5), "float64") + 10 * np.eye(5)
    b = _matrices((2, 5, 3), "float64", seed=1)
    for fun in (fnp.linalg.solve, fgrad.grad(lambda a, b: fnp.sum(fnp.linalg.solve(a, b) ** 2),
                                             (0, 1))):
        compiled, got, want = both(fun, a, b)
        assert compiled.callouts == []
        assert "LUSolve" in {type(s).__name__ for s in compiled.steps}
        agree(got, want)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_stacks_of_small_systems_run_the_lu_kernels_loops_in_the_program(dtype):
    # as many matrices as the LU kernels factor at once, or more: their own
    # loops (fgrad.compiler.lu_ir), defined in the program, so the same bits
    # as the interpreted tier's kernels
    rng = np.random.default_rng(7)
    for n in (1, 3, 20):
        a = (rng.standard_normal((9, n, n)) + 3 * np.eye(n)).astype(dtype)
        for k in (1, 3):
            b = rng.standard_normal((9, n, k)).astype(dtype)
            compiled, got, want = both(fnp.linalg.solve, a, b)
            assert compiled.callouts == []
            assert {"LanesFactor", "LanesSolve"} <= {type(s).__name__ for s in compiled.steps}
            agree(got, want, exact=True)
        grad = fgrad.grad(lambda a, b: fnp.sum(fnp.sin(fnp.linalg.solve(a, b))), (0, 1))
        compiled, got, want = both(grad, a, b)
        assert compiled.callouts == []
        agree(got, want)
    singular = np.stack([np.eye(4, dtype=dtype)] * 9)
    singular[5, 2] = 0
    graph = optimize(fgrad.make_graph(fnp.linalg.solve)(singular, singular), np)
    compiled = compile_program(graph)
    for run in (compiled.call, generate(graph, np).fn):
        with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
            run(singular, singular)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_every_decomposition_over_many_shapes(dtype):
    # square, tall and wide matrices of 1 to 70 rows, stacks of up to 3
    rng = np.random.default_rng(11)
    for _ in range(40):
        m, n = (int(v) for v in rng.integers(1, 70, 2))
        stack = tuple(int(v) for v in rng.integers(1, 4, rng.integers(0, 3)))
        for name, fun in _DECOMPOSITIONS.items():
            shape = stack + ((m, m) if name in _SQUARE_ONLY else (m, n))
            a = _matrices(shape, dtype, seed=int(rng.integers(1 << 30)))
            if name == "inv":
                a = a + shape[-1] * np.eye(shape[-1], dtype=dtype)
            compiled, got, want = both(fun, a)
            assert compiled.callouts == [], (name, shape)
            agree(got, want)
