"""jit workloads: what staging once and replaying compiled code buys.

The fgrad row is ``fgrad.jit(fgrad.grad(f))``, JAX's is ``jax.jit(jax.grad(f))``
(XLA fuses, which replaying NumPy calls cannot); autograd and torch run eagerly,
as there is nothing to jit. The floor is the same hand-written NumPy gradient as
in bench_engine, so these rows compare directly with the eager ``grad`` rows of
``chain-grad`` / ``mlp-grad`` / ``elementwise`` in the same table.

Workloads:
  jit-chain     jit(grad) of the 200-op elementwise chain on 16 elements
  jit-mlp8      jit(grad) of the MLP at batch 8 (overhead-dominated)
  jit-rnn       jit(grad) of a 50-step tanh RNN (hidden 32, batch 8)
  jit-elem      jit(grad) of the 10^6-element elementwise function: time, peak memory
  jit-compile   the first call of a jitted 1,000-equation program: staging and
                compiling (the floor is evaluating the same 1,000 NumPy calls once)
  jit-scan      jit(grad) of the same RNN written with lax.scan
  jit-sin       jit(sin) on 8 elements: what a cached call costs

The ``fgrad-unfused`` rows are ``jit(..., fuse=False)``: NumPy calls, one per
equation, as without llvmlite; the ``fgrad`` rows fuse elementwise groups into
LLVM kernels, and compile whole programs where they pay (docs/jit.md).
"""

from __future__ import annotations

import numpy as np

from .bench_engine import (RNG_SEED, _chain_floor_steps, _jax_blocking, _torch_grad,
                           chain_function, elementwise_function, mlp_loss_function,
                           CHAIN_OPS, CHAIN_SIZE, ELEMENTWISE_SIZE, MLP_SIZES, mlp_problem)
from .harness import Workload


def _jit_grad(p, f, **options):
    return p.module.jit(p.module.grad(f), **options)


def _compiled_calls(g, *args):
    """``lambda: g(*args)``, called once and its compiled code waited for:
    fgrad compiles in the background while the first calls run NumPy calls
    (docs/jit.md), and a row times compiled calls, as jax.jit's do."""
    g(*args)
    g.wait_compiled()
    return lambda: g(*args)


def _unfused(f):
    """The ``fgrad-unfused`` row: ``jit(..., fuse=False)``, one NumPy call per
    equation (what jit does without llvmlite), timed in the same run."""
    def builder(p):
        return f(p, fuse=False)
    return builder


# --- the 200-op chain ------------------------------------------------------------------

def jit_chain_workload() -> Workload:
    x = np.random.default_rng(RNG_SEED).standard_normal(CHAIN_SIZE)
    steps = _chain_floor_steps()

    def floor():
        v, derivs = x, []
        for step in steps:
            v, d = step(v)
            derivs.append(d)
        g = np.ones_like(x)
        for d in reversed(derivs):
            if d is not None:
                g = g * d
        return g

    def fgrad_(p, **options):
        g = _jit_grad(p, chain_function(p.np), **options)
        return _compiled_calls(g, x)

    def fgrad_eager(p):
        # the same gradient without jit, timed in the same run: the speed-up of jit
        g = p.module.grad(chain_function(p.np))
        return lambda: g(x)

    def autograd_(p):
        g = p.module.grad(chain_function(p.np))
        return lambda: g(x)

    def jax_(p):
        g = _jit_grad(p, chain_function(p.np))
        xj = p.np.asarray(x)
        return _jax_blocking(p.module, lambda: g(xj))

    def torch_(p):
        grad = _torch_grad(p.module, chain_function(p.module), x)
        return lambda: grad()[0]

    return Workload(
        "jit-chain",
        f"jit(grad) of the {CHAIN_OPS}-op elementwise chain on {CHAIN_SIZE} elements "
        "(autograd, torch: eager)",
        floor, {"fgrad": fgrad_, "fgrad-unfused": _unfused(fgrad_), "fgrad-eager": fgrad_eager,
                "autograd": autograd_, "jax": jax_, "torch": torch_})


# --- MLP at batch 8 -------------------------------------------------------------------

MLP8_BATCH = 8


