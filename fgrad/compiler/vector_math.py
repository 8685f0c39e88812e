"""sin, cos, exp and tanh for the fused CPU kernels, in a form LLVM vectorises.

A kernel that computes ``np.sin`` or ``np.exp`` by calling the C library
once per element pays for each call (sin 8-10 ns, exp 3-4 ns, tanh 11-13 ns
on an x86-64 core), and LLVM cannot vectorise a loop that makes such calls:
they were most of the time of an elementwise gradient (`jit-elem` in docs/performance.md), while
NumPy's own SIMD loops for exp and tanh are several times faster. The
functions here are straight-line arithmetic, inlined into the kernel's loop,
which LLVM turns into SIMD code (well under 1 ns an element each):

- sin and cos reduce the argument by the nearest multiple ``k`` of pi/2, with
  pi/2 split into four parts whose first three have 33 significant bits, so
  that ``k`` times each is exact for ``|k| < 2**20`` and the reduced argument
  keeps its precision even next to a multiple of pi/2 (Cody and Waite's
  method); on ``[-pi/4, pi/4]`` they are fdlibm's ``__kernel_sin`` and
  ``__kernel_cos`` minimax polynomials, and ``k mod 4`` picks which one, and
  its sign, is the answer;
- exp reduces by the nearest multiple ``k`` of ln 2 (ln 2 in two parts) and
  evaluates fdlibm's rational form of ``e**r`` on ``[-ln2/2, ln2/2]``; the
  factor ``2**k`` is built from its bits (an LLVM bitcast), since ``ldexp`` is
  a library call;
- tanh is Cephes' rational approximation below 0.625 in magnitude (where
  ``1 - 2 / (e**2x + 1)`` would cancel) and that formula, through the vector
  exp, above it.

Each agrees with the C library to 2 units in the last place for arguments up
to its limit in `VECTOR_FUNCTIONS` (sin and cos: where the reduction's
products stay exact; exp: where ``2**k`` is a normal number and the result
neither overflows nor leaves the normal range). A kernel that uses them also
checks every argument against its limit (nan and inf fail the check), and if
any fails it runs its whole loop again with the C library's functions
(`fgrad.compiler.kernel_ir` writes both loops), so special values and huge
arguments get the C library's answers. This module's text is part of a
kernel's cache key (`fgrad.compiler.kernel_ir.writer_digest`).
"""

# elementwise operation -> (the function a kernel calls on a float argument,
# the largest |x| it takes: beyond it, or for nan and inf, the loop reruns
# with the C library's function)
VECTOR_FUNCTIONS = {
    # k = round(x / (pi/2)) stays far below 2**20, where the products stop being exact
    "sin": ("vector_sin", 1e5),
    "cos": ("vector_cos", 1e5),
    # 2**k normal and the result normal: e**700 ~ 1e304, e**-700 ~ 1e-304
    "exp": ("vector_exp", 700.0),
    # any finite argument (the exp inside is clamped)
    "tanh": ("vector_tanh", 1e300),
}

# pi/2 = _PIO2_1 + _PIO2_2 + _PIO2_3 + _PIO2_4 (the first three of 33 bits)
_PIO2_1 = 1.57079632673412561417e+00
_PIO2_2 = 6.07710050630396597660e-11
_PIO2_3 = 2.02226624871116645580e-21
_PIO2_4 = 8.47842766036889956997e-32
_TWO_OVER_PI = 6.36619772367581382433e-01
# fdlibm's minimax coefficients on [-pi/4, pi/4]
_S1, _S2, _S3 = -1.66666666666666324348e-01, 8.33333333332248946124e-03, \
    -1.98412698298579493134e-04
_S4, _S5, _S6 = 2.75573137070700676789e-06, -2.50507602534068634195e-08, \
    1.58969099521155010221e-10
_C1, _C2, _C3 = 4.16666666666666019037e-02, -1.38888888888741095749e-03, \
    2.48015872894767294178e-05
_C4, _C5, _C6 = -2.75573143513906633035e-07, 2.08757232129817482790e-09, \
    -1.13596475577881948265e-11
# ln 2 = _LN2_HI + _LN2_LO (the first part's low bits zero: k * _LN2_HI is exact)
_LN2_HI, _LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e+00
# fdlibm's coefficients for e**r on [-ln2/2, ln2/2]
_P1, _P2, _P3 = 1.66666666666666019037e-01, -2.77777777770155933842e-03, \
    6.61375632143793436117e-05
_P4, _P5 = -1.65339022054652515390e-06, 4.13813679705723846039e-08
# Cephes' tanh(x) = x + x**3 P(x**2) / Q(x**2) for |x| < 0.625
_TP1, _TP2, _TP3 = -9.64399179425052238628e-1, -9.92877231001918586564e1, \
    -1.61468768441708447952e3
_TQ1, _TQ2, _TQ3 = 1.12811678491632931402e2, 2.23548839060100448583e3, \
    4.84406305325125486048e3

# ---------------------------------------------------------------------------
# The functions as LLVM IR, for the kernels `fgrad.compiler.kernel_ir` writes:
# on doubles (a float32 argument is widened first and the result narrowed by
# the caller)
# ---------------------------------------------------------------------------


