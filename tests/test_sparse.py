"""fgrad.sparse and fgrad.scipy.sparse.linalg: sparse arrays with traced values,
gradients that keep the sparsity, and solves that factorize once."""
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import fgrad
import fgrad.numpy as fnp
import fgrad.sparse as fs
from fgrad.errors import (
    ConvergenceError,
    DeviceError,
    LinalgDerivativeError,
    SingularMatrixError,
    SparseShapeError,
    SparseStructureError,
)
from fgrad.scipy.sparse import linalg as fla
from fgrad.testing import check_grads


def _matrix(m=6, n=5, seed=0, format="csr"):
    return sp.random_array((m, n), density=0.5, format=format, rng=seed)


def _system(n=7, seed=1):
    """A well-conditioned (diagonally dominant) square matrix."""
    r = sp.random_array((n, n), density=0.4, format="csr", rng=seed)
    return (r + 4 * sp.eye_array(n)).tocsr()


def _rebuild(A):
    """A function of the values building a sparse array on ``A``'s structure."""
    return lambda d: fs.csr_array((d, A.indices, A.indptr), shape=A.shape)


# -- construction ----------------------------------------------------------------------

@pytest.mark.parametrize("format", ["csr", "csc", "coo"])
def test_constructors_agree_with_scipy(format):
    A = _matrix(format=format)
    cls = getattr(fs, f"{format}_array")
    for S in (cls(A), cls(A.toarray()), cls(fs.csr_array(A))):
        assert S.format == format and S.shape == A.shape
        np.testing.assert_allclose(S.todense(), A.toarray())
    coo = A.tocoo()
    np.testing.assert_allclose(cls((coo.data, (coo.row, coo.col)), shape=A.shape).todense(),
                               A.toarray())


def test_coo_repeats_are_summed_and_conversions_sum_them_once():
    C = fs.coo_array((np.array([1.0, 2.0, 3.0]), (np.array([0, 0, 1]), np.array([1, 1, 0]))),
                     shape=(2, 2))
    expected = np.array([[0.0, 3.0], [3.0, 0.0]])
    np.testing.assert_allclose(C.todense(), expected)
    csr = C.tocsr()
    assert csr.nnz == 2
    np.testing.assert_allclose(csr.todense(), expected)
    g = fgrad.grad(lambda d: fnp.sum(fs.coo_array((d, (C.row, C.col)), shape=(2, 2))
                                     .tocsr().data * np.array([1.0, 2.0])))(C.data)
    np.testing.assert_allclose(g, [1.0, 1.0, 2.0])


# -- operations --------------------------------------------------------------------------

def test_products_transposes_and_reductions_match_scipy():
    A = _matrix()
    S = fs.csr_array(A)
    x, X = np.arange(5.0), np.arange(15.0).reshape(5, 3)
    y, Y = np.arange(6.0), np.arange(12.0).reshape(2, 6)
    np.testing.assert_allclose(S @ x, A @ x)
    np.testing.assert_allclose(S @ X, A @ X)
    np.testing.assert_allclose(y @ S, y @ A)
    np.testing.assert_allclose(Y @ S, Y @ A)
    np.testing.assert_allclose(S.T @ y, A.T @ y)
    assert S.T.format == "csc"
    np.testing.assert_allclose(S.sum(), A.sum())
    for axis in (0, 1, -1):
        np.testing.assert_allclose(S.sum(axis), A.sum(axis))
    for k in (-2, 0, 1):
        np.testing.assert_allclose(S.diagonal(k), A.diagonal(k))
    np.testing.assert_allclose((2.0 * S - S / 4).todense(), 1.75 * A.toarray())
    np.testing.assert_allclose(S.multiply(x).todense(), A.multiply(x).toarray())
    np.testing.assert_allclose((S + A).todense(), 2 * A.toarray())
    other = _matrix(seed=4)
    np.testing.assert_allclose((S - other).todense(), (A - other).toarray())
    np.testing.assert_allclose(abs(-S).power(2).todense(), A.power(2).toarray())


def test_builders_match_scipy():
    A, B = _matrix(3, 2, 0), _matrix(2, 4, 1)
    np.testing.assert_allclose(fs.kron(A, B).todense(), sp.kron(A, B).toarray())
    np.testing.assert_allclose(fs.block_diag([A, B], format="csr").todense(),
                               sp.block_diag([A, B]).toarray())
    diagonals = [np.arange(1.0, 5.0), np.arange(3.0), [7.0]]
    np.testing.assert_allclose(
        fs.diags_array(diagonals, offsets=[0, -1, 2]).todense(),
        sp.diags_array(diagonals, offsets=[0, -1, 2]).toarray())


