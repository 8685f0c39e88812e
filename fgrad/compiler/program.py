"""One native function per jitted graph: a staged graph, loops included, lowered to LLVM IR.

`compile_program` turns an optimised staged graph into one function compiled
by LLVM (`fgrad.compiler.native`), so that no Python runs between its
operations. The pipeline:

1. **Steps.** Each maximal elementwise group (`fgrad.compiler.fusion.plan_groups`,
   the grouping the fused kernels use) is one loop, written by the kernels'
   own IR writer (`fgrad.compiler.kernel_ir.define_kernel`), down to groups
   of one equation, since a call inside the program costs nothing;
   ``sum``, ``max`` and ``min`` over any axes are loops with the accumulator
   in a register (a row of them in the output where the last axis is kept,
   one per vector lane for a ``max`` or ``min`` over the last axes);
   ``transpose``, ``broadcast_to`` and basic indexing are strided copies,
   as are ``concatenate`` and ``scatter_add`` at a basic index (pieces
   copied into one buffer, a piece that is a basic index of another value
   read from that value); ``reshape``, ``stop_gradient``
   and custom_linear_solve's and custom_root's identities are views (a value
   that only concatenates, reshapes and transposes move into a larger one
   is written there by the step that computes it, a loop's result at a
   stride: `_written_in_place`); ``any``/``all`` of bools
   are reductions; ``scan``, ``while_loop`` and ``cond`` are lowered in
   place, their bodies steps like these (`fgrad.compiler.program_loops`);
   a float or complex ``matmul`` is BLAS's gemm (SciPy's, `fgrad.compiler.blas`),
   called once per matrix of a batch, reading an operand that only products
   read through a transpose as its source, transposed (gemm's flag); a
   random draw on uint32 keys is one loop (`fgrad.compiler.random_ir`); an
   einsum of two float operands is a matmul; cholesky, LU factors and
   solves, det, slogdet, inv, eigh, qr and svd are LAPACK calls
   (`fgrad.compiler.program_linalg`);
   a gather or scatter_add of one index array is a loop
   (`fgrad.compiler.program_indexing`); a check (an effect that raises on a
   nonzero status) is a compare, calling out only to raise
   (`fgrad.compiler.program_checks`). Every
   other equation is a *callout*: the compiled function calls back into
   Python (a ctypes callback), which runs the primitive's NumPy code on views
   of the program's buffers and copies its results into them. Callouts are
   correct and slow; `Program.callouts` lists them (as does
   ``jit(f).compile_info()``), and none stops the rest from compiling.
2. **Buffer plan.** Shapes are static, so each intermediate gets an offset in
   one arena (`fgrad.compiler.buffer_plan`): a buffer dies after its last
   reader and a later value reuses its bytes; an elementwise loop writes its
   result into a dying operand of the same shape and dtype. Each output has
   an array of its own, written in place by the step that computes it. A
   program one of whose callouts makes an array over `KEEP_ARENA_BYTES`
   keeps its values in arrays of their own instead, each made before the
   step that writes it (a callout's result: the array NumPy made) and let go
   after its last reader, as the interpreted tier does (`_Locations.heap`).
3. **IR and machine code.** One LLVM function
   ``program(inputs..., outputs..., arena, constants..., BLAS table,
   callout)``, every array passed as its NumPy object (`fgrad.compiler.native`), compiled at
   -O3 for this CPU; the disk cache keys its machine code on the graph and
   the buffer plan (`fgrad.compiler.program_key`; on the IR where the graph
   has no canonical form), the CPU and its features, the LLVM and llvmlite
   versions and the BLAS the table reaches (`fgrad.compiler.blas.provider`),
   so a second process loads it in milliseconds without writing the IR.

Results are the interpreted tier's, bitwise for the elementwise loops (the
same IR the fused kernels run; complex values by NumPy's algorithms,
`fgrad.compiler.complex_ir`) and copies; a float ``sum`` accumulates in
float64 (a complex one in complex128), in order, where NumPy sums pairwise:
equal to rounding; a product
is SciPy's BLAS, where NumPy may run its own (another OpenBLAS, another
kernel): equal to rounding, bitwise where the kernels are the same.

`fgrad.jit` builds a graph's program after its kernels where `pays`
estimates it faster (`fgrad.compiler.tiers`; ``FGRAD_JIT_PROGRAM=0`` turns
this off, ``=all`` builds one for every graph); a compile that fails is
logged and the graph runs on as before.
"""
import collections
import ctypes
import functools
import math
import os
import threading
import time

import numpy as np

from fgrad.compiler.blas import (
    BLAS_THREADED_WORK,
    GEMM_DTYPES,
    MAX_BLAS_INT,
    ROUTINES,
    blas_on_one_thread,
    gemm_table,
    routine_index,
)
from fgrad.compiler.blas import provider as blas_provider
from fgrad.compiler.buffer_plan import Step, plan_buffers
from fgrad.compiler.complex_ir import accumulator_dtype
from fgrad.compiler.cpu_fusion import (
    ALL_KERNEL_DTYPES,
    KERNEL_CALL_NS,
    MIN_VECTOR_ELEMENTS,
    NUMPY_CALL_NS,
    attach_reductions,
    broadcast_in_place,
    checked_call_header,
    cpu_fusable,
    cpu_fused_p,
    kernel_source,
)
from fgrad.compiler.fusion import plan_groups, reader_counts
from fgrad.compiler.kernel_ir import (
    FEW_ELEMENTS,
    KernelSpec,
    broadcast_strides,
    constant,
    contiguous_strides,
    convert,
    copy_dtype,
    counted,
    data_pointer,
    define_kernel,
    load,
    reduction_start,
    reduction_step,
    storage_type,
    store,
    strided_offset,
    value_type,
)
from fgrad.compiler.native import array_data_offset, compile_ir
from fgrad.compiler.native import available as native_available
from fgrad.compiler.native import say_unavailable
from fgrad.compiler.native_steps import NativeStep, constant_cell
from fgrad.compiler.passes import eliminate_dead_code, optimize, renamed
from fgrad.compiler.program_checks import check_step
from fgrad.compiler.program_indexing import indexing_step
from fgrad.compiler.program_key import program_key
from fgrad.compiler.program_linalg import einsums_as_products, linalg_step
from fgrad.compiler.program_loops import (
    Loop,
    Part,
    Scratch,
    loop_graphs,
    loop_ir,
    loop_kind,
    loop_step,
    memcpy,
    trips,
)
from fgrad.compiler.random_ir import DrawStep, draw_mode
from fgrad.core.graph import Equation, Graph, Literal, Var
from fgrad.core.trace import ShapedArray
from fgrad.primitives.products import matmul_p
from fgrad.primitives.creation import stop_gradient_p
from fgrad.primitives.indexing import build_index, getitem_p, scatter_add_p
from fgrad.primitives.reductions import all_p, any_p, max_p, min_p, sum_p
from fgrad.primitives.shape import broadcast_to_p, concatenate_p, reshape_p, transpose_p

PROGRAM_ENV = "FGRAD_JIT_PROGRAM"
_REDUCTIONS = {sum_p: "sum", max_p: "max", min_p: "min"}
# equations that lay out values (views and copies), moved down to their
# first reader before elementwise equations are grouped (`_layout_late`)
_LAYOUT = (reshape_p, concatenate_p, transpose_p, broadcast_to_p)
# of bools (the predicate of a vmapped while loop): the max and the min
_BOOL_REDUCTIONS = {any_p: "max", all_p: "min"}
# custom_linear_solve's and custom_root's primitives and checkpoint's remat
# barrier (defined above the compiler): the identity on their first ``n``
# operands (the solution, the root, the inputs recomputed from), which the
# graph computed before them; their rules are derivatives (or an ordering)
_IDENTITIES = {("linear_solve", "fgrad/transforms/linear_solve.py"),
               ("implicit_root", "fgrad/transforms/roots.py"),
               ("remat_barrier", "fgrad/transforms/jit.py")}
# dtypes a copy moves as integers of their size (16 bytes: as two floats)
_COPY_ITEMSIZES = (1, 2, 4, 8, 16)
# arenas at most this large are kept between calls (`_make_call`)
KEEP_ARENA_BYTES = 1 << 20
# a program one of whose callouts makes an array this large keeps its values
# of HEAP_BYTES or more in arrays of their own, not in its arena (`_Locations.heap`)
HEAP_CALLOUT_BYTES = KEEP_ARENA_BYTES + 1
HEAP_BYTES = 1 << 16
# the arena of the last call whose arena was larger, kept for the next such
# call of any program: one, process-wide (`_spare_arena`)
_SPARE_ARENAS = []
# the most arguments ctypes passes to a function (CTYPES_MAX_ARGCOUNT)
MAX_ARGUMENTS = 1024


def enabled():
    """Which graphs jit builds whole programs for: ``"paying"`` (the default,
    ``FGRAD_JIT_PROGRAM`` unset or ``1``: those `pays` estimates faster than
    their per-equation code), ``"all"`` (``all``: every one where it
    compiles: `fgrad.compiler.tiers`) or None (``0``, or LLVM not available:
    `fgrad.compiler.native`).

    >>> enabled() in (None, "paying", "all")
    True
    """
    value = os.environ.get(PROGRAM_ENV, "").strip().lower()
    how = "all" if value == "all" else None if value in ("0", "false", "off", "no") \
        else "paying"
    if how is not None and not native_available():
        say_unavailable()
        return None
    return how


# a strided copy of this many elements or fewer is left scalar (`counted`):
# vectorising such moves (gathers, shuffles) was a third of LLVM's time on
# ode-lv-vmap's program (its 166 column copies of 32 elements), and its calls
# ran as fast without; jit-rnn's transposes of 256 elements ran slower
SCALAR_COPY_ELEMENTS = 64

# What a program's call costs beside the work, roughly (on one x86-64 core):
# the checks, the outputs and the ctypes call; and each callout, a round trip
# from machine code into Python and back (the ctypes callback, the views, the
# NumPy call's own cost inside a callback, which measured some 2 us more than
# outside one). Per-equation code pays `NUMPY_CALL_NS` a NumPy call and
# `KERNEL_CALL_NS` a fused kernel's, and each step of a loop `LOOP_STEP_NS`
# beside its body's calls (the Python loop, the body's call, the slicing).
PROGRAM_CALL_NS = 3000
CALLOUT_NS = 4000
# a step's array made, or let go of, by a call back (`_Locations.heap`)
HEAP_STEP_NS = 2000
LOOP_STEP_NS = 3000


def pays(steps, code, plans=()):
    """Whether a program of ``steps`` (`program_steps`) is estimated faster
    than the per-equation code of graph ``code`` (the kernels tier's): a
    graph of many callouts is not (a callout in a loop's body counts once an
    iteration), nor one of a few NumPy calls; a loop of a few steps is.
    Before the kernels are built, ``code`` is the graph they will fuse and
    ``plans`` its `fgrad.compiler.cpu_fusion.plan_kernels`: each plan's
    equations count as one kernel's call.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> g = fgrad.make_graph(lambda x: fnp.exp(fnp.sin(x) * 2.0) + x * x)(np.ones(3))
    >>> pays(program_steps(g), g)                   # five NumPy calls
    True
    >>> g = fgrad.make_graph(lambda x, w: x @ w @ w + x)(np.ones((2, 2)), np.eye(2))
    >>> pays(program_steps(g), g)                   # three calls: cheaper than one program
    False
    >>> g = fgrad.make_graph(lambda x: fnp.cumsum(fnp.cumsum(fnp.sin(x))))(np.ones(3))
    >>> pays(program_steps(g), g)                   # two callouts
    False
    >>> from fgrad import lax
    >>> g = fgrad.make_graph(lambda x: lax.fori_loop(0, 3, lambda i, y: y * 2.0, x))(1.0)
    >>> pays(program_steps(g), g)                   # a loop of three steps
    True

    Nor does a program that calls SciPy's BLAS or LAPACK on large matrices
    and also calls out:
    SciPy's OpenBLAS and NumPy's keep thread pools of their own, and a
    program switching between them (its gemm, then a callout's NumPy
    product) kept both spinning: LeNet's jitted gradient took 152 ms a call
    as a program against 34 ms in the kernels tier, with BLAS's default
    threads on 2 cores (23 and 25 ms on one thread). On one thread
    (`fgrad.compiler.blas.blas_on_one_thread`) there is no pool to spin.

    A program whose callouts make large arrays keeps its values in arrays
    of their own (`_Locations.heap`), made by calls back into Python:
    `HEAP_STEP_NS` a step that writes one. (It was not built before that: a callout's result
    was copied into the arena, and LeNet's gradient peaked at 30 MB as a
    program, 15.6 MB interpreted.)
    """
    callouts_ns = _callouts_ns(steps)
    if callouts_ns and not blas_on_one_thread() and _calls_blas(steps):
        return False
    if _keeps_arrays_apart(steps):
        callouts_ns += HEAP_STEP_NS * sum(
            1 for s in steps if not isinstance(s, (_View, _Callout))
            and any(type(v) is Var and _nbytes(v) >= HEAP_BYTES for v in s.writes()))
    fused_ns = sum(len(p.replaced) * NUMPY_CALL_NS - KERNEL_CALL_NS for p in plans)
    return PROGRAM_CALL_NS + callouts_ns < _calls_ns(code) - fused_ns


