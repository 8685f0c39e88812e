"""jvp of grad from one recording on the primals (fgrad.interpreters.forward_over_reverse).

Each result is compared with the standard composition of the interpreters,
``jvp`` of a ``vjp`` (which never takes this path): on the first calls
(evaluated eagerly), and on the fourth (compiled when the structure came back).
"""
import threading

import numpy as np
import pytest
from hypothesis import given

import fgrad
import fgrad.numpy as fnp
from fgrad.interpreters import forward_over_reverse
from primitive_specs import SPECS
from sweeps import examples, sweep


def trace_state(grad_fn):
    """The `ForwardOverReverse` a grad function keeps."""
    value_and_grad_f = next(c.cell_contents for c in grad_fn.__closure__
                            if callable(c.cell_contents))
    return next(c.cell_contents for c in value_and_grad_f.__closure__
                if isinstance(c.cell_contents, forward_over_reverse.ForwardOverReverse))


def _compiled_entries(grad_fn):
    return [e for e in trace_state(grad_fn).entries.values() if type(e) is tuple]


def _standard_hvp(fun, args, tangents, argnums):
    """(gradient, its tangent) the standard way: jvp of a vjp."""
    def gradient(*xs):
        out, vjp_fn = fgrad.vjp(lambda *d: fun(*_with(xs, argnums, d)),
                                *[xs[i] for i in argnums])
        return vjp_fn(np.ones((), np.result_type(out)))
    return fgrad.jvp(gradient, tuple(args), tuple(tangents))


def _with(xs, argnums, values):
    xs = list(xs)
    for i, v in zip(argnums, values):
        xs[i] = v
    return xs


def _tangent_like(x, seed):
    rng = np.random.default_rng(seed)
    t = rng.standard_normal(np.shape(x))
    if np.iscomplexobj(x):
        t = t + 1j * rng.standard_normal(np.shape(x))
    return np.asarray(t, dtype=np.result_type(x))


def _assert_close(got, want):
    for g, w in zip(got, want):
        assert np.shape(g) == np.shape(w) and np.result_type(g) == np.result_type(w)
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name, count", sweep(SPECS))
def test_jvp_of_grad_equals_the_standard_composition(name, count):
    @examples(count)
    @given(SPECS[name])
    def check(case):
        if case.order < 2:
            return

        def scalar(*xs):
            return fnp.sum(fnp.real(case.fun(*xs)) * 1.5)
        argnums = tuple(range(len(case.args)))
        tangents = [_tangent_like(x, i) for i, x in enumerate(case.args)]
        g = fgrad.grad(scalar, argnums)
        runs = [fgrad.jvp(g, tuple(case.args), tuple(tangents)) for _ in range(4)]
        want_g, want_t = _standard_hvp(scalar, case.args, tangents, argnums)
        for got_g, got_t in runs:
            _assert_close(got_g, want_g)
            _assert_close(got_t, want_t)
        assert len(trace_state(g).entries) <= 1
        assert all(type(e) is tuple for e in trace_state(g).entries.values())   # compiled
    check()


def _benchmark_function(a):
    return lambda x: fnp.sum(fnp.tanh(a @ x)) + 0.5 * fnp.sum(x ** 2)


def test_a_hessian_vector_product_is_compiled_when_its_structure_comes_back():
    rng = np.random.default_rng(0)
    a, x, v = rng.standard_normal((6, 6)), rng.standard_normal(6), rng.standard_normal(6)
    t = np.tanh(a @ x)
    want_g = a.T @ (1 - t * t) + x
    want_h = a.T @ (-2 * t * (1 - t * t) * (a @ v)) + v
    g = fgrad.grad(_benchmark_function(a))
    for call in range(4):
        got_g, got_h = fgrad.jvp(g, (x,), (v,))
        np.testing.assert_allclose(got_g, want_g, rtol=1e-13)
        np.testing.assert_allclose(got_h, want_h, rtol=1e-13)
        # the first call builds no key, the second notes it, the third compiles
        assert len(trace_state(g).entries) == (0 if call == 0 else 1)
        assert len(_compiled_entries(g)) == (1 if call >= 2 else 0)
    (compiled, layout, slots), = _compiled_entries(g)
    # the forward A @ x was recorded; what is compiled is A @ v for the tangent
    # and the two products of the sweep (the gradient and its tangent)
    assert compiled.source.count("matmul") == 3
    assert layout == ((True, True),) and slots == [0]


