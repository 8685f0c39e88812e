"""LU factors of a stack of NumPy matrices, kept, and solves with them.

`numpy.linalg.solve` factors each matrix and throws the factors away, so a
gradient that solves with ``a`` forward and with ``a^T`` backward factors it
twice. SciPy's ``lu_factor`` and ``lu_solve`` keep the factors but loop over a
stack in Python, about 10 µs a matrix: the whole cost of a small system. Here
small real matrices are factored several at once (`fgrad.compiler.lu_ir`),
and LAPACK's ``getrf`` (SciPy's Cython LAPACK, the function SciPy itself
calls) factors the others from one compiled loop; a second loop solves with
the factors by substitution. All are LLVM IR compiled by
`fgrad.compiler.native` (llvmlite) and kept in its disk cache, so a second
process loads them. ``getrf`` reaches its loop as an argument, never as a
constant: its address changes from process to process, the cached code does
not.

A C-ordered matrix read in Fortran order is its transpose: the factors kept
are those of ``a^T``, and no matrix is copied into Fortran order.

Importing this module installs `factor` and `solve` in
`fgrad.primitives.linalg` (``register_lu_kernels``) when llvmlite and SciPy
are installed (both optional); without them ``solve_factors`` keeps a copy of
the matrix and each solve factors it again.
"""
import functools
import math

import numpy as np

from fgrad.compiler import lu_ir, native
from fgrad.compiler.blas import lapack_address
from fgrad.primitives import linalg as _linalg

# LAPACK's type prefix for each dtype factored here
PREFIX = {np.dtype(np.float32): "s", np.dtype(np.float64): "d",
          np.dtype(np.complex64): "c", np.dtype(np.complex128): "z"}
#: the largest n for which real n x n matrices are factored several at once
#: (`fgrad.compiler.lu_ir`) rather than by ``getrf``: 64 stacked 32x32 float64
#: matrices took 0.28 ms against 0.53, 16 of 48x48 0.15 ms against 0.23, and
#: 16 of 64x64 as long as ``getrf`` (their work array outgrows the L1 and L2
#: caches)
LANES_MAX_N = 48


@functools.cache
def _getrf_loop(dtype):
    """``(loop, getrf's address)`` for ``dtype``: `fgrad.compiler.lu_ir`'s
    loop of ``getrf`` calls, and the routine it calls (SciPy's Cython LAPACK)."""
    loop = native.compile_ir(lu_ir.getrf_loop_ir(dtype, native.array_data_offset()),
                             "lu_getrf", ["i64"] * 3 + ["array"] * 3)
    return loop, lapack_address(PREFIX[dtype] + "getrf")


@functools.cache
def _solve_kernel(dtype, transpose):
    return native.compile_ir(lu_ir.solve_ir(dtype, transpose, native.array_data_offset()),
                             "lu_solve", ["i64"] * 6 + ["array"] * 4)


_LANE_DTYPES = frozenset({np.dtype(np.float32), np.dtype(np.float64)})


@functools.lru_cache(maxsize=None)
def _lanes_kernel(dtype):
    return native.compile_ir(lu_ir.factor_ir(dtype, native.array_data_offset()), "lu_factor",
                             ["i64", "i64"] + ["array"] * 5)


def _work(n, dtype):
    """Scratch for `lu_ir`'s kernel, its start aligned to a cache line (a
    vector then never straddles two)."""
    dtype = np.dtype(dtype)
    size, spare = n * n * lu_ir.lanes(dtype), 64 // dtype.itemsize
    buffer = np.empty(size + spare, dtype)
    skip = (-buffer.ctypes.data % 64) // dtype.itemsize
    return buffer[skip:skip + size]


def factor(a):
    """``(lu, piv)``: LAPACK's LU factors of each ``a[..., :, :]^T`` (C order) and
    its pivots (int32, 1-based); raises `numpy.linalg.LinAlgError` for a
    singular matrix, as `numpy.linalg.solve` does.

    >>> a = np.array([[2.0, 1.0], [1.0, 3.0]])
    >>> lu, piv = factor(a)
    >>> np.allclose(solve(lu, piv, np.eye(2), transpose=False), np.linalg.inv(a))
    True
    """
    lu, piv, info = factor_all(a)
    if (info > 0).any():
        raise np.linalg.LinAlgError("Singular matrix")
    return lu, piv


def factor_all(a):
    """``(lu, piv, info)``: `factor`'s factors and pivots, and LAPACK's ``info``
    for each matrix (0, or the 1-based column where a singular one's pivot
    vanished), with no error for a singular matrix. Real matrices of up to
    `LANES_MAX_N` rows are factored several at once (`fgrad.compiler.lu_ir`),
    others by one ``getrf`` call each.

    >>> factor_all(np.array([[[1.0, 2.0], [2.0, 4.0]], [[2.0, 0.0], [0.0, 1.0]]]))[2]
    array([2, 0], dtype=int32)
    """
    n = a.shape[-1]
    count = math.prod(a.shape[:-2])         # (of 0 x 0 matrices too: not a.size // n**2)
    piv = np.empty((count, n), np.int32)
    info = np.zeros(count, np.int32)
    if 0 < n <= LANES_MAX_N and a.dtype in _LANE_DTYPES and native.available():
        a = np.ascontiguousarray(a)
        lu = np.empty(a.shape, a.dtype)
        _lanes_kernel(a.dtype)(count, n, a, lu, piv, info, _work(n, a.dtype))
    else:
        lu = np.array(a, order="C", copy=True)
        if lu.size:                      # LAPACK rejects a 0 x 0 matrix
            loop, getrf = _getrf_loop(lu.dtype)
            loop(count, n, getrf, lu, piv, info)
    return lu, piv.reshape(lu.shape[:-1]), info.reshape(lu.shape[:-2])


def solve(lu, piv, b, transpose):
    """``a^-1 b`` (``a^-T b`` with ``transpose``) for ``(lu, piv)`` = `factor(a)`;
    ``b`` is (..., n, k), its leading axes broadcast against ``lu``'s.

    >>> a = np.array([[2.0, 1.0], [0.0, 3.0]])
    >>> solve(*factor(a), np.array([[1.0], [3.0]]), transpose=True)
    array([[0.5       ],
           [0.83333333]])
    """
    n, k = b.shape[-2:]
    batch = np.broadcast_shapes(lu.shape[:-2], b.shape[:-2])
    x = np.empty(batch + (n, k), lu.dtype)
    if x.size:
        count = x.size // (n * k)
        b = b.astype(lu.dtype, copy=False)
        # each operand's matrices, the step between two (0: one repeated)
        (lu, lu_step), (piv, piv_step), (b, b_step) = (
            _stacked(v, inner, batch) for v, inner in ((lu, 2), (piv, 1), (b, 2)))
        _solve_kernel(lu.dtype, bool(transpose))(count, n, k, lu_step, piv_step, b_step,
                                                 lu, piv, b, x)
    return x


def _stacked(v, inner, batch):
    """``(array, step)``: the matrices of ``v`` (its last ``inner`` axes)
    broadcast to the stack ``batch``, C-ordered, ``step`` elements apart;
    a single matrix is repeated by step 0, not copied."""
    shape = v.shape[v.ndim - inner:]
    if math.prod(v.shape[:v.ndim - inner]) == 1:
        return np.ascontiguousarray(v), 0
    return np.ascontiguousarray(np.broadcast_to(v, batch + shape)), math.prod(shape)


if native.available() and lapack_address("dgetrf") is not None:
    _linalg.register_lu_kernels(factor, solve, tuple(PREFIX))
