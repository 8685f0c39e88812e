"""Wrappers that change how an optimizer is driven, as in optax: gradient
accumulation over several mini-steps (`MultiSteps`) and hyperparameters kept in
the state, where a schedule can set them and a user can read or change them
(`inject_hyperparams`).

Both stay branch-free: `MultiSteps` computes the inner update at every
mini-step and keeps it only on the last one (``where``), so it stages under
`fgrad.jit` and runs inside `fgrad.lax.scan`.

>>> import numpy as np
>>> from fgrad.optim.transforms import scale
>>> opt = MultiSteps(scale(-1.0), every_k_schedule=2)
>>> state = opt.init(np.zeros(1))
>>> u1, state = opt.update(np.array([1.0]), state)
>>> u2, state = opt.update(np.array([3.0]), state)
>>> u1, u2
(array([0.]), array([-2.]))
"""
import functools
import inspect
from typing import Any, NamedTuple

import numpy as np

from fgrad import numpy as fnp
from fgrad.core.errors import NNArgumentError
from fgrad.optim.base import (GradientTransformation, cast_like, on_backend_of, safe_increment,
                              zero_count)
from fgrad.core.tree import tree_leaves, tree_map

__all__ = ["MultiSteps", "MultiStepsState", "skip_not_finite", "inject_hyperparams",
           "InjectHyperparamsState"]


class MultiStepsState(NamedTuple):
    """`MultiSteps`' counters, the inner optimizer's state and the gradients
    accumulated since its last step."""

    mini_step: Any
    gradient_step: Any
    inner_opt_state: Any
    acc_grads: Any
    skip_state: Any = ()


def _never_skip(updates, gradient_step, params):
    return np.False_, ()


def skip_not_finite(updates, gradient_step, params):
    """For `MultiSteps`' ``should_skip_update_fn``: skip a mini-step whose updates
    hold a NaN or an infinity. Returns ``(skip, {"should_skip", "num_not_finite"})``.

    >>> skip, info = skip_not_finite([np.array([1.0, np.nan])], 0, None)
    >>> bool(skip), int(info["num_not_finite"])
    (True, 1)
    """
    bad = sum(fnp.sum(fnp.logical_not(fnp.isfinite(leaf))) for leaf in tree_leaves(updates))
    skip = bad > 0
    return skip, {"should_skip": skip, "num_not_finite": bad}


class MultiSteps:
    """Accumulate gradients over ``every_k_schedule`` mini-steps (an int, or a
    function of the gradient step count) and step the wrapped optimizer ``opt``
    once with their mean (their sum without ``use_grad_mean``); in between, the
    updates are zeros. ``should_skip_update_fn(updates, gradient_step, params)
    -> (bool, info)`` can reject a mini-step, as if it had not happened (see
    `skip_not_finite`). ``accumulator_dtype=None`` accumulates in the
    gradients' dtype (optax's default is float32).

    Use ``opt.init`` and ``opt.update`` directly, or
    ``opt.gradient_transformation()`` where a `GradientTransformation` is expected.

    >>> from fgrad.optim.transforms import scale
    >>> opt = MultiSteps(scale(1.0), 3, use_grad_mean=False)
    >>> state = opt.init(np.zeros(1))
    >>> for g in (1.0, 2.0, 3.0):
    ...     u, state = opt.update(np.array([g]), state)
    >>> u, bool(opt.has_updated(state))
    (array([6.]), True)
    """

    def __init__(self, opt, every_k_schedule, use_grad_mean=True, should_skip_update_fn=None,
                 accumulator_dtype=None):
        self.inner_opt = opt
        self._every_k = every_k_schedule if callable(every_k_schedule) \
            else (lambda step: every_k_schedule)
        self._use_grad_mean = use_grad_mean
        self._should_skip = should_skip_update_fn or _never_skip
        self._dtype = accumulator_dtype

    def _zeros(self, tree):
        return tree_map(lambda p: fnp.zeros_like(p, dtype=self._dtype), tree)

    def init(self, params):
        """The first state: counters at zero, nothing accumulated."""
        gradient_step = zero_count(params)
        _, skip_state = self._should_skip(self._zeros(params), gradient_step, params)
        return MultiStepsState(zero_count(params), gradient_step, self.inner_opt.init(params),
                               self._zeros(params), skip_state)

    def update(self, updates, state, params=None):
        """Accumulate ``updates``; on the last mini-step, step the inner optimizer."""
        k = self._every_k(state.gradient_step)
        skip, skip_state = self._should_skip(updates, state.gradient_step, params)
        n = state.mini_step
        if self._use_grad_mean:
            acc = tree_map(lambda g, a: a + (g - a) / cast_like(n + 1, a), updates,
                           state.acc_grads)
        else:
            acc = tree_map(lambda g, a: a + g, updates, state.acc_grads)
        if self._dtype is not None:
            acc = tree_map(lambda a: fnp.astype(a, self._dtype), acc)
        acc_for_inner = tree_map(lambda a, g: fnp.astype(a, g.dtype), acc, updates)
        inner_updates, inner_state = self.inner_opt.update(acc_for_inner,
                                                           state.inner_opt_state, params)
        # both outcomes are computed and one is kept: no Python branch on a value
        go = fnp.logical_not(skip)
        emit = fnp.logical_and(n == k - 1, go)

        def pick(cond, new, old):
            return tree_map(lambda a, b: fnp.astype(fnp.where(cond, a, b), b.dtype), new, old)
        new_state = MultiStepsState(
            mini_step=fnp.where(go, safe_increment(n) % k, n),
            gradient_step=fnp.where(emit, safe_increment(state.gradient_step),
                                    state.gradient_step),
            inner_opt_state=pick(emit, inner_state, state.inner_opt_state),
            acc_grads=pick(go, tree_map(lambda a: fnp.where(emit, fnp.zeros_like(a), a), acc),
                           state.acc_grads),
            skip_state=skip_state)
        out = tree_map(lambda u: fnp.where(emit, u, fnp.zeros_like(u)), inner_updates)
        return out, new_state

    def has_updated(self, state):
        """Whether the last `update` stepped the inner optimizer."""
        return fnp.logical_and(state.mini_step == 0, state.gradient_step > 0)

    def gradient_transformation(self):
        """This wrapper as an ``(init, update)`` `GradientTransformation`."""
        return GradientTransformation(self.init, self.update)


