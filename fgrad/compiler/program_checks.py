"""Checks in a compiled program: an equation that raises on a bad status and
otherwise does nothing costs a few compares, not a callout.

A primitive declares itself a *check* by ``prim.raises_if_nonzero = True``
(it must be effectful too, so that no pass drops it): it has no outputs, and
its implementation returns where every element of its first operand is zero
(a success code) and raises otherwise, reading its other operands only to say
why (`fgrad.ode`'s status check is one: a solve's status and the time it
reached). `fgrad.compiler.program` asks `check_step` for each equation it
lowers; the step tests the first operand's elements in a loop and calls the
equation's NumPy code back only where one is nonzero, which then raises its
own error. A check whose code returned with a nonzero status would be
wrong by the declaration: the program goes on, as the interpreted tier does.
"""
import math

import numpy as np

from fgrad.compiler.kernel_ir import counted, storage_type
from fgrad.compiler.native_steps import NativeStep, call_out_if, new_flag, raise_flag
from fgrad.core.graph import Var


def check_step(eqn, index):
    """The `Check` for equation ``eqn`` (labelled ``index``) if its
    primitive is a check whose first operand is a staged bool or integer
    value, else None.

    >>> import numpy as np
    >>> from fgrad.core.trace import Primitive
    >>> check_p = Primitive("check_doc", lambda s: (), lambda s: (), multiple_results=True,
    ...                     register=False)
    >>> check_p.raises_if_nonzero = check_p.effectful = True
    >>> import fgrad
    >>> g = fgrad.make_graph(lambda s: check_p.bind(s))(np.zeros(3, int))
    >>> type(check_step(g.eqns[0], 0)).__name__
    'Check'
    """
    if not getattr(eqn.prim, "raises_if_nonzero", False) or eqn.outvars or not eqn.invars:
        return None
    status = eqn.invars[0]
    if type(status) is not Var or np.dtype(status.aval.dtype).kind not in "biu":
        return None
    return Check(index, eqn)


class Check(NativeStep):
    """A check: the status's elements compared with zero, the equation's
    NumPy code called back (which raises) where one is not."""

    fallback = True

    def emit(self, ir, b, pointer, table, call_out, alloca):
        status = self.eqn.invars[0]
        dtype = np.dtype(status.aval.dtype)
        data = pointer(status)
        typ = storage_type(ir, dtype)
        flag = new_flag(ir, b, alloca)
        i64 = ir.IntType(64)

        def element(i):
            value = b.load(b.gep(data, [i]))
            raise_flag(ir, b, flag, b.icmp_unsigned("!=", value, ir.Constant(typ, 0)))
        counted(ir, b, ir.Constant(i64, math.prod(status.aval.shape)), element, "check.i")
        call_out_if(ir, b, flag, call_out)
