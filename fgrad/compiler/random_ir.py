"""LLVM IR of the random draws: Threefry-2x32 words, and the bits, uniforms,
normals and new keys made of them, one loop per draw.

`fgrad.primitives.random` defines every draw with array code, which runs on
any backend; on NumPy that code makes some seventy passes over the data (the
cipher's rounds), several times slower than NumPy's own generator. The loops
written here compute each counter's two words with the cipher's 20 rounds as
straight-line integer code (which LLVM vectorises across counters) and turn
them into the draw's value before storing it: one pass.

Each loop repeats the array code's arithmetic operation for operation (the
normals' log, sin and cos are the same fdlibm polynomials, in the same
order, with no fused multiply-adds), so both give the same bits; tests check
it. `define_draw` writes a loop into any module: `fgrad.compiler.random_kernels`
compiles it alone for eager draws, `fgrad.compiler.program` inside a jitted
program (`DrawStep`), which then draws with no call back into Python.
"""
import math

import numpy as np

from fgrad.compiler.kernel_ir import counted
from fgrad.primitives import random as _random

# the draw each primitive makes, and the output dtypes a loop writes for it
# (others: narrower bits, float16 uniforms, stay array code)
DRAW_MODES = {_random.random_bits_p: _random.BITS,
              _random.random_uniform_p: _random.UNIFORM,
              _random.random_normal_p: _random.NORMAL,
              _random.random_split_p: _random.SPLIT,
              _random.random_fold_in_p: _random.FOLD_IN}
# counters whose words are made before they are used (`_blocks`)
BLOCK = 256
_DTYPES = {_random.BITS: ("uint32", "uint64"), _random.UNIFORM: ("float32", "float64"),
           _random.NORMAL: ("float32", "float64"), _random.SPLIT: ("uint32",),
           _random.FOLD_IN: ("uint32",)}


def _cipher(ir, b, keys, x0, x1):
    """The 20 rounds of Threefry-2x32 on i32 words ``x0, x1`` under the three
    key words ``keys``, as `fgrad.primitives.random.threefry2x32` computes them."""
    i32 = ir.IntType(32)
    x0, x1 = b.add(x0, keys[0]), b.add(x1, keys[1])
    for group in range(5):
        for r in _random.ROTATIONS[group % 2]:
            x0 = b.add(x0, x1)
            x1 = b.or_(b.shl(x1, ir.Constant(i32, r)), b.lshr(x1, ir.Constant(i32, 32 - r)))
            x1 = b.xor(x1, x0)
        x0 = b.add(x0, keys[(group + 1) % 3])
        x1 = b.add(x1, b.add(keys[(group + 2) % 3], ir.Constant(i32, group + 1)))
    return x0, x1


def _words(ir, b, keys, counter):
    """The two words of the i64 ``counter`` (its high word first)."""
    i32, i64 = ir.IntType(32), ir.IntType(64)
    hi = b.trunc(b.lshr(counter, ir.Constant(i64, 32)), i32)
    return _cipher(ir, b, keys, hi, b.trunc(counter, i32))


def _unit64(ir, b, y0, y1):
    """``1.m`` in [1, 2) as i64 bits, the 52 mantissa bits the top of
    ``y0 << 32 | y1``."""
    i64 = ir.IntType(64)
    top = b.shl(b.zext(y0, i64), ir.Constant(i64, 20))
    low = b.zext(b.lshr(y1, ir.Constant(ir.IntType(32), 12)), i64)
    return b.or_(b.or_(top, low), ir.Constant(i64, _random.ONE_BITS))


