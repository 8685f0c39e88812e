"""fgrad with none of its optional engines: llvmlite (jit's compiler), SciPy
(fgrad.scipy), Dask (fgrad.dask) hidden from a fresh interpreter, installed
or not. The core works; what needs a missing package says which extra to
install."""
import subprocess
import sys
import textwrap

_CHILD = textwrap.dedent("""
    import sys
    HIDDEN = ("numba", "llvmlite", "scipy", "dask", "distributed", "zarr")
    for name in HIDDEN:         # as if not installed: imports fail, find_spec is None
        sys.modules[name] = None

    import numpy as np
    import fgrad, fgrad.numpy as fnp, fgrad.nn, fgrad.optim
    from fgrad import lax
    from fgrad.compiler import cpu_fusion
    from fgrad.errors import OptionalDependencyError

    def loss(w, x):
        h, _ = lax.scan(lambda h, xt: (fnp.tanh(h @ w + xt), None), x[0] * 0.0, x)
        return fnp.sum(h ** 2) + fnp.sum(fgrad.nn.relu(x))
    w = np.linspace(-0.5, 0.5, 9).reshape(3, 3)
    x = np.linspace(-1.0, 1.0, 24).reshape(4, 2, 3)
    want = fgrad.grad(loss)(w, x)
    f = fgrad.jit(fgrad.grad(loss))
    for _ in range(3):               # past the call that would ask for compiled code
        got = f(w, x)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    lowered = f.lower(w, x)
    assert not cpu_fusion.enabled() and lowered.kernels == [] and lowered.program is None
    assert lowered.tier == "numpy"
    per_example = fgrad.vmap(fgrad.grad(loss), in_axes=(None, 1))(w, x[:, :, None, :])
    assert per_example.shape == (2, 3, 3)
    _, hvp = fgrad.jvp(fgrad.grad(lambda v: fnp.sum(fnp.sin(v) ** 2)), (w,), (w,))
    assert hvp.shape == w.shape
    # solve's kept LU factors need llvmlite and SciPy: without them it solves again
    a, b = np.array([[3.0, 1.0], [1.0, 2.0]]), np.array([1.0, 2.0])
    g = fgrad.grad(lambda a: fnp.sum(fnp.linalg.solve(a, b)))(a)
    np.testing.assert_allclose(g, -np.outer(np.linalg.solve(a.T, np.ones(2)),
                                            np.linalg.solve(a, b)), rtol=1e-12)
    assert not any(m.split(".")[0] in HIDDEN for m, mod in sys.modules.items() if mod)

    import fgrad.scipy.special, fgrad.scipy.integrate, fgrad.dask
    for call in (lambda: fgrad.scipy.special.gamma(2.0),
                 lambda: fgrad.scipy.integrate.odeint(lambda y, t: -y, np.ones(2),
                                                      np.linspace(0, 1, 3)),
                 lambda: fgrad.dask.grad(lambda p, X, y: fnp.sum(X @ p))):
        try:
            call()
        except OptionalDependencyError as err:
            print(type(err).__name__, isinstance(err, ModuleNotFoundError), err)
""")


def test_without_llvmlite_scipy_and_dask_the_core_works_and_extras_are_named():
    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 3, done.stdout
    assert all(line.startswith("OptionalDependencyError True ") for line in lines)
    assert "scipy.special" in lines[0] and "pip install 'fgrad[scipy]'" in lines[0]
    assert "scipy.integrate" in lines[1] and "pip install 'fgrad[scipy]'" in lines[1]
    assert "needs dask" in lines[2] and "pip install 'fgrad[dask]'" in lines[2]
