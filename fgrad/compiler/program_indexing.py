"""Gathers and scatters in a compiled program: loops over an index array.

`fgrad.compiler.program` asks `indexing_step` for each equation it lowers.
An index of one integer array along one axis, every other axis whole
(``x[idx]``, ``x[:, idx]``, ``x[..., idx]``, ``fnp.take(x, idx, axis)``), or
of several arrays (``x[rows, cols]``, as
`fgrad.vmap` writes a traced index: ``idx[j]`` below is then element ``j``
of each), is a loop of this module's own:

- ``getitem`` gathers: for each element ``j`` of the index array, the block
  of ``x`` at ``idx[j]`` (everything after the axis) is copied, bit for bit;
- ``scatter_add`` of an index array (the gradient of a gather, and
  ``fgrad.at(x)[idx].add``'s) starts from zeros and adds each block at
  ``idx[j]``, in the order ``numpy.add.at`` adds them, so repeated indices
  sum in NumPy's order: bitwise its result;
- ``set`` of an index array (``fgrad.at(x)[idx].set(v)``, an ODE solver's
  write of one saved state into its stack) copies ``x``, then each block of
  ``v`` (broadcast to the block, or a literal, like the 0 of a ``set``'s
  gradient, where ``x``'s dtype holds it exactly) over the block at
  ``idx[j]``, in order, so the last of repeated indices wins, as NumPy's
  assignment.

A complex element (two floats, real part first) is copied as one move of
its 8 or 16 bytes; a scatter adds it part by part, as NumPy's ``add.at``.

A slice that takes a whole axis (``0:n``, as a traced index writes it)
counts as whole.

A negative index counts from the end, as in NumPy; an index out of bounds
calls the equation's NumPy code back, which raises NumPy's ``IndexError``.
Index arrays of different shapes (``x[rows[:, None], cols]``) are read
broadcast together; arrays on axes apart (``x[i, :, j]``) put their axes
first, as NumPy does. A slice beside the arrays that is not whole, or
booleans made into arrays at staging, stay callouts;
a ``scatter_add`` of a basic index is `fgrad.compiler.program`'s own
(pieces copied into zeros).
"""
import functools
import math

import numpy as np

from fgrad.compiler import complex_ir
from fgrad.compiler.kernel_ir import (
    broadcast_strides,
    constant,
    contiguous_strides,
    copy_dtype,
    counted,
    storage_type,
    strided_offset,
)
from fgrad.compiler.native_steps import NativeStep, call_out_if, new_flag, raise_flag
from fgrad.core.graph import Literal
from fgrad.primitives.indexing import getitem_p, scatter_add_p, set_p

