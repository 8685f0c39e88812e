"""LLVM IR of an LU factorization run on several small matrices at once.

LAPACK's ``getrf`` factors one matrix a call. At 32x32 it spends most of its
time outside arithmetic (the row search, the swaps, short rows of the
trailing update) and reaches about 3 GFLOP/s, where this CPU's vector units
do ten times that. `factor_ir` instead factors `lanes` (dtype) matrices together,
one per lane of a SIMD register (four doubles or eight floats in an AVX2
register): it copies them into a work array ``w[i, j, lane]``, so that every
step of the elimination -- the pivot search, the scaling of a column, each
update of the trailing matrix -- is one vector instruction for all of them.
A stack of 64 matrices 32x32 factors in about half the time of 64 ``getrf``
calls; past some 48x48 the work array no longer fits the caches and
``getrf``'s blocked algorithm wins (`fgrad.compiler.lu_kernels` chooses).

The result is ``getrf``'s, not only some LU factorization: each lane runs
LAPACK's unblocked algorithm (partial pivoting on the first largest
magnitude, the column scaled by the pivot's reciprocal, a rank-one update)
on the transpose of its matrix, as `fgrad.compiler.lu_kernels` stores it,
and the pivots and singular flags (``info``) are LAPACK's. Each lane's
arithmetic is its own: a singular or NaN matrix does not touch its
neighbours.
"""
import numpy as np

from fgrad.compiler.kernel_ir import counted, data_pointer

#: bytes of one SIMD register: the lanes are as many elements as fill it
REGISTER_BYTES = 32


def lanes(dtype):
    """How many matrices of ``dtype`` `factor_ir`'s function factors at once.

    >>> lanes(np.float64), lanes(np.float32)
    (4, 8)
    """
    return REGISTER_BYTES // np.dtype(dtype).itemsize


