"""The whole property suite on a pretend device that refuses NumPy calls.

`standin_backend.StandInArray` is what a CuPy array looks like to fgrad (its own
module, no implicit conversion), but it runs on the CPU. Every primitive spec is
run on stand-in inputs: forward values, first- and second-order JVPs and VJPs
(`check_grads`), and each output, tangent and cotangent must itself be a
stand-in array. Any impl or rule that handed device data to NumPy raises
`StandInRefused` (or the stand-in's TypeError for a NumPy array argument), so
this holds on machines without a GPU.
"""
import sys
import types

import numpy as np
import pytest
from hypothesis import given

import fgrad
import fgrad.numpy as fnp
import fgrad.scipy.special as fsp
from fgrad.backend import array_module, backend_name
from fgrad.errors import BackendMismatchError, DeviceError
from fgrad.tree import tree_leaves
from device_suite import Device, check_case, check_jit_case, check_nested_transformations, \
    check_nondiff, check_scalar_input_moves
from primitive_specs import NONDIFF_SPECS, SPECS
from sweeps import examples, sweep
from standin_backend import SCIPY_NAME, StandInArray, StandInRefused, registered, \
    standin, to_numpy, to_standin
from fgrad.backend import scipy_module
from fgrad.interpreters import compiled_sweep


@pytest.fixture
def device():
    with registered() as module:
        yield module


def _all_on_device(tree, what):
    for leaf in tree_leaves(tree):
        assert type(leaf) is StandInArray, f"{what} left the device: {type(leaf)}"


# -- the stand-in itself is as strict as promised --------------------------------


def test_standin_refuses_numpy(device):
    x = to_standin(np.arange(3.0))
    with pytest.raises(StandInRefused, match="numpy.sin"):
        np.sin(x)
    with pytest.raises(StandInRefused, match="sum"):
        np.sum(x)
    with pytest.raises(StandInRefused, match="implicit conversion"):
        np.asarray(x)
    with pytest.raises(TypeError, match="no implicit host-to-device copy"):
        standin.add(x, np.ones(3))
    np.testing.assert_array_equal(to_numpy(standin.sin(x)), np.sin(np.arange(3.0)))
    assert type(standin.sum(x)) is StandInArray          # 0-d, not a scalar


# -- the property suite ------------------------------------------------------------

STANDIN = Device("standin", StandInArray)


@pytest.mark.parametrize("name, count", sweep(SPECS, quick=1))
def test_property_suite_on_standin(name, count, device):
    examples(count)(given(SPECS[name])(lambda case: check_case(STANDIN, name, case)))()


@pytest.mark.parametrize("name, count", sweep(SPECS))
def test_jit_equals_eager_on_standin(name, count, device):
    examples(count)(given(SPECS[name])(lambda case: check_jit_case(STANDIN, name, case)))()


# nondifferentiable primitives whose values differ by backend on purpose
HOST_ONLY_VALUES = {
    # LAPACK's LU factors on NumPy, the matrix itself elsewhere (factored_solve
    # then solves with it): the factored_solve specs check what they solve
    "solve_factors",
}


@pytest.mark.parametrize("name", sorted(set(NONDIFF_SPECS) - HOST_ONLY_VALUES))
def test_nondifferentiable_on_standin(name, device):
    given(NONDIFF_SPECS[name])(lambda case: check_nondiff(STANDIN, name, case))()


def test_grad_of_grad_and_jacobians_stay_on_device(device):
    check_nested_transformations(STANDIN)


def test_python_scalar_input_goes_to_the_device(device):
    check_scalar_input_moves(STANDIN)


# -- mixing backends ------------------------------------------------------------------


def test_grad_names_the_mixed_arguments(device):
    x, y = to_standin(np.ones(3)), np.ones(3)
    with pytest.raises(BackendMismatchError,
                       match=r"argument 0 is a standin array, argument 1 is a numpy "
                             r"array.*device_put"):
        fgrad.grad(lambda x, y: fnp.sum(x * y))(x, y)


