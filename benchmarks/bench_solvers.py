"""Solvers: the derivative of a solution by the implicit function theorem, against
the solve itself and against differentiating an unrolled solver.

The problem is L2-regularised logistic regression (400 examples, 20 features):
``w*(lam) = argmin sum(log(1 + exp(z)) - y z) + lam/2 |w|^2`` with ``z = X w``,
and the quantity differentiated is the validation loss at ``w*(lam)``.

Workloads:
  argmin-solve the solve alone: the floor is SciPy's L-BFGS-B with a hand-written
               NumPy gradient; ``fgrad`` is ``fgrad.scipy.optimize.minimize``
               (same method and tolerance, fgrad supplying the gradient)
  argmin-grad  d(validation loss)/d(lam). The floor is SciPy's solve plus the
               implicit derivative by hand (one Hessian solve). ``fgrad`` is
               ``fgrad.grad`` through ``fgrad.scipy.optimize.minimize``: the
               issue's goal is this row within 2x of ``argmin-solve``'s ``fgrad`` row.
               ``fgrad-unrolled`` differentiates 500 iterations of gradient
               descent written with ``fgrad.numpy`` (it stores every iterate for
               the reverse sweep: see its peak memory).
"""

from __future__ import annotations

import importlib

import numpy as np

from .harness import Workload

RNG_SEED = 0
N_EXAMPLES, N_FEATURES = 400, 20
UNROLLED_STEPS = 500
LAM = 2.0


def _data():
    rng = np.random.default_rng(RNG_SEED)
    X = rng.standard_normal((N_EXAMPLES, N_FEATURES)) / np.sqrt(N_FEATURES)
    w_true = rng.standard_normal(N_FEATURES)
    y = (X @ w_true + 0.3 * rng.standard_normal(N_EXAMPLES) > 0) * 1.0
    Xv = rng.standard_normal((100, N_FEATURES)) / np.sqrt(N_FEATURES)
    yv = (Xv @ w_true > 0) * 1.0
    return X, y, Xv, yv


def _numpy_solve(X, y, lam):
    import scipy.optimize

    def f(w):
        z = X @ w
        s = 1 / (1 + np.exp(-z))
        value = np.sum(np.logaddexp(0, z) - y * z) + 0.5 * lam * w @ w
        return value, X.T @ (s - y) + lam * w
    return scipy.optimize.minimize(f, np.zeros(X.shape[1]), jac=True, method="L-BFGS-B",
                                   options={"gtol": 1e-10, "ftol": 1e-14}).x


def _numpy_validation_grad(X, y, Xv, yv, lam):
    w = _numpy_solve(X, y, lam)
    s = 1 / (1 + np.exp(-X @ w))
    H = X.T @ (X * (s * (1 - s))[:, None]) + lam * np.eye(X.shape[1])
    dw = -np.linalg.solve(H, w)                  # d w*/d lam: H dw = -d(grad)/d lam
    sv = 1 / (1 + np.exp(-Xv @ w))
    return (Xv.T @ (sv - yv)) @ dw / len(yv)


def _fgrad_problem(p):
    fnp = p.np
    X, y, Xv, yv = _data()
    # fgrad.scipy is not imported by `import fgrad`
    minimize = importlib.import_module("fgrad.scipy.optimize").minimize

    def loss(w, lam):
        z = X @ w
        return fnp.sum(fnp.logaddexp(0.0, z) - y * z) + 0.5 * lam * fnp.sum(w ** 2)

    def solve(lam):
        return minimize(loss, np.zeros(N_FEATURES), args=(lam,), method="L-BFGS-B",
                        options={"gtol": 1e-10, "ftol": 1e-14}).x

    def validation(w):
        z = Xv @ w
        return fnp.mean(fnp.logaddexp(0.0, z) - yv * z)
    return solve, validation, loss


def solve_fwd_workload() -> Workload:
    X, y, _, _ = _data()

    def fgrad_(p):
        solve, _, _ = _fgrad_problem(p)
        return lambda: solve(LAM)

    return Workload(
        "argmin-solve",
        f"L-BFGS-B solve of L2 logistic regression ({N_EXAMPLES}x{N_FEATURES}); floor: "
        "SciPy with a NumPy gradient",
        lambda: _numpy_solve(X, y, LAM), {"fgrad": fgrad_})


def solve_grad_workload() -> Workload:
    X, y, Xv, yv = _data()

    def fgrad_(p):
        solve, validation, _ = _fgrad_problem(p)
        g = p.module.grad(lambda lam: validation(solve(lam)))
        return lambda: g(LAM)

    def unrolled(p):
        _, validation, loss = _fgrad_problem(p)
        fgrad = p.module
        step = 1.0 / (0.25 * np.linalg.norm(X, 2) ** 2 + LAM)   # 1 / Lipschitz constant

        def solve(lam):
            w = fgrad.numpy.zeros(N_FEATURES)
            grad_w = fgrad.grad(loss)
            for _ in range(UNROLLED_STEPS):
                w = w - step * grad_w(w, lam)
            return w
        g = fgrad.grad(lambda lam: validation(solve(lam)))
        return lambda: g(LAM)

    return Workload(
        "argmin-grad",
        f"d(validation loss)/d(lam) at the solution: implicit (fgrad) vs "
        f"{UNROLLED_STEPS} unrolled gradient-descent steps (fgrad-unrolled)",
        lambda: _numpy_validation_grad(X, y, Xv, yv, LAM),
        {"fgrad": fgrad_, "fgrad-unrolled": unrolled},
        input_nbytes=X.nbytes)


WORKLOADS = {
    "argmin-solve": solve_fwd_workload,
    "argmin-grad": solve_grad_workload,
}