def _keeps_arrays_apart(steps):
    """Whether a top-level callout among ``steps`` makes an array of
    `HEAP_CALLOUT_BYTES` or more (`_Locations.heap`)."""
    return max((_nbytes(v) for s in steps if isinstance(s, _Callout)
                for v in s.writes() if _in_memory(v)), default=-1) >= HEAP_CALLOUT_BYTES


def _calls_blas(steps):
    """Whether ``steps`` call SciPy's BLAS or LAPACK on matrices large enough
    for OpenBLAS to run them on its threads."""
    for s in steps:
        if isinstance(s, _Gemm):
            work = s.m * s.n * s.k
        elif getattr(s, "calls_blas", False):
            work = s.eqn.invars[0].aval.shape[-1] ** 3
        elif isinstance(s, Loop):
            work = BLAS_THREADED_WORK if any(_calls_blas(p.steps) for p in s.parts) else 0
        else:
            continue
        if work >= BLAS_THREADED_WORK:
            return True
    return False


def _callouts_ns(steps, times=1):
    total = 0
    for s in steps:
        if isinstance(s, _Callout):
            total += CALLOUT_NS * times
        elif isinstance(s, Loop):
            total += sum(_callouts_ns(part.steps, times * s.trips()) for part in s.parts)
    return total


def _calls_ns(graph):
    """What the per-equation code of ``graph`` costs a call beside the work."""
    total = 0
    for eqn in graph.eqns:
        total += KERNEL_CALL_NS if eqn.prim is cpu_fused_p else NUMPY_CALL_NS
        inner = loop_graphs(eqn)
        if inner:
            costs = [_calls_ns(g) for g in inner]
            each = max(costs) if eqn.prim.name == "cond" else sum(costs)
            total += trips(eqn) * (LOOP_STEP_NS + each)
    return total


# ---------------------------------------------------------------------------
# Steps: what each part of the graph becomes
# ---------------------------------------------------------------------------


class _Kernel:
    """An elementwise group: ``spec`` over ``inputs`` (their ``modes``),
    writing ``outputs`` and the values of the full reductions ending it
    (``reduced``); ``size`` elements. ``placed`` maps an output's position
    to ``(value, element)``: that output is written into the value's memory
    from that element on, at its ``spec.out_strides`` entry (`_written_in_place`)."""

    def __init__(self, spec, inputs, modes, outputs, reduced, size, placed=None,
                 pieces=None):
        self.spec, self.inputs, self.modes = spec, inputs, modes
        self.outputs, self.reduced, self.size = outputs, reduced, size
        self.placed = placed or {}
        # {input position: [(source, first element, count, source's first
        # element)]}: that input is never made, its runs are read from the
        # sources (`_pieces_into_kernels`)
        self.pieces = pieces or {}

    def reads(self):
        return [v for j, v in enumerate(self.inputs) if j not in self.pieces] + [
            piece[0] for j in sorted(self.pieces) for piece in self.pieces[j]]

    def targets(self):
        """The values whose memory the outputs are written into, each once."""
        return list(dict.fromkeys(self.placed[j][0] if j in self.placed else v
                                  for j, v in enumerate(self.outputs)))

    def writes(self):
        return self.targets() + self.reduced


class _Copy:
    """``dst`` (C-contiguous) from ``src`` read at element ``strides``
    (0 along a broadcast axis, negative along a reversed one) from element
    ``start``, over ``dst``'s shape."""

    def __init__(self, src, dst, strides, start=0):
        self.src, self.dst, self.strides, self.start = src, dst, strides, start

    def reads(self):
        return [self.src]

    def writes(self):
        return [self.dst]


class _Reduce:
    """``dst`` = ``kind`` of ``src`` over ``axes``."""

    def __init__(self, kind, src, dst, axes):
        self.kind, self.src, self.dst, self.axes = kind, src, dst, axes

    def reads(self):
        return [self.src]

    def writes(self):
        return [self.dst]


class _View:
    """``dst`` is ``src``'s buffer under another shape (a reshape)."""

    def __init__(self, src, dst):
        self.src, self.dst = src, dst

    def reads(self):
        return [self.src]

    def writes(self):
        return [self.dst]


class _Gemm:
    """``out = a @ b`` by BLAS's gemm: ``(m, k) @ (k, n)`` matrices, once per
    index of ``batch`` (the output's batch shape), ``a`` and ``b`` read at
    the element strides ``a_strides`` and ``b_strides`` per batch axis (0
    along an axis they broadcast). An operand in ``transposed`` ("a", "b")
    is the transpose (last two axes swapped) of the value held."""

    def __init__(self, a, b, out, m, n, k, batch, a_strides, b_strides, transposed=()):
        self.a, self.b, self.out = a, b, out
        self.m, self.n, self.k = m, n, k
        self.batch, self.a_strides, self.b_strides = batch, a_strides, b_strides
        self.transposed = transposed

    def reads(self):
        return [self.a, self.b]

    def writes(self):
        return [self.out]


class _Pieces:
    """``dst`` made of pieces: zeros first where ``zeros``, then each piece
    ``(src, shape, src_strides, dst_strides, dst_start, src_start)`` copied,
    element ``i`` (a multi-index of ``shape``) of it from ``src``'s element
    ``src_start + i . src_strides`` to ``dst``'s ``dst_start + i .
    dst_strides`` (a concatenate, a scatter_add at a basic index; a piece
    that is a basic index of another value read from that value:
    `_sliced_into_pieces`)."""

    def __init__(self, dst, pieces, zeros=False):
        self.dst, self.pieces, self.zeros = dst, pieces, zeros

    def reads(self):
        return [piece[0] for piece in self.pieces]

    def writes(self):
        return [self.dst]


class _Callout:
    """Equation ``eqn`` run by its NumPy code, called back from the program;
    ``index`` names it (its place in the graph: ``"k"``, or ``"k.j"`` for
    equation j of the body of loop k), ``id`` is its number in the program's
    table of callouts (`compile_program`)."""

    def __init__(self, index, eqn):
        self.index, self.eqn, self.id = index, eqn, None
        self.drops = []         # heap arrays let go after it (`_Locations.heap`)

    def reads(self):
        return self.eqn.invars

    def writes(self):
        return self.eqn.outvars


class _Heap:
    """A call back into Python that lets go of the call's arrays ``frees``
    (their last reader has run) and makes ``allocs`` (``(object, slot,
    shape, dtype)``: the next step writes them): `_Locations.heap`."""

    def __init__(self, index, frees, allocs):
        self.index, self.frees, self.allocs, self.id = index, frees, allocs, None

    def reads(self):
        return []

    def writes(self):
        return []


def _copyable(aval):
    dtype = np.dtype(aval.dtype)
    return dtype.kind != "O" and dtype.itemsize in _COPY_ITEMSIZES


def _lowering(eqn):
    """The step kind ``eqn`` lowers to (not counting elementwise groups), or
    None for a callout."""
    if loop_kind(eqn) is not None:
        return "loop"
    if eqn.prim is matmul_p:
        return "gemm" if _gemm_shapes(eqn) is not None else None
    if draw_mode(eqn) is not None:
        return "draw"
    if (eqn.prim.name, eqn.prim.family) in _IDENTITIES:
        n = eqn.params["n"]
        return "views" if all(type(v) is Var for v in eqn.invars[:n]) else None
    if eqn.prim in (concatenate_p, scatter_add_p):
        return "pieces" if _pieces(eqn) is not None else None
    if len(eqn.outvars) != 1 or len(eqn.invars) != 1 or type(eqn.invars[0]) is not Var:
        return None
    x, out = eqn.invars[0].aval, eqn.outvars[0].aval
    if eqn.prim in _BOOL_REDUCTIONS:
        return "reduce" if np.dtype(x.dtype).kind == "b" else None
    if eqn.prim in _REDUCTIONS:
        if np.dtype(x.dtype) not in ALL_KERNEL_DTYPES \
                or np.dtype(out.dtype) not in ALL_KERNEL_DTYPES:
            return None
        if _REDUCTIONS[eqn.prim] != "sum" and (x.dtype != out.dtype
                                               or np.dtype(x.dtype).kind == "c"):
            return None
        return "reduce"
    if not _copyable(out) or x.dtype != out.dtype:
        return None
    if eqn.prim in (reshape_p, stop_gradient_p):
        return "view"
    if eqn.prim in (transpose_p, broadcast_to_p):
        return "copy"
    if eqn.prim is getitem_p and all(item[0] != "array" for item in eqn.params["spec"]):
        return "copy"               # basic indexing: a strided view, copied
    return None


def program_steps(graph, label=""):
    """The graph's steps (elementwise loops, reductions, copies, views, loops
    and callouts), in an order that respects every dependency; ``label``
    prefixes each equation's index in the callouts' names."""
    # products as matmuls (program_linalg); views for undone transposes;
    # reshapes and stacks after the elementwise work around them
    graph = _layout_late(_transposes_undone(einsums_as_products(graph)))
    groups = attach_reductions(graph, plan_groups(graph, can_fuse=cpu_fusable, min_size=1))
    readers = reader_counts(graph)
    # a group runs where its last member (or the last full reduction of it) was
    at_last = {max(members + reductions): (members, reductions)
               for members, reductions in groups}
    in_group = {k for members, reductions in groups for k in members + reductions}
    folded = _folded_transposes(graph)
    sliced = _sliced_transposes(graph)
    stacked = _stacked_transposes(graph, set(folded) | set(sliced))
    in_pieces = {v: read for v, read in _sliced_into_pieces(graph).items()
                 if read[0] not in folded and read[0] not in sliced}
    stacked_by = {eqn.outvars[0] for eqn in graph.eqns if eqn.prim is transpose_p
                  and type(eqn.invars[0]) is Var and eqn.invars[0] in stacked}
    # a scan's ys that nothing reads are not kept (the body still computes them)
    unread = {v for eqn in graph.eqns for v in eqn.outvars if not readers[v]}
    steps = []
    for k, eqn in enumerate(graph.eqns):
        if k in at_last:
            steps += _kernel_steps(graph, *at_last[k], readers)
            continue
        if k in in_group or eqn.prim is transpose_p and (
                eqn.outvars[0] in folded or eqn.outvars[0] in sliced
                or eqn.outvars[0] in stacked_by) or eqn.outvars and eqn.outvars[0] in in_pieces:
            continue
        # LAPACK calls, gathers and scatters, checks: steps of modules of their own
        native = linalg_step(eqn, f"{label}{k}") or indexing_step(eqn, f"{label}{k}") \
            or check_step(eqn, f"{label}{k}")
        if native is not None:
            steps.append(native)
            continue
        how = _lowering(eqn)
        if how == "gemm":
            (a, b), (out,) = eqn.invars, eqn.outvars
            transposed = tuple(name for name, v in (("a", a), ("b", b))
                               if type(v) is Var and v in folded)
            a, b = (folded[v] if type(v) is Var and v in folded else v for v in (a, b))
            steps.append(_Gemm(a, b, out, *_gemm_shapes(eqn), transposed))
            continue
        if how == "loop":
            steps.append(loop_step(eqn, f"{label}{k}", _lower, sliced, stacked, unread))
            continue
        if how == "views":
            steps += [_View(x, out) for x, out in zip(eqn.invars, eqn.outvars)]
            continue
        if how == "pieces":
            steps.append(_Pieces(eqn.outvars[0], *_pieces(eqn, in_pieces)))
            continue
        if how == "draw":
            steps.append(DrawStep(eqn))
            continue
        (x,), (out,) = (eqn.invars, eqn.outvars) if how else ((None,), (None,))
        if how == "reduce":
            axis = eqn.params["axis"]
            axis = range(x.aval.ndim) if axis is None else (axis,) if type(axis) is int \
                else axis
            axes = tuple(sorted(a % max(x.aval.ndim, 1) for a in axis))
            kind = _REDUCTIONS.get(eqn.prim) or _BOOL_REDUCTIONS[eqn.prim]
            steps.append(_Reduce(kind, x, out, axes))
        elif how == "view":
            steps.append(_View(x, out))
        elif how == "copy":
            steps.append(_Copy(x, out, *_read_strides(eqn)))
        else:
            steps.append(_Callout(f"{label}{k}", eqn))
    return _pieces_into_kernels(steps, graph)


