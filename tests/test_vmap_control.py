"""vmap of staged calls and structured control flow (jit, checkpoint, cond,
switch, while_loop, fori_loop, scan, debug.print), each against a Python loop
over examples, eagerly, under jit and around jit."""
import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad import lax
from fgrad.interpreters.batching import batch_graph

RNG = np.random.default_rng(7)
XS = np.array([-1.5, -0.2, 0.4, 2.0])
MS = RNG.standard_normal((4, 3))


def _take(x, k, axis):
    return x if axis is None else np.take(x, k, axis=axis)


def _loop(f, in_axes, args):
    """What vmap must equal: ``f`` on each example, results stacked on axis 0."""
    n = next(np.shape(a)[ax] for a, ax in zip(args, in_axes) if ax is not None)
    outs = [f(*[_take(a, k, ax) for a, ax in zip(args, in_axes)]) for k in range(n)]
    leaves = [fgrad.tree.tree_flatten(o)[0] for o in outs]
    tree = fgrad.tree.tree_flatten(outs[0])[1]
    return fgrad.tree.tree_unflatten(
        tree, [np.stack([np.asarray(col[j]) for col in leaves]) for j in range(len(leaves[0]))])


def _variants(f, in_axes):
    """vmap(f) eagerly, jit(vmap(f)) and vmap(jit(f))."""
    return {"vmap": fgrad.vmap(f, in_axes),
            "jit(vmap)": fgrad.jit(fgrad.vmap(f, in_axes)),
            "vmap(jit)": fgrad.vmap(fgrad.jit(f), in_axes)}


def _check_all(f, in_axes, *args, rtol=1e-12):
    want = _loop(f, in_axes, args)
    for name, g in _variants(f, in_axes).items():
        got = g(*args)
        for a, b in zip(fgrad.tree.tree_flatten(got)[0], fgrad.tree.tree_flatten(want)[0]):
            assert np.shape(a) == np.shape(b), name
            np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-12, err_msg=name)


def _eqn_names(f, *args):
    return [e.prim.name for e in fgrad.make_graph(f)(*args).eqns]


# ---------------------------------------------------------------------------
# jit and checkpoint
# ---------------------------------------------------------------------------


def test_vmap_of_jit_matches_a_loop_with_shared_and_mapped_arguments():
    def f(x, w, s):
        return fnp.tanh(x @ w) * s, fnp.sum(w)        # the second output is shared
    w = RNG.standard_normal((3, 2))
    for in_axes, args in [((0, None, None), (MS, w, 2.0)),
                          ((1, None, None), (MS.T, w, 2.0)),
                          ((None, 2, None), (MS[0], np.stack([w] * 3, 2), 2.0)),
                          ((0, 0, None), (MS[:2], np.stack([w, 2 * w]), 0.5))]:
        _check_all(f, in_axes, *args)


def test_vmap_of_jit_stays_one_call_and_batches_its_graph_once():
    f = fgrad.jit(lambda x: fnp.sin(x) * 2.0 + fnp.sum(x))
    vf = fgrad.vmap(f)
    graph = fgrad.make_graph(vf)(MS)
    assert [e.prim.name for e in graph.eqns] == ["jit_call"]
    want = _loop(f, (0,), (MS,))
    vf(MS)
    before, traces = batch_graph.cache_info(), f.cache_info().traces
    np.testing.assert_allclose(vf(MS), want)
    after = batch_graph.cache_info()
    assert after.misses == before.misses and after.hits > before.hits
    assert f.cache_info().traces == traces


def test_nested_vmap_of_jit():
    f = fgrad.jit(lambda x, y: fnp.exp(x) * y)
    x = RNG.standard_normal((2, 3, 4))
    y = RNG.standard_normal(4)
    got = fgrad.vmap(fgrad.vmap(f, (0, None)), (1, None))(x, y)
    np.testing.assert_allclose(got, np.exp(x).transpose(1, 0, 2) * y)


def test_per_example_gradients_through_jit():
    def loss(w, x):
        return fnp.sum(fnp.tanh(x * w) ** 2)
    w = np.array([0.3, -0.7, 1.1])
    want = _loop(fgrad.grad(loss), (None, 0), (w, MS))
    for g in (fgrad.vmap(fgrad.grad(fgrad.jit(loss)), (None, 0)),
              fgrad.jit(fgrad.vmap(fgrad.grad(loss), (None, 0))),
              fgrad.vmap(fgrad.jit(fgrad.grad(loss)), (None, 0))):
        np.testing.assert_allclose(g(w, MS), want, rtol=1e-12)


