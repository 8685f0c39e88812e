"""Whole-graph compilation under jit (numba): results, loops, fallback, bad input.

Each numba compilation costs about a second, so the tests share a few
programs that cover the table between them.
"""
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad import lax
from fgrad.compiler import cpu_fusion, whole_graph
from fgrad.compiler.program import PROGRAM_ENV
from fgrad.compiler.whole_graph import WHOLE_GRAPH_ENV
from fgrad.errors import InvalidInputError
from fgrad.transforms.jit import compiled_for

pytestmark = pytest.mark.skipif(not (whole_graph.available() and cpu_fusion.enabled()),
                                reason="numba missing or FGRAD_JIT_FUSE=0")


@pytest.fixture(autouse=True)
def compile_at_once(monkeypatch):
    """Compile whole at the first call (jit waits for the tenth otherwise),
    without the program tier (which would be final before numba's)."""
    monkeypatch.setenv(WHOLE_GRAPH_ENV, "1")
    monkeypatch.setenv(PROGRAM_ENV, "0")


def _agree(f, *args, rtol=1e-12):
    """jit(f) compiled whole equals the per-equation NumPy code; returns
    the `Lowered` of the compiled call."""
    f_jit = fgrad.jit(f)
    got = f_jit(*args)
    lowered = f_jit.lower(*args)
    assert lowered.whole_graph_compiled, str(lowered.whole_graph)
    want = fgrad.jit(f, fuse=False)(*args)
    got_leaves, want_leaves = fgrad.tree.tree_leaves(got), fgrad.tree.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-14, equal_nan=True)
    return lowered


_W = np.linspace(-1, 1, 12).reshape(3, 4)
_B = np.linspace(0.1, 0.4, 4)
_X = np.linspace(-0.5, 0.7, 6).reshape(2, 3)


def _network(params, x):
    w, b = params
    h = fnp.tanh(x @ w + b)                         # 2-d matmul, broadcast add
    z = fnp.where(h > 0.1, h, 0.5 * h)              # where, a scalar branch
    s = fnp.sum(z, axis=1, keepdims=True)           # reductions over some axes
    m = fnp.max(z, axis=0) + fnp.mean(z, axis=1).sum()
    v = z.T.reshape(-1)[2:7:2]                      # transpose, reshape, slice
    return (fnp.mean(z / s) + fnp.sum(m) * v[1] + z[1, 2] + v @ v + fnp.min(x)
            + fnp.sum(fnp.broadcast_to(b, (3, 4)) * x[0, :, None]))


def test_a_straight_line_graph_forward_and_backward_is_one_function():
    lowered = _agree(fgrad.value_and_grad(_network), (_W, _B), _X)
    assert "def kernel(" in lowered.whole_graph.source
    # the function calls kernels the per-equation code calls before it
    assert {k.source for k in lowered.whole_graph.kernels.values()} <= \
        {k.source for k in lowered.kernels}


def test_scan_and_fori_loop_become_loops():
    def rnn(params, xs):
        w, u = params

        def step(h, x_t):
            h = fnp.tanh(h @ w + x_t @ u)
            return h, fnp.sum(h)
        h, ys = lax.scan(step, fnp.zeros((2, 4)), xs)
        h = lax.fori_loop(0, 3, lambda i, c: c * 0.9 + fnp.sin(c) * i, h)
        return fnp.sum(h) + fnp.sum(ys * ys)
    xs = np.linspace(-1, 1, 5 * 2 * 3).reshape(5, 2, 3)
    params = (np.linspace(-0.5, 0.5, 16).reshape(4, 4), np.linspace(0.3, -0.3, 12).reshape(3, 4))
    lowered = _agree(fgrad.value_and_grad(rnn), params, xs)
    assert "for " in lowered.whole_graph.source and "scan" in str(lowered.optimized)


def test_while_loop_and_cond_become_a_loop_and_branches():
    def f(x, n):
        def body(c):
            k, v = c
            v = lax.cond(fnp.sum(v) > 1.0, lambda a: a * 1.5, lambda a: fnp.sin(a) - 0.25, v)
            return k + 1, v
        k, v = lax.while_loop(lambda c: fnp.logical_and(c[0] < n, fnp.sum(c[1]) < 50.0), body,
                              (0, x))
        return k, v, lax.cond(k > 3, lambda a: a[:2], lambda a: a[1:], v)
    x = np.array([0.5, -1.0, 2.0])
    for n in (0, 2, 7):
        lowered = _agree(f, x, np.int64(n))
    assert "while True:" in lowered.whole_graph.source


