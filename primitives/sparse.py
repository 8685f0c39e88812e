"""Sparse matrices: products, direct solves and eigenvalues over a fixed structure.

A sparse matrix is split the way SciPy stores it: a `SparseStructure` (the
integer index arrays and the shape: which entries are stored, constant, a static
parameter) and ``data``, the vector of stored values, the only operand with a
derivative. The implementations build SciPy's matrix from the two and call its
kernels (``cupyx.scipy.sparse`` on CuPy arrays); the rules are written with
fgrad primitives, so every order differentiates.

The derivative with respect to the values keeps the sparsity: for ``y = A @ x``
the cotangent of entry ``(i, j)`` is ``ct[i] * x[j]``, one number per stored
entry, gathered with the structure's ``rows`` and ``cols``.

A direct solve keeps its factorization as a value in the graph: `splu` returns
SuperLU's factor object inside a 0-d object array (no derivative, like an
integer), and `lu_solve` takes it as an operand. The adjoint solve of the
reverse sweep (``trans='T'``) reuses that factor, so a forward and backward
pass factorizes once, under `jit` as well.
"""
import collections
import math
import threading

import numpy as np

from fgrad.core.backend import array_module, asarray_on, scipy_module
from fgrad.core.errors import (
    DeviceError,
    LinalgDerivativeError,
    SingularMatrixError,
    SparseShapeError,
    SparseStructureError,
)
from fgrad.core.trace import Primitive, ShapedArray, Zero, get_aval

from fgrad.primitives.base import dummy

FAMILY = "primitives/sparse.py"
FORMATS = ("csr", "csc", "coo")


# -- the structure: constant index arrays ------------------------------------------

def _constant_index(a, name):
    """``a`` as a read-only 1-d integer NumPy array (copied unless it already is one)."""
    a = np.asarray(a)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise SparseStructureError(
            f"{name} must be a 1-d integer array, got {a.dtype} of shape {a.shape}")
    # kept as is only if nothing can change it: read-only and owning its memory
    return a if not a.flags.writeable and a.flags.owndata else read_only(a.copy())


def read_only(a):
    """``a``, a NumPy array fgrad just made, marked read-only (a structure's)."""
    a.flags.writeable = False
    return a


