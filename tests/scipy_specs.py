"""Test specs for the scipy-backed primitives (`primitives/special.py`).

Imported by `linalg_specs.py`; values are compared with scipy's own functions.
"""
import numpy as np
import scipy.linalg as sl
import scipy.signal as ssig
import scipy.special as ss
from hypothesis import strategies as st

import fgrad.numpy as fnp
import fgrad.scipy.linalg as fl
import fgrad.scipy.signal as fsig
import fgrad.scipy.special as fs
from fgrad.primitives import scipy_linalg as _scipy_linalg
from hypothesis.extra import numpy as hnp

from primitive_specs import NONDIFF_SPECS, SPECS, Case, arrays, shapes, values

SPECIAL = {  # name: (fgrad function, scipy function, domain)
    "erf": (fs.erf, ss.erf, values()),
    "erfc": (fs.erfc, ss.erfc, values()),
    "erfinv": (fs.erfinv, ss.erfinv, values(-0.8, 0.8)),
    "gammaln": (fs.gammaln, ss.gammaln, values(0.3, 4.0)),
    "digamma": (fs.digamma, ss.digamma, values(0.3, 4.0)),
    "polygamma": (lambda x: fs.polygamma(1, x), lambda x: ss.polygamma(1, x),
                  values(0.5, 4.0)),
    "expit": (fs.expit, ss.expit, values(-4, 4)),
    "log_ndtr": (fs.log_ndtr, ss.log_ndtr, values(-6, 4)),
    "logit": (fs.logit, ss.logit, values(0.1, 0.9)),
    "betaln": (lambda x: fs.betaln(x, 1.7), lambda x: ss.betaln(x, 1.7), values(0.3, 3)),
    "xlogy": (lambda x: fs.xlogy(x, x + 2.5), lambda x: ss.xlogy(x, x + 2.5), values()),
    "xlog1py": (lambda x: fs.xlog1py(x, x + 1.5), lambda x: ss.xlog1py(x, x + 1.5),
                values()),
    # primitives/scipy_special.py; an order or shape parameter with no
    # derivative is held constant (its refusal is tested in test_scipy.py)
    "gamma": (fs.gamma, ss.gamma, values(0.3, 4.0)),
    "rgamma": (fs.rgamma, ss.rgamma, values(0.3, 4.0)),
    "gammaincc": (lambda x: fs.gammaincc(2.5, x), lambda x: ss.gammaincc(2.5, x),
                  values(0.2, 4.0)),
    "erfcinv": (fs.erfcinv, ss.erfcinv, values(0.2, 1.8)),
    "j0": (fs.j0, ss.j0, values(-6, 6)),
    "j1": (fs.j1, ss.j1, values(-6, 6)),
    "jn": (lambda x: fs.jn(3, x), lambda x: ss.jn(3, x), values(-6, 6)),
    "y0": (fs.y0, ss.y0, values(0.5, 6)),
    "y1": (fs.y1, ss.y1, values(0.5, 6)),
    "yn": (lambda x: fs.yn(2, x), lambda x: ss.yn(2, x), values(0.8, 6)),
    "i0": (fs.i0, ss.i0, values()),
    "i1": (fs.i1, ss.i1, values()),
    "iv": (lambda x: fs.iv(1.5, x), lambda x: ss.iv(1.5, x), values(0.3, 3)),
    "ive": (lambda x: fs.ive(2, x), lambda x: ss.ive(2, x), values(-3, 3)),
    "kv": (lambda x: fs.kv(0.7, x), lambda x: ss.kv(0.7, x), values(0.3, 3)),
    "zeta": (lambda q: fs.zeta(2.5, q), lambda q: ss.zeta(2.5, q), values(0.5, 3)),
    "multigammaln": (lambda a: fs.multigammaln(a, 3), lambda a: ss.multigammaln(a, 3),
                     values(1.2, 4.0)),
    "entr": (fs.entr, ss.entr, values(0.1, 3.0)),
    "stdtr": (lambda t: fs.stdtr(3.5, t), lambda t: ss.stdtr(3.5, t), values(-3, 3)),
    "ndtr": (fs.ndtr, ss.ndtr, values(-4, 4)),
}


def _special(name):
    f, ref, domain = SPECIAL[name]
    return shapes(max_dims=2).flatmap(lambda s: arrays(s, domain)).map(
        lambda x: Case(f, (x,), ref, tol=dict(atol=1e-4, rtol=1e-4)))


for _name in SPECIAL:
    SPECS[_name] = _special(_name)

