"""A CPU stand-in for a device backend (CuPy), strict where CuPy is strict.

`StandInArray` holds a NumPy array, but NumPy refuses to touch it: converting it
(``np.asarray``), applying a ufunc (``np.sin(x)``) or an array function
(``np.sum(x)``) raises `StandInRefused`. Its module, `standin`, is a namespace that
forwards to NumPy, unwrapping and re-wrapping, and that refuses NumPy *arrays*
among its arguments as CuPy does (only `asarray` / `array` copy host data in).
Reductions return 0-d arrays, never scalars, as CuPy does.

So a computation that runs to the end on stand-in inputs, with stand-in outputs,
called no NumPy function on the data: every impl asked `array_module` for its
module. That is what `test_standin.py` checks over the whole property suite.

Use `registered()` to install it for the duration of a test; `to_standin` and
`to_numpy` move pytrees across.
"""
import contextlib
import operator
import sys
import types
from typing import NamedTuple

import numpy as np

import fgrad
from fgrad import backend


class CuPyLikeFlags(NamedTuple):
    """The attributes of ``cupy.ndarray.flags``."""
    c_contiguous: bool
    f_contiguous: bool
    owndata: bool


class StandInRefused(TypeError):
    """NumPy was asked to operate on stand-in (device) data."""


def _refuse(what):
    raise StandInRefused(
        f"{what} was applied to a StandInArray: NumPy must never see device data. "
        "The impl should call array_module(...) and use the module it returns.")


def _unwrap(x, fname):
    if type(x) is StandInArray:
        return x._a
    if type(x) is np.ndarray:
        raise TypeError(f"standin.{fname}: unsupported argument type numpy.ndarray "
                        f"(shape {x.shape}); like CuPy, the stand-in makes no implicit "
                        "host-to-device copy: use standin.asarray / fgrad.device_put")
    if isinstance(x, (tuple, list)):
        return type(x)(_unwrap(i, fname) for i in x)
    return x


def _unwrap_index(index):
    # CuPy copies NumPy and list index arrays to the device itself (indexing is
    # the one place it accepts host arrays), so the stand-in does too.
    if isinstance(index, tuple):
        return tuple(_unwrap_index(i) for i in index)
    if type(index) is StandInArray:
        return index._a
    return index


def _wrap(x):
    if type(x) is np.ndarray:
        return StandInArray(x)
    if isinstance(x, np.generic):              # no scalars on the device: 0-d arrays
        return StandInArray(np.asarray(x))
    if isinstance(x, tuple):
        return tuple(_wrap(i) for i in x)
    if isinstance(x, list):
        return [_wrap(i) for i in x]
    return x


class StandInArray:
    """An array on the pretend device: NumPy data NumPy itself may not touch."""

    __slots__ = ("_a",)
    # CuPy's value: below a Tracer's, so `stand_in * tracer` is the tracer's to do
    __array_priority__ = 100

    def __init__(self, a):
        self._a = a

    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    T = property(lambda self: StandInArray(self._a.T))
    real = property(lambda self: StandInArray(np.real(self._a)))
    base = property(lambda self: None if self._a.base is None else StandInArray(self._a.base))
    # CuPy's Flags: contiguity and ownership only, no `writeable` (its arrays
    # always are), so code that asks NumPy's question fails here as on a GPU
    flags = property(lambda self: CuPyLikeFlags(self._a.flags.c_contiguous,
                                                self._a.flags.f_contiguous,
                                                self._a.flags.owndata))

    def __array__(self, dtype=None, copy=None):
        _refuse("numpy.asarray (implicit conversion)")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        _refuse(f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else
                                              f".{method}"))

    def __array_function__(self, func, types, args, kwargs):
        _refuse(f"{func.__module__}.{func.__name__}")

    def get(self):
        """The data as a NumPy array (CuPy's explicit device-to-host copy)."""
        return self._a.copy()

    def __getitem__(self, index):
        return _wrap(self._a[_unwrap_index(index)])

    def __setitem__(self, index, value):
        self._a[_unwrap_index(index)] = _unwrap(value, "__setitem__")

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    # Python conversions synchronise on a real device; they are allowed there too.
    def __bool__(self):
        return bool(self._a)

    def __float__(self):
        return float(self._a)

    def __int__(self):
        return int(self._a)

    def __complex__(self):
        return complex(self._a)

    def __index__(self):
        return operator.index(self._a)

    def item(self):
        return self._a.item()

    def tolist(self):
        return self._a.tolist()

    def __repr__(self):
        return f"StandInArray({self._a!r})"

    def __hash__(self):
        return id(self)

    def copy(self):
        return StandInArray(self._a.copy())

    def astype(self, dtype, copy=True):
        return StandInArray(self._a.astype(dtype, copy=copy))

    def reshape(self, *shape):
        return StandInArray(self._a.reshape(*shape))

    def view(self, dtype):
        return StandInArray(self._a.view(dtype))

    def transpose(self, *axes):
        return StandInArray(self._a.transpose(*axes))

    def ravel(self):
        return StandInArray(self._a.ravel())

    def conj(self):
        return StandInArray(self._a.conj())


