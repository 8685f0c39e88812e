"""The linear graph that reverse mode records: printing and checking.

An equation is ``(prim, in_nodes, out, args, ans, params)`` (see
`fgrad.interpreters.reverse`). `check_graph` re-derives every equation's output
shape and dtype from its primitive's abstract rule, so a rule that disagrees with
its implementation is caught at the equation that recorded it.
"""
from fgrad.core.errors import FgradError
from fgrad.core.trace import get_aval


class GraphCheckError(FgradError, AssertionError):
    """An equation's recorded output disagrees with its primitive's abstract rule."""


def _outputs(eqn):
    prim, in_nodes, out, args, ans, params = eqn
    return (list(zip(out, ans)) if type(out) is tuple else [(out, ans)])


def check_graph(eqns):
    """Re-run each equation's abstract rule and compare with what it recorded.

    Raises `GraphCheckError` naming the equation, primitive and both values.
    """
    for k, eqn in enumerate(eqns):
        prim, in_nodes, out, args, ans, params = eqn
        if prim.abstract is None:
            continue                       # one-off custom rules have none
        in_avals = [get_aval(a) for a in args]
        try:
            expected = prim.abstract(*in_avals, **params)
        except Exception as err:
            raise GraphCheckError(f"equation {k} ({prim.name}): the abstract rule "
                                  f"failed on {in_avals} {params}: {err}") from err
        expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
        recorded = [get_aval(a) for a in (ans if type(out) is tuple else [ans])]
        for j, (e, r) in enumerate(zip(expected, recorded)):
            if e.shape != r.shape or e.dtype != r.dtype:
                raise GraphCheckError(
                    f"equation {k} ({prim.name}) output {j}: the implementation gave "
                    f"{r} but the abstract rule says {e} for inputs {in_avals} "
                    f"with {params}")


def format_graph(eqns, num_inputs=0):
    """A readable listing, one equation a line: ``n3:f64[2] = sin n1``."""
    lines = [f"inputs: {', '.join(f'n{i}' for i in range(num_inputs))}"]
    for prim, in_nodes, out, args, ans, params in eqns:
        ins = " ".join(f"n{n}" if n is not None else _const(a)
                       for n, a in zip(in_nodes, args))
        outs = ", ".join(f"n{n}:{get_aval(a)}" for n, a in
                         (zip(out, ans) if type(out) is tuple else [(out, ans)])
                         if n is not None)
        extra = " ".join(f"{k}={v}" for k, v in params.items())
        lines.append(f"  {outs} = {prim.name}{'[' + extra + ']' if extra else ''} {ins}")
    return "\n".join(lines)


def _const(a):
    aval = get_aval(a)
    return repr(a) if aval.weak_type else f"const:{aval}"


# ---------------------------------------------------------------------------
# Staged graphs: what jit and make_graph build
# ---------------------------------------------------------------------------
#
# Reverse mode records tuples because it evaluates as it goes and only ever
# sweeps once. A staged graph is kept, transformed and compiled, so it gets
# real classes: `Var` (a value of known shape and dtype), `Literal` (a constant
# baked into the graph), `Equation` and `Graph`. Variables are named only when
# printed, so building a graph costs no string formatting.


class Var:
    """A value in a staged graph: its abstract value and nothing else."""

    __slots__ = ("aval",)

    def __init__(self, aval):
        self.aval = aval

    def __repr__(self):
        return f"Var({self.aval})"


class Literal:
    """A constant operand: a Python scalar or an array closed over by the function."""

    __slots__ = ("value", "aval")

    def __init__(self, value, aval):
        self.value = value
        self.aval = aval

    def __repr__(self):
        return f"Literal({_literal_text(self)})"


def _literal_text(lit):
    if lit.aval.weak_type or lit.aval.shape == () and not hasattr(lit.value, "shape"):
        return repr(lit.value)
    if lit.aval.size <= 1 and hasattr(lit.value, "item"):
        return f"{lit.value.item()!r}:{lit.aval}"
    return f"const:{lit.aval}"


class Equation:
    """``outvars = prim[params](*invars)``; invars are `Var` or `Literal`."""

    __slots__ = ("prim", "invars", "outvars", "params")

    def __init__(self, prim, invars, outvars, params):
        self.prim = prim
        self.invars = invars
        self.outvars = outvars
        self.params = params

    def __repr__(self):
        return f"Equation({self.prim.name}, {len(self.invars)} in, {len(self.outvars)} out)"


