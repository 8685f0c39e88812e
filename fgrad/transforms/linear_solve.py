"""``custom_linear_solve``: a linear solve whose derivative is another solve.

``x = solve(matvec, b)`` may be any solver (a direct factorisation, CG, GMRES,
SciPy through `fgrad.pure_callback`). Its iterations are never differentiated:
the solver runs on values that carry no derivative, and the result is handed to
`linear_solve_p`, an identity on ``x`` whose rules say what ``x`` is, the
solution of ``A x = b`` with ``A`` the linear map ``matvec``:

- JVP: ``A x_dot = b_dot - A_dot x``, one more ``custom_linear_solve``;
- VJP: ``A^T lam = ct`` by ``transpose_solve``, then ``b`` gets ``lam`` and the
  values ``matvec`` closes over get ``-(d/dtheta A x)^T lam``.

Because the rules call `custom_linear_solve` again, higher derivatives are
solves too. ``matvec`` is staged once (as `jit` would) to find the traced values
it closes over, which become operands of the primitive.
"""
from fgrad.core.errors import CustomRuleError
from fgrad.core.trace import Primitive, Tracer, Zero, get_aval
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


# ---------------------------------------------------------------------------
# The primitive: an identity on the solution, carrying the solve's rules
# ---------------------------------------------------------------------------


def _impl(*ops, n, matvec, **params):
    return tuple(ops[:n])


def _abstract(*avals, n, matvec, **params):
    return tuple(a.strip_weak() for a in avals[:n])


# Its parameters are the caller's functions, new at each call: out of the dispatch
# table, like pure_callback_p, so compiled sweeps do not cache its structures.
linear_solve_p = Primitive("linear_solve", _impl, _abstract, multiple_results=True,
                           family=FAMILY, register=False)


def _split(ops, n):
    return ops[:n], ops[n:2 * n], ops[2 * n:]


def _mv(matvec, consts):
    """The linear map of a staged matvec at fixed ``consts``, on flat leaves."""
    return lambda *xs: tuple(eval_graph(matvec, list(xs) + list(consts)))


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


def _jvp(tangents, ans, *ops, n, matvec, solve, transpose_solve, symmetric, tree):
    # the solution as an output (``ans``), not as an operand: only the output
    # carries derivatives of an outer transformation
    x, (_, _, consts) = ans, _split(ops, n)
    _, b_dot, c_dot = _split(tangents, n)
    rhs = [None if type(t) is Zero else t for t in b_dot]
    # A_dot x: how the map itself moves, applied to the solution
    a_dot_x = _partial_jvp(lambda *c: tuple(eval_graph(matvec, list(x) + list(c))),
                           consts, c_dot)
    if a_dot_x is not None:
        rhs = [negative(d) if r is None else subtract(r, d) for r, d in zip(rhs, a_dot_x)]
    if all(r is None for r in rhs):
        return tuple(Zero(get_aval(a)) for a in ans)
    rhs = [zeros_like(xi) if r is None else r for r, xi in zip(rhs, x)]
    x_dot = solve_leaves(_mv(matvec, consts), rhs, solve, transpose_solve, symmetric, tree)
    return tuple(x_dot)


def _vjp(ct, ans, needed, *ops, n, matvec, solve, transpose_solve, symmetric, tree):
    if transpose_solve is None:
        raise CustomRuleError(
            "custom_linear_solve was differentiated in reverse mode (grad, vjp), which "
            "solves the transposed system: pass transpose_solve=, or symmetric=True "
            "if the matrix is symmetric.")
    # the solution as an output (``ans``), not as an operand: only the output
    # carries derivatives of an outer transformation
    x, (_, _, consts) = ans, _split(ops, n)
    if all(type(c) is Zero or c is None for c in ct):
        return (None,) * len(ops)
    cts = [zeros_like(xi) if type(c) is Zero or c is None else c for c, xi in zip(ct, x)]
    if symmetric:
        vecmat = _mv(matvec, consts)
    else:
        mv = _mv(matvec, consts)

        def vecmat(*ws):
            return vjp(mv, *x)[1](tuple(ws))
    lam = solve_leaves(vecmat, cts, transpose_solve, solve, symmetric, tree)
    out = [None] * n + [lam[i] if needed[n + i] else None for i in range(n)]
    live = [i for i, c in enumerate(consts) if needed[2 * n + i]]
    c_cts = [None] * len(consts)
    if live:
        def of_live(*cs):
            full = list(consts)
            for i, c in zip(live, cs):
                full[i] = c
            return tuple(eval_graph(matvec, list(x) + full))
        pulled = vjp(of_live, *[consts[i] for i in live])[1](tuple(lam))
        for i, c in zip(live, pulled):
            c_cts[i] = negative(c)
    return tuple(out + c_cts)


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


