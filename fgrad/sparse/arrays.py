"""Sparse arrays whose values fgrad can trace: ``csr_array``, ``csc_array``, ``coo_array``.

A sparse array is a constant `SparseStructure` (SciPy's index arrays and the
shape) and a vector ``data`` of stored values, which may be traced. It is a
pytree whose only leaf is ``data``: `grad` with respect to a sparse array
returns a sparse array of the same structure, `jit` and `vmap` see the values
alone, and the structure rides along as static data.

The constructors take SciPy's signatures; operations keep the structure
wherever SciPy's do (scaling, products with a dense array at the stored
entries, transposition) and return dense arrays where SciPy's do (``A @ x``,
sums, ``diagonal``, ``todense``).
"""
import numpy as np

from fgrad.core.backend import device_put
from fgrad.core.errors import SparseShapeError, SparseStructureError
from fgrad.core.trace import Tracer, get_aval
from fgrad.core.tree import register_pytree_node
from fgrad.primitives import elementwise as ew
from fgrad.primitives import indexing, reductions, shape
from fgrad.primitives.sparse import FORMATS, SparseStructure, sparse_matmul, structure_of

# the modules of SciPy's and CuPy's sparse classes (recognised without importing them)
_FOREIGN_SPARSE = ("scipy.sparse", "cupyx.scipy.sparse")


def is_foreign_sparse(x):
    """True for a ``scipy.sparse`` (or ``cupyx.scipy.sparse``) array or matrix."""
    return type(x).__module__.startswith(_FOREIGN_SPARSE) and hasattr(x, "tocoo")


def issparse(x):
    """True for an `fgrad.sparse` array and for a ``scipy.sparse`` array or matrix.

    >>> import numpy as np
    >>> issparse(csr_array(np.eye(2))), issparse(np.eye(2))
    (True, False)
    """
    return isinstance(x, SparseArray) or is_foreign_sparse(x)


def _host(a):
    return a if isinstance(a, np.ndarray) else device_put(a, "cpu")


def _dense(x):
    return x if isinstance(x, Tracer) or hasattr(x, "dtype") else np.asarray(x)


