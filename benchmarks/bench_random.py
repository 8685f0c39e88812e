"""Random numbers: 10^6 draws, and a jitted training step with dropout.

  rand-uniform   10^6 float64 uniforms in [0, 1)
  rand-normal    10^6 float64 standard normals
  mlp-dropout    jit(value_and_grad) of the mlp-grad MLP with dropout (rate 0.5)
                 on its hidden layer, a fresh key every step

The floor of the draws is NumPy's ``Generator`` (PCG64; ``random`` and
``standard_normal``, the latter by the ziggurat method). fgrad draws from a key
(Threefry-2x32) eagerly (``fgrad``) and inside ``fgrad.jit`` (``fgrad-jit``),
JAX the same (``jax``, ``jax-jit``; float64 enabled, as everywhere in the
suite), torch from its CPU generator (``torch.rand``, ``torch.randn``). The goals
(issue 30): fgrad within 1.5x of the floor eagerly, ``fgrad-jit`` within 1.5x
of ``jax-jit``.

mlp-dropout's floor is the step by hand in NumPy, the mask from a Generator;
``fgrad-nodrop`` is fgrad's same jitted step without dropout and
``fgrad-mask`` the mask alone (a jitted ``uniform < 0.5`` of the hidden
layer's shape): the goal is that dropout adds no more than the mask's own cost
to the step. Random results differ between libraries, so no row is compared
with the floor.
"""

from __future__ import annotations

import functools

import numpy as np

from .bench_engine import (MLP_BATCH, MLP_SIZES, RNG_SEED, _jax_blocking, _rowmax, _rowsum,
                           mlp_problem)
from .harness import Workload

DRAWS = 10**6
RATE = 0.5


# name -> (what, NumPy's draw, fgrad's, JAX's, torch's), each of n float64 numbers
DRAW_KINDS = {
    "rand-uniform": ("uniforms in [0, 1)",
                     lambda g, n: g.random(n),
                     lambda r, k, n: r.uniform(k, (n,)),
                     lambda jax, k, n: jax.random.uniform(k, (n,), jax.numpy.float64),
                     lambda torch, gen, n: torch.rand(n, dtype=torch.float64, generator=gen)),
    "rand-normal": ("standard normals",
                    lambda g, n: g.standard_normal(n),
                    lambda r, k, n: r.normal(k, (n,)),
                    lambda jax, k, n: jax.random.normal(k, (n,), jax.numpy.float64),
                    lambda torch, gen, n: torch.randn(n, dtype=torch.float64, generator=gen)),
}


def draw_workload(name) -> Workload:
    what, numpy_draw, fgrad_draw, jax_draw, torch_draw = DRAW_KINDS[name]
    g = np.random.default_rng(RNG_SEED)

    def floor():
        numpy_draw(g, DRAWS)          # random numbers: nothing to compare against

    def fgrad_(p):
        key = p.module.random.key(RNG_SEED)
        return lambda: fgrad_draw(p.module.random, key, DRAWS)

    def fgrad_jit(p):
        fgrad = p.module
        key = fgrad.random.key(RNG_SEED)
        draw = fgrad.jit(lambda k: fgrad_draw(fgrad.random, k, DRAWS))
        return lambda: draw(key)

    def jax_(p):
        jax = p.module
        key = jax.random.key(RNG_SEED)
        return _jax_blocking(jax, lambda: jax_draw(jax, key, DRAWS))

    def jax_jit(p):
        jax = p.module
        key = jax.random.key(RNG_SEED)
        draw = jax.jit(lambda k: jax_draw(jax, k, DRAWS))
        return _jax_blocking(jax, lambda: draw(key))

    def torch_(p):
        torch = p.module
        gen = torch.Generator().manual_seed(RNG_SEED)
        return lambda: torch_draw(torch, gen, DRAWS)

    return Workload(name, f"{DRAWS:.0e} float64 {what}; floor: NumPy's Generator",
                    floor, {"fgrad": fgrad_, "fgrad-jit": fgrad_jit, "jax": jax_,
                            "jax-jit": jax_jit, "torch": torch_})


# --- a jitted training step with dropout -----------------------------------------------


