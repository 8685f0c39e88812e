"""The compiler passes: what each one removes or rewrites, and buffer reuse."""
import gc
import linecache

import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.compiler import passes as C
from fgrad.compiler.codegen import generate
from fgrad.core.graph import Literal
from fgrad.core.graph import Equation, Graph, Var
from fgrad.primitives.elementwise import exp_p


def _names(graph):
    return [e.prim.name for e in graph.eqns]


def test_dead_code_elimination_drops_unused_equations():
    def f(x):
        unused = fnp.exp(x) * 3.0          # noqa: F841 - dead on purpose
        return fnp.sin(x)
    g = fgrad.make_graph(f)(np.ones(2))
    assert _names(g) == ["exp", "multiply", "sin"]
    assert _names(C.eliminate_dead_code(g)) == ["sin"]


def test_common_subexpressions_are_computed_once():
    def f(x):
        return fnp.sin(x * 2.0) + fnp.sin(x * 2.0)
    g = fgrad.make_graph(f)(np.ones(2))
    assert _names(g) == ["multiply", "sin", "multiply", "sin", "add"]
    cse = C.eliminate_common_subexpressions(g)
    assert _names(cse) == ["multiply", "sin", "add"]
    add = cse.eqns[-1]
    assert add.invars[0] is add.invars[1]
    # different literals are different expressions
    g2 = fgrad.make_graph(lambda x: x * 2.0 + x * 3.0)(np.ones(2))
    assert len(C.eliminate_common_subexpressions(g2).eqns) == 3


def test_constant_folding_evaluates_shape_only_and_literal_equations_once():
    def f(x):
        return x * 2.0 + fnp.zeros_like(x) + fnp.ones_like(x)
    g = fgrad.make_graph(f)(np.ones(3))
    assert _names(g) == ["multiply", "full_like", "add", "full_like", "add"]
    folded = C.fold_constants(g)
    assert _names(folded) == ["multiply", "add", "add"]
    ones = folded.eqns[2].invars[1]
    assert isinstance(ones, Literal)
    np.testing.assert_array_equal(ones.value, np.ones(3))
    # an equation on literals only (as inlining or zero rules leave behind)
    lit = Literal(np.arange(3.0), fgrad.core.trace.get_aval(np.arange(3.0)))
    out = Var(lit.aval)
    folded = C.fold_constants(Graph([], [Equation(exp_p, [lit], [out], {})], [out]))
    assert folded.eqns == []
    np.testing.assert_array_equal(folded.outvars[0].value, np.exp(np.arange(3.0)))


def test_symbolic_zeros_never_reach_the_generated_code():
    def f(x, y):
        z = fnp.zeros_like(x)
        return fnp.sum((x + z) * 2.0 + z * y - fnp.sin(z)) + fnp.sum(z)
    g = fgrad.make_graph(f)(np.ones(3), np.ones(3))
    opt = C.optimize(g)
    assert _names(opt) == ["multiply", "sum"]       # x * 2.0, then the sum
    source = fgrad.jit(f, fuse=False).lower(np.ones(3), np.ones(3)).source
    assert "full_like" not in source and "zeros" not in source
    np.testing.assert_allclose(fgrad.jit(f)(np.ones(3), np.ones(3)), f(np.ones(3),
                                                                       np.ones(3)))


def test_zero_rules_only_fire_when_shapes_match():
    def f(x, y):
        return fnp.zeros_like(x) + y          # (2, 3) zero + (3,): y broadcast, kept
    x, y = np.ones((2, 3)), np.arange(3.0)
    opt = C.optimize(fgrad.make_graph(f)(x, y))
    assert _names(opt) == ["add"]
    np.testing.assert_array_equal(fgrad.jit(f)(x, y), np.broadcast_to(y, (2, 3)))
    assert _names(C.optimize(fgrad.make_graph(lambda x, y: x + fnp.zeros_like(y))(
        y, x))) == ["add"]


