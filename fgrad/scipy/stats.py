"""Densities, distribution functions and entropies of SciPy's common distributions.

Each distribution is a namespace with SciPy's method names and signatures
(``norm.logpdf(x, loc=0, scale=1)``, ``poisson.cdf(k, mu)``, ``t.entropy(df)``),
written with differentiable fgrad functions: the derivatives are with respect
to the data and the parameters alike, to any order and under vmap.

Where a derivative has no closed form -- the shape parameters of the incomplete
gamma and beta functions behind ``t.cdf``, ``gamma.cdf``, ``beta.cdf``,
``chi2.cdf`` and the discrete ``binom``/``nbinom`` cdfs (``df``, ``a``, ``b``,
``n``), and the counts ``k`` of the discrete ``cdf``/``sf`` -- differentiating
that argument raises `MissingRuleError` naming the function and argument.

``multivariate_normal`` treats its covariance as SciPy does: a symmetric
eigendecomposition, eigenvalues below SciPy's tolerance (``1e6 * eps * max|s|``)
dropped, ``allow_singular=`` for a rank-deficient covariance.

>>> import numpy as np
>>> float(t.cdf(0.0, 3.0))
0.5
>>> round(float(norm.sf(1.0)), 6)
0.158655
"""
import math as _math
from types import SimpleNamespace as _Namespace

import numpy as _np

import fgrad.numpy as _fnp
from fgrad.backend import device_put as _device_put
from fgrad.core.errors import ScipyArgumentError as _ScipyArgumentError
from fgrad.core.trace import get_aval as _get_aval
from fgrad.core.trace import known_value as _known_value
from fgrad.numpy import linalg as _la
from fgrad.primitives.creation import stop_gradient as _stop_gradient
from fgrad.scipy import special as _special

_LOG_2PI = _math.log(2 * _math.pi)
_where, _exp, _log, _log1p = _fnp.where, _fnp.exp, _fnp.log, _fnp.log1p


def _log_of(v):
    # a Python number stays one (weak-typed: float32 data stay float32)
    return _math.log(v) if isinstance(v, (int, float)) else _log(v)


def _distribution(name, doc, logpdf=None, cdf=None, sf=None, logcdf=None, logsf=None,
                  entropy=None, discrete=False):
    """A namespace of SciPy-named methods; the ones not given are derived
    (``pdf = exp(logpdf)``, ``logcdf = log(cdf)``, ...)."""
    methods = {}
    density = "pmf" if discrete else "pdf"
    if logpdf is not None:
        methods["log" + density] = logpdf
        methods[density] = lambda *a, **k: _exp(logpdf(*a, **k))
    if cdf is not None:
        methods["cdf"] = cdf
        methods["logcdf"] = logcdf or (lambda *a, **k: _log(cdf(*a, **k)))
    if sf is not None:
        methods["sf"] = sf
        methods["logsf"] = logsf or (lambda *a, **k: _log(sf(*a, **k)))
    if entropy is not None:
        methods["entropy"] = entropy
    ns = _Namespace(**methods)
    ns.__doc__ = f"The {name} distribution: {doc}"
    return ns


def _inside(condition, x, safe):
    # the double where: outside the support the differentiated branch sees a
    # harmless stand-in, so its derivative there is 0, not nan
    return _where(condition, x, safe)


def _indicator(condition, like):
    # 1.0 where condition holds, else 0.0, in like's dtype (float32 stays float32)
    return _fnp.astype(condition, _get_aval(like).dtype)


# -- norm --------------------------------------------------------------------------

def _norm_logpdf(x, loc=0, scale=1):
    z = (x - loc) / scale
    return -0.5 * (z * z) - _log_of(scale) - 0.5 * _LOG_2PI


