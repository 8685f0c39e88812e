"""The gamma family: gamma, beta, dirichlet and Student's t.

Gamma samples come from `fgrad.primitives.random.random_gamma`, whose
derivative in the shape parameter is the implicit reparameterization
gradient (Figurnov et al., "Implicit reparameterization gradients", 2018):
the sample moves along the distribution's quantile at fixed probability.
Beta, Dirichlet and t are arithmetic on gamma (and normal) samples, so their
shape parameters are differentiable the same way.
"""
from fgrad import numpy as fnp
from fgrad.core.errors import RandomArgumentError
from fgrad.core.trace import get_aval
from fgrad.primitives import random as _p
from fgrad.random._continuous import as_param, broadcast_param, float_dtype, normal, param_shape
from fgrad.random._keys import as_shape, check_key, split


def gamma(key, a, shape=None, dtype=float):
    """Gamma samples of shape ``a`` and scale 1 (multiply for another scale),
    differentiable in ``a``.

    >>> x = fgrad.random.gamma(fgrad.random.key(0), 2.0, (1000,))
    >>> bool(1.8 < x.mean() < 2.2)
    True
    """
    key = check_key(key, "gamma")
    dtype = float_dtype(dtype, "gamma")
    a = as_param(a, dtype)
    shape = param_shape("gamma", shape, a)
    return _p.random_gamma(key, broadcast_param(key, a, shape, dtype))


def beta(key, a, b, shape=None, dtype=float):
    """Beta samples: ``x / (x + y)`` for gamma samples ``x`` of shape ``a`` and
    ``y`` of shape ``b``; differentiable in both.

    >>> x = fgrad.random.beta(fgrad.random.key(0), 2.0, 3.0, (4,))
    >>> bool(((0 < x) & (x < 1)).all())
    True
    """
    key = check_key(key, "beta")
    dtype = float_dtype(dtype, "beta")
    a, b = as_param(a, dtype), as_param(b, dtype)
    shape = param_shape("beta", shape, a, b)
    key_a, key_b = split(key)
    x = _p.random_gamma(key_a, broadcast_param(key, a, shape, dtype))
    y = _p.random_gamma(key_b, broadcast_param(key, b, shape, dtype))
    return x / (x + y)


def dirichlet(key, alpha, shape=None, dtype=float):
    """Dirichlet samples of concentrations ``alpha`` (last axis): gamma samples
    normalised to sum to one. ``shape`` is the batch shape,
    ``alpha.shape[:-1]`` by default; samples have ``shape + alpha.shape[-1:]``.

    >>> x = fgrad.random.dirichlet(fgrad.random.key(0), np.ones(3), (2,))
    >>> x.shape, np.allclose(x.sum(-1), 1.0)
    ((2, 3), True)
    """
    key = check_key(key, "dirichlet")
    dtype = float_dtype(dtype, "dirichlet")
    alpha = as_param(alpha, dtype)
    alpha_shape = get_aval(alpha).shape
    if not alpha_shape:
        raise RandomArgumentError("fgrad.random.dirichlet: alpha must have at least one "
                                  "axis (the categories).")
    batch = alpha_shape[:-1] if shape is None else as_shape(shape, "dirichlet")
    shape = param_shape("dirichlet", batch + alpha_shape[-1:], alpha)
    x = _p.random_gamma(key, broadcast_param(key, alpha, shape, dtype))
    return x / fnp.sum(x, axis=-1, keepdims=True)


def t(key, df, shape=None, dtype=float):
    """Student's t samples with ``df`` degrees of freedom: ``z sqrt(df / (2 g))``
    for a normal ``z`` and a gamma ``g`` of shape ``df / 2``; differentiable
    in ``df``.

    >>> fgrad.random.t(fgrad.random.key(0), 3.0, (4,)).shape
    (4,)
    """
    key = check_key(key, "t")
    dtype = float_dtype(dtype, "t")
    df = as_param(df, dtype)
    shape = param_shape("t", shape, df)
    key_normal, key_gamma = split(key)
    z = normal(key_normal, shape, dtype)
    half_df = df / 2
    g = _p.random_gamma(key_gamma, broadcast_param(key, half_df, shape, dtype))
    return z * fnp.sqrt(half_df / g)
