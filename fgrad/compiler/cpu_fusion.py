"""Fused elementwise kernels on the CPU, compiled by LLVM.

Under `fgrad.jit` on NumPy arrays, `fuse_for_cpu` rewrites the optimised graph
before code generation: each maximal group of elementwise equations (the
grouping of `fgrad.compiler.fusion.plan_groups`, the one CuPy's kernels use),
together with a ``sum``, ``max`` or ``min`` over all axes that reads it (the
loss at the end of most programs), becomes one ``cpu_fused`` equation. Its
kernel is a single loop, written as LLVM IR (`fgrad.compiler.kernel_ir`) and
compiled by LLVM (`fgrad.compiler.native`): it reads each input once, keeps every
intermediate in a register, and writes only the values an equation outside
the group reads (or the graph returns).

Semantics are NumPy's, decided from the dtypes the staged graph carries:

- every operation computes in the dtype NumPy's promotion gives and its result
  is cast back to it, so float32 stays float32 and integers wrap as NumPy's do;
- division by zero gives inf or NaN, never an exception; no fast-math, so NaN
  and inf propagate as in NumPy;
- operations whose NumPy behaviour a scalar loop would not reproduce (integer
  powers, float-to-int casts, float16, complex powers) stay NumPy calls;
  complex values are NumPy's algorithms (`fgrad.compiler.complex_ir`);
- a float sum accumulates in float64 in order (NumPy sums pairwise), a
  complex one in complex128: equal to NumPy's result to rounding.

Kernels release the GIL (they are called through ctypes), so
`jit(parallel=True)` and user threads overlap. Each kernel is compiled for
exactly the dtypes of its graph; its Python wrapper checks every input's
shape and dtype before the loop runs, so an array it was not built for raises
`InvalidInputError` instead of being read out of bounds. Kernels are cached by
their loop's description, in memory (`KERNEL_CACHE_SIZE`) and on disk
(`fgrad.compiler.kernel_cache`).

Fusion is off when llvmlite (the ``jit`` extra) is not installed, when the
environment variable ``FGRAD_JIT_FUSE`` is ``0``, or for ``jit(f,
fuse=False)``; the code is then exactly the unfused code.
"""
import collections
import functools
import math
import os
import platform

import numpy as np

from fgrad.compiler.complex_ir import COMPLEX_DTYPES, TO_REAL, accumulator_dtype
from fgrad.compiler.complex_ir import OPERATIONS as COMPLEX_OPERATIONS
from fgrad.compiler.fusion import (
    compute_dtypes,
    elementwise_name,
    operand_rule,
    plan_groups,
    reader_counts,
)
from fgrad.compiler.kernel_ir import (
    POWER_PRODUCTS,
    KernelSpec,
    Op,
    kernel_ir,
    writer_digest,
)
from fgrad.compiler.native import array_data_offset, compile_ir, say_unavailable
from fgrad.compiler.native import available as native_available
from fgrad.compiler.vector_math import VECTOR_FUNCTIONS
from fgrad.core.errors import InvalidInputError
from fgrad.core.graph import Equation, Graph, Literal, Var
from fgrad.core.trace import Primitive

FUSE_ENV = "FGRAD_JIT_FUSE"
# compiled kernels kept in memory (by their `KernelSpec`); older ones are dropped
KERNEL_CACHE_SIZE = 256
# longest run of operations in one kernel: a longer group is cut into pieces.
# A kernel written as IR (`fgrad.compiler.kernel_ir`) compiles in about 0.1 s
# plus 0.3 ms an operation on one x86-64 core, and a cut costs every value
# that crosses it an array written and read back (the 200-op chain's gradient
# as one kernel: one input and one output; cut at 128, its pieces passed
# each other some 100 arrays, and compiled in four times the time)
MAX_KERNEL_OPS = 1024
# most arrays a kernel reads: each costs its call about 0.15 us and its
# compile next to nothing (LLVM compiles the IR; numba, which compiled
# kernels before, spent some 15 ms of CPU on each array argument, and a
# group reading over 16 stayed NumPy calls). ba's Jacobian, 15 jvps of an
# error elementwise over its observations, reads 17 arrays and was 80 NumPy
# calls, each writing an array of 1.25 million elements
MAX_KERNEL_INPUTS = 64
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
# The per-operation table: what a kernel computes
# ---------------------------------------------------------------------------

