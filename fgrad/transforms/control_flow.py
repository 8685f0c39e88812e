"""Structured control flow: cond (switch), while_loop and scan as primitives.

Each primitive carries its branches or loop body as staged graphs
(`fgrad.core.graph.Graph`) in its parameters; ``fgrad.lax`` builds them. The rules
are themselves written by staging: the JVP of a loop is the same loop over a
body that carries tangents (`_jvp_graph`), the VJP of ``cond`` is a ``cond``
over the branches' VJPs (`_vjp_graph`), and the VJP of ``scan`` is a scan in the
opposite direction over the stored carries. Every graph is closed (its outer
values are explicit operands), so a rule only rearranges operands.

Batching rules batch the graphs (`fgrad.interpreters.batching.batch_graph`) and
bind the same primitive on them, except where examples would take different
paths: a ``cond`` whose predicate differs between examples runs every branch on
the whole batch and selects per example, and a ``while_loop`` whose predicate
differs runs until no example wants another step, freezing finished examples.
"""
import contextlib
import functools
from typing import NamedTuple

import numpy as np

from fgrad.compiler.passes import (
    effectful,
    eliminate_common_subexpressions,
    eliminate_dead_code,
)
from fgrad.core.backend import array_module
from fgrad.core.errors import ControlFlowError
from fgrad.core.graph import Graph, Var
from fgrad.core.trace import Primitive, ShapedArray, Zero, get_aval, nans_enabled
from fgrad.interpreters.batching import batch_graph
from fgrad.interpreters.nan_checking import run_checked
from fgrad.interpreters.staging import eval_graph, stage, unselected_lanes
from fgrad.primitives.batching import axis_size, batch_to_front, move_axis
from fgrad.primitives.creation import zeros_like
from fgrad.primitives.elementwise import add, greater_equal, where
from fgrad.primitives.reductions import any_p
from fgrad.primitives.shape import reshape
from fgrad.transforms.differentiation import jvp, vjp
from fgrad.transforms.jit import compiled_for

FAMILY = "fgrad/transforms/control_flow.py"


def _stage(fun, avals):
    graph, captured = stage(fun, avals)
    assert not captured, "rules stage closed graphs only"
    return graph


def _runner(graph, args):
    """The function that runs ``graph`` on operands like ``args``: its compiled
    code. Looked up once per loop, not once per step: the look-up (the
    backend, the fusion and debug_nans settings) cost more than a small body's
    NumPy calls."""
    if graph.sources is not None and nans_enabled():
        # staged under debug_nans: checked equation by equation, so a NaN is
        # blamed on the line inside the branch or loop body that made it
        return lambda *xs: tuple(run_checked(graph, xs))
    return compiled_for(graph, array_module(*args), whole=False)


def _eval(graph, args):
    return eval_graph(graph, args)


def _zeros_like(x):
    # made from an operand, so the zeros live on the operand's backend
    return zeros_like(x)


def _real_tangent(t, like):
    return _zeros_like(like) if t is None or type(t) is Zero else t


def _is_float(aval):
    return aval.dtype.kind in "fc"


def _batch_graph(graph, dims, size, force=None):
    return batch_graph(graph, tuple(dims), size, None if force is None else tuple(force))


def _per_example(mask, like):
    """``mask`` (one bool per example, batch axis first) shaped to select on ``like``."""
    shape = get_aval(mask).shape
    return reshape(mask, shape + (1,) * (get_aval(like).ndim - len(shape)))


def _carry_fixed_point(batched, step):
    """Which carries are batched once the loop body has run.

    A carry that is shared on entry but comes out of the body batched must be
    batched on entry too, which may batch more of the body's outputs: iterate
    ``step(batched) -> body outputs' flags`` until nothing changes.
    """
    batched = list(batched)
    while True:
        out = step(batched)
        grown = [a or b for a, b in zip(batched, out)]
        if grown == batched:
            return batched
        batched = grown


