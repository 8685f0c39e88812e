"""Functions of sampled sequences: ``convolve``, ``correlate``, ``interp``,
``gradient`` and ``ediff1d``, as composites of gathers, products and slices.

Every index these functions compute comes from static shapes (or, for
``interp``, from comparisons that carry no derivative), so the derivatives are
those of the gathers and products: ``convolve`` and ``correlate`` are
differentiable in both operands, ``interp`` in ``x``, ``xp`` and ``fp``.
"""
import numpy as _np

from fgrad.core.backend import array_module as _xp
from fgrad.core.backend import asarray_on as _asarray_on
from fgrad.core.backend import device_put as _device_put
from fgrad.core.backend import module_of_leaves as _module_of_leaves
from fgrad.core.errors import MissingRuleError as _MissingRuleError
from fgrad.core.errors import NumpyArgumentError as _ArgumentError
from fgrad.core.trace import Tracer as _Tracer
from fgrad.core.trace import get_aval as _get_aval
from fgrad.numpy import _manipulation as _fshape
from fgrad.numpy import fft as _fft
from fgrad.primitives import elementwise as _ew
from fgrad.primitives import indexing as _indexing
from fgrad.primitives import reductions as _red
from fgrad.primitives import search as _search
from fgrad.primitives import shape as _shape
from fgrad.primitives.array_likes import contains_tracer as _contains_tracer
from fgrad.primitives.base import normalize_axis as _normalize_axis


def _traced(*args):
    return any(isinstance(a, _Tracer) for a in args)


_array = _fshape.as_array


# -- convolution and correlation -----------------------------------------------------

def _check_operands(name, a, v):
    for label, x in (("a", a), ("v", v)):
        aval = _get_aval(x)
        if aval.ndim != 1:
            raise _ArgumentError(f"{name}: {label} must be 1-d, got shape {aval.shape}; "
                                 f"use fgrad.numpy.ravel or vmap over the extra axes")
        if aval.shape[0] == 0:
            raise _ArgumentError(f"{name}: {label} cannot be empty")
    return _get_aval(a).shape[0], _get_aval(v).shape[0]


# Above this length of the shorter operand, the convolution goes through the FFT
# (O((n + m) log(n + m)) time and O(n + m) memory); below it, the sliding windows
# of the longer operand are gathered, at most this many per output.
FFT_THRESHOLD = 64


def _full_convolution(a, u):
    """The full linear convolution of 1-d ``a`` and ``u`` (length n + m - 1),
    differentiable in both, in memory linear in n + m."""
    n, m = _get_aval(a).shape[0], _get_aval(u).shape[0]
    length = n + m - 1
    if min(n, m) > FFT_THRESHOLD:
        if _get_aval(a).dtype.kind == "c" or _get_aval(u).dtype.kind == "c":
            return _fft.ifft(_fft.fft(a, length) * _fft.fft(u, length), length)
        dtype = _np.result_type(_get_aval(a).dtype, _get_aval(u).dtype)
        out = _fft.irfft(_fft.rfft(a, length) * _fft.rfft(u, length), length)
        return _ew.convert_element_type(out, dtype)
    # convolution commutes: gather windows of the longer, weighted by the shorter
    long, short = (a, u) if n >= m else (u, a)
    k = min(n, m)
    padded = _fshape.pad(long, (k - 1, k - 1))
    rows = _np.arange(length)[:, None] + _np.arange(k)[None, :]
    return _indexing.getitem(padded, rows) @ _fshape.flip(short, 0)


def _correlate_rows(a, w, start, length):
    """Rows ``start:start + length`` of the full correlation
    ``c[k] = sum_j a_padded[k + j] * w[j]``, the full convolution of ``a`` with
    ``w`` reversed."""
    full = _full_convolution(a, _fshape.flip(w, 0))
    return _indexing.slice_axis(full, 0, start, start + length)


_MODES = ("full", "same", "valid")


def _window(name, mode, n, m, same_start):
    if mode not in _MODES:
        raise _ArgumentError(f"{name}: mode must be one of {_MODES}, got {mode!r}")
    if mode == "full":
        return 0, n + m - 1
    if mode == "same":
        return same_start, max(n, m)
    return min(n, m) - 1, abs(n - m) + 1


