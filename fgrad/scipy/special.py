"""``scipy.special`` functions with derivatives, under SciPy's names and signatures.

The elementary ones (``erf``, ``gammaln``, ``digamma``, ``gamma``, the Bessel
functions, ``zeta``, ``gammainc``, ...) are primitives evaluated by SciPy, whose
derivatives are written with fgrad functions, so they compose to any order and
under vmap; the rest are composites whose gradients stay finite where the naive
formula's would not (``xlogy`` at ``x == 0``, ``logsumexp`` for large inputs).

An argument without a derivative -- an integer order (``n`` of ``jn``), a real
order or shape parameter with no closed-form derivative (``v`` of ``iv``, ``a``
of ``gammainc``, ``x`` of ``zeta``) -- raises `MissingRuleError` naming it when
differentiated, never a silent zero.

>>> import numpy as np
>>> float(gamma(5.0))
24.0
"""
import math as _math

import numpy as _np

from fgrad.core.trace import get_aval as _get_aval
from fgrad.numpy import logsumexp as _logsumexp
from fgrad.primitives import elementwise as _ew
from fgrad.primitives import scipy_special as _ssp
from fgrad.primitives import special as _sp

erf, erfc, erfinv = _sp.erf, _sp.erfc, _sp.erfinv
gammaln, digamma, polygamma = _sp.gammaln, _sp.digamma, _sp.polygamma
expit, log_ndtr = _sp.expit, _sp.log_ndtr
psi = digamma
gamma, gammasgn, rgamma, beta = _ssp.gamma, _ssp.gammasgn, _ssp.rgamma, _ssp.beta
gammainc, gammaincc, betainc = _ssp.gammainc, _ssp.gammaincc, _ssp.betainc
erfcinv, stdtr = _ssp.erfcinv, _ssp.stdtr
j0, j1, jn, y0, y1, yn = _ssp.j0, _ssp.j1, _ssp.jn, _ssp.y0, _ssp.y1, _ssp.yn
i0, i1, iv, ive, kv = _ssp.i0, _ssp.i1, _ssp.iv, _ssp.ive, _ssp.kv


def zeta(x, q=None):
    """The Hurwitz zeta function ``sum_k (k + q)^-x`` (Riemann's when ``q`` is
    None); differentiable in ``q``.

    >>> round(float(zeta(2.0)), 6)
    1.644934
    """
    return _ssp.zeta(x, 1.0 if q is None else q)


def multigammaln(a, d):
    """The log of the multivariate gamma function of dimension ``d`` (an int).

    >>> round(float(multigammaln(3.0, 2)), 6)
    1.550195
    """
    d = int(d)
    total = (d * (d - 1) * 0.25) * _math.log(_math.pi)   # a Python float keeps float32
    for j in range(1, d + 1):
        total = total + gammaln(a - (j - 1.0) / 2)
    return total


def entr(x):
    """``-x log(x)``: 0 at 0 and -inf for negative ``x``, as SciPy's.

    >>> float(entr(1.0))
    -0.0
    """
    negative = _ew.less(x, 0)
    # the inner where keeps log's argument positive, so the branch that is
    # differentiated stays finite (the double-where technique)
    value = -xlogy(x, _ew.where(negative, 1.0, x))
    return _ew.where(negative, -_np.inf, value)


def logit(p):
    """``log(p / (1 - p))``.

    >>> float(logit(0.5))
    0.0
    """
    return _ew.log(p) - _ew.log1p(-p)


def _x_times_log(x, y, log, singular):
    # log(y) is infinite where y == singular; there x * log(y) is 0 if x == 0
    # (scipy's convention) and x * -inf otherwise. The inner where keeps the
    # infinity out of the branch that is differentiated, so the gradient stays
    # finite at x == 0 (d/dx = log(y) for ordinary y) -- the double where.
    bad = _ew.equal(y, singular)
    safe_y = _ew.where(bad, singular + 1.0, y)
    main = x * log(safe_y)
    if isinstance(x, (int, float)):        # a Python number: no host array beside y
        edge = 0.0 if x == 0 else (-_np.inf if x > 0 else _np.inf)
    else:
        edge = _ew.convert_element_type(
            _ew.where(_ew.equal(x, 0), 0.0, _ew.where(_ew.greater(x, 0), -_np.inf, _np.inf)),
            _get_aval(main).dtype)
    return _ew.where(bad, edge, main)


def xlogy(x, y):
    """``x * log(y)``, 0 where ``x == 0`` (gradients finite there too).

    >>> float(xlogy(0.0, 0.0))
    0.0
    """
    return _x_times_log(x, y, _ew.log, 0.0)


def xlog1py(x, y):
    """``x * log1p(y)``, 0 where ``x == 0``.

    >>> float(xlog1py(0.0, -1.0))
    0.0
    """
    return _x_times_log(x, y, _ew.log1p, -1.0)


def betaln(a, b):
    """``log |B(a, b)|`` = gammaln(a) + gammaln(b) - gammaln(a + b)."""
    return gammaln(a) + gammaln(b) - gammaln(a + b)


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """``log(sum(b * exp(a)))``, computed around the maximum (no overflow);
    the same function as `fgrad.numpy.logsumexp`.

    >>> import numpy as np
    >>> float(logsumexp(np.array([1000.0, 1000.0])))  # doctest: +ELLIPSIS
    1000.69314718...
    """
    return _logsumexp(a, axis, b, keepdims, return_sign)


def softmax(x, axis=None):
    """``exp(x) / sum(exp(x))`` along ``axis``."""
    return _ew.exp(x - logsumexp(x, axis, keepdims=True))


def log_softmax(x, axis=None):
    """``x - logsumexp(x)`` along ``axis``."""
    return x - logsumexp(x, axis, keepdims=True)


def ndtr(x):
    """Standard normal CDF."""
    return 0.5 * erfc(x * -_math.sqrt(0.5))   # a Python float keeps float32
