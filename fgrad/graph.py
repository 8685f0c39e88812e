"""The linear graph that reverse mode records: printing and checking.

An equation is ``(prim, in_nodes, out, args, ans, params)`` (see
`fgrad.interpreters.reverse`). `check_graph` re-derives every equation's output
shape and dtype from its primitive's abstract rule, so a rule that disagrees with
its implementation is caught at the equation that recorded it.
"""
from .core import get_aval
from .errors import FgradError


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
