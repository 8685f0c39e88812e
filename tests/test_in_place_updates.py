"""In-place updates without mutation: ``x[idx] = v``, ``x += y`` and friends on a
tracer give that tracer a new value (NumPy's meaning for the name updated),
follow NumPy's views made by basic indexing, refuse the views they cannot
follow, and never write into an input."""
import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.errors import ImmutableArrayError, NumpyFunctionError
from fgrad.testing import check_grads

X = np.array([[0.3, -1.2, 2.5, 0.7],
              [1.9, -0.4, 0.1, -2.2],
              [-0.8, 1.4, 0.6, 2.9]])


def _all_transforms(f, x):
    """``f(x)`` under grad's, jvp's, jit's and vmap's tracers, checked against
    NumPy running ``f`` on a copy; the input is never written."""
    before = x.copy()
    want = f(x.copy())
    np.testing.assert_allclose(fgrad.vjp(f, x)[0], want, rtol=1e-12)
    np.testing.assert_allclose(fgrad.jvp(f, (x,), (np.ones_like(x),))[0], want,
                               rtol=1e-12)
    np.testing.assert_allclose(fgrad.jit(f)(x), want, rtol=1e-12)
    np.testing.assert_allclose(fgrad.vmap(f)(np.stack([x, x]))[1], want, rtol=1e-12)
    np.testing.assert_array_equal(x, before)


def set_row_and_scale(x):
    y = x * 1.0
    y[0] = fnp.sin(x[1])                    # a row from another row
    y[:, 1] *= 3.0                          # in-place operator on a view
    y[1, 2:] = 7.0
    y += x ** 2
    return y


def running_sum(x):
    y = x.copy()
    for i in range(1, y.shape[0]):
        y[i] = y[i - 1] * 0.5 + y[i]        # reads the updated row
    return y


def update_the_input(x):
    x -= 1.0                                # the argument itself: NumPy mutates it
    x[0, 0] = x[1, 1] * 2.0
    return x * x


def in_place_methods(x):
    y = x.copy()
    y.sort(axis=1)
    y.put([0, 3], fnp.exp(x[0, :2]))
    return y


def through_views(x):
    y = x.copy()
    row = y[1]                              # a view, as in NumPy
    row[2] = 10.0 * x[0, 0]                 # ... writes into y
    y[1, 0] = -5.0                          # ... and y's update reaches row
    block = y[1:, ::2]
    block += row[:2]                        # a view of a view, updated in place
    return y + row.sum()


def mask_update(x):
    y = x.copy()
    y[y < 0] = 0.0                          # a where(), so jit and vmap take it too
    y[x > 2.0] = fnp.sum(x)                 # a traced value, written by a traced mask
    return y


def filled_from_zeros(x):
    y = fnp.zeros_like(x)                   # NumPy code's usual output buffer
    for i in range(x.shape[0]):
        y[i] = fnp.cumsum(x[i]) * (i + 1)
    return y


CASES = [set_row_and_scale, running_sum, update_the_input, in_place_methods,
         through_views, mask_update, filled_from_zeros]


@pytest.mark.parametrize("f", CASES, ids=lambda f: f.__name__)
def test_update_gives_numpys_value_under_every_transformation(f):
    _all_transforms(f, X)


@pytest.mark.parametrize("f", CASES, ids=lambda f: f.__name__)
def test_update_derivatives_match_finite_differences(f):
    check_grads(lambda x: fnp.sum(fnp.tanh(f(x))), (X,), order=2)