def _carry_in(carry, dims, batched, size):
    """Carries with batch axis first where ``batched`` says, broadcast if shared."""
    return [batch_to_front(x, d, size) if b else x
            for x, d, b in zip(carry, dims, batched)]


def _jvp_graph(graph, n_keep):
    """A graph of ``(*ins, *in_tangents) -> (*outs, *out_tangents)``.

    Tangents are taken for every input from index ``n_keep`` on (inputs before
    it are treated as constants with zero tangent).
    """
    in_avals = graph.in_avals
    n = len(in_avals)

    def fun(*xs):
        ins, tans = list(xs[:n]), xs[n:]

        def f(*vary):
            return tuple(_eval(graph, ins[:n_keep] + list(vary)))
        outs, out_t = jvp(f, tuple(ins[n_keep:]), tuple(tans))
        return list(outs) + list(out_t)
    return _stage(fun, [a.strip_weak() for a in in_avals]
                  + [a.strip_weak() for a in in_avals[n_keep:]])


def _vjp_graph(graph, positions):
    """A graph of ``(*ins, *out_cts) -> cts of ins[positions]``."""
    in_avals, out_avals = graph.in_avals, graph.out_avals
    n = len(in_avals)

    def fun(*xs):
        ins, cts = list(xs[:n]), xs[n:]

        def f(*vary):
            full = list(ins)
            for i, v in zip(positions, vary):
                full[i] = v
            return tuple(_eval(graph, full))
        _, pullback = vjp(f, *[ins[i] for i in positions])
        return list(pullback(tuple(cts)))
    return _stage(fun, [a.strip_weak() for a in in_avals]
                  + [a.strip_weak() for a in out_avals])


# ---------------------------------------------------------------------------
# cond / switch: cond_p(index, *operands, branches=(graph, ...))
# ---------------------------------------------------------------------------


def _cond_impl(index, *ops, branches):
    i = min(max(int(index), 0), len(branches) - 1)
    return tuple(_runner(branches[i], ops)(*ops))


def _cond_abstract(index, *ops, branches):
    return tuple(a.strip_weak() for a in branches[0].out_avals)


cond_p = Primitive("cond", _cond_impl, _cond_abstract, multiple_results=True,
                   family=FAMILY)


def _cond_jvp(tangents, ans, index, *ops, branches):
    tans = [_real_tangent(t, x) for t, x in zip(tangents[1:], ops)]
    jvp_branches = tuple(_jvp_graph(g, 0) for g in branches)
    out = cond_p.bind(index, *ops, *tans, branches=jvp_branches)
    return tuple(out[len(ans):])


def _cond_vjp(ct, ans, needed, index, *ops, branches):
    positions = [i for i, need in enumerate(needed[1:]) if need]
    cts = [_real_tangent(c, a) for c, a in zip(ct, ans)]
    vjp_branches = tuple(_vjp_graph(g, positions) for g in branches)
    arg_cts = cond_p.bind(index, *ops, *cts, branches=vjp_branches)
    out = [None] * (1 + len(ops))
    for i, c in zip(positions, arg_cts):
        out[1 + i] = c
    return tuple(out)


def _cond_batch(args, dims, *, branches):
    index, ops = args[0], args[1:]
    size = axis_size(args, dims)
    op_dims = dims[1:]
    if dims[0] is None:
        # every example takes the same branch: one cond over batched branches,
        # each output batched if any branch batches it
        flags = [_batch_graph(g, op_dims, size)[1] for g in branches]
        force = [any(col) for col in zip(*flags)]
        batched = tuple(_batch_graph(g, op_dims, size, force)[0] for g in branches)
        outs = cond_p.bind(index, *ops, branches=batched)
        return outs, tuple(0 if b else None for b in force)
    # examples disagree: every branch runs on the whole batch, then each example
    # keeps its own branch's result (index clamped into range, as in impl)
    force = [True] * len(branches[0].outvars)
    with unselected_lanes() if nans_enabled() else contextlib.nullcontext():
        results = [_eval(_batch_graph(g, op_dims, size, force)[0], ops)
                   for g in branches]
    index = move_axis(index, dims[0], 0)
    out = list(results[0])
    for k in range(1, len(branches)):
        take = greater_equal(index, k)
        out = [where(_per_example(take, o), o, r) for o, r in zip(results[k], out)]
    return tuple(out), (0,) * len(out)


