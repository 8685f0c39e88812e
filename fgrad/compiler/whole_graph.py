"""Whole-graph compilation: a small staged graph as one numba function.

On small arrays a jitted function's time is mostly Python: one call into NumPy
per equation, about a microsecond each, against a few nanoseconds of work. When
every equation of an optimised graph is in the table below, `plan` writes the
whole graph (forward and backward alike, as `jit` stages them) as the text of
one function, which numba compiles: the per-equation dispatch disappears, and
``lax.scan``, ``while_loop`` and ``cond`` (``fori_loop`` is one of the first
two) become plain loops and branches inside it.

The table: elementwise operations in float32, float64, int64 and bool (the
integer and bool ones limited to those whose NumPy semantics a plain
operation reproduces), ``convert_element_type`` except float to integer,
``sum`` / ``mean`` / ``max`` / ``min`` over any axes, ``matmul`` of 1-d and
2-d float arrays, ``reshape``, ``transpose``, ``broadcast_to``, ``full_like``,
``getitem`` with ints and slices, and ``scan``, ``while_loop`` and ``cond``
whose graphs are in the table themselves. Anything else, or an elementwise
operation or reduction on more than `MAX_ELEMENTS` elements (there the work
dwarfs Python's per-call cost, and the fused kernels of
`fgrad.compiler.cpu_fusion` are as fast), leaves the graph to the
per-equation code, and
``plan(graph).unsupported`` (shown by ``jit(f).lower(...).whole_graph``)
names each equation that stopped it and why.

Values of shape ``()`` are numba scalars; every other value an array. Each
elementwise group `fgrad.compiler.cpu_fusion.plan_kernels` picks is a call of
that fused kernel (compiled and cached on its own); the other equations call
NumPy's functions through helpers compiled once per argument types
(`_Writer.call`), which keeps numba's compile time about linear in the
number of equations. Outside kernels, ``sin``, ``cos``, ``exp`` and ``tanh``
of arrays run as loops over the vector
functions of `fgrad.compiler.vector_math`, which LLVM vectorises; ``log``,
``arcsinh`` and the other functions numba computes with the C library, 10-30
times slower than NumPy's SIMD loops, are called back into NumPy through
numba's object mode on arrays large enough (`OBJMODE_NS`). The
generated function checks nothing: the Python wrapper `build` makes checks
every argument's shape and dtype first and raises `InvalidInputError` for one
it was not compiled for (numba never reads out of bounds on a static shape
it was not built for). Compiled functions go through the disk cache of
`fgrad.compiler.kernel_cache`, keyed by their source.

Compiling costs seconds (numba's LLVM pass over the whole program), so `jit`
compiles a graph this way only once it has been called `compile_after()`
times with one signature (10 by default): the first calls run the
per-equation code. ``FGRAD_JIT_WHOLE_GRAPH=0`` turns whole-graph compilation
off; ``FGRAD_JIT_WHOLE_GRAPH=N`` compiles at the N-th call (1: at once).
``fuse=False`` and ``FGRAD_JIT_FUSE=0`` turn it off too.
"""
import functools
import hashlib
import importlib.util
import math
import os

import numpy as np

from fgrad.compiler.cpu_fusion import (
    ELEMENT_NS,
    checked_call_header,
    compiled_kernel,
    number_text,
    numpy_type_text,
    plan_kernels,
    scalar_literal_text,
)
from fgrad.compiler.fusion import compute_dtypes, elementwise_name, operand_rule
from fgrad.compiler.kernel_cache import alias_key, is_cached_as, load_or_build
from fgrad.compiler.passes import effectful
from fgrad.compiler.vector_math import SOURCE as VECTOR_SOURCE
from fgrad.compiler.vector_math import VECTOR_FUNCTIONS
from fgrad.core.graph import Var

WHOLE_GRAPH_ENV = "FGRAD_JIT_WHOLE_GRAPH"
# calls of one compiled graph after which it is compiled whole (when unset)
COMPILE_AFTER_CALLS = 10
# numba's compile time of a whole graph, roughly, on one x86-64 core: each
# function it compiles (the graph's, and a helper per NumPy function and
# argument types it calls, `_Writer.call`) and each line of the graph's
# (`Plan.estimated_seconds`; measured: the 50-step RNN's gradient, 15
# functions and 653 lines, 9 s; the MLP's at batch 8, 20 and 67, some 30 s).
# In the background a graph is compiled whole only once its calls have taken
# that long (`fgrad.compiler.tiers`)
COMPILE_SECONDS_PER_FUNCTION = 1.0
COMPILE_SECONDS_PER_LINE = 0.01
# the largest elementwise operation or reduction compiled into a whole graph
MAX_ELEMENTS = 8192
# the most equations (loop bodies and branches counted once): with NumPy's
# functions called through shared helpers (`_Writer.call`) numba's compile
# time grows about linearly, some 10 ms an equation past a few seconds for
# the helpers (on one x86-64 core, the gradient of an unrolled RNN: 5.6 s for
# 292 equations, 8.9 s for 667; with every call written inline it was 47 s
# for 292 and 230 s for 600)
MAX_EQUATIONS = 1000
# fewer equations, and no loop: the Python the function saves is less than
# the checks and numba's dispatch it adds (about 1.5 us a call). Counted
# after fusion: a fused kernel is one call (the gradient of the 200-op chain,
# one kernel, is not compiled again as a whole graph)
MIN_EQUATIONS = 4
# what compiled code pays to call back into NumPy (numba's objmode: the GIL,
# boxing the arrays); NumPy's SIMD loops for exp, tanh, log and kin are so much
# faster than numba's one-element-at-a-time C library calls that on a few
# hundred elements calling NumPy wins (tanh: about 1 ns an element, against
# 10-30 ns), as `cpu_fusion.ELEMENT_NS` estimates
OBJMODE_NS = 1500

