"""Complex numbers: JAX's and autograd's convention, checked against finite
differences along both real directions of every complex input.

The convention: the JVP is the ordinary (R-linear) directional derivative, and
the VJP is its transpose under the pairing ``re(sum(a * b))``, with no
conjugation. So for a holomorphic ``f``, ``vjp(f, z)[1](1.0) == f'(z)``, and
``grad(f, holomorphic=True)`` returns the same number.
"""
import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.errors import InvalidInputError, NonScalarOutputError
from fgrad.testing import GradientCheckError, check_grads

RNG = np.random.default_rng(0)


def _z(shape=(3,), scale=0.6, shift=0.0, dtype=np.complex128):
    return np.asarray(shift + scale * (RNG.standard_normal(shape)
                                       + 1j * RNG.standard_normal(shape)), dtype)


# (function, a point where it is smooth: away from branch cuts and poles)
HOLOMORPHIC = {
    "sin": (fnp.sin, _z()), "cos": (fnp.cos, _z()), "tan": (fnp.tan, _z(scale=0.3)),
    "exp": (fnp.exp, _z()), "expm1": (fnp.expm1, _z()), "exp2": (fnp.exp2, _z()),
    "log": (fnp.log, _z(shift=2.0)), "log1p": (fnp.log1p, _z(shift=1.0)),
    "log2": (fnp.log2, _z(shift=2.0)), "log10": (fnp.log10, _z(shift=2.0)),
    "sqrt": (fnp.sqrt, _z(shift=2.0)), "square": (fnp.square, _z()),
    "sinh": (fnp.sinh, _z()), "cosh": (fnp.cosh, _z()), "tanh": (fnp.tanh, _z(scale=0.3)),
    "arctan": (fnp.arctan, _z(scale=0.3)), "arcsin": (fnp.arcsin, _z(scale=0.3)),
    "arccos": (fnp.arccos, _z(scale=0.3)), "arcsinh": (fnp.arcsinh, _z(scale=0.3)),
    "arccosh": (fnp.arccosh, _z(scale=0.3, shift=2.0)),
    "arctanh": (fnp.arctanh, _z(scale=0.3)),
    "reciprocal": (fnp.reciprocal, _z(shift=2.0)),
    "negative": (fnp.negative, _z()),
    "power": (lambda z: z ** (1.5 + 0.5j), _z(shift=2.0)),
    "power_int": (lambda z: z ** 3, _z()),
    "polynomial": (lambda z: 3.0 * z * z - (2 - 1j) * z + 1j, _z()),
    "divide": (lambda z: (z + 1j) / (z + 3.0), _z()),
    "sum": (lambda z: fnp.sum(z * z), _z((2, 3))),
    "prod": (lambda z: fnp.prod(z, axis=1), _z((2, 3), shift=1.0)),
    "mean": (lambda z: fnp.mean(z, axis=0), _z((2, 3))),
    "cumsum": (lambda z: fnp.cumsum(z * z), _z((2, 3))),
    "cumprod": (lambda z: fnp.cumprod(z, axis=1), _z((2, 3), shift=1.0)),
    "matmul": (lambda z: z @ z.T, _z((2, 2))),
    "getitem": (lambda z: z[::-1, 1] * z[0, :2], _z((2, 3))),
    "concatenate": (lambda z: fnp.concatenate([z, z * 1j]), _z()),
    "sort_free_shape_ops": (lambda z: fnp.roll(fnp.flip(fnp.tile(z, 2)), 1), _z()),
    "where": (lambda z: fnp.where(np.array([True, False, True]), z * z, z), _z()),
}

