"""Closed-over traced values in every higher-order primitive, under every
transformation.

Each case is a function of one number ``t`` that reads ``t`` only through a
closure inside a higher-order primitive (a loop body, a branch, a custom rule, a
solver, a callback). Under ``grad``, ``jvp``, ``vmap``, ``jit`` and their
compositions it must give the values and derivatives of the same function run
eagerly (finite differences), never a leaked tracer; a mode fgrad does not
support raises a specific `fgrad.errors` exception whose message names the fix
(`REFUSED`). The implicit solvers are also held to JAX's derivatives, which
differentiate ``custom_linear_solve`` through ``matvec`` only and take ``solve``
to be its inverse.
"""
import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
import fgrad.scipy.integrate as fsi
import fgrad.scipy.optimize as fso
from fgrad import lax
from fgrad.core.trace import Tracer
from fgrad.core.tree import tree_flatten
from fgrad.errors import (
    CallbackError,
    ConcretizationError,
    ControlFlowError,
    CustomRuleError,
    ScipyArgumentError,
)

T0 = np.float64(0.7)
TS = np.array([0.7, 1.3])            # under vmap: the examples take different branches
SCALES = np.array([1.0, 1.6])        # grad of a vmap over t * SCALES
XS = np.array([0.5, -1.0, 2.0])
A0 = np.array([[4.0, 1.0], [1.0, 3.0]])
N0 = np.array([[4.0, 1.5], [-1.0, 3.0]])     # not symmetric
B0 = np.array([1.0, 2.0])


def M(t):
    """A symmetric positive definite matrix that moves with ``t``."""
    return A0 * t + np.eye(2)


def N(t):
    """A non-symmetric matrix that moves with ``t``."""
    return N0 * t + np.eye(2)


def dense(matrix):
    return lambda linear, r: fnp.linalg.solve(matrix, r)


def dense_transposed(matrix):
    return lambda linear, r: fnp.linalg.solve(fnp.transpose(matrix), r)


def newton(f, x):
    return lax.fori_loop(0, 30, lambda i, x: x - f(x) / fgrad.grad(f)(x), x)


def scalar_solve(g, y):
    return y / g(1.0)


# -- the cases: each reads t only through a closure ------------------------------------

def custom_jvp_closing_over(t, x):
    @fgrad.custom_jvp
    def f(x):
        return fnp.sin(x * t)
    f.defjvp(lambda primals, tangents: (f(primals[0]),
                                        fnp.cos(primals[0] * t) * t * tangents[0]))
    return f(x)


def custom_vjp_closing_over(t, x):
    @fgrad.custom_vjp
    def f(x):
        return fnp.sin(x * t)
    f.defvjp(lambda x: (f(x), x), lambda x, ct: (ct * fnp.cos(x * t) * t,))
    return f(x)


def linear_solve(matvec, solve, transpose_solve=None, symmetric=False, b=B0):
    x = lax.custom_linear_solve(matvec, b, solve, transpose_solve, symmetric=symmetric)
    return fnp.sum(x * np.array([1.0, -2.0]))


def solve_in_scan(t):
    def step(c, _):
        x = lax.custom_linear_solve(lambda v: M(c) @ v, B0, dense(M(c)), symmetric=True)
        return fnp.sum(x) * t, None
    return lax.scan(step, t, None, length=2)[0]


