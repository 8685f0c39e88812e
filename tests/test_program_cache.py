"""A compiled program is safe: no more memory than the interpreted tier, a
disk cache keyed on everything its machine code depends on, and a compile that
cannot be done logged and left on the interpreted tier.

Memory is counted by tracemalloc, which sees NumPy's arrays (the arena is
one): a program's call against the interpreted tier's (the generated NumPy
code of the same optimised graph), in bytes. The failures are real ones: IR
LLVM rejects, machine code filed under another program's key, and hosts
without llvmlite or SciPy (child processes where importing them fails).
"""
import gc
import json
import logging
import os
import shutil
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad import lax, nn
from fgrad.compiler import native
from fgrad.compiler import program as program_module
from fgrad.compiler.blas import gemm_table, provider
from fgrad.compiler.buffer_plan import Step, plan_buffers
from fgrad.compiler.codegen import generate
from fgrad.compiler.kernel_cache import CACHE_ENV
from fgrad.compiler.passes import optimize
from fgrad.compiler.program import (
    KEEP_ARENA_BYTES,
    PROGRAM_ENV,
    compile_program,
    pays,
    program_steps,
)

pytestmark = pytest.mark.skipif(not native.available(), reason="llvmlite missing")


# ---------------------------------------------------------------------------
# Peak memory: a program's against the interpreted tier's
# ---------------------------------------------------------------------------


def _peak(fn, *args):
    """The most bytes tracemalloc saw allocated at once during ``fn(*args)``."""
    fn(*args)                                   # first-call allocations apart
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        fn(*args)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def _peaks(fun, *args):
    """``(program's peak, interpreted tier's peak, program)`` of ``fun``'s
    graph: a program keeps its arena between calls (up to `KEEP_ARENA_BYTES`
    its own, a larger one as the spare the next call takes), which its calls
    then do not allocate, so it is counted in."""
    graph = optimize(fgrad.make_graph(fun)(*args), np)
    program = compile_program(graph)
    return (_peak(program.call, *args) + program.plan.arena_bytes,
            _peak(generate(graph, np).fn, *args), program)


def _mlp_loss(params, x, onehot):
    w1, b1, w2, b2 = params
    h = fnp.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    shifted = logits - fnp.max(logits, axis=1, keepdims=True)
    log_p = shifted - fnp.log(fnp.sum(fnp.exp(shifted), axis=1, keepdims=True))
    return -fnp.mean(fnp.sum(onehot * log_p, axis=1))


def _rnn_loss(params, xs):
    w, u = params

    def step(h, x):
        h = fnp.tanh(h @ w + x @ u)
        return h, h
    _, hs = lax.scan(step, fnp.zeros((xs.shape[1], w.shape[0])), xs)
    return fnp.sum(hs * hs)


def _walks(xs, start):
    # vmapped: the scan runs over axis 1 of xs, a transpose NumPy only
    # views, and its ys are moved back behind the batch axis
    def walk(x0, steps):
        return lax.scan(lambda x, dx: (x + fnp.sin(dx), x * 2.0), x0, steps)
    return fgrad.vmap(walk)(start, xs)


def _memory_cases():
    rng = np.random.default_rng(0)
    params = (rng.standard_normal((196, 64)) * 0.1, np.zeros(64),
              rng.standard_normal((64, 10)) * 0.1, np.zeros(10))
    x, onehot = rng.standard_normal((64, 196)), np.eye(10)[rng.integers(0, 10, 64)]
    rnn = (rng.standard_normal((16, 16)) * 0.2, rng.standard_normal((4, 16)) * 0.5)
    xs = rng.standard_normal((30, 8, 4))
    return {
        "mlp-grad": (fgrad.grad(_mlp_loss), (params, x, onehot)),
        "rnn-scan-value-and-grad": (fgrad.value_and_grad(_rnn_loss), (rnn, xs)),
        "vmapped-scan": (_walks, (rng.standard_normal((8, 500, 4)), np.zeros((8, 4)))),
    }