def factor_ir(dtype, object_offset, name="lu_factor", module=None):
    """IR text of ``void name(i64 count, i64 n, a, lu, piv, info, work)``:
    the LU factors, as LAPACK's ``getrf`` gives them, of each ``a[m]^T``
    (``a``: ``count`` C-ordered n x n matrices of float ``dtype``), written
    into ``lu[m]`` in C order, with the 1-based pivots into ``piv[m]`` (int32)
    and, for a matrix found singular, the 1-based column into ``info[m]``
    (int32, zero on entry). ``work`` is scratch of ``n * n * lanes(dtype)``
    elements of ``dtype``. Each array argument is the NumPy array object,
    whose data pointer is read at byte ``object_offset``
    (`fgrad.compiler.native`). Given an llvmlite ``module`` (a compiled
    program's), the function is defined in it and returned, its array
    arguments data pointers (``object_offset`` None).
    """
    from llvmlite import ir
    width = lanes(dtype)
    item = {np.dtype(np.float64): ir.DoubleType(), np.dtype(np.float32): ir.FloatType()}[
        np.dtype(dtype)]
    vector = ir.VectorType(item, width)
    i64, i32, i8p = ir.IntType(64), ir.IntType(32), ir.IntType(8).as_pointer()
    own_module = module is None
    module = ir.Module(name=name) if own_module else module
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64, i64] + [i8p] * 5), name)
    count, n, *objects = fn.args
    for arg, arg_name in zip(fn.args, ("count", "n", "a", "lu", "piv", "info", "work")):
        arg.name = arg_name
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def const(value):
        return ir.Constant(i64, value)

    a, lu, piv, info, work = (data_pointer(ir, b, obj, t, object_offset) for obj, t in
                              zip(objects, (item, item, i32, i32, item)))
    # (llvmlite's declare_intrinsic names scalar overloads only)
    fabs_name = f"llvm.fabs.v{width}f{8 * np.dtype(dtype).itemsize}"
    fabs = module.globals.get(fabs_name) or ir.Function(
        module, ir.FunctionType(vector, [vector]), fabs_name)
    zero, one = ir.Constant(item, 0.0), ir.Constant(item, 1.0)
    ones = ir.Constant(vector, [1.0] * width)

    def splat(index):                         # <index, index, ...>
        indices = ir.VectorType(i64, width)
        first = b.insert_element(ir.Constant(indices, ir.Undefined), index, const(0))
        return b.shuffle_vector(first, ir.Constant(indices, ir.Undefined),
                                ir.Constant(ir.VectorType(i32, width), [0] * width))

    def matrix_at(m, i, j):                   # &a[m, i, j] (the same for lu)
        return b.add(b.mul(b.add(b.mul(m, n), i), n), j)

    def w_at(i, j, lane):                     # &work[i, j, lane]
        return b.gep(work, [b.add(b.mul(b.add(b.mul(i, n), j), const(width)), lane)])

    def w_vector(i, j):                       # work[i, j, :]
        return b.bitcast(w_at(i, j, const(0)), vector.as_pointer())

    def chunk(c):
        m0 = b.mul(c, const(width))
        left = b.sub(count, m0)
        used = b.select(b.icmp_signed("<", left, const(width)), left, const(width))

        # work[i, j, lane] = a[m0 + lane, j, i]: the transpose; unused lanes
        # (the stack's last chunk) hold the identity
        def copy_in(j):
            def row(i):
                diagonal = b.select(b.icmp_signed("==", i, j), one, zero)
                for lane in range(width):
                    inside = b.icmp_signed("<", const(lane), used)
                    m = b.select(inside, b.add(m0, const(lane)), const(0))
                    value = b.load(b.gep(a, [matrix_at(m, j, i)]))
                    b.store(b.select(inside, value, diagonal), w_at(i, j, const(lane)))
            counted(ir, b, n, row, "in.i")
        counted(ir, b, n, copy_in, "in.j")

        def eliminate(k):
            # the pivot of column k in each lane: its first largest magnitude
            best = b.alloca(vector)
            where = b.alloca(ir.VectorType(i64, width))
            b.store(b.call(fabs, [b.load(w_vector(k, k), align=8)]), best)
            b.store(splat(k), where)

            def search(i):
                value = b.call(fabs, [b.load(w_vector(i, k), align=8)])
                larger = b.fcmp_ordered(">", value, b.load(best))
                b.store(b.select(larger, value, b.load(best)), best)
                b.store(b.select(larger, splat(i), b.load(where)), where)
            counted(ir, b, n, search, "search", start=b.add(k, const(1)))

            pivots = b.load(where)
            for lane in range(width):
                p = b.extract_element(pivots, const(lane))
                with b.if_then(b.icmp_signed("<", const(lane), used)):
                    b.store(b.trunc(b.add(p, const(1)), i32),
                            b.gep(piv, [b.add(b.mul(b.add(m0, const(lane)), n), k)]))
                with b.if_then(b.icmp_signed("!=", p, k)):
                    def swap(j, lane=lane, p=p):
                        x, y = w_at(k, j, const(lane)), w_at(p, j, const(lane))
                        x_value, y_value = b.load(x), b.load(y)
                        b.store(y_value, x)
                        b.store(x_value, y)
                    counted(ir, b, n, swap, "swap")
            # scale column k by the pivot's reciprocal; a zero pivot leaves the
            # column as it is (LAPACK's getf2) and flags the matrix singular
            diagonal = b.load(w_vector(k, k), align=8)
            singular = b.fcmp_ordered("==", diagonal, ir.Constant(vector, [0.0] * width))
            scale = b.select(singular, ones, b.fdiv(ones, diagonal))
            for lane in range(width):
                flag = b.and_(b.extract_element(singular, const(lane)),
                              b.icmp_signed("<", const(lane), used))
                with b.if_then(flag):
                    slot = b.gep(info, [b.add(m0, const(lane))])
                    with b.if_then(b.icmp_signed("==", b.load(slot), ir.Constant(i32, 0))):
                        b.store(b.trunc(b.add(k, const(1)), i32), slot)

            def update(i):
                at = w_vector(i, k)
                factor = b.fmul(b.load(at, align=8), scale)
                b.store(factor, at, align=8)

                def column(j):
                    target = w_vector(i, j)
                    product = b.fmul(factor, b.load(w_vector(k, j), align=8), flags=("contract",))
                    b.store(b.fsub(b.load(target, align=8), product, flags=("contract",)),
                            target, align=8)
                counted(ir, b, n, column, "update.j", start=b.add(k, const(1)))
            counted(ir, b, n, update, "update.i", start=b.add(k, const(1)))
        counted(ir, b, n, eliminate, "k")

        # lu[m0 + lane, j, i] = work[i, j, lane]
        def copy_out(lane):
            m = b.add(m0, lane)

            def column(j):
                def row(i):
                    b.store(b.load(w_at(i, j, lane)), b.gep(lu, [matrix_at(m, j, i)]))
                counted(ir, b, n, row, "out.i")
            counted(ir, b, n, column, "out.j")
        counted(ir, b, used, copy_out, "out.lane")

    counted(ir, b, b.udiv(b.add(count, const(width - 1)), const(width)), chunk, "chunk")
    b.ret_void()
    return str(module) if own_module else fn


# ---------------------------------------------------------------------------
# getrf once a matrix, and the solves with the factors
# ---------------------------------------------------------------------------

