"""``custom_linear_solve``: a linear solve whose derivative is another solve.

``x = solve(matvec, b)`` may be any solver (a direct factorisation, CG, GMRES,
SciPy through `fgrad.pure_callback`). Its iterations are never differentiated:
the solver runs on values that carry no derivative, and the result is handed to
`linear_solve_p`, an identity on ``x`` whose rules say what ``x`` is, the
solution of ``A x = b`` with ``A`` the linear map ``matvec``:

- JVP: ``A x_dot = b_dot - A_dot x``, one more solve of the same system;
- VJP: ``A^T lam = ct`` by ``transpose_solve``, then ``b`` gets ``lam`` and the
  values ``matvec`` closes over get ``-(d/dtheta A x)^T lam``.

Inside a transformation, ``matvec``, ``solve`` and ``transpose_solve`` are
staged once (as `jit` would) into closed graphs (`LinearSystem`): the traced
values each closes over become operands of the primitive (closure conversion),
so every rule, at any order and under any transformation, runs the same graphs
on its own values and no tracer of an outer transformation is ever read by a
rule. As in JAX, ``solve`` and ``transpose_solve`` are taken to be ``matvec``'s
inverse: the values they close over get derivatives only through ``matvec``.
"""
from typing import NamedTuple

from fgrad.compiler.passes import eliminate_dead_code
from fgrad.core.errors import ConcretizationError, CustomRuleError
from fgrad.core.graph import Graph
from fgrad.core.trace import Primitive, Tracer, Zero, current_level, get_aval
from fgrad.core.tree import tree_flatten, tree_unflatten
from fgrad.interpreters.staging import eval_graph, stage
from fgrad.primitives.batching import axis_size
from fgrad.primitives.creation import stop_gradient, zeros_like
from fgrad.primitives.elementwise import negative, subtract
from fgrad.primitives.indexing import getitem
from fgrad.primitives.shape import stack
from fgrad.transforms.differentiation import jvp, vjp

__all__ = ["custom_linear_solve"]
FAMILY = "fgrad/transforms/linear_solve.py"


# ---------------------------------------------------------------------------
# Closure conversion: a user function as a graph plus the traced values it reads
# ---------------------------------------------------------------------------


class Closed:
    """A function of pytrees staged into a graph whose inputs are the
    function's arguments followed by the traced values it closes over
    (``consts``). ``apply(args, consts)`` evaluates it on flat leaves."""

    __slots__ = ("graph", "consts", "out_tree")

    def __init__(self, graph, consts, out_tree):
        self.graph, self.consts, self.out_tree = graph, consts, out_tree

    def apply(self, leaves, consts):
        return eval_graph(self.graph, list(leaves) + list(consts))


def closure_convert(fun, in_tree, avals):
    """Stage ``fun`` (one argument: the pytree ``in_tree`` of arrays of
    ``avals``) into a `Closed`."""
    box = []

    def flat(*leaves):
        out = fun(tree_unflatten(in_tree, list(leaves)))
        out_leaves, out_tree = tree_flatten(out)
        box.append(out_tree)
        return out_leaves
    graph, captured = stage(flat, [a.strip_weak() for a in avals])
    return Closed(graph, tuple(captured), box[0])


def as_leaves(tree):
    """The leaves of ``tree`` (arrays or tracers; Python numbers as 0-d arrays)."""
    leaves, treedef = tree_flatten(tree)
    out = []
    for x in leaves:
        if not isinstance(x, Tracer) and not hasattr(x, "dtype"):
            x = get_aval(x).dtype.type(x)
        out.append(x)
    return out, treedef


def any_traced(leaves):
    return any(isinstance(x, Tracer) for x in leaves)


def _is_array(x):
    return isinstance(x, Tracer) or hasattr(x, "dtype")


