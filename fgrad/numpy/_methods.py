"""The array protocol of tracers: operators, indexing, methods and attributes.

One table serves every tracer type (reverse and forward mode's, jit's staging
tracers, vmap's batch tracers): all are `fgrad.core.trace.Tracer`s, and this
module installs NumPy's array protocol and the Array API standard's on that
class. They live here, not in the core, because they call fgrad.numpy
functions and the core must not depend on any primitive. Operators bind their
primitives directly (they are the hot path of eager ``grad``); the methods
forward to the fgrad.numpy function of the same name, installed by `install`
once the package has defined them.
"""
import sys

import numpy as np

from fgrad.core.backend import array_module
from fgrad.core.errors import (
    ArrayNamespaceError,
    DeviceError,
    ImmutableArrayError,
    MemoryLayoutError,
)
from fgrad.core.trace import Tracer, get_aval
from fgrad.interpreters.sources import describe_source
from fgrad.numpy import _updates
from fgrad.numpy._devices import traced_device
from fgrad.numpy._products import matmul
from fgrad.numpy._temporaries import reusing_operator
from fgrad.primitives import elementwise as ew
from fgrad.primitives import indexing, shape


def _swap(fn):
    return lambda self, other: fn(other, self)


_BINARY = {"add": ew.add, "sub": ew.subtract, "mul": ew.multiply,
           "truediv": ew.divide, "pow": ew.power, "matmul": matmul,
           "mod": ew.remainder, "floordiv": ew.floor_divide,
           "and": ew.bitwise_and, "or": ew.bitwise_or, "xor": ew.bitwise_xor,
           "lshift": ew.left_shift, "rshift": ew.right_shift}
_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "pow": "**",
            "matmul": "@", "mod": "%", "floordiv": "//", "and": "&", "or": "|",
            "xor": "^", "lshift": "<<", "rshift": ">>"}
# the binding functions take (x, y), so they serve as the methods themselves
for _name, _fn in _BINARY.items():
    setattr(Tracer, f"__{_name}__", _fn)
    setattr(Tracer, f"__r{_name}__", _swap(_fn))
    # `x += y` gives the tracer x a new value, which every holder of x sees
    setattr(Tracer, f"__i{_name}__", _updates.inplace_operator(_fn, _SYMBOLS[_name]))
# a dead temporary's buffer takes the result of these (fgrad.numpy._temporaries)
for _name, _prim in {"add": ew.add_p, "sub": ew.subtract_p, "mul": ew.multiply_p,
                     "truediv": ew.divide_p}.items():
    setattr(Tracer, f"__{_name}__", reusing_operator(_BINARY[_name], _prim))

for _name, _fn in {"lt": ew.less, "le": ew.less_equal, "gt": ew.greater,
                   "ge": ew.greater_equal, "eq": ew.equal, "ne": ew.not_equal}.items():
    setattr(Tracer, f"__{_name}__", _fn)

Tracer.__divmod__ = lambda self, other: (ew.floor_divide(self, other),
                                         ew.remainder(self, other))
Tracer.__rdivmod__ = lambda self, other: (ew.floor_divide(other, self),
                                          ew.remainder(other, self))
Tracer.__neg__ = ew.negative
Tracer.__invert__ = ew.invert
# a new array in NumPy, so a new tracer: an update of one leaves the other
Tracer.__pos__ = Tracer.clone
Tracer.__abs__ = lambda self: ew.absolute(self)
Tracer.__getitem__ = lambda self, index: indexing.getitem(self, index)
Tracer.__setitem__ = _updates.setitem
# elementwise __eq__ makes tracers unhashable, as NumPy arrays are
Tracer.__hash__ = None
Tracer.__copy__ = Tracer.clone
Tracer.__deepcopy__ = lambda self, memo=None: self.clone()
Tracer.__contains__ = lambda self, value: bool(ew.equal(self, value).any())
Tracer.__round__ = lambda self, ndigits=None: round(float(self), ndigits)

Tracer.T = property(lambda self: shape.transpose(self))
Tracer.mT = property(lambda self: shape.swap_last_axes(self))
Tracer.real = property(lambda self: ew.real(self))
Tracer.imag = property(lambda self: ew.imag(self))
Tracer.itemsize = property(lambda self: self.dtype.itemsize)
Tracer.nbytes = property(lambda self: self.size * self.dtype.itemsize)


