"""fgrad.lax: eager when concrete, one primitive when staged, derivatives both ways."""
import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad import lax
from fgrad.errors import ConcretizationError, ControlFlowError, LaxArgumentError
from fgrad.testing import check_grads

X = np.linspace(-1.0, 1.0, 4)


def _eq_names(f, *args):
    return [e.prim.name for e in fgrad.make_graph(f)(*args).eqns]


def test_cond_is_one_primitive_under_jit_and_python_outside():
    def f(x):
        return lax.cond(fnp.sum(x) > 0, fnp.sin, fnp.cos, x)
    assert "cond" in _eq_names(f, X)
    for x in (X, X + 1):
        np.testing.assert_allclose(fgrad.jit(f)(x), f(x))
        np.testing.assert_allclose(f(x), np.sin(x) if x.sum() > 0 else np.cos(x))


def test_cond_branches_must_agree():
    def f(x):
        return lax.cond(fnp.sum(x) > 0, lambda x: x, lambda x: x[:2], x)
    with pytest.raises(ControlFlowError, match="branch 1 returns different shapes"):
        fgrad.jit(f)(X)


def test_switch_clamps_the_index():
    branches = [lambda x: x * 1.0, lambda x: x * 2.0, lambda x: x * 3.0]
    f = fgrad.jit(lambda i, x: lax.switch(i, branches, x))
    for i, factor in [(-5, 1.0), (1, 2.0), (9, 3.0)]:
        np.testing.assert_array_equal(f(i, X), X * factor)


def test_cond_closing_over_outer_values_differentiates():
    def f(x, w):
        return fnp.sum(lax.cond(fnp.sum(x) > 0, lambda x: x * w, lambda x: x / w, x))
    w = np.full(4, 2.0)
    for x in (X, X + 1):
        got = fgrad.jit(fgrad.grad(f, (0, 1)))(x, w)
        want = fgrad.grad(f, (0, 1))(x, w)
        for g, e in zip(got, want):
            np.testing.assert_allclose(g, e)


def test_while_loop_eager_is_differentiable_in_both_modes():
    def f(x):
        return fnp.sum(lax.while_loop(lambda v: fnp.sum(v) < 10.0, lambda v: v * 2.0, x))
    x = np.array([1.0, 2.0])                  # 3 -> 6 -> 12: two doublings
    np.testing.assert_allclose(fgrad.grad(f)(x), [4.0, 4.0])
    np.testing.assert_allclose(fgrad.jvp(f, (x,), (np.ones(2),))[1], 8.0)


def test_while_loop_jvp_under_jit():
    def f(x):
        return lax.while_loop(lambda v: fnp.sum(v) < 10.0, lambda v: v * 2.0, x)
    x = np.array([1.0, 2.0])
    out, t = fgrad.jvp(fgrad.jit(f), (x,), (np.ones(2),))
    np.testing.assert_allclose(out, 4 * x)
    np.testing.assert_allclose(t, [4.0, 4.0])
    out, t = fgrad.jit(lambda x, v: fgrad.jvp(f, (x,), (v,)))(x, np.ones(2))
    np.testing.assert_allclose(t, [4.0, 4.0])


def test_while_loop_reverse_mode_under_jit_suggests_scan():
    def f(x):
        return fnp.sum(lax.while_loop(lambda v: fnp.sum(v) < 10.0, lambda v: v * 2.0, x))
    with pytest.raises(ControlFlowError, match="Use fgrad.lax.scan, or fgrad.lax.fori_loop"):
        fgrad.jit(fgrad.grad(f))(np.array([1.0, 2.0]))


def test_while_loop_body_must_keep_the_carry_shape():
    with pytest.raises(ControlFlowError, match="changes the carry"):
        fgrad.jit(lambda x: lax.while_loop(lambda v: fnp.sum(v) < 3.0,
                                           lambda v: fnp.sum(v), x))(X)


def test_fori_loop_with_static_bounds_is_a_scan_and_reverse_differentiable():
    def f(x):
        return fnp.sum(lax.fori_loop(0, 3, lambda i, v: fnp.sin(v) * (i + 1.0), x))
    assert "scan" in _eq_names(f, X)
    np.testing.assert_allclose(fgrad.jit(fgrad.grad(f))(X), fgrad.grad(f)(X))


