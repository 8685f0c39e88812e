"""The property suite and grad/jvp on CuPy arrays, on a real GPU.

Every test here is marked `cupy`: it runs when CuPy and a CUDA device are
present (or with ``pytest --backend=cupy``, which requires them) and skips with
the reason otherwise. The checks are the ones test_standin.py runs on the CPU
stand-in (tests/device_suite.py), so a GPU run adds what the stand-in cannot
show: CuPy's own dtype promotion, kernels and numerics.
"""
import numpy as np
import pytest
from hypothesis import given

import fgrad
import fgrad.numpy as fnp
from device_suite import Device, check_case, check_jit_case, check_nested_transformations, \
    check_nondiff, check_scalar_input_moves
from fgrad.errors import BackendMismatchError, DeviceError
from primitive_specs import NONDIFF_SPECS, SPECS
from fgrad.compiler.codegen import compile_graph
from fgrad.compiler.fusion import fused_elementwise_p, kernels

pytestmark = pytest.mark.cupy


@pytest.fixture(scope="module")
def gpu():
    cupy = pytest.importorskip("cupy")
    # GPU reductions sum in a different order: agree to rounding, not to the bit
    return Device("gpu", cupy.ndarray, rtol=1e-10)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_property_suite_on_cupy(name, gpu):
    try:
        given(SPECS[name])(lambda case: check_case(gpu, name, case))()
    except DeviceError as err:
        # a SciPy function cupyx.scipy lacks (jn, kv, logm, ...): the promised
        # error, naming the function and the way out; anything else fails
        assert "has no counterpart in cupyx.scipy" in str(err), err
        assert "fgrad.device_put(x, 'cpu')" in str(err)
        pytest.skip(f"not on CuPy: {err}")


# elementwise specs whose jit must run a fused kernel (compiled by NVRTC)
FUSED = ("add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "sin",
         "cos", "exp", "log", "tanh", "sqrt", "negative", "absolute")


@pytest.mark.parametrize("name", sorted(SPECS))
def test_jit_equals_eager_on_cupy(name, gpu):
    # the systematic jit test on the GPU: jit(f) and jit(grad(f)), with their
    # elementwise groups fused into generated CUDA kernels, against eager CuPy
    def check(case):
        check_jit_case(gpu, name, case)
        if name in FUSED and all(np.asarray(a).dtype == np.float64 for a in case.args):
            args = gpu.put(case.args)
            lowered = fgrad.jit(lambda *xs: case.fun(*xs) * 1.5 + 0.25).lower(*args)
            assert any(e.prim is fused_elementwise_p for e in lowered.optimized.eqns), \
                lowered.optimized
    try:
        given(SPECS[name])(check)()
    except DeviceError as err:
        assert "has no counterpart in cupyx.scipy" in str(err), err
        pytest.skip(f"not on CuPy: {err}")


@pytest.mark.parametrize("name", sorted(NONDIFF_SPECS))
def test_nondifferentiable_on_cupy(name, gpu):
    given(NONDIFF_SPECS[name])(lambda case: check_nondiff(gpu, name, case))()


def test_nested_transformations_on_cupy(gpu):
    check_nested_transformations(gpu)


def test_python_scalar_input_goes_to_the_gpu(gpu):
    check_scalar_input_moves(gpu)


def test_float32_stays_float32_on_the_gpu(gpu):
    x = gpu.put(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3))
    w = gpu.put(np.ones((3, 2), np.float32))
    g = fgrad.grad(lambda w: fnp.sum(fnp.tanh(x @ w) * 2.0))(w)
    gpu.assert_on(g, "gradient")
    assert g.dtype == np.float32


def test_scatter_add_accumulates_repeated_indices_on_the_gpu(gpu):
    x = gpu.put(np.zeros(3))
    out = fgrad.at(x)[np.array([0, 0, 2])].add(1.0)
    gpu.assert_on(out, "scatter-add")
    np.testing.assert_array_equal(gpu.get(out), [2.0, 0.0, 1.0])


def test_mixing_numpy_and_cupy_names_the_arguments(gpu):
    with pytest.raises(BackendMismatchError,
                       match=r"argument 0 is a cupy array, argument 1 is a numpy array"):
        fgrad.grad(lambda x, y: fnp.sum(x * y))(gpu.put(np.ones(2)), np.ones(2))


def test_device_put_round_trip(gpu):
    tree = {"w": np.arange(6.0).reshape(2, 3), "b": 0.5}
    on = fgrad.device_put(tree, "gpu")
    gpu.assert_on(on, "device_put")
    back = fgrad.device_put(on, "cpu")
    np.testing.assert_array_equal(back["w"], tree["w"])


def test_jit_fuses_an_elementwise_chain_into_one_cupy_kernel(gpu):
    import cupy

    def f(x):
        for k in range(3):
            x = fnp.tanh(fnp.sin(x) * (1.0 + 0.1 * k) + x * 0.5)
        return fnp.sum(x)
    host = np.linspace(-2, 2, 1000).reshape(10, 100)
    x = gpu.put(host)
    graph = fgrad.make_graph(fgrad.grad(f))(x)
    compiled = compile_graph(graph, cupy)
    assert [k.size > 10 for k in kernels(compiled)] == [True]   # one kernel, fwd + bwd
    (g,) = compiled(x)
    gpu.assert_on(g, "fused gradient")
    np.testing.assert_allclose(gpu.get(g), fgrad.grad(f)(host), rtol=1e-12)
    jitted = fgrad.jit(fgrad.grad(f))
    np.testing.assert_allclose(gpu.get(jitted(x)), fgrad.grad(f)(host), rtol=1e-12)
    x32 = gpu.put(host.astype(np.float32))
    g32 = fgrad.jit(lambda x: fnp.where(x > 0, fnp.exp(-x), x * 2.0) + 1)(x32)
    assert g32.dtype == np.float32
    np.testing.assert_allclose(gpu.get(g32), np.where(host > 0, np.exp(-host), host * 2.0)
                               + 1, rtol=1e-6)
