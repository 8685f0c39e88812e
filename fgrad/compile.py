"""Compiling a staged graph into straight-line Python.

`compile_graph` runs a fixed pipeline of passes over a `fgrad.graph.Graph`, each
one linear in the number of equations:

1. ``inline_calls``: a nested jitted call is replaced by its graph's equations,
   so the passes below see across jit boundaries;
2. ``fold_constants``: equations whose operands are all literals, and
   shape-only ones (``full_like``), are evaluated once, at compile time;
3. ``propagate_zeros``: a known-zero operand short-circuits the arithmetic that
   would consume it (``x + 0 -> x``, ``x * 0 -> 0``, ``sum(0) -> 0``), so no
   zero arrays are computed at run time;
4. ``eliminate_common_subexpressions``: identical equations are computed once;
5. ``eliminate_dead_code``: equations no output depends on are dropped;

then, on a backend that builds elementwise kernels (CuPy), ``fuse_elementwise``
(`fgrad.fusion`) replaces each chain of elementwise equations by one generated
kernel; and then ``generate`` writes one Python function with one line per remaining
equation. Each line calls the backend's function directly (``sin(a)``, not
``sin_p.bind(a)``), ``del`` releases every intermediate after its last reader,
and an elementwise equation whose operand buffer dies at that line writes its
result into that buffer (``out=``). A buffer is reused only if it was made by
an earlier elementwise equation of this same call: never a user's input, a
constant, or anything that might share memory with a live value.
"""
import contextlib
import functools
import gc
import linecache
import math

import numpy as np

from .backend import elementwise_kernel_maker
from .core import ShapedArray
from .graph import Equation, Graph, Literal, Var

# ---------------------------------------------------------------------------
# Pass helpers
# ---------------------------------------------------------------------------


def _substituter(subst):
    def read(v):
        if type(v) is Var:
            while v in subst:
                v = subst[v]
        return v
    return read


def _rebuild(graph, eqns, subst):
    read = _substituter(subst)
    return Graph(graph.invars, eqns, [read(v) for v in graph.outvars])


def _effectful(prim):
    return getattr(prim, "effectful", False)


# ---------------------------------------------------------------------------
# 1. Inlining nested calls
# ---------------------------------------------------------------------------