class SparseStructure:
    """Which entries of an ``(m, n)`` sparse matrix are stored, in SciPy's terms.

    ``format`` is ``"csr"`` (``arrays`` = ``(indices, indptr)``, rows
    compressed), ``"csc"`` (the same, columns compressed) or ``"coo"``
    (``arrays`` = ``(row, col)``, duplicates summed). The arrays are kept as
    read-only copies, so the structure is a constant: it hashes and compares
    by value, as a static parameter of a primitive must. Transposing swaps
    ``csr`` and ``csc`` over the same arrays, so the stored values keep their order.

    >>> s = SparseStructure("csr", (2, 3), (np.array([0, 2, 1]), np.array([0, 2, 3])))
    >>> s, s.nnz, s.rows.tolist(), s.cols.tolist()
    (csr(2x3, nnz=3), 3, [0, 0, 1], [0, 2, 1])
    >>> s.T
    csc(3x2, nnz=3)
    """

    __slots__ = ("format", "shape", "arrays", "_rows", "_cols", "_transpose", "_device")

    def __init__(self, format, shape, arrays, check=True):
        if format not in FORMATS:
            raise SparseStructureError(f"unknown sparse format {format!r}: use one of "
                                       f"{', '.join(FORMATS)}")
        self.format = format
        self.shape = tuple(int(d) for d in shape)
        names = ("row", "col") if format == "coo" else ("indices", "indptr")
        arrays = tuple(_constant_index(a, n) for a, n in zip(arrays, names))
        # one index dtype for both arrays, as SciPy wants (it would otherwise
        # convert them on every product)
        dtype = np.int32 if max(self.shape + (len(arrays[0]),), default=0) < 2**31 \
            else np.int64
        self.arrays = tuple(a if a.dtype == dtype else read_only(a.astype(dtype))
                            for a in arrays)
        self._rows = self._cols = self._transpose = None
        self._device = {}
        if check:
            self._check()

    def _check(self):
        if len(self.shape) != 2 or min(self.shape) < 0:
            raise SparseStructureError(f"a sparse matrix has a 2-d shape, got {self.shape}")
        m, n = self.shape
        if self.format == "coo":
            row, col = self.arrays
            if len(row) != len(col):
                raise SparseStructureError(
                    f"coo: row and col differ in length ({len(row)} != {len(col)})")
            for a, bound, name in ((row, m, "row"), (col, n, "col")):
                if len(a) and (a.min() < 0 or a.max() >= bound):
                    raise SparseStructureError(
                        f"coo: {name} indices must lie in [0, {bound}) for shape "
                        f"{self.shape}, got {a.min()}..{a.max()}")
            return
        indices, indptr = self.arrays
        major, minor = (m, n) if self.format == "csr" else (n, m)
        if len(indptr) != major + 1 or (len(indptr) and indptr[0] != 0) \
                or np.any(np.diff(indptr) < 0) or indptr[-1] != len(indices):
            raise SparseStructureError(
                f"{self.format}: indptr must rise from 0 to len(indices) = {len(indices)} "
                f"in {major + 1} entries for shape {self.shape}, got {len(indptr)} "
                f"entries ending at {indptr[-1] if len(indptr) else None}")
        if len(indices) and (indices.min() < 0 or indices.max() >= minor):
            raise SparseStructureError(
                f"{self.format}: indices must lie in [0, {minor}) for shape {self.shape}, "
                f"got {indices.min()}..{indices.max()}")

    @property
    def nnz(self):
        """The number of stored entries (duplicates of a COO structure included)."""
        return len(self.arrays[0])

    def _expand(self):
        if self.format == "coo":
            rows, cols = self.arrays
        else:
            indices, indptr = self.arrays
            major = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
            rows, cols = (major, indices) if self.format == "csr" else (indices, major)
        # np.intp: NumPy gathers with native-width indices fastest
        self._rows, self._cols = (read_only(a.astype(np.intp)) for a in (rows, cols))

    @property
    def rows(self):
        """The row of each stored entry (read-only ``intp`` array)."""
        if self._rows is None:
            self._expand()
        return self._rows

    @property
    def cols(self):
        """The column of each stored entry (read-only ``intp`` array)."""
        if self._cols is None:
            self._expand()
        return self._cols

    @property
    def T(self):
        """The structure of the transpose; the stored values keep their order."""
        if self._transpose is None:
            format = {"csr": "csc", "csc": "csr", "coo": "coo"}[self.format]
            arrays = self.arrays[::-1] if self.format == "coo" else self.arrays
            t = SparseStructure(format, self.shape[::-1], arrays, check=False)
            t._transpose, self._transpose = self, t
        return self._transpose

    def on(self, xp):
        """The index arrays on backend ``xp`` (copied to a device once, then kept)."""
        if xp is np:
            return self.arrays
        key = getattr(xp, "__name__", id(xp))
        if key not in self._device:
            self._device[key] = tuple(asarray_on(xp, a) for a in self.arrays)
        return self._device[key]

    def expanded_on(self, xp):
        """``(rows, cols)`` on backend ``xp`` (copied to a device once, then kept)."""
        if xp is np:
            return self.rows, self.cols
        key = ("expanded", getattr(xp, "__name__", id(xp)))
        if key not in self._device:
            self._device[key] = (asarray_on(xp, self.rows), asarray_on(xp, self.cols))
        return self._device[key]

    def matrix(self, data):
        """SciPy's sparse matrix of ``data`` on this structure (``cupyx``'s on CuPy)."""
        xp = array_module(data)
        constructor = sparse_function(xp, "", f"{self.format}_matrix")
        arrays = self.on(xp)
        data = xp.ascontiguousarray(data)        # one example of a batch is a strided view
        if self.format == "coo":
            return constructor((data, arrays), shape=self.shape)
        return constructor((data, *arrays), shape=self.shape)

    # constant: equal structures are interchangeable, so a graph, a jit cache
    # entry or a compiled sweep recorded with one serves the other
    def __eq__(self, other):
        if self is other:
            return True
        return (type(other) is SparseStructure and self.format == other.format
                and self.shape == other.shape and self.nnz == other.nnz
                and all(np.array_equal(a, b) for a, b in zip(self.arrays, other.arrays)))

    def __hash__(self):
        # cheap: equal hashes fall back to __eq__, which compares the arrays
        return hash((self.format, self.shape, self.nnz))

    def __repr__(self):
        return f"{self.format}({self.shape[0]}x{self.shape[1]}, nnz={self.nnz})"