norm = _distribution(
    "normal", "x ~ N(loc, scale^2).", logpdf=_norm_logpdf,
    cdf=lambda x, loc=0, scale=1: _special.ndtr((x - loc) / scale),
    logcdf=lambda x, loc=0, scale=1: _special.log_ndtr((x - loc) / scale),
    sf=lambda x, loc=0, scale=1: _special.ndtr((loc - x) / scale),
    logsf=lambda x, loc=0, scale=1: _special.log_ndtr((loc - x) / scale),
    entropy=lambda loc=0, scale=1: 0.5 * (_LOG_2PI + 1.0) + _log_of(scale) + 0 * loc)


# -- t ---------------------------------------------------------------------------------

def _t_logpdf(x, df, loc=0, scale=1):
    z = (x - loc) / scale
    g = _special.gammaln
    return (g((df + 1) * 0.5) - g(df * 0.5) - 0.5 * _log_of(df * _math.pi)
            - _log_of(scale) - (df + 1) * 0.5 * _log1p(z * z / df))


def _t_cdf(x, df, loc=0, scale=1):
    return _special.stdtr(df, (x - loc) / scale)


def _t_sf(x, df, loc=0, scale=1):
    return _special.stdtr(df, (loc - x) / scale)


def _t_entropy(df, loc=0, scale=1):
    half = (df + 1) * 0.5
    return (half * (_special.digamma(half) - _special.digamma(df * 0.5))
            + 0.5 * _log_of(df) + _special.betaln(df * 0.5, 0.5) + _log_of(scale) + 0 * loc)


t = _distribution("Student t", "df degrees of freedom, location loc, scale scale.",
                  logpdf=_t_logpdf, cdf=_t_cdf, sf=_t_sf, entropy=_t_entropy)


# -- gamma, chi2, beta ---------------------------------------------------------------------

def _gamma_logpdf(x, a, loc=0, scale=1):
    z = (x - loc) / scale
    inside = _fnp.greater_equal(z, 0)
    value = (_special.xlogy(a - 1.0, _inside(inside, z, 1.0)) - z - _special.gammaln(a)
             - _log_of(scale))
    return _where(inside, value, -_np.inf)


def _gamma_distribution_function(incomplete, below):
    # P(a, z) or Q(a, z) inside the support, `below` at and under 0
    def f(x, a, loc=0, scale=1):
        z = (x - loc) / scale
        inside = _fnp.greater(z, 0)
        return _where(inside, incomplete(a, _inside(inside, z, 1.0)), below)
    return f


def _gamma_entropy(a, loc=0, scale=1):
    return (a + _special.gammaln(a) + (1.0 - a) * _special.digamma(a) + _log_of(scale)
            + 0 * loc)


gamma = _distribution(
    "gamma", "shape a, location loc, scale scale.", logpdf=_gamma_logpdf,
    cdf=_gamma_distribution_function(_special.gammainc, 0.0),
    sf=_gamma_distribution_function(_special.gammaincc, 1.0), entropy=_gamma_entropy)

chi2 = _distribution(
    "chi-squared", "df degrees of freedom (a gamma with a = df / 2, scale 2).",
    logpdf=lambda x, df, loc=0, scale=1: gamma.logpdf(x, df * 0.5, loc, 2.0 * scale),
    cdf=lambda x, df, loc=0, scale=1: gamma.cdf(x, df * 0.5, loc, 2.0 * scale),
    sf=lambda x, df, loc=0, scale=1: gamma.sf(x, df * 0.5, loc, 2.0 * scale),
    entropy=lambda df, loc=0, scale=1: _gamma_entropy(df * 0.5, loc, 2.0 * scale))


def _beta_logpdf(x, a, b, loc=0, scale=1):
    z = (x - loc) / scale
    inside = _fnp.logical_and(_fnp.greater_equal(z, 0), _fnp.less_equal(z, 1))
    zs = _inside(inside, z, 0.5)
    value = (_special.xlogy(a - 1.0, zs) + _special.xlog1py(b - 1.0, -zs)
             - _special.betaln(a, b) - _log_of(scale))
    return _where(inside, value, -_np.inf)