#: the most elements of zeros a loop reads from a constant (`_flat_runs`)
MAX_ZEROS_READ = 1024


def _pieces_into_kernels(steps, graph):
    """``steps`` with each concatenate (a `_Pieces` of runs of its flat
    elements) read only by flat elementwise loops, read by them from its
    pieces instead: such a loop runs once per piece, each run reading the
    piece's source where it would have read the concatenate. A shift
    (``concatenate([c, y[:-1]])``, GradBench's ode: four per Runge-Kutta
    step, and their cotangents) is then no copy of its own."""
    runs = {s.dst: _flat_runs(s) for s in steps if isinstance(s, _Pieces)}
    runs = {v: pieces for v, pieces in runs.items() if pieces is not None}
    for v in graph.outvars:
        runs.pop(v, None)
    for s in steps:
        flat = isinstance(s, _Kernel) and _flat_kernel(s)
        for v in s.reads():
            if type(v) is Var and v in runs and not (flat and all(
                    index == "i" for w, (_, index) in zip(s.inputs, s.spec.inputs) if w is v)):
                del runs[v]
    out = []
    for s in steps:
        if isinstance(s, _Pieces) and s.dst in runs:
            continue
        if isinstance(s, _Kernel) and any(type(v) is Var and v in runs for v in s.inputs):
            s = _Kernel(s.spec, s.inputs, s.modes, s.outputs, s.reduced, s.size, s.placed,
                        {j: runs[v] for j, v in enumerate(s.inputs)
                         if type(v) is Var and v in runs})
        out.append(s)
    return out


def _flat_runs(step):
    """``[(source, first element, count, source's first element)]`` if each
    piece of `_Pieces` ``step`` is a run of its flat elements read from a run
    of its source's, else None."""
    shape = tuple(step.dst.aval.shape)
    if not shape:
        return None
    runs = []
    for src, piece, src_strides, dst_strides, start, src_start in step.pieces:
        if tuple(piece[1:]) != shape[1:] or not _in_c_order(shape, dst_strides) \
                or not _in_c_order(piece, src_strides):
            return None
        if math.prod(piece):
            runs.append((src, start, math.prod(piece), src_start))
    if not step.zeros:
        return runs
    # the elements no piece writes (a shift's cotangent: one) are read from
    # a constant of zeros, where they are few
    runs.sort(key=lambda run: run[1])
    ends = [0] + [start + count for _, start, count, _ in runs]
    gaps = [(end, start - end) for end, (_, start, _, _) in zip(ends, runs + [
        (None, math.prod(shape), 0, 0)]) if start > end]
    if sum(count for _, count in gaps) > MAX_ZEROS_READ:
        return None
    zeros = [(Literal(np.zeros(count, step.dst.aval.dtype),
                      ShapedArray((count,), step.dst.aval.dtype)), start, count, 0)
             for start, count in gaps]
    return sorted(runs + zeros, key=lambda run: run[1])


def _in_c_order(shape, strides):
    """Whether ``strides`` (elements) lay ``shape`` out contiguously in C
    order; a stride along an axis of length one is never used, so it may be
    anything."""
    return all(s == c for n, s, c in zip(shape, strides, contiguous_strides(shape)) if n != 1)


def _flat_kernel(step):
    """Whether `_Kernel` ``step`` is one flat loop over its elements that
    reads each operand at the loop's index or once, and may run over any
    part of them."""
    spec = step.spec
    return not (spec.packed or spec.inner is not None or spec.reductions or step.placed
                or spec.out_strides or step.pieces) \
        and all(index in ("i", "one") for _, index in spec.inputs) \
        and all(math.prod(v.aval.shape) == step.size
                for v, (_, index) in zip(step.inputs, spec.inputs) if index == "i") \
        and all(math.prod(v.aval.shape) == step.size for v in step.outputs)


def _transposes_undone(graph):
    """``graph`` with each transpose whose result, followed back through
    reshapes and transposes, is an earlier value in its own order (a
    vmapped einsum's batch axis moved to the front and back again) a
    reshape of that value: a view where the transpose was a copy (ht's
    Jacobian: two copies of 3.4 million elements). The transposes it made
    unread are dropped."""
    # value -> (the value whose buffer it views, its elements' offsets in it)
    origin = {}
    eqns, changed = [], False
    for eqn in graph.eqns:
        x = eqn.invars[0] if eqn.invars else None
        if eqn.prim not in (reshape_p, transpose_p) or type(x) is not Var:
            eqns.append(eqn)
            continue
        out = eqn.outvars[0]
        base, offsets = origin.get(x) or (x, np.lib.stride_tricks.as_strided(
            np.zeros(1, np.uint8), x.aval.shape, contiguous_strides(x.aval.shape)))
        if eqn.prim is transpose_p:
            viewed = offsets.transpose(eqn.params["axes"])
        else:
            try:
                viewed = np.reshape(offsets, out.aval.shape, copy=False)
            except ValueError:          # not a view of it: a buffer of its own
                eqns.append(eqn)
                continue
        origin[out] = (base, viewed)
        if eqn.prim is transpose_p and base is not x and viewed.flags.c_contiguous:
            eqn = Equation(reshape_p, [base], [out], {"shape": tuple(out.aval.shape)})
            changed = True
        eqns.append(eqn)
    if not changed:
        return graph
    return eliminate_dead_code(Graph(graph.invars, eqns, graph.outvars))


def _layout_late(graph):
    """``graph`` with each layout equation (`_LAYOUT`) moved down to just
    before its first reader. An equation that reads an elementwise group
    closes it (`fgrad.compiler.fusion.plan_groups`): the stack of each
    ``jvp``'s result, written between the ``jvp``s, split what is one loop
    over the elements into one loop per ``jvp``, each writing its
    intermediates to memory for the next to read (GradBench's ba: 15 loops)."""
    if not any(eqn.prim in _LAYOUT for eqn in graph.eqns):
        return graph
    held = {}                   # output -> its layout equation, not placed yet
    eqns = []

    def place(eqn):
        # the held equations ``eqn`` reads (and those they read) first, in order
        stack, ready = [eqn], []
        while stack:
            top = stack[-1]
            waiting = [held[v] for v in top.invars if type(v) is Var and v in held]
            if waiting:
                for w in waiting:
                    held.pop(w.outvars[0], None)
                stack += waiting[::-1]
                continue
            ready.append(stack.pop())
        eqns.extend(ready)

    for eqn in graph.eqns:
        if eqn.prim in _LAYOUT and len(eqn.outvars) == 1:
            held[eqn.outvars[0]] = eqn
        else:
            place(eqn)
    for eqn in list(held.values()):
        if held.get(eqn.outvars[0]) is eqn:
            del held[eqn.outvars[0]]
            place(eqn)
    return Graph(graph.invars, eqns, graph.outvars)


def _lower(parts, fresh):
    """Graphs run in order inside a loop (``parts``: ``(graph, label)``
    pairs), lowered: ``([Part], plan)``, the plan one for all of them
    (their values do not outlive an iteration), the last ``fresh`` inputs
    of the first written before its first step. Each graph's values are new ones
    (a graph may be the body of two loops), and each output is made a value
    the graph's steps write (an output that is an input, a constant, a view
    or another output again is copied), so that the loop may copy results
    over carries in any order."""
    lowered, plan_steps, placed, first = [], [], set(), None
    for graph, label in parts:
        graph = renamed(optimize(graph, np))
        if first is None:
            first = graph.invars[len(graph.invars) - fresh:]
        steps = program_steps(graph, label)
        made = {w for s in steps if not isinstance(s, _View) for w in s.writes()}
        results = []
        for v in graph.outvars:
            if type(v) is not Var or v not in made or v in results:
                copy = Var(v.aval)
                steps.append(_Copy(v, copy, contiguous_strides(v.aval.shape)))
                v = copy
            results.append(v)
        placed.update(v for v in graph.invars if v not in first)
        for s in steps:
            placed.update(w for w in s.writes() if type(w) is Var and not _in_memory(w))
            if isinstance(s, _View) and (type(s.src) is not Var or s.src in placed):
                placed.add(s.dst)
        plan_steps += [_plan_step(s) for s in steps] + [Step(results, [], {}, {})]
        lowered.append(Part(graph, steps, results))
    if first:
        plan_steps.insert(0, Step([], first, {}, {}))
    return lowered, plan_buffers(plan_steps, _nbytes, placed=placed)


def _readers(graph):
    """{value: the ``(equation, operand position)`` of each read of it}, and
    the graph's output values."""
    readers = {}
    for eqn in graph.eqns:
        for j, v in enumerate(eqn.invars):
            if type(v) is Var:
                readers.setdefault(v, []).append((eqn, j))
    return readers, {v for v in graph.outvars if type(v) is Var}


def _folded_transposes(graph):
    """{transposed value: its source} for each transpose of the last two axes
    read only by products that gemm computes: gemm reads the source
    transposed (its ``"T"`` flag), and the transpose is never made."""
    readers, outputs = _readers(graph)
    folded = {}
    for eqn in graph.eqns:
        if eqn.prim is not transpose_p or type(eqn.invars[0]) is not Var:
            continue
        (src,), (out,), n = eqn.invars, eqn.outvars, eqn.invars[0].aval.ndim
        if n < 2 or tuple(eqn.params["axes"]) != tuple(range(n - 2)) + (n - 1, n - 2) \
                or out in outputs:
            continue
        if all(e.prim is matmul_p and _gemm_shapes(e) is not None for e, _ in readers[out]):
            folded[out] = src
    return folded


def _sliced_transposes(graph):
    """{transposed value: (its source, the axes)} for each transpose read only
    as the ``xs`` of scans lowered in place: each step copies its slice from
    the source through the transpose's strides (`program_loops`), and the
    transpose is never made (a vmapped scan's ``xs``, moved to the front,
    took an array the size of all of them where NumPy makes a view)."""
    readers, outputs = _readers(graph)

    def as_xs(eqn, j):
        return loop_kind(eqn) == "scan" and j >= eqn.params["n_consts"] + eqn.params["n_carry"]
    return {eqn.outvars[0]: (eqn.invars[0], tuple(eqn.params["axes"]))
            for eqn in graph.eqns
            if eqn.prim is transpose_p and type(eqn.invars[0]) is Var
            and eqn.outvars[0] not in outputs and _copyable(eqn.outvars[0].aval)
            and all(as_xs(*read) for read in readers.get(eqn.outvars[0], [(eqn, -1)]))}


def _sliced_into_pieces(graph):
    """{value: (its source, strides, start)} for each basic index read only
    as a piece of concatenates and scatter_adds that `_Pieces` computes:
    each piece is read from the source through the index's strides, and the
    indexed value is never made (a shift, ``concatenate([a, y[:-1]])``, and
    its cotangent, copied once where they were copied twice)."""
    readers, outputs = _readers(graph)
    sliced = {}
    for eqn in graph.eqns:
        if eqn.prim is not getitem_p or type(eqn.invars[0]) is not Var \
                or _lowering(eqn) != "copy" or eqn.outvars[0] in outputs:
            continue
        found = readers.get(eqn.outvars[0], [])
        if found and all(e.prim in (concatenate_p, scatter_add_p) and _lowering(e) == "pieces"
                         for e, _ in found):
            strides, start = _read_strides(eqn)
            sliced[eqn.outvars[0]] = (eqn.invars[0], strides, start)
    return sliced


