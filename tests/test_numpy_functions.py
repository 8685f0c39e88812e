"""fgrad.numpy beyond the systematic spec test: singular points, eager results,
error messages, and behaviours a spec cannot draw."""
import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.errors import ImmutableArrayError, NumpyArgumentError
from fgrad.numpy._elementwise import safe_sqrt, xlogy
from fgrad.numpy._reductions import vector_norm
from fgrad.testing import check_grads


# -- singular points ---------------------------------------------------------------

@pytest.mark.parametrize("x", [
    np.array([1.1, 0.0, 0.9, 1.2]),                    # one zero
    np.array([0.0, 1.1, 0.0, 0.9]),                    # two
    np.array([[0.0, 0.0, 1.1], [0.9, 0.0, 0.0]]),      # several, per row
], ids=["one_zero", "two_zeros", "rows"])
def test_prod_and_cumprod_derivatives_at_zeros_are_exact(x):
    # to second order: with two zeros the gradient of prod is 0 but the Hessian
    # is not (d2/dx_i dx_j of x_i x_j ... is the product of the others)
    check_grads(lambda x: fnp.cumprod(x, axis=-1), (x,), order=2)
    check_grads(lambda x: fnp.prod(x, axis=-1), (x,), order=2)
    flat = np.ravel(x)
    hess = fgrad.hessian(lambda x: fnp.prod(x))(flat)
    for i in range(flat.size):
        for j in range(flat.size):
            others = np.delete(flat, [i, j]) if i != j else None
            expected = np.prod(others) if i != j else 0.0
            np.testing.assert_allclose(hess[i, j], expected, atol=1e-12)


def test_sinc_derivatives_at_zero_are_exact():
    assert fgrad.grad(fnp.sinc)(0.0) == 0.0
    d2 = fgrad.grad(fgrad.grad(fnp.sinc))(0.0)
    np.testing.assert_allclose(d2, -np.pi ** 2 / 3, rtol=1e-12)
    check_grads(fnp.sinc, (np.array([0.0, 1e-3, -1e-3, 0.7]),), order=2)


def test_logsumexp_is_stable_and_finite_with_minus_infinity():
    x = np.array([1000.0, 1000.0, -np.inf])
    np.testing.assert_allclose(fnp.logsumexp(x), 1000.0 + np.log(2.0))
    g = fgrad.grad(fnp.logsumexp)(x)
    np.testing.assert_allclose(g, [0.5, 0.5, 0.0])
    all_minus_inf = np.full(2, -np.inf)
    assert fnp.logsumexp(all_minus_inf) == -np.inf
    g = fgrad.grad(lambda x: fnp.logsumexp(x, b=np.array([2.0, 1.0])))(np.zeros(2))
    np.testing.assert_allclose(g, [2 / 3, 1 / 3])
    value, sign = fnp.logsumexp(np.array([0.0, 0.0]), b=np.array([1.0, -2.0]),
                                return_sign=True)
    assert sign == -1.0 and np.isclose(value, 0.0)


def test_vector_norm_has_a_finite_gradient_at_zero():
    for ord_ in (2, 3, 1, np.inf):
        g = fgrad.grad(lambda x: vector_norm(x, ord_))(np.zeros(3))
        assert np.all(np.isfinite(g)), ord_
    x = np.array([[3.0, -4.0], [1.0, 2.0]])
    for ord_ in (2, 1, 3, np.inf, -np.inf, 0):
        np.testing.assert_allclose(vector_norm(x, ord_, axis=1),
                                   np.linalg.norm(x, ord_, axis=1))
    check_grads(lambda x: vector_norm(x, 3, axis=0), (x,), order=2)
    check_grads(lambda z: vector_norm(z), (np.array([1 + 2j, -0.5j]),), order=2)


def test_xlogy_and_safe_sqrt_at_zero():
    assert xlogy(0.0, 0.0) == 0.0
    assert fgrad.grad(xlogy, argnums=1)(0.0, 0.0) == 0.0
    np.testing.assert_allclose(fgrad.grad(xlogy)(0.0, 2.0), np.log(2.0))
    assert fgrad.grad(safe_sqrt)(0.0) == 0.0
    assert fgrad.grad(fgrad.grad(safe_sqrt))(0.0) == 0.0
    check_grads(xlogy, (np.array([0.5, 2.0]), np.array([0.3, 1.5])), order=2)


