"""Gradient transformations, the building blocks of every optimizer, as in optax:
rescalings (``scale_by_adam``, ``scale_by_rms``, ...), momentum (``trace``),
weight decay and clipping. Chain them with `fgrad.optim.chain`; end with
`scale_by_learning_rate` (which flips the sign, so updates descend).

>>> import numpy as np
>>> from fgrad.optim.combine import chain
>>> opt = chain(clip_by_global_norm(1.0), scale_by_learning_rate(0.5))
>>> opt.update(np.array([3.0, 4.0]), opt.init(np.zeros(2)))[0]
array([-0.3, -0.4])
"""
from typing import Any, NamedTuple

from fgrad import numpy as fnp
from fgrad.core.errors import NNArgumentError
from fgrad.optim.base import (EmptyState, GradientTransformation, abs_sq, cast_like,
                              check_learning_rate, global_norm, init_empty_state,
                              safe_increment, zero_count)
from fgrad.optim.combine import masked
from fgrad.core.tree import tree_map

__all__ = [
    "scale", "scale_by_schedule", "scale_by_learning_rate", "trace", "scale_by_adam",
    "scale_by_rms", "scale_by_stddev", "scale_by_rss", "scale_by_lion",
    "scale_by_trust_ratio", "add_decayed_weights", "clip", "clip_by_global_norm",
    "ScaleByScheduleState", "TraceState", "ScaleByAdamState", "ScaleByRmsState",
    "ScaleByRmsWithCountState", "ScaleByRStdDevState", "ScaleByRStdDevWithCountState",
    "ScaleByRssState", "ScaleByLionState", "WeightDecaySchedule",
]


def _zeros(tree, dtype=None):
    return tree_map(lambda p: fnp.zeros_like(p, dtype=dtype), tree)


def _full(tree, value):
    return tree_map(lambda p: fnp.full_like(p, value), tree)


def _kept(new, old):
    """``new`` in the dtypes of ``old``, leaf by leaf: a state keeps its dtypes
    from step to step (a float64 hyperparameter meeting a float32 moment would
    promote it), so a jitted step does not trace again and a scan's carry keeps
    its type."""
    return tree_map(lambda n, o: n if n.dtype == o.dtype else fnp.astype(n, o.dtype), new, old)


def _ema(updates, moments, decay, power=abs_sq):
    """``(1 - decay) * power(g) + decay * moment``, leaf by leaf."""
    return tree_map(lambda g, m: (1 - decay) * power(g) + decay * m, updates, moments)


def _debias(moments, decay, count):
    """Adam's bias correction ``moment / (1 - decay**count)``; the factor is
    computed in float64 before the cast, so a float32 state does not round it to 0."""
    factor = 1 - decay ** count
    return tree_map(lambda m: m / cast_like(factor, m), moments)


def scale(step_size):
    """Multiply the updates by ``step_size``.

    >>> scale(-0.5).update(np.array([2.0]), EmptyState())[0]
    array([-1.])
    """
    return GradientTransformation(init_empty_state, lambda updates, state, params=None: (
        tree_map(lambda g: g * cast_like(step_size, g), updates), state))


class ScaleByScheduleState(NamedTuple):
    """The step count a schedule is read at."""

    count: Any


def scale_by_schedule(step_size_fn):
    """Multiply the updates by ``step_size_fn(count)``, the count of updates so far.

    >>> t = scale_by_schedule(lambda count: 1.0 / (count + 1))
    >>> u, s = t.update(np.ones(1), t.init(None))
    >>> t.update(np.ones(1), s)[0]
    array([0.5])
    """
    def update(updates, state, params=None):
        step_size = step_size_fn(state.count)
        return (tree_map(lambda g: g * cast_like(step_size, g), updates),
                ScaleByScheduleState(safe_increment(state.count)))
    return GradientTransformation(lambda params: ScaleByScheduleState(zero_count(params)),
                                  update)


def scale_by_learning_rate(learning_rate, *, flip_sign=True):
    """Multiply by ``-learning_rate`` (``+learning_rate`` without ``flip_sign``); a
    schedule is read at every step.

    >>> t = scale_by_learning_rate(0.1)
    >>> t.update(np.array([2.0]), t.init(None))[0]
    array([-0.2])
    """
    check_learning_rate(learning_rate, "scale_by_learning_rate")
    sign = -1 if flip_sign else 1
    if callable(learning_rate):
        return scale_by_schedule(lambda count: sign * learning_rate(count))
    return scale(sign * learning_rate)