class InjectHyperparamsState(NamedTuple):
    """The step count, the current hyperparameters (arrays, by name) and the
    inner optimizer's state."""

    count: Any
    hyperparams: dict
    inner_state: Any


def _float_dtype(params):
    dtypes = [leaf.dtype for leaf in tree_leaves(params)
              if hasattr(leaf, "dtype") and np.issubdtype(leaf.dtype, np.floating)]
    return np.result_type(*dtypes) if dtypes else np.float64


def _as_hyperparam(value, dtype, like):
    """An array on the parameters' backend; floats in their float dtype."""
    value_dtype = value.dtype if hasattr(value, "dtype") else np.result_type(value)
    value = on_backend_of(value, like)
    return fnp.astype(value, dtype) if np.issubdtype(value_dtype, np.floating) else value


def inject_hyperparams(inner_factory, static_args=(), hyperparam_dtype=None):
    """Wrap an optimizer factory (``adam``, ``sgd``, ...) so that its numeric
    hyperparameters live in the state, as arrays: a schedule passed for any of
    them (not only the learning rate) is read at every step, and the current
    values can be read or replaced in ``state.hyperparams``. ``static_args``
    names callable arguments that are not schedules.

    >>> from fgrad.optim import sgd
    >>> opt = inject_hyperparams(sgd)(learning_rate=lambda count: 0.1 * (count + 1))
    >>> state = opt.init(np.zeros(1))
    >>> u, state = opt.update(np.ones(1), state)
    >>> u, float(state.hyperparams["learning_rate"])
    (array([-0.1]), 0.1)
    """
    static_args = {static_args} if isinstance(static_args, str) else set(static_args)
    signature = inspect.signature(inner_factory)
    unknown = static_args - set(signature.parameters)
    if unknown:
        raise NNArgumentError(f"inject_hyperparams: static_args {sorted(unknown)} are not "
                              f"parameters of {inner_factory.__name__}; it takes "
                              f"{list(signature.parameters)}")

    @functools.wraps(inner_factory)
    def factory(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        schedules, numeric, other = {}, {}, {}
        for name, value in bound.arguments.items():
            if name in static_args or isinstance(value, bool):
                other[name] = value
            elif callable(value):
                schedules[name] = value
            elif isinstance(value, (int, float, np.ndarray, np.generic)) or \
                    hasattr(value, "dtype"):
                numeric[name] = value
            else:
                other[name] = value

        def current(values, count, like):
            dtype = hyperparam_dtype or _float_dtype(like)
            hyperparams = {k: _as_hyperparam(v, dtype, like) for k, v in values.items()}
            hyperparams.update({k: _as_hyperparam(s(count), dtype, like)
                                for k, s in schedules.items()})
            return hyperparams

        def init(params):
            count = zero_count(params)
            hyperparams = current(numeric, count, params)
            return InjectHyperparamsState(count, hyperparams,
                                          inner_factory(**other, **hyperparams).init(params))

        def update(updates, state, params=None):
            # the values in the state, so that a user's change to them is kept
            hyperparams = current({k: state.hyperparams[k] for k in numeric}, state.count,
                                  updates if params is None else params)
            updates, inner_state = inner_factory(**other, **hyperparams).update(
                updates, state.inner_state, params)
            return updates, InjectHyperparamsState(safe_increment(state.count), hyperparams,
                                                   inner_state)
        return GradientTransformation(init, update)
    return factory