class SparseArray:
    """A 2-d sparse array: a constant structure and traced values ``data``.

    Use the format's constructor (`csr_array`, `csc_array`, `coo_array`),
    which takes SciPy's arguments.
    """

    __slots__ = ("data", "structure")
    format = None
    ndim = 2
    # NumPy's signal that an object handles its own operators: `x @ A` with a
    # NumPy x gives the product to A.__rmatmul__ instead of coercing A
    __array_ufunc__ = None

    def __init__(self, arg1, shape=None, dtype=None, copy=False):
        data, structure = _parts(arg1, shape, self.format)
        if dtype is not None:
            data = ew.convert_element_type(data, np.dtype(dtype))
        self.data, self.structure = data, structure

    @classmethod
    def from_parts(cls, data, structure):
        """The array of ``data`` on ``structure`` (whose format is ``cls``'s),
        unchecked: for values already known to fit (a rule's cotangent, vmap's
        per-example values)."""
        out = object.__new__(FORMAT_CLASSES[structure.format])
        out.data, out.structure = data, structure
        return out

    # -- SciPy's attributes -------------------------------------------------
    shape = property(lambda self: self.structure.shape)
    nnz = property(lambda self: self.structure.nnz)
    dtype = property(lambda self: get_aval(self.data).dtype)
    size = nnz

    def __repr__(self):
        traced = " (traced)" if isinstance(self.data, Tracer) else ""
        return (f"<{self.format}_array of shape {self.shape}, dtype {self.dtype}, "
                f"{self.nnz} stored values{traced}>")

    # -- structure -----------------------------------------------------------
    @property
    def T(self):
        return self.transpose()

    def transpose(self, axes=None, copy=False):
        """The transpose: CSR becomes CSC over the same arrays, values unmoved."""
        return SparseArray.from_parts(self.data, self.structure.T)

    def asformat(self, format, copy=False):
        """This array in ``format``: stored values gathered into the new order
        (summed where a COO array repeats an entry)."""
        if format is None or format == self.format:
            return self
        if format not in FORMATS:
            raise SparseStructureError(f"unknown sparse format {format!r}: use one of "
                                       f"{', '.join(FORMATS)}")
        if format == "coo":
            s = self.structure
            return coo_array((self.data, (s.rows, s.cols)), shape=self.shape)
        structure, gather, slots = compress(self.structure, format)
        if slots is None:
            data = indexing.getitem(self.data, gather)
        else:
            data = indexing.scatter_add(self.data, (slots,), (("array", 0),),
                                        (structure.nnz,))
        return SparseArray.from_parts(data, structure)

    def tocsr(self, copy=False):
        return self.asformat("csr")

    def tocsc(self, copy=False):
        return self.asformat("csc")

    def tocoo(self, copy=False):
        return self.asformat("coo")

    # -- products ------------------------------------------------------------
    def __matmul__(self, other):
        if issparse(other):
            raise SparseStructureError(
                "the product of two sparse arrays has a structure of its own, which "
                "fgrad.sparse does not compute: multiply by a dense operand "
                "(B.todense()) or build the product's structure with SciPy")
        x = _dense(other)
        if get_aval(x).ndim == 0:
            raise SparseShapeError("sparse matmul: scalar operands are not allowed, "
                                   "use '*' instead")
        return sparse_matmul(self.data, x, self.structure)

    def __rmatmul__(self, other):
        x = _dense(other)
        ndim = get_aval(x).ndim
        if ndim == 0:
            raise SparseShapeError("sparse matmul: scalar operands are not allowed, "
                                   "use '*' instead")
        if ndim == 1:
            return sparse_matmul(self.data, x, self.structure.T)
        # x @ A = (A.T @ x.T).T
        return shape.swap_last_axes(sparse_matmul(self.data, shape.swap_last_axes(x),
                                                  self.structure.T))

    dot = __matmul__

    # -- elementwise, keeping the structure --------------------------------
    def _at_entries(self, other, name):
        """``other`` as one value per stored entry: a scalar as is, a dense
        array (broadcast to the shape) read at the stored entries, a sparse
        array of the same structure its values."""
        if issparse(other):
            other = as_sparse(other).asformat(self.format)
            if other.structure != self.structure:
                raise SparseStructureError(
                    f"{name}: the two sparse arrays store different entries "
                    f"({self.structure} and {other.structure}); fgrad.sparse keeps a "
                    "structure fixed, so build both from the same index arrays")
            return other.data
        other = _dense(other)
        aval = get_aval(other)
        if aval.ndim == 0:
            return other
        if aval.ndim > 2:
            raise SparseShapeError(f"{name}: a dense operand of a 2-d sparse array has "
                                   f"at most 2 dimensions, got shape {aval.shape}")
        try:
            np.broadcast_shapes(aval.shape, self.shape)
        except ValueError:
            raise SparseShapeError(
                f"{name}: a dense operand of shape {aval.shape} does not broadcast to the "
                f"sparse array's shape {self.shape}") from None
        s = self.structure
        return indexing.getitem(shape.broadcast_to(other, self.shape), (s.rows, s.cols))

    def _with(self, data):
        return SparseArray.from_parts(data, self.structure)

    def multiply(self, other):
        """The elementwise product, on the stored entries (zeros stay zero)."""
        return self._with(self.data * self._at_entries(other, "multiply"))

    __mul__ = __rmul__ = multiply

    def __truediv__(self, other):
        return self._with(self.data / self._at_entries(other, "divide"))

    def __add__(self, other):
        if issparse(other):
            other = as_sparse(other)
            if other.structure == self.structure:
                return self._with(self.data + other.data)
            return _union_sum(self, other)
        if get_aval(_dense(other)).ndim == 0:
            raise SparseShapeError("adding a scalar to a sparse array would fill every "
                                   "entry: add it to .todense(), or to .data")
        return self.todense() + other

    __radd__ = __add__

    def __sub__(self, other):
        return self + (-as_sparse(other) if issparse(other) else -_dense(other))

    def __rsub__(self, other):
        return -self + other

    def __neg__(self):
        return self._with(-self.data)

    def __pos__(self):
        return self

    def __abs__(self):
        return self._with(ew.absolute(self.data))

    def __pow__(self, exponent):
        return self.power(exponent)

    def power(self, n, dtype=None):
        """Each stored value to the power ``n`` (zeros stay zero for ``n > 0``)."""
        return self._with(ew.power(self.data, n))

    def conj(self, copy=True):
        return self._with(ew.conj(self.data))

    conjugate = conj

    def astype(self, dtype, copy=True):
        return self._with(ew.convert_element_type(self.data, np.dtype(dtype)))

    # -- reductions and dense results --------------------------------------
    def sum(self, axis=None, dtype=None, out=None):
        """The sum of all entries, or along ``axis`` (a dense vector)."""
        if axis is None:
            return reductions.sum_(self.data)
        s = self.structure
        along = s.cols if _axis(axis, "sum") == 0 else s.rows
        return indexing.scatter_add(self.data, (along,), (("array", 0),),
                                    (s.shape[1 - _axis(axis, "sum")],))

    def mean(self, axis=None, dtype=None, out=None):
        """The mean of all entries (zeros included), or along ``axis``."""
        count = self.shape[0] * self.shape[1] if axis is None \
            else self.shape[1 - _axis(axis, "mean")]
        return self.sum(axis) / count

    def diagonal(self, k=0):
        """The ``k``-th diagonal as a dense vector (SciPy's ``diagonal``)."""
        m, n = self.shape
        length = max(0, min(m + min(k, 0), n - max(k, 0)))
        s = self.structure
        on = np.flatnonzero(s.cols - s.rows == k)
        position = s.rows[on] if k >= 0 else s.cols[on]
        values = indexing.getitem(self.data, on)
        return indexing.scatter_add(values, (position,), (("array", 0),), (length,))

    def todense(self, order=None, out=None):
        """The dense array (repeated COO entries summed)."""
        s = self.structure
        return indexing.scatter_add(self.data, (s.rows, s.cols),
                                    (("array", 0), ("array", 1)), self.shape)

    toarray = todense


