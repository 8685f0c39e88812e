"""Linear algebra in a compiled program: products and LAPACK calls, no callouts.

`fgrad.compiler.program` first rewrites each ``einsum`` of two float operands
as a ``matmul`` (`einsums_as_products`): the operands' axes are transposed
into (batch, free, contracted) order and reshaped to (batch, m, k) and
(batch, k, n) stacks, and the product back into the output's order; the
program lowers those equations as it lowers any (gemm, copies, views, a
transpose of the last two axes folded into gemm's flags). A letter that one
operand alone sums over, or repeats (a diagonal), stays NumPy's einsum.

It then asks `linalg_step` for each equation it lowers; an
equation this module knows becomes a step that calls SciPy's LAPACK through
the program's table of routine addresses (`fgrad.compiler.blas`):

- ``solve_factors`` (the LU factors `fgrad.numpy.linalg.solve` keeps for its
  derivative) of matrices larger than `fgrad.compiler.lu_kernels.LANES_MAX_N`,
  or of fewer matrices than `fgrad.compiler.lu_ir.lanes` (one 3x3 system), is
  ``getrf`` on a copy of each: a C-ordered matrix read column-major is
  its transpose, so the factors are those of ``a^T``, as
  `fgrad.compiler.lu_kernels` keeps them, with the same int32 pivots;
- ``factored_solve`` with such factors is ``getrs`` (``"T"`` solves with
  ``a``, ``"N"`` with ``a^T``), several right-hand sides copied into
  column-major order first, while fewer than OpenBLAS's threads need;
- ``cholesky`` is ``potrf`` (``"L"``) on each matrix copied into column-major
  order, its upper triangle then zeroed: the calls NumPy's own cholesky makes.
- ``det`` and ``slogdet`` are ``getrf`` of a column-major copy and NumPy's
  own sums along the diagonal (`Determinant`);
- ``inv``, ``eigh``, ``qr`` and ``svd`` are the LAPACK calls NumPy's linalg
  makes (`Inverse`, `Eigh`, `QR`, `SVD`: ``gesv``, ``syevd``, ``geqrf`` and
  ``orgqr``, ``gesdd``), on the same float64 column-major copies;
- ``identity_like`` and ``tri_like``, the masks their derivatives use, are
  loops (`Pattern`).

Measured against the interpreted tier's LU kernels (64 solves of 32x32 and
16 of 49x49 matrices, one core): ``getrf`` of smaller matrices took twice as
long as their several-at-once factoring (fewer matrices than that kernel's
lanes gain nothing from it, and a callout costs about 4 us: those are
``getrf`` here), and ``getrs`` of several right-hand sides lost to their
substitution loops called one column at a time (0.37 ms against 0.28 for 16
49x49 systems of 8), and all at once woke OpenBLAS's thread pool (125 ms
against 0.25 for 4 64x64 systems of 64); a vector right-hand side gained
(0.19 ms against 0.26 for 16 of 49). Those run the kernels' own loops
(`fgrad.compiler.lu_ir`), defined in the program (`LanesFactor`,
`LanesSolve`), except where fewer matrices than the kernels' lanes leave
them nothing to gain (qr's derivative solves with one ``r``).

A factorization that LAPACK reports singular, or a decomposition that did
not converge (``info`` not 0), runs its equation again by the primitive's
NumPy code (a callout), which raises NumPy's error, as the interpreted tier
does. Results are to rounding those of
the interpreted tier: bitwise where it runs the same LAPACK routine (``getrf``
for matrices larger than `fgrad.compiler.lu_kernels.LANES_MAX_N`; ``potrf``
where NumPy's LAPACK and SciPy's are the same build); its solves substitute
in a loop of their own, where here ``getrs`` does.
"""
import ctypes
import math

import numpy as np

from fgrad.compiler.blas import (
    GEMM_DTYPES,
    BLAS_THREADED_WORK,
    MAX_BLAS_INT,
    PREFIXES,
    call_lapack,
    gemm_table,
    routine_index,
)
from fgrad.compiler.kernel_ir import convert, counted, storage_type
from fgrad.compiler.lu_ir import factor_ir, lanes, solve_ir
from fgrad.compiler.lu_kernels import LANES_MAX_N
from fgrad.compiler.native_steps import (
    NativeStep,
    call_out_if,
    constant_cell,
    new_flag,
    raise_flag,
)
from fgrad.core.graph import Equation, Graph, Literal, Var
from fgrad.primitives.einsum import einsum_p, identity_like_p, split_subscripts
from fgrad.primitives.linalg import (
    cholesky_p,
    det_p,
    eigh_p,
    factored_solve_p,
    inv_p,
    lu_kept,
    qr_p,
    slogdet_p,
    solve_factors_p,
    svd_p,
    tri_like_p,
)
from fgrad.primitives.products import matmul_p
from fgrad.primitives.shape import reshape_p, transpose_p


# ---------------------------------------------------------------------------
# einsum as matmul
# ---------------------------------------------------------------------------