cond_p.def_jvp_joint(_cond_jvp)
cond_p.def_vjp_joint(_cond_vjp)
cond_p.batch = _cond_batch

# ---------------------------------------------------------------------------
# while_loop: while_p(*cond_consts, *body_consts, *init, cond=, body=, n_cc=, n_bc=)
# ---------------------------------------------------------------------------


def _while_impl(*args, cond, body, n_cc, n_bc):
    cc, bc, val = args[:n_cc], args[n_cc:n_cc + n_bc], args[n_cc + n_bc:]
    run_cond, run_body = _runner(cond, cc + val), _runner(body, bc + val)
    while bool(run_cond(*cc, *val)[0]):
        val = tuple(run_body(*bc, *val))
    return tuple(val)


def _while_abstract(*avals, cond, body, n_cc, n_bc):
    return tuple(a.strip_weak() for a in avals[n_cc + n_bc:])


while_p = Primitive("while_loop", _while_impl, _while_abstract, multiple_results=True,
                    family=FAMILY)


def _while_jvp(tangents, ans, *args, cond, body, n_cc, n_bc):
    cc, bc, val = args[:n_cc], args[n_cc:n_cc + n_bc], args[n_cc + n_bc:]
    t_bc = [_real_tangent(t, x)
            for t, x in zip(tangents[n_cc:n_cc + n_bc], bc)]
    t_val = [_real_tangent(t, x) for t, x in zip(tangents[n_cc + n_bc:], val)]
    n_val = len(val)
    # body over (bc, t_bc; val, t_val): tangents of the constants ride along as
    # constants, tangents of the carry as carry
    jvp_all = _jvp_graph(body, 0)        # (*bc, *val, *t_bc, *t_val) -> (*val', *t_val')

    def body_fun(*xs):
        b, tb = xs[:n_bc], xs[n_bc:2 * n_bc]
        v, tv = xs[2 * n_bc:2 * n_bc + n_val], xs[2 * n_bc + n_val:]
        return _eval(jvp_all, list(b) + list(v) + list(tb) + list(tv))
    body_avals = [get_aval(x).strip_weak() for x in (*bc, *t_bc, *val, *t_val)]
    new_body = _stage(body_fun, body_avals)

    def cond_fun(*xs):
        return _eval(cond, list(xs[:n_cc + n_val]))
    cond_avals = [get_aval(x).strip_weak() for x in (*cc, *val, *t_val)]
    new_cond = _stage(cond_fun, cond_avals)
    out = while_p.bind(*cc, *bc, *t_bc, *val, *t_val, cond=new_cond, body=new_body,
                       n_cc=n_cc, n_bc=2 * n_bc)
    return tuple(out[n_val:])


def _while_vjp(ct, ans, needed, *args, cond, body, n_cc, n_bc):
    raise ControlFlowError(
        "reverse-mode differentiation (grad, vjp) of a staged fgrad.lax.while_loop "
        "is not supported: its number of iterations is unknown while staging, so "
        "the carries the reverse sweep needs cannot be stored. Use fgrad.lax.scan, "
        "or fgrad.lax.fori_loop with Python-int bounds (which becomes a scan); or "
        "differentiate outside jit, where while_loop runs eagerly.")


