"""LLVM IR for the fused CPU kernels.

`fgrad.compiler.cpu_fusion` describes each kernel as a `KernelSpec` and this
module writes its loop directly as LLVM IR (`kernel_ir`), which LLVM compiles
in a few milliseconds (`fgrad.compiler.native`); the whole-program compiler
writes the same loops into its functions (`define_kernel`). Writing IR, not
Python text for a compiler that types and lowers it statement by statement
(numba, which fgrad used before: about a second for a kernel of 128
operations), keeps a kernel's compile time that of LLVM's passes.

The IR keeps NumPy's semantics: each operation computes in the dtype NumPy's
promotion gives (integers wrap, float32 stays float32), no fast-math flags
(NaN and inf propagate; LLVM does not reassociate a sum), ``maximum`` and
``minimum`` propagate NaN, and the C library computes what has no LLVM
instruction (``tanh``, ``expm1``, ``arcsinh``, ...). ``sin``, ``cos``,
``exp`` and ``tanh`` may use the vector functions of
`fgrad.compiler.vector_math` (their IR form), and
a power by a literal 2, 3 or 4 is products (`POWER_PRODUCTS`).
"""
import functools
import hashlib

import numpy as np

from fgrad.compiler import complex_ir, vector_math
from fgrad.compiler.complex_ir import complex_constant, complex_operation, complex_type
from fgrad.compiler.vector_math import VECTOR_FUNCTIONS, define_ir

# C library functions: operation -> name of the double version (float's adds "f")
_LIBM = {"tan": "tan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "arcsin": "asin",
         "arccos": "acos", "arctan": "atan", "arcsinh": "asinh", "arccosh": "acosh",
         "arctanh": "atanh", "expm1": "expm1", "log1p": "log1p", "cbrt": "cbrt",
         "arctan2": "atan2", "hypot": "hypot", "fmod": "fmod"}
# LLVM intrinsics (LLVM calls the C library's function where there is no instruction)
_INTRINSICS = {"sqrt": "llvm.sqrt", "exp": "llvm.exp", "exp2": "llvm.exp2",
               "log": "llvm.log", "log2": "llvm.log2", "log10": "llvm.log10",
               "sin": "llvm.sin", "cos": "llvm.cos", "floor": "llvm.floor",
               "ceil": "llvm.ceil", "trunc": "llvm.trunc", "rint": "llvm.rint",
               "power": "llvm.pow", "absolute": "llvm.fabs"}
# a kernel of this many elements or fewer has its loop left scalar in a program
# (`define_kernel`'s ``few``): vectorised, it would run the scalar remainder
# anyway, after the runtime checks, and its vector code cost most of LLVM's time
FEW_ELEMENTS = 4
# literal exponents whose powers are products, as JAX's integer_pow computes
# them, where the C library's pow took some 10 ns a call (most of the HMC
# loop row's time: its potential's gradient is x ** 3): x * x is pow's
# correctly rounded result, x * x * x and (x * x) * (x * x) are within two
# ulps of it (float32 multiplies in float64 and rounds once)
POWER_PRODUCTS = (2.0, 3.0, 4.0)
_FLOAT_COMPARE = {"equal": ("==", True), "not_equal": ("!=", False), "less": ("<", True),
                  "less_equal": ("<=", True), "greater": (">", True),
                  "greater_equal": (">=", True)}
# operations computed on bools as on integers, the result then converted back
# (True + True is 2: true, as NumPy's logical or gives)
_BOOL_ARITHMETIC = frozenset({"add", "subtract", "multiply", "negative", "square"})


class Op:
    """One operation of a kernel's loop: ``name`` (NumPy's ufunc name, or
    ``convert_element_type``) of ``args`` — ``("x", j)`` (input j's element),
    ``("t", k)`` (the result of operation k) or ``("c", number)`` — each
    first converted to its dtype in ``arg_dtypes``; the result converted to
    ``out_dtype``. ``vector`` says whether the fast loop computes it with a
    vector function."""

    __slots__ = ("name", "args", "arg_dtypes", "out_dtype", "vector")

    def __init__(self, name, args, arg_dtypes, out_dtype, vector=False):
        self.name, self.args, self.vector = name, args, vector
        self.arg_dtypes = [np.dtype(d) for d in arg_dtypes]
        self.out_dtype = np.dtype(out_dtype)


