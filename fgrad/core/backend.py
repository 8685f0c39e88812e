"""Which array module (NumPy or CuPy) a computation runs on, and moving data.

Primitive implementations never name NumPy directly: they ask `array_module` for
the module that owns their inputs. CuPy is recognised without importing it: it can
only have made arrays if the user imported it, so we look in ``sys.modules``.
Other backends (a test stand-in, a future one) register with `register_backend`.

`device_put` moves arrays (or whole pytrees of them) between the host and a
device; nothing else in fgrad copies data across, so a host/device transfer only
happens where the user asked for one.
"""
import importlib
import sys

import numpy

from fgrad.core.errors import BackendMismatchError, DeviceError, OptionalDependencyError
from fgrad.core.trace import Tracer
from fgrad.core.tree import tree_map

# array type -> _Backend, for every backend but NumPy.  Configuration, written only
# by register_backend (at import time of a backend), never during a computation.
_backends = {}


class _Backend:
    __slots__ = ("array_type", "module", "name", "to_numpy", "from_numpy", "scipy",
                 "elementwise_kernel")

    def __init__(self, array_type, module, name, to_numpy, from_numpy, scipy,
                 elementwise_kernel=None):
        self.array_type, self.module, self.name = array_type, module, name
        self.to_numpy, self.from_numpy, self.scipy = to_numpy, from_numpy, scipy
        self.elementwise_kernel = elementwise_kernel


def register_backend(array_type, module, name, *, to_numpy=None, from_numpy=None,
                     scipy=None, elementwise_kernel=None):
    """Declare that arrays of ``array_type`` are computed with ``module``.

    ``to_numpy(x)`` copies one such array to a NumPy array (default
    ``module.asnumpy``) and ``from_numpy(a)`` copies a NumPy array in (default
    ``module.asarray``); `device_put` uses them, under the device name ``name``.
    ``scipy`` names the backend's SciPy counterpart package (``"cupyx.scipy"``),
    which `scipy_module` imports from. ``elementwise_kernel(in_params,
    out_params, operation, name)``, given, builds a kernel from CUDA C source
    (CuPy's ``ElementwiseKernel`` signature) whose call returns a tuple of its
    outputs; jit then fuses chains of elementwise equations into such kernels
    (see `fgrad.compiler.fusion`).

    >>> import numpy as np
    >>> class Stand(np.ndarray): pass
    >>> register_backend(Stand, np, "stand-in", to_numpy=np.asarray,
    ...                  from_numpy=lambda a: a.view(Stand))
    >>> unregister_backend(Stand)
    """
    _backends[array_type] = _Backend(
        array_type, module, name,
        to_numpy or getattr(module, "asnumpy", None) or (lambda x: x.get()),
        from_numpy or module.asarray, scipy, elementwise_kernel)


def elementwise_kernel_maker(xp):
    """The ``elementwise_kernel`` hook registered for array module ``xp``, or None.

    >>> import numpy as np
    >>> elementwise_kernel_maker(np) is None
    True
    """
    if xp is numpy:
        return None
    for entry in _backends.values():
        if entry.module is xp:
            return entry.elementwise_kernel
    return None


def _cupy_elementwise_kernel(in_params, out_params, operation, name):
    import cupy
    return cupy.ElementwiseKernel(in_params, out_params, operation, name,
                                  return_tuple=True)


def unregister_backend(array_type):
    """Remove a backend added with `register_backend`."""
    _backends.pop(array_type, None)


def _register_cupy_if_imported():
    cupy = sys.modules.get("cupy")
    if cupy is not None and getattr(cupy, "ndarray", None) is not None \
            and cupy.ndarray not in _backends:
        register_backend(cupy.ndarray, cupy, "cupy", scipy="cupyx.scipy",
                         elementwise_kernel=_cupy_elementwise_kernel)


def foreign_backends_active():
    """True once any non-NumPy backend could have made arrays (cheap check)."""
    return bool(_backends) or "cupy" in sys.modules


