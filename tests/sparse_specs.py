"""Test specs for the sparse primitives (`primitives/sparse.py`).

Imported by `primitive_specs.py`. Each case draws a structure (CSR, CSC or COO
with repeated entries, sometimes transposed) and values; forward values are
compared with SciPy's matrices and NumPy's dense linear algebra.
"""
import numpy as np
import scipy.sparse as sp
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fgrad.primitives import sparse as ps
from fgrad.primitives.creation import stop_gradient
from fgrad.primitives.sparse import SparseStructure
from fgrad.sparse.arrays import compress
from primitive_specs import NONDIFF_SPECS, SPECS, Case, arrays, values


@st.composite
def structures(draw, square=False, min_side=1):
    """A structure of 1 to 5 rows and columns in any format; ``square`` ones
    store their diagonal. COO structures may repeat entries."""
    m = draw(st.integers(min_side, 5))
    n = m if square else draw(st.integers(1, 5))
    mask = draw(hnp.arrays(bool, (m, n)))
    if square:
        mask |= np.eye(n, dtype=bool)
    rows, cols = np.nonzero(mask)
    coo = SparseStructure("coo", (m, n), (rows, cols))
    format = draw(st.sampled_from(["csr", "csc", "coo"]))
    if format == "coo":
        extra = draw(st.lists(st.integers(0, max(len(rows) - 1, 0)), max_size=3)) \
            if len(rows) else []
        order = draw(st.permutations(list(range(len(rows))) + extra))
        return SparseStructure("coo", (m, n), (rows[order], cols[order]))
    return compress(coo, format)[0]


def dense(data, structure):
    """The dense matrix of ``data`` on ``structure`` (repeats summed), by NumPy."""
    out = np.zeros(structure.shape, np.result_type(data, np.float32))
    np.add.at(out, (structure.rows, structure.cols), data)
    return out


@st.composite
def _matmul_case(draw):
    s = draw(structures())
    if draw(st.booleans()):
        s = s.T
    data = draw(arrays((s.nnz,)))
    x = draw(arrays(draw(st.sampled_from([(s.shape[1],), (s.shape[1], 2)]))))
    return Case(lambda d, x: ps.sparse_matmul(d, x, s), (data, x),
                lambda d, x: (dense(d, s) @ x).astype(np.result_type(d, x)))


SPECS["sparse_matmul"] = _matmul_case()


def _diagonally_dominant(data, structure):
    """``data`` with the diagonal entries moved to [6, 7): a well-conditioned matrix."""
    on_diagonal = structure.rows == structure.cols
    return np.where(on_diagonal, 6.0 + np.abs(data) / 2, data / 2)


@st.composite
def _solve_case(draw):
    s = draw(structures(square=True))
    data = _diagonally_dominant(draw(arrays((s.nnz,))), s)
    n = s.shape[0]
    b = draw(arrays(draw(st.sampled_from([(n,), (n, 2)]))))
    trans = draw(st.booleans())

    def ref(d, b):
        a = dense(d, s)
        return np.linalg.solve(a.T if trans else a, b).astype(np.result_type(d, b))
    return Case(lambda d, b: ps.lu_solve(ps.splu(d, s), d, b, s, trans), (data, b), ref)


SPECS["lu_solve_sparse"] = _solve_case()


def _factor_case(case):
    s, data, b = case
    # the same arithmetic: SuperLU of the CSC matrix (a CSR one's transpose)
    csr = s.format == "csr"
    matrix = s.matrix(data).T if csr else s.matrix(data).tocsc()
    factored = sp.linalg.splu(matrix if matrix.has_canonical_format else matrix.copy())

    def f(d, b):                     # only the factor carries d: the derivative is 0
        return ps.lu_solve(ps.splu(d, s), stop_gradient(d), stop_gradient(b), s)
    return f, lambda d, b: factored.solve(b, trans="T" if csr else "N"), (data, b)


NONDIFF_SPECS["splu"] = structures(square=True).flatmap(lambda s: st.tuples(
    st.just(s), arrays((s.nnz,)).map(lambda d: _diagonally_dominant(d, s)),
    arrays((s.shape[0],)))).map(_factor_case)


@st.composite
def _eigsh_case(draw):
    """The top eigenvalue of a symmetric matrix with well-separated eigenvalues
    (a spaced diagonal, small off-diagonal entries), whose values come from
    one vector ``u`` of the distinct entries so perturbations stay symmetric."""
    n = draw(st.integers(3, 5))
    upper = np.triu(draw(hnp.arrays(bool, (n, n)))) | np.eye(n, dtype=bool)
    mask = upper | upper.T
    rows, cols = np.nonzero(mask)
    s = compress(SparseStructure("coo", (n, n), (rows, cols)), "csr")[0]
    key = np.minimum(s.rows, s.cols) * n + np.maximum(s.rows, s.cols)
    pairs, pair = np.unique(key, return_inverse=True)
    diagonal = pairs // n == pairs % n
    u = draw(arrays((len(pairs),), values(-0.3, 0.3))) + np.where(
        diagonal, 2.0 * (pairs // n), 0.0)
    k = draw(st.integers(1, 2))
    return Case(lambda u: ps.eigsh(u[pair], s, k, (("which", "LA"),))[0], (u,),
                lambda u: np.linalg.eigvalsh(dense(u[pair], s))[n - k:], order=1,
                tol=dict(atol=1e-5, rtol=1e-5))


SPECS["eigsh"] = _eigsh_case()


@st.composite
def _sampled_case(draw):
    s = draw(structures())
    trailing = draw(st.sampled_from([(), (2,)]))
    left = draw(arrays((s.shape[0],) + trailing))
    right = draw(arrays((s.shape[1],) + trailing))

    def ref(left, right):
        full = np.outer(left, right) if not trailing else left @ right.T
        return full[s.rows, s.cols].astype(np.result_type(left, right))
    return Case(lambda a, b: ps.sampled_product(a, b, s), (left, right), ref)


SPECS["sparse_sampled_product"] = _sampled_case()
