"""The BLAS and LAPACK routines compiled code calls: SciPy's, found at run time.

SciPy exports its BLAS and LAPACK to Cython as function pointers
(``scipy.linalg.cython_blas.__pyx_capi__`` and ``cython_lapack``'s: one
capsule a routine). A `fgrad.compiler.program` calls them through those
pointers with Fortran's conventions (every argument by reference, 32-bit
integers, column-major matrices): ``dgemm``/``sgemm`` (``zgemm``/``cgemm``
for complex values) for products, and
``getrf``, ``getrs``, ``potrf``, ``gesv``, ``syevd``, ``geqrf``, ``orgqr`` and
``gesdd`` for factorizations, solves and decompositions
(`fgrad.compiler.program_linalg`). The addresses change from one process to
the next, so a program never holds them in its code (its machine code is
cached on disk): it reads them from the table `gemm_table` returns, an
argument of every call, at the position `routine_index` gives. Without
SciPy (or without its Cython BLAS and LAPACK) there is no table, and
products and factorizations stay NumPy calls. `lapack_address` gives one
LAPACK routine's address, which the LU kernels of `fgrad.compiler.lu_kernels`
pass to their loops as an argument, and `call_lapack` calls one from Python
(the workspace queries a program makes once, when it is compiled).
"""
import ctypes
import functools
import importlib
import logging
import os

import numpy as np

# the Fortran type prefix of each dtype the routines below take
PREFIXES = {np.dtype(np.float64): "d", np.dtype(np.float32): "s"}
# and of the complex ones, which gemm alone takes
COMPLEX_PREFIXES = {np.dtype(np.complex128): "z", np.dtype(np.complex64): "c"}
# the dtypes gemm multiplies
GEMM_DTYPES = tuple(PREFIXES) + tuple(COMPLEX_PREFIXES)
# every routine in the table, in its order: (module, name)
ROUTINES = (("blas", "dgemm"), ("blas", "sgemm"),
            ("lapack", "dgetrf"), ("lapack", "sgetrf"),
            ("lapack", "dgetrs"), ("lapack", "sgetrs"),
            ("lapack", "dpotrf"), ("lapack", "spotrf"),
            # float64 only: NumPy's linalg computes a float32 matrix's
            # inverse, eigenvectors and factors in float64 too
            ("lapack", "dgesv"), ("lapack", "dsyevd"), ("lapack", "dgeqrf"),
            ("lapack", "dorgqr"), ("lapack", "dgesdd"))
ROUTINES += tuple(("blas", prefix + "gemm") for prefix in COMPLEX_PREFIXES.values())
# the largest size Fortran's (32-bit) integers pass
MAX_BLAS_INT = 2 ** 31 - 1
# OpenBLAS runs a call on its threads only above about this many
# multiply-adds (m * n * k); below it neither pool wakes
BLAS_THREADED_WORK = 1 << 16
# what OpenBLAS (NumPy's and SciPy's) and MKL read for their thread counts, in
# OpenBLAS's order of precedence
_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "MKL_NUM_THREADS",
                     "OMP_NUM_THREADS")

_log = logging.getLogger("fgrad.jit")


def blas_on_one_thread():
    """Whether BLAS runs on one thread: the environment says so (the first
    of `_THREAD_VARIABLES` set), or the machine has one CPU. Then no BLAS
    thread pool exists to be kept spinning (`fgrad.compiler.program.pays`).
    A limit set at run time (threadpoolctl) is not seen: the answer errs
    towards more threads.

    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"OPENBLAS_NUM_THREADS": "1"}):
    ...     blas_on_one_thread()
    True
    >>> with mock.patch.dict(os.environ, {"OPENBLAS_NUM_THREADS": "4", "OMP_NUM_THREADS": "1"}):
    ...     blas_on_one_thread() == (os.cpu_count() == 1)     # OpenBLAS's own first
    True
    """
    if os.cpu_count() == 1:
        return True
    for variable in _THREAD_VARIABLES:
        value = os.environ.get(variable, "").strip()
        if value:
            return value == "1"
    return False


def routine_index(name, dtype):
    """The position in `gemm_table` of routine ``name`` (``"getrf"``) for
    ``dtype`` (a key of `PREFIXES`, or of `COMPLEX_PREFIXES` for ``"gemm"``).

    >>> routine_index("gemm", np.float32), routine_index("getrf", np.float64)
    (1, 2)
    >>> ROUTINES[routine_index("gemm", np.complex64)]
    ('blas', 'cgemm')
    """
    dtype = np.dtype(dtype)
    prefix = PREFIXES[dtype] if dtype in PREFIXES else COMPLEX_PREFIXES[dtype]
    return [n for _, n in ROUTINES].index(prefix + name)


@functools.lru_cache(maxsize=1)
def gemm_table():
    """A read-only ``uint64`` array of the addresses of SciPy's `ROUTINES`
    (in order: `routine_index` finds them),
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


def call_lapack(name, arguments):
    """Call SciPy's LAPACK routine ``name`` (``"dgeqrf"``) from Python with
    ``arguments``, ctypes values each passed by reference, as Fortran takes
    them (a workspace query: ``lwork`` -1, the size comes back in ``work``).

    >>> import ctypes
    >>> n, info = ctypes.c_int32(3), ctypes.c_int32(1)
    >>> a, work, lwork = (ctypes.c_double * 9)(), (ctypes.c_double * 1)(), ctypes.c_int32(-1)
    >>> if lapack_address("dgeqrf"):
    ...     call_lapack("dgeqrf", [n, n, a, n, (ctypes.c_double * 3)(), work, lwork, info])
    ...     assert info.value == 0 and work[0] >= 3
    """
    routine = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * len(arguments))(lapack_address(name))
    routine(*[ctypes.addressof(x) for x in arguments])
