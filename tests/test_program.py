"""The whole-program compiler (stage 1): a straight-line graph as one LLVM function.

Every spec runs through the compiled program and is compared with the
interpreted tier (the generated NumPy code of the same optimised graph):
bitwise for copies, max/min and arithmetic, to rounding where the two compute
differently (a float sum in order instead of pairwise; sin, cos, exp and tanh
by `fgrad.compiler.vector_math` or the C library instead of NumPy's loops).
"""
import gc
import json
import logging
import os
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from primitive_specs import NONDIFF_SPECS, SPECS
from program_checks import agree as _agree
from program_checks import both as _both
from program_checks import ROUNDING, same_operations
from sweeps import examples, sweep

import fgrad
import fgrad.numpy as fnp
from fgrad import lax
from fgrad.compiler import native, program
from fgrad.compiler.blas import gemm_table
from fgrad.compiler.buffer_plan import Step, plan_buffers
from fgrad.compiler.codegen import generate
from fgrad.compiler.cpu_fusion import fuse_for_cpu
from fgrad.compiler.lu_ir import lanes
from fgrad.compiler.lu_kernels import LANES_MAX_N
from fgrad.compiler.passes import optimize
from fgrad.compiler.program import PROGRAM_ENV, compile_program, pays, program_steps
from fgrad.errors import IntegrationError, InvalidInputError
from fgrad.ode.status import ode_check_p
from fgrad.primitives.indexing import getitem_p, set_p
from fgrad.primitives.linalg import solve_factors_p

pytestmark = pytest.mark.skipif(not native.available(), reason="llvmlite missing")


# ---------------------------------------------------------------------------
# The sweeps: every spec, forward and gradient
# ---------------------------------------------------------------------------


def _agree_as_computed(program, got, want):
    """Bit for bit where the program computes as NumPy does, else to rounding."""
    _agree(got, want, exact=same_operations(program.graph))


@pytest.mark.parametrize("name, count", sweep(SPECS, quick=1))
def test_every_spec_and_its_gradient_as_one_program(name, count):
    @examples(count)
    @given(SPECS[name])
    def check(case):
        _agree_as_computed(*_both(case.fun, *case.args))
        if case.order:
            def scalar(*xs):
                return fnp.sum(fnp.real(case.fun(*xs)) * 1.5)
            grad = fgrad.grad(scalar, tuple(range(len(case.args))))
            _agree_as_computed(*_both(grad, *case.args))
    check()


@pytest.mark.parametrize("name, count", sweep(NONDIFF_SPECS, quick=1))
def test_every_nondifferentiable_spec_as_one_program(name, count):
    @examples(count)
    @given(NONDIFF_SPECS[name])
    def check(case):
        f, _, args = case
        _agree_as_computed(*_both(f, *args))
    check()


# fgrad.jit with FGRAD_JIT_PROGRAM=all: the same specs through jit's own path
# (staging, the optimiser, the program tier, the call), compiled on the calling
# thread; a handful in a plain run, every spec in the slow one
_JIT_QUICK = ("sin", "add", "sum", "matmul", "dot", "einsum", "tensordot", "solve",
              "cholesky", "getitem", "take", "where", "cumsum")
assert set(_JIT_QUICK) <= set(SPECS)


@pytest.mark.parametrize("name, count", sweep(
    SPECS, quick=1, slow_only=set(SPECS) - set(_JIT_QUICK)))
def test_every_spec_under_jit_with_every_graph_a_program(name, count, monkeypatch):
    monkeypatch.setenv(PROGRAM_ENV, "all")

    @examples(count)
    @given(SPECS[name])
    def check(case):
        jitted = fgrad.jit(case.fun, compile="sync")
        want = case.fun(*case.args)
        for _ in range(2):              # the first call may run before the program
            np.testing.assert_allclose(jitted(*case.args), want, rtol=1e-10, atol=1e-12)
        tiers = {info.tier for info in jitted.compile_info()}
        assert tiers <= {"program", "numpy"}, tiers
    check()


# ---------------------------------------------------------------------------
# Lowering: what is compiled, what is called out, dtypes, NaN and inf
# ---------------------------------------------------------------------------


def _network(w, b, x):
    # x @ w written out (a BLAS product would round as its BLAS does), then a callout
    h = fnp.maximum(fnp.cumsum(x[:, :1] * w[0] + x[:, 1:] * w[1], axis=1) + b, 0.0)
    z = fnp.where(h > 0.25, h, -h)
    s = fnp.max(z, axis=1, keepdims=True)            # a reduction over one axis
    t = z.T.reshape(-1)                              # a strided copy, a view
    return z - s, fnp.min(t), fnp.broadcast_to(b, (3, 4)) * 2.0, t.reshape(4, 3)


_W = np.linspace(-1, 1, 8).reshape(2, 4)
_B = np.linspace(-0.3, 0.4, 4)
_X = np.linspace(-0.5, 0.7, 6).reshape(3, 2)


def test_copies_reductions_and_arithmetic_are_bitwise_the_interpreted_tiers():
    compiled, got, want = _both(_network, _W, _B, _X)
    _agree(got, want, exact=True)
    assert [c.split(": ")[1] for c in compiled.callouts] == ["cumsum"]


@pytest.mark.parametrize("dtype", ["float64", "float32", "int32", "uint8"])
def test_column_reductions_and_row_extrema_are_numpys(dtype):
    # a sum or extremum over leading axes accumulates rows in place, one over
    # the last axes keeps an accumulator per vector lane: NumPy's values, a
    # NaN anywhere in a row or column winning, lengths off the lanes' count
    x = (np.arange(3 * 37 * 5) % 23 - 11.5).reshape(3, 37, 5).astype(dtype)
    if dtype.startswith("float"):
        x[1, 30, 2] = np.nan

    def f(x):
        return (fnp.sum(x, axis=0), fnp.max(x, axis=(0, 1)), fnp.min(x, axis=1),
                fnp.max(x, axis=2), fnp.min(x.reshape(3, 185), axis=1),
                fnp.max(x, axis=(1, 2)))
    compiled, got, want = _both(f, x)
    _agree(got, want, exact=True)
    assert compiled.callouts == []


def test_callouts_are_listed_by_compile_info(monkeypatch):
    monkeypatch.setenv(PROGRAM_ENV, "all")
    f = fgrad.jit(lambda x: fnp.cumsum(fnp.sin(x), axis=0) * 2.0)
    x = np.linspace(0, 1, 5)
    f(x)
    assert f.wait_compiled()
    (info,) = f.compile_info()
    assert info.tier == "program" and info.callouts == ("1: cumsum",)
    np.testing.assert_array_equal(f(x), np.cumsum(np.sin(x)) * 2.0)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int32", "int64",
                                   "uint8", "uint32", "bool"])
def test_dtypes(dtype):
    x = (np.arange(-6, 6) % 5).reshape(3, 4).astype(dtype)
    y = np.arange(4).astype(dtype)

    def f(x, y):
        z = fnp.maximum(x, y) if dtype == "bool" else x * y + x
        return z, fnp.sum(z, axis=0), fnp.max(z), fnp.min(z, axis=1), z.T, x < y
    _, got, want = _both(f, x, y)
    _agree(got, want, exact=dtype != "float32")


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int32", "int64"])
@pytest.mark.parametrize("shape", [(), (3,)])
def test_a_check_compares_its_status_and_calls_back_only_to_raise(dtype, shape):
    # fgrad.ode's status check (a check: raises where its status is nonzero)
    def f(status, t):
        ode_check_p.bind(status, t, what="the check")
        return t * 2.0
    good, t = np.zeros(shape, dtype), np.full(shape, 0.5)
    compiled = compile_program(optimize(fgrad.make_graph(f)(good, t), np))
    assert compiled.callouts == []
    np.testing.assert_array_equal(compiled.call(good, t)[0], 1.0)
    bad = np.ones(shape, dtype) if shape == () else np.array([0, 0, 1], dtype)
    where = "" if shape == () else r" \(example 2 of the batch\)"
    with pytest.raises(IntegrationError, match=f"the check: .*, at t = 0.5{where}"):
        compiled.call(bad, t)


