"""Every tracer is a standard array: each public attribute of ``numpy.ndarray``,
each operator, and the Array API standard's attributes, on each tracer type
(reverse mode's under ``vjp``, forward mode's under ``jvp``, staging under
``jit``, batching under ``vmap``), give NumPy's result or a documented refusal.

The table below is checked against ``dir(numpy.ndarray)``: an attribute a new
NumPy adds fails `test_every_ndarray_attribute_is_classified` until it is
given a case here.
"""
import pickle

import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.core.trace import Tracer
from fgrad.errors import (
    BatchedConversionError,
    ConcretizationError,
    DerivativeConversionError,
    DeviceError,
    ImmutableArrayError,
    MemoryLayoutError,
)
from fgrad.testing import check_grads

X = np.array([[0.3, -1.2, 2.5, 0.7],
              [1.9, -0.4, 0.1, -2.2],
              [-0.8, 1.4, 0.6, 2.9]])
X2 = X[::-1] * 0.5 + 0.25           # a second example for vmap


def _vjp_value(f, x):
    return fgrad.vjp(f, x)[0]


def _vmap_value(f, x):
    out = fgrad.vmap(f)(np.stack([x, X2]))
    return fgrad.tree.tree_map(lambda o: o[0], out)


# a function of a float array, run on a tracer of each type; values compared
TRANSFORMS = {
    "vjp": _vjp_value,
    "jvp": lambda f, x: fgrad.jvp(f, (x,), (np.ones_like(x),))[0],
    "jit": lambda f, x: fgrad.jit(f)(x),
    "vmap": _vmap_value,
}


def _in_place(method, *args, **kwargs):
    def f(a):
        a = a.copy()
        assert getattr(a, method)(*args, **kwargs) is None
        return a
    return f


def _ints(x):
    return (x * 10).astype(np.int64)


# name -> a function of the array ``a`` using that attribute; its value under
# each transformation must equal NumPy's
VALUES = {
    "T": lambda a: a.T, "mT": lambda a: a.mT, "ndim": None, "shape": None,
    "size": None, "dtype": None, "itemsize": None, "nbytes": None, "device": None,
    "all": lambda a: (a > 0).all(axis=0), "any": lambda a: (a > 2).any(1, keepdims=True),
    "argmax": lambda a: a.argmax(axis=1), "argmin": lambda a: a.argmin(),
    "argpartition": lambda a: np.sort(a.argpartition(1, axis=1)[:, :2], axis=1),
    "argsort": lambda a: a.argsort(axis=0), "astype": lambda a: a.astype(np.float32),
    "choose": lambda a: (a > 0).astype(np.int64).choose([a, -a]),
    "clip": lambda a: a.clip(-1.0, 1.0), "compress": lambda a: a.compress([True, False, True], 0),
    "conj": lambda a: a.conj(), "conjugate": lambda a: a.conjugate(),
    "copy": lambda a: a.copy(), "cumprod": lambda a: a.cumprod(axis=1),
    "cumsum": lambda a: a.cumsum(0), "diagonal": lambda a: a.diagonal(1),
    "dot": lambda a: a.dot(a.T), "fill": _in_place("fill", 2.0),
    "flat": lambda a: a.flat[3], "flatten": lambda a: a.flatten(),
    "imag": lambda a: a.imag, "real": lambda a: a.real,
    "max": lambda a: a.max(axis=0), "mean": lambda a: a.mean(1), "min": lambda a: a.min(),
    "partition": _in_place("partition", 1, axis=1),
    "prod": lambda a: a.prod(axis=0), "put": _in_place("put", [0, 5], [9.0, -9.0]),
    "ravel": lambda a: a.ravel(), "repeat": lambda a: a.repeat(2, axis=0),
    "reshape": lambda a: a.reshape(4, 3), "round": lambda a: a.round(1),
    "searchsorted": lambda a: np.sort(a[0]).searchsorted(a[1]),
    "sort": _in_place("sort", axis=0), "squeeze": lambda a: a[None].squeeze(0),
    "std": lambda a: a.std(axis=0, ddof=1), "sum": lambda a: a.sum(axis=1, keepdims=True),
    "swapaxes": lambda a: a.swapaxes(0, 1), "take": lambda a: a.take([2, 0], axis=1),
    "trace": lambda a: a.trace(), "transpose": lambda a: a.transpose(1, 0),
    "var": lambda a: a.var(0), "view": lambda a: a.view(),
    "base": lambda a: a[1:].base is not None,
    "to_device": lambda a: a.to_device("cpu"),
}

