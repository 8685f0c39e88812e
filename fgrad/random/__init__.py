"""Random numbers from explicit keys, right under jit, vmap and grad.

A key is a ``uint32`` array of shape ``(2,)``: ``key = fgrad.random.key(0)``.
Every sampler takes a key and returns the same numbers for the same key,
eagerly, under `fgrad.jit` (the draw happens on every call, at run time) and
under `fgrad.vmap` (mapping over ``split(key, n)`` gives each example its
own stream). Split a key (or `fold_in` a counter) wherever fresh numbers
are needed; never use one key twice for numbers that should differ. The
names, signatures and argument order are ``jax.random``'s, and a key's
numbers are pinned by tests, so they do not change between releases.

>>> import fgrad
>>> key, sub = fgrad.random.split(fgrad.random.key(0))
>>> fgrad.random.normal(sub, (2, 3)).shape
(2, 3)

The generator is Threefry-2x32 (as JAX's): bits and uniforms equal JAX's for
the same key words. See docs/random.md.
"""
from fgrad.random._continuous import cauchy as cauchy
from fgrad.random._continuous import exponential as exponential
from fgrad.random._continuous import gumbel as gumbel
from fgrad.random._continuous import laplace as laplace
from fgrad.random._continuous import logistic as logistic
from fgrad.random._continuous import multivariate_normal as multivariate_normal
from fgrad.random._continuous import normal as normal
from fgrad.random._continuous import truncated_normal as truncated_normal
from fgrad.random._continuous import uniform as uniform
from fgrad.random._discrete import bernoulli as bernoulli
from fgrad.random._discrete import categorical as categorical
from fgrad.random._discrete import choice as choice
from fgrad.random._discrete import permutation as permutation
from fgrad.random._discrete import poisson as poisson
from fgrad.random._discrete import rademacher as rademacher
from fgrad.random._discrete import randint as randint
from fgrad.random._gamma import beta as beta
from fgrad.random._gamma import dirichlet as dirichlet
from fgrad.random._gamma import gamma as gamma
from fgrad.random._gamma import t as t
from fgrad.random._keys import PRNGKey as PRNGKey
from fgrad.random._keys import bits as bits
from fgrad.random._keys import fold_in as fold_in
from fgrad.random._keys import key as key
from fgrad.random._keys import key_data as key_data
from fgrad.random._keys import split as split
from fgrad.random._keys import wrap_key_data as wrap_key_data
from fgrad.random._stateful import numpy_generator as numpy_generator

__all__ = [
    "key", "PRNGKey", "split", "fold_in", "key_data", "wrap_key_data", "bits",
    "uniform", "normal", "randint", "bernoulli", "rademacher", "categorical", "choice",
    "permutation", "truncated_normal", "exponential", "gamma", "beta", "dirichlet",
    "poisson", "multivariate_normal", "gumbel", "laplace", "logistic", "t", "cauchy",
    "numpy_generator",
]