def einsums_as_products(graph):
    """``graph``, each einsum of two float operands that `_einsum_product`
    can write as a matmul replaced by its transposes, reshapes and matmul
    (the same inputs and outputs; ``graph`` itself when there is none).

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> g = fgrad.make_graph(lambda a, b: fnp.einsum("ij,kj->ki", a, b))(
    ...     np.ones((2, 3)), np.ones((4, 3)))
    >>> [e.prim.name for e in einsums_as_products(g).eqns]
    ['transpose', 'matmul', 'transpose']
    """
    eqns, changed = [], False
    for eqn in graph.eqns:
        product = _einsum_product(eqn) if eqn.prim is einsum_p else None
        eqns += product or [eqn]
        changed = changed or product is not None
    return Graph(graph.invars, eqns, graph.outvars) if changed else graph


def _einsum_product(eqn):
    if len(eqn.invars) != 2:
        return None
    (a, b), (c,) = eqn.invars, eqn.outvars
    dtype = np.dtype(c.aval.dtype)
    if dtype not in GEMM_DTYPES or any(np.dtype(v.aval.dtype) != dtype for v in (a, b)):
        return None
    (sa, sb), out = split_subscripts(eqn.params["subscripts"])
    if any(len(set(s)) != len(s) for s in (sa, sb, out)) \
            or any(x not in other and x not in out for s, other in ((sa, sb), (sb, sa))
                   for x in s):
        return None
    size = dict(zip(sa, a.aval.shape)) | dict(zip(sb, b.aval.shape))
    batch = [x for x in out if x in sa and x in sb]
    free_a = [x for x in out if x in sa and x not in sb]
    free_b = [x for x in out if x in sb and x not in sa]
    summed = [x for x in sa if x in sb and x not in out]
    lead = (math.prod(size[x] for x in batch),) if batch else ()
    m, n, k = (math.prod(size[x] for x in group) for group in (free_a, free_b, summed))
    eqns = []

    def then(prim, v, shape, params, to=None):
        to = Var(type(v.aval)(tuple(shape), dtype)) if to is None else to
        eqns.append(Equation(prim, [v], [to], params))
        return to

    def arranged(v, letters, order, shape):
        axes = tuple(letters.index(x) for x in order)
        if type(v) is Literal:          # a constant: arranged here, once
            value = np.ascontiguousarray(np.transpose(np.asarray(v.value, dtype), axes))
            value = value.reshape(shape)
            return Literal(value, type(v.aval)(shape, dtype))
        if axes != tuple(range(len(axes))):
            v = then(transpose_p, v, [size[x] for x in order], {"axes": axes})
        if tuple(v.aval.shape) != shape:
            v = then(reshape_p, v, shape, {"shape": shape})
        return v
    a3 = arranged(a, sa, batch + free_a + summed, lead + (m, k))
    b3 = arranged(b, sb, batch + summed + free_b, lead + (k, n))
    # the product, then back to the output's shape and order: the last
    # equation writes ``c``
    order = batch + free_a + free_b
    tail = []
    if tuple(size[x] for x in order) != lead + (m, n):
        tail.append((reshape_p, [size[x] for x in order], {"shape": tuple(size[x] for x in order)}))
    axes = tuple(order.index(x) for x in out)
    if axes != tuple(range(len(axes))):
        tail.append((transpose_p, [size[x] for x in out], {"axes": axes}))
    product = Var(type(c.aval)(lead + (m, n), dtype)) if tail else c
    eqns.append(Equation(matmul_p, [a3, b3], [product], {}))
    v = product
    for j, (prim, shape, params) in enumerate(tail):
        v = then(prim, v, shape, params, c if j == len(tail) - 1 else None)
    return eqns


# ---------------------------------------------------------------------------
# LAPACK steps
# ---------------------------------------------------------------------------


def linalg_step(eqn, index):
    """The `fgrad.compiler.native_steps.NativeStep` of LAPACK calls that
    equation ``eqn`` (labelled ``index``) lowers to, or None.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> g = fgrad.make_graph(fnp.linalg.cholesky)(np.eye(3))
    >>> [type(linalg_step(e, k)).__name__ for k, e in enumerate(g.eqns)][-1] in (
    ...     "Cholesky", "NoneType")                  # NoneType: without SciPy
    True
    """
    make = _STEPS.get(eqn.prim)
    if make is None or gemm_table() is None:
        return None
    avals = [v.aval for v in list(eqn.invars) + list(eqn.outvars)]
    if any(math.prod(a.shape) == 0 or max(a.shape, default=1) > MAX_BLAS_INT
           for a in avals):
        return None
    return make(eqn, index)


def _float_matrix(aval):
    return np.dtype(aval.dtype) in PREFIXES and aval.ndim >= 2


def _routine(ir, b, table, name, dtype, arguments):
    """The routine's address from the table, cast to a function of pointer
    ``arguments`` returning nothing."""
    address = b.load(b.gep(table, [ir.Constant(ir.IntType(64), routine_index(name, dtype))]))
    return b.inttoptr(address, ir.FunctionType(ir.VoidType(), arguments).as_pointer())


def _at(ir, b, ptr, index):
    return b.gep(ptr, [index])


def _offset(ir, b, index, size):
    return b.mul(index, ir.Constant(ir.IntType(64), size))


def _note_failure(ir, b, info, flag):
    raise_flag(ir, b, flag, b.icmp_signed("!=", b.load(info), ir.Constant(ir.IntType(32), 0)))


_F64 = np.dtype(np.float64)
_I32 = np.dtype(np.int32)


