"""NumPy's own objects that are not array math, re-exported unchanged so that
``import fgrad.numpy as np`` can replace ``import numpy as np`` in a whole script.

Floating-point error control, printing options, scalar types and dtype
queries (``common_type`` and ``iterable`` read only a tracer's dtype and
length), integer index arithmetic (``ravel_multi_index``), and window or index
builders that take only integers: none has an array input to differentiate, so
the object is NumPy's own (``fnp.errstate is numpy.errstate``).
"""
import numpy as _np

# names that exist on every platform NumPy supports
_NAMES = [
    "errstate", "seterr", "geterr", "seterrcall", "geterrcall", "set_printoptions",
    "get_printoptions", "printoptions", "getbufsize", "setbufsize", "generic",
    "character", "flexible", "complexfloating", "object_", "str_", "bytes_", "void",
    "byte", "short", "intc", "long", "longlong", "ubyte", "ushort", "uintc", "uint",
    "ulong", "ulonglong", "uintp", "half", "single", "double", "longdouble", "csingle",
    "cdouble", "clongdouble", "isdtype", "min_scalar_type", "mintypecode", "typename",
    "broadcast_shapes", "ix_", "mask_indices", "common_type", "iterable",
    "ravel_multi_index", "unravel_index", "bartlett",
    "blackman", "hamming", "hanning", "kaiser", "ndindex", "get_include",
    "show_config", "show_runtime", "info",
    # the Array API's import of another library's arrays: data in, nothing traced
    "from_dlpack",
]
# extended-precision names only some platforms have
_PLATFORM_NAMES = ("float96", "float128", "complex192", "complex256")



def _exports():
    return {name: getattr(_np, name) for name in _NAMES + list(_PLATFORM_NAMES)
            if hasattr(_np, name)}


EXPORTS = _exports()
