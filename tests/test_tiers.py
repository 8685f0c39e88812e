"""Tiered compilation (issue 35): calls run NumPy calls while the kernels and the
program compile on a background thread, switch to them once built, agree with
them, and never wait for a compiler."""
import gc
import logging
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad import lax
from fgrad.compiler import cpu_fusion, parallel, program, tiers
from fgrad.compiler.program import PROGRAM_ENV
from fgrad.compiler.tiers import COMPILE_SWITCH_INTERVAL, CompileQueue, in_background, wait_all

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
compiles = pytest.mark.skipif(not cpu_fusion.enabled(),
                              reason="llvmlite missing or FGRAD_JIT_FUSE=0")


def _python(code, **env):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT, **env})


def _arithmetic(x, y):
    # operations NumPy and compiled code compute alike, to the bit, in
    # elementwise groups (kernels) with a transpose and a reshape between them
    z = (x * 1.5 + y) * (x - y) - fnp.maximum(x, y) / 3.0
    t = fnp.where(z.T > 0.25, z.T, -z.T * 2.0) + (x.T < y.T).astype(x.dtype)
    r = t.reshape(-1)
    w = (r * r - 0.5 * r).reshape(t.shape).T + z
    return fnp.sum(w * w), w


@compiles
def test_calls_run_numpy_while_the_kernels_compile_on_the_compile_thread(caplog):
    x = np.linspace(-2.0, 2.0, 300)
    f = fgrad.jit(fgrad.grad(lambda x: fnp.sum(fnp.sin(x) * fnp.exp(-x * x) + x * x)),
                  compile="background")
    with caplog.at_level(logging.INFO, logger="fgrad.jit"):
        first = f(x)
        assert f.wait_compiled()
    compiled = [r for r in caplog.records if "tier compiled" in r.getMessage()]
    assert compiled and all(r.threadName == "fgrad-compile" for r in compiled)
    assert "kernels tier compiled in" in compiled[0].getMessage()
    (info,) = f.compile_info()
    assert info.tier == "kernels" and not info.compiling and info.seconds["kernels"] > 0
    assert info.signature == "float64[300]" and f.lower(x).tier == "kernels"
    np.testing.assert_allclose(f(x), first, rtol=1e-13, atol=1e-15)



@compiles
def test_a_function_dropped_before_its_compile_runs_compiles_nothing(caplog):
    gate = threading.Event()
    assert in_background(gate.wait)          # hold the compile thread
    x = np.linspace(-1.0, 1.0, 200)

    def dropped_function(x):
        return fnp.sum(fnp.cos(x) * x + 1.0)
    f = fgrad.jit(dropped_function, compile="background")
    f(x), f(x)                               # the second call asks for its tiers
    del f
    gc.collect()
    with caplog.at_level(logging.INFO, logger="fgrad.jit"):
        gate.set()
        assert wait_all(timeout=60)
    assert not [r for r in caplog.records if "dropped_function" in r.getMessage()]

@compiles
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("tier", ["kernels", "program"])
def test_each_tier_gives_numpys_bits_where_the_operations_are_the_same(
        tier, dtype, monkeypatch):
    monkeypatch.setenv(PROGRAM_ENV, "all" if tier == "program" else "0")
    monkeypatch.setattr(cpu_fusion, "KERNEL_CALL_NS", 0)     # fuse even tiny groups
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal((4, 8)).astype(dtype) for _ in range(2))
    want = fgrad.jit(_arithmetic, compile="never")(x, y)
    compiled = fgrad.jit(_arithmetic, compile="sync")
    first = compiled(x, y)
    assert compiled.wait_compiled()
    lowered = compiled.lower(x, y)
    assert lowered.tier == tier and lowered.kernels
    # the first call, in the tier it ran, and the last tier
    for result in (first, compiled(x, y)):
        np.testing.assert_array_equal(result[1], want[1])
        # a sum is taken in order by compiled code, pairwise by NumPy
        np.testing.assert_allclose(result[0], want[0], rtol=1e-5 if dtype == np.float32
                                   else 1e-13)


def _damped(i, y):
    # a loop body of one elementwise group, worth a kernel at 1000 elements
    return (y * 0.5 - 1.0) * y * -0.9 + 0.05