for _name in ("softmax", "log_softmax"):
    SPECS[f"scipy_{_name}"] = shapes(min_dims=1, max_dims=2).flatmap(arrays).map(
        lambda x, f=getattr(fs, _name), ref=getattr(ss, _name): Case(
            lambda x: f(x, axis=-1), (x,), lambda x: ref(x, axis=-1)))
SPECS["scipy_logsumexp"] = st.tuples(shapes(min_dims=1, max_dims=2), st.booleans()).flatmap(
    lambda d: arrays(d[0]).map(lambda x: Case(
        lambda x: fs.logsumexp(x, axis=-1, keepdims=d[1]), (x,),
        lambda x: ss.logsumexp(x, axis=-1, keepdims=d[1]))))


def _matrix(n, shift):
    return arrays((n, n)).map(lambda m: 0.3 * m + shift * np.eye(n))


@st.composite
def _triangular_case(draw):
    n = draw(st.integers(1, 3))
    lower, trans, vector = draw(st.booleans()), draw(st.sampled_from([0, 1])), \
        draw(st.booleans())
    kw = dict(trans=trans, lower=lower, unit_diagonal=draw(st.booleans()))
    a = draw(_matrix(n, 2.5))
    b = draw(arrays((n,) if vector else (n, 2)))
    return Case(lambda a, b: fl.solve_triangular(a, b, **kw), (a, b),
                lambda a, b: sl.solve_triangular(a, b, **kw), tol=dict(atol=1e-4, rtol=1e-4))


SPECS["solve_triangular"] = _triangular_case()
SPECS["solve_sylvester"] = st.integers(1, 3).flatmap(lambda n: st.tuples(
    _matrix(n, 2.5), _matrix(n, 2.0), arrays((n, n)))).map(lambda abq: Case(
        fl.solve_sylvester, abq, sl.solve_sylvester, tol=dict(atol=1e-4, rtol=1e-4)))
# symmetric positive definite with eigenvalues well away from 0: a real sqrtm
def _spd(m):
    eye = np.eye(m.shape[0], dtype=m.dtype)
    if not isinstance(m, np.ndarray):
        eye = fnp.asarray(eye, like=m)
    return fnp.matmul(m, fnp.transpose(m)) * 0.2 + 2.0 * eye


SPECS["sqrtm"] = st.integers(1, 3).flatmap(lambda n: arrays((n, n))).map(
    lambda m: Case(lambda m: fl.sqrtm(_spd(m)), (m,), lambda m: sl.sqrtm(_spd(m)),
                   tol=dict(atol=1e-4, rtol=1e-4), float32=False))


# incomplete gamma/beta: differentiable in x only (shape parameters have no rule)
SPECS["gammainc"] = shapes(max_dims=2).flatmap(lambda s: arrays(s, values(0.2, 4.0))).map(
    lambda x: Case(lambda x: fs.gammainc(2.5, x), (x,), lambda x: ss.gammainc(2.5, x),
                   tol=dict(atol=1e-4, rtol=1e-4)))
SPECS["betainc"] = shapes(max_dims=2).flatmap(lambda s: arrays(s, values(0.1, 0.9))).map(
    lambda x: Case(lambda x: fs.betainc(2.0, 3.5, x), (x,),
                   lambda x: ss.betainc(2.0, 3.5, x), tol=dict(atol=1e-4, rtol=1e-4)))


# Beta in both arguments, broadcasting; the sign of Gamma has no derivative
SPECS["beta"] = hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3) \
    .flatmap(lambda bs: st.tuples(*(arrays(s, values(0.3, 3.0)) for s in bs.input_shapes))) \
    .map(lambda ab: Case(fs.beta, ab, ss.beta, tol=dict(atol=1e-4, rtol=1e-4)))
NONDIFF_SPECS["gammasgn"] = shapes(max_dims=2).flatmap(
    lambda s: arrays(s, values(-3.9, 3.9))).map(lambda x: (fs.gammasgn, ss.gammasgn, (x,)))
import scipy_stats_specs  # noqa: E402,F401  (fgrad.scipy.stats)


# scipy.linalg matrix functions (primitives/scipy_linalg.py): expm of any small
# matrix, logm of a symmetric positive definite one (a real logarithm)
SPECS["expm"] = st.integers(1, 3).flatmap(lambda n: arrays((n, n))).map(
    lambda m: Case(lambda m: fl.expm(0.5 * m), (m,), lambda m: sl.expm(0.5 * m),
                   tol=dict(atol=1e-4, rtol=1e-4)))