# name -> {transformation: (exception, what its message says)}: documented refusals
_NO_VALUE = {"jit": (ConcretizationError, "no value yet"),
             "vmap": (BatchedConversionError, "one value per example")}
_TRACED_VALUE = dict(_NO_VALUE, vjp=(DerivativeConversionError, "drop its derivative"),
                     jvp=(DerivativeConversionError, "drop its derivative"))
_NO_MEMORY = {t: (MemoryLayoutError, "no memory of its own") for t in TRANSFORMS}
REFUSALS = {
    "item": (lambda a: a[0, 0].item(), _TRACED_VALUE),
    "tolist": (lambda a: a.tolist(), _TRACED_VALUE),
    "tobytes": (lambda a: a.tobytes(), _TRACED_VALUE),
    "dumps": (lambda a: a.dumps(), _TRACED_VALUE),
    "dump": (lambda a: a.dump("unused.pkl"), _TRACED_VALUE),
    "tofile": (lambda a: a.tofile("unused.bin"), _TRACED_VALUE),
    "nonzero": (lambda a: (a > 0).nonzero()[0] * 1.0, _NO_VALUE),
    "strides": (lambda a: a.strides, _NO_MEMORY),
    "ctypes": (lambda a: a.ctypes, _NO_MEMORY),
    "data": (lambda a: a.data, _NO_MEMORY),
    "flags": (lambda a: a.flags, _NO_MEMORY),
    "byteswap": (lambda a: a.byteswap(), _NO_MEMORY),
    "getfield": (lambda a: a.getfield(np.float32), _NO_MEMORY),
    "setfield": (lambda a: a.setfield(1.0, np.float64), _NO_MEMORY),
    "setflags": (lambda a: a.setflags(write=False), _NO_MEMORY),
    "resize": (lambda a: a.resize(2, 6), {t: (ImmutableArrayError, "fnp.resize")
                                          for t in TRANSFORMS}),
}


def _public_ndarray_attributes():
    return sorted(n for n in dir(np.ndarray) if not n.startswith("_"))


def test_every_ndarray_attribute_is_classified():
    assert set(_public_ndarray_attributes()) == set(VALUES) | set(REFUSALS)


def _assert_same(got, want):
    got, want = fgrad.tree.tree_leaves(got), fgrad.tree.tree_leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == np.shape(w) and g.dtype == np.asarray(w).dtype
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def _seen_inside(transform, attribute):
    seen = []

    def f(a):
        seen.append(getattr(a, attribute))
        return a * 1.0
    TRANSFORMS[transform](f, X)
    return seen[0]


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("name", sorted(VALUES))
def test_attribute_gives_numpy_result(name, transform):
    if VALUES[name] is None:                # shape, dtype, ...: read on the tracer
        assert _seen_inside(transform, name) == getattr(X, name)
        return
    f = VALUES[name]
    _assert_same(TRANSFORMS[transform](f, X), f(X.copy()))


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_attribute_refusal_is_documented(name, transform, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)             # dump / tofile would write there
    f, refusals = REFUSALS[name]
    if transform not in refusals:
        _assert_same(TRANSFORMS[transform](f, X), f(X.copy()))
        return
    error, words = refusals[transform]
    with pytest.raises(error, match=words):
        TRANSFORMS[transform](f, X)


