"""Discrete distributions: integers, coins, categories, choices, orderings
and counts.

Integer outputs have no derivative; `categorical` and `choice` with ``p``
are fgrad arithmetic on the probabilities, so they stage and batch like the
continuous samplers.
"""
import math
import operator

import numpy as np

from fgrad import numpy as fnp
from fgrad.core.errors import RandomArgumentError
from fgrad.core.trace import get_aval
from fgrad.primitives import random as _p
from fgrad.random._continuous import (as_param, batch_shape, broadcast_param,
                                      check_broadcast, gumbel, param_shape, uniform)
from fgrad.random._keys import as_shape, check_key


def _int_dtype(dtype, fname):
    dtype = np.dtype(np.int64 if dtype is None else dtype)
    if dtype.kind not in "iu":
        raise RandomArgumentError(f"fgrad.random.{fname}: dtype must be an integer dtype, "
                                  f"got {dtype}.")
    return dtype


def randint(key, shape, minval, maxval, dtype=int):
    """Integers uniform on [``minval``, ``maxval``) (``minval`` where ``maxval``
    is not above it), from 64 random bits each (a bias below 2**-32 for
    ranges under 2**32).

    >>> x = fgrad.random.randint(fgrad.random.key(0), (100,), 0, 6)
    >>> int(x.min()), int(x.max()), x.dtype
    (0, 5, dtype('int64'))
    """
    key = check_key(key, "randint")
    shape = as_shape(shape, "randint")
    dtype = _int_dtype(dtype, "randint")
    minval, maxval = as_param(minval, np.int64), as_param(maxval, np.int64)
    check_broadcast("randint", shape, minval, maxval)
    span = fnp.maximum(maxval - minval, 1).astype(np.uint64)
    offset = fnp.remainder(_p.random_bits(key, shape, np.uint64), span)
    return (minval + offset.astype(np.int64)).astype(dtype)


def bernoulli(key, p=0.5, shape=None):
    """Booleans, True with probability ``p``: ``uniform < p``.

    >>> fgrad.random.bernoulli(fgrad.random.key(0), 0.3, (4,)).dtype
    dtype('bool')
    """
    key = check_key(key, "bernoulli")
    dtype = get_aval(p).dtype if hasattr(p, "dtype") and get_aval(p).dtype.kind == "f" \
        else np.dtype(np.float64)
    p = as_param(p, dtype)
    shape = param_shape("bernoulli", shape, p)
    return _p.random_uniform(key, shape, dtype) < p


def rademacher(key, shape=(), dtype=int):
    """-1 or 1 with equal probability.

    >>> sorted(set(fgrad.random.rademacher(fgrad.random.key(0), (50,)).tolist()))
    [-1, 1]
    """
    dtype = _int_dtype(dtype, "rademacher")
    coin = bernoulli(check_key(key, "rademacher"), 0.5, as_shape(shape, "rademacher"))
    return (2 * coin.astype(dtype) - 1).astype(dtype)


def categorical(key, logits, axis=-1, shape=None):
    """Category indices drawn with probabilities ``softmax(logits)`` along
    ``axis`` (the Gumbel-max trick); ``shape`` defaults to the logits' other
    axes, and may add leading ones.

    >>> fgrad.random.categorical(fgrad.random.key(0), np.log([0.2, 0.8]), shape=(3,)).shape
    (3,)
    """
    key = check_key(key, "categorical")
    logits = fnp.asarray(logits)
    if get_aval(logits).dtype.kind != "f":
        logits = logits.astype(np.float64)
    logits_shape = get_aval(logits).shape
    axis = _axis_of(logits_shape, axis, "categorical", "logits")
    batch = logits_shape[:axis] + logits_shape[axis + 1:]
    shape = batch_shape("categorical", shape, batch, "the logits")
    prefix = shape[:len(shape) - len(batch)]
    noise_shape = list(shape[len(shape) - len(batch):])
    noise_shape.insert(axis, logits_shape[axis])
    noise = gumbel(key, prefix + tuple(noise_shape), get_aval(logits).dtype)
    return fnp.argmax(noise + fnp.reshape(logits, (1,) * len(prefix) + logits_shape),
                      axis=len(prefix) + axis)


