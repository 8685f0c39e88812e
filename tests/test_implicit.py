"""fgrad.lax's implicit building blocks: custom_linear_solve, custom_root,
fixed_point; their derivatives under grad, jvp, vmap, jit and to second order,
and the promise that a solver's own iterations are never differentiated."""
import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.core.trace import EagerTracer
from fgrad.errors import ConvergenceError, CustomRuleError
from fgrad.testing import check_grads

RNG = np.random.default_rng(0)
A0 = RNG.standard_normal((3, 3)) + 4 * np.eye(3)
B0 = RNG.standard_normal(3)


class Solver:
    """A dense solve that counts its calls and refuses differentiating tracers:
    the rules must call it on plain values (or staged ones, under jit)."""

    def __init__(self, transpose=False):
        self.calls, self.transpose = 0, transpose

    def __call__(self, matvec, b):
        assert not isinstance(b, EagerTracer), "the solver was differentiated"
        self.calls += 1
        return fgrad.lax.dense_solve(matvec, b)


def solve_with(A, b, **kw):
    kw.setdefault("transpose_solve", Solver())
    return fgrad.lax.custom_linear_solve(lambda x: A @ x, b, Solver(), **kw)


def test_linear_solve_value_and_derivatives_match_the_dense_formula():
    x = solve_with(A0, B0)
    np.testing.assert_allclose(x, np.linalg.solve(A0, B0))
    check_grads(solve_with, (A0, B0), order=2, modes=("fwd", "rev"))


def test_linear_solve_gradient_matches_the_adjoint_formula():
    def loss(A, b):
        return fnp.sum(solve_with(A, b) ** 2)
    gA, gb = fgrad.grad(loss, (0, 1))(A0, B0)
    x = np.linalg.solve(A0, B0)
    lam = np.linalg.solve(A0.T, 2 * x)
    np.testing.assert_allclose(gb, lam)
    np.testing.assert_allclose(gA, -np.outer(lam, x))


@pytest.mark.slow
def test_linear_solve_gradient_matches_jax():
    def loss(A, b):
        return fnp.sum(solve_with(A, b) ** 2)
    gA, gb = fgrad.grad(loss, (0, 1))(A0, B0)
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def jloss(A, b):
        x = jax.lax.custom_linear_solve(lambda v: A @ v, b,
                                        lambda mv, r: jnp.linalg.solve(A, r),
                                        lambda vm, r: jnp.linalg.solve(A.T, r))
        return jnp.sum(x ** 2)
    ja, jb = jax.grad(jloss, (0, 1))(A0, B0)
    np.testing.assert_allclose(gA, ja, rtol=1e-10)
    np.testing.assert_allclose(gb, jb, rtol=1e-10)


def test_linear_solve_never_differentiates_the_solver():
    solver, tsolver = Solver(), Solver()

    def loss(A, b):
        x = fgrad.lax.custom_linear_solve(lambda v: A @ v, b, solver,
                                          transpose_solve=tsolver)
        return fnp.sum(x ** 2)
    # each solver is staged once per call; every rule reuses its graph
    fgrad.grad(loss, (0, 1))(A0, B0)
    assert (solver.calls, tsolver.calls) == (1, 1)
    fgrad.jvp(loss, (A0, B0), (A0, B0))
    assert (solver.calls, tsolver.calls) == (2, 2)


def test_linear_solve_symmetric_pytree_and_aux():
    S = A0 @ A0.T
    b = {"u": B0[:2], "v": B0[2:]}

    def matvec(x):
        y = S @ fnp.concatenate([x["u"], x["v"]])
        return {"u": y[:2], "v": y[2:]}

    def solve(mv, r):
        return fgrad.lax.dense_solve(mv, r), "aux"

    def f(scale):
        x, aux = fgrad.lax.custom_linear_solve(
            matvec, {"u": b["u"] * scale, "v": b["v"]}, solve, symmetric=True,
            has_aux=True)
        assert aux == "aux"
        return fnp.sum(x["u"]) + fnp.sum(x["v"] ** 2)
    check_grads(f, (1.5,), order=2, modes=("fwd", "rev"))


def test_linear_solve_without_transpose_solve_refuses_reverse_mode():
    def f(b):
        return fnp.sum(fgrad.lax.custom_linear_solve(lambda x: A0 @ x, b, Solver()))
    _, t = fgrad.jvp(f, (B0,), (np.ones(3),))
    np.testing.assert_allclose(t, np.linalg.solve(A0, np.ones(3)).sum())
    with pytest.raises(CustomRuleError, match="transpose_solve="):
        fgrad.grad(f)(B0)


def test_linear_solve_under_vmap_and_jit():
    bs = RNG.standard_normal((4, 3))
    xs = fgrad.vmap(lambda b: solve_with(A0, b))(bs)
    np.testing.assert_allclose(xs, np.linalg.solve(A0, bs.T).T)

    def loss(A, b):
        return fnp.sum(solve_with(A, b) ** 2)
    want = fgrad.grad(loss)(A0, B0)
    np.testing.assert_allclose(fgrad.jit(fgrad.grad(loss))(A0, B0), want)
    np.testing.assert_allclose(fgrad.grad(fgrad.jit(loss))(A0, B0), want)
    per = fgrad.vmap(fgrad.grad(loss, 1), in_axes=(None, 0))(A0, bs)
    np.testing.assert_allclose(per[1], fgrad.grad(loss, 1)(A0, bs[1]))
    np.testing.assert_allclose(fgrad.jit(fgrad.vmap(fgrad.grad(loss, 1),
                                                    in_axes=(None, 0)))(A0, bs), per)


# -- custom_root ---------------------------------------------------------------------

