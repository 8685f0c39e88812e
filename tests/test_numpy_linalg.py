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
    assert after.hits == before.hits + 1 and after.misses == before.misses
    fnp.einsum("ij,jk,kl->il", _r(5, 2), _r(2, 7), c)       # new shapes: a miss
    assert _einsum.contraction_path.cache_info().misses == after.misses + 1


def test_einsum_equation_carries_its_path():
    a, b, c = _r(5, 6), _r(6, 7), _r(7, 3)
    with new_trace(ReverseTrace) as trace:
        x = trace.new_input(a)
        fnp.einsum("ij,jk,kl->il", x, b, c)
    (prim, _, _, _, _, params), = trace.eqns
    assert prim.name == "einsum"
    assert params["subscripts"] == "ij,jk,kl->il"
    assert params["path"] == _einsum.contraction_path(
        "ij,jk,kl->il", ((5, 6), (6, 7), (7, 3)))
    assert len(params["path"]) == 2 and all(len(step) == 2 for step in params["path"])
    hash(params["path"])


def test_einsum_gradient_of_chain_contraction():
    ops = [_r(3, 4), _r(4, 2), _r(2, 5), _r(5, 3)]
    grads = fgrad.grad(lambda *xs: fnp.sum(fnp.einsum("ij,jk,kl,lm->im", *xs)),
                       argnums=(0, 1, 2, 3))(*ops)
    ones = np.ones((3, 3))
    expected = [np.einsum("im,jk,kl,lm->ij", ones, *ops[1:]),
                np.einsum("im,ij,kl,lm->jk", ones, ops[0], *ops[2:]),
                np.einsum("im,ij,jk,lm->kl", ones, *ops[:2], ops[3]),
                np.einsum("im,ij,jk,kl->lm", ones, *ops[:3])]
    for g, e in zip(grads, expected):
        np.testing.assert_allclose(g, e, rtol=1e-12)


def test_einsum_errors_say_what_is_wrong():
    with pytest.raises(ValueError, match="label 'j' has sizes 3 and 4"):
        fnp.einsum("ij,jk", _r(2, 3), _r(4, 2))
    with pytest.raises(ValueError, match="cannot parse the subscripts"):
        fnp.einsum("ij,jk->ik", _r(2, 3))
    with pytest.raises(TypeError, match="no out= argument"):
        fnp.einsum("ij", _r(2, 2), out=np.empty((2, 2)))


def test_einsum_path_function():
    path, text = fnp.einsum_path("ij,jk,kl", _r(2, 3), _r(3, 4), _r(4, 2))
    assert path[0] == "einsum_path" and len(path) == 3
    assert "ij,jk,kl->il" in text


# -- linalg -------------------------------------------------------------------------------

def _wc(n, batch=()):
    q, _ = np.linalg.qr(_r(*batch, n, n))
    return q @ (np.linspace(1, 3, n)[:, None] * np.swapaxes(q, -1, -2)) + 0.1 * _r(
        *batch, n, n)


def test_linalg_values_and_dtypes_match_numpy():
    a = _wc(3, (2,))
    b = _r(2, 3, 2)
    for name, args in [("solve", (a, b)), ("inv", (a,)), ("det", (a,)),
                       ("pinv", (a,)), ("norm", (a,))]:
        out = getattr(fnp.linalg, name)(*args)
        ref = getattr(np.linalg, name)(*args)
        np.testing.assert_allclose(out, ref, rtol=1e-12)
        assert np.asarray(out).dtype == np.asarray(ref).dtype
    a32 = a.astype(np.float32)
    assert fnp.linalg.inv(a32).dtype == np.float32
    assert fnp.linalg.slogdet(a32).logabsdet.dtype == np.float32
    s, l = fnp.linalg.slogdet(a)
    np.testing.assert_allclose(s * np.exp(l), np.linalg.det(a))


def test_solve_with_vector_right_hand_side_is_batched():
    a, b = _wc(3, (4,)), _r(3)
    np.testing.assert_allclose(fnp.linalg.solve(a, b), np.linalg.solve(a, b))
    check_grads(fnp.linalg.solve, (a, b), order=2)


