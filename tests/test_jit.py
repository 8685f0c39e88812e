"""jit and make_graph: staging, the signature cache, composition, errors."""
import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fgrad
import fgrad.numpy as fnp
from fgrad.errors import ConcretizationError, InvalidInputError, StaticArgumentError, \
    TraceLimitError
from fgrad.core.graph import Graph, Literal, check_staged
from primitive_specs import SPECS
from sweeps import examples, sweep
from fgrad.compiler import cpu_fusion
from fgrad.compiler.program import PROGRAM_ENV
from fgrad.compiler.tiers import COMPILE_ENV
from fgrad.compiler.codegen import compile_graph
from fgrad.transforms.jit import CACHE_SIZE


# -- staging and the graph IR --------------------------------------------------------

def test_make_graph_lists_one_equation_a_line_with_shapes():
    g = fgrad.make_graph(lambda x, y: fnp.sum(fnp.sin(x) * y))(np.ones((2, 3)),
                                                              np.ones(3, np.float32))
    assert isinstance(g, Graph)
    assert len(g.eqns) == 3
    text = str(g).splitlines()
    assert text[0] == "{ lambda a:f64[2,3] b:f32[3] ."
    assert text[1] == "  c:f64[2,3] = sin a"
    assert text[2] == "  d:f64[2,3] = multiply c b"
    assert text[3].startswith("  e:f64[] = sum[axis=(0, 1)")
    assert text[-1] == "  in (e) }"
    check_staged(g)


def test_graph_to_dot_is_graphviz_source():
    g = fgrad.make_graph(lambda x: fnp.exp(x) + 1.0)(np.ones(2))
    dot = g.to_dot()
    assert dot.startswith("digraph fgrad {") and dot.rstrip().endswith("}")
    assert "exp" in dot and "add" in dot and 'a -> eq0 [label="f64[2]"];' in dot and "eq1 -> out0;" in dot


def test_closed_over_arrays_become_literals():
    w = np.arange(3.0)
    g = fgrad.make_graph(lambda x: x * w)(np.ones(3))
    (eqn,) = g.eqns
    assert isinstance(eqn.invars[1], Literal) and eqn.invars[1].value is w


@pytest.mark.parametrize("use, what", [
    (lambda x: 1.0 if x.sum() > 0 else 0.0, "bool"),
    (lambda x: float(x.sum()), "float"),
    (lambda x: int(x.sum()), "int"),
    (lambda x: x.sum().item(), "item"),
])
def test_python_control_flow_on_staged_values_names_the_line_and_the_fix(use, what):
    f = fgrad.jit(use)
    with pytest.raises(ConcretizationError, match=r"test_jit\.py:\d+") as info:
        f(np.ones(3))
    message = str(info.value)
    assert "fgrad.lax.cond" in message and "while_loop" in message
    assert "static_argnums" in message


def test_while_on_staged_value_raises():
    def f(x):
        while x.sum() < 10:
            x = x * 2
        return x
    with pytest.raises(ConcretizationError, match="lax.cond"):
        fgrad.jit(f)(np.ones(2))


def test_bitwise_operators_on_traced_values_follow_numpy():
    a, b = np.array([1.0, -1.0, 6.0]), np.array([-1.0, -1.0, 1.0])
    want = (a > 0) & ~(b > 0) | (a > 5) ^ (b > 0)
    np.testing.assert_array_equal(
        fgrad.jit(lambda a, b: (a > 0) & ~(b > 0) | (a > 5) ^ (b > 0))(a, b), want)
    assert fgrad.jit(lambda n: (n & 6) | (3 ^ n))(np.int64(5)) == (5 & 6) | (3 ^ 5)
    assert fgrad.jit(lambda n: ~n)(np.int64(5)) == ~5


@pytest.mark.parametrize("fun", [
    lambda t: fnp.reshape(t, (1,)),
    lambda t: t,
    lambda t: fnp.sum(fnp.stack([t, t])),
    lambda t: fgrad.lax.map(lambda u: u * t, fnp.ones(2)),
], ids=["reshape", "identity", "stack", "map"])
@pytest.mark.parametrize("scalar", [0.7, 3, True], ids=["float", "int", "bool"])
def test_python_scalar_arguments_reach_the_code_as_numpy_scalars(fun, scalar):
    # the compiled code calls array methods (reshape, copy) on its inputs
    want = np.asarray(fun(np.asarray(scalar)))
    got = np.asarray(fgrad.jit(fun)(scalar))
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype


