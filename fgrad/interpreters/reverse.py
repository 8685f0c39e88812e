"""Reverse mode: record a linear graph while evaluating, then sweep it backwards.

A `ReverseTrace` belongs to one `grad`/`vjp` call. Each primitive applied to one of
its tracers is evaluated on the real values (so Python control flow on values
works) and appended to the trace's own list of equations; nothing is global.

An equation is a plain tuple, ``(prim, in_nodes, out_node, args, ans, params)``:
this is the hottest allocation of reverse mode, and a tuple is the cheapest
record Python has. ``args`` and ``ans`` are what the VJP rule reads (the
residuals); ``in_nodes`` holds, per argument, the node number of the tracer it came
from, or ``None`` for a constant. `fgrad.core.graph` prints and checks such lists.
"""
import sys

import numpy as np

from fgrad.core.backend import array_module
from fgrad.core.errors import MissingRuleError
from fgrad.core.graph import check_graph
from fgrad.core.trace import (
    EagerTracer,
    Trace,
    Tracer,
    Zero,
    get_aval,
    graph_checking_enabled,
    missing_rule_message,
)
from fgrad.interpreters.custom_rules import (
    custom_jvp_transpose_primitive,
    custom_vjp_primitive,
    refuse_closures,
)


class ReverseTracer(EagerTracer):
    """A value under reverse mode: the primal value and its node in the graph.

    A value with no derivative here (a comparison, an integer, a constant made
    with ``device=x.device``, what such values alone compute) has node None:
    no equation sends it a cotangent, but it stays a tracer, so that Array API
    code sees one namespace in ``array_namespace(mask, x)``."""

    __slots__ = ("node",)

    def __init__(self, trace, primal, node):
        self.owner = trace
        self.primal = primal
        self.node = node

    def carries_derivative(self):
        return self.node is not None


def _dtype_kind(x):
    try:
        return x.dtype.kind
    except AttributeError:
        return get_aval(x).dtype.kind


# recorded values that are Python numbers (operands NumPy computes with as is)
PY_SCALARS = (bool, int, float, complex)

# Residuals smaller than this are kept whole: dropping them saves no memory
# worth its cost. Tests set it to 0 so every rule runs on pruned residuals.
PRUNE_MIN_BYTES = 8192


# Cheap ufuncs (one pass over memory, about a multiplication's cost in NumPy's
# SIMD loops) whose large outputs reverse mode recomputes in the sweep instead of
# keeping (see `Recompute`); sin, cos, power and the like cost several times more
# and stay kept.
RECOMPUTABLE = frozenset({"add", "subtract", "multiply", "divide", "negative", "square",
                          "exp", "absolute", "maximum", "minimum", "conjugate", "real"})
# the most operations one recomputed value may replay
MAX_RECOMPUTE_OPS = 8


class Recompute:
    """A residual reverse mode recomputes in the sweep instead of keeping.

    ``exp(-(x * x) / 4)`` of an input ``x`` costs four cheap passes over
    memory to make again, but an array of memory to keep from the forward
    pass to the sweep. An equation whose rule reads such a value records this
    recipe instead: the primitive, its operands (the function's inputs, Python
    numbers, small constants, or other recipes) and the value's shape and
    dtype. It holds nothing large, so the forward value is freed as soon as
    the user's code drops it. The sweep computes it again (`materialize`), with
    the same ufuncs on the same operands: the same bits.
    """

    __slots__ = ("dtype", "operands", "ops", "prim", "shape", "value")

    def __init__(self, prim, operands, aval, ops):
        self.prim = prim
        self.operands = operands
        self.shape = aval.shape
        self.dtype = aval.dtype
        self.ops = ops              # operations a replay runs
        self.value = None           # the sweep's value, while equations need it

    @property
    def nbytes(self):
        return 0                    # nothing kept: see `fgrad.inspection.residuals`

    def compute(self):
        """The value, made again (kept on the recipe: two rules may read it)."""
        value = self.value
        if value is None:
            value = self.value = self.prim.impl(*[
                o.compute_once() if type(o) is Recompute else o for o in self.operands])
        return value

    def compute_once(self):
        """The value of an inner recipe, not kept: only its outer one needs it."""
        if self.value is not None:
            return self.value
        return self.prim.impl(*[o.compute_once() if type(o) is Recompute else o
                                for o in self.operands])