def test_only_the_tangents_the_sweep_reads_are_computed(monkeypatch):
    calls = []
    original = forward_over_reverse.tangent_pass

    def counting(eqns, in_tangents, wanted, outer):
        tangents = original(eqns, in_tangents, wanted, outer)
        calls.append(len(tangents))
        return tangents
    monkeypatch.setattr(forward_over_reverse, "tangent_pass", counting)
    a = np.eye(3)
    fgrad.jvp(fgrad.grad(_benchmark_function(a)), (np.ones(3),), (np.ones(3),))
    # x, a @ x and tanh(a @ x); not the sums, the square, the scaled sum or the total
    assert calls == [3]


def test_value_and_grad_under_jvp_gives_the_value_its_tangent():
    f = lambda x: fnp.sum(fnp.sin(x) * x)
    x, v = np.linspace(0.1, 1.0, 4), np.linspace(1.0, 2.0, 4)
    vg = fgrad.value_and_grad(f)
    for _ in range(4):
        (value, g), (value_t, g_t) = fgrad.jvp(vg, (x,), (v,))
        np.testing.assert_allclose(value, np.sum(np.sin(x) * x))
        np.testing.assert_allclose(value_t, np.sum((np.cos(x) * x + np.sin(x)) * v))
        np.testing.assert_allclose(g, np.cos(x) * x + np.sin(x))
        np.testing.assert_allclose(g_t, (-np.sin(x) * x + 2 * np.cos(x)) * v)


def test_aux_carries_its_tangent():
    def f(x):
        y = fnp.sin(x)
        return fnp.sum(y * y), {"y": y, "const": 3.0}
    x, v = np.linspace(0.1, 1.0, 4), np.ones(4)
    g = fgrad.grad(f, has_aux=True)
    for _ in range(4):
        (grad, aux), (grad_t, aux_t) = fgrad.jvp(g, (x,), (v,))
        np.testing.assert_allclose(aux["y"], np.sin(x))
        np.testing.assert_allclose(aux_t["y"], np.cos(x) * v)
        assert aux["const"] == 3.0 and aux_t["const"] == 0.0
        np.testing.assert_allclose(grad_t, 2 * np.cos(2 * x) * v)


def test_a_closed_over_value_with_a_tangent_gives_the_mixed_derivative():
    # d/dp of grad_x f(x, p), f = sum(p * x**3): grad_x = 3 p x**2, mixed = 3 x**2 dp
    x = np.linspace(0.5, 1.5, 3)

    def grad_at(p):
        return fgrad.grad(lambda x: fnp.sum(p * x ** 3))(x)
    for _ in range(4):
        g, g_t = fgrad.jvp(grad_at, (np.float64(2.0),), (np.float64(0.5),))
        np.testing.assert_allclose(g, 6 * x ** 2)
        np.testing.assert_allclose(g_t, 1.5 * x ** 2)

    # a traced argument grad does not differentiate is the same kind of constant
    def both(x, p):
        return fgrad.grad(lambda x, p: fnp.sum(p * x ** 3))(x, p)
    g, g_t = fgrad.jvp(both, (x, np.float64(2.0)), (np.ones(3), np.float64(0.5)))
    np.testing.assert_allclose(g_t, 12 * x + 1.5 * x ** 2)


def test_an_output_that_does_not_depend_on_the_input_has_zero_derivatives():
    g = fgrad.grad(lambda x: fnp.sum(fnp.ones(3)))
    grad, grad_t = fgrad.jvp(g, (np.ones(3),), (np.ones(3),))
    np.testing.assert_array_equal(grad, np.zeros(3))
    np.testing.assert_array_equal(grad_t, np.zeros(3))


def test_what_the_caller_gets_is_never_an_input():
    # the HVP of |x|^2 / 2 is v itself; x's gradient is x itself
    g = fgrad.grad(lambda x: 0.5 * fnp.sum(x * x))
    x, v = np.linspace(0, 1, 4), np.linspace(1, 2, 4)
    for _ in range(4):
        grad, hvp = fgrad.jvp(g, (x,), (v,))
        np.testing.assert_allclose(hvp, v)
        assert not np.shares_memory(hvp, v) and not np.shares_memory(grad, x)
    hvp[:] = 0.0
    assert v[0] == 1.0