# every dtype the sweeps use, with the values where NumPy's integer semantics
# show: wraparound at both ends, negative operands of // and %, zero divisors,
# shifts by 0 and past the width; each operation is a loop of the program's
# own or a callout, and either must be NumPy's result bit for bit
SWEEP_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                "uint64", "float32", "float64", "complex64", "complex128"]


def _edge_values(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return np.array([True, False, True, True, False, False, True, False]), \
            np.array([True, True, False, True, False, True, False, False])
    if dtype.kind == "f":
        info = np.finfo(dtype)
        x = np.array([-7.5, 7.0, -0.0, info.max, -info.max, np.inf, np.nan, 3.25], dtype)
        return x, np.array([2.0, -3.0, 0.0, 2.0, 0.5, -np.inf, 1.0, -0.0], dtype)
    if dtype.kind == "c":           # the float values as parts, in two orders
        x, y = _edge_values(f"f{dtype.itemsize // 2}")
        z, w = np.empty(8, dtype), np.empty(8, dtype)
        z.real, z.imag, w.real, w.imag = x, y[::-1], y, x[::-1]
        return z, w
    info = np.iinfo(dtype)
    x = np.array([info.min, info.max, -7 if info.min else 7, 7, 0, 1, info.max - 1, 5],
                 dtype)
    return x, np.array([-1 if info.min else 3, 2, 2, -3 if info.min else 3, 3, 0, 1, 7],
                       dtype)


_INTEGER_OPERATIONS = {
    "add": lambda x, y: x + y, "subtract": lambda x, y: x - y,
    "multiply": lambda x, y: x * y, "floor_divide": lambda x, y: x // y,
    "remainder": lambda x, y: x % y, "maximum": fnp.maximum, "minimum": fnp.minimum,
    "negative": lambda x, y: -x, "absolute": lambda x, y: fnp.abs(x),
    "compare": lambda x, y: (x < y, x == y, x >= y),
    "where": lambda x, y: fnp.where(x > y, x, y),
    "bitwise": lambda x, y: (x & y, x | y, x ^ y, ~x),
    "shift": lambda x, y: (x << (y % 8), x >> (y % 8)),
    "reduce": lambda x, y: (fnp.sum(x), fnp.max(x), fnp.min(y), fnp.sum(x.reshape(2, 4), 1)),
    "convert": lambda x, y: (x.astype(np.float64), x.astype(np.int32), x.astype(np.uint8)),
}
_FLOAT_OPERATIONS = {
    "divide": lambda x, y: x / y, "power": lambda x, y: x ** 2,
    "math": lambda x, y: (fnp.sqrt(fnp.abs(x)), fnp.exp(y), fnp.floor(x), fnp.isnan(x)),
}
_COMPLEX_OPERATIONS = {
    "divide": lambda x, y: x / y, "power": lambda x, y: (x ** 2, x ** y),
    "math": lambda x, y: (fnp.sqrt(x), fnp.exp(y), fnp.log(x), fnp.isnan(x), fnp.isinf(y)),
    "parts": lambda x, y: (fnp.real(x), fnp.imag(y), fnp.conj(x), fnp.angle(y)),
    "convert": lambda x, y: (x.astype(np.complex128), fnp.real(x).astype(x.dtype)),
}


def _dtype_cases():
    for dtype in SWEEP_DTYPES:
        kind = np.dtype(dtype).kind
        operations = dict(_INTEGER_OPERATIONS, **{"f": _FLOAT_OPERATIONS,
                                                  "c": _COMPLEX_OPERATIONS}.get(kind, {}))
        for name, fun in operations.items():
            if kind == "b" and name in ("subtract", "negative", "floor_divide", "remainder",
                                        "shift", "absolute"):
                continue            # NumPy refuses (or has no meaning for) these on bools
            if kind in "fc" and name in ("bitwise", "shift") or kind == "c" and name in (
                    "floor_divide", "remainder"):
                continue            # NumPy refuses these on complex values
            yield pytest.param(dtype, fun, id=f"{dtype}-{name}")


@pytest.mark.parametrize("dtype, fun", list(_dtype_cases()))
def test_every_dtype_as_the_interpreted_tier(dtype, fun):
    x, y = _edge_values(dtype)
    with np.errstate(all="ignore"):
        program, got, want = _both(fun, x, y)
    # float32 and complex64: bit for bit too where no sum (in float64, where
    # NumPy's is in float32) or function of `ROUNDING` is computed; a complex128
    # sum or angle: to rounding
    rounded = dtype == "complex128" and fun in (_INTEGER_OPERATIONS["reduce"],
                                                _COMPLEX_OPERATIONS["parts"])
    _agree(got, want, exact=not rounded and (
        dtype not in ("float32", "complex64") or same_operations(program.graph)))


# every elementwise operation a program's loops compute (and a few it calls
# out for), on the edge values above
_ELEMENTWISE_UNARY = (
    "negative", "absolute", "square", "sqrt", "cbrt", "exp", "exp2", "expm1", "log", "log2",
    "log10", "log1p", "sin", "cos", "tan", "sinh", "cosh", "tanh", "arcsin", "arccos",
    "arctan", "arcsinh", "arccosh", "arctanh", "floor", "ceil", "trunc", "rint", "isnan",
    "isinf", "isfinite", "signbit", "sign", "logical_not", "invert")
_ELEMENTWISE_BINARY = (
    "add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "arctan2",
    "hypot", "fmod", "floor_divide", "remainder", "equal", "not_equal", "less", "less_equal",
    "greater", "greater_equal", "logical_and", "logical_or", "logical_xor", "bitwise_and",
    "bitwise_or", "bitwise_xor")


@pytest.mark.parametrize("dtype", SWEEP_DTYPES)
def test_every_elementwise_operation_with_nan_inf_and_wraparound_as_numpy(dtype):
    # one program of every operation NumPy defines for the dtype: each result
    # NumPy's bits, or (a function of `ROUNDING`) equal to rounding, NaN where
    # NumPy has NaN and infinities of NumPy's signs
    x, y = _edge_values(dtype)
    names = []
    with np.errstate(all="ignore"):
        for name in _ELEMENTWISE_UNARY + _ELEMENTWISE_BINARY:
            operands = (x,) if name in _ELEMENTWISE_UNARY else (x, y)
            try:
                getattr(np, name)(*operands)
            except (TypeError, ValueError):     # not defined for this dtype, or values
                continue
            names.append(name)

        def every(x, y):
            return tuple(getattr(fnp, n)(*((x,) if n in _ELEMENTWISE_UNARY else (x, y)))
                         for n in names)
        _, got, want = _both(every, x, y)
    assert len(names) >= 20
    for name, g, w in zip(names, got, want):
        _agree([g], [w], exact=name not in ROUNDING)


@pytest.mark.parametrize("dtype", [d for d in SWEEP_DTYPES if d[0] in "iu"])
def test_integer_division_bits_and_shifts_are_loops_with_numpys_edges(dtype):
    info = np.iinfo(dtype)
    signed = info.min < 0
    x = np.array([info.min, info.max, -7 if signed else 7, 7, 0, 1, info.max - 1, 5, 9, 3],
                 dtype)
    # MIN // -1, zero divisors, shifts by the width and beyond, and by a negative amount
    y = np.array([-1 if signed else 3, 2, 2, -3 if signed else 3, 3, 0, info.bits,
                  info.bits + 1, info.bits - 1, -2 if signed else 200], dtype)

    def f(x, y):
        return x // y, x % y, x & y, x | y, x ^ y, ~x, x << y, x >> y, (x // 3) % y
    with np.errstate(all="ignore"):
        compiled, got, want = _both(f, x, y)
    assert compiled.callouts == []
    _agree(got, want, exact=True)


def test_nan_and_inf_propagate_as_in_numpy():
    x = np.array([[np.nan, 1.0, -np.inf], [np.inf, 0.0, -0.0]])

    def f(x):
        y = x / fnp.abs(x) + fnp.sqrt(x)
        return y, fnp.max(y, axis=0), fnp.min(x, axis=1), fnp.isnan(y), fnp.sum(x * 0.0)
    with np.errstate(all="ignore"):
        _, got, want = _both(f, x)
    _agree(got, want, exact=True)


def test_an_output_that_is_an_input_a_constant_or_a_view():
    c = np.arange(4.0)

    def f(x):
        return x, c, 2.0, x.reshape(2, 2), fnp.sin(x), fnp.sin(x).reshape(2, 2)
    x = np.linspace(0, 1, 4)
    compiled, got, want = _both(f, x)
    _agree(got, want, exact=True)
    assert got[1] is not c and not np.shares_memory(got[3], x)


def test_inputs_that_are_numpy_scalars_or_not_contiguous():
    def f(x, s, t):
        return x * s + t, s * 2.0
    x = np.arange(12.0).reshape(3, 4)[:, ::2]
    compiled, got, want = _both(f, x, np.float64(3.0), 1.5)
    _agree(got, want, exact=True)
    assert got[1].shape == ()


def test_wrong_inputs_are_refused():
    compiled, _, _ = _both(lambda x: fnp.sin(x) + 1.0, np.ones(3))
    with pytest.raises(InvalidInputError, match=r"compiled program built for float64\[3\]"):
        compiled.call(np.ones(4))


def test_an_error_in_a_callout_reaches_the_caller():
    def f(x):
        return fgrad.pure_callback(_fails, x, x) * 2.0
    x = np.ones(3)
    graph = optimize(fgrad.make_graph(f)(x), np)
    compiled = compile_program(graph)
    with pytest.raises(RuntimeError, match="the callback failed"):
        compiled.call(x)


def _fails(x):
    raise RuntimeError("the callback failed")


def test_a_failing_compile_is_logged_and_the_graph_runs_on(monkeypatch, caplog):
    monkeypatch.setenv(PROGRAM_ENV, "all")
    n = program.MAX_ARGUMENTS
    f = fgrad.jit(lambda xs: [x * 2.0 for x in xs])      # n inputs, n outputs
    xs = [np.full(2, float(k)) for k in range(n)]
    with caplog.at_level(logging.WARNING, logger="fgrad.jit"):
        f(xs)
        assert f.wait_compiled()
    assert "program tier failed (NotImplementedError" in caplog.text
    assert "more than the 1024 arguments" in caplog.text
    assert f.compile_info()[0].tier in ("numpy", "kernels")
    np.testing.assert_array_equal(f(xs)[-1], xs[-1] * 2.0)


# ---------------------------------------------------------------------------
# The buffer plan
# ---------------------------------------------------------------------------


def test_the_plan_reuses_dead_buffers_and_takes_dying_operands():
    steps = [Step(["x"], ["a"], {}, {}), Step(["a"], ["b"], {"b": ["a"]}, {}),
             Step(["b"], ["v"], {}, {"v": "b"}), Step(["x"], ["c"], {}, {}),
             Step(["v", "c"], ["y"], {}, {})]
    plan = plan_buffers(steps, lambda v: 100, placed={"x", "y"})
    assert plan.offsets["b"] == plan.offsets["a"] == plan.offsets["v"] == 0
    assert plan.in_place == [(1, "b", "a")] and plan.views == ["v"]
    assert plan.offsets["c"] == 128                  # v (b's buffer) is still live
    assert plan.arena_bytes == plan.peak_live_bytes == 256


def test_a_value_two_steps_write_keeps_one_buffer_from_the_first():
    # a loop writes part of s, a later step the rest (`_written_in_place`):
    # s lives from the first, and the value made between them is elsewhere
    steps = [Step(["x"], ["s"], {}, {}), Step(["x"], ["t"], {}, {}),
             Step(["t"], ["s"], {}, {}), Step(["s"], ["y"], {}, {})]
    plan = plan_buffers(steps, lambda v: 100, placed={"x", "y"})
    assert plan.offsets == {"s": 0, "t": 128} and plan.arena_bytes == 256


def _peak(fn, *args):
    gc.collect()
    tracemalloc.start()
    try:
        fn(*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("size", [64, 100_000])
def test_peak_memory_is_at_most_the_interpreted_tiers(size):
    def loss(w, x):
        h = fnp.tanh(x @ w)
        return fnp.sum(fnp.exp(-h * h) * fnp.sin(h) + h / 3.0)
    w, x = np.full((8, 4), 0.1), np.linspace(-1, 1, size * 8).reshape(size, 8)
    graph = optimize(fgrad.make_graph(fgrad.value_and_grad(loss))(w, x), np)
    compiled = compile_program(graph)
    numpy_tier, kernels_tier = generate(graph, np).fn, generate(fuse_for_cpu(graph), np).fn
    for run in (compiled.call, numpy_tier, kernels_tier):
        run(w, x)                                     # warm: first-call allocations
    # the whole call (arena, outputs, the callouts' Python objects) against
    # the NumPy calls; the planned memory against the fused kernels' code
    assert _peak(compiled.call, w, x) <= _peak(numpy_tier, w, x)
    outputs = sum(v.aval.size * 8 for v in graph.outvars)
    assert compiled.plan.arena_bytes + outputs <= _peak(kernels_tier, w, x)


def test_a_large_arena_is_kept_as_the_spare_for_the_next_call():
    def loss(w, x):
        h = fnp.tanh(x @ w)
        return fnp.sum(fnp.exp(-h * h) * fnp.sin(h) + h / 3.0)
    w, x = np.full((8, 4), 0.1), np.linspace(-1, 1, 800_000).reshape(100_000, 8)
    compiled = compile_program(optimize(fgrad.make_graph(fgrad.grad(loss))(w, x), np))
    assert compiled.plan.arena_bytes > program.KEEP_ARENA_BYTES
    first = compiled.call(w, x)
    # the second call takes the first's arena: it allocates its output only
    assert _peak(compiled.call, w, x) < compiled.plan.arena_bytes
    np.testing.assert_array_equal(compiled.call(w, x), first)
    # a smaller program's call takes it too; a larger one's lets it go
    small = compile_program(optimize(fgrad.make_graph(fgrad.grad(loss))(w, x[:50_000]), np))
    assert program.KEEP_ARENA_BYTES < small.plan.arena_bytes < compiled.plan.arena_bytes
    assert _peak(small.call, w, x[:50_000]) < small.plan.arena_bytes
    np.testing.assert_allclose(small.call(w, x[:50_000])[0], fgrad.grad(loss)(w, x[:50_000]),
                               rtol=1e-10)


def test_a_program_loads_from_the_disk_cache():
    g = optimize(fgrad.make_graph(lambda x: fnp.sum(fnp.tanh(x) * 3.0))(np.ones(5)), np)
    first, again = compile_program(g), compile_program(g)
    assert again.native.key == first.native.key and again.native.loaded


def test_a_program_is_built_only_where_it_is_estimated_to_pay(monkeypatch, caplog):
    monkeypatch.setenv(PROGRAM_ENV, "1")

    def matmuls(x, w):             # every equation a callout (loops are a later stage)
        for _ in range(4):
            x = fnp.cumsum(x, axis=0) @ w
        return x
    few = fgrad.jit(matmuls)
    many = fgrad.jit(lambda x: (fnp.max(fnp.sin(x), axis=0) + fnp.min(x.T, axis=1))
                     * fnp.sum(x, axis=0) - fnp.mean(x))
    x, w = np.ones((2, 2)), np.eye(2)
    with caplog.at_level(logging.INFO, logger="fgrad.jit"):
        few(x, w)
        many(x)
        assert few.wait_compiled() and many.wait_compiled()
    assert "matmuls: program tier not built" in caplog.text
    assert few.compile_info()[0].tier != "program" and many.compile_info()[0].tier == "program"
    np.testing.assert_array_equal(few(x, w), np.cumsum(np.cumsum(np.cumsum(np.cumsum(
        x, axis=0), axis=0), axis=0), axis=0))


def test_a_buffer_read_through_a_view_too_is_not_written_in_place():
    steps = [Step(["x"], ["a"], {}, {}), Step(["a"], ["v"], {}, {"v": "a"}),
             Step(["a", "v"], ["b"], {"b": ["a"]}, {}), Step(["b"], ["y"], {}, {})]
    plan = plan_buffers(steps, lambda v: 64, placed={"x", "y"})
    assert plan.in_place == [] and plan.offsets["b"] != plan.offsets["a"]


def test_a_kernel_writing_memory_apart_from_its_operands_says_so_and_one_in_place_not(
        monkeypatch):
    # noalias outputs let LLVM vectorise a loop without comparing addresses
    # first; a kernel writing into its dying operand's buffer must not have them
    texts = []
    compile_ir = program.compile_ir
    # (the IR, or the function writing it where the graph names the program)
    monkeypatch.setattr(program, "compile_ir", lambda text, *args, **kwargs: (
        texts.append(text() if callable(text) else text), compile_ir(text, *args, **kwargs))[1])

    def f(x):
        y = fnp.sin(x) * 2.0                            # into a buffer of its own
        return fnp.flip(fnp.flip(y) * 3.0 + 1.0)        # into the dying flipped copy
    compiled, got, want = _both(f, np.linspace(-1, 1, 10))
    _agree(got, want, exact=True)
    assert len(compiled.plan.in_place) == 1
    kernels = [line for line in texts[0].splitlines() if line.startswith('define void @"kernel')]
    assert ["noalias" in line for line in kernels] == [True, False]



def test_loops_of_a_few_elements_and_strided_copies_are_left_scalar(monkeypatch):
    # LLVM is asked not to vectorise a kernel called for FEW_ELEMENTS or
    # fewer (its vector loop would never run; compiling it cost most of an
    # ODE program's compile) nor a strided copy; the 64-element kernel is
    # vectorised as before, and every result is the interpreted tier's bits
    texts = []
    compile_ir = program.compile_ir
    monkeypatch.setattr(program, "compile_ir", lambda text, *args, **kwargs: (
        texts.append(text() if callable(text) else text), compile_ir(text, *args, **kwargs))[1])

    def f(x, y):
        small = fnp.sin(y) * 2.0 + 1.0                  # 3 elements
        big = fnp.cos(x) * 3.0 - 1.0                    # 64 elements
        return small * y, fnp.transpose(big)            # and a strided copy
    compiled, got, want = _both(f, np.linspace(-1, 1, 64).reshape(8, 8), np.linspace(0, 1, 3))
    _agree(got, want, exact=True)
    main, *kernels = texts[0].split('define void @"kernel')
    assert "!llvm.loop" in main                         # the transpose's copy
    sizes = {}
    for line in main.splitlines():
        if 'call void @"kernel' in line:
            name, size = line.split('@"kernel')[1].split('"(i64 ')
            sizes[name] = max(sizes.get(name, 0), int(size.split(",")[0]))
    scalar = {k.split('"')[0] for k in kernels if "!llvm.loop" in k.split("\n}")[0]}
    assert sorted(sizes.values()) == [3, 64]
    assert scalar == {name for name, size in sizes.items() if size <= 4}
    assert '!"llvm.loop.vectorize.enable", i1 0' in texts[0]


_SECOND_PROCESS = """
import sys, json
sys.modules['numba'] = None             # importing it raises: the program needs LLVM only
import numpy as np, fgrad, fgrad.numpy as fnp
# (a product: BLAS's address differs from one process to the next, and the
# cached machine code reads it from the table each call passes)
f = fgrad.jit(fgrad.grad(lambda x: fnp.sum(fnp.tanh(fnp.sin(x) * 2.0 + x) ** 2)
                         + fnp.sum(fnp.max(x.T, axis=1)) + fnp.sum(x @ x.T)))
x = np.linspace(-3, 3, 12).reshape(3, 4)
f(x)
f.wait_compiled()
program = f.lower(x).program
print(json.dumps([f.compile_info()[0].tier, program.native.loaded, f(x).tolist(),
                  program.callouts]))
"""


def test_a_second_process_loads_the_program_from_the_disk_cache(tmp_path):
    env = {**os.environ, "FGRAD_KERNEL_CACHE": str(tmp_path), PROGRAM_ENV: "all",
           "FGRAD_JIT_COMPILE": "background"}
    runs = [json.loads(subprocess.run([sys.executable, "-c", _SECOND_PROCESS], env=env,
                                      capture_output=True, text=True, check=True).stdout)
            for _ in range(2)]
    assert [run[:2] for run in runs] == [["program", False], ["program", True]]
    assert runs[0][2] == runs[1][2]
    assert runs[0][3] == [] or gemm_table() is None     # the product a BLAS call
    x = np.linspace(-3, 3, 12).reshape(3, 4)
    np.testing.assert_allclose(runs[0][2], fgrad.grad(
        lambda x: fnp.sum(fnp.tanh(fnp.sin(x) * 2.0 + x) ** 2) + fnp.sum(fnp.max(x.T, axis=1))
        + fnp.sum(x @ x.T))(x), rtol=1e-12)


# ---------------------------------------------------------------------------
# Products as BLAS calls (stage 2)
# ---------------------------------------------------------------------------

needs_blas = pytest.mark.skipif(gemm_table() is None, reason="SciPy's Cython BLAS missing")


def _matmul_cases():
    rng = np.random.default_rng(0)
    shapes = [((1, 1), (1, 1)), ((3, 5), (5, 7)), ((64, 63), (63, 1)), ((1, 64), (64, 33)),
              ((9,), (9, 4)), ((4, 9), (9,)), ((6, 2, 3), (3, 5)), ((3, 5), (4, 5, 2)),
              ((2, 1, 3, 4), (5, 4, 2)), ((7, 1, 1), (7, 1, 8))]
    for dtype in ("float64", "float32"):
        for a, b in shapes:
            yield (rng.standard_normal(a).astype(dtype), rng.standard_normal(b).astype(dtype))


@needs_blas
@pytest.mark.parametrize("a, b", list(_matmul_cases()),
                         ids=lambda x: f"{x.dtype}{x.shape}".replace(" ", ""))
def test_products_are_blas_calls_and_agree_with_numpy(a, b):
    compiled, got, want = _both(lambda a, b: a @ b, a, b)
    assert compiled.callouts == []
    # SciPy's BLAS, not always NumPy's: equal to rounding
    _agree(got, want)
    # operands read transposed (gemm's flags, the transpose never made)
    swap = fnp.swapaxes
    if a.ndim > 1 and b.ndim > 1:
        at, bt = np.swapaxes(a, -1, -2).copy(), np.swapaxes(b, -1, -2).copy()
        for fun, args in [(lambda at, b: swap(at, -1, -2) @ b, (at, b)),
                          (lambda a, bt: a @ swap(bt, -1, -2), (a, bt)),
                          (lambda at, bt: swap(at, -1, -2) @ swap(bt, -1, -2), (at, bt))]:
            compiled, got, want = _both(fun, *args)
            assert compiled.callouts == [] and len(compiled.steps) == 1
            _agree(got, want)


@needs_blas
def test_products_blas_does_not_compute_stay_callouts():
    x, i = np.ones((3, 4)), np.ones((4, 2), np.int64)
    mixed, _, _ = _both(lambda x, y: x @ y, x, np.ones((4, 2), np.float32))
    ints, got, want = _both(lambda j, i: j @ i, np.ones((3, 4), np.int64), i)
    empty, got_empty, want_empty = _both(lambda x, y: x @ y, np.ones((3, 0)), np.ones((0, 2)))
    assert [c.split(": ")[1] for c in mixed.callouts + ints.callouts + empty.callouts] \
        == ["matmul"] * 3
    _agree(got + got_empty, want + want_empty, exact=True)


def _rnn(w, u, xs):
    h = fnp.tanh(xs[0] @ u)
    for t in range(1, xs.shape[0]):
        h = fnp.tanh(h @ w + xs[t] @ u)
    return fnp.sum(h ** 2)


def _mlp(w1, w2, x):
    return fnp.mean(fnp.tanh(fnp.maximum(x @ w1, 0.0) @ w2) ** 2)


@needs_blas
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gradients_of_an_rnn_and_an_mlp_have_no_callouts(dtype):
    rng = np.random.default_rng(1)
    rnn_args = (rng.standard_normal((5, 5)) / 3, rng.standard_normal((3, 5)) / 2,
                rng.standard_normal((4, 2, 3)))
    mlp_args = (rng.standard_normal((7, 9)) / 3, rng.standard_normal((9, 3)) / 3,
                rng.standard_normal((6, 7)))
    for fun, args in [(_rnn, rnn_args), (_mlp, mlp_args)]:
        args = tuple(a.astype(dtype) for a in args)
        compiled, got, want = _both(fgrad.grad(fun, (0, 1)), *args)
        assert compiled.callouts == []
        _agree(got, want)


def test_basic_indexing_is_a_strided_copy():
    x = np.arange(120.0).reshape(4, 5, 6)

    def f(x):
        return x[3], x[-1, 2], x[1:3, ::-2, None], x[..., 4], x[2, 3, 1], x[2, ..., 1], x[5:9]
    compiled, got, want = _both(f, x)
    assert compiled.callouts == []
    _agree(got, want, exact=True)


_EINSUMS = [("ij,jk->ik", (2, 3), (3, 4)), ("ij,kj->ki", (2, 3), (4, 3)),
            ("bij,bjk->bik", (5, 2, 3), (5, 3, 4)), ("ij,j->i", (3, 4), (4,)),
            ("i,i->", (4,), (4,)), ("i,j->ij", (3,), (4,)), ("abc,cbd->da", (2, 3, 4), (4, 3, 5)),
            ("bi,bi->b", (3, 4), (3, 4)), ("ij,ij->", (3, 4), (3, 4)), ("ij,jk", (2, 3), (3, 2)),
            ("abij,bjk->bkia", (2, 3, 4, 5), (3, 5, 2))]


@needs_blas
@pytest.mark.parametrize("subscripts, a, b", _EINSUMS, ids=[e[0] for e in _EINSUMS])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_einsums_of_two_operands_are_gemm_calls(subscripts, a, b, dtype):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(a).astype(dtype), rng.standard_normal(b).astype(dtype)
    for fun, args in [(lambda a, b: fnp.einsum(subscripts, a, b), (a, b)),
                      (lambda a: fnp.einsum(subscripts, a, b), (a,)),      # b a constant
                      (fgrad.grad(lambda a, b: fnp.sum(fnp.einsum(subscripts, a, b) ** 2),
                                  (0, 1)), (a, b))]:
        compiled, got, want = _both(fun, *args)
        assert compiled.callouts == []
        _agree(got, want)


@needs_blas
def test_einsums_gemm_does_not_compute_stay_callouts():
    x = np.arange(12.0).reshape(3, 4)
    # (fun, args, whether an einsum stays a callout)
    for fun, args, called in [
            (lambda x: fnp.einsum("ii->i", x[:, :3]), (x,), True),            # one operand
            (lambda x, y: fnp.einsum("ij,jk->i", x, y), (x, x.T), True),      # k summed in one
            (lambda x, y: fnp.einsum("ij,jk->ik", x, y), (x.astype(int), x.T.astype(int)),
             True),                                                          # integers
            (lambda x, y: fnp.einsum("ij,jk,kl->il", x, y, x), (x, x.T), False)]:  # pairs
        compiled, got, want = _both(fun, *args)
        _agree(got, want)
        assert any("einsum" in c for c in compiled.callouts) == called


def _spd(rng, shape, dtype):
    a = rng.standard_normal(shape)
    return (a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])).astype(dtype)