def define_ir(module):
    """Define ``vector_sin``, ``vector_cos``, ``vector_exp`` and ``vector_tanh``
    (double to double, internal, always inlined) in the llvmlite ``module``;
    returns {name: function}."""
    from llvmlite import ir
    double, i64 = ir.DoubleType(), ir.IntType(64)

    def const(value):
        return ir.Constant(double, value)

    def horner(b, z, coefficients):
        # c0 + z * (c1 + z * (... + z * cn)), innermost first
        acc = const(coefficients[-1])
        for c in reversed(coefficients[:-1]):
            acc = b.fadd(const(c), b.fmul(z, acc))
        return acc

    functions = {}

    def define(name, body):
        fn = ir.Function(module, ir.FunctionType(double, [double]), name)
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
        b = ir.IRBuilder(fn.append_basic_block())
        b.ret(body(b, fn.args[0]))
        functions[name] = fn

    def rint(b, x):
        rint_fn = b.module.declare_intrinsic("llvm.rint", [double])
        return b.call(rint_fn, [x])

    def reduced(b, x):
        k = b.fadd(rint(b, b.fmul(x, const(_TWO_OVER_PI))), const(0.0))
        r = x
        for part in (_PIO2_1, _PIO2_2, _PIO2_3, _PIO2_4):
            r = b.fsub(r, b.fmul(k, const(part)))
        return r, b.and_(b.fptosi(k, i64), ir.Constant(i64, 3))

    def sin_kernel(b, r):
        z = b.fmul(r, r)
        s = b.fadd(r, b.fmul(b.fmul(z, r), horner(b, z, (_S1, _S2, _S3, _S4, _S5, _S6))))
        return b.select(b.fcmp_unordered("!=", r, const(0.0)), s, r)

    def cos_kernel(b, r):
        z = b.fmul(r, r)
        half = b.fmul(const(0.5), z)
        w = b.fsub(const(1.0), half)
        tail = b.fmul(b.fmul(z, z), horner(b, z, (_C1, _C2, _C3, _C4, _C5, _C6)))
        return b.fadd(w, b.fadd(b.fsub(b.fsub(const(1.0), w), half), tail))

    def bit(b, value, mask):
        return b.icmp_signed("!=", b.and_(value, ir.Constant(i64, mask)), ir.Constant(i64, 0))

    def sine(b, x):
        r, quadrant = reduced(b, x)
        v = b.select(bit(b, quadrant, 1), cos_kernel(b, r), sin_kernel(b, r))
        return b.select(bit(b, quadrant, 2), b.fneg(v), v)

    def cosine(b, x):
        r, quadrant = reduced(b, x)
        v = b.select(bit(b, quadrant, 1), sin_kernel(b, r), cos_kernel(b, r))
        return b.select(bit(b, b.add(quadrant, ir.Constant(i64, 1)), 2), b.fneg(v), v)

    def exponential(b, x):
        k = rint(b, b.fmul(x, const(_INV_LN2)))
        hi = b.fsub(x, b.fmul(k, const(_LN2_HI)))
        lo = b.fmul(k, const(_LN2_LO))
        r = b.fsub(hi, lo)
        z = b.fmul(r, r)
        c = b.fsub(r, b.fmul(z, horner(b, z, (_P1, _P2, _P3, _P4, _P5))))
        y = b.fsub(const(1.0), b.fsub(b.fsub(lo, b.fdiv(b.fmul(r, c), b.fsub(const(2.0), c))),
                                      hi))
        scale = b.shl(b.add(b.fptosi(k, i64), ir.Constant(i64, 1023)), ir.Constant(i64, 52))
        return b.fmul(y, b.bitcast(scale, double))

    def hyperbolic_tangent(b, x):
        fabs = b.module.declare_intrinsic("llvm.fabs", [double])
        a = b.call(fabs, [x])
        z = b.fmul(x, x)
        p = b.fadd(b.fmul(b.fadd(b.fmul(const(_TP1), z), const(_TP2)), z), const(_TP3))
        q = b.fadd(b.fmul(b.fadd(b.fmul(b.fadd(z, const(_TQ1)), z), const(_TQ2)), z),
                   const(_TQ3))
        small = b.fadd(x, b.fmul(b.fmul(x, z), b.fdiv(p, q)))
        small = b.select(b.fcmp_unordered("!=", x, const(0.0)), small, x)
        twice = b.fmul(const(2.0), a)
        clamped = b.select(b.fcmp_ordered("<", twice, const(40.0)), twice, const(40.0))
        e = b.call(functions["vector_exp"], [clamped])
        large = b.fsub(const(1.0), b.fdiv(const(2.0), b.fadd(e, const(1.0))))
        signed = b.select(b.fcmp_ordered(">=", x, const(0.0)), large, b.fneg(large))
        return b.select(b.fcmp_ordered("<", a, const(0.625)), small, signed)

    define("vector_sin", sine)
    define("vector_cos", cosine)
    define("vector_exp", exponential)
    define("vector_tanh", hyperbolic_tangent)
    return functions