def _stacked_transposes(graph, skipped):
    """{a scan's ``ys`` value: (its transpose, the axes)} for each ``ys``
    read only by one transpose: the scan writes each step's rows into the
    transpose's memory through its strides (`program_loops`), and neither
    the ``ys`` nor a copy of them is made (a vmapped scan's ``ys``, moved
    back behind the batch axis). A transpose in ``skipped`` (never made
    itself: its readers read the ``ys``) is left as it is."""
    readers, outputs = _readers(graph)
    stacked = {}
    for eqn in graph.eqns:
        if loop_kind(eqn) != "scan":
            continue
        for y in eqn.outvars[eqn.params["n_carry"]:]:
            found = [e for e, _ in readers.get(y, [])]
            if len(found) == 1 and found[0].prim is transpose_p and y not in outputs \
                    and found[0].outvars[0] not in skipped and _copyable(y.aval):
                stacked[y] = (found[0].outvars[0], tuple(found[0].params["axes"]))
    return stacked


def _written_in_place(steps, graph):
    """``steps`` with each value that concatenates, reshapes and a transposing
    copy only move into a larger value written there at once by the step
    that computes it: an elementwise loop's output at a stride
    (`KernelSpec.out_strides`), a concatenate's pieces at their strides in
    it; the moves left out. GradBench's ba: 15 ``jvp`` s of one loop,
    stacked by twos and fifteens and transposed to (observations, 2, 15),
    were three copies of the whole Jacobian after the loop. Not where a
    callout runs (it may read any value through Python)."""
    if any(isinstance(s, _Callout) for s in steps):
        return steps
    returned = {v for v in graph.outvars if type(v) is Var}
    reads = collections.Counter(v for s in steps for v in s.reads() if type(v) is Var)
    writer = {v: s for s in steps for v in s.writes()}

    def moved_only(x):
        # read once, by the step moving it, not returned, and computed by a
        # step that can write it elsewhere
        if type(x) is not Var or reads[x] != 1 or x in returned or x not in writer:
            return False
        s = writer[x]
        return isinstance(s, (_Kernel, _View)) or isinstance(s, _Pieces) and _boxes(s) \
            is not None and None not in _boxes(s) or isinstance(s, _Copy) \
            and _transposed_axes(s) is not None

    # value -> (the value it is moved into, the offsets of its elements there:
    # a view of a stand-in of that value's shape, one byte an element)
    into = {}

    def home(v):
        return into.get(v) or (v, _stand_in(v.aval.shape))
    for s in reversed(steps):
        if isinstance(s, _Copy) and moved_only(s.src) and not isinstance(writer[s.src], _View):
            axes = _transposed_axes(s)
            if axes is not None:
                final, stand_in = home(s.dst)
                into[s.src] = final, stand_in.transpose(np.argsort(axes))
        elif isinstance(s, _View) and s.dst in into and moved_only(s.src):
            final, stand_in = into[s.dst]
            try:
                into[s.src] = final, np.reshape(stand_in, s.src.aval.shape, copy=False)
            except ValueError:          # not a view of it
                pass
        elif isinstance(s, _Pieces) and _boxes(s) is not None:
            final, stand_in = home(s.dst)
            for (src, shape, src_strides, _, _, src_start), box in zip(s.pieces, _boxes(s)):
                whole = type(src) is Var and tuple(src.aval.shape) == tuple(shape) \
                    and src_start == 0 and tuple(src_strides) == contiguous_strides(shape)
                if box is not None and whole and moved_only(src):
                    into[src] = final, stand_in[box]
    # where the step computing a value can write it in place, it does
    done, placed_steps = {}, []
    for s in steps:
        if isinstance(s, _Kernel) and not s.pieces:
            placed, strides = {}, []
            for j, v in enumerate(s.outputs):
                flat = _flat_stride(into[v][1]) if v in into else None
                if flat is not None:
                    done[v] = into[v]
                    placed[j] = (into[v][0], flat[0])
                strides.append(1 if flat is None else flat[1])
            if placed:
                spec = s.spec
                s = _Kernel(KernelSpec(spec.inputs, spec.inner, spec.ops, spec.reductions,
                                       spec.outputs, spec.packed, spec.vectorised,
                                       tuple(strides)),
                            s.inputs, s.modes, s.outputs, s.reduced, s.size, placed)
        elif isinstance(s, _View) and s.src in done and s.dst in into:
            done[s.dst] = into[s.dst]
            continue
        elif isinstance(s, _Copy) and s.src in done:
            if s.dst in into:
                done[s.dst] = into[s.dst]
            continue
        elif isinstance(s, _Pieces) and (s.dst in into or any(
                type(src) is Var and src in done for src, *_ in s.pieces)):
            final, stand_in = home(s.dst)
            if s.dst in into:
                done[s.dst] = into[s.dst]
            pieces = []
            for (src, shape, src_strides, dst_strides, start, src_start), box in zip(
                    s.pieces, _boxes(s) or [None] * len(s.pieces)):
                if type(src) is Var and src in done:
                    continue
                if final is not s.dst:
                    at = stand_in[box]
                    dst_strides, start = at.strides, _stand_in_start(at)
                pieces.append((src, shape, src_strides, dst_strides, start, src_start))
            if not pieces:
                continue
            s = _Pieces(final, pieces, s.zeros)
        placed_steps.append(s)
    return placed_steps


def _stand_in(shape):
    """A view of no memory, of ``shape``, C-contiguous with one-byte elements:
    its strides and offsets are element counts (`_written_in_place`)."""
    return np.lib.stride_tricks.as_strided(_BYTE, shape, contiguous_strides(shape))


_BYTE = np.zeros(1, np.uint8)


def _stand_in_start(view):
    return view.__array_interface__["data"][0] - _BYTE.__array_interface__["data"][0]


def _flat_stride(view):
    """``(start, stride)`` of the elements of stand-in ``view`` in C order,
    if they are evenly spaced, else None."""
    try:
        flat = np.reshape(view, -1, copy=False)
    except ValueError:
        return None
    return _stand_in_start(view), flat.strides[0] if flat.size > 1 else 1


def _boxes(s):
    """The index of each piece of concatenate step ``s`` in its result (a
    tuple of slices; None for a piece not placed as a box), or None for a
    scatter_add."""
    if s.zeros:
        return None
    shape = tuple(s.dst.aval.shape)
    boxes = []
    for _, piece, _, dst_strides, start, _ in s.pieces:
        if len(piece) != len(shape) or math.prod(piece) == 0 \
                or tuple(dst_strides) != contiguous_strides(shape):
            boxes.append(None)
            continue
        begin = np.unravel_index(start, shape)
        boxes.append(tuple(slice(int(b), int(b) + n) for b, n in zip(begin, piece)))
    return boxes


def _transposed_axes(s):
    """The axes of the transpose that copy step ``s`` makes of its source
    (`_Copy`), or None if it is another copy."""
    shape, strides = tuple(s.src.aval.shape), contiguous_strides(s.src.aval.shape)
    if s.start or math.prod(shape) != math.prod(s.dst.aval.shape) \
            or len(shape) != len(s.dst.aval.shape):
        return None
    axes = []
    for n, stride in zip(s.dst.aval.shape, s.strides):
        found = [a for a in range(len(shape)) if a not in axes and shape[a] == n
                 and (strides[a] == stride or n == 1)]
        if not found:
            return None
        axes.append(found[0])
    return axes


def _gemm_shapes(eqn):
    """``(m, n, k, batch, a_strides, b_strides)`` of a matmul that BLAS's gemm
    computes (`_Gemm`), or None: operands and result all float64 or all
    float32, no size 0 (nothing to multiply) or beyond BLAS's integers, and
    SciPy's BLAS found (`fgrad.compiler.blas`). Gemm at every size: a call
    of it for 1x1 to 8x8 matrices measured some 40-70 ns, too little for a
    loop of our own to win much."""
    (a, b), (out,) = eqn.invars, eqn.outvars
    dtype = np.dtype(out.aval.dtype)
    if dtype not in GEMM_DTYPES or any(np.dtype(v.aval.dtype) != dtype for v in (a, b)) \
            or gemm_table() is None:
        return None
    a_shape = (1,) + tuple(a.aval.shape) if a.aval.ndim == 1 else tuple(a.aval.shape)
    b_shape = tuple(b.aval.shape) + (1,) if b.aval.ndim == 1 else tuple(b.aval.shape)
    (m, k), n = a_shape[-2:], b_shape[-1]
    if not 0 < max(m, n, k) <= MAX_BLAS_INT or min(m, n, k) == 0:
        return None
    batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    # the batch axes' strides in matrices, times each matrix's size
    a_strides = tuple(s * m * k for s in broadcast_strides(a_shape[:-2], batch))
    b_strides = tuple(s * k * n for s in broadcast_strides(b_shape[:-2], batch))
    return m, n, k, batch, a_strides, b_strides


def _read_strides(eqn):
    """``(strides, start)``: the element strides a `_Copy` reads its source
    at, per output axis, and the element it starts from."""
    x, out = eqn.invars[0].aval, eqn.outvars[0].aval
    strides = contiguous_strides(x.shape)
    if eqn.prim is transpose_p:
        return tuple(strides[a] for a in eqn.params["axes"]), 0
    if eqn.prim is getitem_p:
        return _view_of(x.shape, eqn.params["spec"])[:2]
    return broadcast_strides(x.shape, out.shape), 0


def _pieces(eqn, sliced=None):
    """``(pieces, zeros)`` of a `_Pieces` step computing a concatenate or a
    scatter_add at a basic index (integers, slices: no element twice), or
    None: operands of the result's dtype, copyable. An operand in ``sliced``
    (`_sliced_into_pieces`) is read from its source through its strides."""
    sliced = sliced or {}

    def source(x, strides):
        # (value, strides, start) to read operand x, read at ``strides`` if it were made
        if type(x) is not Var or x not in sliced:
            return x, strides, 0
        src, view_strides, start = sliced[x]
        return src, tuple(0 if s == 0 else v for s, v in
                          zip(strides, (0,) * (len(strides) - len(view_strides))
                              + tuple(view_strides))), start
    out = eqn.outvars[0].aval
    if not _copyable(out) or any(np.dtype(v.aval.dtype) != np.dtype(out.dtype)
                                 for v in eqn.invars):
        return None
    out_strides = contiguous_strides(out.shape)
    if eqn.prim is scatter_add_p:
        if len(eqn.invars) != 1 or any(item[0] == "array" for item in eqn.params["spec"]):
            return None
        (ct,) = eqn.invars
        strides, start, shape = _view_of(out.shape, eqn.params["spec"])
        if len(ct.aval.shape) > len(shape) or any(
                n not in (1, m) for n, m in zip(ct.aval.shape[::-1], shape[::-1])):
            return None
        src, src_strides, src_start = source(ct, broadcast_strides(ct.aval.shape, shape))
        return [(src, shape, src_strides, strides, start, src_start)], True
    axis, at, pieces = eqn.params["axis"] % max(len(out.shape), 1), 0, []
    for x in eqn.invars:
        shape = tuple(x.aval.shape)
        src, src_strides, src_start = source(x, contiguous_strides(shape))
        pieces.append((src, shape, src_strides, out_strides, at * out_strides[axis],
                       src_start))
        at += shape[axis]
    return pieces, False


def _view_of(shape, spec):
    """``(element strides, start element, shape)`` of basic index ``spec``
    into a C-contiguous array of ``shape``."""
    # NumPy's own indexing of a stand-in of one-byte elements (zero-strided
    # memory: nothing is read) gives the view's strides and offset
    stand_in = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape,
                                               contiguous_strides(shape))
    index = build_index(spec, ())
    # (an Ellipsis makes an index of integers only give a 0-d view, not a scalar)
    view = stand_in[index if Ellipsis in index else index + (Ellipsis,)]
    start = view.__array_interface__["data"][0] - stand_in.__array_interface__["data"][0]
    return view.strides, start, view.shape


