"""Continuous distributions built on uniform and normal draws.

Each sampler is fgrad arithmetic on one draw of `fgrad.primitives.random`, as
``jax.random``'s are, so gradients flow through location, scale and bounds
(the reparameterization trick) and every transformation applies. Dtypes
default to float64 (NumPy's default); float32 asked for stays float32.
"""
import math

import numpy as np

from fgrad import numpy as fnp
from fgrad.core.errors import RandomArgumentError
from fgrad.core.trace import get_aval
from fgrad.primitives import random as _p
from fgrad.primitives.special import erf, erfinv
from fgrad.random._keys import as_shape, check_key, split


def float_dtype(dtype, fname, complex_ok=False):
    """``dtype`` (None or ``float`` for float64) as a NumPy float dtype."""
    dtype = np.dtype(np.float64 if dtype is None else dtype)
    if dtype.kind != "f" and not (complex_ok and dtype.kind == "c"):
        raise RandomArgumentError(f"fgrad.random.{fname}: dtype must be a float dtype, "
                                  f"got {dtype}.")
    return dtype


def as_param(x, dtype):
    """A distribution's parameter as an array (or tracer) of ``dtype``; a
    number stays a Python number (rounded to ``dtype``), which joins arrays of
    any dtype and on any device as NumPy's scalars do not."""
    if isinstance(x, (int, float, np.number)) and not isinstance(x, (bool, np.bool_)):
        return np.dtype(dtype).type(x).item()
    return fnp.asarray(x, dtype)


def broadcast_param(key, x, shape, dtype):
    """``x`` (from `as_param`) broadcast to ``shape``, as ``dtype`` and on the
    key's device."""
    if isinstance(x, (int, float)):
        x = fnp.full_like(key[0], x, dtype)
    return fnp.broadcast_to(x, shape)


def check_broadcast(fname, shape, *params):
    """That ``params`` broadcast to ``shape``, the draw's shape."""
    shapes = [get_aval(p).shape for p in params]
    try:
        fits = np.broadcast_shapes(shape, *shapes) == shape
    except ValueError:
        fits = False
    if not fits:
        raise RandomArgumentError(f"fgrad.random.{fname}: parameters of shapes "
                                  f"{', '.join(map(str, shapes))} do not broadcast to the "
                                  f"shape {shape}: pass a shape they broadcast to, or "
                                  "shape=None where the sampler takes it from them.")


def param_shape(fname, shape, *params):
    """``shape`` if given (checked against ``params``), else theirs broadcast."""
    if shape is None:
        return np.broadcast_shapes(*(get_aval(p).shape for p in params))
    shape = as_shape(shape, fname)
    check_broadcast(fname, shape, *params)
    return shape


def batch_shape(fname, shape, batch, what):
    """``shape`` if given (``batch``, the ``what``'s batch shape, must
    broadcast to it), else ``batch``."""
    if shape is None:
        return batch
    shape = as_shape(shape, fname)
    try:
        fits = np.broadcast_shapes(shape, batch) == shape
    except ValueError:
        fits = False
    if not fits:
        raise RandomArgumentError(f"fgrad.random.{fname}: the batch shape of {what}, "
                                  f"{batch}, does not broadcast to shape {shape}.")
    return shape


def uniform(key, shape=(), dtype=float, minval=0.0, maxval=1.0):
    """Uniform on [``minval``, ``maxval``), differentiable in both bounds.

    >>> u = fgrad.random.uniform(fgrad.random.key(0), (3,))
    >>> bool(((0 <= u) & (u < 1)).all()), u.dtype
    (True, dtype('float64'))
    """
    key = check_key(key, "uniform")
    shape = as_shape(shape, "uniform")
    dtype = float_dtype(dtype, "uniform")
    u = _p.random_uniform(key, shape, dtype)
    if isinstance(minval, (int, float)) and isinstance(maxval, (int, float)) \
            and (minval, maxval) == (0, 1):
        return u
    minval, maxval = as_param(minval, dtype), as_param(maxval, dtype)
    check_broadcast("uniform", shape, minval, maxval)
    # rounding may take minval + u * span below minval: JAX clamps it too
    return fnp.maximum(minval, u * (maxval - minval) + minval)


def normal(key, shape=(), dtype=float):
    """Standard normal samples (complex dtypes: real and imaginary parts each of
    variance 1/2).

    >>> fgrad.random.normal(fgrad.random.key(0), (2, 3), np.float32).dtype
    dtype('float32')
    """
    key = check_key(key, "normal")
    shape = as_shape(shape, "normal")
    dtype = float_dtype(dtype, "normal", complex_ok=True)
    if dtype.kind == "c":
        real = np.dtype(f"f{dtype.itemsize // 2}")
        k1, k2 = split(key)
        scale = math.sqrt(0.5)
        return (_p.random_normal(k1, shape, real) * scale
                + 1j * (_p.random_normal(k2, shape, real) * scale)).astype(dtype)
    return _p.random_normal(key, shape, dtype)


def exponential(key, shape=(), dtype=float):
    """Exponential samples of rate 1: ``-log(1 - u)``.

    >>> bool((fgrad.random.exponential(fgrad.random.key(0), (5,)) >= 0).all())
    True
    """
    u = uniform(check_key(key, "exponential"), shape, float_dtype(dtype, "exponential"))
    return -fnp.log1p(-u)


