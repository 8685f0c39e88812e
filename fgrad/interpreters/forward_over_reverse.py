"""``jvp`` of ``grad`` (a Hessian-vector product) from one recording on the primals.

Run as the interpreters compose, ``jvp(grad(f))`` evaluates every operation of
``f`` through a reverse trace and then a forward trace below it, so each one is
dispatched twice and carries a tangent, including the operations that only
compute the value of ``f``, which ``grad`` throws away. Here, when ``grad`` is
called directly under ``jvp``, it instead

1. records ``f`` once on the primal values, as a plain ``grad`` would (without
   dropping residuals: the tangent pass reads them);
2. pushes the input tangents forward through only the equations whose values the
   VJP rules read (`_tangent_nodes`): a value's tangent is computed only if the
   reverse sweep can see it;
3. sweeps the recorded equations backwards under a fresh forward trace, whose
   tracers pair those residuals with their tangents, so each cotangent comes out
   with its tangent: the gradient and the Hessian-vector product.

Steps 2 and 3 depend only on the recorded structure, so when a ``grad`` function
records the same structure again they are staged, compiled by the jit compiler
and kept (`ForwardOverReverse`): the first call builds no structure key, the
second notes it, and from the third the compiled code runs.

Closed-over values with tangents (``jvp`` of a function that calls ``grad`` of a
closure) are constants of the recording that carry their tangent into step 2.
A ``custom_jvp``/``custom_vjp`` function cannot be recorded on primals alone:
meeting one raises `Unsupported`, and ``grad`` runs ``f`` again the standard way
(once; the ``grad`` function then stays on the standard path).
"""
from fgrad.core.errors import MissingRuleError
from fgrad.core.trace import Tracer, Zero, get_aval, missing_rule_message, new_trace, trace_state
from fgrad.interpreters.compiled_sweep import (
    NOT_STAGEABLE,
    PY_SCALARS,
    SEEN_ONCE,
    Replay,
    remember,
    structure,
)
from fgrad.interpreters.forward import JVPTrace, JVPTracer
from fgrad.interpreters.reverse import ReverseTrace, backward_pass
from fgrad.interpreters.staging import gc_paused, shaped, stage
from fgrad.primitives.creation import ones_like


class Unsupported(BaseException):
    """Raised while recording: this function needs the standard interpreters.

    A BaseException, like GeneratorExit, so that ``except Exception`` in the
    user's function does not swallow it.
    """


def outer_jvp_trace(leaves):
    """The forward trace ``grad``'s inputs ``leaves`` come from, or None.

    Only a plain `JVPTrace` at the top of the stack qualifies (the checking
    interpreters of `fgrad.debug_nans` keep their own path), and only when some
    differentiated input carries one of its tangents.
    """
    stack = trace_state.trace_stack
    if not stack:
        return None
    top = stack[-1]
    if type(top) is not JVPTrace:
        return None
    for x in leaves:
        if type(x) is JVPTracer and x.owner is top:
            return top
    return None


class RecordTrace(ReverseTrace):
    """A reverse trace over primal values that keeps every residual.

    A value of ``outer`` (the forward trace being handled) met as a constant is
    recorded as itself, so `tangent_pass` reads its tangent, and evaluated on
    its primal.
    """

    __slots__ = ("outer",)
    prune_residuals = False
    reuse_temporaries = False       # the tangent pass reads every operand

    def __init__(self, level, outer):
        super().__init__(level)
        self.outer = outer

    def evaluate_traced(self, prim, primals, params):
        # ``outer``'s values are evaluated on their primals (their tangents
        # enter in `tangent_pass`); a value of a transformation outside the jvp
        # goes to its own trace
        lowered = [_lower(p, self.outer) for p in primals]
        for p in lowered:
            if isinstance(p, Tracer):
                return prim.bind(*lowered, **params)
        return prim.impl(*lowered, **params)

    def process_custom_vjp(self, fun, fwd, bwd, args):
        raise Unsupported

    def process_custom_jvp(self, fun, rule, args):
        raise Unsupported


def record(fun_of_inputs, primals, outer):
    """Run ``fun_of_inputs`` on reverse tracers of ``primals``; ``(trace, out)``."""
    with new_trace(RecordTrace, outer) as trace:
        inputs = [trace.new_input(x) for x in primals]
        out = fun_of_inputs(inputs)
    return trace, out


def _outs(out):
    return out if type(out) is tuple else (out,)


