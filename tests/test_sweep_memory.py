"""Reverse mode's memory: residuals recomputed instead of kept, and residuals
donated to the compiled sweep (fgrad.interpreters.reverse.Recompute,
fgrad.interpreters.compiled_sweep.donatable).

Neither may change a value: every gradient below is computed with both on and
with both off, and the two must agree bit for bit. Peaks are measured with
tracemalloc on real programs; no timing is asserted.
"""
import tracemalloc

import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.interpreters import compiled_sweep, reverse
from fgrad.interpreters.reverse import ReverseTrace

RNG = np.random.default_rng(0)


def elementwise(x):
    """The benchmarks' elementwise row."""
    return fnp.sum(fnp.sin(x) * fnp.exp(-(x * x) / 4.0) + x ** 2)


def shared_recipe(x, y):
    # e = exp(x * y - 1) is read by exp's own rule and by two products
    e = fnp.exp(x * y - 1.0)
    return fnp.sum(e * fnp.sin(x) + fnp.tanh(y) * e)


def recipe_of_a_recipe_read_later(x):
    a = fnp.square(x) + 1.0          # a recipe, read by the last product
    b = fnp.exp(-a)                  # a recipe of a recipe
    return fnp.sum(fnp.cos(x) * b + a * fnp.sin(x))


def broadcast_with_a_small_constant(x):
    w = np.linspace(0.5, 1.5, x.shape[-1])
    return fnp.sum(fnp.sin(x) * fnp.exp(x * w))


FUNCTIONS = [elementwise, recipe_of_a_recipe_read_later, broadcast_with_a_small_constant]


def _without(monkeypatch):
    """Neither recomputing nor donating: every residual kept until the end."""
    monkeypatch.setattr(ReverseTrace, "recompute_residuals", False)
    monkeypatch.setattr(compiled_sweep, "donatable", lambda *args: ())


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled sweep", "eager sweep"])
@pytest.mark.parametrize("fun", FUNCTIONS)
def test_recomputing_and_donating_change_no_bit(monkeypatch, fun, compiled):
    monkeypatch.setattr(compiled_sweep, "MIN_BYTES", 0 if compiled else 1 << 62)
    x = RNG.standard_normal((3, 700))
    g = fgrad.grad(fun)
    got = [g(x), g(x)]                          # the second reuses the compiled sweep
    with monkeypatch.context() as patch:
        _without(patch)
        want = fgrad.grad(fun)(x)
    for a in got:
        np.testing.assert_array_equal(a, want)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled sweep", "eager sweep"])
def test_a_recipe_shared_by_three_rules(monkeypatch, compiled):
    monkeypatch.setattr(compiled_sweep, "MIN_BYTES", 0 if compiled else 1 << 62)
    x, y = RNG.standard_normal(500), RNG.standard_normal(500)
    got = fgrad.grad(shared_recipe, argnums=(0, 1))(x, y)
    with monkeypatch.context() as patch:
        _without(patch)
        want = fgrad.grad(shared_recipe, argnums=(0, 1))(x, y)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_vjp_called_twice_recomputes_the_same_values():
    x = RNG.standard_normal(300)
    _, vjp_fn = fgrad.vjp(lambda v: fnp.exp(-(v * v)) * fnp.sin(v), x)
    ct = RNG.standard_normal(300)
    first, second = vjp_fn(ct)[0], vjp_fn(ct)[0]
    np.testing.assert_array_equal(first, second)
    want = ct * (np.exp(-x * x) * (np.cos(x) - 2 * x * np.sin(x)))
    np.testing.assert_allclose(first, want, rtol=1e-12, atol=1e-14)