def _scratch(like, shape, dtype=_F64):
    """A value of ``shape`` and ``dtype`` of the kind of aval ``like``: a
    step's scratch, which the buffer plan places."""
    return Var(type(like)(tuple(shape), np.dtype(dtype)))


def _columns_in(ir, b, src, base, shape, dst, dtype, target=_F64):
    """The C-ordered ``shape`` matrix at element ``base`` of ``src`` (of
    ``dtype``) into ``dst`` in column-major order, as ``target`` values."""
    rows, cols = (ir.Constant(ir.IntType(64), n) for n in shape)

    def row(i):
        def col(j):
            x = b.load(_at(ir, b, src, b.add(base, b.add(b.mul(i, cols), j))))
            b.store(convert(ir, b, x, dtype, target), _at(ir, b, dst, b.add(b.mul(j, rows), i)))
        counted(ir, b, cols, col, "cin.j")
    counted(ir, b, rows, row, "cin.i")


def _columns_out(ir, b, src, ld, dst, base, shape, dtype, source=_F64, upper=False):
    """The column-major matrix ``src`` of ``source`` values (leading
    dimension ``ld``) into the C-ordered ``shape`` matrix at element ``base``
    of ``dst``, rounded to ``dtype``; below the diagonal zeros where ``upper``."""
    i64 = ir.IntType(64)
    rows, cols = (ir.Constant(i64, n) for n in shape)
    zero = ir.Constant(storage_type(ir, dtype), 0.0)

    def row(i):
        def col(j):
            x = convert(ir, b, b.load(_at(ir, b, src, b.add(b.mul(j, ir.Constant(i64, ld)), i))),
                        source, dtype)
            if upper:
                x = b.select(b.icmp_signed("<", j, i), zero, x)
            b.store(x, _at(ir, b, dst, b.add(base, b.add(b.mul(i, cols), j))))
        counted(ir, b, cols, col, "cout.j")
    counted(ir, b, rows, row, "cout.i")


# ---------------------------------------------------------------------------
# The steps
# ---------------------------------------------------------------------------


class LUFactor(NativeStep):
    """``solve_factors``: ``getrf`` on a copy of each matrix."""

    calls_blas = True

    fallback = True

    def emit(self, ir, b, pointer, table, call_out, alloca):
        (a,), (lu, piv) = self.eqn.invars, self.eqn.outvars
        dtype, n = np.dtype(a.aval.dtype), a.aval.shape[-1]
        count = math.prod(a.aval.shape[:-2])
        i32, i64 = ir.IntType(32), ir.IntType(64)
        item = storage_type(ir, dtype).as_pointer()
        src, dst, pivots = pointer(a), pointer(lu), pointer(piv)
        counted(ir, b, ir.Constant(i64, count * n * n),
                lambda i: b.store(b.load(_at(ir, b, src, i)), _at(ir, b, dst, i)), "lu.copy")
        iptr = i32.as_pointer()
        getrf = _routine(ir, b, table, "getrf", dtype, [iptr, iptr, item, iptr, iptr, iptr])
        info, flag = alloca(i32), new_flag(ir, b, alloca)
        size = constant_cell(ir, b, i32, n)

        def factor(m):
            b.call(getrf, [size, size, _at(ir, b, dst, _offset(ir, b, m, n * n)), size,
                           _at(ir, b, pivots, _offset(ir, b, m, n)), info])
            _note_failure(ir, b, info, flag)
        counted(ir, b, ir.Constant(i64, count), factor, "lu.matrix")
        call_out_if(ir, b, flag, call_out)


class LUSolve(NativeStep):
    """``factored_solve``: ``getrs`` with the factors, on a copy of the
    right-hand sides (several of them in column-major order: scratch)."""

    calls_blas = True

    def emit(self, ir, b, pointer, table, call_out, alloca):
        _, lu, piv, rhs = self.eqn.invars
        (x,) = self.eqn.outvars
        dtype, (n, k) = np.dtype(x.aval.dtype), x.aval.shape[-2:]
        count = math.prod(x.aval.shape[:-2])
        i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
        item = storage_type(ir, dtype).as_pointer()
        iptr = i32.as_pointer()
        getrs = _routine(ir, b, table, "getrs", dtype,
                         [i8.as_pointer(), iptr, iptr, item, iptr, iptr, item, iptr, iptr])
        # the factors are those of a^T: "T" solves with a, "N" with a^T
        trans = constant_cell(ir, b, i8, ord("N" if self.eqn.params["transpose"] else "T"))
        size, columns = constant_cell(ir, b, i32, n), constant_cell(ir, b, i32, k)
        info = alloca(i32)
        factors, pivots, src, dst = pointer(lu), pointer(piv), pointer(rhs), pointer(x)
        cols = pointer(self.scratch[0]) if self.scratch else dst
        if not self.scratch:
            counted(ir, b, ir.Constant(i64, count * n),
                    lambda i: b.store(b.load(_at(ir, b, src, i)), _at(ir, b, dst, i)),
                    "rs.copy")

        def matrix(m):
            base = _offset(ir, b, m, n * k)
            if self.scratch:
                _columns_in(ir, b, src, base, (n, k), cols, dtype, dtype)
            b.call(getrs, [trans, size, columns, _at(ir, b, factors, _offset(ir, b, m, n * n)),
                           size, _at(ir, b, pivots, _offset(ir, b, m, n)),
                           cols if self.scratch else _at(ir, b, dst, base), size, info])
            if self.scratch:
                _columns_out(ir, b, cols, n, dst, base, (n, k), dtype, dtype)
        counted(ir, b, ir.Constant(i64, count), matrix, "rs.matrix")