@pytest.mark.parametrize("f", CASES, ids=lambda f: f.__name__)
def test_update_under_jit_of_grad_and_vmap_of_grad(f):
    loss = lambda x: fnp.sum(fnp.tanh(f(x)))           # noqa: E731
    g = fgrad.grad(loss)(X)
    np.testing.assert_allclose(fgrad.jit(fgrad.grad(loss))(X), g, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(fgrad.vmap(fgrad.grad(loss))(np.stack([X, X]))[0], g,
                               rtol=1e-10, atol=1e-14)


def test_a_second_name_for_the_same_tracer_sees_the_update():
    def f(x):
        alias = x
        copy = x.copy()
        alias[0, 0] = 100.0
        return x[0, 0] + copy[0, 0]         # x is alias; copy is not
    for transform in (fgrad.jit, fgrad.grad):
        out = transform(f)(X)
        if transform is fgrad.jit:
            assert out == 100.0 + X[0, 0]
        else:
            np.testing.assert_array_equal(out, np.eye(3, 4)[0:3] * (X == X[0, 0]))


@pytest.mark.parametrize("like", [fnp.zeros_like, fnp.ones_like, fnp.empty_like,
                                  lambda w: fnp.full_like(w, 2.0),
                                  lambda w: fnp.full_like(w, w[1])])
def test_an_array_made_like_a_tracer_takes_traced_values(like):
    def f(w):
        y = like(w)                         # NumPy code's `out = np.zeros_like(x)`
        for i in range(2):
            y[i] = w[0] * w[2] * (i + 1)
        return y
    w = np.array([2.0, 3.0, 5.0])
    _all_transforms(f, w)
    check_grads(lambda w: fnp.sum(f(w)), (w,), order=1)


def test_at_of_array_api_extra_works_on_tracers():
    xpx = pytest.importorskip("array_api_extra")

    def f(x):
        y = xpx.at(x)[1].set(5.0)           # may write in place: into the tracer
        z = xpx.at(y)[0].add(x[2])
        return fnp.sum(z * x)
    x = X[0].copy()
    _all_transforms(f, x)
    check_grads(f, (x,), order=1)


def test_at_of_array_api_extra_with_copy_false_and_true():
    xpx = pytest.importorskip("array_api_extra")

    def f(x):
        y = x * 1.0
        z = xpx.at(y)[0].set(7.0 * x[2], copy=False)     # must write into y
        w = xpx.at(y, 1).multiply(2.0, copy=True)        # must leave y as it is
        v = xpx.at(y, slice(1, None)).min(0.5)
        return y + z + w + 10.0 * v
    x = X[0, :3].copy()
    _all_transforms(f, x)
    check_grads(lambda x: fnp.sum(f(x) ** 2), (x,), order=1)


# -- views fgrad cannot follow, and other refusals -----------------------------------

def test_writing_into_a_reshaped_view_is_refused():
    def f(x):
        flat = x.reshape(-1)
        flat[0] = 1.0                       # in NumPy, x changes too
        return fnp.sum(flat)
    with pytest.raises(ImmutableArrayError, match=r"view made by 'reshape'"):
        fgrad.jit(f)(X)


def test_writing_into_a_base_with_a_live_transposed_view_is_refused():
    def f(x):
        y = x.copy()
        t = y.T
        y[0, 0] = 1.0                       # in NumPy, t changes too
        return fnp.sum(t)
    with pytest.raises(ImmutableArrayError, match=r"view made by 'transpose'.*copy"):
        fgrad.grad(f)(X)


def test_a_view_of_a_temporary_view_still_reaches_the_base():
    def f(x):
        y = x.copy()
        v = y[None].squeeze(0)              # a reshape of a view nothing else holds
        v[0] = 0.0                          # in NumPy, y changes too
        return fnp.sum(y)
    with pytest.raises(ImmutableArrayError, match=r"view made by 'reshape'"):
        fgrad.jit(f)(X)


def test_a_dead_view_does_not_stop_an_update():
    def f(x):
        y = x.copy()
        fnp.sum(y.T)                        # a view that dies at once
        y[0, 0] = 1.0
        return fnp.sum(y)
    np.testing.assert_array_equal(fgrad.grad(f)(X), np.ones_like(X) - np.eye(3, 4) * (
        np.arange(12).reshape(3, 4) == 0))


def test_a_copy_of_a_view_is_free_to_update():
    def f(x):
        t = x.T.copy()
        t[0] = 0.0
        return fnp.sum(t) + fnp.sum(x)
    expected = 2.0 * np.ones_like(X)
    expected[:, 0] = 1.0
    np.testing.assert_array_equal(fgrad.grad(f)(X), expected)


def test_in_place_operator_refuses_a_cast_numpy_refuses():
    def f(x):
        i = (x > 0).astype(np.int64)
        i += 0.5
        return x
    with pytest.raises(ImmutableArrayError, match=r"float64 result.*int64.*same_kind"):
        fgrad.jit(f)(X)


def test_in_place_operator_refuses_a_shape_change():
    def f(x):
        y = x[0].copy()
        y += x
        return y
    with pytest.raises(ImmutableArrayError, match=r"shape from \(4,\) to \(3, 4\)"):
        fgrad.jit(f)(X)


def test_updating_an_enclosing_transformations_value_is_refused():
    def outer(x):
        y = x * 1.0

        def inner(z):
            y[0, 0] = z[0, 0]               # y belongs to the enclosing grad
            return fnp.sum(z)
        return fnp.sum(fgrad.grad(inner)(x) * y)
    with pytest.raises(ImmutableArrayError, match=r"enclosing transformation.*x\.copy"):
        fgrad.grad(outer)(X)


def test_a_pullback_reads_the_values_of_its_forward_pass():
    # vjp's pullback and linearize's jvp_fn run after the caller updated w
    x0 = np.array([1.0, 2.0])

    def outer(w):
        _, pullback = fgrad.vjp(lambda x: x * w, x0)     # holds w as a residual
        _, f_jvp = fgrad.linearize(lambda x: x ** 2, w)  # linearized at w
        w[0] = 100.0                        # after both were made
        return fnp.sum(pullback(np.ones(2))[0] + f_jvp(np.ones(2)))
    # pullback(1) = w and f_jvp(1) = 2 w, both at w as it was: d/dw = 1 + 2
    np.testing.assert_allclose(fgrad.grad(outer)(np.array([3.0, 4.0])), [3.0, 3.0])


def test_writing_a_traced_value_into_a_numpy_array_names_the_ways_out():
    def f(x):
        out = np.zeros(3)                   # a NumPy array: it cannot hold a tracer
        out[:2] = x[:2]
        return fnp.sum(out)
    with pytest.raises(NumpyFunctionError, match=r"out\[i\] = x.*fnp\.zeros_like\(x\)"):
        fgrad.grad(f)(X[0])


@pytest.mark.parametrize("make", [
    lambda y: y.copy(), lambda y: +y, lambda y: y.astype(y.dtype), lambda y: fnp.copy(y),
    lambda y: fnp.array(y), lambda y: fnp.astype(y, y.dtype), lambda y: fnp.positive(y),
    lambda y: fnp.concatenate([y]), lambda y: fnp.vstack([y]), lambda y: y.flatten()[None],
], ids=["copy", "pos", "astype", "fnp.copy", "fnp.array", "fnp.astype", "positive",
        "concatenate", "vstack", "flatten"])
def test_functions_that_return_a_new_array_in_numpy_return_a_new_tracer(make):
    def f(x):
        y = x * 1.0
        z = make(y)
        z[0, 0] = -1.0                      # leaves y as it is, as in NumPy
        return fnp.stack([y, z.reshape(y.shape)])
    _all_transforms(f, X)


def test_a_mask_known_to_select_everything_replaces_the_value_whole():
    # scikit-learn's first-batch variance divides 0 by 0 and then overwrites the
    # result through an all-True mask: the NaN stays out of the value and, since
    # the update does not read the old value, out of the derivative too
    def variance_like(x):
        count = fnp.zeros_like(x)               # no samples seen before
        stale = (fnp.sum(count) / count - x) ** 2 * count   # 0/0: NaN, never used
        fresh = x ** 2
        stale[count == 0] = fresh[count == 0]
        return fnp.sum(stale)
    x = np.array([0.5, -1.0, 2.0])
    with np.errstate(invalid="ignore", divide="ignore"):
        np.testing.assert_allclose(fgrad.grad(variance_like)(x), 2 * x)
        check_grads(variance_like, (x,), order=1, modes=("fwd", "rev"))


def test_a_partly_true_mask_reads_the_entries_it_leaves():
    def f(x):
        y = x * 1.0
        y[np.array([True, False, True])] = 0.0
        return fnp.sum(y * x)
    np.testing.assert_allclose(fgrad.grad(f)(np.array([1.0, 2.0, 3.0])), [0.0, 4.0, 0.0])


def test_a_zero_dimensional_mask_updates_all_or_nothing():
    def f(x, flag):
        y = x * 1.0
        y[fnp.sum(x) > flag] = 5.0              # a 0-d boolean index, as NumPy takes
        return y
    x = np.array([1.0, 2.0])
    for flag in (0.0, 10.0):
        _all_transforms(lambda x: f(x, flag), x)


def test_a_set_keeps_the_arrays_dtype_as_numpys_assignment_does():
    # the values are cast to x's dtype (a gradient's literal 0 included)
    x = np.arange(6.0, dtype=np.float32).reshape(3, 2)
    for f in (lambda x: fgrad.at(x)[np.array([0, 2])].set(1),
              lambda x: fgrad.at(x)[np.array([0, 2])].set(np.float64(0.5)),
              fgrad.grad(lambda x: fnp.sum(fgrad.at(x)[np.array([0, 2])].set(x[1]) ** 2))):
        (out,) = fgrad.make_graph(f)(x).outvars
        assert out.aval.dtype == np.float32
        assert fgrad.jit(f)(x).dtype == f(x).dtype == np.float32
