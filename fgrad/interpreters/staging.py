"""Staging: trace a function with abstract values into a `fgrad.core.graph.Graph`.

A `StagingTracer` knows only its shape and dtype. Each primitive applied to one
is not evaluated: its ``abstract`` rule gives the output's shape and dtype, and
an equation is appended to the trace's list. The result is the linear program
jit compiles and `make_graph` returns.

Tracers of *other* traces met while staging (a jitted function called inside
``grad``, a ``lax.cond`` branch closing over an outer value) are not constants:
they become extra inputs of the graph (``captured``), and whoever stages the
graph passes them in when binding it.
"""

import contextlib
import gc

from fgrad.core.errors import ConcretizationError, CustomRuleError, MissingRuleError
from fgrad.core.graph import Equation, Graph, Literal, Var
from fgrad.core.trace import (
    Primitive,
    ShapedArray,
    Trace,
    Tracer,
    get_aval,
    missing_rule_message,
    nans_enabled,
    new_trace,
    trace_state,
)
from fgrad.interpreters.custom_rules import top_trace
from fgrad.interpreters.sources import describe_source, user_source


class StagingTracer(Tracer):
    """A staged value: an abstract value and the graph variable that holds it.

    The variable is ``graph_var``, not ``var``: ``x.var()`` is NumPy's
    variance, which every tracer has."""

    __slots__ = ("graph_var",)

    def __init__(self, trace, var):
        self.owner = trace
        self.graph_var = var

    @property
    def aval(self):
        return self.graph_var.aval

    def concrete(self):
        return self.known_value("its concrete value")

    def constant_value(self):
        var = self.graph_var
        return var.value if type(var) is Literal else None

    def known_value(self, what):
        """The value of a constant (staged from a literal: an array made with
        ``device=x.device``, and what is computed from such arrays alone), which
        staging knows; anything else has no value yet, and ``what`` asked for
        it."""
        var = self.graph_var
        if type(var) is Literal:
            return var.value
        raise ConcretizationError(concretization_message(self, what))

    def __bool__(self):
        return bool(self.known_value("bool() (an `if`, `while`, `and`/`or`)"))

    def __float__(self):
        return float(self.known_value("float()"))

    def __int__(self):
        return int(self.known_value("int()"))

    def __index__(self):
        return int(self.known_value("an integer index"))

    def __complex__(self):
        return complex(self.known_value("complex()"))

    def value_for(self, how):
        return self.known_value(how)


def concretization_message(tracer, what):
    source = user_source()
    where = "" if source is None else f" at {describe_source(source)}"
    return (f"a staged array ({tracer.aval}) was asked for {what}{where}, but under "
            "jit (or make_graph) arrays have a shape and dtype and no value yet. "
            "For control flow that depends on array values use fgrad.lax.cond / "
            "fgrad.lax.switch (branches), fgrad.lax.while_loop / fori_loop / scan "
            "(loops); if the value is really a configuration constant, mark that "
            "argument static with jit(f, static_argnums=...) or static_argnames.")


def is_staged(x):
    """True if ``x`` has no concrete value (a staged tracer, or one built on it)."""
    while isinstance(x, Tracer):
        if isinstance(x, StagingTracer):
            return True
        try:
            x = x.concrete()
        except ConcretizationError:
            return True
    return False


class StagingTrace(Trace):
    """Records equations from abstract rules instead of evaluating."""

    __slots__ = ("eqns", "captured", "_captured_vars", "_avals", "reverse_spans")
    # read by work that must be staged even on constants (fgrad.pure_callback)
    staging = True

    def __init__(self, level):
        super().__init__(level)
        self.eqns = []
        self.reverse_spans = []         # (start, stop) of staged reverse sweeps
        self.captured = []              # outer tracers used here, in order
        self._captured_vars = {}        # id(tracer) -> Var
        # (prim, operand avals, params) -> output aval: a long program repeats
        # the same few signatures, and abstract rules cost microseconds each
        self._avals = {}

    def new_input(self, aval):
        return StagingTracer(self, Var(aval))

    def lift(self, value):
        return StagingTracer(self, self.operand(value))

    def operand(self, x):
        """The graph operand for ``x``: its variable, a capture, or a literal."""
        if isinstance(x, StagingTracer) and x.owner is self:
            return x.graph_var
        if isinstance(x, Tracer):
            var = self._captured_vars.get(id(x))
            if var is None:
                var = Var(x.aval.strip_weak())
                self._captured_vars[id(x)] = var
                self.captured.append(x)
            return var
        return Literal(x, get_aval(x))

    def process(self, prim, args, params):
        if prim.abstract is None:
            raise MissingRuleError(missing_rule_message(prim, "abstract"))
        invars = [self.operand(a) for a in args]
        for v in invars:
            if type(v) is not Literal:
                break
        else:
            folded = fold(self, prim, invars, params)
            if folded is not None:
                return folded
        avals = [v.aval for v in invars]
        try:
            key = (prim, tuple((a.shape, a.dtype, a.weak_type) for a in avals),
                   tuple(params.items()))
            out = self._avals.get(key)
        except TypeError:               # an unhashable parameter
            key, out = None, None
        if out is None:
            out = prim.abstract(*avals, **params)
            if key is not None:
                self._avals[key] = out
        if prim.multiple_results:
            outvars = [Var(a) for a in out]
            self.eqns.append(Equation(prim, invars, outvars, params))
            return tuple(StagingTracer(self, v) for v in outvars)
        var = Var(out)
        self.eqns.append(Equation(prim, invars, [var], params))
        return StagingTracer(self, var)

    def process_custom_vjp(self, fun, fwd, bwd, args):
        # a reverse-only library function's reason (`custom_vjp`) goes with it
        reason = getattr(fun, "reverse_only", None)
        flags = {"reverse_only": reason} if reason else {}
        if getattr(fun, "jvp_of_fun", False):
            flags["jvp_of_fun"] = True
        return _stage_custom(self, custom_vjp_call_p, fun, args, fwd=fwd, bwd=bwd, **flags)

    def process_custom_jvp(self, fun, rule, args):
        return _stage_custom(self, custom_jvp_call_p, fun, args, rule=rule)