_DTYPES = frozenset(np.dtype(d) for d in ("bool", "int64", "float32", "float64"))

# elementwise operations: on floats, every one numba implements as NumPy does;
# on int64 and bool, those with no division, overflow check or float result
_FLOAT_OPS = frozenset((
    "add", "subtract", "multiply", "divide", "power", "negative", "square", "maximum",
    "minimum", "absolute", "equal", "not_equal", "less", "less_equal", "greater",
    "greater_equal", "sqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p",
    "cbrt", "sin", "cos", "tan", "sinh", "cosh", "tanh", "arcsin", "arccos", "arctan",
    "arcsinh", "arccosh", "arctanh", "floor", "ceil", "trunc", "rint", "isnan", "isinf",
    "isfinite", "signbit", "arctan2", "hypot", "where", "convert_element_type"))
_INT_OPS = frozenset((
    "add", "subtract", "multiply", "negative", "square", "maximum", "minimum",
    "absolute", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "where", "convert_element_type"))
_BOOL_OPS = frozenset((
    "logical_and", "logical_or", "logical_xor", "logical_not", "equal", "not_equal",
    "where", "convert_element_type"))
_REDUCTIONS = {"sum": "np.sum({0})", "mean": "np.mean({0})", "max": "{0}.max()",
               "min": "{0}.min()"}


class _Unsupported(Exception):
    """An equation outside the table (the message says why)."""


def _describe(eqn):
    ins = ", ".join(str(v.aval) for v in eqn.invars)
    outs = ", ".join(str(v.aval) for v in eqn.outvars)
    return f"{eqn.prim.name}({ins}) -> {outs}"


class _Writer:
    """The text of one function, written equation by equation."""

    def __init__(self):
        self.lines = []
        self.names = {}           # Var -> its name in the text
        self.fresh = set()        # vars holding a new C-contiguous writable array
        self.contiguous = set()   # vars holding a C-contiguous array (the inputs)
        self.ordered = set()      # 2-d transposes of those: BLAS reads them as they are
        self.unsupported = []
        self.helpers = {}         # (ufunc, arity, dtype, rank) -> a NumPy-calling helper
        self.helper_lines = []
        self.consts = []          # array literals, passed in as arguments
        self.const_names = {}
        self.counter = 0
        self.kernels = {}         # id(equation) -> the `KernelPlan` written in its place
        self.in_kernels = set()   # ids of the other equations those kernels compute
        self.source = None        # the function's text, once written
        self.linked = {}          # name -> the `KernelPlan` of a kernel it calls

    def new(self, prefix="v"):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def emit(self, depth, line):
        self.lines.append("    " * depth + line)

    def operand(self, v, dtype=None):
        """Text for operand ``v``, cast to ``dtype`` when it has another."""
        if type(v) is Var:
            text = self.names[v]
        else:
            text = scalar_literal_text(v, v.aval.dtype) if not v.aval.shape else None
            if text is None:
                key = id(v.value)
                text = self.const_names.get(key)
                if text is None:
                    text = self.const_names[key] = f"k{len(self.consts)}"
                    self.consts.append(np.ascontiguousarray(v.value))
        if dtype is not None and np.dtype(dtype) != np.dtype(v.aval.dtype):
            if v.aval.shape:
                return f"{text}.astype({numpy_type_text(dtype)})"
            return f"{numpy_type_text(dtype)}({text})"
        return text

    def layout(self, v):
        """"fresh" (a new C-ordered writable array), "contiguous" (C-ordered,
        perhaps read-only), or None (a view, a literal, a scalar)."""
        if type(v) is not Var:
            return None
        return "fresh" if v in self.fresh else "contiguous" if v in self.contiguous \
            else None

    def bound(self, v):
        """``(text, layout)`` of operand ``v``, to bind a graph's input to."""
        return self.operand(v), self.layout(v)

    def owned(self, v):
        """Text for ``v`` as a value a loop may carry or a branch return: a new
        array where ``v`` might be a view or read-only (numba gives every
        carried value one type across iterations and branches)."""
        text = self.operand(v)
        if v.aval.shape and not (type(v) is Var and v in self.fresh):
            return f"{text}.copy()"
        return text

    def vector_functions(self):
        """Put `fgrad.compiler.vector_math`'s text among the helpers (once)."""
        if "vector" not in self.helpers:
            self.helpers["vector"] = True
            self.helper_lines += VECTOR_SOURCE.splitlines() + [""]

    def call(self, function, args, then=""):
        """Text calling NumPy's ``function`` (e.g. ``"dot"``) on ``args`` (texts)
        through a compiled helper of this function's own (which applies
        ``then``, e.g. ``".ravel()"``, to the result).

        numba compiles such a helper once per argument types, however many
        equations call it, and LLVM leaves the call a call; written inline,
        every call site gets its own copy of NumPy's implementation (np.dot's
        checks and BLAS calls, a ufunc's broadcasting loops), and LLVM's time
        grows faster than linearly with the function: 47 s against 9 s for
        the 292 equations of a 20-step RNN's gradient.
        """
        helper = f"np_{function}_{len(args)}" + ("_flat" if then else "")
        if ("call", helper) not in self.helpers:
            self.helpers[("call", helper)] = helper
            params = ", ".join(f"x{j}" for j in range(len(args)))
            self.helper_lines += ["@numba.njit(error_model='numpy')",
                                  f"def {helper}({params}):",
                                  f"    return np.{function}({params}){then}", ""]
        return f"{helper}({', '.join(args)})"

    def assign(self, depth, eqn, text, fresh):
        name = self.names[eqn.outvars[0]] = self.new()
        self.emit(depth, f"{name} = {text}")
        if fresh:
            self.fresh.add(eqn.outvars[0])
            self.contiguous.add(eqn.outvars[0])
        return name


