"""Loops and branches inside a compiled program: scan, while_loop and cond in place.

A `fgrad.compiler.program` lowers a ``scan``, ``while_loop`` (``fori_loop``
stages as one of them) or ``cond`` (``switch``) equation into the program's
own function: its body graphs become steps like the program's (elementwise
loops, reductions, copies, BLAS calls; a body equation without a lowering is
a callout, run from inside the loop), and no Python runs between iterations.

- **Carries** live in the loop's result buffers (the outer plan's): the
  initial values are copied in before the first iteration, and each
  iteration copies the body's results back over them once the body has read
  them all.
- **Body values** live in a *scratch* region of the enclosing arena, one
  value of the enclosing plan (`Scratch`), planned by the same buffer plan
  (`fgrad.compiler.buffer_plan`) once for every iteration: values do not
  outlive an iteration. A while loop's predicate and body share one plan
  (they run one after the other); a cond's branches share the region.
- **Slices**: a scan's body reads step ``i`` of each ``xs`` operand in
  place, and writes its ``y`` results into row ``i`` of the stacked outputs,
  where only steps that take pointers touch them; a slice or ``y`` that a
  callout, a view or an inner loop reads is copied into the scratch region
  before the body runs, or out of it after, so that those see the arrays
  the plan placed.

This module knows the loops' structure; the program (`lower` and the
emitter passed in) knows how to lower a graph and write a step.
"""
import collections

import numpy as np

from fgrad.compiler.kernel_ir import contiguous_strides, convert, counted, load

# the control-flow primitives (defined above the compiler, in fgrad.transforms),
# known by name and family (the compiler sits below them)
CONTROL_FAMILY = "fgrad/transforms/control_flow.py"
LOOP_PRIMITIVES = ("scan", "while_loop", "cond")
# what the cost estimate assumes a while loop iterates, its count unknown
WHILE_TRIPS = 10


class Scratch:
    """The arena bytes (``nbytes``) a loop's body values take while it runs."""

    __slots__ = ("nbytes",)

    def __init__(self, nbytes):
        self.nbytes = nbytes


Part = collections.namedtuple("Part", "graph steps results")
Part.__doc__ = """A graph lowered to run inside a loop: its ``steps``, and the
values holding its outputs (``results``, each written by a step into the
scratch region, in the order of ``graph.outvars``)."""


def loop_kind(eqn):
    """``"scan"``, ``"while_loop"`` or ``"cond"`` where ``eqn`` is one that a
    program lowers in place, else None: every operand and result an array of
    numbers, each carry's initial value of the carry's shape and dtype, and
    a cond's index an integer (or bool) scalar.

    >>> import fgrad
    >>> from fgrad import lax
    >>> g = fgrad.make_graph(lambda x: lax.fori_loop(0, 3, lambda i, y: y * 2.0, x))(1.0)
    >>> loop_kind(g.eqns[0])                        # static bounds: a scan
    'scan'
    """
    name = eqn.prim.name
    if name not in LOOP_PRIMITIVES or eqn.prim.family != CONTROL_FAMILY:
        return None
    if not all(np.dtype(v.aval.dtype).kind in "biufc" for v in eqn.invars + eqn.outvars):
        return None
    p = eqn.params
    if name == "cond":
        index = eqn.invars[0].aval
        ok = index.shape == () and np.dtype(index.dtype).kind in "biu" and all(
            _same(g.outvars, eqn.outvars) for g in p["branches"])
        return name if ok else None
    n_in = p["n_consts"] if name == "scan" else p["n_cc"] + p["n_bc"]
    n_carry = p["n_carry"] if name == "scan" else len(eqn.outvars)
    carry = eqn.outvars[:n_carry]
    body = p["body"]
    ok = _same(eqn.invars[n_in:n_in + n_carry], carry) \
        and _same(body.outvars[:n_carry], carry)
    if name == "while_loop":
        pred = p["cond"].outvars[0].aval
        ok = ok and pred.shape == () and np.dtype(pred.dtype).kind in "biuf"
    return name if ok else None