# (scalar element, elements a value spans) of each dtype a loop below reads
_PARTS = {np.dtype(np.float32): ("float", 1), np.dtype(np.float64): ("double", 1),
          np.dtype(np.complex64): ("float", 2), np.dtype(np.complex128): ("double", 2)}


def getrf_loop_ir(dtype, object_offset, name="lu_getrf"):
    """IR text of ``void name(i64 count, i64 n, i64 getrf, lu, piv, info)``:
    LAPACK's ``getrf`` (its address, Fortran's conventions) called on each of
    the ``count`` C-ordered n x n matrices of ``lu`` (``dtype``), in place,
    with ``piv[m]`` and ``info[m]`` (int32) its pivots and flag. The address
    is an argument, never a constant: it changes from process to process,
    and the machine code is kept on disk."""
    from llvmlite import ir
    i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
    i8p, i32p = i8.as_pointer(), i32.as_pointer()
    module = ir.Module(name=name)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64] * 3 + [i8p] * 3), name)
    count, n, address, *objects = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    lu, piv, info = (data_pointer(ir, b, obj, i8, object_offset) for obj in objects)
    getrf = b.inttoptr(address, ir.FunctionType(ir.VoidType(), [i32p, i32p, i8p, i32p,
                                                                i32p, i32p]).as_pointer())
    size = b.alloca(i32)                # Fortran takes every argument by reference
    b.store(b.trunc(n, i32), size)
    matrix_bytes = b.mul(b.mul(n, n), ir.Constant(i64, np.dtype(dtype).itemsize))
    pivots, flags = b.bitcast(piv, i32p), b.bitcast(info, i32p)

    def call(m):
        b.call(getrf, [size, size, b.gep(lu, [b.mul(m, matrix_bytes)]), size,
                       b.gep(pivots, [b.mul(m, n)]), b.gep(flags, [m])])
    counted(ir, b, count, call, "m")
    b.ret_void()
    return str(module)


class _Scalars:
    """Loads, stores and arithmetic of real or complex values at builder
    ``b``; a complex value is a (real, imaginary) pair, multiplied by the
    textbook product and divided by CPython's quotient."""

    def __init__(self, ir, b, dtype):
        self.ir, self.b = ir, b
        scalar, self.parts = _PARTS[np.dtype(dtype)]
        self.item = ir.DoubleType() if scalar == "double" else ir.FloatType()

    def load(self, ptr, index):
        b, i64 = self.b, self.ir.IntType(64)
        if self.parts == 1:
            return b.load(b.gep(ptr, [index]))
        at = b.mul(index, i64(2))
        return b.load(b.gep(ptr, [at])), b.load(b.gep(ptr, [b.add(at, i64(1))]))

    def store(self, value, ptr, index):
        b, i64 = self.b, self.ir.IntType(64)
        if self.parts == 1:
            b.store(value, b.gep(ptr, [index]))
            return
        at = b.mul(index, i64(2))
        b.store(value[0], b.gep(ptr, [at]))
        b.store(value[1], b.gep(ptr, [b.add(at, i64(1))]))

    def multiply_subtract(self, w, v, x):
        """``w - v * x``."""
        b = self.b
        if self.parts == 1:
            return b.fsub(w, b.fmul(v, x))
        (a, c), (e, d) = v, x
        product = (b.fsub(b.fmul(a, e), b.fmul(c, d)), b.fadd(b.fmul(a, d), b.fmul(c, e)))
        return b.fsub(w[0], product[0]), b.fsub(w[1], product[1])

    def divide(self, x, d):
        """``x / d``; a complex quotient by CPython's (Smith's) algorithm."""
        b = self.b
        if self.parts == 1:
            return b.fdiv(x, d)
        (xr, xi), (dr, di) = x, d
        fabs = self.b.module.declare_intrinsic("llvm.fabs", [self.item])
        by_real = b.fcmp_ordered(">=", b.call(fabs, [dr]), b.call(fabs, [di]))
        # |dr| >= |di|: the ratio di / dr; else dr / di
        ratio = b.select(by_real, b.fdiv(di, dr), b.fdiv(dr, di))
        denom = b.select(by_real, b.fadd(dr, b.fmul(di, ratio)),
                         b.fadd(b.fmul(dr, ratio), di))
        real = b.select(by_real, b.fadd(xr, b.fmul(xi, ratio)),
                        b.fadd(b.fmul(xr, ratio), xi))
        imag = b.select(by_real, b.fsub(xi, b.fmul(xr, ratio)),
                        b.fsub(b.fmul(xi, ratio), xr))
        return b.fdiv(real, denom), b.fdiv(imag, denom)