class Graph:
    """A staged, linear program: inputs, equations in order, outputs.

    ``outvars`` may hold `Literal`s (an output that does not depend on the
    inputs) and input variables (an output that is an input).

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> g = fgrad.make_graph(lambda x: fnp.sin(x) * 2.0)(np.ones(3))
    >>> len(g.eqns)
    2
    >>> print(g)
    { lambda a:f64[3] .
      b:f64[3] = sin a
      c:f64[3] = multiply b 2.0
      in (c) }
    """

    __slots__ = ("invars", "eqns", "outvars", "compiled", "sources", "reverse")

    def __init__(self, invars, eqns, outvars, sources=None):
        self.invars = list(invars)
        self.eqns = list(eqns)
        self.outvars = list(outvars)
        self.compiled = {}         # what jit compiled of this graph, by backend (a cache)
        # under fgrad.debug_nans: first output var -> (pass, prim, source line, where)
        self.sources = sources
        # ids of the equations a staged reverse sweep made (for to_dot)
        self.reverse = frozenset()

    @property
    def in_avals(self):
        return [v.aval for v in self.invars]

    @property
    def out_avals(self):
        return [v.aval for v in self.outvars]

    def __str__(self):
        return format_staged(self)

    def __repr__(self):
        return (f"Graph({len(self.invars)} inputs, {len(self.eqns)} equations, "
                f"{len(self.outvars)} outputs)")

    def to_dot(self):
        """Graphviz source: one node per input, equation and literal operand.

        Equations of the forward pass are filled blue, those a staged reverse
        sweep made (``make_graph(grad(f))``, ``jit(grad(f))``) orange; every
        edge is labelled with the shape of the value it carries.

        >>> import numpy as np, fgrad, fgrad.numpy as fnp
        >>> dot = fgrad.make_graph(fgrad.grad(lambda x: fnp.sum(fnp.sin(x))))(np.ones(3)).to_dot()
        >>> dot.count(REVERSE_COLOUR) > 0 and dot.count(FORWARD_COLOUR) > 0
        True
        """
        names = _Namer()
        lines = ["digraph fgrad {", "  rankdir=TB;", '  node [fontname="monospace"];',
                 '  edge [fontname="monospace", fontsize=9];']
        producer = {}
        for v in self.invars:
            n = names(v)
            producer[v] = n
            lines.append(f'  {n} [label="{n}: {v.aval}", shape=ellipse];')
        for k, eqn in enumerate(self.eqns):
            node = f"eq{k}"
            outs = ", ".join(f"{names(v)}: {v.aval}" for v in eqn.outvars)
            label = f"{eqn.prim.name}{_params_text(eqn.params)}\\n{outs}"
            colour = REVERSE_COLOUR if id(eqn) in self.reverse else FORWARD_COLOUR
            lines.append(f'  {node} [label="{_dot_escape(label)}", shape=box, '
                         f'style=filled, fillcolor="{colour}"];')
            for i, v in enumerate(eqn.invars):
                if isinstance(v, Literal):
                    lit = f"lit{k}_{i}"
                    lines.append(f'  {lit} [label="{_dot_escape(_literal_text(v))}", '
                                 "shape=plaintext];")
                    lines.append(f"  {lit} -> {node};")
                elif v in producer:
                    lines.append(f'  {producer[v]} -> {node} [label="{v.aval}"];')
            for v in eqn.outvars:
                producer[v] = node
        for i, v in enumerate(self.outvars):
            lines.append(f'  out{i} [label="out {i}", shape=doublecircle];')
            if isinstance(v, Var) and v in producer:
                lines.append(f"  {producer[v]} -> out{i};")
        lines.append("}")
        return "\n".join(lines)


# the fills of forward-pass and reverse-pass equations in `Graph.to_dot`
FORWARD_COLOUR = "#cfe2f3"
REVERSE_COLOUR = "#f9cb9c"


def _dot_escape(text):
    return text.replace("\\n", "\x00").replace("\\", "\\\\").replace('"', '\\"') \
        .replace("\x00", "\\n")


class _Namer:
    """Short names a, b, ..., z, ba, bb, ... handed out in order of first use."""

    def __init__(self):
        self.names = {}

    def __call__(self, v):
        name = self.names.get(v)
        if name is None:
            n = len(self.names)
            name = ""
            while True:
                name = chr(ord("a") + n % 26) + name
                n //= 26
                if not n:
                    break
            self.names[v] = name
        return name


def _params_text(params):
    if not params:
        return ""
    parts = []
    for k, v in params.items():
        if isinstance(v, Graph):
            v = f"<graph {len(v.eqns)} eqns>"
        elif isinstance(v, tuple) and v and all(isinstance(g, Graph) for g in v):
            v = "(" + ", ".join(f"<graph {len(g.eqns)} eqns>" for g in v) + ")"
        parts.append(f"{k}={v}")
    return "[" + " ".join(parts) + "]"


def format_staged(graph, indent=0):
    """A jaxpr-like listing of a staged `Graph`, one equation a line."""
    names = _Namer()
    pad = " " * indent

    def operand(v):
        return _literal_text(v) if isinstance(v, Literal) else names(v)
    ins = " ".join(f"{names(v)}:{v.aval}" for v in graph.invars)
    lines = [f"{pad}{{ lambda {ins} ."]
    for eqn in graph.eqns:
        outs = " ".join(f"{names(v)}:{v.aval}" for v in eqn.outvars)
        args = " ".join(operand(v) for v in eqn.invars)
        lines.append(f"{pad}  {outs} = {eqn.prim.name}{_params_text(eqn.params)} {args}"
                     .rstrip())
    lines.append(f"{pad}  in ({', '.join(operand(v) for v in graph.outvars)}) }}")
    return "\n".join(lines)


def check_staged(graph):
    """Re-derive every equation's output avals; raise `GraphCheckError` on mismatch."""
    defined = set(graph.invars)
    for k, eqn in enumerate(graph.eqns):
        for v in eqn.invars:
            if isinstance(v, Var) and v not in defined:
                raise GraphCheckError(f"equation {k} ({eqn.prim.name}) reads a variable "
                                      "defined by no earlier equation")
        expected = eqn.prim.abstract(*[v.aval for v in eqn.invars], **eqn.params)
        expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
        for j, (e, v) in enumerate(zip(expected, eqn.outvars)):
            if e.shape != v.aval.shape or e.dtype != v.aval.dtype:
                raise GraphCheckError(f"equation {k} ({eqn.prim.name}) output {j} is "
                                      f"{v.aval} but the abstract rule says {e}")
        defined.update(eqn.outvars)