def test_scipy_matrices_are_constant_operands():
    A = _matrix()
    x = np.linspace(-1, 1, 5)

    def loss(x):
        return fnp.sum((A @ x) ** 2) + fnp.sum(fnp.matmul(A, x)) + fnp.sum(x @ A.T)
    g = fgrad.grad(loss)(x)
    dense = A.toarray()
    expected = 2 * dense.T @ (dense @ x) + 2 * dense.T @ np.ones(6)
    np.testing.assert_allclose(g, expected)


# -- gradients keep the sparsity ---------------------------------------------------------

def test_gradient_with_respect_to_a_sparse_array_is_sparse():
    A = _matrix()
    S, x = fs.csr_array(A), np.linspace(0, 1, 5)
    g = fgrad.grad(lambda S: fnp.sum(fnp.sin(S @ x)))(S)
    assert type(g) is fs.csr_array and g.structure == S.structure
    dense = fgrad.grad(lambda M: fnp.sum(fnp.sin(M @ x)))(A.toarray())
    np.testing.assert_allclose(g.data, dense[g.structure.rows, g.structure.cols])


@pytest.mark.parametrize("op", ["matvec", "rmatmul", "transpose", "sum0", "diag", "dense",
                                "mul", "kron", "block", "diags", "csc", "scale"])
def test_operations_differentiate_to_second_order(op):
    A = _matrix(5, 5, 3)
    build = _rebuild(A)
    x = np.linspace(-1, 1, 5)
    X = np.linspace(0, 2, 10).reshape(5, 2)
    funs = {
        "matvec": lambda d, x: build(d) @ x,
        "rmatmul": lambda d, x: X.T @ build(d) * x,
        "transpose": lambda d, x: build(d).T @ (x * x),
        "sum0": lambda d, x: build(d).multiply(x).sum(0),
        "diag": lambda d, x: build(d).diagonal(1) * x[:4],
        "dense": lambda d, x: build(d).todense() * x,
        "mul": lambda d, x: (build(d) * build(d)) @ x,
        "kron": lambda d, x: fs.kron(build(d), np.array([[1.0, -1.0]])).sum(1) * 1.0,
        "block": lambda d, x: fs.block_diag([build(d), x[None, :]]).sum(0),
        "diags": lambda d, x: fs.diags_array([x, d[:4]], offsets=[0, 1]) @ x,
        "csc": lambda d, x: build(d).tocsc() @ x,
        "scale": lambda d, x: (build(d) * x[0]) @ x,
    }
    check_grads(funs[op], (A.data.copy(), x), order=2, modes=("fwd", "rev"))


def test_vmap_over_values_and_over_dense_operands():
    A = _matrix()
    build = _rebuild(A)
    D = np.stack([A.data, 2 * A.data, -A.data])
    X = np.arange(15.0).reshape(3, 5)
    per_values = fgrad.vmap(lambda d: build(d) @ X[0])(D)
    np.testing.assert_allclose(per_values, np.stack([sp.csr_array(
        (d, A.indices, A.indptr), shape=A.shape) @ X[0] for d in D]))
    np.testing.assert_allclose(fgrad.vmap(lambda x: build(A.data) @ x)(X), (A @ X.T).T)
    both = fgrad.vmap(lambda d, x: build(d) @ x)(D, X)
    np.testing.assert_allclose(both[1], 2 * (A @ X[1]))
    # per-example gradients with respect to the values: sparse, batched
    S = fs.csr_array(A)
    grads = fgrad.vmap(fgrad.grad(lambda S, x: fnp.sum((S @ x) ** 2)), in_axes=(None, 0))(S, X)
    assert type(grads) is fs.csr_array and grads.data.shape == (3, A.nnz)


def test_jit_sees_the_values_only():
    A = _matrix()
    S, x = fs.csr_array(A), np.linspace(0, 1, 5)
    step = fgrad.jit(fgrad.value_and_grad(lambda S, x: fnp.sum((S @ x) ** 2)))
    value, g = step(S, x)
    again = step(fs.csr_array((2 * S.data, S.indices, S.indptr), shape=S.shape), x)
    assert step.cache_info().traces == 1        # new values, same structure: no retrace
    np.testing.assert_allclose(value, np.sum((A @ x) ** 2))
    np.testing.assert_allclose(again[0], 4 * value)
    np.testing.assert_allclose(g.data, fgrad.grad(lambda S: fnp.sum((S @ x) ** 2))(S).data)


