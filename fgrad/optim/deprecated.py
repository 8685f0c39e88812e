"""Names fgrad's optimizers had before they followed optax, kept so that old code
runs: each warns (`DeprecationWarning`) and returns its optax-named replacement,
with the same results as before. They will be removed in a later release.

- ``momentum(lr, beta)``: ``sgd(lr, momentum=beta)``
- ``nesterov(lr, beta)``: ``sgd(lr, momentum=beta, nesterov=True)``
- ``cosine_decay(init, steps, alpha)``: ``cosine_decay_schedule(init, steps, alpha)``
- ``warmup_cosine_decay(peak, warmup, steps, end)``:
  ``warmup_cosine_decay_schedule(0.0, peak, warmup, steps, end)``
- ``piecewise_constant(boundaries, values)``:
  ``join_schedules([constant_schedule(v) for v in values], boundaries)``

>>> import warnings
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore", DeprecationWarning)
...     s = piecewise_constant([100, 200], [1.0, 0.1, 0.01])
>>> tuple(float(s(t)) for t in (0, 150, 500))
(1.0, 0.1, 0.01)
"""
import warnings

from fgrad.optim.optimizers import sgd
from fgrad.optim.schedules import (constant_schedule, cosine_decay_schedule, join_schedules,
                                   warmup_cosine_decay_schedule)

__all__ = ["momentum", "nesterov", "cosine_decay", "warmup_cosine_decay", "piecewise_constant"]


def _warn(old, new):
    warnings.warn(f"fgrad.optim.{old} is deprecated: use fgrad.optim.{new}, as in optax",
                  DeprecationWarning, stacklevel=3)


def momentum(learning_rate, beta=0.9):
    """Deprecated: ``sgd(learning_rate, momentum=beta)``."""
    _warn("momentum(lr, beta)", "sgd(lr, momentum=beta)")
    return sgd(learning_rate, momentum=beta)


def nesterov(learning_rate, beta=0.9):
    """Deprecated: ``sgd(learning_rate, momentum=beta, nesterov=True)``."""
    _warn("nesterov(lr, beta)", "sgd(lr, momentum=beta, nesterov=True)")
    return sgd(learning_rate, momentum=beta, nesterov=True)


def cosine_decay(init_value, decay_steps, alpha=0.0):
    """Deprecated: ``cosine_decay_schedule(init_value, decay_steps, alpha)``."""
    _warn("cosine_decay", "cosine_decay_schedule")
    return cosine_decay_schedule(init_value, decay_steps, alpha)


def warmup_cosine_decay(peak_value, warmup_steps, decay_steps, end_value=0.0):
    """Deprecated: ``warmup_cosine_decay_schedule(0.0, peak_value, warmup_steps,
    decay_steps, end_value)``."""
    _warn("warmup_cosine_decay(peak, ...)", "warmup_cosine_decay_schedule(0.0, peak, ...)")
    return warmup_cosine_decay_schedule(0.0, peak_value, warmup_steps, decay_steps, end_value)


def piecewise_constant(boundaries, values):
    """Deprecated: ``values[i]`` for steps in ``[boundaries[i-1], boundaries[i])``;
    `join_schedules` of constants (or `piecewise_constant_schedule`, which takes
    scales)."""
    _warn("piecewise_constant", "join_schedules or piecewise_constant_schedule")
    return join_schedules([constant_schedule(v) for v in values], boundaries)