def _union_sum(a, b):
    """``a + b`` of different structures: the union of the stored entries, in
    ``a``'s format, each value the sum of those stored there."""
    if a.shape != b.shape:
        raise SparseShapeError(f"add: the sparse arrays' shapes differ ({a.shape} and "
                               f"{b.shape})")
    sa, sb = a.structure, b.structure
    both = SparseStructure("coo", a.shape, (np.concatenate([sa.rows, sb.rows]),
                                            np.concatenate([sa.cols, sb.cols])), check=False)
    dtype = np.result_type(a.dtype, b.dtype)
    data = shape.concatenate([x if x.dtype == dtype else ew.convert_element_type(x, dtype)
                              for x in (a.data, b.data)], 0)
    return SparseArray.from_parts(data, both).asformat("csr" if a.format == "coo"
                                                       else a.format)


def _axis(axis, name):
    if axis not in (0, 1, -1, -2):
        raise SparseShapeError(f"{name}: a 2-d sparse array has axes 0 and 1, got {axis}")
    return axis % 2


class csr_array(SparseArray):
    """Compressed sparse rows: SciPy's ``csr_array``, with traced values allowed.

    ``csr_array((data, indices, indptr), shape=(m, n))``, ``csr_array((data,
    (row, col)), shape=...)``, ``csr_array(scipy_matrix)``, ``csr_array(dense)``
    (a constant NumPy array) or ``csr_array((m, n))`` (empty).

    >>> import numpy as np
    >>> A = csr_array((np.array([2.0, 3.0]), np.array([1, 0]), np.array([0, 1, 2])),
    ...               shape=(2, 2))
    >>> A @ np.array([1.0, 1.0])
    array([2., 3.])
    """

    __slots__ = ()
    format = "csr"

    indices = property(lambda self: self.structure.arrays[0])
    indptr = property(lambda self: self.structure.arrays[1])


