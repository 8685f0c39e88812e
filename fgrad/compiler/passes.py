"""Graph-to-graph passes: each takes a `fgrad.core.graph.Graph` and returns a
simpler one computing the same outputs, in time linear in its equations.

`optimize` runs them in this order:

1. ``inline_calls``: a nested jitted call is replaced by its graph's equations,
   so the passes below see across jit boundaries;
2. ``fold_constants``: equations whose operands are all literals, and
   shape-only ones (``full_like``), are evaluated once, at compile time;
3. ``propagate_zeros``: a known-zero operand short-circuits the arithmetic that
   would consume it (``x + 0 -> x``, ``x * 0 -> 0``, ``sum(0) -> 0``), so no
   zero arrays are computed at run time;
4. ``sink_negations``: ``x @ -y`` becomes ``-(x @ y)`` where the product is
   the smaller array, so the negated operand need not be made;
5. ``eliminate_common_subexpressions``: identical equations are computed once;
6. ``merge_sibling_scans``: two scans computing some carry or ``ys`` alike
   (a gradient's primal loop and its residual-keeping loop) run as one;
7. ``eliminate_dead_code``: equations no output depends on are dropped.
"""
import functools

import numpy as np

from fgrad.core.graph import Equation, Graph, Literal, Var
from fgrad.core.trace import ShapedArray
from fgrad.primitives import elementwise as ew
from fgrad.primitives import indexing, products, reductions, shape

# ---------------------------------------------------------------------------
# Pass helpers
# ---------------------------------------------------------------------------


def substituter(subst):
    """``read(v)``: variable ``v`` after the renamings in ``subst`` ({var: var}),
    followed to the end of the chain; literals pass through. Shared with jit's
    graph surgery (`fgrad.transforms.jit`)."""
    def read(v):
        if type(v) is Var:
            while v in subst:
                v = subst[v]
        return v
    return read


def _rebuild(graph, eqns, subst):
    read = substituter(subst)
    return Graph(graph.invars, eqns, [read(v) for v in graph.outvars])


def effectful(prim):
    """Whether ``prim`` has an effect (a print, a callback): such equations are
    never dropped, merged or moved by a pass."""
    return getattr(prim, "effectful", False)


# ---------------------------------------------------------------------------
# 1. Inlining nested calls
# ---------------------------------------------------------------------------


def inline_calls(graph):
    """Replace every call equation (``prim.call_param``) by its graph's equations."""
    if not any(getattr(e.prim, "call_param", None) for e in graph.eqns):
        return graph
    eqns, subst = [], {}
    read = substituter(subst)
    for eqn in graph.eqns:
        param = getattr(eqn.prim, "call_param", None)
        invars = [read(v) for v in eqn.invars]
        if not param:
            eqns.append(Equation(eqn.prim, invars, eqn.outvars, eqn.params))
            continue
        inner = inline_calls(eqn.params[param])
        # fresh copies of the inner variables: the same inner graph may be
        # inlined twice, and each copy needs its own values
        rename = dict(zip(inner.invars, invars))

        def local(v):
            if type(v) is Literal:
                return v
            r = rename.get(v)
            if r is None:
                r = rename[v] = Var(v.aval)
            return r
        for e in inner.eqns:
            eqns.append(Equation(e.prim, [local(v) for v in e.invars],
                                 [local(v) for v in e.outvars], e.params))
        for out, inner_out in zip(eqn.outvars, inner.outvars):
            subst[out] = local(inner_out)
    return _rebuild(graph, eqns, subst)


# ---------------------------------------------------------------------------
# 2. Constant folding
# ---------------------------------------------------------------------------


def fold_constants(graph, xp=np):
    """Evaluate, once, every equation whose value is known at compile time.

    That is an equation whose operands are all literals, or one whose primitive
    depends only on its operands' shapes (``prim.shape_only``, e.g. ``full_like``).
    """
    eqns, subst = [], {}
    read = substituter(subst)
    for eqn in graph.eqns:
        invars = [read(v) for v in eqn.invars]
        prim = eqn.prim
        # a host callback is the user's run-time work, not a constant to precompute
        foldable = not effectful(prim) and not getattr(prim, "host_callback", False) \
            and prim.impl is not None and (
            all(type(v) is Literal for v in invars) or getattr(prim, "shape_only", False))
        if foldable and not getattr(prim, "call_param", None):
            args = [v.value if type(v) is Literal else _dummy(xp, v.aval) for v in invars]
            try:
                with np.errstate(all="ignore"):
                    out = prim.impl(*args, **eqn.params)
            except Exception:           # leave it to fail (or not) at run time
                out = None
            else:
                outs = out if prim.multiple_results else (out,)
                for var, value in zip(eqn.outvars, outs):
                    subst[var] = Literal(on_backend(xp, value), var.aval)
                continue
        eqns.append(Equation(prim, invars, eqn.outvars, eqn.params))
    return _rebuild(graph, eqns, subst)