def _kernel_steps(graph, members, reductions, readers):
    spec, inputs, modes, outputs, reduced = kernel_source(graph, members, reductions, readers)
    shape = tuple(graph.eqns[members[-1]].outvars[0].aval.shape)
    # an input broadcast in no way the loop reads directly is read in place
    # at offsets, not broadcast out to a full array first (ht's Jacobian: six
    # copies of (28, 12800, 3), each written and read once)
    spec, modes = broadcast_in_place(spec, inputs, modes, shape)
    # the outputs each a pointer of their own (not rows of one array); the
    # vector functions whatever the number of outputs (the kernels' tier caps
    # it, `MAX_VECTOR_OUTPUTS`): LLVM needs no address checks here, each
    # output being noalias where it shares no memory (`_Emitter.apart`),
    # which a vectorised loop's always do (it writes into no operand,
    # `_in_place`). GradBench's ba: 26 outputs, 54 -> 43 ms at ba3
    vectorised = any(op.vector for op in spec.ops) and math.prod(shape) >= MIN_VECTOR_ELEMENTS
    spec = KernelSpec(spec.inputs, spec.inner, spec.ops, spec.reductions, spec.outputs,
                      False, vectorised)
    return [_Kernel(spec, inputs, modes, outputs, reduced, math.prod(shape))]


def _in_place(step):
    """{value written: values read whose buffer it may take}: an elementwise
    loop reads element i of a same-shaped operand before it writes element i
    (not one whose loop may run twice, `KernelSpec.vectorised`)."""
    if not isinstance(step, _Kernel) or step.spec.vectorised or step.pieces:
        return {}
    takes = {}
    for out in step.outputs:
        takes[out] = [v for v, (_, index) in zip(step.inputs, step.spec.inputs)
                      if index == "i" and type(v) is Var
                      and np.dtype(v.aval.dtype).itemsize == np.dtype(out.aval.dtype).itemsize
                      and tuple(v.aval.shape) == tuple(out.aval.shape)]
    return takes


# ---------------------------------------------------------------------------
# The program: plan, IR, machine code, the Python call
# ---------------------------------------------------------------------------


def _nbytes(v):
    if type(v) is Scratch:
        return v.nbytes
    return math.prod(v.aval.shape) * np.dtype(v.aval.dtype).itemsize


def _plan_step(s):
    """Step ``s`` as the buffer plan sees it."""
    return Step(list(s.reads()), list(s.writes()), _in_place(s),
                {s.dst: s.src} if isinstance(s, _View) else {})


class Program:
    """A graph compiled as one native function (`compile_program`).

    ``call(*inputs)`` returns the graph's outputs as a tuple; ``callouts``
    names the equations run by their NumPy code (``"k: primitive"``), ``plan``
    is the `fgrad.compiler.buffer_plan.BufferPlan`, ``native`` the
    `fgrad.compiler.native.NativeFunction` (``native.loaded``: from the disk
    cache) and ``seconds`` what lowering and compiling took.
    """

    __slots__ = ("graph", "call", "callouts", "plan", "native", "seconds", "steps",
                 "_callback", "__weakref__")

    def __repr__(self):
        return (f"<Program: {len(self.steps)} steps, {len(self.callouts)} callouts, "
                f"arena of {self.plan.arena_bytes} bytes>")


def _in_memory(v):
    """Whether value ``v`` is an array of numbers (or bools), which the
    program's buffers hold; any other (a factorization object) is a Python
    object, made and read by callouts only."""
    return np.dtype(v.aval.dtype).kind in "biufc"


class _Locations:
    """Where each value lives: ``("in", j)``, ``("out", j)``, ``("const", j)``,
    ``("arena", offset)``, ``("in out", (j, offset))`` (in output ``j``'s
    memory before it is written: `_output_regions`), ``("py", j)`` for a
    Python object (`_in_memory`), or ``("heap", j)`` for an array a callout
    made, kept as Python object ``j`` (`heap`)."""

    def __init__(self, graph, steps):
        self.where = {}
        self.consts = []
        self.objects = 0
        self.inputs = [v.aval for v in graph.invars]
        for v in list(graph.invars) + [v for v in graph.outvars if type(v) is Var]:
            if not _in_memory(v):
                raise NotImplementedError(
                    f"a program whose input or output is a {v.aval.dtype} value: only "
                    "arrays of numbers go in and out of compiled programs")
        for s in _every_step(steps):
            for v in s.writes():
                if type(v) is Var and not _in_memory(v):
                    self.where[v] = ("py", self.objects)
                    self.objects += 1
        for j, v in enumerate(graph.invars):
            self.where.setdefault(v, ("in", j))
        self.outputs = []           # the values with an output array of their own
        written = {w for s in steps if not isinstance(s, _View) for w in s.writes()}
        for v in graph.outvars:
            if type(v) is Var and v in written and v not in self.where:
                self.where[v] = ("out", len(self.outputs))
                self.outputs.append(v)
        # a view of memory of its own (an input, an output) lives there too
        for s in steps:
            if isinstance(s, _View) and type(s.src) is Var and s.src in self.where \
                    and self.where[s.src][0] in ("in", "out") and s.dst not in self.where:
                self.where[s.dst] = self.where[s.src]
        for s in _every_step(steps):
            for v in s.reads():
                if type(v) is Literal and id(v) not in self.where:
                    self.where[id(v)] = ("const", len(self.consts))
                    self.consts.append(_c_contiguous(np.asarray(v.value, v.aval.dtype)))

    def of(self, v):
        return self.where[id(v) if type(v) is Literal else v]

    def heap(self, steps):
        """``steps`` with `_Heap` steps added, where a top-level callout makes
        an array of `HEAP_CALLOUT_BYTES` or more: then each top-level value of
        `HEAP_BYTES` or more that has no place yet (an output included) lives
        in an array of its own, ``("heap", j)`` (Python object ``j`` of the call, its
        address at arena byte `slot` ``(j)``), made before the step that
        writes it (a callout's result: the array its NumPy code made,
        adopted), shared by views of it and by an elementwise loop's result
        written over it as it dies (`_in_place`), and let go after its last
        reader, as the interpreted tier makes and lets go of its arrays. In
        an arena instead, a callout's result is held twice for a moment
        (NumPy's array, copied into the arena), and the arena, made before
        the call, holds every buffer from the start: LeNet's gradient peaked
        at 1.7-1.9 times the interpreted tier's memory."""
        self.slots, self.slots_at, self.slots_view = {}, 0, None
        self.heap_outputs = {}      # output j -> the heap array it is
        if not _keeps_arrays_apart(steps):
            return steps
        last_read = {}
        for k, s in enumerate(steps):
            for v in s.reads():
                if type(v) is Var:
                    last_read[v] = k
        last_read.update((v, math.inf) for v in self.outputs)     # returned: kept
        members, born, allocs, frees = {}, {}, collections.defaultdict(list), {}

        def join(v, j):
            self.where[v] = ("heap", j)
            members[j].append(v)
        for k, s in enumerate(steps):
            if isinstance(s, _View):
                if type(s.src) is Var and self.where.get(s.src, ("",))[0] == "heap":
                    join(s.dst, self.where[s.src][1])
                continue
            for v in s.writes():
                if type(v) is not Var or self.where.get(v, ("out",))[0] != "out" \
                        or not _in_memory(v) or _nbytes(v) < HEAP_BYTES:
                    continue
                output = self.where.get(v, ("", None))[1]
                taken = next(self._dying(s, v, k, members, last_read), None)
                if output is not None:
                    self.heap_outputs[output] = self.objects if taken is None else taken
                if taken is not None:
                    join(v, taken)
                    continue
                j = self.objects
                self.objects += 1
                self.slots[j] = len(self.slots), tuple(v.aval.shape), np.dtype(v.aval.dtype)
                members[j], born[j] = [], k
                join(v, j)
                if not isinstance(s, _Callout):
                    allocs[k].append((j, self.slots[j][0]) + self.slots[j][1:])
        for j, vs in members.items():
            frees.setdefault(max([born[j]] + [last_read.get(v, -1) for v in vs]), []).append(j)
        placed = []
        for k, s in enumerate(steps):
            placed.append(_Heap(f"{k}h", [], allocs[k]))
            placed.append(s)
            if isinstance(s, _Callout):
                s.drops = frees.get(k, [])
            else:
                placed.append(_Heap(f"{k}f", frees.get(k, []), []))
        # what one step lets go of and the next makes: one call back
        merged = []
        for s in placed:
            if isinstance(s, _Heap) and merged and isinstance(merged[-1], _Heap):
                merged[-1] = _Heap(merged[-1].index, merged[-1].frees + s.frees,
                                   merged[-1].allocs + s.allocs)
            else:
                merged.append(s)
        return [s for s in merged if not isinstance(s, _Heap) or s.frees or s.allocs]

    def _dying(self, step, v, k, members, last_read):
        """The heap arrays whose buffer ``v`` may take at step ``k``
        (`_in_place`): read once by the step, which reads them last."""
        def heap_array(r):
            kind, at = self.where.get(r, ("", None))
            return at if kind == "heap" else None
        reads = collections.Counter(heap_array(r) for r in set(step.reads()) if type(r) is Var)
        for r in _in_place(step).get(v, ()):
            j = heap_array(r)
            if j is not None and reads[j] == 1 \
                    and self.slots[j][1:] == (tuple(v.aval.shape), np.dtype(v.aval.dtype)) \
                    and max(last_read.get(u, -1) for u in members[j]) == k:
                yield j

    def slot(self, j):
        """The arena byte holding the address of heap array ``j`` (`heap`)."""
        return self.slots_at + 8 * self.slots[j][0]

    def place_loops(self, steps):
        """Where the values of the loops among ``steps`` live (their
        scratch regions placed): a body's inputs where the outer values
        they stand for are, its values in its loop's scratch region, a view
        of a value with a place of its own where that value is."""
        for s in steps:
            if not isinstance(s, Loop):
                continue
            for inner, outer in s.aliases:
                self.where[inner] = self.of(outer)
            base = self.of(s.scratch)[1]
            for v, offset in s.offsets.items():
                self.where.setdefault(v, ("arena", base + offset))
            for part in s.parts:
                for step in part.steps:
                    if isinstance(step, _View) and step.dst not in self.where:
                        self.where[step.dst] = self.of(step.src)
                self.place_loops(part.steps)


def _output_regions(steps, outputs):
    """``(j, bytes, step)`` of each output array ``j``: memory the buffer
    plan may use for values that die before ``step``, the one writing it."""
    first = {}
    for k, s in enumerate(steps):
        if not isinstance(s, _View):
            for v in s.writes():
                first.setdefault(v, k)
    return [(j, _nbytes(v), first[v]) for j, v in enumerate(outputs) if v in first]


# steps that read and write their values by pointer alone: a callout (or a
# native step that may call out, or a loop that may hold callouts) views the
# arena from Python, so its values stay there
_POINTER_ONLY = (_Kernel, _Copy, _Reduce, _Gemm, _Pieces, _View, DrawStep)


def _native_only(steps):
    """The values that only `_POINTER_ONLY` steps, and loops of them, read or
    write."""
    seen, python = set(), set()
    for s in steps:
        values = [v for v in list(s.reads()) + list(s.writes()) if type(v) is Var]
        by_pointer = isinstance(s, _POINTER_ONLY) or isinstance(s, Loop) and all(
            isinstance(inner, _POINTER_ONLY + (Loop,)) for inner in _every_step([s]))
        (seen if by_pointer else python).update(values)
    return seen - python


def _every_step(steps):
    """``steps`` and, recursively, the steps of their loops' bodies."""
    for s in steps:
        yield s
        if isinstance(s, Loop):
            yield from _every_step(s.inner_steps())