class LanesFactor(NativeStep):
    """``solve_factors`` of a stack of small matrices: the LU kernels' own
    loop (`fgrad.compiler.lu_ir.factor_ir`, several matrices at once),
    defined in the program; a matrix it finds singular runs the equation by
    NumPy's code, which raises."""

    fallback = True

    def emit(self, ir, b, pointer, table, call_out, alloca):
        (a,), (lu, piv) = self.eqn.invars, self.eqn.outvars
        work, info = self.scratch
        dtype, n = np.dtype(a.aval.dtype), a.aval.shape[-1]
        count = math.prod(a.aval.shape[:-2])
        i8p, i32, i64 = ir.IntType(8).as_pointer(), ir.IntType(32), ir.IntType(64)
        name = f"lu_factor_{dtype.name}"
        factor = b.module.globals.get(name) or factor_ir(dtype, None, name, b.module)
        flags, flag = pointer(info), new_flag(ir, b, alloca)
        counted(ir, b, ir.Constant(i64, count),
                lambda m: b.store(ir.Constant(i32, 0), _at(ir, b, flags, m)), "lf.zero")
        b.call(factor, [ir.Constant(i64, count), ir.Constant(i64, n)] + [
            b.bitcast(pointer(v), i8p) for v in (a, lu, piv, info, work)])
        counted(ir, b, ir.Constant(i64, count), lambda m: raise_flag(
            ir, b, flag, b.icmp_signed("!=", b.load(_at(ir, b, flags, m)),
                                       ir.Constant(i32, 0))), "lf.info")
        call_out_if(ir, b, flag, call_out)


class LanesSolve(NativeStep):
    """``factored_solve`` by the LU kernels' substitution loops
    (`fgrad.compiler.lu_ir.solve_ir`), defined in the program: a stack of
    small systems, or right-hand sides enough to wake OpenBLAS's threads."""

    def emit(self, ir, b, pointer, table, call_out, alloca):
        _, lu, piv, rhs = self.eqn.invars
        (x,) = self.eqn.outvars
        dtype, (n, k) = np.dtype(x.aval.dtype), x.aval.shape[-2:]
        count = math.prod(x.aval.shape[:-2])
        i8p, i64 = ir.IntType(8).as_pointer(), ir.IntType(64)
        transpose = bool(self.eqn.params["transpose"])
        name = f"lu_solve_{dtype.name}_{'t' if transpose else 'n'}"
        solve = b.module.globals.get(name) or solve_ir(dtype, transpose, None, name, b.module)
        b.call(solve, [ir.Constant(i64, v) for v in (count, n, k, n * n, n, n * k)] + [
            b.bitcast(pointer(v), i8p) for v in (lu, piv, rhs, x)])


class Cholesky(NativeStep):
    """``cholesky``: each matrix copied into column-major order, ``potrf``
    (lower), and the upper triangle of the result zeroed, in place."""

    calls_blas = True

    fallback = True

    def emit(self, ir, b, pointer, table, call_out, alloca):
        (a,), (out,) = self.eqn.invars, self.eqn.outvars
        dtype, n = np.dtype(a.aval.dtype), a.aval.shape[-1]
        count = math.prod(a.aval.shape[:-2])
        i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
        typ = storage_type(ir, dtype)
        iptr = i32.as_pointer()
        potrf = _routine(ir, b, table, "potrf", dtype,
                         [i8.as_pointer(), iptr, typ.as_pointer(), iptr, iptr])
        lower, size = constant_cell(ir, b, i8, ord("L")), constant_cell(ir, b, i32, n)
        info, flag = alloca(i32), new_flag(ir, b, alloca)
        src, dst, c_n = pointer(a), pointer(out), ir.Constant(i64, n)

        def matrix(m):
            base = _offset(ir, b, m, n * n)

            def at(ptr, row, col):          # element (row, col) of C-ordered matrix m
                return _at(ir, b, ptr, b.add(base, b.add(b.mul(row, c_n), col)))

            def transpose(i):
                counted(ir, b, c_n, lambda j: b.store(b.load(at(src, i, j)), at(dst, j, i)),
                        "ch.j")
            counted(ir, b, c_n, transpose, "ch.i")
            b.call(potrf, [lower, size, _at(ir, b, dst, base), size, info])
            _note_failure(ir, b, info, flag)

            # column-major L[r, c] (r > c) sits at C-order (c, r): moved to
            # (r, c), where the untouched upper half of the copy was
            def tidy(r):
                def each(c):
                    b.store(b.load(at(dst, c, r)), at(dst, r, c))
                    b.store(ir.Constant(typ, 0.0), at(dst, c, r))
                counted(ir, b, r, each, "ch.c")
            counted(ir, b, c_n, tidy, "ch.r")
        counted(ir, b, ir.Constant(i64, count), matrix, "ch.matrix")
        call_out_if(ir, b, flag, call_out)


