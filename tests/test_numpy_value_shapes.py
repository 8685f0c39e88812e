"""The functions whose result's shape depends on the values (``unique``, the set
operations, the histograms): under `grad`/`jvp` they match NumPy (values,
shapes, dtypes, named tuples) and finite differences to second order, forward
and reverse; `jit` and `vmap` refuse them with a message saying why."""
import numpy as np
import pytest
from hypothesis import given
from numpy_value_shape_specs import VALUE_SHAPE_SPECS

import fgrad
import fgrad.numpy as fnp
from fgrad.errors import BatchedConversionError, ConcretizationError
from fgrad.testing import check_grads


def _traced_result(case, args):
    """What the function returns on traced arguments (the primal of a JVP)."""
    return fgrad.jvp(case.fun, args, tuple(np.ones_like(a) for a in args))[0]


def _assert_same(got, want, tol=1e-12):
    assert type(got).__name__ == type(want).__name__     # NumPy 2's named tuples
    got_leaves, want_leaves = fgrad.tree.tree_leaves(got), fgrad.tree.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves):
        assert np.shape(g) == np.shape(w) and np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", sorted(VALUE_SHAPE_SPECS))
def test_matches_numpy_and_finite_differences(name):
    @given(VALUE_SHAPE_SPECS[name])
    def check(case):
        _assert_same(_traced_result(case, case.args), case.reference(*case.args))
        args32 = tuple(np.asarray(a, np.float32) for a in case.args)
        # float32 as NumPy keeps it (sums in another order: to float32's precision)
        _assert_same(_traced_result(case, args32), case.reference(*args32), 1e-5)
        check_grads(case.fun, case.args, order=2, modes=("fwd", "rev"))
    check()


@pytest.mark.parametrize("name", sorted(VALUE_SHAPE_SPECS))
def test_jit_and_vmap_say_the_values_are_needed(name):
    @given(VALUE_SHAPE_SPECS[name])
    def check(case):
        with pytest.raises(ConcretizationError, match="depends on the values.*outside"):
            fgrad.jit(case.fun)(*case.args)
        batched = tuple(np.stack([a, a]) for a in case.args)
        with pytest.raises(BatchedConversionError, match="depends on the values.*outside vmap"):
            fgrad.vmap(case.fun)(*batched)
    check()


def test_unique_gives_the_derivative_to_the_first_occurrence():
    x = np.array([2.0, 1.0, 2.0, 3.0])
    g = fgrad.grad(lambda x: fnp.sum(fnp.unique(x) * np.array([10.0, 20.0, 30.0])))(x)
    np.testing.assert_array_equal(g, [20.0, 10.0, 0.0, 30.0])


def test_nan_values_follow_numpy():
    x = np.array([np.nan, 1.0, np.nan, 0.5])
    for fn in (fnp.unique_values, fnp.unique_counts, fnp.unique_all):
        got = _traced_result(type("C", (), {"fun": staticmethod(fn)}), (x,))
        want = getattr(np, fn.__name__)(x)
        for g, w in zip(fgrad.tree.tree_leaves(got), fgrad.tree.tree_leaves(want)):
            np.testing.assert_array_equal(np.sort(g), np.sort(w))
    np.testing.assert_array_equal(_traced_result(
        type("C", (), {"fun": staticmethod(fnp.unique)}), (x,)), np.unique(x))


def test_histogram_edges_follow_the_data_range():
    x = np.array([0.0, 1.0, 3.0, 4.0])
    # edges min + k (max - min) / bins: the middle one moves with min and max
    g = fgrad.grad(lambda x: fnp.histogram(x, bins=2)[1][1])(x)
    np.testing.assert_allclose(g, [0.5, 0.0, 0.0, 0.5])
    # counts are constants: no derivative
    g = fgrad.grad(lambda x: fnp.sum(fnp.histogram(x, bins=2)[0]) * fnp.sum(x))(x)
    np.testing.assert_allclose(g, [4.0, 4.0, 4.0, 4.0])


def test_unique_under_jit_suggests_a_static_size_which_works():
    x = np.array([2.0, 1.0, 2.0])
    with pytest.raises(ConcretizationError, match="size=n, fill_value"):
        fgrad.jit(fnp.unique_counts)(x)
    values, counts = fgrad.jit(lambda x: fnp.unique_counts(x, size=3, fill_value=0.0))(x)
    np.testing.assert_array_equal(values, [1.0, 2.0, 0.0])
    np.testing.assert_array_equal(counts, [1, 2, 0])
