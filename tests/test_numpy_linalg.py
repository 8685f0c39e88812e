"""einsum (every subscript form, the path cache), linalg and fft behaviour beyond
the systematic derivative test: values against NumPy, errors and their messages,
finite gradients at singular points."""
import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.interpreters.reverse import ReverseTrace
from fgrad.core.trace import new_trace
from fgrad.primitives import einsum as _einsum
from fgrad.testing import check_grads

RNG = np.random.default_rng(0)


def _r(*shape):
    return RNG.standard_normal(shape)


# -- einsum ----------------------------------------------------------------------------

EINSUM_CASES = [
    ("ij,jk->ik", (2, 3), (3, 4)),
    ("ij,jk", (2, 3), (3, 4)),           # implicit output
    ("ji", (2, 3)),                      # implicit transposition
    ("ii", (3, 3)),                      # trace
    ("ii->i", (3, 3)),                   # diagonal
    ("iii->i", (2, 2, 2)),
    ("iij->ji", (2, 2, 3)),
    ("ij->", (2, 3)),
    ("ij->j", (2, 3)),
    ("...ij,...jk->...ik", (2, 1, 2, 3), (4, 3, 2)),
    ("...ii->...", (3, 2, 2)),
    ("i...->...", (2, 3, 4)),
    ("...,...", (2, 3), (3,)),
    ("ij,ij->ij", (1, 3), (2, 3)),        # size-1 broadcasting of a label
    ("i,i", (4,), (4,)),
    (",ij", (), (2, 2)),
    ("bij,bjk,bkl->bil", (2, 2, 3), (2, 3, 2), (2, 2, 2)),
    ("ijk,kji->", (2, 3, 2), (2, 3, 2)),
    ("ab,cd,ef->abcdef", (2, 1), (1, 2), (2, 1)),
]


@pytest.mark.parametrize("case", EINSUM_CASES, ids=lambda c: c[0])
def test_einsum_matches_numpy_and_differentiates(case):
    subscripts, *shapes = case
    ops = [_r(*s) for s in shapes]
    out = fnp.einsum(subscripts, *ops)
    expected = np.einsum(subscripts, *ops)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    assert np.shape(out) == np.shape(expected)
    check_grads(lambda *xs: fnp.einsum(subscripts, *xs), ops, order=2)


def test_einsum_interleaved_sublist_form():
    a, b = _r(2, 3), _r(3, 4)
    np.testing.assert_allclose(fnp.einsum(a, [0, 1], b, [1, 2], [0, 2]),
                               np.einsum(a, [0, 1], b, [1, 2], [0, 2]))
    np.testing.assert_allclose(fnp.einsum(a, [Ellipsis, 1], b, [1, 2]),
                               np.einsum(a, [Ellipsis, 1], b, [1, 2]))
    check_grads(lambda a, b: fnp.einsum(a, [0, 1], b, [1, 2], [0, 2]), (a, b))


def test_einsum_complex_and_mixed_precision():
    a = (_r(2, 3) + 1j * _r(2, 3)).astype(np.complex64)
    b = _r(3, 2).astype(np.float32)
    out = fnp.einsum("ij,jk->ik", a, b)
    assert out.dtype == np.einsum("ij,jk->ik", a, b).dtype
    g = fgrad.grad(lambda b: fnp.real(fnp.einsum("ij,jk->", a, b)))(b)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, np.broadcast_to(a.real.sum(0)[:, None], (3, 2)),
                               rtol=1e-5)


def test_einsum_path_is_cached_per_subscripts_and_shapes():
    a, b, c = _r(5, 6), _r(6, 7), _r(7, 3)
    fnp.einsum("ij,jk,kl->il", a, b, c)
    before = _einsum.contraction_path.cache_info()
    fnp.einsum("ij,jk,kl->il", a * 2, b, c)
    after = _einsum.contraction_path.cache_info()
    # the whole contraction's path and each pairwise step's: all found again
    assert after.hits == before.hits + 3 and after.misses == before.misses
    fnp.einsum("ij,jk,kl->il", _r(5, 2), _r(2, 7), c)       # new shapes: misses
    assert _einsum.contraction_path.cache_info().misses > after.misses


def test_einsum_is_recorded_as_its_pairwise_steps():
    # reverse mode keeps each step's result, so the gradient reuses the
    # intermediates instead of contracting every other operand again
    a, b, c = _r(5, 6), _r(6, 7), _r(7, 3)
    assert _einsum.contraction_path("ij,jk,kl->il", ((5, 6), (6, 7), (7, 3))) \
        == ((1, 2), (0, 1))                                 # b c first, then a
    with new_trace(ReverseTrace) as trace:
        x = trace.new_input(a)
        fnp.einsum("ij,jk,kl->il", x, b, c)
    # b c has no input in it, so it is computed, not recorded
    (prim, _, _, _, _, params), = trace.eqns
    assert prim.name == "einsum"
    assert params["subscripts"] == "ij,jl->il"
    assert params["path"] == ((0, 1),)
    hash(params["path"])