class Determinant(NativeStep):
    """``det`` and ``slogdet``: NumPy's own computation, in float64 for a
    float32 matrix too, as NumPy's: each matrix copied into column-major
    order (scratch), ``getrf``, the sign from the pivots
    and the diagonal, the log of the determinant's size summed along the
    diagonal in order, and ``det = sign * exp(logdet)``; a singular matrix
    has sign 0 and log -inf (det 0), as in NumPy."""

    calls_blas = True

    def emit(self, ir, b, pointer, table, call_out, alloca):
        (a,), outs = self.eqn.invars, self.eqn.outvars
        work, piv = self.scratch
        dtype, n = np.dtype(np.float64), a.aval.shape[-1]
        count = math.prod(a.aval.shape[:-2])
        i32, i64 = ir.IntType(32), ir.IntType(64)
        typ = storage_type(ir, dtype)
        iptr = i32.as_pointer()
        getrf = _routine(ir, b, table, "getrf", dtype,
                         [iptr, iptr, typ.as_pointer(), iptr, iptr, iptr])
        size, info = constant_cell(ir, b, i32, n), alloca(i32)
        src, cols, pivots = pointer(a), pointer(work), pointer(piv)
        sign, logdet = alloca(typ), alloca(typ)
        c_n, zero, one = ir.Constant(i64, n), ir.Constant(typ, 0.0), ir.Constant(typ, 1.0)
        log, exp = (_libm(ir, b, name, typ) for name in ("log", "exp"))

        def matrix(m):
            _columns_in(ir, b, src, _offset(ir, b, m, n * n), (n, n), cols, a.aval.dtype)
            b.call(getrf, [size, size, cols, size, pivots, info])
            b.store(one, sign)
            b.store(zero, logdet)

            def diagonal(i):
                swapped = b.icmp_signed("!=", b.load(_at(ir, b, pivots, i)),
                                        b.trunc(b.add(i, ir.Constant(i64, 1)), i32))
                d = b.load(_at(ir, b, cols, b.mul(i, ir.Constant(i64, n + 1))))
                negative = b.fcmp_ordered("<", d, zero)
                flip = b.xor(swapped, negative)
                b.store(b.select(flip, b.fneg(b.load(sign)), b.load(sign)), sign)
                size_of_d = b.select(negative, b.fneg(d), d)
                b.store(b.fadd(b.load(logdet), b.call(log, [size_of_d])), logdet)
            counted(ir, b, c_n, diagonal, "dt.d")
            singular = b.icmp_signed("!=", b.load(info), ir.Constant(i32, 0))
            s = b.select(singular, zero, b.load(sign))
            ld = b.select(singular, ir.Constant(typ, float("-inf")), b.load(logdet))
            values = [b.fmul(s, b.call(exp, [ld]))] if len(outs) == 1 else [s, ld]
            for v, value in zip(outs, values):
                b.store(convert(ir, b, value, dtype, v.aval.dtype), _at(ir, b, pointer(v), m))
        counted(ir, b, ir.Constant(i64, count), matrix, "dt.matrix")


def _libm(ir, b, name, typ):
    """The C library's ``name`` (``logf`` for a float32), which NumPy's own
    loops call."""
    name += "f" if isinstance(typ, ir.FloatType) else ""
    fn = b.module.globals.get(name)
    return fn if fn is not None else ir.Function(b.module, ir.FunctionType(typ, [typ]), name)


def _determinant(eqn, index):
    (a,) = eqn.invars
    if not _float_matrix(a.aval) or any(v.aval.dtype != a.aval.dtype for v in eqn.outvars):
        return None
    n = a.aval.shape[-1]
    return Determinant(index, eqn, [_scratch(a.aval, (n, n)), _scratch(a.aval, (n,), _I32)])


def _lapack_sized(aval):
    """Whether the stack of matrices ``aval`` is factored (solved) here by
    LAPACK rather than left to the LU kernels' callouts: matrices larger than
    `LANES_MAX_N`, or fewer of them than the kernels factor at once (a 3x3
    Newton system of an implicit ODE step, say), which gain nothing from
    those lanes and would pay a callout (about 4 us) per solve."""
    count = math.prod(aval.shape[:-2])
    return aval.shape[-1] > LANES_MAX_N or count < lanes(aval.dtype)


def _lu_factor(eqn, index):
    (a,) = eqn.invars
    if not _float_matrix(a.aval) or not lu_kept(np.empty((1, 1), a.aval.dtype)):
        return None
    if _lapack_sized(a.aval):
        return LUFactor(index, eqn)
    n, count = a.aval.shape[-1], math.prod(a.aval.shape[:-2])
    return LanesFactor(index, eqn, [_scratch(a.aval, (n * n * lanes(a.aval.dtype),),
                                             a.aval.dtype),
                                    _scratch(a.aval, (count,), _I32)])


