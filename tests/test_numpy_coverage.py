"""Every public callable of fgrad.numpy is accounted for: it has a gradient spec
in primitive_specs.py (checked to second order, forward and reverse), or it is
listed here as having no derivative (and checked against NumPy), or it is NumPy's
own object (creation functions, dtypes) passed through unchanged."""
import subprocess
import sys
import types

import numpy as np
import pytest
from numpy_not_provided import NOT_PROVIDED, PAGE, markdown, rendered_on_page
from numpy_value_shape_specs import VALUE_SHAPE_SPECS
from primitive_specs import NONDIFF_SPECS, SPECS

import fgrad
import fgrad.numpy as fnp
from fgrad.core.trace import Tracer
from fgrad.errors import DeviceError
from fgrad.testing import check_grads

X = np.array([[0.5, -1.5, 0.0], [2.0, 0.5, -0.25]])

# name -> arguments: functions whose result carries no derivative
NONDIFF_FUNCTIONS = {
    "allclose": (X, X + 1e-9), "array_equal": (X, X), "isclose": (X, X * 1.0000001),
    "count_nonzero": (X,), "fix": (X,), "zeros_like": (X,), "ones_like": (X,),
    "empty_like": (X,), "nonzero": (X,), "flatnonzero": (X,), "argwhere": (X,),
    "searchsorted": (np.sort(X.ravel()), X),
    "tril_indices_from": (X,), "triu_indices_from": (X, 1),
    "diag_indices_from": (X[:, :2],),
    "array_equiv": (X[0], X), "iscomplex": (X,),
    "digitize": (X, np.array([-1.0, 0.25, 1.0])), "isin": (X, np.array([0.5, 2.0])),
    "argpartition": (X[0], 1), "lexsort": (X,), "isreal": (X,), "nanargmax": (X,), "nanargmin": (X,),
    "isposinf": (np.array([np.inf, 0.5, -1.0]),), "isneginf": (np.array([-np.inf, 0.5, 1.0]),),
}
# name -> arguments: NumPy's functions that make arrays from nothing, with the Array
# API standard's device= keyword (fgrad.numpy._devices)
CREATION_FUNCTIONS = {
    "zeros": ((2, 3),), "ones": (4,), "empty": ((0, 2),), "eye": (3, 4),
    "arange": (1.0, 4.0), "full": ((2,), 1.5), "linspace": (0.0, 1.0, 5),
}
# name -> arguments: questions about shape and dtype
QUERIES = {
    "shape": (X,), "ndim": (X,), "size": (X,), "result_type": (X,),
    "isscalar": (X,), "iscomplexobj": (X,), "isrealobj": (X,),
}


# name -> arguments: differentiable, but the result's type depends on the values, so
# they need concrete values (not under jit or vmap): checked by finite differences
CONCRETE_ONLY = {"real_if_close": (X + 1e-18j,), "asarray_chkfinite": (X,)}
# name -> (function of the differentiated argument, NumPy's, argument): a condition
# or index picks the entries, so it must be concrete (not under jit or vmap)
CONCRETE_SELECTIONS = {
    "compress": (lambda a: fnp.compress([True, False, True], a, axis=1),
                 lambda a: np.compress([True, False, True], a, axis=1), X),
    "extract": (lambda a: fnp.extract(X > 0, a), lambda a: np.extract(X > 0, a), X),
    "bincount": (lambda w: fnp.bincount(np.array([0, 3, 3, 1]), w, minlength=6),
                 lambda w: np.bincount(np.array([0, 3, 3, 1]), w, minlength=6),
                 np.array([0.5, 1.0, 2.0, -1.0])),
    "trim_zeros": (lambda f: fnp.trim_zeros(f * np.array([0, 0, 1, 1, 0])),
                   lambda f: np.trim_zeros(f * np.array([0, 0, 1, 1, 0])),
                   np.array([0.5, 1.0, 2.0, -1.0, 3.0])),
}


def _public_callables():
    for name in sorted(dir(fnp)):
        obj = getattr(fnp, name)
        if name.startswith("_") or isinstance(obj, (types.ModuleType, type)) \
                or not callable(obj):
            continue
        yield name, obj


def test_every_public_function_is_covered():
    covered = (set(SPECS) | set(NONDIFF_SPECS) | set(NONDIFF_FUNCTIONS) | set(QUERIES)
               | set(CREATION_FUNCTIONS)
               | set(CONCRETE_ONLY) | set(CONCRETE_SELECTIONS) | set(VALUE_SHAPE_SPECS))
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
    assert fnp.identity is np.identity and fnp.float32 is np.float32
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
    # zeros_like and its kin of a tracer are tracers (that an update can write
    # into), with no derivative: the sum below adds none
    g = fgrad.grad(lambda x: fnp.sum(x) + fnp.sum(fnp.asarray(fn(x, *args[1:])) * 0.0))(
        args[0])
    np.testing.assert_array_equal(g, np.ones_like(args[0]))