def _recipe(recipes, prim, in_nodes, primals, ans, params):
    """`Recompute` of ``prim``'s output ``ans``, or None where it is not worth it."""
    if prim.name not in RECOMPUTABLE or params or ans.__class__ is not np.ndarray \
            or ans.nbytes < PRUNE_MIN_BYTES:
        return None
    operands, ops = [], 1
    for n, p in zip(in_nodes, primals):
        if n is None:
            # a number, or a small constant array (a large one the user may not hold)
            if not (p.__class__ in PY_SCALARS or p.__class__ is np.ndarray
                    and p.nbytes < PRUNE_MIN_BYTES):
                return None
            operands.append(p)
            continue
        r = recipes.get(n)
        if r is None:
            return None
        if type(r) is Recompute:
            ops += r.ops
        operands.append(r)
    if ops > MAX_RECOMPUTE_OPS:
        return None
    return Recompute(prim, tuple(operands), get_aval(ans), ops)


def materialize(args, ans):
    """``(args, ans)`` of an equation with every `Recompute` replaced by its value."""
    if type(ans) is Recompute:
        ans = ans.compute()
    elif type(ans) is tuple:
        ans = tuple(a.compute() if type(a) is Recompute else a for a in ans)
    return [a.compute() if type(a) is Recompute else a for a in args], ans


def _array_nbytes(x):
    # an enclosing transformation's tracer answers nbytes too, but is kept
    # whole: what the compiled sweep stages from it needs the tracer
    return -1 if isinstance(x, Tracer) else getattr(x, "nbytes", -1)


def _prune(prim, in_nodes, primals, ans):
    """Replace the large arrays the VJP will not read by their abstract values.

    This is what keeps reverse mode's memory close to a hand-written gradient:
    ``a + b`` holds neither operand, ``exp(x)`` holds only its output. Integer
    arrays (indices, masks) are always kept: they are inputs to the rules, not
    residuals. `ReverseTrace.record` calls it only when some array is large.
    """
    threshold = PRUNE_MIN_BYTES
    keep_args, keep_ans = prim.residuals(tuple([n is not None for n in in_nodes]))
    saved = primals
    for i, p in enumerate(primals):
        if i not in keep_args and _array_nbytes(p) >= threshold \
                and p.dtype.kind in "fc":
            if saved is primals:
                saved = list(primals)
            saved[i] = get_aval(p)
    if not keep_ans and _array_nbytes(ans) >= threshold:
        ans = get_aval(ans)
    return saved, ans