class csc_array(SparseArray):
    """Compressed sparse columns: SciPy's ``csc_array``, with traced values allowed.

    Takes the arguments of `csr_array`, with ``indices`` holding row numbers
    and ``indptr`` compressing columns.

    >>> import numpy as np
    >>> csc_array(np.array([[1.0, 0.0], [2.0, 3.0]])).data
    array([1., 2., 3.])
    """

    __slots__ = ()
    format = "csc"

    indices = property(lambda self: self.structure.arrays[0])
    indptr = property(lambda self: self.structure.arrays[1])


class coo_array(SparseArray):
    """Coordinates: SciPy's ``coo_array``, with traced values allowed.

    ``coo_array((data, (row, col)), shape=(m, n))``; repeated coordinates are
    summed wherever the array is used.

    >>> import numpy as np
    >>> A = coo_array((np.array([1.0, 2.0]), (np.array([0, 0]), np.array([1, 1]))),
    ...               shape=(2, 2))
    >>> A.todense()
    array([[0., 3.],
           [0., 0.]])
    """

    __slots__ = ()
    format = "coo"

    row = property(lambda self: self.structure.arrays[0])
    col = property(lambda self: self.structure.arrays[1])
    coords = property(lambda self: self.structure.arrays)


FORMAT_CLASSES = {"csr": csr_array, "csc": csc_array, "coo": coo_array}

for _cls in FORMAT_CLASSES.values():
    register_pytree_node(_cls, lambda a: ((a.data,), a.structure),
                         lambda structure, children: SparseArray.from_parts(
                             children[0], structure))


def as_sparse(x, format=None):
    """``x`` (an `fgrad.sparse` array or a ``scipy.sparse`` one) as an
    `fgrad.sparse` array, in ``format`` if given.

    >>> import scipy.sparse
    >>> as_sparse(scipy.sparse.eye_array(2)).format
    'csr'
    """
    if isinstance(x, SparseArray):
        return x.asformat(format)
    if not is_foreign_sparse(x):
        raise SparseStructureError(f"expected a sparse array, got {type(x).__name__}")
    format = format or (x.format if x.format in FORMATS else "csr")
    return FORMAT_CLASSES[format](x)


# -- construction -------------------------------------------------------------------

def _parts(arg1, shape, format):
    """``(data, structure)`` from SciPy's constructor arguments."""
    if isinstance(arg1, SparseArray):
        converted = arg1.asformat(format)
        return converted.data, converted.structure
    if is_foreign_sparse(arg1):
        return _from_foreign(arg1, format)
    if isinstance(arg1, tuple) and len(arg1) == 2 and all(
            isinstance(d, (int, np.integer)) for d in arg1):
        structure = SparseStructure(format, arg1, _empty_arrays(format, arg1))
        return np.zeros(0), structure
    if isinstance(arg1, tuple) and len(arg1) == 2 and isinstance(arg1[1], tuple):
        data, (row, col) = arg1
        row, col = np.asarray(row), np.asarray(col)
        if shape is None:
            shape = (int(row.max()) + 1 if len(row) else 0,
                     int(col.max()) + 1 if len(col) else 0)
        coo = SparseArray.from_parts(_values(data, len(row)),
                                     SparseStructure("coo", shape, (row, col)))
        converted = coo.asformat(format)
        return converted.data, converted.structure
    if isinstance(arg1, tuple) and len(arg1) == 3:
        if format == "coo":
            raise SparseStructureError("coo_array takes (data, (row, col)), not "
                                       "(data, indices, indptr)")
        data, indices, indptr = arg1
        if shape is None:
            raise SparseStructureError(f"{format}_array((data, indices, indptr)) needs "
                                       "shape=(m, n)")
        structure = structure_of(format, shape, (indices, indptr))
        return _values(data, structure.nnz), structure
    if isinstance(arg1, Tracer):
        raise SparseStructureError(
            f"{format}_array of a traced dense array: which entries are stored would "
            "depend on its values. Pass the structure: (data, indices, indptr) or "
            "(data, (row, col)), or a constant SciPy matrix with the pattern")
    dense = np.asarray(arg1)
    if dense.ndim != 2:
        raise SparseShapeError(f"a sparse array is 2-d, got an array of shape {dense.shape}")
    row, col = np.nonzero(dense)
    coo = SparseArray.from_parts(dense[row, col], SparseStructure("coo", dense.shape,
                                                                  (row, col)))
    converted = coo.asformat(format)
    return converted.data, converted.structure


