"""LU factors of a stack of NumPy matrices, kept, and solves with them.

`numpy.linalg.solve` factors each matrix and throws the factors away, so a
gradient that solves with ``a`` forward and with ``a^T`` backward factors it
twice. SciPy's ``lu_factor`` and ``lu_solve`` keep the factors but loop over a
stack in Python, about 10 µs a matrix: the whole cost of a small system. Here
LAPACK's ``getrf`` (SciPy's Cython LAPACK, the function SciPy itself calls)
factors every matrix of the stack from one numba loop, and a second loop
solves with the factors by substitution; both are compiled
through `fgrad.compiler.kernel_cache` (so a second process loads it from
disk). ``getrf`` reaches its loop as an argument, never as a constant: its
address changes from process to process, the cached code does not.

A C-ordered matrix read in Fortran order is its transpose: the factors kept
are those of ``a^T``, and no matrix is copied into Fortran order.

Importing this module installs `factor` and `solve` in
`fgrad.primitives.linalg` (``register_lu_kernels``) when numba and SciPy are
installed (both optional); without them ``solve_factors`` keeps a copy of the
matrix and each solve factors it again.
"""
import ctypes
import functools
import importlib.util
import math

import numpy as np

from fgrad.compiler import lu_ir, native
from fgrad.compiler.kernel_cache import load_or_build
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

_FACTOR_SOURCE = """
def kernel(getrf, lu, piv, info):
    n = np.empty(1, np.int32)
    n[0] = lu.shape[1]
    for k in range(lu.shape[0]):
        getrf(n.ctypes.data, n.ctypes.data, lu[k].ctypes.data, n.ctypes.data,
              piv[k].ctypes.data, info[k:].ctypes.data)
"""

# The solves with the factors are substitutions written out here, not LAPACK's
# getrs: OpenBLAS runs getrs's triangular solves on its thread pool once there
# are two right-hand sides, and on a busy machine waking it took some 7 ms a
# call against 40 µs for a 20x20 system. The factors in lu[m] (C order) are
# F = L\U of a^T with a^T = P L U, so lu[m][i, j] = F[j, i]:
# - a x = b, a = U^T L^T P^T: forward substitution with U^T (lu's lower
#   triangle and diagonal), back substitution with L^T (its strict upper one,
#   unit diagonal), then the row swaps of P in reverse order;
# - a^T x = b: the swaps in order, then L and U, read by rows of lu.
_SOLVE_SOURCE = """
def kernel(transpose, lu, piv, b, x):
    n, k = b.shape[1], b.shape[2]
    for m in range(b.shape[0]):
        f = lu[m]
        w = x[m]
        w[:, :] = b[m]
        # phase 0 or 2: P's row swaps (first, in order, for a^T; last, in
        # reverse order, for a); phase 1: the two substitutions
        for phase in range(3):
            if phase == (0 if transpose else 2):
                for s in range(n):
                    r = s if transpose else n - 1 - s
                    q = piv[m, r] - 1
                    if q != r:
                        for c in range(k):
                            t = w[r, c]
                            w[r, c] = w[q, c]
                            w[q, c] = t
            elif phase == 1 and transpose:
                for j in range(n):
                    for i in range(j + 1, n):
                        v = f[j, i]
                        for c in range(k):
                            w[i, c] -= v * w[j, c]
                for j in range(n - 1, -1, -1):
                    d = f[j, j]
                    for c in range(k):
                        w[j, c] /= d
                    for i in range(j):
                        v = f[j, i]
                        for c in range(k):
                            w[i, c] -= v * w[j, c]
            elif phase == 1:
                # by columns of lu, as above: row by row, each row would wait
                # on its own last update (a third slower at 32x32)
                for j in range(n):
                    d = f[j, j]
                    for c in range(k):
                        w[j, c] /= d
                    for i in range(j + 1, n):
                        v = f[i, j]
                        for c in range(k):
                            w[i, c] -= v * w[j, c]
                for j in range(n - 1, -1, -1):
                    for i in range(j):
                        v = f[i, j]
                        for c in range(k):
                            w[i, c] -= v * w[j, c]
"""


@functools.lru_cache(maxsize=None)
def _lapack(name):
    # a ctypes function over SciPy's Cython LAPACK (Fortran: every argument by
    # reference); the loops call it with the arrays' addresses
    from numba.extending import get_cython_function_address
    address = get_cython_function_address("scipy.linalg.cython_lapack", name)
    return ctypes.CFUNCTYPE(None, *(ctypes.c_void_p,) * 6)(address)


@functools.lru_cache(maxsize=None)
def _factor_kernel(dtype):
    """``(loop, getrf)`` for ``dtype``."""
    import numba
    getrf = _lapack(PREFIX[dtype] + "getrf")
    item = numba.from_dtype(dtype)
    signature = numba.void(numba.typeof(getrf), item[:, :, ::1], numba.int32[:, ::1],
                           numba.int32[::1])
    return load_or_build(_FACTOR_SOURCE, signature), getrf


@functools.lru_cache(maxsize=None)
def _solve_kernel(dtype, contiguous):
    import numba
    item = numba.from_dtype(dtype)
    # lu, piv and b may repeat a matrix along a broadcast axis (stride 0);
    # C-ordered ones (no broadcast: the usual case) get loops of their own,
    # which LLVM vectorises knowing the strides (10-15% faster at 32x32)
    layout = "C" if contiguous else "A"
    stack = numba.types.Array(item, 3, layout, readonly=True)
    pivots = numba.types.Array(numba.int32, 2, layout, readonly=True)
    signature = numba.void(numba.boolean, stack, pivots, stack, item[:, :, ::1])
    return load_or_build(_SOLVE_SOURCE, signature)


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
            loop, getrf = _factor_kernel(lu.dtype)
            loop(getrf, lu.reshape(-1, n, n), piv, info)
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
    same = lu.shape[:-2] == b.shape[:-2]
    batch = lu.shape[:-2] if same else np.broadcast_shapes(lu.shape[:-2], b.shape[:-2])
    x = np.empty(batch + (n, k), lu.dtype)
    if x.size:
        count = x.size // (n * k)
        if not same:
            lu = np.broadcast_to(lu, batch + (n, n))
            piv = np.broadcast_to(piv, batch + (n,))
            b = np.broadcast_to(b, batch + (n, k))
        lu, piv = lu.reshape(count, n, n), piv.reshape(count, n)
        b = b.astype(lu.dtype, copy=False).reshape(count, n, k)
        contiguous = lu.flags.c_contiguous and piv.flags.c_contiguous and b.flags.c_contiguous
        _solve_kernel(lu.dtype, contiguous)(bool(transpose), lu, piv, b, x.reshape(count, n, k))
    return x


if all(importlib.util.find_spec(m) is not None for m in ("numba", "scipy")):
    _linalg.register_lu_kernels(factor, solve, tuple(PREFIX))
