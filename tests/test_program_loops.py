"""The whole-program compiler, stage 2: scan, while_loop, fori_loop and cond in place.

Each loop program runs through the compiled program and is compared with the
interpreted tier (the generated NumPy code of the same optimised graph, whose
loops run their bodies from Python): bitwise where the body's operations are
arithmetic, to rounding where a transcendental function (tanh, sin) is
LLVM's. Each also checks that the loop is not a callout.
"""
import logging

import numpy as np
import pytest
from program_checks import agree as _agree
from program_checks import both as _both

import fgrad
import fgrad.numpy as fnp
from fgrad import lax
from fgrad.compiler import native, program
from fgrad.compiler.blas import gemm_table
from fgrad.compiler.codegen import generate
from fgrad.compiler.lu_kernels import LANES_MAX_N
from fgrad.compiler.passes import optimize
from fgrad.compiler.program import PROGRAM_ENV, compile_program
from fgrad.compiler.program_loops import Loop

pytestmark = pytest.mark.skipif(not native.available(), reason="llvmlite missing")


def _doubling(x):
    return lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 2.0 - 0.5),
                          (0, x))


def _nested(x):
    def outer(c, xi):
        c2 = lax.fori_loop(0, 3, lambda i, d: fnp.tanh(d + xi), c)
        return c2, lax.cond(fnp.sum(c2) > 1.0, lambda a: a * 2.0, lambda a: a, c2)
    return lax.scan(outer, x[0], x)


def _rnn(w, xs):
    def step(h, x):
        h = fnp.tanh(h @ w + x)
        return h, fnp.sum(h * h)
    h, ys = lax.scan(step, xs[0] * 0.0, xs)
    return fnp.sum(h) + fnp.sum(ys)


def _three(i, x):
    return lax.switch(i, [lambda x: x * 2.0, lambda x: x - 1.0, lambda x: x * x + 3.0], x)


def _walk(x):
    # a vmapped while loop whose predicate differs between examples: the
    # loop runs while any example wants a step (an `any` in its predicate)
    return lax.while_loop(lambda c: c[1] < 5.0, lambda c: (c[0] + 1, c[1] * 1.75 + 0.125),
                          (0, x))


_X = np.linspace(-0.9, 1.3, 15).reshape(5, 3)
_W = np.linspace(-0.5, 0.6, 9).reshape(3, 3)

CASES = {
    "while_loop": (_doubling, (_X,), True),
    "fori_loop, static bounds (a scan)": (
        lambda x: lax.fori_loop(0, 7, lambda i, c: c * 1.5 + i, x), (_X,), True),
    "fori_loop, traced bounds (a while loop)": (
        lambda x, n: lax.fori_loop(0, n, lambda i, c: c * 1.5 + i, x), (_X, 4), True),
    "cond, true": (lambda x: lax.cond(fnp.sum(x) > 0, lambda x: x * 2.0, lambda x: x - 1.0, x),
                   (_X,), True),
    "cond, false": (lambda x: lax.cond(fnp.sum(x) > 9, lambda x: x * 2.0, lambda x: x - 1.0,
                                       x), (_X,), True),
    "switch, index in range": (_three, (1, _X), True),
    "switch, index above (clamped)": (_three, (7, _X), True),
    "switch, index below (clamped)": (_three, (-3, _X), True),
    "scan, reversed, without xs": (
        lambda x: lax.scan(lambda c, _: (c + 1.0, c * 2.0), x, None, length=4, reverse=True),
        (_X,), True),
    "carries swapped and passed through": (
        lambda a, b: lax.fori_loop(0, 3, lambda i, c: (c[1], c[0] + 1.0, c[2]), (a, b, a)),
        (_X, _X + 1.0), True),
    "nested loops and a cond": (_nested, (_X,), False),
    "grad of a scan (the reverse scan)": (fgrad.grad(_rnn, (0, 1)), (_W, _X), False),
    "grad of nested loops": (fgrad.grad(lambda x: fnp.sum(_nested(x)[1])), (_X,), False),
    "vmap of a while loop, predicate per example": (
        fgrad.vmap(_walk), (np.array([0.5, 1.0, 3.0, 6.0]),), True),
    "vmap of nested loops": (fgrad.vmap(_nested), (np.linspace(0, 1, 60).reshape(4, 5, 3),),
                             False),
    "int32 and float32 carries": (
        lambda x: lax.fori_loop(0, 5, lambda i, c: (c[0] * 3 + i.astype(np.int32),
                                                    c[1] * np.float32(1.5)),
                                (np.int32(1), x)), (_X.astype(np.float32),), True),
}