@functools.lru_cache(maxsize=128)
def _masked_loop(cond, body, n_cc, n_bc):
    """(cond, body) graphs of a loop that steps while any example's predicate
    holds, leaving the carries of finished examples as they are.

    ``cond`` and ``body`` are batched graphs (every carry batched, batch axis
    first); the new body takes the cond's constants in front of its own.
    """
    cond_avals = cond.in_avals

    def any_cond(*xs):
        return [any_p.bind(_eval(cond, list(xs))[0], axis=None, keepdims=False)]

    def masked_body(*xs):
        cc, bc, val = xs[:n_cc], xs[n_cc:n_cc + n_bc], xs[n_cc + n_bc:]
        running = _eval(cond, list(cc) + list(val))[0]
        new = _eval(body, list(bc) + list(val))
        return [where(_per_example(running, n), n, v) for n, v in zip(new, val)]
    body_avals = cond_avals[:n_cc] + body.in_avals[:n_bc] + cond_avals[n_cc:]
    return _stage(any_cond, cond_avals), _stage(masked_body, body_avals)


def _while_batch(args, dims, *, cond, body, n_cc, n_bc):
    size = axis_size(args, dims)
    cc, bc, val = args[:n_cc], args[n_cc:n_cc + n_bc], args[n_cc + n_bc:]
    cc_dims, bc_dims = list(dims[:n_cc]), list(dims[n_cc:n_cc + n_bc])
    val_dims = dims[n_cc + n_bc:]

    def carry_dims(batched):
        return [0 if b else None for b in batched]

    def pred_batched(batched):
        return _batch_graph(cond, cc_dims + carry_dims(batched), size)[1][0]

    def step(batched):
        if pred_batched(batched):
            return [True] * len(batched)    # masked updates batch every carry
        return _batch_graph(body, bc_dims + carry_dims(batched), size)[1]
    batched = _carry_fixed_point([d is not None for d in val_dims], step)
    val = _carry_in(val, val_dims, batched, size)
    k_dims = carry_dims(batched)
    b_cond = _batch_graph(cond, cc_dims + k_dims, size)[0]
    b_body = _batch_graph(body, bc_dims + k_dims, size, batched)[0]
    if not pred_batched(batched):
        outs = while_p.bind(*cc, *bc, *val, cond=b_cond, body=b_body, n_cc=n_cc,
                            n_bc=n_bc)
        return outs, tuple(k_dims)
    any_cond, masked_body = _masked_loop(b_cond, b_body, n_cc, n_bc)
    outs = while_p.bind(*cc, *cc, *bc, *val, cond=any_cond, body=masked_body,
                        n_cc=n_cc, n_bc=n_cc + n_bc)
    return outs, tuple(k_dims)


while_p.def_jvp_joint(_while_jvp)
while_p.def_vjp_joint(_while_vjp)
while_p.batch = _while_batch

# ---------------------------------------------------------------------------
# scan: scan_p(*consts, *init, *xs, body=, n_consts=, n_carry=, length=, reverse=)
# body: (*consts, *carry, *x) -> (*carry, *y)
# ---------------------------------------------------------------------------


def _scan_impl(*args, body, n_consts, n_carry, length, reverse):
    consts = args[:n_consts]
    carry = tuple(args[n_consts:n_consts + n_carry])
    xs = args[n_consts + n_carry:]
    y_avals = body.out_avals[n_carry:]
    xp = array_module(*args)
    ys = [xp.empty((length,) + a.shape, a.dtype) for a in y_avals]
    run = _runner(body, args)
    for i in (range(length - 1, -1, -1) if reverse else range(length)):
        out = run(*consts, *carry, *[x[i] for x in xs])
        carry = tuple(out[:n_carry])
        for buf, y in zip(ys, out[n_carry:]):
            buf[i] = y
    return carry + tuple(ys)


def _scan_abstract(*avals, body, n_consts, n_carry, length, reverse):
    outs = body.out_avals
    return tuple(a.strip_weak() for a in outs[:n_carry]) + tuple(
        ShapedArray((length,) + a.shape, a.dtype) for a in outs[n_carry:])


scan_p = Primitive("scan", _scan_impl, _scan_abstract, multiple_results=True,
                   family=FAMILY)