def backend_name(x):
    """'numpy', 'cupy', or a registered backend's name, for an array ``x``.

    >>> import numpy as np
    >>> backend_name(np.ones(2))
    'numpy'
    """
    _register_cupy_if_imported()
    entry = _backends.get(type(x))
    return entry.name if entry else "numpy"


def array_module(*arrays):
    """The array module that owns ``arrays``: NumPy unless one of them is foreign.

    Python and NumPy scalars go with any backend; a NumPy *array* (even 0-d)
    next to a device array is an error, because CuPy refuses it and the implicit
    host/device copy would be silent and slow.

    >>> import numpy as np
    >>> array_module(np.ones(2), 3.0) is np
    True
    """
    # The NumPy-only case is the eager hot path: one dict probe and out.
    if not _backends:
        if "cupy" not in sys.modules:
            return numpy
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
        if type(x) is numpy.ndarray:
            raise BackendMismatchError(_mixed_message(arrays))
    return found.module


def _mixed_message(arrays):
    where = ", ".join(
        f"argument {i} is a {backend_name(x)} array of shape {x.shape}"
        for i, x in enumerate(arrays) if hasattr(x, "shape"))
    return (f"arrays from different backends were mixed in one operation ({where}). "
            "Move them to one device first with fgrad.device_put(x, 'gpu') or "
            "fgrad.device_put(x, 'cpu').")


def check_same_backend(leaves, what="the arguments", describe=None):
    """Raise `BackendMismatchError` naming each leaf's backend if they differ.

    Called once per transformation call on the flattened inputs, so a mix is
    reported before any work is done. ``describe(i)`` names leaf ``i`` for the
    message ("argument 1", "argument 0, leaf 2"); it is only called on error.
    Scalars (Python, NumPy, 0-d NumPy arrays) go with any backend here: the
    transformation moves them to the device itself (see `asarray_on`).
    """
    if not foreign_backends_active():
        return
    names = []
    for x in leaves:
        x = _concrete(x)
        names.append(backend_name(x) if hasattr(x, "shape") and (
            getattr(x, "ndim", 0) > 0 or type(x) is not numpy.ndarray) else None)
    kinds = {n for n in names if n is not None}
    if len(kinds) > 1:
        describe = describe or (lambda i: f"leaf {i}")
        where = ", ".join(f"{describe(i)} is a {n} array" for i, n in enumerate(names)
                          if n is not None)
        raise BackendMismatchError(
            f"{what} mix array backends ({where}). Put them on one device first: "
            "fgrad.device_put(x, 'gpu') moves a value (or a pytree) to the GPU, "
            "fgrad.device_put(x, 'cpu') back to the host.")


def scipy_module(xp, name):
    """SciPy's submodule ``name`` ("special", "linalg") for array module ``xp``.

    ``scipy.special`` for NumPy, ``cupyx.scipy.special`` for CuPy: the SciPy-side
    counterpart of `array_module`, for impls of SciPy functions.

    >>> import numpy as np
    >>> scipy_module(np, "special").__name__
    'scipy.special'
    """
    if xp is numpy:
        try:
            return importlib.import_module(f"scipy.{name}")
        except ImportError:
            raise OptionalDependencyError(
                f"this function is evaluated by scipy.{name}, and SciPy is not "
                "installed: pip install 'fgrad[scipy]' (from a checkout: "
                "pip install '.[scipy]')") from None
    for entry in _backends.values():
        if entry.module is xp and entry.scipy is not None:
            return importlib.import_module(f"{entry.scipy}.{name}")
    raise NotImplementedError(
        f"the {getattr(xp, '__name__', xp)} backend has no SciPy counterpart "
        f"registered, so scipy.{name} functions cannot run on its arrays; move the "
        "data to the host with fgrad.device_put(x, 'cpu') for this computation.")


def module_of_leaves(leaves):
    """The array module of the first non-NumPy leaf, else NumPy."""
    if not foreign_backends_active():
        return numpy
    _register_cupy_if_imported()
    for x in leaves:
        entry = _backends.get(type(_concrete(x)))
        if entry is not None:
            return entry.module
    return numpy


