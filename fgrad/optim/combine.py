"""Combining transformations: one after another (`chain`), on part of the
parameters (`masked`), or a different one per group of parameters
(`multi_transform`), as in optax.

>>> import numpy as np
>>> from fgrad.optim import transforms
>>> opt = chain(transforms.clip(1.0), transforms.scale(-0.1))
>>> opt.update(np.array([5.0, -0.5]), opt.init(np.zeros(2)))[0]
array([-0.1 ,  0.05])
"""
from typing import Any, NamedTuple

from fgrad.core.errors import NNArgumentError
from fgrad.optim.base import GradientTransformation
from fgrad.core.tree import tree_leaves, tree_map

__all__ = ["chain", "masked", "MaskedNode", "MaskedState", "multi_transform", "partition",
           "PartitionState"]


def chain(*transforms, max_norm=None):
    """Apply ``transforms`` in order: each one's updates are the next one's input.
    The state is the tuple of their states.

    >>> from fgrad.optim import transforms
    >>> opt = chain(transforms.scale(2.0), transforms.scale(-0.5))
    >>> opt.update(np.array([3.0]), opt.init(np.zeros(1)))[0]
    array([-3.])
    """
    if max_norm is not None:
        # the keyword of fgrad's chain before it followed optax: a clear error
        # beats Python's "unexpected keyword argument"
        raise NNArgumentError(f"chain takes transformations only, as in optax: write "
                              f"chain(clip_by_global_norm({max_norm!r}), optimizer) instead "
                              f"of chain(optimizer, max_norm={max_norm!r})")
    for t in transforms:
        if not isinstance(t, GradientTransformation):
            raise NNArgumentError(f"chain: every argument must be a GradientTransformation "
                                  f"(an optimizer or a transform), got {t!r}")

    def init(params):
        return tuple(t.init(params) for t in transforms)

    def update(updates, state, params=None):
        if len(state) != len(transforms):
            raise NNArgumentError(f"chain: the state holds {len(state)} states for "
                                  f"{len(transforms)} transformations; make it with this "
                                  "chain's init")
        new_state = []
        for t, s in zip(transforms, state):
            updates, s = t.update(updates, s, params)
            new_state.append(s)
        return updates, tuple(new_state)
    return GradientTransformation(init, update)


class MaskedNode(NamedTuple):
    """Stands where `masked` left a parameter out: a node without leaves, so tree
    maps pass over it."""


class MaskedState(NamedTuple):
    """The state of the inner transformation of `masked`, over the masked-in leaves."""

    inner_state: Any


def _mask_of(mask, tree):
    return mask(tree) if callable(mask) else mask


def _keep(mask_tree, tree):
    return tree_map(lambda m, sub: sub if m else MaskedNode(), mask_tree, tree)


def masked(inner, mask):
    """Apply ``inner`` to the leaves where ``mask`` is True and pass the others
    through. ``mask`` is a pytree of Python bools shaped like the parameters (or a
    prefix of them), or a function of the parameters returning one; it is read
    while tracing, so it must not depend on array values.

    >>> from fgrad.optim import transforms
    >>> params = {"w": np.ones(1), "b": np.ones(1)}
    >>> opt = masked(transforms.scale(0.0), {"w": True, "b": False})
    >>> opt.update(params, opt.init(params))[0]
    {'b': array([1.]), 'w': array([0.])}
    """
    def init(params):
        return MaskedState(inner.init(_keep(_mask_of(mask, params), params)))

    def update(updates, state, params=None):
        mask_tree = _mask_of(mask, updates)
        inner_params = None if params is None else _keep(mask_tree, params)
        new, inner_state = inner.update(_keep(mask_tree, updates), state.inner_state,
                                        inner_params)
        merged = tree_map(lambda m, n, old: n if m else old, mask_tree, new, updates)
        return merged, MaskedState(inner_state)
    return GradientTransformation(init, update)


class PartitionState(NamedTuple):
    """The states of `multi_transform`'s transformations, by label."""

    inner_states: dict


def multi_transform(transforms, param_labels):
    """A different transformation per group of parameters: ``param_labels`` is a
    pytree of labels shaped like the parameters (or a prefix, or a function of
    the parameters returning one), and ``transforms`` maps each label to its
    transformation. optax also calls it ``partition``.

    >>> from fgrad.optim import transforms
    >>> params = {"w": np.ones(1), "b": np.ones(1)}
    >>> opt = multi_transform({"fast": transforms.scale(-1.0), "slow": transforms.scale(-0.1)},
    ...                       {"w": "fast", "b": "slow"})
    >>> opt.update(params, opt.init(params))[0]
    {'b': array([-0.1]), 'w': array([-1.])}
    """
    def group(label):
        return masked(transforms[label],
                      lambda tree: tree_map(lambda x: x == label, _mask_of(param_labels, tree)))

    def init(params):
        labels = set(tree_leaves(_mask_of(param_labels, params)))
        missing = labels - set(transforms)
        if missing:
            raise NNArgumentError(f"multi_transform: no transformation for the labels "
                                  f"[{', '.join(sorted(map(repr, missing)))}]; transforms "
                                  f"has [{', '.join(sorted(map(repr, transforms)))}]")
        return PartitionState({label: group(label).init(params) for label in transforms})

    def update(updates, state, params=None):
        inner_states = {}
        for label in transforms:
            updates, inner_states[label] = group(label).update(
                updates, state.inner_states[label], params)
        return updates, PartitionState(inner_states)
    return GradientTransformation(init, update)


partition = multi_transform
