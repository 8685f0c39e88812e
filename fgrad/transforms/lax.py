"""Structured control flow: cond, switch, while_loop, fori_loop, scan.

Outside `jit` (and whenever the deciding values are concrete, as under eager
``grad``), these run as ordinary Python: the chosen branch is called, the loop
loops, and every transformation sees the operations one by one, so everything
differentiates as usual. When a deciding value is staged (inside `jit`) or
differs between the examples of a `vmap`, the branches or the loop body are
staged into graphs and the whole construct becomes one primitive
(`fgrad.primitives.control`), with its own JVP, VJP and batching rules.

>>> import numpy as np, fgrad, fgrad.numpy as fnp
>>> f = fgrad.jit(lambda x: fgrad.lax.cond(fnp.sum(x) > 0, fnp.sin, fnp.cos, x))
>>> f(np.zeros(2))
array([1., 1.])
"""
import numpy as np

from fgrad.core.errors import (
    BatchedConversionError,
    ConcretizationError,
    ControlFlowError,
    LaxArgumentError,
)
from fgrad.core.graph import Graph, Var
from fgrad.core.trace import ShapedArray, Tracer, get_aval, trace_state
from fgrad.core.tree import tree_flatten, tree_unflatten
from fgrad.interpreters.batching import innermost_value
from fgrad.interpreters.staging import StagingTrace, is_staged, stage
from fgrad.primitives.elementwise import convert_element_type
from fgrad.primitives.indexing import slice_axis
from fgrad.primitives.shape import concatenate, reshape, stack
from fgrad.transforms.control_flow import cond_p, scan_p, while_p

__all__ = ["cond", "switch", "while_loop", "fori_loop", "scan"]


def _deferred(x):
    """True if ``x`` has no single concrete value: staged, or batched by vmap."""
    try:
        return is_staged(x)
    except BatchedConversionError:
        return True


def _staged(x):
    """True if ``x`` is staged (under jit), looking through vmap's batching."""
    x = innermost_value(x)
    return isinstance(x, Tracer) and _deferred(x)


def _avals(leaves):
    return [get_aval(x).strip_weak() for x in leaves]


def _stage_flat(fun, in_tree, avals, what):
    """Stage ``fun`` on pytree inputs; returns (graph, captured, out_tree)."""
    box = []

    def flat(*xs):
        out = fun(*tree_unflatten(in_tree, list(xs)))
        leaves, tree = tree_flatten(out)
        box.append(tree)
        return leaves
    graph, captured = stage(flat, avals)
    return graph, captured, box[0]


def _merge_captures(staged):
    """Give every graph the union of all graphs' captured values as extra inputs."""
    union, index = [], {}
    for _, captured, _ in staged:
        for t in captured:
            if id(t) not in index:
                index[id(t)] = len(union)
                union.append(t)
    graphs = []
    for graph, captured, _ in staged:
        n_own = len(graph.invars) - len(captured)
        mine = {id(t): v for t, v in zip(captured, graph.invars[n_own:])}
        extra = [mine.get(id(t)) or Var(t.aval.strip_weak()) for t in union]
        graphs.append(Graph(graph.invars[:n_own] + extra, graph.eqns, graph.outvars,
                            graph.sources))
    return graphs, union


def _check_same(avals_a, avals_b, what):
    if len(avals_a) != len(avals_b) or any(
            a.shape != b.shape or a.dtype != b.dtype for a, b in zip(avals_a, avals_b)):
        raise ControlFlowError(f"{what}: {list(avals_a)} versus {list(avals_b)}. Make "
                               "them return arrays of the same shapes and dtypes.")


