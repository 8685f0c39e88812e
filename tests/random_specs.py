"""Specs of the random primitives (``primitives/random.py``), and a reference
Threefry-2x32 written from the specification with Python integers.

Each spec draws with a key per element of a hypothesis array (the keys made
from the array's values, or split from one key), so the systematic tests map
the primitives over keys of every rank, under vmap (batched keys and
parameters), jit, the stand-in device and CuPy. References are computed one
key at a time from the scalar cipher below, independently of the array code.
"""
import numpy as np
from hypothesis import strategies as st

import fgrad.numpy as fnp
from fgrad.primitives import random as rp
from fgrad.testing.strategies import positive
from primitive_specs import NONDIFF_SPECS, SPECS, Case, _nondiff, arrays, shapes

MASK = 0xFFFFFFFF
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)


def threefry_reference(key, counter):
    """Threefry-2x32-20 of two words under two words, as the Random123 paper
    specifies it (injection every four rounds, round constants cycling)."""
    ks = [key[0], key[1], key[0] ^ key[1] ^ 0x1BD11BDA]
    x = [(counter[0] + ks[0]) & MASK, (counter[1] + ks[1]) & MASK]
    for r in range(20):
        x[0] = (x[0] + x[1]) & MASK
        rot = _ROTATIONS[r % 8]
        x[1] = ((x[1] << rot) | (x[1] >> (32 - rot))) & MASK
        x[1] ^= x[0]
        if r % 4 == 3:
            s = r // 4 + 1
            x[0] = (x[0] + ks[s % 3]) & MASK
            x[1] = (x[1] + ks[(s + 1) % 3] + s) & MASK
    return tuple(x)


def reference_words(key, n, start=0):
    """The words of counters ``start .. start + n - 1`` under one key."""
    return [threefry_reference([int(w) for w in key], ((i >> 32) & MASK, i & MASK))
            for i in range(start, start + n)]


def reference_bits32(key, n):
    return np.array([a ^ b for a, b in reference_words(key, n)], np.uint32)


def reference_uniform64(key, n):
    bits = np.array([(a << 32) | b for a, b in reference_words(key, n)], np.uint64)
    return ((bits >> np.uint64(12)) | np.uint64(0x3FF0000000000000)).view(np.float64) - 1.0


def reference_normal(key, n):
    """Box-Muller with NumPy's log, cos and sin, on the same uniforms."""
    pairs = (n + 1) // 2
    words = reference_words(key, 2 * pairs)
    bits = np.array([(a << 32) | b for a, b in words], np.uint64)
    unit = ((bits >> np.uint64(12)) | np.uint64(0x3FF0000000000000)).view(np.float64)
    radius = np.sqrt(-2.0 * np.log(2.0 - unit[:pairs]))
    angle = 2 * np.pi * (unit[pairs:] - 1.0)
    return np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])[:n]


def keys_from(x):
    """A key per element of ``x``: (floor(1000 |x|), 7)."""
    high = fnp.floor(fnp.abs(x) * 1000).astype(np.uint32)
    return fnp.stack([high, fnp.full_like(x, 7, np.uint32)], axis=-1)


def _reference_keys(x):
    return np.stack([np.floor(np.abs(x) * 1000).astype(np.uint32),
                     np.full(np.shape(x), 7, np.uint32)], axis=-1).reshape(-1, 2)


def _per_key(x, draw):
    """``draw(key)`` for each element's key, stacked in the array's shape."""
    out = [draw(k) for k in _reference_keys(x)]
    return np.array(out).reshape(np.shape(x) + np.shape(out[0]))


NONDIFF_SPECS["random_bits"] = _nondiff(
    lambda x: rp.random_bits(keys_from(x), (3,), np.uint32),
    lambda x: _per_key(x, lambda k: reference_bits32(k, 3)))
NONDIFF_SPECS["random_uniform"] = _nondiff(
    lambda x: rp.random_uniform(keys_from(x), (2,), np.float64),
    lambda x: _per_key(x, lambda k: reference_uniform64(k, 2)))
# the normals are pinned bit for bit elsewhere (test_random.py); against
# NumPy's log, cos and sin they agree to a few units in the last place
NONDIFF_SPECS["random_normal"] = _nondiff(
    lambda x: fnp.round(rp.random_normal(keys_from(x), (3,), np.float64), 9),
    lambda x: np.round(_per_key(x, lambda k: reference_normal(k, 3)), 9))
NONDIFF_SPECS["random_split"] = _nondiff(
    lambda x: rp.random_split(keys_from(x), (2,)),
    lambda x: _per_key(x, lambda k: np.array(reference_words(k, 2), np.uint32)))


def _reference_fold_in(x):
    data = np.floor(np.abs(x) * 77).astype(np.uint32)
    words = [threefry_reference([int(w) for w in k], (0, int(d)))
             for k, d in zip(_reference_keys(x), np.ravel(data))]
    return np.array(words, np.uint32).reshape(np.shape(x) + (2,))


NONDIFF_SPECS["random_fold_in"] = _nondiff(
    lambda x: rp.random_fold_in(keys_from(x), fnp.floor(fnp.abs(x) * 77).astype(np.uint32)),
    _reference_fold_in)


def _one_at_a_time(prim_call, keys, values):
    """``prim_call(key, value)`` element by element (each a draw of shape ())."""
    flat_keys = np.asarray(keys).reshape(-1, 2)
    flat = np.ravel(values)
    out = [prim_call(k, np.asarray(v)) for k, v in zip(flat_keys, flat)]
    return np.array(out).reshape(np.shape(values))


# rates on both sides of 10, where Knuth's method gives way to Hormann's
NONDIFF_SPECS["random_poisson"] = _nondiff(
    lambda x: rp.random_poisson(keys_from(x), fnp.abs(x) * 8, np.int64),
    lambda x: _one_at_a_time(lambda k, v: rp.random_poisson(k, v, np.int64),
                             np.asarray(keys_from(x)), np.abs(x) * 8))

# The sampler's own finite differences (the same key, a nudged) follow
# Marsaglia and Tsang's transformation, not the quantile the implicit
# gradient follows; test_random.py checks the gradient against the quantile.
SPECS["random_gamma"] = shapes().flatmap(lambda s: arrays(s, positive(0.2, 4.0))).map(
    lambda a: Case(lambda a: rp.random_gamma(keys_from(a), a), (a,), lambda a: _one_at_a_time(
        rp.random_gamma, np.asarray(keys_from(a)), a), order=0,
        float32=False))    # (keys from float32 values differ; test_random.py checks float32)
SPECS["random_gamma_grad"] = shapes().flatmap(
    lambda s: st.tuples(arrays(s, positive(0.2, 4.0)), arrays(s, positive(0.1, 8.0)))).map(
    lambda ax: Case(rp.random_gamma_grad, ax, order=0))