def _scan_jvp(tangents, ans, *args, body, n_consts, n_carry, length, reverse):
    n_x = len(args) - n_consts - n_carry
    consts, carry, xs = (args[:n_consts], args[n_consts:n_consts + n_carry],
                         args[n_consts + n_carry:])
    tans = [_real_tangent(t, x) for t, x in zip(tangents, args)]
    t_consts, t_carry, t_xs = (tans[:n_consts], tans[n_consts:n_consts + n_carry],
                               tans[n_consts + n_carry:])
    jvp_all = _jvp_graph(body, 0)
    n_y = len(body.outvars) - n_carry

    def body_fun(*v):
        c, tc = v[:n_consts], v[n_consts:2 * n_consts]
        k, tk = v[2 * n_consts:2 * n_consts + n_carry], \
            v[2 * n_consts + n_carry:2 * n_consts + 2 * n_carry]
        x, tx = v[2 * n_consts + 2 * n_carry:2 * n_consts + 2 * n_carry + n_x], \
            v[2 * n_consts + 2 * n_carry + n_x:]
        out = _eval(jvp_all, list(c) + list(k) + list(x) + list(tc) + list(tk) + list(tx))
        o, to = out[:n_carry + n_y], out[n_carry + n_y:]
        return list(o[:n_carry]) + list(to[:n_carry]) + list(o[n_carry:]) + \
            list(to[n_carry:])
    x_avals = [a for a in body.in_avals[n_consts + n_carry:]]
    avals = [get_aval(v).strip_weak() for v in (*consts, *t_consts, *carry, *t_carry)] \
        + [a.strip_weak() for a in x_avals] * 2
    new_body = _stage(body_fun, avals)
    out = scan_p.bind(*consts, *t_consts, *carry, *t_carry, *xs, *t_xs, body=new_body,
                      n_consts=2 * n_consts, n_carry=2 * n_carry, length=length,
                      reverse=reverse)
    return tuple(out[n_carry:2 * n_carry]) + tuple(out[2 * n_carry + n_y:])


# equations that only view their operand: a backward step recomputes them
# rather than store a copy per step (the transpose of a carry, say)
_VIEWS = frozenset(("reshape", "transpose", "broadcast_to"))


class _StepSplit(NamedTuple):
    """A step's VJP graph, cut where the cotangents come in."""

    forward: Graph      # (*consts, *carry, *x) -> residuals
    backward: Graph     # (*consts, *carry[kept], *x, *residuals, *out cts) -> cts
    kept: tuple         # the carries a backward step takes (stored per step)


def _split_step_vjp(step_vjp, n_consts, n_carry, n_in):
    """Cut ``step_vjp`` ``(*ins, *out_cts) -> cts`` in two: the work that does
    not read a cotangent, which the forward scan runs, storing per step the
    values the rest reads (the residuals), and the work that does, which the
    backward scan runs. So a backward step does not redo its forward work.

    Work that reads only the constants is in both: it is the same every step,
    and storing it per step would only cost memory. Views of a step's inputs
    are recomputed, not stored. A backward step takes the carries it reads,
    and the non-float ones (their cotangent is a zero of their shape).
    """
    ins, cts = step_vjp.invars[:n_in], step_vjp.invars[n_in:]
    carries = ins[n_consts:n_consts + n_carry]
    on_ct, varying = set(cts), set(ins[n_consts:])
    forward, backward, constant = [], [], []
    for k, eqn in enumerate(step_vjp.eqns):
        reads = [v for v in eqn.invars if type(v) is Var]
        if any(v in on_ct for v in reads):
            on_ct.update(eqn.outvars)
            backward.append(k)
        elif effectful(eqn.prim) or any(v in varying for v in reads):
            varying.update(eqn.outvars)
            forward.append(k)
        else:
            constant.append(k)
    eqns = step_vjp.eqns

    def read_by(indices):
        read = {v for k in indices for v in eqns[k].invars if type(v) is Var}
        return read | {v for v in step_vjp.outvars if type(v) is Var}
    # a view the backward work reads is recomputed there (the forward work may
    # read it too, and keeps its own); last first, so a chain of views goes whole
    views = []
    for k in reversed(forward):
        eqn = eqns[k]
        if eqn.prim.name in _VIEWS and any(v in read_by(backward + views)
                                           for v in eqn.outvars):
            views.append(k)
    backward = sorted(backward + views + constant)
    read = read_by(backward)
    residuals = [v for k in forward if k not in views for v in eqns[k].outvars if v in read]
    kept = tuple(i for i, v in enumerate(carries) if v in read or not _is_float(v.aval))
    fwd = eliminate_dead_code(Graph(ins, [eqns[k] for k in sorted(forward + constant)],
                                    residuals))
    bwd_ins = ins[:n_consts] + [carries[i] for i in kept] + ins[n_consts + n_carry:]
    bwd = eliminate_dead_code(Graph(bwd_ins + residuals + cts, [eqns[k] for k in backward],
                                    step_vjp.outvars))
    fwd.sources = bwd.sources = step_vjp.sources     # debug_nans' lines, by output var
    return _StepSplit(fwd, bwd, kept)