@pytest.mark.parametrize("name", sorted(_memory_cases()))
def test_a_programs_peak_memory_is_at_most_the_interpreted_tiers(name):
    fun, args = _memory_cases()[name]
    leaves, tree = fgrad.tree.tree_flatten(args)
    program_peak, interpreted_peak, program = _peaks(
        lambda *leaves: fun(*fgrad.tree.tree_unflatten(tree, list(leaves))), *leaves)
    assert program.callouts == []
    assert program_peak <= interpreted_peak, (program_peak, interpreted_peak, program.plan)


def _conv_loss(params, x):
    w, b = params
    h = fnp.tanh(nn.conv2d(x, w, b, padding=1))
    return fnp.mean(fnp.sin(h) * fnp.exp(-h * h) + h ** 2)


def test_a_program_whose_callouts_make_large_arrays_holds_no_more_than_the_interpreted_tier():
    # the convolution's columns (conv2d's and the weight gradient's im2col,
    # 1.2 MB) are callouts' results: copied into an arena, made before the
    # call, they were held twice, and the arena from the start (2.1 times
    # the interpreted peak); now every value is an array of its own, made
    # when it is written (a callout's result: NumPy's) and let go after its
    # last reader, the arena only the small ones and their addresses
    rng = np.random.default_rng(0)
    args = (rng.standard_normal((8, 2, 3, 3)) * 0.3, np.zeros(8),
            rng.standard_normal((32, 2, 16, 16)))

    def grad(w, b, x):
        return fgrad.grad(_conv_loss)((w, b), x)
    program_peak, interpreted_peak, program = _peaks(grad, *args)
    assert "0: conv2d" in program.callouts and program.plan.arena_bytes < args[2].nbytes // 10
    assert program_peak <= interpreted_peak, (program_peak, interpreted_peak)
    graph = optimize(fgrad.make_graph(grad)(*args), np)
    for got, want in zip(program.call(*args), generate(graph, np).fn(*args)):
        np.testing.assert_allclose(got, want, rtol=1e-10)


def _with_callouts():
    """Functions whose programs run callouts: their results, outputs, views,
    loops over them, a Python object (a factorization), a raising index."""
    def aliased(x):
        # the callback's result is its operand's memory, which the sine
        # (its last reader) then writes over: the program copies it
        c = fnp.cumsum(x, axis=0)
        same = fgrad.pure_callback(lambda a: a, fgrad.ShapeDtypeStruct(c.shape, c.dtype), c)
        return fnp.sin(c) * 2.0, fnp.cumsum(same, axis=1)
    return {
        "output": lambda x: fnp.cumsum(x, axis=0),
        "scalar": lambda x: fnp.sum(fnp.cumsum(x, axis=0) ** 2),
        "two, one bool": lambda x: (fnp.cumsum(x, axis=0) > 0, fnp.sort(x, axis=1), x, 3.0),
        "views": lambda x: (fnp.reshape(fnp.cumsum(x, axis=0), (-1,)),
                            fnp.cumsum(fnp.exp(fnp.cumsum(x, axis=0)), axis=1).T),
        "in place": lambda x: fnp.sin(fnp.cumsum(x, axis=0)) * 2.0 + x,
        "aliased": aliased,
        "loops": lambda x: lax.scan(
            lambda c, r: (c + fnp.cumsum(r), c * r), fnp.zeros(x.shape[1]),
            lax.fori_loop(0, 3, lambda i, y: y * 0.5 + fnp.sin(y), fnp.cumsum(x, axis=0)))[1],
        "gradient": fgrad.grad(lambda x: fnp.sum(fnp.sort(x, axis=0)[:2] ** 2)),
        "factorization": lambda x: fnp.linalg.solve(x[:, :4] + 1j * x[:, 1:5], x[:, :2]),
    }