def _beta_cdf(x, a, b, loc=0, scale=1):
    z = (x - loc) / scale
    inside = _fnp.logical_and(_fnp.greater(z, 0), _fnp.less(z, 1))
    value = _special.betainc(a, b, _inside(inside, z, 0.5))
    return _where(inside, value, _indicator(_fnp.greater_equal(z, 1), value))


def _beta_entropy(a, b, loc=0, scale=1):
    psi = _special.digamma
    return (_special.betaln(a, b) - (a - 1.0) * psi(a) - (b - 1.0) * psi(b)
            + (a + b - 2.0) * psi(a + b) + _log_of(scale) + 0 * loc)


beta = _distribution(
    "beta", "shapes a and b on [loc, loc + scale].", logpdf=_beta_logpdf, cdf=_beta_cdf,
    sf=lambda x, a, b, loc=0, scale=1: _beta_cdf(-x, b, a, -loc - scale, scale),
    entropy=_beta_entropy)


# -- expon, laplace, cauchy, logistic, uniform ------------------------------------------------

def _expon_logpdf(x, loc=0, scale=1):
    z = (x - loc) / scale
    inside = _fnp.greater_equal(z, 0)
    return _where(inside, -_inside(inside, z, 0.0) - _log_of(scale), -_np.inf)


def _expon_logsf(x, loc=0, scale=1):
    z = (x - loc) / scale
    return _where(_fnp.greater(z, 0), -z, 0.0)


expon = _distribution(
    "exponential", "rate 1 / scale from loc.", logpdf=_expon_logpdf,
    cdf=lambda x, loc=0, scale=1: -_fnp.expm1(_expon_logsf(x, loc, scale)),
    sf=lambda x, loc=0, scale=1: _exp(_expon_logsf(x, loc, scale)), logsf=_expon_logsf,
    entropy=lambda loc=0, scale=1: 1.0 + _log_of(scale) + 0 * loc)


def _laplace_logcdf(x, loc=0, scale=1):
    z = (x - loc) / scale
    left = _fnp.less(z, 0)
    # log(1/2 e^z) left of loc, log(1 - 1/2 e^-z) right of it; each branch sees
    # only its own half (no overflow in the discarded one)
    return _where(left, _inside(left, z, 0.0) - _math.log(2),
                  _log1p(-0.5 * _exp(-_inside(left, 0.0, z))))


laplace = _distribution(
    "Laplace", "location loc, scale scale.",
    logpdf=lambda x, loc=0, scale=1: -_fnp.abs((x - loc) / scale) - _log_of(2 * scale),
    cdf=lambda x, loc=0, scale=1: _exp(_laplace_logcdf(x, loc, scale)),
    logcdf=_laplace_logcdf,
    sf=lambda x, loc=0, scale=1: _exp(_laplace_logcdf(-x, -loc, scale)),
    logsf=lambda x, loc=0, scale=1: _laplace_logcdf(-x, -loc, scale),
    entropy=lambda loc=0, scale=1: _math.log(2) + 1.0 + _log_of(scale) + 0 * loc)

cauchy = _distribution(
    "Cauchy", "location loc, scale scale.",
    logpdf=lambda x, loc=0, scale=1: -_log(_math.pi * scale * (1.0 + ((x - loc) / scale) ** 2)),
    cdf=lambda x, loc=0, scale=1: 0.5 + _fnp.arctan((x - loc) / scale) / _math.pi,
    sf=lambda x, loc=0, scale=1: 0.5 - _fnp.arctan((x - loc) / scale) / _math.pi,
    entropy=lambda loc=0, scale=1: _math.log(4 * _math.pi) + _log_of(scale) + 0 * loc)


def _log_expit(z):
    # log(1 / (1 + e^-z)) = -log(e^0 + e^-z): logaddexp is stable in both tails
    # and smooth at 0 (a min/abs form would put kinks into the derivatives)
    return -_fnp.logaddexp(0.0, -z)


