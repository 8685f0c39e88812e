"""Complex numbers in the kernels' LLVM IR, computed as NumPy computes them.

A complex value is an LLVM struct of its two parts, ``{double, double}``
(``{float, float}`` for complex64): the layout NumPy stores, real part first,
so a kernel loads and stores an array's elements as they are. Each operation
is written as NumPy's loops compute it, so that the results are NumPy's bit
for bit (the tests compare them, NaN and inf parts included):

- ``+``, ``-``, negation, conjugation, ``real``, ``imag``, ``==``, ``!=``,
  ``isnan``, ``isinf``, ``isfinite``: part by part;
- ``*`` and ``square``: NumPy's SIMD loop (``simd_cmul``: ``a.re * b.re -
  a.im * b.im`` with the second product rounded and the first fused into the
  subtraction, likewise for the imaginary part) where its loop fuses, which
  `numpy_fuses` asks NumPy itself; two products and a sum where it does not;
- ``/``: Smith's algorithm as NumPy's ``divide`` loop writes it (the ratio of
  the divisor's smaller part to its larger, a zero divisor dividing each
  part by zero);
- ``absolute``: NumPy's SIMD ``cabsolute`` (an inf part gives inf, a NaN
  part NaN, else ``larger * sqrt(1 + ratio**2)``), fused as `numpy_fuses`
  says;
- ``angle``: the C library's ``atan2(imag, real)``, where NumPy may run its
  own SIMD ``arctan2``: equal to rounding;
- ``exp``, ``log``, ``sqrt`` and the trigonometric and hyperbolic functions
  and their inverses: the C library's (``cexp``, ``clog``, ``csqrt``,
  ``csin``, ...), which NumPy calls too, on x86-64 Linux (`LIBM_FUNCTIONS`:
  elsewhere they stay NumPy's); ``log2``, ``log10``, ``exp2`` and ``expm1``
  NumPy's formulas of those and of the C library's real functions, and
  ``power`` NumPy's ``npy_cpow`` (products for small integral exponents,
  the C library's ``cpow`` otherwise).
"""
import functools
import platform
import sys

import numpy as np

COMPLEX_DTYPES = frozenset(np.dtype(k) for k in ("complex64", "complex128"))
# the C library's complex functions a kernel calls, where the calling
# convention of C's complex values is known (x86-64's System V) and NumPy
# calls the same functions (glibc's: NumPy's own stand-ins are for C
# libraries without them)
LIBM_FUNCTIONS = {
    "exp": "cexp", "log": "clog", "sqrt": "csqrt", "sin": "csin", "cos": "ccos",
    "tan": "ctan", "sinh": "csinh", "cosh": "ccosh", "tanh": "ctanh", "arcsin": "casin",
    "arccos": "cacos", "arctan": "catan", "arcsinh": "casinh", "arccosh": "cacosh",
    "arctanh": "catanh",
} if sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64") else {}
# NumPy's own functions of those (funcs.inc.src): ``log`` or ``exp`` with
# each part scaled by a constant (NumPy's, written to more digits than a
# double holds, rounded once to the part's dtype)
_SCALED = {"log2": ("log", "after", "1.442695040888963407359924681001892137"),
           "log10": ("log", "after", "0.434294481903251827651128918916605082"),
           "exp2": ("exp", "before", "0.693147180559945309417232121458176568")} \
    if LIBM_FUNCTIONS else {}
# operations written for complex operands (`complex_operation`)
OPERATIONS = frozenset({
    "add", "subtract", "multiply", "divide", "negative", "square", "conjugate",
    "absolute", "real", "imag", "angle", "equal", "not_equal", "isnan", "isinf",
    "isfinite", "where", "convert_element_type"}) | frozenset(LIBM_FUNCTIONS) \
    | frozenset(_SCALED) | (frozenset({"expm1", "power"}) if LIBM_FUNCTIONS else frozenset())
# operations of a complex operand whose result is real
TO_REAL = frozenset({"absolute", "real", "imag", "angle"})


def part_dtype(dtype):
    """The dtype of each part of complex ``dtype``: float64 for complex128."""
    return np.dtype(f"f{np.dtype(dtype).itemsize // 2}")


