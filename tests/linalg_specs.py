"""Test specs for einsum, the products built on it, linalg and fft.

Imported at the end of `primitive_specs.py`, whose `SPECS` / `NONDIFF_SPECS` it
fills. Linear algebra draws well-conditioned inputs: matrices ``Q1 diag(s) Q2^T``
with orthogonal ``Q`` (from a drawn matrix's QR) and ``s`` in [1, 3];
symmetric ones with well-separated eigenvalues for eigh; SPD ones as
``B B^T + n I`` for cholesky. Eigen- and singular vectors are compared with a
sign fixed by their first row, since their sign is arbitrary.
"""
import numpy as np
from hypothesis import strategies as st

import fgrad.numpy as fnp
from fgrad.primitives import einsum as _einsum
from fgrad.primitives import linalg as _linalg
from fgrad.primitives.shape import swap_last_axes as _swap
# the matrix strategies are fgrad's public ones; `batches` and `well_conditioned`
# stay importable from here for the spec modules that use them
from fgrad.testing.strategies import batch_shapes as batches  # noqa: F401
from fgrad.testing.strategies import well_conditioned
from primitive_specs import NONDIFF_SPECS, SPECS, Case, arrays, shapes, spec

L = fnp.linalg

# -- matrices -------------------------------------------------------------------------


def _flip(v):
    """+-1 per column of ``v``, fixing the arbitrary sign of singular/eigenvectors
    by an irregularly weighted column sum (zero only by coincidence, unlike the
    first entry, which is zero for diagonal inputs)."""
    weights = (1.0 + 0.4623 * np.arange(v.shape[-2]) ** 1.5)[:, None].astype(v.dtype)
    if isinstance(v, np.ndarray):
        return np.where((v * weights).sum(-2, keepdims=True) < 0, -1.0, 1.0) \
            .astype(v.dtype)
    weights = fnp.asarray(weights, like=v)          # onto v's device
    return fnp.astype(fnp.where(fnp.sum(v * weights, axis=-2, keepdims=True) < 0,
                                -1.0, 1.0), v.dtype)


def _sign_fix(v):
    return v * _flip(v)


def _mT(x):
    return np.swapaxes(x, -1, -2) if isinstance(x, np.ndarray) else _swap(x)


def _ravel(x):
    return x.ravel() if isinstance(x, np.ndarray) else fnp.reshape(x, (-1,))


# -- einsum and products -------------------------------------------------------------------

