"""im2col and col2im on NumPy as compiled loops, for `fgrad.primitives.nn`.

`im2col` lays a convolution's receptive fields out ``(C, kh, kw, OH, OW, N)``:
one row of ``N`` elements (the batch) per channel, kernel offset and output
position, read from the input seen as ``(C, H, W, N)``; `conv2d`'s forward
product reads them ordered ``(C, kh, kw, N, OH, OW)`` instead, rows of ``OW``
read from NCHW. With NumPy each is built by filling a padded copy of the
input, then one strided copy per kernel offset (`col2im`, the gradient's
scatter-add: one strided add per offset into a padded zero array, then a
copy out of the padding); the forward order's copies restart NumPy's inner
loop every ``OW`` (10 or 28) elements. Here LLVM compiles each as one loop
nest that writes every row once, reads the input where it is (no padded
copy) and copies or adds its contiguous runs with vector instructions
(`gather_ir`, `planes_ir`). At LeNet's sizes (64 images, 5x5 kernels) the
weight gradient's im2col went from 0.5-1.8 ms to 0.25-0.44, the forward
columns from 0.7-1.4 to 0.5-0.7 and col2im from 1.3-2.3 to 0.4-0.5.

The kernels are compiled by `fgrad.compiler.native` (llvmlite) once per dtype
and kind, and kept in its disk cache. Importing this module installs them
in `fgrad.primitives.nn` (``register_conv_kernels``) when llvmlite can compile
them here; otherwise NumPy's slicing does the same work.
"""
import functools

import numpy as np

from fgrad.compiler import native
from fgrad.compiler.kernel_ir import array_function, counted
from fgrad.primitives import nn as _nn

#: dtypes the loops are compiled for (others, and other backends, use NumPy)
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# the kernels' i64 parameters, in order, after which come xt, cols and pad
_SIZES = ("C", "H", "W", "N", "KH", "KW", "OH", "OW", "SH", "SW", "DH", "DW", "PH", "PW")


def gather_ir(dtype, scatter, object_offset, name="conv_rows"):
    """IR text of ``void name(i64 C, H, W, N, KH, KW, OH, OW, SH, SW, DH, DW,
    PH, PW, xt, cols, pad)``. For each channel ``c``, kernel offset ``(i, j)``
    and output position ``(oh, ow)``, the input position is ``h = oh*SH +
    i*DH - PH``, ``w = ow*SW + j*DW - PW``, and row ``cols[c, i, j, oh, ow, :]``
    (``N`` elements) pairs with row ``xt[c, h, w, :]``. Without ``scatter`` the
    function copies the input's row into ``cols``, or ``pad[0]`` where the
    position falls in the padding (im2col); with ``scatter`` it adds ``cols``'s
    row into the input's, skipping the padding (col2im: ``xt`` starts at zero).
    Arrays are C-ordered NumPy arrays of float ``dtype``, passed as objects
    whose data pointer is at byte ``object_offset`` (`fgrad.compiler.native`).
    """
    from llvmlite import ir
    module, b, size, (xt, cols), fill = _function(ir, dtype, object_offset, name, "xt")
    zero = ir.Constant(ir.IntType(64), 0)
    n = size["N"]

    def within(index, limit):
        return b.and_(b.icmp_signed(">=", index, zero), b.icmp_signed("<", index, limit))

    def offset(c, i, j):
        plane = b.add(b.mul(b.add(b.mul(c, size["KH"]), i), size["KW"]), j)

        def row(oh):
            h = b.sub(b.add(b.mul(oh, size["SH"]), b.mul(i, size["DH"])), size["PH"])

            def element(ow):
                w = b.sub(b.add(b.mul(ow, size["SW"]), b.mul(j, size["DW"])), size["PW"])
                position = b.add(b.mul(b.add(b.mul(plane, size["OH"]), oh), size["OW"]), ow)
                col_row = b.gep(cols, [b.mul(position, n)])
                inside = b.and_(within(h, size["H"]), within(w, size["W"]))
                x_row = b.gep(xt, [b.mul(b.add(b.mul(b.add(b.mul(c, size["H"]), h),
                                                     size["W"]), w), n)])
                if scatter:
                    with b.if_then(inside):
                        def add(k):
                            target = b.gep(x_row, [k])
                            b.store(b.fadd(b.load(target), b.load(b.gep(col_row, [k]))),
                                    target)
                        counted(ir, b, n, add, "add")
                else:
                    with b.if_else(inside) as (copy, padding):
                        with copy:
                            counted(ir, b, n, lambda k: b.store(
                                b.load(b.gep(x_row, [k])), b.gep(col_row, [k])), "copy")
                        with padding:
                            counted(ir, b, n, lambda k: b.store(fill, b.gep(col_row, [k])),
                                    "fill")
            counted(ir, b, size["OW"], element, "ow")
        counted(ir, b, size["OH"], row, "oh")

    return _finish(ir, b, module, size, offset)