def on_backend(xp, value):
    """``value`` on backend ``xp`` (a compile-time constant for ``xp``'s code)."""
    # a constant computed from Python numbers comes out of NumPy; the compiled
    # code of a device backend needs it on the device
    if xp is not np and isinstance(value, np.ndarray):
        return xp.asarray(value)
    return value


def _dummy(xp, aval):
    return xp.zeros(aval.shape, aval.dtype)


# ---------------------------------------------------------------------------
# 3. Symbolic zeros
# ---------------------------------------------------------------------------


def is_zero_literal(v):
    """Whether operand ``v`` is a literal that is exactly zero everywhere."""
    if type(v) is not Literal:
        return False
    value = v.value
    if isinstance(value, (bool, int, float, complex)):
        return value == 0
    if getattr(value, "size", 0) == 0 or v.aval.dtype.kind not in "fcib":
        return False
    try:
        return not bool(value.any())
    except Exception:
        return False


def is_one_literal(v):
    """Whether operand ``v`` is a literal one that multiplies exactly (not complex)."""
    # exact identities only: 1 * x == x bit for bit for real floats and ints
    # (not complex: (1+0j) * (inf+0j) has a NaN imaginary part)
    if type(v) is not Literal or v.aval.dtype.kind not in "fiu":
        return False
    value = v.value
    if isinstance(value, (bool, int, float)):
        return value == 1
    try:
        return getattr(value, "size", 0) > 0 and bool((value == 1).all())
    except Exception:
        return False


def _unit_rules():
    # Multiplying or dividing by one returns the other operand unchanged; this is
    # what a reverse sweep seeded with ones (the cotangent of ``sum``) is full of.
    def same(v, out):
        return v.aval.shape == out.aval.shape and v.aval.dtype == out.aval.dtype

    def multiply(invars, ones, out):
        a, b = invars
        if ones[0] and type(b) is Var and same(b, out):
            return b
        if ones[1] and type(a) is Var and same(a, out):
            return a
        return None

    def divide(invars, ones, out):
        a = invars[0]
        return a if ones[1] and type(a) is Var and same(a, out) else None

    return {ew.multiply_p: multiply, ew.divide_p: divide}


@functools.lru_cache(maxsize=None)
def _unit_rule_table():
    return _unit_rules()


def _zero_rules():
    # The arithmetic a zero operand makes trivial. Keyed by primitive: this is
    # the compiler's algebra, the one place that knows these primitives' values.
    def same(v, out):
        return v.aval.shape == out.aval.shape and v.aval.dtype == out.aval.dtype

    def add(invars, zeros, out):
        a, b = invars
        if zeros[1] and same(a, out):
            return a
        if zeros[0] and same(b, out):
            return b
        return None

    def subtract(invars, zeros, out):
        a, b = invars
        if zeros[1] and same(a, out):
            return a
        if zeros[0] and zeros[1]:
            return "zero"
        return None

    def absorbing(positions):
        def rule(invars, zeros, out):
            return "zero" if any(zeros[i] for i in positions) else None
        return rule

    def where(invars, zeros, out):
        if zeros[1] and zeros[2]:
            return "zero"
        if not zeros[0]:
            return None
        # a condition false everywhere (the derivative of ``x ** 3`` asks
        # whether the literal exponent is 0): the third operand, so that a
        # power's exponent reaches the code as the literal it is
        chosen = invars[2]
        if type(chosen) is Literal and chosen.aval.shape == () and \
                np.dtype(chosen.aval.dtype) == out.aval.dtype:
            # an array of the output's shape, made by the graph's backend
            # (below) from a host number: a Python number would not answer
            # the array methods the code calls on an output's value
            value = chosen.value
            if isinstance(value, (np.ndarray, np.generic)):
                value = value.item()
            if isinstance(value, (bool, int, float, complex)):
                return "fill", value
        if same(chosen, out):
            return chosen
        return None

    rules = {ew.add_p: add, ew.subtract_p: subtract,
             ew.multiply_p: absorbing((0, 1)), ew.divide_p: absorbing((0,)),
             ew.where_p: where, products.matmul_p: absorbing((0, 1))}
    for prim in (ew.negative_p, ew.convert_element_type_p, ew.real_p, ew.conj_p,
                 shape.reshape_p, shape.transpose_p, shape.broadcast_to_p,
                 reductions.sum_p, indexing.getitem_p, indexing.scatter_add_p):
        rules[prim] = absorbing((0,))
    return rules


