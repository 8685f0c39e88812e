"""Reductions over axes: sum, max, min, prod (and mean, built on sum)."""
import math

import numpy as np

from fgrad.backend import array_module
from fgrad.core import Primitive, ShapedArray, get_aval

from .base import normalize_axis, result_dtype
from .batching import reduction_batch_rule

FAMILY = "primitives/reductions.py"


def _reduced_shape(shape, axis, keepdims):
    if keepdims:
        return tuple(1 if i in axis else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axis)


def _reduction(name):
    np_fn = getattr(np, name)

    def impl(x, axis, keepdims):
        return getattr(array_module(x), name)(x, axis=axis, keepdims=keepdims)

    def abstract(x, axis, keepdims):
        if name in ("max", "min") and any(x.shape[a] == 0 for a in axis):
            raise ValueError(f"{name} of an empty axis has no identity: pass a "
                             "non-empty array")
        return ShapedArray(_reduced_shape(x.shape, axis, keepdims),
                           result_dtype(lambda d: np_fn(np.reshape(d, (1,))), [x]))
    prim = Primitive(name, impl, abstract, family=FAMILY)
    prim.batch = reduction_batch_rule(prim)
    return prim


def keepdims_like(ct, x, axis, keepdims):
    """Re-insert the reduced axes of ``ct`` so it broadcasts against ``x``."""
    if keepdims:
        return ct
    return reshape(ct, _reduced_shape(get_aval(x).shape, axis, True))


def _broadcast_back(ct, x, axis, keepdims):
    return broadcast_to(keepdims_like(ct, x, axis, keepdims), get_aval(x).shape)


sum_p = _reduction("sum")
sum_p.def_vjp(lambda ct, ans, x, axis, keepdims: _broadcast_back(ct, x, axis, keepdims),
              reads=[set()])
sum_p.def_jvp(lambda t, ans, x, axis, keepdims: sum_(t, axis, keepdims))


def _extremum_weights(ans, x, axis, keepdims):
    # Every element equal to the extremum shares the derivative equally, so a
    # tie between k elements sends 1/k of the cotangent to each.
    hit = convert_element_type(equal(x, keepdims_like(ans, x, axis, keepdims)),
                               get_aval(ans).dtype)
    return hit / sum_(hit, axis, keepdims=True)


def _extremum_rules(prim):
    prim.def_vjp(lambda ct, ans, x, axis, keepdims:
                 keepdims_like(ct, x, axis, keepdims)
                 * _extremum_weights(ans, x, axis, keepdims), reads=[{0, "ans"}])
    prim.def_jvp(lambda t, ans, x, axis, keepdims:
                 sum_(t * _extremum_weights(ans, x, axis, keepdims), axis, keepdims))


max_p = _reduction("max")
min_p = _reduction("min")
_extremum_rules(max_p)
_extremum_rules(min_p)

prod_p = _reduction("prod")
# d prod / d x_i = prod / x_i: exact for nonzero inputs. Inputs containing zeros
# need the product of the other elements (a cumprod formulation, to come with
# cumprod); the property tests draw nonzero inputs for now.
prod_p.def_vjp(lambda ct, ans, x, axis, keepdims:
               _broadcast_back(ct * ans, x, axis, keepdims) / x, reads=[{0, "ans"}])
prod_p.def_jvp(lambda t, ans, x, axis, keepdims:
               sum_(t * keepdims_like(ans, x, axis, keepdims) / x, axis, keepdims))


def _reducer(prim):
    def reduce(x, axis=None, keepdims=False):
        return prim.bind(x, axis=normalize_axis(axis, get_aval(x).ndim),
                         keepdims=bool(keepdims))
    reduce.__name__ = prim.name
    return reduce


sum_ = _reducer(sum_p)
max_ = _reducer(max_p)
min_ = _reducer(min_p)
prod = _reducer(prod_p)


def mean(x, axis=None, keepdims=False):
    """Arithmetic mean: ``sum / count``, in float64 for integer inputs."""
    aval = get_aval(x)
    axes = normalize_axis(axis, aval.ndim)
    count = math.prod(aval.shape[a] for a in axes)
    if aval.dtype.kind not in "fc":
        x = convert_element_type(x, np.float64)
    total = sum_(x, axes, keepdims)
    return total / count if count else total * np.nan


# Families use each other's functions in their rules; importing them last
# makes the cycle harmless (every name above exists by then).
from .elementwise import convert_element_type, equal  # noqa: E402
from .shape import broadcast_to, reshape  # noqa: E402
