"""The compiled reverse sweep of large eager gradients (fgrad.interpreters.compiled_sweep)."""
import concurrent.futures
import re
import threading

import numpy as np
import pytest
from hypothesis import given, strategies as st

import fgrad
import fgrad.numpy as fnp
from fgrad.compiler import cpu_fusion, tiers
from fgrad.interpreters import compiled_sweep
from fgrad.testing.strategies import in_axes_for
from primitive_specs import SPECS
from sweeps import examples, sweep


@pytest.fixture
def every_size(monkeypatch):
    """Compile the sweep of every gradient, whatever its size."""
    monkeypatch.setattr(compiled_sweep, "MIN_BYTES", 0)


def _sweep_cache(grad_fn):
    value_and_grad_f = next(c.cell_contents for c in grad_fn.__closure__
                            if callable(c.cell_contents))
    return next(c.cell_contents for c in value_and_grad_f.__closure__
                if isinstance(c.cell_contents, dict))


@pytest.mark.parametrize("name, count", sweep(SPECS))
def test_compiled_sweep_equals_the_eager_sweep(name, count, every_size, monkeypatch):

    @examples(count)
    @given(SPECS[name])
    def check(case):
        if not case.order:
            return

        def scalar(*xs):
            return fnp.sum(fnp.real(case.fun(*xs)) * 1.5)
        argnums = tuple(range(len(case.args)))
        compiled = fgrad.grad(scalar, argnums)
        got = compiled(*case.args)
        again = compiled(*case.args)                  # from the cache
        monkeypatch.setattr(compiled_sweep, "MIN_BYTES", 1 << 62)
        try:
            want = fgrad.grad(scalar, argnums)(*case.args)
        finally:
            monkeypatch.setattr(compiled_sweep, "MIN_BYTES", 0)
        for g, a, w in zip(got, again, want):
            assert np.shape(g) == np.shape(w) and np.result_type(g) == np.result_type(w)
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
            np.testing.assert_array_equal(a, g)
        assert len(_sweep_cache(compiled)) <= 1        # staged once
    check()


def test_the_sweep_is_staged_once_and_seeded_with_a_folded_one(every_size):
    def f(x):
        return fnp.sum(fnp.sin(x) * fnp.exp(-(x * x) / 4.0) + x ** 2)
    g = fgrad.grad(f)
    x = np.linspace(-2, 2, 7)
    want = (np.cos(x) - 0.5 * x * np.sin(x)) * np.exp(-x * x / 4) + 2 * x
    np.testing.assert_allclose(g(x), want, rtol=1e-13)
    np.testing.assert_allclose(g(x + 1), fgrad.grad(f)(x + 1), rtol=1e-13)
    (entry,) = _sweep_cache(g).values()
    compiled, reached, out_batched, _ = entry
    assert reached == (True,) and out_batched is None
    # x is recorded by four equations and is one input, sin(x) is the other;
    # exp(-(x * x) / 4) is recomputed from x; the seed is no input
    assert len(compiled.graph.invars) == 2
    # the seed folded into d(x ** 2) = 2 * x: one multiplication by a constant
    assert re.search(r"multiply_\d+\(c\d+, a0\)", compiled.source)


def test_a_gradient_that_is_a_recorded_array_is_a_copy(every_size):
    x, y = np.linspace(0, 1, 4), np.linspace(1, 2, 4)
    gx = fgrad.grad(lambda x, y: fnp.sum(x * y))(x, y)
    np.testing.assert_array_equal(gx, y)
    assert gx is not y and not np.shares_memory(gx, y)
    gx[0] = 100.0
    assert y[0] == 1.0


def test_what_cannot_be_staged_is_swept_eagerly(every_size):
    @fgrad.custom_vjp
    def clip_gradient(x):
        return x

    def fwd(x):
        return x, None

    def bwd(_, ct):
        return (fnp.clip(ct, -1.0, 1.0),)
    clip_gradient.defvjp(fwd, bwd)
    g = fgrad.grad(lambda x: fnp.sum(clip_gradient(x) * 5.0))
    np.testing.assert_array_equal(g(np.ones(3)), np.ones(3))
    assert not _sweep_cache(g)                 # a one-off rule: never staged


