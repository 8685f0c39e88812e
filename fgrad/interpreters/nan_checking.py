"""NaN hunting: ``with fgrad.debug_nans():`` (or ``FGRAD_DEBUG_NANS=1``).

When it is on, a transformation that starts picks instrumented interpreters
instead of the normal ones, so the normal path carries no per-equation check:

- reverse mode records with `DebugReverseTrace`, which checks every output of
  the forward pass and remembers the user's source line per equation, and
  sweeps with `debug_backward_pass`, which checks every cotangent;
- forward mode (jvp, linearize, jacfwd, hessian) runs `DebugJVPTrace`, which
  checks every primal output and every tangent;
- staging (jit, make_graph, and the bodies of ``fgrad.lax`` control flow)
  records with `DebugStagingTrace`, which tags each equation with its source
  line and pass; jit runs the staged graph one equation at a time
  (`run_checked`) instead of its compiled code, and so do the control-flow
  primitives for their branches and loop bodies.

Every equation is blamed on a *tag* ``(pass, primitive, source, where_origin)``.
``trace_state.nan_context`` holds the tag of whatever is being evaluated right now:
set by a reverse sweep around each VJP rule, by forward mode around each JVP
rule, and by `eval_graph_tagged` around each equation of a tagged graph it
re-evaluates. The innermost setting wins, which is how a line inside a
``lax.scan`` body survives being re-staged into the scan's JVP or VJP.

The first non-finite value raises `NonFiniteError` naming the primitive, the
pass, the line and the input shapes. A NaN cotangent that comes out of the
unselected branch of a ``where`` is recognised and the message shows the
double-``where`` fix.
"""
import contextlib

from fgrad.core.backend import array_module
from fgrad.core.errors import MissingRuleError, NonFiniteError
from fgrad.core.graph import Literal
from fgrad.core.trace import Tracer, Zero, get_aval, missing_rule_message, trace_state
from fgrad.interpreters.batching import innermost_value
from fgrad.interpreters.custom_rules import call_jvp_rule, refuse_closures
from fgrad.interpreters.forward import JVPTrace, all_zero
from fgrad.interpreters.reverse import NEEDED_ONE, ReverseTrace, accumulate, ct_or_zero
from fgrad.interpreters.sources import describe_source, user_source
from fgrad.interpreters.staging import UNSELECTED


@contextlib.contextmanager
def debug_nans(enabled=True):
    """Check every value of the transformations started inside for NaN and infinity.

    Inside the block, ``grad``/``vjp``/``jacrev`` check each equation's
    outputs in the forward pass and each cotangent in the reverse sweep,
    ``jvp``/``linearize``/``jacfwd``/``hessian`` check each equation's outputs
    and tangents, and ``jit`` checks each equation of its graph, including
    those inside ``fgrad.lax`` branches and loop bodies; the first NaN or
    infinity raises `fgrad.errors.NonFiniteError` with the primitive, the pass
    (forward, tangent or reverse), the line of your code that recorded the
    equation and the input shapes. The environment variable
    ``FGRAD_DEBUG_NANS=1`` turns it on everywhere. Off, it costs nothing.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> with fgrad.debug_nans():
    ...     fgrad.grad(lambda x: fnp.sum(fnp.log(x)))(np.array([1.0, -1.0]))
    Traceback (most recent call last):
    ...
    fgrad.errors.NonFiniteError: debug_nans: the forward pass of 'log' produced nan ...
    """
    previous = trace_state.debug_nans
    trace_state.debug_nans = enabled
    try:
        yield
    finally:
        trace_state.debug_nans = previous


# ---------------------------------------------------------------------------
# Where an equation came from
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# Checking values
# ---------------------------------------------------------------------------


def _concrete(x):
    """The array behind ``x``, or None where it has no value yet (staged).

    A value batched by vmap (jacfwd's tangents, jacrev's cotangents) is
    checked whole: each of its non-finite elements belongs to some example.
    """
    x = innermost_value(x)
    if x is None or type(x) is Zero or isinstance(x, Tracer):
        return None
    return x


def non_finite(x):
    """``(kind, count, size)`` if ``x`` holds a NaN or an infinity, else None."""
    x = _concrete(x)
    if x is None:
        return None
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        if not isinstance(x, (float, complex)):
            return None
    elif dtype.kind not in "fc":
        return None
    xp = array_module(x)
    finite = xp.isfinite(x)
    if bool(finite.all()):
        return None
    nan = xp.isnan(x)
    kind = "nan" if bool(nan.any()) else "inf"
    return kind, int((~finite).sum()), int(getattr(x, "size", 1))


def _shapes(args):
    return ", ".join(str(get_aval(a)) if not isinstance(a, (int, float, complex))
                     or hasattr(a, "shape") else repr(a) for a in args)


def _raise(pass_, prim, what, bad, source, args, extra=""):
    kind, count, size = bad
    raise NonFiniteError(
        f"debug_nans: the {pass_} pass of '{prim.name}' produced {kind} {what}"
        f"({count} of {size} element{'s' * (size != 1)} non-finite).\n"
        f"  recorded at {describe_source(source)}\n"
        f"  input shapes: {_shapes(args)}{extra}")