def test_python_scalar_arguments_under_grad():
    h = fgrad.jit(lambda x, t: fnp.sum(fnp.reshape(t, (1,)) * x))
    dx, dt = fgrad.grad(h, argnums=(0, 1))(np.ones(1), 0.7)
    np.testing.assert_allclose(dx, [0.7])
    np.testing.assert_allclose(dt, 1.0)


def test_python_scalar_arguments_keep_their_weak_promotion():
    # np.float64(0.5) would make this float64: the scalar stays a Python number
    x = np.ones(3, np.float32)
    f = fgrad.jit(lambda x, s: fnp.sin(x * s) + x)
    assert f(x, 0.5).dtype == (np.sin(x * 0.5) + x).dtype == np.float32



def test_python_scalar_kept_as_a_number_reaches_reshapes_and_reductions():
    # the scalar meets an int64 array (mixed dtypes), so it stays a Python
    # number; a branch's reshape and a reduction of it must still run
    def piece(x):
        return fnp.reshape(x, (1,)) * fnp.arange(3)

    def f(x):
        return fnp.sum(fgrad.lax.cond(x > 0, piece, lambda x: piece(-x), x)) + fnp.sum(x)
    assert float(fgrad.jit(f)(0.7)) == pytest.approx(float(f(0.7))) == pytest.approx(2.8)
    assert float(fgrad.jit(fgrad.grad(f))(0.7)) == pytest.approx(4.0)

def test_staging_tracer_has_no_concrete_value():
    seen = []

    def f(x):
        with pytest.raises(ConcretizationError, match="concrete value"):
            x.concrete()
        seen.append(repr(x))
        return x
    fgrad.make_graph(f)(np.ones(2))
    assert seen == ["StagingTracer(f64[2])"]


def test_python_control_flow_on_static_arguments_works():
    def f(x, n):
        for _ in range(n):
            x = fnp.sin(x)
        return x if n > 1 else -x
    f_jit = fgrad.jit(f, static_argnums=1)
    x = np.linspace(0, 1, 4)
    np.testing.assert_allclose(f_jit(x, 3), f(x, 3))
    np.testing.assert_allclose(f_jit(x, 1), f(x, 1))


# -- the signature cache -------------------------------------------------------------

def test_cache_retraces_exactly_when_the_signature_changes():
    f = fgrad.jit(lambda x, y: x * y)
    x3, x4 = np.ones(3), np.ones(4)
    f(x3, 2.0)
    f(x3 + 1, 3.0)                         # same shapes, dtypes, Python float: a hit
    assert f.cache_info() == (1, 1, 1, 1)
    f(x4, 2.0)                             # new shape
    f(x3.astype(np.float32), 2.0)          # new dtype
    f(x3, np.float64(2.0))                 # a NumPy scalar is not a Python float
    assert f.cache_info().traces == 4
    f(x4, 5.0)
    f(x3, 7.0)
    assert f.cache_info() == (3, 4, 4, 4)


def test_pytree_structure_is_part_of_the_signature():
    f = fgrad.jit(lambda p: sum(fnp.sum(v) for v in p.values()))
    f({"a": np.ones(2)})
    f({"a": np.zeros(2)})
    f({"a": np.ones(2), "b": np.ones(2)})
    assert f.cache_info().traces == 2 and f.cache_info().hits == 1


def test_static_values_are_part_of_the_signature():
    f = fgrad.jit(lambda x, n: x * n, static_argnames="n")
    f(np.ones(2), n=2)
    f(np.ones(2), n=2)
    f(np.ones(2), n=3)
    assert f.cache_info().traces == 2


def test_cache_lives_on_each_jitted_function():
    def g(x):
        return x + 1.0
    f1, f2 = fgrad.jit(g), fgrad.jit(g)
    f1(np.ones(2))
    f2(np.ones(2))
    assert f1.cache_info().traces == 1 and f2.cache_info().traces == 1


def test_retrace_log_names_what_changed(monkeypatch, caplog):
    f = fgrad.jit(lambda x, y: x + fnp.sum(y))
    monkeypatch.setenv("FGRAD_LOG_RETRACE", "1")
    with caplog.at_level(logging.WARNING, logger="fgrad.jit"):
        f(np.ones(2), np.ones(2))
        f(np.ones(2), np.ones(5))
    (record,) = caplog.records
    assert "argument 'y' changed from float64[2] to float64[5]" in record.getMessage()