def _kernels_compiled(records):
    return [r for r in records if "kernels tier compiled" in r.getMessage()]


def _called_until_compiled(f, args, caplog):
    """``f``'s first result, once a second call has asked for its tiers and
    they are built (logged into ``caplog``)."""
    with caplog.at_level(logging.INFO, logger="fgrad.jit"):
        first = f(*args)
        f(*args)
        assert f.wait_compiled()
    return first


@compiles
@pytest.mark.parametrize("mode", ["background", "sync"])
def test_a_loop_whose_program_pays_compiles_no_kernels(mode, monkeypatch, caplog):
    # the program replaces the kernels (the graph's and its loop body's): they
    # are not built before it
    monkeypatch.setenv(PROGRAM_ENV, "1")
    loss = lambda x: fnp.sum(lax.fori_loop(0, 5, _damped, fnp.exp(x) * 0.5 + x))  # noqa: E731
    f = fgrad.jit(fgrad.value_and_grad(loss), compile=mode)
    x = np.linspace(-1.0, 1.0, 1000)
    with caplog.at_level(logging.INFO, logger="fgrad.jit"):
        first = f(x)
        # the first call staged the graph: nothing compiles yet, not even the
        # kernels of the loop body it ran
        assert mode == "sync" or not f.compile_info()[0].compiling
        f(x)
        assert f.wait_compiled()
    (info,) = f.compile_info()
    assert info.tier == "program" and "kernels" not in info.seconds
    assert "kernels" not in info.cpu_seconds and info.cpu_seconds["program"] > 0
    assert not _kernels_compiled(caplog.records)
    want = fgrad.jit(fgrad.value_and_grad(loss), compile="never")(x)
    for got in (first, f(x)):
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-14)
    # lowering asks for the kernels, which calls then do not run
    lowered = f.lower(x)
    assert lowered.kernels and lowered.tier == "program"


@compiles
def test_a_loop_whose_program_fails_to_compile_runs_its_kernels(caplog):
    # the program (forced, and too many arguments for ctypes) fails: the
    # graph's kernels and its loop body's, held for it, are built instead
    def loop_and_doubled(xs):
        return [lax.fori_loop(0, 2, _damped, fnp.cos(xs[0]) * 2.0 + xs[0])] + \
            [x * 2.0 for x in xs[1:]]
    n = program.MAX_ARGUMENTS
    f = fgrad.jit(loop_and_doubled)
    xs = [np.linspace(0.0, 1.0, 1000) + k for k in range(n)]
    first = _called_until_compiled(f, (xs,), caplog)
    assert "program tier failed (NotImplementedError" in caplog.text
    (info,) = f.compile_info()
    assert info.tier == "kernels" and info.cpu_seconds["kernels"] > 0
    # the function's kernel and its loop body's
    assert len(_kernels_compiled(caplog.records)) == 2
    want = _damped(1, _damped(0, np.cos(xs[0]) * 2.0 + xs[0]))
    for got in (first, f(xs)):
        np.testing.assert_allclose(got[0], want, rtol=1e-12)
        np.testing.assert_array_equal(got[-1], xs[-1] * 2.0)


@compiles
def test_a_loop_whose_program_does_not_pay_runs_its_kernels(monkeypatch, caplog):
    # a body of callouts (cumulative sums) is cheaper as NumPy calls than
    # called out of a program: its kernels are the last tier
    monkeypatch.setenv(PROGRAM_ENV, "1")
    body = lambda i, y: fnp.cumsum(fnp.cumsum(fnp.cumsum(_damped(i, y))))  # noqa: E731
    f = fgrad.jit(lambda x: lax.fori_loop(0, 3, body, x))
    x = np.linspace(0.0, 1e-3, 1000)
    first = _called_until_compiled(f, (x,), caplog)
    assert "program tier not built" in caplog.text
    (info,) = f.compile_info()
    assert info.tier == "numpy" and "program" not in info.seconds   # the body's kernels run
    assert info.cpu_seconds["kernels"] > 0 and len(_kernels_compiled(caplog.records)) == 1
    want = fgrad.jit(lambda x: lax.fori_loop(0, 3, body, x), compile="never")(x)
    np.testing.assert_allclose(first, want, rtol=1e-12)
    np.testing.assert_allclose(f(x), want, rtol=1e-12)


