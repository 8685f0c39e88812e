"""Loops under jit: programs whose time is spent stepping a ``scan`` or ``while_loop``.

  hmc          Hamiltonian Monte Carlo: HMC_STEPS steps (in a scan over split keys),
               each of 10 leapfrog steps (a fori_loop), each a grad of the potential
  rwm-vmap8    random-walk Metropolis, 2,000 steps in a scan, vmapped over 8 chains
  cg-while     conjugate gradients, 200 iterations in a while_loop inside
               custom_linear_solve: the loss and its gradient in the matrix's diagonal
  rnn-scan     value_and_grad of a 50-step tanh RNN in a scan (hidden 32, batch 8)
  lstm         GradBench's lstm objective (benchmarks/gradbench/evals/lstm.py) and
               its gradient, 2 layers of 14 characters over LSTM_CHARS characters

Smaller than the issue's sizes where the per-iteration Python of fgrad's tiers without
the whole program would make a row take minutes: HMC_STEPS = 200 (not 2,000),
LSTM_CHARS = 100 (ADBench's is 1,024). The floors are NumPy written by hand (the
lstm row's the objective alone, a forward pass). hmc and rwm-vmap8 draw from each
library's own generator and lstm's floor returns the value alone, so these rows'
results are not compared with their floors (the table says "unchecked" and why).
Each fgrad row is timed as jit runs it: its loops lowered into the compiled
program by default (docs/jit.md; ``FGRAD_JIT_PROGRAM=0`` turns that off).
"""

from __future__ import annotations

import numpy as np

from .bench_engine import RNG_SEED, _jax_blocking
from .bench_jit import (RNN_BATCH, RNN_HIDDEN, RNN_INPUT, RNN_STEPS, _compiled_calls,
                        jit_rnn_workload, rnn_loss_function, rnn_scan_loss_function)
from .gradbench.evals.lstm import make_loss as lstm_loss
from .harness import Workload

# --- HMC --------------------------------------------------------------------------------

HMC_STEPS, HMC_LEAPFROG, HMC_DIM, HMC_STEP_SIZE = 200, 10, 10, 0.1
_PRECISION = np.linspace(0.5, 2.0, HMC_DIM)


def _potential(xp, q):
    # a Gaussian of diagonal precision with a quartic tail
    return 0.5 * xp.sum(_PRECISION * q * q) + 0.01 * xp.sum(q ** 4)


def _potential_grad(q):
    return _PRECISION * q + 0.04 * q ** 3


def hmc_function(p):
    """``keys, q0 -> samples``: HMC over ``keys`` (one per step)."""
    xp, lax, random = p.np, p.module.lax, p.module.random
    grad_u = p.module.grad(lambda q: _potential(xp, q))

    def leapfrog(_, state):
        q, mom = state
        mom = mom - 0.5 * HMC_STEP_SIZE * grad_u(q)
        q = q + HMC_STEP_SIZE * mom
        return q, mom - 0.5 * HMC_STEP_SIZE * grad_u(q)

    def step(q, key):
        k1, k2 = random.split(key)
        mom = random.normal(k1, (HMC_DIM,))
        q1, mom1 = lax.fori_loop(0, HMC_LEAPFROG, leapfrog, (q, mom))
        h0 = _potential(xp, q) + 0.5 * xp.sum(mom * mom)
        h1 = _potential(xp, q1) + 0.5 * xp.sum(mom1 * mom1)
        accept = xp.log(random.uniform(k2)) < h0 - h1
        q = xp.where(accept, q1, q)
        return q, q

    def run(keys, q0):
        return lax.scan(step, q0, keys)[1]
    return run


def hmc_workload() -> Workload:
    q0 = np.ones(HMC_DIM)
    rng = np.random.default_rng(RNG_SEED)

    def floor():
        q, out = q0, np.empty((HMC_STEPS, HMC_DIM))
        for t in range(HMC_STEPS):
            mom = rng.standard_normal(HMC_DIM)
            q1, m1 = q, mom
            for _ in range(HMC_LEAPFROG):
                m1 = m1 - 0.5 * HMC_STEP_SIZE * _potential_grad(q1)
                q1 = q1 + HMC_STEP_SIZE * m1
                m1 = m1 - 0.5 * HMC_STEP_SIZE * _potential_grad(q1)
            h0 = _potential(np, q) + 0.5 * np.sum(mom * mom)
            h1 = _potential(np, q1) + 0.5 * np.sum(m1 * m1)
            if np.log(rng.uniform()) < h0 - h1:
                q = q1
            out[t] = q
        return out

    def fgrad_(p, **options):
        keys = p.module.random.split(p.module.random.key(0), HMC_STEPS)
        return _compiled_calls(p.module.jit(hmc_function(p), **options), keys, q0)

    def jax_(p):
        keys = p.module.random.split(p.module.random.PRNGKey(0), HMC_STEPS)
        f, qj = p.module.jit(hmc_function(p)), p.np.asarray(q0)
        return _jax_blocking(p.module, lambda: f(keys, qj))

    return Workload(
        "hmc", f"HMC, {HMC_STEPS} steps of {HMC_LEAPFROG} leapfrog steps (each a grad), "
        f"dimension {HMC_DIM}, a scan over split keys", floor, {"fgrad": fgrad_, "jax": jax_},
        unchecked="own random draws")