def _defers_to(other):
    # CuPy's rule: an operand of higher __array_priority__ (a Tracer) handles the
    # operator itself through its reflected method.
    return type(other) is not StandInArray and \
        getattr(other, "__array_priority__", 0) > StandInArray.__array_priority__


def _method(fn):
    def method(self, other):
        if _defers_to(other):
            return NotImplemented
        return _wrap(fn(self._a, _unwrap(other, fn.__name__)))
    return method


def _rmethod(fn):
    def method(self, other):
        if _defers_to(other):
            return NotImplemented
        return _wrap(fn(_unwrap(other, fn.__name__), self._a))
    return method


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul",
              "and", "or", "xor", "lshift", "rshift"):
    _op = getattr(operator, _name + ("_" if _name in ("and", "or") else ""))
    setattr(StandInArray, f"__{_name}__", _method(_op))
    setattr(StandInArray, f"__r{_name}__", _rmethod(_op))
for _name in ("lt", "le", "gt", "ge", "eq", "ne"):
    setattr(StandInArray, f"__{_name}__", _method(getattr(operator, _name)))
for _name, _op in (("neg", operator.neg), ("pos", operator.pos), ("abs", abs),
                   ("invert", operator.invert)):
    setattr(StandInArray, f"__{_name}__", lambda self, _op=_op: _wrap(_op(self._a)))
for _name in ("sum", "max", "min", "prod", "mean", "any", "all", "argmax", "argmin",
              "cumsum", "squeeze", "dot", "swapaxes", "nonzero"):
    setattr(StandInArray, _name,
            lambda self, *a, _name=_name, **k: _wrap(getattr(self._a, _name)(
                *_unwrap(a, _name), **{key: _unwrap(v, _name) for key, v in k.items()})))


# ---------------------------------------------------------------------------
# The module: NumPy's namespace, forwarding with unwrap/wrap
# ---------------------------------------------------------------------------


class _Function:
    """A NumPy function or ufunc, lifted to stand-in arrays."""

    def __init__(self, fn, name):
        self._fn, self.__name__ = fn, name

    def __call__(self, *args, **kwargs):
        args = _unwrap(args, self.__name__)
        kwargs = {k: _unwrap(v, self.__name__) for k, v in kwargs.items()}
        return _wrap(self._fn(*args, **kwargs))

    def at(self, a, index, values):
        # ufunc.at: in place on the device array, as cupy.add.at
        self._fn.at(_unwrap(a, "at"), _unwrap_index(index), _unwrap(values, "at"))

    def __getattr__(self, name):                   # ufunc.reduce, .outer, ...
        return _Function(getattr(self._fn, name), f"{self.__name__}.{name}")


def _host_in(x, dtype=None, copy=None):
    """asarray/array: the explicit host-to-device copy (CuPy's cupy.asarray)."""
    if type(x) is StandInArray:
        a = x._a if dtype is None else x._a.astype(dtype)
        return StandInArray(a.copy() if copy else a)
    return StandInArray(np.array(_unwrap_host(x), dtype=dtype, copy=True))


def _unwrap_host(x):
    if type(x) is StandInArray:
        return x._a
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap_host(i) for i in x)
    return x


class _Namespace:
    """``standin``: NumPy's names, each function lifted with `_Function`."""

    def __init__(self, numpy_namespace, prefix):
        self._np, self._prefix = numpy_namespace, prefix
        # opt_einsum imports its backend by this name (contract(backend=xp.__name__))
        self.__name__ = MODULE_NAME + ("." + prefix.rstrip(".") if prefix else "")

    def __getattr__(self, name):
        if not self._prefix and name in CUPY_LACKS:
            raise AttributeError(f"module {MODULE_NAME!r} has no attribute {name!r} "
                                 "(nor has cupy)")
        value = getattr(self._np, name)
        if isinstance(value, type) or isinstance(value, (int, float, np.dtype)):
            return value                           # dtypes, constants
        if hasattr(value, "__path__") or type(value).__name__ == "module":
            return _Namespace(value, f"{self._prefix}{name}.")
        if callable(value):
            return _Function(value, self._prefix + name)
        return value

    def asarray(self, x, dtype=None):
        return _host_in(x, dtype)

    def array(self, x, dtype=None, copy=True):
        return _host_in(x, dtype, copy)

    def asnumpy(self, x):
        return x.get() if type(x) is StandInArray else np.asarray(x)

    # CuPy 14's signatures: sort has no stable=, partition and argpartition no kind=
    def sort(self, a, axis=-1, kind=None):
        return _Function(self._np.sort, "sort")(a, axis=axis, kind=kind)

    def partition(self, a, kth, axis=-1):
        return _Function(self._np.partition, "partition")(a, kth, axis=axis)

    def argpartition(self, a, kth, axis=-1):
        return _Function(self._np.argpartition, "argpartition")(a, kth, axis=axis)

    # CuPy 14's quantile and percentile take quantile levels of 0 or 1 axes only
    def quantile(self, a, q, *args, **kwargs):
        return _Function(self._np.quantile, "quantile")(a, _levels(q), *args, **kwargs)

    def percentile(self, a, q, *args, **kwargs):
        return _Function(self._np.percentile, "percentile")(a, _levels(q), *args, **kwargs)

    ndarray = StandInArray