def stage_solver(solve, linear, n_consts, tree, what, has_aux=False):
    """``solve(linear_map, b)`` as a closed graph ``(*b, *linear's consts,
    *captured) -> (*x, *aux arrays)``, with ``captured`` the traced values
    ``solve`` closes over; ``linear`` is a graph ``(*v, *consts) -> A v``.

    Returns ``(graph, captured, finish)``: ``finish(outs)`` rebuilds ``(x
    leaves, aux)`` from the graph's outputs (aux's non-array leaves kept as the
    solve returned them). ``what`` names the solve in errors.
    """
    avals = [a.strip_weak() for a in linear.in_avals]
    n = len(avals) - n_consts
    box = []

    def flat(*args):
        b, consts = args[:n], args[n:]

        def linear_map(v):
            out = eval_graph(linear, tree_flatten(v)[0] + list(consts))
            return tree_unflatten(tree, list(out))
        out = solve(linear_map, tree_unflatten(tree, list(b)))
        x, aux = out if has_aux else (out, None)
        x_leaves, x_tree = as_leaves(x)
        if x_tree != tree:
            raise CustomRuleError(
                f"{what} returned a pytree of structure {x_tree}, but its right-hand "
                f"side has structure {tree}.")
        aux_leaves, aux_tree = tree_flatten(aux)
        arrays = [i for i, a in enumerate(aux_leaves) if _is_array(a)]
        box.append((aux_leaves, aux_tree, arrays))
        return x_leaves + [aux_leaves[i] for i in arrays]
    try:
        graph, captured = stage(flat, avals)
    except ConcretizationError as err:
        raise ConcretizationError(
            f"{what} is staged (as jit would stage it) inside a transformation, so that "
            "the traced values it closes over become explicit operands; Python control "
            "flow on array values cannot be staged: write the solver's loop with "
            "fgrad.lax.while_loop / fori_loop and its tests with fgrad.lax.cond or "
            "fgrad.numpy.where, or run it on the host with fgrad.pure_callback. The "
            f"staging error: {err}") from None
    aux_leaves, aux_tree, arrays = box[0]

    def finish(outs):
        leaves = list(aux_leaves)
        for i, a in zip(arrays, outs[n:]):
            leaves[i] = a
        return list(outs[:n]), tree_unflatten(aux_tree, leaves)
    return graph, list(captured), finish


def solver_function(solve, linear, n, tree):
    """``solve(linear_map, b)`` as a `ClosedFunction` ``(*b, *consts) -> x``,
    run unstaged: for a ``solve`` that closes over no traced value, whose
    caller vouches for it. ``linear`` is a `ClosedFunction` ``(*v, *consts) ->
    A v`` on ``n`` leaves of structure ``tree``."""
    def run(args):
        b, consts = list(args[:n]), list(args[n:])

        def linear_map(v):
            return tree_unflatten(tree, linear(tree_flatten(v)[0] + consts))
        return as_leaves(solve(linear_map, tree_unflatten(tree, b)))[0]
    return ClosedFunction(run, linear.n_in)


def solution_only(graph, n):
    """``graph`` with its first ``n`` outputs only (a solve without its aux)."""
    if len(graph.outvars) == n:
        return graph
    return eliminate_dead_code(Graph(graph.invars, graph.eqns, graph.outvars[:n]))


def transpose_graph(matvec, n):
    """The closed graph ``(*w, *consts) -> A^T w`` of a closed linear ``matvec``
    ``(*v, *consts) -> A v`` (square: ``w`` is shaped like ``v``)."""
    def vecmat(*args):
        w, consts = args[:n], args[n:]

        def linear(*v):
            return tuple(eval_graph(matvec, list(v) + list(consts)))
        return list(vjp(linear, *w)[1](tuple(w)))   # linear: any point will do
    graph, captured = stage(vecmat, [a.strip_weak() for a in matvec.in_avals])
    assert not captured, "matvec is closed"
    return graph


# ---------------------------------------------------------------------------
# The primitive: an identity on the solution, carrying the system's graphs
# ---------------------------------------------------------------------------