# --- random-walk Metropolis, vmapped over chains -------------------------------------------

RWM_STEPS, RWM_CHAINS, RWM_DIM = 2000, 8, 4


def _log_density(xp, x):
    return -0.5 * xp.sum(x * x * _PRECISION[:RWM_DIM]) - 0.1 * xp.sum(x ** 4)


def rwm_function(p):
    """``keys (chains, steps), x0 (chains, dim) -> final states``, vmapped."""
    xp, lax, random = p.np, p.module.lax, p.module.random

    def chain(keys, x0):
        def step(x, key):
            k1, k2 = random.split(key)
            y = x + 0.5 * random.normal(k1, (RWM_DIM,))
            accept = xp.log(random.uniform(k2)) < _log_density(xp, y) - _log_density(xp, x)
            return xp.where(accept, y, x), None
        return lax.scan(step, x0, keys)[0]
    return p.module.vmap(chain)


def rwm_workload() -> Workload:
    x0 = np.zeros((RWM_CHAINS, RWM_DIM))
    rng = np.random.default_rng(RNG_SEED)

    def floor():
        x = x0
        for _ in range(RWM_STEPS):
            y = x + 0.5 * rng.standard_normal(x.shape)
            logp = (-0.5 * np.sum(y * y * _PRECISION[:RWM_DIM], axis=1)
                    - 0.1 * np.sum(y ** 4, axis=1))
            logq = (-0.5 * np.sum(x * x * _PRECISION[:RWM_DIM], axis=1)
                    - 0.1 * np.sum(x ** 4, axis=1))
            accept = np.log(rng.uniform(size=RWM_CHAINS)) < logp - logq
            x = np.where(accept[:, None], y, x)
        return x

    def keys(random, key):
        return random.split(key, RWM_CHAINS * RWM_STEPS).reshape(
            (RWM_CHAINS, RWM_STEPS) + random.split(key, 1).shape[1:])

    def fgrad_(p, **options):
        ks = keys(p.module.random, p.module.random.key(0))
        return _compiled_calls(p.module.jit(rwm_function(p), **options), ks, x0)

    def jax_(p):
        ks = keys(p.module.random, p.module.random.PRNGKey(0))
        f, xj = p.module.jit(rwm_function(p)), p.np.asarray(x0)
        return _jax_blocking(p.module, lambda: f(ks, xj))

    return Workload(
        "rwm-vmap8", f"random-walk Metropolis, {RWM_STEPS} steps in a scan, vmap over "
        f"{RWM_CHAINS} chains of dimension {RWM_DIM}", floor, {"fgrad": fgrad_, "jax": jax_},
        unchecked="own random draws")


# --- CG in a while_loop inside custom_linear_solve ------------------------------------------

CG_SIZE, CG_ITERATIONS = 64, 200


def _cg_problem():
    rng = np.random.default_rng(RNG_SEED)
    m = rng.standard_normal((CG_SIZE, CG_SIZE)) / np.sqrt(CG_SIZE)
    return m @ m.T + np.eye(CG_SIZE), rng.standard_normal(CG_SIZE), np.full(CG_SIZE, 0.5)


def cg_function(p):
    """``theta -> (loss, its gradient)``: loss = sum(x**2), (A + diag(theta)) x = b,
    x by CG_ITERATIONS of CG in a while_loop, differentiated by custom_linear_solve."""
    xp, lax = p.np, p.module.lax
    a, b, _ = _cg_problem()

    def cg(matvec, rhs):
        def body(state):
            i, x, r, d, rr = state
            ad = matvec(d)
            alpha = rr / xp.sum(d * ad)
            x, r = x + alpha * d, r - alpha * ad
            rr_new = xp.sum(r * r)
            return i + 1, x, r, r + (rr_new / rr) * d, rr_new
        state = (0, rhs * 0.0, rhs, rhs, xp.sum(rhs * rhs))
        return lax.while_loop(lambda s: s[0] < CG_ITERATIONS, body, state)[1]

    def loss(theta):
        x = lax.custom_linear_solve(lambda v: a @ v + theta * v, b, cg, symmetric=True)
        return xp.sum(x * x)
    return p.module.value_and_grad(loss)


