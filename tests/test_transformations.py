"""grad, vjp, jvp, linearize, Jacobians and their compositions, on pytrees."""
import collections
import functools

import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.testing import check_grads

rng = np.random.default_rng(0)


def f_scalar(x):
    return fnp.sum(fnp.sin(x) * fnp.exp(x / 3) + x ** 2)


def numeric_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


def test_grad_matches_finite_differences():
    x = rng.normal(size=(3, 2))
    np.testing.assert_allclose(fgrad.grad(f_scalar)(x), numeric_grad(f_scalar, x),
                               rtol=1e-6, atol=1e-8)


def test_grad_of_grad():
    f = lambda x: fnp.sin(x) * x ** 3
    d2 = fgrad.grad(fgrad.grad(f))(0.7)
    expected = -np.sin(0.7) * 0.7 ** 3 + 6 * np.cos(0.7) * 0.7 ** 2 + 6 * 0.7 * np.sin(0.7)
    np.testing.assert_allclose(d2, expected, rtol=1e-10)
    d3 = fgrad.grad(fgrad.grad(fgrad.grad(fnp.exp)))(0.3)
    np.testing.assert_allclose(d3, np.exp(0.3))


def test_hessian_vector_product_forward_over_reverse():
    a = rng.normal(size=(4, 4))
    f = lambda x: fnp.sum(fnp.tanh(a @ x)) + 0.5 * fnp.sum(x ** 2)
    x, v = rng.normal(size=4), rng.normal(size=4)
    _, hvp = fgrad.jvp(fgrad.grad(f), (x,), (v,))
    t = np.tanh(a @ x)
    expected = a.T @ (-2 * t * (1 - t ** 2) * (a @ v)) + v
    np.testing.assert_allclose(hvp, expected, rtol=1e-10)
    np.testing.assert_allclose(fgrad.hessian(f)(x) @ v, expected, rtol=1e-10)


def test_jacfwd_equals_jacrev():
    w = rng.normal(size=(3, 4))
    f = lambda x: fnp.tanh(w @ x) * fnp.sum(x)
    x = rng.normal(size=4)
    np.testing.assert_allclose(fgrad.jacfwd(f)(x), fgrad.jacrev(f)(x), rtol=1e-12)
    assert fgrad.jacrev(f)(x).shape == (3, 4)


def test_jacfwd_of_jacrev_is_the_hessian_against_finite_differences():
    x = rng.normal(size=3)
    h = fgrad.jacfwd(fgrad.jacrev(f_scalar))(x)
    g = fgrad.grad(f_scalar)
    fd = np.stack([(g(x + e) - g(x - e)) / 2e-6 for e in np.eye(3) * 1e-6], axis=1)
    np.testing.assert_allclose(h, fd, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h, h.T, rtol=1e-12)


def test_pytrees_in_and_out():
    Params = collections.namedtuple("Params", "w b")
    p = {"layer": Params(rng.normal(size=(2, 2)), rng.normal(size=2)), "scale": 1.5}

    def f(p, x):
        lay = p["layer"]
        return fnp.sum(fnp.tanh(x @ lay.w + lay.b)) * p["scale"]

    x = rng.normal(size=(5, 2))
    g = fgrad.grad(f)(p, x)
    assert isinstance(g["layer"], Params) and g["layer"].w.shape == (2, 2)
    eps = 1e-6
    w_plus = {"layer": Params(p["layer"].w + eps * np.eye(2)[0:1].T @ np.eye(2)[0:1],
                              p["layer"].b), "scale": 1.5}
    fd = (f(w_plus, x) - f(p, x)) / eps
    np.testing.assert_allclose(g["layer"].w[0, 0], fd, rtol=1e-4)

    out, vjp_fn = fgrad.vjp(lambda a: {"double": a * 2, "pair": (a, fnp.sin(a))},
                            np.array([0.5, 1.0]))
    (ct,) = vjp_fn({"double": np.ones(2), "pair": (np.ones(2), np.ones(2))})
    np.testing.assert_allclose(ct, 2 + 1 + np.cos([0.5, 1.0]))


def test_argnums_tuple_and_argnames():
    f = lambda x, y, *, z: fnp.sum(x * y * z)
    x, y, z = np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([5.0, 6.0])
    gx, gy = fgrad.grad(f, argnums=(0, 1))(x, y, z=z)
    np.testing.assert_allclose(gx, y * z)
    np.testing.assert_allclose(gy, x * z)
    gz = fgrad.grad(f, argnames="z")(x, y, z=z)
    np.testing.assert_allclose(gz["z"], x * y)
    g1, names = fgrad.grad(f, argnums=1, argnames=("z",))(x, y, z=z)
    np.testing.assert_allclose(g1, x * z)
    np.testing.assert_allclose(names["z"], x * y)


