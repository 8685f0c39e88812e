"""Gathers and scatters in a compiled program: loops over an index array.

`fgrad.compiler.program` asks `indexing_step` for each equation it lowers.
An index of one integer array along one axis, every other axis whole
(``x[idx]``, ``x[:, idx]``, ``x[..., idx]``, ``fnp.take(x, idx, axis)``) is
a loop of this module's own:

- ``getitem`` gathers: for each element ``j`` of the index array, the block
  of ``x`` at ``idx[j]`` (everything after the axis) is copied, bit for bit;
- ``scatter_add`` of an index array (the gradient of a gather, and
  ``fgrad.at(x)[idx].add``'s) starts from zeros and adds each block at
  ``idx[j]``, in the order ``numpy.add.at`` adds them, so repeated indices
  sum in NumPy's order: bitwise its result;
- ``set`` of an index array (``fgrad.at(x)[idx].set(v)``, an ODE solver's
  write of one saved state into its stack) copies ``x``, then each block of
  ``v`` (or its one value) over the block at ``idx[j]``, in order, so the
  last of repeated indices wins, as NumPy's assignment.

A slice that takes a whole axis (``0:n``, as a traced index writes it)
counts as whole.

A negative index counts from the end, as in NumPy; an index out of bounds
calls the equation's NumPy code back, which raises NumPy's ``IndexError``.
Several index arrays, a slice beside the array, or booleans made into
arrays at staging, stay callouts; a ``scatter_add`` of a basic index is
`fgrad.compiler.program`'s own (pieces copied into zeros).
"""
import math

import numpy as np

from fgrad.compiler.kernel_ir import counted, storage_type
from fgrad.compiler.native_steps import NativeStep, call_out_if, new_flag, raise_flag
from fgrad.primitives.indexing import getitem_p, scatter_add_p, set_p

