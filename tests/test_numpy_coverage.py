"""Every public callable of fgrad.numpy is accounted for: it has a gradient spec
in primitive_specs.py (checked to second order, forward and reverse), or it is
listed here as having no derivative (and checked against NumPy), or it is NumPy's
own object (creation functions, dtypes) passed through unchanged."""
import types

import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.testing import check_grads
from primitive_specs import NONDIFF_SPECS, SPECS

X = np.array([[0.5, -1.5, 0.0], [2.0, 0.5, -0.25]])

# name -> arguments: functions whose result carries no derivative
NONDIFF_FUNCTIONS = {
    "allclose": (X, X + 1e-9), "array_equal": (X, X), "isclose": (X, X * 1.0000001),
    "count_nonzero": (X,), "fix": (X,), "zeros_like": (X,), "ones_like": (X,),
    "empty_like": (X,), "nonzero": (X,), "flatnonzero": (X,), "argwhere": (X,),
    "searchsorted": (np.sort(X.ravel()), X), "unique": (X,),
    "iscomplex": (X,), "isreal": (X,), "nanargmax": (X,), "nanargmin": (X,),
    "isposinf": (np.array([np.inf, 0.5, -1.0]),), "isneginf": (np.array([-np.inf, 0.5, 1.0]),),
}
# name -> arguments: questions about shape and dtype
QUERIES = {
    "shape": (X,), "ndim": (X,), "size": (X,), "result_type": (X,),
    "isscalar": (X,), "iscomplexobj": (X,), "isrealobj": (X,),
}


# name -> arguments: differentiable, but the result's type depends on the values, so
# they need concrete values (not under jit or vmap): checked by finite differences
CONCRETE_ONLY = {"real_if_close": (X + 1e-18j,)}


def _public_callables():
    for name in sorted(dir(fnp)):
        obj = getattr(fnp, name)
        if name.startswith("_") or isinstance(obj, (types.ModuleType, type)) \
                or not callable(obj):
            continue
        yield name, obj


def test_every_public_function_is_covered():
    covered = (set(SPECS) | set(NONDIFF_SPECS) | set(NONDIFF_FUNCTIONS) | set(QUERIES)
               | set(CONCRETE_ONLY))
    covered_objects = {id(getattr(fnp, n)) for n in covered if hasattr(fnp, n)}
    missing = [name for name, obj in _public_callables()
               if name not in covered and id(obj) not in covered_objects
               and obj is not getattr(np, name, None)]
    assert not missing, (
        "fgrad.numpy functions with neither a gradient spec (tests/primitive_specs.py) "
        f"nor an entry in NONDIFF_FUNCTIONS / QUERIES here: {missing}")


def test_passthrough_objects_are_numpy_s_own():
    # what is not wrapped must be exactly NumPy's, not a look-alike
    assert fnp.random is np.random and fnp.pi == np.pi and fnp.newaxis is None
    assert fnp.zeros is np.zeros and fnp.float32 is np.float32
    assert fnp.finfo(fnp.float32).eps == np.finfo(np.float32).eps


@pytest.mark.parametrize("name", sorted(NONDIFF_FUNCTIONS))
def test_nondifferentiable_functions_match_numpy_and_have_zero_derivative(name):
    args = NONDIFF_FUNCTIONS[name]
    fn = getattr(fnp, name)
    expected = getattr(np, name)(*args)
    if name == "empty_like":
        expected = np.zeros_like(*args)
    out = fn(*args)
    np.testing.assert_array_equal(out, expected)
    assert np.asarray(out).dtype == np.asarray(expected).dtype
    g = fgrad.grad(lambda x: fnp.sum(x) + fnp.sum(np.asarray(fn(x, *args[1:])) * 0.0))(
        args[0])
    np.testing.assert_array_equal(g, np.ones_like(args[0]))


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_queries_answer_the_same_for_tracers(name):
    args = QUERIES[name]
    expected = getattr(np, name)(*args)
    seen = []

    def f(x):
        seen.append(getattr(fnp, name)(x, *args[1:]))
        return fnp.sum(x)
    fgrad.grad(f)(args[0])
    assert seen == [expected]
    assert getattr(fnp, name)(*args) == expected


@pytest.mark.parametrize("name", sorted(CONCRETE_ONLY))
def test_value_dependent_functions_match_numpy_and_finite_differences(name):
    args = CONCRETE_ONLY[name]
    fn = getattr(fnp, name)
    np.testing.assert_array_equal(fn(*args), getattr(np, name)(*args))
    check_grads(lambda x: fnp.real(fn(x)) * 2.0, args, order=2, modes=("fwd", "rev"))