class KernelSpec:
    """What `kernel_ir` writes: the loop over ``n`` elements of one kernel.

    ``inputs`` are ``(dtype, index)`` pairs: index ``"i"`` (the element),
    ``"one"`` (element 0), ``"k"`` / ``"k%"`` (the inner loop's index, or it
    modulo the input's length), ``"r"`` (the outer loop's) or ``("at",
    terms)`` (the sum over ``(period, length, stride)`` terms of ``(i //
    period % length) * stride``: an array broadcast along inner axes, read
    in place; `fgrad.compiler.cpu_fusion.broadcast_offset`); ``inner`` is
    None for one loop, else ``("suffix", j)`` (the inner loop runs over input
    j's length) or ``("prefix", j)`` (over ``n`` divided by it). ``ops``
    are `Op` s; ``reductions`` ``(kind, arg, acc_dtype)`` triples (kind
    ``sum``, ``max`` or ``min``, arg as in `Op`); ``outputs`` the operations
    written out (as rows of one array when ``packed``), element ``i`` of
    each at ``i`` times its ``out_strides`` entry (None: all 1; a compiled
    program's output written straight into a larger array,
    `fgrad.compiler.program`). With ``vectorised``
    the loop runs first with the vector functions, checking each argument's
    range, and again with the C library's if one was out of it.
    """

    def __init__(self, inputs, inner, ops, reductions, outputs, packed, vectorised,
                 out_strides=None):
        self.inputs, self.inner, self.ops = inputs, inner, ops
        self.reductions, self.outputs = reductions, outputs
        self.packed, self.vectorised = packed, vectorised
        self.out_strides = out_strides
        self._key = None

    def key(self):
        """What the IR depends on, as a tuple: equal keys, equal kernels (so
        that a graph repeating one group, an unrolled loop's, writes and
        compiles it once). Numbers are told apart by type and repr (-0.0 is
        not 0.0, True not 1)."""
        if self._key is None:
            def arg(a):
                return ("c", type(a[1]).__name__, repr(a[1])) if a[0] == "c" else a
            self._key = (
                tuple(self.inputs), self.inner,
                tuple((op.name, tuple(map(arg, op.args)), tuple(op.arg_dtypes),
                       op.out_dtype, op.vector) for op in self.ops),
                tuple((kind, arg(a), acc) for kind, a, acc in self.reductions),
                tuple(self.outputs), self.packed, self.vectorised, self.out_strides)
        return self._key

    def __eq__(self, other):
        return isinstance(other, KernelSpec) and self.key() == other.key()

    def __hash__(self):
        return hash(self.key())