def solve_leaves(matvec_leaves, b_leaves, solve, transpose_solve, symmetric, tree):
    """`custom_linear_solve` on flat leaves (``matvec_leaves`` maps leaves to a tuple)."""
    def matvec(x):
        return tree_unflatten(tree, list(matvec_leaves(*tree_flatten(x)[0])))
    x = custom_linear_solve(matvec, tree_unflatten(tree, list(b_leaves)), solve,
                            transpose_solve, symmetric)
    return tree_flatten(x)[0]


def _without_aux(solve):
    if solve is None:
        return None
    return lambda matvec, b: solve(matvec, b)[0]


# ---------------------------------------------------------------------------
# The public function
# ---------------------------------------------------------------------------


def custom_linear_solve(matvec, b, solve, transpose_solve=None, symmetric=False,
                        has_aux=False):
    """Solve ``matvec(x) = b`` with ``solve``, differentiating by solves only.

    ``matvec`` is a linear function (pytree ``x`` to a pytree like ``b``);
    ``solve(matvec, b)`` returns ``x`` (``(x, aux)`` with ``has_aux``);
    ``transpose_solve(vecmat, b)`` solves the transposed system (returning
    ``(x, aux)`` too with ``has_aux``), and is needed for reverse mode unless
    ``symmetric=True``. As in ``jax.lax``, the solver's
    own steps are never differentiated: derivatives with respect to ``b`` and to
    the values ``matvec`` closes over come from further calls of ``solve`` and
    ``transpose_solve``, so they hold for any solver accurate enough.

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
    avals = [get_aval(x) for x in b_leaves]
    mv = closure_convert(matvec, tree, avals)
    if mv.out_tree != tree:
        raise CustomRuleError(
            f"custom_linear_solve: matvec maps x to a pytree of structure "
            f"{mv.out_tree}, but b has structure {tree}; the system must be square.")
    for i, (v, a) in enumerate(zip(mv.graph.outvars, avals)):
        if v.aval.shape != a.shape:
            raise CustomRuleError(
                f"custom_linear_solve: matvec's output leaf {i} has shape "
                f"{v.aval.shape}, but b's leaf {i} has shape {a.shape}.")
    frozen = [stop_gradient(c) for c in mv.consts]

    def matvec_frozen(x):
        return tree_unflatten(tree, mv.apply(tree_flatten(x)[0], frozen))
    out = solve(matvec_frozen, tree_unflatten(tree, [stop_gradient(x) for x in b_leaves]))
    x, aux = out if has_aux else (out, None)
    x_leaves, x_tree = as_leaves(x)
    if x_tree != tree:
        raise CustomRuleError(
            f"custom_linear_solve: solve returned a pytree of structure {x_tree}, but "
            f"b has structure {tree}.")
    if any_traced(b_leaves) or any_traced(mv.consts):
        if has_aux:                     # the rules' solves want the solution only
            solve, transpose_solve = _without_aux(solve), _without_aux(transpose_solve)
        x_leaves = linear_solve_p.bind(
            *x_leaves, *b_leaves, *mv.consts, n=len(b_leaves), matvec=mv.graph,
            solve=solve, transpose_solve=transpose_solve, symmetric=symmetric, tree=tree)
        x = tree_unflatten(tree, list(x_leaves))
    return (x, aux) if has_aux else x