logistic = _distribution(
    "logistic", "location loc, scale scale.",
    logpdf=lambda x, loc=0, scale=1: (_log_expit((x - loc) / scale)
                                      + _log_expit((loc - x) / scale) - _log_of(scale)),
    cdf=lambda x, loc=0, scale=1: _special.expit((x - loc) / scale),
    logcdf=lambda x, loc=0, scale=1: _log_expit((x - loc) / scale),
    sf=lambda x, loc=0, scale=1: _special.expit((loc - x) / scale),
    logsf=lambda x, loc=0, scale=1: _log_expit((loc - x) / scale),
    entropy=lambda loc=0, scale=1: 2.0 + _log_of(scale) + 0 * loc)


def _uniform_cdf(x, loc=0, scale=1):
    return _fnp.clip((x - loc) / scale, 0.0, 1.0)


def _uniform_logpdf(x, loc=0, scale=1):
    z = (x - loc) / scale
    inside = _fnp.logical_and(_fnp.greater_equal(z, 0), _fnp.less_equal(z, 1))
    return _where(inside, -_log_of(scale) + 0 * x, -_np.inf)


uniform = _distribution(
    "uniform", "on [loc, loc + scale].", logpdf=_uniform_logpdf, cdf=_uniform_cdf,
    sf=lambda x, loc=0, scale=1: 1.0 - _uniform_cdf(x, loc, scale),
    entropy=lambda loc=0, scale=1: _log_of(scale) + 0 * loc)


# -- poisson, binom, nbinom ---------------------------------------------------------------------
#
# The cdf and sf of a count are incomplete gamma / beta functions whose first
# argument is the (floored) count: differentiable in mu and p, not in k or n.

def _counts(k, loc):
    k = _fnp.floor(k - loc)
    return k, _fnp.greater_equal(k, 0)


def _poisson_logpmf(k, mu, loc=0):
    k = k - loc
    return _special.xlogy(k, mu) - _special.gammaln(k + 1.0) - mu


def _poisson_cdf(k, mu, loc=0):
    k, inside = _counts(k, loc)
    return _where(inside, _special.gammaincc(_inside(inside, k, 0.0) + 1.0, mu), 0.0)


def _poisson_sf(k, mu, loc=0):
    k, inside = _counts(k, loc)
    return _where(inside, _special.gammainc(_inside(inside, k, 0.0) + 1.0, mu), 1.0)


poisson = _distribution("Poisson", "mean mu, counts k.", logpdf=_poisson_logpmf,
                        cdf=_poisson_cdf, sf=_poisson_sf, discrete=True)


def _binom_logpmf(k, n, p, loc=0):
    k = k - loc
    g = _special.gammaln
    return (g(n + 1.0) - g(k + 1.0) - g(n - k + 1.0) + _special.xlogy(k, p)
            + _special.xlog1py(n - k, -p))


def _binom_function(inner, below, above):
    # `inner` for 0 <= k < n, `below` under 0 and `above` from n on
    def f(k, n, p, loc=0):
        k, nonnegative = _counts(k, loc)
        below_n = _fnp.less(k, n)
        inside = _fnp.logical_and(nonnegative, below_n)
        value = inner(_inside(inside, k, 0.0), n, p)
        return _where(inside, value,
                      below + (above - below) * _indicator(_fnp.logical_not(below_n), value))
    return f


binom = _distribution(
    "binomial", "n trials of success probability p, counts k.", logpdf=_binom_logpmf,
    cdf=_binom_function(lambda k, n, p: _special.betainc(n - k, k + 1.0, 1.0 - p), 0.0, 1.0),
    sf=_binom_function(lambda k, n, p: _special.betainc(k + 1.0, n - k, p), 1.0, 0.0),
    discrete=True)


def _nbinom_logpmf(k, n, p, loc=0):
    k = k - loc
    g = _special.gammaln
    return (g(n + k) - g(k + 1.0) - g(n) + n * _log(p) + _special.xlog1py(k, -p))