def test_vjp_names_leaves_of_a_pytree_argument(device):
    params = {"b": np.zeros(2), "w": to_standin(np.ones(2))}
    with pytest.raises(BackendMismatchError,
                       match=r"argument 0 \(leaf 0\) is a numpy array, argument 0 "
                             r"\(leaf 1\) is a standin array"):
        fgrad.vjp(lambda p: p["w"] * p["b"], params)


def test_jvp_names_primals_and_tangents(device):
    x = to_standin(np.ones(2))
    with pytest.raises(BackendMismatchError,
                       match=r"primal 0 is a standin array, tangent 0 is a numpy array"):
        fgrad.jvp(fnp.sin, (x,), (np.ones(2),))


def test_eager_mix_is_reported_by_position(device):
    with pytest.raises(BackendMismatchError,
                       match=r"argument 0 is a standin array of shape \(2,\), argument "
                             r"1 is a numpy array of shape \(\)"):
        fnp.add(to_standin(np.ones(2)), np.array(1.0))


def test_array_module_picks_the_device_module(device):
    x = to_standin(np.ones(2))
    assert array_module(x, 2.0, np.float64(1.0)) is standin
    assert array_module(np.ones(2), 2.0) is np
    assert backend_name(x) == "standin"


# -- device_put ------------------------------------------------------------------------


def test_device_put_round_trips_a_pytree(device):
    tree = {"w": np.arange(4.0).reshape(2, 2), "b": (np.ones(2), 0.5)}
    on = fgrad.device_put(tree, "standin")
    _all_on_device(on, "device_put")
    back = fgrad.device_put(on, "cpu")
    assert all(type(leaf) is np.ndarray for leaf in tree_leaves(back))
    np.testing.assert_array_equal(back["w"], tree["w"])
    assert float(back["b"][1]) == 0.5
    assert fgrad.device_put(on, "standin")["w"] is on["w"]   # already there: no copy


def test_device_put_unknown_device_is_an_error():
    with pytest.raises(DeviceError, match=r"unknown device 'tpu': use one of 'gpu', "
                                          r"'cpu'"):
        fgrad.device_put(np.ones(2), "tpu")


def test_device_put_gpu_without_cupy_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)          # import cupy -> ImportError
    with pytest.raises(DeviceError, match=r"needs CuPy, which is not installed.*"
                                          r"pip install 'fgrad\[cuda\]'"):
        fgrad.device_put(np.ones(2), "gpu")


def test_device_put_gpu_without_a_device_says_so(monkeypatch):
    def no_driver():
        raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
    runtime = types.SimpleNamespace(getDeviceCount=no_driver)
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    with pytest.raises(DeviceError, match=r"CuPy is installed but no CUDA device is "
                                          r"usable \(RuntimeError: cudaErrorNoDevice"):
        fgrad.device_put(np.ones(2), "gpu")


def test_device_put_refuses_tracers(device):
    with pytest.raises(DeviceError, match="traced value inside a transformation"):
        fgrad.grad(lambda x: fnp.sum(fgrad.device_put(x, "standin")))(np.ones(2))


# -- the patterns the einsum / linalg / fft / scipy impls follow ---------------------


def test_opt_einsum_dispatches_to_the_device_module_by_name(device):
    import opt_einsum
    a, b, c = (to_standin(np.arange(1.0, 1.0 + np.prod(s)).reshape(s))
               for s in [(2, 3), (3, 4), (4, 2)])
    xp = array_module(a, b, c)
    out = opt_einsum.contract("ij,jk,kl->il", a, b, c, backend=xp.__name__)
    assert type(out) is StandInArray
    host = to_numpy((a, b, c))
    np.testing.assert_allclose(to_numpy(out), host[0] @ host[1] @ host[2])


def test_linalg_fft_and_scipy_submodules_follow_the_data(device):
    pytest.importorskip("scipy")
    a = to_standin(np.array([[2.0, 1.0], [1.0, 3.0]]))
    xp = array_module(a)
    assert type(xp.linalg.solve(a, a)) is StandInArray
    assert type(xp.fft.rfft(a)) is StandInArray
    erf = scipy_module(xp, "special").erf
    np.testing.assert_allclose(to_numpy(erf(a)), __import__("scipy").special.erf(
        to_numpy(a)))
    assert type(erf(a)) is StandInArray


