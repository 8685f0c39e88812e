"""Roots and fixed points differentiated by the implicit function theorem.

If ``f(x*, theta) = 0`` and the Jacobian ``J = df/dx`` at ``x*`` is invertible,
then ``dx*/dtheta = -J^{-1} df/dtheta``: the derivative of a solution needs the
solution and one linear solve, never the steps that found it. `root_p` is an
identity on a solution that carries that rule; `implicit_root` binds it, and
`custom_root` and `fixed_point` (``jax.lax``'s and jaxopt's ideas) are built on
it, as are `fgrad.scipy.optimize`'s solvers. The linear solve is a
`custom_linear_solve` with the caller's ``tangent_solve``, so higher
derivatives are further solves.
"""
import numpy as np

from fgrad.core.errors import ConcretizationError, ConvergenceError, CustomRuleError
from fgrad.core.trace import Primitive, Zero, current_level, get_aval
from fgrad.core.tree import tree_flatten, tree_unflatten
from fgrad.interpreters.staging import stage
from fgrad.primitives.callback import pure_callback
from fgrad.primitives.creation import stop_gradient
from fgrad.primitives.einsum import identity_like
from fgrad.primitives.elementwise import (
    absolute,
    add,
    convert_element_type,
    greater,
    less,
    logical_and_p,
    multiply,
    negative,
    subtract,
)
from fgrad.primitives.linalg import solve as dense_linalg_solve
from fgrad.primitives.reductions import max_
from fgrad.primitives.shape import concatenate, reshape, stack, transpose
from fgrad.transforms.differentiation import jvp, vjp
from fgrad.transforms.lax import while_loop
from fgrad.transforms.linear_solve import (
    ClosedFunction,
    LinearSystem,
    any_traced,
    as_leaves,
    closure_convert,
    graph_function,
    per_example_batch_rule,
    solution_only,
    solve_system,
    solver_function,
    stage_solver,
)
from fgrad.transforms.vmap import vmap

__all__ = ["custom_root", "fixed_point", "implicit_root", "dense_solve"]
FAMILY = "fgrad/transforms/roots.py"


# ---------------------------------------------------------------------------
# The primitive: an identity on a root, whose rules solve with the Jacobian
# ---------------------------------------------------------------------------


def _impl(*ops, n, f, system):
    return tuple(ops[:n])


def _abstract(*avals, n, f, system):
    return tuple(a.strip_weak() for a in avals[:n])


# out of the dispatch table, like linear_solve_p (its graphs are new at each call)
root_p = Primitive("implicit_root", _impl, _abstract, multiple_results=True,
                   family=FAMILY, register=False)


def _split(ops, n, f, system):
    """``ops`` as (root, parameters, tangent_solve's constants for J and for J^T).

    ``system`` is the linear system of ``J = df/dx`` at the root: its matvec
    constants are the root and the parameters, each solve's constants the root,
    the parameters and the traced values ``tangent_solve`` closes over."""
    n_p = f.n_in - n
    _, n_s, n_t = system.counts(n)
    x, p = list(ops[:n]), list(ops[n:n + n_p])
    # each solve graph takes (*y, *x, *params, *its own constants)
    c1 = list(ops[n + n_p:n_s])
    return x, p, c1, list(ops[n_s:n_s + n_t - n - n_p])


def _live(fun, args, live):
    def of_live(*xs):
        full = list(args)
        for i, v in zip(live, xs):
            full[i] = v
        return fun(full)
    return of_live


def _jvp(tangents, ans, *ops, n, f, system):
    # the root as the output, which carries an outer transformation's derivative
    x = ans
    _, p, c1, c2 = _split(ops, n, f, system)
    live = [i for i, t in enumerate(tangents[n:n + len(p)]) if type(t) is not Zero]
    if not live:
        return tuple(Zero(get_aval(a)) for a in ans)
    # df/dtheta . theta_dot at the root
    _, rhs = jvp(_live(lambda q: tuple(f(list(x) + q)), p, live),
                 tuple(p[i] for i in live), tuple(tangents[n + i] for i in live))
    here = list(x) + p
    x_dot = solve_system(system, list(rhs), here, here + c1, here + c2)
    return tuple(negative(t) for t in x_dot)