CASES = {
    "cond": lambda t: lax.cond(t > 1.0, lambda x: x * t, lambda x: fnp.sin(x + t), 2.0),
    "cond, concrete predicate": lambda t: lax.cond(True, lambda x: x * t ** 2,
                                                   lambda x: x, 2.0),
    "switch": lambda t: lax.switch(t > 1.0, [lambda x: fnp.sin(x * t),
                                             lambda x: x * t ** 2], 2.0),
    "while_loop": lambda t: lax.while_loop(
        lambda c: (c[0] < 3) & (t > 0), lambda c: (c[0] + 1, c[1] * t + fnp.sin(t)),
        (0, 1.0))[1],
    "fori_loop": lambda t: lax.fori_loop(0, 3, lambda i, c: c * t + 1.0, 1.0),
    "scan": lambda t: fnp.sum(lax.scan(lambda c, x: (c * t + x, fnp.sin(c * t)), 1.0,
                                       XS)[1]),
    "map": lambda t: fnp.sum(lax.map(lambda x: fnp.sin(x * t), XS)),
    "associative_scan": lambda t: fnp.sum(lax.associative_scan(
        lambda a, b: a + b * t, XS)),
    # with no traced argument, a custom_jvp/custom_vjp function is plain Python:
    # the closed-over value is differentiated through the function itself
    "custom_jvp": lambda t: custom_jvp_closing_over(t, 2.0),
    "custom_vjp": lambda t: custom_vjp_closing_over(t, 2.0),
    # with one, its rules are used, and they cannot give the closed-over
    # value's derivative: refused, as in JAX
    "custom_jvp, argument and closure": lambda t: custom_jvp_closing_over(t, t),
    "custom_vjp, argument and closure": lambda t: custom_vjp_closing_over(t, t),
    "checkpoint": lambda t: fgrad.checkpoint(lambda x: fnp.sin(x * t))(2.0),
    "jit": lambda t: fgrad.jit(lambda x: fnp.sin(x * t))(2.0),
    "grad": lambda t: fgrad.grad(lambda x: fnp.sin(x * t))(2.0),
    "jvp": lambda t: fgrad.jvp(lambda x: fnp.sin(x * t), (2.0,), (1.0,))[1],
    "vmap": lambda t: fnp.sum(fgrad.vmap(lambda x: fnp.sin(x * t))(XS)),
    "custom_linear_solve, matvec": lambda t: linear_solve(
        lambda v: M(t) @ v, lax.dense_solve, symmetric=True),
    "custom_linear_solve, solve": lambda t: linear_solve(
        lambda v: M(t) @ v, dense(M(t)), symmetric=True),
    "custom_linear_solve, transpose_solve": lambda t: linear_solve(
        lambda v: N(t) @ v, dense(N(t)), dense_transposed(N(t))),
    "custom_linear_solve, one solver both ways": lambda t: linear_solve(
        lambda v: N(t) @ v, lax.dense_solve, lax.dense_solve),
    "custom_linear_solve, solve only": lambda t: linear_solve(
        lambda v: A0 @ v, dense(A0 + 0.0 * t), symmetric=True, b=B0 * t),
    "custom_linear_solve inside scan": solve_in_scan,
    "custom_root, f": lambda t: lax.custom_root(lambda x: x ** 3 - t, 1.0, newton,
                                                scalar_solve),
    "custom_root, solve": lambda t: lax.custom_root(
        lambda x: x ** 3 - t, 1.0, lambda f, x: t ** (1 / 3), scalar_solve),
    "custom_root, tangent_solve": lambda t: lax.custom_root(
        lambda x: x ** 3 - t, 1.0, newton, lambda g, y: y / (3 * t ** (2 / 3))),
    "fixed_point": lambda t: lax.fixed_point(lambda x, a: fnp.cos(a * x * t) / 2, 0.5, 1.0),
    "scipy.optimize.root": lambda t: fso.root(lambda x: x ** 3 + x - t, np.zeros(1)).x[0],
    "pure_callback": lambda t: fgrad.pure_callback(
        lambda x: np.sin(x * t), fgrad.ShapeDtypeStruct((), np.float64), 2.0),
    "odeint": lambda t: fsi.odeint(lambda y, s: -t * y, np.ones(1), np.array([0.0, 1.0]),
                                   rtol=1e-10, atol=1e-10)[-1, 0],
}


def finite_difference(f, t, h=1e-5):
    return (f(t + h) - f(t - h)) / (2 * h)


def _over_scales(f):
    return lambda t: sum(f(t * s) for s in SCALES)


# mode: (run the transformed case, what it must equal, computed eagerly)
MODES = {
    "grad": (lambda f: fgrad.grad(f)(T0), lambda f: finite_difference(f, T0)),
    "jvp": (lambda f: fgrad.jvp(f, (T0,), (1.0,))[1], lambda f: finite_difference(f, T0)),
    "vmap": (lambda f: fgrad.vmap(f)(TS), lambda f: [f(t) for t in TS]),
    "jit": (lambda f: fgrad.jit(f)(T0), lambda f: f(T0)),
    "jit(vmap)": (lambda f: fgrad.jit(fgrad.vmap(f))(TS), lambda f: [f(t) for t in TS]),
    "jit(grad)": (lambda f: fgrad.jit(fgrad.grad(f))(T0),
                  lambda f: finite_difference(f, T0)),
    "grad(jit)": (lambda f: fgrad.grad(fgrad.jit(f))(T0),
                  lambda f: finite_difference(f, T0)),
    "jvp(jit)": (lambda f: fgrad.jvp(fgrad.jit(f), (T0,), (1.0,))[1],
                 lambda f: finite_difference(f, T0)),
    "vmap(grad)": (lambda f: fgrad.vmap(fgrad.grad(f))(TS),
                   lambda f: [finite_difference(f, t) for t in TS]),
    "grad(vmap)": (lambda f: fgrad.grad(lambda t: fnp.sum(fgrad.vmap(f)(t * SCALES)))(T0),
                   lambda f: finite_difference(_over_scales(f), T0)),
    "grad(grad)": (lambda f: fgrad.grad(fgrad.grad(f))(T0),
                   lambda f: finite_difference(fgrad.grad(f), T0)),
}

