"""The property suite on a device backend, shared by test_standin.py (a CPU
stand-in that refuses NumPy) and test_cupy.py (CuPy on a real GPU).

Each check takes a `Device`: how to move pytrees on and off it, and its array
type. Every output, tangent and cotangent must stay on the device, and values
and derivatives must match NumPy's (forward) and finite differences
(`check_grads`, both modes, second order).
"""
from dataclasses import dataclass

import numpy as np

import fgrad
import fgrad.numpy as fnp
from fgrad.testing import check_grads
from fgrad.tree import tree_leaves


@dataclass
class Device:
    name: str                 # fgrad.device_put's device name
    array_type: type
    rtol: float = 1e-12       # forward values against NumPy's

    def put(self, tree):
        return fgrad.device_put(tree, self.name)

    def get(self, tree):
        return fgrad.device_put(tree, "cpu")

    def assert_on(self, tree, what):
        for leaf in tree_leaves(tree):
            assert type(leaf) is self.array_type, \
                f"{what} left the {self.name} device: got {type(leaf).__name__}"


def check_case(device, name, case):
    """Forward values, on-device derivatives and check_grads for one spec case."""
    args = device.put(case.args)
    out = case.fun(*args)
    device.assert_on(out, f"{name}'s output")
    if case.reference is not None:
        np.testing.assert_allclose(device.get(out), case.reference(*case.args),
                                   rtol=device.rtol, atol=device.rtol)
    if case.order:
        _, vjp_fn = fgrad.vjp(case.fun, *args)
        device.assert_on(vjp_fn(fnp.ones_like(out)), f"{name}'s cotangents")
        _, t = fgrad.jvp(case.fun, args, tuple(fnp.ones_like(a) for a in args))
        device.assert_on(t, f"{name}'s tangent")
        check_grads(case.fun, args, order=case.order, modes=("fwd", "rev"),
                    **case.tol)


def check_nondiff(device, name, case):
    f, ref, host_args = case
    args = device.put(host_args)
    out = f(*args)
    device.assert_on(out, f"{name}'s output")
    np.testing.assert_array_equal(device.get(out), ref(*host_args))
    g = fgrad.grad(lambda *xs: fnp.sum(f(*xs) * 1.0))(*args)
    device.assert_on(g, f"{name}'s gradient")
    np.testing.assert_array_equal(device.get(g), np.zeros_like(host_args[0]))


def check_nested_transformations(device):
    """grad of grad, hessian, jacrev and jacfwd keep every value on the device."""
    host = np.array([0.3, -1.2, 2.0])
    x = device.put(host)

    def f(x):
        return fnp.sum(fnp.tanh(x) ** 2 * fnp.exp(-x))
    g2 = fgrad.grad(lambda x: fnp.sum(fgrad.grad(f)(x) ** 2))(x)
    device.assert_on(g2, "grad of grad")
    device.assert_on(fgrad.hessian(f)(x), "hessian")
    device.assert_on(fgrad.jacrev(fnp.sin)(x), "jacrev")
    np.testing.assert_allclose(device.get(fgrad.jacfwd(fnp.sin)(x)),
                               np.diag(np.cos(host)), rtol=1e-12)
    check_grads(f, (x,), order=2)


def check_scalar_input_moves(device):
    x = device.put(np.array([1.0, 2.0]))
    gx, gs = fgrad.grad(lambda x, s: fnp.sum(x * s), argnums=(0, 1))(x, 3.0)
    device.assert_on((gx, gs), "gradient")
    assert float(gs) == 3.0
    np.testing.assert_array_equal(device.get(gx), [3.0, 3.0])


def check_jit_case(device, name, case):
    """``jit`` of a spec, and ``jit`` of its gradient, give on the device what
    the eager code gives there (on CuPy, jit's elementwise groups are fused
    kernels compiled by NVRTC, so this checks every kernel the specs make)."""
    args = device.put(case.args)
    _agree(device, fgrad.jit(case.fun)(*args), case.fun(*args), f"jit of {name}",
           device.rtol)
    if not case.order:
        return

    def scalar(*xs):
        return fnp.sum(fnp.real(case.fun(*xs)) * 1.5)
    grad = fgrad.grad(scalar, tuple(range(len(args))))
    _agree(device, fgrad.jit(grad)(*args), grad(*args), f"jit of grad of {name}",
           max(device.rtol, 1e-10))


def _agree(device, got, want, what, rtol):
    device.assert_on(got, what)
    got, want = tree_leaves(device.get(got)), tree_leaves(device.get(want))
    assert len(got) == len(want), what
    for g, w in zip(got, want):
        assert np.shape(g) == np.shape(w) and np.asarray(g).dtype == np.asarray(w).dtype, \
            f"{what}: {np.shape(g)} {np.asarray(g).dtype} vs {np.shape(w)} {np.asarray(w).dtype}"
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, equal_nan=True, err_msg=what)