def _check_avals(eqn):
    for v in list(eqn.invars) + list(eqn.outvars):
        if np.dtype(v.aval.dtype) not in _DTYPES:
            raise _Unsupported(f"dtype {np.dtype(v.aval.dtype).name} (whole-graph code "
                               "computes in float32, float64, int64 and bool)")


def _check_size(eqn):
    for v in list(eqn.invars) + list(eqn.outvars):
        if math.prod(v.aval.shape) > MAX_ELEMENTS:
            raise _Unsupported(f"{math.prod(v.aval.shape)} elements, over MAX_ELEMENTS="
                               f"{MAX_ELEMENTS}: NumPy and the fused kernels are faster "
                               "on large arrays")


def _elementwise(w, depth, eqn, name):
    _check_size(eqn)
    try:
        operand_dtypes, compute = compute_dtypes(operand_rule(name), eqn)
    except (KeyError, TypeError, ValueError):
        raise _Unsupported(f"{name} is not in the whole-graph table") from None
    kind = np.dtype(compute).kind
    table = _FLOAT_OPS if kind == "f" else _BOOL_OPS if kind == "b" else _INT_OPS
    if name not in table:
        raise _Unsupported(f"{name} on {np.dtype(compute).name} is not in the "
                           "whole-graph table")
    out = eqn.outvars[0].aval
    args = [w.operand(v, d) for v, d in zip(eqn.invars, operand_dtypes)]
    if name == "convert_element_type":
        source = np.dtype(eqn.invars[0].aval.dtype)
        if source.kind == "f" and np.dtype(out.dtype).kind != "f":
            raise _Unsupported("a float to integer conversion (NumPy's and a C cast "
                               "differ out of range)")
        text = args[0]
        if source != np.dtype(out.dtype):
            text = f"{text}.astype({numpy_type_text(out.dtype)})" if out.shape else \
                f"{numpy_type_text(out.dtype)}({text})"
        return w.assign(depth, eqn, text, fresh=False)
    if name == "where":
        if not out.shape:
            text = f"({args[1]} if {args[0]} else {args[2]})"
        else:
            # numba's where wants arrays of one shape
            args = [a if v.aval.shape == out.shape else
                    f"np.broadcast_to({a}, {tuple(out.shape)})" if v.aval.shape else
                    f"np.full({tuple(out.shape)}, {a})"
                    for a, v in zip(args, eqn.invars)]
            text = w.call("where", args)
        return w.assign(depth, eqn, text, fresh=bool(out.shape))
    text = w.call(name, args) if out.shape else f"np.{name}({', '.join(args)})"
    if kind == "f" and out.shape and name in VECTOR_FUNCTIONS:
        return _vectorised(w, depth, eqn, name, args[0])
    numpy_ns, numba_ns = ELEMENT_NS.get(name, (0.0, 0.0))
    if kind == "f" and out.shape and math.prod(out.shape) * (numba_ns - numpy_ns) > OBJMODE_NS:
        return _through_numpy(w, depth, eqn, name, args)
    if not out.shape:           # numba's scalar arithmetic may widen: keep the dtype
        text = f"{numpy_type_text(out.dtype)}({text})"
    return w.assign(depth, eqn, text, fresh=bool(out.shape))


def _vectorised(w, depth, eqn, name, arg):
    """``name`` (sin, cos, exp, tanh) of the array ``arg`` through a loop over
    the vector function of `fgrad.compiler.vector_math`, which LLVM turns into
    SIMD code; an argument past its limit, nan or inf, and numba's own
    ``np.<name>`` (the C library's) computes the whole array instead."""
    out = eqn.outvars[0].aval
    dtype = np.dtype(out.dtype).name
    key = ("vector", name, dtype, out.ndim)
    helper = w.helpers.get(key)
    if helper is None:
        w.vector_functions()
        function, limit = VECTOR_FUNCTIONS[name]
        helper = w.helpers[key] = f"{function}_{dtype}_{out.ndim}d"
        cast = numpy_type_text(out.dtype)
        w.helper_lines += [
            "@numba.njit(error_model='numpy')",
            f"def {helper}(x):",
            "    flat = np.ascontiguousarray(x).ravel()",
            f"    out = np.empty(flat.size, {cast})",
            "    ok = True",
            "    for j in range(flat.size):",
            f"        ok &= abs(flat[j]) <= {limit!r}",
            f"        out[j] = {cast}({function}(flat[j]))",
            "    if not ok:",
            "        for j in range(flat.size):",
            f"            out[j] = {cast}(np.{name}(flat[j]))",
            "    return out.reshape(x.shape)", ""]
    return w.assign(depth, eqn, f"{helper}({arg})", fresh=True)


def _through_numpy(w, depth, eqn, name, args):
    """Call NumPy's ``name`` ufunc on ``args`` (texts) from compiled code.

    The call goes through a small compiled helper per (ufunc, dtype, rank):
    numba's objmode block directly in a loop body can fail to compile.
    """
    out = eqn.outvars[0].aval
    dtype = np.dtype(out.dtype).name
    key = (name, len(args), dtype, out.ndim)
    helper = w.helpers.get(key)
    if helper is None:
        helper = w.helpers[key] = f"numpy_{name}_{dtype}_{out.ndim}d"
        params = ", ".join(f"x{j}" for j in range(len(args)))
        layout = ", ".join([":"] * (out.ndim - 1) + ["::1"])
        # no nogil=True: the helper runs only inside the kernel, which releases
        # the GIL, and objmode takes it back for the call (with nogil=True
        # numba would warn, at every compile, that object mode keeps the GIL)
        w.helper_lines += [
            "@numba.njit(error_model='numpy')",
            f"def {helper}({params}):",
            f"    with numba.objmode(out='{dtype}[{layout}]'):",
            f"        out = np.ascontiguousarray(np.{name}({params}))",
            "    return out", ""]
    return w.assign(depth, eqn, f"{helper}({', '.join(args)})", fresh=True)


