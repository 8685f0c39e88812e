"""Sparse arrays with traced values: SciPy's sparse arrays in, sparse gradients out.

``fgrad.sparse.csr_array``, ``csc_array`` and ``coo_array`` take SciPy's
constructor arguments; their structure (the index arrays) is constant and their
values ``data`` may be traced, so the derivative with respect to a sparse array
is a sparse array of the same structure. A ``scipy.sparse`` array passed where
a constant operand is meant works as it is (``A_scipy @ x``,
``fgrad.numpy.matmul(A_scipy, x)``). Solvers are in
``fgrad.scipy.sparse.linalg``; see docs/sparse.md.
"""
from fgrad.core.trace import Tracer as _Tracer
from fgrad.sparse.arrays import SparseArray as SparseArray
from fgrad.sparse.arrays import as_sparse as as_sparse
from fgrad.sparse.arrays import coo_array as coo_array
from fgrad.sparse.arrays import csc_array as csc_array
from fgrad.sparse.arrays import csr_array as csr_array
from fgrad.sparse.arrays import issparse as issparse
from fgrad.sparse.arrays import matmul as _matmul
from fgrad.sparse.construct import block_diag as block_diag
from fgrad.sparse.construct import diags_array as diags_array
from fgrad.sparse.construct import kron as kron
from fgrad.sparse.jacobian import sparse_jacobian as sparse_jacobian

diags = diags_array

# `fgrad.numpy.matmul` and tracers' `@` hand sparse operands to this package,
# and SciPy's operators give `A_scipy @ tracer` back to the tracer
_Tracer.sparse_matmul = staticmethod(_matmul)
_Tracer.deferring_callers = _Tracer.deferring_callers | {"scipy.sparse._base"}
