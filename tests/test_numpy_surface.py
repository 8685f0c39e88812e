"""The NumPy surface of issue 17 beyond the systematic specs
(tests/numpy_surface_specs.py): array-likes holding tracers in every kind of
function, integer casts, type checks, and autograd's finite edge derivatives."""
import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.testing import check_grads

# -- array-likes holding tracers ----------------------------------------------------


def test_lists_of_tracers_reach_every_kind_of_function():
    a, b = 0.7, -1.3
    cases = {
        "mean": lambda a, b: fnp.mean([a, b]),
        "sin": lambda a, b: fnp.sum(fnp.sin([a, b * a])),
        "add": lambda a, b: fnp.sum(fnp.add([a, 1.0], [[b], [a]])),
        "where": lambda a, b: fnp.sum(fnp.where([True, False], [a, b], 0.0)),
        "average_weights": lambda a, b: fnp.average(np.array([1.0, 3.0]), weights=[a, b]),
        "linalg.norm": lambda a, b: fnp.linalg.norm([a, b, 1.0]),
        "fft.fft": lambda a, b: fnp.sum(fnp.abs(fnp.fft.fft([a, b, 0.5]))),
        "stack": lambda a, b: fnp.sum(fnp.stack([[a, b], (b, 2.0)]) ** 2),
        "dot": lambda a, b: fnp.dot([a, b], [b, 3.0]),
        "dot_method": lambda a, b: fnp.array([a, 1.0]).dot([b, a]),
    }
    for name, f in cases.items():
        check_grads(f, (a, b), order=2, modes=("fwd", "rev"))
        np.testing.assert_allclose(f(a, b), f(np.float64(a), np.float64(b)), err_msg=name)


def test_full_with_a_traced_fill_works_at_second_order_inside_a_custom_rule():
    @fgrad.custom_vjp
    def total(x):
        return fnp.sum(x ** 3)

    def fwd(x):
        return total(x), x

    def bwd(x, g):
        # the rule a user writes: the cotangent broadcast with fnp.full
        return (fnp.full(x.shape, g) * 3 * x ** 2,)

    total.defvjp(fwd, bwd)
    x = np.array([1.0, -2.0])
    np.testing.assert_allclose(fgrad.grad(total)(x), 3 * x ** 2)
    hess = fgrad.jacrev(fgrad.grad(total))(x)         # reverse over reverse
    np.testing.assert_allclose(hess, np.diag(6 * x))
    check_grads(lambda g: fnp.full_like(x, g) * x, (0.5,), order=2, modes=("fwd", "rev"))


def test_linspace_with_traced_endpoints_matches_numpy():
    start, stop = np.array([0.0, 1.0]), np.array([[2.0, 3.0], [4.0, 5.0]])
    for kwargs in ({}, {"endpoint": False}, {"axis": -1}, {"num": 1}, {"num": 0}):
        got = fgrad.jit(lambda a, b, kw=kwargs: fnp.linspace(a, b, **{"num": 4, **kw}))(
            start, stop)
        want = np.linspace(start, stop, **{"num": 4, **kwargs})
        np.testing.assert_allclose(got, want)
        assert got.shape == want.shape
    _, step = fgrad.jit(lambda b: fnp.linspace(0.0, b, 5, retstep=True))(2.0)
    np.testing.assert_allclose(step, 0.5)
    g = fgrad.grad(lambda b: fnp.linspace(1.0, b, 5)[1])(2.0)
    np.testing.assert_allclose(g, 0.25)


def test_integer_casts_of_tracers_are_constants_with_zero_derivative():
    x = np.array([1.5, -2.5, 3.7])
    for cast in (lambda x: x.astype(int), lambda x: fnp.array(x, dtype=int),
                 lambda x: fnp.asarray(x, dtype=np.int32), lambda x: fnp.astype(x, bool)):
        g = fgrad.grad(lambda x, cast=cast: fnp.sum(cast(x) * x))(x)
        np.testing.assert_array_equal(g, np.asarray(cast(x)))
        _, t = fgrad.jvp(lambda x, cast=cast: cast(x) * 1.0, (x,), (np.ones(3),))
        np.testing.assert_array_equal(t, np.zeros(3))


# -- type checks -------------------------------------------------------------------------

def test_isinstance_ndarray_holds_for_tracers_and_arrays_alike():
    seen = []

    def f(x):
        seen.append(isinstance(x, fnp.ndarray))
        return fnp.sum(x)

    for transform in (fgrad.grad, fgrad.jit, fgrad.vmap,
                      lambda f: lambda x: fgrad.jvp(f, (x,), (x,))):
        transform(f)(np.ones((2, 2)))
    assert seen == [True] * 4
    assert isinstance(np.ones(2), fnp.ndarray)
    assert not isinstance([1.0], fnp.ndarray) and not isinstance(1.0, fnp.ndarray)
    assert issubclass(np.ndarray, fnp.ndarray)
    # calling it still builds NumPy's array
    assert type(fnp.ndarray((2, 3))) is np.ndarray


