"""Linear algebra primitives, batched over leading axes as NumPy's ``linalg`` is.

Every rule is written with fgrad primitives (``solve``'s VJP solves again), so
second derivatives work. Conventions:

- Complex inputs follow JAX and autograd (the VJP is the transpose of the JVP
  under ``re(sum(a * b))``, no conjugation). ``solve``, ``inv``, ``det`` and
  ``pinv`` are holomorphic; the decompositions are not, and their VJPs are the
  transposes of JVPs written with conjugate transposes.
- ``cholesky`` and ``eigh`` assume a Hermitian (real: symmetric) input; the
  public wrappers in `fgrad.numpy.linalg` take ``(a + a^H) / 2`` first (as JAX
  does), so derivatives are those of the function of that.
- Complex eigenvectors and singular vectors are unique only up to a phase per
  vector (real ones: a sign). The derivatives fix it as JAX does: ``v^H dv``
  has a zero (eigh) or purely imaginary ``u^H du`` (svd) diagonal. LAPACK picks
  its phase differently, so only phase-invariant functions (``|v|^2``,
  ``v v^H``, ``u diag(s) vh``) have derivatives that match finite differences.
- ``eigh`` and ``svd`` derivatives divide by differences of eigenvalues
  (squared singular values): they are infinite for degenerate spectra, where
  the eigenvectors themselves are not unique.
- ``svd(full_matrices=True)`` of an m x n matrix, m != n: the extra columns of
  ``u`` (rows of ``vh``) span the orthogonal complement but are otherwise
  arbitrary. Their derivative is the minimal rotation that keeps them
  orthogonal to the moving thin part (no rotation within the complement), so
  the complement's projector ``u2 u2^H`` differentiates exactly.
- ``qr`` of a wide matrix (m < n) differentiates through its first m columns:
  ``a = [x | y]``, ``q r_x = x``, ``r = [r_x | q^H y]``.
"""
import numpy as np
from opt_einsum import get_symbol

from fgrad.core.backend import array_module
from fgrad.primitives.batching import batch_to_front, unbatched_ndim
from fgrad.core.trace import Primitive, ShapedArray, Zero, get_aval

from fgrad.primitives.base import dummy
from fgrad.primitives.einsum import einsum, identity_like
from fgrad.primitives.elementwise import cast_like, conj, imag, real, unbroadcast
from fgrad.primitives.indexing import slice_axis
from fgrad.primitives.products import matmul
from fgrad.primitives.shape import concatenate, expand_dims, swap_last_axes

FAMILY = "primitives/linalg.py"


# ---------------------------------------------------------------------------
# Helpers written with primitives (so the rules using them differentiate)
# ---------------------------------------------------------------------------

def _T(x):
    return swap_last_axes(x)


def _is_complex(x):
    return get_aval(x).dtype.kind == "c"


def _conj(x):
    return conj(x) if _is_complex(x) else x


def conj_transpose(x):
    """The conjugate transpose of the last two axes (the transpose for real x)."""
    return _conj(_T(x))


def _batch_letters(x, core):
    return "".join(get_symbol(26 + k) for k in range(get_aval(x).ndim - core))


def matrix_diagonal(x):
    """The diagonals of the matrices in ``x`` (its last two axes)."""
    b = _batch_letters(x, 2)
    return einsum(f"{b}ii->{b}i", x)


def _trace(x):
    b = _batch_letters(x, 2)
    return einsum(f"{b}ii->{b}", x)


def _eye(x):
    """The identity matching the last axis of ``x``, in ``x``'s dtype and backend."""
    return identity_like(x, get_aval(x).shape[-1])


def diag_embed(v):
    """Matrices with the vectors ``v`` (last axis) on their diagonals."""
    return expand_dims(v, -1) * _eye(v)


def _tril_mask(x, k=0):
    n, m = get_aval(x).shape[-2:]
    return tri_like_p.bind(x, n=n, m=m, k=k, dtype=real_dtype(get_aval(x).dtype))


def _tril(x, k=0):
    return x * _tril_mask(x, k)


def real_dtype(dtype):
    """The real dtype of the same precision as ``dtype`` (float64 for complex128)."""
    return np.finfo(dtype).dtype if dtype.kind == "c" else dtype


def _is_zero(ct):
    return ct is None or type(ct) is Zero