_A = np.eye(3) * 2.0 + 0.1


def _solve_loss(theta):
    def richardson(matvec, b):          # x <- x + (b - A x) / 2, while i < 6
        def body(state):
            i, x = state
            return i + 1, x + (b - matvec(x)) * 0.5
        return lax.while_loop(lambda s: s[0] < 6, body, (0, b * 0.0))[1]
    x = lax.custom_linear_solve(lambda v: _A @ v + theta * v, np.arange(1.0, 4.0),
                                richardson, symmetric=True)
    return fnp.sum(x * x)


# bodies whose results are not values they make: each is copied over its carry
CASES.update({
    "a y that is the carry, a carry that is a slice of xs": (
        lambda x: lax.scan(lambda c, xi: (xi * 1.0 + c, c), x[0], x)[1:] + lax.scan(
            lambda c, xi: (xi, xi + c), x[0], x), (_X,), True),
    "a constant y, a carry unchanged, views of a carry": (
        lambda x: lax.scan(lambda c, xi: (c, (3.0, c.reshape(1, 3), fnp.sum(c * xi))), x[0], x),
        (_X,), True),
    "an empty scan": (lambda x: lax.scan(lambda c, xi: (c + xi, None), x[0], x[:0]), (_X,), True),
    "an inner loop bounded by the outer loop's index": (
        lambda x: lax.fori_loop(0, 4, lambda i, c: lax.fori_loop(0, i, lambda j, d: d + j, c), x),
        (_X,), True),
})


def _sqrt_loss(a):
    def newton(f, x0):                  # x <- x - f(x) / f'(x), f(x) = x^2 - a
        def body(state):
            i, x = state
            return i + 1, x - f(x) / (2.0 * x)
        return lax.while_loop(lambda s: s[0] < 8, body, (0, x0))[1]
    root = lax.custom_root(lambda x: x * x - a, fnp.ones_like(a), newton,
                           lambda g, y: y / g(fnp.ones_like(y)))
    return fnp.sum(root * 3.0)


# what the loops' bodies and their gradients are made of besides arithmetic
CASES.update({
    "concatenate, a constant among the pieces": (
        lambda x: fnp.concatenate([x, x * 2.0, np.ones((1, 3))], axis=0), (_X,), True),
    "concatenate on the last axis, stack": (
        lambda x: (fnp.concatenate([x, x[:, :1] * 2.0], axis=1), fnp.stack([x[0], x[1]])),
        (_X,), True),
    "scatter_add at slices (the gradient of basic indexing)": (
        fgrad.grad(lambda x: fnp.sum(x[1:4:2, ::-1] ** 2)), (_X,), True),
    "stop_gradient": (lambda x: fgrad.stop_gradient(x) * 2.0, (_X,), True),
    "custom_linear_solve by a while_loop, value and grad": (
        fgrad.value_and_grad(_solve_loss), (np.full(3, 0.5),), False),
    "custom_root by Newton's method in a while_loop, value and grad": (
        fgrad.value_and_grad(_sqrt_loss), (np.array([2.0, 3.0, 5.0]),), False),
})


def _shifted(x, y):
    # GradBench's ode right-hand side: y shifted by one, a one in front
    return x * fnp.concatenate([fnp.ones(1), y[:-1]])


def _rk4(x):
    def step(_, y):
        k1 = _shifted(x, y)
        k2 = _shifted(x, y + 0.25 * k1)
        return y + 0.5 * (k1 + k2)
    return lax.fori_loop(0, 6, step, fnp.zeros_like(x))