def test_integer_and_boolean_values_convert_where_they_have_a_value():
    # under grad, integers and booleans carry no derivative and are plain arrays;
    # a stop_gradient'ed float converts too
    def f(x):
        assert (x > 0).tolist() == (X > 0).tolist()
        assert pickle.loads(fgrad.stop_gradient(x).dumps()).shape == X.shape
        return x.sum()
    fgrad.grad(f)(X)


# -- operators ---------------------------------------------------------------------

OPERATORS = {
    "and": lambda a: (a > 0) & (a < 2), "or": lambda a: (a > 2) | (a < -1),
    "xor": lambda a: (a > 0) ^ (a < 1), "invert": lambda a: ~(a > 0),
    "int and": lambda a: _ints(a) & 6, "rand": lambda a: 6 & _ints(a),
    "ror": lambda a: 1 | _ints(a), "rxor": lambda a: 3 ^ _ints(a),
    "lshift": lambda a: (_ints(a) % 8) << 2, "rshift": lambda a: _ints(a) >> 1,
    "rlshift": lambda a: 1 << (_ints(a) % 8), "rrshift": lambda a: 256 >> (_ints(a) % 8),
    "int invert": lambda a: ~_ints(a),
    "mod": lambda a: a % 0.65, "rmod": lambda a: 5.0 % (a + 3.0),
    "floordiv": lambda a: a // 0.65, "rfloordiv": lambda a: 5.0 // (a + 3.0),
    "divmod": lambda a: divmod(a, 0.65), "rdivmod": lambda a: divmod(5.0, a + 3.0),
    "matmul": lambda a: a @ a.T, "rmatmul": lambda a: np.ones((2, 3)) @ a,
    "pow": lambda a: abs(a) ** 1.5, "rpow": lambda a: 2.0 ** a, "neg": lambda a: -a,
    "pos": lambda a: +a, "abs": lambda a: abs(a), "truediv": lambda a: 1.0 / (a + 3.0),
    "comparisons": lambda a: ((a < 0) == (a <= 0)) != (a >= 1),
}


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_operator_gives_numpy_result(name, transform):
    f = OPERATORS[name]
    _assert_same(TRANSFORMS[transform](f, X), f(X.copy()))


def _in_place_operator(symbol, other):
    namespace = {"other": other}
    exec(f"def f(a):\n    b = a.copy()\n    b {symbol}= other\n    return b", namespace)
    return namespace["f"]


IN_PLACE = {"+": 1.5, "-": 0.5, "*": 2.0, "/": 4.0, "**": 2.0, "%": 0.7, "//": 0.7,
            "@": np.eye(4)}


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("symbol", sorted(IN_PLACE))
def test_in_place_operator_gives_numpy_result(symbol, transform):
    f = _in_place_operator(symbol, IN_PLACE[symbol])
    _assert_same(TRANSFORMS[transform](f, X), f(X.copy()))


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("symbol", ["&", "|", "^", "<<", ">>", "%", "//"])
def test_in_place_integer_operators(symbol, transform):
    f = _in_place_operator(symbol, 3)

    def g(a):
        out = f(_ints(a))
        assert isinstance(out, Tracer) and out.dtype == np.int64  # integer tracers too
        return out
    _assert_same(TRANSFORMS[transform](g, X), f(_ints(X)))


@pytest.mark.parametrize("name", ["sum", "mean", "std", "var", "cumsum", "cumprod",
                                  "clip", "take", "trace", "diagonal", "T", "mT",
                                  "reshape", "repeat", "prod", "max", "sort", "put",
                                  "fill", "partition", "flat", "dot"])
def test_method_derivatives(name):
    f = VALUES[name]
    check_grads(lambda a: fnp.sum(fnp.sin(f(a))), (X,), order=1)


@pytest.mark.parametrize("name", ["mod", "rpow", "pow", "truediv", "matmul", "rmatmul",
                                  "rmod", "divmod"])
