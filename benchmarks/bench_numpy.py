"""fgrad.numpy workloads: einsum and linalg gradients on real-sized arrays.

Here the arithmetic dominates, so the figures show what fgrad's choices of
contraction order and adjoint formulas cost against a careful person's NumPy.
Each library computes the loss value and the gradient of every operand (fgrad:
``value_and_grad``); the floor does the same by hand.

Workloads:
  einsum-grad   value and gradient of all four operands of
                sum(W * einsum('ij,jk,kl,lm->im', A, B, C, D)), dims 200; floor:
                the forward contraction and the four adjoint contractions, each a
                numpy.einsum(..., optimize=True)
  solve-grad    value and gradient of sum(W * solve(A, B)) over a batch of 64
                32x32 systems with 8 right-hand sides; floor: X = solve(A, B),
                gB = solve(A^T, W), gA = -gB X^T
"""

from __future__ import annotations

import numpy as np

from .bench_engine import _jax_blocking
from .harness import Workload

RNG_SEED = 0


def _torch_value_and_grad(torch, f, *inputs):
    """Loss and gradients in torch eager mode, both computed inside each call."""
    leaves = tuple(torch.from_numpy(a).requires_grad_(True) for a in inputs)

    def call():
        value = f(*leaves)
        return value.detach(), torch.autograd.grad(value, leaves)
    return call

# --- a. four-operand chain contraction -------------------------------------------------

EINSUM_DIM = 200
EINSUM_SUBSCRIPTS = "ij,jk,kl,lm->im"


def einsum_function(xp):
    def f(a, b, c, d, w):
        return xp.sum(w * xp.einsum(EINSUM_SUBSCRIPTS, a, b, c, d))
    return f


def einsum_workload() -> Workload:
    rng = np.random.default_rng(RNG_SEED)
    n = EINSUM_DIM
    ops = tuple(rng.standard_normal((n, n)) / np.sqrt(n) for _ in range(4))
    w = rng.standard_normal((n, n))

    def floor():
        a, b, c, d = ops
        value = np.sum(w * np.einsum(EINSUM_SUBSCRIPTS, a, b, c, d, optimize=True))
        grads = (np.einsum("im,jk,kl,lm->ij", w, b, c, d, optimize=True),
                 np.einsum("im,ij,kl,lm->jk", w, a, c, d, optimize=True),
                 np.einsum("im,ij,jk,lm->kl", w, a, b, d, optimize=True),
                 np.einsum("im,ij,jk,kl->lm", w, a, b, c, optimize=True))
        return value, grads

    def fgrad_(p):
        vg = p.module.value_and_grad(einsum_function(p.np), argnums=(0, 1, 2, 3))
        return lambda: vg(*ops, w)

    def jax_(p):
        vg = p.module.value_and_grad(einsum_function(p.np), argnums=(0, 1, 2, 3))
        args = tuple(p.np.asarray(x) for x in ops + (w,))
        return _jax_blocking(p.module, lambda: vg(*args))

    def torch_(p):
        torch = p.module
        f = einsum_function(torch)
        return _torch_value_and_grad(torch, lambda *xs: f(*xs, torch.from_numpy(w)),
                                     *ops)

    return Workload(
        "einsum-grad",
        f"value and grad of all 4 operands of sum(W * einsum('{EINSUM_SUBSCRIPTS}')), "
        f"dims {EINSUM_DIM}; floor: 5 numpy.einsum(optimize=True) calls (no autograd "
        "row: its einsum contracts all four operands at once, O(n^5), minutes a call)",
        floor, {"fgrad": fgrad_, "jax": jax_, "torch": torch_})


# --- b. batched solve ---------------------------------------------------------------------

SOLVE_BATCH, SOLVE_N, SOLVE_K = 64, 32, 8


def solve_function(xp, solve):
    def f(a, b, w):
        return xp.sum(w * solve(a, b))
    return f


def solve_workload() -> Workload:
    rng = np.random.default_rng(RNG_SEED)
    a = rng.standard_normal((SOLVE_BATCH, SOLVE_N, SOLVE_N)) + 4 * np.sqrt(SOLVE_N) * \
        np.eye(SOLVE_N)
    b = rng.standard_normal((SOLVE_BATCH, SOLVE_N, SOLVE_K))
    w = rng.standard_normal((SOLVE_BATCH, SOLVE_N, SOLVE_K))

    def floor():
        x = np.linalg.solve(a, b)
        value = np.sum(w * x)
        g_b = np.linalg.solve(np.swapaxes(a, -1, -2), w)
        return value, (-g_b @ np.swapaxes(x, -1, -2), g_b)

    def fgrad_(p):
        vg = p.module.value_and_grad(solve_function(p.np, p.np.linalg.solve),
                                     argnums=(0, 1))
        return lambda: vg(a, b, w)

    def autograd_(p):
        vg = p.module.value_and_grad(solve_function(p.np, p.np.linalg.solve),
                                     argnum=(0, 1))
        return lambda: vg(a, b, w)

    def jax_(p):
        vg = p.module.value_and_grad(solve_function(p.np, p.np.linalg.solve),
                                     argnums=(0, 1))
        args = tuple(p.np.asarray(x) for x in (a, b, w))
        return _jax_blocking(p.module, lambda: vg(*args))

    def torch_(p):
        torch = p.module
        f = solve_function(torch, torch.linalg.solve)
        wt = torch.from_numpy(w)
        return _torch_value_and_grad(torch, lambda a_, b_: f(a_, b_, wt), a, b)

    return Workload(
        "solve-grad",
        f"value and grad (A and B) of sum(W * solve(A, B)), A {SOLVE_BATCH}x{SOLVE_N}x"
        f"{SOLVE_N}, B {SOLVE_BATCH}x{SOLVE_N}x{SOLVE_K}; floor: hand-written adjoint",
        floor, {"fgrad": fgrad_, "autograd": autograd_, "jax": jax_, "torch": torch_})


#: name -> factory (discovered by benchmarks/run.py)
WORKLOADS = {
    "einsum-grad": einsum_workload,
    "solve-grad": solve_workload,
}