def _reduction(w, depth, eqn):
    _check_size(eqn)
    (x,), out = eqn.invars, eqn.outvars[0].aval
    axis = tuple(sorted(eqn.params.get("axis", ())))
    if set(eqn.params) - {"axis", "keepdims"} or np.dtype(x.aval.dtype).kind != "f" \
            or np.dtype(out.dtype) != np.dtype(x.aval.dtype):
        raise _Unsupported("a reduction with parameters or dtypes outside the table")
    if math.prod(x.aval.shape) == 0:
        raise _Unsupported("a reduction of an empty array")
    name, cast = eqn.prim.name, numpy_type_text(out.dtype)
    src = w.operand(x)
    if not x.aval.shape or not axis:
        return w.assign(depth, eqn, src, fresh=False)
    pattern = _REDUCTIONS[name]
    if len(axis) == x.aval.ndim:
        value = f"{cast}({pattern.format(src)})"
        text = f"np.full({tuple(out.shape)}, {value})" if out.shape else value
        return w.assign(depth, eqn, text, fresh=bool(out.shape))
    # some axes: the kept ones first, as rows of a matrix reduced row by row
    kept = tuple(k for k in range(x.aval.ndim) if k not in axis)
    rows = math.prod(x.aval.shape[k] for k in kept)
    perm = kept + axis
    moved = src if perm == tuple(range(x.aval.ndim)) else f"np.transpose({src}, {perm})"
    matrix, result, i = w.new("m"), w.new("r"), w.new("i")
    w.emit(depth, f"{matrix} = np.ascontiguousarray({moved}).reshape(({rows}, -1))")
    w.emit(depth, f"{result} = np.empty({rows}, {cast})")
    w.emit(depth, f"for {i} in range({rows}):")
    w.emit(depth + 1, f"{result}[{i}] = {pattern.format(f'{matrix}[{i}]')}")
    return w.assign(depth, eqn, f"{result}.reshape({tuple(out.shape)})", fresh=True)


def _matmul(w, depth, eqn):
    a, b = eqn.invars
    if eqn.params or not (1 <= a.aval.ndim <= 2 and 1 <= b.aval.ndim <= 2) or \
            np.dtype(a.aval.dtype).kind != "f" or a.aval.dtype != b.aval.dtype:
        raise _Unsupported("matmul outside 1-d and 2-d float arrays of one dtype")
    args = []
    for v in (a, b):
        text = w.operand(v)
        # numba's BLAS call wants a C- or Fortran-ordered array
        if type(v) is Var and v not in w.contiguous and v not in w.ordered:
            text = f"np.ascontiguousarray({text})"
        args.append(text)
    out = eqn.outvars[0].aval
    text = w.call("dot", args)
    if not out.shape:
        text = f"{numpy_type_text(out.dtype)}({text})"
    return w.assign(depth, eqn, text, fresh=bool(out.shape))


def _reshape(w, depth, eqn):
    x, out = eqn.invars[0], eqn.outvars[0].aval
    src = w.operand(x)
    if not out.shape:
        text = f"{src}[{', '.join('0' * x.aval.ndim)}]" if x.aval.shape else src
        return w.assign(depth, eqn, text, fresh=False)
    if not x.aval.shape:
        return w.assign(depth, eqn, f"np.full({tuple(out.shape)}, {src})", fresh=True)
    if w.layout(x) is None:
        src = f"np.ascontiguousarray({src})"
    return w.assign(depth, eqn, f"{src}.reshape({tuple(out.shape)})", fresh=False)


def _transpose(w, depth, eqn):
    x = eqn.invars[0]
    axes = tuple(eqn.params["axes"])
    src = w.operand(x)
    if axes == tuple(range(len(axes))):
        return w.assign(depth, eqn, src, fresh=False)
    # a 2-d .T keeps numba's layout known (Fortran order), which np.dot reads
    text = f"{src}.T" if axes == (1, 0) else f"np.transpose({src}, {axes})"
    name = w.assign(depth, eqn, text, fresh=False)
    if len(axes) == 2 and w.layout(x) is not None:
        w.ordered.add(eqn.outvars[0])       # Fortran order: BLAS reads it as it is
    return name


def _broadcast_to(w, depth, eqn):
    x, out = eqn.invars[0], eqn.outvars[0].aval
    src = w.operand(x)
    if tuple(x.aval.shape) == tuple(out.shape):
        return w.assign(depth, eqn, src, fresh=False)
    if not x.aval.shape:
        return w.assign(depth, eqn, f"np.full({tuple(out.shape)}, {src})", fresh=True)
    return w.assign(depth, eqn, f"np.broadcast_to({src}, {tuple(out.shape)})",
                    fresh=False)


def _full_like(w, depth, eqn):
    out = eqn.outvars[0].aval
    value = eqn.params["fill_value"]
    if type(value) not in (bool, int, float) or np.dtype(out.dtype) not in _DTYPES:
        raise _Unsupported("full_like of a value that is not a Python number")
    text = number_text(value, out.dtype)
    if text is None:
        raise _Unsupported("full_like of an integer too large for int64")
    if out.shape:
        text = f"np.full({tuple(out.shape)}, {text})"
    return w.assign(depth, eqn, text, fresh=bool(out.shape))