def switch(index, branches, *operands):
    """Apply ``branches[index](*operands)``; ``index`` is clamped into range.

    >>> import fgrad, fgrad.numpy as fnp
    >>> float(fgrad.lax.switch(1, [fnp.sin, fnp.cos, fnp.exp], 0.0))
    1.0
    """
    branches = list(branches)
    if not branches:
        raise ControlFlowError("switch needs at least one branch")
    if not _deferred(index):
        i = min(max(int(index), 0), len(branches) - 1)
        return branches[i](*operands)
    leaves, in_tree = tree_flatten(operands)
    staged = [_stage_flat(b, in_tree, _avals(leaves), "branch") for b in branches]
    out_tree = staged[0][2]
    for k, (g, _, tree) in enumerate(staged[1:], 1):
        if tree != out_tree:
            raise ControlFlowError(f"switch/cond branches must return the same structure: "
                                   f"branch 0 returns {out_tree}, branch {k} {tree}")
        _check_same([a.strip_weak() for a in staged[0][0].out_avals],
                    [a.strip_weak() for a in g.out_avals],
                    f"switch/cond branch {k} returns different shapes or dtypes than "
                    "branch 0")
    graphs, captured = _merge_captures(staged)
    index = convert_element_type(index, np.int64)
    outs = cond_p.bind(index, *leaves, *captured, branches=tuple(graphs))
    return tree_unflatten(out_tree, list(outs))


def cond(pred, true_fun, false_fun, *operands):
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``.

    Under jit a staged ``pred`` stages both branches (which must return the same
    shapes and dtypes) into one ``cond`` primitive.

    >>> import fgrad, fgrad.numpy as fnp
    >>> float(fgrad.lax.cond(True, lambda x: x + 1.0, lambda x: x - 1.0, 1.0))
    2.0
    """
    if not _deferred(pred):
        return true_fun(*operands) if bool(pred) else false_fun(*operands)
    return switch(pred, [false_fun, true_fun], *operands)


# -- loops ---------------------------------------------------------------------------
#
# A loop whose deciding values are all concrete runs as Python, so every
# transformation sees its steps one by one. Inside jit (or make_graph) that
# would unroll it into the graph, one copy of the body per step, as soon as
# the body reads a staged value it closes over (``c * w`` for a traced ``w``)
# while its carry and bounds are concrete. So there the body is first staged
# on abstract values, as JAX's closure conversion does: if it captures a
# staged value, the loop becomes one primitive with the captures as extra
# operands; if not, it computes a constant and runs eagerly as before.


def _staging_active():
    """True inside jit or make_graph, where a loop body may close over staged values."""
    return any(isinstance(t, StagingTrace) for t in trace_state.trace_stack)


def _staged_if_closing_over(stage_loop, captured_of):
    """``stage_loop()`` (a loop staged whose carry and bounds are concrete)
    where its functions capture a staged value, else None: the loop runs as
    Python. So does a body that cannot be staged (a Python ``if`` on its index
    or carry, a carry that changes shape), as it did before such loops were
    staged: it computes a constant, or, closing over a staged value, unrolls."""
    try:
        staged = stage_loop()
    except (ConcretizationError, ControlFlowError):
        return None
    return staged if any(_staged(t) for t in captured_of(staged)) else None


def _weak_carry_promoted(leaves, out_avals_of):
    """The carry ``leaves``, each weak-typed one (a Python scalar) converted to
    the dtype the loop body returns for it, as JAX's loops promote them, so that
    a loop staged with ``init=1.0`` and a ``float32`` body keeps ``float32``,
    as the same loop run eagerly does. ``out_avals_of(avals)`` stages the body on
    the carry's abstract values (weak ones kept weak) and returns its carry's."""
    avals = [get_aval(x) for x in leaves]
    if not any(a.weak_type for a in avals):
        return leaves
    outs = out_avals_of([ShapedArray(a.shape, a.dtype, a.weak_type) for a in avals])
    return [convert_element_type(x, o.dtype) if a.weak_type and o.dtype != a.dtype else x
            for x, a, o in zip(leaves, avals, outs)]


def while_loop(cond_fun, body_fun, init_val):
    """``while cond_fun(val): val = body_fun(val)``, returning the final ``val``.

    Eager (and differentiable in both modes) when the loop condition is
    concrete and neither function closes over a value staged by `jit`; under
    jit one ``while_loop`` primitive, forward-differentiable only (reverse
    mode needs `scan` or `fori_loop` with static bounds).

    >>> import fgrad
    >>> fgrad.lax.while_loop(lambda v: v < 10, lambda v: v * 2, 1)
    16
    """
    leaves, tree = tree_flatten(init_val)
    staged = None
    if any(_staged(x) for x in leaves):
        staged = _stage_while(cond_fun, body_fun, leaves, tree)
    elif _staging_active():
        staged = _staged_if_closing_over(
            lambda: _stage_while(cond_fun, body_fun, leaves, tree),
            lambda staged: staged[0] + staged[1])
    if staged is None:
        # eager while the predicate is one concrete value; a predicate that
        # differs between vmap's examples hands the rest of the loop over to
        # the primitive, whose batching rule steps each example as far as it goes
        while True:
            keep = cond_fun(init_val)
            if _deferred(keep):
                break
            if not bool(keep):
                return init_val
            init_val = body_fun(init_val)
        leaves, tree = tree_flatten(init_val)
        staged = _stage_while(cond_fun, body_fun, leaves, tree)
    c_cap, b_cap, c_graph, b_graph, leaves = staged
    outs = while_p.bind(*c_cap, *b_cap, *leaves, cond=c_graph, body=b_graph,
                        n_cc=len(c_cap), n_bc=len(b_cap))
    return tree_unflatten(tree, list(outs))


def _stage_while(cond_fun, body_fun, leaves, tree):
    """``(cond captures, body captures, cond graph, body graph, carry leaves)``
    of a while loop from ``leaves``, each graph's captures first."""
    def stage_body(avals):
        return _stage_flat(lambda v: body_fun(v), _single(tree), avals, "body_fun")
    leaves = _weak_carry_promoted(leaves, lambda avals: stage_body(avals)[0].out_avals)
    avals = _avals(leaves)
    c_graph, c_cap, _ = _stage_flat(lambda v: cond_fun(v), _single(tree), avals,
                                    "cond_fun")
    b_graph, b_cap, b_tree = stage_body(avals)
    if b_tree != tree:
        raise ControlFlowError(f"while_loop body_fun must return the structure of "
                               f"init_val ({tree}), got {b_tree}")
    _check_same(avals, [a.strip_weak() for a in b_graph.out_avals],
                "while_loop body_fun changes the carry's shapes or dtypes")
    # constants first, then the carry: the primitive's operand order
    n = len(leaves)
    c_graph = Graph(c_graph.invars[n:] + c_graph.invars[:n], c_graph.eqns, c_graph.outvars,
                    c_graph.sources)
    b_graph = Graph(b_graph.invars[n:] + b_graph.invars[:n], b_graph.eqns, b_graph.outvars,
                    b_graph.sources)
    return c_cap, b_cap, c_graph, b_graph, leaves


