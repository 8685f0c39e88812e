"""Operators that let a dead temporary's buffer take their result.

In ``sin(x) * e + x ** 2`` the product is a temporary: once ``+`` has read it,
nothing can reach it again. NumPy writes such a sum into the temporary's own
buffer (it checks the operand's reference count and that the interpreter is
the caller); under ``grad`` every array is wrapped in a tracer, which hides the
temporary from NumPy, so that saving is made here, on the tracer:

- the tracer's reference count is that of a temporary, measured once at import
  on a probe object the same way (see `TEMPORARY_REFS`);
- the caller is the interpreter executing a binary operator (its current
  instruction is one), not C code that may hold its one reference and use it
  after the call.

When both hold, the tracer's trace decides whether the buffer can take the
result (`Trace.binary_into_operand`; reverse mode's reuses a primal's). Where
the count cannot tell a temporary from a variable (Python 3.14 lends stack
references; free-threaded builds count differently), and on 3.10, the
operators stay the plain binding functions.
"""
import dis
import sys
import sysconfig

# the opcode of ``a + b`` and its siblings (Python 3.11 to 3.13)
_BINARY_OP = dis.opmap.get("BINARY_OP")


class _Probe:
    def __add__(self, other):
        return sys.getrefcount(self)


def _probe_counts():
    """``(temporary, variable)``: the reference counts an operator method sees
    for its left operand when it is a temporary, and when a variable holds it."""
    temporary = _Probe() + 0
    held = _Probe()
    variable = held + 0
    return temporary, variable


def _measure():
    # 3.11 to 3.13 hold strong references on the stack and name the caller's
    # instruction by its byte offset, as `reusing_operator` reads it
    if not (3, 11) <= sys.version_info < (3, 14) \
            or sysconfig.get_config_var("Py_GIL_DISABLED"):
        return None
    temporary, variable = _probe_counts()
    return temporary if variable == temporary + 1 else None


# the reference count of a temporary left operand inside an operator method,
# or None where temporaries cannot be told apart (then nothing is reused)
TEMPORARY_REFS = _measure()


def reusing_operator(fn, prim):
    """The tracer method for the binary operator ``fn`` (the binding function
    of the ufunc primitive ``prim``), writing into its left operand when that
    is a dead temporary of reverse mode."""
    if TEMPORARY_REFS is None:
        return fn
    getrefcount, getframe, binary_op = sys.getrefcount, sys._getframe, _BINARY_OP

    def method(self, other):
        if getrefcount(self) == TEMPORARY_REFS and self.owner.reuse_temporaries:
            trace = self.owner
            frame = getframe(1)
            if trace.active and frame.f_code.co_code[frame.f_lasti] == binary_op:
                out = trace.binary_into_operand(prim, self, other)
                if out is not None:
                    return out
        return fn(self, other)
    method.__name__ = fn.__name__
    method.__doc__ = fn.__doc__
    return method