def _index_text(spec, drop_new_axes=False):
    """Python text of a basic index (ints, slices, None, ...), or raise."""
    parts = []
    for item in spec:
        if item[0] == "int":
            parts.append(str(item[1]))
        elif item[0] == "slice":
            parts.append(":".join("" if p is None else str(p) for p in item[1:]))
        elif item[0] == "none":
            if not drop_new_axes:
                parts.append("None")
        elif item[0] == "ellipsis":
            parts.append("...")
        else:
            raise _Unsupported(f"indexing with {item[0]}s (only ints, slices, None "
                               "and ... are in the table)")
    return ", ".join(parts)


def _getitem(w, depth, eqn):
    x = eqn.invars[0]
    if len(eqn.invars) != 1:
        raise _Unsupported("indexing with arrays (only ints, slices, None and ... are "
                           "in the table)")
    index = _index_text(eqn.params["spec"])
    text = f"{w.operand(x)}[{index}]" if index else w.operand(x)
    return w.assign(depth, eqn, text, fresh=False)


def _scatter_add(w, depth, eqn):
    # the derivative of a basic index: each position is written at most once
    if len(eqn.invars) != 1:
        raise _Unsupported("scatter_add at index arrays (repeated positions add up)")
    ct, spec, shape = eqn.invars[0], eqn.params["spec"], tuple(eqn.params["shape"])
    out = eqn.outvars[0].aval
    index = _index_text(spec, drop_new_axes=True)
    target = np.empty(shape)[eval(f"np.s_[{index}]", {"np": np})].shape if index \
        else shape
    value = w.operand(ct, out.dtype)
    if tuple(ct.aval.shape) != target:              # new axes of the index dropped
        value = f"np.ascontiguousarray({value}).reshape({target})"
    name = w.assign(depth, eqn, f"np.zeros({shape}, {numpy_type_text(out.dtype)})",
                    fresh=True)
    w.emit(depth, f"{name}[{index or '...'}] = {value}")
    return name


def _graph_body(w, depth, graph, inputs):
    """Write ``graph`` at ``depth`` with its inputs bound to ``inputs``
    (``(text, layout)`` pairs: a name, and "fresh", "contiguous" or None as
    in `_Writer.layout`); returns its outputs' vars-or-literals."""
    for v, (text, layout) in zip(graph.invars, inputs):
        w.names[v] = text
        if layout == "fresh":
            w.fresh.add(v)
        if layout in ("fresh", "contiguous"):
            w.contiguous.add(v)
    _write_eqns(w, depth, _live(graph.eqns, graph.outvars))
    return list(graph.outvars)


def _carry_in(w, depth, values):
    """Names for loop-carried values, set to ``values`` (owned copies)."""
    names = []
    for v in values:
        name = w.new("c")
        w.emit(depth, f"{name} = {w.owned(v)}")
        names.append(name)
    return names


def _fresh(names):
    return [(n, "fresh") for n in names]


def _carry_out(w, depth, names, values):
    if names:
        w.emit(depth, f"{', '.join(names)} = {', '.join(w.owned(v) for v in values)}")


def _bind_outputs(w, eqn, names, fresh):
    for v, name, is_fresh in zip(eqn.outvars, names, fresh):
        w.names[v] = name
        if is_fresh and v.aval.shape:
            w.fresh.add(v)


def _scan(w, depth, eqn):
    p = eqn.params
    body, n_consts, n_carry, length = p["body"], p["n_consts"], p["n_carry"], p["length"]
    consts = [w.bound(v) for v in eqn.invars[:n_consts]]
    carry = _carry_in(w, depth, eqn.invars[n_consts:n_consts + n_carry])
    xs = [w.bound(v) for v in eqn.invars[n_consts + n_carry:]]
    ys = []
    for a in body.out_avals[n_carry:]:
        name = w.new("ys")
        w.emit(depth, f"{name} = np.empty({(length,) + tuple(a.shape)}, "
                      f"{numpy_type_text(a.dtype)})")
        ys.append(name)
    i = w.new("i")
    steps = f"range({length} - 1, -1, -1)" if p["reverse"] else f"range({length})"
    w.emit(depth, f"for {i} in {steps}:")
    sliced = []
    for x, layout in xs:
        name = w.new("x")
        w.emit(depth + 1, f"{name} = {x}[{i}]")
        # one step of a C-ordered array is C-ordered (and a scalar of a 1-d one)
        sliced.append((name, "contiguous" if layout else None))
    outs = _graph_body(w, depth + 1, body, consts + _fresh(carry) + sliced)
    # the outputs may read the carried values of this step: stored first
    for name, v in zip(ys, outs[n_carry:]):
        w.emit(depth + 1, f"{name}[{i}] = {w.operand(v)}")
    _carry_out(w, depth + 1, carry, outs[:n_carry])
    _bind_outputs(w, eqn, carry + ys, [True] * len(eqn.outvars))


def _while(w, depth, eqn):
    p = eqn.params
    n_cc, n_bc = p["n_cc"], p["n_bc"]
    cc = [w.bound(v) for v in eqn.invars[:n_cc]]
    bc = [w.bound(v) for v in eqn.invars[n_cc:n_cc + n_bc]]
    carry = _carry_in(w, depth, eqn.invars[n_cc + n_bc:])
    w.emit(depth, "while True:")
    (pred,) = _graph_body(w, depth + 1, p["cond"], cc + _fresh(carry))
    w.emit(depth + 1, f"if not {w.operand(pred)}:")
    w.emit(depth + 2, "break")
    outs = _graph_body(w, depth + 1, p["body"], bc + _fresh(carry))
    _carry_out(w, depth + 1, carry, outs)
    _bind_outputs(w, eqn, carry, [True] * len(carry))


