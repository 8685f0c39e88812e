"""fgrad.pure_callback: a host function as one primitive, under every
transformation; and custom rules kept through jit staging."""
import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.errors import CallbackDerivativeError, CallbackError

S = fgrad.ShapeDtypeStruct


class Counter:
    """A host function that records the shapes it was called with."""

    def __init__(self, fn=np.sin):
        self.fn, self.calls = fn, []

    def __call__(self, x):
        assert type(x) is np.ndarray          # host arrays, never tracers
        self.calls.append(x.shape)
        return self.fn(x)


def host(cb, x, **kw):
    return fgrad.pure_callback(cb, S(x.shape, x.dtype), x, **kw)


def test_eager_and_jit_call_the_function_every_time():
    cb = Counter()
    x = np.arange(3.0)
    np.testing.assert_allclose(host(cb, x), np.sin(x))
    f = fgrad.jit(lambda x: host(cb, x) * 2)
    for k in range(3):
        np.testing.assert_allclose(f(x + k), 2 * np.sin(x + k))
    assert cb.calls == [(3,)] * 4


def test_jit_never_folds_a_callback_on_constants():
    cb = Counter()
    g = fgrad.jit(lambda x: host(cb, fnp.ones(3)) + x)
    g(1.0)
    g(2.0)
    assert len(cb.calls) >= 2


def test_pytrees_and_kwargs():
    def stats(d, scale):
        return {"mean": d["a"].mean() * scale, "both": (d["a"] + d["b"], d["b"])}
    d = {"a": np.arange(4.0), "b": np.ones(4)}
    spec = {"mean": S((), np.float64), "both": (S((4,), np.float64), S((4,), np.float64))}
    out = fgrad.jit(lambda d: fgrad.pure_callback(stats, spec, d, scale=2.0))(d)
    assert out["mean"] == 3.0
    np.testing.assert_allclose(out["both"][0], d["a"] + 1)


def test_vmap_sequential_calls_once_per_example():
    cb = Counter()
    xs = np.arange(6.0).reshape(2, 3)
    out = fgrad.vmap(lambda x: host(cb, x))(xs)
    np.testing.assert_allclose(out, np.sin(xs))
    assert cb.calls == [(3,), (3,)]
    cb.calls.clear()
    out = fgrad.jit(fgrad.vmap(lambda x: host(cb, x), in_axes=1))(xs)
    np.testing.assert_allclose(out, np.sin(xs.T))
    assert cb.calls == [(2,)] * 3


def test_vmap_expand_dims_and_broadcast_all_call_once():
    def add(x, y):
        calls.append((x.shape, y.shape))
        return x + y
    calls = []
    xs, y = np.ones((4, 3)), np.arange(3.0)
    f = fgrad.vmap(lambda x: fgrad.pure_callback(add, S((3,), np.float64), x, y,
                                                 vmap_method="expand_dims"))
    np.testing.assert_allclose(f(xs), xs + y)
    assert calls == [((4, 3), (1, 3))]
    calls.clear()
    g = fgrad.vmap(lambda x: fgrad.pure_callback(add, S((3,), np.float64), x, y,
                                                 vmap_method="broadcast_all"))
    np.testing.assert_allclose(g(xs), xs + y)
    assert calls == [((4, 3), (4, 3))]


def test_nested_vmap_loops_over_both_axes():
    cb = Counter()
    xs = np.arange(12.0).reshape(2, 2, 3)
    out = fgrad.vmap(fgrad.vmap(lambda x: host(cb, x)))(xs)
    np.testing.assert_allclose(out, np.sin(xs))
    assert len(cb.calls) == 4


def test_differentiating_a_bare_callback_is_a_clear_error():
    x = np.arange(3.0)
    with pytest.raises(CallbackDerivativeError, match="custom_jvp"):
        fgrad.grad(lambda x: host(np.sin, x).sum())(x)
    with pytest.raises(CallbackDerivativeError, match="has no derivative"):
        fgrad.jvp(lambda x: host(np.sin, x), (x,), (x,))
    with pytest.raises(CallbackDerivativeError):
        fgrad.grad(fgrad.jit(lambda x: host(np.sin, x).sum()))(x)
    # a callback on values that are not differentiated is fine
    g = fgrad.grad(lambda x: (host(np.sin, fgrad.stop_gradient(x)) * x).sum())(x)
    np.testing.assert_allclose(g, np.sin(x))


