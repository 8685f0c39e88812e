"""LU factors of a stack of NumPy matrices, kept, and solves with them.

`numpy.linalg.solve` factors each matrix and throws the factors away, so a
gradient that solves with ``a`` forward and with ``a^T`` backward factors it
twice. SciPy's ``lu_factor`` and ``lu_solve`` keep the factors but loop over a
stack in Python, about 10 µs a matrix: the whole cost of a small system. Here
LAPACK's ``getrf`` and ``getrs`` (SciPy's Cython LAPACK, the functions SciPy
itself calls) run on every matrix of the stack from one numba loop, compiled
through `fgrad.compiler.kernel_cache` (so a second process loads it from
disk). The LAPACK functions reach the loop as arguments, never as constants:
their addresses change from process to process, the cached code does not.

A C-ordered matrix read in Fortran order is its transpose: the factors kept
are those of ``a^T``, and solving with ``a`` is ``getrs``'s transposed mode.
No matrix is copied into Fortran order; the right-hand sides are, one at a
time.

Importing this module installs `factor` and `solve` in
`fgrad.primitives.linalg` (``register_lu_kernels``) when numba and SciPy are
installed (both optional); without them ``solve_factors`` keeps a copy of the
matrix and each solve factors it again.
"""
import ctypes
import functools
import importlib.util

import numpy as np

from fgrad.compiler.kernel_cache import load_or_build
from fgrad.primitives import linalg as _linalg

# LAPACK's type prefix for each dtype factored here
PREFIX = {np.dtype(np.float32): "s", np.dtype(np.float64): "d",
          np.dtype(np.complex64): "c", np.dtype(np.complex128): "z"}

_FACTOR_SOURCE = """
def kernel(getrf, lu, piv, info):
    n = np.empty(1, np.int32)
    n[0] = lu.shape[1]
    for k in range(lu.shape[0]):
        getrf(n.ctypes.data, n.ctypes.data, lu[k].ctypes.data, n.ctypes.data,
              piv[k].ctypes.data, info[k:].ctypes.data)
"""

# getrs reads and writes the right-hand sides as Fortran columns: each b[m]
# goes through a scratch array holding it transposed. sizes = n, k, info.
_SOLVE_SOURCE = """
def kernel(getrs, trans, lu, piv, b, x):
    n, k = b.shape[1], b.shape[2]
    sizes = np.empty(3, np.int32)
    sizes[0] = n
    sizes[1] = k
    code = np.empty(1, np.uint8)
    code[0] = trans
    scratch = np.empty((k, n), x.dtype)
    for m in range(b.shape[0]):
        scratch[:, :] = b[m].T
        getrs(code.ctypes.data, sizes.ctypes.data, sizes[1:].ctypes.data,
              lu[m].ctypes.data, sizes.ctypes.data, piv[m].ctypes.data,
              scratch.ctypes.data, sizes.ctypes.data, sizes[2:].ctypes.data)
        x[m] = scratch.T
"""


@functools.lru_cache(maxsize=None)
def _lapack(name):
    # a ctypes function over SciPy's Cython LAPACK (Fortran: every argument by
    # reference); the loops call it with the arrays' addresses
    from numba.extending import get_cython_function_address
    nargs = {"getrf": 6, "getrs": 9}[name[1:]]
    address = get_cython_function_address("scipy.linalg.cython_lapack", name)
    return ctypes.CFUNCTYPE(None, *(ctypes.c_void_p,) * nargs)(address)


@functools.lru_cache(maxsize=None)
def _kernel(name, dtype):
    """``(loop, lapack)`` for LAPACK's ``name`` (getrf, getrs) on ``dtype``."""
    import numba
    lapack = _lapack(PREFIX[dtype] + name)
    item = numba.from_dtype(dtype)
    pointer = numba.typeof(lapack)
    if name == "getrf":
        signature = numba.void(pointer, item[:, :, ::1], numba.int32[:, ::1],
                               numba.int32[::1])
        return load_or_build(_FACTOR_SOURCE, signature), lapack
    # lu and piv may repeat a matrix along a broadcast axis (stride 0)
    stack = numba.types.Array(item, 3, "A", readonly=True)
    pivots = numba.types.Array(numba.int32, 2, "A", readonly=True)
    signature = numba.void(pointer, numba.int64, stack, pivots, stack, item[:, :, ::1])
    return load_or_build(_SOLVE_SOURCE, signature), lapack


def factor(a):
    """``(lu, piv)``: LAPACK's LU factors of each ``a[..., :, :]^T`` (C order) and
    its pivots (int32, 1-based); raises `numpy.linalg.LinAlgError` for a
    singular matrix, as `numpy.linalg.solve` does.

    >>> a = np.array([[2.0, 1.0], [1.0, 3.0]])
    >>> lu, piv = factor(a)
    >>> np.allclose(solve(lu, piv, np.eye(2), transpose=False), np.linalg.inv(a))
    True
    """
    lu = np.array(a, order="C", copy=True)
    n = lu.shape[-1]
    stack = lu.reshape(-1, n, n)
    piv = np.empty(stack.shape[:2], np.int32)
    info = np.zeros(stack.shape[0], np.int32)
    if lu.size:                          # LAPACK rejects a 0 x 0 matrix
        loop, getrf = _kernel("getrf", lu.dtype)
        loop(getrf, stack, piv, info)
    if (info > 0).any():
        raise np.linalg.LinAlgError("Singular matrix")
    return lu, piv.reshape(lu.shape[:-1])


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
        lu = np.broadcast_to(lu, batch + (n, n)).reshape(count, n, n)
        piv = np.broadcast_to(piv, batch + (n,)).reshape(count, n)
        if lu.strides[1:] != (n * lu.itemsize, lu.itemsize) or piv.strides[1] != 4:
            # LAPACK reads each matrix, and its pivots, as one block
            lu, piv = np.ascontiguousarray(lu), np.ascontiguousarray(piv)
        b = np.broadcast_to(b.astype(lu.dtype, copy=False), batch + (n, k))
        loop, getrs = _kernel("getrs", lu.dtype)
        # the factors are of a^T: a's system is getrs's transposed one
        loop(getrs, ord("N" if transpose else "T"), lu, piv, b.reshape(count, n, k),
             x.reshape(count, n, k))
    return x


if all(importlib.util.find_spec(m) is not None for m in ("numba", "scipy")):
    _linalg.register_lu_kernels(factor, solve, tuple(PREFIX))