def compile_program(graph, steps=None):
    """``graph`` (optimised) as a `Program`
    (``steps``: its `program_steps`, if made already).

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> g = fgrad.make_graph(lambda x: fnp.sum(fnp.sin(x) * 2.0, axis=0))(np.ones((2, 3)))
    >>> if native_available():
    ...     program = compile_program(g)
    ...     (out,) = program.call(np.ones((2, 3)))
    ...     assert np.allclose(out, 4 * np.sin(1.0)) and program.callouts == []
    """
    start_time = time.perf_counter()
    steps = _written_in_place(list(program_steps(graph) if steps is None else steps), graph)
    places = _Locations(graph, steps)
    # an output that is a view (of an input, an output or the arena) is
    # copied into an array of its own at the end
    tails = dict.fromkeys(v for v in graph.outvars if type(v) is Var
                          and v not in graph.invars and v not in places.outputs)
    final = []
    for v in tails:
        copy_to = Var(v.aval)
        places.where[copy_to] = ("out", len(places.outputs))
        places.outputs.append(copy_to)
        final.append(_Copy(v, copy_to, contiguous_strides(v.aval.shape)))
    steps = places.heap(steps + final)
    placed = set(places.where) - {v for v in places.where if type(v) is int}
    plan = plan_buffers([_plan_step(s) for s in steps], _nbytes, placed=placed,
                        regions=[r for r in _output_regions(steps, places.outputs)
                                 if r[0] not in places.heap_outputs],
                        movable=_native_only(steps).__contains__)
    if places.slots:            # the heap arrays' addresses, after the plan's buffers
        places.slots_at = -(-plan.arena_bytes // 8) * 8
        plan.arena_bytes = places.slots_at + 8 * len(places.slots)
    for v, offset in plan.offsets.items():
        home = plan.homes.get(v)
        places.where[v] = ("arena", offset) if home is None else ("in out", (home, offset))
    places.place_loops(steps)
    n_in, n_out, n_const = len(graph.invars), len(places.outputs), len(places.consts)
    if n_in + n_out + n_const + 3 > MAX_ARGUMENTS:
        raise NotImplementedError(
            f"a program of {n_in} inputs, {n_out} outputs and {n_const} constants: the "
            f"function would take more than the {MAX_ARGUMENTS} arguments ctypes passes")
    callouts = [s for s in _every_step(steps) if isinstance(s, _Callout)]
    # a native step that meets a case it does not handle (a singular matrix,
    # an index out of bounds) runs its equation's NumPy code, which raises
    called = callouts + [s for s in _every_step(steps) if isinstance(s, _Heap)
                         or isinstance(s, NativeStep) and s.fallback]
    for j, s in enumerate(called):
        s.id = j
    # the disk cache is looked up by the graph's key where it has one, and
    # the IR written only if the machine code is not there
    write_ir = functools.partial(program_ir, steps, places, n_in, n_out, n_const)
    key = program_key(graph, list(_every_step(steps)), places, plan, called)
    # no unrolling: most of a program's loops (copies, reductions) have
    # constant trip counts, which LLVM unrolled at great length (mlp8's
    # gradient: 1.9 s to compile, 58 kB of code; 0.8 s, 11 kB without)
    # straight-line vectorising only with a kernel of the vector functions
    # (`fgrad.compiler.vector_math`): it found next to nothing to do in the
    # rest (ode-lv-vmap's program: 0.5 kB of its 115 kB of code, 0.2 s of
    # its 1.2 s of passes), but ode-node-batch's tanh loop ran 4% slower
    # without it
    slp = any(isinstance(s, _Kernel) and s.spec.vectorised for s in _every_step(steps))
    # keyed on the BLAS too: the cached code calls SciPy's wrappers through the table
    native = compile_ir(write_ir if key is not None else write_ir(), "program",
                        ["array"] * (n_in + n_out + 2 + n_const) + ["i64"], key=key,
                        unroll=False, slp=slp, depends=[f"blas {blas_provider()}"])
    program = Program()
    program.graph, program.steps, program.plan, program.native = graph, steps, plan, native
    program.callouts = [f"{s.index}: {s.eqn.prim.name}" for s in callouts]
    arena_views = []
    program._callback = _callback(called, places, arena_views) if called else None
    program.call = _make_call(graph, places, plan, native, program._callback, final,
                              arena_views)
    program.seconds = time.perf_counter() - start_time
    return program


# ---------------------------------------------------------------------------
# IR
# ---------------------------------------------------------------------------


def program_ir(steps, places, n_in, n_out, n_const):
    """The LLVM IR text of the program function for ``steps``."""
    from llvmlite import ir
    module = ir.Module(name="program")
    i8p, i64, i32 = ir.IntType(8).as_pointer(), ir.IntType(64), ir.IntType(32)
    n_arrays = n_in + n_out + 2 + n_const        # the last: the BLAS table
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i8p] * n_arrays + [i64]),
                     "program")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    data = [data_pointer(ir, b, obj, ir.IntType(8), array_data_offset())
            for obj in fn.args[:n_arrays]]
    bases = {"in": data[:n_in], "out": data[n_in:n_in + n_out], "arena": data[n_in + n_out],
             "const": data[n_in + n_out + 1:-1]}
    emitter = _Emitter(ir, b, fn, places, bases, b.bitcast(data[-1], i64.as_pointer()),
                       b.inttoptr(fn.args[-1], ir.FunctionType(i32, [i64]).as_pointer()))
    # the allocas (reductions' accumulators) go here, before any loop
    body = fn.append_basic_block("steps")
    b.branch(body)
    b.position_at_end(body)
    emitter.emit(steps)
    b.ret_void()
    b.position_at_end(emitter.exit_block)
    b.ret_void()
    return str(module)


class _Emitter:
    """Writes steps into the program function: ``pointer(v)`` is where value
    ``v`` lives, ``emit(steps)`` writes steps at the builder ``b`` (loops
    inside them included: `fgrad.compiler.program_loops.loop_ir`)."""

    def __init__(self, ir, b, fn, places, bases, blas_table, callout_fn):
        self.ir, self.b, self.fn, self.places, self.bases = ir, b, fn, places, bases
        self.blas_table, self.callout_fn = blas_table, callout_fn
        self.exit_block = fn.append_basic_block("fail")
        self.kernels = {}       # spec -> its function: an unrolled loop's steps share one
        self.rows = {}          # value -> (value, byte offset): where a loop put it

    def pointer(self, v, dtype=None):
        ir, b = self.ir, self.b
        dtype = v.aval.dtype if dtype is None else dtype
        if v in self.rows:          # a row of another value (`by_pointer`)
            outer, at = self.rows[v]
            base = b.gep(self.pointer(outer, np.uint8), [at])
            return b.bitcast(base, storage_type(ir, dtype).as_pointer())
        kind, at = self.places.of(v)
        if kind == "arena":
            base = b.gep(self.bases["arena"], [ir.Constant(ir.IntType(64), at)])
        elif kind == "in out":      # in an output's memory, before it is written
            base = b.gep(self.bases["out"][at[0]], [ir.Constant(ir.IntType(64), at[1])])
        elif kind == "heap":        # an array of its own: its data, read through its object
            i8p = ir.IntType(8).as_pointer()
            slot = b.gep(self.bases["arena"], [ir.Constant(ir.IntType(64),
                                                           self.places.slot(at))])
            array = b.load(b.bitcast(slot, i8p.as_pointer()))
            base = b.load(b.bitcast(b.gep(array, [ir.Constant(ir.IntType(64),
                                                              array_data_offset())]),
                                    i8p.as_pointer()))
        else:
            base = self.bases[kind][at]
        return b.bitcast(base, storage_type(ir, dtype).as_pointer())

    @staticmethod
    def by_pointer(steps):
        """The values of ``steps`` that only steps reading and writing by
        `pointer` touch, no view, loop or callout: a loop may place one in a
        row of another value (``rows``), its steps then reading or writing
        it there."""
        seen, other = set(), set()
        for s in steps:
            values = [v for v in list(s.reads()) + list(s.writes()) if type(v) is Var]
            direct = isinstance(s, _POINTER_ONLY) and not isinstance(s, _View)
            (seen if direct else other).update(values)
        return seen - other

    def apart(self, written, arrays):
        """Whether each value in ``written`` lives in memory that no other
        value of ``arrays`` overlaps (an elementwise loop writing into an
        operand's buffer does not)."""
        def extent(v):          # (memory, first byte, end) of v's place
            if type(v) is Literal:
                return None
            kind, at = self.places.of(v)
            if kind == "arena":
                return kind, at, at + _nbytes(v)
            if kind == "in out":    # a part of output at[0]'s memory
                return ("out", at[0]), at[1], at[1] + _nbytes(v)
            return (kind, at), 0, math.inf     # a whole input, output or constant
        for w in written:
            mine = extent(w)
            for v in arrays:
                theirs = extent(v)
                if v is not w and theirs is not None and theirs[0] == mine[0] \
                        and theirs[1] < mine[2] and mine[1] < theirs[2]:
                    return False
        return True

    def alloca(self, typ):
        """A stack slot made once, in the entry block (one made inside a loop
        would take more stack at every iteration)."""
        with self.b.goto_block(self.fn.entry_basic_block):
            return self.b.alloca(typ)

    def pieces(self, step):
        ir, b = self.ir, self.b
        i64 = ir.IntType(64)
        item = copy_dtype(step.dst.aval.dtype)
        dst = self.pointer(step.dst, item)
        if step.zeros:
            # zeros where no piece goes: around a piece that is one run of dst
            # (a cotangent's slice), else everywhere before the pieces
            total, runs = math.prod(step.dst.aval.shape), [(0, None)]
            if len(step.pieces) == 1:
                _, shape, _, dst_strides, start, _ = step.pieces[0]
                if _in_c_order(shape, dst_strides):
                    runs = [(0, start), (start + math.prod(shape), total)]
            # one memset a run (all bytes 0: 0.0, 0, False), not a loop LLVM
            # has to recognise as one (ode-lv-vmap's program wrote 75)
            i8p = ir.IntType(8).as_pointer()
            memset = b.module.declare_intrinsic("llvm.memset", [i8p, i64])
            for begin, end in runs:
                end = total if end is None else end
                if end > begin:
                    to = b.gep(b.bitcast(dst, i8p), [ir.Constant(i64, begin * item.itemsize)])
                    b.call(memset, [to, ir.Constant(ir.IntType(8), 0),
                                    ir.Constant(i64, (end - begin) * item.itemsize),
                                    ir.Constant(ir.IntType(1), 0)])
        for src, shape, src_strides, dst_strides, start, src_start in step.pieces:
            src = self.pointer(src, item)
            src = b.gep(src, [ir.Constant(i64, src_start)]) if src_start else src
            to = b.gep(dst, [ir.Constant(i64, start)]) if start else dst

            def move(index, src=src, to=to, src_strides=src_strides, dst_strides=dst_strides):
                b.store(b.load(b.gep(src, [strided_offset(ir, b, index, src_strides)])),
                        b.gep(to, [strided_offset(ir, b, index, dst_strides)]))
            _nested(ir, b, shape, move, scalar=math.prod(shape) <= SCALAR_COPY_ELEMENTS)

    def copy(self, src, dst, strides, start=None, out_strides=None, out_start=None):
        """``dst`` from ``src``, element ``i`` (a multi-index of ``dst``'s
        shape, or of ``src``'s where ``out_strides`` are given) read at
        ``i . strides`` from element ``start`` and written at ``i .
        out_strides`` (else C order) from ``out_start`` (each an i64, or None: 0)."""
        ir, b = self.ir, self.b
        shape = tuple(dst.aval.shape if out_strides is None else src.aval.shape)
        item = copy_dtype(dst.aval.dtype)
        out_strides = out_strides or contiguous_strides(shape)
        if tuple(strides) == tuple(out_strides) == contiguous_strides(shape):
            # contiguous on both sides (a row of a stack, a slice of rows):
            # one memcpy, which LLVM expands or calls, where a loop cost it
            # vectorising (jit-rnn's 48 slices: a third of its loop passes)
            size = ir.Constant(ir.IntType(64), item.itemsize)
            memcpy(self, dst, src, math.prod(shape) * item.itemsize,
                   dst_at=None if out_start is None else b.mul(out_start, size),
                   src_at=None if start is None else b.mul(start, size))
            return
        src, dst = self.pointer(src, item), self.pointer(dst, item)
        src = src if start is None else b.gep(src, [start])
        dst = dst if out_start is None else b.gep(dst, [out_start])

        def move(index):
            b.store(b.load(b.gep(src, [strided_offset(ir, b, index, strides)])),
                    b.gep(dst, [strided_offset(ir, b, index, out_strides)]))
        _nested(ir, b, shape, move, scalar=math.prod(shape) <= SCALAR_COPY_ELEMENTS)

    def call_in_runs(self, kernel, step):
        """Call ``kernel`` for `_Kernel` ``step`` (with ``pieces``) once per
        run of elements in which each of its pieced inputs comes from one
        piece, each operand read from that run's first element on."""
        ir, b, pointer = self.ir, self.b, self.pointer
        i64 = ir.IntType(64)
        starts = sorted({start for runs in step.pieces.values() for _, start, _, _ in runs})

        def at(p, element):
            return b.gep(p, [ir.Constant(i64, element)]) if element else p
        for first, end in zip(starts, starts[1:] + [step.size]):
            args = [ir.Constant(i64, end - first)]
            for j, (v, (_, index)) in enumerate(zip(step.inputs, step.spec.inputs)):
                if j in step.pieces:
                    src, start, _, src_start = next(
                        run for run in step.pieces[j] if run[1] <= first < run[1] + run[2])
                    args += [at(pointer(src), src_start + first - start),
                             ir.Constant(i64, end - first)]
                else:
                    args += [at(pointer(v), first if index == "i" else 0),
                             ir.Constant(i64, math.prod(v.aval.shape))]
            b.call(kernel, args + [at(pointer(v), first) for v in step.outputs])

    def emit(self, steps):
        ir, b, pointer = self.ir, self.b, self.pointer
        i64 = ir.IntType(64)
        for step in steps:
            if isinstance(step, _Kernel):
                # outputs placed in one value write elements of their own
                targets = step.targets()
                apart = self.apart(targets, targets + step.reads())
                few = step.size <= FEW_ELEMENTS
                kernel = self.kernels.get((step.spec, apart, few))
                if kernel is None:
                    kernel = self.kernels[step.spec, apart, few] = define_kernel(
                        ir, b.module, step.spec, f"kernel{len(self.kernels)}", few=few)
                    # kept a function of its own, called with its sizes: with the
                    # sizes propagated in as constants (inlined, or internal) LLVM
                    # vectorised jit-elem's loop worse, 25 ms against 12-15 ms
                    kernel.attributes.add("noinline")
                    if apart:
                        # no output shares memory with another array it
                        # reads or writes: LLVM then vectorises without
                        # comparing addresses first, which it only did for
                        # 12 elements or more (hmc's loops have 10)
                        first = 1 + 2 * len(step.spec.inputs)
                        for arg in kernel.args[first:first + len(step.outputs)]:
                            arg.add_attribute("noalias")
                if step.pieces:
                    self.call_in_runs(kernel, step)
                    continue
                args = [ir.Constant(i64, step.size)]
                for v in step.inputs:
                    args += [pointer(v), ir.Constant(i64, math.prod(v.aval.shape))]
                args += [pointer(v) if j not in step.placed else
                         b.gep(pointer(step.placed[j][0]), [ir.Constant(i64, step.placed[j][1])])
                         for j, v in enumerate(step.outputs)]
                # each reduction's accumulator (float64 for a float) comes back
                # in a slot, and goes to its value converted
                slots = [self.alloca(value_type(ir, acc)) for _, _, acc in step.spec.reductions]
                b.call(kernel, args + slots)
                for slot, (_, _, acc), v in zip(slots, step.spec.reductions, step.reduced):
                    store(ir, b, pointer(v), ir.Constant(i64, 0),
                          convert(ir, b, b.load(slot), acc, v.aval.dtype), v.aval.dtype)
            elif isinstance(step, _Copy):
                self.copy(step.src, step.dst, step.strides,
                          ir.Constant(i64, step.start) if step.start else None)
            elif isinstance(step, _Pieces):
                self.pieces(step)
            elif isinstance(step, _Reduce):
                _reduce_ir(ir, b, step, pointer(step.src), pointer(step.dst),
                           self.alloca)
            elif isinstance(step, _Gemm):
                _gemm_ir(ir, b, step, self.blas_table, pointer(step.a), pointer(step.b),
                         pointer(step.out))
            elif isinstance(step, DrawStep):
                step.emit(ir, b, pointer)
            elif isinstance(step, NativeStep):
                step.emit(ir, b, pointer, self.blas_table,
                          functools.partial(self.call_out, step), self.alloca)
            elif isinstance(step, Loop):
                loop_ir(self, step)
            elif isinstance(step, (_Callout, _Heap)):
                self.call_out(step)
            # a view: nothing to do

    def call_out(self, step):
        """A call of ``step``'s equation's NumPy code (callout ``step.id``),
        leaving the program where it raises."""
        ir, b = self.ir, self.b
        status = b.call(self.callout_fn, [ir.Constant(ir.IntType(64), step.id)])
        go_on = self.fn.append_basic_block(f"after{step.index}")
        b.cbranch(b.icmp_signed("!=", status, ir.Constant(ir.IntType(32), 0)),
                  self.exit_block, go_on)
        b.position_at_end(go_on)


