"""Checking a user's `fgrad.custom_vjp` rule for the usual mistakes:
`check_custom_vjp`.

A ``bwd`` rule is called by reverse mode with one cotangent per output and must
return one cotangent per argument, shaped and typed like that argument, and
linear in the output cotangent. Each broken promise gets a message that names
the mistake, before the values are compared with finite differences.
"""
import numpy as np

from fgrad.core.trace import get_aval
from fgrad.core.tree import tree_flatten, tree_unflatten
from fgrad.testing.consistency import cotangent_like
from fgrad.testing.gradients import GradientCheckError, check_grads, to_host
from fgrad.transforms.custom import custom_vjp


class CustomRuleMistake(GradientCheckError):
    """`check_custom_vjp` found a mistake in a custom_vjp rule (named in the message)."""


def _check_entry(name, i, arg, ct):
    """One argument's cotangent: structure, shape (unbroadcast) and dtype."""
    arg_leaves, arg_tree = tree_flatten(arg)
    ct_leaves, ct_tree = tree_flatten(ct)
    if arg_tree != ct_tree:
        raise CustomRuleMistake(
            f"{name}: bwd's cotangent for argument {i} has structure {ct_tree}, but the "
            f"argument has structure {arg_tree}: return one cotangent per argument "
            "leaf, in the argument's own structure.")
    for a, c in zip(arg_leaves, ct_leaves):
        a_aval, c_shape = get_aval(a), np.shape(to_host(c))
        if c_shape != a_aval.shape:
            broadcast = np.broadcast_shapes(a_aval.shape, c_shape) == c_shape \
                if _broadcastable(a_aval.shape, c_shape) else False
            hint = (" This is the shape of the broadcast result: the argument was "
                    "broadcast in the forward pass, so bwd must sum the cotangent over "
                    "the broadcast axes (forgot to unbroadcast)." if broadcast else "")
            raise CustomRuleMistake(
                f"{name}: bwd's cotangent for argument {i} has shape {c_shape}, but the "
                f"argument has shape {a_aval.shape}.{hint}")
        c_dtype = to_host(c).dtype
        if a_aval.dtype.kind in "fc" and c_dtype != a_aval.dtype:
            raise CustomRuleMistake(
                f"{name}: bwd's cotangent for argument {i} has dtype {c_dtype}, but the "
                f"argument has dtype {a_aval.dtype}: cast it back "
                f"(ct.astype({a_aval.dtype.name!r})), e.g. after mixing in a float64 "
                "constant.")


def _broadcastable(a, b):
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


def _linear_combination(a, x, b, y):
    x_leaves, tree = tree_flatten(x)
    y_leaves = tree_flatten(y)[0]
    return tree_unflatten(tree, [a * to_host(p) + b * to_host(q)
                                 for p, q in zip(x_leaves, y_leaves)])


def _close(got, want, atol, rtol):
    got_leaves, want_leaves = tree_flatten(got)[0], tree_flatten(want)[0]
    return all(np.allclose(to_host(g), to_host(w), atol=atol, rtol=rtol)
               for g, w in zip(got_leaves, want_leaves))


def _zeros_for_none(cts, args):
    return tuple(tree_unflatten(tree_flatten(a)[1],
                                [np.zeros_like(to_host(x)) for x in tree_flatten(a)[0]])
                 if ct is None else ct for ct, a in zip(cts, args))


def check_custom_vjp(f, args, atol=1e-6, rtol=1e-6, seed=0):
    """Check the rule of a `fgrad.custom_vjp` function ``f`` at ``args``.

    Calls ``fwd`` and ``bwd`` directly and raises `CustomRuleMistake` naming
    the mistake: ``fwd`` not returning ``(output, residuals)`` or an output that
    differs from ``f``'s; ``bwd`` returning the wrong number of cotangents, a
    cotangent of the wrong structure, shape (naming a forgotten unbroadcast) or
    dtype; a ``bwd`` that is not linear in the output cotangent. Then it checks
    the rule's values against finite differences with `check_grads` (reverse
    mode, first order).

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> @fgrad.custom_vjp
    ... def scale(x, y):
    ...     return x * y
    >>> scale.defvjp(lambda x, y: (x * y, (x, y)),
    ...              lambda res, ct: (ct * res[1], ct * res[0]))   # x was broadcast
    >>> check_custom_vjp(scale, (np.array([1.0, 2.0]), np.ones((3, 2))))
    Traceback (most recent call last):
    ...
    fgrad.testing.custom_rules.CustomRuleMistake: scale: bwd's cotangent for argument 0
    has shape (3, 2), but the argument has shape (2,). ... (forgot to unbroadcast).
    """
    if not isinstance(f, custom_vjp):
        raise TypeError(f"check_custom_vjp expects a function made by fgrad.custom_vjp, "
                        f"got {f!r}")
    name = f.__name__
    if f.fwd is None:
        raise CustomRuleMistake(f"{name}: no rule was given; call {name}.defvjp(fwd, bwd).")
    args = tuple(args)
    pair = f.fwd(*args)
    if not (isinstance(pair, tuple) and len(pair) == 2):
        raise CustomRuleMistake(
            f"{name}: fwd returned {type(pair).__name__}, but it must return a pair "
            "(output, residuals) -- the residuals are what bwd receives.")
    out, residuals = pair
    if not _close(out, f.fun(*args), atol, rtol):
        raise CustomRuleMistake(f"{name}: fwd's output differs from the function's own "
                                "output: fwd must compute the same value.")
    rng = np.random.default_rng(seed)
    ct1, ct2 = cotangent_like(out, rng), cotangent_like(out, rng)
    cts1 = f.bwd(residuals, ct1)
    if not isinstance(cts1, tuple) or len(cts1) != len(args):
        got = (f"a tuple of {len(cts1)}" if isinstance(cts1, tuple)
               else f"a {type(cts1).__name__}")
        raise CustomRuleMistake(
            f"{name}: bwd returned {got}, but {name} takes {len(args)} argument(s): "
            "return a tuple with one cotangent per positional argument (None for an "
            "argument with no derivative), e.g. (ct_x,) for one argument.")
    for i, (arg, ct) in enumerate(zip(args, cts1)):
        if ct is not None:
            _check_entry(name, i, arg, ct)
    cts1 = _zeros_for_none(cts1, args)
    cts2 = _zeros_for_none(f.bwd(residuals, ct2), args)
    combined = _zeros_for_none(
        f.bwd(residuals, _linear_combination(2.0, ct1, -3.0, ct2)), args)
    if not _close(combined, _linear_combination(2.0, cts1, -3.0, cts2), atol, rtol):
        raise CustomRuleMistake(
            f"{name}: bwd is not linear in the output cotangent: bwd(2 u - 3 v) != "
            "2 bwd(u) - 3 bwd(v). bwd must multiply the cotangent by the Jacobian "
            "(from the residuals) and do nothing else to it -- no clipping, squaring or "
            "adding constants.")
    check_grads(f, args, order=1, modes=("rev",), atol=atol * 10, rtol=rtol * 10,
                seed=seed)