def _vjp(ct, ans, needed, *ops, n, f, system):
    # the root as the output, which carries an outer transformation's derivative
    x = ans
    _, p, c1, c2 = _split(ops, n, f, system)
    live = [i for i in range(len(p)) if needed[n + i]]
    if not live or all(c is None or type(c) is Zero for c in ct):
        return (None,) * len(ops)
    cts = [multiply(xi, 0.0) if c is None or type(c) is Zero else c for c, xi in zip(ct, x)]
    # J^T lam = ct; the parameters then get -(df/dtheta)^T lam
    here = list(x) + p
    lam = solve_system(system.transposed(), cts, here, here + c2, here + c1)
    pulled = vjp(_live(lambda q: tuple(f(list(x) + q)), p, live),
                 *[p[i] for i in live])[1](tuple(lam))
    out = [None] * len(ops)
    for i, c in zip(live, pulled):
        out[n + i] = negative(c)
    return tuple(out)


root_p.jvp = _jvp
root_p.def_vjp_joint(_vjp)
root_p.batch = per_example_batch_rule(root_p)


def _jacobian_maps(f, n, symmetric):
    """The closed functions ``(*v, *x, *params) -> J v`` and (unless
    ``symmetric``) ``(*w, *x, *params) -> J^T w`` of the closed residual ``f``
    (a `ClosedFunction`)."""
    def at(args):
        x, p = args[n:2 * n], args[2 * n:]
        return x, lambda *xs: tuple(f(list(xs) + list(p)))

    def matvec(args):
        x, fx = at(args)
        return list(jvp(fx, tuple(x), tuple(args[:n]))[1])

    def vecmat(args):
        x, fx = at(args)
        return list(vjp(fx, *x)[1](tuple(args[:n])))
    return (ClosedFunction(matvec, n + f.n_in),
            None if symmetric else ClosedFunction(vecmat, n + f.n_in))


def _staged(fun, avals):
    """The `ClosedFunction` ``fun`` staged into a graph over ``avals``."""
    return stage(lambda *args: fun(args), avals)[0]


def _flat_residual(f, tree, n):
    """``f(x, params)`` as a function of the flat list ``(*x, *params)``."""
    def flat(args):
        leaves, out_tree = tree_flatten(f(tree_unflatten(tree, list(args[:n])),
                                          list(args[n:])))
        if out_tree != tree:
            raise CustomRuleError(
                f"the function whose root is sought maps x to a pytree of structure "
                f"{out_tree}, but x has structure {tree}; f(x) must have x's structure.")
        return leaves
    return flat


def _stage_residual(f, tree, x_avals, params):
    """``f(x, params)`` as a closed graph ``(*x, *params, *captured)``, and the
    traced values ``captured`` it closes over (which become parameters)."""
    flat = _flat_residual(f, tree, len(x_avals))
    try:
        graph, captured = stage(lambda *args: flat(args),
                                x_avals + [get_aval(p).strip_weak() for p in params])
    except ConcretizationError as err:
        raise ConcretizationError(
            "the function whose root is differentiated implicitly is staged (as jit "
            "would stage it) inside a transformation, to find the traced values it "
            "closes over; Python control flow on array values cannot be staged: write "
            "it with fgrad.numpy.where or fgrad.lax.cond. The staging error: "
            f"{err}") from None
    return graph, list(captured)


