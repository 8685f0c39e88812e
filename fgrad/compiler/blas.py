"""The BLAS and LAPACK routines compiled programs call: SciPy's, found at run time.

SciPy exports its BLAS and LAPACK to Cython as function pointers
(``scipy.linalg.cython_blas.__pyx_capi__`` and ``cython_lapack``'s: one
capsule a routine). A `fgrad.compiler.program` calls them through those
pointers with Fortran's conventions (every argument by reference, 32-bit
integers, column-major matrices): ``dgemm``/``sgemm`` for products, and
``getrf``, ``getrs`` and ``potrf`` for factorizations and solves
(`fgrad.compiler.program_linalg`). The addresses change from one process to
the next, so a program never holds them in its code (its machine code is
cached on disk): it reads them from the table `gemm_table` returns, an
argument of every call, at the position `routine_index` gives. Without
SciPy (or without its Cython BLAS and LAPACK) there is no table, and
products and factorizations stay NumPy calls.
"""
import ctypes
import functools

import numpy as np

# the table's first entries, in order: float64's gemm, float32's
GEMM_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))
# the Fortran type prefix of each dtype the routines below take
PREFIXES = {np.dtype(np.float64): "d", np.dtype(np.float32): "s"}
# every routine in the table, in its order: (module, name)
ROUTINES = (("blas", "dgemm"), ("blas", "sgemm"),
            ("lapack", "dgetrf"), ("lapack", "sgetrf"),
            ("lapack", "dgetrs"), ("lapack", "sgetrs"),
            ("lapack", "dpotrf"), ("lapack", "spotrf"))
# the largest size Fortran's (32-bit) integers pass
MAX_BLAS_INT = 2 ** 31 - 1


def routine_index(name, dtype):
    """The position in `gemm_table` of routine ``name`` (``"getrf"``) for
    ``dtype`` (a key of `PREFIXES`).

    >>> routine_index("gemm", np.float32), routine_index("getrf", np.float64)
    (1, 2)
    """
    return [n for _, n in ROUTINES].index(PREFIXES[np.dtype(dtype)] + name)


@functools.lru_cache(maxsize=1)
def gemm_table():
    """A read-only ``uint64`` array of the addresses of SciPy's `ROUTINES`
    (gemm first, in `GEMM_DTYPES` order; `routine_index` finds the others),
    or None without SciPy's Cython BLAS and LAPACK.

    >>> table = gemm_table()
    >>> table is None or (table.dtype == np.uint64 and table.shape == (len(ROUTINES),)
    ...                   and all(table))
    True
    """
    try:
        from scipy.linalg import cython_blas, cython_lapack
    except ImportError:
        return None
    capsules = {"blas": getattr(cython_blas, "__pyx_capi__", {}),
                "lapack": getattr(cython_lapack, "__pyx_capi__", {})}
    if not all(name in capsules[module] for module, name in ROUTINES):
        return None
    # prototypes of our own: setting ``ctypes.pythonapi``'s would change
    # them for every other user of it
    get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
        ("PyCapsule_GetName", ctypes.pythonapi))
    get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi))
    table = np.array([get_pointer(capsules[m][n], get_name(capsules[m][n]))
                      for m, n in ROUTINES], np.uint64)
    table.flags.writeable = False
    return table