def planes_ir(dtype, object_offset, name="conv_planes"):
    """IR text of ``void name(i64 C, H, W, N, KH, KW, OH, OW, SH, SW, DH, DW, PH,
    PW, x, cols, pad)``: the receptive fields of NCHW ``x`` ordered ``(C, KH,
    KW, N, OH, OW)``, as `conv2d`'s forward product reads them (positions as in
    `gather_ir`; ``pad[0]`` in the padding). Each row ``cols[c, i, j, n, oh,
    :]`` is the padding, then a strided run of row ``x[n, c, h]``, then the
    padding again; the run's bounds are worked out once a row, so the copy
    itself has no test (and is a contiguous copy at stride 1).
    """
    from llvmlite import ir
    module, b, size, (x, cols), fill = _function(ir, dtype, object_offset, name, "x")
    i64 = ir.IntType(64)
    zero = ir.Constant(i64, 0)
    stride_w = size["SW"]

    def first_at_or_after(limit):
        # the first ow with ow*SW >= limit, within [0, OW]
        up = b.sdiv(b.add(limit, b.sub(stride_w, ir.Constant(i64, 1))), stride_w)
        up = b.select(b.icmp_signed(">", limit, zero), up, zero)
        return b.select(b.icmp_signed("<", up, size["OW"]), up, size["OW"])

    def offset(c, i, j):
        plane = b.add(b.mul(b.add(b.mul(c, size["KH"]), i), size["KW"]), j)
        shift = b.sub(b.mul(j, size["DW"]), size["PW"])        # w = ow*SW + shift
        lo = first_at_or_after(b.neg(shift))
        hi = first_at_or_after(b.sub(size["W"], shift))
        hi = b.select(b.icmp_signed("<", hi, lo), lo, hi)

        def image(m):
            def row(oh):
                h = b.sub(b.add(b.mul(oh, size["SH"]), b.mul(i, size["DH"])), size["PH"])
                at = b.mul(b.add(b.mul(b.add(b.mul(plane, size["N"]), m), size["OH"]), oh),
                           size["OW"])
                out = b.gep(cols, [at])
                inside = b.and_(b.icmp_signed(">=", h, zero), b.icmp_signed("<", h, size["H"]))
                # the whole row padded, then the run copied over it (a second
                # fill loop for its tail cost LLVM more to compile than the
                # stores it saves)
                counted(ir, b, size["OW"], lambda k: b.store(fill, b.gep(out, [k])), "fill")
                with b.if_then(inside):
                    source = b.gep(x, [b.add(b.mul(b.add(b.mul(b.add(
                        b.mul(m, size["C"]), c), size["H"]), h), size["W"]), shift)])
                    counted(ir, b, hi, lambda k: b.store(
                        b.load(b.gep(source, [b.mul(k, stride_w)])), b.gep(out, [k])),
                        "run", start=lo)
            counted(ir, b, size["OH"], row, "oh")
        counted(ir, b, size["N"], image, "n")

    return _finish(ir, b, module, size, offset)


def _function(ir, dtype, object_offset, name, input_name):
    """The module and builder of ``void name(i64 C, ..., i64 PW, input, cols,
    pad)`` (`gather_ir`'s parameters), with the sizes by name, the input's and
    the columns' data pointers and the padding value loaded."""
    module, b, size, data, _ = array_function(ir, name, dtype, _SIZES,
                                              (input_name, "cols", "pad"), object_offset)
    return module, b, size, (data[input_name], data["cols"]), b.load(data["pad"])