def test_sqrt_inside_where_needs_the_double_where():
    naive = fgrad.grad(lambda x: fnp.where(x > 0, fnp.sqrt(x), 0.0))
    with np.errstate(all="ignore"):
        assert np.isnan(naive(0.0))           # 0 * inf: why the technique exists
    assert fgrad.grad(safe_sqrt)(0.0) == 0.0


def test_prod_gradient_with_zeros_is_the_product_of_the_others():
    x = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 5.0]])
    g = fgrad.grad(lambda x: fnp.sum(fnp.prod(x, axis=1)))(x)
    np.testing.assert_array_equal(g, [[0.0, 6.0, 0.0], [0.0, 0.0, 0.0]])
    _, t = fgrad.jvp(lambda x: fnp.prod(x), (x[0],), (np.ones(3),))
    assert t == 6.0


# -- forward results follow NumPy --------------------------------------------------

def test_eager_results_are_numpy_results():
    x = np.arange(12.0).reshape(3, 4) / 7
    for name, args in [("var", (x,)), ("std", (x,)), ("median", (x,)),
                       ("cumsum", (x,)), ("sort", (x[::-1],)), ("ptp", (x,)),
                       ("argmax", (x,)), ("tril", (x,)), ("diag", (x,)),
                       ("rot90", (x,)), ("clip", (x, 0.2, 1.0)), ("sinc", (x,))]:
        np.testing.assert_array_equal(getattr(fnp, name)(*args),
                                      getattr(np, name)(*args))
    assert fnp.shape(x) == (3, 4) and fnp.ndim(x) == 2 and fnp.size(x) == 12


def test_shape_queries_and_methods_work_on_tracers():
    def f(x):
        assert fnp.shape(x) == (2, 3) and fnp.ndim(x) == 2 and fnp.size(x) == 6
        assert fnp.result_type(x) == np.float64 and not fnp.isscalar(x)
        return (x.var(axis=0).sum() + x.std() + x.cumsum().sum() + x.clip(0, 1).sum()
                + x.swapaxes(0, 1)[0, 0] + x.trace() + x.take([0, 2]).sum())
    x = np.arange(6.0).reshape(2, 3) / 5 + 0.1
    check_grads(f, (x,), order=1)
    assert fgrad.grad(lambda x: x.argmax() * 1.0 + x.sum())(x).shape == (2, 3)


def test_boolean_mask_from_a_traced_comparison():
    x = np.array([-1.0, 2.0, -3.0, 4.0])
    g = fgrad.grad(lambda x: fnp.sum(x[x > 0] ** 2))(x)
    np.testing.assert_array_equal(g, [0.0, 4.0, 0.0, 8.0])


def test_numpy_functions_on_tracers_route_to_fgrad():
    x = np.array([3.0, 1.0, 2.0])
    g = fgrad.grad(lambda x: np.sum(np.sort(x) * np.arange(3.0)) + np.var(x))(x)
    expected = fgrad.grad(lambda x: fnp.sum(fnp.sort(x) * np.arange(3.0))
                          + fnp.var(x))(x)
    np.testing.assert_allclose(g, expected)


def test_nondifferentiable_functions_give_zero_derivative():
    x = np.array([0.4, 1.6, -2.2])
    for fn in (fnp.floor, fnp.ceil, fnp.rint, fnp.trunc, fnp.fix, fnp.around,
               lambda x: fnp.isclose(x, 0.4), lambda x: fnp.argsort(x)):
        g = fgrad.grad(lambda x: fnp.sum(fn(x) * x))(x)
        np.testing.assert_allclose(g, np.asarray(fn(x), float))
    assert fnp.count_nonzero(x > 0) == 2
    assert fnp.allclose(x, x) and fnp.array_equal(x, x)