class ClosedFunction(NamedTuple):
    """A function of a flat list of ``n_in`` values (a vector's leaves, then
    constants) to a list, that reads traced values only through that list: a
    staged graph (`graph_function`), or a function whose caller vouches that it
    closes over none, which so is run as it is, unstaged."""

    fun: object
    n_in: int

    def __call__(self, args):
        return list(self.fun(list(args)))


def graph_function(graph):
    """The closed ``graph`` as a `ClosedFunction` that evaluates it."""
    return ClosedFunction(lambda args: eval_graph(graph, args), len(graph.invars))


class LinearSystem(NamedTuple):
    """The closed functions (`ClosedFunction`) of one linear system ``A x =
    b`` on flat leaves, the parameter of `linear_solve_p`. Each takes its
    vector's leaves, then its constants, which are operands of the primitive:
    ``matvec`` and ``vecmat`` take the matvec constants, ``solve`` and
    ``transpose_solve`` their own. ``vecmat`` is None when ``A`` is symmetric
    (``matvec`` serves), ``transpose_solve`` None when reverse mode is refused."""

    matvec: ClosedFunction
    vecmat: object
    solve: ClosedFunction
    transpose_solve: object

    def counts(self, n):
        """How many matvec, solve and transpose_solve constants follow ``x, b``."""
        t = 0 if self.transpose_solve is None else self.transpose_solve.n_in - n
        return self.matvec.n_in - n, self.solve.n_in - n, t

    def transposed(self):
        """The system of ``A^T``: operands keep their order, except that the
        solve constants and the transpose_solve constants trade places."""
        if self.vecmat is None:
            return LinearSystem(self.matvec, None, self.transpose_solve, self.solve)
        return LinearSystem(self.vecmat, self.matvec, self.transpose_solve, self.solve)


def _impl(*ops, n, system):
    return tuple(ops[:n])


def _abstract(*avals, n, system):
    return tuple(a.strip_weak() for a in avals[:n])


# Its parameters are graphs staged from the caller's functions, new at each call:
# out of the dispatch table, like pure_callback_p, so compiled sweeps do not
# cache its structures.
linear_solve_p = Primitive("linear_solve", _impl, _abstract, multiple_results=True,
                           family=FAMILY, register=False)


def _split(ops, n, system):
    """``ops`` as (b, matvec consts, solve consts, transpose_solve consts)."""
    n_m, n_s, n_t = system.counts(n)
    b, rest = list(ops[n:2 * n]), list(ops[2 * n:])
    return b, rest[:n_m], rest[n_m:n_m + n_s], rest[n_m + n_s:n_m + n_s + n_t]


def bind_solution(system, x, b, mc, sc, tc):
    """``x``, the solution of ``system`` at ``b`` (flat leaves), made
    differentiable by `linear_solve_p` where ``b`` or the matvec constants
    ``mc`` carry derivatives."""
    if not any_traced(list(b) + list(mc)):
        return list(x)
    return list(linear_solve_p.bind(*x, *b, *mc, *sc, *tc, n=len(b), system=system))


def solve_system(system, b, mc, sc, tc):
    """The solution of ``system`` at ``b``: its solve graph on values without
    derivatives, then `bind_solution`."""
    x = system.solve([stop_gradient(v) for v in list(b) + list(sc)])
    return bind_solution(system, x, b, mc, sc, tc)


def _partial_jvp(fun, primals, tangents):
    """The tangent of ``fun(*primals)`` along the non-zero ``tangents`` only."""
    live = [i for i, t in enumerate(tangents) if type(t) is not Zero]
    if not live:
        return None

    def of_live(*xs):
        args = list(primals)
        for i, x in zip(live, xs):
            args[i] = x
        return fun(*args)
    _, t = jvp(of_live, tuple(primals[i] for i in live), tuple(tangents[i] for i in live))
    return t