def _single(tree):
    # the staged functions take the carry pytree as one argument
    return tree_flatten((tree.unflatten([0] * tree.num_leaves),))[1]


def fori_loop(lower, upper, body_fun, init_val, *, unroll=None):
    """``for i in range(lower, upper): val = body_fun(i, val)``.

    With Python-int bounds this is a `scan` (so reverse mode works under jit),
    and ``unroll`` is scan's (`scan`); with staged bounds it is a `while_loop`,
    which does not unroll.

    >>> import fgrad
    >>> int(fgrad.lax.fori_loop(0, 4, lambda i, v: v + i, 0))
    6
    """
    if _deferred(lower) or _deferred(upper):
        if unroll is not None and unroll is not False and unroll != 1:
            raise LaxArgumentError(
                f"fori_loop: unroll={unroll!r} needs bounds known while staging, but "
                "lower or upper is a traced value. Pass Python ints as bounds (or "
                "mark them static), or leave unroll out.")

        def cond_fun(state):
            return state[0] < upper

        def body(state):
            i, v = state
            return i + 1, body_fun(i, v)
        return while_loop(cond_fun, body, (lower, init_val))[1]
    lower, upper = int(lower), int(upper)
    if upper <= lower:
        return init_val

    def step(carry, i):
        return body_fun(i, carry), None
    carry, _ = scan(step, init_val, np.arange(lower, upper),
                    unroll=1 if unroll is None else unroll)
    return carry


