"""``scipy.sparse.linalg`` with derivatives: direct solves, iterative solves, eigsh.

The matrix may be an `fgrad.sparse` array with traced values or a constant
``scipy.sparse`` array; the right-hand side may be traced. Derivatives never
differentiate the solver's steps:

- ``spsolve``, ``splu`` and ``factorized`` factorize once with SuperLU; the
  reverse sweep solves the adjoint system with the same factor
  (``trans='T'``), so a value and its gradient cost one factorization and two
  triangular solves.
- ``eigsh`` differentiates its eigenvalues (``dλ = vᵀ dA v`` at the stored
  entries); derivatives through the eigenvectors are refused.
"""
import numpy as _np

from fgrad.core.errors import SparseShapeError as _SparseShapeError
from fgrad.primitives import sparse as _sparse
from fgrad.sparse import as_sparse as _as_sparse
from fgrad.sparse import issparse as _issparse


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
    >>> top = lambda d: eigsh(fgrad.sparse.diags_array(d), k=1, which="LA")[0][0]
    >>> fgrad.grad(top)(values).round(6)
    array([0., 0., 0., 1.])
    """
    for name, value in (("M", M), ("v0", v0), ("Minv", Minv), ("OPinv", OPinv)):
        if value is not None:
            raise NotImplementedError(f"fgrad's eigsh does not take {name}: the standard "
                                      "problem A v = w v only")
    options = {"sigma": sigma, "which": which, "ncv": ncv, "maxiter": maxiter, "tol": tol,
               "mode": mode}
    A = _square(A, "eigsh")
    w, v = _sparse.eigsh(A.data, A.structure, k,
                         tuple((key, val) for key, val in options.items() if val is not None))
    return (w, v) if return_eigenvectors else w