def accumulator_dtype(dtype):
    """The dtype a sum of ``dtype`` values accumulates in, in order: float64
    for floats, complex128 for complex values, the dtype itself otherwise.

    >>> accumulator_dtype(np.complex64), accumulator_dtype(np.float32)
    (dtype('complex128'), dtype('float64'))
    """
    dtype = np.dtype(dtype)
    return np.dtype({"f": np.float64, "c": np.complex128}.get(dtype.kind, dtype))


@functools.lru_cache(maxsize=1)
def numpy_fuses():
    """Whether NumPy's complex ``multiply`` (and ``absolute``) on this CPU
    fuse a multiply into an add (its SIMD loops on a CPU with FMA), told by
    one product whose two roundings differ (computed by NumPy as its
    interpreted code computes it: a contiguous array).

    >>> numpy_fuses() in (True, False)
    True
    """
    a = 0.8840735011496481 + 0.4480918224776011j
    b = 0.0009310966083348601 - 0.00016983450808899766j
    product = (np.full(16, a) * np.full(16, b))[0]
    return float(product.real) != a.real * b.real - a.imag * b.imag


def complex_type(ir, dtype):
    part = ir.DoubleType() if part_dtype(dtype).itemsize == 8 else ir.FloatType()
    return ir.LiteralStructType([part, part])


def complex_constant(ir, value, dtype):
    """The constant ``value`` (a Python number) as a ``dtype`` value, each
    part rounded to the dtype as NumPy's ``dtype.type(value)`` rounds it."""
    z = complex(np.dtype(dtype).type(value))
    return ir.Constant(complex_type(ir, dtype), [z.real, z.imag])


def make(ir, b, re, im):
    """The complex value of parts ``re`` and ``im`` (IR values of one type)."""
    typ = ir.LiteralStructType([re.type, re.type])
    return b.insert_value(b.insert_value(ir.Constant(typ, ir.Undefined), re, 0), im, 1)


def parts(b, z):
    return b.extract_value(z, 0), b.extract_value(z, 1)


def to_complex(ir, b, value, source, target, convert):
    """``value`` (of dtype ``source``) as complex ``target``: a complex
    value's parts converted, a real one as the real part (imaginary part
    +0.0); ``convert`` converts a real value between real dtypes."""
    part = part_dtype(target)
    if np.dtype(source).kind == "c":
        re, im = parts(b, value)
        have = part_dtype(source)
        return make(ir, b, convert(ir, b, re, have, part), convert(ir, b, im, have, part))
    re = convert(ir, b, value, source, part)
    return make(ir, b, re, ir.Constant(re.type, 0.0))


def _fma(ir, b, x, y, z):
    fma = b.module.declare_intrinsic("llvm.fma", [x.type],
                                     ir.FunctionType(x.type, [x.type] * 3))
    return b.call(fma, [x, y, z])


def _multiply(ir, b, x, y):
    (a, c), (d, e) = parts(b, x), parts(b, y)
    if numpy_fuses():
        # NumPy's simd_cmul: a_im * (b_im, b_re), then fused with a_re * b
        # (subtracted for the real part, added for the imaginary one)
        return make(ir, b, _fma(ir, b, a, d, b.fneg(b.fmul(c, e))),
                    _fma(ir, b, a, e, b.fmul(c, d)))
    return _plain_multiply(ir, b, x, y)