def _square_abstract(name):
    def check(a):
        if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
            raise ValueError(f"{name}: expected a (..., n, n) stack of square "
                             f"matrices, got shape {a.shape}")
    return check


def _float_dtype(*avals):
    dtype = np.result_type(*(dummy(a) for a in avals))
    return dtype if dtype.kind in "fc" else np.dtype(np.float64)


tri_like_p = Primitive(
    "tri_like",
    lambda like, n, m, k, dtype: array_module(like).tri(n, m, k, dtype=dtype),
    lambda like, n, m, k, dtype: ShapedArray((n, m), dtype), nondiff=True,
    family=FAMILY)
tri_like_p.batch = lambda args, dims, **params: (tri_like_p.bind(args[0], **params),
                                                 None)


def leading_batch_rule(prim):
    """Batching for a primitive batched over leading axes (as NumPy's linalg):
    each mapped operand's batch axis goes first, padded with length-1 axes so it
    lines up across operands with different numbers of batch dimensions; every
    output then has it first."""

    def rule(args, dims, **params):
        rank = max(unbatched_ndim(x, d) for x, d in zip(args, dims))
        size = next(get_aval(x).shape[d] for x, d in zip(args, dims) if d is not None)
        moved = [x if d is None else batch_to_front(x, d, size, rank)
                 for x, d in zip(args, dims)]
        out = prim.bind(*moved, **params)
        return out, ((0,) * len(out) if prim.multiple_results else 0)
    prim.batch = rule


# ---------------------------------------------------------------------------
# solve
# ---------------------------------------------------------------------------

def _solve_abstract(a, b):
    _square_abstract("solve")(a)
    if b.ndim < 2 or b.shape[-2] != a.shape[-1]:
        raise ValueError(f"solve: b of shape {b.shape} does not match a of shape "
                         f"{a.shape} (expected (..., {a.shape[-1]}, k))")
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return ShapedArray(batch + b.shape[-2:], _float_dtype(a, b))


solve_p = Primitive("solve", lambda a, b: array_module(a, b).linalg.solve(a, b),
                    _solve_abstract, family=FAMILY)


def _solve_vjp(ct, ans, needed, a, b):
    ct_b = solve(_T(a), ct)
    ct_a = unbroadcast(-matmul(ct_b, _T(ans)), a) if needed[0] else None
    return ct_a, unbroadcast(ct_b, b) if needed[1] else None


def _solve_jvp(tangents, ans, a, b):
    t_a, t_b = tangents
    rhs = None if _is_zero(t_b) else t_b
    if not _is_zero(t_a):
        term = -matmul(t_a, ans)
        rhs = term if rhs is None else rhs + term
    return cast_like(solve(a, rhs), get_aval(ans))


solve_p.def_vjp_joint(_solve_vjp)
solve_p.def_jvp_joint(_solve_jvp)
leading_batch_rule(solve_p)


def solve(a, b):
    """``a^-1 b`` for ``a`` (..., n, n) and ``b`` (..., n, k), batch-broadcast.

    ``a`` is factored once (``solve_factors_p``) and the factors are kept, so
    the derivative's solves (``a^-T ct`` backward, ``a^-1 da x`` forward) reuse
    them instead of factoring ``a`` again. Rules solve through this function
    whether their values are traced or not, so a sweep staged and compiled
    computes what the same sweep run eagerly does; `fgrad.numpy.linalg.solve`
    binds ``solve_p`` (NumPy's own solve) outside transformations.
    """
    dtype = ShapedArray((), _float_dtype(get_aval(a), get_aval(b)))
    a, b = cast_like(a, dtype), cast_like(b, dtype)
    lu, piv = solve_factors_p.bind(a)
    return factored_solve_p.bind(a, lu, piv, b, transpose=False)


# ---------------------------------------------------------------------------
# solve_factors, factored_solve: solve with factors kept for the derivative
# ---------------------------------------------------------------------------

# Filled once, when `fgrad.compiler.lu_kernels` is imported (the compiler owns
# compiled code): "factor" and "solve" on NumPy arrays of the "dtypes" listed.
# Without them (no llvmlite or SciPy, or another backend) the factors are a copy
# of the matrix and each solve factors it again. Nothing else writes here.
_LU_KERNELS = {}