def value_type(ir, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return ir.IntType(1)
    if dtype.kind == "f":
        return ir.DoubleType() if dtype.itemsize == 8 else ir.FloatType()
    if dtype.kind == "c":           # its two parts, as NumPy stores them
        return complex_type(ir, dtype)
    return ir.IntType(8 * dtype.itemsize)


def storage_type(ir, dtype):
    # NumPy stores a bool in a byte
    return ir.IntType(8) if np.dtype(dtype).kind == "b" else value_type(ir, dtype)


def copy_dtype(dtype):
    """The dtype a copy moves ``dtype``'s elements as: an unsigned integer
    of their size (floats move bit for bit, NaN payloads included), or a
    complex128 (two doubles, which loads and stores move bit for bit too)
    for 16 bytes.

    >>> copy_dtype(np.float32), copy_dtype(np.complex64), copy_dtype(np.complex128)
    (dtype('uint32'), dtype('uint64'), dtype('complex128'))
    """
    size = np.dtype(dtype).itemsize
    return np.dtype(np.complex128 if size == 16 else f"u{size}")


def constant(ir, value, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return ir.Constant(ir.IntType(1), int(bool(value)))
    if dtype.kind == "f":
        # rounded to the dtype here, as np.float32(value) would
        return ir.Constant(value_type(ir, dtype), float(dtype.type(value)))
    if dtype.kind == "c":
        return complex_constant(ir, value, dtype)
    bits = 8 * dtype.itemsize
    return ir.Constant(ir.IntType(bits), int(value) & ((1 << bits) - 1))


def convert(ir, b, value, source, target):
    """``value`` (of dtype ``source``) as a ``target`` value, as NumPy's cast
    (``astype``) of an in-range value does."""
    source, target = np.dtype(source), np.dtype(target)
    if source == target:
        return value
    if target.kind == "c":
        return complex_ir.to_complex(ir, b, value, source, target, convert)
    if source.kind == "c":
        raise ValueError(f"a {source} value is not converted to {target} in kernels")
    to = value_type(ir, target)
    if target.kind == "b":
        if source.kind == "f":        # nan is true, as in NumPy
            return b.fcmp_unordered("!=", value, ir.Constant(value.type, 0.0))
        return b.icmp_unsigned("!=", value, ir.Constant(value.type, 0))
    if source.kind in "biu" and target.kind in "iu":
        width, to_width = value.type.width, to.width
        if to_width < width:
            return b.trunc(value, to)
        if to_width == width:
            return value
        return b.sext(value, to) if source.kind == "i" else b.zext(value, to)
    if source.kind in "biu":          # to a float
        return b.sitofp(value, to) if source.kind == "i" else b.uitofp(value, to)
    if target.kind == "f":
        return b.fpext(value, to) if target.itemsize > source.itemsize else b.fptrunc(value, to)
    if target.kind == "u" and target.itemsize >= 4:
        return b.fptoui(value, to)
    return _truncated(ir, b, value, to)


def _truncated(ir, b, value, to):
    """A float ``value`` as the integer type ``to`` as NumPy's cast gives it
    on x86-64 (``cvttsd2si``, and its vector forms): truncated toward zero
    into 64 bits for an int64, else into 32 bits; NaN, and a value beyond
    those bits, is the least integer of them (``INT_MIN``); a narrower type
    (int8, int16, uint8, uint16) keeps the low bits (0 for INT_MIN). (To
    uint32 and uint64 NumPy's vector and scalar loops disagree beyond the
    range: `fgrad.compiler.cpu_fusion` leaves those casts to NumPy.)"""
    wide = ir.IntType(64 if to.width == 64 else 32)
    bound = float(2 ** (wide.width - 1))
    inside = b.and_(b.fcmp_ordered(">=", value, ir.Constant(value.type, -bound)),
                    b.fcmp_ordered("<", value, ir.Constant(value.type, bound)))
    # (fptosi of a value outside is poison, which the select never picks)
    whole = b.select(inside, b.fptosi(value, wide), ir.Constant(wide, -(1 << (wide.width - 1))))
    return b.trunc(whole, to) if to.width < wide.width else whole


def _compare(b, op, x, y, dtype):
    if dtype.kind == "f":
        symbol, ordered = _FLOAT_COMPARE[op]
        return (b.fcmp_ordered if ordered else b.fcmp_unordered)(symbol, x, y)
    symbol = _FLOAT_COMPARE[op][0]
    return (b.icmp_signed if dtype.kind == "i" else b.icmp_unsigned)(symbol, x, y)


def _call(ir, b, name, args):
    """The C library's ``name`` (its float version for float arguments)."""
    ty = args[0].type
    name = name + ("f" if isinstance(ty, ir.FloatType) else "")
    fn = b.module.globals.get(name)
    if fn is None:
        fn = ir.Function(b.module, ir.FunctionType(ty, [a.type for a in args]), name)
    return b.call(fn, args)


def _operation(ir, b, name, args, dtype):
    """``name`` of ``args`` (IR values of ``dtype``, the compute dtype; a
    ``where``'s condition is a bool): ``(value, its dtype)``."""
    if dtype.kind == "b" and name in _BOOL_ARITHMETIC:
        i64 = ir.IntType(64)
        args = [b.zext(a, i64) for a in args]
        dtype = np.dtype(np.int64)
    if dtype.kind == "c":
        return complex_operation(ir, b, name, args, dtype, _call)
    x = args[0]
    floating = dtype.kind == "f"
    if name in ("add", "subtract", "multiply", "divide"):
        emit = {"add": b.fadd if floating else b.add, "subtract": b.fsub if floating else b.sub,
                "multiply": b.fmul if floating else b.mul, "divide": b.fdiv}[name]
        return emit(x, args[1]), dtype
    if name == "square":
        return (b.fmul if floating else b.mul)(x, x), dtype
    if name == "negative":
        return (b.fneg(x) if floating else b.neg(x)), dtype
    if name in _FLOAT_COMPARE:
        return _compare(b, name, x, args[1], dtype), np.dtype(bool)
    if name in ("maximum", "minimum"):
        y = args[1]
        beyond = _compare(b, "greater" if name == "maximum" else "less", x, y, dtype)
        if floating:                  # NaN propagates, from either side
            beyond = b.or_(b.fcmp_unordered("!=", x, x), beyond)
        return b.select(beyond, x, y), dtype
    if name == "where":
        return b.select(x, args[1], args[2]), dtype
    if name == "convert_element_type":
        return x, dtype
    if name in ("logical_and", "logical_or", "logical_xor", "logical_not"):
        truth = [convert(ir, b, a, dtype, bool) for a in args]
        if name == "logical_not":
            return b.not_(truth[0]), np.dtype(bool)
        emit = {"logical_and": b.and_, "logical_or": b.or_, "logical_xor": b.xor}[name]
        return emit(truth[0], truth[1]), np.dtype(bool)
    if name == "sign":
        # NumPy's: 1, -1, or 0 (+0.0 for either zero); a NaN itself
        zero, one, minus = (constant(ir, v, dtype) for v in (0, 1, -1))
        above = _compare(b, "greater", x, zero, dtype)
        below = _compare(b, "less", x, zero, dtype) if dtype.kind != "u" else None
        rest = b.select(_compare(b, "equal", x, zero, dtype), zero, x) if floating else zero
        return b.select(above, one, rest if below is None else b.select(below, minus, rest)), \
            dtype
    if floating and name in ("floor_divide", "remainder"):
        pair = _float_divide_and_remainder(ir, b, x, args[1])
        return pair[0 if name == "floor_divide" else 1], dtype
    if not floating and name == "power":
        return _integer_power(ir, b, x, args[1], dtype), dtype
    if not floating and name in _INTEGER_OPERATIONS:
        return _INTEGER_OPERATIONS[name](ir, b, args, dtype), dtype
    if not floating:
        if name == "absolute":
            if dtype.kind != "i":
                return x, dtype
            negative = b.icmp_signed("<", x, ir.Constant(x.type, 0))
            return b.select(negative, b.neg(x), x), dtype
        if name in ("floor", "ceil", "trunc"):
            return x, dtype
        raise ValueError(f"{name} of {dtype} is not written in kernels")
    if name == "isnan":
        return b.fcmp_unordered("uno", x, x), np.dtype(bool)
    if name in ("isinf", "isfinite"):
        fabs = b.module.declare_intrinsic("llvm.fabs", [x.type])
        inf = ir.Constant(x.type, float("inf"))
        test = (b.fcmp_ordered("==", b.call(fabs, [x]), inf) if name == "isinf"
                else b.fcmp_ordered("!=", b.call(fabs, [x]), inf))
        return test, np.dtype(bool)
    if name == "signbit":
        bits = ir.IntType(8 * dtype.itemsize)
        return b.icmp_signed("<", b.bitcast(x, bits), ir.Constant(bits, 0)), np.dtype(bool)
    if name == "power" and isinstance(args[1], ir.Constant) \
            and args[1].constant in POWER_PRODUCTS:
        return _power_product(ir, b, x, int(args[1].constant)), dtype
    if name in _INTRINSICS:
        fn = b.module.declare_intrinsic(_INTRINSICS[name], [x.type])
        return b.call(fn, args), dtype
    if name in _LIBM:
        return _call(ir, b, _LIBM[name], args), dtype
    raise ValueError(f"{name} is not written in kernels")


def _power_product(ir, b, x, n):
    """``x ** n`` as products (``n`` in `POWER_PRODUCTS`), in float64 for
    float32 (exact for n = 2, so rounded once) and rounded to ``x``'s type."""
    wide = ir.DoubleType()
    y = x if x.type == wide else b.fpext(x, wide)
    square = b.fmul(y, y)
    y = square if n == 2 else b.fmul(square, y if n == 3 else square)
    return y if x.type == wide else b.fptrunc(y, x.type)


def _divide_and_remainder(ir, b, x, y, dtype):
    """NumPy's ``x // y`` and ``x % y`` of integers: the quotient rounded
    down and the remainder with the divisor's sign; 0 and 0 for a zero
    divisor, and ``MIN // -1`` wraps to ``MIN`` (where LLVM's division is
    undefined: the divisor is 1 there)."""
    zero, one = ir.Constant(x.type, 0), ir.Constant(x.type, 1)
    if dtype.kind == "u":
        safe = b.select(b.icmp_unsigned("==", y, zero), one, y)
        q, r = b.udiv(x, safe), b.urem(x, safe)
        by_zero = b.icmp_unsigned("==", y, zero)
        return b.select(by_zero, zero, q), b.select(by_zero, zero, r)
    least = ir.Constant(x.type, -(1 << (x.type.width - 1)))
    overflow = b.and_(b.icmp_signed("==", x, least),
                      b.icmp_signed("==", y, ir.Constant(x.type, -1)))
    by_zero = b.icmp_signed("==", y, zero)
    safe = b.select(b.or_(by_zero, overflow), one, y)
    q, r = b.sdiv(x, safe), b.srem(x, safe)
    # C truncates toward zero: one step down where the signs differ
    down = b.and_(b.icmp_signed("!=", r, zero),
                  b.icmp_signed("!=", b.icmp_signed("<", r, zero), b.icmp_signed("<", y, zero)))
    q = b.select(down, b.sub(q, one), q)
    r = b.select(down, b.add(r, y), r)
    return b.select(by_zero, zero, q), b.select(b.or_(by_zero, overflow), zero, r)


def _float_divide_and_remainder(ir, b, x, y):
    """NumPy's ``x // y`` and ``x % y`` of floats (``npy_divmod``): ``fmod``,
    the remainder given the divisor's sign (a zero one ``copysign(0, y)``),
    the quotient ``(x - mod) / y`` floored and snapped to the nearest
    integer, a zero one ``copysign(0, x / y)``; a zero divisor gives
    ``x / y`` and ``fmod(x, y)``. Comparisons with NaN are false, as C's
    ``isless`` and ``isgreater``; a NaN is nonzero, as C's ``if (mod)``."""
    zero, one, half = (ir.Constant(x.type, v) for v in (0.0, 1.0, 0.5))
    copysign = b.module.declare_intrinsic("llvm.copysign", [x.type],
                                          ir.FunctionType(x.type, [x.type, x.type]))
    floor = b.module.declare_intrinsic("llvm.floor", [x.type])
    mod, quotient = b.frem(x, y), b.fdiv(x, y)
    div = b.fdiv(b.fsub(x, mod), y)
    nonzero_mod = b.fcmp_unordered("!=", mod, zero)
    flip = b.and_(nonzero_mod, b.xor(b.fcmp_ordered("<", y, zero),
                                     b.fcmp_ordered("<", mod, zero)))
    remainder = b.select(nonzero_mod, b.select(flip, b.fadd(mod, y), mod),
                         b.call(copysign, [zero, y]))
    div = b.select(flip, b.fsub(div, one), div)
    floored = b.call(floor, [div])
    floored = b.select(b.fcmp_ordered(">", b.fsub(div, floored), half),
                       b.fadd(floored, one), floored)
    floored = b.select(b.fcmp_unordered("!=", div, zero), floored,
                       b.call(copysign, [zero, quotient]))
    by_zero = b.fcmp_ordered("==", y, zero)
    return b.select(by_zero, quotient, floored), b.select(by_zero, mod, remainder)


def _integer_power(ir, b, x, y, dtype):
    """NumPy's ``x ** y`` of integers, ``y`` not negative (`fgrad.compiler.cpu_fusion`
    leaves a possibly negative one to NumPy, which raises): squaring and
    multiplying, wrapping as NumPy's does, over every bit of ``y`` (LLVM
    folds the bits of a constant exponent away)."""
    one = ir.Constant(x.type, 1)
    out, base = one, x
    for bit in range(x.type.width - (1 if dtype.kind == "i" else 0)):
        set_ = b.icmp_unsigned("!=", b.and_(y, ir.Constant(x.type, 1 << bit)),
                               ir.Constant(x.type, 0))
        out = b.select(set_, b.mul(out, base), out)
        base = b.mul(base, base)
    return out


def _shift(ir, b, x, y, dtype, left):
    """NumPy's ``x << y`` and ``x >> y``: a shift by the width or more (or
    by a negative amount, which NumPy reads as a huge one) gives 0, or -1 for
    a negative ``x`` shifted right, where LLVM's shift is undefined."""
    width = ir.Constant(x.type, x.type.width)
    inside = b.icmp_unsigned("<", y, width)
    amount = b.select(inside, y, ir.Constant(x.type, 0))
    if left:
        return b.select(inside, b.shl(x, amount), ir.Constant(x.type, 0))
    if dtype.kind == "u":
        return b.select(inside, b.lshr(x, amount), ir.Constant(x.type, 0))
    # an arithmetic shift by width - 1 is 0 or -1: what any larger one gives
    beyond = ir.Constant(x.type, x.type.width - 1)
    return b.ashr(x, b.select(inside, amount, beyond))


_INTEGER_OPERATIONS = {
    "floor_divide": lambda ir, b, args, dtype: _divide_and_remainder(ir, b, *args, dtype)[0],
    "remainder": lambda ir, b, args, dtype: _divide_and_remainder(ir, b, *args, dtype)[1],
    "bitwise_and": lambda ir, b, args, dtype: b.and_(*args),
    "bitwise_or": lambda ir, b, args, dtype: b.or_(*args),
    "bitwise_xor": lambda ir, b, args, dtype: b.xor(*args),
    "invert": lambda ir, b, args, dtype: b.not_(args[0]),
    "left_shift": lambda ir, b, args, dtype: _shift(ir, b, *args, dtype, True),
    "right_shift": lambda ir, b, args, dtype: _shift(ir, b, *args, dtype, False),
}


def kernel_ir(spec, name, object_offset):
    """The LLVM IR text of ``spec`` (a `KernelSpec`) as function ``name``:
    ``void name(i64 n, in0, len0, in1, len1, ..., outputs, results)`` where
    each input is a pointer to its first element and its length, the
    outputs one pointer per output (one to the first row when packed), and
    ``results`` one pointer per reduction, where its value is stored.

    With ``object_offset`` (`fgrad.compiler.native`), each of those pointers
    is passed as the NumPy array that holds it, C-contiguous: a pointer to
    the array object, whose data pointer the function reads at that byte
    offset (NumPy's C structure keeps it first after the object header)."""
    from llvmlite import ir
    module = ir.Module(name=name)
    define_kernel(ir, module, spec, name, object_offset)
    return str(module)


def define_kernel(ir, module, spec, name, object_offset=None, few=False):
    """Define the function `kernel_ir` describes (``spec``'s loop, named
    ``name``) in the llvmlite ``module``, which may hold other kernels
    (`fgrad.compiler.program` writes a whole program's into one); returns
    the ``ir.Function``. ``few`` says the function is only called for a
    few elements (`FEW_ELEMENTS` at most): its loops are then left scalar
    (`scalar_loop`)."""
    i64, i1 = ir.IntType(64), ir.IntType(1)
    params = [i64]
    for dtype, _ in spec.inputs:
        params += [storage_type(ir, dtype).as_pointer(), i64]
    out_dtypes = [spec.ops[t].out_dtype for t in spec.outputs]
    if spec.packed:
        params.append(storage_type(ir, out_dtypes[0]).as_pointer())
    else:
        params += [storage_type(ir, d).as_pointer() for d in out_dtypes]
    params += [value_type(ir, acc).as_pointer() for _, _, acc in spec.reductions]
    if object_offset is not None:
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [
            ir.IntType(8).as_pointer() if isinstance(p, ir.PointerType) else p
            for p in params]), name)
    else:
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), params), name)
    args = list(fn.args)
    # names that make the text readable: n, in0, len0, ..., out0 | outs, res0
    names = ["n"] + [f"{kind}{j}" for j in range(len(spec.inputs)) for kind in ("in", "len")]
    names += ["outs"] if spec.packed else [f"out{j}" for j in range(len(spec.outputs))]
    names += [f"res{r}" for r in range(len(spec.reductions))]
    for arg, arg_name in zip(args, names):
        arg.name = arg_name
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    if object_offset is not None:
        args = [arg if not isinstance(want, ir.PointerType) else data_pointer(
                    ir, b, arg, want.pointee, object_offset, f"{arg.name}.data")
                for arg, want in zip(args, params)]
    n = args[0]
    in_ptrs = args[1:1 + 2 * len(spec.inputs):2]
    in_lens = args[2:2 + 2 * len(spec.inputs):2]
    rest = args[1 + 2 * len(spec.inputs):]
    if spec.packed:
        out_ptrs = [b.gep(rest[0], [b.mul(n, ir.Constant(i64, j))])
                    for j in range(len(spec.outputs))]
        rest = rest[1:]
    else:
        out_ptrs, rest = rest[:len(spec.outputs)], rest[len(spec.outputs):]
    result_ptrs = rest
    out_strides = spec.out_strides or (1,) * len(spec.outputs)
    vector_fns = vector_functions(module) if spec.vectorised else {}

    # the inner loop's length, and the inputs read once
    m = None
    if spec.inner is not None:
        how, j = spec.inner
        m = in_lens[j] if how == "suffix" else b.sdiv(n, in_lens[j], name="m")
    hoisted = {}
    for j, (dtype, index) in enumerate(spec.inputs):
        if index == "one":
            hoisted[j] = load(ir, b, in_ptrs[j], ir.Constant(i64, 0), dtype, f"x{j}")
    accumulators = [b.alloca(value_type(ir, acc)) for _, _, acc in spec.reductions]
    ok = b.alloca(i1) if spec.vectorised else None

    def start():
        for (kind, _, acc), slot in zip(spec.reductions, accumulators):
            b.store(reduction_start(ir, kind, acc), slot)
        if ok is not None:
            b.store(ir.Constant(i1, 1), ok)

    def body(i, k, r, fast):
        values = []
        loaded = dict(hoisted)

        def read(arg, dtype):
            kind, what = arg
            if kind == "c":
                return constant(ir, what, dtype)
            if kind == "t":
                have, value = spec.ops[what].out_dtype, values[what]
            else:
                have, index = spec.inputs[what]
                value = loaded.get(what)
                if value is None:
                    if type(index) is tuple:
                        at = _offset(ir, b, i, index[1])
                    else:
                        at = {"i": i, "k": k, "r": r}.get(index)
                    if index == "k%":
                        at = b.urem(k, in_lens[what])
                    value = loaded[what] = load(ir, b, in_ptrs[what], at, have, f"x{what}")
            return convert(ir, b, value, have, dtype)

        for op in spec.ops:
            operands = [read(a, d) for a, d in zip(op.args, op.arg_dtypes)]
            compute = op.arg_dtypes[-1]
            if op.vector and fast:
                x = convert(ir, b, operands[0], compute, np.float64)
                fabs = module.declare_intrinsic("llvm.fabs", [x.type])
                limit = VECTOR_FUNCTIONS[op.name][1]
                inside = b.fcmp_ordered("<=", b.call(fabs, [x]),
                                        ir.Constant(x.type, limit))
                b.store(b.and_(b.load(ok), inside), ok)
                value = b.call(vector_fns[VECTOR_FUNCTIONS[op.name][0]], [x])
                have = np.dtype(np.float64)
            else:
                value, have = _operation(ir, b, op.name, operands, compute)
            value = convert(ir, b, value, have, op.out_dtype)
            if isinstance(value, ir.Instruction) and value.name.startswith("."):
                # unnamed (not another operation's or an input's value)
                value.name = f"t{len(values)}"
            values.append(value)
        for (kind, arg, acc), slot in zip(spec.reductions, accumulators):
            x = read(arg, acc)
            b.store(reduction_step(ir, b, kind, b.load(slot), x, acc), slot)
        # written last, once every input of the element is read (an output
        # may go into a dying input's buffer)
        for t, ptr, stride in zip(spec.outputs, out_ptrs, out_strides):
            at = i if stride == 1 else b.mul(i, ir.Constant(i64, stride))
            store(ir, b, ptr, at, values[t], spec.ops[t].out_dtype)

    def loop(fast):
        if m is None:
            counted(ir, b, n, lambda i: body(i, None, None, fast), "i", scalar=few)
            return
        # m is 0 only when n is
        zero = ir.Constant(i64, 0)
        is_zero = b.icmp_signed("==", m, zero)
        rows = b.select(is_zero, zero, b.sdiv(n, b.select(is_zero, ir.Constant(i64, 1), m)))

        def row(r):
            offset = b.mul(r, m)
            counted(ir, b, m, lambda k: body(b.add(offset, k, name="i"), k, r, fast), "k",
                    scalar=few)
        counted(ir, b, rows, row, "r", scalar=few)

    start()
    loop(spec.vectorised)
    if spec.vectorised:
        # an argument beyond the vector functions' range, nan or inf: the
        # whole loop again, with the C library's functions
        again = b.append_basic_block("again")
        done = b.append_basic_block("done")
        b.cbranch(b.load(ok), done, again)
        b.position_at_end(again)
        start()
        loop(False)
        b.branch(done)
        b.position_at_end(done)
    for slot, ptr in zip(accumulators, result_ptrs):
        b.store(b.load(slot), ptr)
    b.ret_void()
    return fn