def _finish(ir, b, module, size, offset):
    """Call ``offset(c, i, j)`` for every channel and kernel offset, return,
    and give the module's text."""
    counted(ir, b, size["C"], lambda c: counted(ir, b, size["KH"], lambda i: counted(
        ir, b, size["KW"], lambda j: offset(c, i, j), "j"), "i"), "c")
    b.ret_void()
    return str(module)


@functools.cache
def _kernel(dtype, kind):
    """The compiled loop: kind "gather" or "scatter" (`gather_ir`), "planes"
    (`planes_ir`)."""
    offset = native.array_data_offset()
    if kind == "planes":
        text, name = planes_ir(dtype, offset), "conv_planes"
    else:
        text, name = gather_ir(dtype, kind == "scatter", offset), "conv_rows"
    return native.compile_ir(text, name, ["i64"] * len(_SIZES) + ["array"] * 3)


def _sizes(xt, cols, stride, dilation, padding):
    c, h, w, n = xt.shape
    _, kh, kw, oh, ow, _ = cols.shape
    return (c, h, w, n, kh, kw, oh, ow, *stride, *dilation, padding[0][0], padding[1][0])


def im2col(xt, kernel, stride, dilation, padding, pad_value, out_hw):
    """The receptive fields ``(C, kh, kw, OH, OW, N)`` of ``xt``, an input laid
    out ``(C, H, W, N)`` (C-ordered), for an output of spatial shape ``out_hw``;
    positions in the padding hold ``pad_value``.

    >>> xt = np.arange(4.0).reshape(1, 2, 2, 1)
    >>> im2col(xt, (2, 2), (1, 1), (1, 1), ((0, 0), (0, 0)), 0.0, (1, 1)).ravel()
    array([0., 1., 2., 3.])
    """
    c, n = xt.shape[0], xt.shape[3]
    cols = np.empty((c,) + tuple(kernel) + tuple(out_hw) + (n,), xt.dtype)
    if cols.size:
        _kernel(xt.dtype, "gather")(*_sizes(xt, cols, stride, dilation, padding), xt, cols,
                                 np.full(1, pad_value, xt.dtype))
    return cols


def im2col_planes(x, kernel, stride, dilation, padding, pad_value, out_hw):
    """The receptive fields ``(C, kh, kw, N, OH, OW)`` of NCHW ``x``
    (C-ordered), for an output of spatial shape ``out_hw``; positions in the
    padding hold ``pad_value``.

    >>> x = np.arange(4.0).reshape(1, 1, 2, 2)
    >>> im2col_planes(x, (1, 1), (1, 1), (1, 1), ((1, 0), (0, 0)), 9.0, (3, 2)).ravel()
    array([9., 9., 0., 1., 2., 3.])
    """
    n, c = x.shape[:2]
    cols = np.empty((c,) + tuple(kernel) + (n,) + tuple(out_hw), x.dtype)
    if cols.size:
        sizes = (c, *x.shape[2:], n, *kernel, *out_hw, *stride, *dilation, padding[0][0],
                 padding[1][0])
        _kernel(x.dtype, "planes")(*sizes, x, cols, np.full(1, pad_value, x.dtype))
    return cols


def col2im(cols, hw, stride, dilation, padding):
    """The sum of the columns ``(C, kh, kw, OH, OW, N)`` (C-ordered) onto the
    input positions they were read from: an array ``(C, H, W, N)``, ``hw`` =
    ``(H, W)`` (the padding dropped).

    >>> cols = np.ones((1, 2, 2, 1, 1, 1))
    >>> col2im(cols, (2, 2), (1, 1), (1, 1), ((0, 0), (0, 0))).ravel()
    array([1., 1., 1., 1.])
    """
    c, n = cols.shape[0], cols.shape[5]
    xt = np.zeros((c,) + tuple(hw) + (n,), cols.dtype)
    if cols.size and xt.size:
        _kernel(cols.dtype, "scatter")(*_sizes(xt, cols, stride, dilation, padding), xt, cols,
                                  np.zeros(1, cols.dtype))
    return xt


if native.available():
    _nn.register_conv_kernels(im2col, im2col_planes, col2im, DTYPES)
