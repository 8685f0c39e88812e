"""Printing values from inside transformed functions: ``fgrad.debug.print``.

A plain ``print`` inside a jitted function runs once, while staging, and shows
abstract shapes. `print` here is a primitive with an effect: it is staged like
any other equation, never removed or merged by the compiler, and prints the
real values each time the compiled code runs. Under grad and jvp it prints the
primal values and contributes no derivative.
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


def print(fmt, *args, **kwargs):       # noqa: A001 - the name users expect
    """``print(fmt.format(*args, **kwargs))`` with real values, under any transformation.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> f = fgrad.jit(lambda x: fgrad.debug.print("x = {}", x * 2))
    >>> f(np.arange(3.0))
    x = [0. 2. 4.]
    """
    leaves, tree = tree_flatten((args, kwargs))
    debug_print_p.bind(*leaves, fmt=fmt, tree=tree)