def _offset(ir, b, i, terms):
    """The element of an input read in place under broadcasting (index
    ``("at", terms)``): the sum of ``(i // period % length) * stride``. The
    numbers are constants, so LLVM divides by multiplying."""
    i64 = ir.IntType(64)
    at = None
    for period, length, stride in terms:
        x = i if period == 1 else b.udiv(i, ir.Constant(i64, period))
        if length is not None:
            x = b.urem(x, ir.Constant(i64, length))
        if stride != 1:
            x = b.mul(x, ir.Constant(i64, stride))
        at = x if at is None else b.add(at, x)
    return at if at is not None else ir.Constant(i64, 0)


def vector_functions(module):
    """`fgrad.compiler.vector_math`'s functions in ``module`` (defined at the
    first call for it): {name: function}."""
    names = {name for name, _ in VECTOR_FUNCTIONS.values()}
    if all(name in module.globals for name in names):
        return {name: module.globals[name] for name in names}
    return define_ir(module)


def load(ir, b, ptr, index, dtype, name):
    value = b.load(b.gep(ptr, [index]), name=name)
    if np.dtype(dtype).kind == "b":
        return b.icmp_unsigned("!=", value, ir.Constant(value.type, 0))
    return value


def store(ir, b, ptr, index, value, dtype):
    if np.dtype(dtype).kind == "b":
        value = b.zext(value, ir.IntType(8))
    b.store(value, b.gep(ptr, [index]))