# The structures of the last few read-only index arrays, so that rebuilding a
# sparse array from them (``csr_array((new_values, A.indices, A.indptr))`` in a
# loss) finds the same structure, its expanded rows and columns and its device
# copies already made. Bounded; entries hold their arrays, so ids stay unique.
_RECENT = collections.OrderedDict()
_RECENT_SIZE = 16
_RECENT_LOCK = threading.Lock()


def structure_of(format, shape, arrays):
    """``SparseStructure(format, shape, arrays)``, the same object as last time
    for the same read-only index arrays (a structure's own, ``A.indices``).

    >>> a = structure_of("coo", (2, 2), (np.array([0, 1]), np.array([1, 0])))
    >>> structure_of("coo", (2, 2), a.arrays) is structure_of("coo", (2, 2), a.arrays)
    True
    """
    arrays = tuple(arrays)
    if not all(isinstance(a, np.ndarray) and not a.flags.writeable and a.flags.owndata
               for a in arrays):
        return SparseStructure(format, shape, arrays)
    key = (format, tuple(shape)) + tuple(map(id, arrays))
    with _RECENT_LOCK:
        hit = _RECENT.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], arrays)):
            _RECENT.move_to_end(key)
            return hit[1]
    structure = SparseStructure(format, shape, arrays)
    with _RECENT_LOCK:
        _RECENT[key] = (arrays, structure)
        if len(_RECENT) > _RECENT_SIZE:
            _RECENT.popitem(last=False)
    return structure


def sparse_function(xp, module, name):
    """``scipy.sparse[.module].name`` for backend ``xp`` (``cupyx.scipy.sparse``
    on CuPy), or a `DeviceError` naming it where that backend lacks it."""
    namespace = scipy_module(xp, "sparse" + (f".{module}" if module else ""))
    fn = getattr(namespace, name, None)
    if fn is None:
        raise DeviceError(
            f"scipy.sparse{'.' + module if module else ''}.{name} has no counterpart in "
            f"{namespace.__name__}, so it cannot run on these device arrays: move the "
            "sparse values and the dense operands to the host with "
            "fgrad.device_put(x, 'cpu') for this function.")
    return fn


def _check_data(data, structure, name):
    if data.ndim != 1 or data.shape[0] != structure.nnz:
        raise SparseStructureError(
            f"{name}: the values of a {structure} matrix are a vector of "
            f"{structure.nnz}, got shape {data.shape}")


def _as_matrix(x):
    """``x`` with its trailing axes flattened into one (sizes spelled out: an
    empty array has no size to infer a ``-1`` from)."""
    shape = get_aval(x).shape
    return reshape(x, (shape[0], math.prod(shape[1:])))


# -- the values of a product at the stored entries ------------------------------------
#
# The derivative of every product and solve with respect to the values is
# (left @ right.T) read at the stored entries, left and right dense with k
# columns: a sampled product (SDDMM). One column at a time keeps the working
# memory at a few vectors of nnz, where gathering whole rows would take 3 k.