# real-valued or otherwise non-holomorphic functions of complex inputs
NON_HOLOMORPHIC = {
    "abs": (fnp.abs, _z()),
    "real": (fnp.real, _z()),
    "imag": (fnp.imag, _z()),
    "conj": (fnp.conj, _z()),
    "angle": (fnp.angle, _z(shift=1.0)),
    "abs_squared": (lambda z: fnp.real(z * fnp.conj(z)), _z()),
    "var": (lambda z: fnp.var(z), _z((4,))),
    "mixed": (lambda z: fnp.abs(fnp.sin(z)) * fnp.real(z) + fnp.imag(z * z), _z()),
}


@pytest.mark.parametrize("name", sorted(HOLOMORPHIC))
def test_holomorphic_functions_match_finite_differences(name):
    f, z = HOLOMORPHIC[name]
    check_grads(f, (z,), order=2)


@pytest.mark.parametrize("name", sorted(NON_HOLOMORPHIC))
def test_non_holomorphic_functions_match_finite_differences(name):
    f, z = NON_HOLOMORPHIC[name]
    check_grads(f, (z,), order=2)


def test_complex64_keeps_its_precision():
    z = _z(dtype=np.complex64)
    out, vjp_fn = fgrad.vjp(lambda z: fnp.sin(z) * fnp.abs(z), z)
    assert out.dtype == np.complex64
    assert vjp_fn(np.ones(3, np.complex64))[0].dtype == np.complex64
    check_grads(lambda z: fnp.exp(z) * fnp.abs(z), (z,), order=1)


def test_a_real_input_through_complex_values_gets_a_real_gradient():
    x = np.array([0.3, -1.2])
    g = fgrad.grad(lambda x: fnp.sum(fnp.abs(fnp.exp(1j * x) * (x + 2j))))(x)
    assert g.dtype == np.float64
    check_grads(lambda x: fnp.abs(fnp.exp(1j * x) * (x + 2j)), (x,), order=2)


def test_holomorphic_grad_is_the_complex_derivative_and_vjp_of_one():
    z = 0.7 - 0.4j
    g = fgrad.grad(lambda z: fnp.sin(z) * z, holomorphic=True)(z)
    np.testing.assert_allclose(g, np.cos(z) * z + np.sin(z))
    _, vjp_fn = fgrad.vjp(lambda z: fnp.sin(z) * z, np.complex128(z))
    np.testing.assert_allclose(vjp_fn(np.complex128(1.0))[0], g)


def test_grad_of_a_real_function_of_complex_input_is_the_conjugate_direction():
    # d|z|/dx - i d|z|/dy = conj(z) / |z|, as jax.grad returns
    z = np.complex128(3.0 + 4.0j)
    np.testing.assert_allclose(fgrad.grad(fnp.abs)(z), (3.0 - 4.0j) / 5.0)
    np.testing.assert_allclose(fgrad.grad(lambda z: fnp.real(z * fnp.conj(z)))(z),
                               2 * np.conj(z))


def test_abs_of_complex_zero_has_a_finite_derivative():
    g = fgrad.grad(lambda z: fnp.sum(fnp.abs(z)))(np.array([0j, 1j]))
    np.testing.assert_allclose(g, [0.0, -1j])


def test_grad_of_a_complex_output_needs_holomorphic():
    with pytest.raises(NonScalarOutputError, match="holomorphic=True"):
        fgrad.grad(fnp.sin)(np.complex128(1.0 + 1.0j))


def test_holomorphic_requires_complex_inputs():
    with pytest.raises(InvalidInputError, match="needs complex inputs"):
        fgrad.grad(fnp.sin, holomorphic=True)(1.0)


def test_check_grads_catches_a_wrong_rule_in_the_imaginary_direction():
    # an R-linear map that is right along real directions only: check_grads must
    # perturb the imaginary direction too to see it
    @fgrad.custom_jvp
    def f(z):
        return z * z

    f.defjvp(lambda primals, tangents: (primals[0] ** 2,
                                        2 * primals[0] * fnp.real(tangents[0])))
    with pytest.raises(GradientCheckError, match="finite differences"):
        check_grads(f, (_z(),), order=1, modes=("fwd",))