def _cond(w, depth, eqn):
    branches = eqn.params["branches"]
    index, ops = eqn.invars[0], [w.bound(v) for v in eqn.invars[1:]]
    if np.dtype(index.aval.dtype).kind not in "iub" or index.aval.shape:
        raise _Unsupported("cond with an index that is not an integer scalar")
    results = [w.new("o") for _ in eqn.outvars]
    k = w.new("b")
    w.emit(depth, f"{k} = min(max(np.int64({w.operand(index)}), 0), {len(branches) - 1})")
    for b, branch in enumerate(branches):
        head = "if" if b == 0 else "elif"
        w.emit(depth, f"{head} {k} == {b}:" if b < len(branches) - 1 else "else:")
        outs = _graph_body(w, depth + 1, branch, ops)
        _carry_out(w, depth + 1, results, outs)
    _bind_outputs(w, eqn, results, [True] * len(results))


_SHAPES = {"reshape": _reshape, "transpose": _transpose, "broadcast_to": _broadcast_to,
           "full_like": _full_like, "getitem": _getitem, "scatter_add": _scatter_add,
           "matmul": _matmul}
_CONTROL_WRITERS = {"scan": _scan, "while_loop": _while, "cond": _cond}


def _write_eqn(w, depth, eqn):
    _check_avals(eqn)
    name = elementwise_name(eqn.prim)
    if name is not None:
        return _elementwise(w, depth, eqn, name)
    prim = eqn.prim.name
    if prim in _REDUCTIONS and eqn.prim.family == "primitives/reductions.py":
        return _reduction(w, depth, eqn)
    if prim in _SHAPES:
        return _SHAPES[prim](w, depth, eqn)
    if prim in _CONTROL_WRITERS and eqn.prim.family == "fgrad/transforms/control_flow.py":
        return _CONTROL_WRITERS[prim](w, depth, eqn)
    raise _Unsupported(f"{prim} is not in the whole-graph table")


def _live(eqns, outvars):
    """The equations some output needs, and every effectful one (which the
    table does not have: it is reported, not dropped)."""
    needed = {v for v in outvars if type(v) is Var}
    live = []
    for eqn in reversed(eqns):
        if effectful(eqn.prim) or any(v in needed for v in eqn.outvars):
            live.append(eqn)
            needed.update(v for v in eqn.invars if type(v) is Var)
    return live[::-1]


def _fused(w, depth, plan):
    """Write a call of the fused kernel ``plan`` (a `KernelPlan` of
    `fgrad.compiler.cpu_fusion`): one loop for a whole elementwise group,
    where the equations one by one would each allocate an array and loop
    over it."""
    key = ("kernel", plan.source)
    helper = w.helpers.get(key)
    if helper is None:
        # the kernel is the per-equation code's own, compiled and cached on
        # disk on its own (`fgrad.compiler.cpu_fusion.compiled_kernel`) and
        # bound to this name when the function is built; the comment
        # identifies it, as the function's text is its cache key
        helper = w.helpers[key] = f"fused_{len(w.linked)}"
        w.linked[helper] = plan
        digest = hashlib.sha256(plan.source.encode()).hexdigest()[:40]
        w.helper_lines += [f"# {helper}: the fused kernel whose text's SHA-256 starts "
                           f"{digest}", ""]
    shape, n = tuple(plan.shape), math.prod(plan.shape)
    args = [str(n)]
    # what numba compiles per call site is kept short (shared helpers, no
    # reshape of what is flat already): a jit(grad) of the 200-op chain
    # passes some 100 arrays between its kernels
    for v, mode in zip(plan.inputs, plan.modes):
        text = w.operand(v)
        if not v.aval.shape:
            args.append(f"np.full(1, {text})")
        elif mode == "copy":
            args.append(w.call("ascontiguousarray", [f"np.broadcast_to({text}, {shape})"],
                               then=".ravel()"))
        elif v.aval.ndim == 1 and w.layout(v) is not None:
            args.append(text)
        else:
            args.append(w.call("ascontiguousarray", [text], then=".ravel()"))
    flats = []
    if plan.packed:
        rows = w.new("o")
        w.emit(depth, f"{rows} = np.empty(({len(plan.outputs)}, {n}), "
                      f"{numpy_type_text(plan.outputs[0].aval.dtype)})")
        args.append(rows)
        flats = [f"{rows}[{j}]" for j in range(len(plan.outputs))]
    else:
        for v in plan.outputs:
            flat = w.new("o")
            w.emit(depth, f"{flat} = np.empty({n}, {numpy_type_text(v.aval.dtype)})")
            args.append(flat)
            flats.append(flat)
    result = w.new("r")
    w.emit(depth, f"{result} = {helper}({', '.join(args)})")
    for v, flat in zip(plan.outputs, flats):
        name = w.names[v] = w.new()
        w.emit(depth, f"{name} = {flat}" if len(shape) == 1 else
               f"{name} = {w.call('reshape', [flat, str(shape)])}")
        w.fresh.add(v)
        w.contiguous.add(v)
    for j, v in enumerate(plan.reduced):
        value = f"{numpy_type_text(v.aval.dtype)}({result}[{j}])"
        name = w.names[v] = w.new()
        if v.aval.shape:                    # keepdims
            w.emit(depth, f"{name} = np.full({tuple(v.aval.shape)}, {value})")
            w.fresh.add(v)
            w.contiguous.add(v)
        else:
            w.emit(depth, f"{name} = {value}")


