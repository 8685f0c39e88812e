"""A program's disk cache key from its staged graph, so a second process skips writing its IR.

A program's machine code is cached under the SHA-256 of its IR and of what
else the code depends on (`fgrad.compiler.native.compile_ir`); to find it a
process must first write the IR, which in Python costs 0.05-0.2 s for a
program of a few hundred steps. `program_key` names the same machine code
without the IR, by everything the IR is made of:

- the graph in a canonical form: its equations in order, each primitive by
  its registered name, every parameter and literal by type and exact value
  (an array by its dtype, shape and bytes), every value by its order of first
  appearance with its shape, dtype and weak type, loop bodies and branches
  likewise;
- the layout the Python side shares with the machine code (the buffer plan):
  where each value of the steps lives (input, output, constant, arena offset),
  the arena's size and the callouts' numbers and equations;
- the source of fgrad itself (a digest of its ``.py`` files, so any change
  to a lowering or an IR writer makes new keys), and NumPy's, SciPy's and
  Python's versions; `fgrad.compiler.native` adds the CPU, LLVM and the
  BLAS provider.

A graph holding anything without an exact canonical form (a Python function
as a parameter, an object of an unknown type, a primitive not in the
registry) has no key: its IR is written and the cache looked up by the IR,
as before. Two graphs with the same key are the same program, so the key can
only miss where it might be wrong.
"""
import functools
import hashlib
import os
import sys

import numpy as np

import fgrad.primitives
from fgrad.compiler.program_loops import Scratch
from fgrad.core.graph import Graph, Literal, Var
from fgrad.core.trace import ShapedArray, primitive_table


class _NoCanonicalForm(Exception):
    """A value the key cannot write exactly: the program has no graph key."""


def program_key(graph, steps, places, plan, called):
    """A string naming the program of ``graph`` lowered to ``steps`` (every
    one, loop bodies' included, in order) with the value ``places``
    (`fgrad.compiler.program`'s locations), buffer ``plan`` and callouts
    ``called`` (in their numbers' order), or None where some part has no
    canonical form.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> g = fgrad.make_graph(lambda x: fnp.sin(x) * 2.0)(np.ones(3))
    >>> text = canonical_graph(g)
    >>> text.splitlines()[:2]
    ['graph (v0:float64[3]<f8)', 'eqn sin (v0) -> (v1:float64[3]<f8)']
    """
    writer = _Writer()
    try:
        lines = [f"fgrad source {source_digest()}",
                 f"numpy {np.__version__}, python {sys.version.split()[0]}"]
        writer.graph(graph, lines)
        lines.append(f"arena {plan.arena_bytes} bytes, {places.objects} objects, "
                     f"{len(places.outputs)} outputs, {len(places.consts)} constants")
        for s in steps:
            for v in list(s.reads()) + list(s.writes()):
                name = writer.operand(v)
                if name not in writer.placed:
                    writer.placed.add(name)
                    where = places.where.get(id(v) if type(v) is Literal else v)
                    lines.append(f"{writer.typed(v)} at {where!r}")
        for s in called:
            if hasattr(s, "eqn"):
                lines.append(f"callout {s.id}: {s.index} " + writer.equation(s.eqn))
            else:       # a call that makes and lets go of a callout program's arrays
                lines.append(f"heap {s.id}: {s.index} frees {s.frees!r} "
                             f"allocs {s.allocs!r}")
    except _NoCanonicalForm:
        return None
    return "\n".join(lines)


def canonical_graph(graph):
    """``graph`` as text that names its program exactly (`program_key`'s
    first part); raises `_NoCanonicalForm` where it has none."""
    lines = []
    _Writer().graph(graph, lines)
    return "\n".join(lines)