def _blame(context, prim):
    """``(pass, owner, what)``: how to name the equation of ``prim`` in a message.

    ``context`` is the tag of what is being evaluated (None: user code called
    ``prim`` directly, in a forward pass). When ``prim`` runs inside the rule
    of another primitive (``owner``), the message names both.
    """
    if context is None:
        return "forward", prim, ""
    pass_, owner = context[0], context[1]
    if owner is prim:
        return pass_, owner, ""
    rule = "cotangent rule" if "reverse" in pass_ else \
        "tangent rule" if "tangent" in pass_ else "evaluation"
    return pass_, owner, f"in its {rule}'s '{prim.name}' "


def _tangent_context(context, prim, source):
    """The tag of the equations a JVP rule of ``prim`` runs under ``context``."""
    if context is None or context[0] == "forward":
        return ("tangent", prim, source, None)
    return (f"tangent of the {context[0]}", context[1], source, context[3])


def _unchecked(context):
    return context is not None and UNSELECTED in context[0]


def _check_outputs(values, prim, context, source, args):
    if _unchecked(context):
        return
    for value in values:
        bad = non_finite(value)
        if bad is not None:
            pass_, owner, what = _blame(context, prim)
            _raise(pass_, owner, what, bad, source, args)


def where_trap_message(where_source, prim):
    return (
        f"\n  This is the `where` trap: the cotangent reaching '{prim.name}' is zero "
        f"at those elements because it comes from the branch of the `where` at "
        f"{describe_source(where_source)} that was not selected there, and zero "
        f"times the non-finite derivative of '{prim.name}' at the discarded inputs "
        "is nan. Make the discarded inputs safe with a second where, so the "
        "derivative is finite where it is thrown away:\n"
        "      safe_x = fnp.where(x > 0, x, 1.0)\n"
        "      y = fnp.where(x > 0, fnp.sqrt(safe_x), 0.0)")


def _is_where(prim):
    # a `where`: its VJP masks the cotangent of the unselected branch
    return getattr(prim, "masks_cotangent", False)


# ---------------------------------------------------------------------------
# Reverse mode
# ---------------------------------------------------------------------------


class DebugReverseTrace(ReverseTrace):
    """A `ReverseTrace` that checks forward values and remembers source lines."""

    __slots__ = ("sources",)
    # its messages show the operands of the operation that went wrong
    reuse_temporaries = False
    # its sweep reads the residuals as recorded
    recompute_residuals = False

    def __init__(self, level):
        super().__init__(level)
        self.sources = []           # parallel to eqns

    def record(self, prim, in_nodes, primals, ans, params):
        # a staged graph re-evaluated here (grad of a jitted function) knows
        # the lines that staged its equations, and so does a rule being run
        context = trace_state.nan_context
        source = user_source() if context is None else context[2]
        _check_outputs(ans if prim.multiple_results else (ans,), prim, context, source,
                       primals)
        n = len(self.eqns)
        out = super().record(prim, in_nodes, primals, ans, params)
        if len(self.eqns) > n:
            self.sources.append(source)
        return out


def debug_backward_pass(trace, seeds):
    """`backward_pass` with every cotangent checked (see the module docstring).

    ``masked`` follows cotangents that came out of a ``where``'s branch: when a
    non-finite cotangent appears downstream of one where its incoming cotangent
    is zero, the message explains the ``where`` trap.
    """
    cts = dict(seeds)
    masked = {}                      # node -> source of the where it came from
    eqns, sources = trace.eqns, list(trace.sources)
    previous_context = trace_state.nan_context
    try:
        while eqns:
            prim, in_nodes, out, args, ans, params = eqns.pop()
            source = sources.pop()
            if type(out) is tuple:
                ct = tuple(ct_or_zero(cts.pop(n, None) if n is not None else None, a)
                           for n, a in zip(out, ans))
                if all(type(c) is Zero for c in ct):
                    continue
                origin = next((masked.pop(n) for n in out if n in masked), None)
            else:
                ct = cts.pop(out, None)
                if ct is None:
                    continue
                origin = masked.pop(out, None)
            needed = NEEDED_ONE if len(in_nodes) == 1 else \
                tuple([n is not None for n in in_nodes])
            trace_state.nan_context = ("reverse", prim, source, origin)
            arg_cts = prim.vjp(ct, ans, needed, *args, **params)
            trace_state.nan_context = previous_context
            for i, (node, arg_ct) in enumerate(zip(in_nodes, arg_cts)):
                if node is None or arg_ct is None or type(arg_ct) is Zero:
                    continue
                bad = non_finite(arg_ct)
                if bad is not None:
                    extra = ""
                    if origin is not None and _zero_where_bad(ct, arg_ct):
                        extra = where_trap_message(origin, prim)
                    _raise("reverse", prim, f"in the cotangent of its input {i} ", bad,
                           source, args, extra)
                if _is_where(prim) and i > 0:
                    masked[node] = source
                elif origin is not None:
                    masked.setdefault(node, origin)
                prev = cts.get(node)
                cts[node] = arg_ct if prev is None else accumulate(prev, arg_ct)
    finally:
        trace_state.nan_context = previous_context
    return cts