def test_fft_invalid_norm_is_reported():
    with pytest.raises(ValueError, match="invalid norm 'unitary'"):
        fnp.fft.fft(_r(4), norm="unitary")


def test_make_graph_shows_the_pairwise_contraction_path():
    import fgrad
    a, b, c = np.ones((5, 6)), np.ones((6, 7)), np.ones((7, 2))
    listing = str(fgrad.make_graph(lambda a, b, c: fnp.einsum("ij,jk,kl->il", a, b, c))(
        a, b, c))
    # contract b with c first (6x7x2), then a with the result: opt_einsum's choice
    assert "einsum[subscripts=jk,kl->jl path=((0, 1),)]" in listing
    assert "einsum[subscripts=ij,jl->il path=((0, 1),)]" in listing


def test_lstsq_under_jit_and_vmap_returns_rank_and_singular_values_as_arrays():
    a, b = _r(5, 3), _r(5)
    x, res, rank, s = fnp.linalg.lstsq(a, b)
    jx, jres, jrank, js = fgrad.jit(fnp.linalg.lstsq)(a, b)
    for got, want in ((jx, x), (jres, res), (jrank, rank), (js, s)):
        np.testing.assert_allclose(got, want, rtol=1e-10)
    assert np.asarray(jrank).dtype.kind == "i" and np.shape(jrank) == ()
    a2 = np.stack([a, a[:, [0, 0, 1]]])                  # the second has rank 2
    b2 = np.stack([b, 2 * b])
    vx, vres, vrank, vs = fgrad.vmap(fnp.linalg.lstsq)(a2, b2)
    np.testing.assert_array_equal(vrank, [3, 2])
    for i in range(2):
        ex, _, _, es = np.linalg.lstsq(a2[i], b2[i])
        np.testing.assert_allclose(vx[i], ex, rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(vs[i], es, rtol=1e-10, atol=1e-12)
    # the rank is unknown while tracing, so the residuals are there whenever m > n
    np.testing.assert_allclose(vres[:, 0], [np.sum((b2[i] - a2[i] @ vx[i]) ** 2)
                                            for i in range(2)], rtol=1e-8)


def test_solve_gradient_factors_its_matrix_once():
    # the backward solve with a^T reuses the forward pass's LU factors
    a, b = _r(3, 3) + 3 * np.eye(3), _r(3, 2)
    vg = fgrad.value_and_grad(lambda a, b: fnp.sum(fnp.linalg.solve(a, b) ** 2), (0, 1))
    listing = str(fgrad.make_graph(vg)(a, b))
    assert listing.count("solve_factors") == 1
    assert listing.count("factored_solve[transpose=False]") == 1
    assert listing.count("factored_solve[transpose=True]") == 1
    (ga, gb) = vg(a, b)[1]
    x = np.linalg.solve(a, b)
    want_b = np.linalg.solve(a.T, 2 * x)
    np.testing.assert_allclose(gb, want_b, rtol=1e-10)
    np.testing.assert_allclose(ga, -want_b @ x.T, rtol=1e-10)


def test_solve_outside_transformations_is_numpys_and_singular_raises_as_numpy():
    a, b = _r(4, 5, 5) + 2 * np.eye(5), _r(4, 5, 2)
    np.testing.assert_array_equal(fnp.linalg.solve(a, b), np.linalg.solve(a, b))
    singular = np.ones((2, 2))
    for call in (lambda: fnp.linalg.solve(singular, np.ones(2)),
                 lambda: fgrad.grad(lambda m: fnp.sum(fnp.linalg.solve(m, np.ones(2))))(
                     singular)):
        with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
            call()


def _sum_to(x, shape):
    """``x`` summed over the axes that broadcasting to it added to ``shape``."""
    x = x.sum(axis=tuple(range(x.ndim - len(shape))))
    return x.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True)


@pytest.mark.parametrize("a_shape, b_shape", [((4, 4), (3, 4, 2)), ((3, 4, 4), (4, 2)),
                                              ((3, 4, 4), (1, 4, 2))])
def test_solve_gradient_with_kept_factors_broadcasts_as_numpy(a_shape, b_shape):
    # one matrix's factors shared by a stack of right-hand sides, and the reverse
    a, b = _r(*a_shape) + 4 * np.eye(4), _r(*b_shape)
    (ga, gb) = fgrad.grad(lambda a, b: fnp.sum(fnp.linalg.solve(a, b)), (0, 1))(a, b)
    x = np.linalg.solve(a, b)
    g_rhs = np.linalg.solve(np.swapaxes(a, -1, -2), np.ones_like(x))
    np.testing.assert_allclose(gb, _sum_to(g_rhs, b_shape), rtol=1e-10)
    np.testing.assert_allclose(ga, _sum_to(-g_rhs @ np.swapaxes(x, -1, -2), a_shape),
                               rtol=1e-10)