def _polynomial(ir, b, x, coefficients):
    """``c0 + x * (c1 + x * (... + x * cn))``, innermost first, as written."""
    f64 = ir.DoubleType()
    value = ir.Constant(f64, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        value = b.fadd(ir.Constant(f64, c), b.fmul(x, value))
    return value


def _log_unit(ir, b, y, sqrt_two):
    """log(y) for y in (0, 1]: `fgrad.primitives.random`'s fdlibm reduction
    and polynomial, step for step."""
    f64, i64 = ir.DoubleType(), ir.IntType(64)

    def c(value):
        return ir.Constant(f64, value)
    bits = b.bitcast(y, i64)
    e = b.bitcast(b.or_(b.lshr(bits, ir.Constant(i64, 52)),
                        ir.Constant(i64, _random.EXPONENT_MAGIC)), f64)
    e = b.fsub(e, c(4503599627370496.0 + 1023.0))
    m = b.bitcast(b.or_(b.and_(bits, ir.Constant(i64, _random.MANTISSA_MASK)),
                        ir.Constant(i64, _random.ONE_BITS)), f64)
    big = b.fcmp_ordered(">", m, sqrt_two)
    m = b.select(big, b.fmul(m, c(0.5)), m)
    e = b.select(big, b.fadd(e, c(1.0)), e)
    lg1, lg2, lg3, lg4, lg5, lg6, lg7 = _random.LOG_COEFFICIENTS
    f = b.fsub(m, c(1.0))
    s = b.fdiv(f, b.fadd(c(2.0), f))
    z = b.fmul(s, s)
    w = b.fmul(z, z)
    r = b.fadd(b.fmul(z, _polynomial(ir, b, w, (lg1, lg3, lg5, lg7))),
               b.fmul(w, _polynomial(ir, b, w, (lg2, lg4, lg6))))
    hfsq = b.fmul(b.fmul(c(0.5), f), f)
    inner = b.fadd(b.fmul(s, b.fadd(hfsq, r)), b.fmul(e, c(_random.LN2_LO)))
    return b.fsub(b.fmul(e, c(_random.LN2_HI)), b.fsub(b.fsub(hfsq, inner), f))


def _box_muller(ir, b, u, v, intrinsics):
    """The normal pair of the uniforms ``u``, ``v`` in [1, 2) (doubles), as
    `fgrad.primitives.random`'s Box-Muller computes it."""
    f64 = ir.DoubleType()
    sqrt, floor, fabs = intrinsics

    def c(value):
        return ir.Constant(f64, value)
    s1, s2, s3, s4, s5, s6 = _random.SIN_COEFFICIENTS
    c1, c2, c3, c4, c5, c6 = _random.COS_COEFFICIENTS
    lg = _log_unit(ir, b, b.fsub(c(2.0), u), c(_random.SQRT_TWO))
    radius = b.fmul(b.call(sqrt, [b.fmul(c(-2.0), lg)]), c(_random.SQRT_HALF))
    turn = b.fmul(b.fsub(v, c(1.0)), c(4.0))
    quarter = b.call(floor, [turn])
    a = b.fmul(b.fsub(b.fsub(turn, quarter), c(0.5)), c(math.pi / 2))
    z = b.fmul(a, a)
    sin_a = b.fadd(a, b.fmul(b.fmul(a, z), _polynomial(ir, b, z, (s1, s2, s3, s4, s5, s6))))
    cos_a = b.fadd(b.fsub(c(1.0), b.fmul(c(0.5), z)),
                   b.fmul(b.fmul(z, z), _polynomial(ir, b, z, (c1, c2, c3, c4, c5, c6))))
    sy = b.select(b.fcmp_ordered("<", quarter, c(2.0)), c(1.0), c(-1.0))
    far = b.fcmp_ordered(">", b.call(fabs, [b.fsub(quarter, c(1.5))]), c(1.0))
    sx = b.select(far, c(1.0), c(-1.0))
    first = b.fmul(radius, b.fsub(b.fmul(sx, cos_a), b.fmul(sy, sin_a)))
    second = b.fmul(radius, b.fadd(b.fmul(sy, cos_a), b.fmul(sx, sin_a)))
    return first, second


def define_draw(ir, module, mode, dtype, name):
    """Define ``void name(i64 count, i64 n, i32* keys, i32* data, i8* out)`` in
    ``module``: for each of ``count`` keys (``keys``: ``(count, 2)`` words),
    the draw of ``mode`` (`fgrad.primitives.random`'s BITS, UNIFORM, NORMAL,
    SPLIT or FOLD_IN) as the array code makes it, into row ``k`` of ``out``
    (C order, elements of ``dtype``): ``n`` values, ``n`` new keys (SPLIT:
    ``2 n`` words) or one key (FOLD_IN, from the word ``data[k]``). A NORMAL
    is computed in float64 and rounded to ``dtype``. Returns the function.
    """
    dtype = np.dtype(dtype)
    if dtype.name not in _DTYPES[mode]:
        raise ValueError(f"no draw of mode {mode} into {dtype}")
    i8, i32, i64, f64 = ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.DoubleType()
    item = {"uint32": i32, "uint64": i64, "float32": ir.FloatType(), "float64": f64}[dtype.name]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [
        i64, i64, i32.as_pointer(), i32.as_pointer(), i8.as_pointer()]), name)
    count, n, keys, data, out_bytes = fn.args
    for arg, arg_name in zip(fn.args, ("count", "n", "keys", "data", "out")):
        arg.name = arg_name
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    out = b.bitcast(out_bytes, item.as_pointer())
    row_length = {_random.SPLIT: b.mul(n, ir.Constant(i64, 2)),
                  _random.FOLD_IN: ir.Constant(i64, 2)}.get(mode, n)
    intrinsics = [module.declare_intrinsic(f"llvm.{op}", [f64]) for op in ("sqrt", "floor")] \
        + [module.declare_intrinsic("llvm.fabs", [f64])]

    def per_key(k):
        k0 = b.load(b.gep(keys, [b.mul(k, ir.Constant(i64, 2))]))
        k1 = b.load(b.gep(keys, [b.add(b.mul(k, ir.Constant(i64, 2)), ir.Constant(i64, 1))]))
        words = (k0, k1, b.xor(b.xor(k0, k1), ir.Constant(i32, _random.KEY_PARITY)))
        row = b.gep(out, [b.mul(k, row_length)])
        if mode == _random.FOLD_IN:
            y0, y1 = _cipher(ir, b, words, ir.Constant(i32, 0), b.load(b.gep(data, [k])))
            b.store(y0, row)
            b.store(y1, b.gep(row, [ir.Constant(i64, 1)]))
        elif mode == _random.NORMAL:
            _normals(ir, b, words, n, row, item, intrinsics, block)
        else:
            _blocks(ir, b, words, n, lambda i, y: _store_value(ir, b, mode, item, row, i, *y),
                    block)
    # words made in blocks of their own (a loop of 32-bit operations alone,
    # which LLVM vectorises eight counters to a register) before a second
    # loop makes them into values: 64-bit ones in one loop had it vectorise
    # four counters to a register (float64 uniforms 2.9 ms a million against
    # 2.0 in blocks)
    block = tuple(b.alloca(ir.ArrayType(i32, BLOCK)) for _ in range(4))
    counted(ir, b, count, per_key, "k")
    b.ret_void()
    return fn


