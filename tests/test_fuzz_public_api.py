"""Fuzzing the public API with what users actually pass (issue 19).

Hypothesis calls a broad sample of `fgrad.numpy` functions, and the
transformations, with arbitrary shapes (empty and 0-d too), every dtype (bool,
integers, float16/32/64, complex), NaN and infinities, axes in and out of range,
Python scalars, lists, None, np.matrix, masked arrays, read-only and
non-contiguous arrays. Every call must either match NumPy (value, shape and
dtype) or fail with an `fgrad.errors` exception, or with the exception NumPy
itself raises for the same call -- never an internal AttributeError, KeyError or
TypeError from fgrad's own code.
"""
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fgrad
import fgrad.numpy as fnp
from fgrad.errors import FgradError

# np.matrix is what users pass here, deprecated or not
pytestmark = pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")

DTYPES = [np.bool_, np.int8, np.int32, np.int64, np.uint8, np.float16, np.float32,
          np.float64, np.complex64, np.complex128]


@st.composite
def user_values(draw, min_dims=0):
    """An argument as a user might pass it: an array of any dtype with any
    values (NaN and inf included), or that array as a Python scalar, a list, a
    read-only or non-contiguous array, an np.matrix or a masked array; or None."""
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=3, min_side=0, max_side=3))
    elements = hnp.from_dtype(dtype, min_value=-100 * (dtype.kind == "i"),
                              max_value=100) if dtype.kind in "iu" else hnp.from_dtype(dtype)
    x = draw(hnp.arrays(dtype, shape, elements=elements))
    form = draw(st.sampled_from(["array", "array", "scalar", "list", "read-only",
                                 "reversed", "matrix", "masked", "none"]))
    if form == "scalar" and x.ndim == 0:
        return x.item()
    if form == "list":
        return x.tolist()
    if form == "read-only":
        x.flags.writeable = False
        return x
    if form == "reversed" and x.ndim:
        return x[..., ::-1]                      # a non-contiguous view
    if form == "matrix" and x.ndim == 2:
        return np.asmatrix(x)
    if form == "masked" and x.size:
        mask = draw(hnp.arrays(np.bool_, x.shape))
        mask.flat[0] = True                      # some entry is masked out
        return np.ma.array(x, mask=mask)
    if form == "none" and min_dims == 0:
        return None
    return x


def _reference_input(v):
    """What NumPy is given for comparison: fgrad's documented rule views an
    ndarray subclass (np.matrix) as a plain ndarray."""
    return v.view(np.ndarray) if type(v) is np.matrix else v


def _axis(ndim):
    return st.one_of(st.none(), st.integers(-ndim - 1, ndim),
                     st.lists(st.integers(-ndim, max(ndim - 1, 0)), max_size=2).map(tuple))


UNARY = ["sin", "cos", "exp", "log", "sqrt", "tanh", "arctan", "absolute", "negative",
         "square", "sign", "floor", "real", "imag", "conj", "isnan", "isfinite", "cbrt",
         "reciprocal", "log1p", "expm1", "ravel", "transpose", "squeeze", "atleast_2d",
         "zeros_like", "ones_like", "copy", "nan_to_num"]
BINARY = ["add", "subtract", "multiply", "divide", "true_divide", "power", "maximum",
          "minimum", "arctan2", "hypot", "equal", "less", "logical_and", "floor_divide",
          "mod", "copysign", "heaviside", "logaddexp", "matmul", "dot", "outer", "inner"]
REDUCTIONS = ["sum", "mean", "prod", "max", "min", "std", "var", "all", "any", "nansum",
              "nanmax", "ptp"]
ALONG_AXIS = ["cumsum", "cumprod", "argmax", "argmin", "sort", "argsort", "flip",
              "expand_dims", "diff", "roll"]