def _sampled_abstract(left, right, *, structure):
    m, n = structure.shape
    if left.shape[:1] != (m,) or right.shape[:1] != (n,) or left.shape[1:] != right.shape[1:] \
            or left.ndim > 2:
        raise SparseShapeError(
            f"sampled product: for a {m}x{n} structure the operands are ({m}[, k]) and "
            f"({n}[, k]), got shapes {left.shape} and {right.shape}")
    return ShapedArray((structure.nnz,), np.result_type(dummy(left), dummy(right)))


def _sampled_impl(left, right, *, structure):
    xp = array_module(left, right)
    rows, cols = structure.expanded_on(xp)
    if left.ndim == 1:
        return left[rows] * right[cols]
    out = xp.zeros(structure.nnz, np.result_type(left.dtype, right.dtype))
    for j in range(left.shape[1]):
        term = left[:, j][rows]
        term *= right[:, j][cols]
        out += term
    return out


sampled_product_p = Primitive("sparse_sampled_product", _sampled_impl, _sampled_abstract,
                              family=FAMILY)
sampled_product_p.def_vjp(
    lambda ct, ans, left, right, *, structure: cast_like(
        sparse_matmul(ct, right, structure), get_aval(left)),
    lambda ct, ans, left, right, *, structure: cast_like(
        sparse_matmul(ct, left, structure.T), get_aval(right)),
    reads=[{1}, {0}])
sampled_product_p.def_jvp(
    lambda t, ans, left, right, *, structure: sampled_product(t, right, structure),
    lambda t, ans, left, right, *, structure: sampled_product(left, t, structure))
sampled_product_p.batch = lambda args, dims, **params: per_example(
    sampled_product_p, args, dims, **params)


def sampled_product(left, right, structure):
    """``(left @ right.T)[rows, cols]``: the product's value at each stored entry
    of ``structure`` (``left[rows] * right[cols]`` for vectors)."""
    return sampled_product_p.bind(left, right, structure=structure)


# -- y = A @ x ----------------------------------------------------------------------

def _matmul_impl(data, x, *, structure):
    return structure.matrix(data) @ x


def _matmul_abstract(data, x, *, structure):
    _check_data(data, structure, "sparse matmul")
    _check_operand(x, structure)
    return ShapedArray((structure.shape[0],) + x.shape[1:],
                       np.result_type(dummy(data), dummy(x)))


def _check_operand(x, structure):
    m, n = structure.shape
    if x.ndim not in (1, 2) or x.shape[0] != n:
        raise SparseShapeError(
            f"sparse matmul: a {m}x{n} sparse matrix multiplies a dense vector of "
            f"{n} or a matrix of {n} rows, got shape {x.shape}")


sparse_matmul_p = Primitive("sparse_matmul", _matmul_impl, _matmul_abstract, family=FAMILY)
sparse_matmul_p.def_vjp(
    lambda ct, ans, data, x, *, structure: cast_like(
        sampled_product(ct, x, structure), get_aval(data)),
    lambda ct, ans, data, x, *, structure: cast_like(
        sparse_matmul(data, ct, structure.T), get_aval(x)),
    reads=[{1}, {0}])
sparse_matmul_p.def_jvp(lambda t, ans, data, x, *, structure: sparse_matmul(t, x, structure),
                        lambda t, ans, data, x, *, structure: sparse_matmul(data, t, structure))


def _row_sums(structure):
    """The ``(m, nnz)`` 0/1 matrix adding each stored entry into its row."""
    nnz = structure.nnz
    return SparseStructure("coo", (structure.shape[0], nnz),
                           (structure.rows, np.arange(nnz)), check=False)