# -- the Array API standard's attributes ---------------------------------------

# the standard's versions fgrad.numpy answers for, as NumPy's namespace does
API_VERSIONS = ("2021.12", "2022.12", "2023.12", "2024.12")


def _array_namespace(self, api_version=None):
    if api_version is not None and api_version not in API_VERSIONS:
        raise ValueError(f"fgrad.numpy implements the Array API standard versions "
                         f"{', '.join(API_VERSIONS)}, not {api_version!r}")
    caller = sys._getframe(1)
    if caller.f_code.co_name == "array_namespace" and \
            "array_api_compat" in caller.f_globals.get("__name__", ""):
        _refuse_numpy_arrays_beside(self, caller)
    return Tracer.numpy_namespace


# array_api_compat's, SciPy's and scikit-learn's functions for a namespace
_NAMESPACE_HELPERS = frozenset({"array_namespace", "get_namespace",
                                "get_namespace_and_device"})


def _refuse_numpy_arrays_beside(tracer, compat_frame):
    """array_api_compat's ``array_namespace(*xs)`` (scikit-learn's and SciPy's)
    is asking ``tracer`` for its namespace: if a NumPy array is among ``xs`` it
    will fail with "Multiple namespaces"; say instead which line asked, and
    why, before it does."""
    arrays = compat_frame.f_locals.get("xs", ())
    numpy_arrays = [x for x in arrays if isinstance(x, (np.ndarray, np.generic))]
    if not numpy_arrays:
        return
    frame = compat_frame            # the line that asked, above the asking helpers
    while frame is not None and (frame.f_code.co_name in _NAMESPACE_HELPERS or
                                 "array_api_compat" in frame.f_globals.get("__name__", "")):
        frame = frame.f_back
    where = "" if frame is None else \
        f" at {describe_source((frame.f_code.co_filename, frame.f_lineno))}"
    shapes = ", ".join(str(get_aval(x)) for x in numpy_arrays)
    raise ArrayNamespaceError(
        f"the Array API namespace of a traced array ({tracer.aval}) and of NumPy "
        f"array(s) ({shapes}) was asked for together{where}. An array made without "
        "device= is a NumPy array (fnp.ones(3), fnp.asarray(c), as outside every "
        "transformation), which cannot hold a traced value. Make constants of your "
        "own on the traced value's device: fnp.asarray(c, device=x.device); where "
        "the library makes the array itself, that function cannot run on traced "
        "values (docs/array-api.md lists the ones known).")


def _to_device(self, device, /, *, stream=None):
    if device == self.device or (device == "cpu" and self.device == "cpu"):
        return self
    raise DeviceError(
        f"to_device({device!r}) was called on a traced value on {self.device!r}: "
        "fgrad does not move data inside a transformation. Move the inputs before "
        "calling grad/jit/vmap, with fgrad.device_put(args, 'gpu').")


Tracer.__array_namespace__ = _array_namespace
Tracer.to_device = _to_device
# equal to the data's device, and naming the transformation that arrays made
# with ``device=x.device`` join (fgrad.numpy._devices)
Tracer.device = property(traced_device)


# -- what a traced value cannot answer: its memory -------------------------------

class _NoMemoryAttribute(MemoryLayoutError, AttributeError):
    """A memory attribute's refusal is also an AttributeError, so that a library
    probing for it (``getattr(x, "flags", None)``, ``hasattr(x, "strides")``, as
    scikit-learn's check_array does) treats a traced value as an array without
    NumPy's memory, as it treats a PyTorch tensor."""


def _no_memory(what, error=MemoryLayoutError):
    def refuse(self, *args, **kwargs):
        raise error(
            f"{what} of a traced array ({self.aval}): a traced value has a shape, a "
            "dtype and (outside jit and vmap) a value, but no memory of its own to "
            "describe or reinterpret. Work on the value (x.astype, x.reshape, "
            "x.copy()); for raw bytes, compute outside the transformation.")
    return refuse


for _name in ("strides", "ctypes", "data", "flags"):
    setattr(Tracer, _name, property(_no_memory(f"x.{_name}", _NoMemoryAttribute)))