def jit_mlp8_workload() -> Workload:
    params, x, onehot = mlp_problem(MLP8_BATCH)

    def floor():
        w1, b1, w2, b2 = params
        h = np.tanh(x @ w1 + b1)
        z = h @ w2 + b2
        e = np.exp(z - z.max(axis=1, keepdims=True))
        softmax = e / e.sum(axis=1, keepdims=True)
        dz = (softmax - onehot) / x.shape[0]
        dh = (dz @ w2.T) * (1.0 - h * h)
        return (x.T @ dh, dh.sum(axis=0), h.T @ dz, dz.sum(axis=0))

    def fgrad_(p, **options):
        g = _jit_grad(p, mlp_loss_function(p.np), **options)
        return _compiled_calls(g, params, x, onehot)

    def autograd_(p):
        g = p.module.grad(mlp_loss_function(p.np))
        return lambda: g(params, x, onehot)

    def jax_(p):
        g = _jit_grad(p, mlp_loss_function(p.np))
        pj = tuple(p.np.asarray(a) for a in params)
        xj, yj = p.np.asarray(x), p.np.asarray(onehot)
        return _jax_blocking(p.module, lambda: g(pj, xj, yj))

    def torch_(p):
        torch = p.module
        loss = mlp_loss_function(torch)
        xt, yt = torch.from_numpy(x), torch.from_numpy(onehot)
        return _torch_grad(torch, lambda *ps: loss(ps, xt, yt), *params)

    return Workload(
        "jit-mlp8",
        f"jit(grad) of the {'-'.join(map(str, MLP_SIZES))} MLP at batch {MLP8_BATCH}",
        floor, {"fgrad": fgrad_, "fgrad-unfused": _unfused(fgrad_), "autograd": autograd_,
                "jax": jax_, "torch": torch_},
        input_nbytes=sum(a.nbytes for a in params))


# --- 50-step RNN ------------------------------------------------------------------------

RNN_STEPS, RNN_HIDDEN, RNN_INPUT, RNN_BATCH = 50, 32, 16, 8


def rnn_loss_function(xp):
    """sum of the last hidden state of h <- tanh(h W + x_t U), h_0 = 0."""
    def loss(params, xs):
        w, u = params
        h = xs[0] @ u * 0.0
        for t in range(RNN_STEPS):
            h = xp.tanh(h @ w + xs[t] @ u)
        return xp.sum(h)
    return loss


def jit_rnn_workload() -> Workload:
    rng = np.random.default_rng(RNG_SEED)
    params = (rng.standard_normal((RNN_HIDDEN, RNN_HIDDEN)) / np.sqrt(RNN_HIDDEN),
              rng.standard_normal((RNN_INPUT, RNN_HIDDEN)) / np.sqrt(RNN_INPUT))
    xs = rng.standard_normal((RNN_STEPS, RNN_BATCH, RNN_INPUT))

    def floor():
        w, u = params
        hs = [np.zeros((RNN_BATCH, RNN_HIDDEN))]
        for t in range(RNN_STEPS):
            hs.append(np.tanh(hs[-1] @ w + xs[t] @ u))
        dw, du = np.zeros_like(w), np.zeros_like(u)
        dh = np.ones((RNN_BATCH, RNN_HIDDEN))
        for t in range(RNN_STEPS - 1, -1, -1):
            da = dh * (1.0 - hs[t + 1] * hs[t + 1])
            dw += hs[t].T @ da
            du += xs[t].T @ da
            dh = da @ w.T
        return dw, du

    def fgrad_(p, **options):
        g = _jit_grad(p, rnn_loss_function(p.np), **options)
        return _compiled_calls(g, params, xs)

    def autograd_(p):
        g = p.module.grad(rnn_loss_function(p.np))
        return lambda: g(params, xs)

    def jax_(p):
        g = _jit_grad(p, rnn_loss_function(p.np))
        pj, xj = tuple(p.np.asarray(a) for a in params), p.np.asarray(xs)
        return _jax_blocking(p.module, lambda: g(pj, xj))

    def torch_(p):
        torch = p.module
        loss = rnn_loss_function(torch)
        xt = torch.from_numpy(xs)
        return _torch_grad(torch, lambda *ps: loss(ps, xt), *params)

    return Workload(
        "jit-rnn",
        f"jit(grad) of a {RNN_STEPS}-step tanh RNN, hidden {RNN_HIDDEN}, batch {RNN_BATCH}",
        floor, {"fgrad": fgrad_, "fgrad-unfused": _unfused(fgrad_), "autograd": autograd_,
                "jax": jax_, "torch": torch_})


# --- the same RNN as a lax.scan under jit -----------------------------------------------

def rnn_scan_loss_function(p):
    """The RNN of `rnn_loss_function` as one ``lax.scan`` over the time steps."""
    xp, lax = p.np, p.module.lax

    def loss(params, xs):
        w, u = params

        def step(h, x_t):
            h = xp.tanh(h @ w + x_t @ u)
            return h, None
        h, _ = lax.scan(step, xs[0] @ u * 0.0, xs)
        return xp.sum(h)
    return loss


