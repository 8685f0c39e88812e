"""A program's disk cache key from its graph: the same program is loaded
without writing its IR, and any change to what it computes misses.

Programs are real ones, compiled into a fresh cache directory; the second
process is a real child process.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad import lax
from fgrad.compiler import native
from fgrad.compiler.kernel_cache import CACHE_ENV
from fgrad.compiler.passes import optimize
from fgrad.compiler.program import compile_program
from fgrad.compiler.program_key import canonical_graph, source_digest
from fgrad.core.graph import Equation, Graph, Var
from fgrad.core.trace import Primitive, ShapedArray

pytestmark = pytest.mark.skipif(not native.available(), reason="llvmlite missing")


def _graph(fun, *args):
    return optimize(fgrad.make_graph(fun)(*args), np)


def _program(fun, *args):
    return compile_program(_graph(fun, *args))


def _loss(x, w):
    return fnp.sum(fnp.tanh(x @ w) * 2.0)


def _scan(x):
    return lax.scan(lambda c, v: (c * 0.5 + fnp.sin(v), c), x[0], x)[0]


X, W = np.linspace(-1, 1, 12).reshape(3, 4), np.linspace(0, 1, 8).reshape(4, 2)


def test_the_same_graph_staged_again_loads_its_machine_code(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    for fun, args in ((_loss, (X, W)), (_scan, (X,)), (fgrad.grad(_loss), (X, W))):
        first = _program(fun, *args)
        again = _program(fun, *args)
        assert not first.native.loaded and again.native.loaded
        assert again.native.key == first.native.key
        for a, b in zip(first.call(*args), again.call(*args)):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("change", ["literal", "dtype", "shape", "constant", "operation",
                                    "weak literal", "input dtype"])
def test_a_changed_graph_misses_the_cache(tmp_path, monkeypatch, change):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    table = np.arange(4.0)
    other_table = table.copy()
    other_table[2] = 7.0
    base = {"literal": (lambda x: fnp.sin(x) * 2.0, X),
            "dtype": (lambda x: fnp.sin(x) * 2.0, X),
            "shape": (lambda x: fnp.sin(x) * 2.0, X),
            "constant": (lambda x: x * table, X),
            "operation": (lambda x: fnp.sin(x) * 2.0, X),
            "weak literal": (lambda x: x * 2.0, X),
            "input dtype": (lambda x: x.astype(np.float64), np.arange(-4, 4, dtype=np.int8))
            }[change]
    changed = {"literal": (lambda x: fnp.sin(x) * 2.5, X),
               "dtype": (lambda x: fnp.sin(x) * 2.0, X.astype(np.float32)),
               "shape": (lambda x: fnp.sin(x) * 2.0, X[:2]),
               "constant": (lambda x: x * other_table, X),
               "operation": (lambda x: fnp.cos(x) * 2.0, X),
               "weak literal": (lambda x: x * np.float64(2.0), X),
               # no equation's output names the input's type: the input does
               "input dtype": (lambda x: x.astype(np.float64),
                               np.arange(-4, 4, dtype=np.int8).view(np.uint8))}[change]
    first, second = _program(*base), _program(*changed)
    assert second.native.key != first.native.key and not second.native.loaded
    fun, x = changed
    (out,) = second.call(x)
    np.testing.assert_allclose(out, fun(x), rtol=1e-6)
    assert out.dtype == np.asarray(fun(x)).dtype


def test_the_canonical_form_names_values_by_order_and_literals_exactly():
    g = _graph(lambda x: fnp.sin(x) * 0.1, np.ones(3, np.float32))
    text = canonical_graph(g)
    assert text.splitlines()[0] == "graph (v0:float32[3]<f4)"
    assert "eqn sin (v0) -> (v1:float32[3]<f4)" in text
    assert (0.1).hex() in text                  # the literal's exact bits
    # staged again: other Var objects, the same text
    assert canonical_graph(_graph(lambda x: fnp.sin(x) * 0.1, np.ones(3, np.float32))) == text


def test_a_graph_without_canonical_form_is_keyed_on_its_ir(tmp_path, monkeypatch):
    # a primitive outside the registry (register=False) may share a name
    # with another: the key would not tell them apart, so the IR names it
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    stray = Primitive("sin", impl=np.sin, register=False)
    x = Var(ShapedArray((3,), np.float64))
    y = Var(x.aval)
    graph = Graph([x], [Equation(stray, [x], [y], {})], [y])
    with pytest.raises(Exception, match="unregistered primitive sin"):
        canonical_graph(graph)
    program = compile_program(graph)
    np.testing.assert_allclose(program.call(np.ones(3))[0], np.sin(np.ones(3)))
    assert compile_program(graph).native.loaded          # found by its IR


def test_the_key_covers_fgrads_own_source():
    assert len(source_digest()) == 64
    assert source_digest() == source_digest()


_CHILD = """
import json, sys
import numpy as np
import fgrad, fgrad.numpy as fnp
from fgrad.compiler import program as program_module
from fgrad.compiler.passes import optimize
# counts the IR the program's compile writes
written = []
write_ir = program_module.program_ir
program_module.program_ir = lambda *a: written.append(1) or write_ir(*a)
x = np.linspace(-1, 1, 12).reshape(3, 4)
graph = optimize(fgrad.make_graph(lambda x: fnp.sum(fnp.tanh(x @ x.T) * 2.0))(x), np)
program = program_module.compile_program(graph)
print(json.dumps({"loaded": program.native.loaded, "key": program.native.key,
                  "ir written": len(written),
                  "out": float(program.call(x)[0])}))
"""


def test_a_second_process_loads_the_program(tmp_path):
    env = dict(os.environ, **{CACHE_ENV: str(tmp_path)})
    runs = [json.loads(subprocess.run([sys.executable, "-c", _CHILD], env=env, check=True,
                                      capture_output=True, text=True).stdout)
            for _ in range(2)]
    assert [r["loaded"] for r in runs] == [False, True]
    assert [r["ir written"] for r in runs] == [1, 0]
    assert runs[0]["key"] == runs[1]["key"] and runs[0]["out"] == runs[1]["out"]