def _divide(ir, b, x, y):
    """Smith's algorithm, as NumPy's loop: a NaN in the divisor takes the
    second branch (the comparison fails), as C's does."""
    (ar, ai), (br, bi) = parts(b, x), parts(b, y)
    fabs = b.module.declare_intrinsic("llvm.fabs", [br.type])
    abs_r, abs_i = b.call(fabs, [br]), b.call(fabs, [bi])
    one, zero = ir.Constant(br.type, 1.0), ir.Constant(br.type, 0.0)
    real_larger = b.fcmp_ordered(">=", abs_r, abs_i)
    by_zero = b.and_(b.fcmp_ordered("==", abs_r, zero), b.fcmp_ordered("==", abs_i, zero))
    # |br| >= |bi|: rat = bi / br, scl = 1 / (br + bi * rat)
    rat1 = b.fdiv(bi, br)
    scl1 = b.fdiv(one, b.fadd(br, b.fmul(bi, rat1)))
    re1 = b.fmul(b.fadd(ar, b.fmul(ai, rat1)), scl1)
    im1 = b.fmul(b.fsub(ai, b.fmul(ar, rat1)), scl1)
    # else: rat = br / bi, scl = 1 / (bi + br * rat)
    rat2 = b.fdiv(br, bi)
    scl2 = b.fdiv(one, b.fadd(bi, b.fmul(br, rat2)))
    re2 = b.fmul(b.fadd(b.fmul(ar, rat2), ai), scl2)
    im2 = b.fmul(b.fsub(b.fmul(ai, rat2), ar), scl2)
    # a zero divisor: each part over |br| (and |bi|): inf or NaN
    re0, im0 = b.fdiv(ar, abs_r), b.fdiv(ai, abs_i)
    re = b.select(real_larger, b.select(by_zero, re0, re1), re2)
    im = b.select(real_larger, b.select(by_zero, im0, im1), im2)
    return make(ir, b, re, im)


def _absolute(ir, b, x):
    """NumPy's SIMD ``cabsolute``: |re| and |im|; an inf part makes both
    inf, then a NaN part both NaN; ``larger * sqrt(1 + (smaller/larger)**2)``
    with the ratio 0 where ``larger`` is 0 or ``smaller`` inf."""
    re, im = parts(b, x)
    typ = re.type
    fabs = b.module.declare_intrinsic("llvm.fabs", [typ])
    re, im = b.call(fabs, [re]), b.call(fabs, [im])
    inf, nan = ir.Constant(typ, float("inf")), ir.Constant(typ, float("nan"))
    zero, one = ir.Constant(typ, 0.0), ir.Constant(typ, 1.0)
    re_inf, im_inf = b.fcmp_ordered("==", re, inf), b.fcmp_ordered("==", im, inf)
    im = b.select(re_inf, inf, im)
    re = b.select(im_inf, inf, re)
    re_number, im_number = b.fcmp_ordered("==", re, re), b.fcmp_ordered("==", im, im)
    im = b.select(re_number, im, nan)
    re = b.select(im_number, re, nan)
    larger = b.select(b.fcmp_ordered(">", re, im), re, im)
    smaller = b.select(b.fcmp_ordered("<", im, re), im, re)
    divides = b.not_(b.or_(b.fcmp_ordered("==", larger, zero),
                           b.fcmp_ordered("==", smaller, inf)))
    ratio = b.select(divides, b.fdiv(smaller, larger), zero)
    square = _fma(ir, b, ratio, ratio, one) if numpy_fuses() \
        else b.fadd(b.fmul(ratio, ratio), one)
    sqrt = b.module.declare_intrinsic("llvm.sqrt", [typ])
    return b.fmul(b.call(sqrt, [square]), larger)


def _libm(ir, b, name, x, dtype, *more):
    """The C library's complex function ``name`` of ``x`` (and ``more``
    complex arguments), called with x86-64's convention for C's complex
    values: a double complex as two doubles (returned in two registers), a
    float complex as one vector of two floats."""
    double = part_dtype(dtype).itemsize == 8
    name = name if double else name + "f"
    fn = b.module.globals.get(name)
    args = (x,) + more
    if double:
        if fn is None:
            typ = x.type.elements[0]
            fn = ir.Function(b.module, ir.FunctionType(x.type, [typ] * 2 * len(args)), name)
        return b.call(fn, [p for z in args for p in parts(b, z)])
    vector = ir.VectorType(ir.FloatType(), 2)
    if fn is None:
        fn = ir.Function(b.module, ir.FunctionType(vector, [vector] * len(args)), name)
    i32 = ir.IntType(32)
    packed = []
    for z in args:
        re, im = parts(b, z)
        packed.append(b.insert_element(b.insert_element(
            ir.Constant(vector, ir.Undefined), re, ir.Constant(i32, 0)), im,
            ir.Constant(i32, 1)))
    out = b.call(fn, packed)
    return make(ir, b, b.extract_element(out, ir.Constant(i32, 0)),
                b.extract_element(out, ir.Constant(i32, 1)))