# -- autograd's finite choices at the edges ---------------------------------------------------

def test_edge_derivatives_are_finite_as_in_autograd():
    assert fgrad.grad(lambda y: 0.0 ** y)(2.0) == 0.0
    np.testing.assert_array_equal(fgrad.grad(fnp.std)(np.ones(3)), np.zeros(3))
    assert fgrad.grad(fnp.std)(1.5) == 0.0
    np.testing.assert_array_equal(fgrad.grad(lambda x: fnp.std(x, axis=0).sum())(
        np.ones((1, 3))), np.zeros((1, 3)))
    np.testing.assert_array_equal(fgrad.grad(fnp.nanstd)(np.array([2.0, np.nan, 2.0])),
                                  np.zeros(3))
    np.testing.assert_array_equal(fgrad.grad(fnp.linalg.norm)(np.zeros((2, 2))),
                                  np.zeros((2, 2)))
    assert fgrad.grad(fnp.linalg.norm)(0.0) == 0.0
    np.testing.assert_array_equal(fgrad.hessian(fnp.std)(np.ones(2)), np.zeros((2, 2)))


@pytest.mark.parametrize(("fn", "x"), [(fnp.std, np.full(3, 2.0)),
                                       (fnp.linalg.norm, np.zeros(3))])
def test_edge_derivatives_agree_in_forward_mode(fn, x):
    _, t = fgrad.jvp(fn, (x,), (np.ones(3),))
    assert t == 0.0


# -- linalg.eig ------------------------------------------------------------------------------

def test_eig_matches_numpy_batched_under_every_transformation():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 3, 3)) + 1j * rng.standard_normal((2, 3, 3))
    w_ref = np.linalg.eigvals(a)
    for transform in (fgrad.jit, fgrad.vmap):
        w = transform(fnp.linalg.eigvals)(a)
        np.testing.assert_allclose(w, w_ref, atol=1e-12)
    w, v = fgrad.jit(fnp.linalg.eig)(a)
    np.testing.assert_allclose(a @ v, v * w[..., None, :], atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(v, axis=-2), 1.0)


def test_eig_of_a_real_matrix_is_complex_under_a_transformation():
    a = np.array([[2.0, 1.0], [0.5, 3.0]])
    assert fnp.linalg.eigvals(a).dtype == np.float64            # NumPy's, eagerly
    w = fgrad.jit(fnp.linalg.eigvals)(a)
    assert w.dtype == np.complex128
    np.testing.assert_allclose(np.sort(w.real), np.sort(np.linalg.eigvals(a)))
    assert fgrad.jit(fnp.linalg.eigvals)(a.astype(np.float32)).dtype == np.complex64
    # the gradient of the sum of eigenvalues is the identity (the trace's)
    np.testing.assert_allclose(fgrad.grad(lambda a: fnp.real(fnp.linalg.eigvals(a)).sum())(a),
                               np.eye(2), atol=1e-12)


# -- quantile weights ---------------------------------------------------------------------------

def test_quantile_weights_choose_the_value_and_get_no_derivative():
    x, w = np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 3.0])
    gx, gw = fgrad.grad(lambda x, w: fnp.quantile(x, 0.5, method="inverted_cdf",
                                                  weights=w), (0, 1))(x, w)
    np.testing.assert_array_equal(gx, [0.0, 0.0, 1.0])
    np.testing.assert_array_equal(gw, np.zeros(3))
    with pytest.raises(fgrad.errors.NumpyArgumentError, match="inverted_cdf"):
        fnp.quantile(x, 0.5, weights=w)


def test_nanquantile_names_the_methods_it_supports_under_transformations():
    with pytest.raises(fgrad.errors.NumpyArgumentError, match="linear, lower"):
        fgrad.jit(lambda x: fnp.nanquantile(x, 0.5, method="hazen"))(np.ones(3))
    with np.errstate(all="ignore"):
        got = fgrad.jit(lambda x: fnp.nanmedian(x, axis=1))(np.array([[np.nan, np.nan],
                                                                      [1.0, np.nan]]))
    np.testing.assert_array_equal(got, [np.nan, 1.0])


# -- arguments without a derivative are refused by name, never dropped -----------------------

def test_traced_static_arguments_raise_missing_rule_errors_naming_them():
    x = np.array([3.0, 1.0, 2.0])
    cases = [(lambda q: fnp.quantile(x, q), "argument q"),
             (lambda q: fnp.percentile(x, q * 100), "quantile: .* argument q"),
             (lambda h: fnp.sum(fnp.gradient(x, h)), r"varargs\[0\]")]
    for f, name in cases:
        with pytest.raises(fgrad.errors.MissingRuleError, match=name):
            fgrad.grad(f)(0.5)
