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
  jit-compile   staging + compiling a 1,000-equation graph (fgrad only; the floor
                is evaluating the same 1,000 NumPy calls once)
"""

from __future__ import annotations

import numpy as np

from .bench_engine import (RNG_SEED, _chain_floor_steps, _jax_blocking, _torch_grad,
                           chain_function, elementwise_function, mlp_loss_function,
                           CHAIN_OPS, CHAIN_SIZE, ELEMENTWISE_SIZE, MLP_SIZES)
from .harness import Workload
from fgrad.compiler.codegen import compile_graph


def _jit_grad(p, f):
    return p.module.jit(p.module.grad(f))


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

    def fgrad_(p):
        g = _jit_grad(p, chain_function(p.np))
        return lambda: g(x)

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
        floor, {"fgrad": fgrad_, "fgrad-eager": fgrad_eager, "autograd": autograd_,
                "jax": jax_, "torch": torch_})


# --- MLP at batch 8 -------------------------------------------------------------------

MLP8_BATCH = 8


def jit_mlp8_workload() -> Workload:
    rng = np.random.default_rng(RNG_SEED)
    n_in, n_hidden, n_out = MLP_SIZES
    params = (rng.standard_normal((n_in, n_hidden)) / np.sqrt(n_in),
              0.1 * rng.standard_normal(n_hidden),
              rng.standard_normal((n_hidden, n_out)) / np.sqrt(n_hidden),
              0.1 * rng.standard_normal(n_out))
    x = rng.standard_normal((MLP8_BATCH, n_in))
    onehot = np.eye(n_out)[rng.integers(0, n_out, MLP8_BATCH)]

    def floor():
        w1, b1, w2, b2 = params
        h = np.tanh(x @ w1 + b1)
        z = h @ w2 + b2
        e = np.exp(z - z.max(axis=1, keepdims=True))
        softmax = e / e.sum(axis=1, keepdims=True)
        dz = (softmax - onehot) / x.shape[0]
        dh = (dz @ w2.T) * (1.0 - h * h)
        return (x.T @ dh, dh.sum(axis=0), h.T @ dz, dz.sum(axis=0))

    def fgrad_(p):
        g = _jit_grad(p, mlp_loss_function(p.np))
        return lambda: g(params, x, onehot)

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
        floor, {"fgrad": fgrad_, "autograd": autograd_, "jax": jax_, "torch": torch_},
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

    def fgrad_(p):
        g = _jit_grad(p, rnn_loss_function(p.np))
        return lambda: g(params, xs)

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
        floor, {"fgrad": fgrad_, "autograd": autograd_, "jax": jax_, "torch": torch_})


# --- 10^6-element gradient: memory --------------------------------------------------------

def jit_elementwise_workload() -> Workload:
    x = np.random.default_rng(RNG_SEED).standard_normal(ELEMENTWISE_SIZE)

    def floor():
        e = np.exp(-(x * x) / 4.0)
        return (np.cos(x) - 0.5 * x * np.sin(x)) * e + 2.0 * x

    def fgrad_(p):
        g = _jit_grad(p, elementwise_function(p.np))
        return lambda: g(x)

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
        floor, {"fgrad": fgrad_, "fgrad-eager": fgrad_eager, "autograd": autograd_,
                "jax": jax_, "torch": torch_},
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

    def fgrad_(p):
        fgrad = p.module
        f = program(p.np)

        def stage_and_compile():
            graph = fgrad.make_graph(f)(x)
            return compile_graph(graph)(x)[0]
        return stage_and_compile

    return Workload(
        "jit-compile",
        f"make_graph + compile of a {COMPILE_EQNS}-equation program, then one run "
        "(floor: the 1,000 NumPy calls once)",
        floor, {"fgrad": fgrad_})


WORKLOADS = {
    "jit-chain": jit_chain_workload,
    "jit-mlp8": jit_mlp8_workload,
    "jit-rnn": jit_rnn_workload,
    "jit-elem": jit_elementwise_workload,
    "jit-compile": jit_compile_workload,
}