def _merge_repeats(graph):
    """``graph`` with each repeated computation done once. A graph staged under
    debug_nans keeps its equations (and their source lines) as they are."""
    if graph.sources is not None:
        return graph
    return eliminate_dead_code(eliminate_common_subexpressions(graph))


def _scan_vjp(ct, ans, needed, *args, body, n_consts, n_carry, length, reverse):
    consts, carry, xs = (args[:n_consts], args[n_consts:n_consts + n_carry],
                         args[n_consts + n_carry:])
    n_x = len(xs)
    n_y = len(body.outvars) - n_carry
    in_avals, out_avals = body.in_avals, body.out_avals
    # cotangents for the float carries (they flow from step to step) and for
    # the float consts and xs that are asked for
    c_pos = [i for i in range(n_consts) if needed[i] and _is_float(in_avals[i])]
    k_pos = [i for i in range(n_carry) if _is_float(in_avals[n_consts + i])]
    x_pos = [i for i in range(n_x) if needed[n_consts + n_carry + i]
             and _is_float(in_avals[n_consts + n_carry + i])]
    positions = c_pos + [n_consts + i for i in k_pos] + \
        [n_consts + n_carry + i for i in x_pos]
    split = _split_step_vjp(_vjp_graph(body, positions), n_consts, n_carry, len(args))

    # 1. forward again, storing per step the kept carries and the residuals
    def forward_step(*v):
        v = list(v)
        return (list(_eval(body, v)) + [v[n_consts + i] for i in split.kept]
                + list(_eval(split.forward, v)))
    # the residuals' work repeats the body's: computed once
    fwd_body = _merge_repeats(_stage(forward_step, [a.strip_weak() for a in in_avals]))
    fwd = scan_p.bind(*consts, *carry, *xs, body=fwd_body, n_consts=n_consts,
                      n_carry=n_carry, length=length, reverse=reverse)
    stored = fwd[n_carry + n_y:]
    n_kept = len(split.kept)
    # 2. a scan the other way: carry (carry cts, const-ct sums), per step the
    #    stored values, the x and the y ct; emits the x cts

    def bwd(*v):
        c = v[:n_consts]
        ct_k = v[n_consts:n_consts + len(k_pos)]
        acc = v[n_consts + len(k_pos):n_consts + len(k_pos) + len(c_pos)]
        rest = v[n_consts + len(k_pos) + len(c_pos):]
        saved, x = rest[:len(stored)], rest[len(stored):len(stored) + n_x]
        ct_y = rest[len(stored) + n_x:]
        kept = dict(zip(split.kept, saved[:n_kept]))
        ct_carry = [None] * n_carry
        for i, c_ in zip(k_pos, ct_k):
            ct_carry[i] = c_
        for i in range(n_carry):
            if ct_carry[i] is None:          # a non-float carry: always kept
                ct_carry[i] = _zeros_like(kept[i])
        cts = _eval(split.backward, list(c) + list(saved[:n_kept]) + list(x)
                    + list(saved[n_kept:]) + ct_carry + list(ct_y))
        ct_c, ct_kk, ct_x = (cts[:len(c_pos)], cts[len(c_pos):len(c_pos) + len(k_pos)],
                             cts[len(c_pos) + len(k_pos):])
        return list(ct_kk) + [add(a, b) for a, b in zip(acc, ct_c)] + list(ct_x)
    bwd_avals = ([in_avals[i].strip_weak() for i in range(n_consts)]
                 + [out_avals[i].strip_weak() for i in k_pos]
                 + [in_avals[i].strip_weak() for i in c_pos]
                 + [in_avals[n_consts + i].strip_weak() for i in split.kept]
                 + [v.aval.strip_weak() for v in split.forward.outvars]
                 + [a.strip_weak() for a in in_avals[n_consts + n_carry:]]
                 + [a.strip_weak() for a in out_avals[n_carry:]])
    bwd_graph = _merge_repeats(_stage(bwd, bwd_avals))
    ct_k0 = [_real_tangent(ct[i], ans[i]) for i in k_pos]
    acc0 = [_zeros_like(consts[i]) for i in c_pos]
    ct_ys = [_real_tangent(c, a) for c, a in zip(ct[n_carry:], ans[n_carry:])]
    res = scan_p.bind(*consts, *ct_k0, *acc0, *stored, *xs, *ct_ys, body=bwd_graph,
                      n_consts=n_consts, n_carry=len(k_pos) + len(c_pos),
                      length=length, reverse=not reverse)
    ct_init, ct_consts, ct_xs = (res[:len(k_pos)], res[len(k_pos):len(k_pos) + len(c_pos)],
                                 res[len(k_pos) + len(c_pos):])
    out = [None] * len(args)
    for i, c in zip(c_pos, ct_consts):
        out[i] = c
    for i, c in zip(k_pos, ct_init):
        out[n_consts + i] = c
    for i, c in zip(x_pos, ct_xs):
        out[n_consts + n_carry + i] = c
    return tuple(c if need else None for c, need in zip(out, needed))