def contiguous_strides(shape):
    """A C-contiguous array's strides, in elements.

    >>> contiguous_strides((2, 3, 4))
    (12, 4, 1)
    """
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def broadcast_strides(shape, out_shape):
    """The strides (in elements) at which a C-contiguous array of ``shape``
    is read broadcast to ``out_shape``: 0 along the axes broadcasting adds
    or stretches.

    >>> broadcast_strides((3, 1), (2, 3, 4))
    (0, 1, 0)
    """
    return (0,) * (len(out_shape) - len(shape)) + tuple(
        0 if n == 1 else s for n, s in zip(shape, contiguous_strides(shape)))


def strided_offset(ir, b, index, strides):
    """The i64 offset ``sum(index[d] * strides[d])`` of multi-index ``index``
    (i64 values) in an array of ``strides`` (elements), the axes of stride 0
    left out. ``index`` may be a generator: each axis's index is then
    written just before its term."""
    # no multiplication by 1 and no addition to 0: a program's many strided
    # loops wrote thousands, each one more instruction for LLVM to fold
    i64 = ir.IntType(64)
    total = None
    for i, s in zip(index, strides):
        if s:
            term = i if s == 1 else b.mul(i, ir.Constant(i64, s))
            total = term if total is None else b.add(total, term)
    return ir.Constant(i64, 0) if total is None else total