def _fan_out(w, x):
    # each input read by many equations: its gradient is a sum of many
    # cotangents, whose order decides the last bits
    h = x @ w
    terms = [fnp.sum(fnp.tanh(h * k + 0.1) * (1.0 / k)) for k in range(1, 9)]
    return sum(terms) + fnp.sum(fnp.sin(w) * w) + fnp.mean(h * h)


def _bits(tree):
    return [np.atleast_1d(a).view(f"u{a.dtype.itemsize}")
            for a in fgrad.tree.tree_flatten(tree)[0]]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mode, last", [
    ("never", "numpy"), pytest.param("sync", "kernels", marks=compiles),
    pytest.param("background", "kernels", marks=compiles),
    pytest.param("sync", "program", marks=compiles),
    pytest.param("background", "program", marks=compiles)])
def test_parallel_gives_the_sequential_bits_in_every_tier(mode, last, dtype, monkeypatch):
    # last: the tier the calls end in (the program tier forced, or off)
    monkeypatch.setenv(PROGRAM_ENV, "all" if last == "program" else "0")
    monkeypatch.setattr(parallel, "PARALLEL_MIN_SIZE", 0)    # every equation on the pool
    rng = np.random.default_rng(5)
    w, x = rng.standard_normal((6, 6)).astype(dtype), rng.standard_normal((3, 6)).astype(dtype)
    grad = fgrad.value_and_grad(_fan_out, argnums=(0, 1))
    sequential, scheduled = fgrad.jit(grad, compile=mode), fgrad.jit(grad, parallel=True,
                                                                      compile=mode)
    reached = []
    for _ in range(5):
        want = _bits(sequential(w, x))
        got = _bits(scheduled(w, x))
        assert all(np.array_equal(a, b) for a, b in zip(got, want))
        sequential.wait_compiled() if mode == "background" else None
        scheduled.wait_compiled() if mode == "background" else None
        reached.append(scheduled.lower(w, x).tier)
        assert sequential.lower(w, x).tier == reached[-1]
    if mode == "never":         # the NumPy tier is the eager sweep, equation for equation
        assert all(np.array_equal(a, b) for a, b in zip(_bits(grad(w, x)), want))
    assert reached[-1] == last


@compiles
def test_several_threads_call_while_the_tiers_are_switched_in(monkeypatch):
    monkeypatch.setenv(PROGRAM_ENV, "0")
    x = np.linspace(-3.0, 3.0, 1000)
    loss = lambda x: fnp.sum(fnp.tanh(fnp.sin(x) * 1.5 + x) * fnp.exp(-x * x))  # noqa: E731
    want = fgrad.grad(loss)(x)
    f = fgrad.jit(fgrad.grad(loss), compile="background")
    results, errors = [[] for _ in range(6)], []
    barrier = threading.Barrier(len(results))

    def work(i):
        try:
            barrier.wait()
            for _ in range(40):
                results[i].append(f(x))
        except Exception as err:                    # reported in the main thread
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert f.wait_compiled() and f.compile_info()[0].tier == "kernels"
    for got in [r for rs in results for r in rs] + [f(x)]:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


@compiles
def test_wait_compiled_builds_the_halves_of_a_jitted_functions_gradient():
    inner = fgrad.jit(lambda x: fnp.sin(x) * fnp.cos(x) * 2.0 + x * x, compile="background")
    x = np.linspace(0.0, 1.0, 400)
    g = fgrad.grad(lambda x: fnp.sum(inner(x)))(x)
    assert inner.wait_compiled()
    np.testing.assert_allclose(g, np.cos(2 * x) * 2.0 + 2 * x, rtol=1e-12)


def test_a_bad_compile_mode_names_the_modes():
    with pytest.raises(fgrad.errors.InvalidInputError, match="'background', 'sync', 'never'"):
        fgrad.jit(np.sin, compile="later")