def test_retrace_log_tells_a_traced_argument_from_an_array_of_its_shape(monkeypatch,
                                                                       caplog):
    f = fgrad.jit(lambda x: fnp.sum(fnp.sin(x)))
    monkeypatch.setenv("FGRAD_LOG_RETRACE", "1")
    with caplog.at_level(logging.WARNING, logger="fgrad.jit"):
        f(np.ones(2))
        fgrad.grad(f)(np.ones(2))
    (record,) = caplog.records
    assert "argument 'x' changed from float64[2] to a traced float64[2]" \
        in record.getMessage()


def test_no_retrace_log_without_the_environment_variable(monkeypatch, caplog):
    monkeypatch.delenv("FGRAD_LOG_RETRACE", raising=False)
    f = fgrad.jit(lambda x: x + 1)
    with caplog.at_level(logging.WARNING, logger="fgrad.jit"):
        f(np.ones(2))
        f(np.ones(3))
    assert not caplog.records


def test_max_traces_names_the_argument_that_forced_the_retrace():
    f = fgrad.jit(lambda x, scale: x * scale, max_traces=1)
    f(np.ones(2), np.ones(2))
    with pytest.raises(TraceLimitError, match=r"max_traces=1: argument 'scale' "
                       r"changed from float64\[2\] to float64\[3\]"):
        f(np.ones(2), np.ones(3))


def test_max_traces_names_a_static_argument_value():
    f = fgrad.jit(lambda x, n: x * n, static_argnums=1, max_traces=1)
    f(np.ones(2), 2)
    with pytest.raises(TraceLimitError, match="static argument 'n' changed from 2 to 3"):
        f(np.ones(2), 3)


def test_unhashable_static_argument_is_a_clear_error():
    f = fgrad.jit(lambda x, shape: fnp.reshape(x, shape), static_argnums=1)
    with pytest.raises(StaticArgumentError, match=r"static argument 1 \('shape'\).*"
                       "list, which is not hashable.*tuple"):
        f(np.ones(4), [2, 2])
    np.testing.assert_array_equal(f(np.ones(4), (2, 2)), np.ones((2, 2)))


def test_non_array_argument_suggests_static():
    with pytest.raises(InvalidInputError, match="static_argnums"):
        fgrad.jit(lambda x, mode: x)(np.ones(2), "fast")


def test_staging_and_compiling_a_hundred_thousand_equations():
    n = 100_000

    def f(x):
        for _ in range(n):
            x = x * 1.0000001
        return x
    g = fgrad.make_graph(f)(np.ones(2))
    assert len(g.eqns) == n
    out = compile_graph(g)(np.ones(2))[0]
    np.testing.assert_allclose(out, 1.0000001 ** n * np.ones(2), rtol=1e-9)


# -- agreement with eager evaluation over the systematic specs -------------------------

@pytest.mark.parametrize("name, count", sweep(SPECS))
def test_jit_equals_eager_and_jit_grad_equals_grad(name, count, monkeypatch):
    if count is None:
        # the full run: every elementwise group is fused however small
        # (kernel calls priced at nothing) and compiled at the first call, so
        # each spec also checks the kernels tier; the program tier has sweeps
        # of its own (test_program.py)
        monkeypatch.setattr(cpu_fusion, "KERNEL_CALL_NS", 0)
        monkeypatch.setattr(cpu_fusion, "KERNEL_ARRAY_NS", 0)
        monkeypatch.setenv(COMPILE_ENV, "sync")
        monkeypatch.setenv(PROGRAM_ENV, "0")
    else:
        # the quick run checks the staged graph as NumPy calls; the kernels
        # meet the elementwise specs in test_fusion.py and test_cpu_fusion.py
        monkeypatch.setenv(COMPILE_ENV, "never")
    @examples(count)
    @given(SPECS[name])
    def check(case):
        expected = case.fun(*case.args)
        np.testing.assert_allclose(fgrad.jit(case.fun)(*case.args), expected,
                                   rtol=1e-12, atol=1e-12)
        if not case.order:
            return

        def scalar(*xs):
            return fnp.sum(fnp.real(case.fun(*xs)) * 1.5)
        argnums = tuple(range(len(case.args)))
        want = fgrad.grad(scalar, argnums)(*case.args)
        got = fgrad.jit(fgrad.grad(scalar, argnums))(*case.args)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
        # grad of a jitted function: compiled forward and backward halves
        got = fgrad.grad(fgrad.jit(scalar), argnums)(*case.args)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    check()