def gumbel(key, shape=(), dtype=float):
    """Standard Gumbel samples: ``-log(-log(u))``, ``u`` kept above 0.

    >>> fgrad.random.gumbel(fgrad.random.key(0), (2,)).shape
    (2,)
    """
    dtype = float_dtype(dtype, "gumbel")
    u = uniform(check_key(key, "gumbel"), shape, dtype, np.finfo(dtype).tiny, 1.0)
    return -fnp.log(-fnp.log(u))


def laplace(key, shape=(), dtype=float):
    """Standard Laplace samples: ``sign(u) log(1 - |u|)`` for ``u`` in (-1, 1).

    >>> fgrad.random.laplace(fgrad.random.key(0), (2,)).shape
    (2,)
    """
    dtype = float_dtype(dtype, "laplace")
    u = uniform(check_key(key, "laplace"), shape, dtype, -1.0 + np.finfo(dtype).epsneg,
                1.0)
    return fnp.sign(u) * fnp.log1p(-fnp.abs(u))


def logistic(key, shape=(), dtype=float):
    """Standard logistic samples: ``log(u / (1 - u))``.

    >>> fgrad.random.logistic(fgrad.random.key(0), (2,)).shape
    (2,)
    """
    dtype = float_dtype(dtype, "logistic")
    u = uniform(check_key(key, "logistic"), shape, dtype, np.finfo(dtype).tiny, 1.0)
    return fnp.log(u / (1.0 - u))


def cauchy(key, shape=(), dtype=float):
    """Standard Cauchy samples: ``tan(pi (u - 1/2))``.

    >>> fgrad.random.cauchy(fgrad.random.key(0), (2,)).shape
    (2,)
    """
    dtype = float_dtype(dtype, "cauchy")
    u = uniform(check_key(key, "cauchy"), shape, dtype, np.finfo(dtype).eps, 1.0)
    return fnp.tan(math.pi * (u - 0.5))


def truncated_normal(key, lower, upper, shape=None, dtype=float):
    """Standard normal samples conditioned on (``lower``, ``upper``), by the
    inverse of the normal CDF (needs SciPy); differentiable in the bounds.

    >>> x = fgrad.random.truncated_normal(fgrad.random.key(0), -1.0, 2.0, (100,))
    >>> bool(((-1 < x) & (x < 2)).all())
    True
    """
    key = check_key(key, "truncated_normal")
    dtype = float_dtype(dtype, "truncated_normal")
    lower, upper = as_param(lower, dtype), as_param(upper, dtype)
    shape = param_shape("truncated_normal", shape, lower, upper)
    lower, upper = (broadcast_param(key, b, get_aval(b).shape, dtype) for b in (lower, upper))
    sqrt2 = math.sqrt(2.0)
    u = uniform(key, shape, dtype, erf(lower / sqrt2), erf(upper / sqrt2))
    x = sqrt2 * erfinv(u)
    # rounding (or u at a bound) must not put a sample on or past a bound
    return fnp.clip(x, fnp.nextafter(fnp.stop_gradient(lower), np.inf),
                    fnp.nextafter(fnp.stop_gradient(upper), -np.inf))


def multivariate_normal(key, mean, cov, shape=None, dtype=None, method="cholesky"):
    """Samples of N(``mean``, ``cov``): ``mean + A z`` with ``A A^T = cov``
    (``method``: "cholesky", "eigh" or "svd", the last two for semidefinite
    ``cov``). ``shape`` is the batch shape, ``mean.shape[:-1]`` and
    ``cov.shape[:-2]`` broadcast by default.

    >>> fgrad.random.multivariate_normal(fgrad.random.key(0), np.zeros(2),
    ...                                  np.eye(2), (5,)).shape
    (5, 2)
    """
    key = check_key(key, "multivariate_normal")
    dtype = float_dtype(dtype, "multivariate_normal")
    if method not in ("cholesky", "eigh", "svd"):
        raise RandomArgumentError(f"fgrad.random.multivariate_normal: method must be "
                                  f"'cholesky', 'eigh' or 'svd', got {method!r}.")
    mean, cov = as_param(mean, dtype), as_param(cov, dtype)
    mean_shape, cov_shape = get_aval(mean).shape, get_aval(cov).shape
    if len(mean_shape) < 1 or len(cov_shape) < 2 \
            or cov_shape[-2:] != mean_shape[-1:] * 2:
        raise RandomArgumentError(
            f"fgrad.random.multivariate_normal: mean must have shape (..., n) and cov "
            f"(..., n, n), got {mean_shape} and {cov_shape}.")
    shape = batch_shape("multivariate_normal", shape,
                        np.broadcast_shapes(mean_shape[:-1], cov_shape[:-2]), "mean and cov")
    if method == "cholesky":
        factor = fnp.linalg.cholesky(cov)
    elif method == "eigh":
        w, v = fnp.linalg.eigh(cov)
        factor = v * fnp.sqrt(fnp.maximum(w, 0.0))[..., None, :]
    else:
        u, s, _ = fnp.linalg.svd(cov)
        factor = u * fnp.sqrt(s)[..., None, :]
    z = _p.random_normal(key, shape + mean_shape[-1:], dtype)
    return mean + fnp.matmul(factor, z[..., None])[..., 0]