def register_lu_kernels(factor, solve, dtypes):
    """Install the NumPy backend's kept-LU kernels: ``factor(a) -> (lu, piv)``
    and ``solve(lu, piv, b, transpose)``, for arrays of ``dtypes``."""
    _LU_KERNELS.update(factor=factor, solve=solve, dtypes=frozenset(dtypes))


def lu_kept(x):
    """Whether ``solve_factors_p`` of ``x`` (or ``factored_solve_p`` with factors
    ``x``) runs the LU kernels of `register_lu_kernels`; if not, the factors
    are a copy of the matrix.

    >>> lu_kept(np.eye(2)) in (True, False)
    True
    """
    return isinstance(x, np.ndarray) and x.dtype in _LU_KERNELS.get("dtypes", ())


def _solve_factors_impl(a):
    if lu_kept(a):
        return _LU_KERNELS["factor"](a)
    xp = array_module(a)
    return xp.array(a, copy=True), xp.zeros(a.shape[:-1], np.int32)


def _solve_factors_abstract(a):
    _square_abstract("solve_factors")(a)
    return ShapedArray(a.shape, a.dtype), ShapedArray(a.shape[:-1], np.dtype(np.int32))


# The factors are a residual, not a differentiable value: `factored_solve_p`
# differentiates through its matrix operand and reads the factors it is given.
solve_factors_p = Primitive("solve_factors", _solve_factors_impl,
                            _solve_factors_abstract, multiple_results=True, nondiff=True,
                            family=FAMILY)
leading_batch_rule(solve_factors_p)


def _factored_solve_impl(a, lu, piv, b, transpose):
    if lu_kept(lu):
        return _LU_KERNELS["solve"](lu, piv, b, transpose)
    xp = array_module(lu, b)
    return xp.linalg.solve(xp.swapaxes(lu, -1, -2) if transpose else lu, b)


def _factored_solve_abstract(a, lu, piv, b, transpose):
    return _solve_abstract(a, b)


factored_solve_p = Primitive("factored_solve", _factored_solve_impl,
                             _factored_solve_abstract, family=FAMILY)


def factored_solve(a, lu, piv, b, transpose=False):
    """``a^-1 b`` (``a^-T b`` with ``transpose``), where ``(lu, piv)`` are
    ``solve_factors_p``'s factors of ``a``. Differentiable in ``a`` and ``b``; the
    derivative's solves use the same factors.
    """
    return factored_solve_p.bind(a, lu, piv, b, transpose=transpose)


def _factored_solve_vjp(ct, ans, needed, a, lu, piv, b, transpose):
    ct_b = factored_solve(a, lu, piv, ct, not transpose)
    ct_a = None
    if needed[0]:
        # x = a^-1 b: ct_a = -ct_b x^T; x = a^-T b: ct_a = -x ct_b^T
        ct_a = -(matmul(ans, _T(ct_b)) if transpose else matmul(ct_b, _T(ans)))
        ct_a = unbroadcast(ct_a, a)
    return ct_a, None, None, unbroadcast(ct_b, b) if needed[3] else None


def _factored_solve_jvp(tangents, ans, a, lu, piv, b, transpose):
    t_a, t_b = tangents[0], tangents[3]
    rhs = None if _is_zero(t_b) else t_b
    if not _is_zero(t_a):
        term = -matmul(_T(t_a) if transpose else t_a, ans)
        rhs = term if rhs is None else rhs + term
    return cast_like(factored_solve(a, lu, piv, rhs, transpose), get_aval(ans))


def _factored_solve_batch(args, dims, transpose):
    # as `leading_batch_rule`, with the pivots one axis short of the matrices
    core = (2, 2, 1, 2)
    lead = max(unbatched_ndim(x, d) - c for x, d, c in zip(args, dims, core))
    size = next(get_aval(x).shape[d] for x, d in zip(args, dims) if d is not None)
    moved = [batch_to_front(x, d, size, lead + c) for x, d, c in zip(args, dims, core)]
    return factored_solve_p.bind(*moved, transpose=transpose), 0


factored_solve_p.def_vjp_joint(_factored_solve_vjp,
                              reads=[{0, 1, 2, "ans"}, set(), set(), {0, 1, 2}])
factored_solve_p.def_jvp_joint(_factored_solve_jvp)
factored_solve_p.batch = _factored_solve_batch


# ---------------------------------------------------------------------------
# inv, det, slogdet
# ---------------------------------------------------------------------------