def _lu_solve(eqn, index):
    _, lu, piv, rhs = eqn.invars
    (x,) = eqn.outvars
    if not _float_matrix(x.aval) or not lu_kept(np.empty((1, 1), lu.aval.dtype)) \
            or any(v.aval.dtype != x.aval.dtype for v in (lu, rhs)) \
            or not tuple(lu.aval.shape[:-2]) == tuple(rhs.aval.shape[:-2]) \
            == tuple(x.aval.shape[:-2]) or tuple(piv.aval.shape) != tuple(lu.aval.shape[:-1]):
        return None
    n, k = x.aval.shape[-2:]
    if not _lapack_sized(lu.aval):
        return LanesSolve(index, eqn)
    if k == 1:
        return LUSolve(index, eqn)
    # several right-hand sides of one small system (qr's derivative solves
    # with r), not enough work to wake OpenBLAS's threads: a copy in
    # column-major order, ``getrs``, and back; more, the LU kernels' loops
    if math.prod(x.aval.shape[:-2]) * n * n * k >= BLAS_THREADED_WORK:
        return LanesSolve(index, eqn)
    return LUSolve(index, eqn, [_scratch(x.aval, (n, k), x.aval.dtype)])


def _cholesky(eqn, index):
    (a,), (out,) = eqn.invars, eqn.outvars
    if not _float_matrix(a.aval) or a.aval.dtype != out.aval.dtype or eqn.params:
        return None
    return Cholesky(index, eqn)


_STEPS = {solve_factors_p: _lu_factor, factored_solve_p: _lu_solve, cholesky_p: _cholesky,
          det_p: _determinant, slogdet_p: _determinant}


# ---------------------------------------------------------------------------
# inv, eigh, qr, svd: NumPy's own LAPACK calls
# ---------------------------------------------------------------------------
#
# NumPy's linalg copies each matrix into column-major order as float64 (a
# float32 one too), calls LAPACK on the copy, and copies the results back,
# rounded to the input's precision: ``gesv`` against the identity for inv,
# ``syevd`` ("V", lower triangle) for eigh, ``geqrf`` then ``orgqr`` for qr
# (mode "reduced"), ``gesdd`` ("S", or "A" with full_matrices) for svd. The
# steps below make the same calls on the same copies, their workspaces the
# sizes LAPACK asks for, queried once when the program is compiled; a
# matrix LAPACK fails on (inv's singular one, a decomposition that did not
# converge) runs the equation again by NumPy's code, which raises NumPy's
# LinAlgError.

def _workspace(name, arguments, *sizes):
    """The workspace sizes LAPACK's ``name`` asks for: ``arguments`` with
    ``"work"`` and ``"iwork"`` (queried, their lengths -1) and ``"info"`` in
    their places; None where the query fails. At least ``sizes`` (NumPy's
    own minimum for some routines)."""
    work, iwork, info = (ctypes.c_double * 1)(), (ctypes.c_int32 * 1)(), ctypes.c_int32(0)
    cells = {"work": work, "iwork": iwork, "info": info,
             "lwork": ctypes.c_int32(-1), "liwork": ctypes.c_int32(-1)}
    call_lapack(name, [cells[x] if isinstance(x, str) else x for x in arguments])
    if info.value != 0:
        return None
    return max(int(work[0]), 1, *sizes), max(iwork[0], 1)


class _Fortran:
    """What the IR of a LAPACK call needs where a `_Lapack` step writes it:
    builder ``b``, values' data (``pointer``), the routines (`routine`) and
    the constant cells of Fortran's arguments (`int`, `char`), which it
    takes by reference; ``slots``: the step's own stack slots
    (`_Lapack.slots`)."""

    def __init__(self, ir, b, pointer, table, slots):
        self.ir, self.b, self.pointer, self.table, self.slots = ir, b, pointer, table, slots

    def int(self, value):
        return constant_cell(self.ir, self.b, self.ir.IntType(32), value)

    def char(self, c):
        return constant_cell(self.ir, self.b, self.ir.IntType(8), ord(c))

    def routine(self, name, pattern):
        """The float64 routine ``name`` (``"gesv"``) of arguments ``pattern``,
        pointers each: ``"c"`` a character, ``"i"`` an integer, ``"f"`` a float64."""
        ir = self.ir
        kinds = {"c": ir.IntType(8), "i": ir.IntType(32), "f": ir.DoubleType()}
        return _routine(ir, self.b, self.table, name, _F64,
                        [kinds[k].as_pointer() for k in pattern])


class _Lapack(NativeStep):
    """A LAPACK call on each matrix of a stack, on float64 scratch copies
    (`_columns_in`), the results copied out (`_columns_out`); ``work`` and
    ``iwork`` the workspace lengths queried. A step writes its call
    (``call(f, info)``, ``f`` a `_Fortran`) and the copies of its results
    (``results(f, m)``, ``m`` the matrix's index)."""

    calls_blas = True

    def __init__(self, index, eqn, scratch, work=1, iwork=1):
        super().__init__(index, eqn, scratch)
        self.work, self.iwork = work, iwork

    def slots(self, ir, alloca):
        """Stack slots of the step's own, besides ``info`` (made by ``alloca``)."""
        return ()

    def emit(self, ir, b, pointer, table, call_out, alloca):
        f = _Fortran(ir, b, pointer, table, self.slots(ir, alloca))
        (a,) = self.eqn.invars
        count, size = math.prod(a.aval.shape[:-2]), math.prod(a.aval.shape[-2:])
        i32, i64 = ir.IntType(32), ir.IntType(64)
        info, flag = alloca(i32), new_flag(ir, b, alloca)
        src = pointer(a)

        def matrix(m):
            _columns_in(ir, b, src, _offset(ir, b, m, size), a.aval.shape[-2:],
                        pointer(self.scratch[0]), a.aval.dtype)
            self.call(f, info)
            if self.fallback:
                _note_failure(ir, b, info, flag)
            self.results(f, m)
        counted(ir, b, ir.Constant(i64, count), matrix, f"{type(self).__name__}.matrix")
        if self.fallback:
            call_out_if(ir, b, flag, call_out)