def test_fori_loop_with_staged_bounds_is_a_while_loop():
    f = fgrad.jit(lambda n, x: lax.fori_loop(0, n, lambda i, v: v + i, x))
    np.testing.assert_allclose(f(4, X), X + 6)
    assert "while_loop" in _eq_names(lambda n, x: lax.fori_loop(0, n, lambda i, v: v + i,
                                                                x), 4, X)


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_matches_a_python_loop_with_derivatives(reverse):
    def f(w, xs):
        def step(h, x):
            h = fnp.tanh(h * w + x)
            return h, fnp.sum(h) * 2.0
        h, ys = lax.scan(step, w, xs, reverse=reverse)
        return fnp.sum(h) + fnp.sum(ys)
    w, xs = np.array([0.5, -0.3]), np.linspace(0, 1, 6).reshape(3, 2)
    np.testing.assert_allclose(fgrad.jit(f)(w, xs), f(w, xs))
    for got, want in zip(fgrad.jit(fgrad.grad(f, (0, 1)))(w, xs),
                         fgrad.grad(f, (0, 1))(w, xs)):
        np.testing.assert_allclose(got, want)
    check_grads(fgrad.jit(f), (w, xs), order=2, modes=("fwd", "rev"))


def test_scan_length_mismatch():
    with pytest.raises(ControlFlowError, match="one length"):
        lax.scan(lambda c, x: (c, x), 0.0, (np.ones(2), np.ones(3)))


def _rnn(w, u, xs):
    def step(h, x):
        return fnp.tanh(h @ w + x @ u), None
    h, _ = lax.scan(step, fnp.zeros((2, 3)), xs)
    return fnp.sum(h)


RNN_ARGS = (np.full((3, 3), 0.1), np.full((4, 3), 0.2), np.linspace(0, 1, 40).reshape(5, 2, 4))


def _scans(f, *args):
    """``{reverse: [body equation names]}`` of the scans in ``f``'s graph."""
    return {e.params["reverse"]: [q.prim.name for q in e.params["body"].eqns]
            for e in fgrad.make_graph(f)(*args).eqns if e.prim.name == "scan"}


@pytest.mark.parametrize("argnums, products", [((0, 1), 3), ((0, 1, 2), 4)])
def test_the_backward_scan_reads_stored_residuals_and_skips_unasked_cotangents(
        argnums, products):
    # the forward scan stores what each backward step reads (here 1 - tanh**2),
    # so the backward steps run no tanh and none of the forward's products:
    # dh @ w.T, h.T @ da and x.T @ da, plus da @ u.T when xs' cotangent is asked
    backward = _scans(fgrad.grad(_rnn, argnums), *RNN_ARGS)[True]
    assert "tanh" not in backward
    assert backward.count("matmul") == products
    unrolled = fgrad.grad(_unrolled_rnn, argnums)(*RNN_ARGS)
    for jitted in (False, True):
        g = fgrad.grad(_rnn, argnums)
        for got, want in zip((fgrad.jit(g) if jitted else g)(*RNN_ARGS), unrolled):
            np.testing.assert_allclose(got, want, rtol=1e-12)


def _unrolled_rnn(w, u, xs):
    h = fnp.zeros((2, 3))
    for t in range(xs.shape[0]):
        h = fnp.tanh(h @ w + xs[t] @ u)
    return fnp.sum(h)


def test_a_scan_with_an_integer_carry_and_a_view_of_its_carry_differentiates():
    # the int counter's cotangent is a zero made from its stored value; the
    # transpose of the carry is recomputed by the backward step, from the stored carry
    def f(w, xs):
        def step(carry, x):
            i, h = carry
            h = fnp.sin(fnp.transpose(h) @ w * (i + 1.0) + x)
            return (i + 1, fnp.transpose(h)), fnp.sum(h * h)
        (_, h), ys = lax.scan(step, (0, fnp.ones((2, 2))), xs)
        return fnp.sum(h) + fnp.sum(ys)
    w, xs = np.array([[0.3, -0.2], [0.1, 0.4]]), np.linspace(-1, 1, 12).reshape(3, 2, 2)
    backward = _scans(fgrad.grad(f), w, xs)[True]
    assert "transpose" in backward and not {"sin", "cos"} & set(backward)
    check_grads(f, (w, xs), order=2, modes=("fwd", "rev"))
    check_grads(fgrad.jit(f), (w, xs), order=2, modes=("rev",))


def test_scan_over_an_empty_sequence_stacks_empty_outputs_eagerly_as_under_jit():
    def f(c, x):
        return c + x, {"twice": 2 * c, "row": fnp.stack([c, x])}
    xs = np.zeros(0)
    for carry, ys in (lax.scan(f, 0.0, xs), fgrad.jit(lambda xs: lax.scan(f, 0.0, xs))(xs)):
        assert float(carry) == 0.0
        assert np.shape(ys["twice"]) == (0,) and np.shape(ys["row"]) == (0, 2)
        assert np.asarray(ys["row"]).dtype == np.float64
    carry, ys = lax.scan(lambda c, x: (c + x, None), 1.0, xs)
    assert float(carry) == 1.0 and ys is None
    np.testing.assert_array_equal(fgrad.grad(lambda c: lax.scan(f, c, xs)[0])(2.0), 1.0)


