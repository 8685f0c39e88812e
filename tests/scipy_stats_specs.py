"""Property specs for `fgrad.scipy.stats`: one per distribution method, checked by
the property suite (finite differences in both modes, second order, VJP/JVP
agreement, float32, vmap) with values compared to `scipy.stats`.

Imported by `scipy_specs.py`. Each argument is either drawn (a ``(lo, hi)``
domain or a strategy of values: an array, differentiated) or held constant (a number: a shape
parameter, or a count). ``STATS_SPECS`` maps "dist.method" to its spec name.
"""
import numpy as np
import scipy.stats as sst
from hypothesis import strategies as st

import fgrad.numpy as fnp
import fgrad.scipy.stats as fst
from primitive_specs import SPECS, Case, arrays, away_from_zero, shapes, values

X, POS, UNIT = (-2.5, 2.5), (0.2, 3.0), (0.05, 0.95)
CONTINUOUS = ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")
DISCRETE = ("logpmf", "pmf", "cdf", "logcdf", "sf", "logsf")
K = np.array([0.0, 1.0, 3.0, 6.0])           # counts, held constant

ARGS = {  # dist: (arguments of the density-like methods, arguments of entropy)
    "norm": ((X, X, POS), (X, POS)),
    "t": ((X, 3.5, X, POS), (POS, X, POS)),
    "gamma": ((POS, 2.5, (-0.15, 0.15), POS), (POS, X, POS)),
    "chi2": ((POS, 3.0), (POS,)),
    "beta": ((UNIT, 2.0, 3.5), (POS, POS)),
    "expon": ((POS, (-0.15, 0.15), POS), (X, POS)),
    "laplace": ((away_from_zero(-2.5, 2.5), 0.0, POS), (X, POS)),  # x == loc: a kink
    "cauchy": ((X, X, POS), (X, POS)),
    "logistic": ((X, X, POS), (X, POS)),
    "uniform": ((UNIT, (-0.04, 0.04), (1.0, 2.0)), (X, POS)),
    "poisson": ((K, POS), None),
    "binom": ((K, 9.0, UNIT), None),
    "nbinom": ((K, 3.0, UNIT), None),
}
DISCRETE_DISTS = {"poisson", "binom", "nbinom"}


def _case(dist, method, spec_args, shape):
    domains = {i: values(*a) if isinstance(a, tuple) else a for i, a in enumerate(spec_args)
               if isinstance(a, (tuple, st.SearchStrategy))}
    drawn = sorted(domains)
    fixed = {i: a for i, a in enumerate(spec_args) if i not in domains}

    def full(args, like):
        out = list(fixed.items()) + list(zip(drawn, args))
        out = [v for _, v in sorted(out)]
        # constant arrays (the counts) take the drawn ones' dtype and place
        return [fnp.asarray(v.astype(like.dtype), like=like) if isinstance(v, np.ndarray)
                else v for v in out]

    f, ref = getattr(getattr(fst, dist), method), getattr(getattr(sst, dist), method)
    x_shape = shape if spec_args[0] is not K else K.shape
    return st.tuples(*(arrays(x_shape if i == 0 else (), domains[i]) for i in drawn)).map(lambda args: Case(
        lambda *a: f(*full(a, a[0])), args, lambda *a: ref(*full(a, a[0])),
        tol=dict(atol=1e-4, rtol=1e-4)))


STATS_SPECS = {}
for _dist, (_args, _entropy_args) in ARGS.items():
    for _method in DISCRETE if _dist in DISCRETE_DISTS else CONTINUOUS:
        STATS_SPECS[f"{_dist}.{_method}"] = name = f"stats.{_dist}.{_method}"
        SPECS[name] = shapes(max_dims=1).flatmap(
            lambda s, d=_dist, m=_method, a=_args: _case(d, m, a, s))
    if _entropy_args is not None:
        STATS_SPECS[f"{_dist}.entropy"] = name = f"stats.{_dist}.entropy"
        SPECS[name] = _case(_dist, "entropy", _entropy_args, ())


# -- multivariate_normal and dirichlet: vectors, drawn as a whole ----------------------------

def _spd(a):
    # a well-conditioned covariance from any square matrix, in the data's namespace
    eye = np.eye(a.shape[-1], dtype=a.dtype)
    if not isinstance(a, np.ndarray):
        eye = fnp.asarray(eye, like=a)
    return 0.3 * (a @ a.T) + eye


@st.composite
def _mvn_case(draw, method):
    k, n = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    x, mean, a = draw(arrays((n, k))), draw(arrays((k,))), draw(arrays((k, k)))
    f, ref = getattr(fst.multivariate_normal, method), getattr(sst.multivariate_normal,
                                                              method)
    if method == "entropy":
        return Case(lambda m, a: f(m, _spd(a)), (mean, a), lambda m, a: ref(m, _spd(a)),
                    tol=dict(atol=1e-4, rtol=1e-4))
    return Case(lambda x, m, a: f(x, m, _spd(a)), (x, mean, a),
                lambda x, m, a: ref(x, m, _spd(a)), tol=dict(atol=1e-4, rtol=1e-4))


def _softmax(u):
    e = np.exp(u - u.max(0)) if isinstance(u, np.ndarray) else fnp.exp(u - fnp.max(u, 0))
    return e / (e.sum(0) if isinstance(u, np.ndarray) else fnp.sum(e, 0))


@st.composite
def _dirichlet_case(draw, method):
    # x on the simplex (SciPy checks), as the softmax of free coordinates
    k = draw(st.integers(2, 4))
    u, alpha = draw(arrays((k,))), draw(arrays((k,), values(0.5, 3.0)))
    f, ref = getattr(fst.dirichlet, method), getattr(sst.dirichlet, method)
    if method == "entropy":
        return Case(f, (alpha,), ref, tol=dict(atol=1e-4, rtol=1e-4))
    return Case(lambda u, a: f(_softmax(u), a), (u, alpha),
                lambda u, a: ref(_softmax(u), a), tol=dict(atol=1e-4, rtol=1e-4))


for _dist, _case_of in (("multivariate_normal", _mvn_case), ("dirichlet", _dirichlet_case)):
    for _method in ("logpdf", "pdf", "entropy"):
        STATS_SPECS[f"{_dist}.{_method}"] = name = f"stats.{_dist}.{_method}"
        SPECS[name] = _case_of(_method)
