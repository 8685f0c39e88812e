"""fgrad.scipy.optimize: SciPy's solvers, with solutions differentiated by the
implicit function theorem. A table of problems, each checked against finite
differences of re-solving at tight tolerance (and closed forms or JAX where
they exist), under grad, jvp, vmap and jit; and loud failures."""
import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.errors import ConvergenceError, ImplicitSolveError
from fgrad.scipy import optimize as fo

scipy_optimize = pytest.importorskip("scipy.optimize")
RNG = np.random.default_rng(0)
X = RNG.standard_normal((30, 4))
Y = X @ np.array([1.0, -2.0, 0.5, 0.0]) + 0.3 * RNG.standard_normal(30)
X_VAL, Y_VAL = X[:10] + 0.1, Y[:10]


def central_difference(fun, x, eps=1e-6):
    """d fun / d x by central differences, re-solving at each point."""
    x = np.asarray(x, float)
    cols = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = eps
        cols.append((np.asarray(fun(x + e)) - np.asarray(fun(x - e))) / (2 * eps))
    return np.stack(cols, -1).reshape(np.shape(fun(x)) + x.shape)


# -- ridge regression: the penalty's gradient on a validation loss --------------------

def ridge_fit(lam, method="BFGS"):
    def loss(w, lam):
        return fnp.sum((X @ w - Y) ** 2) + lam * fnp.sum(w ** 2)
    # trust-krylov stops with "a bad approximation" when asked for 1e-12
    tol = 1e-8 if method == "trust-krylov" else 1e-12
    return fo.minimize(loss, np.zeros(4), args=(lam,), method=method, tol=tol).x


def validation(lam, method="BFGS"):
    return fnp.mean((X_VAL @ ridge_fit(lam, method) - Y_VAL) ** 2)


def ridge_closed_form(lam):
    return np.linalg.solve(X.T @ X + lam * np.eye(4), X.T @ Y)


