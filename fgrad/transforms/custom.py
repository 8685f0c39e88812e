"""`custom_vjp` and `custom_jvp`: functions whose derivative the user supplies.

A decorated function is called on flattened pytree leaves. With no tracer among
them it is ordinary Python; otherwise the innermost trace decides what the call
means (`Trace.process_custom_vjp` / `process_custom_jvp`). User rules are checked
where they return, so a wrong count, structure, shape or dtype is reported against
the rule that produced it, with the offending index.
"""
import functools

from fgrad.core.errors import CustomRuleError
from fgrad.core.trace import get_aval, is_zero
from fgrad.core.tree import tree_flatten, tree_unflatten
from fgrad.interpreters.custom_rules import top_trace


class _Flat:
    """Calls a user function on flat leaves, remembering its output structure."""

    def __init__(self, fun, in_tree):
        self.fun = fun
        self.in_tree = in_tree
        self.out_tree = None

    def args(self, leaves):
        return tree_unflatten(self.in_tree, list(leaves))

    def flatten_out(self, out):
        leaves, tree = tree_flatten(out)
        self.out_tree = tree
        return tuple(leaves)


class custom_vjp:
    """Give a function a hand-written reverse-mode rule.

    >>> import fgrad, fgrad.numpy as fnp
    >>> @fgrad.custom_vjp
    ... def clip_gradient(x):
    ...     return x
    >>> def fwd(x):
    ...     return x, None                  # (output, residuals for bwd)
    >>> def bwd(residuals, ct):
    ...     return (fnp.minimum(fnp.maximum(ct, -1.0), 1.0),)
    >>> clip_gradient.defvjp(fwd, bwd)
    >>> float(fgrad.grad(lambda x: 10 * clip_gradient(x))(2.0))
    1.0

    ``bwd(residuals, ct)`` returns a tuple with one entry per positional argument
    (``None`` for a zero cotangent); each entry must match its argument's
    structure, shapes and dtypes. Forward mode through a custom_vjp function is an
    error: define `custom_jvp` if you need both. The error's advice is for the
    function's author; a library whose function is reverse mode only by design
    says why to its callers with ``reverse_only`` (a sentence), and the error
    then tells them to use `jacrev`, `grad` or `vjp`:

    >>> from functools import partial
    >>> @partial(fgrad.custom_vjp, reverse_only="its rule is an adjoint solve")
    ... def solve(x):
    ...     return x
    >>> solve.defvjp(fwd, lambda residuals, ct: (ct,))
    >>> fgrad.jacfwd(solve)(1.0)
    Traceback (most recent call last):
    ...
    fgrad.errors.MissingRuleError: forward mode (jvp, jacfwd, hessian) reached 'solve', \
which is differentiated in reverse mode only: its rule is an adjoint solve. Use \
fgrad.jacrev for its Jacobian, or fgrad.grad or fgrad.vjp, instead.

    With ``jvp_of_fun=True`` forward mode differentiates the function itself,
    through its own operations, and only reverse mode uses the rules: for a
    function whose operations forward mode handles but whose reverse mode
    needs a rule of its own (a staged `fgrad.lax.while_loop`, a solve that
    replays from checkpoints, as `fgrad.ode.solve` does):

    >>> @partial(fgrad.custom_vjp, jvp_of_fun=True)
    ... def cube(x):
    ...     return x ** 3
    >>> cube.defvjp(lambda x: (x ** 3, x), lambda x, ct: (3 * x ** 2 * ct,))
    >>> float(fgrad.jacfwd(cube)(2.0)), float(fgrad.grad(cube)(2.0))
    (12.0, 12.0)
    """

    def __init__(self, fun, *, reverse_only=None, jvp_of_fun=False):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.fwd = None
        self.bwd = None
        self.reverse_only = reverse_only
        self.jvp_of_fun = bool(jvp_of_fun)

    def defvjp(self, fwd, bwd):
        """Register ``fwd(*args) -> (out, residuals)`` and ``bwd(residuals, ct)``."""
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args):
        if self.fwd is None:
            raise CustomRuleError(f"custom_vjp function {self.__name__!r} was called "
                                  "before its rules were given: call "
                                  f"{self.__name__}.defvjp(fwd, bwd) first.")
        leaves, in_tree = tree_flatten(args)
        trace = top_trace(leaves)
        if trace is None:
            return self.fun(*args)
        flat = _Flat(self.fun, in_tree)
        name = self.__name__

        def flat_fun(*xs):
            return flat.flatten_out(self(*flat.args(xs)))
        # the undecorated function, for traces that only need the primal (staging)
        flat_fun.body = lambda *xs: flat.flatten_out(self.fun(*flat.args(xs)))

        def flat_fwd(*xs):
            out, residuals = call_fwd(self.fwd, flat.args(xs), name)
            return flat.flatten_out(out), residuals

        def flat_bwd(residuals, cts, needed, primals):
            ct = tree_unflatten(flat.out_tree, list(cts))
            return _validate_bwd(self.bwd(residuals, ct), args, in_tree, primals,
                                 needed, name)
        flat_fun.__name__ = name
        flat_fun.reverse_only = self.reverse_only
        flat_fun.jvp_of_fun = self.jvp_of_fun
        outs = trace.process_custom_vjp(flat_fun, flat_fwd, flat_bwd, leaves)
        return tree_unflatten(flat.out_tree, list(outs))