def newton(f, x):
    assert not isinstance(x, EagerTracer), "the solver was differentiated"
    for _ in range(12):
        x = x - f(x) / fgrad.grad(f)(x)
    return x


def scalar_solve(g, y):
    return y / g(1.0)


def cube_root(a):
    return fgrad.lax.custom_root(lambda x: x ** 3 - a, 1.0, newton, scalar_solve)


def test_custom_root_value_and_derivatives():
    assert np.isclose(cube_root(8.0), 2.0)
    assert np.isclose(fgrad.grad(cube_root)(8.0), 1 / 12)
    # d2/da2 a^(1/3) = -2/9 a^(-5/3)
    assert np.isclose(fgrad.grad(fgrad.grad(cube_root))(8.0), -2 / 9 * 8.0 ** (-5 / 3))
    check_grads(cube_root, (5.0,), order=2, modes=("fwd", "rev"))


def test_custom_root_under_vmap_and_jit():
    a = np.array([1.0, 8.0, 27.0])
    np.testing.assert_allclose(fgrad.vmap(cube_root)(a), [1, 2, 3])
    want = a ** (-2 / 3) / 3
    np.testing.assert_allclose(fgrad.vmap(fgrad.grad(cube_root))(a), want)
    np.testing.assert_allclose(fgrad.jit(fgrad.vmap(fgrad.grad(cube_root)))(a), want)
    np.testing.assert_allclose(fgrad.grad(fgrad.jit(cube_root))(8.0), 1 / 12)


def solve_system(params):
    def f(x):               # A x + c * x**3 - 1 = 0
        return params["A"] @ x + params["c"] * x ** 3 - 1.0

    def newton_system(f, x):
        for _ in range(12):
            x = x - fnp.linalg.solve(fgrad.jacfwd(f)(x), f(x))
        return x
    return fgrad.lax.custom_root(f, np.zeros(3), newton_system, fgrad.lax.dense_solve)


def test_custom_root_of_a_system_with_pytree_parameters():
    params = {"A": A0, "c": np.array([0.5, -0.2, 0.1])}

    def loss(params):
        return fnp.sum(fnp.sin(solve_system(params)))
    x = solve_system(params)
    np.testing.assert_allclose(A0 @ x + params["c"] * x ** 3, 1.0, atol=1e-12)
    check_grads(loss, (params,), order=1, modes=("fwd", "rev"))


@pytest.mark.slow
def test_custom_root_of_a_system_matches_jax():
    params = {"A": A0, "c": np.array([0.5, -0.2, 0.1])}
    g = fgrad.grad(lambda p: fnp.sum(fnp.sin(solve_system(p))))(params)
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def jloss(params):
        def f(x):
            return params["A"] @ x + params["c"] * x ** 3 - 1.0

        def jsolve(f, x):
            for _ in range(30):
                x = x - jnp.linalg.solve(jax.jacfwd(f)(x), f(x))
            return x
        x = jax.lax.custom_root(f, jnp.zeros(3), jsolve,
                                lambda g, y: jnp.linalg.solve(jax.jacfwd(g)(y), y))
        return jnp.sum(jnp.sin(x))
    jg = jax.grad(jloss)(params)
    np.testing.assert_allclose(g["A"], jg["A"], rtol=1e-9)
    np.testing.assert_allclose(g["c"], jg["c"], rtol=1e-9)


def test_custom_root_has_aux_and_structure_errors():
    def solve(f, x):
        return newton(f, x), {"iterations": 12}
    root, aux = fgrad.lax.custom_root(lambda x: x ** 2 - 2.0, 1.0, solve, scalar_solve,
                                      has_aux=True)
    assert np.isclose(root, np.sqrt(2)) and aux == {"iterations": 12}
    with pytest.raises(CustomRuleError, match="structure"):
        fgrad.lax.custom_root(lambda x: (x, x), 1.0, newton, scalar_solve)


# -- fixed_point ---------------------------------------------------------------------

def test_fixed_point_with_pytree_parameters():
    def f(x, p):                          # a contraction: x = W tanh(x) / 4 + b
        return p["W"] @ fnp.tanh(x) / 4 + p["b"]
    p = {"W": RNG.standard_normal((3, 3)) / 3, "b": B0}

    def loss(p):
        return fnp.sum(fgrad.lax.fixed_point(f, np.zeros(3), p) ** 2)
    x = fgrad.lax.fixed_point(f, np.zeros(3), p)
    np.testing.assert_allclose(x, f(x, p), atol=1e-9)
    check_grads(loss, (p,), order=2, modes=("fwd", "rev"))
    g = fgrad.grad(loss)(p)
    np.testing.assert_allclose(fgrad.jit(fgrad.grad(loss))(p)["W"], g["W"], rtol=1e-8)
    per = fgrad.vmap(fgrad.grad(lambda b: loss({"W": p["W"], "b": b})))(
        np.stack([B0, -B0]))
    np.testing.assert_allclose(per[0], g["b"], rtol=1e-8)


def test_fixed_point_that_does_not_converge_raises():
    with pytest.raises(ConvergenceError, match="max_iter=5"):
        fgrad.lax.fixed_point(lambda x, a: a * fnp.cos(x), 0.0, 1.0, max_iter=5)
    f = fgrad.jit(lambda a: fgrad.lax.fixed_point(lambda x, a: a * fnp.cos(x), 0.0, a,
                                                  max_iter=5))
    with pytest.raises(ConvergenceError, match="did not converge"):
        f(1.0)
    assert np.isclose(fgrad.jit(lambda a: fgrad.lax.fixed_point(
        lambda x, a: a * fnp.cos(x), 0.0, a))(1.0), 0.7390851332)