def _matmul_batch(args, dims, *, structure):
    (data, x), (dd, dx) = args, dims
    if dd is None:
        # a batch of vectors is a matrix, a batch of matrices a wider one
        x = move_axis(x, dx, 1)
        shape = get_aval(x).shape
        y = sparse_matmul(data, _as_matrix(x), structure)
        return reshape(y, (structure.shape[0],) + shape[1:]), 1
    # a batch of value vectors: each product y[b] = sum over stored entries of
    # data[b, e] * x[cols[e]] into rows[e], one sparse product over all
    # examples with the (m, nnz) matrix that adds entries into their rows
    data = move_axis(data, dd, 1)                          # (nnz, B)
    ones = full_like(getitem(data, (slice(None), 0)), 1,
                     np.result_type(dummy(get_aval(data)), dummy(get_aval(x))))
    if dx is not None:
        x = move_axis(x, dx, get_aval(x).ndim - 1)         # (n, [k,] B)
    xs = getitem(x, structure.cols)                        # (nnz, [k,] B) or (nnz, [k])
    if get_aval(x).ndim - (dx is not None) == 2:
        data = expand_dims(data, 1)                        # (nnz, 1, B)
        if dx is None:
            xs = expand_dims(xs, 2)                        # (nnz, k, 1)
    elif dx is None:
        xs = expand_dims(xs, 1)                            # (nnz, 1)
    terms = data * xs
    shape = get_aval(terms).shape
    summed = sparse_matmul(ones, _as_matrix(terms), _row_sums(structure))
    return reshape(summed, (structure.shape[0],) + shape[1:]), len(shape) - 1


sparse_matmul_p.batch = _matmul_batch


def sparse_matmul(data, x, structure):
    """``A @ x`` for the sparse matrix ``A`` of ``data`` on ``structure``, and
    ``x`` a dense vector or matrix."""
    _check_operand(get_aval(x), structure)     # eager calls skip the abstract rule
    return sparse_matmul_p.bind(data, x, structure=structure)


# -- direct solves: one SuperLU factorization, reused by every solve --------------

def _factor_abstract(data, *, structure, options):
    _check_data(data, structure, "splu")
    m, n = structure.shape
    if m != n:
        raise SparseShapeError(f"splu: the matrix must be square, got shape {structure.shape}")
    return ShapedArray((), np.dtype(object))


class Factor:
    """A SuperLU factorization and whether it is of the transpose (a CSR matrix
    is factorized as its transpose, the CSC matrix on the same arrays: no copy)."""

    __slots__ = ("lu", "transposed")

    def __init__(self, lu, transposed):
        self.lu, self.transposed = lu, transposed


def _factor_impl(data, *, structure, options):
    splu = sparse_function(array_module(data), "linalg", "splu")
    kwargs = dict(options)
    if "options" in kwargs:                    # SuperLU's own options, held as pairs
        kwargs["options"] = dict(kwargs["options"])
    matrix = structure.matrix(data)
    transposed = structure.format == "csr"
    matrix = matrix.T if transposed else matrix.tocsc()
    if not matrix.has_canonical_format:
        # splu sorts and merges entries in place: not in the structure's arrays
        matrix = matrix.copy()
    try:
        factor = Factor(splu(matrix, **kwargs), transposed)
    except RuntimeError as err:                   # SuperLU: "Factor is exactly singular"
        raise SingularMatrixError(
            f"splu: the {structure} matrix is singular ({err}), so it has no LU "
            "factorization: check it for an empty row or column or a missing boundary "
            "condition") from None
    held = np.empty((), object)               # a 0-d array, so the graph can hold it
    held[()] = factor
    return held


splu_p = Primitive("splu", _factor_impl, _factor_abstract, nondiff=True, family=FAMILY)


def splu(data, structure, options=()):
    """SuperLU's factorization of the square matrix of ``data`` on ``structure``,
    held in a 0-d object array (no derivative); `lu_solve` solves with it.
    ``options`` are ``splu``'s keyword arguments as ``(name, value)`` pairs."""
    _factor_abstract(get_aval(data), structure=structure, options=options)
    return splu_p.bind(data, structure=structure, options=tuple(options))


def _solve_abstract(factor, data, b, *, structure, trans):
    _check_data(data, structure, "sparse solve")
    _check_rhs(b, structure)
    return ShapedArray(b.shape, np.result_type(dummy(data), dummy(b), np.float32))