def _tangent_nodes(eqns, wanted):
    """The nodes whose tangents the backward sweep reads, plus ``wanted``.

    Scanned backwards: an equation's residuals (what its VJP reads, from
    ``vjp_reads``) are needed, and so is every input of an equation whose output
    is needed.
    """
    needed = set(wanted)
    for prim, in_nodes, out, args, ans, params in reversed(eqns):
        outs = _outs(out)
        if prim.vjp_reads is None:
            needed.update(n for n in in_nodes if n is not None)
            needed.update(o for o in outs if o is not None)
        else:
            keep_args, keep_ans = prim.residuals(tuple([n is not None for n in in_nodes]))
            needed.update(in_nodes[i] for i in keep_args
                          if i < len(in_nodes) and in_nodes[i] is not None)
            if keep_ans:
                needed.update(o for o in outs if o is not None)
        if any(o in needed for o in outs):
            needed.update(n for n in in_nodes if n is not None)
    return needed


def _lower(value, outer):
    if type(value) is JVPTracer and value.owner is outer:
        return value.primal
    return value


def tangent_pass(eqns, in_tangents, wanted, outer):
    """``{node: tangent}`` for the nodes `_tangent_nodes` names.

    ``in_tangents`` holds the inputs' tangents (None for none); equations whose
    outputs are not needed are skipped.
    """
    needed = _tangent_nodes(eqns, wanted)
    tangents = {i: t for i, t in enumerate(in_tangents) if t is not None}
    for prim, in_nodes, out, args, ans, params in eqns:
        outs = _outs(out)
        if not any(o in needed for o in outs):
            continue
        arg_tangents, primals, any_tangent = [], [], False
        for a, n in zip(args, in_nodes):
            if n is not None:
                t = tangents.get(n)
            elif type(a) is JVPTracer and a.owner is outer:
                t, a = a.tangent, a.primal
                if type(t) is Zero:
                    t = None
            else:
                t = None
            primals.append(a)
            if t is None:
                arg_tangents.append(Zero.like(a))
            else:
                arg_tangents.append(t)
                any_tangent = True
        if not any_tangent:
            continue
        if prim.jvp is None:
            raise MissingRuleError(missing_rule_message(prim, "jvp"))
        t_out = prim.jvp(arg_tangents, ans, *primals, **params)
        if type(out) is tuple:
            for o, t in zip(out, t_out if t_out is not None else ()):
                if o is not None and t is not None and type(t) is not Zero:
                    tangents[o] = t
        elif t_out is not None and type(t_out) is not Zero:
            tangents[out] = t_out
    return tangents


def sweep_with_tangents(eqns, tangents, out_node, seed, num_inputs, outer):
    """The input cotangents and their tangents: ``[(ct or None, tangent or None)]``.

    The recorded equations are swept under a new forward trace whose tracers
    pair each residual with its tangent from `tangent_pass`.
    """
    with new_trace(JVPTrace) as fwd:
        def pair(value, node):
            t = tangents.get(node) if node is not None else None
            if t is None and type(value) is JVPTracer and value.owner is outer:
                value, t = value.primal, value.tangent
            return value if t is None else JVPTracer(fwd, value, t)
        replay = []
        for prim, in_nodes, out, args, ans, params in eqns:
            new_args = [pair(a, n) for a, n in zip(args, in_nodes)]
            new_ans = tuple(pair(a, o) for a, o in zip(ans, out)) \
                if type(out) is tuple else pair(ans, out)
            replay.append((prim, in_nodes, out, new_args, new_ans, params))
        cts = backward_pass(Replay(replay), {out_node: seed})
        results = []
        for node in range(num_inputs):
            ct = cts.get(node)
            if type(ct) is JVPTracer and ct.owner is fwd:
                results.append((ct.primal, None if type(ct.tangent) is Zero
                                else ct.tangent))
            else:
                results.append((ct, None))
    return results


def evaluate(eqns, out_node, seed, in_tangents, wanted, outer):
    """Steps 2 and 3: ``(per-input (ct, tangent) pairs, {wanted node: tangent})``."""
    tangents = tangent_pass(eqns, in_tangents, wanted, outer)
    pairs = sweep_with_tangents(eqns, tangents, out_node, seed, len(in_tangents), outer)
    return pairs, {n: tangents.get(n) for n in wanted}