@pytest.mark.parametrize("name", sorted(_with_callouts()))
def test_a_program_with_values_in_arrays_of_their_own_computes_the_same(name, monkeypatch):
    # every program with a callout keeps all its values so (not only those
    # whose callouts make large arrays, their large values)
    monkeypatch.setattr(program_module, "HEAP_CALLOUT_BYTES", 0)
    monkeypatch.setattr(program_module, "HEAP_BYTES", 0)
    x = np.random.default_rng(1).standard_normal((4, 6))
    graph = optimize(fgrad.make_graph(_with_callouts()[name])(x), np)
    program = compile_program(graph)
    assert program.callouts
    want = generate(graph, np).fn(x)
    for _ in range(2):
        got = program.call(x)
        for g, w in zip(got, want):
            assert type(g) is type(w) and np.asarray(g).dtype == np.asarray(w).dtype
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
    assert got[0] is not program.call(x)[0]


def test_a_callout_that_raises_in_a_program_with_values_in_arrays_of_their_own(monkeypatch):
    monkeypatch.setattr(program_module, "HEAP_CALLOUT_BYTES", 0)
    monkeypatch.setattr(program_module, "HEAP_BYTES", 0)
    x = np.ones((4, 6))
    f = optimize(fgrad.make_graph(lambda x, i: fnp.cumsum(x, axis=0)[i] * 2.0)(x, 1), np)
    program = compile_program(f)
    np.testing.assert_array_equal(program.call(x, 1)[0], [4.0] * 6)
    with pytest.raises(IndexError, match="out of bounds"):
        program.call(x, 9)
    np.testing.assert_array_equal(program.call(x, 3)[0], [8.0] * 6)


def test_a_programs_call_kept_without_the_program_runs_its_callouts():
    # the callouts' ctypes callback was the Program's alone: freed with it,
    # and the call, kept, then ran freed machine code
    g = optimize(fgrad.make_graph(lambda x: fnp.cumsum(x) * 2.0)(np.ones(3)), np)
    call = compile_program(g).call
    gc.collect()
    for _ in range(3):
        np.testing.assert_array_equal(call(np.ones(3))[0], [2.0, 4.0, 6.0])


def test_a_scan_reads_and_writes_transposes_in_place():
    # the vmapped scan's xs, moved to the front, and its ys, moved back,
    # were each a copy of 500 steps of 8x4 (128 kB) where NumPy makes views
    _, args = _memory_cases()["vmapped-scan"]
    graph = optimize(fgrad.make_graph(_walks)(*args), np)
    program = compile_program(graph)
    assert [type(s).__name__ for s in program.steps] == ["Loop"]
    assert program.plan.arena_bytes < args[0].nbytes // 10
    for got, want in zip(program.call(*args), generate(graph, np).fn(*args)):
        np.testing.assert_array_equal(got, want)


def _chained_scans(xs):
    # the first scan's ys, transposed, are the second's xs: one of the two
    # transposes is made; an output's transpose is copied from it
    _, ys = lax.scan(lambda c, x: (c + x, x * 2.0 + c), fnp.zeros(xs.shape[1:]), xs)
    _, zs = lax.scan(lambda c, x: (c * 0.5 + x, fnp.sin(x) + c),
                     fnp.zeros((xs.shape[0], xs.shape[2])), fnp.transpose(ys, (1, 0, 2)))
    return zs, fnp.transpose(zs, (2, 0, 1))


def test_transposes_between_scans_and_of_outputs_compute_the_same():
    xs = np.arange(60.0).reshape(4, 5, 3)
    graph = optimize(fgrad.make_graph(_chained_scans)(xs), np)
    for got, want in zip(compile_program(graph).call(xs), generate(graph, np).fn(xs)):
        np.testing.assert_array_equal(got, want)