SPECS["logm"] = st.integers(1, 3).flatmap(lambda n: arrays((n, n))).map(
    lambda m: Case(lambda m: fl.logm(_spd(m)), (m,), lambda m: sl.logm(_spd(m)),
                   tol=dict(atol=1e-4, rtol=1e-4), float32=False))


@st.composite
def _lu_case(draw):
    # a diagonally dominated matrix (its pivots do not change under the finite
    # differences); lu_solve reads the factor back, both transposes
    n, trans, vector = draw(st.integers(1, 3)), draw(st.sampled_from([0, 1])), \
        draw(st.booleans())
    a, b = draw(_matrix(n, 2.5)), draw(arrays((n,) if vector else (n, 2)))
    return Case(lambda a, b: fl.lu_solve(fl.lu_factor(a), b, trans=trans), (a, b),
                lambda a, b: sl.lu_solve(sl.lu_factor(a), b, trans=trans),
                tol=dict(atol=1e-4, rtol=1e-4))


SPECS["lu_factor"] = st.integers(1, 3).flatmap(lambda n: _matrix(n, 2.5)).map(
    lambda a: Case(lambda a: fl.lu_factor(a)[0], (a,), lambda a: sl.lu_factor(a)[0],
                   tol=dict(atol=1e-4, rtol=1e-4)))
SPECS["lu_solve"] = _lu_case()


@st.composite
def _banded_case(draw):
    n, lower, upper = draw(st.integers(1, 4)), draw(st.integers(0, 2)), draw(st.integers(0, 2))
    ab = np.array(draw(arrays((lower + upper + 1, n))), dtype=float)
    # each column's diagonal outweighs the rest of it: never singular (a
    # diagonal of value + 3 was, at [[-1.5, -1.5], [1.5, 1.5], [-1.5, -1.5]])
    ab[upper] = 1.0 + np.abs(ab).sum(axis=0)
    b = draw(arrays((n,)))
    return Case(lambda ab, b: fl.solve_banded((lower, upper), ab, b), (ab, b),
                lambda ab, b: sl.solve_banded((lower, upper), ab, b),
                tol=dict(atol=1e-4, rtol=1e-4))


SPECS["solve_banded"] = _banded_case()
# the pivots: integers, no derivative (lu_factor holds them). A strong random
# permutation in the matrix makes the pivoting do something. The matrix must
# be invertible: the zero gradient the sweep checks still passes through
# lu_factor's rule, which solves with U (a drawn entry of -4 can cancel the 4).
def _pivoted(n):
    return st.tuples(arrays((n, n)), st.permutations(range(n))).map(
        lambda mp: mp[0] + 4.0 * np.eye(n)[list(mp[1])]).filter(
        lambda a: np.linalg.cond(a) < 1e8)


NONDIFF_SPECS["lu_pivots"] = st.integers(1, 4).flatmap(_pivoted).map(
    lambda a: (lambda a: fl.lu_factor(a)[1], lambda a: sl.lu_factor(a)[1], (a,)))
NONDIFF_SPECS["pivot_permutation"] = st.integers(1, 4).flatmap(_pivoted).map(
    lambda a: (lambda a: _scipy_linalg.pivot_permutation(_scipy_linalg.lu_pivots(a)),
               lambda a: sl.lu(a)[0].T.argmax(1), (a,)))


# scipy.signal: n-d convolve / correlate, every mode and method, and fftconvolve
@st.composite
def _signal_case(draw, name):
    ndim = draw(st.integers(1, 2))
    s1 = draw(st.tuples(*[st.integers(1, 4)] * ndim))
    mode = draw(st.sampled_from(["full", "same", "valid"]))
    s2 = draw(st.tuples(*[st.integers(1, 3)] * ndim))
    if mode == "valid":                       # one input covers the other
        s2 = tuple(min(a, b) for a, b in zip(s1, s2))
        if draw(st.booleans()):
            s1, s2 = s2, s1
    a, b = draw(arrays(s1)), draw(arrays(s2))
    if name == "fftconvolve":
        return Case(lambda a, b: fsig.fftconvolve(a, b, mode), (a, b),
                    lambda a, b: ssig.fftconvolve(a, b, mode), tol=dict(atol=1e-4, rtol=1e-4))
    method = draw(st.sampled_from(["direct", "fft"]))
    f, ref = getattr(fsig, name), getattr(ssig, name)
    return Case(lambda a, b: f(a, b, mode, method), (a, b),
                lambda a, b: ref(a, b, mode, method), tol=dict(atol=1e-4, rtol=1e-4))


for _name in ("convolve", "correlate", "fftconvolve"):
    SPECS[f"signal.{_name}"] = _signal_case(_name)