class Inverse(_Lapack):
    """``inv``: ``gesv`` of each matrix against the identity."""

    fallback = True

    def call(self, f, info):
        ir, b = f.ir, f.b
        n = self.eqn.invars[0].aval.shape[-1]
        cols, x, piv = (f.pointer(v) for v in self.scratch)
        i64, c_n = ir.IntType(64), ir.Constant(ir.IntType(64), n)

        def row(i):
            counted(ir, b, c_n, lambda j: b.store(
                b.uitofp(b.icmp_signed("==", i, j), ir.DoubleType()),
                _at(ir, b, x, b.add(b.mul(i, c_n), j))), "id.j")
        counted(ir, b, ir.Constant(i64, n), row, "id.i")
        gesv = f.routine("gesv", "iifiifii")
        b.call(gesv, [f.int(n), f.int(n), cols, f.int(n), piv, x, f.int(n), info])

    def results(self, f, m):
        (out,) = self.eqn.outvars
        n = out.aval.shape[-1]
        _columns_out(f.ir, f.b, f.pointer(self.scratch[1]), n, f.pointer(out),
                     _offset(f.ir, f.b, m, n * n), (n, n), out.aval.dtype)


class Eigh(_Lapack):
    """``eigh``: ``syevd`` (``"V"``, the lower triangle) of each matrix."""

    fallback = True

    def call(self, f, info):
        n = self.eqn.invars[0].aval.shape[-1]
        cols, w, work, iwork = (f.pointer(v) for v in self.scratch)
        syevd = f.routine("syevd", "ccififfiiii")
        f.b.call(syevd, [f.char("V"), f.char("L"), f.int(n), cols, f.int(n), w,
                         work, f.int(self.work), iwork, f.int(self.iwork), info])

    def results(self, f, m):
        w, v = self.eqn.outvars
        n = v.aval.shape[-1]
        _columns_out(f.ir, f.b, f.pointer(self.scratch[1]), 1, f.pointer(w),
                     _offset(f.ir, f.b, m, n), (1, n), w.aval.dtype)
        _columns_out(f.ir, f.b, f.pointer(self.scratch[0]), n, f.pointer(v),
                     _offset(f.ir, f.b, m, n * n), (n, n), v.aval.dtype)


class QR(_Lapack):
    """``qr`` (reduced): ``geqrf``, ``r`` its upper triangle, then ``orgqr``
    in place for ``q`` (its ``info`` a slot of its own, unread: only
    ``geqrf`` can fail)."""

    def slots(self, ir, alloca):
        return (alloca(ir.IntType(32)),)

    def call(self, f, info):
        m, n = self.eqn.invars[0].aval.shape[-2:]
        cols, tau, work = (f.pointer(v) for v in self.scratch)
        geqrf = f.routine("geqrf", "iififfii")
        f.b.call(geqrf, [f.int(m), f.int(n), cols, f.int(m), tau, work, f.int(self.work), info])

    def results(self, f, index):
        (m, n), (q, r) = self.eqn.invars[0].aval.shape[-2:], self.eqn.outvars
        k = min(m, n)
        cols, tau, work = (f.pointer(v) for v in self.scratch)
        _columns_out(f.ir, f.b, cols, m, f.pointer(r), _offset(f.ir, f.b, index, k * n),
                     (k, n), r.aval.dtype, upper=True)
        orgqr = f.routine("orgqr", "iiififfii")
        (info,) = f.slots
        f.b.call(orgqr, [f.int(m), f.int(k), f.int(k), cols, f.int(m), tau, work,
                         f.int(self.work), info])
        _columns_out(f.ir, f.b, cols, m, f.pointer(q), _offset(f.ir, f.b, index, m * k),
                     (m, k), q.aval.dtype)


class SVD(_Lapack):
    """``svd``: ``gesdd`` (``"A"`` with full_matrices, else ``"S"``)."""

    fallback = True

    def call(self, f, info):
        (m, n), (u, _, vh) = self.eqn.invars[0].aval.shape[-2:], self.eqn.outvars
        cols, s, u_cols, vt, work, iwork = (f.pointer(v) for v in self.scratch)
        gesdd = f.routine("gesdd", "ciififfififiii")
        full = self.eqn.params["full_matrices"]
        f.b.call(gesdd, [f.char("A" if full else "S"), f.int(m), f.int(n), cols,
                         f.int(m), s, u_cols, f.int(m), vt,
                         f.int(vh.aval.shape[-2]), work, f.int(self.work), iwork, info])

    def results(self, f, index):
        u, s, vh = self.eqn.outvars
        m, n = self.eqn.invars[0].aval.shape[-2:]
        k, mu, nv = min(m, n), u.aval.shape[-1], vh.aval.shape[-2]
        _, s_cols, u_cols, vt = (f.pointer(v) for v in self.scratch[:4])
        ir, b = f.ir, f.b
        _columns_out(ir, b, u_cols, m, f.pointer(u), _offset(ir, b, index, m * mu), (m, mu),
                     u.aval.dtype)
        _columns_out(ir, b, s_cols, 1, f.pointer(s), _offset(ir, b, index, k), (1, k),
                     s.aval.dtype)
        _columns_out(ir, b, vt, nv, f.pointer(vh), _offset(ir, b, index, nv * n), (nv, n),
                     vh.aval.dtype)


