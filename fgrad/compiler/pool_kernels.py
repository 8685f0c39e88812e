"""Max pooling over tiling windows on NumPy as compiled loops, for `fgrad.primitives.nn`.

`max_pool` takes the maximum of each ``kh x kw`` window of an NCHW array whose
windows tile it; its gradient, `max_pool_scatter`, sends each window's
cotangent to the elements equal to that maximum, shared equally among ties.
With NumPy the maximum is a copy of every window offset to a plane of its own
and a reduction over the planes; the gradient compares the copies with the
maximum, counts, divides, multiplies and copies back: seven passes over the
layer's activations, about 1.5 ms of a LeNet step on this machine. Here LLVM
compiles each as one loop over the output positions that reads the window
where it lies in ``x`` (the window's shape a constant, so its loads are
straight-line code and the loop over a row vectorises with interleaved loads).

The arithmetic is NumPy's: the maximum propagates NaN, a tie's share is
``hit / count`` multiplied by the cotangent (so a window whose maximum is NaN
gets NaN, as ``0 / 0`` gives with NumPy), in the arrays' own dtype.

The kernels are compiled by `fgrad.compiler.native` (llvmlite) once per dtype
and window shape, and kept in its disk cache. Importing this module installs
them in `fgrad.primitives.nn` (``register_pool_kernels``) when llvmlite can
compile them here; otherwise NumPy does the same work.
"""
import functools

import numpy as np

from fgrad.compiler import native
from fgrad.compiler.kernel_ir import array_function, counted
from fgrad.primitives import nn as _nn

#: dtypes the loops are compiled for (others, and other backends, use NumPy)
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
#: the largest window (kh * kw elements) compiled: its loads are written out
#: one by one, so a global pooling window would be a very long function
MAX_AREA = 64


def _window_loop(ir, b, rows, ow_count, window, body):
    """``body(out_index, [input index of each window element])`` for every
    output position: rows ``r`` of ``OW`` outputs, whose windows start at row
    ``r * kh`` of the input seen as (rows * kh, OW * kw)."""
    i64 = ir.IntType(64)
    kh, kw = window
    width = b.mul(ow_count, ir.Constant(i64, kw))

    def row(r):
        top = b.mul(b.mul(r, ir.Constant(i64, kh)), width)
        first_out = b.mul(r, ow_count)

        def position(ow):
            left = b.add(top, b.mul(ow, ir.Constant(i64, kw)))
            at = [b.add(left, b.add(b.mul(ir.Constant(i64, i), width), ir.Constant(i64, j)))
                  for i in range(kh) for j in range(kw)]
            body(b.add(first_out, ow), at)
        counted(ir, b, ow_count, position, "ow")
    counted(ir, b, rows, row, "r")


def max_ir(dtype, window, object_offset, name="pool_max"):
    """IR text of ``void name(i64 rows, i64 OW, x, out)``: ``out[r, ow]`` the
    maximum (NaN if any element is NaN) of the ``window`` (kh, kw) of ``x``
    (rows * kh, OW * kw) whose top left element is ``x[r * kh, ow * kw]``."""
    from llvmlite import ir
    module, b, size, data, _ = array_function(ir, name, dtype, ("rows", "OW"),
                                              ("x", "out"), object_offset)
    rows, ow_count = size["rows"], size["OW"]
    x, out = data["x"], data["out"]

    def body(out_index, at):
        best = b.load(b.gep(x, [at[0]]))
        for index in at[1:]:
            value = b.load(b.gep(x, [index]))
            # np.maximum's rule: the larger, or NaN from either side
            keep = b.or_(b.fcmp_ordered(">", best, value), b.fcmp_unordered("uno", best, best))
            best = b.select(keep, best, value)
        b.store(best, b.gep(out, [out_index]))
    _window_loop(ir, b, rows, ow_count, window, body)
    b.ret_void()
    return str(module)


def scatter_ir(dtype, window, object_offset, name="pool_max_scatter"):
    """IR text of ``void name(i64 rows, i64 OW, ct, x, ans, dx)``: for each
    window (as in `max_ir`), ``dx = ct * (hit / count)`` at each of its
    elements, ``hit`` 1 where the element equals the window's ``ans`` and
    ``count`` the number of hits."""
    from llvmlite import ir
    module, b, size, data, item = array_function(ir, name, dtype, ("rows", "OW"),
                                                 ("ct", "x", "ans", "dx"), object_offset)
    rows, ow_count = size["rows"], size["OW"]
    one, zero = ir.Constant(item, 1.0), ir.Constant(item, 0.0)

    def body(out_index, at):
        top = b.load(b.gep(data["ans"], [out_index]))
        share = b.load(b.gep(data["ct"], [out_index]))
        hits = [b.select(b.fcmp_ordered("==", b.load(b.gep(data["x"], [index])), top),
                         one, zero) for index in at]
        count = hits[0]
        for hit in hits[1:]:
            count = b.fadd(count, hit)
        # one division per element, as NumPy's: selecting between 1/count and
        # 0/count instead became a branch per element (three times slower)
        for index, hit in zip(at, hits):
            b.store(b.fmul(share, b.fdiv(hit, count)), b.gep(data["dx"], [index]))
    _window_loop(ir, b, rows, ow_count, window, body)
    b.ret_void()
    return str(module)


@functools.cache
def _kernel(dtype, window, kind):
    """The compiled loop for ``dtype`` and ``window``: kind "max" or "scatter"."""
    offset = native.array_data_offset()
    if kind == "max":
        return native.compile_ir(max_ir(dtype, window, offset), "pool_max",
                                 ["i64", "i64", "array", "array"])
    return native.compile_ir(scatter_ir(dtype, window, offset), "pool_max_scatter",
                             ["i64", "i64"] + ["array"] * 4)


def max_pool(x, window):
    """The maximum of each tiling ``window`` (kh, kw) of NCHW ``x``, (N, C,
    H/kh, W/kw).

    >>> max_pool(np.arange(8.0).reshape(1, 1, 2, 4), (2, 2)).ravel()
    array([5., 7.])
    """
    x = np.ascontiguousarray(x)
    (n, c, h, w), (kh, kw) = x.shape, window
    out = np.empty((n, c, h // kh, w // kw), x.dtype)
    if out.size:
        _kernel(x.dtype, tuple(window), "max")(n * c * (h // kh), w // kw, x, out)
    return out


def max_pool_scatter(ct, x, ans, window):
    """The gradient of `max_pool`: ``ct`` (its output's cotangent) at the
    elements of ``x`` equal to their window's maximum ``ans``, shared equally
    among ties, zero elsewhere (all three of one dtype).

    >>> x = np.array([[[[1.0, 3.0, 3.0, 0.0]]]])
    >>> max_pool_scatter(np.array([[[[4.0, 2.0]]]]), x, np.array([[[[3.0, 3.0]]]]), (1, 2))
    array([[[[0., 4., 2., 0.]]]])
    """
    ct, x, ans = (np.ascontiguousarray(a) for a in (ct, x, ans))
    n, c, oh, ow = ans.shape
    dx = np.empty(x.shape, ct.dtype)
    if dx.size:
        _kernel(x.dtype, tuple(window), "scatter")(n * c * oh, ow, ct, x, ans, dx)
    return dx


if native.available():
    _nn.register_pool_kernels(max_pool, max_pool_scatter, DTYPES, MAX_AREA)
