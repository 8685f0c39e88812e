"""The Jacobian of a function over a known sparsity pattern, by colouring columns.

Two columns of a Jacobian that have no row in common can be measured by one
JVP: seeding both inputs at once, each output row sees only one of them. A
greedy colouring of the columns gives such groups (for a banded or stencil
pattern, a handful however many inputs there are), one JVP per colour
recovers the stored values, and the result is a sparse array of the pattern's
structure. (Curtis, Powell and Reid's method.)
"""
import numpy as np

from fgrad.core.errors import SparseShapeError
from fgrad.core.trace import get_aval
from fgrad.primitives import indexing
from fgrad.sparse.arrays import SparseArray, csr_array, issparse
from fgrad.transforms.differentiation import jvp
from fgrad.transforms.vmap import vmap


def colour_columns(rows, cols, n):
    """A colour per column such that no two columns of one colour share a row.

    Greedy, columns in order; ``rows``/``cols`` list the pattern's entries.

    >>> colour_columns(np.array([0, 0, 1, 1]), np.array([0, 1, 1, 2]), 3).tolist()
    [0, 1, 0]
    """
    order = np.argsort(rows, kind="stable")
    row_starts = np.searchsorted(rows[order], np.arange(np.max(rows, initial=-1) + 2))
    cols_of_row = np.split(cols[order], row_starts[1:-1]) if len(rows) else []
    order = np.argsort(cols, kind="stable")
    col_starts = np.searchsorted(cols[order], np.arange(n + 1))
    rows_sorted = rows[order]
    colour = np.full(n, -1, np.intp)
    for j in range(n):
        taken = set()
        for i in rows_sorted[col_starts[j]:col_starts[j + 1]]:
            taken.update(colour[cols_of_row[i]].tolist())
        c = 0
        while c in taken:
            c += 1
        colour[j] = c
    return colour


class Colouring:
    """A structure's columns grouped by `colour_columns`, with one seed vector per
    colour and, for each stored entry, where its value lands in the products
    with the seeds."""

    def __init__(self, structure):
        self.structure = structure
        m, n = structure.shape
        colour = colour_columns(structure.rows, structure.cols, n)
        self.seeds = np.zeros((int(colour.max(initial=-1)) + 1, n))
        self.seeds[colour, np.arange(n)] = 1.0
        # each stored (i, j) is row i of the product with the seed of j's colour
        self.where = (colour[structure.cols], structure.rows)

    def values(self, linear, dtype):
        """The values on the structure of the matrix of ``linear`` (a linear map of
        vectors, traced or not): one product per colour, batched by `vmap`."""
        compressed = vmap(linear)(self.seeds.astype(dtype))
        expected = (len(self.seeds), self.structure.shape[0])
        if get_aval(compressed).shape != expected:
            raise SparseShapeError(
                f"the map's products have shape {get_aval(compressed).shape[1:]}, but its "
                f"sparsity pattern has {expected[1]} rows")
        return indexing.getitem(compressed, self.where)


def sparse_jacobian(fun, sparsity):
    """A function computing the Jacobian of ``fun`` (a vector of ``n`` to a
    vector of ``m``) at a point, stored on the ``(m, n)`` pattern ``sparsity``.

    ``sparsity`` is a sparse array (SciPy's or fgrad's) or a dense boolean
    array; entries outside it are taken to be zero. The result is a CSR
    `fgrad.sparse` array; it costs one JVP per colour of the columns (3 for a
    tridiagonal pattern), batched into one call with `vmap`.

    >>> import numpy as np, fgrad.numpy as fnp, scipy.sparse
    >>> f = lambda x: x[1:] * x[:-1]
    >>> pattern = scipy.sparse.diags_array([1.0, 1.0], offsets=[0, 1], shape=(2, 3))
    >>> sparse_jacobian(f, pattern)(np.array([1.0, 2.0, 3.0])).todense()
    array([[2., 1., 0.],
           [0., 3., 2.]])
    """
    pattern = csr_array(sparsity if issparse(sparsity) else np.asarray(sparsity, bool))
    colouring = Colouring(pattern.structure)
    n = pattern.shape[1]

    def jacobian(x):
        aval = get_aval(x)
        if aval.shape != (n,):
            raise SparseShapeError(f"sparse_jacobian: the pattern has {n} columns, so the "
                                   f"input is a vector of {n}, got shape {aval.shape}")
        values = colouring.values(lambda seed: jvp(fun, (x,), (seed,))[1], aval.dtype)
        return SparseArray.from_parts(values, pattern.structure)
    return jacobian