@pytest.mark.parametrize("name", sorted(CREATION_FUNCTIONS))
def test_creation_functions_make_arrays_on_a_traced_value_s_device(name):
    args = CREATION_FUNCTIONS[name]
    expected = getattr(np, name)(*args)
    out = getattr(fnp, name)(*args, device="cpu")
    assert type(out) is np.ndarray and out.dtype == expected.dtype
    np.testing.assert_array_equal(out, expected)
    seen = []

    def f(x):
        made = getattr(fnp, name)(*args, device=x.device)
        seen.append((isinstance(made, Tracer), made.device == x.device,
                     made.__array_namespace__() is fnp))
        np.testing.assert_array_equal(fgrad.stop_gradient(made).__array__(), expected)
        return fnp.sum(x) + fnp.sum(made * 0.0)
    np.testing.assert_array_equal(fgrad.grad(f)(X), np.ones_like(X))
    assert seen == [(True, True, True)]


def test_creation_on_another_device_is_refused_with_the_fix():
    with pytest.raises(DeviceError, match="device_put"):
        fnp.zeros(3, device="gpu")
    with pytest.raises(DeviceError, match="device_put"):
        fgrad.grad(lambda x: fnp.sum(fnp.asarray(x, device="gpu")))(X)


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


# -- every public callable of NumPy: provided (with a spec) or listed with a reason -----

NAMESPACES = {"": (np, fnp), "linalg.": (np.linalg, fnp.linalg), "fft.": (np.fft, fnp.fft)}
# provided submodule names -> the spec that exercises them (one spec draws several)
COVERED_BY = {
    "linalg.eigvalsh": "eigh", "linalg.eigvals": "eig", "linalg.svdvals": "svd", "linalg.lstsq": "lstsq",
    **{f"fft.{n}": "fft" for n in ("fft", "ifft", "rfft", "irfft", "fft2", "ifft2",
                                   "fftn", "ifftn", "rfft2", "rfftn", "irfft2", "irfftn")},
    "fft.ifftshift": "fftshift", "fft.ihfft": "fft.hfft",
    # NumPy 2's linalg spellings of fgrad.numpy's own functions
    "linalg.matmul": "matmul", "linalg.matrix_transpose": "matrix_transpose",
    "linalg.vecdot": "vecdot", "linalg.tensordot": "tensordot",
}


def _numpy_callables():
    for prefix, (np_module, fgrad_module) in NAMESPACES.items():
        for name in sorted(dir(np_module)):
            obj = getattr(np_module, name)
            if not name.startswith("_") and callable(obj) \
                    and not isinstance(obj, types.ModuleType):
                yield prefix + name, name, fgrad_module


def test_every_numpy_callable_is_provided_or_listed_with_a_reason():
    unaccounted = [key for key, name, mod in _numpy_callables()
                   if not hasattr(mod, name) and key not in NOT_PROVIDED]
    assert not unaccounted, (
        "NumPy callables that fgrad.numpy neither provides nor lists in "
        f"tests/numpy_not_provided.py (with a reason): {unaccounted}")
    both = [key for key, name, mod in _numpy_callables()
            if hasattr(mod, name) and key in NOT_PROVIDED]
    assert not both, f"provided, so remove from tests/numpy_not_provided.py: {both}"


def test_the_not_provided_table_names_only_numpy_callables():
    known = {key for key, _, _ in _numpy_callables()}
    stale = sorted(set(NOT_PROVIDED) - known)
    assert not stale, f"tests/numpy_not_provided.py lists names NumPy lacks: {stale}"


def test_every_provided_submodule_function_has_a_spec():
    covered = set(SPECS) | set(NONDIFF_SPECS)
    missing = []
    for key, name, mod in _numpy_callables():
        if not key.startswith(("linalg.", "fft.")) or not hasattr(mod, name) \
                or isinstance(getattr(mod, name), type) \
                or getattr(mod, name) is getattr(np.fft, name, None) \
                or key in ("fft.fftfreq", "fft.rfftfreq", "linalg.lstsq",
                           "linalg.matrix_rank"):
            continue
        # a spec named after the function, unless a top-level function of the same
        # name (fnp.trace, fnp.cross) is what that spec checks
        plain = name in covered and getattr(fnp, name, None) in (None, getattr(mod, name))
        if not (key in covered or plain or COVERED_BY.get(key) in covered):
            missing.append(key)
    assert not missing, f"fgrad.numpy.linalg / .fft functions without a spec: {missing}"


def test_matrix_rank_counts_singular_values_like_numpy():
    a = np.array([[[1.0, 2.0], [2.0, 4.0]], [[1.0, 0.0], [0.0, 1e-3]]])
    np.testing.assert_array_equal(fgrad.jit(fnp.linalg.matrix_rank)(a),
                                  np.linalg.matrix_rank(a))
    np.testing.assert_array_equal(fnp.linalg.matrix_rank(a, tol=0.01),
                                  np.linalg.matrix_rank(a, tol=0.01))
    assert fnp.linalg.matrix_rank(np.array([0.0, 1.0])) == 1
    g = fgrad.grad(lambda a: fnp.sum(a) * fnp.linalg.matrix_rank(a)[0])(a)
    np.testing.assert_array_equal(g, np.ones_like(a))