def counted(ir, b, count, body, name, start=None, scalar=False):
    """``for name in range(start, count): body(name)`` at builder ``b``
    (``start`` 0 when None; both i64 values); body may add blocks.
    ``scalar`` marks the loop one LLVM neither vectorises nor unrolls
    (`scalar_loop`): one that runs a few times at most."""
    # written as LLVM's loop rotation would leave it (the test at the bottom,
    # a guard before, none where the counts are constants that enter it):
    # that pass then has nothing to do on a program's hundreds of loops
    # (ode-lv-vmap's program function: 0.09 s of its 0.45 s of passes)
    i64 = ir.IntType(64)
    start = ir.Constant(i64, 0) if start is None else start
    before = b.block
    inside = b.append_basic_block(name + ".loop")
    after = b.append_basic_block(name + ".after")
    if isinstance(start, ir.Constant) and isinstance(count, ir.Constant) \
            and start.constant < count.constant:
        b.branch(inside)
    else:
        b.cbranch(b.icmp_signed("<", start, count), inside, after)
    b.position_at_end(inside)
    index = b.phi(i64, name=name)
    index.add_incoming(start, before)
    body(index)
    following = b.add(index, ir.Constant(i64, 1))
    index.add_incoming(following, b.block)
    back = b.cbranch(b.icmp_signed("<", following, count), inside, after)
    if scalar:
        back.set_metadata("llvm.loop", scalar_loop(ir, b.module))
    b.position_at_end(after)


