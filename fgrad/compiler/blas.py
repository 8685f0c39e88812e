"""The BLAS and LAPACK routines compiled code calls: SciPy's, found at run time.

SciPy exports its BLAS to Cython as function pointers
(``scipy.linalg.cython_blas.__pyx_capi__``: one capsule a routine). A
`fgrad.compiler.program` calls ``dgemm``/``sgemm`` through them with
Fortran's conventions (every argument by reference, 32-bit integers,
column-major matrices). The addresses change from one process to the next,
so a program never holds them in its code (its machine code is cached on
disk): it reads them from the table `gemm_table` returns, an argument of
every call. Without SciPy (or without its Cython BLAS) there is no table,
and products stay NumPy calls.
"""
import ctypes
import functools
import importlib

import numpy as np

# the table's entries, in order: float64's gemm, float32's
GEMM_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))
_GEMM_NAMES = ("dgemm", "sgemm")
# the largest size Fortran's (32-bit) integers pass
MAX_BLAS_INT = 2 ** 31 - 1


@functools.lru_cache(maxsize=1)
def gemm_table():
    """A read-only ``uint64`` array of the addresses of SciPy's ``dgemm`` and
    ``sgemm`` (`GEMM_DTYPES` order), or None without SciPy's Cython BLAS.

    >>> table = gemm_table()
    >>> table is None or (table.dtype == np.uint64 and table.shape == (2,) and all(table))
    True
    """
    addresses = [_cython_address("cython_blas", name) for name in _GEMM_NAMES]
    if None in addresses:
        return None
    table = np.array(addresses, np.uint64)
    table.flags.writeable = False
    return table


@functools.cache
def lapack_address(name):
    """The address of SciPy's LAPACK routine ``name`` (``"dgetrf"``: Fortran's
    conventions), or None without SciPy's Cython LAPACK.

    >>> lapack_address("dgetrf") is None or lapack_address("dgetrf") > 0
    True
    """
    return _cython_address("cython_lapack", name)


def _cython_address(module, name):
    """The function pointer ``scipy.linalg.<module>`` exports to Cython for
    ``name`` (one capsule a routine), or None."""
    try:
        exported = importlib.import_module(f"scipy.linalg.{module}").__pyx_capi__
    except (ImportError, AttributeError):
        return None
    if name not in exported:
        return None
    # prototypes of our own: setting ``ctypes.pythonapi``'s would change
    # them for every other user of it
    get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
        ("PyCapsule_GetName", ctypes.pythonapi))
    get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi))
    return get_pointer(exported[name], get_name(exported[name]))