EINSUM_FORMS = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 2)]),
    ("ii", [(3, 3)]),
    ("ii->i", [(3, 3)]),
    ("ji", [(2, 3)]),
    ("ij->", [(2, 3)]),
    ("ij->i", [(2, 3)]),
    ("iij->j", [(2, 2, 3)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (3, 2)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
    ("i,i", [(3,), (3,)]),
    ("i,j->ij", [(2,), (3,)]),
    ("ij,ij,ij->", [(2, 3)] * 3),
    ("ijk,jl,lk->il", [(2, 3, 2), (3, 2), (2, 2)]),
    ("ij,kj->ik", [(1, 3), (2, 3)]),
    ("ij,jk,kl,lm->im", [(2, 3), (3, 2), (2, 2), (2, 3)]),
    (",ij->ij", [(), (2, 2)]),
]


@spec("einsum")
def _einsum_spec(name):
    def build(form):
        subscripts, shape_list = form
        return st.tuples(*(arrays(s) for s in shape_list)).map(lambda ops: Case(
            lambda *xs: fnp.einsum(subscripts, *xs), ops,
            lambda *xs: np.einsum(subscripts, *xs)))
    return st.sampled_from(EINSUM_FORMS).flatmap(build)


@spec("einsum_path")
def _einsum_path_spec(name):
    # the path einsum_path reports (computed on tracers) fed back as optimize=
    def fun(a, b, c):
        path, _ = fnp.einsum_path("ij,jk,kl", a, b, c)
        return fnp.einsum("ij,jk,kl", a, b, c, optimize=path)
    return st.tuples(arrays((2, 3)), arrays((3, 4)), arrays((4, 2))).map(
        lambda ops: Case(fun, ops, lambda a, b, c: np.einsum(
            "ij,jk,kl", a, b, c, optimize=np.einsum_path("ij,jk,kl", a, b, c)[0])))


def _pair_case(fgrad_fn, np_fn, pairs):
    return st.sampled_from(pairs).flatmap(lambda p: st.tuples(
        arrays(p[0]), arrays(p[1])).map(lambda ab: Case(fgrad_fn, ab, np_fn)))


SPECS["tensordot"] = st.sampled_from([1, 2, ([0, 2], [2, 0])]).flatmap(
    lambda axes: st.tuples(arrays((3, 2, 2)), arrays((2, 2, 3))).map(lambda ab: Case(
        lambda a, b: fnp.tensordot(a, b, axes), ab,
        lambda a, b: np.tensordot(a, b, axes))))
SPECS["inner"] = _pair_case(fnp.inner, np.inner, [((3,), (3,)), ((2, 3), (4, 3)),
                                                  ((), (2,))])
SPECS["outer"] = _pair_case(fnp.outer, np.outer, [((3,), (2,)), ((2, 2), (3,))])
SPECS["vdot"] = _pair_case(fnp.vdot, np.vdot, [((3,), (3,)), ((2, 2), (4,))])
SPECS["kron"] = _pair_case(fnp.kron, np.kron, [((2, 2), (2, 3)), ((3,), (2,)),
                                               ((2,), (2, 2))])
SPECS["cross"] = _pair_case(fnp.cross, np.cross, [((3,), (3,)), ((2, 3), (3,)),
                                                  ((2, 3), (2, 2))])

NONDIFF_SPECS["identity_like"] = arrays((2,)).map(
    lambda x: (lambda x: _einsum.identity_like(x, 3), lambda x: np.eye(3), (x,)))
NONDIFF_SPECS["tri_like"] = arrays((2,)).map(
    lambda x: (lambda x: _linalg.tri_like_p.bind(x, n=3, m=2, k=0,
                                                 dtype=np.dtype(np.float64)),
               lambda x: np.tri(3, 2), (x,)))

# -- linalg ---------------------------------------------------------------------------------

LINALG_TOL = dict(atol=1e-4, rtol=1e-4)


def _square_case(fgrad_fn, np_fn, **kw):
    return well_conditioned(**kw).map(lambda a: Case(fgrad_fn, (a,), np_fn,
                                                     tol=LINALG_TOL))


def _solve_case(fgrad_fn, np_fn, vectors=True):
    def build(d):
        a, k = d
        n = a.shape[-1]
        b_shape = (n,) if k == 0 else (2,) * (a.ndim > 2) + (n, k)
        return arrays(b_shape).map(lambda b: Case(fgrad_fn, (a, b), np_fn, tol=LINALG_TOL))
    return st.tuples(well_conditioned(), st.integers(0 if vectors else 1, 2)).flatmap(build)


# fnp.linalg.solve under a transformation: solve_factors once, factored_solve with its
# factors in every pass; solve_p is what it computes outside transformations
SPECS["factored_solve"] = _solve_case(L.solve, np.linalg.solve)
SPECS["factored_solve_transposed"] = _solve_case(
    lambda a, b: _linalg.factored_solve(a, *_linalg.solve_factors_p.bind(a), b,
                                        transpose=True),
    lambda a, b: np.linalg.solve(_mT(a), b), vectors=False)
SPECS["solve"] = _solve_case(_linalg.solve_p.bind, np.linalg.solve, vectors=False)


def _lu_pivots(a):
    """The pivots `solve_factors_p` keeps: LAPACK's of each a^T, 1-based (zeros
    where llvmlite or SciPy is missing and the factors are a copy of ``a``). Its
    factors are LAPACK's to rounding, not bit for bit (several small matrices
    are factored at once): tests/test_lu_kernels.py compares them."""
    if not _linalg.lu_kept(a):
        return np.zeros(a.shape[:-1], np.int32)
    from scipy.linalg import lu_factor
    return np.stack([lu_factor(m.T)[1] + 1 for m in a.reshape((-1,) + a.shape[-2:])]) \
        .reshape(a.shape[:-1]).astype(np.int32)


NONDIFF_SPECS["solve_factors"] = well_conditioned().map(
    lambda a: (lambda x: _linalg.solve_factors_p.bind(x)[1], _lu_pivots, (a,)))


SPECS["inv"] = _square_case(L.inv, np.linalg.inv)
SPECS["det"] = _square_case(L.det, np.linalg.det)
SPECS["slogdet"] = _square_case(lambda a: L.slogdet(a).logabsdet,
                                lambda a: np.linalg.slogdet(a).logabsdet)
SPECS["slogdet_sign"] = _square_case(lambda a: L.slogdet(a).sign * 1.0,
                                     lambda a: np.linalg.slogdet(a).sign)


@spec("cholesky")
def _cholesky(name):
    def spd(b):
        n = b.shape[-1]
        eye = np.eye(n, dtype=b.dtype)
        return fnp.matmul(b, _mT(b)) + n * (eye if isinstance(b, np.ndarray) else
                                            fnp.asarray(eye, like=b))
    return well_conditioned().map(lambda b: Case(
        lambda b: L.cholesky(spd(b)), (b,), lambda b: np.linalg.cholesky(spd(b)),
        tol=LINALG_TOL))


@spec("qr")
def _qr(name):
    def fixed(a, mod):
        q, r = mod(a)
        # the same sign convention for q's columns and r's rows
        flip = _flip(q)
        cat = np.concatenate if isinstance(q, np.ndarray) else fnp.concatenate
        return cat([_ravel(q * flip), _ravel(r * _mT(flip))])
    # wide matrices too: q r_x = a[:, :m] and r's other columns are q^T a[:, m:]
    shapes_ = st.sampled_from([(2, 2), (3, 2), (3, 3), (3, 1), (2, 3), (1, 3)])
    return shapes_.flatmap(lambda nm: well_conditioned(n=nm[0], m=nm[1]).map(
        lambda a: Case(lambda a: fixed(a, L.qr), (a,),
                       lambda a: fixed(a, np.linalg.qr), tol=LINALG_TOL)))


@spec("eigh")
def _eigh(name):
    def f(a, mod):
        w, v = mod(a)
        return (fnp.concatenate if not isinstance(w, np.ndarray) else np.concatenate)(
            [w[..., None, :], _sign_fix(v)], axis=-2)
    return well_conditioned(symmetric=True).map(lambda a: Case(
        lambda a: f(a, L.eigh), (a,), lambda a: f(a, np.linalg.eigh), tol=LINALG_TOL))


@spec("svd")
def _svd(name):
    def f(a, mod):
        u, s, vh = mod(a, full_matrices=False)
        flip = _flip(u)
        cat = np.concatenate if isinstance(u, np.ndarray) else fnp.concatenate
        return cat([_ravel(u * flip), _ravel(s), _ravel(vh * _mT(flip))])
    shapes_ = st.sampled_from([(2, 2), (3, 2), (2, 3), (3, 3), (1, 3)])
    return shapes_.flatmap(lambda nm: well_conditioned(n=nm[0], m=nm[1]).map(
        lambda a: Case(lambda a: f(a, L.svd), (a,), lambda a: f(a, np.linalg.svd),
                       tol=LINALG_TOL)))


@spec("svd_full_matrices")
def _svd_full(name):
    # the thin part (signs fixed) and the projectors onto the orthogonal
    # complements, which the extra columns of u / rows of vh span arbitrarily
    def f(a, mod):
        u, s, vh = mod(a, full_matrices=True)
        k = s.shape[-1]
        cat = np.concatenate if isinstance(u, np.ndarray) else fnp.concatenate
        u1, u2, vh1, vh2 = u[..., :, :k], u[..., :, k:], vh[..., :k, :], vh[..., k:, :]
        flip = _flip(u1)
        return cat([_ravel(u1 * flip), _ravel(s), _ravel(vh1 * _mT(flip)),
                    _ravel(u2 @ _mT(u2)), _ravel(_mT(vh2) @ vh2)])
    shapes_ = st.sampled_from([(3, 2), (2, 3), (3, 1), (1, 3), (3, 3)])
    return shapes_.flatmap(lambda nm: well_conditioned(n=nm[0], m=nm[1]).map(
        lambda a: Case(lambda a: f(a, L.svd), (a,), lambda a: f(a, np.linalg.svd),
                       tol=LINALG_TOL)))


SPECS["pinv"] = st.sampled_from([(2, 2), (3, 2), (2, 3)]).flatmap(
    lambda nm: well_conditioned(n=nm[0], m=nm[1])).map(
    lambda a: Case(L.pinv, (a,), np.linalg.pinv, tol=LINALG_TOL))
SPECS["matrix_power"] = st.sampled_from([-2, 0, 1, 3]).flatmap(
    lambda p: well_conditioned().map(lambda a: Case(
        lambda a: L.matrix_power(a, p) * 1.0, (a,),
        lambda a: np.linalg.matrix_power(a, p) * 1.0, tol=LINALG_TOL)))


@spec("norm")
def _norm(name):
    vector = st.tuples(st.sampled_from([None, 1, 2, np.inf, -np.inf, 3]),
                       st.sampled_from([-1, 0]), st.just(False))
    matrix = st.tuples(st.sampled_from([None, "fro", "nuc", 1, -1, 2, -2, np.inf,
                                        -np.inf]),
                       st.sampled_from([(-2, -1), (1, 0)]), st.booleans())

    def build(d):
        a, (order, axis, keepdims) = d
        return Case(lambda a: L.norm(a, order, axis, keepdims), (a,),
                    lambda a: np.linalg.norm(a, order, axis, keepdims), tol=LINALG_TOL)
    # spaced singular values and entries, so max/min and abs have no ties or kinks
    return st.tuples(well_conditioned(batch=(), n=3, m=2), st.one_of(vector, matrix)) \
        .filter(lambda d: np.min(np.abs(d[0])) > 0.05
                and len(set(np.round(np.abs(d[0]).ravel(), 6))) == d[0].size
                and len(set(np.round(np.abs(d[0]).sum(0), 6))) == 2
                and len(set(np.round(np.abs(d[0]).sum(1), 6))) == 3) \
        .map(build)


# -- fft ------------------------------------------------------------------------------------

def _re_im(z):
    return fnp.stack([fnp.real(z), fnp.real(z * -1j)])


def _np_re_im(z):
    return np.stack([z.real, z.imag])


@spec("fft")
def _fft(name):
    F = fnp.fft
    kinds = st.sampled_from(["fft", "ifft", "rfft", "irfft", "fft2", "ifftn", "rfftn",
                             "irfft2"])
    norms = st.sampled_from([None, "ortho", "forward"])

    def build(d):
        kind, norm, n, shape = d
        f_np = getattr(np.fft, kind)
        f_fg = getattr(F, kind)
        kw = dict(norm=norm)
        if kind in ("fft", "ifft", "rfft", "irfft"):
            kw["n"] = n
        if kind.startswith("irfft"):
            def fun(a, b):
                return f_fg(a + 1j * b, **kw)

            def ref(a, b):
                return f_np(a + 1j * b, **kw)
            return st.tuples(arrays(shape), arrays(shape)).map(
                lambda ab: Case(fun, ab, ref, tol=LINALG_TOL))
        if kind.startswith("rfft"):
            return arrays(shape).map(lambda a: Case(
                lambda a: _re_im(f_fg(a, **kw)), (a,),
                lambda a: _np_re_im(f_np(a, **kw)), tol=LINALG_TOL))
        return st.tuples(arrays(shape), arrays(shape)).map(lambda ab: Case(
            lambda a, b: _re_im(f_fg(a + 1j * b, **kw)), ab,
            lambda a, b: _np_re_im(f_np(a + 1j * b, **kw)), tol=LINALG_TOL))
    return st.tuples(kinds, norms, st.sampled_from([None, 2, 5]),
                     shapes(min_dims=2, max_dims=2, min_side=2)).flatmap(build)


SPECS["fftshift"] = st.tuples(shapes(min_dims=1), st.booleans()).flatmap(
    lambda d: arrays(d[0]).map(lambda x: Case(
        (fnp.fft.ifftshift if d[1] else fnp.fft.fftshift), (x,),
        (np.fft.ifftshift if d[1] else np.fft.fftshift))))

import scipy_specs  # noqa: E402,F401  (fgrad.scipy's primitives)