def test_fftfreq_takes_only_sizes_and_matches_numpy():
    for name in ("fftfreq", "rfftfreq"):
        np.testing.assert_array_equal(getattr(fnp.fft, name)(5, 0.5),
                                      getattr(np.fft, name)(5, 0.5))


def test_docs_show_the_current_not_provided_table():
    assert rendered_on_page(PAGE.read_text()) == markdown(), (
        "docs/numpy.md's table of names not provided is stale: run "
        "`python tests/numpy_not_provided.py`")


def test_lstsq_matches_numpy_and_finite_differences():
    # its rank needs concrete values (not under jit or vmap), so no spec of its own
    a = np.array([[1.0, 0.5], [0.2, 2.0], [-1.0, 0.3]])
    b = np.array([1.0, -2.0, 0.5])
    for got, want in zip(fnp.linalg.lstsq(a, b), np.linalg.lstsq(a, b)):
        np.testing.assert_allclose(got, want)
    check_grads(lambda a, b: fnp.linalg.lstsq(a, b)[0], (a, b), order=2,
                modes=("fwd", "rev"))


def test_asarray_chkfinite_refuses_inf_and_nan_of_traced_values():
    with pytest.raises(ValueError, match="infs or NaNs"):
        fgrad.grad(lambda x: fnp.sum(fnp.asarray_chkfinite([x, np.inf])))(1.0)


@pytest.mark.parametrize("name", sorted(CONCRETE_SELECTIONS))
def test_selections_by_concrete_conditions_match_numpy_and_finite_differences(name):
    fn, ref, arg = CONCRETE_SELECTIONS[name]
    np.testing.assert_array_equal(fn(arg), ref(arg))
    check_grads(fn, (arg,), order=2, modes=("fwd", "rev"))
    # counting without weights has no derivative to give
    np.testing.assert_array_equal(fgrad.grad(lambda x: fnp.sum(
        fnp.bincount(np.array([1, 1]), minlength=3) * x))(np.ones(3)), [0, 2, 0])


def test_i0_and_its_derivatives_need_no_scipy():
    code = ("import sys; sys.modules['scipy'] = None\n"
            "import fgrad, fgrad.numpy as fnp\n"
            "d1 = fgrad.grad(fnp.i0)\n"
            "print(fnp.i0(1.5), d1(1.5), fgrad.grad(d1)(1.5))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    i0, i1, d2 = map(float, out.split())
    # I0(1.5), I1(1.5) and I1'(1.5) = I0(1.5) - I1(1.5) / 1.5
    np.testing.assert_allclose([i0, i1, d2], [np.i0(1.5), 0.98166642857790,
                                              np.i0(1.5) - 0.98166642857790 / 1.5],
                               rtol=1e-13)


def test_poly_of_complex_roots_is_complex_under_a_transformation():
    z = np.array([0.5 + 1.0j, 0.5 - 1.0j, 2.0 + 0.0j])
    seen = []

    def f(s):
        c = fnp.poly(z * s)
        seen.append(c.dtype)
        return fnp.sum(fnp.real(c))
    fgrad.grad(f)(1.0)
    assert seen == [np.complex128]
    np.testing.assert_allclose(fgrad.jit(lambda s: fnp.poly(z * s))(1.0), np.poly(z),
                               rtol=1e-13)


def test_roots_drops_leading_zeros_of_concrete_coefficients():
    p = np.array([0.0, 0.0, 1.0, -3.0, 2.0])
    # the sum of the roots is -p[1] / p[0] of the stripped coefficients
    g = fgrad.grad(lambda p: fnp.sum(fnp.real(fnp.roots(p))))(p)
    np.testing.assert_allclose(g, [0.0, 0.0, -3.0, -1.0, 0.0], atol=1e-12)
    assert fgrad.grad(lambda s: fnp.sum(fnp.real(fnp.roots(fnp.array([0.0, 0.0]) * s)))
                      )(1.0) == 0.0


def test_polyfit_full_matches_numpy_under_vjp_and_jit():
    x, y = np.linspace(0.0, 2.0, 5), np.array([1.0, 1.8, 3.1, 3.9, 5.2])
    want = np.polyfit(x, y, 2, full=True)
    seen = []

    def f(y):
        c, residuals, rank, s, rcond = fnp.polyfit(x, y, 2, full=True)
        seen.append((rank, rcond))
        return c, residuals, s
    got, _ = fgrad.vjp(f, y)
    for g, w in zip(got, (want[0], want[1], want[3])):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
    assert seen == [(want[2], want[4])]
    check_grads(lambda y: fnp.polyfit(x, y, 2, full=True)[1], (y,), order=2,
                modes=("fwd", "rev"))
    # under jit the rank is an array (lstsq's), known when the call runs
    c, residuals, rank = fgrad.jit(lambda x: fnp.polyfit(x, y, 2, full=True)[:3])(x)
    np.testing.assert_allclose(c, want[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(residuals, want[1], rtol=1e-10)
    assert int(rank) == want[2]
    with pytest.raises(ValueError, match="deg >= 0"):
        fgrad.grad(lambda y: fnp.sum(fnp.polyfit(x, y, -1)))(y)