def convolve(a, v, mode="full"):
    """The discrete linear convolution of 1-d ``a`` and ``v``.

    ``mode`` is ``'full'`` (every overlap), ``'same'`` (the length of the
    longer operand, centred) or ``'valid'`` (complete overlaps only), as in
    NumPy. Differentiable in both operands.

    >>> convolve(_np.array([1.0, 2.0, 3.0]), _np.array([0.0, 1.0, 0.5]))
    array([0. , 1. , 2.5, 4. , 1.5])
    """
    if not _traced(a, v):
        return _xp(a, v).convolve(a, v, mode=mode)
    a, v = _array(a), _array(v)
    n, m = _check_operands("convolve", a, v)
    start, length = _window("convolve", mode, n, m, (min(n, m) - 1) // 2)
    return _correlate_rows(a, _fshape.flip(v, 0), start, length)


def correlate(a, v, mode="valid"):
    """The cross-correlation ``c[k] = sum_n a[n + k] * conj(v[n])`` of 1-d
    sequences, with NumPy's modes (default ``'valid'``) and output alignment.

    Complex ``v`` is conjugated, as in NumPy. Differentiable in both operands.

    >>> correlate(_np.array([1.0, 2.0, 3.0]), _np.array([0.0, 1.0, 0.5]), "same")
    array([2. , 3.5, 3. ])
    """
    if not _traced(a, v):
        return _xp(a, v).correlate(a, v, mode=mode)
    a, v = _array(a), _array(v)
    n, m = _check_operands("correlate", a, v)
    # NumPy slides the shorter operand over the longer one, so 'same' is
    # centred on whichever is longer
    start, length = _window("correlate", mode, n, m, (m - 1) // 2 if n >= m else n // 2)
    if _get_aval(v).dtype.kind == "c":
        v = _ew.conj(v)
    return _correlate_rows(a, v, start, length)


# -- interpolation -------------------------------------------------------------------

def interp(x, xp, fp, left=None, right=None, period=None):
    """Piecewise-linear interpolation of the points ``(xp, fp)`` at ``x``.

    Differentiable in ``x`` (the slope of the segment ``x`` falls in; 0
    outside ``[xp[0], xp[-1]]``), in ``fp`` (and ``left``/``right``) and in
    the knots ``xp`` (moving a segment's ends moves the line). At a knot the
    derivative in ``x`` is the slope of the segment to its right (at the last
    knot, to its left). ``xp`` must be increasing (with ``period`` it is sorted
    modulo the period), as in NumPy. The result is float64 (complex128 for
    complex ``fp``), as NumPy's is.

    >>> interp(_np.array([0.5, 2.5, 9.0]), _np.array([0.0, 1.0, 3.0]),
    ...        _np.array([0.0, 2.0, 0.0]))
    array([1. , 0.5, 0. ])
    """
    if not _traced(x, xp, fp, left, right):
        return _xp(x, xp, fp).interp(x, xp, fp, left=left, right=right, period=period)
    x, fp = _array(x), _array(fp)
    xp = _array(xp)
    xp_aval, fp_aval = _get_aval(xp), _get_aval(fp)
    if xp_aval.ndim != 1 or fp_aval.ndim != 1 or xp_aval.shape != fp_aval.shape:
        raise _ArgumentError(f"interp: xp and fp must be 1-d of the same length, got "
                             f"shapes {xp_aval.shape} and {fp_aval.shape}")
    if xp_aval.shape[0] == 0:
        raise _ArgumentError("interp: xp and fp cannot be empty")
    out_dtype = _np.complex128 if fp_aval.dtype.kind == "c" else _np.float64
    x = _ew.convert_element_type(x, _np.float64)
    xp = _ew.convert_element_type(xp, _np.float64)
    fp = _ew.convert_element_type(fp, out_dtype)
    if period is not None:
        if period == 0:
            raise _ArgumentError("interp: period must be a non-zero value")
        period = abs(period)
        left = right = None
        x = _ew.remainder(x, period)
        xp = _ew.remainder(xp, period)
        order = _red.argsort_p.bind(xp, axis=0, kind="stable")
        xp, fp = _fshape.take(xp, order), _fshape.take(fp, order)
        # one point beyond each end, so that x near 0 or near period interpolates
        # across the wrap
        xp = _shape.concatenate([xp[-1:] - period, xp, xp[:1] + period], 0)
        fp = _shape.concatenate([fp[-1:], fp, fp[:1]], 0)
    n = _get_aval(xp).shape[0]
    if n == 1:
        out = _ew.add(_ew.multiply(x, 0.0), fp[0])
    else:
        # the segment x falls in: the last knot at or below it (a search, with
        # no derivative, in O(n + x.size) memory), kept inside [0, n - 2] so
        # both ends exist
        below = _search.searchsorted(xp, x, side="right")
        j = _ew.minimum(_ew.maximum(below - 1, 0), n - 2)
        x0, x1 = _fshape.take(xp, j), _fshape.take(xp, j + 1)
        f0, f1 = _fshape.take(fp, j), _fshape.take(fp, j + 1)
        out = f0 + (f1 - f0) / (x1 - x0) * (x - x0)
    out = _ew.where(_ew.less(x, xp[0]), fp[0] if left is None else left, out)
    out = _ew.where(_ew.greater(x, xp[-1]), fp[-1] if right is None else right, out)
    return _ew.convert_element_type(out, out_dtype)


# -- finite differences --------------------------------------------------------------

def _spacings(varargs, axes, shape):
    """One spacing per axis: a Python float (uniform) or a host array of the
    coordinate differences, as NumPy's ``gradient`` reads ``varargs``. Traced
    spacings are refused: read as constants they would lose their derivative."""
    for i, spacing in enumerate(varargs):
        if _contains_tracer(spacing):
            raise _MissingRuleError(
                f"gradient: no derivative with respect to its spacing argument "
                f"varargs[{i}] is defined: spacings are static parameters. Pass them "
                "as numbers or NumPy arrays computed outside the transformation.")
    if len(varargs) == 0:
        return [1.0] * len(axes)
    if len(varargs) == 1 and _np.ndim(_concrete(varargs[0])) == 0:
        return [float(_concrete(varargs[0]))] * len(axes)
    if len(varargs) != len(axes):
        raise _ArgumentError(f"gradient: give no spacing, one scalar, or one per axis "
                             f"({len(axes)}), got {len(varargs)}")
    out = []
    for spacing, ax in zip(varargs, axes):
        spacing = _np.asarray(_concrete(spacing), dtype=_np.float64)
        if spacing.ndim == 0:
            out.append(float(spacing))
            continue
        if spacing.shape != (shape[ax],):
            raise _ArgumentError(f"gradient: coordinates for axis {ax} must be 1-d "
                                 f"of length {shape[ax]}, got shape {spacing.shape}")
        dx = _np.diff(spacing)
        out.append(float(dx[0]) if (dx == dx[0]).all() else dx)
    return out


def _concrete(x):
    """The host value of a spacing: a static parameter, like an axis."""
    while isinstance(x, _Tracer):
        x = x.concrete()
    return _device_put(x, "cpu") if hasattr(x, "dtype") else x


def _along(coefficients, ax, f):
    """Host coefficients laid along axis ``ax`` and put on ``f``'s backend."""
    shape = [1] * _get_aval(f).ndim
    shape[ax] = -1
    return _asarray_on(_module_of_leaves([f]), _np.reshape(coefficients, shape))


def _gradient_axis(f, ax, dx, edge_order):
    n = _get_aval(f).shape[ax]

    def part(start, stop):
        return _indexing.slice_axis(f, ax, start, stop)
    uniform = isinstance(dx, float)
    if uniform:
        interior = (part(2, n) - part(0, n - 2)) / (2.0 * dx)
    else:
        dx1, dx2 = dx[:-1], dx[1:]
        a = _along(-dx2 / (dx1 * (dx1 + dx2)), ax, f)
        b = _along((dx2 - dx1) / (dx1 * dx2), ax, f)
        c = _along(dx1 / (dx2 * (dx1 + dx2)), ax, f)
        interior = a * part(0, n - 2) + b * part(1, n - 1) + c * part(2, n)
    if edge_order == 1:
        first = (part(1, 2) - part(0, 1)) / (dx if uniform else float(dx[0]))
        last = (part(n - 1, n) - part(n - 2, n - 1)) / (dx if uniform else float(dx[-1]))
    else:
        if uniform:
            a, b, c = -1.5 / dx, 2.0 / dx, -0.5 / dx
        else:
            dx1, dx2 = float(dx[0]), float(dx[1])
            a = -(2.0 * dx1 + dx2) / (dx1 * (dx1 + dx2))
            b = (dx1 + dx2) / (dx1 * dx2)
            c = -dx1 / (dx2 * (dx1 + dx2))
        first = a * part(0, 1) + b * part(1, 2) + c * part(2, 3)
        if uniform:
            a, b, c = 0.5 / dx, -2.0 / dx, 1.5 / dx
        else:
            dx1, dx2 = float(dx[-2]), float(dx[-1])
            a = dx2 / (dx1 * (dx1 + dx2))
            b = -(dx2 + dx1) / (dx1 * dx2)
            c = (2.0 * dx2 + dx1) / (dx2 * (dx1 + dx2))
        last = a * part(n - 3, n - 2) + b * part(n - 2, n - 1) + c * part(n - 1, n)
    return _shape.concatenate([first, interior, last], ax)


def gradient(f, *varargs, axis=None, edge_order=1):
    """NumPy's ``gradient``: central differences inside, one-sided differences
    of first or second order (``edge_order``) at the ends, along each axis.

    ``varargs`` gives the spacing: none (1), one scalar for every axis, or one
    scalar or 1-d coordinate array per axis (coordinates are constants).
    Returns one array for a single axis, else a tuple with one per axis. The
    result is linear in ``f``, and differentiable in it.

    >>> gradient(_np.array([1.0, 2.0, 4.0, 7.0]))
    array([1. , 1.5, 2.5, 3. ])
    """
    if not isinstance(f, _Tracer) and not _contains_tracer(list(varargs)):
        xp = _xp(f)
        varargs = [v if _np.ndim(v) == 0 else _asarray_on(xp, v) for v in varargs]
        return xp.gradient(f, *varargs, axis=axis, edge_order=edge_order)
    f = _array(f)
    aval = _get_aval(f)
    if edge_order not in (1, 2):
        raise _ArgumentError(f"gradient: edge_order must be 1 or 2, got {edge_order!r}")
    axes = tuple(range(aval.ndim)) if axis is None else (
        (_normalize_axis(axis, aval.ndim)[0],) if isinstance(axis, (int, _np.integer))
        else tuple(_normalize_axis(a, aval.ndim)[0] for a in axis))
    for ax in axes:
        if aval.shape[ax] < edge_order + 1:
            raise _ArgumentError(
                f"gradient: axis {ax} has length {aval.shape[ax]}; at least "
                f"edge_order + 1 = {edge_order + 1} points are needed")
    if aval.dtype.kind not in "fc":
        f = _ew.convert_element_type(f, _np.float64)
    dtype = _get_aval(f).dtype
    outs = tuple(_ew.convert_element_type(_gradient_axis(f, ax, dx, edge_order), dtype)
                 for ax, dx in zip(axes, _spacings(varargs, axes, aval.shape)))
    return outs[0] if len(outs) == 1 else outs


def ediff1d(ary, to_end=None, to_begin=None):
    """Differences of consecutive elements of the flattened ``ary``, with
    ``to_begin`` / ``to_end`` (cast to ``ary``'s dtype) put around them.

    >>> ediff1d(_np.array([1.0, 4.0, 9.0]), to_begin=0.0)
    array([0., 3., 5.])
    """
    if not _traced(ary, to_end, to_begin):
        return _xp(ary).ediff1d(ary, to_end=to_end, to_begin=to_begin)
    ary = _shape.reshape(_array(ary), (-1,))
    n = _get_aval(ary).shape[0]
    dtype = _get_aval(ary).dtype
    def flat(extra):
        return [] if extra is None else [_ew.convert_element_type(
            _shape.reshape(_array(extra), (-1,)), dtype)]
    differences = _indexing.slice_axis(ary, 0, 1, n) \
        - _indexing.slice_axis(ary, 0, 0, max(n - 1, 0))
    parts = flat(to_begin) + [differences] + flat(to_end)
    return parts[0] if len(parts) == 1 else _shape.concatenate(parts, 0)