def implicit_root(f, solution, params, tangent_solve, symmetric=False,
                  what="implicit_root", closed=False):
    """``solution``, made differentiable in ``params`` as a root of ``f``.

    ``f(x, params)`` maps a pytree like ``solution`` and the list of arrays
    ``params`` to a pytree like ``solution`` that is zero at the solution.
    ``tangent_solve(g, y)`` solves the linear ``g(v) = y`` (``g`` the Jacobian
    of ``f`` in ``x``, or its transpose); ``symmetric=True`` says that Jacobian
    is symmetric (a Hessian). Traced values that ``f`` or ``tangent_solve``
    close over are found by staging them (as `jit` would) and become operands:
    ``f``'s get derivatives like ``params``; ``tangent_solve``'s none, as it is
    taken to be the Jacobian's inverse. The solution itself gets no derivative:
    it is treated as the exact root, whatever found it. ``what`` names the
    caller in errors. ``closed=True`` is the caller's promise that ``f`` and
    ``tangent_solve`` read traced values only through their arguments (as
    `fgrad.scipy.optimize`'s, which pass every value they read in ``params``):
    then nothing is staged and the rules call them as they are.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> def sqrt_of(a):                       # the root of x**2 - a, found by NumPy
    ...     x = np.sqrt(fgrad.stop_gradient(a))
    ...     return implicit_root(lambda x, p: x ** 2 - p[0], x, [a],
    ...                          lambda g, y: y / g(1.0))
    >>> float(fgrad.grad(sqrt_of)(4.0))
    0.25
    """
    if current_level() == 0:
        return solution                 # nothing is traced: no derivative to carry
    x_leaves, tree = as_leaves(solution)
    n = len(x_leaves)
    x_avals = [get_aval(x).strip_weak() for x in x_leaves]
    if closed:
        residual, captured = ClosedFunction(_flat_residual(f, tree, n), n + len(params)), []
    else:
        f_graph, captured = _stage_residual(f, tree, x_avals, list(params))
        residual = graph_function(f_graph)
    params = list(params) + captured
    # whatever found the solution (a solver reading traced values) gives no derivative
    x_leaves = [stop_gradient(x) for x in x_leaves]
    if not any_traced(params):
        return tree_unflatten(tree, x_leaves)
    jac, jac_t = _jacobian_maps(residual, n, symmetric)
    if closed:
        # nothing is staged: the rules run f and tangent_solve as they are
        solve = solver_function(tangent_solve, jac, n, tree)
        solve_t = solve if symmetric else solver_function(tangent_solve, jac_t, n, tree)
        c1 = c2 = []
    else:
        avals = [a.strip_weak() for a in f_graph.in_avals]
        jac = _staged(jac, avals[:n] + avals)
        jac_t = None if symmetric else _staged(jac_t, avals[:n] + avals)
        name = f"{what}'s tangent_solve"
        solve, c1, _ = stage_solver(tangent_solve, jac, n + len(params), tree, name)
        if symmetric:
            solve_t, c2 = solve, c1
        else:
            solve_t, c2, _ = stage_solver(tangent_solve, jac_t, n + len(params), tree, name)
        jac, solve, solve_t = (graph_function(jac), graph_function(solution_only(solve, n)),
                               graph_function(solution_only(solve_t, n)))
        jac_t = None if symmetric else graph_function(jac_t)
    system = LinearSystem(jac, jac_t, solve, solve_t)
    out = root_p.bind(*x_leaves, *params, *c1, *c2, n=n, f=residual, system=system)
    return tree_unflatten(tree, list(out))


# ---------------------------------------------------------------------------
# custom_root: jax.lax's interface
# ---------------------------------------------------------------------------


