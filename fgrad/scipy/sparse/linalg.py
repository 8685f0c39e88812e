"""``scipy.sparse.linalg`` with derivatives: direct solves, iterative solves, eigsh.

The matrix may be an `fgrad.sparse` array with traced values or a constant
``scipy.sparse`` array; the right-hand side may be traced. Derivatives never
differentiate the solver's steps:

- ``spsolve``, ``splu`` and ``factorized`` factorize once with SuperLU; the
  reverse sweep solves the adjoint system with the same factor
  (``trans='T'``), so a value and its gradient cost one factorization and two
  triangular solves.
- ``cg``, ``gmres``, ``bicgstab`` and ``minres`` run SciPy's solver on the host
  (through `fgrad.pure_callback`, so under `jit` too) inside
  `fgrad.lax.custom_linear_solve`: the derivative is one more solve of the
  same kind (with the transpose for ``gmres`` and ``bicgstab``), never the
  iterations. A solve that stops short of its tolerance raises
  `fgrad.errors.ConvergenceError` (SciPy returns ``info > 0``): its result is
  not the solution whose derivative would be computed.
- ``eigsh`` differentiates its eigenvalues (``dλ = vᵀ dA v`` at the stored
  entries); derivatives through the eigenvectors are refused.
"""
import functools as _functools

import numpy as _np

from fgrad.core.errors import ConvergenceError as _ConvergenceError
from fgrad.core.errors import SparseShapeError as _SparseShapeError
from fgrad.core.trace import ShapedArray as _ShapedArray
from fgrad.core.trace import get_aval as _get_aval
from fgrad.primitives.callback import pure_callback as _pure_callback
from fgrad.primitives.creation import stop_gradient as _stop_gradient
from fgrad.primitives import sparse as _sparse
from fgrad.sparse import as_sparse as _as_sparse
from fgrad.sparse import issparse as _issparse
from fgrad.sparse.arrays import compress as _compress
from fgrad.sparse.jacobian import Colouring as _Colouring
from fgrad.transforms.linear_solve import custom_linear_solve as _custom_linear_solve


def _square(A, name):
    A = _as_sparse(A)
    if A.shape[0] != A.shape[1]:
        raise _SparseShapeError(f"{name}: the matrix must be square, got shape {A.shape}")
    return A


def _dense_rhs(b, name):
    if _issparse(b):
        raise _SparseShapeError(f"{name}: a sparse right-hand side is not supported: pass "
                                "b.todense()")
    return b if hasattr(b, "dtype") or hasattr(b, "aval") else _np.asarray(b)


class SuperLU:
    """The LU factorization of a sparse matrix, made by `splu`: SciPy's
    ``SuperLU`` whose ``solve`` differentiates with respect to the matrix's
    values and the right-hand side, reusing this one factorization.

    >>> import numpy as np, scipy.sparse
    >>> lu = splu(scipy.sparse.diags_array([2.0, 4.0]).tocsc())
    >>> lu.solve(np.array([2.0, 4.0]))
    array([1., 1.])
    """

    def __init__(self, A, options=()):
        self._A = A
        self._factor = _sparse.splu(A.data, A.structure, options)

    shape = property(lambda self: self._A.shape)

    def solve(self, rhs, trans="N"):
        """The solution ``x`` of ``A x = rhs`` (``trans='T'`` or ``'H'``:
        ``Aᵀ x = rhs``; the matrices here are real)."""
        if trans not in ("N", "T", "H"):
            raise ValueError(f"trans must be 'N', 'T' or 'H', got {trans!r}")
        return _sparse.lu_solve(self._factor, self._A.data, _dense_rhs(rhs, "solve"),
                                self._A.structure, trans != "N")


def splu(A, permc_spec=None, diag_pivot_thresh=None, relax=None, panel_size=None,
         options=None):
    """The sparse LU factorization of ``A`` (SciPy's ``splu``), as a `SuperLU`
    object usable inside a differentiated function.

    >>> import numpy as np, fgrad, scipy.sparse
    >>> A = scipy.sparse.csc_array(np.array([[2.0, 1.0], [0.0, 4.0]]))
    >>> fgrad.grad(lambda b: splu(A).solve(b).sum())(np.array([1.0, 1.0]))
    array([0.5  , 0.125])
    """
    settings = {"permc_spec": permc_spec, "diag_pivot_thresh": diag_pivot_thresh,
                "relax": relax, "panel_size": panel_size,
                "options": None if options is None else tuple(sorted(options.items()))}
    return SuperLU(_square(A, "splu"),
                   tuple((k, v) for k, v in settings.items() if v is not None))