_WHOLE = ("slice", None, None, None)
# dtypes a scatter adds (a bool's add.at is a logical or: left to NumPy)
_ADDABLE = frozenset(np.dtype(k) for k in (
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float32", "float64"))


def indexing_step(eqn, index):
    """The `fgrad.compiler.native_steps.NativeStep` that gathers or scatters
    for equation ``eqn`` (labelled ``index``), or None.

    >>> import numpy as np, fgrad
    >>> g = fgrad.make_graph(lambda x: x[:, np.array([2, 0])])(np.ones((2, 3)))
    >>> type(indexing_step(g.eqns[0], 0)).__name__
    'Gather'
    """
    if eqn.prim not in (getitem_p, scatter_add_p, set_p) or len(eqn.outvars) != 1 \
            or len(eqn.invars) != (3 if eqn.prim is set_p else 2):
        return None
    source, idx = eqn.invars[0], eqn.invars[-1]
    full = eqn.params["shape"] if eqn.prim is scatter_add_p else source.aval.shape
    axis = _indexed_axis(eqn.params["spec"], full)
    dtype = np.dtype(eqn.outvars[0].aval.dtype)
    if axis is None or np.dtype(idx.aval.dtype).kind not in "iu" \
            or dtype.itemsize not in (1, 2, 4, 8) or dtype.kind not in "biuf" \
            or math.prod(eqn.outvars[0].aval.shape) == 0 or full[axis] == 0:
        return None
    if eqn.prim is getitem_p:
        return Gather(index, eqn, axis, tuple(full))
    if eqn.prim is set_p:
        values = eqn.invars[1]
        block = tuple(full[:axis]) + tuple(idx.aval.shape) + tuple(full[axis + 1:])
        if any(np.dtype(v.aval.dtype) != dtype for v in (source, values)) \
                or (tuple(values.aval.shape) != block and math.prod(values.aval.shape) != 1):
            return None
        return Set(index, eqn, axis, tuple(full))
    if dtype not in _ADDABLE or np.dtype(source.aval.dtype) != dtype:
        return None
    return ScatterAdd(index, eqn, axis, tuple(full))


def _indexed_axis(spec, shape):
    """The axis of an index that is one array, every other axis of ``shape``
    whole; else None."""
    ndim = len(shape)
    if any(item[0] == "ellipsis" for item in spec[1:]):
        return None
    if spec and spec[0] == ("ellipsis",):
        spec = (_WHOLE,) * (ndim - len(spec) + 1) + tuple(spec[1:])
    arrays = [k for k, item in enumerate(spec) if item[0] == "array"]
    if len(arrays) != 1 or len(spec) > ndim or not all(
            _whole(item, shape[k]) for k, item in enumerate(spec) if k != arrays[0]):
        return None
    return arrays[0]


def _whole(item, size):
    """Whether index ``item`` takes all ``size`` elements of its axis in order."""
    if item[0] != "slice":
        return False
    _, start, stop, step = item
    return start in (None, 0) and (stop is None or stop >= size) and step in (None, 1)


class _Indexed(NativeStep):
    """A gather or scatter along ``axis`` of an array of shape ``full``."""

    fallback = True         # an index out of bounds: NumPy's IndexError

    def __init__(self, index, eqn, axis, full):
        super().__init__(index, eqn)
        self.axis, self.full = axis, full

    def _loops(self, ir, b, idx, body, call_out, alloca):
        """``body(block at idx[j] in full, block j in the compact side)`` for
        each index element, as element offsets (i64 values)."""
        i64 = ir.IntType(64)
        outer = math.prod(self.full[:self.axis])
        n, inner = self.full[self.axis], math.prod(self.full[self.axis + 1:])
        m = math.prod(self.eqn.invars[-1].aval.shape)           # the index array
        idx_dtype = np.dtype(self.eqn.invars[-1].aval.dtype)
        flag = new_flag(ir, b, alloca)
        c_n, c_m, c_inner = (ir.Constant(i64, v) for v in (n, m, inner))

        def each(o):
            def element(j):
                raw = b.load(b.gep(idx, [j]))
                at = raw if raw.type.width == 64 else (
                    b.sext(raw, i64) if idx_dtype.kind == "i" else b.zext(raw, i64))
                at = b.select(b.icmp_signed("<", at, ir.Constant(i64, 0)), b.add(at, c_n), at)
                outside = b.icmp_unsigned(">=", at, c_n)
                raise_flag(ir, b, flag, outside)
                at = b.select(outside, ir.Constant(i64, 0), at)
                body(b.mul(b.add(b.mul(o, c_n), at), c_inner),
                     b.mul(b.add(b.mul(o, c_m), j), c_inner))
            counted(ir, b, c_m, element, "ix.j")
        counted(ir, b, ir.Constant(i64, outer), each, "ix.o")
        call_out_if(ir, b, flag, call_out)
        return c_inner


class Gather(_Indexed):
    """``getitem`` of one index array: blocks copied as unsigned integers."""

    def emit(self, ir, b, pointer, table, call_out, alloca):
        (x, idx), (out,) = self.eqn.invars, self.eqn.outvars
        bits = np.dtype(f"u{np.dtype(out.aval.dtype).itemsize}")
        src, dst = pointer(x, bits), pointer(out, bits)
        inner = math.prod(self.full[self.axis + 1:])
        i64 = ir.IntType(64)

        def copy(at_full, at_compact):
            counted(ir, b, ir.Constant(i64, inner), lambda t: b.store(
                b.load(b.gep(src, [b.add(at_full, t)])), b.gep(dst, [b.add(at_compact, t)])),
                "ix.t")
        self._loops(ir, b, pointer(idx), copy, call_out, alloca)


class ScatterAdd(_Indexed):
    """``scatter_add`` of one index array: zeros, then each block added."""

    def emit(self, ir, b, pointer, table, call_out, alloca):
        (ct, idx), (out,) = self.eqn.invars, self.eqn.outvars
        dtype = np.dtype(out.aval.dtype)
        typ = storage_type(ir, dtype)
        src, dst = pointer(ct), pointer(out)
        i64 = ir.IntType(64)
        zero = ir.Constant(typ, 0.0 if dtype.kind == "f" else 0)
        counted(ir, b, ir.Constant(i64, math.prod(self.full)),
                lambda i: b.store(zero, b.gep(dst, [i])), "ix.zero")
        inner = math.prod(self.full[self.axis + 1:])
        add = b.fadd if dtype.kind == "f" else b.add

        def accumulate(at_full, at_compact):
            def one(t):
                target = b.gep(dst, [b.add(at_full, t)])
                b.store(add(b.load(target), b.load(b.gep(src, [b.add(at_compact, t)]))),
                        target)
            counted(ir, b, ir.Constant(i64, inner), one, "ix.t")
        self._loops(ir, b, pointer(idx), accumulate, call_out, alloca)


class Set(_Indexed):
    """``set`` of one index array: ``x`` copied, then each block of the
    values (or their one value) written at ``idx[j]``, in order."""

    def emit(self, ir, b, pointer, table, call_out, alloca):
        (x, values, idx), (out,) = self.eqn.invars, self.eqn.outvars
        bits = np.dtype(f"u{np.dtype(out.aval.dtype).itemsize}")
        src, new, dst = pointer(x, bits), pointer(values, bits), pointer(out, bits)
        i64 = ir.IntType(64)
        counted(ir, b, ir.Constant(i64, math.prod(self.full)),
                lambda i: b.store(b.load(b.gep(src, [i])), b.gep(dst, [i])), "ix.copy")
        inner = math.prod(self.full[self.axis + 1:])
        one = math.prod(values.aval.shape) == 1

        def write(at_full, at_compact):
            counted(ir, b, ir.Constant(i64, inner), lambda t: b.store(
                b.load(b.gep(new, [ir.Constant(i64, 0) if one else b.add(at_compact, t)])),
                b.gep(dst, [b.add(at_full, t)])), "ix.t")
        self._loops(ir, b, pointer(idx), write, call_out, alloca)