def test_operator_derivatives(name):
    f = OPERATORS[name]
    check_grads(lambda a: fnp.sum(fnp.sin(fnp.stack(
        fgrad.tree.tree_leaves(f(a)), axis=0) if name == "divmod" else f(a))), (X,),
        order=1)


# -- the Array API standard's attributes ---------------------------------------------

@pytest.mark.parametrize("transform", TRANSFORMS)
def test_array_namespace_is_fgrad_numpy(transform):
    def f(a):
        xp = a.__array_namespace__()
        assert xp is fnp and a.__array_namespace__(api_version="2023.12") is fnp
        assert xp.__array_api_version__ == "2024.12"
        return xp.sum(xp.permute_dims(a, (1, 0)) ** 2)
    _assert_same(TRANSFORMS[transform](f, X), np.sum(X ** 2))


def test_array_namespace_refuses_an_unknown_version():
    def f(a):
        a.__array_namespace__(api_version="2019.01")
    with pytest.raises(ValueError, match="2019.01"):
        fgrad.grad(f)(X)


def test_to_device_refuses_a_move_inside_a_transformation():
    with pytest.raises(DeviceError, match="device_put"):
        fgrad.grad(lambda a: a.to_device("gpu").sum())(X)


def test_out_arguments_are_refused():
    with pytest.raises(ImmutableArrayError, match=r"out=.*y = x\.sum"):
        fgrad.grad(lambda a: a.sum(out=np.zeros(())))(X)


def test_array_api_compat_finds_the_namespace():
    compat = pytest.importorskip("array_api_compat")

    def f(a):
        xp = compat.array_namespace(a)
        assert xp is fnp and compat.is_array_api_obj(a) and compat.device(a) == "cpu"
        return xp.sum(a)
    for transform in TRANSFORMS.values():
        _assert_same(transform(f, X), np.sum(X))


# -- the special methods of numpy.ndarray ---------------------------------------------

# ndarray's special methods a tracer does not have, and why: the rest must be there
NOT_ON_TRACERS = {
    "__array_finalize__": "a hook for ndarray's subclasses, which tracers are not",
    "__array_wrap__": "a hook for ndarray's subclasses, which tracers are not",
    "__array_interface__": "memory: absent, as getattr of strides or flags finds",
    "__array_struct__": "memory: absent, as getattr of strides or flags finds",
    "__class_getitem__": "ndarray[Any, dtype] is a type annotation",
    "__setstate__": "unpickling a tracer's value makes a NumPy array",
}


def _tracer_types():
    seen = {}

    def record(name):
        def f(a):
            seen[name] = type(a)
            return a * 1.0
        return f
    for name, transform in TRANSFORMS.items():
        transform(record(name), X)
    return seen


def test_every_ndarray_special_method_is_on_every_tracer_type():
    special = {n for n in dir(np.ndarray) if n.startswith("__")}
    assert set(NOT_ON_TRACERS) <= special
    for name, cls in _tracer_types().items():
        missing = {n for n in special - set(NOT_ON_TRACERS) if not hasattr(cls, n)}
        assert not missing, (name, cls, missing)


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_dlpack_pickle_and_del_act_as_numpy(transform):
    def f(a):
        mask = a > 0                        # no derivative: it converts everywhere
        assert a.__dlpack_device__() == X.__dlpack_device__() == (1, 0)
        with pytest.raises(ValueError, match="cannot delete array elements"):
            del a[0]
        if transform in ("vjp", "jvp"):
            assert np.from_dlpack(mask).tolist() == (X > 0).tolist()
            assert pickle.loads(pickle.dumps(mask)).tolist() == (X > 0).tolist()
        return a * 1.0
    TRANSFORMS[transform](f, X)


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("convert", [pickle.dumps, np.from_dlpack])
def test_dlpack_and_pickle_of_a_traced_value_are_refused(convert, transform):
    error, words = _TRACED_VALUE[transform]
    with pytest.raises(error, match=words):
        TRANSFORMS[transform](lambda a: convert(a), X)