def _zero_where_bad(ct, arg_ct):
    """True if ``ct`` is zero at every non-finite element of ``arg_ct``."""
    ct, arg_ct = _concrete(ct), _concrete(arg_ct)
    if ct is None or arg_ct is None or type(ct) is tuple:
        return ct is None
    xp = array_module(arg_ct)
    try:
        zero = xp.broadcast_to(ct == 0, arg_ct.shape)
    except ValueError:
        return True
    return bool(xp.all(zero[~xp.isfinite(arg_ct)]))


# ---------------------------------------------------------------------------
# Forward mode
# ---------------------------------------------------------------------------


class _Named:
    """Stands in for a primitive in messages about a custom_jvp function."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


class DebugJVPTrace(JVPTrace):
    """A `JVPTrace` that checks every primal output and every tangent.

    `JVPTrace.process` is repeated here rather than given hooks, so the
    normal interpreter pays nothing for debugging.
    """

    __slots__ = ()

    def process(self, prim, args, params):
        primals, tangents = self.unwrap(args)
        for p in primals:
            if isinstance(p, Tracer):           # an outer transformation's value
                ans = prim.bind(*primals, **params)
                break
        else:
            ans = prim.impl(*primals, **params)
        context = trace_state.nan_context
        source = user_source() if context is None else context[2]
        outs = ans if prim.multiple_results else (ans,)
        _check_outputs(outs, prim, context, source, primals)
        if prim.nondiff or all_zero(tangents) or \
                not any(get_aval(a).dtype.kind in "fc" for a in outs):
            return self.constant(ans, prim.multiple_results)
        if prim.jvp is None:
            raise MissingRuleError(missing_rule_message(prim, "jvp"))
        # the rule's own equations (staged under jit) belong to this one
        rule_context = _tangent_context(context, prim, source)
        trace_state.nan_context = rule_context
        try:
            out_tangents = prim.jvp(tangents, ans, *primals, **params)
        finally:
            trace_state.nan_context = context
        if not prim.multiple_results:
            _check_outputs((out_tangents,), prim, rule_context, source, primals)
            return self.wrap(ans, out_tangents)
        _check_outputs(out_tangents, prim, rule_context, source, primals)
        return tuple(self.wrap(a, t) for a, t in zip(ans, out_tangents))

    def process_custom_jvp(self, fun, rule, args):
        primals, tangents = self.unwrap(args)
        context = trace_state.nan_context
        source = user_source() if context is None else context[2]
        prim = _Named(f"custom_jvp[{getattr(fun, '__name__', fun)}]")
        out, out_tangent = call_jvp_rule(fun, rule, primals, tangents)
        refuse_closures((out, out_tangent), "custom_jvp", fun, self.level)
        several = isinstance(out, tuple)
        _check_outputs(out if several else (out,), prim, context, source, primals)
        _check_outputs(out_tangent if several else (out_tangent,), prim,
                       _tangent_context(context, prim, source), source, primals)
        if several:
            return tuple(self.wrap(o, t) for o, t in zip(out, out_tangent))
        return self.wrap(out, out_tangent)


# ---------------------------------------------------------------------------
# Staging and jit
# ---------------------------------------------------------------------------


def run_checked(graph, args):
    """Evaluate ``graph`` one equation at a time, checking every output."""
    sources = graph.sources or {}
    env = dict(zip(graph.invars, args))
    masked = {}                       # var -> source of the where it came from

    def read(v):
        return v.value if type(v) is Literal else env[v]
    for eqn in graph.eqns:
        ins = [read(v) for v in eqn.invars]
        param = getattr(eqn.prim, "call_param", None)
        if param and eqn.params[param].sources is not None:
            out = run_checked(eqn.params[param], ins)
        else:
            out = eqn.prim.impl(*ins, **eqn.params)
        outs = list(out) if eqn.prim.multiple_results else [out]
        env.update(zip(eqn.outvars, outs))
        tag = sources.get(eqn.outvars[0]) if eqn.outvars else None
        pass_, prim, source, _ = tag if tag is not None else ("forward", eqn.prim,
                                                               None, None)
        if _unchecked(tag):
            continue
        origin = next((masked[v] for v in eqn.invars if v in masked), None)
        if pass_ == "reverse":
            if _is_where(prim):
                origin = source
            if origin is not None:
                masked.update((v, origin) for v in eqn.outvars)
        for value in outs:
            bad = non_finite(value)
            if bad is None:
                continue
            pass_, prim, what = _blame(tag, eqn.prim)
            extra = ""
            if pass_ == "reverse" and origin is not None and not _is_where(prim):
                extra = where_trap_message(origin, prim)
            _raise(pass_, prim, what, bad, source, ins, extra)
    return [read(v) for v in graph.outvars]