def custom_root(f, initial_guess, solve, tangent_solve, has_aux=False):
    """Find a root of ``f`` with ``solve``; differentiate it implicitly.

    ``solve(f, initial_guess)`` returns ``x`` with ``f(x) = 0`` (``(x, aux)``
    with ``has_aux``); ``tangent_solve(g, y)`` solves the linear ``g(v) = y``
    (``lambda g, y: y / g(1.0)`` for a scalar). As in ``jax.lax.custom_root``,
    ``solve`` runs on values that carry no derivative and is never
    differentiated; the derivative with respect to every traced value ``f``
    closes over is ``-J^{-1} df/dtheta`` at the root (``J = df/dx``). ``f`` is
    staged once, as `jit` would, to find those values; so is ``tangent_solve``
    inside a transformation (its loops in `fgrad.lax`), whose own closed-over
    traced values get derivatives only through ``J``, of which it is taken to be
    the inverse, as in JAX.

    >>> import numpy as np, fgrad
    >>> def newton(f, x):
    ...     for _ in range(30):
    ...         x = x - f(x) / fgrad.grad(f)(x)
    ...     return x
    >>> def cube_root(a):
    ...     return fgrad.lax.custom_root(lambda x: x ** 3 - a, 1.0, newton,
    ...                                  lambda g, y: y / g(1.0))
    >>> round(float(cube_root(8.0)), 12), round(float(fgrad.grad(cube_root)(8.0)), 12)
    (2.0, 0.083333333333)
    """
    leaves, tree = as_leaves(initial_guess)
    closed = closure_convert(f, tree, [get_aval(x) for x in leaves])
    if closed.out_tree != tree:
        raise CustomRuleError(
            f"custom_root: f maps x to a pytree of structure {closed.out_tree}, but "
            f"initial_guess has structure {tree}; f(x) must have x's structure.")
    frozen = [stop_gradient(c) for c in closed.consts]

    def f_frozen(x):
        return tree_unflatten(tree, closed.apply(tree_flatten(x)[0], frozen))
    out = solve(f_frozen, tree_unflatten(tree, [stop_gradient(x) for x in leaves]))
    solution, aux = out if has_aux else (out, None)

    def residual(x, consts):
        return tree_unflatten(tree, closed.apply(tree_flatten(x)[0], consts))
    solution = implicit_root(residual, solution, closed.consts, tangent_solve,
                             what="custom_root")
    return (solution, aux) if has_aux else solution


# ---------------------------------------------------------------------------
# Dense solves of small linear maps
# ---------------------------------------------------------------------------


def _ravel(leaves):
    return concatenate([reshape(x, (-1,)) for x in leaves]) if len(leaves) > 1 \
        else reshape(leaves[0], (-1,))


def _unravel(vector, like):
    out, start = [], 0
    for x in like:
        shape = get_aval(x).shape
        size = int(np.prod(shape, dtype=np.int64))
        out.append(reshape(vector[start:start + size], shape))
        start += size
    return out


def dense_solve(matvec, b):
    """Solve ``matvec(x) = b`` by building the matrix (one ``matvec`` per
    column, vectorised with `vmap`) and an LU solve: exact and quick for a few
    hundred unknowns; pass an iterative ``solve`` for more.

    >>> import numpy as np
    >>> A = np.array([[2.0, 1.0], [0.0, 4.0]])
    >>> dense_solve(lambda x: A @ x, np.array([3.0, 4.0]))
    array([1., 1.])
    """
    b_leaves, tree = tree_flatten(b)
    size = sum(int(np.prod(get_aval(x).shape, dtype=np.int64)) for x in b_leaves)
    dtype = np.result_type(*[get_aval(x).dtype for x in b_leaves])

    def column(e):
        out = matvec(tree_unflatten(tree, _unravel(e, b_leaves)))
        return _ravel(tree_flatten(out)[0])
    # columns of A, one per basis vector: the rows of A^T
    a_t = vmap(column)(identity_like(b_leaves[0], size, dtype))   # on b's device
    x = reshape(dense_linalg_solve(transpose(a_t, (1, 0)),
                                   reshape(_ravel(b_leaves), (size, 1))), (size,))
    return tree_unflatten(tree, _unravel(x, b_leaves))


# ---------------------------------------------------------------------------
# fixed_point
# ---------------------------------------------------------------------------


def _checked(max_iter):
    """A host check of the iteration's exit: the iterate, or ConvergenceError."""
    def check(k, gap, bound, *x):
        if gap > bound:
            raise ConvergenceError(
                f"fixed_point did not converge in max_iter={max_iter} iterations (the "
                f"last step moved by {float(gap):.3g}, the tolerance allows "
                f"{float(bound):.3g}): raise max_iter or tol, start closer, or check "
                "that f is a contraction near the solution.")
        return list(x)
    return check


