"""Reports on what a transformation does: residuals and graph summaries.

`residuals` records a function under reverse mode exactly as ``grad`` does
(including the pruning of residuals the VJP rules do not read) and lists what
each recorded equation keeps alive for the reverse sweep. `graph_summary`
counts a staged graph's equations per primitive and estimates the FLOPs of its
matrix products.
"""
import collections
import functools

from fgrad.core.trace import Tracer, get_aval, new_trace
from fgrad.core.tree import tree_flatten
from fgrad.interpreters.nan_checking import describe_source, user_source
from fgrad.interpreters.reverse import Recompute, ReverseTrace
from fgrad.primitives.einsum import split_subscripts
from fgrad.transforms.differentiation import Selection, function_name
from fgrad.transforms.jit import make_graph

__all__ = ["residuals", "graph_summary", "ResidualReport", "GraphSummary"]


class _SourcedReverseTrace(ReverseTrace):
    """A `ReverseTrace` that remembers the user's line of every equation."""

    __slots__ = ("sources",)

    def __init__(self, level):
        super().__init__(level)
        self.sources = []

    def record(self, prim, in_nodes, primals, ans, params):
        source = user_source()
        n = len(self.eqns)
        out = super().record(prim, in_nodes, primals, ans, params)
        if len(self.eqns) > n:
            self.sources.append(source)
        return out


Residual = collections.namedtuple("Residual", "eqn primitive source role aval nbytes "
                                  "counted recomputed", defaults=(False,))
Residual.__doc__ = """One array an equation keeps for the reverse sweep.

``role`` is ``"arg i"`` or ``"ans"``; ``counted`` is False for an array already
counted (kept by an earlier equation too), one that is an input of the
function (alive anyway), or one the sweep recomputes from the inputs
(``recomputed``: nothing is kept, ``nbytes`` is 0), so the total counts each
buffer once.
"""


def _nbytes(x):
    return int(getattr(x, "nbytes", 0) or 0)


class ResidualReport:
    """What the reverse sweep of one call keeps alive (made by `residuals`)."""

    def __init__(self, entries, num_eqns):
        self.entries = entries
        self.num_eqns = num_eqns

    @property
    def total_bytes(self):
        """Bytes of distinct residual buffers, the function's inputs excluded."""
        return sum(e.nbytes for e in self.entries if e.counted)

    def by_line(self):
        """``{source: bytes}``: where in your code the residual memory is made."""
        out = collections.Counter()
        for e in self.entries:
            if e.counted:
                out[e.source] += e.nbytes
        return dict(out)

    def __str__(self):
        recomputed = sum(e.recomputed for e in self.entries)
        lines = [f"{len(self.entries) - recomputed} residual arrays kept by {self.num_eqns} "
                 f"equations: {_human(self.total_bytes)} in total"
                 + (f"; {recomputed} recomputed in the sweep" if recomputed else "")]
        for e in self.entries:
            note = "" if e.counted else "  (recomputed in the sweep)" if e.recomputed \
                else "  (not counted: input or already listed)"
            lines.append(f"  eqn {e.eqn:<4} {e.primitive:<14} {e.role:<6} "
                         f"{str(e.aval):<16} {_human(e.nbytes):>10}  "
                         f"{describe_source(e.source)}{note}")
        return "\n".join(lines)

    def __repr__(self):
        return f"ResidualReport({len(self.entries)} arrays, {self.total_bytes} bytes)"