def test_has_aux_and_value_and_grad():
    f = lambda x: (fnp.sum(x ** 2), {"norm": fnp.sqrt(fnp.sum(x ** 2))})
    x = np.array([3.0, 4.0])
    g, aux = fgrad.grad(f, has_aux=True)(x)
    np.testing.assert_allclose(g, 2 * x)
    assert float(aux["norm"]) == 5.0 and type(aux["norm"]) is not fgrad.core.trace.Tracer
    (value, aux), g = fgrad.value_and_grad(f, has_aux=True)(x)
    assert float(value) == 25.0 and float(aux["norm"]) == 5.0
    value, g = fgrad.value_and_grad(lambda x: fnp.sum(x ** 3))(x)
    np.testing.assert_allclose(g, 3 * x ** 2)
    out, vjp_fn, aux = fgrad.vjp(f, x, has_aux=True)
    assert float(aux["norm"]) == 5.0


def test_python_control_flow_on_values():
    def f(x):
        total = 0.0
        while fnp.sum(x) < 10:          # a loop whose trip count depends on x
            x = x * 2
            total = total + fnp.sum(fnp.sin(x))
        return total if x[0] > 0 else -total

    x = np.array([1.0, 0.5])
    np.testing.assert_allclose(fgrad.grad(f)(x), numeric_grad(f, x), rtol=1e-6)


def test_output_independent_of_input_gets_zero_gradient_of_right_shape_and_dtype():
    g = fgrad.grad(lambda x, y: fnp.sum(y ** 2))(np.ones((2, 3), np.float32), np.ones(2))
    assert g.shape == (2, 3) and g.dtype == np.float32 and not g.any()
    g = fgrad.grad(lambda x: 3.0)(np.ones(2))
    np.testing.assert_array_equal(g, np.zeros(2))


def test_fan_out_cotangents_are_summed():
    f = lambda x: fnp.sum(x * x + x + fnp.sin(x) * x)
    x = np.array([0.2, -0.7])
    np.testing.assert_allclose(fgrad.grad(f)(x), 2 * x + 1 + np.cos(x) * x + np.sin(x))


def test_vjp_function_can_be_called_repeatedly():
    out, vjp_fn = fgrad.vjp(lambda x: fnp.sin(x) * 2, np.array([0.1, 0.2]))
    first = vjp_fn(np.ones(2))[0]
    second = vjp_fn(np.ones(2))[0]
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(vjp_fn(np.array([0.0, 1.0]))[0], [0, 2 * np.cos(0.2)])


def test_linearize():
    f = lambda x: fnp.sin(x) * x
    x, t = np.array([0.3, 1.2]), np.array([1.0, -2.0])
    out, jvp_fn = fgrad.linearize(f, x)
    np.testing.assert_allclose(out, np.sin(x) * x)
    np.testing.assert_allclose(jvp_fn(t), (np.cos(x) * x + np.sin(x)) * t)


def test_jvp_output_without_tangent_is_zero():
    out, t = fgrad.jvp(lambda x: (x * 2, np.ones(3)), (np.ones(2),), (np.ones(2),))
    np.testing.assert_array_equal(t[1], np.zeros(3))


def test_stop_gradient():
    f = lambda x: fnp.sum(x * fgrad.stop_gradient(x))
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(fgrad.grad(f)(x), x)
    _, t = fgrad.jvp(f, (x,), (np.ones(2),))
    np.testing.assert_allclose(t, np.sum(x))


def test_stop_gradient_of_a_pytree_stops_each_leaf():
    # a tuple passed whole once came back as it was, derivatives and all
    def f(x):
        pair = fgrad.stop_gradient((x, {"twice": 2 * x}))
        return fnp.sum(x * pair[0] + pair[1]["twice"])
    x = np.array([1.0, 2.0])
    for grad in (fgrad.grad, lambda f: fgrad.jit(fgrad.grad(f))):
        np.testing.assert_allclose(grad(f)(x), x)
    assert fgrad.stop_gradient([x, 1.0])[0] is not None


def test_nested_grad_does_not_confuse_perturbations():
    # d/dx [x * d/dy (x + y)] = d/dx [x * 1] = 1   (perturbation confusion test)
    f = lambda x: x * fgrad.grad(lambda y: x + y)(1.0)
    np.testing.assert_allclose(fgrad.grad(f)(2.0), 1.0)


def test_closure_over_outer_tracer():
    f = lambda x: fgrad.grad(lambda y: fnp.sin(x * y))(1.0)   # = x cos(x)
    np.testing.assert_allclose(fgrad.grad(f)(0.5), np.cos(0.5) - 0.5 * np.sin(0.5))


def test_check_grads_on_a_composite_program():
    w = rng.normal(size=(3, 3))
    check_grads(lambda x, y: fnp.sum(fnp.tanh(x @ w) * y[:, None]) / fnp.max(x ** 2),
                (rng.normal(size=(2, 3)), rng.normal(size=2)), order=2)


