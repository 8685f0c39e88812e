"""vmap workloads: per-example gradients and batched Jacobians.

Workloads:
  pex-grad      per-example gradients of logistic regression (w of 100, batch 256):
                fgrad.vmap(fgrad.grad), torch.func.vmap(torch.func.grad), eager
                jax.vmap(jax.grad)
  pex-jit       the same gradients staged and compiled: fgrad.jit(fgrad.vmap(fgrad.grad))
                and jax.jit(jax.vmap(jax.grad))
  pex-loop      the same gradients from a Python loop of fgrad.grad (one call per
                example): what vmap replaces
  jacrev        the 200x200 Jacobian of x -> tanh(A x) by reverse mode
  jacrev-vjp    one fgrad.vjp call of the same map applied to 200 inputs at once,
                pulled back with a (200, 200) cotangent batch: the one batched
                sweep jacrev should cost about as much as

The floor of pex-* is the hand-written vectorised gradient; the floor of the
jacrev workloads is the hand-written batched pullback ``(I * (1 - t**2)) @ A``.
"""

from __future__ import annotations

import numpy as np

from .harness import Workload

RNG_SEED = 0
FEATURES, BATCH = 100, 256
JAC_N = 200


def _jax_blocking(jax, fn):
    def call():
        return jax.block_until_ready(fn())
    return call


# --- per-example gradients of logistic regression ------------------------------------

def _logistic_loss(xp):
    """One example's loss: softplus(z) - y z with z = x . w (labels in {0, 1})."""
    def loss(w, x, y):
        z = x @ w
        return xp.log1p(xp.exp(z)) - y * z
    return loss


def _pex_data():
    rng = np.random.default_rng(RNG_SEED)
    w = rng.standard_normal(FEATURES) * 0.1
    x = rng.standard_normal((BATCH, FEATURES))
    y = (rng.random(BATCH) > 0.5).astype(np.float64)
    return w, x, y


def _pex_floor(w, x, y):
    def floor():
        z = x @ w
        s = 1.0 / (1.0 + np.exp(-z))
        return (s - y)[:, None] * x
    return floor


def pex_grad_workload() -> Workload:
    w, x, y = _pex_data()

    def fgrad_(p):
        f = p.module.vmap(p.module.grad(_logistic_loss(p.np)), in_axes=(None, 0, 0))
        return lambda: f(w, x, y)

    def jax_(p):
        f = p.module.vmap(p.module.grad(_logistic_loss(p.np)), in_axes=(None, 0, 0))
        wj, xj, yj = (p.np.asarray(a) for a in (w, x, y))
        return _jax_blocking(p.module, lambda: f(wj, xj, yj))

    def torch_(p):
        torch = p.module
        import torch.func
        f = torch.func.vmap(torch.func.grad(_logistic_loss(torch)), in_dims=(None, 0, 0))
        wt, xt, yt = (torch.from_numpy(a) for a in (w, x, y))
        return lambda: f(wt, xt, yt)

    return Workload(
        "pex-grad",
        f"per-example gradients, logistic regression (w of {FEATURES}, batch {BATCH}), "
        "vmap(grad)",
        _pex_floor(w, x, y), {"fgrad": fgrad_, "jax": jax_, "torch": torch_})


def pex_jit_workload() -> Workload:
    w, x, y = _pex_data()

    def fgrad_(p):
        f = p.module.jit(p.module.vmap(p.module.grad(_logistic_loss(p.np)),
                                       in_axes=(None, 0, 0)))
        return lambda: f(w, x, y)

    def jax_(p):
        f = p.module.jit(p.module.vmap(p.module.grad(_logistic_loss(p.np)),
                                       in_axes=(None, 0, 0)))
        wj, xj, yj = (p.np.asarray(a) for a in (w, x, y))
        return _jax_blocking(p.module, lambda: f(wj, xj, yj))

    return Workload(
        "pex-jit",
        f"per-example gradients, logistic regression (w of {FEATURES}, batch {BATCH}), "
        "jit(vmap(grad))",
        _pex_floor(w, x, y), {"fgrad": fgrad_, "jax": jax_})


def pex_loop_workload() -> Workload:
    w, x, y = _pex_data()

    def fgrad_(p):
        g = p.module.grad(_logistic_loss(p.np))
        return lambda: np.stack([g(w, xi, yi) for xi, yi in zip(x, y)])

    return Workload(
        "pex-loop",
        f"the same per-example gradients from a Python loop of fgrad.grad ({BATCH} calls)",
        _pex_floor(w, x, y), {"fgrad": fgrad_})


# --- batched Jacobians -------------------------------------------------------------------

def _jac_data():
    rng = np.random.default_rng(RNG_SEED)
    a = rng.standard_normal((JAC_N, JAC_N)) / np.sqrt(JAC_N)
    x = rng.standard_normal(JAC_N)
    return a, x


def _jac_floor(a, x):
    def floor():
        t = np.tanh(a @ x)
        return (np.eye(JAC_N) * (1.0 - t * t)) @ a
    return floor


def jacrev_workload() -> Workload:
    a, x = _jac_data()

    def fgrad_(p):
        fnp = p.np
        jac = p.module.jacrev(lambda v: fnp.tanh(a @ v))
        return lambda: jac(x)

    def jax_(p):
        aj, xj = p.np.asarray(a), p.np.asarray(x)
        jac = p.module.jacrev(lambda v: p.np.tanh(aj @ v))
        return _jax_blocking(p.module, lambda: jac(xj))

    def torch_(p):
        torch = p.module
        import torch.func
        at, xt = torch.from_numpy(a), torch.from_numpy(x)
        jac = torch.func.jacrev(lambda v: torch.tanh(at @ v))
        return lambda: jac(xt)

    return Workload("jacrev", f"jacrev of x -> tanh(A x), R^{JAC_N} -> R^{JAC_N}",
                    _jac_floor(a, x), {"fgrad": fgrad_, "jax": jax_, "torch": torch_})


def jacrev_vjp_workload() -> Workload:
    a, x = _jac_data()

    def fgrad_(p):
        fgrad, fnp = p.module, p.np
        xs = np.broadcast_to(x, (JAC_N, JAC_N))        # the point, once per row
        eye = np.eye(JAC_N)

        def call():
            # one vjp of the map applied row-wise, pulled back with a cotangent batch;
            # reshaped like the Jacobian so the result is checked against the floor
            _, vjp_fn = fgrad.vjp(lambda v: fnp.tanh(v @ a.T), xs)
            return vjp_fn(eye)[0]
        return call

    return Workload(
        "jacrev-vjp",
        f"one fgrad.vjp call with a ({JAC_N}, {JAC_N}) cotangent batch (what jacrev "
        "should cost about as much as)",
        _jac_floor(a, x), {"fgrad": fgrad_})


WORKLOADS = {
    "pex-grad": pex_grad_workload,
    "pex-jit": pex_jit_workload,
    "pex-loop": pex_loop_workload,
    "jacrev": jacrev_workload,
    "jacrev-vjp": jacrev_vjp_workload,
}