def inline_calls(graph):
    """Replace every call equation (``prim.call_param``) by its graph's equations."""
    if not any(getattr(e.prim, "call_param", None) for e in graph.eqns):
        return graph
    eqns, subst = [], {}
    read = _substituter(subst)
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
    read = _substituter(subst)
    for eqn in graph.eqns:
        invars = [read(v) for v in eqn.invars]
        prim = eqn.prim
        foldable = not _effectful(prim) and prim.impl is not None and (
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
                    subst[var] = Literal(_on_backend(xp, value), var.aval)
                continue
        eqns.append(Equation(prim, invars, eqn.outvars, eqn.params))
    return _rebuild(graph, eqns, subst)


def _on_backend(xp, value):
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


def _is_zero_literal(v):
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


def _is_one_literal(v):
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
    from .primitives import elementwise as ew

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
    from .primitives import elementwise as ew, indexing, products, reductions, shape

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
        return "zero" if zeros[1] and zeros[2] else None

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
    read = _substituter(subst)
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
            zeros = [_is_zero_literal(v) for v in invars]
            if any(zeros):
                result = rule(invars, zeros, eqn.outvars[0])
                if result is not None:
                    out = eqn.outvars[0]
                    subst[out] = zero_literal(out.aval) if result == "zero" else result
                    continue
        unit_rule = unit_rules.get(eqn.prim)
        if unit_rule is not None:
            ones = [_is_one_literal(v) for v in invars]
            if any(ones):
                result = unit_rule(invars, ones, eqn.outvars[0])
                if result is not None:
                    subst[eqn.outvars[0]] = result
                    continue
        eqns.append(Equation(eqn.prim, invars, eqn.outvars, eqn.params))
    return _rebuild(graph, eqns, subst)


# ---------------------------------------------------------------------------
# 4. Common subexpressions
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
    read = _substituter(subst)
    for eqn in graph.eqns:
        invars = [read(v) for v in eqn.invars]
        new = Equation(eqn.prim, invars, eqn.outvars, eqn.params)
        if _effectful(eqn.prim):
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
# 5. Dead code
# ---------------------------------------------------------------------------


def eliminate_dead_code(graph):
    """Drop equations whose outputs nothing reads (effects are always kept)."""
    live = {v for v in graph.outvars if type(v) is Var}
    kept = []
    for eqn in reversed(graph.eqns):
        if _effectful(eqn.prim) or any(v in live for v in eqn.outvars):
            kept.append(eqn)
            live.update(v for v in eqn.invars if type(v) is Var)
    kept.reverse()
    return Graph(graph.invars, kept, graph.outvars)


def optimize(graph, xp=np):
    """The whole pass pipeline, in order."""
    graph = inline_calls(graph)
    graph = fold_constants(graph, xp)
    graph = propagate_zeros(graph, xp)
    graph = eliminate_common_subexpressions(graph)
    return eliminate_dead_code(graph)


# ---------------------------------------------------------------------------
# Code generation
# ---------------------------------------------------------------------------


class _Groups:
    """Union-find over variables that may share one memory buffer."""

    def __init__(self):
        self.parent = {}

    def find(self, v):
        parent = self.parent
        root = v
        while root in parent:
            root = parent[root]
        while v in parent and parent[v] is not root:
            parent[v], v = root, parent[v]
        return root

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra is not rb:
            self.parent[rb] = ra


def _is_fresh_elementwise(eqn):
    # a ufunc's output owns a new, contiguous, writable buffer (0-d ones are
    # NumPy scalars, which cannot be written into)
    return bool(getattr(eqn.prim, "ufunc_name", None)) and len(eqn.outvars) == 1 \
        and eqn.outvars[0].aval.ndim > 0


class Compiled:
    """A compiled graph: call it with the flat inputs; ``source`` is its code."""

    __slots__ = ("fn", "source", "graph", "__weakref__")

    def __init__(self, fn, source, graph):
        self.fn = fn
        self.source = source
        self.graph = graph

    def __call__(self, *args):
        return self.fn(*args)

    def __repr__(self):
        return f"Compiled({len(self.graph.eqns)} equations)"


_INF = math.inf
_LINECACHE_LIMIT = 1 << 20


# ufuncs whose positional output NumPy 2.4 deprecates (it reads as a third operand)
_KEYWORD_OUT_ONLY = frozenset({"maximum", "minimum"})


def generate(graph, xp=np, name="staged", reuse_buffers=True):
    """Write ``graph`` as one Python function over the backend module ``xp``."""
    names = {}
    for i, v in enumerate(graph.invars):
        names[v] = f"a{i}"
    namespace = {"__builtins__": __builtins__}
    counter = [0]

    def fresh_name(prefix):
        counter[0] += 1
        return f"{prefix}{counter[0]}"

    def var_name(v):
        n = names.get(v)
        if n is None:
            n = names[v] = fresh_name("v")
        return n

    const_names = {}

    def operand(v):
        if type(v) is Var:
            return names[v]
        value = v.value
        if type(value) in (bool, int) or (type(value) is float and math.isfinite(value)):
            return repr(value)
        key = id(value)
        n = const_names.get(key)
        if n is None:
            n = const_names[key] = fresh_name("c")
            # a host array the function closed over goes to the device once,
            # here, as JAX moves NumPy constants (eagerly, mixing is an error)
            namespace[n] = _on_backend(xp, value)
        return n

    def ufunc_operands(eqn, ufunc):
        # A Python float in a ufunc call costs NumPy a scalar conversion per call
        # (about 400 ns, as much as the arithmetic on a small array).  Where the
        # ufunc computes in the output dtype D anyway (every operand of dtype D,
        # a D loop exists), the literal is the same number as a 0-d D array, so
        # it is converted once here.
        dtype = np.dtype(eqn.outvars[0].aval.dtype)
        np_ufunc = getattr(np, ufunc, None)
        if (dtype.kind not in "fc" or not isinstance(np_ufunc, np.ufunc)
                or f"{dtype.char * np_ufunc.nin}->{dtype.char}" not in np_ufunc.types
                or any(type(v) is Var and np.dtype(v.aval.dtype) != dtype
                       for v in eqn.invars)):
            return ", ".join(operand(v) for v in eqn.invars)
        parts = []
        for v in eqn.invars:
            if type(v) is not Var and type(v.value) in (int, float) \
                    and math.isfinite(v.value):
                key = ("literal", v.value, dtype.str)
                n = const_names.get(key)
                if n is None:
                    with np.errstate(over="ignore"):
                        value = np.asarray(v.value, dtype=dtype)
                    if not np.isfinite(value):      # too large for float32: keep
                        parts.append(operand(v))    # NumPy's own handling
                        continue
                    n = const_names[key] = fresh_name("c")
                    namespace[n] = xp.asarray(value)
                parts.append(n)
            else:
                parts.append(operand(v))
        return ", ".join(parts)

    fn_names = {}

    def _hashable_params(params):
        try:
            key = tuple(sorted(params.items()))
            hash(key)
            return key
        except TypeError:
            return id(params)

    def callee(eqn):
        ufunc = getattr(eqn.prim, "ufunc_name", None)
        lowering = eqn.prim.lowering
        lowered = lowering(xp, **eqn.params) if lowering is not None and not ufunc \
            else None
        if ufunc:
            key = ("ufunc", ufunc)
            fn = getattr(xp, ufunc)
        elif lowered is not None:
            key = ("lowered", eqn.prim, _hashable_params(eqn.params))
            fn = lowered
        else:
            key = ("impl", id(eqn))
            fn = functools.partial(eqn.prim.impl, **eqn.params) if eqn.params \
                else eqn.prim.impl
        n = fn_names.get(key)
        if n is None:
            base = ufunc if ufunc else eqn.prim.name.replace(".", "_")
            n = fn_names[key] = f"{''.join(c if c.isalnum() else '_' for c in base)}" \
                                f"_{len(fn_names)}"
            namespace[n] = fn
        return n

    # -- liveness and aliasing ------------------------------------------------
    groups = _Groups()
    fresh = set()
    for eqn in graph.eqns:
        if _is_fresh_elementwise(eqn):
            fresh.add(eqn.outvars[0])
        else:
            for out in eqn.outvars:
                for v in eqn.invars:
                    if type(v) is Var:
                        groups.union(v, out)
    last_use = {}
    group_last = {}
    for k, eqn in enumerate(graph.eqns):
        for v in eqn.invars:
            if type(v) is Var:
                last_use[v] = k
        for v in eqn.outvars:
            last_use.setdefault(v, k)
    for v in graph.outvars:
        if type(v) is Var:
            last_use[v] = _INF
    for v in graph.invars:
        last_use[v] = _INF if v not in last_use else last_use[v]
    for v, k in last_use.items():
        root = groups.find(v)
        if group_last.get(root, -1) < k:
            group_last[root] = k
    foreign = {groups.find(v) for v in graph.invars}

    dying = {}
    for v, k in last_use.items():
        if k is not _INF:
            dying.setdefault(k, []).append(v)

    lines = [f"def {name}({', '.join(names[v] for v in graph.invars)}):"]
    reused = 0
    for k, eqn in enumerate(graph.eqns):
        fn = callee(eqn)
        ufunc = getattr(eqn.prim, "ufunc_name", None)
        args = ufunc_operands(eqn, ufunc) if ufunc and eqn.outvars \
            else ", ".join(operand(v) for v in eqn.invars)
        out_kw = ""
        if reuse_buffers and _is_fresh_elementwise(eqn):
            out_aval = eqn.outvars[0].aval
            for v in eqn.invars:
                if type(v) is Var and v in fresh:
                    root = groups.find(v)
                    if (group_last[root] == k and root not in foreign
                            and v.aval.shape == out_aval.shape
                            and v.aval.dtype == out_aval.dtype):
                        out_kw = names[v]
                        reused += 1
                        break
        outs = [var_name(v) for v in eqn.outvars]
        if not outs:
            lines.append(f"    {fn}({args})")
        else:
            target = ", ".join(outs) + ("," if eqn.prim.multiple_results and
                                        len(outs) == 1 else "")
            if out_kw and xp is np and getattr(eqn.prim, "ufunc_name", None) \
                    not in _KEYWORD_OUT_ONLY:
                # NumPy parses a positional output faster than out=; the comment
                # keeps the listing readable
                lines.append(f"    {target} = {fn}({args}, {out_kw})  # out={out_kw}")
            else:
                lines.append(f"    {target} = {fn}({args}{', out=' + out_kw if out_kw else ''})")
        dead = [names[v] for v in dying.get(k, ()) if v in names]
        if dead:
            lines.append(f"    del {', '.join(dead)}")
    results = []
    for v in graph.outvars:
        if type(v) is Var:
            results.append(names[v])
        elif hasattr(v.value, "shape"):
            # a constant output is copied: callers own what jit returns
            namespace["_copy"] = _copy
            results.append(f"_copy({operand(v)})")
        else:
            results.append(operand(v))
    lines.append(f"    return ({', '.join(results)}{',' if len(results) == 1 else ''})")
    source = "\n".join(lines) + "\n"
    filename = f"<fgrad.jit {name} {id(graph):x}>"
    # registered with linecache so tracebacks through compiled code show the line
    if len(source) < _LINECACHE_LIMIT:
        linecache.cache[filename] = (len(source), None, source.splitlines(True),
                                     filename)
    exec(compile(source, filename, "exec"), namespace)
    compiled = Compiled(namespace[name], source, graph)
    compiled.graph = graph
    return compiled


def _copy(x):
    return x.copy()


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


def compile_graph(graph, xp=np, name="staged", optimize_graph=True, fuse=True):
    """Optimise ``graph`` and generate its code; returns a `Compiled` callable.

    On a backend registered with an ``elementwise_kernel`` hook (CuPy), chains
    of elementwise equations then become one generated kernel each
    (`fgrad.fusion`); on NumPy the code is the same either way.
    """
    with gc_paused():
        if optimize_graph:
            graph = optimize(graph, xp)
            make_kernel = elementwise_kernel_maker(xp) if fuse else None
            if make_kernel is not None:
                from .fusion import fuse_elementwise
                graph = fuse_elementwise(graph, make_kernel)
        return generate(graph, xp, name)
