"""``numpy.fft`` over fgrad primitives, differentiable in both modes.

``n`` / ``s`` pad with zeros or truncate as in NumPy; ``norm`` is
``"backward"`` (default), ``"ortho"`` or ``"forward"``. Complex derivatives follow
JAX's convention (no conjugation). ``fftfreq`` and ``rfftfreq`` are NumPy's.
"""
import numpy as _np

from fgrad.core.trace import get_aval as _get_aval
from fgrad.numpy._arrays import asarray as _asarray
from fgrad.primitives import fft as _fft
from fgrad.primitives import shape as _shape
from fgrad.primitives.elementwise import conj as _conj
from fgrad.primitives.indexing import slice_axis as _slice_axis

fftfreq, rfftfreq = _np.fft.fftfreq, _np.fft.rfftfreq


def _as_array(x):
    return x if hasattr(x, "dtype") else _asarray(x)


def _norm(norm):
    norm = "backward" if norm is None else norm
    if norm not in _fft.NORMS:
        raise ValueError(f"fft: invalid norm {norm!r}; use one of 'backward', "
                         "'ortho', 'forward' (or None)")
    return norm


def _axes_and_lengths(x, s, axes, default_axes):
    ndim = _get_aval(x).ndim
    if axes is None:
        axes = default_axes(ndim) if s is None else tuple(range(ndim - len(s), ndim))
    axes = tuple(int(a) % ndim if ndim else int(a) for a in axes)
    if s is not None and len(s) != len(axes):
        raise ValueError(f"fft: s has {len(s)} lengths but there are {len(axes)} axes")
    return axes, s


def _all_axes(ndim):
    return tuple(range(ndim))


def _last_two(ndim):
    return (ndim - 2, ndim - 1)


def _complex_to_complex(x, s, axes, norm, kind, default_axes=_all_axes):
    x = _as_array(x)
    axes, s = _axes_and_lengths(x, s, axes, default_axes)
    shape = _get_aval(x).shape
    s = tuple(shape[a] for a in axes) if s is None else tuple(int(n) for n in s)
    for a, n in zip(axes, s):
        if n < 1:
            raise ValueError(f"fft: invalid number of data points ({n}) specified")
        x = _fft.pad_or_truncate(x, a, n)
    return _fft.fft(x, kind, axes, s, _norm(norm))


def _real_to_complex(x, s, axes, norm, default_axes=_all_axes):
    x = _as_array(x)
    if _get_aval(x).dtype.kind == "c":
        raise TypeError("rfft: the input must be real; use fft for complex input")
    return _complex_to_complex(x, s, axes, norm, "rfft", default_axes)