# -- composition ------------------------------------------------------------------------

def _f(x, w):
    return fnp.sum(fnp.tanh(x @ w) ** 2) + fnp.sum(fnp.sin(w))


_X = np.linspace(-1, 1, 6).reshape(2, 3)
_W = np.linspace(0.5, -0.5, 12).reshape(3, 4)


def test_grad_of_jit_equals_grad():
    got = fgrad.grad(fgrad.jit(_f), (0, 1))(_X, _W)
    want = fgrad.grad(_f, (0, 1))(_X, _W)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_grad_of_jit_runs_the_forward_once_and_compiles_both_halves(capsys):
    f_jit = fgrad.jit(lambda x, w: (fgrad.debug.print("forward") or _f(x, w)))
    got = fgrad.grad(f_jit, (0, 1))(_X, _W)
    assert capsys.readouterr().out.count("forward") == 1
    want = fgrad.grad(_f, (0, 1))(_X, _W)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    (entry,) = f_jit._cache.values()          # traced once, under grad
    split = entry.graph.compiled[("vjp split", (True, True))]
    # grad seeds the sweep with a scalar one: the backward half ran compiled,
    # with that one folded in
    (seeded,) = split._seeded.values()
    assert seeded.compiled and len(seeded.invars) == len(split.backward.invars) - 1
    # the forward half keeps what the backward half reads, not the whole inputs
    assert len(split.forward.outvars) > 1


@pytest.mark.parametrize("outer", ["jacrev", "grad of grad", "vmap", "hessian", "jvp"])
def test_grad_of_jit_under_other_transformations(outer):
    # the pullback batched (jacrev), differentiated again, or the whole grad
    # under vmap/jvp: the call's general rules take over where needed
    def make(f):
        g = fgrad.grad(f, 1)
        return {"jacrev": lambda: fgrad.jacrev(g, 0)(_X, _W),
                "grad of grad": lambda: fgrad.grad(lambda w: fnp.sum(g(_X, w) ** 2))(_W),
                "vmap": lambda: fgrad.vmap(g, in_axes=(0, None))(np.stack([_X, 2 * _X]), _W),
                "hessian": lambda: fgrad.hessian(f, 1)(_X, _W),
                "jvp": lambda: fgrad.jvp(lambda w: g(_X, w), (_W,), (np.ones_like(_W),))[1],
                }[outer]()
    np.testing.assert_allclose(make(fgrad.jit(_f)), make(_f), rtol=1e-10, atol=1e-12)


def test_grad_of_jit_with_several_and_integer_outputs():
    def f(x):
        return fnp.sin(x) * 2, fnp.argmax(x), fnp.sum(x ** 2)
    x = np.linspace(-1, 1, 5)

    def loss(g):
        return lambda x: fnp.sum(g(x)[0]) + g(x)[2]
    np.testing.assert_allclose(fgrad.grad(loss(fgrad.jit(f)))(x), fgrad.grad(loss(f))(x),
                               rtol=1e-12)
    out, pullback = fgrad.vjp(fgrad.jit(f), x)
    want_out, want_pullback = fgrad.vjp(f, x)
    np.testing.assert_allclose(out[0], want_out[0])
    assert out[1] == want_out[1]
    cts = (np.ones(5), np.zeros((), np.int64), 2.0)
    np.testing.assert_allclose(pullback(cts)[0], want_pullback(cts)[0], rtol=1e-12)


def test_jit_of_grad_equals_grad_and_caches():
    df = fgrad.jit(fgrad.grad(_f, 1))
    np.testing.assert_allclose(df(_X, _W), fgrad.grad(_f, 1)(_X, _W), rtol=1e-12)
    df(_X * 2, _W)
    assert df.cache_info().traces == 1


def test_jvp_of_jit_equals_jvp():
    v = np.ones_like(_W)
    got = fgrad.jvp(fgrad.jit(lambda w: _f(_X, w)), (_W,), (v,))
    want = fgrad.jvp(lambda w: _f(_X, w), (_W,), (v,))
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_nested_jit_is_inlined():
    inner = fgrad.jit(lambda x: fnp.sin(x) * 2.0)
    # fuse=False: the NumPy calls, not a fused kernel, show the inlining
    outer = fgrad.jit(lambda x: inner(x) + inner(x * 3.0), fuse=False)
    x = np.linspace(0, 1, 5)
    np.testing.assert_allclose(outer(x), 2 * np.sin(x) + 2 * np.sin(3 * x))
    g = fgrad.make_graph(lambda x: inner(x) + 1.0)(x)
    assert [e.prim.name for e in g.eqns] == ["jit_call", "add"]
    source = outer.lower(x).source
    assert "jit_call" not in source and source.count("sin") == 2