def test_scipy_module_without_a_counterpart_says_what_to_do():
    with pytest.raises(NotImplementedError, match=r"no SciPy counterpart registered.*"
                                                  r"device_put\(x, 'cpu'\)"):
        scipy_module(types.SimpleNamespace(__name__="fakexp"), "special")


def test_a_scipy_function_the_device_lacks_names_itself_and_the_way_out(device,
                                                                        monkeypatch):
    # cupyx.scipy.special has no jn, kv, stdtr, ...: a device backend's SciPy
    # namespace without the function gives DeviceError, not an AttributeError
    pytest.importorskip("scipy")
    monkeypatch.setitem(sys.modules, f"{SCIPY_NAME}.special",
                        types.SimpleNamespace(__name__=f"{SCIPY_NAME}.special"))
    with pytest.raises(DeviceError, match=r"scipy\.special\.gammaln has no counterpart in "
                                          rf"{SCIPY_NAME}\.special.*device_put\(x, 'cpu'\)"):
        fsp.gammaln(to_standin(np.array([1.5, 2.5])))


def test_jit_moves_a_host_constant_to_the_device(device):
    # eagerly, mixing a NumPy mask with device data is an error (CuPy's rule);
    # under jit the constant is part of the program and goes to the device once
    x = to_standin(np.linspace(-1, 1, 6))
    mask = np.array([True, False, True, False, True, False])

    def f(x):
        return fnp.sum(fnp.where(mask, x, 0.0) * 2)
    with pytest.raises(BackendMismatchError):
        f(x)
    want = 2.0 * mask
    for g in (fgrad.jit(fgrad.grad(f)), fgrad.grad(fgrad.jit(f))):
        out = g(x)
        assert type(out) is StandInArray
        np.testing.assert_array_equal(to_numpy(out), want)
    assert type(fgrad.jit(f)(x)) is StandInArray


def test_compiled_sweep_stays_on_the_device(device, monkeypatch):
    monkeypatch.setattr(compiled_sweep, "MIN_BYTES", 0)
    x = np.linspace(-1, 1, 6)

    def f(x):
        return fnp.sum(fnp.sin(x) * fnp.exp(-(x * x) / 4.0) + x ** 2)
    g = fgrad.grad(f)
    out = g(to_standin(x))
    assert type(out) is StandInArray
    monkeypatch.setattr(compiled_sweep, "MIN_BYTES", 1 << 62)
    np.testing.assert_allclose(to_numpy(out), fgrad.grad(f)(x), rtol=1e-13)


@pytest.mark.parametrize("which, np_ufunc", [("max", np.maximum), ("min", np.minimum)])
def test_scatter_extremum_on_a_device_keeps_float64_and_nan(device, which, np_ufunc):
    # a device backend takes the sort-based path (cupy's maximum.at rounds
    # float64 through float32): repeats, exact float64 values and NaN as NumPy
    x = np.array([-4.987, 1.0, 2.0, 0.5])
    idx = np.array([0, 0, 2, 2, 3])
    v = np.array([-4.887, -4.8870000001, 7.25, np.nan, 0.25])
    want = x.copy()
    np_ufunc.at(want, idx, v)
    got = getattr(fgrad.at(to_standin(x))[idx], which)(to_standin(v))
    _all_on_device(got, "the scattered array")
    np.testing.assert_array_equal(to_numpy(got), want)


def test_scatter_add_of_a_python_number_stays_on_the_device(device):
    # the number is made on x's device; a NumPy copy of it made the sum mix
    # backends (CuPy refused it on the H100)
    x = to_standin(np.zeros(3))
    out = fgrad.at(x)[np.array([0, 0, 2])].add(1.0)
    _all_on_device(out, "scatter-add")
    np.testing.assert_array_equal(to_numpy(out), [2.0, 0.0, 1.0])
    g = fgrad.grad(lambda x: fnp.sum(fgrad.at(x)[[0, 0, 2]].add(1.0) ** 2))(x)
    _all_on_device(g, "its gradient")
    np.testing.assert_array_equal(to_numpy(g), [4.0, 0.0, 2.0])
