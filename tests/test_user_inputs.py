"""What users actually pass: Python conversions of differentiated values, NumPy
array subclasses, functions that retrace on every call (issue 19)."""
import warnings

import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.errors import ArraySubclassError, DerivativeConversionError, RetracingWarning
from fgrad.transforms import jit as jit_module

# np.matrix is what users pass here, deprecated or not
pytestmark = pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")

X = np.array([0.5, 1.0, 2.0])


@pytest.mark.parametrize("convert, how", [
    (lambda s: float(s), "float()"),
    (lambda s: int(s), "int()"),
    (lambda s: complex(s), "complex()"),
    (lambda s: s.item(), ".item()"),
    (lambda s: s.tolist(), ".tolist()"),
])
@pytest.mark.parametrize("transform", ["grad", "jvp", "vjp"])
def test_python_numbers_of_differentiated_values_raise(convert, how, transform):
    def f(a):
        return fnp.sum(a) * convert(fnp.sum(a))
    with pytest.raises(DerivativeConversionError) as info:
        if transform == "grad":
            fgrad.grad(f)(X)
        elif transform == "jvp":
            fgrad.jvp(f, (X,), (X,))
        else:
            fgrad.vjp(f, X)
    message = str(info.value)
    assert how in message and "drop its derivative" in message
    assert "fgrad.stop_gradient" in message


def test_numbers_that_carry_no_derivative_still_convert():
    # an integer count, and a value explicitly cut off from the derivative
    def f(a):
        n = int(fnp.sum(a > 0.75))
        scale = float(fgrad.stop_gradient(fnp.max(a)))
        return fnp.sum(a[:n] ** 2) / scale
    np.testing.assert_allclose(fgrad.grad(f)(X), [0.5, 1.0, 0.0])    # 2 a / 2
    assert bool(fnp.sum(X) > 0)                 # eager values are plain arrays


def test_np_matrix_is_used_as_a_plain_2d_array():
    m = np.matrix([[1.0, 2.0]])
    assert fnp.sum(m) == 3.0
    assert fnp.sum(m, axis=1, keepdims=True).shape == (1, 1)
    g = fgrad.grad(lambda a: fnp.sum(a * a))(m)
    assert type(g) is np.ndarray
    np.testing.assert_array_equal(g, [[2.0, 4.0]])
    # `*` is elementwise even between matrices: matrices are viewed as ndarrays
    np.testing.assert_array_equal(fgrad.jit(lambda a, b: a * b)(m, m), [[1.0, 4.0]])
    assert type(fgrad.jit(lambda a: a * 2)(m)) is np.ndarray
    np.testing.assert_array_equal(fgrad.vmap(fnp.sum)(m), [3.0])
    np.testing.assert_array_equal(fnp.reshape(m, (2,)), [1.0, 2.0])
    # a matrix closed over by a differentiated function
    np.testing.assert_array_equal(
        fgrad.grad(lambda a: fnp.sum(a * m))(np.ones((1, 2))), [[1.0, 2.0]])


def test_memmap_and_other_subclasses_work_like_their_data(tmp_path):
    mm = np.memmap(tmp_path / "x.dat", dtype=np.float64, mode="w+", shape=(3,))
    mm[:] = X
    np.testing.assert_allclose(fgrad.grad(lambda a: fnp.sum(fnp.sin(a)))(mm), np.cos(X))


def test_masked_arrays_are_refused_rather_than_unmasked():
    masked = np.ma.array(X, mask=[False, True, False])
    for call in (lambda: fnp.sum(masked),
                 lambda: fgrad.grad(lambda a: fnp.sum(a * a))(masked),
                 lambda: fgrad.jit(fnp.sin)(masked),
                 lambda: fgrad.vmap(fnp.sin)(masked)):
        with pytest.raises(ArraySubclassError, match=r"masked array.*x\.filled\(value\)"):
            call()


def test_heavy_retracing_warns_once_naming_what_changed():
    f = fgrad.jit(lambda a: a * 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, jit_module.RETRACE_WARNING_AFTER + 5):
            f(np.ones(n))
    retraces = [w for w in caught if issubclass(w.category, RetracingWarning)]
    assert len(retraces) == 1
    message = str(retraces[0].message)
    assert f"traced {jit_module.RETRACE_WARNING_AFTER + 1} times" in message
    assert "argument 'a' changed from float64[32] to float64[33]" in message
    assert "max_traces" in message
    assert retraces[0].filename == __file__          # points at the caller's line


def test_max_traces_replaces_the_warning_with_an_error():
    f = fgrad.jit(lambda a: a * 2, max_traces=100)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RetracingWarning)
        for n in range(1, 60):
            f(np.ones(n))


def test_matrix_tangents_and_cotangents_are_plain_arrays_too():
    m = np.matrix([[1.0], [2.0], [3.0]])
    _, tangent = fgrad.jvp(lambda a: fnp.sum(fnp.sin(a) * a), (m,), (m,))
    np.testing.assert_allclose(tangent, np.sum((np.cos(m.A) * m.A + np.sin(m.A)) * m.A))
    _, vjp_fn = fgrad.vjp(lambda a: a * 2.0, np.ones((3, 1)))
    (ct,) = vjp_fn(m)
    assert type(ct) is np.ndarray
    np.testing.assert_array_equal(ct, 2 * m.A)