# shifts: a slice read into a concatenate's piece and a scatter_add's (its
# cotangent), made of zeros only around the piece; xs read and ys written
# in their rows of the stacked arrays, or copied where a callout reads them
CASES.update({
    "a shift in a loop, and its gradient (GradBench's ode)": (
        fgrad.grad(lambda x: _rk4(x)[-1]), (np.linspace(0.5, 1.5, 9),), True),
    "ys of several shapes written in their rows, read by the next scan": (
        lambda x: lax.scan(lambda c, xi: (c, (fnp.sum(xi * xi, axis=1), xi[::-1] * c)),
                           x[0], lax.scan(lambda c, xi: (c + xi, xi * 2.0 - c), x[:1] * 0.0,
                                          x.reshape(5, 1, 3))[1].reshape(5, 3)[:, None]),
        (_X,), False),
})


def test_a_slice_a_callout_reads_is_copied_into_the_loops_scratch():
    def f(x):
        return lax.scan(lambda c, xi: (c + fnp.cumsum(xi), fnp.cumsum(xi) * 2.0), x[0], x)
    compiled, got, want = _both(f, _X)
    _agree(got, want, exact=True)
    assert [c.split(": ")[1] for c in compiled.callouts] == ["cumsum"]


@pytest.mark.parametrize("name", list(CASES))
def test_loops_are_lowered_in_place_and_agree_with_the_interpreted_tier(name):
    fun, args, exact = CASES[name]
    compiled, got, want = _both(fun, *args)
    _agree(got, want, exact)
    assert compiled.callouts == []


def test_nan_and_inf_propagate_through_a_loop_as_in_numpy():
    x = np.array([[0.0, np.nan, np.inf], [0.0, -1.0, 1.0], [2.0, -np.inf, 0.5]])
    with np.errstate(all="ignore"):
        compiled, got, want = _both(
            lambda a: lax.scan(lambda c, xi: (c / xi + xi, fnp.sqrt(c) * xi), a[0], a), x)
    _agree(got, want, exact=True)
    assert np.isnan(got[0]).any() and compiled.callouts == []


def test_a_body_equation_without_a_lowering_is_a_callout_inside_the_loop():
    def f(x):
        return lax.scan(lambda c, xi: (fnp.cumsum(c + xi), c * 2.0), x[0], x)
    compiled, got, want = _both(f, _X)
    _agree(got, want, exact=True)
    (callout,) = compiled.callouts
    assert callout == "1.1: cumsum"                  # equation 1 of loop 1's body


def test_an_error_in_a_callout_inside_a_loop_reaches_the_caller():
    def f(x):
        return lax.fori_loop(0, 3, lambda i, c: fgrad.pure_callback(_fails, c, c) * 2.0, x)
    graph = optimize(fgrad.make_graph(f)(_X), np)
    with pytest.raises(RuntimeError, match="the callback failed"):
        compile_program(graph).call(_X)


def _fails(x):
    raise RuntimeError("the callback failed")


def test_jit_compiles_a_loop_into_its_program(monkeypatch):
    monkeypatch.setenv(PROGRAM_ENV, "all")
    f = fgrad.jit(fgrad.value_and_grad(_rnn, (0, 1)))
    want = f(_W, _X)
    assert f.wait_compiled()
    (info,) = f.compile_info()
    assert info.tier == "program" and info.callouts == ()
    got = f(_W, _X)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def test_a_loop_program_that_fails_to_compile_runs_on_interpreted(monkeypatch, caplog):
    monkeypatch.setenv(PROGRAM_ENV, "all")
    n = program.MAX_ARGUMENTS                   # carries in and out: too many arguments
    f = fgrad.jit(lambda xs: lax.fori_loop(0, 2, lambda i, c: [x * 2.0 for x in c], xs))
    xs = [np.full(2, float(k)) for k in range(n)]
    with caplog.at_level(logging.WARNING, logger="fgrad.jit"):
        f(xs)
        assert f.wait_compiled()
    assert "program tier failed (NotImplementedError" in caplog.text
    assert f.compile_info()[0].tier in ("numpy", "kernels")
    np.testing.assert_array_equal(f(xs)[-1], xs[-1] * 4.0)


# ---------------------------------------------------------------------------
# LAPACK calls, gathers and scatters inside a loop's body
# ---------------------------------------------------------------------------