def _concrete(x):
    """The array behind (nested) eager tracers; ``None`` for a staged one."""
    while isinstance(x, Tracer):
        try:
            x = x.concrete()
        except Exception:                   # staged tracers carry no value
            return None
    return x


def asarray_on(xp, x):
    """``x`` (a host value: scalar, list, NumPy array) as an array of module ``xp``.

    For constants entering a device computation (a Python scalar input to `grad`,
    a NumPy index array): a copy to the device, made once, on purpose.
    """
    if xp is numpy:
        return numpy.asarray(x)
    for entry in _backends.values():
        if entry.module is xp:
            if type(x) is entry.array_type:
                return x
            return entry.from_numpy(numpy.asarray(x))
    return xp.asarray(x)


# ---------------------------------------------------------------------------
# Moving data: device_put
# ---------------------------------------------------------------------------

_CPU_NAMES = ("cpu", "numpy", "host")
_GPU_NAMES = ("gpu", "cuda", "cupy")


def _cupy_backend():
    """The CuPy backend entry, importing CuPy; a `DeviceError` if it cannot run."""
    try:
        import cupy
    except ImportError as err:
        raise DeviceError(
            "device_put(x, 'gpu') needs CuPy, which is not installed (import failed: "
            f"{err}). Install it with pip install 'fgrad[cuda]' (or a cupy-cudaXXx "
            "wheel matching your CUDA toolkit).") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:               # CUDA driver missing or broken
        raise DeviceError(
            f"device_put(x, 'gpu'): CuPy is installed but no CUDA device is usable "
            f"({type(err).__name__}: {err}). Check nvidia-smi and the CUDA driver, "
            "or keep the data on the host with device_put(x, 'cpu').") from None
    if count < 1:
        raise DeviceError("device_put(x, 'gpu'): CuPy found no CUDA device. Keep "
                          "the data on the host with device_put(x, 'cpu').")
    _register_cupy_if_imported()
    return _backends[cupy.ndarray]


def _target(device):
    if not isinstance(device, str):
        raise DeviceError(f"device must be a string such as 'gpu' or 'cpu', got "
                          f"{device!r}")
    name = device.lower()
    if name in _CPU_NAMES:
        return None
    for entry in _backends.values():
        if entry.name == name and name not in _GPU_NAMES:
            return entry
    if name in _GPU_NAMES:
        return _cupy_backend()
    known = ", ".join(repr(n) for n in ("gpu", "cpu", *(
        e.name for e in _backends.values() if e.name not in _GPU_NAMES)))
    raise DeviceError(f"unknown device {device!r}: use one of {known}")


def _to_host(x):
    entry = _backends.get(type(x))
    if entry is not None:
        return entry.to_numpy(x)
    return x


def _put_leaf(x, target):
    if isinstance(x, Tracer):
        raise DeviceError(
            "device_put was called on a traced value inside a transformation; move "
            "the inputs before calling grad/jvp/vmap (device_put(args, 'gpu')) "
            "rather than inside the transformed function.")
    if target is None:
        return _to_host(x) if type(x) in _backends else (
            numpy.asarray(x) if isinstance(x, (list, tuple, int, float, complex,
                                               bool, numpy.generic)) else x)
    if type(x) is target.array_type:
        return x
    if isinstance(x, (str, bytes)) or x is None:
        return x
    return target.from_numpy(numpy.asarray(_to_host(x)))


def device_put(x, device="gpu"):
    """``x`` (an array or any pytree of arrays) moved to ``device``.

    ``device`` is ``"gpu"`` (CuPy, the current CUDA device) or ``"cpu"``
    (NumPy). Leaves already on the target are returned as they are; scalars
    become 0-d arrays of the target. Moving data is the only host/device copy
    fgrad makes: do it once, before the transformation, not inside it.

    >>> import numpy as np
    >>> params = {"w": np.ones((2, 2)), "b": 0.5}
    >>> host = device_put(params, "cpu")
    >>> type(host["w"]).__name__, type(host["b"]).__name__
    ('ndarray', 'ndarray')
    """
    target = _target(device)
    return tree_map(lambda leaf: _put_leaf(leaf, target), x)