def test_grad_of_vmap_of_checkpoint_keeps_the_checkpoint():
    layer = fgrad.checkpoint(lambda x, w: fnp.sin(x * w) * w)
    w = np.array([0.5, 1.5, -1.0])

    def total(w):
        return fnp.sum(fgrad.vmap(layer, (0, None))(MS, w) ** 2)

    def looped(w):
        return sum(fnp.sum(layer(x, w) ** 2) for x in MS)
    np.testing.assert_allclose(fgrad.grad(total)(w), fgrad.grad(looped)(w), rtol=1e-12)
    assert "checkpoint" in _eqn_names(fgrad.vmap(layer, (0, None)), MS, w)


# ---------------------------------------------------------------------------
# cond and switch
# ---------------------------------------------------------------------------


def test_cond_with_a_batched_predicate_selects_per_example():
    def f(x):
        return lax.cond(x > 0, lambda v: fnp.sin(v) * 3.0, fnp.cos, x)
    _check_all(f, (0,), XS)
    names = _eqn_names(fgrad.vmap(f), XS)
    assert "cond" not in names and "where" in names


def test_cond_with_a_shared_predicate_stays_a_cond_over_batched_branches():
    def f(flag, x):
        # one branch returns a shared constant: the result is batched anyway
        return lax.cond(flag > 0, lambda v: v * 2.0, lambda v: fnp.ones(3), x)
    for flag in (1.0, -1.0):
        _check_all(f, (None, 0), flag, MS)
    assert "cond" in _eqn_names(fgrad.vmap(f, (None, 0)), 1.0, MS)


def test_cond_with_a_batched_predicate_and_shared_operands():
    w = np.array([1.0, 2.0, 3.0])

    def f(x, w):
        return lax.cond(fnp.sum(x) > 0, lambda w: w * 2.0, lambda w: -w, w)
    _check_all(f, (0, None), MS, w)


def test_switch_with_a_batched_index_clamps_like_switch():
    branches = [lambda v: v + 1.0, lambda v: v * 10.0, lambda v: -v]
    f = lambda i, x: lax.switch(i, branches, x)      # noqa: E731
    idx = np.array([-3, 0, 1, 2, 7])
    xs = np.arange(5.0) + 0.5
    _check_all(f, (0, 0), idx, xs)
    _check_all(f, (0, None), idx, 2.0)
    _check_all(f, (None, 0), 1, xs)


def test_per_example_gradient_of_a_cond():
    def f(x):
        return lax.cond(x > 0, lambda v: v ** 3, lambda v: fnp.sin(v), x)
    want = _loop(fgrad.grad(f), (0,), (XS,))
    for g in (fgrad.vmap(fgrad.grad(f)), fgrad.jit(fgrad.vmap(fgrad.grad(f))),
              fgrad.vmap(fgrad.grad(fgrad.jit(f)))):
        np.testing.assert_allclose(g(XS), want, rtol=1e-12)
    np.testing.assert_allclose(fgrad.grad(lambda x: fnp.sum(fgrad.vmap(f)(x)))(XS), want,
                               rtol=1e-12)


# ---------------------------------------------------------------------------
# while_loop and fori_loop
# ---------------------------------------------------------------------------


def test_while_loop_with_a_batched_predicate_stops_each_example_on_time():
    def f(x):
        return lax.while_loop(lambda v: v[0] < 10.0, lambda v: (v[0] * 2.0, v[1] + 1),
                              (x, 0))
    _check_all(f, (0,), np.array([0.5, 3.0, 9.0, 20.0]))
    names = _eqn_names(fgrad.vmap(f), np.array([0.5, 3.0]))
    assert names.count("while_loop") == 1


def test_while_loop_with_a_shared_predicate_and_a_batched_carry():
    def f(n, x):
        def body(state):
            i, v = state
            return i + 1, fnp.sin(v) + v
        return lax.while_loop(lambda s: s[0] < n, body, (0, x))[1]
    _check_all(f, (None, 0), 3, MS)


def test_while_loop_carry_becomes_batched_through_a_shared_value():
    # the loop counter is shared; the accumulator starts shared but the body
    # adds a batched value, so it must be batched from the first step
    def f(x):
        return lax.fori_loop(0, 3, lambda i, acc: acc * 0.5 + x, 1.0)
    _check_all(f, (0,), XS)

    def g(n, x):
        return lax.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, s[1] * 0.5 + x),
                              (0, 1.0))[1]
    _check_all(g, (None, 0), 4, XS)