def factorized(A):
    """A function solving ``A x = b``, factorizing ``A`` once (SciPy's ``factorized``).

    >>> import numpy as np, scipy.sparse
    >>> solve = factorized(scipy.sparse.diags_array([2.0, 4.0]).tocsc())
    >>> solve(np.array([2.0, 4.0]))
    array([1., 1.])
    """
    return splu(A).solve


def spsolve(A, b, permc_spec=None, use_umfpack=True):
    """The solution of ``A x = b`` by SuperLU (SciPy's ``spsolve``), differentiable
    with respect to ``A``'s values and ``b``: the gradient reuses the forward
    factorization. A singular ``A`` raises `fgrad.errors.SingularMatrixError`
    (SciPy warns and returns NaN).

    >>> import numpy as np, fgrad, fgrad.sparse
    >>> A = fgrad.sparse.csr_array(np.array([[4.0, 1.0], [1.0, 3.0]]))
    >>> g = fgrad.grad(lambda A: spsolve(A, np.array([1.0, 2.0])).sum())(A)
    >>> type(g).__name__, g.data.shape
    ('csr_array', (4,))
    """
    return splu(A, permc_spec=permc_spec).solve(b)


def eigsh(A, k=6, M=None, sigma=None, which="LM", v0=None, ncv=None, maxiter=None,
          tol=0, return_eigenvectors=True, Minv=None, OPinv=None, mode="normal"):
    """``k`` eigenvalues and eigenvectors of the symmetric ``A`` (SciPy's
    ``eigsh``, by ARPACK), eigenvalues in ascending order. Derivatives reach
    distinct eigenvalues; a derivative through the eigenvectors raises
    `fgrad.errors.LinalgDerivativeError` (reverse mode) or is NaN (forward).

    >>> import numpy as np, fgrad, fgrad.sparse
    >>> values = np.array([1.0, 2.0, 3.0, 4.0])
    >>> top = lambda d: eigsh(fgrad.sparse.diags_array(d), k=1, which="LA")[0].sum()
    >>> fgrad.grad(top)(values).round(6)
    array([0., 0., 0., 1.])
    """
    for name, value in (("M", M), ("v0", v0), ("Minv", Minv), ("OPinv", OPinv)):
        if value is not None:
            raise NotImplementedError(f"fgrad's eigsh does not take {name}: the standard "
                                      "problem A v = w v only")
    options = {"sigma": sigma, "which": which, "ncv": ncv, "maxiter": maxiter, "tol": tol,
               "mode": None if mode == "normal" else mode}
    A = _square(A, "eigsh")
    w, v = _sparse.eigsh(A.data, A.structure, k,
                         tuple((key, val) for key, val in options.items() if val is not None))
    return (w, v) if return_eigenvectors else w




# -- iterative solves ------------------------------------------------------------------

def _host_solve(name, structure, options, data, rhs, x0=None):
    """SciPy's iterative solver ``name`` on host arrays; non-convergence raises."""
    import scipy.sparse.linalg
    A = structure.matrix(data)
    x, info = getattr(scipy.sparse.linalg, name)(A, rhs, x0=x0, **options)
    if info != 0:
        residual = _np.linalg.norm(rhs - A @ x) / max(_np.linalg.norm(rhs), 1e-300)
        what = (f"stopped after {info} iterations" if info > 0
                else f"reported a breakdown or illegal input (info={info})")
        raise _ConvergenceError(
            f"{name}: {what} with relative residual {residual:.3g}, short of its "
            f"tolerance on the {structure} system: raise maxiter, loosen rtol/atol, or "
            "pass a preconditioner M")
    return x.astype(_np.result_type(data.dtype, rhs.dtype, _np.float32), copy=False)