@needs_blas
@pytest.mark.parametrize("n", [1, 3, LANES_MAX_N + 2])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_solves_and_cholesky_are_lapack_calls(n, dtype):
    rng = np.random.default_rng(n)
    a, b = _spd(rng, (2, n, n), dtype), rng.standard_normal((2, n, 3)).astype(dtype)
    v = rng.standard_normal(n).astype(dtype)
    solve, cholesky = fnp.linalg.solve, fnp.linalg.cholesky
    # (fun, args, steps): a stack of as many small matrices as the LU
    # kernels factor at once runs those kernels' loops, defined in the
    # program, which were measured faster; fewer matrices (two) are LAPACK
    # calls, as large ones are, several right-hand sides too while too few to
    # wake OpenBLAS's threads
    many = _spd(rng, (lanes(dtype), n, n), dtype)
    vs = rng.standard_normal((lanes(dtype), n, 1)).astype(dtype)
    cases = [(lambda a, b: solve(a, b), (a, b), {"LUFactor", "LUSolve"}),
             (lambda a, v: solve(a[1], v), (a, v), {"LUFactor", "LUSolve"}),
             (fgrad.grad(lambda a, v: fnp.sum(solve(a, v) ** 2), (0, 1)), (a[0], v),
              {"LUFactor", "LUSolve"}),
             (lambda m, vs: solve(m, vs), (many, vs),
              {"LUFactor", "LUSolve"} if n > LANES_MAX_N else {"LanesFactor", "LanesSolve"}),
             (cholesky, (a,), {"Cholesky"}), (lambda a: cholesky(a[0]), (a,), {"Cholesky"})]
    for fun, args, lapack in cases:
        compiled, got, want = _both(fun, *args)
        assert {type(s).__name__ for s in compiled.steps} >= lapack
        called = {c.split(": ")[1] for c in compiled.callouts}
        assert called == set()
        # LAPACK's getrs here, substitution loops of fgrad's own there: to rounding
        for g, w in zip(got, want):
            tol = 1e-4 if dtype == "float32" else 1e-10
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