# real dtypes a kernel computes in (float16 is left to NumPy), and with
# complex64 and complex128 (`fgrad.compiler.complex_ir`), every dtype
KERNEL_DTYPES = frozenset(np.dtype(k) for k in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float32", "float64"))
ALL_KERNEL_DTYPES = KERNEL_DTYPES | COMPLEX_DTYPES

# where NumPy's float -> int casts are x86's (`_operand_dtypes`)
_X86_64 = platform.machine().lower() in ("x86_64", "amd64")

# operation -> (written for floating compute dtypes, for integer and bool
# ones): False where a scalar loop would not match NumPy; `fgrad.compiler.kernel_ir`
# writes each (an integer power only of a constant exponent, `_operand_dtypes`)
_FLOAT_AND_INT = ("add", "subtract", "multiply", "negative", "square", "maximum",
                  "minimum", "absolute", "equal", "not_equal", "less", "less_equal",
                  "greater", "greater_equal", "where", "convert_element_type",
                  "floor", "ceil", "trunc", "floor_divide", "remainder", "power", "sign")
_FLOAT_ONLY = ("divide", "sqrt", "exp", "exp2", "expm1", "log", "log2", "log10",
               "log1p", "cbrt", "sin", "cos", "tan", "sinh", "cosh", "tanh", "arcsin",
               "arccos", "arctan", "arcsinh", "arccosh", "arctanh", "rint", "isnan",
               "isinf", "isfinite", "signbit", "arctan2", "hypot", "fmod")
_LOGICAL = ("logical_and", "logical_or", "logical_xor", "logical_not",
            "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift",
            "right_shift")
_OPERATIONS = {**{name: (True, True) for name in _FLOAT_AND_INT},
               **{name: (True, False) for name in _FLOAT_ONLY},
               **{name: (False, True) for name in _LOGICAL}}
# written for complex operands only (`fgrad.compiler.complex_ir.OPERATIONS`
# lists what a complex compute dtype may do); of a real operand they are
# NumPy's (an identity, a copy)
_COMPLEX_ONLY = ("real", "imag", "angle", "conjugate")
_OPERATIONS.update((name, (False, False)) for name in _COMPLEX_ONLY)
# primitives that are not ufuncs, named as the operation kernels write
_FUNCTIONS = ("real", "imag", "angle")

# reductions that may end a group (kernel_ir writes their loops)
_REDUCTIONS = ("sum", "max", "min")


def _op_name(prim):
    name = elementwise_name(prim)
    if name is None and prim.name in _FUNCTIONS and prim.family == "primitives/elementwise.py":
        name = prim.name
    return name if name in _OPERATIONS else None


def _operand_dtypes(eqn):
    """The dtypes ``eqn``'s operands are converted to in a kernel, or None
    when a kernel does not compute it."""
    name = _op_name(eqn.prim)
    if name is None or len(eqn.outvars) != 1 or eqn.prim.multiple_results:
        return None
    out = np.dtype(eqn.outvars[0].aval.dtype)
    if name == "convert_element_type":
        if set(eqn.params) != {"dtype"}:
            return None
        source = np.dtype(eqn.invars[0].aval.dtype)
        # a complex value to a real one stays NumPy's, which drops the
        # imaginary part with a ComplexWarning, and so does a narrowing of
        # complex parts
        if source.kind == "c" and (out.kind != "c" or _part_size(out) < _part_size(source)):
            return None
        if source.kind == "f" and out.kind == "c" and _part_size(out) < source.itemsize:
            return None
        # float -> int of a value out of range: the kernels give NumPy's
        # answer on x86-64 (`fgrad.compiler.kernel_ir.convert`), where NumPy's
        # vector and scalar loops agree: not to uint32 and uint64
        if source.kind == "f" and out.kind in "iu" and (
                out.kind == "u" and out.itemsize >= 4 or not _X86_64):
            return None
    elif eqn.params:
        return None
    if out not in ALL_KERNEL_DTYPES or any(np.dtype(v.aval.dtype) not in ALL_KERNEL_DTYPES
                                            for v in eqn.invars):
        return None
    complex_operand = any(np.dtype(v.aval.dtype).kind == "c" for v in eqn.invars)
    if name in TO_REAL and complex_operand:
        # computed on the complex operand, the result real
        compute = eqn.invars[0].aval.dtype
        operand_dtypes = [compute]
    elif name in _COMPLEX_ONLY and not complex_operand:
        return None
    elif name == "conjugate":
        operand_dtypes, compute = [out], out
    else:
        try:
            operand_dtypes, compute = compute_dtypes(operand_rule(name), eqn)
        except (TypeError, ValueError):
            return None
    compute = np.dtype(compute)
    if compute not in ALL_KERNEL_DTYPES:
        return None
    if compute.kind == "c":
        if name not in COMPLEX_OPERATIONS:
            return None
    elif not _OPERATIONS[name][0 if compute.kind == "f" else 1]:
        return None
    if name == "power" and compute.kind in "iu" and not _nonnegative(eqn.invars[1]):
        return None             # NumPy raises for a negative one: its code runs
    if name in ("floor_divide", "remainder", "power", "sign") and compute.kind == "b":
        return None
    if any(np.dtype(v.aval.dtype).kind == "c" and np.dtype(d).kind != "c"
           for v, d in zip(eqn.invars, operand_dtypes)):
        return None             # a complex operand made real or bool (logical_not): NumPy's
    return [np.dtype(d) for d in operand_dtypes]


def _part_size(dtype):
    """The itemsize of a float, or of each part of a complex value."""
    return dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize


def _nonnegative(v):
    """Whether ``v`` is unsigned, or a constant of no negative element."""
    return np.dtype(v.aval.dtype).kind in "ub" or type(v) is Literal and bool(
        np.all(np.asarray(v.value) >= 0))


def cpu_fusable(eqn):
    """Whether ``eqn`` can be written into a fused CPU kernel.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> g = fgrad.make_graph(lambda x: fnp.sin(x).astype(np.uint32))(np.ones(3))
    >>> [cpu_fusable(e) for e in g.eqns]            # a cast to uint32 stays NumPy
    [True, False]
    """
    return _operand_dtypes(eqn) is not None


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
    if np.dtype(out.dtype) not in ALL_KERNEL_DTYPES \
            or np.dtype(x.dtype) not in ALL_KERNEL_DTYPES:
        return None
    if name != "sum" and (out.dtype != x.dtype or np.dtype(x.dtype).kind == "c"):
        return None
    return name


def enabled():
    """Whether jit fuses on the CPU by default: kernels can be compiled
    (`fgrad.compiler.native.available`: llvmlite importable) and
    ``FGRAD_JIT_FUSE`` not ``0``.

    >>> import os
    >>> enabled() == (native_available() and os.environ.get("FGRAD_JIT_FUSE", "1") != "0")
    True
    """
    if os.environ.get(FUSE_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if not native_available():
        say_unavailable()
        return False
    return True


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
KERNEL_CALL_NS = 2000       # the checking wrapper and the ctypes call
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
# float // and % (NumPy's npy_divmod: fmod, two divisions, a floor), whose
# kernel, two in one, measured slower than NumPy's two loops
FLOAT_DIVMOD_NS = (20.0, 30.0)
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
    >>> g = fgrad.make_graph(lambda a: (a + 1.0) ** 3)(np.ones(1000))
    >>> worth_fusing(g.eqns, 1, 1, 1000)      # products, where NumPy calls pow
    True
    """
    memory = 0.3 if size < _CACHE_ELEMENTS else 1.5       # per array pass, ns
    numpy_ns = fused_ns = 0.0
    for e in eqns:
        name = _op_name(e.prim) or e.prim.name
        np_ns, kernel_ns = ELEMENT_NS.get(name, (_PLAIN_NS, _PLAIN_NS))
        if name in ("floor_divide", "remainder") and \
                np.dtype(e.outvars[0].aval.dtype).kind == "f":
            np_ns, kernel_ns = FLOAT_DIVMOD_NS
        elif name == "power" and _power_product(e):
            kernel_ns = _PLAIN_NS
        numpy_ns += NUMPY_CALL_NS + size * (np_ns + memory * (len(e.invars) + 1))
        fused_ns += size * kernel_ns
    fused_ns += KERNEL_CALL_NS + KERNEL_ARRAY_NS * (n_inputs + n_outputs) + \
        size * memory * (n_inputs + n_outputs)
    return fused_ns < numpy_ns


def _power_product(eqn):
    """Whether a kernel computes power ``eqn`` as products: a literal
    exponent of 2, 3 or 4 (`fgrad.compiler.kernel_ir.POWER_PRODUCTS`)."""
    y = eqn.invars[1]
    return type(y) is Literal and scalar_literal_value(y) in POWER_PRODUCTS


def attach_reductions(graph, groups):
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


def scalar_literal_value(lit):
    """The Python number a literal holds (an array of one repeated value
    included), or None: then a kernel takes it as an input array."""
    value = lit.value
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        if value.size == 0 or np.dtype(value.dtype) not in ALL_KERNEL_DTYPES:
            return None
        flat = np.asarray(value).ravel()
        if not bool((flat == flat[0]).all()):    # not one repeated value: pass it in
            return None
        value = flat[0].item()
    if isinstance(value, (bool, float, complex)) or \
            (isinstance(value, int) and -(1 << 63) <= value < (1 << 64)):
        return value
    return None


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
    """One fused kernel: its source and the Python call that checks
    inputs, allocates outputs and runs it.

    ``source`` is the kernel's text (its `KernelPlan`'s, written when
    first asked for: a kernel loaded from the disk cache needs none);
    ``call(*inputs)`` returns the outputs; ``fn`` is the compiled loop (a
    `native_kernel`). ``overwritable`` are the positions of the inputs whose
    buffer ``call(*inputs, out=input)`` may write its one output into (each
    read only at the element it writes, and only once).
    """

    __slots__ = ("plan", "name", "call", "fn", "size", "out_avals", "reductions",
                 "overwritable")

    def __init__(self, plan, name, call, fn, size, out_avals, reductions, overwritable=()):
        self.plan, self.name, self.call, self.fn = plan, name, call, fn
        self.size, self.out_avals, self.reductions = size, out_avals, reductions
        self.overwritable = overwritable

    @property
    def source(self):
        return self.plan.source

    def __repr__(self):
        return f"<{self.name}: {self.size} ops>"


def kernel_source(graph, members, reductions, readers):
    """``(spec, inputs, modes, outputs, reduced)`` of the kernel for one group.

    ``spec`` is the `fgrad.compiler.kernel_ir.KernelSpec` of its loop over
    flat arrays, which computes the reductions' values; ``inputs`` are the
    operands (vars and literals passed in) and ``modes`` how each is
    indexed, ``outputs`` the member vars written out, ``reduced`` the
    reductions' output vars.
    """
    eqns = [graph.eqns[k] for k in members]
    red_eqns = [graph.eqns[k] for k in reductions]
    shape = eqns[-1].outvars[0].aval.shape
    inside = {e.outvars[0] for e in eqns}
    inner = collections.Counter(v for e in eqns + red_eqns for v in e.invars
                                if type(v) is Var)
    inputs, in_index, op_index, modes = [], {}, {}, []
    suffixes = []           # (size, j) of each input broadcast along leading axes
    prefixes = []           # (size of the axes it is broadcast along, j): trailing ones

    def operand(v):
        if type(v) is Var and v in inside:
            return ("t", op_index[v])
        if type(v) is Literal:
            value = scalar_literal_value(v)
            if value is not None:
                return ("c", value)
        key = v if type(v) is Var else ("literal", id(v))
        j = in_index.get(key)
        if j is None:
            j = in_index[key] = len(inputs)
            mode = _input_mode(v.aval.shape, shape)
            inputs.append(v)
            modes.append(mode)
            if mode == "suffix":
                suffixes.append((math.prod(v.aval.shape), j))
            elif mode == "prefix":      # the inner loop's length it needs
                prefixes.append((math.prod(shape) // math.prod(v.aval.shape), j))
        return ("x", j)

    ops = []
    for e in eqns:
        operand_dtypes = _operand_dtypes(e)
        name = _op_name(e.prim)
        out = e.outvars[0]
        op_index[out] = len(ops)
        ops.append(Op(name, [operand(v) for v in e.invars], operand_dtypes, out.aval.dtype,
                      vector=name in VECTOR_FUNCTIONS and operand_dtypes[0].kind == "f"))
    needed_outside = {v for v in inside if readers[v] > inner[v]}
    outputs = [e.outvars[0] for e in eqns if e.outvars[0] in needed_outside]
    folds = []
    for e in red_eqns:
        # floats accumulate in float64, complex values in complex128,
        # integers in their (NumPy-promoted) dtype
        acc_dtype = accumulator_dtype(e.outvars[0].aval.dtype)
        folds.append((e.prim.name, operand(e.invars[0]), acc_dtype))
    how, index = _loop(suffixes, prefixes, modes)
    vectorised = any(op.vector for op in ops) and len(outputs) <= MAX_VECTOR_OUTPUTS \
        and math.prod(shape) >= MIN_VECTOR_ELEMENTS
    spec = KernelSpec([(np.dtype(v.aval.dtype), "one" if mode == "one" else index.get(j, "i"))
                       for j, (v, mode) in enumerate(zip(inputs, modes))],
                      how, ops, folds, [op_index[v] for v in outputs], _packed(outputs),
                      vectorised)
    return spec, inputs, modes, outputs, [e.outvars[0] for e in red_eqns]


def _loop(suffixes, prefixes, modes):
    """``(inner, index)``: how the kernel's loop over element ``i`` runs, and
    the index each broadcast input is read at (`fgrad.compiler.kernel_ir`).

    With inputs broadcast along leading axes (``suffixes``: ``(size, j)`` of
    each, a bias row say), the loop is two: over the rows of the longest such
    input, and along it, so that it is read at the inner index ``"k"``
    instead of at ``i`` modulo its size (an integer division per element
    costs more than the arithmetic and keeps LLVM from vectorising: 1.5
    against 0.6 ns an element for the backward of ``tanh(x @ W) * w``). The
    others' sizes divide the longest's (each is a product of trailing
    dimensions of the group's shape): one of the same size is read at ``"k"``
    too, a shorter one at ``"k%"`` (``k`` modulo its size). An input broadcast
    along trailing axes (``prefixes``: a column) whose broadcast covers
    exactly the inner loop is read once per outer row (``"r"``), instead of
    being broadcast out to a full array first; another (its ``modes`` entry
    becomes "copy") still is. Without suffixes, the first prefix input's
    broadcast sets the inner loop. ``inner`` is None for one plain loop."""
    index = {}
    if not suffixes and not prefixes:
        return None, index
    if suffixes:
        inner, first = max(suffixes, key=lambda s: (s[0], -s[1]))
        how = ("suffix", first)
        for size, j in suffixes:
            index[j] = "k" if size == inner else "k%"
    else:
        inner, first = prefixes[0]
        how = ("prefix", first)
    for size, j in prefixes:
        if size == inner:
            index[j] = "r"
        else:
            modes[j] = "copy"
    return how, index


@functools.lru_cache(maxsize=KERNEL_CACHE_SIZE)
def kernel_text(spec, signature_text):
    """What a kernel shows as its ``source``: a line naming its argument
    types, then the LLVM IR LLVM compiles for its loop (`native_kernel`).
    Kept for equal specs (the last `KERNEL_CACHE_SIZE`): writing the IR
    costs milliseconds a kernel."""
    return f"; fgrad cpu kernel ({signature_text})\n" + kernel_ir(
        spec, "kernel", object_offset=array_data_offset())


def _packed(outputs):
    """Whether a kernel writes its ``outputs`` as the rows of one array: when
    there are several of one dtype. Each array argument costs the call
    about 0.15 us, and a kernel of
    jit(grad(f)) may write dozens."""
    return len(outputs) > 1 and len({np.dtype(v.aval.dtype) for v in outputs}) == 1


@functools.lru_cache(maxsize=KERNEL_CACHE_SIZE)
def native_kernel(spec):
    """The `fgrad.compiler.native.NativeFunction` of a kernel's loop
    ``spec`` (a `KernelSpec`): ``f(n, in0, len0, ..., out0 | outs, res0,
    ...)``, every array C-contiguous, each reduction's value stored in an
    array of one element of its accumulator's dtype. Kept for equal specs
    (the last `KERNEL_CACHE_SIZE`), and on disk, under the spec and the
    code that writes its IR (`fgrad.compiler.kernel_ir.writer_digest`): a
    kernel loaded from there is not written at all."""
    params = (["i64"] + ["array", "i64"] * len(spec.inputs)
              + ["array"] * (1 if spec.packed else len(spec.outputs))
              + ["array"] * len(spec.reductions))
    # each kernel has an engine of its own: one name serves them all
    return compile_ir(lambda: kernel_ir(spec, "kernel", object_offset=array_data_offset()),
                      "kernel", params, key=f"{writer_digest()}\n{spec.key()!r}")


_PY_SCALARS = (bool, int, float)


def _make_call(kernel, inputs, modes, outputs, reduced, shape):
    """The Python function that checks, flattens, allocates and calls
    ``kernel`` (a `native_kernel`).

    It is generated per kernel (the checks and allocations written out, no
    loops), as this is the whole per-call cost of a kernel on small arrays.
    """
    size = math.prod(shape)
    expected = [(tuple(v.aval.shape), np.dtype(v.aval.dtype)) for v in inputs]
    # the ctypes function itself (one Python call less); `kernel` keeps its code
    namespace = {"run": kernel.c_function, "kernel": kernel, "empty": np.empty, "np": np}
    # one output may go into a buffer given (see `CpuKernel.overwritable`)
    lines = checked_call_header(expected, namespace,
                                extra=("out=None",) if len(outputs) == 1 else ())
    flat = []
    for j, (v, mode) in enumerate(zip(inputs, modes)):
        # each input with its length (fixed by its shape: a constant here)
        n = math.prod(v.aval.shape)
        if mode == "copy":
            flat.append(f"np.ascontiguousarray(np.broadcast_to(x{j}, SHAPE)).ravel(), {size}")
        elif mode == "at":          # read in place at offsets that assume C order
            flat.append(f"np.ascontiguousarray(x{j}).ravel(), {n}")
        else:
            flat.append(f"x{j}.ravel(), {n}")
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
        flat += [f"o{j}" for j in range(len(outputs))]     # C-contiguous
        results = [f"o{j}" for j in range(len(outputs))]
    for r, v in enumerate(reduced):
        namespace[f"A{r}"] = accumulator_dtype(v.aval.dtype)
        lines.append(f"    r{r} = empty(1, A{r})")
        flat.append(f"r{r}")
    lines.append(f"    run({size}, {', '.join(flat)})")
    for r, v in enumerate(reduced):
        namespace[f"R{r}"] = np.dtype(v.aval.dtype)
        if v.aval.shape:            # keepdims
            namespace[f"RS{r}"] = tuple(v.aval.shape)
            results.append(f"np.full(RS{r}, r{r}[0], R{r})")
        else:                       # a NumPy scalar, as ndarray.sum returns
            results.append(f"R{r}.type(r{r}[0])")
    lines.append(f"    return ({''.join(x + ', ' for x in results)})")
    exec(compile("\n".join(lines) + "\n", "<fgrad cpu kernel call>", "exec"), namespace)
    return namespace["call"]


def checked_call_header(expected, namespace, what="a fused kernel", extra=()):
    """The first lines of a generated ``call(x0, x1, ...)`` that check each
    argument's shape and dtype against ``expected`` ((shape, dtype) pairs)
    and hand a mismatch to `admit_inputs`; the names they use go into
    ``namespace``. ``extra`` are further parameters, unchecked (``"out=None"``).
    Shared with `fgrad.compiler.program`."""
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
    """One kernel `plan_kernels` chose: the equations it replaces and its loop.

    ``last`` is the index of the equation whose place the kernel takes,
    ``replaced`` the indices of every equation it computes; ``spec`` is its
    loop (`fgrad.compiler.kernel_ir.KernelSpec`) and ``vectorised`` whether
    that calls `fgrad.compiler.vector_math`'s functions; ``source``, its
    argument types and LLVM IR (`kernel_text`), is written when first asked
    for. ``inputs`` are the operands passed in (vars or array literals) with
    their ``modes`` (see `_input_mode`), ``outputs`` the member vars written
    out (as the rows of one array when ``packed``), ``reduced`` the
    reductions' output vars, ``shape`` the group's shape.
    """

    __slots__ = ("last", "replaced", "spec", "vectorised", "inputs", "modes", "outputs",
                 "reduced", "shape", "packed", "_source")

    def __init__(self, last, replaced, spec, inputs, modes, outputs, reduced, shape):
        self.last, self.replaced = last, replaced
        self.spec, self.vectorised = spec, spec.vectorised
        self.inputs, self.modes, self.outputs = inputs, modes, outputs
        self.reduced, self.shape = reduced, shape
        self.packed = spec.packed
        self._source = None

    @property
    def source(self):
        if self._source is None:
            signature = ",".join(
                [np.dtype(v.aval.dtype).name + ":" + m for v, m in zip(self.inputs, self.modes)]
                + ([f"{np.dtype(self.outputs[0].aval.dtype).name}[{len(self.outputs)}, :]"]
                   if self.packed else [np.dtype(v.aval.dtype).name for v in self.outputs]))
            self._source = kernel_text(self.spec, signature)
        return self._source


def plan_kernels(graph):
    """The `KernelPlan` s for ``graph``: each elementwise group (and the full
    reductions ending it), cut into runs of at most `MAX_KERNEL_OPS`, that
    the cost model (`worth_fusing`) prefers to NumPy calls.

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
    for members, reductions in attach_reductions(graph, groups):
        for run, reds in _pieces(members, reductions):
            if len(run) + len(reds) < 2:
                continue                  # one NumPy call is as good
            shape = tuple(graph.eqns[run[-1]].outvars[0].aval.shape)
            spec, inputs, modes, outputs, reduced = kernel_source(graph, run, reds, readers)
            if not inputs:
                continue                  # a constant: folding's business
            if len(inputs) > MAX_KERNEL_INPUTS:
                continue                  # more arrays than a kernel takes
            if not worth_fusing([graph.eqns[k] for k in run + reds], len(inputs),
                                len(outputs), math.prod(shape)):
                continue
            spec, modes = broadcast_in_place(spec, inputs, modes, shape)
            plans.append(KernelPlan(max(run + reds), sorted(run + reds), spec, inputs, modes,
                                    outputs, reduced, shape))
    return plans


def broadcast_in_place(spec, inputs, modes, shape):
    """``(spec, modes)`` with each input `kernel_source` would broadcast out
    to a full array first (mode "copy") read in place instead: mode "at",
    at the offset `broadcast_offset` gives (its index in ``spec``).

    A copy writes the group's size for an input that may be far smaller,
    and writes are what large arrays cost most: the last kernel of ht's
    Jacobian (hand8) broadcast six inputs of 6,400 to 179,200 elements out
    to 537,600 each, 26 MB written for 3 ms of arithmetic.
    """
    if "copy" not in modes:
        return spec, modes
    spec_inputs, modes = list(spec.inputs), list(modes)
    for j, mode in enumerate(modes):
        if mode == "copy":
            spec_inputs[j] = (spec_inputs[j][0], broadcast_offset(inputs[j].aval.shape, shape))
            modes[j] = "at"
    return KernelSpec(spec_inputs, spec.inner, spec.ops, spec.reductions, spec.outputs,
                      spec.packed, spec.vectorised), modes


def broadcast_offset(shape, group_shape):
    """The index kind ``("at", terms)`` reading a C-contiguous array of
    ``shape`` broadcast to ``group_shape`` at the group's flat element i:
    the offset is the sum over ``terms`` ``(period, length, stride)`` of
    ``(i // period % length) * stride`` (``length`` None: no modulo).
    Axes the input is broadcast along drop out, and runs of axes it holds
    whole merge into one term.

    >>> broadcast_offset((6400, 1), (28, 6400, 3))       # a column in a stack
    ('at', ((3, 6400, 1),))
    >>> broadcast_offset((28, 1, 3), (28, 5, 3))
    ('at', ((15, None, 3), (1, 3, 1)))
    """
    aligned = (1,) * (len(group_shape) - len(shape)) + tuple(shape)
    strides, stride = [], 1
    for n in reversed(aligned):
        strides.append(0 if n == 1 else stride)
        stride *= n
    strides.reverse()
    terms, period = [], 1
    for axis in reversed(range(len(group_shape))):     # innermost first
        length, stride = group_shape[axis], strides[axis]
        if stride:
            if terms and terms[-1][0] * terms[-1][1] == period \
                    and terms[-1][2] * terms[-1][1] == stride:
                p, n, s = terms[-1]
                terms[-1] = (p, n * length, s)         # continues the run below it
            else:
                terms.append((period, length, stride))
        period *= length
    # the outermost term needs no modulo: i // period is below its length
    if terms and terms[-1][0] * terms[-1][1] == period:
        terms[-1] = (terms[-1][0], None, terms[-1][2])
    return ("at", tuple(reversed(terms)))


def fuse_for_cpu(graph, plans=None):
    """``graph`` with each elementwise group (and the full reductions ending
    it) replaced by one kernel call (``plans``: `plan_kernels`'s, when
    made already).

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> g = fgrad.make_graph(lambda x: fnp.sum(fnp.tanh(fnp.sin(x) + 1.0)))(np.ones(3))
    >>> fused = fuse_for_cpu(g)                        # doctest: +SKIP
    >>> [e.prim.name for e in fused.eqns]              # doctest: +SKIP
    ['cpu_fused']
    """
    replace, skip = {}, set()
    plans = plan_kernels(graph) if plans is None else plans
    prologue, contiguous = _contiguous_inputs(graph, plans)
    for plan in plans:
        outputs, reduced = plan.outputs, plan.reduced
        fn = native_kernel(plan.spec)
        kernel = CpuKernel(plan, f"fgrad_cpu_{fn.key[-12:]}",
                           _make_call(fn, plan.inputs, plan.modes, outputs, reduced,
                                      plan.shape), fn,
                           len(plan.replaced), tuple(v.aval for v in outputs + reduced),
                           [k for k in plan.replaced
                            if graph.eqns[k].outvars[0] in reduced],
                           _overwritable(plan))
        replace[plan.last] = Equation(cpu_fused_p, [contiguous.get(v, v) for v in plan.inputs],
                                      outputs + reduced, {"kernel": kernel})
        skip.update(k for k in plan.replaced if k != plan.last)
    if not replace:
        return graph
    eqns = prologue + [replace.get(k, e) for k, e in enumerate(graph.eqns) if k not in skip]
    return Graph(graph.invars, eqns, graph.outvars)


# A kernel reads flat arrays: a strided input is copied at each call of each
# kernel that reads it (``x.ravel()``). The graph's own inputs may be strided
# views (ba's cameras, one row of a transposed array per parameter, each
# read by its 12 kernels), so one read by several kernels is made contiguous
# once, at the start (a no-op for an input that is contiguous already).
CONTIGUOUS_MIN_ELEMENTS = 1 << 14

contiguous_p = Primitive("contiguous", np.ascontiguousarray, lambda aval: aval, register=False)
contiguous_p.lowering = lambda xp: xp.ascontiguousarray


def _contiguous_inputs(graph, plans):
    """``(prologue, {input var: its contiguous var})`` for the graph inputs
    that two or more of ``plans`` read element by element."""
    readers = collections.Counter(
        v for plan in plans for v, mode in set(zip(plan.inputs, plan.modes)) if mode != "one")
    inputs = set(graph.invars)
    prologue, contiguous = [], {}
    for v, count in readers.items():
        if count > 1 and v in inputs and v.aval.size >= CONTIGUOUS_MIN_ELEMENTS:
            contiguous[v] = Var(v.aval)
            prologue.append(Equation(contiguous_p, [v], [contiguous[v]], {}))
    return prologue, contiguous


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