def test_the_plan_places_largest_first_where_that_packs_tighter():
    # a and b first; a dies, c (twice their size) comes while b lives: in
    # program order c goes above b, largest first it goes where a was
    steps = [Step(["x"], ["a", "b"], {}, {}), Step(["a"], [], {}, {}),
             Step(["x"], ["c"], {}, {}), Step(["b", "c"], ["y"], {}, {})]
    sizes = {"a": 64, "b": 64, "c": 128}
    plan = plan_buffers(steps, sizes.get, placed={"x", "y"})
    assert plan.arena_bytes == plan.peak_live_bytes == 192


def test_values_dead_before_an_output_is_written_live_in_its_memory():
    steps = [Step(["x"], ["a"], {}, {}), Step(["a"], ["b"], {}, {}),
             Step(["b"], ["y"], {}, {})]
    plan = plan_buffers(steps, lambda v: 64, placed={"x", "y"},
                        regions=[("y", 64, 2)], movable=lambda v: True)
    # b is read by the step that writes y: it stays in the arena
    assert plan.homes == {"a": "y"} and plan.arena_bytes == 64
    unmovable = plan_buffers(steps, lambda v: 64, placed={"x", "y"},
                             regions=[("y", 64, 2)], movable=lambda v: False)
    assert unmovable.homes == {} and unmovable.arena_bytes == 128


def _reductions_of_a_cumsum(x):
    c = fnp.cumsum(x, axis=0)                   # a callout
    return (fnp.max(fnp.sin(c), axis=0) + fnp.min(c.T, axis=1)) * fnp.sum(x, axis=0) \
        - fnp.mean(fnp.exp(x), axis=0) + fnp.max(fnp.cos(x.T), axis=1)


def test_a_program_whose_callouts_make_large_arrays_counts_the_calls_making_its_arrays():
    # with a 2 MB cumsum, the program's five 2 MB values are each made by a
    # call back into Python (HEAP_STEP_NS): more than the NumPy calls it saves
    small = optimize(fgrad.make_graph(_reductions_of_a_cumsum)(np.ones((4, 4))), np)
    large = optimize(fgrad.make_graph(_reductions_of_a_cumsum)(np.ones((512, 512))), np)
    assert pays(program_steps(small), small)
    assert not pays(program_steps(large), large)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(program_module, "HEAP_STEP_NS", 0)
        assert pays(program_steps(large), large)


# ---------------------------------------------------------------------------
# The disk cache's key
# ---------------------------------------------------------------------------


def _graph(fun, *args):
    return optimize(fgrad.make_graph(fun)(*args), np)


def test_a_programs_key_names_its_cpu_llvm_and_blas(tmp_path, monkeypatch):
    import llvmlite
    import llvmlite.binding as llvm
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    x = np.linspace(-1, 1, 6).reshape(2, 3)
    program = compile_program(_graph(lambda x: fnp.tanh(x @ x.T), x))
    keyed_on = "\n".join(program.native.keyed_on)
    assert llvm.get_host_cpu_name() in keyed_on
    assert llvm.get_host_cpu_features().flatten() in keyed_on
    assert f"llvmlite {llvmlite.__version__}" in keyed_on
    assert f"llvm {llvm.llvm_version_info}" in keyed_on
    assert f"blas {provider()}" in program.native.keyed_on
    if gemm_table() is not None:
        import scipy
        assert provider().startswith(f"scipy {scipy.__version__}, ")
    # another IR: another key
    other = compile_program(_graph(lambda x: fnp.sin(x @ x.T), x))
    assert other.native.key != program.native.key and not other.native.loaded