def test_wrong_results_are_reported():
    x = np.arange(3.0)
    with pytest.raises(CallbackError, match="shape"):
        fgrad.pure_callback(lambda x: x[:2], S((3,), np.float64), x)
    with pytest.raises(CallbackError, match="structure"):
        fgrad.pure_callback(lambda x: [x, x], [S((3,), np.float64)] * 3, x)
    with pytest.raises(CallbackError, match="does not cast"):
        fgrad.pure_callback(lambda x: x + 1j, S((3,), np.float64), x)
    with pytest.raises(CallbackError, match="vmap_method"):
        fgrad.pure_callback(np.sin, S((3,), np.float64), x, vmap_method="loop")
    # float64 results cast to a declared float32
    out = fgrad.pure_callback(np.sin, S((3,), np.float32), x)
    assert out.dtype == np.float32


# -- custom rules around a callback, under every transformation ---------------------------

@fgrad.custom_jvp
def host_sin(x):
    return host(np.sin, x)


@host_sin.defjvp
def _host_sin_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return host_sin(x), host_cos(x) * t


@fgrad.custom_jvp
def host_cos(x):
    return host(np.cos, x)


@host_cos.defjvp
def _host_cos_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return host_cos(x), -host_sin(x) * t


@fgrad.custom_vjp
def host_exp(x):
    return host(np.exp, x)


host_exp.defvjp(lambda x: (host_exp(x), x), lambda x, ct: (ct * fnp.exp(x),))


def _loss(x):
    return fnp.sum(host_sin(x) * x)


def _want(x):
    return np.sin(x) + x * np.cos(x)


@pytest.mark.parametrize("transform", [
    lambda g: g, fgrad.jit, lambda g: fgrad.jit(fgrad.jit(g))])
def test_custom_jvp_around_a_callback_under_jit(transform):
    x = np.linspace(-1, 1, 4)
    np.testing.assert_allclose(transform(fgrad.grad(_loss))(x), _want(x))
    np.testing.assert_allclose(fgrad.grad(transform(_loss))(x), _want(x))
    _, t = fgrad.jvp(transform(_loss), (x,), (np.ones(4),))
    np.testing.assert_allclose(t, _want(x).sum())
    xs = np.stack([x, 2 * x])
    np.testing.assert_allclose(fgrad.vmap(fgrad.grad(transform(_loss)))(xs), _want(xs))
    np.testing.assert_allclose(transform(fgrad.vmap(fgrad.grad(_loss)))(xs), _want(xs))


def test_second_order_through_staged_custom_rules():
    x = np.linspace(-1, 1, 3)
    h = fgrad.hessian(fgrad.jit(_loss))(x)
    np.testing.assert_allclose(h, np.diag(2 * np.cos(x) - x * np.sin(x)), atol=1e-12)
    g2 = fgrad.jit(fgrad.grad(lambda x: fnp.sum(fgrad.grad(fgrad.jit(_loss))(x))))(x)
    np.testing.assert_allclose(g2, 2 * np.cos(x) - x * np.sin(x))


def test_custom_vjp_around_a_callback_under_jit_and_vmap():
    x = np.linspace(-1, 1, 4)

    def loss(x):
        return fnp.sum(host_exp(x))
    np.testing.assert_allclose(fgrad.grad(fgrad.jit(loss))(x), np.exp(x))
    np.testing.assert_allclose(fgrad.jit(fgrad.grad(loss))(x), np.exp(x))
    xs = np.stack([x, -x])
    np.testing.assert_allclose(fgrad.vmap(fgrad.grad(fgrad.jit(loss)))(xs), np.exp(xs))
    np.testing.assert_allclose(fgrad.vmap(host_exp)(xs), np.exp(xs))


def test_staged_custom_function_is_one_equation_the_compiler_inlines():
    graph = fgrad.make_graph(_loss)(np.ones(3))
    assert any(e.prim.name == "custom_jvp_call" for e in graph.eqns)
    f = fgrad.jit(_loss)
    assert "custom_jvp_call" not in f.lower(np.ones(3)).source