def loop_graphs(eqn):
    """The graphs a control-flow equation runs (none for another one): a
    while loop's predicate and body, a cond's branches."""
    if eqn.prim.name not in LOOP_PRIMITIVES or eqn.prim.family != CONTROL_FAMILY:
        return ()
    p = eqn.params
    return {"scan": lambda: (p["body"],), "while_loop": lambda: (p["cond"], p["body"]),
            "cond": lambda: tuple(p["branches"])}[eqn.prim.name]()


def trips(eqn):
    """How many times a loop's body runs (a while loop's: `WHILE_TRIPS`, a
    guess; a cond's: once)."""
    name = eqn.prim.name
    return eqn.params["length"] if name == "scan" else WHILE_TRIPS \
        if name == "while_loop" else 1


def _same(values, like):
    return len(values) == len(like) and all(
        tuple(v.aval.shape) == tuple(w.aval.shape) and np.dtype(v.aval.dtype) ==
        np.dtype(w.aval.dtype) for v, w in zip(values, like))


class Loop:
    """A lowered ``scan``, ``while_loop`` or ``cond`` equation (`loop_step`).

    ``parts`` are its lowered graphs (`Part`: a scan's body; a while loop's
    predicate and body; a cond's branches), ``scratch`` the region their
    values live in, ``offsets`` their values' offsets in it, ``aliases``
    the ``(inner value, outer value)`` pairs of body inputs that live where an
    outer value does (constants, and carries in the loop's results), and
    ``slices`` a scan's ``xs`` inputs: ``(outer value, inner value)``;
    ``sources`` maps an outer ``xs`` value that is a transpose never made to
    ``(the transpose's source, its axes)``: the loop reads the source;
    ``targets`` maps a ``ys`` value never made to ``(its transpose, the
    axes)``: the loop writes the transpose; the ``ys`` in ``dropped``
    (read by nothing) are not written at all."""

    def __init__(self, kind, eqn, label, parts, offsets, scratch, aliases, slices=(),
                 sources=None, targets=None, dropped=()):
        self.kind, self.eqn, self.label, self.parts = kind, eqn, label, parts
        self.offsets, self.scratch = offsets, scratch
        self.aliases, self.slices = aliases, slices
        self.sources, self.targets, self.dropped = sources or {}, targets or {}, dropped

    def reads(self):
        return [self.sources[v][0] if v in self.sources else v for v in self.eqn.invars]

    def writes(self):
        return [self.targets[v][0] if v in self.targets else v
                for v in self.eqn.outvars if v not in self.dropped] + [self.scratch]

    def trips(self):
        return trips(self.eqn)

    def inner_steps(self):
        return [s for part in self.parts for s in part.steps]


def loop_step(eqn, label, lower, transposed=None, stacked=None, unread=()):
    """The `Loop` of ``eqn`` (whose `loop_kind` is not None), its graphs
    lowered by ``lower(parts, fresh) -> ([Part], plan)``: ``parts`` a list of
    ``(graph, label)`` run in order, ``fresh`` how many of the first's last
    inputs are written before it runs (a scan's slices); the plan's offsets
    are into the scratch region. ``transposed`` maps values never made to
    ``(source, axes)`` of their transpose: a scan's ``xs`` among them is
    sliced from the source; ``stacked`` maps values never made to
    ``(transpose, axes)``: a scan's ``ys`` among them go into the transpose;
    a scan's ``ys`` in ``unread`` are not kept.
    """
    kind, p = loop_kind(eqn), eqn.params
    if kind == "scan":
        n_consts, n_carry = p["n_consts"], p["n_carry"]
        body = p["body"]
        (part,), plan = lower([(body, f"{label}.")], len(body.invars) - n_consts - n_carry)
        inner = part.graph.invars
        aliases = list(zip(inner[:n_consts], eqn.invars[:n_consts])) + list(
            zip(inner[n_consts:n_consts + n_carry], eqn.outvars[:n_carry]))
        slices = list(zip(eqn.invars[n_consts + n_carry:], inner[n_consts + n_carry:]))
        transposed, stacked = transposed or {}, stacked or {}
        sources = {v: transposed[v] for v, _ in slices if v in transposed}
        targets = {y: stacked[y] for y in eqn.outvars[n_carry:] if y in stacked}
        dropped = {y for y in eqn.outvars[n_carry:] if y in unread}
        return Loop(kind, eqn, label, [part], plan.offsets, Scratch(plan.arena_bytes),
                    aliases, slices, sources, targets, dropped)
    if kind == "while_loop":
        n_cc, n_bc = p["n_cc"], p["n_bc"]
        carry = eqn.outvars
        parts, plan = lower([(p["cond"], f"{label}.cond."), (p["body"], f"{label}.")], 0)
        cond, body = (part.graph.invars for part in parts)
        aliases = list(zip(cond[:n_cc], eqn.invars[:n_cc])) + list(zip(cond[n_cc:], carry)) \
            + list(zip(body[:n_bc], eqn.invars[n_cc:n_cc + n_bc])) \
            + list(zip(body[n_bc:], carry))
        return Loop(kind, eqn, label, parts, plan.offsets, Scratch(plan.arena_bytes),
                    aliases)
    parts, offsets, size, aliases = [], {}, 0, []
    for j, branch in enumerate(p["branches"]):
        (part,), plan = lower([(branch, f"{label}.branch{j}.")], 0)
        parts.append(part)
        offsets.update(plan.offsets)
        size = max(size, plan.arena_bytes)
        aliases += list(zip(part.graph.invars, eqn.invars[1:]))
    return Loop(kind, eqn, label, parts, offsets, Scratch(size), aliases)


