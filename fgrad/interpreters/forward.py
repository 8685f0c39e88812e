"""Forward mode: carry a tangent beside every value and push it through JVP rules.

A value whose tangent is zero is never wrapped: the trace returns the bare primal,
so symbolic zeros cost nothing and `fgrad.jvp` instantiates them only at the end.
"""
from fgrad.core.errors import CustomRuleError, MissingRuleError
from fgrad.core.trace import EagerTracer, Trace, Tracer, Zero, get_aval, missing_rule_message
from fgrad.interpreters.custom_rules import call_jvp_rule, refuse_closures
from fgrad.primitives.creation import zeros_like


class JVPTracer(EagerTracer):
    """A value under forward mode: the primal and its (nonzero) tangent."""

    __slots__ = ("tangent",)

    def __init__(self, trace, primal, tangent):
        self.owner = trace
        self.primal = primal
        self.tangent = tangent


class JVPTrace(Trace):
    """Evaluates primitives on primals and their JVP rules on tangents."""

    __slots__ = ()

    def unwrap(self, args):
        """``(primals, tangents)`` of ``args``; a constant's tangent is None."""
        primals, tangents = [], []
        for a in args:
            if isinstance(a, JVPTracer) and a.owner is self:
                primals.append(a.primal)
                tangents.append(a.tangent)
            else:
                primals.append(a)
                tangents.append(Zero.like(a))
        return primals, tangents

    def lift(self, value):
        # a tracer with a tangent of real zeros: the one place forward mode
        # wraps a constant, since the tracer object must stay a tracer
        return JVPTracer(self, value, zeros_like(value))

    def process(self, prim, args, params):
        primals, tangents = self.unwrap(args)
        for p in primals:
            if isinstance(p, Tracer):           # an outer transformation's value
                ans = prim.bind(*primals, **params)
                break
        else:
            ans = prim.impl(*primals, **params)
        if prim.nondiff:
            return ans
        if prim.jvp is None:
            raise MissingRuleError(missing_rule_message(prim, "jvp"))
        if prim.multiple_results:
            if not any(get_aval(a).dtype.kind in "fc" for a in ans):
                return ans
            out_tangents = prim.jvp(tangents, ans, *primals, **params)
            return tuple(self.wrap(a, t) for a, t in zip(ans, out_tangents))
        try:
            kind = ans.dtype.kind
        except AttributeError:                  # a Python scalar
            kind = get_aval(ans).dtype.kind
        if kind not in "fc":
            return ans
        return self.wrap(ans, prim.jvp(tangents, ans, *primals, **params))

    def wrap(self, primal, tangent):
        """A tracer pairing ``primal`` with ``tangent`` (the bare primal if zero)."""
        if tangent is None or type(tangent) is Zero:
            return primal
        return JVPTracer(self, primal, tangent)

    def process_custom_vjp(self, fun, fwd, bwd, args):
        if getattr(fun, "jvp_of_fun", False):      # differentiated through its operations
            return tuple(fun.body(*args))
        reason = getattr(fun, "reverse_only", None)
        if reason:                  # a library's function: advice for its caller
            raise MissingRuleError(
                f"forward mode (jvp, jacfwd, hessian) reached {fun.__name__!r}, which is "
                f"differentiated in reverse mode only: {reason}. Use fgrad.jacrev for its "
                "Jacobian, or fgrad.grad or fgrad.vjp, instead.")
        raise CustomRuleError(
            f"forward mode (jvp, jacfwd, hessian) reached the custom_vjp function "
            f"{getattr(fun, '__name__', fun)!r}, which only defines a reverse rule. "
            "Use fgrad.custom_jvp instead (reverse mode derives its VJP from the JVP "
            "rule), or differentiate it with grad/vjp/jacrev.")

    def process_custom_jvp(self, fun, rule, args):
        primals, tangents = self.unwrap(args)
        out, out_tangent = call_jvp_rule(fun, rule, primals, tangents)
        refuse_closures((out, out_tangent), "custom_jvp", fun, self.level)
        if isinstance(out, tuple):
            return tuple(self.wrap(o, t) for o, t in zip(out, out_tangent))
        return self.wrap(out, out_tangent)
