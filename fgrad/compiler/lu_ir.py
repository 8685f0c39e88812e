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

from fgrad.compiler.kernel_ir import counted

#: bytes of one SIMD register: the lanes are as many elements as fill it
REGISTER_BYTES = 32


def lanes(dtype):
    """How many matrices of ``dtype`` `factor_ir`'s function factors at once.

    >>> lanes(np.float64), lanes(np.float32)
    (4, 8)
    """
    return REGISTER_BYTES // np.dtype(dtype).itemsize


def factor_ir(dtype, object_offset, name="lu_factor"):
    """IR text of ``void name(i64 count, i64 n, a, lu, piv, info, work)``:
    the LU factors, as LAPACK's ``getrf`` gives them, of each ``a[m]^T``
    (``a``: ``count`` C-ordered n x n matrices of float ``dtype``), written
    into ``lu[m]`` in C order, with the 1-based pivots into ``piv[m]`` (int32)
    and, for a matrix found singular, the 1-based column into ``info[m]``
    (int32, zero on entry). ``work`` is scratch of ``n * n * lanes(dtype)``
    elements of ``dtype``. Each array argument is the NumPy array object,
    whose data pointer is read at byte ``object_offset``
    (`fgrad.compiler.native`).
    """
    from llvmlite import ir
    width = lanes(dtype)
    item = {np.dtype(np.float64): ir.DoubleType(), np.dtype(np.float32): ir.FloatType()}[
        np.dtype(dtype)]
    vector = ir.VectorType(item, width)
    i64, i32, i8p = ir.IntType(64), ir.IntType(32), ir.IntType(8).as_pointer()
    module = ir.Module(name=name)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64, i64] + [i8p] * 5), name)
    count, n, *objects = fn.args
    for arg, arg_name in zip(fn.args, ("count", "n", "a", "lu", "piv", "info", "work")):
        arg.name = arg_name
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def const(value):
        return ir.Constant(i64, value)

    def data(obj, element):
        field = b.bitcast(b.gep(obj, [const(object_offset)]), element.as_pointer().as_pointer())
        return b.load(field)

    a, lu, piv, info, work = (data(obj, t) for obj, t in
                              zip(objects, (item, item, i32, i32, item)))
    # (llvmlite's declare_intrinsic names scalar overloads only)
    fabs = ir.Function(module, ir.FunctionType(vector, [vector]),
                       f"llvm.fabs.v{width}f{8 * np.dtype(dtype).itemsize}")
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
    return str(module)