@compiles
def test_without_numba_every_tier_runs():
    # numba cannot be imported (nothing of fgrad's needs it): the kernels, the
    # program, the random draws' and the LU solves' compiled loops all run on
    # LLVM
    done = _python("""
        import sys
        sys.modules["numba"] = None
        import numpy as np, fgrad, fgrad.numpy as fnp
        from fgrad import random
        from fgrad.primitives import linalg

        def loss(a, key):
            noise = random.normal(key, (3, 2)) * random.uniform(key, (3, 2))
            return fnp.sum(fnp.tanh(fnp.linalg.solve(a, noise)) ** 2)
        step = fgrad.jit(fgrad.value_and_grad(loss))
        a, key = np.eye(3) * 2.0 + 0.1, random.key(0)
        for _ in range(12):
            got = step(a, key)
        # (a program: the solves of two right-hand sides are getrs)
        assert step.wait_compiled() and step.compile_info()[0].tier == "program"
        want = fgrad.value_and_grad(loss)(a, key)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
        assert linalg.lu_kept(a)        # solve's factors kept: the LU loops are there
        print("ok")
    """, FGRAD_JIT_PROGRAM="all", FGRAD_JIT_COMPILE="background")
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr


def test_compile_never_and_import_leave_llvm_unloaded():
    done = _python("""
        import sys
        import numpy as np, fgrad, fgrad.numpy as fnp
        assert "llvmlite" not in sys.modules, "import fgrad imported llvmlite"
        f = fgrad.jit(fgrad.grad(lambda x: fnp.sum(fnp.sin(x) * x)), compile="never")
        for _ in range(12):
            f(np.ones(100))
        assert f.wait_compiled() and f.compile_info()[0].tier == "numpy"
        assert "llvmlite" not in sys.modules, "compile='never' imported llvmlite"
        assert "numba" not in sys.modules
        print("ok")
    """)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr


@compiles
def test_a_process_exits_at_once_while_a_compile_runs():
    # the child asks for a kernel (with LLVM's start-up before it) and exits
    # while it compiles: neither the compile nor its log line may finish.
    # The first call, which stages the graph, starts no compile; the second does
    done = _python("""
        import logging, time
        import numpy as np, fgrad, fgrad.numpy as fnp
        logging.basicConfig(level=logging.INFO)
        f = fgrad.jit(fgrad.grad(lambda x: fnp.sum(fnp.tanh(fnp.sin(x) * x + 1.0) * x)),
                      compile="background")
        x = np.linspace(0, 1, 500)
        f(x)
        assert not f.compile_info()[0].compiling and f.compile_info()[0].tier == "numpy"
        f(x)
        assert f.compile_info()[0].compiling
        print("exiting", flush=True)
    """, FGRAD_KERNEL_CACHE="0")
    assert done.returncode == 0 and "exiting" in done.stdout, done.stderr
    assert "tier compiled" not in done.stderr


def test_compile_jobs_run_at_a_fine_switch_interval_and_restore_it():
    queue, seen, before = CompileQueue(), [], sys.getswitchinterval()
    queue.submit(lambda: seen.append(sys.getswitchinterval()))
    assert queue.wait(timeout=30)
    assert seen == [pytest.approx(min(before, COMPILE_SWITCH_INTERVAL), rel=1e-6)]
    assert sys.getswitchinterval() == before
    # a value the program sets while a job runs is left as it is
    try:
        queue.submit(lambda: sys.setswitchinterval(0.01))
        assert queue.wait(timeout=30)
        assert sys.getswitchinterval() == 0.01
    finally:
        sys.setswitchinterval(before)


@compiles
def test_a_graph_is_planned_once_where_its_program_does_not_pay(monkeypatch):
    # the kernels are built from the plans the program's estimate made
    # (planning jit-chain's 457 equations took 6 ms, its kernels 14 ms)
    monkeypatch.setenv(PROGRAM_ENV, "1")
    planned = []

    def plan_kernels(graph):
        planned.append(graph)
        return cpu_fusion.plan_kernels(graph)
    monkeypatch.setattr(tiers, "plan_kernels", plan_kernels)

    def chain(x):
        for k in range(40):
            x = fnp.sin(x) * 1.01 + 0.1 * k
        return fnp.sum(x)
    f = fgrad.jit(fgrad.grad(chain), compile="sync")
    x = np.linspace(0.0, 1.0, 16)
    got = f(x)
    (info,) = f.compile_info()
    assert info.tier == "kernels" and "program" not in info.seconds
    assert len(planned) == 1
    np.testing.assert_allclose(got, fgrad.grad(chain)(x), rtol=1e-12)
