"""Schedules: functions of the step count that return a hyperparameter, as in optax.

Every schedule is written with `fgrad.numpy` operations (``where``, ``minimum``,
``cos``), never with Python ``if`` or ``min`` on the step, so it stages under
`fgrad.jit`, maps under `fgrad.vmap` and runs inside `fgrad.lax.scan`, where the
step count is a traced int32 array. Outside every transformation a schedule
takes a plain int and returns a NumPy scalar.

>>> s = warmup_cosine_decay_schedule(0.0, 1.0, warmup_steps=10, decay_steps=110)
>>> tuple(round(float(s(t)), 3) for t in (0, 5, 10, 60, 110, 500))
(0.0, 0.5, 1.0, 0.5, 0.0, 0.0)
"""
import math

from fgrad import numpy as fnp
from fgrad.core.errors import NNArgumentError

__all__ = [
    "constant_schedule", "polynomial_schedule", "linear_schedule",
    "piecewise_constant_schedule", "exponential_decay", "cosine_decay_schedule",
    "warmup_cosine_decay_schedule", "join_schedules",
]


def constant_schedule(value):
    """``count -> value``.

    >>> constant_schedule(0.1)(1000)
    0.1
    """
    return lambda count: value


def polynomial_schedule(init_value, end_value, power, transition_steps, transition_begin=0):
    """From ``init_value`` to ``end_value`` along ``(1 - t)**power`` over
    ``transition_steps`` steps that start at ``transition_begin``; constant
    before and after. ``transition_steps <= 0`` gives the constant
    ``init_value`` (as in optax).

    >>> s = polynomial_schedule(1.0, 0.0, power=2, transition_steps=10)
    >>> float(s(5)), float(s(20))
    (0.25, 0.0)
    """
    if transition_steps <= 0:
        return constant_schedule(init_value)
    transition_begin = max(transition_begin, 0)

    def schedule(count):
        done = fnp.clip(count - transition_begin, 0, transition_steps)
        frac = 1 - done / transition_steps
        return (init_value - end_value) * frac ** power + end_value
    return schedule


def linear_schedule(init_value, end_value, transition_steps, transition_begin=0):
    """A straight line from ``init_value`` to ``end_value`` over ``transition_steps``.

    >>> float(linear_schedule(0.0, 1.0, transition_steps=4)(1))
    0.25
    """
    return polynomial_schedule(init_value, end_value, 1, transition_steps, transition_begin)


def piecewise_constant_schedule(init_value, boundaries_and_scales=None):
    """``init_value``, multiplied by ``scale`` from each step ``boundary`` of
    ``boundaries_and_scales`` (a dict ``{boundary: scale}``) on.

    >>> s = piecewise_constant_schedule(1.0, {100: 0.1, 200: 0.1})
    >>> tuple(float(s(t)) for t in (0, 100, 250))
    (1.0, 0.1, 0.010000000000000002)
    """
    items = sorted((boundaries_and_scales or {}).items())
    if any(not scale >= 0 for _, scale in items):
        raise NNArgumentError(f"piecewise_constant_schedule: the scales must be "
                              f"non-negative, got {dict(items)}")

    def schedule(count):
        value = init_value
        for boundary, scale in items:
            value = fnp.where(count < boundary, value, value * scale)
        return value
    return schedule


def exponential_decay(init_value, transition_steps, decay_rate, transition_begin=0,
                      staircase=False, end_value=None):
    """``init_value * decay_rate ** ((count - transition_begin) / transition_steps)``,
    ``init_value`` before ``transition_begin``; whole transitions only with
    ``staircase``; bounded by ``end_value`` when given.

    The arguments come in optax's order, ``transition_steps`` before
    ``decay_rate``. ``transition_steps`` must be a whole number of steps: a
    fraction there is almost always a decay rate in the wrong place, and it
    raises `NNArgumentError` rather than grow the rate without bound.

    >>> float(exponential_decay(1.0, transition_steps=10, decay_rate=0.5)(20))
    0.25
    """
    if isinstance(transition_steps, float) and not transition_steps.is_integer():
        raise NNArgumentError(
            f"exponential_decay: transition_steps={transition_steps!r} is not a whole "
            f"number of steps. The order is optax's, exponential_decay(init_value, "
            f"transition_steps, decay_rate): did you mean exponential_decay("
            f"{init_value!r}, transition_steps={decay_rate!r}, "
            f"decay_rate={transition_steps!r})?")
    if transition_steps <= 0 or decay_rate == 0:
        return constant_schedule(init_value)
    transition_begin = max(transition_begin, 0)
    bound = None if end_value is None else (fnp.maximum if decay_rate < 1 else fnp.minimum)

    def schedule(count):
        elapsed = count - transition_begin
        p = elapsed / transition_steps
        if staircase:
            p = fnp.floor(p)
        value = fnp.where(elapsed <= 0, init_value, init_value * fnp.power(decay_rate, p))
        return value if bound is None else bound(value, end_value)
    return schedule


def cosine_decay_schedule(init_value, decay_steps, alpha=0.0, exponent=1.0):
    """A half cosine from ``init_value`` down to ``alpha * init_value`` over
    ``decay_steps``, constant afterwards.

    >>> float(cosine_decay_schedule(1.0, decay_steps=100)(50))
    0.5
    """
    if not decay_steps > 0:
        raise NNArgumentError(f"cosine_decay_schedule: decay_steps must be positive, got "
                              f"{decay_steps!r}")

    def schedule(count):
        t = fnp.minimum(count, decay_steps) / decay_steps
        cosine = 0.5 * (1 + fnp.cos(math.pi * t))
        return init_value * ((1 - alpha) * cosine ** exponent + alpha)
    return schedule


def warmup_cosine_decay_schedule(init_value, peak_value, warmup_steps, decay_steps,
                                 end_value=0.0, exponent=1.0):
    """A straight line from ``init_value`` to ``peak_value`` over ``warmup_steps``,
    then a cosine down to ``end_value`` at step ``decay_steps`` (counted from the
    start, warm-up included).

    >>> s = warmup_cosine_decay_schedule(0.0, 1.0, warmup_steps=10, decay_steps=110)
    >>> float(s(5)), float(s(10)), float(s(110))
    (0.5, 1.0, 0.0)
    """
    alpha = 0.0 if peak_value == 0 else end_value / peak_value
    return join_schedules(
        [linear_schedule(init_value, peak_value, warmup_steps),
         cosine_decay_schedule(peak_value, decay_steps - warmup_steps, alpha, exponent)],
        [warmup_steps])


def join_schedules(schedules, boundaries):
    """``schedules[0]`` until ``boundaries[0]``, then ``schedules[1]`` counted from
    that boundary, and so on.

    >>> s = join_schedules([constant_schedule(1.0), linear_schedule(1.0, 0.0, 10)], [5])
    >>> float(s(4)), float(s(10))
    (1.0, 0.5)
    """
    if len(schedules) != len(boundaries) + 1:
        raise NNArgumentError(f"join_schedules: needs one schedule more than boundaries, "
                              f"got {len(schedules)} schedules and {len(boundaries)} "
                              f"boundaries")

    def schedule(count):
        value = schedules[0](count)
        for boundary, later in zip(boundaries, schedules[1:]):
            value = fnp.where(count < boundary, value, later(count - boundary))
        return value
    return schedule