def _jvp(tangents, ans, *ops, n, system):
    # the solution as an output (``ans``), not as an operand: only the output
    # carries derivatives of an outer transformation
    x, (b, mc, sc, tc) = ans, _split(ops, n, system)
    b_dot, mc_dot = tangents[n:2 * n], tangents[2 * n:2 * n + len(mc)]
    rhs = [None if type(t) is Zero else t for t in b_dot]
    # A_dot x: how the map itself moves, applied to the solution
    a_dot_x = _partial_jvp(lambda *c: tuple(system.matvec(list(x) + list(c))),
                           mc, mc_dot)
    if a_dot_x is not None:
        rhs = [negative(d) if r is None else subtract(r, d) for r, d in zip(rhs, a_dot_x)]
    if all(r is None for r in rhs):
        return tuple(Zero(get_aval(a)) for a in ans)
    rhs = [zeros_like(xi) if r is None else r for r, xi in zip(rhs, x)]
    # the constants of solve get no tangent: solve is matvec's inverse
    return tuple(solve_system(system, rhs, mc, sc, tc))


def _vjp(ct, ans, needed, *ops, n, system):
    if system.transpose_solve is None:
        raise CustomRuleError(
            "custom_linear_solve was differentiated in reverse mode (grad, vjp), which "
            "solves the transposed system: pass transpose_solve=, or symmetric=True "
            "if the matrix is symmetric.")
    x, (b, mc, sc, tc) = ans, _split(ops, n, system)
    if all(type(c) is Zero or c is None for c in ct):
        return (None,) * len(ops)
    cts = [zeros_like(xi) if type(c) is Zero or c is None else c for c, xi in zip(ct, x)]
    lam = solve_system(system.transposed(), cts, mc, tc, sc)
    out = [None] * n + [lam[i] if needed[n + i] else None for i in range(n)]
    live = [i for i in range(len(mc)) if needed[2 * n + i]]
    c_cts = [None] * len(mc)
    if live:
        def of_live(*cs):
            full = list(mc)
            for i, c in zip(live, cs):
                full[i] = c
            return tuple(system.matvec(list(x) + full))
        pulled = vjp(of_live, *[mc[i] for i in live])[1](tuple(lam))
        for i, c in zip(live, pulled):
            c_cts[i] = negative(c)
    # nor do the constants of the solves get a cotangent
    return tuple(out + c_cts + [None] * (len(sc) + len(tc)))


def per_example_batch_rule(prim):
    """The batching rule of an identity on a solution whose rules solve one
    problem (`linear_solve_p`, `fgrad.transforms.roots.root_p`): bind it per
    example. The solution itself was computed, batched, before the bind."""
    def rule(args, dims, **params):
        n = params["n"]
        rows = [prim.bind(*[a if d is None else getitem(a, (slice(None),) * d + (i,))
                            for a, d in zip(args, dims)], **params)
                for i in range(axis_size(args, dims))]
        if not rows:
            return tuple(args[:n]), tuple(dims[:n])
        return tuple(stack([r[k] for r in rows]) for k in range(n)), (0,) * n
    return rule


linear_solve_p.jvp = _jvp
linear_solve_p.def_vjp_joint(_vjp)
linear_solve_p.batch = per_example_batch_rule(linear_solve_p)


# ---------------------------------------------------------------------------
# The public function
# ---------------------------------------------------------------------------


def _without_aux(solve):
    return lambda matvec, b: solve(matvec, b)[0]


def _check_matvec(mv, tree, avals):
    if mv.out_tree != tree:
        raise CustomRuleError(
            f"custom_linear_solve: matvec maps x to a pytree of structure "
            f"{mv.out_tree}, but b has structure {tree}; the system must be square.")
    for i, (v, a) in enumerate(zip(mv.graph.outvars, avals)):
        if v.aval.shape != a.shape:
            raise CustomRuleError(
                f"custom_linear_solve: matvec's output leaf {i} has shape "
                f"{v.aval.shape}, but b's leaf {i} has shape {a.shape}.")


