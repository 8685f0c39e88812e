"""fgrad.checkpoint (recompute instead of store) and fgrad.debug.print."""
import gc
import tracemalloc

import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad import lax
from fgrad.compiler import native
from fgrad.compiler.codegen import generate
from fgrad.compiler.program import compile_program
from fgrad.transforms.jit import optimized_graph


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


def _program_and_interpreted_peaks(fun, x):
    """The peaks of ``fun``'s optimized graph's compiled program (arena
    counted in) and of its interpreted code, and their results."""
    graph = optimized_graph(fgrad.make_graph(fun)(x))
    program = compile_program(graph)
    peak, got = _peak(lambda: program.call(x))
    interpreted, want = _peak(lambda: generate(graph, np).fn(x))
    return peak + program.plan.arena_bytes, interpreted, got, want


@pytest.mark.skipif(not native.available(), reason="llvmlite missing")
def test_checkpoint_of_a_loop_body_lowers_peak_memory_under_jit():
    # the recomputation reads its inputs through a barrier that also reads
    # the cotangents: it runs in the backward loop; without it, it ran in the
    # forward loop, whose residuals (every layer's values) were kept as if
    # unchecked: 221 input sizes as a program, with or without the checkpoint
    def loop(layer):
        return fgrad.grad(lambda x: fnp.sum(lax.fori_loop(0, 8, lambda i, y: layer(y), x)))

    def layers(x):
        for _ in range(6):
            x = _layer(x)
        return x
    x = np.linspace(-1, 1, 50_000)
    plain = _program_and_interpreted_peaks(loop(layers), x)
    checkpointed = _program_and_interpreted_peaks(loop(fgrad.checkpoint(layers)), x)
    assert checkpointed[0] < 0.25 * plain[0] and checkpointed[1] < 0.25 * plain[1]
    for got in (checkpointed[2][0], checkpointed[3][0], plain[3][0]):
        np.testing.assert_allclose(got, plain[2][0], rtol=1e-12)


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