def solve_ir(dtype, transpose, object_offset, name="lu_solve", module=None):
    """IR text of ``void name(i64 count, i64 n, i64 k, i64 lu_step, i64
    piv_step, i64 b_step, lu, piv, b, x)``: ``x[m] = a^-1 b[m]`` (``a^-T``
    with ``transpose``) for the factors ``lu`` (C-ordered n x n matrices,
    ``lu_step`` elements apart: 0 repeats one) and pivots ``piv``
    (``piv_step`` apart) of each ``a^T`` as `fgrad.compiler.lu_kernels`
    keeps them, ``b`` (n x k, ``b_step`` apart) and ``x`` (C order) of
    ``dtype``.

    The factors in ``lu[m]`` are ``F = L\\U`` of ``a^T = P L U`` stored
    transposed, ``lu[m][i, j] = F[j, i]``, so ``a x = b`` is a forward
    substitution with ``U^T`` (lu's lower triangle and diagonal), a back
    substitution with ``L^T`` (its strict upper one, unit diagonal), then
    P's row swaps in reverse order; ``a^T x = b`` is the swaps in order, then
    ``L`` and ``U`` read by rows of lu. Each update runs along a row of
    ``x`` (the right-hand sides), which LLVM vectorises; row by row, each
    row would wait on its own last update (a third slower at 32x32). They
    are substitutions written out, not LAPACK's ``getrs``: OpenBLAS runs
    getrs's triangular solves on its thread pool once there are two
    right-hand sides, and on a busy machine waking it took some 7 ms a call
    against 40 us for a 20x20 system. ``module``: as `factor_ir`'s.
    """
    from llvmlite import ir
    i8p, i32, i64 = ir.IntType(8).as_pointer(), ir.IntType(32), ir.IntType(64)
    own_module = module is None
    module = ir.Module(name=name) if own_module else module
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64] * 6 + [i8p] * 4), name)
    count, n, k, lu_step, piv_step, b_step, *objects = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    s = _Scalars(ir, b, dtype)
    lu_all, piv_all, b_all, x_all = (data_pointer(ir, b, obj, t, object_offset)
                                     for obj, t in zip(objects, (s.item, i32, s.item, s.item)))
    one = i64(1)
    parts = i64(s.parts)

    def reversed_range(count_, body, name_):
        counted(ir, b, count_, lambda r: body(b.sub(b.sub(count_, one), r)), name_)

    def per_matrix(m):
        f = b.gep(lu_all, [b.mul(b.mul(m, lu_step), parts)])
        p = b.gep(piv_all, [b.mul(m, piv_step)])
        src = b.gep(b_all, [b.mul(b.mul(m, b_step), parts)])
        w = b.gep(x_all, [b.mul(b.mul(m, b.mul(n, k)), parts)])
        counted(ir, b, b.mul(b.mul(n, k), parts),
                lambda i: b.store(b.load(b.gep(src, [i])), b.gep(w, [i])), "copy")

        def at(i, c):
            return b.add(b.mul(i, k), c)

        def swap(r):
            q = b.sub(b.sext(b.load(b.gep(p, [r])), i64), one)

            def column(c):
                x, y = s.load(w, at(r, c)), s.load(w, at(q, c))
                s.store(y, w, at(r, c))
                s.store(x, w, at(q, c))
            counted(ir, b, k, column, "swap.c")

        def update(i, j, v):                    # w[i, :] -= v * w[j, :]
            counted(ir, b, k, lambda c: s.store(s.multiply_subtract(
                s.load(w, at(i, c)), v, s.load(w, at(j, c))), w, at(i, c)), "update.c")

        def scale(j, d):                        # w[j, :] /= d
            counted(ir, b, k, lambda c: s.store(s.divide(s.load(w, at(j, c)), d),
                                                w, at(j, c)), "scale.c")

        def matrix(i, j):
            return s.load(f, b.add(b.mul(i, n), j))
        if transpose:
            counted(ir, b, n, swap, "swap")
            counted(ir, b, n, lambda j: counted(
                ir, b, n, lambda i: update(i, j, matrix(j, i)), "l.i", start=b.add(j, one)),
                "l.j")

            def back(j):
                scale(j, matrix(j, j))
                counted(ir, b, j, lambda i: update(i, j, matrix(j, i)), "u.i")
            reversed_range(n, back, "u.j")
        else:
            def forward(j):
                scale(j, matrix(j, j))
                counted(ir, b, n, lambda i: update(i, j, matrix(i, j)), "u.i",
                        start=b.add(j, one))
            counted(ir, b, n, forward, "u.j")
            reversed_range(n, lambda j: counted(
                ir, b, j, lambda i: update(i, j, matrix(i, j)), "l.i"), "l.j")
            reversed_range(n, swap, "swap")
    counted(ir, b, count, per_matrix, "m")
    b.ret_void()
    return str(module) if own_module else fn