def custom_linear_solve(matvec, b, solve, transpose_solve=None, symmetric=False,
                        has_aux=False):
    """Solve ``matvec(x) = b`` with ``solve``, differentiating by solves only.

    ``matvec`` is a linear function (pytree ``x`` to a pytree like ``b``);
    ``solve(matvec, b)`` returns ``x`` (``(x, aux)`` with ``has_aux``);
    ``transpose_solve(vecmat, b)`` solves the transposed system (returning
    ``(x, aux)`` too with ``has_aux``), and is needed for reverse mode unless
    ``symmetric=True``. As in ``jax.lax``, the solver's own steps are never
    differentiated: derivatives with respect to ``b`` and to the values
    ``matvec`` closes over come from further solves, so they hold for any solver
    accurate enough. ``solve`` and ``transpose_solve`` may close over traced
    values too (``lambda mv, b: fnp.linalg.solve(M(lam), b)``); they are taken
    to be ``matvec``'s inverse, so such values get derivatives only through
    ``matvec``, as in JAX. Inside a transformation all three are staged once,
    as `jit` would stage them, so the solvers' control flow on array values
    must use `fgrad.lax` (or run on the host through `fgrad.pure_callback`).

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> A = np.array([[4.0, 1.0], [1.0, 3.0]])
    >>> def dense(matvec, b):
    ...     return fnp.linalg.solve(A, b)
    >>> def f(b):
    ...     x = fgrad.lax.custom_linear_solve(lambda x: A @ x, b, dense, symmetric=True)
    ...     return fnp.sum(x)
    >>> np.allclose(fgrad.grad(f)(np.ones(2)), np.linalg.solve(A, np.ones(2)))
    True
    """
    if symmetric and transpose_solve is None:
        transpose_solve = solve
    b_leaves, tree = as_leaves(b)
    avals = [get_aval(x).strip_weak() for x in b_leaves]
    mv = closure_convert(matvec, tree, avals)
    _check_matvec(mv, tree, avals)
    n, mc = len(b_leaves), list(mv.consts)
    if current_level() == 0:
        # outside every transformation nothing is traced: the solver runs as it is
        out = solve(matvec, b)
        x, aux = out if has_aux else (out, None)
        x_tree = as_leaves(x)[1]
        if x_tree != tree:
            raise CustomRuleError(
                f"custom_linear_solve's solve returned a pytree of structure {x_tree}, "
                f"but its right-hand side has structure {tree}.")
        return (x, aux) if has_aux else x
    full, sc, finish = stage_solver(solve, mv.graph, len(mc), tree,
                                    "custom_linear_solve's solve", has_aux)
    solve_graph = solution_only(full, n)
    vecmat, ts_graph, tc = None, None, []
    if symmetric and transpose_solve is solve:
        ts_graph, tc = solve_graph, sc          # the same solve of the same system
    elif transpose_solve is not None:
        if not symmetric:
            vecmat = transpose_graph(mv.graph, n)
        ts = _without_aux(transpose_solve) if has_aux else transpose_solve
        graph, tc, _ = stage_solver(ts, mv.graph if symmetric else vecmat, len(mc), tree,
                                    "custom_linear_solve's transpose_solve")
        ts_graph = solution_only(graph, n)
    system = LinearSystem(graph_function(mv.graph),
                          None if vecmat is None else graph_function(vecmat),
                          graph_function(solve_graph),
                          None if ts_graph is None else graph_function(ts_graph))
    outs = eval_graph(full, [stop_gradient(v) for v in b_leaves + mc + sc])
    x_leaves, aux = finish(outs)
    x_leaves = bind_solution(system, x_leaves, b_leaves, mc, list(mc) + sc,
                             list(mc) + tc)
    x = tree_unflatten(tree, x_leaves)
    return (x, aux) if has_aux else x