def _values(data, nnz):
    data = _dense(data)
    aval = get_aval(data)
    if aval.shape != (nnz,):
        raise SparseStructureError(f"the values must be a vector of one per stored entry "
                                   f"({nnz}), got shape {aval.shape}")
    return data


def _empty_arrays(format, shape):
    if format == "coo":
        return np.zeros(0, np.int32), np.zeros(0, np.int32)
    major = shape[0] if format == "csr" else shape[1]
    return np.zeros(0, np.int32), np.zeros(major + 1, np.int32)


def _from_foreign(matrix, format):
    if len(matrix.shape) != 2:
        raise SparseShapeError(f"a sparse array is 2-d, got shape {matrix.shape}")
    converted = matrix.asformat(format)
    if format == "coo":
        arrays = (converted.row, converted.col)
    else:
        arrays = (converted.indices, converted.indptr)
    structure = SparseStructure(format, converted.shape, tuple(map(_host, arrays)))
    return converted.data.copy(), structure


def compress(structure, format):
    """``(new_structure, gather, slots)`` converting ``structure`` to CSR or CSC.

    The new structure stores each distinct entry once, sorted. Without repeats
    the values move by one gather (``data[gather]``, ``slots`` None); with
    repeats, ``slots[e]`` is the new position of old entry ``e``, where the
    repeats are summed.
    """
    rows, cols = structure.rows, structure.cols
    major, minor = (rows, cols) if format == "csr" else (cols, rows)
    n_major = structure.shape[0] if format == "csr" else structure.shape[1]
    order = np.lexsort((minor, major))
    major_sorted, minor_sorted = major[order], minor[order]
    new = np.ones(len(order), bool)
    new[1:] = (major_sorted[1:] != major_sorted[:-1]) | (minor_sorted[1:] != minor_sorted[:-1])
    indptr = np.zeros(n_major + 1, np.int64)
    np.cumsum(np.bincount(major_sorted[new], minlength=n_major), out=indptr[1:])
    compressed = SparseStructure(format, structure.shape, (minor_sorted[new], indptr),
                                 check=False)
    if new.all():
        return compressed, order, None
    slots = np.empty(len(order), np.intp)
    slots[order] = np.cumsum(new) - 1
    return compressed, None, slots


def matmul(a, b):
    """``a @ b`` where one operand is sparse (fgrad's or SciPy's) and the other
    dense: what `fgrad.numpy.matmul` and a tracer's ``@`` call for sparse operands.

    >>> import numpy as np, scipy.sparse
    >>> matmul(scipy.sparse.eye_array(2, format="csr"), np.array([1.0, 2.0]))
    array([1., 2.])
    """
    if issparse(a):
        return as_sparse(a) @ b
    return as_sparse(b).__rmatmul__(a)
