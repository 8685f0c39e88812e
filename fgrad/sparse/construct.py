"""Building sparse arrays from others: ``kron``, ``block_diag``, ``diags_array``.

Each builder computes the new structure from the operands' structures (NumPy on
the index arrays, once) and the new values from their values with fgrad
primitives, so the values stay differentiable: ``kron``'s are the products of
every pair of stored values, ``block_diag``'s and ``diags_array``'s the values
concatenated. Operands may be `fgrad.sparse` arrays, ``scipy.sparse`` arrays or
dense arrays (every entry stored).
"""
import numpy as np

from fgrad.core.errors import SparseShapeError
from fgrad.core.trace import Tracer, get_aval
from fgrad.primitives import elementwise as ew
from fgrad.primitives import shape
from fgrad.primitives.sparse import SparseStructure
from fgrad.sparse.arrays import SparseArray, as_sparse, issparse


def _coo(x):
    """``(data, rows, cols, shape)`` of a sparse array or a 2-d dense one."""
    if issparse(x):
        s = as_sparse(x)
        return s.data, s.structure.rows, s.structure.cols, s.shape
    x = x if isinstance(x, Tracer) or hasattr(x, "dtype") else np.asarray(x)
    m, n = _matrix_shape(get_aval(x).shape)
    return shape.reshape(x, (m * n,)), np.repeat(np.arange(m), n), np.tile(np.arange(n), m), \
        (m, n)


def _matrix_shape(s):
    if len(s) != 2:
        raise SparseShapeError(f"sparse builders take 2-d operands, got shape {s}")
    return s


def _built(data, rows, cols, shape_, format):
    out = SparseArray.from_parts(data, SparseStructure("coo", shape_, (rows, cols)))
    return out.asformat(format)


def kron(A, B, format=None):
    """The Kronecker product of ``A`` and ``B`` (SciPy's ``kron``; COO unless
    ``format`` says otherwise).

    >>> import numpy as np, scipy.sparse
    >>> K = kron(scipy.sparse.eye_array(2), np.array([[1.0, 2.0]]))
    >>> K.todense()
    array([[1., 2., 0., 0.],
           [0., 0., 1., 2.]])
    """
    da, ra, ca, (ma, na) = _coo(A)
    db, rb, cb, (mb, nb) = _coo(B)
    rows = (ra[:, None] * mb + rb[None, :]).ravel()
    cols = (ca[:, None] * nb + cb[None, :]).ravel()
    data = shape.reshape(shape.expand_dims(da, 1) * shape.expand_dims(db, 0),
                         (len(rows),))
    return _built(data, rows, cols, (ma * mb, na * nb), format)


def block_diag(mats, format=None, dtype=None):
    """The block-diagonal array of ``mats`` (SciPy's ``block_diag``; COO unless
    ``format`` says otherwise).

    >>> import numpy as np
    >>> block_diag([np.array([[1.0]]), np.array([[2.0, 3.0]])]).todense()
    array([[1., 0., 0.],
           [0., 2., 3.]])
    """
    parts = [_coo(m) for m in mats]
    if not parts:
        raise SparseShapeError("block_diag needs at least one block")
    row_offsets = np.cumsum([0] + [p[3][0] for p in parts])
    col_offsets = np.cumsum([0] + [p[3][1] for p in parts])
    rows = np.concatenate([p[1] + off for p, off in zip(parts, row_offsets)])
    cols = np.concatenate([p[2] + off for p, off in zip(parts, col_offsets)])
    data = _concatenate([p[0] for p in parts])
    if dtype is not None:
        data = ew.convert_element_type(data, np.dtype(dtype))
    return _built(data, rows, cols, (int(row_offsets[-1]), int(col_offsets[-1])), format)


def diags_array(diagonals, /, *, offsets=0, shape=None, format=None, dtype=None):
    """The sparse array with ``diagonals`` on the diagonals ``offsets`` (SciPy's
    ``diags_array``; CSR unless ``format`` says otherwise, where SciPy returns DIA).

    A diagonal is a vector as long as its diagonal, or one value repeated.

    >>> import numpy as np
    >>> diags_array([np.array([2.0, 2.0, 2.0]), np.array([-1.0])], offsets=[0, 1]).todense()
    array([[ 2., -1.,  0.],
           [ 0.,  2., -1.],
           [ 0.,  0.,  2.]])
    """
    single = np.ndim(offsets) == 0
    offsets = [int(offsets)] if single else [int(k) for k in offsets]
    diagonals = [diagonals] if single else list(diagonals)
    diagonals = [d if isinstance(d, Tracer) or hasattr(d, "dtype") else np.asarray(d)
                 for d in diagonals]
    if len(diagonals) != len(offsets):
        raise SparseShapeError(f"diags_array: {len(diagonals)} diagonals for "
                               f"{len(offsets)} offsets")
    if len(set(offsets)) != len(offsets):
        raise SparseShapeError(f"diags_array: an offset is repeated in {offsets}")
    if shape is None:
        n = get_aval(diagonals[0]).shape[0] + abs(offsets[0])
        shape = (n, n)
    m, n = shape
    rows, cols, values = [], [], []
    for d, k in zip(diagonals, offsets):
        length = max(0, min(m + min(k, 0), n - max(k, 0)))
        d_shape = get_aval(d).shape
        if d_shape not in ((length,), (1,), ()):
            raise SparseShapeError(f"diags_array: the diagonal at offset {k} of a {m}x{n} "
                                   f"array has {length} entries, got shape {d_shape}")
        i = np.arange(length)
        rows.append(i - min(k, 0))
        cols.append(i + max(k, 0))
        values.append(d if d_shape == (length,) else _broadcast(d, length))
    data = values[0] if len(values) == 1 else _concatenate(values)
    if dtype is not None:
        data = ew.convert_element_type(data, np.dtype(dtype))
    return _built(data, np.concatenate(rows), np.concatenate(cols), (m, n),
                  format or "csr")


def _broadcast(d, length):
    return shape.broadcast_to(shape.reshape(d, ()), (length,))


def _concatenate(values):
    dtype = np.result_type(*(get_aval(v).dtype for v in values))
    return shape.concatenate([ew.convert_element_type(v, dtype) for v in values], 0)