def _same_as_numpy(call, np_call, values=True):
    """Run both; compare successes, and check fgrad's failures are allowed."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected, numpy_error = np_call(), None
        except Exception as err:               # NumPy refuses the call too
            expected, numpy_error = None, err
        try:
            got = call()
        except FgradError:
            return
        except Exception as err:
            if numpy_error is not None and isinstance(err, type(numpy_error)):
                return
            raise AssertionError(
                f"internal {type(err).__name__} from fgrad (NumPy "
                f"{'raised ' + type(numpy_error).__name__ if numpy_error else 'succeeded'})"
                f": {err}") from err
    if numpy_error is not None:
        raise AssertionError(f"fgrad returned {got!r} where NumPy raised "
                             f"{type(numpy_error).__name__}: {numpy_error}")
    _assert_matches(got, expected, values)


def _assert_matches(got, expected, values=True):
    if isinstance(expected, (tuple, list)) and not isinstance(got, np.ndarray):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            _assert_matches(g, e, values)
        return
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    if not values:
        return
    if expected.dtype.kind in "fc":
        tol = 1e-2 if expected.dtype in (np.float16, np.complex64, np.float32) else 1e-7
        with np.errstate(all="ignore"):
            np.testing.assert_allclose(got, expected, rtol=tol, atol=tol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, expected)


def _check(name, args, kwargs):
    fn, np_fn = getattr(fnp, name), getattr(np, name)
    ref = [_reference_input(a) for a in args]
    values = True
    if name in ("dot", "inner"):
        # NumPy types an empty list weakly here (np.dot(float32, []) is float32,
        # np.dot(float32, np.zeros(0)) float64); fgrad converts lists with np.asarray
        ref = [np.asarray(a) if isinstance(a, list) else a for a in ref]
        # and scales by a scalar as BLAS does: np.dot([nan], False) is [0], not nan
        values = all(np.isfinite(np.asarray(a, complex)).all() for a in ref
                     if a is not None and np.asarray(a).dtype.kind in "biufc")
    if any(isinstance(a, np.ma.MaskedArray) for a in args):
        _refuses_masked(lambda: fn(*args, **kwargs), lambda: np_fn(*ref, **kwargs))
    else:
        _same_as_numpy(lambda: fn(*args, **kwargs), lambda: np_fn(*ref, **kwargs), values)


def _refuses_masked(call, np_call):
    """A masked array is refused (`ArraySubclassError`, or the error NumPy
    raises for its dtype), or handed back untouched, mask and all (a call that
    does nothing, such as sorting one element): its mask is never dropped."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected = np_call()
        except Exception as err:
            with pytest.raises((FgradError, type(err))):
                call()
            return
        try:
            got = call()
        except FgradError:
            return
    assert isinstance(got, np.ma.MaskedArray), f"the mask was dropped: {got!r}"
    np.testing.assert_array_equal(np.ma.getmaskarray(got), np.ma.getmaskarray(expected))


@pytest.mark.parametrize("name", UNARY)
@given(x=user_values())
def test_unary(name, x):
    _check(name, (x,), {})


@pytest.mark.parametrize("name", BINARY)
@given(x=user_values(), y=user_values())
def test_binary(name, x, y):
    _check(name, (x, y), {})


@pytest.mark.parametrize("name", REDUCTIONS)
@given(data=st.data())
def test_reductions_over_axes(name, data):
    x = data.draw(user_values())
    ndim = np.ndim(x) if x is not None else 0
    kwargs = {"axis": data.draw(_axis(ndim))}
    if data.draw(st.booleans()):
        kwargs["keepdims"] = True
    _check(name, (x,), kwargs)


@pytest.mark.parametrize("name", ALONG_AXIS)
@given(data=st.data())
def test_functions_along_an_axis(name, data):
    x = data.draw(user_values(min_dims=1))
    ndim = np.ndim(x)
    axis = data.draw(st.integers(-ndim - 1, ndim))
    args = (x, 1) if name == "roll" else (x,)
    _check(name, args, {"axis": axis})


# -- the transformations -------------------------------------------------------------


def _loss(x):
    return fnp.sum(fnp.sin(x) * x)


def _np_grad(x):
    return np.cos(x) * x + np.sin(x)


def _allowed(call, eager_error):
    """Run ``call``: return its value, or None when it failed as allowed (an
    fgrad error, or the error the function itself raises without transforming)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return call(), True
        except FgradError:
            return None, False
        except Exception as err:
            if eager_error is not None and isinstance(err, type(eager_error)):
                return None, False
            raise AssertionError(f"internal {type(err).__name__} from fgrad: {err}") \
                from err


@given(x=user_values())
def test_transformations_fail_cleanly_or_match_numpy(x):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            # a matrix is viewed as an ndarray by the transformations; eagerly,
            # `*` between an ndarray and a matrix is NumPy's matrix product
            eager, eager_error = _loss(_reference_input(x)), None
        except Exception as err:
            eager, eager_error = None, err
        try:
            ref = _reference_input(x)
            np.sum(np.sin(ref) * ref)
        except Exception as err:               # NumPy refuses it too (None)
            if eager_error is not None and not isinstance(eager_error,
                                                          (FgradError, type(err))):
                raise AssertionError(f"internal {type(eager_error).__name__} from "
                                     f"fgrad: {eager_error}") from eager_error
    jitted, ok = _allowed(lambda: fgrad.jit(_loss)(x), eager_error)
    if ok:
        _assert_matches(jitted, eager)
    g, ok = _allowed(lambda: fgrad.grad(_loss)(x), eager_error)
    if ok:
        plain = np.asarray(_reference_input(x))
        assert plain.dtype.kind == "f", "grad accepted a non-float input"
        with np.errstate(all="ignore"):
            _assert_matches(g, np.asarray(_np_grad(plain), plain.dtype))
    _, ok = _allowed(lambda: fgrad.jvp(_loss, (x,), (x,)), eager_error)
    batched, ok = _allowed(lambda: fgrad.vmap(_loss)(x), eager_error)
    if ok:
        plain = np.asarray(_reference_input(x))
        with np.errstate(all="ignore"):
            _assert_matches(batched, np.asarray([_loss(row) for row in plain],
                                                np.asarray(eager).dtype))