def _levels(q):
    if np.ndim(q.get() if type(q) is StandInArray else q) > 1:
        raise ValueError("Expected q to have a dimension of 1.")     # CuPy's message
    return q


# -- the stand-in's cupyx.scipy.sparse: SciPy's matrices over stand-in data ----------


class StandInSparse:
    """A SciPy sparse matrix whose operands and results are stand-in arrays, as
    a ``cupyx.scipy.sparse`` matrix's are CuPy arrays."""

    def __init__(self, matrix):
        self._m = matrix

    shape = property(lambda self: self._m.shape)
    T = property(lambda self: StandInSparse(self._m.T))

    def __matmul__(self, x):
        return _wrap(self._m @ _unwrap(x, "sparse matmul"))

    has_canonical_format = property(lambda self: self._m.has_canonical_format)

    def tocsc(self):
        return StandInSparse(self._m.tocsc())

    def copy(self):
        return StandInSparse(self._m.copy())


class StandInSuperLU:
    """SciPy's SuperLU, solving stand-in right-hand sides (cupyx's ``SuperLU``)."""

    def __init__(self, lu):
        self._lu = lu

    def solve(self, rhs, trans="N"):
        return _wrap(self._lu.solve(_unwrap(rhs, "SuperLU.solve"), trans=trans))


def _sparse_namespaces():
    import scipy.sparse
    import scipy.sparse.linalg

    def constructor(name):
        return lambda arg, shape=None: StandInSparse(
            getattr(scipy.sparse, name)(_unwrap(arg, name), shape=shape))
    sparse = types.SimpleNamespace(__name__=f"{SCIPY_NAME}.sparse", **{
        name: constructor(name) for name in ("csr_matrix", "csc_matrix", "coo_matrix")})
    # cupyx.scipy.sparse.linalg's eigsh signature: no shift-invert (sigma), no mode
    def eigsh(a, k=6, *, which="LM", v0=None, ncv=None, maxiter=None, tol=0,
              return_eigenvectors=True):
        return _wrap(scipy.sparse.linalg.eigsh(
            a._m, k=k, which=which, v0=None if v0 is None else _unwrap(v0, "eigsh"),
            ncv=ncv, maxiter=maxiter, tol=tol, return_eigenvectors=return_eigenvectors))
    linalg = types.SimpleNamespace(
        __name__=f"{SCIPY_NAME}.sparse.linalg", eigsh=eigsh,
        splu=lambda a, **kw: StandInSuperLU(scipy.sparse.linalg.splu(a._m, **kw)))
    return {f"{SCIPY_NAME}.sparse": sparse, f"{SCIPY_NAME}.sparse.linalg": linalg}


# NumPy functions CuPy 14 lacks, for which fgrad computes with its own formula
CUPY_LACKS = frozenset(("nanquantile", "nanpercentile", "polyder", "polyint", "polydiv"))
MODULE_NAME = "fgrad_standin"
SCIPY_NAME = "fgrad_standin_scipy"      # the stand-in's cupyx.scipy
standin = _Namespace(np, "")


@contextlib.contextmanager
def registered(elementwise_kernel=None):
    """Register the stand-in backend as ``"standin"`` for the block's duration.

    ``elementwise_kernel`` is passed to `register_backend` (jit's kernel fusion;
    see tests/fusion_emulator.py).
    """
    backend.register_backend(StandInArray, standin, "standin",
                             to_numpy=lambda x: x.get(),
                             from_numpy=lambda a: StandInArray(np.array(a)),
                             scipy=SCIPY_NAME, elementwise_kernel=elementwise_kernel)
    # importable by name, as cupy and cupyx.scipy are, for libraries that
    # dispatch on a module name (opt_einsum's backend=, backend.scipy_module)
    names = {MODULE_NAME: standin}
    try:
        import scipy.linalg
        import scipy.special
        names.update({SCIPY_NAME: _Namespace(scipy, f"{SCIPY_NAME}."),
                      f"{SCIPY_NAME}.special": _Namespace(scipy.special, "special."),
                      f"{SCIPY_NAME}.linalg": _Namespace(scipy.linalg, "linalg.")})
        names.update(_sparse_namespaces())
    except ImportError:                    # SciPy is optional; so is its stand-in
        pass
    sys.modules.update(names)
    try:
        yield standin
    finally:
        backend.unregister_backend(StandInArray)
        for name in names:
            sys.modules.pop(name, None)


def to_standin(tree):
    """Every array leaf of ``tree`` copied onto the stand-in device."""
    return fgrad.device_put(tree, "standin")


def to_numpy(tree):
    """Every stand-in leaf of ``tree`` copied back to NumPy."""
    return fgrad.device_put(tree, "cpu")
