"""The Array API standard's devices and keywords that scikit-learn and SciPy call on
fgrad.numpy (docs/array-api.md): a traced value's device makes constants of its
transformation, ``__array_namespace_info__``, and ``asarray``'s, ``astype``'s,
``reshape``'s and ``std``'s standard keywords."""
import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.core.trace import Tracer
from fgrad.errors import (
    ArrayNamespaceError,
    DerivativeConversionError,
    DeviceError,
    MemoryLayoutError,
)
from fgrad.testing import check_grads

X = np.array([[0.5, -1.5, 2.0], [1.0, 0.25, -0.75]])
TRANSFORMS = {
    "grad": lambda f, x: fgrad.grad(lambda x: fnp.sum(f(x)))(x),
    "jvp": lambda f, x: fgrad.jvp(f, (x,), (np.ones_like(x),))[1],
    "jit": lambda f, x: fgrad.jit(f)(x),
    "vmap": lambda f, x: fgrad.vmap(f)(np.stack([x, x]))[0],
}


@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
def test_data_made_on_a_traced_value_s_device_joins_its_transformation(transform):
    seen = []

    def f(x):
        y = fnp.asarray(np.arange(3.0), device=x.device)
        z = fnp.zeros(x.shape, dtype=x.dtype, device=x.device)
        z[0] = y                                # a tracer takes the update
        seen.append((type(y).__name__, isinstance(y, Tracer), y.device == "cpu",
                     y.__array_namespace__() is fnp, z.__array_namespace__() is fnp))
        return x * y + z
    TRANSFORMS[transform](f, X)
    assert seen[0][1:] == (True, True, True, True), seen


def test_a_constant_made_on_the_device_has_no_derivative():
    def f(x):
        w = fnp.asarray([1.0, 2.0, 3.0], device=x.device)
        return fnp.sum(w * x)
    np.testing.assert_array_equal(fgrad.grad(f)(X), np.broadcast_to([1.0, 2.0, 3.0], X.shape))
    check_grads(f, (X,), order=2)


def test_under_jit_what_constants_alone_compute_is_known_as_outside():
    labels = np.array([2, 0, 2, 1])

    def f(x):
        y = fnp.asarray(labels, device=x.device)     # a constant of jit's staging
        classes = fnp.unique_values(y)               # a shape from values: known
        if fnp.all(y == 0):                          # a branch on a constant
            return x
        rows = [fnp.sum(x[y == c]) for c in classes]     # masks known: static shapes
        return fnp.stack(rows) * int(classes[-1])
    expected = f(np.arange(4.0))
    np.testing.assert_array_equal(fgrad.jit(f)(np.arange(4.0)), expected)
    graph = fgrad.make_graph(f)(np.arange(4.0))
    assert "unique" not in str(graph) and "equal" not in str(graph)     # folded


def test_under_jit_a_constant_s_host_callback_still_runs_each_call():
    calls = []

    def f(x):
        c = fnp.asarray([1.0, 2.0], device=x.device)
        return x + fgrad.pure_callback(lambda c: calls.append(1) or c * 2,
                                       fgrad.ShapeDtypeStruct((2,), np.float64), c)
    jitted = fgrad.jit(f)
    for _ in range(2):
        np.testing.assert_array_equal(jitted(np.zeros(2)), [2.0, 4.0])
    assert len(calls) >= 2


@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
def test_what_has_no_derivative_stays_a_tracer_of_the_transformation(transform):
    seen = []

    def f(x):
        mask = x > 0
        index = fnp.argmax(x, axis=1)
        both = mask & (index[:, None] >= 0)         # computed from those alone
        seen.extend(isinstance(v, Tracer) and v.__array_namespace__() is fnp
                    for v in (mask, index, both))
        return fnp.where(both, x, 0.0)
    TRANSFORMS[transform](f, X)
    assert seen == [True] * 3, seen


@pytest.mark.parametrize("transform", ["grad", "jvp"])
def test_a_value_without_derivative_converts_as_the_array_it_stands_for(transform):
    def f(x):
        mask = x > 0
        n = fnp.sum(mask)
        assert int(n) == 4 and mask.any() and np.asarray(mask).tolist() == (X > 0).tolist()
        assert float(fnp.floor(x[0, 0])) == 0.0     # no derivative: it converts
        return x[mask] * int(n)
    TRANSFORMS[transform](f, X)
    with pytest.raises(DerivativeConversionError, match="float"):
        fgrad.grad(lambda x: float(x[0, 0]) * x[0, 0])(X)


def test_a_float_computed_without_derivative_converts_however_large():
    # large temporaries are reused in place by reverse mode (tests make every
    # array "large"): such a product of values with no derivative still has none
    def f(x):
        counts = fnp.astype(x > 0, np.float64)
        assert float(fnp.sum(counts * 2.0 + 1.0)) == 2.0 * np.sum(X > 0) + X.size
        return fnp.sum(x)
    assert np.array_equal(fgrad.grad(f)(X), np.ones_like(X))


