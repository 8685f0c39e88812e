"""The steps of a compiled program that modules beside `fgrad.compiler.program`
lower: what such a step is, and the IR pieces they share.

A `NativeStep` stands for one equation: it reads the equation's inputs,
writes its outputs, and writes its own IR (`NativeStep.emit`) at the place
the program reaches it. Where its machine code finds a case it does not
handle (a singular matrix, an index out of bounds), it calls the equation's
NumPy code back, which raises NumPy's error or computes NumPy's answer:
`fgrad.compiler.program_linalg` (LAPACK calls) and
`fgrad.compiler.program_indexing` (gathers and scatters) write such steps.
"""


class NativeStep:
    """A step for equation ``eqn`` (``index``: its label, the equation's
    number, after its loop's where it is in a loop's body), reading
    its inputs and writing its outputs, and ``scratch``: values of its own
    (`fgrad.core.graph.Var` s) that the buffer plan gives arena bytes while
    the step runs. ``fallback``: whether it may call its equation's NumPy
    code back (`emit`'s ``call_out``; the program numbers those ``id``).
    ``calls_blas``: whether it calls SciPy's BLAS or LAPACK (`fgrad.compiler.program.pays`)."""

    fallback = False
    calls_blas = False

    def __init__(self, index, eqn, scratch=()):
        self.index, self.eqn, self.scratch = index, eqn, list(scratch)

    def reads(self):
        return list(self.eqn.invars)

    def writes(self):
        return list(self.eqn.outvars) + self.scratch

    def emit(self, ir, b, pointer, table, call_out, alloca):
        """Write the step's IR at builder ``b``: ``pointer(v)`` is value ``v``'s
        data, ``table`` the table of BLAS and LAPACK routines (i64*,
        `fgrad.compiler.blas`), ``call_out()`` writes a call of the
        equation's NumPy code, ``alloca(type)`` makes a stack slot (once,
        in the function's entry block: the step may be in a loop's body)."""
        raise NotImplementedError


def constant_cell(ir, b, typ, value, initializer=None):
    """A constant global of IR type ``typ`` holding ``value``: what a Fortran
    argument (passed by reference) points at. ``initializer``: the IR
    constant of ``value`` where it is not ``ir.Constant(typ, value)`` (a
    complex number's, `fgrad.compiler.kernel_ir.constant`)."""
    name = f"cell_{typ}_{value}".replace(".", "_").replace("-", "m")
    module = b.module
    if name not in module.globals:
        slot = ir.GlobalVariable(module, typ, name)
        slot.initializer = ir.Constant(typ, value) if initializer is None else initializer
        slot.global_constant, slot.linkage = True, "internal"
    return module.globals[name]


def new_flag(ir, b, alloca):
    """An i32 slot (made by ``alloca``) holding 0, for `raise_flag` and
    `call_out_if`."""
    flag = alloca(ir.IntType(32))
    b.store(ir.Constant(ir.IntType(32), 0), flag)
    return flag


def raise_flag(ir, b, flag, condition):
    """Set ``flag`` where the i1 ``condition`` holds (it stays set)."""
    i32 = ir.IntType(32)
    b.store(b.or_(b.load(flag), b.zext(condition, i32)), flag)


def call_out_if(ir, b, flag, call_out):
    """Call the equation's NumPy code back where ``flag`` is set."""
    fail = b.append_basic_block("step.failed")
    done = b.append_basic_block("step.done")
    b.cbranch(b.icmp_signed("!=", b.load(flag), ir.Constant(ir.IntType(32), 0)), fail, done)
    b.position_at_end(fail)
    call_out()
    b.branch(done)
    b.position_at_end(done)