def test_fori_loop_with_batched_bounds():
    def f(n, x):
        return lax.fori_loop(0, n, lambda i, v: v * 2.0 + i, x)
    _check_all(f, (0, 0), np.array([0, 1, 3, 5]), XS)
    _check_all(f, (0, None), np.array([0, 2, 4]), 1.0)


def test_forward_derivative_of_a_batched_while_loop():
    def f(x):
        return lax.while_loop(lambda v: v < 10.0, lambda v: v * v + 1.0, x)

    def tangent(x):
        return fgrad.jvp(f, (x,), (1.0,))[1]
    xs = np.array([0.5, 1.5, 2.5, 12.0])
    want = _loop(tangent, (0,), (xs,))
    np.testing.assert_allclose(fgrad.vmap(tangent)(xs), want, rtol=1e-12)
    np.testing.assert_allclose(fgrad.jit(fgrad.vmap(tangent))(xs), want, rtol=1e-12)


# ---------------------------------------------------------------------------
# scan
# ---------------------------------------------------------------------------


def _rnn(h0, xs, w):
    def step(h, x):
        h = fnp.tanh(h * w + x)
        return h, h * 2.0
    return lax.scan(step, h0, xs)


@pytest.mark.parametrize("in_axes", [(0, 0, None), (None, 0, None), (0, None, None),
                                     (None, None, 0), (0, 2, None), (None, 1, 0)])
def test_scan_matches_a_loop_for_every_batched_operand(in_axes):
    n, t, d = 3, 4, 2
    h0 = RNG.standard_normal(d)
    xs = RNG.standard_normal((t, d))
    w = RNG.standard_normal(d)
    base = {0: h0, 1: xs, 2: w}
    args = []
    for i, ax in enumerate(in_axes):
        a = base[i]
        args.append(a if ax is None else
                    np.stack([a * (1 + 0.3 * k) for k in range(n)], axis=ax))
    _check_all(_rnn, in_axes, *args)
    assert _eqn_names(fgrad.vmap(_rnn, in_axes), *args).count("scan") == 1


def test_reverse_scan_with_a_carry_batched_only_through_the_body():
    def f(xs):
        return lax.scan(lambda c, x: (c + x * c, c), 1.0, xs, reverse=True)
    _check_all(f, (1,), RNG.standard_normal((4, 3)) * 0.5)


def test_gradients_through_a_batched_scan():
    w = np.array([0.4, -0.3])
    h0 = np.zeros(2)
    xs = RNG.standard_normal((3, 5, 2))       # 3 examples of 5 steps

    def loss(w, x):
        h, ys = _rnn(h0, x, w)
        return fnp.sum(h ** 2) + fnp.sum(ys)

    def batched_total(w):
        return fnp.sum(fgrad.vmap(loss, (None, 0))(w, xs))

    def looped_total(w):
        return sum(loss(w, x) for x in xs)
    want = fgrad.grad(looped_total)(w)
    np.testing.assert_allclose(fgrad.jit(fgrad.grad(batched_total))(w), want, rtol=1e-10)
    np.testing.assert_allclose(fgrad.grad(fgrad.jit(batched_total))(w), want, rtol=1e-10)
    per_example = _loop(fgrad.grad(loss), (None, 0), (w, xs))
    for g in (fgrad.vmap(fgrad.grad(fgrad.jit(loss)), (None, 0)),
              fgrad.jit(fgrad.vmap(fgrad.grad(loss), (None, 0)))):
        np.testing.assert_allclose(g(w, xs), per_example, rtol=1e-10)


# ---------------------------------------------------------------------------
# debug.print
# ---------------------------------------------------------------------------


def test_debug_print_under_vmap_prints_the_batch_once(capsys):
    def f(x, s):
        fgrad.debug.print("x={} s={}", x, s)
        return x * s
    x = np.arange(4.0).reshape(2, 2)
    for g in (fgrad.vmap(f, (1, None)), fgrad.jit(fgrad.vmap(f, (1, None))),
              fgrad.vmap(fgrad.jit(f), (1, None))):
        np.testing.assert_allclose(g(x, 3.0), x.T * 3.0)
        assert capsys.readouterr().out == f"x={x.T} s=3.0\n"


def test_traced_values_support_mod_and_floordiv():
    def f(x):
        return x % 3.0 + x // 2.0 + 7.0 % x + 7.0 // x
    x = np.array([1.5, 4.0, 5.5])
    np.testing.assert_allclose(fgrad.jit(f)(x), f(x))
    np.testing.assert_allclose(fgrad.vmap(f)(x), f(x))
    np.testing.assert_allclose(fgrad.grad(lambda x: fnp.sum(x % 3.0))(x), np.ones(3))