def test_a_small_gradient_is_compiled_when_its_structure_comes_back():
    g = fgrad.grad(lambda x: fnp.sum(fnp.sin(x) * x))
    x = np.linspace(0, 1, 10)
    want = np.sin(x) + x * np.cos(x)
    np.testing.assert_allclose(g(x), want, rtol=1e-13)
    assert not _sweep_cache(g)                 # a first call is not even looked up
    np.testing.assert_allclose(g(x), want, rtol=1e-13)
    assert list(_sweep_cache(g).values()) == [compiled_sweep.SEEN_ONCE]
    for _ in range(2):
        np.testing.assert_allclose(g(x), want, rtol=1e-13)
        (entry,) = _sweep_cache(g).values()
        assert type(entry) is tuple            # compiled
    big = np.linspace(0, 1, compiled_sweep.MIN_BYTES // 8)
    np.testing.assert_allclose(g(big), np.sin(big) + big * np.cos(big), rtol=1e-13)
    assert len(_sweep_cache(g)) == 2           # a large one: compiled at once
    assert all(type(e) is tuple for e in _sweep_cache(g).values())


def test_a_large_sweep_that_comes_back_is_recompiled_with_fused_kernels():
    if not cpu_fusion.enabled():
        pytest.skip("CPU fusion is off (FGRAD_JIT_FUSE=0)")
    g = fgrad.grad(lambda x: fnp.sum(fnp.sin(x) * 3.0))
    x = np.linspace(-2, 2, compiled_sweep.FUSED_MIN_BYTES // 8)
    first = g(x)
    (entry,) = _sweep_cache(g).values()
    assert not entry[3] and "cpu_fused" not in entry[0].source   # NumPy calls at first
    second = g(x)
    (entry,) = _sweep_cache(g).values()
    assert entry[3] and "cpu_fused" in entry[0].source          # one kernel: 3 cos(x)
    np.testing.assert_array_equal(first, 3.0 * np.cos(x))
    np.testing.assert_allclose(second, first, rtol=1e-14, atol=0)
    np.testing.assert_array_equal(g(x), second)                  # and kept


def test_the_fused_sweep_is_built_on_the_compile_thread_while_calls_go_on(monkeypatch):
    if not cpu_fusion.enabled():
        pytest.skip("CPU fusion is off (FGRAD_JIT_FUSE=0)")
    monkeypatch.setenv(tiers.COMPILE_ENV, "background")
    g = fgrad.grad(lambda x: fnp.sum(fnp.exp(x) * 2.0))
    x = np.linspace(-2, 2, compiled_sweep.FUSED_MIN_BYTES // 8)
    first = g(x)
    building = threading.Event()
    release = threading.Event()
    # the compile thread is held until the second call has returned
    assert tiers.in_background(lambda: (building.set(), release.wait(60)))
    second = g(x)                                # asks for the fused sweep, runs unfused
    (entry,) = _sweep_cache(g).values()
    assert entry[3] and "cpu_fused" not in entry[0].source
    np.testing.assert_array_equal(second, first)
    release.set()
    assert tiers.wait_all(120)
    (entry,) = _sweep_cache(g).values()
    assert "cpu_fused" in entry[0].source        # swapped in once built
    np.testing.assert_allclose(g(x), first, rtol=1e-14, atol=0)


def test_compile_never_keeps_the_unfused_sweep(monkeypatch):
    monkeypatch.setenv(tiers.COMPILE_ENV, "never")
    g = fgrad.grad(lambda x: fnp.sum(fnp.exp(x) * 2.0))
    x = np.linspace(-2, 2, compiled_sweep.FUSED_MIN_BYTES // 8)
    g(x), g(x), g(x)
    (entry,) = _sweep_cache(g).values()
    assert "cpu_fused" not in entry[0].source


def test_taps_run_in_the_compiled_sweep(every_size):
    seen = []

    def f(x):
        return fnp.sum(fgrad.tap(fnp.sin(x), lambda ct: seen.append(ct) or ct * 2))
    x = np.linspace(0, 1, 5)
    np.testing.assert_allclose(fgrad.grad(f)(x), 2 * np.cos(x))
    assert len(seen) == 1 and np.allclose(seen[0], 1.0)


def test_threads_share_a_grad_function(every_size):
    # each call records its own graph; the compiled sweeps are shared safely
    g = fgrad.grad(lambda x: fnp.sum(fnp.sin(x) * x))
    xs = [np.linspace(0, 1, n) for n in range(3, 19)]      # 16 structures > cache
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(g, xs * 4))
    for x, r in zip(xs * 4, results):
        np.testing.assert_allclose(r, np.sin(x) + x * np.cos(x), rtol=1e-13)
    # bounded: racing threads may each add one before the oldest is dropped
    assert len(_sweep_cache(g)) <= compiled_sweep.CACHE_SIZE + 3


# -- per-example gradients: vmap(grad(f)) ----------------------------------------------


def _batch(args, axes, n):
    """``n`` examples of ``args`` (scaled copies) stacked along ``axes``."""
    return tuple(a if ax is None else
                 np.stack([a * (1 + 0.1 * k) for k in range(n)], axis=ax % (np.ndim(a) + 1))
                 for a, ax in zip(args, axes))


@pytest.mark.parametrize("name, count", sweep(SPECS, quick=1))
def test_batched_compiled_sweep_equals_the_eager_sweep(name, count):
    """From its second call, vmap(grad(f)) sweeps the batch with one compiled
    graph (the per-example sweep staged, then batched); it must give what the
    first call's sweep through the batching interpreter gave."""
    @examples(count, full=4)
    @given(SPECS[name].flatmap(lambda case: st.tuples(st.just(case),
                                                      in_axes_for(case.args))))
    def check(drawn):
        case, (n, axes) = drawn
        if not case.order:
            return

        def scalar(*xs):
            return fnp.sum(fnp.real(case.fun(*xs)) * 1.5)
        argnums = tuple(range(len(case.args)))
        bargs = _batch(case.args, axes, n)
        per_example = fgrad.grad(scalar, argnums)
        batched = fgrad.vmap(per_example, in_axes=axes)
        want = batched(*bargs)                         # eager: the first call
        got = batched(*bargs)                          # compiled
        again = batched(*bargs)
        for g, a, w in zip(got, again, want):
            assert np.shape(g) == np.shape(w) and np.result_type(g) == np.result_type(w)
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
            # the same code again, but not always bitwise: a reduction into a
            # reused buffer may start at another alignment, and NumPy's SIMD
            # sums round by alignment (arctan2's sum of -7.5 came back 1 ulp off)
            np.testing.assert_allclose(a, g, rtol=1e-15, atol=1e-14)
    check()


def test_per_example_gradients_run_one_batched_compiled_sweep():
    def loss(w, x, y):
        z = x @ w
        return fnp.log1p(fnp.exp(z)) - y * z
    per_example = fgrad.grad(loss)
    rng = np.random.default_rng(0)
    w, x = rng.standard_normal(5), rng.standard_normal((7, 5))
    y = (rng.random(7) > 0.5).astype(float)
    want = (1 / (1 + np.exp(-(x @ w))) - y)[:, None] * x
    batched = fgrad.vmap(per_example, in_axes=(None, 0, 0))
    for _ in range(3):
        np.testing.assert_allclose(batched(w, x, y), want, rtol=1e-13)
    (entry,) = _sweep_cache(per_example).values()
    compiled, reached, out_batched, _ = entry
    assert reached == (True,) and out_batched == (True,)
    # the residuals are inputs of the batched graph, which has the batch axis
    assert any(v.aval.shape[:1] == (7,) for v in compiled.graph.invars)
    # the same grad function outside vmap keeps a sweep of its own
    np.testing.assert_allclose(per_example(w, x[0], y[0]), want[0], rtol=1e-13)


def test_a_batched_gradient_with_the_batch_axis_last_and_a_closure():
    xs = np.linspace(0.1, 1.2, 12).reshape(3, 4)
    scale = np.array([1.0, 2.0, 3.0])

    def outer(s):
        # grad of a function closing over a batched value of vmap
        return fgrad.vmap(lambda x: fgrad.grad(lambda x: fnp.sum(fnp.sin(x) * s))(x),
                          in_axes=1)(xs)
    per_s = fgrad.vmap(outer, in_axes=0, out_axes=0)
    want = np.stack([np.cos(xs).T * s for s in scale])
    for _ in range(3):
        np.testing.assert_allclose(per_s(scale), want, rtol=1e-13)


def test_nested_vmaps_of_grad_sweep_eagerly_and_stay_right():
    g = fgrad.grad(lambda x: fnp.sum(fnp.tanh(x) ** 2))
    xs = np.linspace(-1, 1, 24).reshape(2, 3, 4)
    twice = fgrad.vmap(fgrad.vmap(g))
    want = 2 * np.tanh(xs) * (1 - np.tanh(xs) ** 2)
    for _ in range(3):
        np.testing.assert_allclose(twice(xs), want, rtol=1e-13)
    assert all(e is not compiled_sweep.NOT_STAGEABLE and type(e) is not tuple
               for e in _sweep_cache(g).values())      # never compiled