def _check_rhs(b, structure):
    n = structure.shape[0]
    if b.ndim not in (1, 2) or b.shape[0] != n:
        raise SparseShapeError(
            f"sparse solve: the right-hand side of a {n}x{n} system is a vector of {n} "
            f"or a matrix of {n} rows, got shape {b.shape}")


def _solve_impl(factor, data, b, *, structure, trans):
    factor = factor[()] if isinstance(factor, np.ndarray) else factor
    # SuperLU solves in the precision it factorized in, that of the values
    x = factor.lu.solve(b.astype(np.result_type(data.dtype, np.float32), copy=False),
                        trans="T" if trans != factor.transposed else "N")
    return x.astype(np.result_type(data.dtype, b.dtype, np.float32), copy=False)


lu_solve_p = Primitive("lu_solve_sparse", _solve_impl, _solve_abstract, family=FAMILY)


def _solve_vjp(ct, ans, needed, factor, data, b, *, structure, trans):
    # the adjoint system, solved with the same factor
    lam = lu_solve(factor, data, ct, structure, not trans)
    ct_data = ct_b = None
    if needed[1]:
        # A x = b: dA = -lam x^T at the stored entries; A^T x = b: its transpose
        # (the sign goes on lam, a vector per row: smaller than one per entry)
        left, right = (-lam, ans) if not trans else (ans, -lam)
        ct_data = cast_like(sampled_product(left, right, structure), get_aval(data))
    if needed[2]:
        ct_b = cast_like(lam, get_aval(b))
    return None, ct_data, ct_b


def _solve_jvp(tangents, ans, factor, data, b, *, structure, trans):
    _, t_data, t_b = tangents
    rhs = None if type(t_b) is Zero else t_b
    if type(t_data) is not Zero:
        moved = sparse_matmul(t_data, ans, structure.T if trans else structure)
        rhs = -moved if rhs is None else rhs - moved
    if rhs is None:
        return None
    return lu_solve(factor, data, rhs, structure, trans)


lu_solve_p.def_vjp_joint(_solve_vjp, reads={0, 1, "ans"})
lu_solve_p.def_jvp_joint(_solve_jvp)


def _solve_batch(args, dims, *, structure, trans):
    (factor, data, b), (df, dd, db) = args, dims
    if df is None and dd is None:
        # a batch of right-hand sides is one matrix right-hand side
        b = move_axis(b, db, get_aval(b).ndim - 1)
        shape = get_aval(b).shape
        x = lu_solve(factor, data, _as_matrix(b), structure, trans)
        return reshape(x, shape), len(shape) - 1
    return per_example(lu_solve_p, args, dims, structure=structure, trans=trans)


lu_solve_p.batch = _solve_batch
splu_p.batch = lambda args, dims, **params: per_example(splu_p, args, dims, **params)


def lu_solve(factor, data, b, structure, trans=False):
    """``A^-1 b`` (``A^-T b`` with ``trans``) for the matrix ``A`` of ``data`` on
    ``structure``, whose `splu` factorization is ``factor``."""
    _check_rhs(get_aval(b), structure)
    return lu_solve_p.bind(factor, data, b, structure=structure, trans=bool(trans))


# -- a few eigenpairs of a symmetric matrix ------------------------------------------
#
# A simple eigenvalue of a symmetric A moves by d(lambda) = v^T dA v, which at the
# stored entries is v[rows] * v[cols]. Eigenvectors are another matter: their
# derivative needs the whole spectrum (or a singular solve per vector), which
# eigsh does not compute. So the reverse rule refuses a cotangent reaching
# the eigenvectors, and the forward rule gives them NaN tangents: a derivative
# through the eigenvectors is never silently a wrong number.

def _eigsh_abstract(data, *, structure, k, options):
    _check_data(data, structure, "eigsh")
    m, n = structure.shape
    if m != n or not 0 < k < n:
        raise SparseShapeError(f"eigsh: a square matrix and 0 < k < n, got shape "
                               f"{structure.shape} and k={k}")
    dtype = np.result_type(data.dtype, np.float32)
    return ShapedArray((k,), dtype), ShapedArray((n, k), dtype)