def _decomposed(eqn):
    """Whether ``eqn`` decomposes a float matrix into results of its dtype."""
    (a,) = eqn.invars
    return _float_matrix(a.aval) and all(v.aval.dtype == a.aval.dtype for v in eqn.outvars)


def _inverse(eqn, index):
    if not _decomposed(eqn):
        return None
    a = eqn.invars[0].aval
    n = a.shape[-1]
    return Inverse(index, eqn, [_scratch(a, (n, n)), _scratch(a, (n, n)),
                                _scratch(a, (n,), _I32)])


def _eigh(eqn, index):
    if not _decomposed(eqn):
        return None
    a = eqn.invars[0].aval
    n, c = a.shape[-1], ctypes.c_int32(a.shape[-1])
    sizes = _workspace("dsyevd", [ctypes.c_char(b"V"), ctypes.c_char(b"L"), c,
                                  (ctypes.c_double * 1)(), c, (ctypes.c_double * 1)(),
                                  "work", "lwork", "iwork", "liwork", "info"])
    if sizes is None:
        return None
    work, iwork = sizes
    return Eigh(index, eqn, [_scratch(a, (n, n)), _scratch(a, (n,)), _scratch(a, (work,)),
                             _scratch(a, (iwork,), _I32)], work, iwork)


def _qr(eqn, index):
    if not _decomposed(eqn):
        return None
    a = eqn.invars[0].aval
    m, n = a.shape[-2:]
    k = min(m, n)
    cm, cn, ck = (ctypes.c_int32(x) for x in (m, n, k))
    one = (ctypes.c_double * 1)()
    # NumPy's own minimum, n, besides LAPACK's answer
    sizes = [_workspace("dgeqrf", [cm, cn, one, cm, one, "work", "lwork", "info"], n),
             _workspace("dorgqr", [cm, ck, ck, one, cm, one, "work", "lwork", "info"], n)]
    if None in sizes:
        return None
    work = max(w for w, _ in sizes)
    return QR(index, eqn, [_scratch(a, (m, n)), _scratch(a, (k,)), _scratch(a, (work,))],
              work)


def _svd(eqn, index):
    if not _decomposed(eqn):
        return None
    a = eqn.invars[0].aval
    (m, n), (u, _, vh) = a.shape[-2:], eqn.outvars
    k, mu, nv = min(m, n), u.aval.shape[-1], vh.aval.shape[-2]
    cm, one = ctypes.c_int32(m), (ctypes.c_double * 1)()
    job = b"A" if eqn.params["full_matrices"] else b"S"
    sizes = _workspace("dgesdd", [ctypes.c_char(job), cm, ctypes.c_int32(n), one, cm, one,
                                  one, cm, one, ctypes.c_int32(nv), "work", "lwork",
                                  (ctypes.c_int32 * 1)(), "info"])
    if sizes is None:
        return None
    return SVD(index, eqn, [_scratch(a, (m, n)), _scratch(a, (k,)), _scratch(a, (m, mu)),
                            _scratch(a, (nv, n)), _scratch(a, (sizes[0],)),
                            _scratch(a, (8 * k,), _I32)], sizes[0])


_STEPS.update({inv_p: _inverse, eigh_p: _eigh, qr_p: _qr, svd_p: _svd})


# ---------------------------------------------------------------------------
# The constant matrices the derivatives use
# ---------------------------------------------------------------------------


class Pattern(NativeStep):
    """``identity_like`` (ones where ``j == i``) and ``tri_like`` (ones where
    ``j <= i + k``), zeros elsewhere: loops over the matrix."""

    def reads(self):
        return []                       # ``like`` gives the backend only

    def emit(self, ir, b, pointer, table, call_out, alloca):
        (out,), params = self.eqn.outvars, self.eqn.params
        rows, cols = out.aval.shape
        i64, dtype = ir.IntType(64), np.dtype(out.aval.dtype)
        k = ir.Constant(i64, params.get("k", 0))
        typ = storage_type(ir, dtype)
        one, zero = (ir.Constant(typ, x if dtype.kind == "f" else int(x)) for x in (1, 0))
        dst, c_cols = pointer(out), ir.Constant(i64, cols)
        test = "==" if self.eqn.prim is identity_like_p else "<="

        def row(i):
            def col(j):
                b.store(b.select(b.icmp_signed(test, j, b.add(i, k)), one, zero),
                        _at(ir, b, dst, b.add(b.mul(i, c_cols), j)))
            counted(ir, b, c_cols, col, "pattern.j")
        counted(ir, b, ir.Constant(i64, rows), row, "pattern.i")


def _pattern(eqn, index):
    dtype = np.dtype(eqn.outvars[0].aval.dtype)
    return Pattern(index, eqn) if dtype.kind in "iuf" else None


_STEPS.update({identity_like_p: _pattern, tri_like_p: _pattern})
