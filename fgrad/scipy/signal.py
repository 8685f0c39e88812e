"""``scipy.signal``'s n-dimensional ``convolve``, ``correlate`` and ``fftconvolve``.

Every mode of SciPy (``'full'``, ``'same'``, ``'valid'``) and both methods:
``method='direct'`` sums shifted copies of ``in1`` weighted by each entry of
``in2`` (``in2.size`` terms, for small kernels); ``method='fft'`` multiplies the
real FFTs (`fgrad.numpy.fft`); ``'auto'`` picks the FFT once the direct sum
would need many terms. All are written with differentiable fgrad functions, so
the derivatives in both inputs go to any order and vmap maps them. Real inputs.

>>> import numpy as np
>>> convolve(np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 0.5]))
array([0. , 1. , 2.5, 4. , 1.5])
>>> correlate(np.ones((2, 2)), np.ones((2, 2)), mode="valid")
array([[4.]])
"""
import itertools as _itertools

import numpy as _np

import fgrad.numpy as _fnp
from fgrad.core.errors import ScipyArgumentError as _ScipyArgumentError
from fgrad.core.trace import get_aval as _get_aval

_MODES = ("full", "same", "valid")
_DIRECT_TERMS = 64        # 'auto' sums directly up to this many kernel entries


def _shapes(name, in1, in2, mode):
    if mode not in _MODES:
        raise _ScipyArgumentError(f"{name}: mode must be one of {_MODES}, got {mode!r}")
    s1, s2 = _get_aval(in1).shape, _get_aval(in2).shape
    if len(s1) != len(s2):
        raise _ScipyArgumentError(f"{name}: in1 and in2 must have the same number of "
                                  f"dimensions, got shapes {s1} and {s2}")
    if 0 in s1 or 0 in s2:
        raise _ScipyArgumentError(f"{name}: in1 and in2 cannot be empty")
    return s1, s2


def _valid_swap(name, s1, s2):
    # SciPy's 'valid' needs one input at least as large as the other in every
    # dimension; convolution commutes, so the larger one goes first
    if all(a >= b for a, b in zip(s1, s2)):
        return False
    if all(a <= b for a, b in zip(s1, s2)):
        return True
    raise _ScipyArgumentError(f"{name}: for mode='valid', one input must be at least as "
                              f"large as the other in every dimension, got {s1} and {s2}")


def _crop(full, s1, s2, mode):
    # SciPy's centring: 'same' is in1's shape, 'valid' |s1 - s2| + 1
    if mode == "full":
        return full
    target = s1 if mode == "same" else tuple(abs(a - b) + 1 for a, b in zip(s1, s2))
    starts = [(f - t) // 2 for f, t in zip(_get_aval(full).shape, target)]
    return full[tuple(slice(b, b + t) for b, t in zip(starts, target))]


def _direct_full(in1, in2, s1, s2):
    # full[i] = sum_k in1[i - k] in2[k]: one shifted, weighted copy of in1 per k
    total = None
    for k in _itertools.product(*(range(n) for n in s2)):
        shifted = _fnp.pad(in1, [(ki, n - 1 - ki) for ki, n in zip(k, s2)])
        term = shifted * in2[k]
        total = term if total is None else total + term
    return total


def _fft_full(in1, in2, s1, s2):
    size = tuple(a + b - 1 for a, b in zip(s1, s2))
    axes = tuple(range(len(size)))
    product = _fnp.fft.rfftn(in1, size, axes) * _fnp.fft.rfftn(in2, size, axes)
    return _fnp.fft.irfftn(product, size, axes)


def fftconvolve(in1, in2, mode="full", axes=None):
    """The convolution of ``in1`` and ``in2`` through real FFTs (all axes).

    >>> import numpy as np
    >>> np.round(fftconvolve(np.array([1.0, 2.0]), np.array([1.0, 1.0])), 12)
    array([1., 3., 2.])
    """
    if axes is not None:
        raise _ScipyArgumentError("fftconvolve: axes= is not supported; it convolves over "
                                  "every axis (vmap over the others)")
    return _convolve("fftconvolve", in1, in2, mode, "fft")


def convolve(in1, in2, mode="full", method="auto"):
    """The n-dimensional convolution, SciPy's ``mode`` and ``method``."""
    return _convolve("convolve", in1, in2, mode, method)


def correlate(in1, in2, mode="full", method="auto"):
    """The n-dimensional cross-correlation: ``convolve`` with ``in2`` reversed
    along every axis."""
    in1, in2 = _fnp.asarray(in1), _fnp.asarray(in2)
    s1, s2 = _shapes("correlate", in1, in2, mode)
    reversed_in2 = in2[tuple(slice(None, None, -1) for _ in s2)]
    if mode == "valid" and _valid_swap("correlate", s1, s2):
        # SciPy: the output of the swapped correlation, reversed
        out = _convolve("correlate", in2, in1[tuple(slice(None, None, -1) for _ in s1)],
                        mode, method)
        return out[tuple(slice(None, None, -1) for _ in s1)]
    return _convolve("correlate", in1, reversed_in2, mode, method)


def _convolve(name, in1, in2, mode, method):
    in1, in2 = _fnp.asarray(in1), _fnp.asarray(in2)
    s1, s2 = _shapes(name, in1, in2, mode)
    if method not in ("auto", "direct", "fft"):
        raise _ScipyArgumentError(f"{name}: method must be 'auto', 'direct' or 'fft', "
                                  f"got {method!r}")
    if method == "auto":
        method = "direct" if min(_np.prod(s1), _np.prod(s2)) <= _DIRECT_TERMS else "fft"
    if mode == "valid" and _valid_swap(name, s1, s2):
        in1, in2, s1, s2 = in2, in1, s2, s1
    if method == "direct" and _np.prod(s2) > _np.prod(s1):
        # fewer terms with the smaller input as the kernel (convolution commutes);
        # the crop below still centres on the original in1
        full = _direct_full(in2, in1, s2, s1)
    else:
        full = (_direct_full if method == "direct" else _fft_full)(in1, in2, s1, s2)
    return _crop(full, s1, s2, mode)