def _scan_batch(args, dims, *, body, n_consts, n_carry, length, reverse):
    size = axis_size(args, dims)
    consts, init, xs = (args[:n_consts], args[n_consts:n_consts + n_carry],
                        args[n_consts + n_carry:])
    c_dims = list(dims[:n_consts])
    init_dims = dims[n_consts:n_consts + n_carry]
    # the scan walks axis 0 of xs, so their batch axis goes right after it,
    # where each step's slice has it first
    xs = [x if d is None else move_axis(x, d, 1)
          for x, d in zip(xs, dims[n_consts + n_carry:])]
    x_dims = [None if d is None else 0 for d in dims[n_consts + n_carry:]]

    def body_dims(batched):
        return c_dims + [0 if b else None for b in batched] + x_dims

    def step(batched):
        return _batch_graph(body, body_dims(batched), size)[1][:n_carry]
    batched = _carry_fixed_point([d is not None for d in init_dims], step)
    n_y = len(body.outvars) - n_carry
    b_body, flags = _batch_graph(body, body_dims(batched), size,
                                 list(batched) + [False] * n_y)
    init = _carry_in(init, init_dims, batched, size)
    outs = scan_p.bind(*consts, *init, *xs, body=b_body, n_consts=n_consts,
                       n_carry=n_carry, length=length, reverse=reverse)
    out_dims = [0 if b else None for b in flags[:n_carry]] + \
        [1 if b else None for b in flags[n_carry:]]
    return outs, tuple(out_dims)


scan_p.def_jvp_joint(_scan_jvp)
scan_p.def_vjp_joint(_scan_vjp)
scan_p.batch = _scan_batch

del np