@pytest.mark.parametrize("which", ["min", "max"])
def test_at_min_max_with_repeated_indices_split_ties_like_the_reductions(which):
    # position 1 gets three values, two of them tied with each other, position 2
    # one value tied with x; position 0 is untouched. The reference takes each
    # position's extremum over x's entry and its values with fnp.min/fnp.max,
    # whose derivative splits ties evenly.
    idx = np.array([1, 1, 2, 1])
    x = np.array([1.0, 5.0, 3.0])
    v = np.array([4.0, 3.0, 3.0, 3.0]) if which == "min" else np.array(
        [6.0, 7.0, 3.0, 7.0])
    weights = np.array([1.0, 2.0, 3.0])
    reduce = fnp.min if which == "min" else fnp.max

    def at_update(x, v):
        return getattr(fgrad.at(x)[idx], which)(v)

    def per_position(x, v):
        return fnp.stack([x[0], reduce(fnp.stack([x[1], v[0], v[1], v[3]])),
                          reduce(fnp.stack([x[2], v[2]]))])

    expected = x.copy()
    (np.minimum if which == "min" else np.maximum).at(expected, idx, v)
    np.testing.assert_array_equal(at_update(x, v), expected)
    np.testing.assert_array_equal(per_position(x, v), expected)
    loss = [lambda x, v, f=f: fnp.sum(f(x, v) * weights) for f in (at_update,
                                                                    per_position)]
    got, want = (fgrad.grad(f, argnums=(0, 1))(x, v) for f in loss)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    t = (np.array([0.3, -1.0, 2.0]), np.array([0.5, 1.5, -2.0, 0.25]))
    np.testing.assert_allclose(fgrad.jvp(at_update, (x, v), t)[1],
                               fgrad.jvp(per_position, (x, v), t)[1], rtol=1e-12)
    batched = fgrad.vmap(fgrad.grad(loss[0], argnums=(0, 1)))(
        np.stack([x, x]), np.stack([v, v]))
    for g, w in zip(batched, want):
        np.testing.assert_allclose(g, np.stack([w, w]), rtol=1e-12)


# -- errors ----------------------------------------------------------------------------



def test_in_place_assignment_rebinds_the_traced_name():
    def f(x):
        x[0] = 1.0                          # x's first entry no longer depends on x
        return x.sum()
    np.testing.assert_array_equal(fgrad.grad(f)(np.zeros(2)), [0.0, 1.0])


def test_misuse_messages():
    x = np.ones(3)
    cases = [
        (lambda x: fnp.fabs(x * 1j), TypeError, "not defined for complex"),
        (lambda x: fnp.clip(x, 0.0, 1.0, max=2.0), NumpyArgumentError,
         "a_min/a_max or as the keywords min/max"),
        (lambda x: fnp.quantile(x, 1.5), ValueError, r"range \[0, 1\]"),
        (lambda x: fnp.quantile(x, 0.5, method="closest"), NumpyArgumentError,
         "method='closest' is not one of"),
        (lambda x: fnp.pad(x, 1, mode="wrap"), NotImplementedError, "'reflect'"),
        (lambda x: fnp.pad(x, 3, mode="reflect"), NotImplementedError, "wider"),
        (lambda x: fnp.split(x, 2), ValueError, "array_split"),
        (lambda x: fnp.take_along_axis(x, np.zeros((1, 1), int), 0), ValueError,
         "must match"),
        (lambda x: fnp.moveaxis(x, [0], []), ValueError, "same number"),
        (lambda x: fnp.average(fnp.reshape(x, (3, 1)), weights=x), TypeError,
         "1-d weights"),
        (lambda x: fnp.diagonal(fnp.reshape(x, (3, 1)), 0, 1, 1), ValueError,
         "cannot be the same"),
    ]
    for fn, error, message in cases:
        with pytest.raises(error, match=message):
            fgrad.grad(lambda x: fnp.sum(fn(x)))(x)


def test_nan_reductions_ignore_nan_entries():
    x = np.array([[1.0, np.nan], [3.0, 4.0]])
    np.testing.assert_allclose(fnp.nanmean(x, axis=1), np.nanmean(x, axis=1))
    g = fgrad.grad(lambda x: fnp.nansum(x) + fnp.sum(fnp.nanmean(x, axis=0)))(x)
    np.testing.assert_allclose(g, [[1.5, 0.0], [1.5, 2.0]])