def test_complex_solve_inv_det_follow_the_holomorphic_convention():
    a = _wc(2) + 1j * 0.1 * _r(2, 2)
    _, vjp_fn = fgrad.vjp(fnp.linalg.det, a)
    g, = vjp_fn(np.complex128(1.0))
    # d det / dA = det * inv(A)^T, with no conjugation (JAX's convention)
    expected = np.linalg.det(a) * np.linalg.inv(a).T
    np.testing.assert_allclose(g, expected, rtol=1e-10)


def test_norm_gradient_is_finite_at_zero():
    zero = np.zeros(3)
    np.testing.assert_array_equal(fgrad.grad(fnp.linalg.norm)(zero), zero)
    assert np.all(np.isfinite(fgrad.hessian(fnp.linalg.norm)(zero)))
    g = fgrad.grad(lambda x: fnp.sum(fnp.linalg.norm(x, axis=1)))(
        np.array([[0.0, 0.0], [3.0, 4.0]]))
    np.testing.assert_allclose(g, [[0.0, 0.0], [0.6, 0.8]])
    np.testing.assert_array_equal(
        fgrad.grad(lambda x: fnp.linalg.norm(x, "fro"))(np.zeros((2, 2))), 0.0)


def test_norm_orders_match_numpy():
    x = _r(3, 4)
    for order in [None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf]:
        np.testing.assert_allclose(fnp.linalg.norm(x, order), np.linalg.norm(x, order))
    for order in [None, 0, 1, 2, 3, np.inf, -np.inf, 0.5]:
        np.testing.assert_allclose(fnp.linalg.norm(x, order, axis=0),
                                   np.linalg.norm(x, order, axis=0))
    np.testing.assert_allclose(fnp.linalg.norm(_r(2, 3, 4), keepdims=True).shape,
                               (1, 1, 1))
    with pytest.raises(ValueError, match="invalid norm order 'bad'"):
        fnp.linalg.norm(x, "bad")


def test_lstsq_matches_numpy():
    a, b = _r(5, 3), _r(5, 2)
    for bb in (b, b[:, 0]):
        x, res, rank, s = fnp.linalg.lstsq(a, bb)
        ex, eres, erank, es = np.linalg.lstsq(a, bb)
        np.testing.assert_allclose(x, ex, rtol=1e-10)
        np.testing.assert_allclose(res, eres, rtol=1e-10)
        assert rank == erank and np.shape(res) == np.shape(eres)
        np.testing.assert_allclose(s, es)
    check_grads(lambda a, b: fnp.linalg.lstsq(a, b)[0], (a, b), order=2)


def test_eigh_and_svd_values_match_numpy():
    a = _wc(3)
    sym = (a + a.T) / 2
    np.testing.assert_allclose(fnp.linalg.eigvalsh(sym), np.linalg.eigvalsh(sym))
    np.testing.assert_allclose(fnp.linalg.svd(a, compute_uv=False),
                               np.linalg.svd(a, compute_uv=False))
    u, s, vh = fnp.linalg.svd(_r(4, 3))
    assert u.shape == (4, 4) and vh.shape == (3, 3)      # NumPy's full default


def _c(*shape):
    return _r(*shape) + 1j * _r(*shape)


def _wc_rect(m, n, batch=(), complex_=False):
    """A well-conditioned (batch of) m x n matrices, singular values 1, 1.7, 2.4."""
    a = _c(*batch, m, n) if complex_ else _r(*batch, m, n)
    u, _, vh = np.linalg.svd(a, full_matrices=False)
    return (u * (1.0 + 0.7 * np.arange(min(m, n)))[..., None, :]) @ vh


def _H(x):
    return fnp.conj(fnp.swapaxes(x, -1, -2))


def _re_im(*parts):
    """Real and imaginary parts of every part, raveled into one real vector."""
    flat = [fnp.reshape(p, (-1,)) for p in parts]
    return fnp.concatenate([fnp.real(f) for f in flat] + [fnp.imag(f) for f in flat])


# Gauge-invariant functions of each decomposition (the phase of a complex
# eigen- or singular vector is arbitrary, so only these are differentiable).

def _slogdet_all(a):
    sign, logabsdet = fnp.linalg.slogdet(a)
    return _re_im(sign, logabsdet)


def _cholesky_of_gram(b):
    n = b.shape[-1]
    return _re_im(fnp.linalg.cholesky(b @ _H(b) + n * np.eye(n)))