def test_sparse_jacobian_matches_the_dense_one():
    def f(x):
        inner = x[2:] - 2 * x[1:-1] + x[:-2]
        return fnp.concatenate([x[:1], fnp.sin(inner) * x[1:-1], x[-1:] ** 2])
    n = 12
    pattern = sp.diags_array([1.0, 1.0, 1.0], offsets=[-1, 0, 1], shape=(n, n))
    x = np.linspace(0.1, 1.2, n)
    J = fs.sparse_jacobian(f, pattern)(x)
    assert type(J) is fs.csr_array and J.nnz == pattern.nnz
    np.testing.assert_allclose(J.todense(), fgrad.jacfwd(f)(x), atol=1e-14)
    colours = fs.jacobian.colour_columns(J.structure.rows, J.structure.cols, n)
    assert colours.max() + 1 == 3                 # tridiagonal: three JVPs for any n


# -- solves -------------------------------------------------------------------------------

def test_spsolve_values_gradients_and_one_factorization():
    A = _system()
    build = _rebuild(A)
    b = np.linspace(1, 2, 7)
    np.testing.assert_allclose(fla.spsolve(A, b), spla.spsolve(A.tocsc(), b))
    check_grads(lambda d, b: fla.spsolve(build(d), b), (A.data.copy(), b), order=2,
                modes=("fwd", "rev"))
    graph = fgrad.make_graph(fgrad.grad(lambda d, b: fnp.sum(fla.spsolve(build(d), b) ** 2),
                                        (0, 1)))(A.data, b)
    names = [eqn.prim.name for eqn in graph.eqns]
    assert names.count("splu") == 1 and names.count("lu_solve_sparse") == 2
    g = fgrad.grad(lambda S: fnp.sum(fla.spsolve(S, b)))(fs.csr_array(A))
    assert type(g) is fs.csr_array


def test_splu_and_factorized_inside_a_loss():
    A = _system()
    S = fs.csr_array(A)
    B = np.arange(14.0).reshape(7, 2)

    def loss(S, B):
        lu = fla.splu(S)
        return fnp.sum(lu.solve(B) ** 2) + fnp.sum(lu.solve(B[:, 0], trans="T")) \
            + fnp.sum(fla.factorized(S)(B[:, 1]))
    gS, gB = fgrad.grad(loss, (0, 1))(S, B)
    dense = A.toarray()

    def dense_loss(M, B):
        return fnp.sum(fnp.linalg.solve(M, B) ** 2) + fnp.sum(fnp.linalg.solve(M.T, B[:, 0])) \
            + fnp.sum(fnp.linalg.solve(M, B[:, 1]))
    dM, dB = fgrad.grad(dense_loss, (0, 1))(dense, B)
    np.testing.assert_allclose(gS.data, dM[gS.structure.rows, gS.structure.cols])
    np.testing.assert_allclose(gB, dB)


def test_spsolve_under_jit_and_vmap():
    A = _system()
    build = _rebuild(A)
    b = np.linspace(1, 2, 7)
    f = fgrad.jit(fgrad.grad(lambda d, b: fnp.sum(fla.spsolve(build(d), b) ** 2)))
    np.testing.assert_allclose(f(A.data, b), fgrad.grad(
        lambda d: fnp.sum(fla.spsolve(build(d), b) ** 2))(A.data))
    Bs = np.stack([b, 2 * b])
    np.testing.assert_allclose(fgrad.vmap(lambda b: fla.spsolve(A, b))(Bs)[1],
                               2 * spla.spsolve(A.tocsc(), b))


def _spd(n=12):
    lap = sp.diags_array([-1.0, 2.5, -1.0], offsets=[-1, 0, 1], shape=(n, n)).tocsr()
    return (lap + sp.diags_array(np.linspace(0.0, 1.0, n - 2), offsets=2, shape=(n, n))
            + sp.diags_array(np.linspace(0.0, 1.0, n - 2), offsets=-2, shape=(n, n))).tocsr()


@pytest.mark.parametrize("name", ["cg", "minres", "gmres", "bicgstab"])
def test_iterative_solves_differentiate_like_spsolve(name):
    A = _spd() if name in ("cg", "minres") else _system(12)
    build = _rebuild(A)
    solver = getattr(fla, name)
    b = np.linspace(1.0, 2.0, 12)

    def loss(solve):
        return lambda d, b: fnp.sum(fnp.sin(solve(build(d), b)))
    iterative = loss(lambda A, b: solver(A, b, rtol=1e-13)[0])
    direct = loss(fla.spsolve)
    np.testing.assert_allclose(iterative(A.data, b), direct(A.data, b), rtol=1e-9)
    for got, want in zip(fgrad.grad(iterative, (0, 1))(A.data, b),
                         fgrad.grad(direct, (0, 1))(A.data, b)):
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-10)
    tangents = (np.cos(np.arange(A.nnz)), b[::-1].copy())
    _, t_got = fgrad.jvp(iterative, (A.data, b), tangents)
    _, t_want = fgrad.jvp(direct, (A.data, b), tangents)
    np.testing.assert_allclose(t_got, t_want, rtol=1e-7)
    np.testing.assert_allclose(fgrad.jit(fgrad.grad(iterative))(A.data, b),
                               fgrad.grad(direct)(A.data, b), rtol=1e-7, atol=1e-10)
    batched = fgrad.vmap(lambda b: solver(A, b, rtol=1e-13)[0])(np.stack([b, -b]))
    np.testing.assert_allclose(batched[1], -spla.spsolve(A.tocsc(), b), rtol=1e-9)