def _inv_abstract(a):
    _square_abstract("inv")(a)
    return ShapedArray(a.shape, _float_dtype(a))


inv_p = Primitive("inv", lambda a: array_module(a).linalg.inv(a), _inv_abstract,
                  family=FAMILY)
inv_p.def_vjp(lambda ct, ans, a: cast_like(-matmul(_T(ans), matmul(ct, _T(ans))),
                                            get_aval(a)))
inv_p.def_jvp(lambda t, ans, a: -matmul(ans, matmul(t, ans)))
leading_batch_rule(inv_p)


def inv(a):
    """The inverse of each square matrix in ``a``."""
    return inv_p.bind(a)


def _det_abstract(a):
    _square_abstract("det")(a)
    return ShapedArray(a.shape[:-2], _float_dtype(a))


det_p = Primitive("det", lambda a: array_module(a).linalg.det(a), _det_abstract,
                  family=FAMILY)
# d det = det * tr(a^-1 da): exact for invertible a
det_p.def_vjp(lambda ct, ans, a: cast_like(
    expand_dims(ct * ans, (-2, -1)) * _T(inv(a)), get_aval(a)))
det_p.def_jvp(lambda t, ans, a: ans * _trace(solve(a, t)))
leading_batch_rule(det_p)


def det(a):
    """The determinant of each square matrix in ``a``."""
    return det_p.bind(a)


def _slogdet_abstract(a):
    _square_abstract("slogdet")(a)
    dtype = _float_dtype(a)
    return (ShapedArray(a.shape[:-2], dtype),
            ShapedArray(a.shape[:-2], real_dtype(dtype)))


def _slogdet_impl(a):
    sign, logabsdet = array_module(a).linalg.slogdet(a)
    return sign, logabsdet


slogdet_p = Primitive("slogdet", _slogdet_impl, _slogdet_abstract,
                      multiple_results=True, family=FAMILY)


# d log|det| = re(tr(a^-1 da)); for complex a the sign turns too:
# d sign = sign * 1j * im(tr(a^-1 da)). Both are re-linear in tr, whose
# transpose is ct -> ct * a^-T.
def _slogdet_vjp(ct, ans, needed, a):
    sign = ans[0]
    ct_sign, ct_logdet = ct
    scale = None if _is_zero(ct_logdet) else ct_logdet
    if _is_complex(a) and not _is_zero(ct_sign):
        term = 1j * imag(ct_sign * sign)
        scale = term if scale is None else scale + term
    if scale is None:                         # a real sign is locally constant
        return (None,)
    return (cast_like(expand_dims(scale, (-2, -1)) * _T(inv(a)), get_aval(a)),)


def _slogdet_jvp(tangents, ans, a):
    tr = _trace(solve(a, tangents[0]))
    if not _is_complex(a):
        return Zero(get_aval(ans[0])), tr
    return ans[0] * (1j * imag(tr)), real(tr)


slogdet_p.def_vjp_joint(_slogdet_vjp)
slogdet_p.def_jvp_joint(_slogdet_jvp)
leading_batch_rule(slogdet_p)


def slogdet(a):
    """``(sign, log|det|)`` of each square matrix in ``a``."""
    return slogdet_p.bind(a)


# ---------------------------------------------------------------------------
# cholesky
# ---------------------------------------------------------------------------

def _cholesky_abstract(a):
    _square_abstract("cholesky")(a)
    return ShapedArray(a.shape, _float_dtype(a))


cholesky_p = Primitive("cholesky", lambda a: array_module(a).linalg.cholesky(a),
                       _cholesky_abstract, family=FAMILY)


def _phi(x):
    # the lower triangle with its diagonal halved
    return x * (_tril_mask(x) - 0.5 * _eye(x))


def _cholesky_vjp(ct, ans, a):
    # Murray (2016), "Differentiation of the Cholesky decomposition", as the
    # transpose of the JVP below: S = L^-T phi(L^T ct) conj(L)^-1, then
    # projected onto Hermitian matrices (the input is assumed Hermitian).
    y = solve(_T(ans), _phi(matmul(_T(ans), ct)))
    s = _T(solve(conj_transpose(ans), _T(y)))
    return cast_like(0.5 * (s + conj_transpose(s)), get_aval(a))


def _cholesky_jvp(t, ans, a):
    inner = conj_transpose(solve(ans, conj_transpose(solve(ans, t))))        # L^-1 da L^-H
    return matmul(ans, _phi(inner))


