"""Discrete Fourier transforms: one primitive, ``fft_p``, for the four kinds.

``fft_p(x, kind, axes, s, norm)`` computes ``xp.fft.{fftn, ifftn, rfftn,
irfftn}(x, s, axes, norm)``. The public wrappers pad or truncate the input first
(with differentiable slicing and concatenation), so for ``fft``, ``ifft`` and
``rfft`` the lengths ``s`` equal the input's along ``axes``, and for ``irfft`` the
input's last transformed axis has ``s[-1] // 2 + 1`` entries.

Derivatives (JAX's convention: the VJP is the transpose, no conjugation):

- ``fft`` and ``ifft`` are symmetric matrices, so each is its own transpose
  (with the same ``norm``);
- ``rfft`` is "real to complex, then keep the first half": its transpose pads
  the cotangent back to full length, transforms, and keeps the real part;
- ``irfft`` reads the half spectrum as the Hermitian full spectrum, so entries
  other than the first (and, for even lengths, the last) count twice: its
  transpose is the conjugated ``rfft`` weighted 1, 2, ..., 2, 1 (JAX's rule).
"""
import numpy as np

from fgrad.core.backend import array_module
from fgrad.core.trace import Primitive, ShapedArray, get_aval

FAMILY = "primitives/fft.py"

NORMS = ("backward", "ortho", "forward")
# The norm whose scaling of the forward transform equals this norm's scaling of
# the inverse transform: irfft(norm)'s transpose is rfft(dual norm).
_DUAL = {"backward": "forward", "ortho": "ortho", "forward": "backward"}


def _complex_dtype(dtype):
    return np.result_type(dtype, np.complex64) if dtype.kind in "fc" else \
        np.dtype(np.complex128)


def _fft_abstract(x, kind, axes, s, norm):
    shape = list(x.shape)
    for ax, n in zip(axes, s):
        shape[ax] = n
    if kind == "rfft":
        shape[axes[-1]] = s[-1] // 2 + 1
    dtype = _complex_dtype(x.dtype)
    if kind == "irfft":
        dtype = np.finfo(dtype).dtype
    return ShapedArray(tuple(shape), dtype)


_IMPL = {"fft": "fftn", "ifft": "ifftn", "rfft": "rfftn", "irfft": "irfftn"}


def _fft_impl(x, kind, axes, s, norm):
    fn = getattr(array_module(x).fft, _IMPL[kind])
    return fn(x, s=s, axes=axes, norm=norm)


fft_p = Primitive("fft", _fft_impl, _fft_abstract, family=FAMILY)


def pad_or_truncate(x, axis, n):
    """``x`` cut or zero-padded to length ``n`` along ``axis`` (differentiable)."""
    shape = get_aval(x).shape
    size = shape[axis]
    if n == size:
        return x
    if n < size:
        return slice_axis(x, axis, 0, n)
    block = list(shape)
    block[axis] = n - size
    zero = zeros_like(slice_axis(x, axis, 0, 1))
    return concatenate([x, broadcast_to(zero, tuple(block))], axis)


def _hermitian_weights(x, axis, n):
    # 1 for the zero-frequency entry (and the Nyquist one when n is even), 2 for
    # the others, which stand for a pair of conjugate frequencies.
    m = get_aval(x).shape[axis]
    last = m if n % 2 else m - 1
    parts = [slice_axis(x, axis, 0, 1)]
    if last > 1:
        parts.append(slice_axis(x, axis, 1, last) * 2.0)
    if last < m:
        parts.append(slice_axis(x, axis, last, m))
    return concatenate(parts, axis)


def _fft_vjp(ct, ans, x, kind, axes, s, norm):
    if kind in ("fft", "ifft"):
        return cast_like(fft(ct, kind, axes, s, norm), get_aval(x))
    if kind == "rfft":
        full = pad_or_truncate(ct, axes[-1], s[-1])
        return cast_like(real(fft(full, "fft", axes, s, norm)), get_aval(x))
    spectrum = fft(ct, "rfft", axes, s, _DUAL[norm])
    return cast_like(conj(_hermitian_weights(spectrum, axes[-1], s[-1])), get_aval(x))


def _fft_jvp(t, ans, x, kind, axes, s, norm):
    return cast_like(fft(t, kind, axes, s, norm), get_aval(ans))


fft_p.def_vjp(_fft_vjp)
fft_p.def_jvp(_fft_jvp)


def _fft_batch(args, dims, kind, axes, s, norm):
    # the transformed axes shift past the batch axis, which stays in place
    (x,), (d,) = args, dims
    return fft(x, kind, tuple(a + (a >= d) for a in axes), s, norm), d


fft_p.batch = _fft_batch


def fft(x, kind, axes, s, norm="backward"):
    """Bind ``fft_p``: ``kind`` in fft/ifft/rfft/irfft over ``axes`` with lengths ``s``."""
    return fft_p.bind(x, kind=kind, axes=tuple(axes), s=tuple(s), norm=norm)


# Families use each other's functions in their rules; importing them last
# makes the cycle harmless (every name above exists by then).
from fgrad.primitives.creation import zeros_like  # noqa: E402
from fgrad.primitives.elementwise import cast_like, conj, real  # noqa: E402
from fgrad.primitives.indexing import slice_axis  # noqa: E402
from fgrad.primitives.shape import broadcast_to, concatenate  # noqa: E402