@needs_blas
@pytest.mark.parametrize("n", [1, 3, LANES_MAX_N + 2])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_det_and_slogdet_are_getrf_and_numpys_sums(n, dtype):
    a = np.random.default_rng(n).standard_normal((3, n, n)).astype(dtype)
    a[2] = 0                                    # singular: sign 0, log -inf, det 0
    for fun in (fnp.linalg.det, lambda a: tuple(fnp.linalg.slogdet(a))):
        compiled, got, want = _both(fun, a)
        assert compiled.callouts == []
        # NumPy's computation, float32 in float64 as NumPy's: bitwise where
        # both load the same LAPACK build, to rounding where not
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6 if dtype == "float32" else 1e-11)


@needs_blas
@needs_blas
@pytest.mark.parametrize("n", [1, 3, 7])
def test_lu_pivots_of_one_small_matrix_are_the_interpreted_tiers(n):
    # getrf here, the LU kernels' own partial pivoting there:
    # the same pivots, factors to rounding
    a = np.random.default_rng(n).standard_normal((n, n))
    compiled, (lu, piv), (lu_want, piv_want) = _both(lambda a: solve_factors_p.bind(a), a)
    assert compiled.callouts == []
    np.testing.assert_array_equal(piv, piv_want)
    np.testing.assert_allclose(lu, lu_want, rtol=1e-12, atol=1e-14)