cholesky_p.def_vjp(_cholesky_vjp)
cholesky_p.def_jvp(_cholesky_jvp)
leading_batch_rule(cholesky_p)


def cholesky(a):
    """Lower Cholesky factor of each (symmetric positive definite) matrix."""
    return cholesky_p.bind(a)


# ---------------------------------------------------------------------------
# qr (reduced)
# ---------------------------------------------------------------------------

def _qr_abstract(a):
    if a.ndim < 2:
        raise ValueError(f"qr: expected a (..., m, n) array, got shape {a.shape}")
    m, n = a.shape[-2:]
    k = min(m, n)
    dtype = _float_dtype(a)
    return (ShapedArray(a.shape[:-2] + (m, k), dtype),
            ShapedArray(a.shape[:-2] + (k, n), dtype))


def _qr_impl(a):
    q, r = array_module(a).linalg.qr(a, mode="reduced")
    return q, r


qr_p = Primitive("qr", _qr_impl, _qr_abstract, multiple_results=True, family=FAMILY)


# For square or tall a: with C = q^H da r^-1 (C = omega + upper triangular,
# omega = q^H dq skew-Hermitian), omega's strict lower triangle is C's and its
# diagonal is i im(diag C), which keeps r's diagonal real as LAPACK returns it.
# The VJP is this JVP transposed, step by step.

def _qr_square_jvp(q, r, da):
    dx_rinv = _T(solve(_T(r), _T(da)))               # da r^-1
    c = matmul(conj_transpose(q), dx_rinv)
    low = _tril(c, -1)
    omega = low - conj_transpose(low)
    if _is_complex(c):
        omega = omega + (c - real(c)) * _eye(c)
    return matmul(q, omega - c) + dx_rinv, matmul(c - omega, r)


def _qr_square_vjp(q, r, ct_q, ct_r):
    ct_omega = None
    if not _is_zero(ct_q):
        ct_omega = matmul(_T(q), ct_q)
    if not _is_zero(ct_r):
        term = -matmul(ct_r, _T(r))
        ct_omega = term if ct_omega is None else ct_omega + term
    ct_c = _tril(ct_omega - conj_transpose(ct_omega), -1) - ct_omega
    if _is_complex(ct_c):
        ct_c = ct_c + (ct_omega - real(ct_omega)) * _eye(ct_c)
    ct_x = matmul(_conj(q), ct_c)
    if not _is_zero(ct_q):
        ct_x = ct_x + ct_q
    return _T(solve(r, _T(ct_x)))                    # ct_x r^-T


def _qr_split(a, r):
    """``(x, y, r_x)``: the first m columns of the m x n ``a``, the rest, and
    the first m columns of ``r``."""
    m, n = get_aval(a).shape[-2:]
    last = get_aval(a).ndim - 1
    return (slice_axis(a, last, 0, m), slice_axis(a, last, m, n),
            slice_axis(r, last, 0, m))


def _qr_vjp(ct, ans, needed, a):
    q, r = ans
    ct_q, ct_r = ct
    m, n = get_aval(a).shape[-2:]
    if m >= n:
        return (cast_like(_qr_square_vjp(q, r, ct_q, ct_r), get_aval(a)),)
    # r = [r_x | q^H y]: y's cotangent is conj(q) ct_ry, and q's gains
    # conj(y) ct_ry^H; x's is then that of the square qr of x
    last = get_aval(a).ndim - 1
    _, y, r_x = _qr_split(a, r)
    if _is_zero(ct_r):
        ct_rx, ct_y = None, zeros_like(y)        # a block of the one cotangent
    else:
        ct_rx = slice_axis(ct_r, last, 0, m)
        ct_ry = slice_axis(ct_r, last, m, n)
        extra = matmul(_conj(y), conj_transpose(ct_ry))
        ct_q = extra if _is_zero(ct_q) else ct_q + extra
        ct_y = matmul(_conj(q), ct_ry)
    ct_x = _qr_square_vjp(q, r_x, ct_q, ct_rx)
    return (cast_like(concatenate([ct_x, ct_y], last), get_aval(a)),)