def test_a_where_false_everywhere_is_its_third_operand_and_a_power_keeps_its_literal():
    def f(x, y, s):
        never = fnp.zeros(3, dtype=bool)
        return fnp.where(never, x, y), fnp.where(never, x, 2.0), fnp.where(never, x, s)
    x, y = np.ones(3), np.arange(3.0)
    opt = C.optimize(fgrad.make_graph(f)(x, y, 5.0))
    # the () operand a Var: broadcast at run time, kept
    assert _names(opt) == ["where"]
    assert opt.outvars[0] is opt.invars[1]
    np.testing.assert_array_equal(opt.outvars[1].value, [2.0, 2.0, 2.0])
    # the derivative of x ** 4 asks whether x and the literal exponent are 0
    # (never both): the power it computes has a literal exponent
    grad = fgrad.grad(lambda x: fnp.sum(x ** 4))
    opt = C.optimize(fgrad.make_graph(grad)(x))
    assert _names(opt) == ["power", "multiply"]
    assert isinstance(opt.eqns[0].invars[1], Literal)
    x = np.array([-1.5, 0.0, 2.0])
    np.testing.assert_array_equal(fgrad.jit(grad)(x), 4 * x ** 3)
    # a 0-d choice of a literal is an array, whose methods the code calls
    g = fgrad.jit(lambda a: fnp.sum(fnp.select([fnp.zeros((), bool)], [a], 0.5)))
    assert g(np.array(3.0)) == 0.5


def test_buffer_reuse_writes_into_dying_intermediates_only():
    def f(x):
        return fnp.exp(fnp.sin(x) * 2.0) + 1.0
    x = np.linspace(0, 1, 5)
    x.flags.writeable = False               # writing into the input would raise
    f_jit = fgrad.jit(f, fuse=False)
    source = f_jit.lower(x).source
    assert "out=a0" not in source
    assert source.count("out=") == 3        # multiply, exp and add reuse sin's buffer
    np.testing.assert_allclose(f_jit(x), np.exp(np.sin(x) * 2.0) + 1.0)


def test_a_dying_matmul_product_takes_the_bias_and_the_activation_in_place():
    x, w, b = np.ones((4, 3)), np.linspace(0, 1, 6).reshape(3, 2), np.array([0.5, -0.5])
    for a in (x, w, b):
        a.flags.writeable = False           # writing into an input would raise
    layer = fgrad.jit(lambda x, w, b: fnp.tanh(x @ w + b), fuse=False)
    source = layer.lower(x, w, b).source
    product = source.split(" = matmul")[0].split()[-1]
    assert f"out={product}" in source.split("add")[1].splitlines()[0]
    np.testing.assert_allclose(layer(x, w, b), np.tanh(x @ w + b))
    # a product the function also returns is never written into
    both = fgrad.jit(lambda x, w, b: (fnp.tanh(x @ w + b), x @ w), fuse=False)
    assert "out=" not in both.lower(x, w, b).source.split("add")[1].splitlines()[0]
    got_t, got_p = both(x, w, b)
    np.testing.assert_allclose(got_t, np.tanh(x @ w + b))
    np.testing.assert_allclose(got_p, x @ w)


def test_multiplying_by_ones_is_dropped_but_not_for_complex():
    # grad of a sum seeds the sweep with ones: no equation should multiply by them
    def f(x):
        return fnp.sum(fnp.sin(x) * fnp.exp(x))
    x = np.linspace(-1, 1, 5)
    opt = C.optimize(fgrad.make_graph(fgrad.grad(f))(x))
    for eqn in opt.eqns:
        assert not any(C.is_one_literal(v) for v in eqn.invars), eqn
    np.testing.assert_allclose(fgrad.jit(fgrad.grad(f))(x), fgrad.grad(f)(x), rtol=1e-15)
    ones = Literal(np.ones(3, np.complex128), fgrad.core.trace.ShapedArray((3,), np.complex128))
    assert not C.is_one_literal(ones)