def test_lu_factors_of_large_matrices_are_the_interpreted_tiers_bitwise():
    # beyond LANES_MAX_N both tiers factor by the same getrf
    a = _spd(np.random.default_rng(2), (LANES_MAX_N + 5,) * 2, "float64")
    compiled, got, want = _both(lambda a: solve_factors_p.bind(a), a)
    assert compiled.callouts == []
    _agree(got, want, exact=True)


@needs_blas
@pytest.mark.parametrize("fun, message", [
    (lambda a: fnp.linalg.solve(a, fnp.ones(len(a))), "Singular matrix"),
    (fnp.linalg.cholesky, "Matrix is not positive definite")])
def test_a_singular_matrix_raises_numpys_error(fun, message):
    n = LANES_MAX_N + 1                 # factored by getrf in both tiers
    graph = optimize(fgrad.make_graph(fun)(np.eye(n)), np)
    compiled = compile_program(graph)
    assert compiled.callouts == []
    singular = np.eye(n)
    singular[3] = 2 * singular[5]
    for run in (compiled.call, generate(graph, np).fn):
        with pytest.raises(np.linalg.LinAlgError, match=message):
            run(singular)
    np.testing.assert_allclose(compiled.call(2 * np.eye(n))[0], fun(2 * np.eye(n)))