class ForwardOverReverse:
    """What one ``grad`` function keeps: compiled sweeps by recorded structure,
    and whether its function needs the standard interpreters."""

    __slots__ = ("compile", "entries", "unsupported", "called")

    def __init__(self, compile):
        self.compile = compile          # graph, xp -> callable (as for `SweepCache`)
        self.entries = {}
        self.unsupported = False
        # as for `SweepCache`: a first call (``jvp(grad(f))`` written inline)
        # does not build a structure key
        self.called = False

    def run(self, trace, out_node, out_value, in_tangents, wanted, xp):
        """`evaluate` for ``trace``, whose output ``out_value`` is node ``out_node``;
        compiled once the structure comes back after a first call."""
        eqns = trace.eqns
        key, arrays = structure(eqns) if self.called else (None, None)
        self.called = True
        if key is not None and all(t is None or hasattr(t, "dtype") for t in in_tangents):
            dtype = get_aval(out_value).dtype
            key = (key, out_node, dtype, tuple(wanted), xp, tuple(
                None if t is None else (t.shape, t.dtype) for t in in_tangents))
            entry = self.entries.get(key)
            if entry is None:
                remember(self.entries, key, SEEN_ONCE)
            elif entry is SEEN_ONCE:
                entry = _compile(self.compile, eqns, out_node, dtype, in_tangents, wanted,
                                 arrays, xp)
                remember(self.entries, key, entry)
            if entry is not None and entry is not SEEN_ONCE and entry is not NOT_STAGEABLE:
                trace.eqns = []                 # the residuals now live in ``arrays`` only
                return _run_compiled(entry, arrays, in_tangents, wanted)
        return evaluate(eqns, out_node, ones_like(out_value), in_tangents, wanted,
                        trace.outer)


def _compile(compile_graph, eqns, out_node, dtype, in_tangents, wanted, arrays, xp):
    """Stage and compile (with ``compile_graph``) `evaluate` over ``eqns``'
    recorded ``arrays`` and the input tangents; ``(compiled, layout,
    tangent_slots)`` or `NOT_STAGEABLE`."""
    index = {id(a): i for i, a in enumerate(arrays)}
    tangent_slots = [i for i, t in enumerate(in_tangents) if t is not None]
    layout = []

    def staged(*inputs):
        values, staged_tangents = inputs[:len(arrays)], inputs[len(arrays):]

        def swap(value):
            if type(value) in PY_SCALARS or not hasattr(value, "dtype") \
                    or id(value) not in index:
                return value                # a Python scalar or an abstract value
            return values[index[id(value)]]
        replay = []
        for prim, in_nodes, out, args, ans, params in eqns:
            new_ans = tuple(swap(a) for a in ans) if type(out) is tuple else swap(ans)
            replay.append((prim, in_nodes, out, [swap(a) for a in args], new_ans,
                           params))
        tangents = [None] * len(in_tangents)
        for slot, t in zip(tangent_slots, staged_tangents):
            tangents[slot] = t
        # the seed is a constant: the compiler folds the ones it broadcasts to
        pairs, extra = evaluate(replay, out_node, xp.ones((), dtype), tangents,
                                wanted, None)
        outs = []
        for ct, t in pairs:
            layout.append((ct is not None, t is not None))
            outs.extend(v for v in (ct, t) if v is not None)
        for n in wanted:
            layout.append((False, extra[n] is not None))
            if extra[n] is not None:
                outs.append(extra[n])
        return outs
    try:
        with gc_paused():
            graph, captured = stage(staged, [shaped(a) for a in arrays] +
                                    [shaped(in_tangents[i]) for i in tangent_slots])
        if captured:
            return NOT_STAGEABLE
        return compile_graph(graph, xp), tuple(layout), tangent_slots
    except Exception:                   # a rule that needs values: stay eager
        return NOT_STAGEABLE


def _run_compiled(entry, arrays, in_tangents, wanted):
    compiled, layout, tangent_slots = entry
    inputs = list(arrays) + [in_tangents[i] for i in tangent_slots]
    # what the caller gets is its own: an output that is one of the inputs (a
    # gradient equal to a recorded value, a tangent passed straight through) is
    # copied
    given = {id(a) for a in inputs}
    outs = iter(compiled(*inputs))

    def take(present):
        if not present:
            return None
        value = next(outs)
        return value.copy() if id(value) in given else value
    num_inputs = len(in_tangents)
    pairs = [(take(has_ct), take(has_t)) for has_ct, has_t in layout[:num_inputs]]
    extra = {n: take(has_t) for n, (_, has_t) in zip(wanted, layout[num_inputs:])}
    return pairs, extra