def test_a_0_d_mask_selects_as_in_numpy():
    def f(x):
        s = fnp.array(fnp.sum(x))                   # 0-d
        y = s.copy()
        y[s > 0] = (3 * s)[s > 0]                   # array_api_extra's apply_where
        return y + fnp.sum(x[True]) + fnp.sum(x[False])
    assert np.shape(X[True]) == (1,) + X.shape and np.shape(X[False]) == (0,) + X.shape
    check_grads(f, (X,), order=2)
    check_grads(f, (-X,), order=2)
    np.testing.assert_array_equal(fgrad.jit(lambda x: x[True])(X), X[True])


def test_a_numpy_array_beside_a_traced_one_is_refused_naming_the_line():
    compat = pytest.importorskip("array_api_compat")

    def f(x):
        xp = compat.array_namespace(x, fnp.asarray(x, device=x.device))     # one namespace
        assert xp is fnp
        compat.array_namespace(x, fnp.ones(3))          # a NumPy array: fnp.ones(3)
        return fnp.sum(x)
    with pytest.raises(ArrayNamespaceError, match=r"test_array_api_devices.py:\d+.*device="):
        fgrad.grad(f)(X)


def test_devices_compare_as_the_data_s_device():
    def f(x):
        assert x.device == "cpu" and hash(x.device) == hash("cpu") and str(x.device) == "cpu"
        assert x.to_device(x.device) is x and x.to_device("cpu") is x
        return fnp.sum(x)
    fgrad.grad(f)(X)


def test_another_device_is_refused_with_the_fix():
    with pytest.raises(DeviceError, match="device_put"):
        fnp.asarray(X, device="gpu")
    with pytest.raises(DeviceError, match="device_put"):
        fgrad.grad(lambda x: fnp.sum(fnp.zeros(2, device="gpu") + x))(1.0)


def test_asarray_copy_keyword():
    a = fnp.asarray(X, copy=True)
    assert a is not X and np.array_equal(a, X)
    assert fnp.asarray(X, copy=False) is X
    with pytest.raises(ValueError, match="copy"):
        fnp.asarray([1.0, 2.0], copy=False)

    def f(x):
        assert fnp.asarray(x, copy=True) is not x and fnp.asarray(x) is x
        with pytest.raises(ValueError, match="copy=False"):
            fnp.asarray(x, dtype=np.float32, copy=False)
        return fnp.sum(x)
    fgrad.grad(f)(X)


def test_astype_copy_and_reshape_shape_keywords():
    def f(x):
        assert fnp.astype(x, x.dtype, copy=False) is x
        assert fnp.astype(x, x.dtype) is not x
        assert fnp.reshape(x, shape=(3, 2), copy=True).shape == (3, 2)
        return fnp.sum(fnp.reshape(x, shape=(-1,)) ** 2)
    np.testing.assert_allclose(fgrad.grad(f)(X), 2 * X)
    assert fnp.reshape(X, shape=(3, 2)).base is not None
    assert fnp.reshape(X, shape=(3, 2), copy=True).base is None


def test_std_and_var_take_the_standard_s_correction():
    np.testing.assert_allclose(fnp.std(X, axis=0, correction=1), np.std(X, axis=0, ddof=1))
    check_grads(lambda x: fnp.var(x, axis=1, correction=1), (X,), order=2)


def test_namespace_info_reports_no_data_dependent_shapes():
    info = fnp.__array_namespace_info__()
    assert info.capabilities()["data-dependent shapes"] is False
    assert info.default_dtypes()["real floating"] == np.float64
    assert info.devices() == ["cpu"] and info.default_device() == "cpu"


def test_memory_attributes_are_absent_to_getattr_with_a_default():
    def f(x):
        assert getattr(x, "flags", None) is None and not hasattr(x, "strides")
        with pytest.raises(MemoryLayoutError, match="no memory of its own"):
            x.flags
        return fnp.sum(x)
    fgrad.grad(f)(X)


def test_a_conversion_error_names_the_line_that_converted():
    def f(x):
        return float(fnp.sum(x))                # the line the message names
    with pytest.raises(DerivativeConversionError,
                       match=r"test_array_api_devices\.py:\d+: `return float\(fnp\.sum"):
        fgrad.grad(f)(X)


@pytest.mark.parametrize("transform", ["jit", "vmap"])
def test_a_value_jit_or_vmap_cannot_read_names_the_line_that_read_it(transform):
    def branches(x):
        if fnp.sum(x) > 0:                      # the line the message names
            return x
        return -x

    def counts(x):
        return fnp.unique(x > 0)                # the line the message names
    error = {"jit": fgrad.errors.ConcretizationError,
             "vmap": fgrad.errors.BatchedConversionError}[transform]
    for f, code in ((branches, r"if fnp\.sum\(x\) > 0"), (counts, r"fnp\.unique")):
        with pytest.raises(error, match=rf"test_array_api_devices\.py:\d+: `[^`]*{code}"):
            TRANSFORMS[transform](f, X)
