"""Elementwise kernel fusion under jit (fgrad/compiler/fusion.py), tested without a GPU.

Three layers: the grouping pass on staged graphs (which equations fuse, what
breaks a group, which intermediates a kernel writes out); the CUDA C text it
generates; and semantics: jitted programs run on the CPU stand-in device with
an ``elementwise_kernel`` hook that *evaluates the generated C source* with
NumPy (tests/fusion_emulator.py), compared with eager fgrad on NumPy over the
systematic elementwise specs. tests/test_cupy.py runs fused kernels on a GPU.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fgrad
import fgrad.numpy as fnp
import fusion_emulator
from fgrad.backend import elementwise_kernel_maker
from fgrad.compiler.codegen import compile_graph
from fgrad.compiler.passes import optimize
from fgrad.core.trace import primitive_table
from fgrad.compiler.fusion import (
    _op_name, fuse_elementwise, fused_elementwise_p, kernels, plan_groups,
)
from primitive_specs import NONDIFF_SPECS, SPECS, arrays
from standin_backend import StandInArray, registered, to_numpy, to_standin


def staged(f, *args):
    return optimize(fgrad.make_graph(f)(*args))


def fused(f, *args):
    return fuse_elementwise(staged(f, *args), fusion_emulator.make_kernel)


def names(graph):
    return [e.prim.name for e in graph.eqns]


def group_names(f, *args):
    g = staged(f, *args)
    return [[g.eqns[k].prim.name for k in group] for group in plan_groups(g)]


def only_kernel(graph):
    ks = [e.params["kernel"] for e in graph.eqns if e.prim is fused_elementwise_p]
    assert len(ks) == 1, names(graph)
    return ks[0]


X = np.linspace(-1.0, 1.0, 6)

# ---------------------------------------------------------------------------
# (a) grouping
# ---------------------------------------------------------------------------


def test_a_chain_becomes_one_equation():
    g = fused(lambda x: fnp.exp(fnp.tanh(fnp.sin(x) * 2.0 + x) - 1.0), X)
    assert names(g) == ["fused_elementwise"]
    assert only_kernel(g).size == 6


def test_a_reduction_ends_the_group_and_the_rest_starts_another():
    def f(x):
        s = fnp.sum(fnp.sin(x) * 2.0)
        return fnp.exp(s * fnp.cos(x))
    assert group_names(f, X) == [["sin", "multiply"], ["cos", "multiply", "exp"]]
    assert names(fused(f, X)) == ["fused_elementwise", "sum", "fused_elementwise"]


def test_a_matmul_is_never_fused():
    w, b = np.ones((6, 4)) / 6, np.linspace(0, 1, 4)
    g = fused(lambda x, w, b: fnp.tanh(x @ w + b) * 2.0, X.reshape(1, 6), w, b)
    assert names(g) == ["matmul", "fused_elementwise"]


def test_an_intermediate_read_outside_is_a_kernel_output():
    def f(x):
        h = fnp.sin(x) * 2.0
        return h, fnp.sum(fnp.exp(h) + 1.0)
    g = fused(f, X)
    assert names(g) == ["fused_elementwise", "sum"]
    kernel = only_kernel(g)
    assert kernel.out_params == "float64 out0, float64 out1"
    assert g.outvars[0] is g.eqns[0].outvars[0]           # h, returned as is
    assert g.eqns[1].invars[0] is g.eqns[0].outvars[1]    # exp(h) + 1, summed


def test_a_value_read_before_the_chain_continues_closes_the_group():
    # sum reads sin(x) before a * 3.0 could join sin's group: fusing them would
    # move sin(x) after its reader, so sin stays alone and the products fuse
    def f(x):
        a = fnp.sin(x)
        return fnp.sum(a) * (a * 3.0)
    assert group_names(f, X) == [["multiply", "multiply"]]
    assert names(fused(f, X)) == ["sin", "sum", "fused_elementwise"]


def test_a_dag_of_independent_branches_fuses_into_one_kernel():
    g = fused(lambda x, y: fnp.sin(x) * fnp.cos(y) + fnp.exp(x), X, X[::-1].copy())
    assert names(g) == ["fused_elementwise"]
    assert only_kernel(g).in_params == "float64 in0, float64 in1"


def test_a_smaller_intermediate_is_computed_apart_and_broadcast_in():
    def f(x, y):
        return (fnp.sin(x) + y) * 2.0
    x, y = np.linspace(0, 1, 3), np.ones((2, 3))
    assert group_names(f, x, y) == [["add", "multiply"]]
    g = fused(f, x, y)
    assert names(g) == ["sin", "fused_elementwise"]


def test_an_unsupported_ufunc_ends_the_group():
    def f(x):
        return fnp.exp(fnp.remainder(fnp.sin(x) * 2.0, 1.5)) + 1.0
    assert group_names(f, X) == [["sin", "multiply"], ["exp", "add"]]


@pytest.mark.parametrize("dtype", [np.float16, np.complex128])
def test_dtypes_without_a_c_kernel_type_are_left_to_the_backend(dtype):
    assert group_names(lambda x: fnp.exp(fnp.sin(x) * 2), X.astype(dtype)) == []


def test_the_backward_pass_of_a_chain_is_fused_with_its_forward_pass():
    def f(x):
        y = x
        for _ in range(5):
            y = fnp.sin(y) * 1.1 + 0.1
        return fnp.sum(y)
    g = fused(fgrad.grad(f), X)
    assert names(g) == ["fused_elementwise"]


def test_numpy_code_is_unchanged():
    g = fgrad.make_graph(lambda x: fnp.exp(fnp.sin(x) * 2.0))(X)
    compiled = compile_graph(g, np)
    assert kernels(compiled) == []
    assert compile_graph(g, np, fuse=False).source == compiled.source
    assert "sin" in compiled.source and "exp" in compiled.source


def test_kernels_come_from_the_backends_hook():
    made = []

    def hook(*source):
        made.append(source)
        return fusion_emulator.make_kernel(*source, unwrap=lambda a: a._a,
                                           wrap=StandInArray)
    assert elementwise_kernel_maker(np) is None
    with registered(hook) as module:
        assert elementwise_kernel_maker(module) is hook
        g = fgrad.make_graph(lambda x: fnp.exp(fnp.sin(x) * 2.0))(X)
        compiled = compile_graph(g, module)
        assert [k.size for k in kernels(compiled)] == [3]
        assert "fused_elementwise" in compiled.source
        out = compiled(to_standin(X))[0]
        np.testing.assert_allclose(to_numpy(out), np.exp(np.sin(X) * 2.0), rtol=1e-15)
        # cached by source: compiling the same graph again builds nothing new
        compile_graph(g, module)
        assert len(made) == 1
    with registered() as module:           # no hook: no fusion
        assert kernels(compile_graph(g, module)) == []


# ---------------------------------------------------------------------------
# (b) generated source
# ---------------------------------------------------------------------------


def test_source_of_a_float32_chain_casts_literals_to_float32():
    x = X.astype(np.float32)
    kernel = only_kernel(fused(lambda x: fnp.tanh(x * 2.0 + 1), x))
    assert kernel.in_params == "float32 in0"
    assert kernel.out_params == "float32 out0"
    assert kernel.operation == ("float t0 = in0 * ((float)2.0);\n"
                                "float t1 = t0 + ((float)1ll);\n"
                                "float t2 = tanh(t1);\n"
                                "out0 = t2;")


def test_source_of_where_and_comparison():
    kernel = only_kernel(fused(lambda x: fnp.where(x > 0, x, 0.5 * x), X))
    assert kernel.operation == ("bool t0 = in0 > ((double)0ll);\n"
                                "double t1 = ((double)0.5) * in0;\n"
                                "double t2 = t0 ? in0 : t1;\n"
                                "out0 = t2;")


def test_source_of_maximum_propagates_nan_and_power_uses_pow():
    kernel = only_kernel(fused(lambda x, y: fnp.maximum(x, y) ** 2.5, X, X + 0.1))
    assert kernel.operation == ("double t0 = (isnan(in0) || in0 > in1) ? in0 : in1;\n"
                                "double t1 = pow(t0, ((double)2.5));\n"
                                "out0 = t1;")


def test_source_of_mixed_dtypes_casts_to_the_promoted_type():
    i = np.arange(6, dtype=np.int32)
    kernel = only_kernel(fused(lambda i, x: fnp.sin(i * 3) + x, i, X.astype(np.float32)))
    assert kernel.in_params == "int32 in0, float32 in1"
    assert kernel.operation == ("int t0 = in0 * ((int)3ll);\n"
                                "double t1 = sin(((double)t0));\n"
                                "double t2 = t1 + ((double)in1);\n"
                                "out0 = t2;")


def test_a_constant_array_is_an_input_unless_it_holds_one_value():
    c = np.linspace(0, 1, 6)
    kernel = only_kernel(fused(lambda x: fnp.sin(x) * c + 1.0, X))
    assert kernel.in_params == "float64 in0, float64 in1"
    # twos, not ones: compile now drops a multiplication by one altogether
    twos = np.full(6, 2.0)
    kernel = only_kernel(fused(lambda x: fnp.sin(x) * twos + 1.0, X))
    assert kernel.in_params == "float64 in0"
    assert "((double)2.0) * " in kernel.operation or " * ((double)2.0)" in kernel.operation


def test_the_kernel_name_is_a_digest_of_its_source():
    a = only_kernel(fused(lambda x: fnp.sin(x) * 2.0, X))
    b = only_kernel(fused(lambda x: fnp.sin(x) * 2.0, X[:3]))
    c = only_kernel(fused(lambda x: fnp.sin(x) * 3.0, X))
    assert a.name == b.name != c.name
    assert a.name in a.source and a.operation in a.source


# ---------------------------------------------------------------------------
# (c) semantics: the generated C, evaluated, against eager fgrad on NumPy
# ---------------------------------------------------------------------------


def _emulator_hook(built):
    def hook(*source):
        kernel = fusion_emulator.make_kernel(*source, unwrap=lambda a: a._a,
                                             wrap=StandInArray)
        built.append(kernel)
        return kernel
    return hook


@pytest.fixture
def emulated():
    built = []
    with registered(_emulator_hook(built)):
        yield built


def _fused_count(jitted, args):
    return sum(e.prim is fused_elementwise_p
               for e in jitted.lower(*args).optimized.eqns)


def _check(f, host_args, exact=False, expect_fusion=True):
    """jit(f) on the emulated device agrees with eager f on NumPy."""
    expected = f(*host_args)
    jitted = fgrad.jit(f)
    args = to_standin(host_args)
    got = to_numpy(jitted(*args))
    for e, g in zip(fgrad.tree.tree_leaves(expected), fgrad.tree.tree_leaves(got)):
        assert np.asarray(e).dtype == g.dtype
        if exact:
            np.testing.assert_array_equal(g, e)
        else:
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
    if expect_fusion:
        assert _fused_count(jitted, args) >= 1


def _elementwise(table):
    return sorted(n for n in table if n in primitive_table
                  and _op_name(primitive_table[n]) is not None)


# where's spec closes over a host mask (asarray(mask, like=x)), which jit stages
# as a NumPy constant that a device cannot take; test_where_chains passes it in
DIFF = [n for n in _elementwise(SPECS) if n != "where"]
NONDIFF = _elementwise(NONDIFF_SPECS)


def test_the_semantic_tests_cover_the_elementwise_specs():
    assert {"add", "multiply", "divide", "power", "maximum", "sin", "exp", "tanh",
            "convert_element_type"} <= set(DIFF)
    assert {"less", "equal", "floor", "isnan", "logical_and"} <= set(NONDIFF)


@pytest.mark.parametrize("name", DIFF)
def test_jit_and_jit_grad_of_elementwise_specs_match_eager(name, emulated):
    @given(SPECS[name])
    def check(case):
        fun, n = case.fun, len(case.args)
        _check(lambda *xs: fun(*xs) * 1.5 + 0.25, case.args)
        if case.float32:
            _check(lambda *xs: fun(*xs) * 1.5 + 0.25,
                   tuple(a.astype(np.float32) for a in case.args))
        grad = fgrad.grad(lambda *xs: fnp.sum(fnp.tanh(fun(*xs)) * 0.5),
                          argnums=tuple(range(n)))
        _check(grad, case.args, expect_fusion=False)
    check()
    assert emulated, "no kernel was generated"


@pytest.mark.parametrize("name", NONDIFF)
def test_jit_of_nondifferentiable_elementwise_specs_matches_eager(name, emulated):
    @given(NONDIFF_SPECS[name])
    def check(case):
        f, _, args = case

        def prog(*xs):
            c = f(*xs)
            return c, fnp.logical_not(c), fnp.where(c, 1.0, -1.0) * 2.0
        _check(prog, args, exact=True)
    check()


@given(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3)
       .flatmap(lambda bs: st.tuples(*(arrays(s) for s in bs.input_shapes))))
def test_where_chains(args):
    with registered(_emulator_hook([])):
        _check(lambda c, x, y: fnp.where(c > 0, x, y) * 1.5 + 0.25, args)
        _check(fgrad.grad(lambda c, x, y: fnp.sum(fnp.tanh(fnp.where(c > 0, x * x, y))),
                          argnums=(1, 2)), args, expect_fusion=False)


def test_a_twenty_op_chain_and_its_gradient(emulated):
    def chain(x):
        for k in range(5):
            x = fnp.tanh(fnp.sin(x) * (1.0 + 0.1 * k) + fnp.exp(-x * x)) - 0.05
        return x
    x = np.linspace(-2, 2, 24).reshape(4, 6)
    _check(chain, (x,))
    _check(fgrad.grad(lambda x: fnp.sum(chain(x))), (x,))
    g = fgrad.jit(fgrad.grad(lambda x: fnp.sum(chain(x))))
    assert [e.prim.name for e in g.lower(to_standin(x)).optimized.eqns] == \
        ["fused_elementwise"]


def test_integer_and_bool_chains(emulated):
    i = np.arange(-6, 6, dtype=np.int32)
    _check(lambda i: fnp.maximum(i * 3 - 4, -i) + 1, (i,), exact=True)
    _check(lambda i: fnp.absolute(-i * 7), (i.astype(np.int8),), exact=True)
    _check(lambda i: fnp.logical_and(i > 0, i < 4) == (i != 2), (i,), exact=True)
    _check(lambda i: fnp.astype(i * 2, np.float32) / 3.0, (i,))


def test_nan_and_inf_follow_numpy(emulated):
    x = np.array([np.nan, -np.inf, -1.0, 0.0, 2.0, np.inf])
    y = np.array([1.0, np.nan, 0.0, np.nan, 3.0, 1.0])
    _check(lambda x, y: fnp.maximum(x, y) * 2.0 + fnp.minimum(y, x), (x, y))
    with np.errstate(invalid="ignore"):              # 0 * inf, as NumPy says
        _check(lambda x: fnp.where(fnp.isnan(x), 0.0, x) * fnp.inf, (x,))


def test_a_constant_array_operand(emulated):
    c = to_standin(np.linspace(0, 1, 6))
    expected = np.sin(X) * np.linspace(0, 1, 6) + 1.0
    jitted = fgrad.jit(lambda x: fnp.sin(x) * c + 1.0)
    got = to_numpy(jitted(to_standin(X)))
    np.testing.assert_allclose(got, expected, rtol=1e-15)
    assert _fused_count(jitted, (to_standin(X),)) == 1


def test_parallel_jit_runs_fused_kernels(emulated):
    x = np.linspace(-1, 1, 12).reshape(3, 4)
    f = fgrad.grad(lambda x: fnp.sum(fnp.exp(fnp.sin(x) * 2.0)))
    got = to_numpy(fgrad.jit(f, parallel=True)(to_standin(x)))
    np.testing.assert_allclose(got, f(x), rtol=1e-12)
