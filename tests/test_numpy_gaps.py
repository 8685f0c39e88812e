"""Behaviour of the fgrad.numpy functions added in issue 3's second round that
the systematic specs (tests/numpy_gaps_specs.py) do not reach: edge values,
gradients at special points, options and error messages."""
import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.errors import NumpyArgumentError
from fgrad.testing import check_grads


# -- elementwise -------------------------------------------------------------------

def test_heaviside_derivative_in_x2_is_the_indicator_of_zero():
    x1 = np.array([-1.0, 0.0, 2.0, 0.0])
    g = fgrad.grad(lambda x2: fnp.sum(fnp.heaviside(x1, x2)))(np.full(4, 0.5))
    np.testing.assert_array_equal(g, [0.0, 1.0, 0.0, 1.0])
    g1 = fgrad.grad(lambda x1: fnp.sum(fnp.heaviside(x1, 0.5)))(x1)
    np.testing.assert_array_equal(g1, np.zeros(4))
    nan_in = np.array([np.nan, 1.0])
    np.testing.assert_array_equal(fgrad.jit(lambda x: fnp.heaviside(x, 0.5))(nan_in),
                                  np.heaviside(nan_in, 0.5))


def test_copysign_derivative_is_the_sign_agreement():
    x1 = np.array([2.0, -2.0, 3.0, -0.0])
    x2 = np.array([-1.0, -1.0, 0.0, -0.0])
    g1, g2 = fgrad.grad(lambda a, b: fnp.sum(fnp.copysign(a, b)), (0, 1))(x1, x2)
    np.testing.assert_array_equal(g1, [-1.0, 1.0, 1.0, 1.0])
    np.testing.assert_array_equal(g2, np.zeros(4))
    out = fgrad.jit(fnp.copysign)(x1, x2)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(np.copysign(x1, x2)))


def test_frexp_and_modf_match_numpy_on_special_values():
    x = np.array([0.0, -0.0, 1.0, -3.5, np.inf, -np.inf, 1e-310])
    m, e = fgrad.jit(fnp.frexp)(x)
    m_ref, e_ref = np.frexp(x)
    np.testing.assert_array_equal(m, m_ref)
    np.testing.assert_array_equal(e, e_ref)
    assert e.dtype == e_ref.dtype
    frac, whole = fgrad.jit(fnp.modf)(x)
    np.testing.assert_array_equal(frac, np.modf(x)[0])
    np.testing.assert_array_equal(whole, np.modf(x)[1])
    g = fgrad.grad(lambda x: fnp.sum(fnp.frexp(x)[0]))(np.array([3.0, 0.25]))
    np.testing.assert_array_equal(g, [2.0 ** -2, 2.0 ** 1])


def test_integer_inputs_of_the_float_functions_promote_like_numpy():
    n = np.array([3, -4])
    for fn in ("frexp", "modf"):
        want = getattr(np, fn)(n)
        got = fgrad.jit(getattr(fnp, fn))(n)
        for w, g in zip(want, got):
            np.testing.assert_array_equal(g, w)
            assert g.dtype == w.dtype
    got = fgrad.jit(fnp.copysign)(n, -1)
    assert got.dtype == np.copysign(n, -1).dtype


def test_bit_operations_refuse_floating_point_inputs_as_numpy_does():
    with pytest.raises(TypeError, match="bitwise_and"):
        fgrad.jit(lambda x: fnp.bitwise_and(x, 1))(np.ones(2))
    assert fnp.bitwise_not is fnp.invert
    np.testing.assert_array_equal(fnp.left_shift(np.arange(3), 2), np.arange(3) << 2)


# -- clip ----------------------------------------------------------------------------

def test_clip_without_bounds_returns_the_input_like_numpy_2():
    x = np.array([-2.0, 0.5])
    np.testing.assert_array_equal(fnp.clip(x), np.clip(x))
    np.testing.assert_array_equal(fgrad.grad(lambda x: fnp.sum(fnp.clip(x)))(x),
                                  np.ones(2))


def test_clip_refuses_both_spellings_of_a_bound():
    with pytest.raises(NumpyArgumentError, match="not both"):
        fnp.clip(np.ones(2), 0.0, None, min=0.0)


# -- nan-aware reductions ----------------------------------------------------------------

def test_nanmax_and_nanmin_split_ties_and_skip_nan():
    x = np.array([1.0, np.nan, 3.0, 3.0, np.nan, 1.0])
    g = fgrad.grad(lambda x: fnp.nanmax(x) + 2.0 * fnp.nanmin(x))(x)
    np.testing.assert_array_equal(g, [1.0, 0.0, 0.5, 0.5, 0.0, 1.0])


def test_all_nan_slices_give_nan_like_numpy():
    x = np.array([[np.nan, np.nan], [1.0, np.nan]])
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        for name in ("nanmax", "nanmin", "nanvar", "nanstd"):
            want = getattr(np, name)(x, axis=1)
            got = fgrad.jit(lambda x: getattr(fnp, name)(x, axis=1))(x)
            np.testing.assert_array_equal(got, want)
    # the slice with one number: its variance is 0 and its gradient finite
    with np.errstate(all="ignore"):
        g = fgrad.grad(lambda x: fnp.nanvar(x, axis=1)[1])(x)
    np.testing.assert_array_equal(g, np.zeros((2, 2)))