def test_a_negated_cotangent_reaches_a_product_unnegated_and_the_product_is_negated():
    # the VJP of ``a - x @ y`` negates the (8, 6) cotangent before the product
    # with x.T: the (5, 6) product is negated instead, exactly
    def f(x, y, a):
        return fnp.sum(fnp.sin(a - x @ y))
    rng = np.random.default_rng(0)
    x, y, a = rng.standard_normal((8, 5)), rng.standard_normal((5, 6)), rng.standard_normal(6)
    g = fgrad.make_graph(fgrad.grad(f, argnums=(0, 1)))(x, y, a)
    opt = C.optimize(g)
    negations = [e.invars[0].aval.shape for e in opt.eqns if e.prim.name == "negative"]
    assert (8, 6) not in negations and sorted(negations) == [(5, 6), (8, 5)]
    for got, want in zip(fgrad.jit(fgrad.grad(f, argnums=(0, 1)))(x, y, a),
                         fgrad.grad(f, argnums=(0, 1))(x, y, a)):
        np.testing.assert_array_equal(got, want)


def test_negations_of_both_factors_cancel_and_larger_products_keep_theirs():
    def graph(f, *args):
        return C.sink_negations(fgrad.make_graph(f)(*args))
    x, y = np.ones((3, 4)), np.ones((4, 2))
    assert _names(C.eliminate_dead_code(graph(lambda x, y: -x @ -y, x, y))) == ["matmul"]
    # an outer product is larger than its negated factor: left as it is
    u, v = np.ones((3, 1)), np.ones((1, 4))
    assert _names(graph(lambda u, v: -u @ v, u, v)) == ["negative", "matmul"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
def test_python_scalars_become_constants_of_the_ufunc_dtype(dtype):
    # converted once at compile time, they give the bits NumPy's own handling of
    # a Python scalar gives (NEP 50: the scalar takes the array's dtype)
    def f(x):
        return (x * 1.01 + 0.1) / 3 - 2 ** 0.5
    x = (np.linspace(-1, 1, 7) + (0.5j if dtype is np.complex64 else 0)).astype(dtype)
    f_jit = fgrad.jit(f, fuse=False)
    source = f_jit.lower(x).source
    assert "1.01" not in source and "0.1" not in source, source
    out = f_jit(x)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, f(x))


def test_python_scalars_stay_literals_where_the_dtype_would_change():
    def f(i, x):
        return i * 1.5 + x * 1e300     # int input promotes; 1e300 overflows float32
    i, x = np.arange(3), np.ones(3, np.float32)
    f_jit = fgrad.jit(f, fuse=False)
    assert "1.5" in f_jit.lower(i, x).source and "1e+300" in f_jit.lower(i, x).source
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(f_jit(i, x), f(i, x))


def test_buffer_reuse_never_writes_into_a_live_value_or_a_view():
    def f(x):
        s = fnp.sin(x)
        t = fnp.reshape(s, (2, 3))          # a view of s's buffer
        u = fnp.exp(s)                      # s dies here, but t still reads it
        return t, u * 2.0
    x = np.arange(6.0)
    t, u = fgrad.jit(f)(x)
    np.testing.assert_array_equal(t, np.sin(x).reshape(2, 3))
    np.testing.assert_allclose(u, 2 * np.exp(np.sin(x)))
    assert "out=v1" not in fgrad.jit(f, fuse=False).lower(x).source.split("exp")[1].split("\n")[0]


def test_outputs_that_are_constants_are_fresh_copies():
    f = fgrad.jit(lambda x: (x, np.ones(2) * 3))
    a = f(np.zeros(2))[1]
    a[0] = 100.0
    np.testing.assert_array_equal(f(np.zeros(2))[1], [3.0, 3.0])


def test_generated_source_is_straight_line_python_calling_numpy():
    f = fgrad.jit(lambda x: fnp.sum(fnp.tanh(x) ** 2), fuse=False)
    lowered = f.lower(np.ones(4))
    lines = lowered.source.splitlines()
    assert lines[0] == "def staged(a0):"
    assert lines[-1].startswith("    return (")
    assert not any(word in lowered.source for word in ("for ", "while ", "if "))
    assert len(lowered.optimized.eqns) == 3


