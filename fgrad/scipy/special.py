"""``scipy.special`` functions with derivatives.

``erf``, ``erfc``, ``erfinv``, ``gammaln``, ``digamma``, ``polygamma``, ``expit``,
``log_ndtr``, ``gammainc`` and ``betainc`` (differentiable in ``x`` only) are
primitives evaluated by scipy; the rest are composites whose
gradients stay finite where the naive formula's would not (``xlogy`` at
``x == 0``, ``logsumexp`` for large inputs).
"""
import numpy as _np

from fgrad.core.trace import get_aval as _get_aval
from fgrad.numpy import logsumexp as _logsumexp
from fgrad.primitives import elementwise as _ew
from fgrad.primitives import special as _sp

erf, erfc, erfinv = _sp.erf, _sp.erfc, _sp.erfinv
gammaln, digamma, polygamma = _sp.gammaln, _sp.digamma, _sp.polygamma
expit, log_ndtr = _sp.expit, _sp.log_ndtr
gammainc, betainc = _sp.gammainc, _sp.betainc
psi = digamma


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
    edge = _ew.where(_ew.equal(x, 0), 0.0, _ew.where(_ew.greater(x, 0), -_np.inf, _np.inf))
    return _ew.where(bad, _ew.convert_element_type(edge, _get_aval(main).dtype), main)


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
    return 0.5 * erfc(x * -_np.sqrt(0.5))