def _qr_jvp(tangents, ans, a):
    q, r = ans
    da = tangents[0]
    m, n = get_aval(a).shape[-2:]
    if m >= n:
        return _qr_square_jvp(q, r, da)
    last = get_aval(a).ndim - 1
    _, y, r_x = _qr_split(a, r)
    dq, dr_x = _qr_square_jvp(q, r_x, slice_axis(da, last, 0, m))
    dr_y = matmul(conj_transpose(dq), y) + matmul(conj_transpose(q), slice_axis(da, last, m, n))
    return dq, concatenate([dr_x, dr_y], last)


qr_p.def_vjp_joint(_qr_vjp)
qr_p.def_jvp_joint(_qr_jvp)
leading_batch_rule(qr_p)


def qr(a):
    """Reduced QR decomposition ``(q, r)`` of each matrix in ``a``.

    >>> import numpy as np
    >>> qr(np.eye(2))[1].shape
    (2, 2)
    """
    return qr_p.bind(a)


# ---------------------------------------------------------------------------
# eigh (symmetric)
# ---------------------------------------------------------------------------

def _eigh_abstract(a):
    _square_abstract("eigh")(a)
    dtype = _float_dtype(a)
    return ShapedArray(a.shape[:-1], real_dtype(dtype)), ShapedArray(a.shape, dtype)


def _eigh_impl(a):
    w, v = array_module(a).linalg.eigh(a)
    return w, v


eigh_p = Primitive("eigh", _eigh_impl, _eigh_abstract, multiple_results=True,
                   family=FAMILY)


def inverse_gaps(w):
    # F[i, j] = 1 / (w[j] - w[i]) off the diagonal, 0 on it. Infinite for
    # repeated eigenvalues: the documented degenerate-spectrum limitation.
    eye = _eye(expand_dims(w, -1) * expand_dims(w, -2))
    gaps = expand_dims(w, -2) - expand_dims(w, -1)
    return (1 - eye) / (gaps + eye)


# With X = v^H da v: dw = re(diag X), dv = v (F * X) (so v^H dv has a zero
# diagonal: the phase convention). The VJP is its transpose.
def _eigh_vjp(ct, ans, needed, a):
    w, v = ans
    ct_w, ct_v = ct
    inner = None
    if not _is_zero(ct_w):
        inner = diag_embed(ct_w)
    if not _is_zero(ct_v):
        term = inverse_gaps(w) * matmul(_T(v), ct_v)
        inner = term if inner is None else inner + term
    return (cast_like(matmul(_conj(v), matmul(inner, _T(v))), get_aval(a)),)


def _eigh_jvp(tangents, ans, a):
    w, v = ans
    vh_da_v = matmul(conj_transpose(v), matmul(tangents[0], v))
    dw = matrix_diagonal(vh_da_v)
    return (real(dw) if _is_complex(dw) else dw), matmul(v, inverse_gaps(w) * vh_da_v)


eigh_p.def_vjp_joint(_eigh_vjp)
eigh_p.def_jvp_joint(_eigh_jvp)
leading_batch_rule(eigh_p)


def eigh(a):
    """Eigenvalues (ascending) and eigenvectors of Hermitian (symmetric) matrices.

    >>> import numpy as np
    >>> eigh(np.diag([2.0, 1.0]))[0]
    array([1., 2.])
    """
    return eigh_p.bind(a)


# ---------------------------------------------------------------------------
# svd
# ---------------------------------------------------------------------------

def _svd_abstract(a, full_matrices):
    if a.ndim < 2:
        raise ValueError(f"svd: expected a (..., m, n) array, got shape {a.shape}")
    m, n = a.shape[-2:]
    k = min(m, n)
    dtype = _float_dtype(a)
    batch = a.shape[:-2]
    mu, nv = (m, n) if full_matrices else (k, k)
    return (ShapedArray(batch + (m, mu), dtype),
            ShapedArray(batch + (k,), real_dtype(dtype)),
            ShapedArray(batch + (nv, n), dtype))


def _svd_impl(a, full_matrices):
    u, s, vh = array_module(a).linalg.svd(a, full_matrices=full_matrices)
    return u, s, vh


svd_p = Primitive("svd", _svd_impl, _svd_abstract, multiple_results=True,
                  family=FAMILY)


def _svd_parts(s):
    s_row = expand_dims(s, -2)                 # s[j] along columns
    s_col = expand_dims(s, -1)                 # s[i] along rows
    eye = _eye(s_row * s_col)
    # F[i, j] = 1 / (s[j]^2 - s[i]^2): infinite for repeated singular values
    f = (1 - eye) / ((s_row + s_col) * (s_row - s_col) + eye)
    return s_row, s_col, f


