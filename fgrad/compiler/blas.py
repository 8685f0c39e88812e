"""The BLAS and LAPACK routines compiled code calls: SciPy's, found at run time.

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
products and factorizations stay NumPy calls. `lapack_address` gives one
LAPACK routine's address, which the LU kernels of `fgrad.compiler.lu_kernels`
pass to their loops as an argument.
"""
import ctypes
import functools
import importlib
import logging
import os

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
_log = logging.getLogger("fgrad.jit")


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
    addresses = [_cython_address(f"cython_{module}", name) for module, name in ROUTINES]
    if None in addresses:
        _log.info("fgrad.jit: SciPy's Cython BLAS and LAPACK not found (%s missing): "
                  "compiled programs call NumPy for products and factorizations",
                  ", ".join(name for (_, name), a in zip(ROUTINES, addresses) if a is None))
        return None
    table = np.array(addresses, np.uint64)
    table.flags.writeable = False
    return table


@functools.lru_cache(maxsize=1)
def provider():
    """The BLAS and LAPACK `gemm_table` holds, in words (None without it):
    SciPy's version and the file of the library its addresses lie in
    (``scipy.linalg.cython_blas``'s wrappers, which call the BLAS SciPy was
    built with). Compiled code calls those wrappers, so their calling
    conventions are part of what its machine code depends on: a program's
    disk cache key includes this line (`fgrad.compiler.program`).

    >>> provider() is None or provider().startswith("scipy ")
    True
    """
    table = gemm_table()
    if table is None:
        return None
    version = importlib.import_module("scipy").__version__
    return f"scipy {version}, {_library_of(int(table[0]))}"


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _library_of(address):
    """The file name of the shared library ``address`` lies in (the C
    library's ``dladdr``), or "unknown library" where there is none."""
    try:
        dladdr = ctypes.CDLL(None).dladdr
    except (OSError, AttributeError):            # (Windows: no dladdr)
        return "unknown library"
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    info = _DlInfo()
    if not dladdr(address, ctypes.byref(info)) or not info.dli_fname:
        return "unknown library"
    return os.path.basename(info.dli_fname.decode(errors="replace"))


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