def scalar_loop(ir, module):
    """Loop metadata (a new loop ID, for the branch back to a loop's head)
    asking LLVM not to vectorise or unroll the loop: for a loop of a few
    iterations whose count LLVM does not know, a vectorised loop never runs
    but its checks, vector body and epilogue cost most of the compile
    (ode-lv-jit's program: 0.82 s of LLVM's CPU, 0.46 s with its 87 kernels
    of at most 4 elements marked)."""
    vectorise = module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.enable"),
                                     ir.Constant(ir.IntType(1), 0)])
    unroll = module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])
    # a loop ID names itself first (LLVM ignores one that does not); llvmlite's
    # add_metadata makes no cycle, so the node is made and then pointed at itself
    loop_id = ir.MDValue(module, (), name=str(len(module.metadata)))
    loop_id.operands = (loop_id, vectorise, unroll)
    return loop_id


def data_pointer(ir, b, obj, element, object_offset, name=""):
    """The data of the array argument ``obj`` (an i8*) as a pointer to
    ``element`` (an IR type): the NumPy array object's data pointer, read at
    byte ``object_offset`` (`fgrad.compiler.native.array_data_offset`), or,
    with ``object_offset`` None, ``obj`` itself (a pointer to the data: a
    compiled program's functions take those); ``name`` names the value read."""
    if object_offset is None:
        return b.bitcast(obj, element.as_pointer())
    at = b.gep(obj, [ir.Constant(ir.IntType(64), object_offset)])
    return b.load(b.bitcast(at, element.as_pointer().as_pointer()), name=name)


