"""Every error the API promises: triggered, and its message read."""
import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.backend import register_backend, unregister_backend
from fgrad.errors import (ArgnumError, BackendMismatchError, CotangentError,
                          CustomRuleError, ImmutableArrayError, InvalidInputError,
                          MissingRuleError, NonScalarOutputError, NumpyFunctionError,
                          TracerLeakError)
from fgrad.core.trace import Primitive


def test_grad_of_non_scalar_output():
    with pytest.raises(NonScalarOutputError, match=r"shape \(3,\).*\.sum\(\).*vjp.*jacrev"):
        fgrad.grad(lambda x: x * 2)(np.ones(3))
    with pytest.raises(NonScalarOutputError, match=r"single scalar.*vjp"):
        fgrad.grad(lambda x: (fnp.sum(x), fnp.sum(x)))(np.ones(3))


def test_grad_of_complex_output():
    with pytest.raises(NonScalarOutputError, match=r"real scalar.*complex128.*holomorphic"):
        fgrad.grad(lambda x: fnp.sum(x * 1j))(np.ones(3))


def test_vjp_cotangent_of_wrong_shape_or_dtype():
    _, vjp_fn = fgrad.vjp(lambda x: x * 2, np.ones(3))
    with pytest.raises(CotangentError, match=r"shape \(2,\).*shape \(3,\)"):
        vjp_fn(np.ones(2))
    with pytest.raises(CotangentError, match=r"dtype float32.*float64.*astype"):
        vjp_fn(np.ones(3, np.float32))
    with pytest.raises(CotangentError, match=r"structure"):
        vjp_fn((np.ones(3), np.ones(3)))


def test_jvp_tangent_of_wrong_shape():
    with pytest.raises(CotangentError, match=r"tangent leaf 0 has shape \(2,\)"):
        fgrad.jvp(fnp.sin, (np.ones(3),), (np.ones(2),))


@pytest.mark.parametrize("bad", [3, np.array([1, 2]), np.array([True, False])])
def test_integer_or_boolean_input_to_grad(bad):
    with pytest.raises(InvalidInputError, match=r"only floating-point inputs can be "
                                                 r"differentiated.*astype\(float\)"):
        fgrad.grad(lambda x: fnp.sum(x * 1.0))(bad)


def test_missing_rule_names_primitive_transformation_and_file():
    @fgrad.primitive
    def no_rules(x):
        return x * 2
    with pytest.raises(MissingRuleError, match=r"no_rules' has no VJP rule.*"
                                               r"fgrad.defvjp.*custom_vjp"):
        fgrad.grad(lambda x: fnp.sum(no_rules(x)))(np.ones(2))
    with pytest.raises(MissingRuleError, match=r"no_rules' has no JVP rule.*forward mode"):
        fgrad.jvp(no_rules, (np.ones(2),), (np.ones(2),))


def test_missing_builtin_rule_names_the_primitives_file():
    prim = Primitive("test_only_twice", lambda x: 2 * x, family="primitives/elementwise.py",
                     register=False)
    with pytest.raises(MissingRuleError, match=r"test_only_twice.*VJP.*primitives/"
                                               r"elementwise.py.*custom_vjp"):
        fgrad.grad(lambda x: fnp.sum(prim.bind(x)))(np.ones(2))


class StandIn(np.ndarray):
    """Arrays of a pretend second backend (think CuPy), computed with NumPy."""


@pytest.fixture
def standin_backend():
    register_backend(StandIn, np, "standin")
    yield
    unregister_backend(StandIn)


def test_mixed_backends_in_one_call(standin_backend):
    device = np.ones(3).view(StandIn)
    with pytest.raises(BackendMismatchError, match=r"argument 0 is a numpy array, argument 1 "
                                                   r"is a standin array"):
        fgrad.grad(lambda x, y: fnp.sum(x * y), argnums=(0, 1))(np.ones(3), device)
    with pytest.raises(BackendMismatchError, match=r"different backends.*numpy.*standin"):
        fnp.add(np.ones(3), device)


def test_argnums_out_of_range():
    with pytest.raises(ArgnumError, match=r"argnums=2.*called with 2 positional"):
        fgrad.grad(lambda x, y: fnp.sum(x), argnums=2)(np.ones(2), np.ones(2))
    with pytest.raises(ArgnumError, match=r"argnames names 'z'.*without a keyword"):
        fgrad.grad(lambda x, z=1.0: fnp.sum(x), argnames="z")(np.ones(2))