@functools.lru_cache(maxsize=None)
def _zero_rule_table():
    return _zero_rules()


def propagate_zeros(graph, xp=np):
    """Short-circuit arithmetic on known zeros and ones (after `fold_constants`).

    ``x * 0`` is a symbolic zero and ``x * 1`` and ``x / 1`` are ``x``.

    A zero that survives into an equation with no rule, or into an output, is
    materialised once, at compile time, as a constant.
    """
    rules, unit_rules = _zero_rule_table(), _unit_rule_table()
    eqns, subst = [], {}
    read = substituter(subst)
    zero_of = {}

    def zero_literal(aval):
        key = (aval.shape, aval.dtype)
        lit = zero_of.get(key)
        if lit is None:
            lit = zero_of[key] = Literal(xp.zeros(aval.shape, aval.dtype),
                                         ShapedArray(aval.shape, aval.dtype))
        return lit
    for eqn in graph.eqns:
        invars = [read(v) for v in eqn.invars]
        rule = rules.get(eqn.prim)
        if rule is not None:
            zeros = [is_zero_literal(v) for v in invars]
            if any(zeros):
                result = rule(invars, zeros, eqn.outvars[0])
                if result is not None:
                    out = eqn.outvars[0]
                    if isinstance(result, tuple):       # ("fill", value)
                        result = Literal(xp.full(out.aval.shape, result[1], out.aval.dtype),
                                         ShapedArray(out.aval.shape, out.aval.dtype))
                    subst[out] = zero_literal(out.aval) if result == "zero" else result
                    continue
        unit_rule = unit_rules.get(eqn.prim)
        if unit_rule is not None:
            ones = [is_one_literal(v) for v in invars]
            if any(ones):
                result = unit_rule(invars, ones, eqn.outvars[0])
                if result is not None:
                    subst[eqn.outvars[0]] = result
                    continue
        eqns.append(Equation(eqn.prim, invars, eqn.outvars, eqn.params))
    return _rebuild(graph, eqns, subst)


# ---------------------------------------------------------------------------
# 4. Negations moved past products
# ---------------------------------------------------------------------------


def sink_negations(graph):
    """``x @ -y`` becomes ``-(x @ y)`` (and ``-x @ y`` too) where the product
    is smaller than the negated operand.

    A reverse sweep negates cotangents (the VJP of ``a - b``), and one that
    reaches a matrix product as ``-ct`` is a whole array written to be read
    once: kmeans' Newton direction wrote its n x k weights twice, once
    negated for the product with the points. Negation commutes with the
    product exactly (each term is negated, and rounding is symmetric), but
    for the sign of a zero; the negated operand is then dead unless
    something else reads it.
    """
    negated = {}                 # the output of each negation -> its operand
    eqns = []
    for eqn in graph.eqns:
        if eqn.prim is ew.negative_p and type(eqn.invars[0]) is Var \
                and np.dtype(eqn.invars[0].aval.dtype).kind in "fc":
            negated[eqn.outvars[0]] = eqn.invars[0]
        elif eqn.prim is products.matmul_p and any(v in negated for v in eqn.invars):
            out = eqn.outvars[0]
            flips = [v for v in eqn.invars if v in negated]
            if all(out.aval.size < v.aval.size for v in flips):
                invars = [negated.get(v, v) for v in eqn.invars]
                if len(flips) == 2:          # -x @ -y == x @ y
                    eqns.append(Equation(eqn.prim, invars, eqn.outvars, eqn.params))
                    continue
                product = Var(out.aval)
                eqns.append(Equation(eqn.prim, invars, [product], eqn.params))
                eqns.append(Equation(ew.negative_p, [product], [out], {}))
                continue
        eqns.append(eqn)
    return Graph(graph.invars, eqns, graph.outvars)


# ---------------------------------------------------------------------------
# 5. Common subexpressions
# ---------------------------------------------------------------------------