def test_ridge_solution_and_penalty_gradient_match_the_closed_form():
    w = ridge_closed_form(0.7)
    np.testing.assert_allclose(ridge_fit(0.7), w, rtol=1e-7)
    dw = -np.linalg.solve(X.T @ X + 0.7 * np.eye(4), w)
    np.testing.assert_allclose(fgrad.jacrev(ridge_fit)(0.7), dw, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(fgrad.jacfwd(ridge_fit)(0.7), dw, rtol=1e-7, atol=1e-10)
    g = fgrad.grad(validation)(0.7)
    want = 2 / 10 * (X_VAL @ w - Y_VAL) @ X_VAL @ dw
    np.testing.assert_allclose(g, want, rtol=1e-7)


@pytest.mark.parametrize("method", ["BFGS", "L-BFGS-B", "CG", "Newton-CG", "trust-ncg",
                                    "trust-krylov", "trust-exact", "dogleg", "SLSQP",
                                    "trust-constr"])
def test_every_gradient_based_method_gives_the_same_derivative(method):
    dw = -np.linalg.solve(X.T @ X + 0.7 * np.eye(4), ridge_closed_form(0.7))
    np.testing.assert_allclose(fgrad.jacrev(lambda l: ridge_fit(l, method))(0.7), dw,
                               rtol=1e-5, atol=1e-8)


def test_ridge_under_jit_vmap_and_jvp():
    lams = np.array([0.1, 0.7, 3.0])
    want = [fgrad.grad(validation)(lam) for lam in lams]
    np.testing.assert_allclose(fgrad.vmap(fgrad.grad(validation))(lams), want, rtol=1e-7)
    np.testing.assert_allclose(fgrad.jit(fgrad.grad(validation))(0.7), want[1], rtol=1e-7)
    np.testing.assert_allclose(fgrad.grad(fgrad.jit(validation))(0.7), want[1], rtol=1e-7)
    _, t = fgrad.jvp(validation, (0.7,), (1.0,))
    np.testing.assert_allclose(t, want[1], rtol=1e-7)


def test_second_derivative_of_the_validation_loss():
    h = fgrad.grad(fgrad.grad(validation))(0.7)
    fd = central_difference(lambda l: fgrad.grad(validation)(l[0]), [0.7], 1e-4)
    np.testing.assert_allclose(h, fd.ravel()[0], rtol=1e-5)


def test_tuning_the_penalty_by_gradient_descent_lowers_the_validation_loss():
    log_lam = np.log(5.0)
    step = fgrad.jit(fgrad.value_and_grad(lambda s: validation(fnp.exp(s))))
    first, _ = step(log_lam)
    for _ in range(10):
        value, g = step(log_lam)
        log_lam = log_lam - 2.0 * g
    assert value < first


# -- logistic regression: gradient of validation loss in the penalty ------------------

LABELS = (X @ np.array([1.0, -1.0, 0.5, 0.2]) + 0.5 * RNG.standard_normal(30) > 0) * 1.0


def logistic_fit(lam):
    def loss(w, lam):
        z = X @ w
        return fnp.sum(fnp.logaddexp(0.0, z) - LABELS * z) + 0.5 * lam * fnp.sum(w ** 2)
    return fo.minimize(loss, np.zeros(4), args=(lam,), method="Newton-CG",
                       options={"xtol": 1e-14}).x


def test_logistic_regression_penalty_gradient_matches_finite_differences():
    g = fgrad.jacrev(logistic_fit)(1.3)
    np.testing.assert_allclose(g, central_difference(lambda l: logistic_fit(l[0]),
                                                     [1.3]).ravel(), rtol=1e-5, atol=1e-8)


# -- Rosenbrock: the minimiser (a, a^2) moves with a and not with b --------------------

def rosenbrock_argmin(params, method="BFGS", x0=(-1.0, 1.5)):
    def f(x, p):
        return (p["a"] - x[0]) ** 2 + p["b"] * (x[1] - x[0] ** 2) ** 2
    options = {"BFGS": {"gtol": 1e-11}, "Newton-CG": {"xtol": 1e-12}}.get(method)
    return fo.minimize(f, np.array(x0), args=(params,), method=method, options=options).x


@pytest.mark.parametrize("method", ["BFGS", "trust-exact", "Newton-CG"])
def test_rosenbrock_minimiser_derivative_in_a_pytree_of_parameters(method):
    p = {"a": 1.5, "b": 50.0}
    np.testing.assert_allclose(rosenbrock_argmin(p, method), [1.5, 2.25], rtol=1e-6)
    jac = fgrad.jacrev(lambda p: rosenbrock_argmin(p, method))(p)
    np.testing.assert_allclose(jac["a"], [1.0, 3.0], rtol=1e-5)
    np.testing.assert_allclose(jac["b"], [0.0, 0.0], atol=1e-6)


def test_rosenbrock_family_under_vmap():
    a = np.array([0.5, 1.0, 2.0])
    per = fgrad.vmap(fgrad.jacrev(lambda a: rosenbrock_argmin({"a": a, "b": 10.0})))(a)
    np.testing.assert_allclose(per, np.stack([np.ones(3), 2 * a], 1), rtol=1e-5)


@pytest.mark.slow
def test_chained_rosenbrock_matches_finite_differences():
    def argmin(a):
        def f(x, a):
            return fnp.sum((a - x[:-1]) ** 2 + 20.0 * (x[1:] - x[:-1] ** 2) ** 2)
        return fo.minimize(f, np.full(5, 0.5), args=(a,), method="trust-exact",
                           tol=1e-13).x
    np.testing.assert_allclose(fgrad.jacrev(argmin)(1.2),
                               central_difference(lambda a: argmin(a[0]), [1.2]).ravel(),
                               rtol=1e-5, atol=1e-7)


# -- bounds and constraints: the KKT conditions of the active set ----------------------

def bounded_fit(lam):
    def loss(w, lam):
        return fnp.sum((X @ w - Y) ** 2) + lam * fnp.sum(w ** 2)
    return fo.minimize(loss, np.full(4, 0.1), args=(lam,), method="L-BFGS-B",
                       bounds=[(0, None)] * 4, options={"ftol": 1e-13, "gtol": 1e-10}).x


def test_active_bounds_have_zero_derivative_and_free_ones_follow_the_hessian():
    w = bounded_fit(0.7)
    assert w[1] == 0.0 and w[3] == 0.0          # held at the bound
    g = fgrad.jacrev(bounded_fit)(0.7)
    np.testing.assert_allclose(g, central_difference(lambda l: bounded_fit(l[0]), [0.7]
                                                     ).ravel(), atol=1e-6)
    assert g[1] == 0.0 and g[3] == 0.0


def constrained_fit(theta):
    def loss(w, lam):
        return fnp.sum((X @ w - Y) ** 2) + lam * fnp.sum(w ** 2)
    cons = [{"type": "eq", "fun": lambda w, s: fnp.sum(w) - s, "args": (theta[1],)},
            {"type": "ineq", "fun": lambda w: w[0] - 0.5}]
    return fo.minimize(loss, np.zeros(4), args=(theta[0],), method="SLSQP",
                       constraints=cons, options={"ftol": 1e-15, "maxiter": 500}).x


def test_slsqp_constraints_enter_the_derivative_with_their_multipliers():
    theta = np.array([0.7, 0.2])
    w = constrained_fit(theta)
    np.testing.assert_allclose(w.sum(), 0.2, atol=1e-10)
    g = fgrad.jacrev(constrained_fit)(theta)
    np.testing.assert_allclose(g, central_difference(constrained_fit, theta, 1e-5),
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(g.sum(0), [0.0, 1.0], atol=1e-8)   # sum(w) = s


def test_linear_and_nonlinear_constraint_objects_with_trust_constr():
    A = scipy_optimize.LinearConstraint(np.ones((1, 2)), 1.0, 1.0)

    def argmin(c):
        f = lambda x, c: fnp.sum((x - c) ** 2)
        return fo.minimize(f, np.array([0.5, 0.5]), args=(c,), method="trust-constr",
                           constraints=[A], options={"gtol": 1e-12, "xtol": 1e-14}).x
    c = np.array([2.0, 0.0])
    np.testing.assert_allclose(argmin(c), [1.5, -0.5], atol=1e-6)
    # projection onto x0 + x1 = 1: dx/dc = I - 11^T / 2
    np.testing.assert_allclose(fgrad.jacrev(argmin)(c), np.eye(2) - 0.5, atol=1e-6)


# -- a nonlinear system and a chemical equilibrium -------------------------------------

def system_root(p):
    def F(x, p):
        return fnp.stack([x[0] ** 2 + x[1] - p[0], x[0] + fnp.exp(x[1]) - p[1],
                          x[2] ** 3 + x[0] - p[2]])
    return fo.root(F, np.array([1.0, 0.0, 1.0]), args=(p,), tol=1e-12).x


def test_nonlinear_system_derivatives_under_every_mode():
    p = np.array([2.0, 2.5, 1.5])
    fd = central_difference(system_root, p)
    np.testing.assert_allclose(fgrad.jacrev(system_root)(p), fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(fgrad.jacfwd(system_root)(p), fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(fgrad.jit(fgrad.jacrev(system_root))(p), fd, rtol=1e-6,
                               atol=1e-8)
    ps = np.stack([p, p * 1.1])
    np.testing.assert_allclose(fgrad.vmap(fgrad.jacrev(system_root))(ps)[0], fd,
                               rtol=1e-6, atol=1e-8)


def equilibrium(K, A0, B0):
    """A + B <=> C with [C] = K [A][B]: concentrations in log space."""
    def F(logc, K, A0, B0):
        a, b, c = fnp.exp(logc[0]), fnp.exp(logc[1]), fnp.exp(logc[2])
        return fnp.stack([logc[2] - fnp.log(K) - logc[0] - logc[1],
                          a + c - A0, b + c - B0])
    return fnp.exp(fo.root(F, np.log([0.5, 0.5, 0.5]), args=(K, A0, B0), tol=1e-12).x)


def test_chemical_equilibrium_sensitivities_match_the_quadratic_formula():
    def c_exact(K, A0, B0):        # K (A0 - c)(B0 - c) = c, the smaller root
        s = K * (A0 + B0) + 1
        return (s - np.sqrt(s ** 2 - 4 * K ** 2 * A0 * B0)) / (2 * K)
    K, A0, B0 = 3.0, 1.0, 0.8
    np.testing.assert_allclose(equilibrium(K, A0, B0)[2], c_exact(K, A0, B0), rtol=1e-10)
    got = fgrad.grad(lambda *a: equilibrium(*a)[2], (0, 1, 2))(K, A0, B0)
    want = [central_difference(lambda v: c_exact(*[v[0] if j == i else a for j, a in
                                                    enumerate((K, A0, B0))]), [val])
            .ravel()[0] for i, val in enumerate((K, A0, B0))]
    np.testing.assert_allclose(got, want, rtol=1e-6)


# -- root_scalar, fixed_point -----------------------------------------------------------

@pytest.mark.parametrize("kw", [dict(bracket=(0, 5), method="brentq"),
                                dict(bracket=(0, 5), method="bisect", xtol=1e-14),
                                dict(bracket=(0, 5), method="toms748"),
                                dict(x0=1.0, method="newton"),
                                dict(x0=1.0, method="halley"),
                                dict(x0=1.0, x1=2.0, method="secant")])
def test_root_scalar_methods(kw):
    def r(a):
        return fo.root_scalar(lambda x, a: x ** 3 - a, args=(a,), **kw).root
    assert np.isclose(r(8.0), 2.0)
    np.testing.assert_allclose(fgrad.grad(r)(8.0), 1 / 12, rtol=1e-9)
    np.testing.assert_allclose(fgrad.jit(fgrad.grad(r))(8.0), 1 / 12, rtol=1e-9)


def test_root_scalar_result_record_and_vmap():
    res = fo.root_scalar(lambda x: x ** 2 - 2, bracket=(0, 2))
    assert res.converged and res.flag == "converged" and res.method == "brentq"
    grads = fgrad.vmap(fgrad.grad(lambda a: fo.root_scalar(
        lambda x, a: x ** 3 - a, args=(a,), bracket=(0, 5)).root))(np.array([1.0, 8.0]))
    np.testing.assert_allclose(grads, [1 / 3, 1 / 12], rtol=1e-8)


def test_fixed_point_of_a_vector_map():
    def x_of(a):
        return fo.fixed_point(lambda x, a: fnp.cos(a * x), np.array([0.5, 0.2]), args=(a,))
    np.testing.assert_allclose(fgrad.jacrev(x_of)(1.0),
                               central_difference(lambda a: x_of(a[0]), [1.0]).ravel(),
                               rtol=1e-6)


# -- least_squares and curve_fit: sensitivities to the data ----------------------------

T = np.linspace(0, 1, 8)
DATA = 2 * np.exp(-T) + 0.01 * RNG.standard_normal(8)
SIGMA = 0.01 + 0.01 * T


def model(t, a, b):
    return a * fnp.exp(b * t)


def test_curve_fit_matches_scipy_and_its_data_sensitivities_finite_differences():
    popt, pcov = fo.curve_fit(model, T, DATA, p0=[1.0, 0.0], sigma=SIGMA)
    ref, ref_cov = scipy_optimize.curve_fit(lambda t, a, b: a * np.exp(b * t), T, DATA,
                                            p0=[1.0, 0.0], sigma=SIGMA)
    np.testing.assert_allclose(popt, ref, rtol=1e-6)
    np.testing.assert_allclose(pcov, ref_cov, rtol=1e-5)
    # without p0, the parameter count comes from f's signature, as in SciPy
    np.testing.assert_allclose(fo.curve_fit(model, T, DATA, sigma=SIGMA)[0], ref, rtol=1e-6)

    def fit(y, s):
        return fo.curve_fit(model, T, y, p0=[1.0, 0.0], sigma=s)
    d_y = fgrad.jacrev(lambda y: fit(y, SIGMA)[0])(DATA)
    np.testing.assert_allclose(d_y, central_difference(lambda y: fit(y, SIGMA)[0], DATA),
                               atol=1e-6)
    d_sigma = fgrad.jacrev(lambda s: fit(DATA, s)[0])(SIGMA)
    np.testing.assert_allclose(d_sigma, central_difference(lambda s: fit(DATA, s)[0],
                                                           SIGMA), atol=1e-5)
    d_cov = fgrad.jacrev(lambda y: fit(y, SIGMA)[1])(DATA)
    np.testing.assert_allclose(d_cov, central_difference(lambda y: fit(y, SIGMA)[1],
                                                         DATA), atol=1e-9)


def test_curve_fit_under_jit_and_vmap():
    def popt(y):
        return fo.curve_fit(model, T, y, p0=[1.0, 0.0])[0]
    ys = np.stack([DATA, 1.5 * DATA])
    np.testing.assert_allclose(fgrad.vmap(popt)(ys)[1], [1.5 * popt(DATA)[0], popt(DATA)[1]],
                               rtol=1e-6)
    g = fgrad.grad(lambda y: popt(y)[0])(DATA)
    np.testing.assert_allclose(fgrad.jit(fgrad.grad(lambda y: popt(y)[0]))(DATA), g,
                               rtol=1e-8)


def test_least_squares_robust_loss_with_bounds():
    def fit(y):
        return fo.least_squares(lambda p, y: p[0] * fnp.exp(p[1] * T) - y,
                                np.array([1.0, 0.0]), args=(y,), loss="soft_l1",
                                f_scale=0.05, bounds=([0, -0.95], [10, 0]),
                                xtol=1e-15, ftol=1e-15, gtol=1e-15).x
    p = fit(DATA)
    assert np.isclose(p[1], -0.95)                # at its bound
    g = fgrad.jacrev(fit)(DATA)
    np.testing.assert_allclose(g, central_difference(fit, DATA, 1e-4), atol=1e-6)
    assert not g[1].any()


# -- failure is loud ----------------------------------------------------------------------

def test_no_convergence_raises_with_scipys_message():
    rosen = scipy_optimize.rosen
    with pytest.raises(ConvergenceError, match="Maximum number of iterations"):
        fo.minimize(lambda x: fnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2),
                    np.zeros(3), method="BFGS", options={"maxiter": 3})
    assert rosen(np.ones(3)) == 0
    f = fgrad.jit(lambda a: fo.root(lambda x, a: fnp.cos(x) - a * x, np.array([0.0]),
                                    args=(a,), options={"maxfev": 2}).x)
    with pytest.raises(ConvergenceError, match="did not converge"):
        f(1.0)


# Where SciPy stops because floating point allows no further progress, fgrad
# accepts its point exactly when it checks out (the Newton step from a root, the
# gradient of a least-squares cost, within sqrt(machine epsilon) of the problem's
# scale), with SciPy's message, and raises otherwise.

def test_precision_limited_ends_at_a_solution_are_accepted_with_their_derivative():
    def argmin(a, method, tol):
        f = lambda x, a: fnp.sum((x - a) ** 2 * np.array([1.0, 100.0])) + 0.1 * fnp.sum(x ** 4)
        return fo.minimize(f, np.zeros(2), args=(a,), method=method, tol=tol)
    a = np.array([1.0, 2.0])
    want = fgrad.jacrev(lambda a: argmin(a, "BFGS", 1e-10).x)(a)
    for method in ("trust-ncg", "trust-exact", "dogleg"):      # asked for 1e-30
        res = argmin(a, method, 1e-30)
        assert res.success and res.status == 2 and "A bad approximation" in res.message
        np.testing.assert_allclose(fgrad.jacrev(lambda a: argmin(a, method, 1e-30).x)(a),
                                   want, rtol=1e-7)

    def sqrt_root(a, **kw):            # x^2 = a: hybr's last iterations make no progress
        return fo.root(lambda x, a: x ** 2 - a, np.array([1.0]), args=(a,), **kw)
    res = sqrt_root(2.0, tol=1e-15)
    assert res.success and res.status == 5 and "not making good progress" in res.message
    np.testing.assert_allclose(res.x, [np.sqrt(2.0)], rtol=1e-15)
    np.testing.assert_allclose(fgrad.grad(lambda a: sqrt_root(a, tol=1e-15).x[0])(2.0),
                               0.5 / np.sqrt(2.0), rtol=1e-12)
    res = sqrt_root(2.0, tol=1e-300, method="lm")
    assert res.success and res.status == 7 and "xtol=0.000000 is too small" in res.message

    def log_root(a):                   # Newton goes back and forth between two floats
        return fo.root_scalar(lambda x, a: fnp.exp(x) - a, args=(a,), x0=1.0,
                              method="newton", xtol=1e-300, rtol=0.0).root
    np.testing.assert_allclose(log_root(7.0), np.log(7.0), rtol=1e-15)
    np.testing.assert_allclose(fgrad.grad(log_root)(7.0), 1 / 7.0, rtol=1e-12)

    def fixed(a):                      # xtol=0 is never met: SciPy gives up at maxiter
        return fo.fixed_point(lambda x, a: fnp.cos(a * x), 0.5, args=(a,), xtol=0.0)
    np.testing.assert_allclose(fixed(1.0), 0.7390851332151607, rtol=1e-15)
    np.testing.assert_allclose(fgrad.grad(fixed)(1.0), -0.29747434150983226, rtol=1e-10)

    t = np.linspace(0, 1, 5)

    def rate(y, **tols):               # gtol=1e-15 alone: the evaluation limit ends it
        return fo.least_squares(lambda k, y: fnp.exp(-k[0] * t) - y, np.array([1.0]),
                                args=(y,), **tols)
    y = np.exp(-2.0 * t) + 0.01 * np.arange(5)
    res = rate(y, ftol=None, xtol=None, gtol=1e-15)
    assert res.status == 0 and "maximum number of function evaluations" in res.message
    np.testing.assert_allclose(res.x, rate(y).x, rtol=1e-7)
    np.testing.assert_allclose(
        fgrad.grad(lambda y: rate(y, ftol=None, xtol=None, gtol=1e-15).x[0])(y),
        fgrad.grad(lambda y: rate(y).x[0])(y), rtol=1e-6)

    def fit(y, **tols):                # SciPy's curve_fit raises here; fgrad checks
        return fo.curve_fit(lambda x, a, b: a * fnp.exp(b * x), t, y, p0=[1.0, 0.0],
                            **tols)
    popt, _, info, mesg, ier = fit(y, ftol=1e-300, xtol=1e-300, full_output=True)
    assert ier == 7 and mesg.startswith("xtol=0.000000 is too small") and info["nfev"] > 0
    np.testing.assert_allclose(popt, fit(y)[0], rtol=1e-8)
    np.testing.assert_allclose(fgrad.jacrev(lambda y: fit(y, ftol=1e-300, xtol=1e-300)[0])(y),
                               fgrad.jacrev(lambda y: fit(y)[0])(y), rtol=1e-6, atol=1e-9)


def test_precision_limited_ends_elsewhere_still_raise_and_say_why():
    with pytest.raises(ConvergenceError, match=r"minimize\(method='bfgs'\) did not converge: "
                       r"Desired error not necessarily achieved due to precision loss. Its "
                       r"result is not a solution \(its gradient is 1.0e\+00, over "
                       r"sqrt\(machine epsilon\) \(1 \+ \|f\|\) = 1.6e-08\)"):
        fo.minimize(lambda x: fnp.sum(fnp.abs(x - 1.0)), np.array([0.3, 0.2]), method="BFGS")
    def trig(x):                       # hybr stalls at a local minimum of |fun|
        return fnp.stack([fnp.sin(x[0]) + x[1] ** 3 - 0.3, fnp.exp(x[0] * x[1]) - 2.0])
    with pytest.raises(ConvergenceError, match=r"root\(method='hybr'\) did not converge: The "
                       r"iteration is not making good progress.* Its result is not a solution "
                       r"\(the Newton step from it is .* times 1 \+ \|x\|, over sqrt\(machine "
                       r"epsilon\) = 1.5e-08\).*\(options=\{'maxfev': ...\}\)"):
        fo.root(trig, np.array([0.5, 0.5]), tol=1e-15)
    with pytest.raises(ConvergenceError, match=r"secant.* \(the Newton step from it is .*"
                       r"raise the iteration limit \(maxiter=...\)"):
        fo.root_scalar(lambda x: x ** 2 + 1.0, x0=0.5, x1=0.6, method="secant")
    with pytest.raises(ConvergenceError, match=r"fixed_point did not converge: Failed to "
                       r"converge after 500 iterations.* \(func\(x\) - x is not zero there, "
                       r"and its Jacobian is singular\)"):
        fo.fixed_point(lambda x: x + 1.0, 0.5, xtol=0.0, method="iteration")
    t = np.linspace(0, 1, 5)
    with pytest.raises(ConvergenceError, match=r"least_squares\(method='trf'\) did not "
                       r"converge: The maximum number of function evaluations is exceeded.*"
                       r"the gradient of the cost is .* times \|column of J\| \|residuals\|"
                       r".*\(max_nfev=...\)"):
        fo.least_squares(lambda k: fnp.exp(-k[0] * t) - np.exp(-2.0 * t), np.array([1.0]),
                         max_nfev=2)
    # SciPy's curve_fit raises a RuntimeError of its own: it comes out as fgrad's
    with pytest.raises(ConvergenceError, match=r"curve_fit did not converge: Number of calls "
                       r"to function has reached maxfev = 2.*\(maxfev=...\)"):
        fo.curve_fit(lambda x, a, b: a * fnp.exp(b * x), t, 2 * np.exp(-t), p0=[1.0, 0.0],
                     maxfev=2)


def test_a_degenerate_optimum_refuses_a_derivative():
    def argmin(theta):             # flat along x0 = x1: the minimiser is not unique
        return fo.minimize(lambda x, t: (x[0] + x[1] - t) ** 2, np.zeros(2), args=(theta,),
                           method="BFGS").x
    with pytest.raises(ImplicitSolveError, match="singular or ill-conditioned"):
        fgrad.grad(lambda t: fnp.sum(argmin(t)))(1.0)


def test_a_multiple_root_refuses_a_derivative():
    def r(a):                      # x^3 = a at a = 0: df/dx vanishes at the root
        return fo.root_scalar(lambda x, a: x ** 3 - a, args=(a,), x0=0.0,
                              method="newton").root
    with pytest.raises(ImplicitSolveError, match="derivative at the solution"):
        fgrad.grad(r)(0.0)


def test_conjugate_gradients_at_a_saddle_point_report_a_breakdown():
    def stationary(a, implicit_solve):   # BFGS stops at once: the gradient is zero
        f = lambda x, a: (x[0] - a) ** 2 - (x[1] - a) ** 2
        return fo.minimize(f, np.ones(2), args=(a,), method="BFGS",
                           implicit_solve=implicit_solve).x
    with pytest.raises(ImplicitSolveError, match="broke down"):
        fgrad.grad(lambda a: fnp.sum(stationary(a, "krylov")))(1.0)
    # a dense solve has no trouble with an indefinite matrix: x = (a, a)
    np.testing.assert_allclose(fgrad.jacrev(lambda a: stationary(a, "dense"))(1.0), [1, 1])


# -- the SciPy numerics are never differentiated ----------------------------------------

def test_plain_calls_return_scipys_numbers_without_staging():
    res = fo.minimize(lambda x: fnp.sum((x - 1.0) ** 2), np.zeros(3))
    assert isinstance(res.x, np.ndarray) and np.allclose(res.x, 1.0)
    assert res.success and "Optimization terminated" in res.message
    ref = scipy_optimize.minimize(lambda x: np.sum((x - 1.0) ** 2), np.zeros(3))
    assert res.nit == ref.nit


# -- JAX, where it has the same computation ----------------------------------------------

@pytest.mark.slow
def test_ridge_and_system_derivatives_match_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def jax_validation(lam):
        w = jnp.linalg.solve(X.T @ X + lam * jnp.eye(4), X.T @ Y)
        return jnp.mean((X_VAL @ w - Y_VAL) ** 2)
    np.testing.assert_allclose(fgrad.grad(validation)(0.7), jax.grad(jax_validation)(0.7),
                               rtol=1e-7)

    def jax_root(p):
        def F(x):
            return jnp.stack([x[0] ** 2 + x[1] - p[0], x[0] + jnp.exp(x[1]) - p[1],
                              x[2] ** 3 + x[0] - p[2]])

        def newton(F, x):
            for _ in range(30):
                x = x - jnp.linalg.solve(jax.jacfwd(F)(x), F(x))
            return x
        return jax.lax.custom_root(F, jnp.array([1.0, 0.0, 1.0]), newton,
                                   lambda g, y: jnp.linalg.solve(jax.jacfwd(g)(y), y))
    p = np.array([2.0, 2.5, 1.5])
    np.testing.assert_allclose(fgrad.jacrev(system_root)(p), jax.jacrev(jax_root)(p),
                               rtol=1e-7)


# -- what SciPy is given --------------------------------------------------------------

@pytest.mark.parametrize("method", ["Nelder-Mead", "Powell"])
def test_gradient_free_methods_pass_through(method):
    def argmin(c):
        return fo.minimize(lambda x, c: fnp.sum((x - c) ** 2 * (1 + x ** 2)), np.zeros(2),
                           args=(c,), method=method,
                           options={"xatol": 1e-12, "fatol": 1e-14} if method ==
                           "Nelder-Mead" else {"xtol": 1e-12, "ftol": 1e-14}).x
    c = np.array([0.5, -1.0])
    np.testing.assert_allclose(argmin(c), c, atol=1e-6)
    np.testing.assert_allclose(fgrad.jacrev(argmin)(c), np.eye(2), atol=1e-5)


def test_user_jac_and_hess_are_given_to_scipy_and_the_derivative_is_fgrads():
    calls = {"jac": 0, "hess": 0}

    def f(x, a):
        return fnp.sum((x - a) ** 2) + fnp.sum(x ** 4)

    def jac(x, a):
        calls["jac"] += 1
        return 2 * (x - a) + 4 * x ** 3

    def hess(x, a):
        calls["hess"] += 1
        return np.diag(2 + 12 * x ** 2)

    def argmin(a):
        return fo.minimize(f, np.zeros(2), args=(a,), method="Newton-CG", jac=jac,
                           hess=hess, options={"xtol": 1e-12}).x
    a = np.array([1.0, 0.5])
    g = fgrad.jacrev(argmin)(a)
    assert calls["jac"] > 0 and calls["hess"] > 0
    x = argmin(a)
    np.testing.assert_allclose(g, np.diag(2 / (2 + 12 * x ** 2)), rtol=1e-8)

    def value_and_gradient(x, a):         # jac=True: fun returns both
        return f(x, a), jac(x, a)
    x2 = fo.minimize(value_and_gradient, np.zeros(2), args=(a,), jac=True, tol=1e-12).x
    np.testing.assert_allclose(x2, x, rtol=1e-6)


def test_value_dependent_python_control_flow_is_explained_under_a_transformation():
    def f(x, a):
        if fnp.sum(x) > 0:                    # fine outside transformations
            return fnp.sum((x - a) ** 2)
        return fnp.sum((x - a) ** 2) + 1.0
    np.testing.assert_allclose(fo.minimize(f, np.zeros(2), args=(1.0,)).x, 1.0, atol=1e-6)
    with pytest.raises(fgrad.errors.ConcretizationError, match="fgrad.numpy.where"):
        fgrad.grad(lambda a: fnp.sum(fo.minimize(f, np.zeros(2), args=(a,)).x))(1.0)