# ---------------------------------------------------------------------------
# IR
# ---------------------------------------------------------------------------


def loop_ir(e, step):
    """Write ``step`` (a `Loop`) with emitter ``e``: ``e.ir``, ``e.b`` (the
    builder), ``e.pointer(value, dtype=None)`` (a typed pointer to a value's
    memory), ``e.copy(src, dst, strides, start)`` (a strided copy) and
    ``e.emit(steps)`` (write steps in order)."""
    {"scan": _scan_ir, "while_loop": _while_ir, "cond": _cond_ir}[step.kind](e, step)


def _nbytes(v):
    return int(np.prod(v.aval.shape, dtype=np.int64)) * np.dtype(v.aval.dtype).itemsize


def memcpy(e, dst, src, nbytes, dst_at=None, src_at=None):
    """Copy ``nbytes`` from ``src`` to ``dst`` (values), each from byte
    ``*_at`` (an i64, or None: 0) of its memory."""
    ir, b = e.ir, e.b
    if not nbytes:
        return
    i8p, i64 = ir.IntType(8).as_pointer(), ir.IntType(64)
    intrinsic = b.module.declare_intrinsic("llvm.memcpy", [i8p, i8p, i64])
    to, src_ptr = e.pointer(dst, np.uint8), e.pointer(src, np.uint8)
    to = to if dst_at is None else b.gep(to, [dst_at])
    src_ptr = src_ptr if src_at is None else b.gep(src_ptr, [src_at])
    b.call(intrinsic, [to, src_ptr, ir.Constant(i64, nbytes), ir.Constant(ir.IntType(1), 0)])


def _copy_all(e, sources, targets):
    for source, target in zip(sources, targets):
        memcpy(e, target, source, _nbytes(target))