def _peak(fn):
    fn()                                    # compiled sweep made
    fn()                                    # and, for a large one, fused kernels
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_the_elementwise_rows_peak_is_three_arrays(monkeypatch):
    """sin(x) is kept for the product's rule; the exponential is recomputed
    from x, so the forward pass peaks at sin(x), the product and x ** 2; the
    compiled sweep frees sin(x) at its last reader and writes into it. NumPy
    by hand holds four arrays at its peak."""
    x = RNG.standard_normal(200_000)        # >= 1 MB: compiled on the first call
    g = fgrad.grad(elementwise)
    peak = _peak(lambda: g(x))
    assert peak < 3.3 * x.nbytes, peak / x.nbytes
    _without(monkeypatch)
    g_before = fgrad.grad(elementwise)
    assert _peak(lambda: g_before(x)) > 3.9 * x.nbytes      # what it saves


def test_the_sweep_frees_donated_residuals_at_their_last_reader():
    # the forward pass keeps a = sin(x) and b = cos(x), two arrays; the sweep
    # reads each once, early, then makes two more gradients' worth of work
    def f(x):
        return fnp.sum(fnp.sin(x) * fnp.cos(x)) + fnp.sum(fnp.tanh(x))
    x = RNG.standard_normal(200_000)
    g = fgrad.grad(f)
    with_donation = _peak(lambda: g(x))
    compiled_sweep_donatable = compiled_sweep.donatable
    try:
        compiled_sweep.donatable = lambda *args: ()
        without = _peak(lambda: fgrad.grad(f)(x))
    finally:
        compiled_sweep.donatable = compiled_sweep_donatable
    assert with_donation < without, (with_donation / x.nbytes, without / x.nbytes)


def test_inputs_constants_and_values_the_user_holds_are_never_written():
    x = RNG.standard_normal(50_000)
    w = RNG.standard_normal(50_000)         # a large constant the function reads
    x_before, w_before = x.copy(), w.copy()
    held = {}

    def f(v):
        e = fnp.exp(v * w)
        s = fnp.sin(v)
        held["e"], held["s"] = e, s          # the user keeps the tracers' values
        return fnp.sum(s * e + v * v), (e, s)
    (_, (e, s)), g = fgrad.value_and_grad(f, has_aux=True)(x)
    e_before, s_before = e.copy(), s.copy()
    g2 = fgrad.grad(lambda v: f(v)[0])(x)
    np.testing.assert_array_equal(x, x_before)
    np.testing.assert_array_equal(w, w_before)
    np.testing.assert_array_equal(e, e_before)
    np.testing.assert_array_equal(s, s_before)
    want = np.exp(x * w) * (np.cos(x) + w * np.sin(x)) + 2 * x
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(g, g2)


def test_the_residual_report_lists_recomputed_values_as_free(monkeypatch):
    monkeypatch.setattr(reverse, "PRUNE_MIN_BYTES", 8192)
    x = RNG.standard_normal(100_000)
    report = fgrad.residuals(elementwise)(x)
    # sin(x) is the one array kept; the exponential is listed, recomputed, 0 bytes
    assert report.total_bytes == x.nbytes + 8           # and the sum's scalar
    recomputed = [(e.primitive, e.role) for e in report.entries if e.recomputed]
    assert recomputed == [("exp", "ans"), ("multiply", "arg 1")]
    assert all(e.nbytes == 0 and not e.counted for e in report.entries if e.recomputed)
    assert "2 recomputed in the sweep" in str(report)


def test_expensive_and_long_recipes_are_kept(monkeypatch):
    monkeypatch.setattr(reverse, "PRUNE_MIN_BYTES", 8192)
    x = RNG.standard_normal(100_000)

    def long_chain(v):
        u = v
        for _ in range(reverse.MAX_RECOMPUTE_OPS + 1):
            u = u * 1.001
        return fnp.sum(fnp.exp(u) * fnp.sin(v))
    report = fgrad.residuals(long_chain)(x)
    kept = {(e.primitive, e.role): e.nbytes for e in report.entries if e.counted}
    # sin(x) costs several cheap passes: kept; the chain is too long to replay
    assert kept[("exp", "ans")] == x.nbytes
    assert not any(e.recomputed for e in report.entries)