def test_a_solve_that_does_not_converge_raises():
    A = _spd(40)
    with pytest.raises(ConvergenceError, match=r"cg: stopped after 2 iterations with "
                                               r"relative residual"):
        fla.cg(A, np.ones(40), maxiter=2)
    with pytest.raises(ConvergenceError, match="raise maxiter"):
        fgrad.jit(lambda b: fla.gmres(A, b, maxiter=1, restart=2)[0])(np.ones(40))


def test_eigsh_gradient_of_eigenvalues():
    n = 30
    lap = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n)).tocsr()
    weights = np.linspace(1.0, 2.0, n)

    def smallest(w):
        return fla.eigsh(lap + fs.diags_array(w), k=2, which="SA")[0]
    values = smallest(weights)
    np.testing.assert_allclose(values, np.linalg.eigvalsh(lap.toarray() + np.diag(weights))[:2])
    check_grads(smallest, (weights,), order=1, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)
    with pytest.raises(LinalgDerivativeError, match="derivative of the eigenvectors"):
        fgrad.grad(lambda w: fnp.sum(fla.eigsh(lap + fs.diags_array(w), k=2)[1]))(weights)


# -- errors --------------------------------------------------------------------------------

def test_errors_say_what_is_wrong():
    A = _matrix()
    S = fs.csr_array(A)
    with pytest.raises(SparseShapeError, match="multiplies a dense vector of 5"):
        S @ np.ones(4)
    with pytest.raises(SparseShapeError, match=r"does not broadcast to the sparse array's shape"):
        S.multiply(np.ones((2, 2)))
    with pytest.raises(SparseStructureError, match="store different entries"):
        S.multiply(fs.csr_array(_matrix(seed=5)))
    with pytest.raises(SparseStructureError, match=r"one per stored entry \(15\)"):
        fs.csr_array((np.ones(3), S.indices, S.indptr), shape=S.shape)
    with pytest.raises(SparseStructureError, match="indptr must rise"):
        fs.csr_array((np.ones(2), np.array([0, 1]), np.array([0, 2, 1])), shape=(2, 2))
    with pytest.raises(SparseStructureError, match="traced dense array"):
        fgrad.grad(lambda x: fs.csr_array(x).sum())(np.eye(2))
    singular = sp.csr_array(np.array([[1.0, 2.0], [2.0, 4.0]]))
    with pytest.raises(SingularMatrixError, match="singular"):
        fla.spsolve(singular, np.ones(2))
    with pytest.raises(SparseShapeError, match="right-hand side of a 7x7 system"):
        fla.spsolve(_system(), np.ones(3))


# -- on a device ---------------------------------------------------------------------------

def _device_round_trip(put, get):
    """fgrad.sparse on device values: products, gradients, solves, eigenvalues."""
    A = _system()
    S = fs.csr_array((put(A.data), A.indices, A.indptr), shape=A.shape)
    x = put(np.linspace(0.0, 1.0, 7))
    np.testing.assert_allclose(get(S @ x), A @ get(x))
    g = fgrad.grad(lambda S: fnp.sum(fla.spsolve(S, x) ** 2))(S)
    host = fgrad.grad(lambda S: fnp.sum(fla.spsolve(S, get(x)) ** 2))(fs.csr_array(A))
    np.testing.assert_allclose(get(g.data), host.data, rtol=1e-9)
    symmetric = fs.csr_array(A + A.T)
    top = fla.eigsh(fs.csr_array((put(symmetric.data), symmetric.indices, symmetric.indptr),
                                 shape=A.shape), k=1, which="LA")[0]
    np.testing.assert_allclose(get(top), np.linalg.eigvalsh((A + A.T).toarray())[-1:])
    return S


def test_sparse_arrays_on_the_standin_device():
    from standin_backend import StandInArray, registered, to_numpy, to_standin
    with registered():
        S = _device_round_trip(to_standin, to_numpy)
        assert type((S @ to_standin(np.ones(7)))) is StandInArray
        with pytest.raises(DeviceError, match="no shift-invert"):
            fla.eigsh(S + S.T, k=1, sigma=0.0)


@pytest.mark.cupy
def test_sparse_arrays_on_cupy():
    pytest.importorskip("cupy")
    _device_round_trip(lambda a: fgrad.device_put(a, "gpu"), lambda a: fgrad.device_put(
        a, "cpu"))