def _nested(ir, b, shape, body, name="d", scalar=False):
    """``body(index)`` for every multi-index of ``shape``, in C order
    (loops LLVM neither vectorises nor unrolls if ``scalar``: `counted`)."""
    def level(d, index):
        if d == len(shape):
            body(index)
            return
        counted(ir, b, ir.Constant(ir.IntType(64), shape[d]),
                lambda i: level(d + 1, index + [i]), f"{name}{d}", scalar=scalar)
    level(0, [])


def _gemm_ir(ir, b, step, table, a, b_, c):
    """``c = a @ b_`` (row-major) by BLAS's gemm, which is column-major: a
    row-major matrix read column-major is its transpose, so it computes
    ``c.T = b_.T @ a.T``, ``b_`` first; a batch is a loop of calls."""
    dtype = np.dtype(step.out.aval.dtype)
    i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
    item = storage_type(ir, dtype)
    iptr, fptr, cptr = i32.as_pointer(), item.as_pointer(), i8.as_pointer()
    gemm_type = ir.FunctionType(ir.VoidType(), [cptr, cptr, iptr, iptr, iptr, fptr, fptr,
                                                iptr, fptr, iptr, fptr, fptr, iptr])
    address = b.load(b.gep(table, [ir.Constant(i64, routine_index("gemm", dtype))]))
    gemm = b.inttoptr(address, gemm_type.as_pointer())

    # Fortran takes every argument by reference: a constant global each
    no, yes = (constant_cell(ir, b, i8, ord(c)) for c in "NT")
    m, n, k = (constant_cell(ir, b, i32, x) for x in (step.m, step.n, step.k))
    one, zero = (constant_cell(ir, b, item, x, constant(ir, x, dtype)) for x in (1.0, 0.0))
    mn = step.m * step.n
    # a transposed operand's storage, read column-major, is the operand
    # itself: gemm transposes it back ("T"), its rows as long as before
    flag_a, ld_a = (yes, m) if "a" in step.transposed else (no, k)
    flag_b, ld_b = (yes, k) if "b" in step.transposed else (no, n)

    def call(index):
        at_a = strided_offset(ir, b, index, step.a_strides)
        at_b = strided_offset(ir, b, index, step.b_strides)
        at_c = strided_offset(ir, b, index, [s * mn for s in contiguous_strides(step.batch)])
        b.call(gemm, [flag_b, flag_a, n, m, k, one, b.gep(b_, [at_b]), ld_b,
                      b.gep(a, [at_a]), ld_a, zero, b.gep(c, [at_c]), n])
    _nested(ir, b, step.batch, call, "g")


def _reduce_ir(ir, b, step, src, dst, alloca):
    """Loops over the kept axes, and inside them over the reduced ones with the
    accumulator in a register: each output element sums its inputs in order.

    Two orders run faster and give each output element the same result:
    where the last axis is kept, the reduced axes loop outside it and each
    row of outputs accumulates in place (`_reduce_rows`: a column sum reads
    its input in memory order, a loop LLVM vectorises); a min or max over
    the last axes keeps one accumulator per vector lane (`_reduce_lanes`),
    where one accumulator is one compare at a time."""
    shape = tuple(step.src.aval.shape)
    x_dtype, out_dtype = np.dtype(step.src.aval.dtype), np.dtype(step.dst.aval.dtype)
    acc_dtype = accumulator_dtype(out_dtype) if step.kind == "sum" else out_dtype
    if shape and max(step.axes, default=len(shape)) < len(shape) - 1 \
            and acc_dtype == out_dtype:
        _reduce_rows(ir, b, step, src, dst, acc_dtype)
        return
    if step.kind != "sum" and x_dtype.kind in "fiu" \
            and step.axes == tuple(range(len(shape) - len(step.axes), len(shape))):
        _reduce_lanes(ir, b, step, src, dst, alloca)
        return
    kept = [d for d in range(len(shape)) if d not in step.axes]
    strides = contiguous_strides(shape)
    kept_strides = contiguous_strides([shape[d] for d in kept])
    acc = alloca(value_type(ir, acc_dtype))

    def outer(index):
        b.store(reduction_start(ir, step.kind, acc_dtype), acc)

        def inner(reduced):
            at = strided_offset(ir, b, index + reduced, [strides[d] for d in kept] +
                                [strides[d] for d in step.axes])
            x = convert(ir, b, load(ir, b, src, at, x_dtype, "x"), x_dtype, acc_dtype)
            b.store(reduction_step(ir, b, step.kind, b.load(acc), x, acc_dtype), acc)
        _nested(ir, b, [shape[d] for d in step.axes], inner, "r")
        value = convert(ir, b, b.load(acc), acc_dtype, out_dtype)
        store(ir, b, dst, strided_offset(ir, b, index, kept_strides), value, out_dtype)
    _nested(ir, b, [shape[d] for d in kept], outer, "k")


def _reduce_rows(ir, b, step, src, dst, acc_dtype):
    """A reduction whose last axis is kept, accumulating in its output: for
    each index of the kept axes before the last reduced one, the output row
    starts at the reduction's start, and each reduced index (in order) adds
    a row of the input to it. Each output element takes its inputs in the
    order `_reduce_ir`'s loops take them."""
    shape = tuple(step.src.aval.shape)
    x_dtype = np.dtype(step.src.aval.dtype)
    last = max(step.axes)
    outer = [d for d in range(last) if d not in step.axes]
    inner = list(range(last + 1, len(shape)))
    strides = contiguous_strides(shape)
    out_strides = contiguous_strides([shape[d] for d in outer + inner])

    def rows(index):
        def start(within):
            at = strided_offset(ir, b, index + within, out_strides)
            store(ir, b, dst, at, reduction_start(ir, step.kind, acc_dtype), acc_dtype)
        _nested(ir, b, [shape[d] for d in inner], start, "s")

        def add_row(reduced):
            def element(within):
                at = strided_offset(ir, b, index + reduced + within, [strides[d] for d in outer]
                          + [strides[d] for d in step.axes] + [strides[d] for d in inner])
                to = strided_offset(ir, b, index + within, out_strides)
                x = convert(ir, b, load(ir, b, src, at, x_dtype, "x"), x_dtype, acc_dtype)
                acc = load(ir, b, dst, to, acc_dtype, "acc")
                store(ir, b, dst, to, reduction_step(ir, b, step.kind, acc, x, acc_dtype),
                      acc_dtype)
            _nested(ir, b, [shape[d] for d in inner], element, "i")
        _nested(ir, b, [shape[d] for d in step.axes], add_row, "r")
    _nested(ir, b, [shape[d] for d in outer], rows, "k")


