"""A dead temporary's buffer takes a binary operator's result under grad.

Reusing must never change a value: every function below is differentiated
with reuse on and off, and the two must agree bit for bit, values included.
The conftest makes every array large enough to reuse (PRUNE_MIN_BYTES = 0).
"""
import operator
import sys
import sysconfig
import threading
import tracemalloc

import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.interpreters.reverse import ReverseTrace

# where reference counts tell a temporary from a variable (fgrad.numpy._temporaries)
COUNTS_TELL = (3, 11) <= sys.version_info < (3, 14) \
    and not sysconfig.get_config_var("Py_GIL_DISABLED")


def held_then_read(x):
    a = fnp.sin(x) * 2.0            # held by a variable: its buffer is not free
    b = a + 1.0
    return fnp.sum(a * b + a)


def temporaries_only(x):
    return fnp.sum(fnp.sin(x) * fnp.exp(-(x * x) / 4.0) + x ** 2)


def same_temporary_twice(x):
    t = fnp.tanh(x)
    return fnp.sum((t * 3.0) + (t * 3.0) * t - t / 2.0)


def through_c_code(x):
    # operator.add is C code calling the tracer's method: not the interpreter
    return fnp.sum(operator.add(fnp.sin(x) * 2.0, x) * x)


def reads_its_operand(x, y):
    # the product's VJP reads the temporary (d/dy (t * y) = t): it is kept
    return fnp.sum((fnp.cos(x) + 1.0) * y)


def in_a_list(x):
    parts = [fnp.sin(x) * 2.0 for _ in range(3)]
    total = parts[0] + parts[1]
    return fnp.sum(total * parts[0] + parts[2])


def broadcasting_both_ways(x):
    m = np.linspace(0.0, 1.0, 3 * x.size).reshape(3, x.size)
    # (n,) times (3, n) makes a new array; (3, n) plus (n,) may reuse the left
    return fnp.sum((fnp.sin(x) * 2.0) * m + (fnp.cos(x) + m[0]))


def value_and_grad_with(monkeypatch, fun, reuse, *args):
    with monkeypatch.context() as patch:
        patch.setattr(ReverseTrace, "reuse_temporaries", reuse)
        return fgrad.value_and_grad(fun, argnums=tuple(range(len(args))))(*args)


@pytest.mark.parametrize("fun", [held_then_read, temporaries_only, same_temporary_twice,
                                 through_c_code, in_a_list, broadcasting_both_ways])
def test_reuse_changes_no_value(monkeypatch, fun):
    x = np.random.default_rng(0).standard_normal(257)
    value, (g,) = value_and_grad_with(monkeypatch, fun, True, x)
    value_plain, (g_plain,) = value_and_grad_with(monkeypatch, fun, False, x)
    np.testing.assert_array_equal(value, value_plain)
    np.testing.assert_array_equal(g, g_plain)


def test_reuse_keeps_what_the_rule_reads(monkeypatch):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(64), rng.standard_normal(64)
    _, (gx, gy) = value_and_grad_with(monkeypatch, reads_its_operand, True, x, y)
    np.testing.assert_allclose(gy, np.cos(x) + 1.0)
    np.testing.assert_allclose(gx, -np.sin(x) * y)


def test_inputs_are_never_written():
    x = np.random.default_rng(2).standard_normal(100)
    before = x.copy()
    fgrad.grad(lambda v: fnp.sum((v + 1.0) * v))(x)
    fgrad.grad(lambda v: fnp.sum(v * 2.0 + v))(x)
    np.testing.assert_array_equal(x, before)


def test_jvp_of_grad_and_nested_grad_agree_with_reuse_off(monkeypatch):
    x = np.random.default_rng(3).standard_normal(40)
    v = np.ones_like(x)

    def second_order(u):
        return fnp.sum(fgrad.grad(temporaries_only)(u) * 2.0)
    results = []
    for reuse in (True, False):
        monkeypatch.setattr(ReverseTrace, "reuse_temporaries", reuse)
        results.append((fgrad.jvp(fgrad.grad(temporaries_only), (x,), (v,))[1],
                        fgrad.grad(second_order)(x)))
    (hvp, second), (hvp_off, second_off) = results
    np.testing.assert_array_equal(hvp, hvp_off)
    np.testing.assert_array_equal(second, second_off)


@pytest.mark.skipif(not COUNTS_TELL, reason="this interpreter lends references")
def test_forward_peak_is_numpys():
    """The benchmarks' elementwise row: the forward pass holds sin(x) for the
    product's VJP (the exponential is recomputed in the sweep), the product
    and x**2; the sum takes the product's buffer, so the peak is three
    arrays, one fewer than by hand (tests/test_sweep_memory.py has more)."""
    x = np.random.default_rng(4).standard_normal(200_000)   # compiled sweep: >= 1 MB
    g = fgrad.grad(temporaries_only)
    g(x)
    tracemalloc.start()
    try:
        g(x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3.3 * x.nbytes, peak / x.nbytes



def test_eight_threads_get_one_threads_gradients_bit_for_bit():
    """Reused buffers, compiled sweeps and the trace stack under 8 threads at
    once: every thread's gradients equal the ones computed alone."""
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal(2000) for _ in range(8)]

    def chain(x):
        for _ in range(20):
            x = fnp.tanh(x * 1.01 + 0.1)
        return fnp.sum(x)
    funs = [fgrad.grad(temporaries_only), fgrad.grad(chain), fgrad.grad(held_then_read)]
    alone = [[g(x) for g in funs] for x in inputs]
    together = [None] * 8
    barrier = threading.Barrier(8)

    def work(i):
        barrier.wait()
        for _ in range(20):                 # many interleavings
            together[i] = [g(inputs[i]) for g in funs]
    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(together, alone):
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