def foldable(prim):
    """Whether staging may evaluate ``prim`` on constants now: not a print or a
    host callback (the user's run-time work), nor a call of a staged body."""
    return prim.impl is not None and not (
        getattr(prim, "effectful", False) or getattr(prim, "host_callback", False)
        or getattr(prim, "call_param", None))


def fold(trace, prim, literals, params):
    """``prim`` of constants only, evaluated while staging: a constant tracer
    whose value is known, or None to stage it as usual.

    Constants are arrays made on a staged value's device (Array API code's
    ``xp.asarray(y, device=X.device)``): what is computed from them alone is
    known before the graph runs, as it would be outside jit, so code may read
    it (``xp.unique(y)`` for a shape, ``if xp.all(w == 0)``) as it does there.
    """
    if not foldable(prim):
        return None
    try:
        out = prim.impl(*[v.value for v in literals], **params)
    except Exception:               # left to fail (or not) when the graph runs
        return None
    if prim.multiple_results:
        return tuple(StagingTracer(trace, Literal(o, get_aval(o))) for o in out)
    return StagingTracer(trace, Literal(out, get_aval(out)))


class DebugStagingTrace(StagingTrace):
    """Staging that tags each equation's first output with where it came from.

    ``graph.sources[var] = (pass, prim, source, where_origin)``: the forward
    equations get the user's line; equations staged by a VJP rule inside a
    debugging reverse sweep get that sweep's context (the primitive being
    differentiated and its line).
    """

    __slots__ = ("sources",)

    def __init__(self, level):
        super().__init__(level)
        self.sources = {}

    def process(self, prim, args, params):
        staged = len(self.eqns)
        out = super().process(prim, args, params)
        eqn = self.eqns[-1] if len(self.eqns) > staged else None    # None: folded
        if eqn is not None and eqn.prim is prim and eqn.outvars:
            context = trace_state.nan_context
            self.sources[eqn.outvars[0]] = context if context is not None else (
                "forward", prim, user_source(), None)
        return out


# The debug_nans pass of equations whose values are partly thrown away: the
# branches of a `cond` that vmap runs on every example before each example
# selects its own. A NaN in an unselected lane is no error (the log of the
# negative examples that an `x > 0` branch never keeps); one in a selected lane
# reaches the select that follows, which is checked.
UNSELECTED = "every branch, before selecting"


@contextlib.contextmanager
def unselected_lanes():
    """Stage or run the equations inside with the `UNSELECTED` tag: unchecked."""
    previous = trace_state.nan_context
    trace_state.nan_context = (UNSELECTED, None, None, None)
    try:
        yield
    finally:
        trace_state.nan_context = previous