def _plain_multiply(ir, b, x, y):
    """``x * y`` as NumPy's scalar helper (npymath's ``cmul``): two products
    and a sum a part, never fused."""
    (a, c), (d, e) = parts(b, x), parts(b, y)
    return make(ir, b, b.fsub(b.fmul(a, d), b.fmul(c, e)), b.fadd(b.fmul(a, e), b.fmul(c, d)))


def _power(ir, b, x, y, dtype):
    """NumPy's ``npy_cpow``: 1 for a zero exponent; 0 (or NaN) for a zero
    base; an integral real exponent under 100 in magnitude by products
    (``a``, ``a * a``, ``a * (a * a)``, else binary powers, inverted by
    Smith's division for a negative one); the C library's ``cpow``
    otherwise (called only there)."""
    (ar, ai), (br, bi) = parts(b, x), parts(b, y)
    typ, i64 = ar.type, ir.IntType(64)
    zero, one = ir.Constant(typ, 0.0), ir.Constant(typ, 1.0)
    complex_one = make(ir, b, one, zero)
    no_exponent = b.and_(b.fcmp_ordered("==", br, zero), b.fcmp_ordered("==", bi, zero))
    no_base = b.and_(b.fcmp_ordered("==", ar, zero), b.fcmp_ordered("==", ai, zero))
    small = b.and_(b.and_(b.fcmp_ordered("==", bi, zero),
                          b.fcmp_ordered(">", br, ir.Constant(typ, -100.0))),
                   b.fcmp_ordered("<", br, ir.Constant(typ, 100.0)))
    n = b.fptosi(b.select(small, br, zero), i64)
    integral = b.and_(small, b.fcmp_ordered("==", b.sitofp(n, typ), br))
    # binary powers: a set bit of |n| multiplies in a squared as often
    magnitude = b.select(b.icmp_signed("<", n, ir.Constant(i64, 0)), b.neg(n), n)
    product, square = complex_one, x
    for bit in range(7):                # |n| < 100 < 2**7
        taken = b.icmp_unsigned("!=", b.and_(magnitude, ir.Constant(i64, 1 << bit)),
                                ir.Constant(i64, 0))
        product = b.select(taken, _plain_multiply(ir, b, product, square), product)
        square = _plain_multiply(ir, b, square, square)
    powered = b.select(b.fcmp_ordered("<", br, zero), _divide(ir, b, complex_one, product),
                       product)
    x2 = _plain_multiply(ir, b, x, x)
    for k, value in ((3, _plain_multiply(ir, b, x, x2)), (2, x2), (1, x)):
        powered = b.select(b.icmp_signed("==", n, ir.Constant(i64, k)), value, powered)
    nan = ir.Constant(typ, float("nan"))
    at_zero = b.select(b.fcmp_ordered(">", br, zero), make(ir, b, zero, zero),
                       make(ir, b, nan, nan))
    computed = b.select(no_exponent, complex_one, b.select(no_base, at_zero, powered))
    # the C library's cpow where none of those applies (a call LLVM cannot drop)
    calls = b.not_(b.or_(b.or_(no_exponent, no_base), integral))
    before = b.block
    with b.if_then(calls):
        called = _libm(ir, b, "cpow", x, dtype, y)
        called_in = b.block
    result = b.phi(x.type)
    result.add_incoming(called, called_in)
    result.add_incoming(ir.Constant(x.type, ir.Undefined), before)
    return b.select(calls, result, computed)