def array_function(ir, name, dtype, ints, arrays, object_offset):
    """The module and entry builder of ``void name(i64 *ints, *arrays)``, for
    loops written by hand: each of ``arrays`` is a NumPy array object of
    float ``dtype`` whose data pointer is read at byte ``object_offset``
    (`fgrad.compiler.native`). Returns ``(module, builder, {int name: value},
    {array name: data pointer}, element type)``.

    >>> from fgrad.compiler import native
    >>> if native.available():                  # llvmlite is installed
    ...     from llvmlite import ir
    ...     _, _, ints, data, item = array_function(ir, "f", np.float32, ["n"], ["x"], 16)
    ...     assert (list(ints), list(data), str(item)) == (["n"], ["x"], "float")
    """
    item = value_type(ir, dtype)
    i64, i8p = ir.IntType(64), ir.IntType(8).as_pointer()
    module = ir.Module(name=name)
    fn = ir.Function(module, ir.FunctionType(
        ir.VoidType(), [i64] * len(ints) + [i8p] * len(arrays)), name)
    for arg, arg_name in zip(fn.args, tuple(ints) + tuple(arrays)):
        arg.name = arg_name
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    data = {arg_name: data_pointer(ir, b, obj, item, object_offset, f"{arg_name}.data")
            for arg_name, obj in zip(arrays, fn.args[len(ints):])}
    return module, b, dict(zip(ints, fn.args)), data, item


def reduction_start(ir, kind, dtype):
    dtype = np.dtype(dtype)
    if kind == "sum":
        return constant(ir, 0, dtype)
    if dtype.kind == "f":
        return constant(ir, float("-inf") if kind == "max" else float("inf"), dtype)
    if dtype.kind == "b":
        return constant(ir, kind == "min", dtype)
    info = np.iinfo(dtype)
    return constant(ir, info.min if kind == "max" else info.max, dtype)


def reduction_step(ir, b, kind, acc, x, dtype):
    dtype = np.dtype(dtype)
    if kind == "sum":
        if dtype.kind == "c":
            return complex_ir.add(ir, b, acc, x)
        return b.fadd(acc, x) if dtype.kind == "f" else b.add(acc, x)
    # max: take x unless acc >= x; a NaN is taken (the comparison fails), and
    # once acc is NaN (not equal to itself) it stays
    keeps = _compare(b, "greater_equal" if kind == "max" else "less_equal", acc, x, dtype)
    take = b.not_(keeps)
    if dtype.kind == "f":
        take = b.and_(b.fcmp_ordered("==", acc, acc), take)
    return b.select(take, x, acc)


@functools.lru_cache(maxsize=1)
def writer_digest():
    """The SHA-256 of the code that writes kernels' IR: this module's,
    `fgrad.compiler.vector_math`'s and `fgrad.compiler.complex_ir`'s. With a
    `KernelSpec.key`, it determines a kernel's IR (with
    `fgrad.compiler.complex_ir.numpy_fuses`, which it digests too), so a
    cache can keep compiled kernels under the two without
    writing the IR to look them up (`fgrad.compiler.native.compile_ir`).

    >>> len(writer_digest())
    64
    """
    digest = hashlib.sha256()
    for path in (__file__, vector_math.__file__, complex_ir.__file__):
        with open(path, "rb") as f:
            digest.update(f.read())
    digest.update(b"fused" if complex_ir.numpy_fuses() else b"unfused")
    return digest.hexdigest()