def _reduce_lanes(ir, b, step, src, dst, alloca):
    """A min or max over the last axes, with one accumulator per lane of a
    64-byte vector over each run of reduced elements, folded in lane order
    at its end, the leftover elements after: the same extremum as one
    accumulator (a NaN still wins; of equal zeros, another may be kept)."""
    shape = tuple(step.src.aval.shape)
    dtype = np.dtype(step.src.aval.dtype)
    i64 = ir.IntType(64)
    count = math.prod(shape[d] for d in step.axes)
    lanes = 64 // dtype.itemsize
    scalar = value_type(ir, dtype)
    vector = ir.VectorType(scalar, lanes)
    start = reduction_start(ir, step.kind, dtype)

    def one(index):
        base = b.mul(index, ir.Constant(i64, count))
        acc = alloca(vector)
        b.store(ir.Constant(vector, [start.constant] * lanes), acc)

        def block(j):
            at = b.add(base, b.mul(j, ir.Constant(i64, lanes)))
            x = b.load(b.bitcast(b.gep(src, [at]), vector.as_pointer()), align=dtype.itemsize)
            b.store(reduction_step(ir, b, step.kind, b.load(acc), x, dtype), acc)
        counted(ir, b, ir.Constant(i64, count // lanes), block, "v")
        folded = b.load(acc)
        value = start
        for lane in range(lanes):
            value = reduction_step(ir, b, step.kind, value,
                                   b.extract_element(folded, ir.Constant(ir.IntType(32), lane)),
                                   dtype)
        slot = alloca(scalar)
        b.store(value, slot)

        def rest(t):
            x = load(ir, b, src, b.add(base, t), dtype, "x")
            b.store(reduction_step(ir, b, step.kind, b.load(slot), x, dtype), slot)
        counted(ir, b, ir.Constant(i64, count), rest, "t",
                start=ir.Constant(i64, count // lanes * lanes))
        store(ir, b, dst, index, b.load(slot), dtype)
    kept = math.prod(shape[d] for d in range(len(shape)) if d not in step.axes)
    counted(ir, b, ir.Constant(i64, kept), one, "k")


# ---------------------------------------------------------------------------
# Callouts and the Python call
# ---------------------------------------------------------------------------

_CALLOUT_TYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64)


class _Frames(threading.local):
    """Each thread's calls under way: ``(inputs, outputs, arena, consts,
    Python objects)``, innermost last, and the error a callout raised."""

    def __init__(self):
        self.stack = []
        self.error = None


def _callback(callouts, places, arena_views):
    """The ctypes callback that runs the callouts: ``(callback, frames)``.
    ``arena_views`` collects the ``(offset, shape, dtype)`` of each view of
    the arena a callout reads or writes (each arena comes with them made)."""
    frames = _Frames()
    if places.slots:
        places.slots_view = len(arena_views)
        arena_views.append((places.slots_at, (len(places.slots),), np.dtype(np.uint64)))
    runs = {s.id: _heap_runner(s, places.slots_view) if isinstance(s, _Heap) else
            _callout_runner(s.eqn, places, arena_views,
                            s.drops if isinstance(s, _Callout) else None)
            for s in callouts}

    def callout(index):
        try:
            runs[index](frames.stack[-1])
            return 0
        except BaseException as error:  # noqa: BLE001 -- raised again by the caller
            frames.error = error
            return 1
    return _CALLOUT_TYPE(callout), frames


def _heap_runner(step, slots):
    frees, allocs = step.frees, step.allocs

    def run(frame):
        objects = frame[4]
        for j in frees:
            objects[j] = None
        for j, slot, shape, dtype in allocs:
            objects[j] = array = np.empty(shape, dtype)
            frame[2][slots][slot] = id(array)
    return run


def _callout_runner(eqn, places, arena_views, drops=None):
    """``frame -> None``: runs ``eqn``'s NumPy code on the program's memory;
    a callout step's (``drops``: the heap arrays let go after it, None for a
    native step's fallback, whose heap results are made before it) adopts
    the heap results it makes (`_Locations.heap`)."""
    fn = eqn.prim.lowering(np, **eqn.params) if eqn.prim.lowering is not None \
        and not getattr(eqn.prim, "ufunc_name", None) else None
    if fn is None:
        fn = functools.partial(eqn.prim.impl, **eqn.params)
    readers = [_reader(v, places, arena_views) for v in eqn.invars]
    writers = [_reader(v, places, arena_views) for v in eqn.outvars]
    multiple = eqn.prim.multiple_results
    if drops is not None and (drops or any(places.of(v)[0] == "heap" for v in eqn.outvars)):
        return _adopting_runner(eqn, fn, readers, writers, places, drops)

    if isinstance(fn, np.ufunc) and len(writers) == 1 and _in_memory(eqn.outvars[0]):
        # straight into the program's buffer (np.matmul is one): no array
        # of the result's size beside the arena
        (write,) = writers

        def run(frame):
            fn(*[read(frame) for read in readers], out=write(frame))
        return run

    objects = [places.of(v)[1] if places.of(v)[0] == "py" else None for v in eqn.outvars]

    def run(frame):
        out = fn(*[read(frame) for read in readers])
        for write, value, j in zip(writers, out if multiple else (out,), objects):
            if j is None:
                np.copyto(write(frame), value, casting="unsafe")
            else:
                frame[4][j] = value
    return run


def _adopting_runner(eqn, fn, readers, writers, places, drops):
    """A callout some of whose results are adopted (`_Locations.heap`):
    kept as the call's Python objects, their addresses in the arena's
    slots (an array's address: the program reads its data pointer); then
    the adopted arrays whose last reader it is let go."""
    outs, slots = [], places.slots_view
    for v, write in zip(eqn.outvars, writers):
        kind, at = places.of(v)
        slot = places.slots[at][0] if kind == "heap" else None
        outs.append((kind, at, write, slot, tuple(v.aval.shape), np.dtype(v.aval.dtype)))
    multiple = eqn.prim.multiple_results

    def run(frame):
        args = [read(frame) for read in readers]
        values = fn(*args)
        for (kind, at, write, slot, shape, dtype), value in zip(
                outs, values if multiple else (values,)):
            if kind == "py":
                frame[4][at] = value
            elif kind == "heap":
                frame[4][at] = value = _adopted(value, shape, dtype, args)
                frame[2][slots][slot] = id(value)
            else:
                np.copyto(write(frame), value, casting="unsafe")
        for j in drops:
            frame[4][j] = None
    return run


def _adopted(value, shape, dtype, args):
    """A callout's result as an array the program reads by its data pointer
    while it lives: ``value`` itself where it is a C-ordered array of
    ``shape`` and ``dtype`` sharing no memory with the callout's operands
    ``args`` (which the program may write over while it lives), else a copy."""
    if type(value) is np.ndarray and value.dtype == dtype and value.shape == shape \
            and value.flags.c_contiguous and value.flags.aligned \
            and not any(type(a) is np.ndarray and np.may_share_memory(value, a)
                        for a in args):
        return value
    copy = np.empty(shape, dtype)
    np.copyto(copy, value, casting="unsafe")
    return copy


def _reader(v, places, arena_views):
    """``frame -> the value of v`` (an array viewing the program's memory)."""
    if type(v) is Literal:
        value = v.value
        return lambda frame: value
    kind, at = places.of(v)
    shape, dtype = tuple(v.aval.shape), np.dtype(v.aval.dtype)
    if kind == "py" or kind == "heap" and places.slots[at][1:] == (shape, dtype):
        return lambda frame: frame[4][at]
    if kind == "heap":                # a reshape's view of an array, or another's result in it
        return lambda frame: frame[4][at].view(dtype).reshape(shape)
    if kind == "arena":
        j = len(arena_views)
        arena_views.append((at, shape, dtype))
        return lambda frame: frame[2][j]
    position = {"in": 0, "out": 1, "const": 3}[kind]
    own = {"in": lambda: places.inputs[at].shape,
           "out": lambda: places.outputs[at].aval.shape,
           "const": lambda: places.consts[at].shape}[kind]()
    if tuple(own) != shape:           # a reshape's view of it
        return lambda frame: frame[position][at].reshape(shape)
    return lambda frame: frame[position][at]


def _arena_maker(size, views):
    """``(arena=None) -> (arena, its views)``: ``arena`` (a new one of ``size``
    bytes where None) and the arrays the callouts read and write in it
    (``views``: (offset, shape, dtype) each), made once per arena, not once
    per callout."""
    def make(arena=None):
        if arena is None:
            arena = np.empty(max(size, 1), np.uint8)
        return arena, [arena[at:at + math.prod(shape) * dtype.itemsize].view(dtype)
                       .reshape(shape) for at, shape, dtype in views]
    return make


def _spare_arena(size):
    """The arena the last call with a large one gave back, if it holds
    ``size`` bytes (None otherwise, and a smaller one is let go first).

    A large arena is returned to the system when freed and faulted in anew by
    the next call: ode's gradient (GradBench, 333 MB) spent 0.1-1.8 s a call
    in the kernel doing so on a busy 2-core machine, against 0.35 s of work.
    Keeping one spare, process-wide, bounds what is held between calls to the
    largest arena recently used."""
    try:
        arena = _SPARE_ARENAS.pop()
    except IndexError:
        return None
    return arena if arena.nbytes >= size else None


def _make_call(graph, places, plan, native, callback, final, arena_views):
    """The Python function that checks the inputs, allocates the outputs,
    takes an arena, and runs the program.

    Arenas of at most `KEEP_ARENA_BYTES` are kept between calls (a list of
    free ones: a call takes one, or makes one when another thread holds them
    all, and gives it back), so that small programs pay no allocation, and
    the callouts' views of an arena are made with it, once. A larger one is
    left, after the call, as the one spare any program's next call may take
    (`_spare_arena`)."""
    expected = [(tuple(v.aval.shape), np.dtype(v.aval.dtype)) for v in graph.invars]
    namespace = {"run": native.c_function, "native": native, "empty": np.empty,
                 "ndarray": np.ndarray, "contiguous": _c_contiguous,
                 "new_arena": _arena_maker(plan.arena_bytes, arena_views),
                 "free": [], "CONSTS": tuple(places.consts), "copy": np.copy,
                 "NOTHING": np.empty(0),
                 "BLAS": _BLAS_TABLE if gemm_table() is None else gemm_table()}
    keep = plan.arena_bytes <= KEEP_ARENA_BYTES
    lines = checked_call_header(expected, namespace, what="a compiled program")
    args = [f"x{j}" for j in range(len(expected))]
    for a in args:
        lines.append(f"    if type({a}) is not ndarray or not {a}.flags.c_contiguous:")
        lines.append(f"        {a} = contiguous({a})")
    outs = []
    for j, v in enumerate(places.outputs):
        namespace[f"S{j}o"], namespace[f"D{j}o"] = tuple(v.aval.shape), np.dtype(v.aval.dtype)
        # one the program makes when it writes it (`_Locations.heap`) is not passed
        lines.append(f"    o{j} = NOTHING" if j in places.heap_outputs
                     else f"    o{j} = empty(S{j}o, D{j}o)")
        outs.append(f"o{j}")
    if keep:
        lines += ["    try:",
                  "        arena, views = taken = free.pop()",
                  "    except IndexError:",
                  "        arena, views = taken = new_arena()"]
    else:
        namespace["spare"], namespace["SPARE"] = _spare_arena, _SPARE_ARENAS
        lines.append(f"    arena, views = new_arena(spare({plan.arena_bytes}))")
    call_args = args + outs + ["arena"] + [f"CONSTS[{j}]" for j in range(len(places.consts))
                                           ] + ["BLAS"]
    if callback is not None:
        # called holding the GIL: each callout then runs Python at once, where
        # a call that let go of it would wait to take it back at every callout
        namespace["run"] = ctypes.PYFUNCTYPE(None, *native.c_function.argtypes)(
            ctypes.cast(native.c_function, ctypes.c_void_p).value)
        namespace["CALLOUT"], namespace["frames"] = ctypes.cast(callback[0], ctypes.c_void_p
                                                                 ).value, callback[1]
        # the callback lives as long as the call does (a call kept without
        # its Program called freed machine code)
        namespace["CALLBACK"] = callback[0]
        namespace["raise_from"] = _raise_callout_error
        lines += [f"    objects = [None] * {places.objects}",
                  f"    frames.stack.append(([{', '.join(args)}], [{', '.join(outs)}], "
                  "views, CONSTS, objects))",
                  "    try:",
                  f"        run({', '.join(call_args + ['CALLOUT'])})",
                  "    finally:",
                  "        frames.stack.pop()",
                  "    if frames.error is not None:",
                  "        raise_from(frames)"]
    else:
        lines.append(f"    run({', '.join(call_args + ['0'])})")
    if keep:
        lines.append("    free.append(taken)")
    else:
        lines.append("    SPARE[:] = [arena]")
    results = []
    final_of = {s.src: s.dst for s in final}
    for v in graph.outvars:
        if type(v) is Literal:
            name = f"L{len(namespace)}"
            namespace[name] = v.value
            results.append(f"copy({name})" if hasattr(v.value, "shape") else name)
            continue
        if v in final_of:
            v = final_of[v]
        kind, at = places.of(v)
        if kind == "in":
            results.append(args[at])
        elif kind == "heap":         # made by the program (`_Locations.heap`)
            results.append(f"objects[{at}][()]" if not v.aval.shape else f"objects[{at}]")
        else:
            results.append(f"o{at}[()]" if not v.aval.shape else f"o{at}")
    lines.append(f"    return ({', '.join(results)}{',' if len(results) == 1 else ''})")
    exec(compile("\n".join(lines) + "\n", "<fgrad compiled program call>", "exec"), namespace)
    # taken out of its namespace (no reference cycle: freed with the program)
    return namespace.pop("call")


# the table a program without BLAS (`fgrad.compiler.blas`) is passed
_BLAS_TABLE = np.zeros(len(ROUTINES), np.uint64)


def _c_contiguous(x):
    # (np.ascontiguousarray makes a 0-d value 1-d)
    return np.asarray(x, order="C")


def _raise_callout_error(frames):
    error, frames.error = frames.error, None
    raise error
