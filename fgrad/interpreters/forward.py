"""Forward mode: carry a tangent beside every value and push it through JVP rules.

A value whose tangent is zero (a comparison, an integer, a constant made with
``device=x.device``) carries a symbolic `Zero`, which costs nothing: rules skip
it, and `fgrad.jvp` instantiates it only at the end. It stays a tracer, so that
Array API code sees one namespace in ``array_namespace(mask, x)``.
"""
from fgrad.core.errors import CustomRuleError, MissingRuleError
from fgrad.core.trace import EagerTracer, Trace, Tracer, Zero, get_aval, missing_rule_message
from fgrad.interpreters.custom_rules import call_jvp_rule, refuse_closures


def all_zero(tangents):
    """Whether every operand's tangent is zero (constants only: the rule would
    have nothing to push)."""
    for t in tangents:
        if type(t) is not Zero:
            return False
    return True


class JVPTracer(EagerTracer):
    """A value under forward mode: the primal and its tangent (a `Zero` for a
    value with none)."""

    __slots__ = ("tangent",)

    def __init__(self, trace, primal, tangent):
        self.owner = trace
        self.primal = primal
        self.tangent = tangent

    def carries_derivative(self):
        return type(self.tangent) is not Zero


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
        return JVPTracer(self, value, Zero.like(value))

    def constant(self, ans, multiple_results=False):
        """The tracer(s) of ``ans``, whose tangent is zero."""
        if multiple_results:
            return tuple(JVPTracer(self, a, Zero.like(a)) for a in ans)
        return JVPTracer(self, ans, Zero.like(ans))

    def process(self, prim, args, params):
        primals, tangents = self.unwrap(args)
        for p in primals:
            if isinstance(p, Tracer):           # an outer transformation's value
                ans = prim.bind(*primals, **params)
                break
        else:
            ans = prim.impl(*primals, **params)
        if prim.nondiff or all_zero(tangents):
            return self.constant(ans, prim.multiple_results)
        if prim.jvp is None:
            raise MissingRuleError(missing_rule_message(prim, "jvp"))
        if prim.multiple_results:
            if not any(get_aval(a).dtype.kind in "fc" for a in ans):
                return self.constant(ans, True)
            out_tangents = prim.jvp(tangents, ans, *primals, **params)
            return tuple(self.wrap(a, t) for a, t in zip(ans, out_tangents))
        try:
            kind = ans.dtype.kind
        except AttributeError:                  # a Python scalar
            kind = get_aval(ans).dtype.kind
        if kind not in "fc":
            return JVPTracer(self, ans, Zero.like(ans))
        return self.wrap(ans, prim.jvp(tangents, ans, *primals, **params))

    def wrap(self, primal, tangent):
        """A tracer pairing ``primal`` with ``tangent`` (a `Zero` if none)."""
        if tangent is None:
            tangent = Zero.like(primal)
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