def _complex_to_real(x, s, axes, norm, default_axes=_all_axes):
    x = _as_array(x)
    axes, s = _axes_and_lengths(x, s, axes, default_axes)
    shape = _get_aval(x).shape
    if s is None:
        s = tuple(shape[a] for a in axes[:-1]) + (2 * (shape[axes[-1]] - 1),)
    s = tuple(int(n) for n in s)
    if s[-1] < 1:
        raise ValueError(f"irfft: invalid number of data points ({s[-1]}) specified")
    for a, n in zip(axes[:-1], s[:-1]):
        x = _fft.pad_or_truncate(x, a, n)
    x = _fft.pad_or_truncate(x, axes[-1], s[-1] // 2 + 1)
    return _fft.fft(x, "irfft", axes, s, _norm(norm))


def _one(n):
    return None if n is None else (n,)


def fft(a, n=None, axis=-1, norm=None):
    """1-D discrete Fourier transform.

    >>> import numpy as np
    >>> fft(np.array([1.0, 0.0, 0.0, 0.0]))
    array([1.+0.j, 1.+0.j, 1.+0.j, 1.+0.j])
    """
    return _complex_to_complex(a, _one(n), (axis,), norm, "fft")


def ifft(a, n=None, axis=-1, norm=None):
    """1-D inverse discrete Fourier transform."""
    return _complex_to_complex(a, _one(n), (axis,), norm, "ifft")


def rfft(a, n=None, axis=-1, norm=None):
    """1-D transform of real input: the non-negative frequencies.

    >>> import numpy as np
    >>> rfft(np.ones(4))
    array([4.+0.j, 0.+0.j, 0.+0.j])
    """
    return _real_to_complex(a, _one(n), (axis,), norm)


def irfft(a, n=None, axis=-1, norm=None):
    """Inverse of `rfft`: ``n`` real outputs (default ``2 * (m - 1)``)."""
    return _complex_to_real(a, _one(n), (axis,), norm)


def fft2(a, s=None, axes=(-2, -1), norm=None):
    """2-D discrete Fourier transform over ``axes``."""
    return _complex_to_complex(a, s, axes, norm, "fft", _last_two)


def ifft2(a, s=None, axes=(-2, -1), norm=None):
    """2-D inverse discrete Fourier transform over ``axes``."""
    return _complex_to_complex(a, s, axes, norm, "ifft", _last_two)


def rfft2(a, s=None, axes=(-2, -1), norm=None):
    """2-D transform of real input."""
    return _real_to_complex(a, s, axes, norm, _last_two)


def irfft2(a, s=None, axes=(-2, -1), norm=None):
    """Inverse of `rfft2`."""
    return _complex_to_real(a, s, axes, norm, _last_two)


def fftn(a, s=None, axes=None, norm=None):
    """N-D discrete Fourier transform (all axes by default)."""
    return _complex_to_complex(a, s, axes, norm, "fft")


def ifftn(a, s=None, axes=None, norm=None):
    """N-D inverse discrete Fourier transform."""
    return _complex_to_complex(a, s, axes, norm, "ifft")


def rfftn(a, s=None, axes=None, norm=None):
    """N-D transform of real input."""
    return _real_to_complex(a, s, axes, norm)


def irfftn(a, s=None, axes=None, norm=None):
    """Inverse of `rfftn`."""
    return _complex_to_real(a, s, axes, norm)


def _roll(x, shift, axis):
    n = _get_aval(x).shape[axis]
    shift %= n if n else 1
    if shift == 0:
        return x
    return _shape.concatenate([_slice_axis(x, axis, n - shift, n),
                               _slice_axis(x, axis, 0, n - shift)], axis)


def _shift(x, axes, sign):
    x = _as_array(x)
    ndim = _get_aval(x).ndim
    if axes is None:
        axes = tuple(range(ndim))
    elif isinstance(axes, (int, _np.integer)):
        axes = (axes,)
    for a in axes:
        a = int(a) % ndim
        n = _get_aval(x).shape[a]
        x = _roll(x, sign * (n // 2), a)
    return x


def fftshift(x, axes=None):
    """Move the zero-frequency term to the centre.

    >>> import numpy as np
    >>> fftshift(np.arange(4.0))
    array([2., 3., 0., 1.])
    """
    return _shift(x, axes, 1)


def ifftshift(x, axes=None):
    """Inverse of `fftshift`."""
    return _shift(x, axes, -1)


# hfft / ihfft: the transforms of a signal with Hermitian symmetry, through the
# real ones with the normalisation direction swapped (as NumPy defines them)
_SWAPPED_NORM = {None: "forward", "backward": "forward", "forward": "backward",
                 "ortho": "ortho"}


def hfft(a, n=None, axis=-1, norm=None):
    """The FFT of a signal with Hermitian symmetry (its half spectrum ``a``): a
    real result of length ``n`` (default ``2 * (m - 1)``).

    >>> import numpy as np
    >>> hfft(np.array([1.0, 2.0, 1.0]))
    array([ 6.,  0., -2.,  0.])
    """
    return irfft(_conj(a), n, axis, _SWAPPED_NORM[norm])


def ihfft(a, n=None, axis=-1, norm=None):
    """The inverse of `hfft`: the half spectrum of the real signal ``a``."""
    return _conj(rfft(a, n, axis, _SWAPPED_NORM[norm]))