def _operand_key(v):
    if type(v) is Var:
        return v
    value = v.value
    if isinstance(value, (bool, int, float, complex)):
        return (type(value), value)
    return ("const", id(value))


def eliminate_common_subexpressions(graph):
    """Compute each distinct (primitive, operands, params) once."""
    eqns, subst, seen = [], {}, {}
    read = substituter(subst)
    for eqn in graph.eqns:
        invars = [read(v) for v in eqn.invars]
        new = Equation(eqn.prim, invars, eqn.outvars, eqn.params)
        if effectful(eqn.prim):
            eqns.append(new)
            continue
        try:
            key = (eqn.prim, tuple(_operand_key(v) for v in invars),
                   tuple(sorted(eqn.params.items())))
            hash(key)
        except TypeError:               # an unhashable parameter: keep as is
            eqns.append(new)
            continue
        previous = seen.get(key)
        if previous is not None:
            for mine, theirs in zip(eqn.outvars, previous.outvars):
                subst[mine] = theirs
            continue
        seen[key] = new
        eqns.append(new)
    return _rebuild(graph, eqns, subst)


# ---------------------------------------------------------------------------
# 6. Sibling scans
# ---------------------------------------------------------------------------


def merge_sibling_scans(graph):
    """Two scans of one length and direction that compute some carry or
    ``ys`` alike run as one, where the later reads only values made before
    the earlier: a gradient stages its primal scan and then the same loop
    again keeping residuals, and ran the forward loop twice.

    The merged body is the two bodies side by side, an operand both read (a
    constant, an ``xs``) read once. Two carries that start from one value
    are taken to be one; after common-subexpression elimination of the body,
    those whose next values are then one value are one carry at every step
    (by induction), and the others are taken apart again. A ``ys`` computed
    alike is kept once.
    """
    if sum(1 for e in graph.eqns if e.prim.name == "scan") < 2:
        return graph
    eqns, subst = [], {}
    read = substituter(subst)
    made_at = {}                        # value -> the position of its equation in eqns
    for eqn in graph.eqns:
        eqn = Equation(eqn.prim, [read(v) for v in eqn.invars], eqn.outvars, eqn.params)
        merged = None
        if _mergeable_scan(eqn):
            after = max((made_at.get(v, -1) for v in eqn.invars if type(v) is Var), default=-1)
            for k in range(after + 1, len(eqns)):
                if _mergeable_scan(eqns[k]) and all(
                        eqns[k].params[p] == eqn.params[p] for p in ("length", "reverse")):
                    merged = _merged_scans(eqns[k], eqn, subst)
                    if merged is not None:
                        eqns[k] = merged
                        made_at.update((v, k) for v in merged.outvars)
                        break
        if merged is None:
            made_at.update((v, len(eqns)) for v in eqn.outvars)
            eqns.append(eqn)
    return _rebuild(graph, eqns, subst)


def _mergeable_scan(eqn):
    return eqn.prim.name == "scan" and not _has_effects(eqn.params["body"])


def _has_effects(graph):
    """Whether an equation of ``graph``, or of a graph inside one, has an effect."""
    for e in graph.eqns:
        inner = [p for v in e.params.values()
                 for p in (v if isinstance(v, (tuple, list)) else (v,)) if type(p) is Graph]
        if effectful(e.prim) or any(map(_has_effects, inner)):
            return True
    return False


def _scan_parts(values, params):
    """``(consts, carries, xs)`` of a scan's operands, or of its body's inputs."""
    n, m = params["n_consts"], params["n_consts"] + params["n_carry"]
    return list(values[:n]), list(values[n:m]), list(values[m:])


def renamed(graph):
    """``graph`` with new variables: a copy that can stand beside ``graph``
    (two scans may share one body; a program lowers one body per loop)."""
    new = {}

    def fresh(v):
        if type(v) is Var and v not in new:
            new[v] = Var(v.aval)
        return new.get(v, v) if type(v) is Var else v
    invars = [fresh(v) for v in graph.invars]
    eqns = [Equation(e.prim, [fresh(v) for v in e.invars], [fresh(v) for v in e.outvars],
                     e.params) for e in graph.eqns]
    return Graph(invars, eqns, [fresh(v) for v in graph.outvars])