# -- loops whose body closes over a staged value: one equation, unrolled on request --

W = np.array([0.9, -0.7])


def _scan_closing_over(w):
    # init and xs are concrete: only the body's w is staged under jit
    carry, ys = lax.scan(lambda c, x: (fnp.sin(c * w) + x, c * x), np.ones(2),
                         np.linspace(0.0, 1.0, 7))
    return fnp.sum(carry) + fnp.sum(ys)


def _fori_closing_over(w):
    return fnp.sum(lax.fori_loop(0, 7, lambda i, c: fnp.sin(c * w) + i, np.ones(2)))


def _while_closing_over(w):
    i, c = lax.while_loop(lambda v: v[0] < 7, lambda v: (v[0] + 1, fnp.sin(v[1] * w)),
                          (0, np.ones(2)))
    return fnp.sum(c)


LOOPS = {"scan": _scan_closing_over, "fori_loop": _fori_closing_over,
         "while_loop": _while_closing_over}


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_a_loop_closing_over_a_staged_value_stages_as_one_equation(name):
    f = LOOPS[name]
    names = _eq_names(f, W)
    loop = "while_loop" if name == "while_loop" else "scan"
    assert names.count(loop) == 1 and "sin" not in names and len(names) < 6
    np.testing.assert_allclose(fgrad.jit(f)(W), f(W), rtol=1e-12)
    nested = fgrad.jit(lambda w: fgrad.jit(f)(w) * 2.0)
    np.testing.assert_allclose(nested(W), 2.0 * f(W), rtol=1e-12)
    ws = np.stack([W, W[::-1], 0.5 * W])
    np.testing.assert_allclose(fgrad.jit(fgrad.vmap(f))(ws), [f(w) for w in ws],
                               rtol=1e-12)


@pytest.mark.parametrize("name", ["scan", "fori_loop"])
def test_a_loop_closing_over_a_staged_value_differentiates_as_eagerly(name):
    f = LOOPS[name]
    want = fgrad.grad(f)(W)
    np.testing.assert_allclose(fgrad.jit(fgrad.grad(f))(W), want, rtol=1e-12)
    np.testing.assert_allclose(fgrad.grad(fgrad.jit(f))(W), want, rtol=1e-12)
    ws = np.stack([W, 0.5 * W])
    np.testing.assert_allclose(fgrad.jit(fgrad.vmap(fgrad.grad(f)))(ws),
                               [fgrad.grad(f)(w) for w in ws], rtol=1e-12)
    check_grads(fgrad.jit(f), (W,), order=2, modes=("fwd", "rev"))


def test_a_while_loop_closing_over_a_staged_value_differentiates_forward():
    f, v = _while_closing_over, np.array([1.0, 0.5])
    want = fgrad.jvp(f, (W,), (v,))
    for got in (fgrad.jit(lambda w: fgrad.jvp(f, (w,), (v,)))(W),
                fgrad.jvp(fgrad.jit(f), (W,), (v,))):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    check_grads(fgrad.jit(f), (W,), order=2, modes=("fwd",))


def test_a_loop_on_constants_alone_runs_while_staging():
    # nothing staged reaches it, so it computes a constant: no loop in the graph
    f = fgrad.make_graph(lambda x: x + lax.fori_loop(0, 4, lambda i, c: c + i, 0.0))
    assert [e.prim.name for e in f(X).eqns] == ["add"]


def test_a_python_scalar_carry_takes_the_dtype_the_body_gives_it_as_eagerly():
    w = np.float32(0.5)

    def f(w):
        return lax.fori_loop(0, 5, lambda i, c: c * w, 1.0)
    assert _eq_names(f, w).count("scan") == 1
    for out in (f(w), fgrad.jit(f)(w)):
        assert np.asarray(out).dtype == np.float32 and float(out) == 0.5 ** 5