def _with_closure(f, x_leaves, x_tree, p_leaves, p_tree):
    """``f(x, params)`` as a function of ``x`` and a flat list of parameters:
    ``params``' leaves, then (inside a transformation, where ``f`` is staged as
    `jit` would stage it) the traced values ``f`` closes over, which so are
    iterated without derivatives and differentiated implicitly like
    ``params``. Returns the function and that list."""
    if current_level() == 0:
        return (lambda x, ps: f(x, tree_unflatten(p_tree, list(ps)))), p_leaves
    in_tree = tree_flatten((tree_unflatten(x_tree, x_leaves), list(p_leaves)))[1]
    closed = closure_convert(lambda xp: f(xp[0], tree_unflatten(p_tree, xp[1])), in_tree,
                             [get_aval(v) for v in list(x_leaves) + list(p_leaves)])
    k = len(p_leaves)

    def flat_f(x, ps):
        out = closed.apply(tree_flatten(x)[0] + list(ps[:k]), ps[k:])
        return tree_unflatten(closed.out_tree, out)
    return flat_f, list(p_leaves) + list(closed.consts)


def fixed_point(f, x0, params, *, tol=1e-10, max_iter=1000, tangent_solve=None):
    """The ``x`` with ``x = f(x, params)``, found by iteration from ``x0`` and
    differentiable in ``params`` (any pytree) by the implicit function theorem.

    The iteration ``x <- f(x, params)`` stops when no entry moves by more than
    ``tol * (1 + max|x|)``; stopping at ``max_iter`` without that raises
    `fgrad.errors.ConvergenceError` (at run time under `jit`). The derivative
    solves ``(df/dx - I) v = y`` with ``tangent_solve(g, y)`` (default
    `dense_solve`, for up to a few hundred unknowns); the iterations are never
    differentiated.

    >>> import numpy as np, fgrad
    >>> def solution(a):                      # x = cos(a x)
    ...     return fgrad.lax.fixed_point(lambda x, a: fgrad.numpy.cos(a * x), 0.5, a)
    >>> round(float(solution(1.0)), 10), round(float(fgrad.grad(solution)(1.0)), 10)
    (0.7390851332, -0.2974743415)
    """
    if tangent_solve is None:
        tangent_solve = dense_solve
    p_leaves, p_tree = as_leaves(params)
    x_leaves, x_tree = as_leaves(x0)
    f, p_leaves = _with_closure(f, x_leaves, x_tree, p_leaves, p_tree)
    frozen = [stop_gradient(p) for p in p_leaves]

    def step(xs):
        out = tree_flatten(f(tree_unflatten(x_tree, list(xs)), frozen))[0]
        # the iterate keeps x0's dtypes, as a loop carry must
        return [convert_element_type(o, get_aval(x).dtype) for o, x in zip(out, xs)]

    def gap_and_bound(old, new):
        gap = max_(stack([max_(absolute(subtract(b, a)), None, False)
                          for a, b in zip(old, new)]), None, False)
        size = max_(stack([max_(absolute(b), None, False) for b in new]), None, False)
        return gap, multiply(tol, add(1.0, size))

    def cond(state):
        k, gap, bound, _ = state
        return logical_and_p.bind(less(k, max_iter), greater(gap, bound))

    def body(state):
        k, _, _, x = state
        new = step(x)
        gap, bound = gap_and_bound(x, new)
        return add(k, 1), gap, bound, new
    start = [stop_gradient(x) for x in x_leaves]
    first = step(start)
    k, gap, bound, x = while_loop(cond, body, (np.int64(1), *gap_and_bound(start, first),
                                               first))
    x = pure_callback(_checked(max_iter), [get_aval(xi) for xi in x], k, gap, bound, *x)
    solution = tree_unflatten(x_tree, x)

    def residual(x, ps):
        fx = tree_flatten(f(x, ps))[0]
        return tree_unflatten(x_tree, [subtract(a, b)
                                       for a, b in zip(fx, tree_flatten(x)[0])])
    return implicit_root(residual, solution, p_leaves, tangent_solve)
