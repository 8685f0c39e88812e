"""Log-densities and distribution functions of common distributions.

Each distribution is a namespace with scipy's function names (``norm.logpdf``,
``poisson.logpmf``, ...), written with differentiable fgrad functions; the
gradients are with respect to the data and the parameters alike, with one
exception: ``t.cdf``, ``gamma.cdf`` and ``beta.cdf`` (and their ``logcdf``) are
differentiable in ``x``, ``loc`` and ``scale`` but not in the shape parameters
(``df``, ``a``, ``b``), whose derivatives of the incomplete gamma and beta
functions have no closed form; asking for them raises ``MissingRuleError``.

>>> import numpy as np
>>> float(t.cdf(0.0, 3.0))
0.5
"""
import math as _math
from types import SimpleNamespace as _Namespace

import numpy as _np

from fgrad.core.trace import get_aval as _get_aval
from fgrad.numpy import linalg as _la
from fgrad.primitives import elementwise as _ew
from fgrad.primitives import reductions as _red
from fgrad.primitives import shape as _shape
from fgrad.primitives.einsum import einsum, identity_like
from fgrad.scipy import special as _special

_LOG_2PI = _math.log(2 * _math.pi)


def _log(v):
    return _math.log(v) if isinstance(v, (int, float)) else _ew.log(v)


# -- norm --------------------------------------------------------------------------

def _norm_logpdf(x, loc=0, scale=1):
    z = (x - loc) / scale
    return -0.5 * (z * z) - _log(scale) - 0.5 * _LOG_2PI


def _norm_cdf(x, loc=0, scale=1):
    return _special.ndtr((x - loc) / scale)


def _norm_logcdf(x, loc=0, scale=1):
    return _special.log_ndtr((x - loc) / scale)


norm = _Namespace(
    logpdf=_norm_logpdf, pdf=lambda x, loc=0, scale=1: _ew.exp(_norm_logpdf(x, loc, scale)),
    cdf=_norm_cdf, logcdf=_norm_logcdf)
norm.__doc__ = "The normal distribution: logpdf, pdf, cdf, logcdf."


# -- multivariate_normal ---------------------------------------------------------------

def _mvn_logpdf(x, mean=None, cov=1):
    x = _np.asarray(x) if not hasattr(x, "dtype") else x
    k = _get_aval(x).shape[-1]
    d = x if mean is None else x - mean
    if _get_aval(cov).ndim == 0:
        cov = cov * identity_like(x, k)
    low = _la.cholesky(cov)
    flat = _shape.reshape(d, (-1, k))
    z = _la.solve(low, _shape.transpose(flat))            # (k, N)
    maha = _red.sum_(z * z, 0)
    logdet = 2.0 * _red.sum_(_ew.log(_einsum_diag(low)))
    out = -0.5 * (maha + k * _LOG_2PI + logdet)
    return _shape.reshape(out, _get_aval(d).shape[:-1])


def _einsum_diag(m):
    return einsum("ii->i", m)


multivariate_normal = _Namespace(
    logpdf=_mvn_logpdf,
    pdf=lambda x, mean=None, cov=1: _ew.exp(_mvn_logpdf(x, mean, cov)))


# -- t -------------------------------------------------------------------------------------

def _t_logpdf(x, df, loc=0, scale=1):
    z = (x - loc) / scale
    g = _special.gammaln
    return (g((df + 1) * 0.5) - g(df * 0.5) - 0.5 * _ew.log(df * _math.pi)
            - _log(scale) - (df + 1) * 0.5 * _ew.log1p(z * z / df))


def _t_cdf(x, df, loc=0, scale=1):
    # P(T <= z) through the incomplete beta function of df / (df + z^2); the two
    # tails are mirror images. Differentiable in x, loc and scale (not df).
    z = (x - loc) / scale
    tail = 0.5 * _special.betainc(df * 0.5, 0.5, df / (df + z * z))
    return _ew.where(_ew.less(z, 0), tail, 1.0 - tail)


t = _Namespace(logpdf=_t_logpdf,
               pdf=lambda x, df, loc=0, scale=1: _ew.exp(_t_logpdf(x, df, loc, scale)),
               cdf=_t_cdf,
               logcdf=lambda x, df, loc=0, scale=1: _ew.log(_t_cdf(x, df, loc, scale)))


# -- gamma, beta ------------------------------------------------------------------------------

def _gamma_logpdf(x, a, loc=0, scale=1):
    z = (x - loc) / scale
    return (_special.xlogy(a - 1.0, z) - z - _special.gammaln(a)
            - _log(scale))


def _gamma_cdf(x, a, loc=0, scale=1):
    # zero below the support; the inner where keeps gammainc away from z <= 0
    # so its derivative there is 0, not nan (the double-where technique)
    z = (x - loc) / scale
    inside = _ew.greater(z, 0)
    return _ew.where(inside, _special.gammainc(a, _ew.where(inside, z, 1.0)), 0.0)


gamma = _Namespace(logpdf=_gamma_logpdf,
                   pdf=lambda x, a, loc=0, scale=1: _ew.exp(_gamma_logpdf(x, a, loc, scale)),
                   cdf=_gamma_cdf,
                   logcdf=lambda x, a, loc=0, scale=1: _ew.log(_gamma_cdf(x, a, loc, scale)))


def _beta_logpdf(x, a, b, loc=0, scale=1):
    z = (x - loc) / scale
    return (_special.xlogy(a - 1.0, z) + _special.xlog1py(b - 1.0, -z)
            - _special.betaln(a, b) - _log(scale))


def _beta_cdf(x, a, b, loc=0, scale=1):
    z = (x - loc) / scale
    inside = _ew.logical_and(_ew.greater(z, 0), _ew.less(z, 1))
    value = _special.betainc(a, b, _ew.where(inside, z, 0.5))
    return _ew.where(inside, value, _ew.where(_ew.greater_equal(z, 1), 1.0, 0.0))


beta = _Namespace(logpdf=_beta_logpdf,
                  pdf=lambda x, a, b, loc=0, scale=1: _ew.exp(_beta_logpdf(x, a, b, loc, scale)),
                  cdf=_beta_cdf,
                  logcdf=lambda x, a, b, loc=0, scale=1: _ew.log(_beta_cdf(x, a, b, loc, scale)))


# -- poisson, dirichlet --------------------------------------------------------------------------

def _poisson_logpmf(k, mu, loc=0):
    k = k - loc
    return _special.xlogy(k, mu) - _special.gammaln(k + 1.0) - mu


poisson = _Namespace(logpmf=_poisson_logpmf,
                     pmf=lambda k, mu, loc=0: _ew.exp(_poisson_logpmf(k, mu, loc)))


def _dirichlet_logpdf(x, alpha):
    # scipy's layout: components along the first axis of x
    ndim = _get_aval(x).ndim
    alpha_b = alpha if ndim == 1 else _shape.reshape(alpha, (-1,) + (1,) * (ndim - 1))
    log_norm = _red.sum_(_special.gammaln(alpha)) - _special.gammaln(_red.sum_(alpha))
    return _red.sum_(_special.xlogy(alpha_b - 1.0, x), 0) - log_norm


dirichlet = _Namespace(logpdf=_dirichlet_logpdf,
                       pdf=lambda x, alpha: _ew.exp(_dirichlet_logpdf(x, alpha)))