class TraceState(NamedTuple):
    """The momentum buffer of `trace`."""

    trace: Any


def trace(decay, nesterov=False, accumulator_dtype=None):
    """Momentum: ``t = g + decay * t`` and the update is ``t`` (``g + decay * t``
    with ``nesterov``).

    >>> t = trace(0.5)
    >>> u, s = t.update(np.ones(1), t.init(np.zeros(1)))
    >>> t.update(np.ones(1), s)[0]
    array([1.5])
    """
    def init(params):
        return TraceState(_zeros(params, accumulator_dtype))

    def update(updates, state, params=None):
        new_trace = tree_map(lambda g, t: g + decay * t, updates, state.trace)
        if nesterov:
            updates = tree_map(lambda g, t: g + decay * t, updates, new_trace)
        else:
            updates = new_trace
        return updates, TraceState(_kept(new_trace, state.trace))
    return GradientTransformation(init, update)


class ScaleByAdamState(NamedTuple):
    """Adam's step count and moment estimates."""

    count: Any
    mu: Any
    nu: Any


def scale_by_adam(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, mu_dtype=None, *,
                  nesterov=False):
    """Adam's rescaling (Kingma & Ba): bias-corrected first moment over the square
    root of the bias-corrected second moment; Nesterov's variant (NAdam) with
    ``nesterov``.

    >>> t = scale_by_adam()
    >>> t.update(np.array([3.0, -0.5]), t.init(np.zeros(2)))[0].round(6)
    array([ 1., -1.])
    """
    def init(params):
        return ScaleByAdamState(zero_count(params), _zeros(params, mu_dtype), _zeros(params))

    def update(updates, state, params=None):
        mu = _ema(updates, state.mu, b1, power=lambda g: g)
        nu = _ema(updates, state.nu, b2)
        count = safe_increment(state.count)
        if nesterov:
            mu_hat = tree_map(lambda m, g: b1 * m + (1 - b1) * g,
                              _debias(mu, b1, safe_increment(count)),
                              _debias(updates, b1, count))
        else:
            mu_hat = _debias(mu, b1, count)
        nu_hat = _debias(nu, b2, count)
        updates = tree_map(lambda m, v: m / (fnp.sqrt(v + eps_root) + eps), mu_hat, nu_hat)
        return updates, ScaleByAdamState(count, _kept(mu, state.mu), _kept(nu, state.nu))
    return GradientTransformation(init, update)


class ScaleByRmsState(NamedTuple):
    """RMSProp's average of squared updates."""

    nu: Any


class ScaleByRmsWithCountState(NamedTuple):
    """RMSProp's average of squared updates and, for bias correction, the count."""

    count: Any
    nu: Any


def _inverse_root(eps, eps_in_sqrt):
    if eps_in_sqrt:
        return lambda v: 1 / fnp.sqrt(v + eps)
    return lambda v: 1 / (fnp.sqrt(v) + eps)


def scale_by_rms(decay=0.9, eps=1e-8, initial_scale=0.0, eps_in_sqrt=True,
                 bias_correction=False):
    """RMSProp's rescaling: divide by the root of a moving average of squared
    updates, ``1 / sqrt(nu + eps)`` (``1 / (sqrt(nu) + eps)`` without
    ``eps_in_sqrt``).

    >>> t = scale_by_rms(decay=0.0, eps=0.0)
    >>> t.update(np.array([-4.0]), t.init(np.zeros(1)))[0]
    array([-1.])
    """
    inverse_root = _inverse_root(eps, eps_in_sqrt)

    def init(params):
        nu = _full(params, initial_scale)
        return ScaleByRmsWithCountState(zero_count(params), nu) if bias_correction \
            else ScaleByRmsState(nu)

    def update(updates, state, params=None):
        nu = _ema(updates, state.nu, decay)
        if bias_correction:
            count = safe_increment(state.count)
            nu_hat = _debias(nu, decay, count)
            new_state = ScaleByRmsWithCountState(count, _kept(nu, state.nu))
        else:
            nu_hat, new_state = nu, ScaleByRmsState(_kept(nu, state.nu))
        return tree_map(lambda g, v: g * inverse_root(v), updates, nu_hat), new_state
    return GradientTransformation(init, update)