def _svd_thin(u, vh, a, full_matrices):
    """``(u1, u2, vh1, vh2)``: the thin factors and the extra columns of ``u``
    (rows of ``vh``) that ``full_matrices=True`` adds to a rectangular ``a``
    (None when there are none)."""
    m, n = get_aval(a).shape[-2:]
    k = min(m, n)
    last = get_aval(a).ndim - 1
    u2 = vh2 = None
    if full_matrices and m > n:
        u, u2 = slice_axis(u, last, 0, k), slice_axis(u, last, k, m)
    if full_matrices and n > m:
        vh, vh2 = slice_axis(vh, last - 1, 0, k), slice_axis(vh, last - 1, k, n)
    return u, u2, vh, vh2


# The thin JVP (as JAX's): with dS = u^H da v, ds = re(diag dS),
#   du = u (F * (dS s + (dS s)^H) + i im(diag dS) / s) + (I - u u^H) da v / s
#   dv = v (F * (s dS + (s dS)^H)) + (I - v v^H) da^H u / s
# the last terms only when m > n (resp. n > m). The complement u2 of
# full_matrices=True turns with the thin part and no further:
#   du2 = -u du^H u2 = -u s^-1 vh da^H u2,   dvh2 = -vh2 da^H u s^-1 vh.
# The VJP transposes each term.

def _svd_vjp(ct, ans, needed, a, full_matrices):
    u, s, vh = ans
    ct_u, ct_s, ct_vh = ct
    m, n = get_aval(a).shape[-2:]
    k = min(m, n)
    last = get_aval(a).ndim - 1
    u, u2, vh, vh2 = _svd_thin(u, vh, a, full_matrices)
    ct_u2 = ct_vh2 = None
    if u2 is not None and not _is_zero(ct_u):
        ct_u, ct_u2 = slice_axis(ct_u, last, 0, k), slice_axis(ct_u, last, k, m)
    if vh2 is not None and not _is_zero(ct_vh):
        ct_vh, ct_vh2 = (slice_axis(ct_vh, last - 1, 0, k),
                         slice_axis(ct_vh, last - 1, k, n))
    s_row, s_col, f = _svd_parts(s)
    ct_ds = diag_embed(ct_s) if not _is_zero(ct_s) else None
    extra = None

    def add(total, term):
        return term if total is None else total + term

    if not _is_zero(ct_u):
        ut_ct = matmul(_T(u), ct_u)
        x = f * ut_ct
        ct_ds = add(ct_ds, (x + conj_transpose(x)) * s_row)
        if _is_complex(ut_ct):
            ct_ds = add(ct_ds, diag_embed(1j * imag(matrix_diagonal(ut_ct)) / s))
        if m > n:
            z = ct_u / s_row
            extra = add(extra, matmul(z - matmul(_conj(u), matmul(_T(u), z)),
                                      _conj(vh)))
    if not _is_zero(ct_vh):
        ct_v = conj_transpose(ct_vh)
        y = f * matmul(_conj(vh), ct_v)
        ct_ds = add(ct_ds, s_col * (y + conj_transpose(y)))
        if n > m:
            w = ct_v / s_row
            extra = add(extra, matmul(_conj(u), conj_transpose(
                w - matmul(_T(vh), matmul(_conj(vh), w)))))
    if ct_u2 is not None:
        term = matmul(_conj(u2), matmul(conj_transpose(ct_u2), _conj(u)))
        extra = add(extra, -matmul(term / s_row, _conj(vh)))
    if ct_vh2 is not None:
        term = matmul(_conj(vh), matmul(conj_transpose(ct_vh2), _conj(vh2)))
        extra = add(extra, -matmul(_conj(u) / s_row, term))
    ct_a = matmul(_conj(u), matmul(ct_ds, _conj(vh))) if ct_ds is not None else None
    if extra is not None:
        ct_a = extra if ct_a is None else ct_a + extra
    return (cast_like(ct_a, get_aval(a)),)