def _iterative(name, A, b, x0, options, symmetric):
    A = _square(A, name)
    b = _dense_rhs(b, name)
    data, structure = A.data, A.structure
    aval = _get_aval(b)
    if aval.shape != (structure.shape[0],):
        raise _SparseShapeError(f"{name}: the right-hand side of a {structure.shape[0]}x"
                                f"{structure.shape[0]} system is a vector of "
                                f"{structure.shape[0]}, got shape {aval.shape}")
    dtype = _np.result_type(_get_aval(data).dtype, aval.dtype, _np.float32)
    result = _ShapedArray(aval.shape, dtype)
    # custom_linear_solve hands each solve the linear map alone (the forward
    # one, or its transpose for the reverse sweep, at whatever values the rules
    # have); the host solver needs the matrix, whose values a few products
    # with coloured seed vectors recover exactly
    canonical = _compress(structure, "csr")[0] if structure.format == "coo" else structure
    colourings = {}

    def on_host(pattern, x0, user_options):
        def solve(linear, rhs):
            if pattern not in colourings:
                colourings[pattern] = _Colouring(pattern)
            values = colourings[pattern].values(linear, dtype)
            extra = () if x0 is None else (_stop_gradient(x0),)
            return _pure_callback(
                _functools.partial(_host_solve, name, pattern, user_options), result,
                values, rhs, *extra)
        return solve
    # the derivative's solves start from zero and report nothing to the user
    quiet = {k: v for k, v in options.items() if k != "callback"}
    x = _custom_linear_solve(
        lambda x: _sparse.sparse_matmul(data, x, structure), b,
        on_host(canonical, x0, options),
        transpose_solve=None if symmetric else on_host(canonical.T, None, quiet),
        symmetric=symmetric)
    return x, 0


def cg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None):
    """Conjugate gradients for a symmetric positive definite ``A`` (SciPy's ``cg``):
    ``(x, 0)``, differentiable with respect to ``A``'s values and ``b`` by one
    more CG solve. Non-convergence raises `fgrad.errors.ConvergenceError`.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp, scipy.sparse
    >>> A = scipy.sparse.diags_array([-1.0, 4.0, -1.0], offsets=[-1, 0, 1], shape=(5, 5))
    >>> g = fgrad.grad(lambda b: fnp.sum(cg(A, b, rtol=1e-12)[0]))(np.ones(5))
    >>> np.allclose(g, scipy.sparse.linalg.spsolve(A.tocsc(), np.ones(5)))
    True
    """
    return _iterative("cg", A, b, x0, dict(rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                                           callback=callback), symmetric=True)


def bicgstab(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None):
    """BiCGSTAB for a general square ``A`` (SciPy's ``bicgstab``): ``(x, 0)``; the
    reverse derivative solves with ``A.T``.

    >>> import numpy as np, scipy.sparse
    >>> A = scipy.sparse.diags_array([-1.0, 4.0, -2.0], offsets=[-1, 0, 1], shape=(4, 4))
    >>> x, info = bicgstab(A, np.ones(4), rtol=1e-12)
    >>> np.allclose(A @ x, 1.0), info
    (True, 0)
    """
    return _iterative("bicgstab", A, b, x0, dict(rtol=rtol, atol=atol, maxiter=maxiter,
                                                 M=M, callback=callback), symmetric=False)


def gmres(A, b, x0=None, *, rtol=1e-5, atol=0.0, restart=None, maxiter=None, M=None,
          callback=None, callback_type=None):
    """Restarted GMRES for a general square ``A`` (SciPy's ``gmres``): ``(x, 0)``;
    the reverse derivative solves with ``A.T``.

    >>> import numpy as np, scipy.sparse
    >>> A = scipy.sparse.diags_array([-1.0, 4.0, -2.0], offsets=[-1, 0, 1], shape=(4, 4))
    >>> np.allclose(A @ gmres(A, np.ones(4), rtol=1e-12)[0], 1.0)
    True
    """
    return _iterative("gmres", A, b, x0, dict(rtol=rtol, atol=atol, restart=restart,
                                              maxiter=maxiter, M=M, callback=callback,
                                              callback_type=callback_type), symmetric=False)


def minres(A, b, x0=None, *, rtol=1e-5, shift=0.0, maxiter=None, M=None, callback=None,
           show=False, check=False):
    """MINRES for a symmetric (possibly indefinite) ``A`` (SciPy's ``minres``):
    ``(x, 0)``. ``shift`` solves ``(A - shift I) x = b`` in SciPy; fgrad takes 0
    only (fold a shift into ``A``).

    >>> import numpy as np, scipy.sparse
    >>> A = scipy.sparse.diags_array([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(4, 4))
    >>> np.allclose(A @ minres(A, np.ones(4), rtol=1e-12)[0], 1.0)
    True
    """
    if shift != 0.0:
        raise NotImplementedError("fgrad's minres takes shift=0: solve with A - shift * I "
                                  "(fgrad.sparse.diags_array) instead")
    return _iterative("minres", A, b, x0, dict(rtol=rtol, maxiter=maxiter, M=M,
                                               callback=callback, show=show, check=check),
                      symmetric=True)