class ScaleByRStdDevState(NamedTuple):
    """Centred RMSProp's moving averages of updates and of their squares."""

    mu: Any
    nu: Any


class ScaleByRStdDevWithCountState(NamedTuple):
    """Centred RMSProp's moving averages and, for bias correction, the count."""

    count: Any
    mu: Any
    nu: Any


def scale_by_stddev(decay=0.9, eps=1e-8, initial_scale=0.0, eps_in_sqrt=True,
                    bias_correction=False):
    """Centred RMSProp's rescaling: divide by a moving estimate of the updates'
    standard deviation, ``sqrt(nu - |mu|**2)``.

    >>> t = scale_by_stddev(decay=0.5, eps=0.0)
    >>> t.update(np.array([2.0]), t.init(np.zeros(1)))[0]
    array([2.])
    """
    inverse_root = _inverse_root(eps, eps_in_sqrt)

    def init(params):
        mu, nu = _zeros(params), _full(params, initial_scale)
        return ScaleByRStdDevWithCountState(zero_count(params), mu, nu) if bias_correction \
            else ScaleByRStdDevState(mu, nu)

    def update(updates, state, params=None):
        mu = _ema(updates, state.mu, decay, power=lambda g: g)
        nu = _ema(updates, state.nu, decay)
        if bias_correction:
            count = safe_increment(state.count)
            mu_hat, nu_hat = _debias(mu, decay, count), _debias(nu, decay, count)
            new_state = ScaleByRStdDevWithCountState(count, _kept(mu, state.mu),
                                                     _kept(nu, state.nu))
        else:
            mu_hat, nu_hat = mu, nu
            new_state = ScaleByRStdDevState(_kept(mu, state.mu), _kept(nu, state.nu))
        updates = tree_map(lambda g, m, v: g * inverse_root(v - abs_sq(m)),
                           updates, mu_hat, nu_hat)
        return updates, new_state
    return GradientTransformation(init, update)


class ScaleByRssState(NamedTuple):
    """Adagrad's running sum of squared updates."""

    sum_of_squares: Any


def scale_by_rss(initial_accumulator_value=0.1, eps=1e-7):
    """Adagrad's rescaling: divide by the root of the sum of all squared updates
    so far (``0`` where that sum is ``0``).

    >>> t = scale_by_rss(initial_accumulator_value=0.0, eps=0.0)
    >>> t.update(np.array([3.0, 0.0]), t.init(np.zeros(2)))[0]
    array([1., 0.])
    """
    def rescale(g, total):
        positive = total > 0
        # the other branch's 1 keeps sqrt and the division finite where total is 0
        root = fnp.sqrt(fnp.where(positive, total + eps, 1))
        return g * fnp.where(positive, 1 / root, 0)

    def update(updates, state, params=None):
        total = tree_map(lambda g, t: abs_sq(g) + t, updates, state.sum_of_squares)
        return tree_map(rescale, updates, total), ScaleByRssState(
            _kept(total, state.sum_of_squares))
    return GradientTransformation(
        lambda params: ScaleByRssState(_full(params, initial_accumulator_value)), update)


class ScaleByLionState(NamedTuple):
    """Lion's step count and momentum."""

    count: Any
    mu: Any


def scale_by_lion(b1=0.9, b2=0.99, mu_dtype=None):
    """Lion's rescaling (Chen et al.): the sign of an interpolation between the
    update and the momentum, which then moves towards the update at rate ``b2``.

    >>> t = scale_by_lion()
    >>> t.update(np.array([0.3, -2.0]), t.init(np.zeros(2)))[0]
    array([ 1., -1.])
    """
    def init(params):
        return ScaleByLionState(zero_count(params), _zeros(params, mu_dtype))

    def update(updates, state, params=None):
        signs = tree_map(lambda g, m: fnp.sign((1 - b1) * g + b1 * m), updates, state.mu)
        mu = _ema(updates, state.mu, b2, power=lambda g: g)
        return signs, ScaleByLionState(safe_increment(state.count), _kept(mu, state.mu))
    return GradientTransformation(init, update)


