"""Keys: making them, splitting them, folding data into them, their words.

A key is a plain ``uint32`` array of shape ``(2,)`` (a batch of keys
``(n, 2)``), so it passes through `jit`, `vmap`, pytrees, loop carries and
Dask tasks like any other array. The checks here give every sampler the same
error for anything that is not one key.
"""
import operator

import numpy as np

from fgrad import numpy as fnp
from fgrad.core.errors import (
    NUMPY_GENERATORS,
    RandomArgumentError,
    RandomKeyError,
)
from fgrad.core.trace import Tracer, get_aval
from fgrad.primitives import random as _p

_MASK32 = 0xFFFFFFFF


def _describe(x):
    if isinstance(x, Tracer) or hasattr(x, "dtype"):
        aval = get_aval(x)
        return f"a {aval.dtype.name} array of shape {aval.shape}"
    return f"a {type(x).__name__} ({x!r:.40})"


def check_key(key, fname):
    """``key`` if it is one key (uint32, shape ``(2,)``); a `RandomKeyError`
    naming ``fgrad.random.<fname>`` otherwise."""
    if isinstance(key, Tracer) or (hasattr(key, "dtype") and hasattr(key, "shape")):
        aval = get_aval(key)
        if aval.dtype == np.uint32 and aval.shape == (2,):
            return key
    hint = "make one with fgrad.random.key(seed)"
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        hint = f"an integer is a seed, not a key: pass fgrad.random.key({key})"
    elif isinstance(key, NUMPY_GENERATORS):
        hint = ("fgrad.random draws from keys, not NumPy generators: make one with "
                "fgrad.random.key(seed) and split it for each draw")
    elif hasattr(key, "shape") and get_aval(key).dtype == np.uint32 \
            and get_aval(key).shape[-1:] == (2,):
        hint = (f"this is a batch of keys: draw with each by fgrad.vmap(lambda k: "
                f"fgrad.random.{fname}(k, ...))(keys)")
    elif hasattr(key, "shape") and get_aval(key).shape == (2,):
        hint = "convert raw words with fgrad.random.wrap_key_data(words.astype(np.uint32))"
    raise RandomKeyError(f"fgrad.random.{fname}: key must be a uint32 array of shape "
                         f"(2,), got {_describe(key)}; {hint}.")


def as_shape(shape, fname, name="shape"):
    """``shape`` (an int or a sequence of ints) as a tuple of non-negative ints."""
    try:
        dims = (operator.index(shape),) if not isinstance(shape, (tuple, list)) \
            else tuple(operator.index(d) for d in shape)
    except TypeError:
        raise RandomArgumentError(f"fgrad.random.{fname}: {name} must be a tuple of "
                                  f"ints, got {shape!r}.") from None
    if any(d < 0 for d in dims):
        raise RandomArgumentError(f"fgrad.random.{fname}: {name} must not have negative "
                                  f"sizes, got {dims}.")
    return dims


def key(seed, *, impl=None):
    """A key from an integer seed: its words are ``seed``'s high and low 32
    bits (``seed`` taken modulo 2**64), as JAX makes them. ``seed`` may be a
    traced integer.

    >>> fgrad.random.key(42)
    array([ 0, 42], dtype=uint32)
    """
    _check_impl(impl, "key")
    if isinstance(seed, (bool, np.bool_)) or not (
            isinstance(seed, (int, np.integer)) or
            (hasattr(seed, "dtype") and get_aval(seed).dtype.kind in "iu"
             and get_aval(seed).shape == ())):
        raise RandomArgumentError(f"fgrad.random.key: seed must be an integer (or a 0-d "
                                  f"integer array), got {_describe(seed)}.")
    if isinstance(seed, (int, np.integer)):
        seed = int(seed) % (1 << 64)
        return np.array([seed >> 32, seed & _MASK32], np.uint32)
    seed = fnp.asarray(seed).astype(np.int64)
    high = fnp.bitwise_and(fnp.right_shift(seed, 32), _MASK32).astype(np.uint32)
    return fnp.stack([high, fnp.bitwise_and(seed, _MASK32).astype(np.uint32)])