def test_jit_grad_has_no_more_equations_than_needed():
    def f(x):
        for _ in range(10):
            x = fnp.sin(x) * 1.01
        return fnp.sum(x)
    staged = fgrad.make_graph(fgrad.grad(f))(np.ones(3))
    optimized = C.optimize(staged)
    assert len(optimized.eqns) < len(staged.eqns)
    assert "full_like" not in _names(optimized)


def _rnn_loss(w, xs):
    def step(h, x):
        h = fnp.tanh(h * w + x)
        return h, h
    _, hs = fgrad.lax.scan(step, fnp.zeros(3), xs)
    return fnp.sum(hs * hs)


def _scans(graph):
    return [e for e in graph.eqns if e.prim.name == "scan"]


def test_a_gradients_forward_scan_runs_once():
    # value_and_grad stages the primal scan, then the same loop again keeping
    # residuals: the two are one loop, its tanh computed once a step
    args = (np.linspace(0.1, 0.9, 3), np.linspace(-1, 1, 15).reshape(5, 3))
    staged = fgrad.make_graph(fgrad.value_and_grad(_rnn_loss))(*args)
    assert [e.params["reverse"] for e in _scans(staged)] == [False, False, True]
    optimized = C.optimize(staged)
    forward, backward = _scans(optimized)
    assert not forward.params["reverse"] and backward.params["reverse"]
    assert _names(forward.params["body"]).count("tanh") == 1
    value, grad = generate(optimized, np).fn(*args)
    want_value, want_grad = fgrad.value_and_grad(_rnn_loss)(*args)
    np.testing.assert_allclose(value, want_value, rtol=1e-14)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-14)


def test_scans_that_compute_nothing_alike_stay_apart():
    def f(xs):
        _, a = fgrad.lax.scan(lambda c, x: (c + x, c), 0.0, xs)
        _, b = fgrad.lax.scan(lambda c, x: (c * x, c), 0.0, xs)      # same start
        _, c = fgrad.lax.scan(lambda c, x: (c + x, c), 1.0, xs)      # same step
        return a, b, c
    assert len(_scans(C.optimize(fgrad.make_graph(f)(np.ones(4))))) == 3


def test_merged_scans_keep_the_carries_that_differ_apart():
    # the second scan's first carry is the first scan's; its second starts
    # alike but steps otherwise: one loop, three carries
    def f(xs):
        c1, a = fgrad.lax.scan(lambda c, x: (c + x, c * 2.0), 0.5, xs)
        (c2, d), b = fgrad.lax.scan(lambda c, x: ((c[0] + x, c[1] * x), c[0] * 2.0),
                                    (0.5, 0.5), xs)
        return c1, a, c2, d, b
    xs = np.linspace(1.0, 2.0, 4)
    optimized = C.optimize(fgrad.make_graph(f)(xs))
    (scan,) = _scans(optimized)
    assert scan.params["n_carry"] == 2
    for got, want in zip(generate(optimized, np).fn(xs), f(xs)):
        np.testing.assert_array_equal(got, want)



def test_generated_lines_leave_linecache_at_the_next_compile_not_during_a_collection():
    # a collected function's lines were popped by its finalizer, which can run
    # while linecache.checkcache walks the keys it listed (KeyError in
    # doctest, pdb, traceback); now they go at the next compile
    def staged_names():
        return {k for k in linecache.cache if str(k).startswith("<fgrad.jit")}

    before = staged_names()
    f = fgrad.jit(lambda x: fnp.sin(x) * 2.0, compile="never")
    f(np.ones(3))
    mine = staged_names() - before
    assert mine
    del f
    gc.collect()
    linecache.checkcache()
    assert mine <= staged_names()                 # still there: nothing was removed
    g = fgrad.jit(lambda x: fnp.cos(x) + 1.0, compile="never")
    g(np.ones(3))
    assert mine.isdisjoint(linecache.cache)       # gone at the next compile
