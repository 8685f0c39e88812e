"""User-defined primitives, with autograd's rule conventions.

`primitive` turns a function over backend arrays into a row of the same dispatch
table the built-in primitives use; `defvjp` and `defjvp` fill in its columns. The
rules are written with fgrad functions, so they differentiate again.
"""
import functools

import numpy as np

from fgrad.core.errors import CustomRuleError
from fgrad.core.trace import Primitive, get_aval, primitive_table


def primitive(fun):
    """Make ``fun`` a primitive: its body sees arrays, never tracers.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> @fgrad.primitive
    ... def cube(x):
    ...     return x ** 3
    >>> fgrad.defvjp(cube, lambda ans, x: lambda ct: 3 * ct * x ** 2)
    >>> fgrad.defjvp(cube, lambda x_dot, ans, x: 3 * x_dot * x ** 2)
    >>> float(fgrad.grad(cube)(2.0))
    12.0
    """
    name = f"{fun.__module__}.{fun.__qualname__}"
    prim = Primitive(name, impl=fun, abstract=_abstract_by_evaluation(fun),
                     register=False)
    # Re-running a definition (a notebook cell) replaces the earlier row.
    primitive_table[name] = prim

    @functools.wraps(fun)
    def bound(*args, **kwargs):
        return prim.bind(*args, **kwargs)
    bound.primitive = prim
    return bound


def _abstract_by_evaluation(fun):
    # A user primitive has no shape rule of its own: evaluating it on arrays of
    # ones of the right shapes and dtypes gives the output's shape and dtype.
    def abstract(*avals, **params):
        dummies = [np.ones(a.shape, a.dtype) for a in avals]
        with np.errstate(all="ignore"):
            out = fun(*dummies, **params)
        return get_aval(out)
    return abstract


def _prim(fun, what):
    prim = getattr(fun, "primitive", None)
    if not isinstance(prim, Primitive):
        raise TypeError(f"{what} expects a function made by @fgrad.primitive, got "
                        f"{fun!r}; decorate it with @fgrad.primitive first.")
    return prim


def defvjp(fun, *makers):
    """Register VJP makers, one per positional argument (autograd's convention).

    ``maker(ans, *args, **kwargs)`` returns ``ct -> ct_arg``; ``None`` declares a
    zero derivative for that argument. See `primitive` for an example.
    """
    prim = _prim(fun, "defvjp")

    def make_rule(i, maker):
        if maker is None:
            return lambda ct, ans, *args, **kwargs: None

        def rule(ct, ans, *args, **kwargs):
            return _checked(maker(ans, *args, **kwargs)(ct), args[i], "VJP", i, prim)
        return rule
    prim.def_vjp(*[make_rule(i, m) for i, m in enumerate(makers)])


def defjvp(fun, *rules):
    """Register JVP rules, one per positional argument (autograd's convention).

    ``rule(x_dot, ans, *args, **kwargs)`` returns the output tangent due to
    argument's tangent ``x_dot``; ``None`` declares a zero derivative.
    """
    prim = _prim(fun, "defjvp")

    def make_rule(i, user_rule):
        if user_rule is None:
            return lambda x_dot, ans, *args, **kwargs: None

        def rule(x_dot, ans, *args, **kwargs):
            return _checked(user_rule(x_dot, ans, *args, **kwargs), ans, "JVP", i,
                            prim)
        return rule
    prim.def_jvp(*[make_rule(i, r) for i, r in enumerate(user_rules)]
                 if (user_rules := rules) else [])


def _checked(value, like, kind, i, prim):
    got, want = get_aval(value), get_aval(like)
    if got.shape != want.shape:
        target = f"argument {i}" if kind == "VJP" else "the output"
        raise CustomRuleError(
            f"the {kind} rule of primitive {prim.name!r} for argument {i} returned "
            f"shape {got.shape}, but {target} has shape {want.shape}. Sum over "
            "broadcast dimensions (or broadcast) to match.")
    if got.dtype != want.dtype and not got.weak_type and want.dtype.kind in "fc":
        value = value.astype(want.dtype)
    return value


def defbatch(fun, rule):
    """Register a batching rule for a user primitive, used by `fgrad.vmap`.

    ``rule(args, dims, **kwargs) -> (out, out_dim)``: ``dims`` holds, per
    positional argument, the axis its examples lie along (``None`` for an
    argument every example shares); the rule computes all examples at once
    (usually by calling the primitive itself on the whole batch) and says
    which axis of ``out`` holds them (``None`` if every example's output is
    the same). Without a rule, vmap calls the primitive once per example and
    warns.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> @fgrad.primitive
    ... def row_sums(x):
    ...     return x.sum(axis=-1)
    >>> def row_sums_batch(args, dims):
    ...     (x,), (d,) = args, dims
    ...     # put the examples first, where summing the last axis keeps them
    ...     x = fnp.transpose(x, [d] + [i for i in range(x.ndim) if i != d])
    ...     return row_sums(x), 0
    >>> fgrad.defbatch(row_sums, row_sums_batch)
    >>> fgrad.vmap(row_sums)(np.ones((4, 2, 3))).shape
    (4, 2)
    """
    prim = _prim(fun, "defbatch")

    def checked(args, dims, **kwargs):
        result = rule(args, dims, **kwargs)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise CustomRuleError(
                f"the batching rule of primitive {prim.name!r} must return a pair "
                f"(out, out_dim), got {type(result).__name__}.")
        out, out_dim = result
        if out_dim is not None:
            ndim = get_aval(out).ndim
            if not isinstance(out_dim, int) or not 0 <= out_dim < ndim:
                raise CustomRuleError(
                    f"the batching rule of primitive {prim.name!r} returned out_dim="
                    f"{out_dim!r}, which is not an axis of its output of rank {ndim}.")
        return out, out_dim
    prim.batch = checked

