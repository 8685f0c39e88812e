"""``scipy.sparse`` with traced values: the arrays of `fgrad.sparse`, and ``linalg``.

``fgrad.scipy.sparse.csr_array`` is ``fgrad.sparse.csr_array`` (and so on for
the other constructors and builders), so code written against SciPy's module
names reads the same; ``fgrad.scipy.sparse.linalg`` solves and finds
eigenvalues with derivatives with respect to the values and the right-hand side.
"""
from fgrad.scipy.sparse import linalg  # noqa: F401
from fgrad.sparse import block_diag as block_diag
from fgrad.sparse import coo_array as coo_array
from fgrad.sparse import csc_array as csc_array
from fgrad.sparse import csr_array as csr_array
from fgrad.sparse import diags as diags
from fgrad.sparse import diags_array as diags_array
from fgrad.sparse import issparse as issparse
from fgrad.sparse import kron as kron