def test_second_order_through_jit():
    f = fgrad.jit(lambda x: fnp.sum(fnp.sin(x) ** 3))
    x = np.array([0.3, -0.7])
    h = fgrad.jit(fgrad.grad(lambda x: fnp.sum(fgrad.grad(f)(x))))(x)
    expected = 6 * np.sin(x) * np.cos(x) ** 2 - 3 * np.sin(x) ** 3
    np.testing.assert_allclose(h, expected, rtol=1e-10)


def test_jit_closing_over_an_outer_tracer():
    def outer(w):
        return fgrad.jit(lambda x: fnp.sum(x * w ** 2))(np.ones(3))
    np.testing.assert_allclose(fgrad.grad(outer)(np.arange(3.0)), 2 * np.arange(3.0))


def test_jit_returns_pytrees_and_literals():
    f = fgrad.jit(lambda x: {"double": x * 2, "const": 1.5, "pair": (x, -x)})
    out = f(np.ones(2))
    assert out["const"] == 1.5
    np.testing.assert_array_equal(out["pair"][1], -np.ones(2))


@settings(max_examples=25)
@given(st.lists(st.tuples(st.sampled_from([(), (2,), (3,), (2, 3)]),
                          st.sampled_from([np.float32, np.float64]),
                          st.sampled_from([0, 1])), min_size=1, max_size=12))
def test_retraces_exactly_when_the_signature_changes(calls):
    """Over a hypothesis-drawn sequence of calls, the number of traces equals the
    number of distinct (shape, dtype, static value) signatures, and every call
    equals the eager result."""
    def f(x, k):
        return fnp.sin(x) * (k + 1)
    f_jit = fgrad.jit(f, static_argnums=1)
    seen = set()
    for shape, dtype, k in calls:
        x = np.full(shape, 0.5, dtype)
        np.testing.assert_allclose(f_jit(x, k), f(x, k), rtol=1e-6)
        seen.add((shape, np.dtype(dtype), k))
        assert f_jit.cache_info().traces == len(seen)
    assert f_jit.cache_info().misses == len(seen)
    assert f_jit.cache_info().hits == len(calls) - len(seen)


@pytest.mark.parametrize("fun", [lambda a: a, lambda a: a * 1.0, lambda a: (a, a)],
                         ids=["identity", "times-one", "pair"])
def test_jit_never_returns_its_input_array(fun):
    x = np.arange(3.0)
    out = fgrad.jit(fun)(x)
    for leaf in fgrad.tree.tree_leaves(out):
        assert leaf is not x and not np.shares_memory(leaf, x)
        np.testing.assert_array_equal(leaf, x)
    with fgrad.debug_nans():                 # the checked path too
        assert fgrad.jit(fun)(x) is not x


def test_the_cache_of_signatures_is_bounded():
    f = fgrad.jit(lambda x: fnp.sum(x * x))
    for n in range(1, CACHE_SIZE + 40):
        assert float(f(np.ones(n))) == n
    info = f.cache_info()
    assert info.size == CACHE_SIZE and info.traces == CACHE_SIZE + 39
    assert float(f(np.ones(1))) == 1.0            # evicted: traced again, still right
    assert f.cache_info().traces == CACHE_SIZE + 40
    assert float(f(np.ones(CACHE_SIZE + 39))) == CACHE_SIZE + 39   # kept: no retrace
    assert f.cache_info().traces == CACHE_SIZE + 40


def test_repeated_calls_with_arrays_give_what_the_first_call_gave():
    # the second call on the same shapes and dtypes skips flattening the
    # arguments: it must still copy an input it would return, rebuild the
    # output pytree, and retrace for a new dtype
    same = fgrad.jit(lambda a: a)
    x = np.ones(3)
    assert same(x) is not x and same(x) is not x
    tree = fgrad.jit(lambda a, b: (a + b, {"s": a * 2.0}))
    for _ in range(2):
        out = tree(x, x)
        np.testing.assert_array_equal(out[0], 2 * x)
        np.testing.assert_array_equal(out[1]["s"], 2 * x)
    assert tree(x.astype(np.float32), x.astype(np.float32))[0].dtype == np.float32
    info = tree.cache_info()
    assert (info.hits, info.traces) == (1, 2)
