"""What the interpreters do with user-supplied derivative rules.

`fgrad.transforms.custom` turns a `custom_vjp`/`custom_jvp` function's call into
flat callables (``fun``, ``fwd``/``bwd`` or ``rule``) and hands them to the
innermost trace among the arguments (`top_trace`). The pieces here are what the
traces need to honour them: a one-off primitive whose VJP calls the user's
``bwd``, one whose VJP transposes the user's JVP rule, and the call of a JVP
rule with real (instantiated) tangents.
"""
from fgrad.core.backend import module_of_leaves
from fgrad.core.errors import CustomRuleError, TracerLeakError
from fgrad.core.trace import Primitive, Tracer, Zero, get_aval
from fgrad.core.tree import tree_flatten
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


def closure_error(kind, fun):
    name = getattr(fun, "__name__", "the function")
    rule = "return its cotangent from bwd" if kind == "custom_vjp" else \
        "give its tangent in the rule"
    return CustomRuleError(
        f"the {kind} function {name!r} closes over a value that is being "
        "differentiated (a traced value it reads from an enclosing scope, not from its "
        "arguments), but its rules give derivatives with respect to its arguments "
        f"only. Pass that value to {name} as an argument (and {rule}), or apply "
        "fgrad.stop_gradient to it if it needs none.")


def refuse_closures(values, kind, fun, level=None, given=()):
    """Raise `closure_error` if ``values`` (what a user function or rule of a
    custom_vjp/custom_jvp function returned) hold a tracer of a trace that has
    ended, or (given ``level``) of the trace at ``level`` or above that is not
    the trace of a value in ``given`` (what the rule was called with). The
    function and its rules are called on values of lower levels only, and on
    cotangents that a transformation of the pullback may trace (`jacrev`'s
    vmap), so any other such tracer came from a closure: a traced value the
    function reads from an enclosing scope, whose derivative its rules cannot
    give (they see only the explicit arguments). JAX refuses it too."""
    owners = {id(x.owner) for x in tree_flatten(given)[0] if isinstance(x, Tracer)}
    for x in tree_flatten(values)[0]:
        if isinstance(x, Tracer) and (not x.owner.active or
                                      level is not None and x.owner.level >= level
                                      and id(x.owner) not in owners):
            raise closure_error(kind, fun)


def instantiate(ct, xp):
    """``ct`` as an array of backend ``xp``: user rules are plain code that
    expects arrays, so a symbolic zero is made real here."""
    if type(ct) is Zero:
        return xp.zeros(ct.aval.shape, ct.aval.dtype)
    return ct


def custom_vjp_primitive(fun, bwd, residuals, primals, out, level):
    """A one-off primitive whose VJP calls the user's ``bwd`` (recorded by the
    reverse trace at ``level``)."""
    prim = Primitive(f"custom_vjp[{fun.__name__}]", multiple_results=True,
                     register=False)

    def vjp(ct, ans, needed, *args):
        xp = module_of_leaves(primals)
        cts = [instantiate(c, xp) for c in ct]
        arg_cts = bwd(residuals, cts, needed, primals)
        refuse_closures(arg_cts, "custom_vjp", fun, level, given=cts)
        return arg_cts
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
            try:
                out_tangents = rule(tuple(primals),
                                    tuple(instantiate(t, xp) for t in tangents))[1]
            except TracerLeakError:     # it read a tracer of the recording's trace
                raise closure_error("custom_jvp", fun) from None
            # this runs inside a vjp of its own, whose tracers it returns
            refuse_closures(out_tangents, "custom_jvp", fun)
            return out_tangents
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