ALL = tuple(MODES)
# where a custom_jvp/custom_vjp function's rules are used on a traced argument;
# under grad(jit) and jvp(jit) a function closing over an outer traced value is
# staged inline, and differentiated through its body
RULES_USED = ("grad", "jvp", "jit(grad)", "vmap(grad)", "grad(vmap)", "grad(grad)",
              "jit(vmap)")
# a while_loop is staged under jit, and under vmap when its examples disagree
STAGED_REVERSE = ("jit(grad)", "grad(jit)", "vmap(grad)", "grad(vmap)")
CLOSURE = "closes over a value that .* as an argument"
# (case, modes) -> (exception, what its message must say); the first match holds
REFUSED = {
    ("custom_jvp, argument and closure", RULES_USED): (CustomRuleError, CLOSURE),
    ("custom_vjp, argument and closure", ("jvp",)): (CustomRuleError, "forward mode"),
    ("custom_vjp, argument and closure", RULES_USED): (CustomRuleError, CLOSURE),
    ("while_loop", STAGED_REVERSE): (ControlFlowError, "fgrad.lax.scan"),
    ("pure_callback", ALL): (CallbackError, "Pass it to pure_callback as one of its"),
    ("odeint", ALL): (ScipyArgumentError, "closed over instead of passed in args"),
}
# cases whose every solve calls SciPy run a few modes only
ONLY = {"scipy.optimize.root": ("grad", "jvp", "vmap", "jit(grad)"),
        "odeint": ("grad", "jvp", "vmap", "jit")}
# cases that run SciPy's solvers: skipped where SciPy (an optional extra) is not installed
NEEDS_SCIPY = {"scipy.optimize.root", "odeint"}


def _refusal(case, mode):
    for (name, modes), refusal in REFUSED.items():
        if name == case and mode in modes:
            return refusal
    return None


def _leaves(x):
    return tree_flatten(x)[0]


@pytest.mark.parametrize("case, mode", [(case, mode) for case in CASES
                                        for mode in ONLY.get(case, ALL)])
def test_closed_over_traced_value(case, mode):
    if case in NEEDS_SCIPY:
        pytest.importorskip("scipy")
    f = CASES[case]
    run, expected = MODES[mode]
    refusal = _refusal(case, mode)
    if refusal is not None:
        error, says = refusal
        with pytest.raises(error, match=says):
            run(f)
        return
    out = run(f)
    assert not any(isinstance(x, Tracer) for x in _leaves(out)), "a tracer leaked"
    np.testing.assert_allclose(np.asarray(out, dtype=float), expected(f),
                               rtol=1e-6, atol=1e-8)


# -- the pattern, and JAX's derivatives ----------------------------------------

def closed_solve(lam):
    """JAX's pattern: solve closes over the same traced matrix matvec uses."""
    x = lax.custom_linear_solve(lambda v: M(lam) @ v, B0,
                                lambda mv, b: fnp.linalg.solve(M(lam), b),
                                lambda vm, b: fnp.linalg.solve(M(lam).T, b))
    return fnp.sum(x ** 2)


def test_a_solve_closing_over_a_traced_matrix_differentiates_in_every_mode():
    want = finite_difference(closed_solve, T0)
    _, tangent = fgrad.jvp(closed_solve, (T0,), (1.0,))
    assert not isinstance(tangent, Tracer)
    np.testing.assert_allclose(tangent, want, rtol=1e-7)
    np.testing.assert_allclose(fgrad.grad(closed_solve)(T0), want, rtol=1e-7)
    np.testing.assert_allclose(fgrad.hessian(closed_solve)(T0),
                               finite_difference(fgrad.grad(closed_solve), T0), rtol=1e-6)