def _kernel_plans(graph):
    """The kernels of `fgrad.compiler.cpu_fusion.plan_kernels` for ``graph``
    that whole-graph code can call: groups of arrays whose every equation
    passes the table's dtype and size checks."""
    usable = []
    for plan in plan_kernels(graph):
        if not plan.shape:
            continue
        try:
            for k in plan.replaced:
                _check_avals(graph.eqns[k])
                _check_size(graph.eqns[k])
        except _Unsupported:
            continue
        usable.append(plan)
    return usable


def _write_eqns(w, depth, eqns):
    for eqn in eqns:
        if id(eqn) in w.in_kernels:
            continue
        plan = w.kernels.get(id(eqn))
        if plan is not None:
            _fused(w, depth, plan)
            continue
        try:
            _write_eqn(w, depth, eqn)
        except _Unsupported as error:
            w.unsupported.append(f"{_describe(eqn)}: {error}")
            for v in eqn.outvars:           # keep writing, to report every one
                w.names.setdefault(v, "None")


class Plan:
    """What whole-graph compilation makes of one graph.

    ``supported`` says whether every equation is in the table; ``source`` is
    the function's text (numba's input) and ``consts`` the array literals it
    takes as arguments; ``unsupported`` lists each equation that is not,
    with the reason. ``str(plan)`` says which.

    The text with its fused loops (`_kernel_plans`: the longest part of
    planning a large graph) is written when first asked for, at compile
    time: jit plans a graph at its first call and compiles it at its tenth.
    """

    def __init__(self, graph, unsupported, functions=0, lines=0):
        self.graph, self.unsupported = graph, unsupported
        self._written = None
        # what `estimated_seconds` counts, from the check's text
        self._size = (functions, lines)

    @property
    def supported(self):
        return not self.unsupported

    def _text(self):
        if self._written is None:
            # a kernel only stands in for equations the check found supported
            w = _write(self.graph, fused_loops=True)
            self._written = (w.source, w.consts, w.linked)
        return self._written

    @property
    def source(self):
        return self._text()[0] if self.supported else None

    @property
    def consts(self):
        return self._text()[1] if self.supported else []

    @property
    def kernels(self):
        """{name: `KernelPlan`}: the fused kernels the function calls."""
        return self._text()[2] if self.supported else {}

    @property
    def estimated_seconds(self):
        """Roughly how long numba takes to compile the function (see
        `COMPILE_SECONDS_PER_FUNCTION`); None when it is not supported."""
        if not self.supported:
            return None
        functions, lines = self._size
        return COMPILE_SECONDS_PER_FUNCTION * functions + COMPILE_SECONDS_PER_LINE * lines

    def __str__(self):
        if self.supported:
            return f"whole graph compiled as one function:\n{self.source}"
        return "whole-graph compilation not used:\n" + "\n".join(
            f"  {line}" for line in self.unsupported)


def plan(graph, kernels=None):
    """The `Plan` of ``graph`` (an optimised graph): its numba source, or the
    equations that keep it from having one. ``kernels``: `plan_kernels`'s
    for ``graph``, when made already.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> g = fgrad.make_graph(lambda x: fnp.sum(fnp.tanh(x @ x @ x) @ x))(np.ones((3, 3)))
    >>> plan(g).supported
    True
    >>> print(plan(fgrad.make_graph(lambda x: fnp.cumsum(x * x) * 2.0 + x)(np.ones(3))))
    whole-graph compilation not used:
      cumsum(f64[3]) -> f64[3]: cumsum is not in the whole-graph table
    """
    size = count_equations(graph)
    if size > MAX_EQUATIONS:
        reason = (f"the graph has {size} equations, over MAX_EQUATIONS={MAX_EQUATIONS} "
                  "(numba compiles some 10 ms an equation)")
        return Plan(graph, [reason])
    looping = any(e.prim.name in _CONTROL_WRITERS for e in graph.eqns)
    if size < MIN_EQUATIONS and not looping:
        reason = (f"the graph has {size} equation{'s' * (size != 1)} and no loop, under "
                  f"MIN_EQUATIONS={MIN_EQUATIONS}: its NumPy calls cost less than "
                  "entering compiled code")
        return Plan(graph, [reason])
    # every equation checked one by one; the fused loops are written later
    w = _write(graph, fused_loops=False)
    if not w.unsupported and not looping:
        kernels = plan_kernels(graph) if kernels is None else kernels
        calls = len(graph.eqns) - sum(len(k.replaced) - 1 for k in kernels)
        if calls < MIN_EQUATIONS:
            return Plan(graph, [f"with its fused kernels the graph makes {calls} "
                                f"call{'s' * (calls != 1)}, under "
                                f"MIN_EQUATIONS={MIN_EQUATIONS}: compiled whole it would "
                                "save less than entering compiled code costs"])
    functions = 1 + sum(line.startswith("@numba.njit") for line in w.helper_lines)
    return Plan(graph, w.unsupported, functions, len(w.lines))


def _write(graph, fused_loops):
    """The `_Writer` that has written ``graph``'s function (``w.source``),
    each group `fgrad.compiler.cpu_fusion` would fuse as one loop when
    ``fused_loops``."""
    w = _Writer()
    if fused_loops:
        for kernel in _kernel_plans(graph):
            w.kernels[id(graph.eqns[kernel.last])] = kernel
            w.in_kernels.update(id(graph.eqns[k]) for k in kernel.replaced
                                if k != kernel.last)
    params = [w.new("a") for _ in graph.invars]
    # the wrapper passes C-ordered arrays (perhaps the caller's, read-only)
    outs = _graph_body(w, 1, graph, [(p, "contiguous") for p in params])
    # a returned view or input is copied: callers own what jit returns
    results = [w.owned(v) for v in outs]
    w.emit(1, f"return ({''.join(r + ', ' for r in results)})")
    signature = ", ".join(f"{np.dtype(v.aval.dtype).name}{list(v.aval.shape)}"
                          for v in graph.invars)
    consts = [f"k{j}" for j in range(len(w.consts))]
    head = [f"# fgrad whole graph ({signature})", "import numba", ""] + w.helper_lines + [
            f"def kernel({', '.join(params + consts)}):"]
    w.source = "\n".join(head + w.lines) + "\n"
    return w


