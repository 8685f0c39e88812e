"""fgrad.scipy against scipy: values, and derivatives to second order."""
import subprocess
import sys

import numpy as np
import pytest
import scipy.linalg as sl
import scipy.special as ss
import scipy.stats as sst

import fgrad
import fgrad.numpy as fnp
import fgrad.scipy.linalg as fl
import fgrad.scipy.special as fs
import fgrad.scipy.stats as fst
from fgrad.testing import check_grads

r = np.random.default_rng(0)
x = r.uniform(0.2, 0.8, (3,))
y = r.uniform(0.5, 2, (3,))
CASES = [("erf",fs.erf,ss.erf,(x,)),("erfc",fs.erfc,ss.erfc,(x,)),("erfinv",fs.erfinv,ss.erfinv,(x,)),("gammaln",fs.gammaln,ss.gammaln,(y,)),("digamma",fs.digamma,ss.digamma,(y,)),("polygamma",lambda v: fs.polygamma(2,v),lambda v: ss.polygamma(2,v),(y,)),("expit",fs.expit,ss.expit,(x,)),("logit",fs.logit,ss.logit,(x,)),("xlogy",fs.xlogy,ss.xlogy,(x,y)),("xlog1py",fs.xlog1py,ss.xlog1py,(x,y)),("betaln",fs.betaln,ss.betaln,(x,y)),("logsumexp",lambda v: fs.logsumexp(v,axis=0),lambda v: ss.logsumexp(v,axis=0),(r.standard_normal((3,2)),)),("softmax",lambda v: fs.softmax(v,axis=1),lambda v: ss.softmax(v,axis=1),(r.standard_normal((3,2)),)),("log_ndtr",fs.log_ndtr,ss.log_ndtr,(r.standard_normal(4)*3,)),
("norm.logpdf",fst.norm.logpdf,sst.norm.logpdf,(x,y,y)),("norm.cdf",fst.norm.cdf,sst.norm.cdf,(x,y,y)),("norm.logcdf",fst.norm.logcdf,sst.norm.logcdf,(x,y,y)),("norm.pdf",fst.norm.pdf,sst.norm.pdf,(x,)),
("t.logpdf",fst.t.logpdf,sst.t.logpdf,(x,y+1,y,y)),("gamma.logpdf",fst.gamma.logpdf,sst.gamma.logpdf,(y,y+1)),("beta.logpdf",fst.beta.logpdf,sst.beta.logpdf,(x,y,y)),
("poisson.logpmf",lambda mu: fst.poisson.logpmf(np.array([0.,1.,3.]),mu),lambda mu: sst.poisson.logpmf(np.array([0,1,3]),mu),(y,)),
("dirichlet",fst.dirichlet.logpdf,sst.dirichlet.logpdf,(np.array([0.2,0.3,0.5]),y)),
("mvn",lambda x,m: fst.multivariate_normal.logpdf(x,m,np.array([[2.,.3],[.3,1.]])),lambda x,m: sst.multivariate_normal.logpdf(x,m,np.array([[2.,.3],[.3,1.]])),(r.standard_normal((4,2)),r.standard_normal(2))),
("solve_tri",lambda a,b: fl.solve_triangular(a,b,lower=True),lambda a,b: sl.solve_triangular(a,b,lower=True),(np.tril(r.standard_normal((3,3)))+3*np.eye(3), r.standard_normal((3,2)))),
("solve_triT",lambda a,b: fl.solve_triangular(a,b,trans=1),lambda a,b: sl.solve_triangular(a,b,trans=1),(np.triu(r.standard_normal((3,3)))+3*np.eye(3), r.standard_normal(3))),
("cho_solve",lambda a,b: fl.cho_solve(fl.cho_factor(a),b),lambda a,b: sl.cho_solve(sl.cho_factor(a),b),(np.eye(3)*3+0.5, r.standard_normal(3))),
("sqrtm",fl.sqrtm,sl.sqrtm,(np.eye(3)*3+0.5*np.ones((3,3)),)),
("sylv",fl.solve_sylvester,sl.solve_sylvester,(np.eye(2)*3+r.standard_normal((2,2)),np.eye(2)*2+r.standard_normal((2,2)),r.standard_normal((2,2)))),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_matches_scipy_and_differentiates(case):
    name, f, ref, args = case
    np.testing.assert_allclose(f(*args), ref(*args), rtol=1e-10, atol=1e-12)
    check_grads(f, args, order=2)


def test_xlogy_and_xlog1py_have_finite_gradients_at_zero():
    g = fgrad.grad(lambda x: fnp.sum(fs.xlogy(x, np.array([0.0, 2.0]))))(np.zeros(2))
    np.testing.assert_allclose(g, [0.0, np.log(2.0)])
    np.testing.assert_array_equal(fs.xlogy(np.array([0.0, 1.0]), 0.0), [0.0, -np.inf])
    g = fgrad.grad(lambda y: fnp.sum(fs.xlog1py(np.zeros(2), y)))(np.array([-1.0, 1.0]))
    np.testing.assert_array_equal(g, [0.0, 0.0])


def test_logsumexp_is_stable_and_has_softmax_gradient():
    a = np.array([1000.0, 1000.0, -np.inf])
    assert fs.logsumexp(a) == pytest.approx(1000.0 + np.log(2.0))
    np.testing.assert_allclose(fgrad.grad(fs.logsumexp)(a), [0.5, 0.5, 0.0])
    out, sign = fs.logsumexp(np.array([0.0, 0.0]), b=np.array([1.0, -2.0]),
                             return_sign=True)
    assert sign == -1.0 and out == pytest.approx(0.0)


def test_python_scalars_keep_float32():
    assert fs.betaln(np.ones(2, np.float32), 1.7).dtype == np.float32


CDF_CASES = [
    ("t.cdf", lambda v: fst.t.cdf(v, 3.5, 0.5, 1.5), lambda v: sst.t.cdf(v, 3.5, 0.5, 1.5),
     np.array([-1.5, -0.2, 0.3, 2.0])),
    ("t.logcdf", lambda v: fst.t.logcdf(v, 3.5), lambda v: sst.t.logcdf(v, 3.5),
     np.array([-1.5, -0.2, 0.3, 2.0])),
    ("gamma.cdf", lambda v: fst.gamma.cdf(v, 2.5, 0.1, 2.0),
     lambda v: sst.gamma.cdf(v, 2.5, 0.1, 2.0), np.array([0.4, 1.3, 4.0])),
    ("gamma.logcdf", lambda v: fst.gamma.logcdf(v, 2.5), lambda v: sst.gamma.logcdf(v, 2.5),
     np.array([0.4, 1.3, 4.0])),
    ("beta.cdf", lambda v: fst.beta.cdf(v, 2.0, 3.0), lambda v: sst.beta.cdf(v, 2.0, 3.0),
     np.array([0.2, 0.5, 0.7])),
    ("beta.logcdf", lambda v: fst.beta.logcdf(v, 2.0, 3.0),
     lambda v: sst.beta.logcdf(v, 2.0, 3.0), np.array([0.2, 0.5, 0.7])),
]


@pytest.mark.parametrize("case", CDF_CASES, ids=lambda c: c[0])
def test_cdfs_match_scipy_and_differentiate_in_x(case):
    name, f, ref, v = case
    np.testing.assert_allclose(f(v), ref(v), rtol=1e-10, atol=1e-12)
    check_grads(f, (v,), order=2)


def test_cdfs_outside_the_support_are_flat_with_finite_gradients():
    x = np.array([-1.0, 0.0, 1.5])
    np.testing.assert_allclose(fst.gamma.cdf(x, 2.0), sst.gamma.cdf(x, 2.0))
    g = fgrad.grad(lambda v: fnp.sum(fst.gamma.cdf(v, 2.0)))(x)
    assert np.all(np.isfinite(g)) and g[0] == 0.0
    xb = np.array([-0.5, 0.5, 1.5])
    np.testing.assert_allclose(fst.beta.cdf(xb, 2.0, 3.0), sst.beta.cdf(xb, 2.0, 3.0))
    gb = fgrad.grad(lambda v: fnp.sum(fst.beta.cdf(v, 2.0, 3.0)))(xb)
    assert np.all(np.isfinite(gb)) and gb[0] == 0.0 and gb[2] == 0.0


def test_shape_parameter_derivatives_are_refused_by_name():
    with pytest.raises(fgrad.errors.MissingRuleError, match=r"scipy.special.gammainc has no "
                                                             r"derivative with respect to a "
                                                             r"\(argument 0\)"):
        fgrad.grad(lambda a: fnp.sum(fst.gamma.cdf(np.array([1.0, 2.0]), a)))(2.5)
    with pytest.raises(fgrad.errors.MissingRuleError, match=r"betainc has no derivative "
                                                             r"with respect to a "):
        fgrad.jvp(lambda a: fs.betainc(a, 2.0, 0.5), (1.5,), (1.0,))


@pytest.mark.parametrize("f, arg", [
    (lambda n: fs.jn(n, 1.3), "n"), (lambda n: fs.yn(n, 1.3), "n"),
    (lambda v: fs.iv(v, 1.3), "v"), (lambda v: fs.ive(v, 1.3), "v"),
    (lambda v: fs.kv(v, 1.3), "v"), (lambda x: fs.zeta(x, 1.3), "x"),
    (lambda x: fs.zeta(x), "x"), (lambda a: fs.gammaincc(a, 1.3), "a"),
    (lambda b: fs.betainc(1.5, b, 0.3), "b")])
def test_orders_and_shape_parameters_have_no_silent_derivative(f, arg):
    # the other arguments stay differentiable; this one is refused by name, in
    # both modes, never answered with a zero
    for transform in (lambda: fgrad.grad(f)(2.0), lambda: fgrad.jvp(f, (2.0,), (1.0,))):
        with pytest.raises(fgrad.errors.MissingRuleError,
                           match=rf"no derivative with respect to {arg} "):
            transform()


def test_scipy_functions_run_under_vmap_of_grad():
    x = np.array([0.5, 1.0, 2.0])
    got = fgrad.vmap(fgrad.grad(lambda v: fs.jn(2, v) * fs.kv(0.5, v)))(x)
    def product(v):
        return ss.jn(2, v) * ss.kv(0.5, v)
    want = (product(x + 1e-6) - product(x - 1e-6)) / 2e-6
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_fgrad_scipy_imports_without_scipy_and_says_how_to_install_it():
    code = ("import sys; sys.modules['scipy'] = None\n"
            "import fgrad.scipy.special as fs\n"
            "try:\n    fs.gamma(2.0)\nexcept ModuleNotFoundError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "pip install 'fgrad[scipy]'" in out


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("trans", [0, 1])
def test_solve_triangular_with_a_unit_diagonal_reads_no_diagonal(lower, trans):
    a = r.standard_normal((3, 3)) * 0.3 + 5 * np.eye(3)       # the diagonal is ignored
    b = r.standard_normal((3, 2))
    def f(a, b):
        return fl.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=True)
    np.testing.assert_allclose(f(a, b), sl.solve_triangular(a, b, trans=trans, lower=lower,
                                                            unit_diagonal=True), rtol=1e-12)
    check_grads(f, (a, b), order=2)
    ga = fgrad.grad(lambda a: fnp.sum(f(a, b)))(a)
    np.testing.assert_array_equal(np.diag(ga), 0.0)
    np.testing.assert_allclose(fgrad.jit(f)(a, b), f(a, b), rtol=1e-12)