def _qr_all(a):
    q, r = fnp.linalg.qr(a)             # LAPACK's r has a real diagonal: unique
    return _re_im(q, r)


def _eigh_invariants(a):
    w, v = fnp.linalg.eigh(a)
    return _re_im(w, fnp.real(v * fnp.conj(v)), v[..., :, :1] @ _H(v[..., :, :1]))


def _svd_invariants(a, full_matrices=False):
    u, s, vh = fnp.linalg.svd(a, full_matrices=full_matrices)
    k = s.shape[-1]
    u1, vh1 = u[..., :, :k], vh[..., :k, :]
    parts = [s, (u1 * s[..., None, :]) @ vh1, fnp.abs(u1), u1[..., :, :1] @ _H(u1[..., :, :1])]
    if full_matrices:                    # the complements' projectors
        parts += [u[..., :, k:] @ _H(u[..., :, k:]), _H(vh[..., k:, :]) @ vh[..., k:, :]]
    return _re_im(*parts)


COMPLEX_DECOMPOSITIONS = {
    "slogdet": (_slogdet_all, lambda: _wc_rect(3, 3, (2,), True)),
    "cholesky": (_cholesky_of_gram, lambda: _c(2, 3, 3)),
    "qr_square": (_qr_all, lambda: _wc_rect(3, 3, (2,), True)),
    "qr_tall": (_qr_all, lambda: _wc_rect(3, 2, (2,), True)),
    "qr_wide": (_qr_all, lambda: _wc_rect(2, 3, (2,), True)),
    "eigh": (_eigh_invariants, lambda: _wc_rect(3, 3, (2,), True)),
    "svd_square": (_svd_invariants, lambda: _wc_rect(3, 3, (2,), True)),
    "svd_tall": (_svd_invariants, lambda: _wc_rect(3, 2, (2,), True)),
    "svd_wide": (_svd_invariants, lambda: _wc_rect(2, 3, (2,), True)),
}


@pytest.mark.parametrize("name", sorted(COMPLEX_DECOMPOSITIONS))
def test_complex_decompositions_match_finite_differences(name):
    # batched over a leading axis; both real directions of every entry, forward
    # and reverse, to second order (check_grads)
    f, make = COMPLEX_DECOMPOSITIONS[name]
    a = make()
    if name == "eigh":                       # eigh reads the Hermitian part
        a = a + np.conj(np.swapaxes(a, -1, -2))
    check_grads(f, (a,), order=2)


def test_complex_slogdet_rule_is_the_conjugate_free_transpose():
    # d log|det| = re(tr(a^-1 da)) and d sign = sign * 1j * im(tr(a^-1 da)): the
    # VJP of a real cotangent on logabsdet is ct * a^-T, with no conjugation
    a = _wc_rect(3, 3, (), True)
    _, vjp_fn = fgrad.vjp(lambda a: fnp.linalg.slogdet(a).logabsdet, a)
    np.testing.assert_allclose(vjp_fn(np.float64(2.0))[0], 2.0 * np.linalg.inv(a).T,
                               rtol=1e-10)


def test_complex_hermitian_wrappers_read_the_hermitian_part():
    a = _c(3, 3)
    h = (a + a.conj().T) / 2
    np.testing.assert_allclose(fnp.linalg.eigvalsh(a), np.linalg.eigvalsh(h),
                               rtol=1e-12)
    spd = h + 4 * np.eye(3)
    # a non-Hermitian input: its anti-Hermitian part is ignored
    np.testing.assert_allclose(fnp.linalg.cholesky(spd + (a - a.conj().T) / 2,
                                                   upper=True),
                               np.linalg.cholesky(spd, upper=True), rtol=1e-12)


@pytest.mark.parametrize("shape", [(3, 2), (2, 3), (4, 1), (3, 3)])
@pytest.mark.parametrize("complex_", [False, True])
def test_svd_full_matrices_differentiates_its_gauge_invariant_parts(shape, complex_):
    # the extra columns of u (rows of vh) are arbitrary within the orthogonal
    # complement; their projector is not, nor is anything of the thin part
    a = _wc_rect(*shape, batch=(2,), complex_=complex_)
    u, s, vh = fnp.linalg.svd(a)             # NumPy's default: full_matrices=True
    assert u.shape == (2, shape[0], shape[0]) and vh.shape == (2, shape[1], shape[1])
    check_grads(lambda a: _svd_invariants(a, full_matrices=True), (a,), order=2)