def count_equations(graph):
    """Equations of ``graph``, those of its loop bodies and branches included.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> count_equations(fgrad.make_graph(lambda x: fnp.sin(x) + 1.0)(np.ones(2)))
    2
    """
    n = 0
    for eqn in graph.eqns:
        n += 1
        for value in eqn.params.values():
            for sub in value if isinstance(value, tuple) else (value,):
                if hasattr(sub, "eqns") and hasattr(sub, "outvars"):
                    n += count_equations(sub)
    return n


@functools.lru_cache(maxsize=1)
def available():
    """Whether graphs can be compiled whole: numba importable.

    >>> import importlib.util
    >>> available() == (importlib.util.find_spec("numba") is not None)
    True
    """
    return importlib.util.find_spec("numba") is not None


def compile_after():
    """The call of a compiled graph at which jit compiles it whole, or None
    when ``FGRAD_JIT_WHOLE_GRAPH`` is ``0`` (off).

    >>> compile_after() == (None if os.environ.get(WHOLE_GRAPH_ENV) == "0" else
    ...     int(os.environ.get(WHOLE_GRAPH_ENV, COMPILE_AFTER_CALLS)))
    True
    """
    value = os.environ.get(WHOLE_GRAPH_ENV, "").strip().lower()
    if value in ("0", "off", "false", "no"):
        return None
    try:
        return max(1, int(value)) if value else COMPILE_AFTER_CALLS
    except ValueError:
        return COMPILE_AFTER_CALLS


def compile_after_named():
    """Whether ``FGRAD_JIT_WHOLE_GRAPH`` names the call that compiles a graph
    whole (then the call count alone decides, as with ``compile="sync"``).

    >>> compile_after_named() == (os.environ.get(WHOLE_GRAPH_ENV, "").strip().isdigit()
    ...                           and os.environ[WHOLE_GRAPH_ENV].strip() != "0")
    True
    """
    value = os.environ.get(WHOLE_GRAPH_ENV, "").strip()
    return value.isdigit() and int(value) > 0


def _numba_type(shape, dtype):
    """A scalar for shape (), else a read-only C-ordered array (the wrapper
    passes C-ordered arrays; a writable one converts)."""
    import numba
    scalar = numba.from_dtype(np.dtype(dtype))
    if not shape:
        return scalar
    return numba.types.Array(scalar, len(shape), "C", readonly=True)


@functools.lru_cache(maxsize=64)
def _compiled(source, signature, linked=(), alias=None):
    # the module stays importable: a call back into NumPy (objmode) needs it
    return load_or_build(source, signature, keep_module="numba.objmode" in source,
                         linked=dict(linked), alias=alias)


def _arguments(plan):
    """(shape, dtype) of each argument of the plan's function."""
    return [(v.aval.shape, v.aval.dtype) for v in plan.graph.invars] + \
        [(c.shape, c.dtype) for c in plan.consts]


def _signature(plan):
    return tuple(_numba_type(shape, dtype) for shape, dtype in _arguments(plan))


def _alias(plan):
    """The plan's function's name in the disk cache that needs no numba:
    `_signature` in words (a dtype, and for an array its rank)."""
    described = ", ".join(np.dtype(dtype).name + (f"[{len(shape)}d C readonly]" if shape
                                                   else "")
                          for shape, dtype in _arguments(plan))
    return alias_key(plan.source, described)


def on_disk(plan):
    """Whether the disk cache holds the compiled function of a supported
    `Plan` (then building it loads it: milliseconds, not seconds), found
    without importing numba."""
    return is_cached_as(_alias(plan), plan.source)


def build(plan):
    """The callable of a supported `Plan`: checks the inputs' shapes and
    dtypes, runs the numba function, returns NumPy arrays and scalars."""
    graph = plan.graph
    in_avals = [v.aval for v in graph.invars]
    signature = _signature(plan)
    linked = tuple((name, compiled_kernel(k)) for name, k in plan.kernels.items())
    kernel = _compiled(plan.source, signature, linked, _alias(plan))
    expected = [(tuple(a.shape), np.dtype(a.dtype)) for a in in_avals]
    namespace = {"kernel": kernel, "np": np, "ascontiguous": np.ascontiguousarray}
    lines = checked_call_header(expected, namespace, what="a whole-graph function")
    passed = [f"x{j}[()]" if not shape else f"ascontiguous(x{j})"
              for j, (shape, _) in enumerate(expected)]
    for j, c in enumerate(plan.consts):
        namespace[f"K{j}"] = c
        passed.append(f"K{j}[()]" if not c.shape else f"K{j}")
    lines.append(f"    r = kernel({', '.join(passed)})")
    results = []
    for j, v in enumerate(graph.outvars):
        if v.aval.shape:
            results.append(f"r[{j}]")
        else:                       # a NumPy scalar, as NumPy's own calls return
            namespace[f"R{j}"] = np.dtype(v.aval.dtype).type
            results.append(f"R{j}(r[{j}])")
    lines.append(f"    return ({''.join(x + ', ' for x in results)})")
    exec(compile("\n".join(lines) + "\n", "<fgrad whole graph call>", "exec"),  # noqa: S102
         namespace)
    return namespace["call"]