def test_nan_reductions_of_integers_are_the_plain_ones():
    n = np.array([[1, 4], [2, 2]])
    for name in ("nanmax", "nanmin", "nanvar", "nanstd"):
        want = getattr(np, name)(n, axis=0)
        got = fgrad.jit(lambda n: getattr(fnp, name)(n, axis=0))(n)
        np.testing.assert_allclose(got, want)
        assert got.dtype == want.dtype


# -- sequences ------------------------------------------------------------------------

def test_interp_differentiates_in_the_knots_too():
    xp, fp = np.array([0.0, 1.0, 3.0]), np.array([0.0, 2.0, 0.0])
    x = np.array([0.5, 2.0])
    g_x, g_xp, g_fp = fgrad.grad(lambda x, xp, fp: fnp.sum(fnp.interp(x, xp, fp)),
                                 (0, 1, 2))(x, xp, fp)
    np.testing.assert_allclose(g_x, [2.0, -1.0])
    # moving a knot moves its segments: -slope * (1 - t) at the left end, -slope * t
    # at the right one (t: where x sits in the segment)
    np.testing.assert_allclose(g_xp, [-1.0, -1.0 + 0.5, 0.5])
    np.testing.assert_allclose(g_fp, [0.5, 1.0, 0.5])
    check_grads(lambda xp: fnp.interp(x, xp, fp), (xp,), order=2)
    # a single knot: a constant, like NumPy
    np.testing.assert_array_equal(fgrad.jit(lambda x: fnp.interp(x, [1.0], [4.0]))(x),
                                  np.interp(x, [1.0], [4.0]))


def test_interp_complex_fp_and_integer_x():
    xp, fp = np.array([0.0, 2.0]), np.array([1.0 + 1j, 3.0 - 1j])
    x = np.array([0, 1, 3])
    got = fgrad.jit(lambda fp: fnp.interp(x, xp, fp))(fp)
    np.testing.assert_allclose(got, np.interp(x, xp, fp))
    assert got.dtype == np.complex128
    check_grads(lambda fp: fnp.interp(x * 0.7, xp, fp), (fp,), order=2)


def test_sequence_functions_name_what_is_wrong():
    x = np.ones(3)
    cases = [
        (lambda x: fnp.convolve(fnp.reshape(x, (3, 1)), x), "a must be 1-d"),
        (lambda x: fnp.correlate(x, x[:0]), "v cannot be empty"),
        (lambda x: fnp.convolve(x, x, mode="wide"), "mode must be one of"),
        (lambda x: fnp.interp(x, x[:2], x), "same length"),
        (lambda x: fnp.interp(x, [0.0, 1.0], x[:2], period=0), "non-zero"),
        (lambda x: fnp.gradient(x[:2], edge_order=2), "at least edge_order"),
        (lambda x: fnp.gradient(x, edge_order=3), "edge_order must be 1 or 2"),
        (lambda x: fnp.gradient(x, 1.0, 2.0), "one per axis"),
        (lambda x: fnp.gradient(x, np.arange(4.0)), "length 3"),
    ]
    for fn, message in cases:
        with pytest.raises(NumpyArgumentError, match=message):
            fgrad.grad(lambda x: fnp.sum(fn(x)))(x)


def test_gradient_and_ediff1d_of_integers_match_numpy():
    n = np.array([1, 4, 9, 16])
    got = fgrad.jit(fnp.gradient)(n)
    np.testing.assert_array_equal(got, np.gradient(n))
    assert got.dtype == np.gradient(n).dtype
    got = fgrad.jit(lambda n: fnp.ediff1d(n, to_end=[7]))(n)
    np.testing.assert_array_equal(got, np.ediff1d(n, to_end=[7]))
    assert got.dtype == n.dtype


# -- logsumexp: one implementation, three entry points -----------------------------------

def test_every_logsumexp_has_finite_gradients_at_minus_infinity():
    import fgrad.scipy.special as fs
    x = np.array([[-np.inf, -np.inf], [0.0, -np.inf]])
    entry_points = [lambda x: fnp.logsumexp(x, axis=1),
                    lambda x: fs.logsumexp(x, axis=1),
                    lambda x: fgrad.nn.logsumexp(x, axis=1),
                    lambda x: fnp.logsumexp(x, axis=1, b=np.array([2.0, 1.0]))]
    for f in entry_points:
        with np.errstate(divide="ignore"):
            np.testing.assert_array_equal(f(x)[0], -np.inf)
            g = fgrad.grad(lambda x: f(x)[1])(x)
            _, t = fgrad.jvp(lambda x: f(x)[1], (x,), (np.ones_like(x),))
        np.testing.assert_array_equal(g, [[0.0, 0.0], [1.0, 0.0]])
        assert np.isfinite(t)


def test_logsumexp_signs_and_integer_inputs_match_scipy():
    import scipy.special as ss
    x = np.array([[0.0, 1.0], [-np.inf, -np.inf]])
    with np.errstate(divide="ignore"):
        for b in (None, np.array([1.0, -3.0])):
            got = fgrad.jit(lambda x: fnp.logsumexp(x, axis=1, b=b, return_sign=True))(x)
            want = ss.logsumexp(x, axis=1, b=b, return_sign=True)
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w)
    n = np.array([1, 2, 3])
    np.testing.assert_allclose(fgrad.jit(fnp.logsumexp)(n), ss.logsumexp(n))