def test_svd_full_matrices_complement_turns_minimally():
    # u2^H du2 = 0 (no rotation within the complement), and u^H du stays
    # skew-Hermitian, so u remains unitary to first order
    a = _wc_rect(4, 2, (), True)
    t = _c(4, 2)
    (u, _, _), (du, _, _) = fgrad.jvp(lambda a: fnp.linalg.svd(a), (a,), (t,))
    np.testing.assert_allclose(u[:, 2:].conj().T @ du[:, 2:], 0, atol=1e-12)
    omega = u.conj().T @ du
    np.testing.assert_allclose(omega + omega.conj().T, 0, atol=1e-12)


def test_svd_full_matrices_single_extra_vector_is_unique_up_to_sign():
    # a real 3 x 2 matrix has one extra column of u, unique up to its sign: its
    # derivative (sign fixed) must match finite differences entry by entry
    a = _wc_rect(3, 2)

    def extra_column(a):
        u = fnp.linalg.svd(a)[0][:, 2]
        return u * fnp.sign(fnp.sum(u * np.array([1.0, 1.3, 1.7])))
    check_grads(extra_column, (a,), order=2)


def test_qr_of_wide_matrices_matches_finite_differences():
    a = _r(2, 2, 4)
    q, r = fnp.linalg.qr(a)
    np.testing.assert_allclose(q @ r, a, atol=1e-12)
    check_grads(lambda a: fnp.concatenate([fnp.ravel(x) for x in fnp.linalg.qr(a)]),
                (a,), order=2)
    check_grads(lambda a: fnp.linalg.qr(a).R, (a,), order=2)     # R alone
    check_grads(lambda a: fnp.linalg.qr(a).Q, (a,), order=2)     # Q alone


def test_numpy_linalg_functions_dispatch_on_tracers():
    a = _wc(2)
    g = fgrad.grad(lambda a: np.linalg.det(a))(a)
    np.testing.assert_allclose(g, np.linalg.det(a) * np.linalg.inv(a).T)


# -- fft ---------------------------------------------------------------------------------

def test_fft_values_and_dtypes_match_numpy():
    x = _r(4, 6)
    for name, kw in [("fft", {}), ("ifft", {"n": 8}), ("rfft", {"axis": 0}),
                     ("irfft", {"n": 7}), ("fft2", {"s": (3, 3)}), ("ifftn", {}),
                     ("rfftn", {"norm": "ortho"}), ("irfftn", {"axes": (0,)})]:
        out = getattr(fnp.fft, name)(x, **kw)
        ref = getattr(np.fft, name)(x, **kw)
        np.testing.assert_allclose(out, ref, atol=1e-12)
        assert out.dtype == ref.dtype and out.shape == ref.shape
    assert fnp.fft.fft(x.astype(np.float32)).dtype == np.complex64


def test_irfft_gradient_weights_hermitian_pairs():
    # sum(irfft(X)) over n outputs is n * Re(X[0]) / n = Re(X[0]): the gradient
    # w.r.t. the real parts is [1, 0, 0, ...] whatever the length
    for n in (6, 7):
        g = fgrad.grad(lambda re: fnp.sum(fnp.fft.irfft(re + 0j, n=n)))(_r(n // 2 + 1))
        np.testing.assert_allclose(g, np.eye(n // 2 + 1)[0], atol=1e-12)


def test_fft_invalid_norm_is_reported():
    with pytest.raises(ValueError, match="invalid norm 'unitary'"):
        fnp.fft.fft(_r(4), norm="unitary")


def test_make_graph_shows_the_pairwise_contraction_path():
    import fgrad
    a, b, c = np.ones((5, 6)), np.ones((6, 7)), np.ones((7, 2))
    listing = str(fgrad.make_graph(lambda a, b, c: fnp.einsum("ij,jk,kl->il", a, b, c))(
        a, b, c))
    # contract b with c first (6x7x2), then a with the result: opt_einsum's choice
    assert "einsum[subscripts=ij,jk,kl->il path=((1, 2), (0, 1))]" in listing


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