def _steps_per_loop(unroll, length):
    """How many steps of a scan of ``length`` one loop step runs, from JAX's
    ``unroll``: ``False`` 1, ``True`` or 0 all of them, else the int, at most
    ``length``."""
    if isinstance(unroll, (bool, np.bool_)):
        return max(length, 1) if unroll else 1
    if not isinstance(unroll, (int, np.integer)) or unroll < 0:
        raise LaxArgumentError(f"scan: unroll={unroll!r} must be a bool or a "
                               "non-negative int (the steps per loop step; 0 or True "
                               "unrolls the whole loop)")
    return max(length, 1) if unroll == 0 else min(int(unroll), max(length, 1))


def scan(f, init, xs=None, length=None, reverse=False, unroll=1):
    """Loop ``carry, y = f(carry, x)`` over the leading axis of ``xs``.

    Returns ``(final carry, stacked ys)``. Eager when nothing is staged; under
    jit (when the carry, ``xs`` or a value ``f`` closes over is staged) one
    ``scan`` primitive, whose VJP is a scan in the other direction. Reverse
    mode stores, per step, what the backward step reads (the step's residuals,
    such as ``1 - tanh(a)**2``, and the carry where it is read) rather than redo
    the step's forward work: memory grows with the length times those values.

    ``unroll`` is JAX's: an int ``k`` makes each step of the staged loop run
    ``k`` steps of ``f`` (the last ``length % k`` steps run after the loop, one
    by one), ``True`` (or 0) stages every step, unrolled, and ``False`` (or 1)
    one loop step per step of ``f``. The values are the same whatever it is.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> carry, ys = fgrad.lax.scan(lambda c, x: (c + x, c * x), 0.0, np.arange(4.0))
    >>> float(carry), ys
    (6.0, array([0., 0., 2., 9.]))
    """
    x_leaves, x_tree = tree_flatten(xs)
    lengths = {get_aval(x).shape[0] for x in x_leaves}
    if length is not None:
        lengths.add(int(length))
    if len(lengths) != 1:
        raise ControlFlowError(
            f"scan needs one length: the leading axes of xs are {sorted(lengths)}"
            + ("" if x_leaves or length is not None else " (pass length= when xs is None)"))
    n = lengths.pop()
    steps = _steps_per_loop(unroll, n)
    c_leaves, c_tree = tree_flatten(init)
    staged = None
    # an empty sequence runs no step to show the outputs' shapes: the primitive
    # stages the step for them, as under jit
    if not n or (steps < n and any(_staged(v) for v in c_leaves + x_leaves)):
        staged = _stage_scan(f, c_leaves, c_tree, x_leaves, x_tree)
    elif steps < n and _staging_active():
        staged = _staged_if_closing_over(
            lambda: _stage_scan(f, c_leaves, c_tree, x_leaves, x_tree),
            lambda staged: staged[1])
    if staged is None:
        return _unrolled(f, init, x_leaves, x_tree, 0, n, reverse)
    if steps > 1:
        return _scan_by_blocks(f, init, x_leaves, x_tree, n, steps, reverse)
    body, captured, c_leaves, y_tree = staged
    outs = scan_p.bind(*captured, *c_leaves, *x_leaves, body=body,
                       n_consts=len(captured), n_carry=len(c_leaves), length=n,
                       reverse=reverse)
    return (tree_unflatten(c_tree, list(outs[:len(c_leaves)])),
            tree_unflatten(y_tree, list(outs[len(c_leaves):])))