def test_machine_code_for_another_blas_is_compiled_again(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    ir = "define void @nothing(i64 %n) {\n  ret void\n}\n"
    first = native.compile_ir(ir, "nothing", ["i64"], depends=["blas scipy 1.0, a.so"])
    other = native.compile_ir(ir, "nothing", ["i64"], depends=["blas scipy 2.0, a.so"])
    again = native.compile_ir(ir, "nothing", ["i64"], depends=["blas scipy 1.0, a.so"])
    assert first.key != other.key and not other.loaded
    assert again.key == first.key and again.loaded


def test_machine_code_filed_under_another_key_is_discarded(tmp_path, monkeypatch, caplog):
    # LLVM trusts an object file: loading one compiled for another IR would
    # call a function of another signature. The file's checksum covers its key.
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    x = np.linspace(-1, 1, 5)
    one = compile_program(_graph(lambda x: fnp.sum(fnp.sin(x) * 2.0), x))
    two = compile_program(_graph(lambda x: fnp.cumsum(x) * fnp.max(x) + 1.0, x))
    shutil.copy(tmp_path / f"{one.native.key}.o", tmp_path / f"{two.native.key}.o")
    with caplog.at_level(logging.WARNING, logger="fgrad.jit"):
        again = compile_program(_graph(lambda x: fnp.cumsum(x) * fnp.max(x) + 1.0, x))
    assert "is incomplete or corrupt; compiling it again" in caplog.text
    assert again.native.key == two.native.key and not again.native.loaded
    np.testing.assert_allclose(again.call(x)[0], np.cumsum(x) * 1.0 + 1.0)


# ---------------------------------------------------------------------------
# Compiles that fail, and hosts without llvmlite or SciPy
# ---------------------------------------------------------------------------


def test_ir_llvm_rejects_raises_its_error():
    with pytest.raises(RuntimeError, match="LLVM IR parsing error"):
        native.compile_ir("define void @broken(i64 %n {\n  ret void\n}\n", "broken", ["i64"])


_WITHOUT = """
import io, json, logging, sys
sys.modules[sys.argv[1]] = None             # importing it raises
log = io.StringIO()
logging.basicConfig(stream=log, level=logging.INFO)
import numpy as np, fgrad, fgrad.numpy as fnp
f = fgrad.jit(fgrad.grad(lambda x, w: fnp.sum(fnp.tanh(x @ w) ** 2 + fnp.sin(x) @ w)))
x, w = np.linspace(-1, 1, 6).reshape(2, 3), np.linspace(0, 1, 12).reshape(3, 4)
first = f(x, w)
assert f.wait_compiled()
(info,) = f.compile_info()
print(json.dumps([info.tier, list(info.callouts), first.tolist(), f(x, w).tolist(),
                  log.getvalue()]))
"""


def _without(module):
    env = {**os.environ, PROGRAM_ENV: "all", "FGRAD_JIT_COMPILE": "background"}
    run = subprocess.run([sys.executable, "-c", _WITHOUT, module], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(run.stdout)


def _expected_gradient():
    x, w = np.linspace(-1, 1, 6).reshape(2, 3), np.linspace(0, 1, 12).reshape(3, 4)
    return fgrad.grad(lambda x, w: fnp.sum(fnp.tanh(x @ w) ** 2 + fnp.sin(x) @ w))(x, w)


def test_without_llvmlite_jit_says_why_and_runs_numpy_calls():
    tier, callouts, first, again, log = _without("llvmlite")
    assert tier == "numpy" and callouts == []
    assert "no kernels or programs are compiled: llvmlite is not installed" in log
    np.testing.assert_allclose(first, _expected_gradient(), rtol=1e-13)
    np.testing.assert_allclose(again, _expected_gradient(), rtol=1e-13)


def test_without_scipy_a_program_says_why_and_calls_numpy_for_products():
    tier, callouts, first, again, log = _without("scipy")
    assert "SciPy's Cython BLAS and LAPACK not found" in log
    assert tier == "program" and [c.split(": ")[1] for c in callouts].count("matmul") >= 2
    np.testing.assert_allclose(first, _expected_gradient(), rtol=1e-13)
    np.testing.assert_allclose(again, _expected_gradient(), rtol=1e-13)