def call_fwd(fwd, args, name):
    """Run a custom_vjp ``fwd`` and check it returned ``(out, residuals)``."""
    if not isinstance(args, tuple):
        args = tuple(args)
    result = fwd(*args)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CustomRuleError(
            f"the fwd function of custom_vjp {name!r} must return a pair (output, "
            f"residuals), got {type(result).__name__}. Return `out, (x, y)` with "
            "whatever bwd needs.")
    return result


def _validate_bwd(result, args, in_tree, primals, needed, name):
    if not isinstance(result, (tuple, list)):
        raise CustomRuleError(
            f"the bwd function of custom_vjp {name!r} must return a tuple with one "
            f"cotangent per positional argument ({len(args)}), got "
            f"{type(result).__name__}. Wrap a single cotangent as `(ct,)`.")
    if len(result) != len(args):
        raise CustomRuleError(
            f"the bwd function of custom_vjp {name!r} returned {len(result)} "
            f"cotangents, but the function takes {len(args)} positional arguments.")
    flat = []
    for i, (ct, arg) in enumerate(zip(result, args)):
        arg_leaves, arg_tree = tree_flatten(arg)
        if ct is None:
            flat.extend([None] * len(arg_leaves))
            continue
        ct_leaves, ct_tree = tree_flatten(ct)
        if ct_tree != arg_tree:
            raise CustomRuleError(
                f"bwd output[{i}] of custom_vjp {name!r} has structure {ct_tree}, but "
                f"primal input {i} has structure {arg_tree}.")
        flat.extend(ct_leaves)
    return tuple(_check_leaf(ct, p, need, f"bwd output leaf {j}", name)
                 for j, (ct, p, need) in enumerate(zip(flat, primals, needed)))


def _check_leaf(ct, primal, needed, what, name):
    if not needed or is_zero(ct):
        return None
    ct_aval, p_aval = get_aval(ct), get_aval(primal)
    if ct_aval.shape != p_aval.shape:
        raise CustomRuleError(f"{what} of {name!r} has shape {ct_aval.shape} but its "
                              f"primal input has shape {p_aval.shape}.")
    if ct_aval.dtype != p_aval.dtype and not ct_aval.weak_type:
        raise CustomRuleError(f"{what} of {name!r} has dtype {ct_aval.dtype} but its "
                              f"primal input has dtype {p_aval.dtype}; cast it with "
                              f".astype({p_aval.dtype.name!r}).")
    return ct


class custom_jvp:
    """Give a function a hand-written forward-mode rule (reverse mode follows).

    >>> import fgrad, fgrad.numpy as fnp
    >>> @fgrad.custom_jvp
    ... def log1pexp(x):
    ...     return fnp.log1p(fnp.exp(x))
    >>> @log1pexp.defjvp
    ... def log1pexp_jvp(primals, tangents):
    ...     (x,), (x_dot,) = primals, tangents
    ...     return log1pexp(x), x_dot / (1 + fnp.exp(-x))
    >>> float(fgrad.grad(log1pexp)(1000.0))       # finite, unlike the naive rule
    1.0

    ``rule(primals, tangents) -> (out, out_tangent)`` receives tuples with one
    entry per positional argument. Reverse mode transposes the rule, so it must be
    linear in ``tangents`` (as every JVP is).
    """

    def __init__(self, fun):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.rule = None

    def defjvp(self, rule):
        """Register ``rule(primals, tangents) -> (out, out_tangent)``."""
        self.rule = rule
        return rule

    def __call__(self, *args):
        if self.rule is None:
            raise CustomRuleError(f"custom_jvp function {self.__name__!r} was called "
                                  "before its rule was given: decorate the rule with "
                                  f"@{self.__name__}.defjvp first.")
        leaves, in_tree = tree_flatten(args)
        trace = top_trace(leaves)
        if trace is None:
            return self.fun(*args)
        flat = _Flat(self.fun, in_tree)
        name = self.__name__

        def flat_fun(*xs):
            return flat.flatten_out(self(*flat.args(xs)))
        # the undecorated function, for traces that only need the primal (vmap, staging)
        flat_fun.body = lambda *xs: flat.flatten_out(self.fun(*flat.args(xs)))

        def flat_rule(primals, tangents):
            out, t_out = _call_user_jvp(self.rule, flat.args(primals),
                                        flat.args(tangents), name)
            out_leaves = flat.flatten_out(out)
            t_leaves, t_tree = tree_flatten(t_out)
            if t_tree != flat.out_tree:
                raise CustomRuleError(
                    f"the JVP rule of custom_jvp {name!r} returned a tangent with "
                    f"structure {t_tree}, but the output has structure {flat.out_tree}.")
            for j, (t, o) in enumerate(zip(t_leaves, out_leaves)):
                _check_leaf(t, o, True, f"JVP rule tangent output leaf {j}", name)
            return out_leaves, tuple(t_leaves)
        flat_fun.__name__ = name
        outs = trace.process_custom_jvp(flat_fun, flat_rule, leaves)
        return tree_unflatten(flat.out_tree, list(outs))


def _call_user_jvp(rule, primals, tangents, name):
    result = rule(primals, tangents)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CustomRuleError(f"the JVP rule of custom_jvp {name!r} must return a "
                              "pair (out, out_tangent).")
    return result