def PRNGKey(seed, *, impl=None):  # noqa: N802 (jax.random's name)
    """`key` under JAX's older name (both return raw uint32 words here).

    >>> fgrad.random.PRNGKey(0)
    array([0, 0], dtype=uint32)
    """
    return key(seed, impl=impl)


def _check_impl(impl, fname):
    if impl not in (None, "threefry2x32"):
        raise RandomArgumentError(f"fgrad.random.{fname}: the only generator is "
                                  f"'threefry2x32', got impl={impl!r}.")


def split(key, num=2):
    """``num`` new keys from ``key`` (an int, or a tuple for an array of keys):
    independent streams, none equal to ``key``'s own.

    >>> fgrad.random.split(fgrad.random.key(0)).shape
    (2, 2)
    """
    key = check_key(key, "split")
    return _p.random_split(key, as_shape(num, "split", "num"))


def fold_in(key, data):
    """A new key from ``key`` and an integer ``data`` (taken modulo 2**32):
    one stream per step, example or worker without splitting in advance.
    ``data`` may be traced (a loop counter).

    >>> k = fgrad.random.key(0)
    >>> bool((fgrad.random.fold_in(k, 1) != fgrad.random.fold_in(k, 2)).any())
    True
    """
    key = check_key(key, "fold_in")
    if isinstance(data, (int, np.integer)) and not isinstance(data, (bool, np.bool_)):
        # a NumPy scalar, not an array: it joins a key on any device
        data = np.uint32(int(data) % (1 << 32))
    elif hasattr(data, "dtype") and get_aval(data).dtype.kind in "iu" \
            and get_aval(data).shape == ():
        data = fnp.asarray(data).astype(np.uint32)
    else:
        raise RandomArgumentError(f"fgrad.random.fold_in: data must be an integer (or a "
                                  f"0-d integer array), got {_describe(data)}.")
    return _p.random_fold_in(key, data)


def key_data(keys):
    """The uint32 words of ``keys`` (shape ``(..., 2)``): the keys themselves,
    as keys are their words here.

    >>> fgrad.random.key_data(fgrad.random.key(7))
    array([0, 7], dtype=uint32)
    """
    return _check_words(keys, "key_data")


def wrap_key_data(key_bits_array, *, impl=None):
    """Keys from uint32 words of shape ``(..., 2)`` (from `key_data`, or saved).

    >>> fgrad.random.wrap_key_data(np.array([0, 7], np.uint32))
    array([0, 7], dtype=uint32)
    """
    _check_impl(impl, "wrap_key_data")
    return _check_words(key_bits_array, "wrap_key_data")


def _check_words(words, fname):
    if isinstance(words, Tracer) or hasattr(words, "dtype"):
        aval = get_aval(words)
        if aval.dtype == np.uint32 and aval.shape[-1:] == (2,):
            return words
    raise RandomKeyError(f"fgrad.random.{fname}: keys are uint32 arrays of shape "
                         f"(..., 2), got {_describe(words)}.")


def bits(key, shape=(), dtype=None):
    """Uniformly random unsigned integers of ``dtype`` (uint8 to uint64; uint64
    by default, as JAX's with 64-bit types enabled).

    >>> fgrad.random.bits(fgrad.random.key(0), (2,), np.uint8).dtype
    dtype('uint8')
    """
    key = check_key(key, "bits")
    dtype = np.dtype(np.uint64 if dtype is None else dtype)
    if dtype.kind != "u":
        raise RandomArgumentError(f"fgrad.random.bits: dtype must be an unsigned integer "
                                  f"dtype, got {dtype}.")
    return _p.random_bits(key, as_shape(shape, "bits"), dtype)