for _name in ("byteswap", "getfield", "setfield", "setflags"):
    setattr(Tracer, _name, _no_memory(f"x.{_name}()"))


def _view(self, dtype=None, type=None):
    if (dtype is None or np.dtype(dtype) == self.dtype) and type in (None, np.ndarray):
        return indexing.getitem(self, Ellipsis)  # a view of all of x
    return _no_memory("x.view(dtype) (a reinterpretation of its bytes)")(self)


Tracer.view = _view
Tracer.tobytes = lambda self, order="C": self.value_for(".tobytes()").tobytes(order)
Tracer.tofile = lambda self, *args, **kwargs: self.value_for(".tofile()").tofile(
    *args, **kwargs)
Tracer.dump = lambda self, file: self.value_for(".dump()").dump(file)
Tracer.dumps = lambda self: self.value_for(".dumps()").dumps()


def _reduce(self):
    # pickle saves the value, as x.dumps() does (unpickled, an array of the
    # value's own library: NumPy's, or CuPy's on a GPU)
    value = self.value_for("pickle.dumps()")
    return array_module(value).asarray(value).__reduce__()


def _dlpack(self, **kwargs):
    # the standard's export to another library: a conversion, as np.asarray(x)
    value = self.value_for("__dlpack__() (an export to another library)")
    return array_module(value).asarray(value).__dlpack__(**kwargs)


def _dlpack_device(self):
    value = self
    while isinstance(value, Tracer):
        value = value.carried()
    # a value staged by jit has no data yet: it runs where its inputs are (the host)
    device = getattr(value, "__dlpack_device__", None)
    return (1, 0) if device is None else device()       # 1: DLPack's kDLCPU


def _delitem(self, key):
    raise ValueError("cannot delete array elements")    # NumPy's own refusal


Tracer.__reduce__ = _reduce
Tracer.__dlpack__ = _dlpack
Tracer.__dlpack_device__ = _dlpack_device
Tracer.__delitem__ = _delitem


# -- methods that call fgrad.numpy functions --------------------------------------

def _no_out(out, name):
    if out is not None:
        raise ImmutableArrayError(
            f"x.{name}(out=...) writes its result into an existing array; under a "
            f"transformation use the value it returns: y = x.{name}(...)")


def _axes_arg(args):
    if len(args) == 1 and (args[0] is None or isinstance(args[0], (tuple, list))):
        return args[0]
    return args or None