def _axis_of(shape, axis, fname, name):
    """``axis`` of an array of ``shape`` (at least one axis), made non-negative."""
    if not shape:
        raise RandomArgumentError(f"fgrad.random.{fname}: {name} must be an int or an "
                                  "array of at least one axis, got a 0-d array.")
    if not -len(shape) <= axis < len(shape):
        raise RandomArgumentError(f"fgrad.random.{fname}: axis {axis} is out of range "
                                  f"for {name} of shape {shape}.")
    return axis % len(shape)


def _shuffled_order(key, n):
    """A uniformly random ordering of ``range(n)``: positions sorted by 64 random
    bits each (ties, about n**2 / 2**65 of them, keep index order)."""
    return fnp.argsort(_p.random_bits(key, (n,), np.uint64), stable=True)


def permutation(key, x, axis=0, independent=False):
    """A random ordering of ``range(x)`` for an int ``x``; otherwise ``x``
    shuffled along ``axis`` (each slice on its own when ``independent``).

    >>> sorted(fgrad.random.permutation(fgrad.random.key(0), 5).tolist())
    [0, 1, 2, 3, 4]
    """
    key = check_key(key, "permutation")
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return _shuffled_order(key, operator.index(x))
    x = fnp.asarray(x)
    x_shape = get_aval(x).shape
    axis = _axis_of(x_shape, axis, "permutation", "x")
    if independent and len(x_shape) > 1:
        order = fnp.argsort(_p.random_bits(key, x_shape, np.uint64), axis=axis, stable=True)
        return fnp.take_along_axis(x, order, axis)
    return fnp.take(x, _shuffled_order(key, x_shape[axis]), axis=axis)


def choice(key, a, shape=(), replace=True, p=None, axis=0):
    """Draws from ``range(a)`` for an int ``a``, else slices of ``a`` along
    ``axis``: uniformly, or with probabilities ``p``; with or without
    replacement (without, with ``p``: the Gumbel top-k trick).

    >>> fgrad.random.choice(fgrad.random.key(0), 10, (3,), replace=False).shape
    (3,)
    """
    key = check_key(key, "choice")
    shape = as_shape(shape, "choice")
    if isinstance(a, (int, np.integer)) and not isinstance(a, bool):
        items, n = None, operator.index(a)
    else:
        items = fnp.asarray(a)
        a_shape = get_aval(items).shape
        axis = _axis_of(a_shape, axis, "choice", "a")
        n = a_shape[axis]
    draws = math.prod(shape)
    if n <= 0 and draws:
        raise RandomArgumentError("fgrad.random.choice: a must have at least one item "
                                  "unless no draws are taken.")
    if not replace and draws > n:
        raise RandomArgumentError(f"fgrad.random.choice: cannot take {draws} draws "
                                  f"without replacement from {n} items.")
    if p is None:
        if replace:
            index = randint(key, shape, 0, n)
        else:
            index = fnp.reshape(_shuffled_order(key, n)[:draws], shape)
    else:
        p = fnp.asarray(p)
        if get_aval(p).shape != (n,):
            raise RandomArgumentError(f"fgrad.random.choice: p must have shape ({n},), one "
                                      f"probability per item, got {get_aval(p).shape}.")
        dtype = get_aval(p).dtype if get_aval(p).dtype.kind == "f" else np.float64
        p = as_param(p, dtype)
        if replace:
            cumulative = fnp.cumsum(p)
            target = cumulative[-1] * (1 - uniform(key, shape, dtype))
            index = fnp.searchsorted(cumulative, target).astype(np.int64)
        else:
            scores = gumbel(key, (n,), dtype) + fnp.log(p)
            index = fnp.reshape(fnp.argsort(-scores, stable=True)[:draws], shape)
    if items is None:
        return index
    return fnp.take(items, index, axis=axis)


def poisson(key, lam, shape=None, dtype=int):
    """Poisson counts of rate ``lam`` (Knuth's method below 10, Hormann's
    transformed rejection above); -1 where ``lam`` is negative or not finite.

    >>> fgrad.random.poisson(fgrad.random.key(0), 3.0, (4,)).dtype
    dtype('int64')
    """
    key = check_key(key, "poisson")
    dtype = _int_dtype(dtype, "poisson")
    lam = as_param(lam, np.float64)
    shape = param_shape("poisson", shape, lam)
    return _p.random_poisson(key, broadcast_param(key, lam, shape, np.float64), dtype)