def jit_scan_workload() -> Workload:
    rnn = jit_rnn_workload()
    rng = np.random.default_rng(RNG_SEED)
    params = (rng.standard_normal((RNN_HIDDEN, RNN_HIDDEN)) / np.sqrt(RNN_HIDDEN),
              rng.standard_normal((RNN_INPUT, RNN_HIDDEN)) / np.sqrt(RNN_INPUT))
    xs = rng.standard_normal((RNN_STEPS, RNN_BATCH, RNN_INPUT))

    def fgrad_(p, **options):
        g = _jit_grad(p, rnn_scan_loss_function(p), **options)
        return _compiled_calls(g, params, xs)

    def jax_(p):
        g = _jit_grad(p, rnn_scan_loss_function(p))
        pj, xj = tuple(p.np.asarray(a) for a in params), p.np.asarray(xs)
        return _jax_blocking(p.module, lambda: g(pj, xj))

    return Workload(
        "jit-scan",
        f"jit(grad) of the {RNN_STEPS}-step RNN written with lax.scan (floor: jit-rnn's)",
        rnn.floor, {"fgrad": fgrad_, "fgrad-unfused": _unfused(fgrad_), "jax": jax_})


# --- jit(sin): the cost of a cached call ------------------------------------------------

SIN_SIZE = 8


def jit_sin_workload() -> Workload:
    x = np.random.default_rng(RNG_SEED).standard_normal(SIN_SIZE)

    def floor():
        return np.sin(x)

    def fgrad_(p, **options):
        f = p.module.jit(p.np.sin, **options)
        return _compiled_calls(f, x)

    def jax_(p):
        f, xj = p.module.jit(p.np.sin), p.np.asarray(x)
        return _jax_blocking(p.module, lambda: f(xj))

    return Workload(
        "jit-sin",
        f"jit(sin) on {SIN_SIZE} elements, a cached call (dispatch cost)",
        floor, {"fgrad": fgrad_, "jax": jax_})


# --- 10^6-element gradient: memory --------------------------------------------------------

def jit_elementwise_workload() -> Workload:
    x = np.random.default_rng(RNG_SEED).standard_normal(ELEMENTWISE_SIZE)

    def floor():
        e = np.exp(-(x * x) / 4.0)
        return (np.cos(x) - 0.5 * x * np.sin(x)) * e + 2.0 * x

    def fgrad_(p, **options):
        g = _jit_grad(p, elementwise_function(p.np), **options)
        return _compiled_calls(g, x)

    def fgrad_eager(p):
        # eager grad in the same run: jit's buffer reuse is measured against it
        g = p.module.grad(elementwise_function(p.np))
        return lambda: g(x)

    def autograd_(p):
        g = p.module.grad(elementwise_function(p.np))
        return lambda: g(x)

    def jax_(p):
        g = _jit_grad(p, elementwise_function(p.np))
        xj = p.np.asarray(x)
        return _jax_blocking(p.module, lambda: g(xj))

    def torch_(p):
        grad = _torch_grad(p.module, elementwise_function(p.module), x)
        return lambda: grad()[0]

    return Workload(
        "jit-elem",
        f"jit(grad) of sum(sin(x)*exp(-x*x/4) + x**2) on {ELEMENTWISE_SIZE:.0e} elements; "
        "memory = tracemalloc peak / x.nbytes",
        floor, {"fgrad": fgrad_, "fgrad-unfused": _unfused(fgrad_), "fgrad-eager": fgrad_eager,
                "autograd": autograd_, "jax": jax_, "torch": torch_},
        input_nbytes=x.nbytes)


# --- staging + compiling 1,000 equations ---------------------------------------------------

COMPILE_EQNS = 1000


def jit_compile_workload() -> Workload:
    x = np.random.default_rng(RNG_SEED).standard_normal(CHAIN_SIZE)
    cycle = (lambda xp, v: xp.sin(v), lambda xp, v: v * 1.01, lambda xp, v: v + 0.1,
             lambda xp, v: xp.tanh(v))

    def program(xp):
        def f(v):
            for i in range(COMPILE_EQNS):
                v = cycle[i % len(cycle)](xp, v)
            return v
        return f

    def floor():
        return program(np)(x)

    def fgrad_(p, **options):
        # a new jitted function per call: staged, optimised and compiled each
        # time; fused kernels come from the in-memory cache after the first
        # call (a cold process: benchmarks/compile_cost.py)
        fgrad, f = p.module, program(p.np)
        return lambda: fgrad.jit(lambda v: f(v), **options)(x)

    def jax_(p):
        jax, f, xj = p.module, program(p.np), p.np.asarray(x)
        # a new function per call: traced, lowered and compiled by XLA each time
        return _jax_blocking(jax, lambda: jax.jit(lambda v: f(v))(xj))

    return Workload(
        "jit-compile",
        f"jit of a {COMPILE_EQNS}-equation program, first call (stage, compile, run; "
        "floor: the 1,000 NumPy calls once)",
        floor, {"fgrad": fgrad_, "fgrad-unfused": _unfused(fgrad_), "jax": jax_})


WORKLOADS = {
    "jit-chain": jit_chain_workload,
    "jit-mlp8": jit_mlp8_workload,
    "jit-rnn": jit_rnn_workload,
    "jit-elem": jit_elementwise_workload,
    "jit-compile": jit_compile_workload,
    "jit-scan": jit_scan_workload,
    "jit-sin": jit_sin_workload,
}
