"""Derivatives at the edges of the domains: ``x ** y`` at ``x == 0``, and every
elementwise function at 0, +-1 and +-inf against JAX (where JAX is installed)."""
import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp


def _d(f, order):
    for _ in range(order):
        f = fgrad.grad(f)
    return f


@pytest.mark.parametrize("y, first, second", [
    (0, 0.0, 0.0), (0.0, 0.0, 0.0),        # x ** 0 is the constant 1
    (1, 1.0, 0.0), (1.0, 1.0, 0.0),        # x ** 1 is x
    (2, 0.0, 2.0), (2.5, 0.0, 0.0), (3.0, 0.0, 0.0)])
def test_power_at_zero_has_the_limits_of_its_derivatives(y, first, second):
    for f in (lambda x: x ** y, lambda x: fnp.power(x, np.float64(y))):
        assert float(_d(f, 1)(0.0)) == first
        assert float(_d(f, 2)(0.0)) == second
        assert float(fgrad.jvp(f, (0.0,), (1.0,))[1]) == first
        assert float(fgrad.jvp(_d(f, 1), (0.0,), (1.0,))[1]) == second
    if isinstance(y, float):
        # in the exponent: x ** y * log(x) is 0 at x == 0, and so its derivative
        dy = fgrad.grad(lambda y: fnp.power(0.0, y))
        assert float(dy(y)) == 0.0 and float(fgrad.grad(dy)(y)) == 0.0


def test_power_away_from_zero_keeps_its_mixed_derivative_at_a_zero_exponent():
    # d/dy (y x ** (y - 1)) = x ** (y - 1) (1 + y log x): 1 / x at y == 0
    h = fgrad.hessian(lambda x, y: x ** y, (0, 1))(2.0, 0.0)
    np.testing.assert_allclose(np.array(h, float), [[0.0, 0.5], [0.5, np.log(2.0) ** 2]])


@pytest.mark.parametrize("y", [3, 2.5, -1, 0, np.float32(3.0)])
def test_a_float32_power_by_a_python_number_differentiates_in_float32(y):
    # NumPy keeps float32 x ** 3 in float32 (a Python number takes x's dtype),
    # and so do its derivative and every step computing it, as in JAX
    x = np.array([0.5, 2.0, 1.5], np.float32)

    def f(x):
        return fnp.sum(x ** y)
    for d in (fgrad.grad(f), fgrad.jit(fgrad.grad(f)), fgrad.hessian(f),
              fgrad.jit(fgrad.hessian(f)), lambda x: fgrad.jvp(f, (x,), (np.ones_like(x),))[1]):
        assert np.asarray(d(x)).dtype == np.float32
    for g in (fgrad.grad(f), fgrad.hessian(f)):
        graph = fgrad.make_graph(g)(x)
        assert {str(v.aval.dtype) for e in graph.eqns for v in e.outvars
                if np.dtype(v.aval.dtype).kind == "f"} == {"float32"}, str(graph)
    np.testing.assert_allclose(fgrad.grad(f)(x), y * x.astype(float) ** (y - 1), rtol=1e-6)


def test_a_float32_power_by_an_int64_array_differentiates_in_float64_as_numpy_computes_it():
    x, y = np.array([0.5, 2.0], np.float32), np.array([3, 2])
    assert (x ** y).dtype == np.float64
    graph = fgrad.make_graph(fgrad.grad(lambda x: fnp.sum(x ** y)))(x)
    assert "float64" in {str(v.aval.dtype) for e in graph.eqns for v in e.outvars}
    assert fgrad.grad(lambda x: fnp.sum(x ** y))(x).dtype == np.float32