def test_a_solver_with_python_control_flow_is_named_under_a_transformation():
    def solve(linear, b):
        return b / 4.0 if float(fnp.sum(b)) > 0 else b / 3.0

    def f(t):
        return fnp.sum(lax.custom_linear_solve(lambda v: 4.0 * t * v, B0, solve,
                                               symmetric=True))
    assert np.allclose(f(1.0), B0.sum() / 4.0)        # outside transformations: as is
    with pytest.raises(ConcretizationError,
                       match="custom_linear_solve's solve is staged.*fgrad.lax.while_loop"):
        fgrad.grad(f)(1.0)

    def root(t):
        def tangent_solve(g, y):
            return y / g(1.0) if float(y) > 0 else -y / g(-1.0)
        return lax.custom_root(lambda x: x ** 3 - t, 1.0, newton, tangent_solve)
    with pytest.raises(ConcretizationError, match="custom_root's tangent_solve is staged"):
        fgrad.grad(root)(2.0)


def test_traced_cotangents_are_not_closures():
    """A pullback transformed after the fact (jacrev's vmap over cotangents)
    hands bwd traced cotangents: its results are traced by that transformation,
    not by a closure, and fwd may call the function itself, as JAX's examples
    do."""
    @fgrad.custom_vjp
    def double(x):
        return 2 * x
    double.defvjp(lambda x: (double(x), None), lambda _, ct: (2 * ct,))
    assert fgrad.jacrev(double)(1.0) == 2.0
    assert np.allclose(fgrad.jacrev(double)(XS), 2 * np.eye(3))
    _, pullback = fgrad.vjp(double, XS)
    assert np.allclose(fgrad.vmap(pullback)(np.eye(3))[0], 2 * np.eye(3))


@pytest.fixture
def jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


@pytest.mark.slow              # JAX compiles each of its calls: seconds apiece
def test_linear_solve_closures_match_jax(jax):
    jnp = jax.numpy

    def twisted(solve_matrix, transposed):
        # solve reads another matrix than matvec: JAX differentiates through
        # matvec only, taking solve to be its inverse whatever it computes
        def f(t):
            x = lax.custom_linear_solve(lambda v: N(t) @ v, B0 * t,
                                        dense(solve_matrix(t)),
                                        dense_transposed(transposed(t)))
            return fnp.sum(x ** 2)

        def jf(t):
            x = jax.lax.custom_linear_solve(
                lambda v: (N0 * t + jnp.eye(2)) @ v, B0 * t,
                lambda mv, b: jnp.linalg.solve(solve_matrix(t), b),
                lambda vm, b: jnp.linalg.solve(transposed(t).T, b))
            return jnp.sum(x ** 2)
        return f, jf
    for solve_matrix in (lambda t: N0 * t + np.eye(2), lambda t: N0 * t ** 2 + np.eye(2)):
        f, jf = twisted(solve_matrix, lambda t: N0 * t * 1.5 + np.eye(2))
        np.testing.assert_allclose(f(T0), jf(T0), rtol=1e-12)
        np.testing.assert_allclose(fgrad.grad(f)(T0), jax.grad(jf)(T0), rtol=1e-10)
        np.testing.assert_allclose(fgrad.jvp(f, (T0,), (1.0,))[1],
                                   jax.jvp(jf, (T0,), (1.0,))[1], rtol=1e-10)
        np.testing.assert_allclose(fgrad.vmap(fgrad.grad(f))(TS),
                                   jax.vmap(jax.grad(jf))(TS), rtol=1e-10)
    f, jf = twisted(lambda t: N0 * t + np.eye(2), lambda t: N0 * t + np.eye(2))
    np.testing.assert_allclose(fgrad.hessian(f)(T0), jax.hessian(jf)(T0), rtol=1e-9)


@pytest.mark.slow
def test_root_closures_match_jax(jax):
    def f(t):
        return lax.custom_root(lambda x: x ** 3 - t, 1.0, lambda g, x: t ** (1 / 3),
                               lambda g, y: y / (3 * t ** (2 / 3)))

    def jf(t):
        return jax.lax.custom_root(lambda x: x ** 3 - t, 1.0, lambda g, x: t ** (1 / 3),
                                   lambda g, y: y / (3 * t ** (2 / 3)))
    np.testing.assert_allclose(fgrad.grad(f)(T0), jax.grad(jf)(T0), rtol=1e-12)
    np.testing.assert_allclose(fgrad.jvp(f, (T0,), (1.0,))[1],
                               jax.jvp(jf, (T0,), (1.0,))[1], rtol=1e-12)
    np.testing.assert_allclose(fgrad.vmap(fgrad.grad(f))(TS), jax.vmap(jax.grad(jf))(TS),
                               rtol=1e-12)
    np.testing.assert_allclose(fgrad.grad(fgrad.grad(f))(T0),
                               jax.grad(jax.grad(jf))(T0), rtol=1e-9)