def test_float32_int64_and_bool_keep_their_dtypes_and_nan_propagates():
    def f(x, i, mask):
        y = fnp.where(mask, x * 2.5, x / 0.0)       # inf, -inf, nan from 0/0
        z = fnp.maximum(y, fnp.float32(1.0)) + fnp.minimum(x, y)
        k = i * 3 - fnp.maximum(i, 2)
        return z, k, fnp.logical_and(i > 1, mask), fnp.sum(z), x.astype(np.float64) * i
    x = np.array([np.nan, -1.0, 0.0, 2.0], np.float32)
    with np.errstate(all="ignore"):
        _agree(f, x, np.arange(4), np.array([True, False, False, True]), rtol=1e-6)


def test_elementwise_groups_become_fused_loops_in_the_function(monkeypatch):
    # kernels priced at nothing: every group of two or more operations is one
    monkeypatch.setattr(cpu_fusion, "KERNEL_CALL_NS", 0)
    monkeypatch.setattr(cpu_fusion, "KERNEL_ARRAY_NS", 0)

    def f(x, row, s, m):
        a = fnp.sin(x) * s + row                    # a scalar input, a broadcast row
        b = fnp.exp(a) - fnp.tanh(x) * m            # m (3, 1): broadcast out first
        c = fnp.cos(b) + a                          # several outputs of one dtype
        return c @ x.T, fnp.sum(c * 2.0), fnp.max(a * b, keepdims=True), a, b
    x = np.linspace(-3.0, 3.0, 12).reshape(3, 4)
    row, m = np.linspace(0.5, 1.0, 4), np.array([[1.0], [2.0], [3.0]])
    modules = {k for k in sys.modules if k.startswith("fgrad_kernel_")}
    lowered = _agree(f, x, row, 0.7, m)
    # loading the function (which calls no NumPy back) leaves no module behind
    assert {k for k in sys.modules if k.startswith("fgrad_kernel_")} == modules
    # the kernels, compiled on their own, are named in the function's text
    kernels = lowered.whole_graph.kernels
    assert len(kernels) >= 2
    for name, kernel in kernels.items():
        assert f"{name}(" in lowered.whole_graph.source
        assert "def kernel(n, " in kernel.source and '%"x0" = load' in kernel.source
    # a kernel of 256 or more elements calls the vector functions, and one
    # argument out of their range (here inf) reruns its loop with the C library
    big = np.linspace(-20.0, 20.0, 512)
    big[7] = np.inf
    with np.errstate(invalid="ignore"):
        # (a matmul after the kernel: one kernel alone is not compiled whole)
        lowered = _agree(lambda v: fnp.sum((fnp.sin(v) * fnp.exp(v * 0.1) + v).reshape(16, 32)
                                           @ v.reshape(32, 16)), big)
    (kernel,) = lowered.whole_graph.kernels.values()
    assert '%"t0" = call double @"vector_sin"(double %"x0")' in kernel.source


def test_an_unsupported_equation_is_named_and_the_graph_runs_per_equation():
    f = fgrad.jit(lambda x: fnp.cumsum(fnp.sin(x)) * 2.0 + x)
    x = np.linspace(0, 1, 5)
    np.testing.assert_allclose(f(x), np.cumsum(np.sin(x)) * 2.0 + x)
    lowered = f.lower(x)
    assert not lowered.whole_graph_compiled and not lowered.whole_graph.supported
    (reason,) = lowered.whole_graph.unsupported
    assert reason.startswith("cumsum(f64[5]) -> f64[5]") and "not in the whole-graph" in reason
    assert "cumsum" in str(lowered.whole_graph)


def test_large_arrays_and_long_graphs_are_left_to_the_per_equation_code(monkeypatch):
    big = np.ones(whole_graph.MAX_ELEMENTS + 1)
    lowered = fgrad.jit(lambda x: fnp.sin(fnp.cos(x) * 2.0) + 1.0).lower(big)
    assert not lowered.whole_graph_compiled
    assert len(lowered.whole_graph.unsupported) == 4
    assert all("MAX_ELEMENTS" in r for r in lowered.whole_graph.unsupported)
    monkeypatch.setattr(whole_graph, "MAX_EQUATIONS", 3)
    lowered = fgrad.jit(lambda x: fnp.sin(fnp.cos(fnp.exp(x) + 1.0))).lower(np.ones(3))
    assert "over MAX_EQUATIONS=3" in str(lowered.whole_graph)
    lowered = fgrad.jit(lambda x: fnp.sin(x) + 1.0).lower(np.ones(3))
    assert "under MIN_EQUATIONS" in str(lowered.whole_graph)


