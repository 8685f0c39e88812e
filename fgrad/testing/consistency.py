"""Checking that transformations agree: `check_jit` (jit against eager) and
`check_vmap` (vmap against a Python loop over examples), for values and for
reverse-mode derivatives.
"""
import numpy as np

from fgrad.core.trace import get_aval
from fgrad.core.tree import tree_flatten, tree_unflatten
from fgrad.testing.gradients import GradientCheckError, random_like, to_host
from fgrad.transforms.differentiation import vjp
from fgrad.transforms.jit import jit
from fgrad.transforms.vmap import vmap


def _default_tolerances(leaves):
    low = any(get_aval(x).dtype in (np.float16, np.float32, np.complex64) for x in leaves)
    return (1e-4, 1e-4) if low else (1e-9, 1e-7)


def _same(got, want, what, atol, rtol):
    got_leaves, got_tree = tree_flatten(got)
    want_leaves, want_tree = tree_flatten(want)
    if got_tree != want_tree:
        raise GradientCheckError(f"{what}: output structure {got_tree} != {want_tree}")
    for j, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        g, w = to_host(g), to_host(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            raise GradientCheckError(
                f"{what} (output leaf {j}): {g.dtype}{list(g.shape)} != "
                f"{w.dtype}{list(w.shape)}")
        if not np.allclose(g, w, atol=atol, rtol=rtol, equal_nan=True):
            raise GradientCheckError(f"{what} (output leaf {j}): {g!r} != {w!r} "
                                     f"(atol={atol}, rtol={rtol})")


def _differentiable(leaves):
    return bool(leaves) and all(get_aval(x).dtype.kind in "fc" for x in leaves)


def cotangent_like(out, rng):
    """A random pytree shaped and typed like ``out`` (a cotangent for it)."""
    leaves, tree = tree_flatten(out)
    return tree_unflatten(tree, random_like(leaves, rng))


def check_jit(f, args, atol=None, rtol=None, seed=0):
    """Check that ``jit(f)`` gives ``f``'s values, shapes and dtypes at ``args``,
    and, for floating-point inputs and outputs, the same VJP along a random
    cotangent. Raises `GradientCheckError` naming the first difference.

    >>> import numpy as np, fgrad.numpy as fnp
    >>> check_jit(lambda x: fnp.sum(fnp.sin(x) ** 2), (np.array([0.5, 1.0]),))
    """
    args = tuple(args)
    leaves = tree_flatten(args)[0]
    d_atol, d_rtol = _default_tolerances(leaves)
    atol, rtol = d_atol if atol is None else atol, d_rtol if rtol is None else rtol
    name = getattr(f, "__name__", repr(f))
    want = f(*args)
    _same(jit(f)(*args), want, f"jit({name}) vs {name}", atol, rtol)
    if not (_differentiable(leaves) and _differentiable(tree_flatten(want)[0])):
        return
    ct = cotangent_like(want, np.random.default_rng(seed))
    _same(vjp(jit(f), *args)[1](ct), vjp(f, *args)[1](ct),
          f"vjp of jit({name}) vs vjp of {name}", atol, rtol)


def _stack(trees):
    """One pytree whose leaves stack the matching leaves of ``trees``."""
    flat = [tree_flatten(t) for t in trees]
    leaves, tree = flat[0]
    return tree_unflatten(tree, [np.stack([to_host(ls[i]) for ls, _ in flat])
                                 for i in range(len(leaves))])


def check_vmap(f, examples, atol=None, rtol=None, seed=0):
    """Check ``vmap(f)`` over a batch stacking ``examples`` (argument tuples with
    equal shapes) against calling ``f`` on each example, for values and, for
    floating-point inputs and outputs, for a VJP along a random cotangent.

    >>> import numpy as np, fgrad.numpy as fnp
    >>> check_vmap(fnp.cumsum, [(np.array([1.0, 2.0]),), (np.array([3.0, 5.0]),)])
    """
    examples = [tuple(ex) for ex in examples]
    leaves = tree_flatten(examples[0])[0]
    d_atol, d_rtol = _default_tolerances(leaves)
    atol, rtol = d_atol if atol is None else atol, d_rtol if rtol is None else rtol
    name = getattr(f, "__name__", repr(f))
    batch = _stack(examples)
    outs = [f(*ex) for ex in examples]
    want = _stack(outs)
    _same(vmap(f)(*batch), want, f"vmap({name}) vs a loop of {name}", atol, rtol)
    if not (_differentiable(leaves) and _differentiable(tree_flatten(outs[0])[0])):
        return
    ct = cotangent_like(want, np.random.default_rng(seed))
    ct_leaves, out_tree = tree_flatten(ct)
    looped = [vjp(f, *ex)[1](tree_unflatten(out_tree, [c[k] for c in ct_leaves]))
              for k, ex in enumerate(examples)]
    _same(vjp(vmap(f), *batch)[1](ct), _stack(looped),
          f"vjp of vmap({name}) vs a loop of vjps of {name}", atol, rtol)