def test_stop_gradient_is_a_view():
    x = np.linspace(-1, 1, 6).reshape(2, 3)
    compiled, got, want = _both(lambda x: fgrad.stop_gradient(x) * 2.0 + x, x)
    assert compiled.callouts == [] and len(compiled.steps) == 2
    _agree(got, want, exact=True)


_ROWS = np.array([0, 2, -1, 2])


@pytest.mark.parametrize("dtype", ["float64", "float32", "int32", "uint8", "bool"])
def test_gathers_and_scatters_of_one_index_array_are_loops(dtype):
    x = (np.arange(20) % 7).reshape(4, 5).astype(dtype)
    j = np.array([[1, 3], [3, 0]], np.uint8)
    cases = [lambda x: x[_ROWS], lambda x: x[:, _ROWS], lambda x: fnp.take(x, _ROWS, axis=1),
             lambda x: fnp.take(x, _ROWS), lambda x: x[..., j]]
    if dtype != "bool":
        # scatter-add: repeated indices sum in numpy.add.at's order, bitwise
        cases.append(lambda x: fgrad.at(fnp.zeros_like(x))[:, _ROWS].add(x[:, :4]))
    if dtype.startswith("float"):
        cases.append(fgrad.grad(lambda x: fnp.sum(x[:, _ROWS] * x[_ROWS][:, :4].T)))
    for fun in cases:
        compiled, got, want = _both(fun, x)
        assert compiled.callouts == []
        assert {type(s).__name__ for s in compiled.steps} & {"Gather", "ScatterAdd"}
        _agree(got, want, exact=True)


def test_a_scatter_add_of_values_broadcast_to_its_blocks_reads_them_broadcast():
    # a vmapped sort's gradient adds one cotangent row, the same for every
    # example, at each example's order (a (4,) scatter-added as (3, 4)
    # blocks): the program read rows past the values' end for examples 1, 2
    w = np.array([1.0, 2.0, 3.0, 4.0])
    x = np.array([[0.3, -0.2, 0.9, 0.1], [0.5, 0.4, -0.7, 0.2], [0.1, 0.2, 0.3, -0.4]])
    compiled, got, want = _both(fgrad.vmap(fgrad.grad(lambda v: fnp.sum(fnp.sort(v) * w))), x)
    assert "ScatterAdd" in {type(s).__name__ for s in compiled.steps}
    _agree(got, want, exact=True)
    np.testing.assert_array_equal(got[0], [[3, 1, 4, 2], [4, 3, 1, 2], [2, 3, 4, 1]])


@pytest.mark.parametrize("dtype", ["float64", "float32", "int32", "uint8", "bool"])
def test_sets_of_one_index_array_are_loops(dtype):
    x = (np.arange(20) % 7).reshape(4, 5).astype(dtype)
    v = (np.arange(20) % 5).reshape(4, 5).astype(dtype)
    whole = ("slice", 0, 4, None)           # 0:4 of a 4-row axis, as a traced index spells it
    cases = [(lambda x, v: fgrad.at(x)[_ROWS].set(v), (x, v)),
             (lambda x, v: fgrad.at(x)[:, _ROWS].set(v[:, :4]), (x, v)),  # the last of 2, 2 wins
             (lambda x, v: fgrad.at(x)[:, _ROWS].set(v[0, 0]), (x, v)),          # one value
             (lambda x, v: fgrad.at(x)[_ROWS].set(v[1]), (x, v)),         # one row, broadcast
             (lambda x, v: fgrad.at(x)[:, _ROWS].set(v[:, :1]), (x, v)),
             (lambda x, v: fgrad.at(x)[_ROWS].set(1), (x, v)),  # a literal, cast exactly
             (lambda x, k: set_p.bind(x, x[:, :2], k, spec=(whole, ("array", 0))),
              (x, np.array([4, -1]))),                                # a traced index
             (lambda x, k: getitem_p.bind(x, k, spec=(whole, ("array", 0))),
              (x, np.array([4, -1])))]
    if dtype.startswith("float"):
        # the gradient writes a literal 0 where the values were
        cases.append((fgrad.grad(lambda x, v: fnp.sum(fgrad.at(x)[_ROWS].set(v[1] * 2.0) ** 2),
                                 argnums=(0, 1)), (x, v)))
    for fun, args in cases:
        compiled, got, want = _both(fun, *args)
        assert compiled.callouts == []
        assert {type(s).__name__ for s in compiled.steps} & {"Gather", "Set"}
        _agree(got, want, exact=True)


def test_a_set_of_a_literal_its_dtype_cannot_hold_stays_a_callout():
    # NumPy casts it (1.5 to 1, 0.1 rounded to float32): its code does
    x = np.arange(20).reshape(4, 5)
    for x, value, callouts in [(x.astype(np.int32), 1.5, ["set"]),
                               (x.astype(np.float32), 0.1, ["set"]),
                               (x.astype(np.int32), -0.0, []), (x.astype(np.float32), 0.5, [])]:
        compiled, got, want = _both(lambda x: fgrad.at(x)[_ROWS].set(value), x)
        assert [c.split(": ")[1] for c in compiled.callouts] == callouts
        _agree(got, want, exact=True)


@pytest.mark.parametrize("dtype", ["float64", "int32", "bool"])
def test_indices_of_several_arrays_on_adjacent_axes_are_loops(dtype):
    # as vmap writes a traced index: one array per axis, all of one shape
    x = (np.arange(60) % 7).reshape(3, 4, 5).astype(dtype)
    rows, cols = np.array([[2, 0], [2, -1]]), np.array([[1, 3], [1, 0]], np.uint8)
    v = (np.arange(20) % 3).reshape(2, 2, 5).astype(dtype)
    cases = [lambda x: x[rows, cols], lambda x: x[:, rows[0], cols[0]],
             lambda x: fgrad.at(x)[rows, cols].set(v),      # (2, 1) twice: the last wins
             lambda x: getitem_p.bind(x, cols, rows, spec=(("array", 1), ("array", 0)))]
    if dtype != "bool":
        cases.append(lambda x: fgrad.at(fnp.zeros_like(x))[rows, cols].add(x[0, :2, :2, None]))
    if dtype == "float64":
        cases.append(fgrad.grad(lambda x: fnp.sum(x[rows, cols] ** 2)))
    for fun in cases:
        compiled, got, want = _both(fun, x)
        assert compiled.callouts == []
        assert {type(s).__name__ for s in compiled.steps} & {"Gather", "Set", "ScatterAdd"}
        _agree(got, want, exact=True)