@contextlib.contextmanager
def gc_paused():
    """Suspend the cyclic garbage collector while building a graph.

    Staging and compiling allocate several objects per equation and free none,
    so every generational collection would rescan all of them: that makes a
    10^5-equation graph quadratic. Nothing they create is cyclic garbage.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def stage(flat_fun, in_avals):
    """Trace ``flat_fun`` (flat list of inputs -> flat list of outputs).

    Returns ``(graph, captured)``: the graph's inputs are the given avals
    followed by one per captured outer tracer, in ``captured`` order.
    """
    trace_type = DebugStagingTrace if nans_enabled() else StagingTrace
    with new_trace(trace_type) as trace:
        inputs = [trace.new_input(a) for a in in_avals]
        # read before the call: an in-place update rebinds an input's tracer
        invars = [t.graph_var for t in inputs]
        outs = flat_fun(*inputs)
        outvars = [trace.operand(o) for o in outs]
    invars += [trace._captured_vars[id(t)]
                                        for t in trace.captured]
    graph = Graph(invars, trace.eqns, outvars, getattr(trace, "sources", None))
    if trace.reverse_spans:
        graph.reverse = frozenset(id(e) for start, stop in trace.reverse_spans
                                  for e in trace.eqns[start:stop])
    return graph, trace.captured


def eval_graph(graph, args):
    """Run ``graph`` on ``args`` by binding each equation's primitive.

    Under another transformation this re-evaluates the graph on that trace's
    tracers, which is how a staged call is differentiated or re-staged. A graph
    staged under debug_nans (``graph.sources``) keeps each equation's line: it
    is the NaN context while the equation runs.
    """
    env = dict(zip(graph.invars, args))

    def read(v):
        return v.value if type(v) is Literal else env[v]

    def run(eqn):
        out = eqn.prim.bind(*[read(v) for v in eqn.invars], **eqn.params)
        if eqn.prim.multiple_results:
            env.update(zip(eqn.outvars, out))
        else:
            env[eqn.outvars[0]] = out
    sources = graph.sources
    if sources is None:
        for eqn in graph.eqns:
            run(eqn)
        return [read(v) for v in graph.outvars]
    previous = trace_state.nan_context
    if previous is not None and previous[0] == UNSELECTED:
        sources = {}                # unchecked stays unchecked, whatever the lines
    try:
        for eqn in graph.eqns:
            tag = sources.get(eqn.outvars[0]) if eqn.outvars else None
            trace_state.nan_context = tag if tag is not None else previous
            run(eqn)
    finally:
        trace_state.nan_context = previous
    return [read(v) for v in graph.outvars]


def shaped(x):
    """The abstract value jit stages an argument with (weak scalars stay weak)."""
    aval = get_aval(x)
    return ShapedArray(aval.shape, aval.dtype, aval.weak_type)





# ---------------------------------------------------------------------------
# custom_jvp / custom_vjp functions in a staged graph
# ---------------------------------------------------------------------------
#
# A custom function called while staging becomes one equation whose graph is
# its body and whose parameters are the user's rules, so a transformation of
# the staged graph (grad of a jitted function, vmap of it) still uses the
# rules: binding the equation's primitive hands the call to the innermost
# trace's ``process_custom_*``, exactly as calling the decorated function does.
# The compiler inlines the body (``call_param``). A body that closes over a
# value traced outside the custom function is inlined at once instead: its
# rules could not be replayed on other values.


class CustomCallPrimitive(Primitive):
    """The primitive of a staged `custom_jvp` (parameter ``rule``) or
    `custom_vjp` (``fwd``, ``bwd``) call; its ``body`` parameter is the
    function's graph.

    Structural, like a call: it has no rule columns of its own (its derivative
    and batching are the user's rules, applied by the traces), so it stays out
    of the dispatch table."""

    def __init__(self, name, kind):
        super().__init__(name, self._impl, self._abstract, multiple_results=True,
                         family="fgrad/interpreters/staging.py", register=False)
        self.kind = kind
        self.call_param = "body"

    @staticmethod
    def _impl(*args, body, name, **rules):
        return tuple(eval_graph(body, args))

    @staticmethod
    def _abstract(*avals, body, name, **rules):
        return tuple(v.aval for v in body.outvars)

    def bind(self, *args, body, name, **rules):
        trace = top_trace(args)
        if trace is None:
            return self._impl(*args, body=body, name=name)

        def fun(*xs):
            return self.bind(*xs, body=body, name=name, **rules)
        fun.__name__ = name
        fun.body = lambda *xs: tuple(eval_graph(body, xs))
        fun.reverse_only = rules.get("reverse_only")
        fun.jvp_of_fun = rules.get("jvp_of_fun", False)
        if self.kind == "jvp":
            return trace.process_custom_jvp(fun, rules["rule"], args)
        return trace.process_custom_vjp(fun, rules["fwd"], rules["bwd"], args)


def _stage_custom(trace, prim, fun, args, **rules):
    body_fun = getattr(fun, "body", fun)
    name = getattr(fun, "__name__", "custom")
    body, captured = stage(lambda *xs: list(body_fun(*xs)),
                           [get_aval(a).strip_weak() for a in args])
    if any(t.owner.level > trace.level for t in captured):
        # a value of a transformation inside this one (vmap inside jit): the
        # function, handed down with its rules, cannot be staged here
        raise CustomRuleError(
            f"the custom_{prim.kind} function {name!r} closes over a value that a "
            "transformation inside jit is tracing (vmap's batch, or a value grad or jvp "
            f"is differentiating), so its rules cannot be staged. Pass that value to "
            f"{name} as an argument.")
    if captured:
        return tuple(body_fun(*args))
    return trace.process(prim, args, dict(body=body, name=name, **rules))


custom_jvp_call_p = CustomCallPrimitive("custom_jvp_call", "jvp")
custom_vjp_call_p = CustomCallPrimitive("custom_vjp_call", "vjp")