def _blocks(ir, b, keys, n, body, block, offsets=None):
    """``body(i, words)`` for counters ``i < n``, ``words`` the two words of
    counter ``i + offset`` for each of ``offsets`` (i64 values; 0 alone when
    None), made
    `BLOCK` counters at a time into the arrays ``block`` (two an offset)."""
    i64 = ir.IntType(64)
    zero = i64(0)
    offsets = (zero,) if offsets is None else offsets

    def chunk(c):
        start = b.mul(c, i64(BLOCK))
        left = b.sub(n, start)
        size = b.select(b.icmp_signed("<", left, i64(BLOCK)), left, i64(BLOCK))
        for k, offset in enumerate(offsets):
            def make(t, k=k, offset=offset):
                y0, y1 = _words(ir, b, keys, b.add(b.add(start, t), offset))
                b.store(y0, b.gep(block[2 * k], [zero, t]))
                b.store(y1, b.gep(block[2 * k + 1], [zero, t]))
            counted(ir, b, size, make, "t")
        counted(ir, b, size, lambda t: body(b.add(start, t), [
            b.load(b.gep(array, [zero, t])) for array in block[:2 * len(offsets)]]), "u")
    counted(ir, b, b.sdiv(b.add(n, i64(BLOCK - 1)), i64(BLOCK)), chunk, "c")


