"""The floating-point grid: ``spacing`` (the gap to the next float, a step
function with no derivative) and ``nextafter`` (``x1`` moved one float towards
``x2``: derivative 1 in ``x1`` and 0 in ``x2``, almost everywhere).
"""
import numpy as np

from fgrad.core.backend import array_module
from fgrad.core.trace import Primitive
from fgrad.primitives.base import elementwise_abstract
from fgrad.primitives.batching import broadcasting_batch_rule
from fgrad.primitives.elementwise import rebroadcast, unbroadcast

FAMILY = "primitives/float_steps.py"


def _ufunc(name, nondiff):
    np_fn = getattr(np, name)
    prim = Primitive(name, lambda *args: getattr(array_module(*args), name)(*args),
                     elementwise_abstract(np_fn), nondiff=nondiff, family=FAMILY)
    prim.batch = broadcasting_batch_rule(prim)
    return prim


spacing_p = _ufunc("spacing", nondiff=True)
nextafter_p = _ufunc("nextafter", nondiff=False)
# one float away from x1 whatever x2 is: the derivative of x1 itself
nextafter_p.def_vjp(lambda ct, ans, x1, x2: unbroadcast(ct, x1),
                    lambda ct, ans, x1, x2: None, reads=[set(), set()])
nextafter_p.def_jvp(lambda t, ans, x1, x2: rebroadcast(t, ans),
                    lambda t, ans, x1, x2: None)


def spacing(x):
    """The distance from ``x`` to the next float away from zero (no derivative).

    >>> spacing(np.float64(1.0)) == np.finfo(np.float64).eps
    np.True_
    """
    return spacing_p.bind(x)


def nextafter(x1, x2):
    """The float after ``x1`` towards ``x2``.

    >>> nextafter(np.float64(1.0), 2.0) > 1.0
    np.True_
    """
    return nextafter_p.bind(x1, x2)