def install(fnp):
    """Install the methods that call functions of ``fnp`` (fgrad.numpy) on
    `Tracer`, with ``numpy.ndarray``'s signatures."""
    T = Tracer

    def sum(self, axis=None, dtype=None, out=None, keepdims=False):
        _no_out(out, "sum")
        return fnp.sum(self, axis, dtype, keepdims)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False):
        _no_out(out, "prod")
        return fnp.prod(self, axis, dtype, keepdims)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False):
        _no_out(out, "mean")
        return fnp.mean(self, axis, dtype, keepdims)

    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        _no_out(out, "var")
        return fnp.var(self, axis, dtype, ddof, keepdims)

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        _no_out(out, "std")
        return fnp.std(self, axis, dtype, ddof, keepdims)

    def reduction(name):
        fn = getattr(fnp, name)

        def method(self, axis=None, out=None, keepdims=False):
            _no_out(out, name)
            return fn(self, axis, keepdims=keepdims)
        method.__name__ = name
        return method

    def cumulative(name):
        fn = getattr(fnp, name)

        def method(self, axis=None, dtype=None, out=None):
            _no_out(out, name)
            return fn(self, axis, dtype)
        method.__name__ = name
        return method

    def clip(self, min=None, max=None, out=None):
        _no_out(out, "clip")
        return fnp.clip(self, min, max)

    def round(self, decimals=0, out=None):
        _no_out(out, "round")
        return fnp.round(self, decimals)

    def take(self, indices, axis=None, out=None, mode="raise"):
        _no_out(out, "take")
        return fnp.take(self, indices, axis)

    def trace(self, offset=0, axis1=0, axis2=1, dtype=None, out=None):
        _no_out(out, "trace")
        return fnp.trace(self, offset, axis1, axis2, dtype)

    def compress(self, condition, axis=None, out=None):
        _no_out(out, "compress")
        return fnp.compress(condition, self, axis)

    def choose(self, choices, out=None, mode="raise"):
        _no_out(out, "choose")
        return fnp.choose(self, choices, mode)

    def argsort(self, axis=-1, kind=None, order=None, *, stable=None):
        return fnp.argsort(self, axis, kind, stable=stable)

    def argpartition(self, kth, axis=-1, kind="introselect", order=None):
        return fnp.argpartition(self, kth, axis, kind, order)

    def reshape(self, *shape_, order="C"):
        new = shape_[0] if len(shape_) == 1 and not isinstance(shape_[0], int) else shape_
        return fnp.reshape(self, new, order=order)

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        if not copy and self.dtype == dtype:
            return self                     # NumPy's astype(copy=False): x itself
        return fnp.astype(self, dtype)      # a new tracer, as NumPy copies

    # in-place methods: the tracer takes the new value (fgrad.numpy._updates)
    def sort(self, axis=-1, kind=None, order=None, *, stable=None):
        _updates.update(self, fnp.sort(self, axis, kind, stable=stable))

    def partition(self, kth, axis=-1, kind="introselect", order=None):
        _updates.update(self, fnp.partition(self, kth, axis, kind, order))

    def fill(self, value):
        _updates.setitem(self, Ellipsis, value)

    def put(self, indices, values, mode="raise"):
        flat = shape.reshape(self, (-1,))
        indices = fnp.reshape(fnp.asarray(indices), (-1,))
        # values repeat cyclically over the indices, as in NumPy
        values = fnp.resize(fnp.asarray(values), indices.shape)
        flat = indexing.set_at(flat, indices, fnp.astype(values, self.dtype))
        _updates.update(self, shape.reshape(flat, self.shape))

    def resize(self, *new_shape, refcheck=True):
        raise ImmutableArrayError(
            "x.resize(shape) changes the size of x in place, which NumPy allows only "
            "for an array nothing else refers to; a traced array is referred to by "
            "its transformation. Use x = fnp.resize(x, shape) (which repeats x), or "
            "x = fnp.pad(x.ravel(), (0, n - x.size)).reshape(shape) for NumPy's "
            "zero filling.")

    methods = {
        "sum": sum, "prod": prod, "mean": mean, "var": var, "std": std,
        "max": reduction("max"), "min": reduction("min"), "all": reduction("all"),
        "any": reduction("any"), "argmax": reduction("argmax"),
        "argmin": reduction("argmin"), "cumsum": cumulative("cumsum"),
        "cumprod": cumulative("cumprod"), "clip": clip, "round": round, "take": take,
        "trace": trace, "compress": compress, "choose": choose, "argsort": argsort,
        "argpartition": argpartition, "reshape": reshape, "astype": astype,
        "sort": sort, "partition": partition, "fill": fill, "put": put,
        "resize": resize,
        "transpose": lambda self, *axes: fnp.transpose(self, _axes_arg(axes)),
        "swapaxes": lambda self, axis1, axis2: fnp.swapaxes(self, axis1, axis2),
        "squeeze": lambda self, axis=None: fnp.squeeze(self, axis),
        "ravel": lambda self, order="C": fnp.ravel(self, order),
        # a copy in NumPy: a new tracer
        "flatten": lambda self, order="C": fnp.ravel(self, order).clone(),
        "diagonal": lambda self, offset=0, axis1=0, axis2=1: fnp.diagonal(
            self, offset, axis1, axis2),
        "repeat": lambda self, repeats, axis=None: fnp.repeat(self, repeats, axis),
        "nonzero": lambda self: fnp.nonzero(self),
        "searchsorted": lambda self, v, side="left", sorter=None: fnp.searchsorted(
            self, v, side, sorter),
        "dot": lambda self, b, out=None: _no_out(out, "dot") or fnp.dot(self, b),
        "conj": lambda self: fnp.conj(self),
        "conjugate": lambda self: fnp.conj(self),
        "copy": lambda self, order="C": self.clone(),
    }
    for name, method in methods.items():
        setattr(T, name, method)
    T.flat = property(lambda self: fnp.ravel(self))
