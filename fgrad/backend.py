"""Which array module (NumPy or CuPy) a computation runs on.

Primitive implementations never name NumPy directly: they ask `array_module` for
the module that owns their inputs. CuPy is recognised without importing it: it can
only have made arrays if the user imported it, so we look in ``sys.modules``.
Other backends (a test stand-in, a future one) register with `register_backend`.
"""
import sys

import numpy

from .errors import BackendMismatchError

# array type -> module, for every backend but NumPy.  Configuration, written only by
# register_backend (at import time of a backend), never during a computation.
_backends = {}


def register_backend(array_type, module, name):
    """Declare that arrays of ``array_type`` are computed with ``module``.

    >>> import numpy as np
    >>> class Stand(np.ndarray): pass
    >>> register_backend(Stand, np, "stand-in")
    >>> unregister_backend(Stand)
    """
    _backends[array_type] = (module, name)


def unregister_backend(array_type):
    """Remove a backend added with `register_backend`."""
    _backends.pop(array_type, None)


def _register_cupy_if_imported():
    cupy = sys.modules.get("cupy")
    if cupy is not None and cupy.ndarray not in _backends:
        register_backend(cupy.ndarray, cupy, "cupy")


def backend_name(x):
    """'numpy', 'cupy', or a registered backend's name, for an array ``x``."""
    _register_cupy_if_imported()
    entry = _backends.get(type(x))
    return entry[1] if entry else "numpy"


def array_module(*arrays):
    """The array module that owns ``arrays``: NumPy unless one of them is foreign.

    Python scalars and NumPy arrays go with any backend (they are moved to the
    device on use); two foreign arrays from different backends, or a foreign
    array with a NumPy array of more than one element, are an error, because
    the implicit host/device copy would be silent and slow.

    >>> import numpy as np
    >>> array_module(np.ones(2), 3.0) is np
    True
    """
    if "cupy" in sys.modules:
        _register_cupy_if_imported()
    if not _backends:
        return numpy
    found = None
    for x in arrays:
        entry = _backends.get(type(x))
        if entry is not None:
            if found is not None and entry is not found:
                raise BackendMismatchError(_mixed_message(arrays))
            found = entry
    if found is None:
        return numpy
    for x in arrays:
        if type(x) is numpy.ndarray and x.ndim > 0:
            raise BackendMismatchError(_mixed_message(arrays))
    return found[0]


def _mixed_message(arrays):
    where = ", ".join(
        f"argument {i}: {backend_name(x)} {getattr(x, 'shape', '')}"
        for i, x in enumerate(arrays) if hasattr(x, "shape"))
    return (f"arrays from different backends were mixed in one operation ({where}). "
            "Move them to one device first, e.g. with cupy.asarray(x) or x.get() "
            "(fgrad.device_put once it exists).")


def check_same_backend(leaves, what="the arguments"):
    """Raise `BackendMismatchError` naming each leaf's backend if they differ.

    Called once per transformation call on the flattened inputs, so a mix is
    reported before any work is done, with the position of each argument.
    """
    if not _backends and "cupy" not in sys.modules:
        return
    names = [backend_name(x) if hasattr(x, "shape") and getattr(x, "ndim", 0) > 0
             else None for x in leaves]
    kinds = {n for n in names if n is not None}
    if len(kinds) > 1:
        where = ", ".join(f"leaf {i} is a {n} array" for i, n in enumerate(names)
                          if n is not None)
        raise BackendMismatchError(
            f"{what} mix array backends ({where}). Put them on one device first "
            "(cupy.asarray(x) to move to the GPU, x.get() to move to the host).")