def _stage_scan(f, c_leaves, c_tree, x_leaves, x_tree):
    """``(body graph, captured, carry leaves, y tree)`` of a scan of ``f``; the
    body's operands are ``(*captured, *carry, *x)``, the primitive's order."""
    slice_avals = [get_aval(x).strip_weak() for x in x_leaves]
    slice_avals = [type(a)(a.shape[1:], a.dtype) for a in slice_avals]
    n_c = len(c_leaves)
    box = []

    def flat(*v):
        carry = tree_unflatten(c_tree, list(v[:n_c]))
        x = tree_unflatten(x_tree, list(v[n_c:]))
        new_carry, y = f(carry, x)
        k_leaves, k_tree = tree_flatten(new_carry)
        y_leaves, y_tree = tree_flatten(y)
        box.append((k_tree, y_tree))
        return k_leaves + y_leaves

    def carry_avals(avals):
        return stage(flat, avals + slice_avals)[0].out_avals[:n_c]
    c_leaves = _weak_carry_promoted(c_leaves, carry_avals)
    graph, captured = stage(flat, _avals(c_leaves) + slice_avals)
    k_tree, y_tree = box[-1]
    if k_tree != c_tree:
        raise ControlFlowError(f"scan's f must return a carry of the structure of init "
                               f"({c_tree}), got {k_tree}")
    _check_same(_avals(c_leaves), [a.strip_weak() for a in graph.out_avals[:n_c]],
                "scan's f changes the carry's shapes or dtypes")
    m = n_c + len(x_leaves)
    # sources: under debug_nans, the lines of the body's equations
    body = Graph(graph.invars[m:] + graph.invars[:m], graph.eqns, graph.outvars,
                 graph.sources)
    return body, captured, c_leaves, y_tree


def _unrolled(f, carry, x_leaves, x_tree, start, stop, reverse):
    """``f`` applied step by step to the slices ``start:stop`` of ``xs``, as
    Python: ``(carry, stacked ys)``."""
    ys = []
    for i in (range(stop - 1, start - 1, -1) if reverse else range(start, stop)):
        carry, y = f(carry, tree_unflatten(x_tree, [x[i] for x in x_leaves]))
        ys.append(y)
    if reverse:
        ys.reverse()
    return carry, _stack_tree(ys)


def _scan_by_blocks(f, init, x_leaves, x_tree, n, steps, reverse):
    """A staged scan running ``steps`` steps of ``f`` per loop step (JAX's
    ``unroll``): a scan over blocks of ``steps`` slices, and the ``n % steps``
    slices left over run one by one after it (the first ones, if ``reverse``)."""
    blocks, rest = divmod(n, steps)
    cut = rest if reverse else blocks * steps
    looped = (cut, n) if reverse else (0, cut)
    blocked = [reshape(slice_axis(x, 0, *looped), (blocks, steps) + get_aval(x).shape[1:])
               for x in x_leaves]

    def block(carry, xs):
        return _unrolled(f, carry, tree_flatten(xs)[0], x_tree, 0, steps, reverse)
    carry, ys = scan(block, init, tree_unflatten(x_tree, blocked), reverse=reverse)
    y_leaves, y_tree = tree_flatten(ys)
    y_leaves = [reshape(y, (blocks * steps,) + get_aval(y).shape[2:]) for y in y_leaves]
    if not rest:
        return carry, tree_unflatten(y_tree, y_leaves)
    left = (0, cut) if reverse else (cut, n)
    carry, rest_ys = _unrolled(f, carry, x_leaves, x_tree, *left, reverse)
    rest_leaves = tree_flatten(rest_ys)[0]
    pairs = zip(rest_leaves, y_leaves) if reverse else zip(y_leaves, rest_leaves)
    return carry, tree_unflatten(y_tree, [concatenate(pair) for pair in pairs])


def _stack_tree(ys):
    leaves0, tree = tree_flatten(ys[0])
    columns = [tree_flatten(y)[0] for y in ys]
    stacked = [stack([col[j] for col in columns]) for j in range(len(leaves0))]
    return tree_unflatten(tree, stacked)
