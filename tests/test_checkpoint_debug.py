"""fgrad.checkpoint (recompute instead of store) and fgrad.debug.print."""
import gc
import tracemalloc

import numpy as np

import fgrad
import fgrad.numpy as fnp


def _layer(x):
    return fnp.tanh(fnp.sin(x) * 1.1 + 0.1) * 0.9 + fnp.exp(-x * x) * 0.05


def _chain(layer):
    def f(x):
        for _ in range(100):
            x = layer(x)
        return fnp.sum(x)
    return f


def _peak(fn):
    fn()
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, result


def test_checkpoint_lowers_peak_memory_of_grad_and_keeps_results():
    x = np.linspace(-1, 1, 20_000)
    plain = fgrad.grad(_chain(_layer))
    checkpointed = fgrad.grad(_chain(fgrad.checkpoint(_layer)))
    peak_plain, g_plain = _peak(lambda: plain(x))
    peak_ckpt, g_ckpt = _peak(lambda: checkpointed(x))
    np.testing.assert_allclose(g_ckpt, g_plain, rtol=1e-12)
    # stored per layer: ~8 intermediates without, input and output with
    assert peak_ckpt < 0.5 * peak_plain


def test_checkpoint_composes_with_jvp_jit_and_second_order():
    layer = fgrad.checkpoint(_layer)
    x = np.linspace(-1, 1, 5)
    np.testing.assert_allclose(fgrad.jvp(layer, (x,), (np.ones(5),))[1],
                               fgrad.jvp(_layer, (x,), (np.ones(5),))[1])
    f = lambda x: fnp.sum(layer(layer(x)))           # noqa: E731
    g = lambda x: fnp.sum(_layer(_layer(x)))         # noqa: E731
    np.testing.assert_allclose(fgrad.jit(fgrad.grad(f))(x), fgrad.grad(g)(x))
    np.testing.assert_allclose(fgrad.hessian(f)(x), fgrad.hessian(g)(x), atol=1e-12)


def test_debug_print_shows_real_values_under_jit_grad_and_jvp(capsys):
    def f(x):
        fgrad.debug.print("x = {} total = {total}", x, total=fnp.sum(x))
        return fnp.sum(x * x)
    x = np.array([1.0, 2.0])
    fgrad.jit(f)(x)
    fgrad.jit(f)(x + 1)                          # cached: prints again, new values
    fgrad.grad(f)(x)
    fgrad.jit(fgrad.grad(f))(x)
    fgrad.jvp(f, (x,), (x,))
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["x = [1. 2.] total = 3.0", "x = [2. 3.] total = 5.0"] + [
        "x = [1. 2.] total = 3.0"] * 3


def test_debug_print_survives_dead_code_elimination_and_cse(capsys):
    def f(x):
        fgrad.debug.print("{}", x)
        fgrad.debug.print("{}", x)
        return x * 2.0
    lowered = fgrad.jit(f).lower(np.ones(1))
    assert lowered.source.count("debug_print") == 2