def _human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def residuals(fun, argnums=0):
    """A function returning the `ResidualReport` of ``grad(fun, argnums)`` at its arguments.

    Each entry is one array an equation keeps until the reverse sweep reaches
    it (after reverse mode has dropped the operands its rules do not read),
    with its bytes and the line of your code that recorded the equation:
    what `fgrad.checkpoint` around that code would save.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> report = fgrad.residuals(lambda x: fnp.sum(fnp.exp(fnp.sin(x))))(np.ones(10000))
    >>> [(e.primitive, e.role, e.nbytes) for e in report.entries if e.nbytes > 8]
    [('sin', 'arg 0', 80000), ('exp', 'ans', 80000)]
    >>> [e.counted for e in report.entries if e.nbytes > 8]   # x is alive anyway
    [False, True]
    """

    @functools.wraps(fun)
    def report(*args, **kwargs):
        selection = Selection(f"residuals({function_name(fun)})", args, kwargs, argnums, None,
                               allow_complex=True)
        with new_trace(_SourcedReverseTrace) as trace:
            inputs = [trace.new_input(x) for x in selection.leaves]
            selection.call(fun, inputs)
        # the arguments are alive anyway: listed, not counted
        seen = {id(x) for x in selection.leaves} | {
            id(x) for x in tree_flatten((args, kwargs))[0]}
        entries = []
        for k, (eqn, source) in enumerate(zip(trace.eqns, trace.sources)):
            prim, in_nodes, out, saved_args, ans, params = eqn
            kept = [(f"arg {i}", a) for i, a in enumerate(saved_args)]
            kept += [("ans", a) for a in (ans if type(out) is tuple else (ans,))]
            for role, value in kept:
                if type(value) is Recompute:    # cheap to make again: not kept
                    entries.append(Residual(k, prim.name, source, role, get_aval(value),
                                            0, False, True))
                    continue
                if not hasattr(value, "nbytes") or isinstance(value, Tracer):
                    continue          # abstract (pruned) values and Python scalars
                counted = id(value) not in seen
                seen.add(id(value))
                entries.append(Residual(k, prim.name, source, role, get_aval(value),
                                        _nbytes(value), counted))
        return ResidualReport(entries, len(trace.eqns))
    return report


# ---------------------------------------------------------------------------
# Graph summaries
# ---------------------------------------------------------------------------


class GraphSummary:
    """Equation counts per primitive and a FLOP estimate (made by `graph_summary`)."""

    def __init__(self, counts, flops, num_eqns):
        self.counts = counts
        self.flops = flops
        self.num_eqns = num_eqns

    def __str__(self):
        lines = [f"{self.num_eqns} equations, ~{self.flops:.3g} FLOPs in matmul/einsum"]
        width = max((len(n) for n in self.counts), default=0)
        for name, count in sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {name:<{width}}  {count}")
        return "\n".join(lines)

    __repr__ = __str__


def _eqn_flops(eqn):
    """2 * multiply-adds of a matmul / einsum / dot equation, else 0."""
    name = eqn.prim.name
    ins = [v.aval for v in eqn.invars]
    if name in ("matmul", "dot") and len(ins) == 2:
        a, b = ins
        if a.ndim == 0 or b.ndim == 0:
            return 0
        k = a.shape[-1]
        return 2 * k * max(eqn.outvars[0].aval.size, 1)
    if name == "einsum":
        return _einsum_flops(eqn.params["subscripts"], eqn.params.get("path"), ins)
    return 0


def _einsum_flops(subscripts, path, avals):
    """FLOPs of an einsum along its contraction path (pairwise steps, as run)."""
    inputs, output = split_subscripts(subscripts)
    sizes = {}
    for letters, aval in zip(inputs, avals):
        sizes.update(zip(letters, aval.shape))
    operands = [set(letters) for letters in inputs]
    flops = 0
    for step in (path or (tuple(range(len(operands))),)):
        picked = [operands[i] for i in step]
        for i in sorted(step, reverse=True):
            del operands[i]
        involved = set().union(*picked)
        cost = 1
        for c in involved:
            cost *= sizes[c]
        flops += 2 * cost
        operands.append({c for c in involved
                         if c in output or any(c in o for o in operands)})
    return flops


def _summarise(graph, counts):
    flops = 0
    for eqn in graph.eqns:
        counts[eqn.prim.name] += 1
        flops += _eqn_flops(eqn)
        for value in eqn.params.values():
            for g in (value if isinstance(value, tuple) else (value,)):
                if hasattr(g, "eqns") and hasattr(g, "invars"):
                    flops += _summarise(g, counts)
    return flops


def graph_summary(fun, static_argnums=()):
    """A function printing and returning the `GraphSummary` of ``fun``'s staged graph.

    Counts include the equations of nested graphs (jit calls, control flow);
    FLOPs are ``2 * m * n * k`` per matrix product.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> s = fgrad.graph_summary(lambda a, b: fnp.tanh(a @ b))(np.ones((2, 3)), np.ones((3, 4)))
    2 equations, ~48 FLOPs in matmul/einsum
      matmul  1
      tanh    1
    >>> s.flops
    48
    """
    staged = make_graph(fun, static_argnums)

    @functools.wraps(fun)
    def summary(*args, **kwargs):
        graph = staged(*args, **kwargs)
        counts = collections.Counter()
        flops = _summarise(graph, counts)
        result = GraphSummary(dict(counts), flops, sum(counts.values()))
        print(result)
        return result
    return summary