def _eigsh_impl(data, *, structure, k, options):
    xp = array_module(data)
    eigsh = sparse_function(xp, "linalg", "eigsh")
    if xp is not np and "sigma" in dict(options):
        raise DeviceError(
            "scipy.sparse.linalg.eigsh(sigma=...) has no counterpart in cupyx.scipy's "
            "eigsh (no shift-invert mode), so it cannot run on these device arrays: "
            "use which='SA'/'LA', or move the values to the host with "
            "fgrad.device_put(x, 'cpu')")
    # ARPACK starts from a random vector unless given one: a fixed one makes
    # the result the same on every call (a jit-compiled sweep's, an eager one's)
    start = asarray_on(xp, np.random.default_rng(0).standard_normal(structure.shape[0]))
    w, v = eigsh(structure.matrix(data), k=k, v0=start.astype(data.dtype), **dict(options))
    order = xp.argsort(w)
    dtype = np.result_type(data.dtype, np.float32)
    return w[order].astype(dtype, copy=False), v[:, order].astype(dtype, copy=False)


eigsh_p = Primitive("eigsh", _eigsh_impl, _eigsh_abstract, multiple_results=True,
                    family=FAMILY)


def _eigsh_vjp(ct, ans, needed, data, *, structure, k, options):
    ct_w, ct_v = ct
    if not (ct_v is None or type(ct_v) is Zero):
        raise LinalgDerivativeError(
            "eigsh: the derivative of the eigenvectors is not available (it needs the "
            "whole spectrum); differentiate a function of the eigenvalues alone, or use "
            "fgrad.numpy.linalg.eigh on the dense matrix (.todense())")
    if ct_w is None or type(ct_w) is Zero:
        return (None,)
    v = ans[1]
    return (cast_like(sampled_product(v * ct_w, v, structure),
                      get_aval(data)),)


def _eigsh_jvp(tangents, ans, data, *, structure, k, options):
    w, v = ans
    t = tangents[0]
    dw = sum_(v * sparse_matmul(t, v, structure), 0)           # v_i^T dA v_i
    return dw, full_like(v, np.nan)


eigsh_p.def_vjp_joint(_eigsh_vjp, reads={"ans"})
eigsh_p.def_jvp_joint(_eigsh_jvp)
eigsh_p.batch = lambda args, dims, **params: per_example(eigsh_p, args, dims, **params)


def eigsh(data, structure, k, options=()):
    """``(w, v)``: ``k`` eigenvalues (ascending) and eigenvectors of the symmetric
    matrix of ``data`` on ``structure``, by ARPACK (``scipy.sparse.linalg.eigsh``
    with ``options``); derivatives reach the eigenvalues only."""
    _eigsh_abstract(get_aval(data), structure=structure, k=int(k), options=options)
    return eigsh_p.bind(data, structure=structure, k=int(k), options=tuple(options))


def per_example(prim, args, dims, **params):
    """Bind ``prim`` once per example of a batch and stack the results (the
    batching rule of SciPy's functions, which take one matrix at a time)."""
    size = axis_size(args, dims)
    moved = [x if d is None else move_axis(x, d, 0) for x, d in zip(args, dims)]
    outs = [prim.bind(*[x if d is None else getitem(x, i) for x, d in zip(moved, dims)],
                      **params) for i in range(size)]
    if prim.multiple_results:
        return tuple(stack(o) for o in zip(*outs)), (0,) * len(outs[0])
    return stack(outs), 0


# Families use each other's functions in their rules; importing them last
# makes the cycle harmless (every name above exists by then).
from fgrad.primitives.batching import axis_size, move_axis  # noqa: E402
from fgrad.primitives.creation import full_like  # noqa: E402
from fgrad.primitives.elementwise import cast_like  # noqa: E402
from fgrad.primitives.indexing import getitem  # noqa: E402
from fgrad.primitives.reductions import sum_  # noqa: E402
from fgrad.primitives.shape import expand_dims, reshape, stack  # noqa: E402