def _nbinom_cdf(k, n, p, loc=0):
    k, inside = _counts(k, loc)
    return _where(inside, _special.betainc(n, _inside(inside, k, 0.0) + 1.0, p), 0.0)


def _nbinom_sf(k, n, p, loc=0):
    k, inside = _counts(k, loc)
    return _where(inside, _special.betainc(_inside(inside, k, 0.0) + 1.0, n, 1.0 - p), 1.0)


nbinom = _distribution("negative binomial",
                       "k failures before the n-th success of probability p.",
                       logpdf=_nbinom_logpmf, cdf=_nbinom_cdf, sf=_nbinom_sf,
                       discrete=True)


# -- dirichlet ------------------------------------------------------------------------------

def _dirichlet_logpdf(x, alpha):
    # SciPy's layout: components along the first axis of x
    ndim = _get_aval(x).ndim
    alpha_b = alpha if ndim == 1 else _fnp.reshape(alpha, (-1,) + (1,) * (ndim - 1))
    return _fnp.sum(_special.xlogy(alpha_b - 1.0, x), 0) - _dirichlet_log_norm(alpha)


def _dirichlet_log_norm(alpha):
    return _fnp.sum(_special.gammaln(alpha)) - _special.gammaln(_fnp.sum(alpha))


def _dirichlet_entropy(alpha):
    total = _fnp.sum(alpha)
    k = _get_aval(alpha).shape[0]
    return (_dirichlet_log_norm(alpha) + (total - k) * _special.digamma(total)
            - _fnp.sum((alpha - 1.0) * _special.digamma(alpha)))


dirichlet = _distribution("Dirichlet", "concentrations alpha; x along the first axis.",
                          logpdf=_dirichlet_logpdf, entropy=_dirichlet_entropy)


# -- multivariate_normal ----------------------------------------------------------------------
#
# SciPy's covariance handling: eigenvalues s of the (symmetrized) covariance,
# those at or below eps = 1e6 * machine eps * max|s| (1e3 for float32) dropped,
# log pdet = sum(log s) over the rest, and the Mahalanobis distance through the
# pseudo-inverse. The values are computed exactly so. The derivatives come from
# the same quantities written in the fixed eigenbasis u (a constant rotation):
# m = u^T cov u restricted to the kept directions, log det m and z^T m^-1 z.
# These are smooth in cov even where eigenvalues repeat (a scaled identity),
# where derivatives through the eigenvectors would be infinite.

_EPS_FACTOR = {"f": 1e3, "d": 1e6}


def _known(x):
    """The value behind ``x`` when it has one (eager), else None (jit, vmap)."""
    x = _known_value(x)
    return None if x is None else _device_put(x, "cpu")   # the check reads it on the host


def _check_covariance(s, eps, allow_singular):
    s = _known(s)
    if s is None:
        return
    eps = _np.asarray(_known(eps))
    if _np.any(s < -eps):
        raise _ScipyArgumentError(
            "multivariate_normal: the covariance is not positive semidefinite (an "
            f"eigenvalue is {s.min():.3g}, below -{float(eps.max()):.3g}); pass a "
            "symmetric positive semidefinite matrix")
    if not allow_singular and _np.any(s <= eps):
        raise _ScipyArgumentError(
            "multivariate_normal: the covariance is singular (an eigenvalue is at or "
            f"below SciPy's tolerance {float(eps.max()):.3g}); pass allow_singular=True "
            "for a degenerate distribution, or add jitter to the diagonal")


def _value_with_derivatives_of(value, smooth):
    # equals `value`; every derivative (any order) is that of `smooth`
    return smooth + _stop_gradient(value - smooth)


def _mvn_dimension(mean, cov):
    if mean is not None and _get_aval(mean).ndim:
        return _get_aval(mean).shape[-1]
    return _get_aval(cov).shape[-1] if _get_aval(cov).ndim else 1