class ReverseTrace(Trace):
    """Evaluates primitives and records the equations the reverse sweep needs."""

    __slots__ = ("eqns", "forward", "large", "num_nodes", "recipes", "recomputes")
    # whether to drop the residuals the VJP rules do not read (see `_prune`)
    prune_residuals = True
    # whether a dead temporary's buffer may take a result (`binary_into_operand`)
    reuse_temporaries = True
    # whether large residuals cheap to make again are recomputed (`Recompute`);
    # off where another sweep (nan checking, forward-over-reverse) reads the
    # equations
    recompute_residuals = True

    def __init__(self, level):
        super().__init__(level)
        self.eqns = []
        self.num_nodes = 0
        # {node: its input array or `Recompute`}, for the large values that
        # can be made again from the inputs
        self.recipes = {}
        # whether some equation records a `Recompute` (the sweep makes them)
        self.recomputes = False
        # whether some equation took the large-array path of `record` (only
        # then can a residual be worth donating to a compiled sweep)
        self.large = False
        # {primitive: impl} evaluating some one-operand primitives' values
        # instead of their own impl (`fgrad.compiler.vector_forward`: sin and
        # kin of large arrays), set by the transformation that made the trace
        self.forward = {}

    def new_input(self, value):
        node = self.num_nodes
        self.num_nodes = node + 1
        if value.__class__ is np.ndarray:
            self.recipes[node] = value
        return ReverseTracer(self, value, node)

    def lift(self, value):
        return ReverseTracer(self, value, None)

    def constant(self, ans, multiple_results=False):
        """The tracer(s) of ``ans``, which has no derivative in this trace."""
        if multiple_results:
            return tuple(ReverseTracer(self, a, None) for a in ans)
        return ReverseTracer(self, ans, None)

    def keep_enclosing_values(self):
        """Give each equation its own tracer of every enclosing transformation's
        value it holds (a clone), for a graph that outlives the call (a vjp's
        pullback): the caller may then update the tracer in place (``w[0] = 1``),
        and the sweep must still read the value the forward pass read."""
        for k, (prim, in_nodes, node, args, ans, params) in enumerate(self.eqns):
            if any(isinstance(a, Tracer) for a in args):
                args = [a.clone() if isinstance(a, Tracer) else a for a in args]
            if isinstance(ans, Tracer):
                ans = ans.clone()
            elif type(ans) is tuple and any(isinstance(a, Tracer) for a in ans):
                ans = tuple(a.clone() if isinstance(a, Tracer) else a for a in ans)
            self.eqns[k] = (prim, in_nodes, node, args, ans, params)

    def unwrap(self, args):
        """``(primals, input nodes)`` of ``args``: this trace's tracers give their
        primal and node; anything else is a constant (node None). The nodes are
        a tuple: equations keep them, and the compiled sweep's key reads them."""
        primals, in_nodes = [], []
        for a in args:
            if isinstance(a, ReverseTracer) and a.owner is self:
                primals.append(a.primal)
                in_nodes.append(a.node)
            else:
                primals.append(a)
                in_nodes.append(None)
        return primals, tuple(in_nodes)

    def process(self, prim, args, params):
        if len(args) == 1:                       # the common unary case, unrolled
            x = args[0]
            p = x.primal
            primals, in_nodes = [p], (x.node,)
            constant = in_nodes[0] is None
            if isinstance(p, Tracer):           # an outer transformation's value
                ans = self.evaluate_traced(prim, primals, params)
            elif params:
                ans = prim.impl(p, **params)
            else:
                forward = self.forward          # empty but for large inputs
                ans = forward[prim](p) if forward and prim in forward else prim.impl(p)
        else:
            if len(args) == 2:                   # binary operations, unrolled too
                x, y = args
                if isinstance(x, ReverseTracer) and x.owner is self:
                    px, nx = x.primal, x.node
                else:
                    px, nx = x, None
                if isinstance(y, ReverseTracer) and y.owner is self:
                    py, ny = y.primal, y.node
                else:
                    py, ny = y, None
                primals, in_nodes = [px, py], (nx, ny)
                constant = nx is None and ny is None
            else:
                primals, in_nodes = self.unwrap(args)
                constant = in_nodes.count(None) == len(in_nodes)
            for p in primals:
                if isinstance(p, Tracer):
                    ans = self.evaluate_traced(prim, primals, params)
                    break
            else:
                ans = prim.impl(*primals, **params) if params else prim.impl(*primals)
        if prim.nondiff or constant:
            return self.constant(ans, prim.multiple_results)
        return self.record(prim, in_nodes, primals, ans, params)

    def binary_into_operand(self, prim, x, y):
        """``prim(x, y)`` written into the buffer of ``x``'s primal, or None.

        The caller (`fgrad.numpy`'s operators) has made sure that no one can
        reach the tracer ``x`` once the operation returns: it is a temporary
        of the user's expression, as in ``sin(x) * e + x ** 2``. Its buffer is
        reused when it is large, a NumPy array owning its memory, held by
        ``x`` alone (no equation keeps it), of the result's shape and dtype,
        and not read by the VJP; that saves one array of the forward pass's
        peak, as NumPy's own elision of temporaries does for ``a * b + c``.
        None means the ordinary path must run.
        """
        px = x.primal
        if px.__class__ is not np.ndarray or px.nbytes < PRUNE_MIN_BYTES \
                or px.base is not None or not px.flags.writeable \
                or px.dtype.kind not in "fc" or prim.vjp_reads is None:
            return None
        if isinstance(y, Tracer):
            if not (isinstance(y, ReverseTracer) and y.owner is self):
                return None                     # another trace decides
            py, ny = y.primal, y.node
        else:
            py, ny = y, None
        if py.__class__ is not np.ndarray and py.__class__ not in PY_SCALARS:
            return None
        if x.node is None and ny is None:
            return None                         # no derivative: a constant, as in bind
        if 0 in prim.residuals((True, ny is not None))[0]:
            return None                         # the VJP reads x
        # x.primal, the name px, and getrefcount's own argument: nothing else
        if sys.getrefcount(px) != 3 or np.result_type(px, py) != px.dtype:
            return None
        y_shape = py.shape if py.__class__ is np.ndarray else ()
        if y_shape != px.shape and (len(y_shape) > px.ndim or any(
                d not in (1, e) for d, e in zip(reversed(y_shape), reversed(px.shape)))):
            return None             # y broadcasts x up (or not at all): a new array
        aval = get_aval(px)
        ans = getattr(array_module(px), prim.ufunc_name)(px, py, out=px)
        return self.record(prim, (x.node, ny), [aval, py], ans, {})

    def evaluate_traced(self, prim, primals, params):
        """Evaluate ``prim`` on primals some of which are outer tracers.

        The innermost of their traces processes it directly: ``bind``'s search
        for it, and its keyword packing, done once more per operation under
        ``vmap(grad)`` and ``grad(grad)``, is the cost saved.
        """
        top = None
        for p in primals:
            if isinstance(p, Tracer):
                t = p.owner
                if top is None or t.level > top.level:
                    top = t
        if not top.active:
            return prim.bind(*primals, **params)   # a leaked tracer: bind says so
        return top.process(prim, primals, params)

    def record(self, prim, in_nodes, primals, ans, params):
        """Append one equation and return the tracer(s) of its output(s)."""
        if prim.vjp is None:
            # raised while recording, before the forward pass is wasted
            raise MissingRuleError(missing_rule_message(prim, "vjp"))
        if prim.multiple_results:
            return self._record_multiple(prim, in_nodes, primals, ans, params)
        # Integer and boolean results carry no derivative: they leave the graph
        # as constants, so nothing downstream of them is recorded.
        try:
            kind = ans.dtype.kind
        except AttributeError:
            kind = get_aval(ans).dtype.kind
        if kind not in "fc":
            return ReverseTracer(self, ans, None)
        node = self.num_nodes
        self.num_nodes = node + 1
        if prim.vjp_reads is not None and self.prune_residuals:
            # most operations are on small arrays, where there is nothing worth
            # dropping: tested here, before any call
            large = (ans.nbytes if ans.__class__ is np.ndarray
                     else _array_nbytes(ans)) >= PRUNE_MIN_BYTES
            if not large:
                for p in primals:
                    kind = p.__class__
                    if kind is np.ndarray:
                        if p.nbytes >= PRUNE_MIN_BYTES:
                            large = True
                            break
                    elif kind not in PY_SCALARS and _array_nbytes(p) >= PRUNE_MIN_BYTES:
                        large = True
                        break
            if large:
                self.large = True
                saved_args, saved_ans = _prune(prim, in_nodes, primals, ans)
                if self.recompute_residuals:
                    saved_args, saved_ans = self._recompute(
                        prim, in_nodes, node, primals, ans, params, saved_args, saved_ans)
                self.eqns.append((prim, in_nodes, node, saved_args, saved_ans, params))
                return ReverseTracer(self, ans, node)
        self.eqns.append((prim, in_nodes, node, primals, ans, params))
        return ReverseTracer(self, ans, node)

    def _recompute(self, prim, in_nodes, node, primals, ans, params, saved_args, saved_ans):
        """The residuals with each large kept value that is cheap to make again
        replaced by its `Recompute`; ``ans``'s own recipe noted for later
        equations."""
        recipes = self.recipes
        recipe = _recipe(recipes, prim, in_nodes, primals, ans, params)
        if recipe is not None:
            recipes[node] = recipe
            if saved_ans is ans:
                saved_ans = recipe
                self.recomputes = True
        for i, n in enumerate(in_nodes):
            if n is not None and saved_args[i].__class__ is np.ndarray:
                r = recipes.get(n)
                if type(r) is Recompute:
                    if saved_args is primals:
                        saved_args = list(primals)
                    saved_args[i] = r
                    self.recomputes = True
        return saved_args, saved_ans

    def _record_multiple(self, prim, in_nodes, primals, ans, params):
        nodes, outs = [], []
        for a in ans:
            if _dtype_kind(a) in "fc":
                node = self.num_nodes
                self.num_nodes = node + 1
                nodes.append(node)
                outs.append(ReverseTracer(self, a, node))
            else:
                nodes.append(None)
                outs.append(ReverseTracer(self, a, None))
        self.eqns.append((prim, in_nodes, tuple(nodes), primals, tuple(ans), params))
        return tuple(outs)

    def process_custom_vjp(self, fun, fwd, bwd, args):
        # fwd runs on this level's primals, so lower levels differentiate through
        # fwd and bwd as ordinary code (that is what makes grad(grad(f)) work).
        primals, in_nodes = self.unwrap(args)
        out, residuals = fwd(*primals)
        refuse_closures(out, "custom_vjp", fun, self.level)
        prim = custom_vjp_primitive(fun, bwd, residuals, primals, out, self.level)
        return self.record(prim, in_nodes, primals, out, {})

    def process_custom_jvp(self, fun, rule, args):
        # Reverse mode of a custom_jvp function: the rule's output tangent is
        # linear in the input tangents, so the VJP is the transpose of that linear
        # map, which reverse mode over the rule itself computes.
        primals, in_nodes = self.unwrap(args)
        out = fun(*primals)
        refuse_closures(out, "custom_jvp", fun, self.level)
        prim = custom_jvp_transpose_primitive(fun, rule, primals, out)
        return self.record(prim, in_nodes, primals, out, {})