def _svd_jvp(tangents, ans, a, full_matrices):
    u, s, vh = ans
    da = tangents[0]
    m, n = get_aval(a).shape[-2:]
    last = get_aval(a).ndim - 1
    u, u2, vh, vh2 = _svd_thin(u, vh, a, full_matrices)
    v = conj_transpose(vh)
    s_row, s_col, f = _svd_parts(s)
    ds_mat = matmul(conj_transpose(u), matmul(da, v))
    ds = matrix_diagonal(ds_mat)
    dss = ds_mat * s_row
    sds = s_col * ds_mat
    inner_u = f * (dss + conj_transpose(dss))
    if _is_complex(ds_mat):
        inner_u = inner_u + diag_embed(1j * imag(ds) / s)
        ds = real(ds)
    du = matmul(u, inner_u)
    dv = matmul(v, f * (sds + conj_transpose(sds)))
    if m > n:
        dav = matmul(da, v)
        du = du + (dav - matmul(u, matmul(conj_transpose(u), dav))) / s_row
    if n > m:
        dahu = matmul(conj_transpose(da), u)
        dv = dv + (dahu - matmul(v, matmul(vh, dahu))) / s_row
    dvh = conj_transpose(dv)
    if u2 is not None:
        du2 = -matmul(u / s_row, matmul(vh, matmul(conj_transpose(da), u2)))
        du = concatenate([du, du2], last)
    if vh2 is not None:
        dvh2 = -matmul(matmul(vh2, matmul(conj_transpose(da), u)) / s_row, vh)
        dvh = concatenate([dvh, dvh2], last - 1)
    return du, ds, dvh


svd_p.def_vjp_joint(_svd_vjp)
svd_p.def_jvp_joint(_svd_jvp)
leading_batch_rule(svd_p)


def svd(a, full_matrices=False):
    """``(u, s, vh)`` of each matrix in ``a``.

    >>> import numpy as np
    >>> svd(np.diag([1.0, 3.0]))[1]
    array([3., 1.])
    """
    return svd_p.bind(a, full_matrices=bool(full_matrices))


# ---------------------------------------------------------------------------
# pinv
# ---------------------------------------------------------------------------

def _pinv_abstract(a, rcond, hermitian):
    if a.ndim < 2:
        raise ValueError(f"pinv: expected a (..., m, n) array, got shape {a.shape}")
    return ShapedArray(a.shape[:-2] + (a.shape[-1], a.shape[-2]), _float_dtype(a))


def _pinv_impl(a, rcond, hermitian):
    xp = array_module(a)
    if rcond is None:
        return xp.linalg.pinv(a, hermitian=hermitian)
    return xp.linalg.pinv(a, rcond=rcond, hermitian=hermitian)


pinv_p = Primitive("pinv", _pinv_impl, _pinv_abstract, family=FAMILY)


def _pinv_jvp(t, ans, a, rcond, hermitian):
    # Golub & Pereyra (1973), valid where the rank is locally constant:
    # dP = -P dA P + P P^T dA^T (I - A P) + (I - P A) dA^T P^T P
    p = ans
    term = -matmul(p, matmul(t, p))
    left = matmul(matmul(p, _T(p)), _T(t))
    term = term + left - matmul(left, matmul(a, p))
    right = matmul(_T(t), matmul(_T(p), p))
    return term + right - matmul(p, matmul(a, right))


def _pinv_vjp(ct, ans, a, rcond, hermitian):
    p = ans
    out = -matmul(_T(p), matmul(ct, _T(p)))
    ppt = matmul(p, _T(p))
    ct_t = _T(ct)
    left = matmul(ct_t, ppt)                       # (I - A P) ct^T P P^T
    out = out + left - matmul(a, matmul(p, left))
    ptp = matmul(_T(p), p)
    right = matmul(ptp, ct_t)                      # P^T P ct^T (I - P A)
    out = out + right - matmul(matmul(right, p), a)
    return cast_like(out, get_aval(a))


pinv_p.def_vjp(_pinv_vjp)
pinv_p.def_jvp(_pinv_jvp)
leading_batch_rule(pinv_p)


def pinv(a, rcond=None, hermitian=False):
    """Moore-Penrose pseudo-inverse of each matrix in ``a``."""
    return pinv_p.bind(a, rcond=None if rcond is None else float(rcond),
                       hermitian=bool(hermitian))


# Families use each other's functions in their rules; importing them last
# makes the cycle harmless (every name above exists by then).
from fgrad.primitives.creation import zeros_like  # noqa: E402
