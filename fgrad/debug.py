"""Seeing values inside transformed functions: ``fgrad.debug.print`` and taps.

A plain ``print`` inside a jitted function runs once, while staging, and shows
abstract shapes. `print` here is a primitive with an effect: it is staged like
any other equation, never removed or merged by the compiler, and prints the
real values each time the compiled code runs. Under grad and jvp it prints the
primal values and contributes no derivative. Under vmap it prints once per call,
not once per example: each batched argument is shown whole, with the batch
axis first (one row per example), and shared arguments as they are.

`tap` and `tap_forward` are identity primitives that hand a value to a user's
callback: the cotangent in the reverse sweep (gradient hooks: clipping, scaling,
logging) or the primal value in the forward pass.

`debug_nans` (also ``fgrad.debug_nans``) turns on NaN hunting: the checking
interpreters of `fgrad.interpreters.nan_checking`.
"""
import builtins

from fgrad.core.errors import TapError
from fgrad.core.trace import EagerTracer, Primitive, ShapedArray, Tracer, get_aval
from fgrad.core.tree import tree_flatten, tree_unflatten
from fgrad.interpreters.nan_checking import debug_nans
from fgrad.primitives.batching import move_axis

__all__ = ["print", "tap", "tap_forward", "debug_nans"]
FAMILY = "fgrad/debug.py"


def _print_impl(*leaves, fmt, tree):
    args, kwargs = tree_unflatten(tree, list(leaves))
    builtins.print(fmt.format(*args, **kwargs))
    return ()


debug_print_p = Primitive("debug_print", _print_impl, lambda *avals, fmt, tree: (),
                          multiple_results=True, nondiff=True, family="fgrad/debug.py")
debug_print_p.effectful = True          # the compiler keeps it and keeps it unique


def _print_batch(args, dims, *, fmt, tree):
    leaves = [x if d is None else move_axis(x, d, 0) for x, d in zip(args, dims)]
    return debug_print_p.bind(*leaves, fmt=fmt, tree=tree), ()


debug_print_p.batch = _print_batch


def print(fmt, *args, **kwargs):       # noqa: A001 - the name users expect
    """``print(fmt.format(*args, **kwargs))`` with real values, under any transformation.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> f = fgrad.jit(lambda x: fgrad.debug.print("x = {}", x * 2))
    >>> f(np.arange(3.0))
    x = [0. 2. 4.]

    Under `fgrad.vmap` the whole batch is printed at once, one row per example:

    >>> show = fgrad.vmap(lambda x: fgrad.debug.print("x = {}", x))
    >>> show(np.arange(4.0).reshape(2, 2))
    x = [[0. 1.]
     [2. 3.]]
    """
    leaves, tree = tree_flatten((args, kwargs))
    debug_print_p.bind(*leaves, fmt=fmt, tree=tree)


# ---------------------------------------------------------------------------
# Taps
# ---------------------------------------------------------------------------


def _call_tap(fn, value, what):
    """``fn(value)``, or ``value`` when it returns None; a replacement must match."""
    out = fn(value)
    if out is None:
        return value
    want, got = get_aval(value), get_aval(out)
    if want.shape != got.shape:
        raise TapError(f"the {what} callback {getattr(fn, '__name__', fn)!r} returned "
                       f"an array of shape {got.shape} for a value of shape "
                       f"{want.shape}: return an array of the same shape, or None to "
                       "keep the value as it is.")
    return out


def _same_aval(x, fn):
    return ShapedArray(x.shape, x.dtype)


def _batch_callback(prim):
    # the callback sees the whole batch, batch axis first, as a user would
    # write it for the batched program
    def rule(args, dims, fn):
        (x,), (d,) = args, dims
        return prim.bind(move_axis(x, d, 0), fn=fn), 0
    return rule


# tap(x, fn): the identity; its VJP hands the total cotangent of its output to fn.
tap_p = Primitive("tap", lambda x, fn: x, _same_aval, family=FAMILY)