def backward_pass(trace, seeds):
    """Sweep ``trace``'s equations backwards from ``seeds`` ({node: cotangent}).

    Returns the cotangents of the nodes no equation produced (the inputs). Each
    equation is popped as it is swept, releasing its residuals, and each cotangent
    is popped when its producer reads it, so memory falls as the sweep proceeds.
    """
    if graph_checking_enabled():
        check_graph(trace.eqns)
    recomputes = getattr(trace, "recomputes", False)
    if recomputes:
        # recording is over: the recipes live on in the equations only, so each
        # recomputed value goes with the last equation that reads it
        trace.recipes.clear()
    cts = dict(seeds)
    eqns = trace.eqns
    pop_ct = cts.pop
    pop_eqn = eqns.pop
    while eqns:
        prim, in_nodes, out, args, ans, params = pop_eqn()
        if type(out) is tuple:
            ct = tuple(ct_or_zero(pop_ct(n, None) if n is not None else None, a)
                       for n, a in zip(out, ans))
            if all(type(c) is Zero for c in ct):
                continue
        else:
            ct = pop_ct(out, None)
            if ct is None:
                continue
        if recomputes:
            args, ans = materialize(args, ans)
        if len(in_nodes) == 1:
            arg_cts = prim.vjp(ct, ans, NEEDED_ONE, *args, **params)
        else:
            needed = tuple([n is not None for n in in_nodes])
            arg_cts = prim.vjp(ct, ans, needed, *args, **params)
        for node, arg_ct in zip(in_nodes, arg_cts):
            if node is None or arg_ct is None or type(arg_ct) is Zero:
                continue
            previous = cts.get(node)
            cts[node] = arg_ct if previous is None else accumulate(previous, arg_ct)
        # this equation's residuals and cotangents go now, not when the next
        # equation's overwrite these names
        ct = args = ans = arg_cts = arg_ct = previous = None
    return cts


def accumulate(total, ct):
    """``total + ct``, written into ``total`` when no one else can see it.

    A running sum that is an array owning its memory and referenced only by the
    sweep's table (the reference count NumPy itself uses to elide temporaries)
    is a buffer we made; adding into it saves one array per fan-out, which is
    what keeps the peak memory of wide fan-out near a hand-written gradient.
    """
    if (type(total) is type(ct) and not isinstance(total, Tracer)
            and getattr(total, "base", 0) is None
            and sys.getrefcount(total) == _SOLE_OWNER
            # CuPy's flags have no `writeable` (its arrays always are)
            and getattr(total.flags, "writeable", True)
            and total.shape == ct.shape and total.dtype == ct.dtype):
        return array_module(total).add(total, ct, out=total)
    return total + ct


# references to a running sum held only by the sweep: the cotangent table, the
# caller's `previous`, this function's argument and getrefcount's own argument
_SOLE_OWNER = 4


# the ``needed`` argument of a one-input VJP rule: its one cotangent is wanted
NEEDED_ONE = (True,)


def ct_or_zero(ct, primal):
    """``ct``, or a symbolic `Zero` shaped like ``primal`` where none arrived."""
    return Zero(get_aval(primal)) if ct is None else ct