def test_check_grads_reports_a_wrong_rule():
    @fgrad.primitive
    def bad_square(x):
        return x ** 2
    fgrad.defvjp(bad_square, lambda ans, x: lambda ct: ct * 3 * x)   # wrong: 2x
    fgrad.defjvp(bad_square, lambda t, ans, x: t * 2 * x)
    with pytest.raises(fgrad.testing.GradientCheckError, match=r"vjp.*finite"):
        check_grads(bad_square, (np.array([1.0, 2.0]),), order=1)


def test_indexing_with_repeated_indices_accumulates():
    x = np.array([1.0, 2.0, 3.0])
    g = fgrad.grad(lambda x: fnp.sum(x[np.array([0, 0, 2, 0])] ** 2))(x)
    np.testing.assert_allclose(g, [6.0, 0.0, 6.0])


def test_tracer_repr_shows_shape_dtype_and_value():
    seen = []
    fgrad.grad(lambda x: seen.append(repr(x)) or fnp.sum(x))(np.array([1.5, 2.0]))
    assert "f64[2]" in seen[0] and "1.5" in seen[0]


def test_tracer_array_protocol():
    def f(x):
        assert x.shape == (2, 3) and x.ndim == 2 and x.size == 6 and len(x) == 2
        assert x.dtype == np.float64
        y = (-x).T @ x + x.sum(axis=0) - x.mean() * x.max() / x.min()
        y = y + x.reshape(3, 2).transpose(1, 0).dot(np.ones((3, 2)))[0, 0]
        y = y ** 2 + abs(x[0, 0]) + (x > 0).sum() + x.astype(np.complex128).real.sum()
        return y.sum() + fnp.sum(1.0 - x) + fnp.sum(2.0 / x) + (x @ np.ones(3)).sum()
    x = rng.uniform(0.5, 1.5, size=(2, 3))
    check_grads(f, (x,), order=1, atol=1e-4, rtol=1e-4)


def test_numpy_functions_on_tracers_route_to_fgrad():
    w = rng.normal(size=(3, 2))
    f = lambda x: np.sum(np.sin(x) @ w) + np.dot(x, np.ones(3)).sum()
    x = rng.normal(size=(2, 3))
    expected = np.cos(x) * w.sum(axis=1) + 1
    np.testing.assert_allclose(fgrad.grad(f)(x), expected)
    assert np.add(np.ones(3), 2.0).dtype == np.float64   # plain NumPy untouched


def test_at_updates_are_functional_and_differentiable():
    x = np.array([1.0, 2.0, 3.0])
    y = fgrad.at(x)[1].set(10.0)
    assert list(y) == [1.0, 10.0, 3.0] and list(x) == [1.0, 2.0, 3.0]
    g = fgrad.grad(lambda x, v: fnp.sum(fgrad.at(x)[1].set(v) ** 2), argnums=(0, 1))(x, 4.0)
    np.testing.assert_allclose(g[0], [2.0, 0.0, 6.0])
    np.testing.assert_allclose(g[1], 8.0)


def test_custom_vjp_jvp_of_fun_differentiates_the_function_in_forward_mode():
    # reverse mode reads the rule (a gradient scaled by 10, to tell it apart);
    # forward mode goes through the function's own operations, staged or not
    @functools.partial(fgrad.custom_vjp, jvp_of_fun=True)
    def f(x):
        return fnp.sin(x) * x

    f.defvjp(lambda x: (f(x), x), lambda x, ct: (10.0 * ct * (fnp.cos(x) * x + fnp.sin(x)),))
    x, exact = 0.7, np.cos(0.7) * 0.7 + np.sin(0.7)
    for jvp in (lambda x: fgrad.jvp(f, (x,), (1.0,))[1],
                lambda x: fgrad.jvp(fgrad.jit(f), (x,), (1.0,))[1],
                fgrad.jit(lambda x: fgrad.jvp(f, (x,), (1.0,))[1]),
                fgrad.jacfwd(f)):
        np.testing.assert_allclose(jvp(x), exact, rtol=1e-12)
    np.testing.assert_allclose(fgrad.vmap(fgrad.jacfwd(f))(np.array([x, x])), [exact] * 2,
                               rtol=1e-12)
    np.testing.assert_allclose(fgrad.grad(f)(x), 10 * exact, rtol=1e-12)
    np.testing.assert_allclose(fgrad.grad(fgrad.jit(f))(x), 10 * exact, rtol=1e-12)
    # forward over reverse: the rule, differentiated through its operations
    np.testing.assert_allclose(fgrad.hessian(f)(x),
                               10 * (2 * np.cos(x) - x * np.sin(x)), rtol=1e-12)