@pytest.mark.parametrize("unroll", [1, 2, 3, 7, 9, 0, True, False])
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_unroll_runs_k_steps_per_loop_step_with_the_same_values(unroll, reverse):
    def f(w, xs):
        def step(c, x):
            c = fnp.tanh(c * w + x)
            return c, {"y": c * x, "i": 2.0 * x}
        carry, ys = lax.scan(step, w, xs, reverse=reverse, unroll=unroll)
        return fnp.sum(carry) + fnp.sum(ys["y"] * fnp.arange(7.0)[:, None]) + \
            fnp.sum(ys["i"])
    xs = np.linspace(-1.0, 1.0, 14).reshape(7, 2)
    want_value, want_grad = f(W, xs), fgrad.grad(f, (0, 1))(W, xs)
    np.testing.assert_allclose(fgrad.jit(f)(W, xs), want_value, rtol=1e-12)
    for got, want in zip(fgrad.jit(fgrad.grad(f, (0, 1)))(W, xs), want_grad):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    scans = [e for e in fgrad.make_graph(f)(W, xs).eqns if e.prim.name == "scan"]
    steps = 1 if unroll is False else 7 if unroll is True or unroll == 0 else unroll
    if steps >= 7:
        assert not scans                          # every step staged, unrolled
    else:
        assert [e.params["length"] for e in scans] == [7 // steps]
        assert sum(e.prim.name == "tanh" for e in scans[0].params["body"].eqns) == steps


def test_fori_loop_unroll_gives_the_same_values_and_gradients():
    def f(w, unroll):
        return fnp.sum(lax.fori_loop(0, 5, lambda i, c: fnp.sin(c * w) + i, np.ones(2),
                                     unroll=unroll))
    want = fgrad.grad(f)(W, None)
    for unroll in (None, 2, True):
        np.testing.assert_allclose(fgrad.jit(f, static_argnums=1)(W, unroll), f(W, None))
        np.testing.assert_allclose(fgrad.jit(fgrad.grad(f), static_argnums=1)(W, unroll),
                                   want, rtol=1e-12)
    assert "scan" not in _eq_names(lambda w: f(w, True), W)


def test_a_loop_body_that_cannot_be_staged_runs_step_by_step_as_before():
    # a Python `if` on the index, a carry that grows: no loop equation can hold
    # them, so (staged value or not) the steps run as Python, as they did
    def branchy(w):
        return lax.fori_loop(0, 3, lambda i, c: c * w if i > 0 else c + w, np.zeros(2))

    def growing(w):
        return lax.fori_loop(0, 2, lambda i, c: fnp.concatenate([c, c * w[0]]), np.ones(1))
    w = np.array([2.0, 3.0])
    np.testing.assert_allclose(fgrad.jit(branchy)(w), w ** 3)
    assert "scan" not in _eq_names(branchy, w)
    np.testing.assert_allclose(fgrad.jit(growing)(w), [1.0, 2.0, 2.0, 4.0])
    # on a staged carry the Python `if` has nothing to test, as in JAX
    with pytest.raises(ConcretizationError, match="bool()"):
        fgrad.jit(lambda w: lax.fori_loop(0, 3, lambda i, c: c if c[0] > 0 else -c, w))(w)


def test_unroll_must_be_a_bool_or_a_non_negative_int_and_needs_static_bounds():
    with pytest.raises(LaxArgumentError, match="unroll=-1 must be a bool or a non-negative"):
        lax.scan(lambda c, x: (c + x, None), 0.0, np.ones(3), unroll=-1)
    with pytest.raises(LaxArgumentError, match="unroll=2 needs bounds known while staging"):
        fgrad.jit(lambda n: lax.fori_loop(0, n, lambda i, c: c + 1.0, 0.0, unroll=2))(3)


# -- jax.lax's array operations ------------------------------------------------------

def test_dynamic_slice_clamps_as_jax_does_eagerly_under_jit_and_vmap():
    x = np.arange(12.0).reshape(3, 4)
    # a negative start counts from the end, then the window is moved inside
    cases = {(0, 0): (0, 0), (1, 3): (1, 2), (-1, -3): (1, 1), (5, -9): (1, 0)}
    staged = fgrad.jit(lambda x, i, k: lax.dynamic_slice(x, (i, k), (2, 2)))
    for (i, k), (a, b) in cases.items():
        want = x[a:a + 2, b:b + 2]
        np.testing.assert_array_equal(lax.dynamic_slice(x, (i, k), (2, 2)), want)
        np.testing.assert_array_equal(staged(x, i, k), want)
    starts = np.array([[0, 0], [1, 3], [-1, -3], [5, -9]])
    np.testing.assert_array_equal(
        fgrad.vmap(lambda s: lax.dynamic_slice(x, s, (2, 2)))(starts),
        [x[a:a + 2, b:b + 2] for a, b in cases.values()])
    # under jit the starts are graph inputs: one trace for every start
    assert staged.cache_info().traces == 1


def test_dynamic_update_slice_writes_a_copy_and_differentiates_both_ways():
    x, u = np.zeros((3, 4)), np.arange(1.0, 5.0).reshape(2, 2)
    out = fgrad.jit(lambda x, u, i: lax.dynamic_update_slice(x, u, (i, 3)))(x, u, 2)
    want = np.zeros((3, 4))
    want[1:3, 2:4] = u
    np.testing.assert_array_equal(out, want)
    assert not x.any()                                   # the operand is untouched

    def f(x, u, i):
        return fnp.sum(lax.dynamic_update_slice(x, u, (i, 1)) ** 2)
    gx, gu = fgrad.jit(fgrad.grad(f, (0, 1)))(x + 1.0, u, 1)
    np.testing.assert_array_equal(gx[1:3, 1:3], 0.0)     # overwritten: no derivative
    np.testing.assert_array_equal(gu, 2 * u)
    check_grads(lambda x, u: f(x, u, 1), (x + 1.0, u), order=2)


def test_dynamic_index_in_dim_picks_per_example_under_vmap():
    x = np.arange(6.0).reshape(2, 3)
    idx = np.array([2, -1, 7, 0])
    got = fgrad.vmap(lambda i: lax.dynamic_index_in_dim(x, i, axis=1, keepdims=False))(idx)
    np.testing.assert_array_equal(got, x[:, [2, 2, 2, 0]].T)
    g = fgrad.vmap(fgrad.grad(lambda x, i: fnp.sum(lax.dynamic_index_in_dim(x, i, 1))),
                   in_axes=(None, 0))(x, idx)
    assert g.shape == (4, 2, 3) and np.array_equal(g.sum(axis=(1, 2)), [2.0] * 4)


def test_window_arguments_that_cannot_fit_are_refused():
    x = np.zeros((3, 4))
    with pytest.raises(LaxArgumentError, match=r"window sizes \(2, 5\) do not fit"):
        lax.dynamic_slice(x, (0, 0), (2, 5))
    with pytest.raises(LaxArgumentError, match="needs 2 start indices"):
        lax.dynamic_slice(x, (0,), (2,))
    with pytest.raises(LaxArgumentError, match=r"k=5 must be in \[0, 4\]"):
        lax.top_k(x, 5)
    with pytest.raises(LaxArgumentError, match="num_keys=3 must be between 1"):
        lax.sort((x, x), num_keys=3)
    with pytest.raises(LaxArgumentError, match="batch_size=0 must be a positive integer"):
        lax.map(fnp.sin, x, batch_size=0)
    with pytest.raises(ControlFlowError, match="must return the structure of elems"):
        lax.associative_scan(lambda a, b: (a + b, a), np.ones(3))
    with pytest.raises(ControlFlowError, match="needs one length along axis 0"):
        lax.associative_scan(lambda a, b: a, (np.ones(3), np.ones(2)))


def test_map_with_batch_size_is_a_scan_of_vmapped_batches_under_jit():
    xs = np.arange(10.0).reshape(5, 2)

    def f(xs):
        return lax.map(lambda r: fnp.sin(r) * fnp.sum(r), xs, batch_size=2)
    want = np.stack([np.sin(r) * r.sum() for r in xs])
    np.testing.assert_allclose(f(xs), want)
    np.testing.assert_allclose(fgrad.jit(f)(xs), want)
    assert "scan" in _eq_names(f, xs)
    check_grads(f, (xs,), order=2)


def test_cumulative_reductions_and_top_k_under_jit():
    x = np.array([0.3, -1.2, 2.5, 0.7])
    for name, ref in [("cumsum", np.cumsum), ("cummax", np.maximum.accumulate),
                      ("cumlogsumexp", np.logaddexp.accumulate)]:
        fn = getattr(lax, name)
        np.testing.assert_allclose(fgrad.jit(lambda x: fn(x, reverse=True))(x),
                                   ref(x[::-1])[::-1])
    values, indices = fgrad.jit(lambda x: lax.top_k(x, 2))(x)
    np.testing.assert_array_equal(indices, [2, 3])
    assert indices.dtype == np.int32
    np.testing.assert_array_equal(fgrad.grad(lambda x: fnp.sum(lax.top_k(x, 2)[0]))(x),
                                  [0, 0, 1, 1])


def test_clamp_gives_a_tie_no_derivative_as_jax_does():
    grads = fgrad.grad(lax.clamp, (0, 1, 2))
    np.testing.assert_array_equal(grads(0.0, 0.5, 1.0), [0.0, 1.0, 0.0])
    np.testing.assert_array_equal(grads(0.0, -1.0, 1.0), [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(grads(0.0, 2.0, 1.0), [0.0, 0.0, 1.0])
    np.testing.assert_array_equal(grads(0.0, 0.0, 1.0), [0.0, 0.0, 0.0])
