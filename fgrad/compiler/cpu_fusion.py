"""Fused elementwise kernels on the CPU, compiled by numba (LLVM).

Under `fgrad.jit` on NumPy arrays, `fuse_for_cpu` rewrites the optimised graph
before code generation: each maximal group of elementwise equations (the
grouping of `fgrad.compiler.fusion.plan_groups`, the one CuPy's kernels use),
together with a ``sum``, ``max`` or ``min`` over all axes that reads it (the
loss at the end of most programs), becomes one ``cpu_fused`` equation. Its
kernel is a single loop written in Python source and compiled by numba: it
reads each input once, keeps every intermediate in a register, and writes
only the values an equation outside the group reads (or the graph returns).

Semantics are NumPy's, decided from the dtypes the staged graph carries:

- every operation computes in the dtype NumPy's promotion gives and its result
  is cast back to it, so float32 stays float32 and integers wrap as NumPy's do
  (numba would otherwise widen ``int8 + int8`` to int64);
- numba's ``error_model="numpy"``: division by zero gives inf or NaN, never an
  exception; no fast-math, so NaN and inf propagate as in NumPy;
- operations whose NumPy behaviour a scalar loop would not reproduce (integer
  division and powers, float-to-int casts, float16, complex) stay NumPy calls;
- a float sum accumulates in float64 in order (NumPy sums pairwise): equal to
  NumPy's result to rounding.

Kernels release the GIL (``nogil=True``), so `jit(parallel=True)` and user
threads overlap. Each kernel is compiled for exactly the dtypes of its graph;
its Python wrapper checks every input's shape and dtype before the loop
runs, so an array it was not built for raises `InvalidInputError` instead of
being read out of bounds. Kernels are cached by their source text, in memory
(`KERNEL_CACHE_SIZE`) and on disk (`fgrad.compiler.kernel_cache`).

Fusion is off when numba is not installed, when the environment variable
``FGRAD_JIT_FUSE`` is ``0``, or for ``jit(f, fuse=False)``; the code is then
exactly the unfused code.
"""
import collections
import functools
import hashlib
import importlib.util
import math
import os

import numpy as np

from fgrad.compiler.fusion import (compute_dtypes, elementwise_name, operand_rule, plan_groups,
                                   reader_counts)
from fgrad.compiler.kernel_cache import load_or_build
from fgrad.compiler.vector_math import SOURCE as VECTOR_SOURCE
from fgrad.compiler.vector_math import VECTOR_FUNCTIONS
from fgrad.core.errors import InvalidInputError
from fgrad.core.graph import Equation, Graph, Literal, Var
from fgrad.core.trace import Primitive

FUSE_ENV = "FGRAD_JIT_FUSE"
# compiled kernels kept in memory (by source); older ones are dropped
KERNEL_CACHE_SIZE = 256
# longest run of operations in one kernel: LLVM's compile time grows faster
# than linearly with the loop body, so a longer group is cut into pieces
MAX_KERNEL_OPS = 128
# most arrays a kernel may write and still call the vector functions of
# `fgrad.compiler.vector_math`: LLVM vectorises a loop only while it can check
# the arrays apart (about 15 here), and in a scalar loop those branch-free
# functions, which compute both sides of every choice, are slower than the C
# library's
MAX_VECTOR_OUTPUTS = 12
# fewest elements for which a kernel calls those vector functions: below it
# the SIMD loop hardly runs (LLVM's vector loop takes 16 elements a turn, the
# rest go through its scalar remainder), and the vector loop and its fallback
# add to the kernel's compile time (about 10 ms per call site)
MIN_VECTOR_ELEMENTS = 256

# ---------------------------------------------------------------------------
# The per-operation table: Python text numba compiles
# ---------------------------------------------------------------------------