def test_gradients_of_basic_indexing_write_into_zeros_as_pieces():
    x = np.arange(120.0).reshape(4, 5, 6)

    def f(x):
        return fnp.sum(x[3] ** 2) + fnp.sum(x[1:3, ::-2, None] * 3.0) + fnp.sum(x[2, ..., 1] ** 3)
    compiled, got, want = _both(fgrad.grad(f), x)
    assert compiled.callouts == []
    assert "_Pieces" in {type(s).__name__ for s in compiled.steps}
    _agree(got, want)


def test_an_index_out_of_bounds_raises_numpys_index_error():
    x = np.arange(20.0).reshape(4, 5)
    graph = optimize(fgrad.make_graph(lambda x, k: x[:, k])(x, _ROWS), np)
    compiled = compile_program(graph)
    assert compiled.callouts == []
    for run in (compiled.call, generate(graph, np).fn):
        with pytest.raises(IndexError, match="index 9 is out of bounds for axis 1 with size 5"):
            run(x, np.array([0, 9, -5, 1]))
    np.testing.assert_array_equal(compiled.call(x, np.array([-5, 4, 0, 0]))[0],
                                  x[:, [0, 4, 0, 0]])


def test_an_index_out_of_bounds_of_several_arrays_raises_numpys_index_error():
    x = np.arange(20.0).reshape(4, 5)
    graph = optimize(fgrad.make_graph(lambda x, i, k: x[i, k])(x, _ROWS, _ROWS), np)
    compiled = compile_program(graph)
    assert compiled.callouts == []
    for run in (compiled.call, generate(graph, np).fn):
        with pytest.raises(IndexError, match="index 7 is out of bounds for axis 1 with size 5"):
            run(x, np.array([0, 1, 2, 3]), np.array([1, 7, 0, 0]))
    np.testing.assert_array_equal(compiled.call(x, _ROWS, _ROWS)[0], x[_ROWS, _ROWS])


@pytest.mark.parametrize("dtype", ["float64", "int32", "bool"])
def test_index_arrays_broadcast_together_are_loops(dtype):
    # x[rows[:, None], cols]: each array read at its broadcast position
    x = (np.arange(60) % 7).reshape(3, 4, 5).astype(dtype)
    rows, cols = np.array([2, 0, -1]), np.array([[1], [3]], np.uint8)
    v = (np.arange(30) % 5).reshape(3, 2, 5).astype(dtype)
    cases = [lambda x: x[rows[:, None], cols.T], lambda x: x[:, rows[:, None], _ROWS],
             lambda x: x[np.array(1), cols], lambda x: x[..., rows[:, None], np.array([4, 1])],
             lambda x: fgrad.at(x)[rows[:, None], cols.T].set(v),
             lambda x: fgrad.at(x)[rows[:, None], cols.T].set(x[0, 0, 0])]
    if dtype != "bool":
        cases.append(lambda x: fgrad.at(x)[rows[:, None], cols.T].add(x[0, :3, :2, None]))
    if dtype == "float64":
        cases.append(fgrad.grad(lambda x: fnp.sum(x[rows[:, None], cols.T] ** 2)))
    for fun in cases:
        compiled, got, want = _both(fun, x)
        assert compiled.callouts == []
        _agree(got, want, exact=True)
    graph = optimize(fgrad.make_graph(lambda x, i, k: x[i[:, None], k])(x, rows, _ROWS), np)
    compiled = compile_program(graph)
    for run in (compiled.call, generate(graph, np).fn):
        with pytest.raises(IndexError, match="index 4 is out of bounds for axis 1 with size 4"):
            run(x, rows, np.array([0, 4, 1, 2]))


@pytest.mark.parametrize("dtype", ["float64", "int32", "bool"])
def test_index_arrays_on_axes_apart_are_loops(dtype):
    # x[i, :, j]: the arrays' axes first in the result, as NumPy puts them
    x = (np.arange(360) % 7).reshape(3, 4, 5, 6).astype(dtype)
    i, j = np.array([[1], [0]]), np.array([3, -1])
    cases = [lambda x: x[i, :, j], lambda x: x[i[:, 0], :, :, j],
             lambda x: x[:, i, :, np.array([4, 1])], lambda x: x[i, :, j, :],
             lambda x: fgrad.at(x)[i[:, 0], :, j].set(x[0, :2, :4, :]),
             lambda x: fgrad.at(x)[i[:, 0], :, j].set(x[0, 0, 0, 0])]
    if dtype != "bool":
        cases.append(lambda x: fgrad.at(x)[np.array([1, 1]), :, np.array([3, 3])].add(
            x[0, :2, :4, :]))
    if dtype == "float64":
        cases.append(fgrad.grad(lambda x: fnp.sum(x[np.array([1, 0, 1]), :, j[:, None]] ** 2)))
    for fun in cases:
        compiled, got, want = _both(fun, x)
        assert compiled.callouts == []
        _agree(got, want, exact=True)


def test_other_indices_stay_callouts():
    x = np.arange(20.0).reshape(4, 5)
    # a slice beside the array that is not whole
    for fun in [lambda x: x[_ROWS, 1:3], lambda x: x.reshape(2, 2, 5)[np.array([1, 0]), :1]]:
        compiled, got, want = _both(fun, x)
        assert [c.split(": ")[1] for c in compiled.callouts] == ["getitem"]
        _agree(got, want, exact=True)


_WITHOUT_SCIPY = """
import sys, json
sys.modules['scipy'] = None             # importing it raises: no BLAS table
import numpy as np, fgrad, fgrad.numpy as fnp
from fgrad.compiler.blas import gemm_table
from fgrad.compiler.passes import optimize
from fgrad.compiler.program import compile_program
x, w = np.linspace(-1, 1, 6).reshape(3, 2), np.linspace(0, 1, 8).reshape(2, 4)
program = compile_program(optimize(fgrad.make_graph(lambda x, w: fnp.tanh(x @ w) @ w.T)(x, w),
                                   np))
print(json.dumps([gemm_table() is None, program.callouts,
                  bool(np.allclose(program.call(x, w)[0], np.tanh(x @ w) @ w.T, 1e-13))]))
"""


def test_without_scipys_blas_products_are_callouts():
    run = subprocess.run([sys.executable, "-c", _WITHOUT_SCIPY], capture_output=True,
                         text=True, check=True)
    assert json.loads(run.stdout) == [True, ["0: matmul", "3: matmul"], True]


@pytest.mark.skipif(os.cpu_count() == 1, reason="BLAS has one thread on one CPU")
def test_a_program_calling_blas_and_calling_out_is_not_built_where_it_must_pay(monkeypatch):
    # SciPy's BLAS in the program and NumPy's in a callout keep two thread pools
    # spinning (docs/jit.md): such a graph stays in the kernels tier by default
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    def looped(product, n):
        def f(x):
            y = lax.fori_loop(0, 100, lambda i, y: fnp.sin(product(y)), x)
            return fnp.cumsum(y)                # one callout
        return fgrad.make_graph(f)(np.ones((n, n)))
    w = np.eye(48) * 0.5                        # 48**3 multiply-adds: OpenBLAS's threads
    with_gemm, without = looped(lambda y: y @ w, 48), looped(lambda y: y * 0.5, 48)
    assert not pays(program_steps(with_gemm), with_gemm)
    assert pays(program_steps(without), without)
    small = np.eye(3) * 0.5                     # a product too small to wake them
    with_small_gemm = looped(lambda y: y @ small, 3)
    assert pays(program_steps(with_small_gemm), with_small_gemm)
    # with BLAS held to one thread there is no pool to spin: it is built
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    assert pays(program_steps(with_gemm), with_gemm)


def _kinds(compiled):
    return [type(s).__name__ for s in compiled.steps]