def complex_operation(ir, b, name, args, dtype, libm_call):
    """``name`` (one of `OPERATIONS`) of ``args`` (complex IR values of
    ``dtype``; a ``where``'s condition a bool): ``(value, its dtype)``.
    ``libm_call(ir, b, name, args)`` calls the C library's real function
    ``name`` (``atan2``)."""
    dtype = np.dtype(dtype)
    part = part_dtype(dtype)
    x = args[0]
    if name in ("add", "subtract"):
        return _partwise(ir, b, b.fadd if name == "add" else b.fsub, x, args[1]), dtype
    if name == "multiply":
        return _multiply(ir, b, x, args[1]), dtype
    if name == "square":
        return _multiply(ir, b, x, x), dtype
    if name == "divide":
        return _divide(ir, b, x, args[1]), dtype
    if name == "power" and LIBM_FUNCTIONS:
        return _power(ir, b, x, args[1], dtype), dtype
    if name in ("negative", "conjugate"):
        re, im = parts(b, x)
        return make(ir, b, b.fneg(re) if name == "negative" else re, b.fneg(im)), dtype
    if name in ("real", "imag"):
        return parts(b, x)[0 if name == "real" else 1], part
    if name == "absolute":
        return _absolute(ir, b, x), part
    if name == "angle":
        re, im = parts(b, x)
        return libm_call(ir, b, "atan2", [im, re]), part
    if name in ("equal", "not_equal"):
        (a, c), (d, e) = parts(b, x), parts(b, args[1])
        if name == "equal":
            return b.and_(b.fcmp_ordered("==", a, d), b.fcmp_ordered("==", c, e)), \
                np.dtype(bool)
        return b.or_(b.fcmp_unordered("!=", a, d), b.fcmp_unordered("!=", c, e)), \
            np.dtype(bool)
    if name in ("isnan", "isinf", "isfinite"):
        re, im = parts(b, x)
        if name == "isnan":
            return b.or_(b.fcmp_unordered("uno", re, re), b.fcmp_unordered("uno", im, im)), \
                np.dtype(bool)
        fabs = b.module.declare_intrinsic("llvm.fabs", [re.type])
        inf = ir.Constant(re.type, float("inf"))
        re, im = b.call(fabs, [re]), b.call(fabs, [im])
        if name == "isinf":
            return b.or_(b.fcmp_ordered("==", re, inf), b.fcmp_ordered("==", im, inf)), \
                np.dtype(bool)
        return b.and_(b.fcmp_ordered("!=", re, inf), b.fcmp_ordered("!=", im, inf)), \
            np.dtype(bool)
    if name == "where":
        return b.select(x, args[1], args[2]), dtype
    if name == "convert_element_type":
        return x, dtype
    if name in LIBM_FUNCTIONS:
        return _libm(ir, b, LIBM_FUNCTIONS[name], x, dtype), dtype
    if name in _SCALED:
        inner, when, digits = _SCALED[name]
        scale = ir.Constant(parts(b, x)[0].type, float(part.type(digits)))
        if when == "before":
            x = make(ir, b, *(b.fmul(p, scale) for p in parts(b, x)))
        x = _libm(ir, b, LIBM_FUNCTIONS[inner], x, dtype)
        if when == "after":
            x = make(ir, b, *(b.fmul(p, scale) for p in parts(b, x)))
        return x, dtype
    if name == "expm1":
        # NumPy's: expm1(re) cos(im) - 2 sin(im / 2)**2 + i exp(re) sin(im)
        re, im = parts(b, x)
        two = ir.Constant(re.type, 2.0)
        a = libm_call(ir, b, "sin", [b.fdiv(im, two)])
        real = b.fsub(b.fmul(libm_call(ir, b, "expm1", [re]), libm_call(ir, b, "cos", [im])),
                      b.fmul(b.fmul(two, a), a))
        return make(ir, b, real, b.fmul(libm_call(ir, b, "exp", [re]),
                                        libm_call(ir, b, "sin", [im]))), dtype
    raise ValueError(f"{name} of {dtype} is not written in kernels")


def add(ir, b, x, y):
    """``x + y`` of complex values (a sum's step)."""
    return _partwise(ir, b, b.fadd, x, y)


def _partwise(ir, b, emit, x, y):
    """``emit`` (an add or a subtract) of the real parts and of the imaginary ones."""
    (a, c), (d, e) = parts(b, x), parts(b, y)
    return make(ir, b, emit(a, d), emit(c, e))