def _calls(x, y=2.0):
    # a graph of several calls once fused (one kernel alone is not compiled whole)
    h = fnp.tanh(x) * y + x
    return fnp.sum(h.reshape(-1, 1).T @ h.reshape(-1, 1))


def test_bad_input_to_the_compiled_graph_raises_and_jit_retraces():
    graph = fgrad.make_graph(_calls)(np.ones(3), 2.0)
    compiled = compiled_for(graph, np)
    assert float(compiled(np.zeros(3), 2.0)[0]) == 0.0
    assert compiled.whole is not None
    for bad in (np.zeros(4), np.zeros(3, np.float32), np.zeros((3, 1)), [0.0, 0.0, 0.0]):
        with pytest.raises(InvalidInputError, match=r"whole-graph function built for "
                                                    r"float64\[3\] as input 0"):
            compiled(bad, 2.0)
    f = fgrad.jit(_calls)
    for n in (3, 5, 3):
        np.testing.assert_allclose(f(np.ones(n)), ((np.tanh(1.0) * 2.0 + 1.0) ** 2) * n)
        assert f.lower(np.ones(n)).whole_graph_compiled
    assert f.cache_info().traces == 2


def test_the_off_switches_and_the_call_count(monkeypatch, caplog):
    f = _calls
    x = np.linspace(0, 1, 4)
    monkeypatch.setenv(WHOLE_GRAPH_ENV, "0")
    assert fgrad.jit(f).lower(x).whole_graph is None
    monkeypatch.setenv(WHOLE_GRAPH_ENV, "1")
    assert fgrad.jit(f, fuse=False).lower(x).whole_graph is None
    monkeypatch.setenv(cpu_fusion.FUSE_ENV, "0")
    assert fgrad.jit(f).lower(x).whole_graph is None
    monkeypatch.delenv(cpu_fusion.FUSE_ENV)
    monkeypatch.setenv(WHOLE_GRAPH_ENV, "3")
    f_jit = fgrad.jit(f)
    with caplog.at_level(logging.INFO, logger="fgrad.jit"):
        for call in (1, 2, 3):
            h = np.tanh(x) * 2.0 + x
            np.testing.assert_allclose(f_jit(x), h @ h)
            assert f_jit.lower(x).whole_graph_compiled == (call == 3)
            # the pause of the compiling call is said, at INFO
            assert ("_calls: whole tier compiled in" in caplog.text) == (call == 3)


# a scan on 512-element states whose tanh runs through the vector tanh of
# fgrad.compiler.vector_math and whose arcsinh calls NumPy's loop back
# (objmode), compiled in a fresh interpreter that says whether it loaded
# the function from the disk cache or compiled it
_CHILD = textwrap.dedent("""
    import io, logging
    import numpy as np, fgrad, fgrad.numpy as fnp
    from fgrad import lax
    log = io.StringIO()
    logging.getLogger("fgrad.jit").addHandler(logging.StreamHandler(log))
    logging.getLogger("fgrad.jit").setLevel(logging.DEBUG)

    def f(w, xs):
        h, _ = lax.scan(lambda h, x: (fnp.tanh(fnp.arcsinh(h @ w + x)), None),
                        xs[0] * 0.0, xs)
        return fnp.sum(h) + fnp.sum(fnp.square(w * 2.0 + 1.0))   # a fused kernel too
    w, xs = np.eye(32) * 0.3, np.linspace(-2, 2, 3 * 16 * 32).reshape(3, 16, 32)
    got = fgrad.jit(fgrad.grad(f))(w, xs)
    np.testing.assert_allclose(got, fgrad.jit(fgrad.grad(f), fuse=False)(w, xs),
                               rtol=1e-12, atol=1e-14)
    plan = fgrad.jit(fgrad.grad(f)).lower(w, xs).whole_graph
    assert "vector_tanh" in plan.source and "numpy_arcsinh" in plan.source
    assert plan.kernels
    print("loaded" if "from the disk cache" in log.getvalue() else
          "built" if "compiled" in log.getvalue() else "neither")
""")


@pytest.mark.slow            # a fresh process: numba's start-up and the compile again
def test_a_second_process_loads_the_compiled_graph_from_the_disk_cache(tmp_path):
    env = dict(os.environ, FGRAD_KERNEL_CACHE=str(tmp_path), FGRAD_JIT_WHOLE_GRAPH="1")
    outs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                              check=False,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        # building it warns of nothing (numba's "object mode won't allow
        # parallel execution" was shown at every compile of a NumPy callback)
        assert "Warning" not in done.stderr, done.stderr
        outs.append(done.stdout.strip())
    assert outs == ["built", "loaded"]
