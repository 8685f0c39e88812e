"""Optimizers as pure functions over pytrees.

An optimizer is a pair of functions, ``init(params) -> state`` and
``update(grads, state, params) -> (updates, state)``; `apply_updates` adds the
updates to the parameters. Nothing is mutated and nothing is hidden: the state is
an ordinary pytree you can inspect, save or pass through ``jit``. A learning
rate is a number or a schedule, a plain function ``step -> rate``.

>>> import numpy as np, fgrad
>>> opt = fgrad.optim.sgd(0.1)
>>> params = {"w": np.array([1.0, -2.0])}
>>> state = opt.init(params)
>>> grads = {"w": np.array([1.0, 1.0])}
>>> updates, state = opt.update(grads, state, params)
>>> fgrad.optim.apply_updates(params, updates)["w"]
array([ 0.9, -2.1])
"""
import math
from typing import Callable, NamedTuple

import numpy as np

from fgrad import numpy as fnp
from fgrad.core.errors import NNArgumentError
from fgrad.core.tree import tree_leaves, tree_map

__all__ = [
    "Optimizer", "sgd", "momentum", "nesterov", "adam", "adamw", "rmsprop",
    "apply_updates", "global_norm", "clip_by_global_norm", "chain",
    "constant_schedule", "exponential_decay", "cosine_decay", "warmup_cosine_decay",
    "piecewise_constant",
]


class Optimizer(NamedTuple):
    """``init(params) -> state`` and ``update(grads, state, params) -> (updates,
    state)``."""

    init: Callable
    update: Callable


def _rate(learning_rate, step):
    return learning_rate(step) if callable(learning_rate) else learning_rate


def _check_rate(learning_rate, fname):
    if not callable(learning_rate) and not (isinstance(learning_rate, (int, float))
                                            and learning_rate >= 0):
        raise NNArgumentError(f"{fname}: learning_rate must be a non-negative number or "
                              f"a schedule (a function of the step), got "
                              f"{learning_rate!r}")


def _zeros(params):
    return tree_map(lambda p: p * 0, params)


class ScaleState(NamedTuple):
    step: int


def sgd(learning_rate):
    """Plain gradient descent: ``update = -lr * grad``.

    >>> opt = sgd(0.5)
    >>> opt.update(np.array([2.0]), opt.init(np.zeros(1)), None)[0]
    array([-1.])
    """
    _check_rate(learning_rate, "sgd")

    def init(params):
        return ScaleState(0)

    def update(grads, state, params=None):
        lr = _rate(learning_rate, state.step)
        return tree_map(lambda g: -lr * g, grads), ScaleState(state.step + 1)
    return Optimizer(init, update)


class MomentumState(NamedTuple):
    step: int
    velocity: object


def momentum(learning_rate, beta=0.9):
    """Heavy-ball momentum: ``v = beta v + g``, ``update = -lr v``.

    >>> opt = momentum(1.0, beta=0.5)
    >>> s = opt.init(np.zeros(1))
    >>> u, s = opt.update(np.ones(1), s)
    >>> opt.update(np.ones(1), s)[0]
    array([-1.5])
    """
    return _momentum(learning_rate, beta, nesterov=False, fname="momentum")


def nesterov(learning_rate, beta=0.9):
    """Nesterov momentum: ``v = beta v + g``, ``update = -lr (g + beta v)``.

    >>> opt = nesterov(1.0, beta=0.5)
    >>> opt.update(np.ones(1), opt.init(np.zeros(1)))[0]
    array([-1.5])
    """
    return _momentum(learning_rate, beta, nesterov=True, fname="nesterov")


def _momentum(learning_rate, beta, nesterov, fname):
    _check_rate(learning_rate, fname)

    def init(params):
        return MomentumState(0, _zeros(params))

    def update(grads, state, params=None):
        lr = _rate(learning_rate, state.step)
        velocity = tree_map(lambda v, g: beta * v + g, state.velocity, grads)
        if nesterov:
            updates = tree_map(lambda g, v: -lr * (g + beta * v), grads, velocity)
        else:
            updates = tree_map(lambda v: -lr * v, velocity)
        return updates, MomentumState(state.step + 1, velocity)
    return Optimizer(init, update)