def _store_value(ir, b, mode, item, row, i, y0, y1):
    """Counter ``i``'s words ``y0, y1`` as the ``i``-th value of ``row``."""
    i32, i64 = ir.IntType(32), ir.IntType(64)
    if mode == _random.SPLIT:
        at = b.mul(i, ir.Constant(i64, 2))
        b.store(y0, b.gep(row, [at]))
        b.store(y1, b.gep(row, [b.add(at, ir.Constant(i64, 1))]))
        return
    if item == i32:                                     # BITS of 32
        value = b.xor(y0, y1)
    elif item == i64:                                   # BITS of 64
        value = b.or_(b.shl(b.zext(y0, i64), ir.Constant(i64, 32)), b.zext(y1, i64))
    elif isinstance(item, ir.FloatType):                # UNIFORM float32
        mantissa = b.lshr(b.xor(y0, y1), ir.Constant(i32, 9))
        unit = b.bitcast(b.or_(mantissa, ir.Constant(i32, 0x3F800000)), item)
        value = b.fsub(unit, ir.Constant(item, 1.0))
    else:                                               # UNIFORM float64
        value = b.fsub(b.bitcast(_unit64(ir, b, y0, y1), item), ir.Constant(item, 1.0))
    b.store(value, b.gep(row, [i]))


def _normals(ir, b, keys, n, row, item, intrinsics, block):
    """``n`` normals into ``row``: pair ``j`` of ``m = ceil(n / 2)`` pairs from
    counters ``j`` (radius) and ``m + j`` (angle), its first value at ``j``,
    its second at ``m + j`` while that is below ``n``."""
    i64, f64 = ir.IntType(64), ir.DoubleType()
    pairs = b.sdiv(b.add(n, ir.Constant(i64, 1)), ir.Constant(i64, 2))
    whole = b.sub(n, pairs)             # the pairs whose both values are kept

    def pair(j, words, both):
        u = b.bitcast(_unit64(ir, b, *words[:2]), f64)
        v = b.bitcast(_unit64(ir, b, *words[2:]), f64)
        first, second = _box_muller(ir, b, u, v, intrinsics)
        values = [(first, j), (second, b.add(pairs, j))] if both else [(first, j)]
        for value, at in values:
            if item != f64:
                value = b.fptrunc(value, item)
            b.store(value, b.gep(row, [at]))
    _blocks(ir, b, keys, whole, lambda j, words: pair(j, words, True), block, (i64(0), pairs))
    # an odd n: the last pair's first value alone
    counted(ir, b, pairs, lambda j: pair(j, [*_words(ir, b, keys, j),
                                             *_words(ir, b, keys, b.add(pairs, j))], False),
            "last", start=whole)


# ---------------------------------------------------------------------------
# Inside a compiled program
# ---------------------------------------------------------------------------


def draw_mode(eqn):
    """The mode a program's loop draws equation ``eqn`` with, or None where
    it is no draw a loop makes (another primitive, an output dtype left to
    the array code)."""
    mode = DRAW_MODES.get(eqn.prim)
    if mode is None:
        return None
    return mode if np.dtype(eqn.outvars[0].aval.dtype).name in _DTYPES[mode] else None


class DrawStep:
    """A `fgrad.compiler.program` step: equation ``eqn``'s draw as one loop
    (`define_draw`) over its buffers."""

    def __init__(self, eqn):
        self.eqn, self.mode = eqn, draw_mode(eqn)

    def reads(self):
        return self.eqn.invars

    def writes(self):
        return self.eqn.outvars

    def emit(self, ir, b, pointer):
        """The loop's call at builder ``b``: ``pointer(v, dtype)`` is value
        ``v``'s buffer as a pointer to elements of ``dtype``."""
        i64, u32 = ir.IntType(64), np.dtype(np.uint32)
        key, out = self.eqn.invars[0], self.eqn.outvars[0]
        dtype = np.dtype(out.aval.dtype)
        name = f"draw_{self.mode}_{dtype.name}"
        module = b.module
        fn = module.globals.get(name) or define_draw(ir, module, self.mode, dtype, name)
        count = math.prod(key.aval.shape[:-1])
        per_key = math.prod(out.aval.shape) // max(count, 1)
        n = per_key // 2 if self.mode in (_random.SPLIT, _random.FOLD_IN) else per_key
        data = pointer(self.eqn.invars[1], u32) if self.mode == _random.FOLD_IN \
            else ir.Constant(ir.IntType(32).as_pointer(), None)
        b.call(fn, [ir.Constant(i64, count), ir.Constant(i64, n), pointer(key, u32), data,
                    pointer(out, np.dtype(np.uint8))])