needs_lapack = pytest.mark.skipif(gemm_table() is None,
                                  reason="SciPy's Cython BLAS and LAPACK missing")
_ROWS = np.array([0, 2, -1, 2])


def _native_body(a, c):
    # each step: a gather and its gradient's scatter-add, an LU factor and
    # solve (a matrix larger than the LU kernels take), a Cholesky factor, slogdet
    def step(c, a_t):
        g = fgrad.grad(lambda c: fnp.sum(fnp.sin(c[_ROWS])))(c)
        x = fnp.linalg.solve(a_t, c + g)
        _, logdet = fnp.linalg.slogdet(a_t)
        return x / fnp.sqrt(fnp.sum(x * x)), logdet + fnp.sum(fnp.linalg.cholesky(a_t))
    return lax.scan(step, c, a)


def _spd(n, batch):
    rng = np.random.default_rng(n)
    m = rng.standard_normal((batch, n, n))
    return m @ np.swapaxes(m, -1, -2) + n * np.eye(n)


@needs_lapack
def test_lapack_calls_gathers_and_scatters_are_steps_of_a_loops_body():
    n = LANES_MAX_N + 2
    a, c = _spd(n, 4), np.linspace(-1.0, 1.0, n)
    compiled, got, want = _both(_native_body, a, c)
    _agree(got, want)
    assert compiled.callouts == []
    inner = {type(s).__name__ for loop in compiled.steps if isinstance(loop, Loop)
             for s in loop.inner_steps()}
    assert inner >= {"Gather", "ScatterAdd", "LUFactor", "LUSolve", "Cholesky", "Determinant"}


@needs_lapack
def test_native_steps_in_a_long_loop_take_their_stack_slots_once():
    # a stack slot made at every iteration (2e6 of them, several slots
    # each) would overflow the stack
    def f(x, k, steps):
        def body(i, c):
            sign, logdet = fnp.linalg.slogdet(c[k][None, :1] + 2.0)
            return c * 0.5 + sign * logdet
        return lax.fori_loop(0, steps, body, x)
    x, k = np.linspace(0.0, 1.0, 4), np.array([3, 0])
    graph = optimize(fgrad.make_graph(lambda x, k: f(x, k, 2_000_000))(x, k), np)
    compiled = compile_program(graph)
    assert compiled.callouts == []
    # the carry reaches its fixed point long before: as after 200 steps
    want = generate(optimize(fgrad.make_graph(lambda x, k: f(x, k, 200))(x, k), np), np)
    np.testing.assert_allclose(compiled.call(x, k)[0], want.fn(x, k)[0], rtol=1e-14)


def test_an_index_out_of_bounds_inside_a_loop_raises_numpys_index_error():
    def f(x, k):
        return lax.fori_loop(0, 3, lambda i, c: c * 0.5 + x[:, k], x[:, k] * 0.0)
    x = np.arange(20.0).reshape(4, 5)
    graph = optimize(fgrad.make_graph(f)(x, _ROWS), np)
    compiled = compile_program(graph)
    assert compiled.callouts == []
    with pytest.raises(IndexError, match="index 9 is out of bounds for axis 1 with size 5"):
        compiled.call(x, np.array([0, 9, -5, 1]))
    np.testing.assert_array_equal(compiled.call(x, _ROWS)[0],
                                  generate(graph, np).fn(x, _ROWS)[0])


@needs_lapack
def test_jit_compiles_lapack_calls_and_gathers_inside_a_loop(monkeypatch):
    monkeypatch.setenv(PROGRAM_ENV, "all")

    def loss(a, c):
        ys = _native_body(a, c)[1]
        return fnp.sum(ys * ys)
    a, c = _spd(LANES_MAX_N + 2, 3), np.linspace(-1.0, 1.0, LANES_MAX_N + 2)
    f = fgrad.jit(fgrad.value_and_grad(loss, (0, 1)))
    want = fgrad.value_and_grad(loss, (0, 1))(a, c)
    f(a, c)
    assert f.wait_compiled()
    (info,) = f.compile_info()
    assert info.tier == "program"
    got = f(a, c)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g, w, rtol=1e-8, atol=1e-12)