_WHOLE = ("slice", None, None, None)
# dtypes a scatter adds (a bool's add.at is a logical or: left to NumPy)
_ADDABLE = frozenset(np.dtype(k) for k in (
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float32", "float64", "complex64", "complex128"))


def indexing_step(eqn, index):
    """The `fgrad.compiler.native_steps.NativeStep` that gathers or scatters
    for equation ``eqn`` (labelled ``index``), or None.

    >>> import numpy as np, fgrad
    >>> g = fgrad.make_graph(lambda x: x[:, np.array([2, 0])])(np.ones((2, 3)))
    >>> type(indexing_step(g.eqns[0], 0)).__name__
    'Gather'
    """
    if eqn.prim not in (getitem_p, scatter_add_p, set_p) or len(eqn.outvars) != 1 \
            or len(eqn.invars) < (3 if eqn.prim is set_p else 2):
        return None
    source = eqn.invars[0]
    indices = eqn.invars[2 if eqn.prim is set_p else 1:]
    full = eqn.params["shape"] if eqn.prim is scatter_add_p else source.aval.shape
    where = _indexed_axes(eqn.params["spec"], full)
    dtype = np.dtype(eqn.outvars[0].aval.dtype)
    try:
        shape = np.broadcast_shapes(*[tuple(i.aval.shape) for i in indices])
    except ValueError:
        return None
    if where is None or any(np.dtype(i.aval.dtype).kind not in "iu" for i in indices) \
            or math.prod(shape) == 0 \
            or dtype.itemsize not in (1, 2, 4, 8, 16) or dtype.kind not in "biufc" \
            or math.prod(eqn.outvars[0].aval.shape) == 0 \
            or any(full[a] == 0 for a in where[0]):
        return None
    if eqn.prim is getitem_p:
        return Gather(index, eqn, where, tuple(full), shape)
    if eqn.prim is set_p:
        values = eqn.invars[1]
        fits = _broadcasts_to(values, _indexed_shape(full, where[0], shape))
        if np.dtype(source.aval.dtype) != dtype or not fits or (
                np.dtype(values.aval.dtype) != dtype and _exact_literal(values, dtype) is None):
            return None
        return Set(index, eqn, where, tuple(full), shape)
    if dtype not in _ADDABLE or np.dtype(source.aval.dtype) != dtype \
            or not _broadcasts_to(source, _indexed_shape(full, where[0], shape)):
        return None
    return ScatterAdd(index, eqn, where, tuple(full), shape)


def _broadcasts_to(values, block):
    try:
        return np.broadcast_shapes(tuple(values.aval.shape), block) == block
    except ValueError:
        return False


def _exact_literal(v, dtype):
    """The one value of literal ``v`` as a ``dtype`` array where it casts to
    ``dtype`` exactly (the 0 a gradient of a ``set`` writes), else None."""
    dtype = np.dtype(dtype)
    if type(v) is not Literal or math.prod(v.aval.shape) != 1:
        return None
    value = np.asarray(v.value).reshape(())
    if value.dtype.kind not in "biuf" or dtype.kind not in "biufc":
        return None
    with np.errstate(all="ignore"):
        cast = value.astype(dtype)
        back = cast.real.astype(value.dtype) if dtype.kind == "c" else cast.astype(value.dtype)
    # the same number, and a zero of the same sign
    same = bool(back == value) and (value.dtype.kind != "f" or dtype.kind not in "fc"
                                    or bool(np.signbit(back) == np.signbit(value)))
    return cast if same else None


def _indexed_shape(full, axes, shape):
    """NumPy's shape of an index of arrays (broadcast to ``shape``) on
    ``axes`` of an array of shape ``full``, every other axis whole: the
    arrays' shape in their axes' place where these are adjacent, else first."""
    rest = [n for d, n in enumerate(full) if d not in axes]
    if axes == tuple(range(axes[0], axes[0] + len(axes))):
        return tuple(rest[:axes[0]]) + tuple(shape) + tuple(rest[axes[0]:])
    return tuple(shape) + tuple(rest)


def _indexed_axes(spec, shape):
    """``(axes, order)`` of an index whose arrays take ``axes``,
    ``order[k]`` the array of axis ``axes[k]``, every other axis of
    ``shape`` whole; else None."""
    ndim = len(shape)
    if any(item[0] == "ellipsis" for item in spec[1:]):
        return None
    if spec and spec[0] == ("ellipsis",):
        spec = (_WHOLE,) * (ndim - len(spec) + 1) + tuple(spec[1:])
    arrays = [k for k, item in enumerate(spec) if item[0] == "array"]
    if not arrays or len(spec) > ndim or not all(
            _whole(item, shape[k]) for k, item in enumerate(spec) if k not in arrays):
        return None
    return tuple(arrays), tuple(spec[k][1] for k in arrays)


def _whole(item, size):
    """Whether index ``item`` takes all ``size`` elements of its axis in order."""
    if item[0] != "slice":
        return False
    _, start, stop, step = item
    return start in (None, 0) and (stop is None or stop >= size) and step in (None, 1)


class _Indexed(NativeStep):
    """A gather or scatter of an array of shape ``full`` by index arrays on
    its axes ``where[0]`` (``where[1][k]``: the array of axis
    ``where[0][k]``), the other axes whole: blocks of the axes after the
    last indexed one, for each element of the arrays broadcast together
    (to ``shape``) and each index of the whole axes before that one."""

    fallback = True         # an index out of bounds: NumPy's IndexError

    def __init__(self, index, eqn, where, full, shape):
        super().__init__(index, eqn)
        (self.axes, self.order), self.full, self.shape = where, full, shape
        self.inner = math.prod(full[self.axes[-1] + 1:])

    def _loops(self, ir, b, pointer, body, call_out, alloca):
        """``body(block at the indices' element j in full, block j in the
        compact side)`` for each element j of the index arrays broadcast
        together (and each index of the whole axes before the last indexed
        one), as element offsets (i64): the compact side in NumPy's order,
        the arrays' axes in their place where adjacent, else first."""
        i64 = ir.IntType(64)
        indices = self.eqn.invars[len(self.eqn.invars) - len(self.order):]
        starts = [pointer(idx) for idx in indices]
        shape = self.shape
        m, last = math.prod(shape), self.axes[-1]
        whole = [d for d in range(last) if d not in self.axes]
        adjacent = self.axes == tuple(range(self.axes[0], last + 1))
        strides = contiguous_strides(self.full)
        flag = new_flag(ir, b, alloca)

        def const(n):
            return ir.Constant(i64, n)

        def position(j, k):
            """Element j of axis ``axes[k]``'s index array, checked, from 0."""
            idx = indices[self.order[k]]
            raw = b.load(b.gep(starts[self.order[k]], [_read_at(ir, b, j, idx.aval.shape,
                                                                 shape)]))
            at = raw if raw.type.width == 64 else (
                b.sext(raw, i64) if np.dtype(idx.aval.dtype).kind == "i" else b.zext(raw, i64))
            c_n = const(self.full[self.axes[k]])
            at = b.select(b.icmp_signed("<", at, const(0)), b.add(at, c_n), at)
            outside = b.icmp_unsigned(">=", at, c_n)
            raise_flag(ir, b, flag, outside)
            return b.select(outside, const(0), at)

        def element(j, before, count_before, flat_before):
            """Block j of the arrays, after the whole axes' offsets ``before``
            (into full) and index ``flat_before`` among ``count_before``."""
            at = before
            for k, axis in enumerate(self.axes):
                at = b.add(at, b.mul(position(j, k), const(strides[axis])))
            # where adjacent, the whole axes come first on the compact side
            compact = b.add(b.mul(flat_before, const(m)), j) if adjacent else \
                b.add(b.mul(j, const(count_before)), flat_before)
            body(at, b.mul(compact, const(self.inner)))

        def wholes(level, before, flat, then):
            if level == len(whole):
                then(before, flat)
                return
            d = whole[level]

            def each(i):
                wholes(level + 1, b.add(before, b.mul(i, const(strides[d]))),
                       b.add(b.mul(flat, const(self.full[d])), i), then)
            counted(ir, b, const(self.full[d]), each, f"ix.w{level}")
        count = math.prod(self.full[d] for d in whole)
        if adjacent:
            wholes(0, const(0), const(0), lambda before, flat: counted(
                ir, b, const(m), lambda j: element(j, before, count, flat), "ix.j"))
        else:
            counted(ir, b, const(m), lambda j: wholes(
                0, const(0), const(0), lambda before, flat: element(j, before, count, flat)),
                "ix.j")
        call_out_if(ir, b, flag, call_out)


def _read_at(ir, b, j, own, shape):
    """Where element ``j`` (i64) of ``shape`` is in an index array of shape
    ``own`` broadcast to it: ``j`` itself when the shapes are one, else the
    offset of ``j``'s multi-index (each axis's index ``j // period % size``)
    at the index array's broadcast strides."""
    if (1,) * (len(shape) - len(own)) + tuple(own) == tuple(shape):
        return j
    i64 = ir.IntType(64)
    strides = broadcast_strides(own, shape)[::-1]
    index = (b.urem(b.udiv(j, ir.Constant(i64, period)), ir.Constant(i64, size))
             if stride else None
             for stride, period, size in zip(strides, contiguous_strides(shape)[::-1],
                                             reversed(shape)))
    return strided_offset(ir, b, index, strides)


class Gather(_Indexed):
    """``getitem`` of one index array: blocks copied as unsigned integers
    (a complex128 as its two doubles)."""

    def emit(self, ir, b, pointer, table, call_out, alloca):
        x, (out,) = self.eqn.invars[0], self.eqn.outvars
        bits = copy_dtype(out.aval.dtype)
        src, dst = pointer(x, bits), pointer(out, bits)
        inner = self.inner
        i64 = ir.IntType(64)

        def copy(at_full, at_compact):
            counted(ir, b, ir.Constant(i64, inner), lambda t: b.store(
                b.load(b.gep(src, [b.add(at_full, t)])), b.gep(dst, [b.add(at_compact, t)])),
                "ix.t")
        self._loops(ir, b, pointer, copy, call_out, alloca)


class ScatterAdd(_Indexed):
    """``scatter_add`` of one index array: zeros, then each block added
    (a complex element part by part, as NumPy adds it)."""

    def emit(self, ir, b, pointer, table, call_out, alloca):
        ct, (out,) = self.eqn.invars[0], self.eqn.outvars
        dtype = np.dtype(out.aval.dtype)
        typ = storage_type(ir, dtype)
        src, dst = pointer(ct), pointer(out)
        i64 = ir.IntType(64)
        zero = ir.Constant(typ, None)           # +0.0, and both parts +0.0
        counted(ir, b, ir.Constant(i64, math.prod(self.full)),
                lambda i: b.store(zero, b.gep(dst, [i])), "ix.zero")
        inner = self.inner
        add = {"f": b.fadd, "c": functools.partial(complex_ir.add, ir, b)}.get(
            dtype.kind, b.add)
        # the added values may be broadcast to the block (a cotangent the
        # same for every example of a vmapped sort's gradient)
        block = _indexed_shape(self.full, self.axes, self.shape)

        def accumulate(at_full, at_compact):
            def one(t):
                target = b.gep(dst, [b.add(at_full, t)])
                at = _read_at(ir, b, b.add(at_compact, t), ct.aval.shape, block)
                b.store(add(b.load(target), b.load(b.gep(src, [at]))), target)
            counted(ir, b, ir.Constant(i64, inner), one, "ix.t")
        self._loops(ir, b, pointer, accumulate, call_out, alloca)


class Set(_Indexed):
    """``set`` of one index array: ``x`` copied, then each block of the
    values (broadcast to it, or a literal's one value cast exactly to the
    array's dtype) written at ``idx[j]``, in order."""

    def emit(self, ir, b, pointer, table, call_out, alloca):
        (x, values), (out,) = self.eqn.invars[:2], self.eqn.outvars
        dtype = np.dtype(out.aval.dtype)
        bits = copy_dtype(dtype)
        src, dst = pointer(x, bits), pointer(out, bits)
        i64 = ir.IntType(64)
        counted(ir, b, ir.Constant(i64, math.prod(self.full)),
                lambda i: b.store(b.load(b.gep(src, [i])), b.gep(dst, [i])), "ix.copy")
        inner = self.inner
        block = _indexed_shape(self.full, self.axes, self.shape)
        if np.dtype(values.aval.dtype) != dtype:
            one = constant(ir, _exact_literal(values, dtype).reshape(1).view(bits)[0], bits)

            def read(at):
                return one
        else:
            new = pointer(values, bits)

            def read(at):
                return b.load(b.gep(new, [_read_at(ir, b, at, values.aval.shape, block)]))

        def write(at_full, at_compact):
            counted(ir, b, ir.Constant(i64, inner), lambda t: b.store(
                read(b.add(at_compact, t)), b.gep(dst, [b.add(at_full, t)])), "ix.t")
        self._loops(ir, b, pointer, write, call_out, alloca)