class _Writer:
    """Writes values in order of first appearance (``v0``, ``v1``, ...),
    literals and parameters by exact value."""

    def __init__(self):
        self.names = {}
        self.placed = set()

    def var(self, v):
        name = self.names.get(v)
        if name is None:
            name = self.names[v] = f"v{len(self.names)}"
        return name

    def typed(self, v):
        """``v``'s name with its shape and dtype (an input's, whose type no
        equation writes)."""
        name = self.operand(v)
        return f"{name}:{_aval(v.aval)}" if type(v) is Var else name

    def operand(self, v):
        if type(v) is Var:
            return self.var(v)
        if type(v) is Scratch:        # a loop's body values' arena bytes
            return f"{self.var(v)}:scratch {v.nbytes}"
        if type(v) is Literal:
            return f"lit({_value(v.value)}:{_aval(v.aval)})"
        raise _NoCanonicalForm(type(v).__name__)

    def graph(self, graph, lines):
        lines.append(f"graph ({', '.join(self.typed(v) for v in graph.invars)})")
        for eqn in graph.eqns:
            lines.append(self.equation(eqn))
            for value in eqn.params.values():
                self.graphs_in(value, lines)
        lines.append(f"return ({', '.join(self.operand(v) for v in graph.outvars)})")

    def graphs_in(self, value, lines):
        if isinstance(value, Graph):
            self.graph(value, lines)
        elif isinstance(value, (tuple, list)):
            for item in value:
                self.graphs_in(item, lines)

    def equation(self, eqn):
        prim = eqn.prim
        if primitive_table.get(prim.name) is not prim:
            raise _NoCanonicalForm(f"unregistered primitive {prim.name}")
        params = ", ".join(f"{k}={self.param(v)}" for k, v in sorted(eqn.params.items()))
        outs = ", ".join(f"{self.var(v)}:{_aval(v.aval)}" for v in eqn.outvars)
        return (f"eqn {prim.name}{'[' + params + ']' if params else ''} "
                f"({', '.join(self.operand(v) for v in eqn.invars)}) -> ({outs})")

    def param(self, value):
        if isinstance(value, Graph):
            return f"<graph {len(value.eqns)}>"     # written out after its equation
        if type(value) in (tuple, list):
            return f"{type(value).__name__}({', '.join(self.param(v) for v in value)})"
        if isinstance(value, (Var, Literal)):
            return self.operand(value)
        return _value(value)


def _aval(aval):
    if type(aval) is not ShapedArray:
        raise _NoCanonicalForm(type(aval).__name__)
    weak = " weak" if aval.weak_type else ""
    return f"{aval.dtype}{list(aval.shape)}{aval.dtype.str}{weak}"


def _value(value):
    """A parameter's or literal's exact text, with its type."""
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return repr(value)
    if kind is int:
        return f"int {value}"
    if kind is float:
        return f"float {value.hex()}"
    if kind is complex:
        return f"complex {value.real.hex()} {value.imag.hex()}"
    if isinstance(value, np.dtype):
        return f"dtype {value.str} {value}"
    if kind is type and issubclass(value, np.generic):
        return f"scalar type {np.dtype(value).str}"
    if isinstance(value, (np.ndarray, np.generic)):
        if value.dtype.kind not in "biufc":
            raise _NoCanonicalForm(f"array of {value.dtype}")
        array = np.ascontiguousarray(value)
        digest = hashlib.sha256(array.view(np.uint8).reshape(-1) if array.size else b"")
        return (f"{kind.__name__} {array.dtype.str}{list(array.shape)} "
                f"{digest.hexdigest()}")
    if kind is slice:
        return f"slice({_value(value.start)}, {_value(value.stop)}, {_value(value.step)})"
    if kind is type(Ellipsis):
        return "..."
    raise _NoCanonicalForm(kind.__qualname__)


@functools.lru_cache(maxsize=1)
def source_digest():
    """The SHA-256 of fgrad's own ``.py`` files (their paths and contents):
    the version of every lowering and IR writer a program's code comes from.
    ``fgrad.primitives`` is read where it lies (in a development install, the
    repository's ``primitives/``, outside the ``fgrad`` folder).

    >>> len(source_digest())
    64
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rules = os.path.dirname(os.path.abspath(fgrad.primitives.__file__))
    digest = hashlib.sha256()
    for top in [root] + ([] if rules.startswith(root + os.sep) else [rules]):
        for folder, subfolders, files in os.walk(top):
            subfolders.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    digest.update(os.path.relpath(path, os.path.dirname(top)).encode()
                                  + b"\0")
                    with open(path, "rb") as f:
                        digest.update(f.read() + b"\0")
    return digest.hexdigest()