# The reverse half of a tap: fn applied to a cotangent. Bound only where the
# cotangent has no concrete value yet (jit staging, vmap), so that fn runs when
# the value exists: as a host callback in compiled code, on the whole batch
# under vmap.
tap_cotangent_p = Primitive("tap_cotangent",
                            lambda ct, fn: _call_tap(fn, ct, "tap"), _same_aval,
                            family=FAMILY)
tap_cotangent_p.effectful = True     # the compiler keeps it and keeps it unique

# tap_forward(x, fn): fn applied to the primal value; derivatives pass straight through.
tap_forward_p = Primitive("tap_forward",
                          lambda x, fn: _call_tap(fn, x, "tap_forward"), _same_aval,
                          family=FAMILY)
tap_forward_p.effectful = True


def _apply_tap(ct, fn):
    """fn applied to a cotangent, at the moment the cotangent has a value."""
    inner = ct
    while isinstance(inner, EagerTracer):
        inner = inner.primal
    if isinstance(ct, Tracer) and not isinstance(inner, Tracer):
        # an outer grad/jvp's tracer over a concrete value: calling fn on it
        # directly records what fn does, so the replacement differentiates
        return _call_tap(fn, ct, "tap")
    return tap_cotangent_p.bind(ct, fn=fn)


tap_p.def_vjp(lambda ct, ans, x, fn: _apply_tap(ct, fn), reads=frozenset())
tap_p.def_jvp(lambda x_dot, ans, x, fn: x_dot)
tap_p.batch = lambda args, dims, fn: (tap_p.bind(args[0], fn=fn), dims[0])

# Differentiating through a staged cotangent tap (grad of a jitted gradient):
# fn is applied to the tangent / cotangent, which is exact when fn is linear
# (scaling, masking): what gradient hooks are in practice.
tap_cotangent_p.def_vjp(lambda ct, ans, x, fn: _apply_tap(ct, fn), reads=frozenset())
tap_cotangent_p.def_jvp(lambda x_dot, ans, x, fn: _apply_tap(x_dot, fn))
tap_cotangent_p.batch = _batch_callback(tap_cotangent_p)

tap_forward_p.def_vjp(lambda ct, ans, x, fn: ct, reads=frozenset())
tap_forward_p.def_jvp(lambda x_dot, ans, x, fn: x_dot)
tap_forward_p.batch = _batch_callback(tap_forward_p)


def tap(x, fn):
    """``x`` unchanged; in the reverse sweep ``fn`` receives the cotangent of the result.

    The cotangent ``fn`` sees is the total over every use of the returned value
    (the sweep sums all fan-out contributions first). ``fn`` may return a
    replacement of the same shape (clip, scale) or None to keep it. Use the
    returned value downstream: uses of ``x`` itself bypass the tap. Under
    ``jit`` the callback runs in the compiled code, under ``vmap`` it sees the
    whole batch of cotangents (batch axis first), and under ``grad(grad(...))``
    it runs in every reverse sweep that passes through the tap.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> def f(x):
    ...     y = fgrad.tap(x * 3.0, lambda ct: ct * 2.0)   # double the cotangent of y
    ...     return fnp.sum(y * y)
    >>> fgrad.grad(f)(np.array([1.0]))
    array([36.])
    """
    return tap_p.bind(x, fn=fn)


def tap_forward(x, fn):
    """``fn(x)`` (or ``x`` when it returns None), with ``x``'s derivatives passing straight through.

    ``fn`` receives the primal value: the real array, also under ``jit`` (a
    host callback the compiler never removes) and ``vmap`` (the whole batch).

    >>> import numpy as np, fgrad
    >>> seen = []
    >>> f = fgrad.jit(lambda x: fgrad.tap_forward(x * 2.0, seen.append) + 1.0)
    >>> f(np.arange(2.0))
    array([1., 3.])
    >>> seen
    [array([0., 2.])]
    """
    return tap_forward_p.bind(x, fn=fn)