def _scan_ir(e, step):
    """A scan: each iteration's slice of an ``xs`` operand is read where it
    is, and each ``y`` written in its row of the stacked output, where the
    body's steps reach them by pointer alone (``e.by_pointer``); else
    copied, into the scratch region before the body and out of it after."""
    ir, b = e.ir, e.b
    i64 = ir.IntType(64)
    p = step.eqn.params
    n_consts, n_carry, length = p["n_consts"], p["n_carry"], p["length"]
    carries, ys = step.eqn.outvars[:n_carry], step.eqn.outvars[n_carry:]
    _copy_all(e, step.eqn.invars[n_consts:n_consts + n_carry], carries)
    (part,) = step.parts
    in_place = e.by_pointer(part.steps)

    def iteration(i):
        at = b.sub(ir.Constant(i64, length - 1), i) if p["reverse"] else i
        placed = []
        for outer, inner in step.slices:
            size = _nbytes(inner)
            if outer in step.sources:       # step `at` of a transpose of the source
                source, axes = step.sources[outer]
                strides = contiguous_strides(source.aval.shape)
                e.copy(source, inner, [strides[a] for a in axes[1:]],
                       b.mul(at, ir.Constant(i64, strides[axes[0]])))
            elif inner in in_place:
                e.rows[inner] = (outer, b.mul(at, ir.Constant(i64, size)))
                placed.append(inner)
            else:
                memcpy(e, inner, outer, size, src_at=b.mul(at, ir.Constant(i64, size)))
        written = []
        for y, result in zip(ys, part.results[n_carry:]):
            if y not in step.dropped and y not in step.targets and result in in_place:
                e.rows[result] = (y, b.mul(at, ir.Constant(i64, _nbytes(result))))
                placed.append(result)
                written.append(result)
        e.emit(part.steps)
        for y, result in zip(ys, part.results[n_carry:]):
            size = _nbytes(result)
            if y in step.dropped or result in written:
                continue
            if y in step.targets:           # row `at` of the ys, into their transpose
                target, axes = step.targets[y]
                strides = contiguous_strides(target.aval.shape)
                e.copy(result, target, contiguous_strides(result.aval.shape),
                       out_strides=[strides[axes.index(a)] for a in range(1, len(axes))],
                       out_start=b.mul(at, ir.Constant(i64, strides[axes.index(0)])))
            else:
                memcpy(e, y, result, size, dst_at=b.mul(at, ir.Constant(i64, size)))
        _copy_all(e, part.results[:n_carry], carries)
        for v in placed:
            del e.rows[v]
    counted(ir, b, ir.Constant(i64, length), iteration, f"scan{step.label}")


def _truth(e, v):
    """The i1 of scalar ``v`` being true (nonzero)."""
    dtype = np.dtype(v.aval.dtype)
    value = load(e.ir, e.b, e.pointer(v), e.ir.Constant(e.ir.IntType(64), 0), dtype, "pred")
    return value if dtype.kind == "b" else convert(e.ir, e.b, value, dtype, np.dtype(bool))


def _while_ir(e, step):
    b = e.b
    carries = step.eqn.outvars
    n_in = step.eqn.params["n_cc"] + step.eqn.params["n_bc"]
    _copy_all(e, step.eqn.invars[n_in:], carries)
    cond, body = step.parts
    head = b.append_basic_block(f"while{step.label}.test")
    inside = b.append_basic_block(f"while{step.label}.body")
    after = b.append_basic_block(f"while{step.label}.after")
    b.branch(head)
    b.position_at_end(head)
    e.emit(cond.steps)
    b.cbranch(_truth(e, cond.results[0]), inside, after)
    b.position_at_end(inside)
    e.emit(body.steps)
    _copy_all(e, body.results, carries)
    b.branch(head)
    b.position_at_end(after)


def _cond_ir(e, step):
    ir, b = e.ir, e.b
    i64 = ir.IntType(64)
    index = step.eqn.invars[0]
    dtype = np.dtype(index.aval.dtype)
    value = load(ir, b, e.pointer(index), ir.Constant(i64, 0), dtype, "index")
    if dtype.kind == "b":
        value = b.zext(value, i64)
    elif dtype.itemsize < 8:
        value = b.zext(value, i64) if dtype.kind == "u" else b.sext(value, i64)
    elif dtype.kind == "u":        # beyond int64's range: the last branch (clamped)
        value = b.select(b.icmp_signed("<", value, ir.Constant(i64, 0)),
                         ir.Constant(i64, len(step.parts) - 1), value)
    after = b.append_basic_block(f"cond{step.label}.after")
    blocks = [b.append_basic_block(f"cond{step.label}.branch{j}")
              for j in range(len(step.parts))]
    # an index out of range takes the nearest branch (cond's impl clamps it)
    last = len(step.parts) - 1
    below = b.icmp_signed("<", value, ir.Constant(i64, 0))
    value = b.select(below, ir.Constant(i64, 0), value)
    switch = b.switch(value, blocks[-1])
    for j, block in enumerate(blocks[:last]):
        switch.add_case(ir.Constant(i64, j), block)
    for block, part in zip(blocks, step.parts):
        b.position_at_end(block)
        e.emit(part.steps)
        _copy_all(e, part.results, step.eqn.outvars)
        b.branch(after)
    b.position_at_end(after)