class AdamState(NamedTuple):
    step: int
    mu: object      # first-moment estimate
    nu: object      # second-moment estimate


def adam(learning_rate=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    """Adam (Kingma & Ba), with bias-corrected moment estimates.

    >>> opt = adam(0.1)
    >>> opt.update(np.array([3.0]), opt.init(np.zeros(1)))[0].round(6)
    array([-0.1])
    """
    return _adam(learning_rate, b1, b2, eps, 0.0, "adam")


def adamw(learning_rate=1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=1e-4):
    """Adam with decoupled weight decay (Loshchilov & Hutter): the update adds
    ``-lr * weight_decay * params``, which needs ``params`` in ``update``.

    >>> opt = adamw(0.1, weight_decay=0.5)
    >>> opt.update(np.array([0.0]), opt.init(np.ones(1)), np.ones(1))[0]
    array([-0.05])
    """
    return _adam(learning_rate, b1, b2, eps, weight_decay, "adamw")


def _adam(learning_rate, b1, b2, eps, weight_decay, fname):
    _check_rate(learning_rate, fname)

    def init(params):
        return AdamState(0, _zeros(params), _zeros(params))

    def update(grads, state, params=None):
        if weight_decay and params is None:
            raise NNArgumentError(f"{fname}: weight decay needs the parameters: call "
                                  "update(grads, state, params)")
        step = state.step + 1
        lr = _rate(learning_rate, state.step)
        mu = tree_map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, grads)
        nu = tree_map(lambda v, g: b2 * v + (1 - b2) * (g * g), state.nu, grads)
        c1, c2 = 1 - b1 ** step, 1 - b2 ** step

        def direction(m, v):
            return -lr * (m / c1) / ((v / c2) ** 0.5 + eps)
        updates = tree_map(direction, mu, nu)
        if weight_decay:
            updates = tree_map(lambda u, p: u - lr * weight_decay * p, updates, params)
        return updates, AdamState(step, mu, nu)
    return Optimizer(init, update)


class RMSPropState(NamedTuple):
    step: int
    nu: object


def rmsprop(learning_rate=1e-3, decay=0.9, eps=1e-8):
    """RMSProp: ``nu = decay nu + (1 - decay) g**2``, ``update = -lr g /
    (sqrt(nu) + eps)``.

    >>> opt = rmsprop(0.1, decay=0.0)
    >>> opt.update(np.array([-4.0]), opt.init(np.zeros(1)))[0].round(6)
    array([0.1])
    """
    _check_rate(learning_rate, "rmsprop")

    def init(params):
        return RMSPropState(0, _zeros(params))

    def update(grads, state, params=None):
        lr = _rate(learning_rate, state.step)
        nu = tree_map(lambda v, g: decay * v + (1 - decay) * (g * g), state.nu, grads)
        updates = tree_map(lambda g, v: -lr * g / (v ** 0.5 + eps), grads, nu)
        return updates, RMSPropState(state.step + 1, nu)
    return Optimizer(init, update)


# ---------------------------------------------------------------------------
# Applying and transforming updates
# ---------------------------------------------------------------------------


def apply_updates(params, updates):
    """``params + updates``, leaf by leaf, keeping each parameter's dtype.

    >>> apply_updates((np.ones(2),), (np.array([0.5, -0.5]),))
    (array([1.5, 0.5]),)
    """
    def add(p, u):
        out = p + u
        dtype = getattr(p, "dtype", None)
        return out.astype(dtype) if dtype is not None and out.dtype != dtype else out
    return tree_map(add, params, updates)


def global_norm(tree):
    """The 2-norm of all leaves of ``tree`` taken together.

    >>> float(global_norm({"a": np.array([3.0]), "b": np.array([4.0])}))
    5.0
    """
    # fgrad.numpy, so clipping also works inside jit and grad
    return fnp.sqrt(sum(fnp.sum(fnp.real(fnp.conj(leaf) * leaf))
                        for leaf in tree_leaves(tree)))


