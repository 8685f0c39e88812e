"""Printing values from inside transformed functions: ``fgrad.debug.print``.

A plain ``print`` inside a jitted function runs once, while staging, and shows
abstract shapes. `print` here is a primitive with an effect: it is staged like
any other equation, never removed or merged by the compiler, and prints the
real values each time the compiled code runs. Under grad and jvp it prints the
primal values and contributes no derivative. Under vmap it prints once per call,
not once per example: each batched argument is shown whole, with the batch
axis first (one row per example), and shared arguments as they are.
"""
import builtins

from .core import Primitive
from .tree import tree_flatten, tree_unflatten

__all__ = ["print"]


def _print_impl(*leaves, fmt, tree):
    args, kwargs = tree_unflatten(tree, list(leaves))
    builtins.print(fmt.format(*args, **kwargs))
    return ()


debug_print_p = Primitive("debug_print", _print_impl, lambda *avals, fmt, tree: (),
                          multiple_results=True, nondiff=True, family="fgrad/debug.py")
debug_print_p.effectful = True          # the compiler keeps it and keeps it unique


def _print_batch(args, dims, *, fmt, tree):
    from .primitives.batching import move_axis
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