def test_python_control_flow_gets_one_entry_per_structure():
    def f(x):
        return fnp.sum(fnp.sin(x)) if fnp.sum(x) > 0 else fnp.sum(fnp.exp(x))
    g = fgrad.grad(f)
    v = np.ones(3)
    for sign in (1, -1, 1, -1, 1, -1):
        x = sign * np.linspace(0.1, 0.3, 3)
        _, hvp = fgrad.jvp(g, (x,), (v,))
        np.testing.assert_allclose(hvp, -np.sin(x) if sign > 0 else np.exp(x))
    assert len(_compiled_entries(g)) == 2


def test_a_custom_rule_sends_the_grad_function_the_standard_way_once():
    @fgrad.custom_jvp
    def cube(x):
        return x ** 3

    @cube.defjvp
    def cube_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return x ** 3, 3 * x ** 2 * t
    runs = []

    def f(x):
        runs.append(1)
        return fnp.sum(cube(x))
    g = fgrad.grad(f)
    x, v = np.linspace(0.5, 1.0, 3), np.ones(3)
    _, hvp = fgrad.jvp(g, (x,), (v,))
    np.testing.assert_allclose(hvp, 6 * x)
    assert len(runs) == 2               # recorded on primals, then run the standard way
    fgrad.jvp(g, (x,), (v,))
    assert len(runs) == 3               # from then on, once per call
    assert trace_state(g).unsupported


def test_the_restart_is_not_swallowed_by_except_exception():
    @fgrad.custom_jvp
    def double(x):
        return 2 * x

    @double.defjvp
    def double_jvp(primals, tangents):
        return 2 * primals[0], 2 * tangents[0]

    def f(x):
        try:
            y = double(x)
        except Exception:               # a user's fallback must not run
            y = x
        return fnp.sum(y * y)
    _, hvp = fgrad.jvp(fgrad.grad(f), (np.ones(2),), (np.ones(2),))
    np.testing.assert_allclose(hvp, 8 * np.ones(2))


def test_debug_print_prints_once_per_call(capsys):
    def f(x):
        fgrad.debug.print("x0 = {}", x[0])
        return fnp.sum(fnp.sin(x))
    g = fgrad.grad(f)
    for _ in range(3):
        fgrad.jvp(g, (np.array([0.25, 0.5]),), (np.ones(2),))
    assert capsys.readouterr().out.count("x0 = 0.25") == 3


def test_transformations_around_it_agree_with_the_standard_composition():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 4))
    f = _benchmark_function(a)
    xs, vs = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))

    def hvp(x, v):
        return fgrad.jvp(fgrad.grad(f), (x,), (v,))[1]
    want = np.stack([_standard_hvp(f, (x,), (v,), (0,))[1][0] for x, v in zip(xs, vs)])
    np.testing.assert_allclose(fgrad.vmap(hvp)(xs, vs), want, rtol=1e-12)
    np.testing.assert_allclose(fgrad.jit(hvp)(xs[0], vs[0]), want[0], rtol=1e-12)
    # a third derivative: jvp of (jvp of grad)
    third = fgrad.jvp(lambda x: hvp(x, vs[0]), (xs[0],), (vs[1],))[1]
    want_third = fgrad.jvp(lambda x: _standard_hvp(f, (x,), (vs[0],), (0,))[1][0],
                           (xs[0],), (vs[1],))[1]
    np.testing.assert_allclose(third, want_third, rtol=1e-12)
    with fgrad.debug_nans():
        np.testing.assert_allclose(hvp(xs[0], vs[0]), want[0], rtol=1e-12)


def test_threads_share_a_grad_function():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((5, 5))
    g = fgrad.grad(_benchmark_function(a))
    xs, vs = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    want = [_standard_hvp(_benchmark_function(a), (x,), (v,), (0,))[1][0]
            for x, v in zip(xs, vs)]
    results, errors = [None] * 4, []

    def work(i):
        try:
            for _ in range(20):
                results[i] = fgrad.jvp(g, (xs[i],), (vs[i],))[1]
        except Exception as e:          # reported below, in the main thread
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for got, w in zip(results, want):
        np.testing.assert_allclose(got, w, rtol=1e-12)