def _mvn_points(x, k):
    # SciPy's reading of x: a scalar is one point of dimension 1; a vector is one
    # point, or (dimension 1) a vector of points
    x = _fnp.asarray(x)
    ndim = _get_aval(x).ndim
    if ndim == 0 or (ndim == 1 and k == 1):
        return _fnp.reshape(x, (-1, 1))
    return x


def _mvn_parts(x, mean, cov, allow_singular):
    k = _mvn_dimension(mean, cov)
    x = _mvn_points(x, k)
    dev = x if mean is None else x - mean
    cov_ndim = _get_aval(cov).ndim
    if cov_ndim == 0:
        cov = cov * _fnp.asarray(_np.eye(k, dtype=_get_aval(dev).dtype), like=cov)
    elif cov_ndim == 1:
        cov = _fnp.diag(cov)
    s, u = _la.eigh(_stop_gradient(cov))
    dtype = _get_aval(s).dtype
    eps = (float(_EPS_FACTOR[dtype.char.lower()] * _np.finfo(dtype).eps)
           * _fnp.max(_fnp.abs(s), -1, keepdims=True))
    _check_covariance(s, eps, allow_singular)
    keep = _fnp.greater(s, eps)
    safe_s = _where(keep, s, 1.0)
    rank = _fnp.sum(_indicator(keep, s), -1)
    log_pdet = _fnp.sum(_where(keep, _log(safe_s), 0.0), -1)
    coords = _fnp.matmul(dev, u)                          # dev in the eigenbasis
    z = _where(keep, coords, 0.0)
    # as SciPy: a point off the support (outside the kept subspace) has density 0
    off = _fnp.sum(_where(keep, 0.0, _stop_gradient(coords)) ** 2, -1)
    in_support = _fnp.less(_fnp.sqrt(off), eps[..., 0])
    maha = _fnp.sum(z * z / safe_s, -1)
    # the smooth forms: m = u^T cov u on the kept block (identity elsewhere)
    kept2 = _fnp.logical_and(keep[..., :, None], keep[..., None, :])
    eye = _fnp.asarray(_np.eye(k, dtype=_get_aval(s).dtype), like=s)
    m = _where(kept2, _fnp.matmul(_fnp.swapaxes(u, -1, -2), _fnp.matmul(cov, u)), eye)
    smooth_logdet = _la.slogdet(m)[1]
    rows = _fnp.reshape(z, (-1, k))                      # every sample a row
    smooth_maha = _fnp.reshape(_fnp.sum(rows * _fnp.transpose(_la.solve(m, _fnp.transpose(rows))),
                                        -1), _get_aval(z).shape[:-1])
    return (rank, _value_with_derivatives_of(log_pdet, smooth_logdet),
            _value_with_derivatives_of(maha, smooth_maha), in_support)


def _mvn_logpdf(x, mean=None, cov=1, allow_singular=False):
    rank, log_pdet, maha, in_support = _mvn_parts(x, mean, cov, allow_singular)
    # SciPy squeezes: one point gives a scalar, (1, n) points n values
    return _fnp.squeeze(_where(in_support, -0.5 * (rank * _LOG_2PI + log_pdet + maha),
                               -_np.inf))


def _mvn_entropy(mean=None, cov=1):
    # SciPy's entropy accepts a singular covariance (its pseudo-determinant)
    zeros = _fnp.asarray(_np.zeros(_mvn_dimension(mean, cov), _get_aval(cov).dtype),
                         like=cov)
    rank, log_pdet, _, _ = _mvn_parts(zeros, mean, cov, True)
    return 0.5 * (rank * (1.0 + _LOG_2PI) + log_pdet)


multivariate_normal = _distribution(
    "multivariate normal", "mean mean, covariance cov (allow_singular= as SciPy's).",
    logpdf=_mvn_logpdf, entropy=_mvn_entropy)