def cg_workload() -> Workload:
    a, b, theta = _cg_problem()

    def cg(m, rhs):
        x, r = np.zeros_like(rhs), rhs.copy()
        d, rr = r.copy(), r @ r
        for _ in range(CG_ITERATIONS):
            ad = m @ d
            alpha = rr / (d @ ad)
            x, r = x + alpha * d, r - alpha * ad
            rr_new = r @ r
            d, rr = r + (rr_new / rr) * d, rr_new
        return x

    def floor():
        m = a + np.diag(theta)
        x = cg(m, b)
        lam = cg(m, 2.0 * x)            # the adjoint solve
        return x @ x, -lam * x

    def fgrad_(p, **options):
        return _compiled_calls(p.module.jit(cg_function(p), **options), theta)

    def jax_(p):
        f, tj = p.module.jit(cg_function(p)), p.np.asarray(theta)
        return _jax_blocking(p.module, lambda: f(tj))

    return Workload(
        "cg-while", f"value_and_grad through custom_linear_solve of {CG_ITERATIONS} CG "
        f"iterations in a while_loop, n = {CG_SIZE}", floor, {"fgrad": fgrad_, "jax": jax_})


# --- value_and_grad of an RNN in a scan ------------------------------------------------------

def rnn_scan_workload() -> Workload:
    gradient = jit_rnn_workload().floor
    rng = np.random.default_rng(RNG_SEED)
    params = (rng.standard_normal((RNN_HIDDEN, RNN_HIDDEN)) / np.sqrt(RNN_HIDDEN),
              rng.standard_normal((RNN_INPUT, RNN_HIDDEN)) / np.sqrt(RNN_INPUT))
    xs = rng.standard_normal((RNN_STEPS, RNN_BATCH, RNN_INPUT))

    value = rnn_loss_function(np)

    def floor():
        return value(params, xs), gradient()

    def fgrad_(p, **options):
        g = p.module.jit(p.module.value_and_grad(rnn_scan_loss_function(p)), **options)
        return _compiled_calls(g, params, xs)

    def jax_(p):
        g = p.module.jit(p.module.value_and_grad(rnn_scan_loss_function(p)))
        pj, xj = tuple(p.np.asarray(a) for a in params), p.np.asarray(xs)
        return _jax_blocking(p.module, lambda: g(pj, xj))

    return Workload(
        "rnn-scan", f"value_and_grad of a {RNN_STEPS}-step tanh RNN in lax.scan, hidden "
        f"{RNN_HIDDEN}, batch {RNN_BATCH}", floor,
        {"fgrad": fgrad_, "jax": jax_})


# --- GradBench's LSTM ---------------------------------------------------------------------

LSTM_LAYERS, LSTM_WIDTH, LSTM_CHARS = 2, 14, 100


def lstm_loss_function(p):
    """GradBench's lstm objective (benchmarks/gradbench/evals/lstm.py) on
    ``p``'s NumPy and lax, so that JAX runs the same code."""
    return lstm_loss(p.np, p.module.lax)


def _lstm_problem():
    rng = np.random.default_rng(RNG_SEED)
    main = rng.uniform(-1, 1, (LSTM_LAYERS * 2 * 4, LSTM_WIDTH))
    extra = rng.uniform(-1, 1, (3, LSTM_WIDTH))
    state = rng.uniform(-1, 1, (2 * LSTM_LAYERS, LSTM_WIDTH))
    sequence = np.eye(LSTM_WIDTH)[rng.integers(0, LSTM_WIDTH, LSTM_CHARS)]
    return main, extra, state, sequence


def lstm_workload() -> Workload:
    args = _lstm_problem()

    class _PythonLax:       # the floor's scan: a Python loop
        @staticmethod
        def scan(f, carry, xs):
            ys = []
            for pair in zip(*xs):
                carry, y = f(carry, pair)
                ys.append(y)
            return carry, np.stack(ys)

    forward = lstm_loss(np, _PythonLax)

    def floor():
        return forward(*args)

    def fgrad_(p, **options):
        g = p.module.jit(p.module.value_and_grad(lstm_loss_function(p), (0, 1)), **options)
        return _compiled_calls(g, *args)

    def jax_(p):
        g = p.module.jit(p.module.value_and_grad(lstm_loss_function(p), (0, 1)))
        aj = tuple(p.np.asarray(a) for a in args)
        return _jax_blocking(p.module, lambda: g(*aj))

    return Workload(
        "lstm", f"value_and_grad of GradBench's lstm objective, {LSTM_LAYERS} layers of "
        f"{LSTM_WIDTH} over {LSTM_CHARS} characters (floor: the objective alone)", floor,
        {"fgrad": fgrad_, "jax": jax_}, unchecked="the floor has no gradient")


WORKLOADS = {
    "hmc": hmc_workload,
    "rwm-vmap8": rwm_workload,
    "cg-while": cg_workload,
    "rnn-scan": rnn_scan_workload,
    "lstm": lstm_workload,
}