def test_write_through_a_view_fgrad_cannot_follow_is_refused():
    def f(x):
        y = x.T
        y[0] = 1.0                          # NumPy would write into x too
        return fnp.sum(x)
    with pytest.raises(ImmutableArrayError, match=r"view made by 'transpose'.*basic "
                       r"indexing.*y = x\.T\.copy\(\)"):
        fgrad.grad(f)(np.ones((2, 2)))


def test_numpy_function_without_fgrad_rule():
    with pytest.raises(NumpyFunctionError, match=r"numpy.*cbrt_unknown|fgrad.numpy"):
        fgrad.grad(lambda x: np.add.reduce(x))(np.ones(2))
    with pytest.raises(NumpyFunctionError, match=r"cannot be converted.*stop_gradient"):
        fgrad.grad(lambda x: fnp.sum(np.asarray(x)))(np.ones(2))


def test_leaked_tracer():
    leaked = []
    fgrad.grad(lambda x: leaked.append(x) or fnp.sum(x))(np.ones(2))
    with pytest.raises(TracerLeakError, match=r"escaped the transformation"):
        fnp.sin(leaked[0])


def test_custom_vjp_bwd_output_is_validated():
    @fgrad.custom_vjp
    def f(x, y):
        return x * y

    def fwd(x, y):
        return x * y, (x, y)

    bad_outputs = {
        "count": (lambda res, ct: (ct,), r"returned 1 cotangents.*takes 2"),
        "shape": (lambda res, ct: (ct, np.ones(10)),
                  r"leaf 1 .*shape \(10,\) but its primal input has shape \(\)"),
        "dtype": (lambda res, ct: (ct, np.float32(1.0)),
                  r"leaf 1 .*dtype float32.*float64"),
        "type": (lambda res, ct: ct, r"must return a tuple"),
    }
    for name, (bwd, message) in bad_outputs.items():
        f.defvjp(fwd, bwd)
        with pytest.raises(CustomRuleError, match=message):
            fgrad.grad(f, argnums=(0, 1))(np.float64(2.0), np.float64(3.0))
    f.defvjp(fwd, lambda res, ct: (None, ct * res[0]))     # None means zero
    gx, gy = fgrad.grad(f, argnums=(0, 1))(np.float64(2.0), np.float64(3.0))
    assert float(gx) == 0.0 and float(gy) == 2.0


def test_custom_vjp_fwd_must_return_a_pair():
    @fgrad.custom_vjp
    def f(x):
        return x
    f.defvjp(lambda x: x, lambda res, ct: (ct,))
    with pytest.raises(CustomRuleError, match=r"pair \(output, residuals\)"):
        fgrad.grad(f)(1.0)


def test_custom_vjp_under_forward_mode():
    @fgrad.custom_vjp
    def f(x):
        return x
    f.defvjp(lambda x: (x, None), lambda res, ct: (ct,))
    with pytest.raises(CustomRuleError, match=r"forward mode.*custom_jvp"):
        fgrad.jvp(f, (1.0,), (1.0,))


def test_user_rule_of_wrong_shape():
    @fgrad.primitive
    def twice(x):
        return 2 * x
    fgrad.defvjp(twice, lambda ans, x: lambda ct: fnp.sum(ct))
    with pytest.raises(CustomRuleError, match=r"returned shape \(\).*shape \(3,\)"):
        fgrad.grad(lambda x: fnp.sum(twice(x)))(np.ones(3))


def test_indexing_a_numpy_array_with_a_tracer_names_the_fgrad_forms():
    x = np.arange(3.0)
    with pytest.raises(NumpyFunctionError, match=r"fnp\.take\(x, i, axis=0\).*"
                       r"dynamic_index_in_dim\(x, i, keepdims=False\)"):
        fgrad.vmap(lambda v: x[fnp.argmax(v)])(np.eye(3))
    # the forms it names work
    np.testing.assert_array_equal(fgrad.vmap(lambda v: fnp.take(x, fnp.argmax(v), axis=0))(
        np.eye(3)), x)
    np.testing.assert_array_equal(fgrad.vmap(lambda v: fgrad.lax.dynamic_index_in_dim(
        x, fnp.argmax(v), keepdims=False))(np.eye(3)), x)