def clip_by_global_norm(grads, max_norm):
    """Scale ``grads`` down so their `global_norm` is at most ``max_norm``.

    >>> clip_by_global_norm([np.array([3.0, 4.0])], 1.0)[0]
    array([0.6, 0.8])
    """
    if not max_norm > 0:
        raise NNArgumentError(f"clip_by_global_norm: max_norm must be positive, got "
                              f"{max_norm!r}")
    # branch-free (no Python `if` on the norm), so it stages under jit
    norm = global_norm(grads)
    scale = max_norm / fnp.maximum(norm, max_norm)
    return tree_map(lambda g: g * fnp.astype(scale, g.dtype), grads)


def chain(*transforms, max_norm=None):
    """Clip gradients by global norm (when ``max_norm`` is given), then apply
    ``transforms[0]``; a convenience for the common "clip then optimise".

    >>> opt = chain(sgd(1.0), max_norm=1.0)
    >>> opt.update(np.array([3.0, 4.0]), opt.init(np.zeros(2)))[0]
    array([-0.6, -0.8])
    """
    if len(transforms) != 1:
        raise NNArgumentError("chain takes exactly one optimizer (and max_norm)")
    inner = transforms[0]

    def update(grads, state, params=None):
        if max_norm is not None:
            grads = clip_by_global_norm(grads, max_norm)
        return inner.update(grads, state, params)
    return Optimizer(inner.init, update)


# ---------------------------------------------------------------------------
# Schedules: plain functions of the step
# ---------------------------------------------------------------------------


def constant_schedule(value):
    """``step -> value``.

    >>> constant_schedule(0.1)(1000)
    0.1
    """
    return lambda step: value


def exponential_decay(init_value, decay_rate, transition_steps, staircase=False):
    """``init_value * decay_rate ** (step / transition_steps)`` (floored steps
    with ``staircase``).

    >>> exponential_decay(1.0, 0.5, 10)(20)
    0.25
    """
    if transition_steps <= 0:
        raise NNArgumentError("exponential_decay: transition_steps must be positive")

    def schedule(step):
        p = step / transition_steps
        return init_value * decay_rate ** (math.floor(p) if staircase else p)
    return schedule


def cosine_decay(init_value, decay_steps, alpha=0.0):
    """Cosine from ``init_value`` down to ``alpha * init_value`` over
    ``decay_steps``, constant afterwards.

    >>> cosine_decay(1.0, 100)(50)
    0.5
    """
    if decay_steps <= 0:
        raise NNArgumentError("cosine_decay: decay_steps must be positive")

    def schedule(step):
        t = min(step, decay_steps) / decay_steps
        cosine = 0.5 * (1 + math.cos(math.pi * t))
        return init_value * ((1 - alpha) * cosine + alpha)
    return schedule


def warmup_cosine_decay(peak_value, warmup_steps, decay_steps, end_value=0.0):
    """Linear warm-up from 0 to ``peak_value``, then cosine decay to
    ``end_value`` at ``decay_steps`` (counted from the start).

    >>> s = warmup_cosine_decay(1.0, 10, 110)
    >>> s(5), s(10), s(110)
    (0.5, 1.0, 0.0)
    """
    def schedule(step):
        if step < warmup_steps:
            return peak_value * step / warmup_steps
        span = max(decay_steps - warmup_steps, 1)
        t = min(step - warmup_steps, span) / span
        return end_value + (peak_value - end_value) * 0.5 * (1 + math.cos(math.pi * t))
    return schedule


def piecewise_constant(boundaries, values):
    """``values[i]`` for steps in ``[boundaries[i-1], boundaries[i])``.

    >>> s = piecewise_constant([100, 200], [1.0, 0.1, 0.01])
    >>> s(0), s(150), s(500)
    (1.0, 0.1, 0.01)
    """
    if len(values) != len(boundaries) + 1:
        raise NNArgumentError(f"piecewise_constant: need len(boundaries) + 1 = "
                              f"{len(boundaries) + 1} values, got {len(values)}")

    def schedule(step):
        for boundary, value in zip(boundaries, values):
            if step < boundary:
                return value
        return values[-1]
    return schedule