def _safe_norm(x, min_norm):
    # the norm of ones where x's norm is small keeps sqrt's derivative finite
    norm = fnp.sqrt(fnp.sum(abs_sq(x)))
    small = norm <= min_norm
    masked_norm = fnp.sqrt(fnp.sum(abs_sq(fnp.where(small, fnp.ones_like(x), x))))
    return fnp.where(small, min_norm, masked_norm)


def _params_needed(params, fname):
    if params is None:
        raise NNArgumentError(f"{fname} needs the parameters: call "
                              "update(grads, state, params)")


def scale_by_trust_ratio(min_norm=0.0, trust_coefficient=1.0, eps=0.0):
    """LAMB's layer-wise trust ratio: scale each leaf's update by ``‖param‖ /
    ‖update‖`` (by 1 where either norm is 0). Needs ``params``.

    >>> t = scale_by_trust_ratio()
    >>> t.update(np.array([3.0, 4.0]), t.init(None), np.array([0.0, 10.0]))[0]
    array([6., 8.])
    """
    def rescale(u, p):
        p_norm, u_norm = _safe_norm(p, min_norm), _safe_norm(u, min_norm)
        zero = fnp.logical_or(p_norm == 0, u_norm == 0)
        ratio = trust_coefficient * p_norm / fnp.where(zero, 1, u_norm + eps)
        return u * cast_like(fnp.where(zero, 1, ratio), u)

    def update(updates, state, params=None):
        _params_needed(params, "scale_by_trust_ratio")
        return tree_map(rescale, updates, params), state
    return GradientTransformation(init_empty_state, update)


class WeightDecaySchedule(NamedTuple):
    """The step count a scheduled weight decay is read at."""

    count: Any


def add_decayed_weights(weight_decay=0.0, mask=None):
    """Add ``weight_decay * params`` to the updates (decoupled weight decay, as in
    AdamW); ``weight_decay`` may be a schedule; with ``mask``, only where it is
    True (see `fgrad.optim.masked`). Needs ``params``.

    >>> t = add_decayed_weights(0.1)
    >>> t.update(np.zeros(2), t.init(None), np.array([1.0, -2.0]))[0]
    array([ 0.1, -0.2])
    """
    scheduled = callable(weight_decay)

    def init(params):
        return WeightDecaySchedule(zero_count(params)) if scheduled else EmptyState()

    def update(updates, state, params=None):
        _params_needed(params, "add_decayed_weights")
        if scheduled:
            rate, state = weight_decay(state.count), WeightDecaySchedule(
                safe_increment(state.count))
        else:
            rate = weight_decay
        if isinstance(rate, (int, float)) and rate == 0:
            return updates, state
        return tree_map(lambda g, p: g + cast_like(rate, g) * p, updates, params), state
    t = GradientTransformation(init, update)
    return t if mask is None else masked(t, mask)


def clip(max_delta):
    """Clip every element of the updates to ``[-max_delta, max_delta]``.

    >>> clip(1.0).update(np.array([-3.0, 0.5]), EmptyState())[0]
    array([-1. ,  0.5])
    """
    return GradientTransformation(init_empty_state, lambda updates, state, params=None: (
        tree_map(lambda g: fnp.clip(g, -max_delta, max_delta), updates), state))


def clip_by_global_norm(max_norm):
    """Scale the updates down so that their `global_norm` is at most ``max_norm``.

    >>> clip_by_global_norm(1.0).update((np.array([3.0, 4.0]),), EmptyState())[0]
    (array([0.6, 0.8]),)
    """
    if isinstance(max_norm, (int, float)) and not max_norm > 0:
        raise NNArgumentError(f"clip_by_global_norm: max_norm must be positive, got "
                              f"{max_norm!r}")

    def update(updates, state, params=None):
        # one branch-free factor (no Python `if` on the norm, so it stages under
        # jit); it never divides by a zero norm, so its derivative stays finite
        factor = max_norm / fnp.maximum(global_norm(updates), max_norm)
        return tree_map(lambda g: g * cast_like(factor, g), updates), state
    return GradientTransformation(init_empty_state, update)

