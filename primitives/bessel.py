"""The modified Bessel functions of the first kind I0 and I1, without SciPy.

One primitive, ``bessel_i_over_power``: g_n(x) = I_n(x) / x**n for a static
integer order n. Divided by its leading power it is an even, entire function
with no singularity at x = 0, and its derivative stays in the family:

    d/dx g_n(x) = x * g_{n+1}(x)

(from d/dx [x^-n I_n(x)] = x^-n I_{n+1}(x)), so every order of derivative is
finite everywhere, 0 included. ``i0(x) = g_0(x)`` and ``i1(x) = x * g_1(x)``.
`fgrad.numpy.i0` and `fgrad.scipy.special.i0` / ``i1`` both bind it: one
implementation, evaluated with the operand's own array module (no SciPy).

Evaluation, for z = |x|:

- below ``_SWITCH``, the ascending series
  g_n = sum_k (z^2/4)^k / (2^n k! (k+n)!), every term positive (no cancellation),
  summed by Horner's rule over enough terms to reach double precision;
- above it, Hankel's asymptotic expansion
  I_n(z) ~ e^z / sqrt(2 pi z) * sum_k prod_{j<=k} ((2j-1)^2 - 4n^2) / (8 j z),
  whose terms keep shrinking past the last one used while k < 2z, with the
  exponential folded into one ``exp`` (finite as long as I_n itself is).
"""
import math

import numpy as np

from fgrad.core.backend import array_module
from fgrad.core.trace import Primitive, ShapedArray, get_aval
from fgrad.primitives.batching import unary_batch_rule
from fgrad.primitives.elementwise import cast_like

FAMILY = "primitives/bessel.py"

_SWITCH = 25.0
# at z = 25 the series' terms past k = 55 are below 1e-25 of the sum, and the
# asymptotic terms past k = 35 below 1e-19 of it
_SERIES_TERMS = 55
_ASYMPTOTIC_TERMS = 35


def _series(q, n):
    """sum_k q^k n! / (k! (k+n)!) by Horner's rule (q = z^2/4 >= 0)."""
    s = 1.0
    for k in range(_SERIES_TERMS, 0, -1):
        s = 1.0 + s * (q * (1.0 / (k * (k + n))))
    return s


def _asymptotic(z, n):
    """sum_k prod_{j<=k} ((2j-1)^2 - 4n^2) / (8 j z), by Horner's rule."""
    s = 1.0
    for k in range(_ASYMPTOTIC_TERMS, 0, -1):
        s = 1.0 + s * (((2 * k - 1) ** 2 - 4 * n * n) / (8.0 * k)) / z
    return s


def _impl(x, n):
    xp = array_module(x)
    dtype = _abstract(get_aval(x), n).dtype
    z = xp.abs(xp.asarray(x)).astype(dtype, copy=False)
    small = xp.minimum(z, _SWITCH)
    near = _series(small * small * 0.25, n) * (1.0 / (2.0 ** n * math.factorial(n)))
    big = xp.maximum(z, _SWITCH)
    with np.errstate(over="ignore", invalid="ignore"):
        far = xp.exp(big - 0.5 * xp.log((2 * math.pi) * big) - n * xp.log(big)) \
            * _asymptotic(big, n)
    far = xp.where(xp.isinf(big), big, far)          # I_n(inf) = inf, not inf - inf
    return xp.where(z < _SWITCH, near, far).astype(dtype, copy=False)


def _abstract(x, n):
    return ShapedArray(x.shape, x.dtype if x.dtype.kind == "f" else np.dtype(np.float64))


bessel_i_over_power_p = Primitive("bessel_i_over_power", _impl, _abstract, family=FAMILY)
bessel_i_over_power_p.def_vjp(lambda ct, ans, x, n: cast_like(
    ct * (x * bessel_i_over_power(x, n + 1)), get_aval(x)))
bessel_i_over_power_p.def_jvp(lambda t, ans, x, n: t * (x * bessel_i_over_power(x, n + 1)))
bessel_i_over_power_p.batch = unary_batch_rule(bessel_i_over_power_p)


def bessel_i_over_power(x, n):
    """I_n(x) / x**n, an even entire function (its value at 0 is 1 / (2^n n!))."""
    return bessel_i_over_power_p.bind(x, n=n)


def i0(x):
    """The modified Bessel function of the first kind of order 0.

    >>> i0(np.array([0.0, 1.0]))
    array([1.        , 1.26606588])
    """
    return bessel_i_over_power(x, 0)


def i1(x):
    """The modified Bessel function of the first kind of order 1.

    >>> i1(np.array([0.0, 1.0]))
    array([0.       , 0.5651591])
    """
    return x * bessel_i_over_power(x, 1)