def test_stacked_jvps_are_written_into_their_stack_by_one_loop():
    # each jvp stacks its results (the tangent of a stack), between the
    # jvps; the stacks wait for the loop, which computes every column with
    # its intermediates in registers and writes it straight into its place
    # in the stack of stacks (`_written_in_place`): no copy is left
    x = np.linspace(0.5, 2.0, 7)

    def columns(a, b):
        def f(a, b):
            return fnp.stack([fnp.sin(a) * b, a / (a + b)])
        return fnp.stack([fgrad.jvp(lambda a: f(a, b), (a,), (fnp.ones_like(a),))[1],
                          fgrad.jvp(lambda b: f(a, b), (b,), (fnp.ones_like(b),))[1]])
    compiled, got, want = _both(columns, x, x[::-1].copy())
    assert compiled.callouts == [] and set(_kinds(compiled)) == {"_Kernel"}
    _agree_as_computed(compiled, got, want)


def test_a_loops_results_go_straight_into_a_transposed_stack():
    # GradBench's ba: columns of jvps stacked, transposed to (observations,
    # 2, columns) and flattened beside another piece. The one loop writes
    # each of its results at a stride into the returned array: no stack,
    # no transpose, no concatenate is copied
    x = np.linspace(0.5, 2.0, 300)

    def values(a, b):
        columns = [fnp.stack([fnp.sin(a) * b + j, fnp.cos(a) / (b + j)]) for j in range(8)]
        stacked = fnp.transpose(fnp.stack(columns), (2, 1, 0))
        return fnp.concatenate([fnp.reshape(stacked, -1), b * b - 1.0])
    compiled, got, want = _both(values, x, x[::-1].copy())
    assert compiled.callouts == [] and set(_kinds(compiled)) == {"_Kernel"}
    strides = [stride for s in compiled.steps for stride in s.spec.out_strides]
    assert sorted(strides) == [1] + [16] * 16
    _agree_as_computed(compiled, got, want)


def test_a_loop_with_many_results_calls_the_vector_functions():
    # the kernels' tier calls them from loops of at most 12 results (it
    # cannot tell the arrays apart); a program's loop, whose results are
    # noalias, whatever their number
    x = np.linspace(-3.0, 3.0, 300)
    compiled, got, want = _both(lambda a: [fnp.sin(a) * k for k in range(1, 15)], x)
    (kernel,) = compiled.steps
    assert len(kernel.outputs) == 14 and kernel.spec.vectorised
    _agree_as_computed(compiled, got, want)


def test_values_read_elsewhere_or_unevenly_placed_are_copied_into_the_stack():
    # the result returned itself, the input, and a (3, 4) result whose
    # transpose it is not in order in: each copied, into the returned array
    # where the others are written straight
    x = np.linspace(0.5, 2.0, 12)

    def values(a, b):
        y = fnp.sin(a) * b
        grid = fnp.reshape(a * b + 1.0, (3, 4))
        rows = fnp.transpose(fnp.stack([y, b, a / b]))
        return fnp.concatenate([fnp.reshape(rows, -1), fnp.reshape(grid.T, -1)]), y
    compiled, got, want = _both(values, x, x[::-1].copy())
    kinds = _kinds(compiled)
    assert compiled.callouts == [] and "_Pieces" in kinds and any(s.placed for s in
                                                                  compiled.steps
                                                                  if hasattr(s, "placed"))
    _agree_as_computed(compiled, got, want)


def test_an_operand_broadcast_in_two_ways_is_read_in_place():
    # the row sets the inner loop, so the column is read at offsets, not
    # broadcast out to a full array first
    x, column, row = (np.arange(24.0).reshape(2, 4, 3), np.arange(8.0).reshape(2, 4, 1),
                      np.arange(12.0).reshape(4, 3))
    compiled, got, want = _both(lambda x, c, r: x * c + r, x, column, row)
    assert _kinds(compiled) == ["_Kernel"]
    _agree_as_computed(compiled, got, want)


def test_a_transpose_undone_through_a_reshape_is_a_view():
    # a vmapped product moves the batch axis to the front and back again
    x = np.arange(60.0).reshape(5, 12)

    def f(x):
        moved = fnp.transpose(x.reshape(5, 3, 4), (1, 0, 2))          # (3, 5, 4)
        back = fnp.transpose(moved, (1, 0, 2)).reshape(5, 3, 2, 2)
        return fnp.transpose(back, (0, 1, 2, 3)) * 2.0, moved
    compiled, got, want = _both(f, x)
    assert _kinds(compiled).count("_Copy") == 1          # `moved`, an output
    _agree(got, want, exact=True)


def test_a_concatenate_read_by_one_loop_is_read_from_its_pieces():
    # a shift (concatenate([c, y[:-1]])) and a piecewise operand of rows are
    # no copies: the loop reading them runs once per piece, reading each
    # piece's source; a result returned as well, or read by two loops, is made
    x = np.linspace(0.5, 2.0, 12)
    m = x.reshape(4, 3)

    def shifted(x, y):
        return x * fnp.concatenate([fnp.ones(1), y[:-1]]) + fnp.concatenate([y[2:], x[:2]])

    def rows(m):
        return fnp.sin(fnp.concatenate([m[1:] * 2.0, fnp.zeros((0, 3)), m[:1]])) + m

    def in_place(x):
        y = fnp.sin(x)
        return fnp.concatenate([fnp.full(3, 2.0), y[:-3]]) * 2.0 + y

    def cotangent(x):
        # the shifts' cotangents: the element no piece writes is read as a zero
        return fgrad.grad(lambda x: fnp.sum(shifted(x, x) * fnp.cos(x)))(x)

    for fun, args in ((shifted, (x, x[::-1].copy())), (rows, (m,)), (in_place, (x,)),
                      (cotangent, (x,))):
        compiled, got, want = _both(fun, *args)
        assert compiled.callouts == [] and "_Pieces" not in _kinds(compiled)
        assert any(s.pieces for s in compiled.steps if isinstance(s, program._Kernel))
        _agree(got, want, exact=True)

    def kept(x):
        z = fnp.concatenate([fnp.ones(1), x[:-1]])
        return (z * 3.0 + 1.0) * x, z
    compiled, got, want = _both(kept, x)
    assert "_Pieces" in _kinds(compiled)
    _agree(got, want, exact=True)
    # zeros are read from a constant only where they are few
    long = np.linspace(0.5, 2.0, program.MAX_ZEROS_READ + 2)
    compiled, got, want = _both(fgrad.grad(lambda x: fnp.sum(x[:1] ** 2) + fnp.sum(fnp.sin(x))),
                                long)
    assert "_Pieces" in _kinds(compiled)
    _agree(got, want)


def test_a_runge_kutta_step_of_shifts_is_four_loops():
    # GradBench's ode: each of the four right-hand sides reads a shift of
    # the stage before, within one loop of the scan's body
    x = np.linspace(0.1, 1.0, 50)

    def solve(x):
        def rhs(y):
            return x * fnp.concatenate([fnp.ones(1), y[:-1]])

        def step(_, y):
            k1 = rhs(y)
            k2 = rhs(y + 0.05 * k1)
            k3 = rhs(y + 0.05 * k2)
            k4 = rhs(y + 0.1 * k3)
            return y + 0.1 / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return lax.fori_loop(0, 20, step, fnp.zeros_like(x))
    compiled, got, want = _both(solve, x)
    (loop,) = compiled.steps
    kinds = [type(s).__name__ for s in loop.inner_steps()]
    assert compiled.callouts == [] and kinds.count("_Kernel") == 4 and "_Pieces" not in kinds
    _agree(got, want, exact=True)
    # the gradient's reverse loop: the shifts' cotangents are no copies either
    compiled, got, want = _both(fgrad.grad(lambda x: solve(x)[-1]), x)
    forward, reverse = compiled.steps
    assert compiled.callouts == [] and "_Pieces" not in _kinds_of(reverse.inner_steps())
    _agree(got, want)


def _kinds_of(steps):
    return [type(s).__name__ for s in steps]
