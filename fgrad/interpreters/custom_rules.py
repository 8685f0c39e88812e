"""What the interpreters do with user-supplied derivative rules.

`fgrad.transforms.custom` turns a `custom_vjp`/`custom_jvp` function's call into
flat callables (``fun``, ``fwd``/``bwd`` or ``rule``) and hands them to the
innermost trace among the arguments (`top_trace`). The pieces here are what the
traces need to honour them: a one-off primitive whose VJP calls the user's
``bwd``, one whose VJP transposes the user's JVP rule, and the call of a JVP
rule with real (instantiated) tangents.
"""
from fgrad.core.backend import module_of_leaves
from fgrad.core.errors import TracerLeakError
from fgrad.core.trace import Primitive, Tracer, Zero, get_aval
from fgrad.interpreters import callbacks
from fgrad.primitives.creation import zeros_like


def top_trace(leaves):
    """The highest-level trace among ``leaves`` (None if none is a tracer)."""
    top = None
    for x in leaves:
        if isinstance(x, Tracer):
            if top is None or x.owner.level > top.level:
                top = x.owner
    if top is not None and not top.active:
        raise TracerLeakError("a custom_vjp/custom_jvp function received a tracer that "
                              "escaped the transformation that created it.")
    return top


def instantiate(ct, xp):
    """``ct`` as an array of backend ``xp``: user rules are plain code that
    expects arrays, so a symbolic zero is made real here."""
    if type(ct) is Zero:
        return xp.zeros(ct.aval.shape, ct.aval.dtype)
    return ct


def custom_vjp_primitive(fun, bwd, residuals, primals, out):
    """A one-off primitive whose VJP calls the user's ``bwd``."""
    prim = Primitive(f"custom_vjp[{fun.__name__}]", multiple_results=True,
                     register=False)

    def vjp(ct, ans, needed, *args):
        xp = module_of_leaves(primals)
        cts = [instantiate(c, xp) for c in ct]
        return bwd(residuals, cts, needed, primals)
    prim.vjp = vjp
    prim.impl = lambda *args: out
    return prim


def call_jvp_rule(fun, rule, primals, tangents):
    """Run a flattened custom JVP rule with real (instantiated) tangents."""
    xp = module_of_leaves(primals)
    return rule(tuple(primals), tuple(instantiate(t, xp) for t in tangents))


def custom_jvp_transpose_primitive(fun, rule, primals, out):
    """A one-off primitive whose VJP transposes the user's JVP rule.

    The rule's tangent output is linear in the input tangents; reverse mode over
    that linear map, from any point (zeros), yields its transpose.
    """
    prim = Primitive(f"custom_jvp[{fun.__name__}]", multiple_results=True,
                     register=False)
    float_positions = [i for i, p in enumerate(primals)
                       if get_aval(p).dtype.kind in "fc"]

    xp = module_of_leaves(primals)

    def vjp(ct, ans, needed, *args):
        def tangent_map(*float_tangents):
            tangents = [Zero(get_aval(p)) for p in primals]
            for i, t in zip(float_positions, float_tangents):
                tangents[i] = t
            return rule(tuple(primals), tuple(instantiate(t, xp) for t in tangents))[1]
        zeros = [zeros_like(primals[i]) for i in float_positions]
        _, pullback = callbacks.transformation("vjp")(tangent_map, *zeros)
        float_cts = pullback(tuple(instantiate(c, xp) for c in ct))
        cts = [None] * len(primals)
        for i, c in zip(float_positions, float_cts):
            cts[i] = c if needed[i] else None
        return tuple(cts)
    prim.vjp = vjp
    prim.impl = lambda *args: out
    return prim