def _dropout_loss(xp, dropout):
    """mlp-grad's loss with ``dropout(h, key)`` applied to the hidden layer."""
    def loss(params, x, onehot, key):
        w1, b1, w2, b2 = params
        h = dropout(xp.tanh(x @ w1 + b1), key)
        z = h @ w2 + b2
        z = z - _rowmax(xp, z)
        logp = z - xp.log(_rowsum(xp, xp.exp(z)))
        return -xp.sum(onehot * logp) / x.shape[0]
    return loss


def _stepper(step, split, key):
    """A callable running ``step(sub)`` with a fresh subkey each call."""
    state = [key]

    def call():
        state[0], sub = split(state[0])
        return step(sub)
    return call


def dropout_workload() -> Workload:
    params, x, onehot = mlp_problem(MLP_BATCH)
    hidden = MLP_SIZES[1]
    g = np.random.default_rng(RNG_SEED)

    def hand_written():
        w1, b1, w2, b2 = params
        h = np.tanh(x @ w1 + b1)
        keep = (g.random(h.shape) >= RATE) / (1 - RATE)
        hd = h * keep
        z = hd @ w2 + b2
        e = np.exp(z - z.max(axis=1, keepdims=True))
        softmax = e / e.sum(axis=1, keepdims=True)
        dz = (softmax - onehot) / x.shape[0]
        dh = (dz @ w2.T) * keep * (1.0 - h * h)
        return (x.T @ dh, dh.sum(axis=0), hd.T @ dz, dz.sum(axis=0))

    def floor():
        hand_written()                # a random mask: nothing to compare against

    def _fgrad_step(fgrad, dropout):
        step = fgrad.jit(fgrad.value_and_grad(_dropout_loss(fgrad.numpy, dropout)))
        return _stepper(lambda k: step(params, x, onehot, k),
                        lambda k: tuple(fgrad.random.split(k)), fgrad.random.key(1))

    def fgrad_(p):
        fgrad = p.module
        return _fgrad_step(fgrad, lambda h, k: fgrad.nn.dropout(h, RATE, k))

    def fgrad_nodrop(p):
        return _fgrad_step(p.module, lambda h, k: h)

    def fgrad_mask(p):
        fgrad = p.module
        mask = fgrad.jit(lambda k: fgrad.random.uniform(k, (MLP_BATCH, hidden)) < 1 - RATE)
        return _stepper(mask, lambda k: tuple(fgrad.random.split(k)), fgrad.random.key(1))

    def jax_(p):
        jax = p.module

        def dropout(h, k):
            keep = jax.random.bernoulli(k, 1 - RATE, h.shape)
            return jax.numpy.where(keep, h / (1 - RATE), 0.0)
        step = jax.jit(jax.value_and_grad(_dropout_loss(jax.numpy, dropout)))
        pj = tuple(jax.numpy.asarray(a) for a in params)
        xj, yj = jax.numpy.asarray(x), jax.numpy.asarray(onehot)
        call = _stepper(lambda k: step(pj, xj, yj, k), lambda k: tuple(jax.random.split(k)),
                        jax.random.key(1))
        return _jax_blocking(jax, call)

    def torch_(p):
        torch = p.module
        loss = _dropout_loss(torch, lambda h, k: torch.nn.functional.dropout(h, RATE))
        xt, yt = torch.from_numpy(x), torch.from_numpy(onehot)
        leaves = tuple(torch.from_numpy(a).requires_grad_(True) for a in params)

        def call():
            value = loss(leaves, xt, yt, None)
            return value, torch.autograd.grad(value, leaves)
        return call

    return Workload(
        "mlp-dropout",
        f"jit(value_and_grad) of the {'-'.join(map(str, MLP_SIZES))} MLP with dropout "
        f"{RATE} on the hidden layer, a fresh key per step (fgrad-nodrop: without "
        "dropout; fgrad-mask: the mask alone; torch: eager)",
        floor, {"fgrad": fgrad_, "fgrad-nodrop": fgrad_nodrop, "fgrad-mask": fgrad_mask,
                "jax": jax_, "torch": torch_})


WORKLOADS = {**{name: functools.partial(draw_workload, name) for name in DRAW_KINDS},
             "mlp-dropout": dropout_workload}
