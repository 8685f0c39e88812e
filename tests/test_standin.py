"""The whole property suite on a pretend device that refuses NumPy calls.

`standin_backend.StandInArray` is what a CuPy array looks like to fgrad (its own
module, no implicit conversion), but it runs on the CPU. Every primitive spec is
run on stand-in inputs: forward values, first- and second-order JVPs and VJPs
(`check_grads`), and each output, tangent and cotangent must itself be a
stand-in array. Any impl or rule that handed device data to NumPy raises
`StandInRefused` (or the stand-in's TypeError for a NumPy array argument), so
this holds on machines without a GPU.
"""
import numpy as np
import pytest
from hypothesis import given

import fgrad
import fgrad.numpy as fnp
from fgrad.backend import array_module, backend_name
from fgrad.errors import BackendMismatchError, DeviceError
from fgrad.testing import check_grads
from fgrad.tree import tree_leaves
from primitive_specs import NONDIFF_SPECS, SPECS
from standin_backend import StandInArray, StandInRefused, registered, standin, \
    to_numpy, to_standin


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


@pytest.mark.parametrize("name", sorted(SPECS))
def test_property_suite_on_standin(name, device):
    @given(SPECS[name])
    def check(case):
        args = to_standin(case.args)
        out = case.fun(*args)
        _all_on_device(out, f"{name}'s output")
        if case.reference is not None:
            np.testing.assert_allclose(to_numpy(out), case.reference(*case.args),
                                       rtol=1e-12, atol=1e-12)
        if case.order:
            _, vjp_fn = fgrad.vjp(case.fun, *args)
            _all_on_device(vjp_fn(fnp.ones_like(out)), f"{name}'s cotangents")
            _, t = fgrad.jvp(case.fun, args, tuple(fnp.ones_like(a) for a in args))
            _all_on_device(t, f"{name}'s tangent")
            check_grads(case.fun, args, order=case.order, modes=("fwd", "rev"),
                        **case.tol)
    check()


@pytest.mark.parametrize("name", sorted(NONDIFF_SPECS))
def test_nondifferentiable_on_standin(name, device):
    @given(NONDIFF_SPECS[name])
    def check(case):
        f, ref, host_args = case
        args = to_standin(host_args)
        out = f(*args)
        _all_on_device(out, f"{name}'s output")
        np.testing.assert_array_equal(to_numpy(out), ref(*host_args))
        g = fgrad.grad(lambda *xs: fnp.sum(f(*xs) * 1.0))(*args)
        _all_on_device(g, f"{name}'s gradient")
        np.testing.assert_array_equal(to_numpy(g), np.zeros_like(host_args[0]))
    check()


def test_grad_of_grad_and_jacobians_stay_on_device(device):
    x = to_standin(np.array([0.3, -1.2, 2.0]))

    def f(x):
        return fnp.sum(fnp.tanh(x) ** 2 * fnp.exp(-x))
    g2 = fgrad.grad(lambda x: fnp.sum(fgrad.grad(f)(x) ** 2))(x)
    _all_on_device(g2, "grad of grad")
    _all_on_device(fgrad.hessian(f)(x), "hessian")
    _all_on_device(fgrad.jacrev(fnp.sin)(x), "jacrev")
    host = to_numpy(x)
    np.testing.assert_allclose(to_numpy(fgrad.jacfwd(fnp.sin)(x)), np.diag(np.cos(host)))


def test_python_scalar_input_goes_to_the_device(device):
    x = to_standin(np.array([1.0, 2.0]))
    gx, gs = fgrad.grad(lambda x, s: fnp.sum(x * s), argnums=(0, 1))(x, 3.0)
    _all_on_device((gx, gs), "gradient")
    assert float(gs) == 3.0
    np.testing.assert_array_equal(to_numpy(gx), [3.0, 3.0])


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
    import sys
    try:
        import cupy  # noqa: F401
        import cupy.cuda
        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is present: the error cannot happen here")
    except ImportError:
        pass
    except Exception:
        pass
    monkeypatch.setitem(sys.modules, "cupy", None)          # import cupy -> ImportError
    with pytest.raises(DeviceError, match=r"pip install 'fgrad\[cuda\]'"):
        fgrad.device_put(np.ones(2), "gpu")


def test_device_put_refuses_tracers(device):
    with pytest.raises(DeviceError, match="traced value inside a transformation"):
        fgrad.grad(lambda x: fnp.sum(fgrad.device_put(x, "standin")))(np.ones(2))