def _merged_scans(a, b, subst):
    """The scan computing scan ``a``'s and scan ``b``'s results, or None
    where they compute no carry or ``ys`` alike; ``subst`` maps each result
    of ``b`` that ``a`` computes to ``a``'s (`merge_sibling_scans`)."""
    pa, pb, body_b = a.params, b.params, renamed(b.params["body"])
    a_ops, b_ops = _scan_parts(a.invars, pa), _scan_parts(b.invars, pb)
    a_in, b_in = _scan_parts(pa["body"].invars, pa), _scan_parts(body_b.invars, pb)
    shared = {}                         # b's body input -> a's, for an operand both read
    for part in (0, 2):
        mine = {}
        for v, inner in zip(a_ops[part], a_in[part]):
            mine.setdefault(_operand_key(v), inner)
        shared.update((inner, mine[_operand_key(v)]) for v, inner in zip(b_ops[part], b_in[part])
                      if _operand_key(v) in mine)
    starts = {}
    for i, v in enumerate(a_ops[1]):
        starts.setdefault(_operand_key(v), i)
    carries = {j: starts[_operand_key(v)] for j, v in enumerate(b_ops[1])
               if _operand_key(v) in starts}  # b's carry j -> a's carry i, taken one
    n_a, n_b = pa["n_carry"], pb["n_carry"]
    while True:
        rename = dict(shared)
        rename.update((b_in[1][j], a_in[1][i]) for j, i in carries.items())
        body = eliminate_common_subexpressions(Graph(
            pa["body"].invars, pa["body"].eqns + [
                Equation(e.prim, [rename.get(v, v) if type(v) is Var else v for v in e.invars],
                         e.outvars, e.params) for e in body_b.eqns],
            pa["body"].outvars + [rename.get(v, v) if type(v) is Var else v
                                  for v in body_b.outvars]))
        outs_a, outs_b = body.outvars[:len(a.outvars)], body.outvars[len(a.outvars):]
        apart = [j for j, i in carries.items()
                 if _operand_key(outs_b[j]) != _operand_key(outs_a[i])]
        if not apart:
            break
        for j in apart:
            del carries[j]
    made = {}
    for i in range(n_a, len(outs_a)):
        made.setdefault(_operand_key(outs_a[i]), i)
    ys = {j: made[_operand_key(y)] for j, y in enumerate(outs_b)
          if j >= n_b and _operand_key(y) in made}
    if not carries and not ys:
        return None
    for j, i in list(carries.items()) + list(ys.items()):
        subst[b.outvars[j]] = a.outvars[i]
    kept = [[k for k, inner in enumerate(part) if inner not in rename] for part in b_in]
    kept_out = [j for j in range(len(b.outvars)) if j not in carries and j not in ys]
    invars, operands = [], []
    for part in range(3):
        invars += a_in[part] + [b_in[part][k] for k in kept[part]]
        operands += a_ops[part] + [b_ops[part][k] for k in kept[part]]
    outvars = (outs_a[:n_a] + [outs_b[j] for j in kept_out if j < n_b] + outs_a[n_a:]
               + [outs_b[j] for j in kept_out if j >= n_b])
    results = (a.outvars[:n_a] + [b.outvars[j] for j in kept_out if j < n_b] + a.outvars[n_a:]
               + [b.outvars[j] for j in kept_out if j >= n_b])
    body = eliminate_dead_code(Graph(invars, body.eqns, outvars))
    return Equation(a.prim, operands, results, dict(
        pa, body=body, n_consts=len(a_in[0]) + len(kept[0]), n_carry=n_a + len(kept[1])))


# ---------------------------------------------------------------------------
# 7. Dead code
# ---------------------------------------------------------------------------


def eliminate_dead_code(graph):
    """Drop equations whose outputs nothing reads (effects are always kept)."""
    live = {v for v in graph.outvars if type(v) is Var}
    kept = []
    for eqn in reversed(graph.eqns):
        if effectful(eqn.prim) or any(v in live for v in eqn.outvars):
            kept.append(eqn)
            live.update(v for v in eqn.invars if type(v) is Var)
    kept.reverse()
    return Graph(graph.invars, kept, graph.outvars)


def optimize(graph, xp=np):
    """The whole pass pipeline, in order."""
    graph = inline_calls(graph)
    graph = fold_constants(graph, xp)
    graph = propagate_zeros(graph, xp)
    graph = sink_negations(graph)
    graph = eliminate_common_subexpressions(graph)
    graph = merge_sibling_scans(graph)
    return eliminate_dead_code(graph)