# dtypes a kernel computes in (float16 and complex are left to NumPy)
_KERNEL_DTYPES = frozenset(np.dtype(k) for k in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float32", "float64"))

# name -> (template for floating compute dtypes, template for integer and bool
# ones, or None where a scalar loop would not match NumPy)
_TEMPLATES = {
    "add": ("{0} + {1}", "{0} + {1}"),
    "subtract": ("{0} - {1}", "{0} - {1}"),
    "multiply": ("{0} * {1}", "{0} * {1}"),
    "divide": ("{0} / {1}", None),
    "power": ("np.power({0}, {1})", None),
    "negative": ("-{0}", "-{0}"),
    "square": ("{0} * {0}", "{0} * {0}"),
    # NumPy's maximum and minimum propagate NaN (from either side)
    "maximum": ("{0} if ({0} != {0} or {0} > {1}) else {1}", "{0} if {0} > {1} else {1}"),
    "minimum": ("{0} if ({0} != {0} or {0} < {1}) else {1}", "{0} if {0} < {1} else {1}"),
    "absolute": ("abs({0})", "abs({0})"),
    "equal": ("{0} == {1}", "{0} == {1}"),
    "not_equal": ("{0} != {1}", "{0} != {1}"),
    "less": ("{0} < {1}", "{0} < {1}"),
    "less_equal": ("{0} <= {1}", "{0} <= {1}"),
    "greater": ("{0} > {1}", "{0} > {1}"),
    "greater_equal": ("{0} >= {1}", "{0} >= {1}"),
    "logical_and": (None, "{0} and {1}"),
    "logical_or": (None, "{0} or {1}"),
    "logical_xor": (None, "{0} != {1}"),
    "logical_not": (None, "not {0}"),
    "where": ("{1} if {0} else {2}", "{1} if {0} else {2}"),
    "convert_element_type": ("{0}", "{0}"),
}
for _name in ("sqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "cbrt",
              "sin", "cos", "tan", "sinh", "cosh", "tanh", "arcsin", "arccos", "arctan",
              "arcsinh", "arccosh", "arctanh", "floor", "ceil", "trunc", "rint",
              "isnan", "isinf", "isfinite", "signbit"):
    _TEMPLATES[_name] = (f"np.{_name}({{0}})", None)
for _name in ("arctan2", "hypot", "fmod"):
    _TEMPLATES[_name] = (f"np.{_name}({{0}}, {{1}})", None)
for _name in ("floor", "ceil", "trunc"):      # of an integer: itself
    _TEMPLATES[_name] = (_TEMPLATES[_name][0], "{0}")

# reductions that may end a group: name -> (accumulator start, update)
_REDUCTIONS = {
    "sum": ("0", "{acc} += {x}"),
    # NaN propagates: a NaN element is taken (the comparison fails), and once
    # the accumulator is NaN (not equal to itself) it stays NaN
    "max": ("-np.inf", "if {acc} == {acc} and not ({acc} >= {x}): {acc} = {x}"),
    "min": ("np.inf", "if {acc} == {acc} and not ({acc} <= {x}): {acc} = {x}"),
}


def _op_name(prim):
    name = elementwise_name(prim)
    return name if name in _TEMPLATES else None


def _template(eqn):
    """The Python template for ``eqn`` and its operands' dtypes, or None."""
    name = _op_name(eqn.prim)
    if name is None or len(eqn.outvars) != 1 or eqn.prim.multiple_results:
        return None
    out = np.dtype(eqn.outvars[0].aval.dtype)
    if name == "convert_element_type":
        if set(eqn.params) != {"dtype"}:
            return None
        source = np.dtype(eqn.invars[0].aval.dtype)
        # float -> int and float -> narrower float of out-of-range values are
        # undefined in a C cast and saturate differently in NumPy: leave them
        if source.kind == "f" and (out.kind != "f" or out.itemsize < source.itemsize):
            return None
    elif eqn.params:
        return None
    if out not in _KERNEL_DTYPES or any(np.dtype(v.aval.dtype) not in _KERNEL_DTYPES
                                        for v in eqn.invars):
        return None
    try:
        operand_dtypes, compute = compute_dtypes(operand_rule(name), eqn)
    except (TypeError, ValueError):
        return None
    if np.dtype(compute) not in _KERNEL_DTYPES:
        return None
    float_template, int_template = _TEMPLATES[name]
    template = float_template if np.dtype(compute).kind == "f" else int_template
    if template is None:
        return None
    return template, [np.dtype(d) for d in operand_dtypes]


def cpu_fusable(eqn):
    """Whether ``eqn`` can be written into a fused CPU kernel.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> g = fgrad.make_graph(lambda x: fnp.sin(x) // 2)(np.ones(3))
    >>> [cpu_fusable(e) for e in g.eqns]            # floor_divide stays NumPy
    [True, False]
    """
    return _template(eqn) is not None


def _reduction_of(eqn, shape):
    """The `_REDUCTIONS` name of ``eqn`` if it reduces a ``shape`` value over
    every axis, else None."""
    name = eqn.prim.name
    if name not in _REDUCTIONS or eqn.prim.family != "primitives/reductions.py" \
            or len(eqn.invars) != 1 or type(eqn.invars[0]) is not Var:
        return None
    if tuple(sorted(eqn.params.get("axis", ()))) != tuple(range(len(shape))):
        return None
    x, out = eqn.invars[0].aval, eqn.outvars[0].aval
    if tuple(x.shape) != tuple(shape) or math.prod(shape) == 0:
        return None
    if np.dtype(out.dtype) not in _KERNEL_DTYPES or np.dtype(x.dtype) not in _KERNEL_DTYPES:
        return None
    if name != "sum" and out.dtype != x.dtype:
        return None
    return name


def enabled():
    """Whether jit fuses on the CPU by default: numba importable and
    ``FGRAD_JIT_FUSE`` not ``0``.

    >>> import os
    >>> enabled() == (importlib.util.find_spec("numba") is not None
    ...               and os.environ.get("FGRAD_JIT_FUSE", "1") != "0")
    True
    """
    if os.environ.get(FUSE_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return _numba_installed()


@functools.lru_cache(maxsize=1)
def _numba_installed():
    return importlib.util.find_spec("numba") is not None


# ---------------------------------------------------------------------------
# Planning: groups, reductions that end them, and pieces of bounded length
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# When a kernel pays: a rough cost model
# ---------------------------------------------------------------------------
#
# A kernel saves the per-call cost of every NumPy call it replaces and every
# pass over memory between them, but computes most transcendental functions one
# element at a time with the C library, where NumPy's SIMD loops are several
# times faster (tanh: about 11 ns against 1 ns per element on an AVX2 core).
# sin, cos, exp and tanh are vectorised in kernels that write at most
# `MAX_VECTOR_OUTPUTS` arrays (`fgrad.compiler.vector_math`: well under 1 ns an
# element), but whether a group's kernel will be is known only once it is cut
# into pieces, so the figures are the C library's: the kernels of a large
# array leave exp and tanh to NumPy's SIMD loops, as they did before.

NUMPY_CALL_NS = 700         # one ufunc call from generated code
KERNEL_CALL_NS = 2000       # the checking wrapper and numba's dispatch
KERNEL_ARRAY_NS = 100       # ... per array argument
_CACHE_ELEMENTS = 1 << 17   # about 1 MB of float64: beyond it, memory bandwidth
# per element and operation: (NumPy's loop, the kernel's) where they differ
# from a plain arithmetic operation
ELEMENT_NS = {"exp": (0.6, 4.1), "exp2": (0.6, 4.1), "expm1": (0.9, 7.0),
               "log": (0.7, 3.3), "log2": (0.7, 3.3), "log10": (0.7, 3.5),
               "log1p": (0.9, 7.1), "sin": (5.0, 5.0), "cos": (4.2, 4.1),
               "tan": (1.1, 5.7), "tanh": (1.1, 11.1), "sinh": (1.0, 9.7),
               "cosh": (0.8, 7.4), "arcsin": (1.0, 10.1), "arccos": (1.0, 10.1),
               "arctan": (1.0, 3.5), "arcsinh": (1.3, 12.0), "arccosh": (1.3, 12.0),
               "arctanh": (1.3, 16.9), "power": (5.0, 8.0), "cbrt": (2.0, 8.0),
               "sqrt": (0.7, 0.7), "divide": (0.5, 0.5), "arctan2": (4.0, 8.0),
               "hypot": (1.0, 3.0), "fmod": (3.0, 6.0)}
_PLAIN_NS = 0.2


def worth_fusing(eqns, n_inputs, n_outputs, size):
    """Whether one kernel for ``eqns`` (``size`` elements each) is estimated
    faster than their NumPy calls.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> g = fgrad.make_graph(lambda a: fnp.tanh(a + 1.0))(np.ones(256))
    >>> worth_fusing(g.eqns, 1, 1, 256)       # NumPy's SIMD tanh wins
    False
    >>> worth_fusing(g.eqns * 20, 1, 1, 4)    # 40 calls on 4 elements: dispatch wins
    True
    """
    memory = 0.3 if size < _CACHE_ELEMENTS else 1.5       # per array pass, ns
    numpy_ns = fused_ns = 0.0
    for e in eqns:
        name = _op_name(e.prim) or e.prim.name
        np_ns, kernel_ns = ELEMENT_NS.get(name, (_PLAIN_NS, _PLAIN_NS))
        numpy_ns += NUMPY_CALL_NS + size * (np_ns + memory * (len(e.invars) + 1))
        fused_ns += size * kernel_ns
    fused_ns += KERNEL_CALL_NS + KERNEL_ARRAY_NS * (n_inputs + n_outputs) + \
        size * memory * (n_inputs + n_outputs)
    return fused_ns < numpy_ns


def _attach_reductions(graph, groups):
    """``[(members, reductions)]``: each group with the full reductions of its
    values that may join it (the kernel takes the reduction's place, so no
    equation between the group's last member and it may read the group)."""
    readers_at = collections.defaultdict(list)
    for k, eqn in enumerate(graph.eqns):
        for v in eqn.invars:
            if type(v) is Var:
                readers_at[v].append(k)
    planned = []
    for members in groups:
        outs = {graph.eqns[k].outvars[0] for k in members}
        shape = graph.eqns[members[-1]].outvars[0].aval.shape
        last = members[-1]
        candidates = sorted({r for v in outs for r in readers_at[v]
                             if r > last and _reduction_of(graph.eqns[r], shape)})
        reductions = []
        for r in candidates:
            # the kernel takes the place of its last reduction: nothing before
            # that may read the group or a reduction already attached to it
            read = outs | {graph.eqns[k].outvars[0] for k in reductions}
            between = any(last < k < r and k not in reductions
                          for v in read for k in readers_at[v])
            if between:
                break
            reductions.append(r)
        planned.append((members, reductions))
    return planned


def _pieces(members, reductions):
    """Cut a long group into runs of at most `MAX_KERNEL_OPS` operations; the
    reductions go with the last run."""
    if len(members) <= MAX_KERNEL_OPS:
        return [(members, reductions)]
    runs = [members[i:i + MAX_KERNEL_OPS] for i in range(0, len(members), MAX_KERNEL_OPS)]
    return [(run, []) for run in runs[:-1]] + [(runs[-1], reductions)]


# ---------------------------------------------------------------------------
# One kernel's source
# ---------------------------------------------------------------------------


def scalar_literal_text(lit, dtype):
    """Python text for a scalar literal as a ``dtype`` value, or None (shared
    with `fgrad.compiler.whole_graph`)."""
    value = lit.value
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        if value.size == 0 or np.dtype(value.dtype) not in _KERNEL_DTYPES:
            return None
        flat = np.asarray(value).ravel()
        if not bool((flat == flat[0]).all()):    # not one repeated value: pass it in
            return None
        value = flat[0].item()
    return number_text(value, dtype)


def number_text(value, dtype):
    """Python text for the Python number ``value`` as a ``dtype`` value, or None.

    >>> number_text(float("inf"), np.float32)
    'np.float32(np.inf)'
    """
    if isinstance(value, bool):
        text = repr(value)
    elif isinstance(value, int):
        if not -(1 << 63) <= value < (1 << 64):
            return None
        text = repr(value)
    elif isinstance(value, float):
        if math.isfinite(value) and np.dtype(dtype) == np.float64:
            return repr(value)      # a float64 already: one call less for numba to type
        text = repr(value) if math.isfinite(value) else \
            ("np.nan" if math.isnan(value) else ("np.inf" if value > 0 else "-np.inf"))
    else:
        return None
    return f"{numpy_type_text(dtype)}({text})"


def numpy_type_text(dtype):
    """The NumPy scalar type of ``dtype`` as Python text: ``np.float32``."""
    return f"np.{np.dtype(dtype).name}" if np.dtype(dtype) != np.dtype(bool) else "np.bool_"


def _input_mode(shape, group_shape):
    """How the kernel indexes an input of ``shape`` broadcast to the group's:
    "full" (element i), "one" (a single value), "suffix" (broadcast along
    leading axes, such as a bias row: read along an inner loop, `_loop`),
    "prefix" (broadcast along trailing axes, such as a column of one value per
    row: read once per row of that loop), or "copy" (anything else: broadcast
    out to a full array first)."""
    shape, group_shape = tuple(shape), tuple(group_shape)
    if shape == group_shape:
        return "full"
    if math.prod(shape) == 1:
        return "one"
    trimmed = shape
    while trimmed and trimmed[0] == 1:
        trimmed = trimmed[1:]
    if trimmed and len(trimmed) <= len(group_shape) and \
            group_shape[len(group_shape) - len(trimmed):] == trimmed:
        return "suffix"
    aligned = (1,) * (len(group_shape) - len(shape)) + shape
    leading = len(aligned)
    while aligned[leading - 1] == 1:
        leading -= 1
    if aligned[:leading] == group_shape[:leading] and math.prod(group_shape) > 0:
        return "prefix"
    return "copy"


class CpuKernel:
    """One fused kernel: its numba source and the Python call that checks
    inputs, allocates outputs and runs it.

    ``source`` is the kernel's text; ``call(*inputs)`` returns the outputs;
    ``fn`` is the numba function. ``overwritable`` are the positions of the
    inputs whose buffer ``call(*inputs, out=input)`` may write its one
    output into (each read only at the element it writes, and only once).
    """

    __slots__ = ("source", "name", "call", "fn", "size", "out_avals", "reductions",
                 "overwritable")

    def __init__(self, source, name, call, fn, size, out_avals, reductions, overwritable=()):
        self.source, self.name, self.call, self.fn = source, name, call, fn
        self.size, self.out_avals, self.reductions = size, out_avals, reductions
        self.overwritable = overwritable

    def __repr__(self):
        return f"<{self.name}: {self.size} ops>"


def kernel_source(graph, members, reductions, readers):
    """``(definition, vectorised, inputs, modes, outputs, reduced)`` of the
    kernel for one group.

    ``definition`` is a function ``kernel(n, in0, ..., out0, ...)`` over flat
    arrays that returns the reductions' values (a tuple); ``vectorised`` says
    whether it calls the functions of `fgrad.compiler.vector_math` (whose
    text must then come before it). ``inputs`` are the operands (vars and
    literals passed in) and ``modes`` how each is indexed, ``outputs`` the
    member vars written out, ``reduced`` the reductions' output vars.
    """
    eqns = [graph.eqns[k] for k in members]
    red_eqns = [graph.eqns[k] for k in reductions]
    shape = eqns[-1].outvars[0].aval.shape
    inside = {e.outvars[0] for e in eqns}
    inner = collections.Counter(v for e in eqns + red_eqns for v in e.invars
                                if type(v) is Var)
    inputs, in_names, names, modes = [], {}, {}, []
    # body: lines of the loop, or (exact line, vector lines) for a vector function
    hoisted, starts, body = [], [], []
    suffixes = []           # (size, j) of each input broadcast along leading axes
    prefixes = []           # (size of the axes it is broadcast along, j): trailing ones

    def operand(v, dtype):
        if type(v) is Var and v in inside:
            name, have = names[v], np.dtype(v.aval.dtype)
        else:
            if type(v) is Literal:
                text = scalar_literal_text(v, dtype)
                if text is not None:
                    return text
            key = v if type(v) is Var else ("literal", id(v))
            name = in_names.get(key)
            if name is None:
                j = len(inputs)
                mode = _input_mode(v.aval.shape, shape)
                name = in_names[key] = f"x{j}"
                inputs.append(v)
                modes.append(mode)
                if mode == "one":
                    hoisted.append(f"    x{j} = in{j}[0]")
                elif mode == "suffix":
                    suffixes.append((math.prod(v.aval.shape), j))
                    body.append(f"        x{j} = in{j}[AXIS{j}]")
                elif mode == "prefix":      # the inner loop's length it needs
                    prefixes.append((math.prod(shape) // math.prod(v.aval.shape), j))
                    body.append(f"        x{j} = in{j}[AXIS{j}]")
                else:
                    body.append(f"        x{j} = in{j}[i]")
            have = np.dtype(v.aval.dtype)
        return name if have == dtype else f"{numpy_type_text(dtype)}({name})"

    vectorised = False
    for t, e in enumerate(eqns):
        template, operand_dtypes = _template(e)
        args = [operand(v, d) for v, d in zip(e.invars, operand_dtypes)]
        out = e.outvars[0]
        names[out] = f"t{t}"
        cast = numpy_type_text(out.aval.dtype)
        if np.dtype(out.aval.dtype) == np.float64 and \
                all(d == np.float64 for d in operand_dtypes):
            # float64 in, float64 out: no cast (numba types each one, and a
            # kernel of 128 operations compiles in half the time without)
            cast = ""
        exact = f"        t{t} = {cast}({template.format(*args)})"
        vector = VECTOR_FUNCTIONS.get(_op_name(e.prim))
        if vector is not None and operand_dtypes[0].kind == "f":
            # the vector function where its argument allows, checked in `ok`
            vectorised = True
            function, limit = vector
            body.append((exact, [f"        ok &= abs({args[0]}) <= {limit!r}",
                                 f"        t{t} = {cast}({function}({args[0]}))"]))
        else:
            body.append(exact)
    needed_outside = {v for v in inside if readers[v] > inner[v]}
    outputs = [e.outvars[0] for e in eqns if e.outvars[0] in needed_outside]
    accumulators = []
    for r, e in enumerate(red_eqns):
        start, update = _REDUCTIONS[e.prim.name]
        x = e.invars[0]
        out_dtype = np.dtype(e.outvars[0].aval.dtype)
        # floats accumulate in float64, integers in their (NumPy-promoted) dtype
        acc_dtype = np.dtype(np.float64) if out_dtype.kind == "f" else out_dtype
        value = names[x] if x in inside else operand(x, np.dtype(x.aval.dtype))
        if np.dtype(x.aval.dtype) != acc_dtype:
            value = f"{numpy_type_text(acc_dtype)}({value})"
        starts.append(f"    acc{r} = {numpy_type_text(acc_dtype)}({start})")
        body.append("        " + update.format(acc=f"acc{r}", x=value))
        accumulators.append(f"acc{r}")
    # written last, when every input of the element has been read (an output
    # may be written into a dying input's buffer: `_overwritable`)
    for j, v in enumerate(outputs):
        body.append(f"        out{j}[i] = {names[v]}")
    params = ["n"] + [f"in{j}" for j in range(len(inputs))]
    if _packed(outputs):            # one (outputs, n) array: its rows
        params.append("outs")
        hoisted += [f"    out{j} = outs[{j}]" for j in range(len(outputs))]
    else:
        params += [f"out{j}" for j in range(len(outputs))]
    loop, body = _loop(suffixes, prefixes, body, hoisted, modes)
    lines = [f"def kernel({', '.join(params)}):"] + hoisted + starts
    if vectorised and len(outputs) <= MAX_VECTOR_OUTPUTS \
            and math.prod(shape) >= MIN_VECTOR_ELEMENTS:
        fast = [x for line in body for x in ([line] if type(line) is str else line[1])]
        exact = ["    " + (line if type(line) is str else line[0]) for line in body]
        lines += ["    ok = True"] + loop + fast + [
            "    if not ok:",
            "        # an argument beyond the vector functions' range, nan or inf:",
            "        # the whole loop again, with the C library's functions"] + \
            ["    " + line for line in starts] + ["    " + line for line in loop] + exact
    else:
        vectorised = False
        lines += loop + [line if type(line) is str else line[0] for line in body]
    lines.append(f"    return ({''.join(a + ', ' for a in accumulators)})")
    signature = ",".join([np.dtype(v.aval.dtype).name + ":" + m
                          for v, m in zip(inputs, modes)] +
                         ([f"{np.dtype(outputs[0].aval.dtype).name}[{len(outputs)}, :]"]
                          if _packed(outputs) else
                          [np.dtype(v.aval.dtype).name for v in outputs]))
    # the header line names the argument types: the kernel's cache key is its text
    definition = f"# fgrad cpu kernel ({signature})\n" + "\n".join(lines) + "\n"
    return definition, vectorised, inputs, modes, outputs, [e.outvars[0] for e in red_eqns]


def _loop(suffixes, prefixes, body, hoisted, modes):
    """``(header, body)``: the kernel's loop over element ``i`` and its body.

    With inputs broadcast along leading axes (``suffixes``: ``(size, j)`` of
    each, a bias row say), the loop is two: over the rows of the longest such
    input, and along it, so that it is read at the inner index ``k`` instead
    of at ``i`` modulo its size (an integer division per element costs more
    than the arithmetic and keeps LLVM from vectorising: 1.5 against 0.6 ns
    an element for the backward of ``tanh(x @ W) * w``). The others' sizes
    divide the longest's (each is a product of trailing dimensions of the
    group's shape): one of the same size is read at ``k`` too, a shorter one
    at ``k`` modulo its size. An input broadcast along trailing axes
    (``prefixes``: a column) whose broadcast covers exactly the inner loop is
    read once per outer row ``r``, instead of being broadcast out to a full
    array first; another (its ``modes`` entry becomes "copy") still is.
    Without suffixes, the first prefix input's broadcast sets the inner loop.
    Lines may be (exact, vector lines) pairs; the lines that must come before
    the loop (the inner length) are appended to ``hoisted``."""
    if not suffixes and not prefixes:
        return ["    for i in range(n):"], body
    index = {}
    if suffixes:
        inner, first = max(suffixes, key=lambda s: (s[0], -s[1]))
        hoisted.append(f"    m = in{first}.shape[0]")
        for size, j in suffixes:
            if size == inner:
                index[j] = "[k]"
            else:
                hoisted.append(f"    m{j} = in{j}.shape[0]")
                index[j] = f"[k % m{j}]"
    else:
        inner, first = prefixes[0]
        # a prefix input is not empty (the group is not), so neither is m
        hoisted.append(f"    m = n // in{first}.shape[0]")
    for size, j in prefixes:
        if size == inner:
            index[j] = "[r]"
        else:
            index[j], modes[j] = "[i]", "copy"

    def nested(line):           # one level deeper, each such input read at its index
        for j, text in index.items():
            line = line.replace(f"[AXIS{j}]", text)
        return "    " + line
    body = [nested(line) if type(line) is str
            else (nested(line[0]), [nested(x) for x in line[1]]) for line in body]
    # m is 0 only when n is
    return ["    for r in range(n // m if m else 0):", "        o = r * m",
            "        for k in range(m):", "            i = o + k"], body


def _packed(outputs):
    """Whether a kernel writes its ``outputs`` as the rows of one array: when
    there are several of one dtype. numba's dispatch costs about 0.25 us per
    array argument, and a kernel of jit(grad(f)) may write dozens."""
    return len(outputs) > 1 and len({np.dtype(v.aval.dtype) for v in outputs}) == 1


def _numba_signature(inputs, outputs, n_reductions, reduced):
    import numba
    # inputs typed read-only: a writable array converts, a read-only one
    # (a broadcast view, a constant) is accepted as it is
    arrays = [numba.types.Array(numba.from_dtype(np.dtype(v.aval.dtype)), 1, "C",
                                readonly=True) for v in inputs]
    if _packed(outputs):
        arrays.append(numba.from_dtype(np.dtype(outputs[0].aval.dtype))[:, ::1])
    else:
        arrays += [numba.from_dtype(np.dtype(v.aval.dtype))[::1] for v in outputs]
    results = numba.types.Tuple([numba.from_dtype(
        np.dtype(np.float64) if np.dtype(v.aval.dtype).kind == "f"
        else np.dtype(v.aval.dtype)) for v in reduced])
    return results(numba.types.intp, *arrays)


@functools.lru_cache(maxsize=KERNEL_CACHE_SIZE)
def _compiled(source, signature):
    """The numba function for ``source`` (disk cache first)."""
    return load_or_build(source, signature)


_PY_SCALARS = (bool, int, float)


def _make_call(kernel, inputs, modes, outputs, reduced, shape):
    """The Python function that checks, flattens, allocates and calls.

    It is generated per kernel (the checks and allocations written out, no
    loops), as this is the whole per-call cost of a kernel on small arrays.
    """
    size = math.prod(shape)
    expected = [(tuple(v.aval.shape), np.dtype(v.aval.dtype)) for v in inputs]
    namespace = {"kernel": kernel, "empty": np.empty, "np": np}
    # one output may go into a buffer given (see `CpuKernel.overwritable`)
    lines = checked_call_header(expected, namespace,
                                extra=("out=None",) if len(outputs) == 1 else ())
    flat = []
    for j, mode in enumerate(modes):
        flat.append(f"x{j}.ravel()" if mode != "copy" else
                    f"np.ascontiguousarray(np.broadcast_to(x{j}, SHAPE)).ravel()")
    namespace["SHAPE"] = shape
    if _packed(outputs):
        # each output a row of one allocation (a view: callers may keep it)
        namespace["O"] = np.dtype(outputs[0].aval.dtype)
        lines.append(f"    o = empty(({len(outputs)}, {size}), O)")
        flat.append("o")
        row = "o[{}]" if len(shape) == 1 else "o[{}].reshape(SHAPE)"
        results = [row.format(j) for j in range(len(outputs))]
    else:
        for j, v in enumerate(outputs):
            namespace[f"O{j}"] = np.dtype(v.aval.dtype)
            # the given buffer only if C-contiguous: the kernel writes flat
            # arrays, and ravel() of another layout would be a copy
            lines.append(f"    o{j} = empty(SHAPE, O{j})" +
                         (" if out is None or not out.flags.c_contiguous else out"
                          if len(outputs) == 1 else ""))
        flat += [f"o{j}.ravel()" for j in range(len(outputs))]
        results = [f"o{j}" for j in range(len(outputs))]
    lines.append(f"    r = kernel({size}, {', '.join(flat)})")
    for r, v in enumerate(reduced):
        namespace[f"R{r}"] = np.dtype(v.aval.dtype)
        if v.aval.shape:            # keepdims
            namespace[f"RS{r}"] = tuple(v.aval.shape)
            results.append(f"np.full(RS{r}, r[{r}], R{r})")
        else:                       # a NumPy scalar, as ndarray.sum returns
            results.append(f"R{r}.type(r[{r}])")
    lines.append(f"    return ({''.join(x + ', ' for x in results)})")
    exec(compile("\n".join(lines) + "\n", "<fgrad cpu kernel call>", "exec"), namespace)
    return namespace["call"]


def checked_call_header(expected, namespace, what="a fused kernel", extra=()):
    """The first lines of a generated ``call(x0, x1, ...)`` that check each
    argument's shape and dtype against ``expected`` ((shape, dtype) pairs)
    and hand a mismatch to `admit_inputs`; the names they use go into
    ``namespace``. ``extra`` are further parameters, unchecked (``"out=None"``).
    Shared with `fgrad.compiler.whole_graph`."""
    args = [f"x{j}" for j in range(len(expected))]
    namespace["admit"] = functools.partial(admit_inputs, expected=expected, what=what)
    checks = []
    for j, (want_shape, want_dtype) in enumerate(expected):
        namespace[f"S{j}"], namespace[f"D{j}"] = want_shape, want_dtype
        checks.append(f"x{j}.shape != S{j} or x{j}.dtype != D{j}")
    lines = [f"def call({', '.join(args + list(extra))}):"]
    if checks:
        lines += ["    try:",
                  f"        bad = {' or '.join(checks)}",
                  "    except AttributeError:         # a Python number",
                  "        bad = True",
                  "    if bad:",
                  f"        {', '.join(args)}, = admit({', '.join(args)})"]
    return lines


def admit_inputs(*args, expected, what="a fused kernel"):
    """The arguments, Python numbers made arrays; or `InvalidInputError` for
    an array ``what`` was not built for (``expected``: (shape, dtype) pairs)."""
    admitted = []
    for j, (x, (want_shape, want_dtype)) in enumerate(zip(args, expected)):
        if type(x) in _PY_SCALARS and not want_shape:       # a weakly typed number
            x = np.asarray(x, want_dtype)
        got = (tuple(getattr(x, "shape", ())), np.dtype(getattr(x, "dtype", type(x))))
        if got != (want_shape, want_dtype):
            raise InvalidInputError(
                f"{what} built for {want_dtype.name}{list(want_shape)} as "
                f"input {j} received {got[1].name}{list(got[0])}: compiled code runs "
                "only on the shapes and dtypes it was traced for; call the jitted "
                "function (it retraces) instead of its compiled graph.")
        admitted.append(x)
    return admitted


def _cpu_fused_impl(*args, kernel):
    return kernel.call(*args)


def _cpu_fused_abstract(*avals, kernel):
    return tuple(kernel.out_avals)


# Made only by this pass, after every transformation: it needs no rules.
cpu_fused_p = Primitive("cpu_fused", _cpu_fused_impl, _cpu_fused_abstract,
                        multiple_results=True, register=False)
cpu_fused_p.lowering = lambda xp, kernel: kernel.call


class KernelPlan:
    """One kernel `plan_kernels` chose: the equations it replaces and its text.

    ``last`` is the index of the equation whose place the kernel takes,
    ``replaced`` the indices of every equation it computes; ``definition``
    is its ``def kernel(n, in0, ..., out0 | outs)`` text and ``vectorised``
    whether that calls `fgrad.compiler.vector_math` (then ``source``, the
    kernel's whole text and cache key, carries that module's text too).
    ``inputs`` are the operands passed in (vars or array literals) with their
    ``modes`` (see `_input_mode`), ``outputs`` the member vars written out
    (as the rows of one array when ``packed``), ``reduced`` the reductions'
    output vars, ``shape`` the group's shape.
    """

    __slots__ = ("last", "replaced", "definition", "vectorised", "source", "inputs",
                 "modes", "outputs", "reduced", "shape", "packed")

    def __init__(self, last, replaced, definition, vectorised, inputs, modes, outputs,
                 reduced, shape):
        self.last, self.replaced = last, replaced
        self.definition, self.vectorised = definition, vectorised
        self.source = (VECTOR_SOURCE if vectorised else "") + definition
        self.inputs, self.modes, self.outputs = inputs, modes, outputs
        self.reduced, self.shape = reduced, shape
        self.packed = _packed(outputs)


def plan_kernels(graph):
    """The `KernelPlan` s for ``graph``: each elementwise group (and the full
    reductions ending it), cut into runs of at most `MAX_KERNEL_OPS`, that
    the cost model (`worth_fusing`) prefers to NumPy calls. Shared with
    `fgrad.compiler.whole_graph`, which writes them into its function.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> g = fgrad.make_graph(lambda x: fnp.sum(x * 2.0 + 1.0))(np.ones(64))
    >>> [(p.replaced, len(p.inputs), len(p.reduced)) for p in plan_kernels(g)]
    [([0, 1, 2], 1, 1)]
    """
    groups = plan_groups(graph, can_fuse=cpu_fusable, min_size=1)
    if not groups:
        return []
    readers = reader_counts(graph)
    plans = []
    for members, reductions in _attach_reductions(graph, groups):
        for run, reds in _pieces(members, reductions):
            if len(run) + len(reds) < 2:
                continue                  # one NumPy call is as good
            shape = tuple(graph.eqns[run[-1]].outvars[0].aval.shape)
            definition, vectorised, inputs, modes, outputs, reduced = kernel_source(
                graph, run, reds, readers)
            if not inputs:
                continue                  # a constant: folding's business
            if not worth_fusing([graph.eqns[k] for k in run + reds], len(inputs),
                                len(outputs), math.prod(shape)):
                continue
            plans.append(KernelPlan(max(run + reds), sorted(run + reds), definition,
                                    vectorised, inputs, modes, outputs, reduced, shape))
    return plans


def compiled_kernel(plan):
    """The numba function of a `KernelPlan` (compiled for its argument types:
    read-only flat inputs, writable flat outputs; from the caches when it
    was compiled before)."""
    signature = _numba_signature(plan.inputs, plan.outputs, len(plan.reduced), plan.reduced)
    return _compiled(plan.source, signature)


def fuse_for_cpu(graph):
    """``graph`` with each elementwise group (and the full reductions ending
    it) replaced by one numba kernel call.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> g = fgrad.make_graph(lambda x: fnp.sum(fnp.tanh(fnp.sin(x) + 1.0)))(np.ones(3))
    >>> fused = fuse_for_cpu(g)                        # doctest: +SKIP
    >>> [e.prim.name for e in fused.eqns]              # doctest: +SKIP
    ['cpu_fused']
    """
    replace, skip = {}, set()
    for plan in plan_kernels(graph):
        outputs, reduced = plan.outputs, plan.reduced
        digest = hashlib.sha256(plan.source.encode()).hexdigest()[:12]
        fn = compiled_kernel(plan)
        kernel = CpuKernel(plan.source, f"fgrad_cpu_{digest}",
                           _make_call(fn, plan.inputs, plan.modes, outputs, reduced,
                                      plan.shape), fn,
                           len(plan.replaced), tuple(v.aval for v in outputs + reduced),
                           [k for k in plan.replaced
                            if graph.eqns[k].outvars[0] in reduced],
                           _overwritable(plan))
        replace[plan.last] = Equation(cpu_fused_p, list(plan.inputs), outputs + reduced,
                                      {"kernel": kernel})
        skip.update(k for k in plan.replaced if k != plan.last)
    if not replace:
        return graph
    eqns = [replace.get(k, e) for k, e in enumerate(graph.eqns) if k not in skip]
    return Graph(graph.invars, eqns, graph.outvars)


def _overwritable(plan):
    """The inputs of ``plan`` whose buffer its one output may be written into:
    read at the element written (mode "full"), of its shape and dtype. Each
    iteration of the loop reads all it needs before it writes, but a kernel
    with vector functions may run its loop a second time, reading its inputs
    again: it writes into none."""
    if len(plan.outputs) != 1 or plan.vectorised:
        return ()
    out = plan.outputs[0].aval
    return tuple(j for j, (v, mode) in enumerate(zip(plan.inputs, plan.modes))
                 if mode == "full" and v.aval.shape == out.shape and v.aval.dtype == out.dtype)


def cpu_kernels(compiled):
    """The `CpuKernel` s in a compiled graph (a `Compiled`), in order.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> from fgrad.compiler.codegen import compile_graph
    >>> cpu_kernels(compile_graph(fgrad.make_graph(fnp.sin)(np.ones(2))))
    []
    """
    return [e.params["kernel"] for e in compiled.graph.eqns if e.prim is cpu_fused_p]
