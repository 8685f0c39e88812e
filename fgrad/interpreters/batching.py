"""Batching (vmap): run a per-example function once on a whole batch.

A `BatchTracer` carries a value holding every example and the position of its
batch axis, or `not_mapped` (None) for a value every example shares: a
constant made with ``device=x.device``, or what such values alone compute. That
one is still a tracer, so that Array API code sees one namespace, and it has a
value, which code may read as outside vmap. Each primitive applied to batch
tracers calls the ``batch`` column of its row, ``prim.batch(args, dims,
**params) -> (out, out_dim)``, which binds primitives on the whole batch at
once, so no Python loop over examples runs.

A primitive without a batching rule (a user's `fgrad.primitive`) falls back to
a loop over examples, with a one-time warning naming it.
"""
import functools
import warnings

import numpy as np

from fgrad.core.errors import BatchedConversionError, LoopBatchingWarning
from fgrad.core.trace import EagerTracer, ShapedArray, Trace, Tracer, get_aval, new_trace
from fgrad.interpreters import callbacks
from fgrad.interpreters.custom_rules import top_trace
from fgrad.interpreters.staging import eval_graph, stage
from fgrad.primitives.batching import axis_size, batch_to_front, move_axis, not_mapped
from fgrad.primitives.indexing import getitem_p
from fgrad.primitives.reductions import sum_
from fgrad.primitives.shape import stack

__all__ = ["BatchTrace", "BatchTracer", "batch_graph", "not_mapped"]


def _conversion_message(what, aval):
    return (f"{what} was applied to a value batched by vmap ({aval} per example)"
            f"{Tracer.where_called()}: "
            "it holds one value per example, so Python cannot branch on it or turn "
            "it into one number. Select per example with fgrad.numpy.where(cond, "
            "a, b), or use fgrad.lax.cond for control flow; if the value does not "
            "depend on the batched inputs, compute it outside vmap.")


class BatchTracer(Tracer):
    """A batched value: ``val`` holds every example along axis ``batch_dim``
    (None: ``val`` is the one value every example shares)."""

    __slots__ = ("val", "batch_dim")

    def __init__(self, trace, val, batch_dim):
        self.owner = trace
        self.val = val
        self.batch_dim = batch_dim

    @property
    def aval(self):
        if self.batch_dim is None:
            return get_aval(self.val).strip_weak()
        return ShapedArray(self.shape, self.val.dtype)

    # read on every rule application: computed without building an aval
    @property
    def shape(self):
        shape, d = self.val.shape, self.batch_dim   # val is an array, never a scalar
        return shape if d is None else shape[:d] + shape[d + 1:]

    @property
    def dtype(self):
        return self.val.dtype

    @property
    def ndim(self):
        return len(self.val.shape) - (self.batch_dim is not None)

    def known(self, what):
        """The value every example shares, where there is one; else the
        refusal, ``what`` naming the conversion."""
        if self.batch_dim is None:
            val = self.val
            return val.value_for(what) if isinstance(val, Tracer) else val
        raise BatchedConversionError(_conversion_message(what, self.aval))

    def concrete(self):
        return self.known("a conversion to a concrete value")

    def constant_value(self):
        if self.batch_dim is not None:
            return None
        val = self.val
        return val.constant_value() if isinstance(val, Tracer) else val

    def __bool__(self):
        return bool(self.known("bool() (or an `if`, `and`, `or`, `while`)"))

    def __float__(self):
        return float(self.known("float()"))

    def __int__(self):
        return int(self.known("int()"))

    def __complex__(self):
        return complex(self.known("complex()"))

    def __index__(self):
        return int(self.known("use as a Python index"))

    def carried(self):
        return self.val

    def value_for(self, how):
        return self.known(how)

    def __repr__(self):
        return f"BatchTracer({self.aval}, batch_dim={self.batch_dim}, val={self.val!r})"


class BatchTrace(Trace):
    """Applies the batching rule of every primitive it receives."""

    __slots__ = ("axis_size",)

    def __init__(self, level, size):
        super().__init__(level)
        self.axis_size = size

    def unwrap(self, args):
        """``(values, batch dims)`` of ``args``; unbatched values have dim None."""
        vals, dims = [], []
        for a in args:
            if isinstance(a, BatchTracer) and a.owner is self:
                vals.append(a.val)
                dims.append(a.batch_dim)
            else:
                vals.append(a)
                dims.append(not_mapped)
        return vals, dims

    def lift(self, value):
        # every example holds the same value
        if not hasattr(value, "shape"):         # a Python number: a NumPy
            value = np.asarray(value)[()]       # scalar, which any backend takes
        return BatchTracer(self, value, not_mapped)

    def wrap(self, val, dim):
        """A batch tracer for ``val`` batched along ``dim`` (shared if None)."""
        if dim is None:
            return self.lift(val)
        return BatchTracer(self, val, dim)

    def process(self, prim, args, params):
        vals, dims = self.unwrap(args)
        if dims.count(None) == len(dims):
            # shared values only: one evaluation serves every example
            out = prim.bind(*vals, **params)
            if prim.multiple_results:
                return tuple(self.lift(o) for o in out)
            return self.lift(out)
        rule = prim.batch
        if rule is None:
            rule = loop_rule(prim)
        out, out_dim = rule(vals, dims, **params)
        if prim.multiple_results:
            return tuple(self.wrap(o, d) for o, d in zip(out, out_dim))
        return self.wrap(out, out_dim)

    # -- functions with user-supplied derivatives --------------------------------
    #
    # The user's rules are per-example code. With no differentiating trace below
    # this one, only the primal matters: fwd (or the JVP rule's primal) runs on
    # the batch tracers. With one below, the rules are handed to it batched
    # (wrapped in vmap), so it still sees the user's derivative.

    def process_custom_vjp(self, fun, fwd, bwd, args):
        vals, dims = self.unwrap(args)
        lower = top_trace(vals)
        if lower is None:               # no derivative below: only the primal
            return fun.body(*args)
        b_fun, b_fwd, b_bwd = _batched_custom_vjp(fun, fwd, bwd, dims, self.axis_size)
        outs = lower.process_custom_vjp(b_fun, b_fwd, b_bwd, vals)
        return tuple(BatchTracer(self, o, 0) for o in outs)

    def process_custom_jvp(self, fun, rule, args):
        vals, dims = self.unwrap(args)
        lower = top_trace(vals)
        if lower is None:
            return fun.body(*args)
        b_fun, b_rule = _batched_custom_jvp(fun, rule, dims, self.axis_size)
        outs = lower.process_custom_jvp(b_fun, b_rule, vals)
        return tuple(BatchTracer(self, o, 0) for o in outs)


# ---------------------------------------------------------------------------
# Staged graphs under vmap
# ---------------------------------------------------------------------------


def innermost_value(x):
    """``x`` with every eager layer (reverse and forward mode's primal) and
    every batching layer (vmap's whole batched value) taken off: an array, or
    the first tracer that is neither (staged under jit).
    """
    while isinstance(x, Tracer):
        if isinstance(x, EagerTracer):
            x = x.primal
        elif isinstance(x, BatchTracer):
            x = x.val
        else:
            break
    return x


def batched_aval(aval, dim, size):
    """The aval of a value holding ``size`` examples of ``aval`` along ``dim``."""
    if dim is None:
        return aval
    return ShapedArray(aval.shape[:dim] + (size,) + aval.shape[dim:], aval.dtype)


# A call or control-flow primitive is batched by batching the graph in its
# parameters. The batched graph depends only on the graph, where the batch axes
# sit and the batch size, so it is staged once per such key; keeping it (and its
# compiled code, which lives on the graph) is what makes ``vmap(jit(f))`` one
# compiled call after the first.
@functools.lru_cache(maxsize=512)
def batch_graph(graph, dims, size, force=None):
    """``graph`` over a batch: ``(batched graph, out_batched)``.

    ``dims`` gives, per input, the position of its batch axis (None: shared by
    every example). Each output of the batched graph that differs between
    examples has its batch axis first and is marked True in ``out_batched``;
    the others are per-example values, unless ``force`` (a tuple of bools, one
    per output) asks for them to be broadcast to the batch as well.
    """
    box = []

    def batched(*xs):
        with new_trace(BatchTrace, size) as trace:
            ins = [x if d is None else BatchTracer(trace, x, d)
                   for x, d in zip(xs, dims)]
            outs = eval_graph(graph, ins)
        vals, flags = [], []
        for k, o in enumerate(outs):
            if isinstance(o, BatchTracer) and o.owner is trace:
                o, d = o.val, o.batch_dim
            else:
                d = None
            if d is not None:
                vals.append(move_axis(o, d, 0))
                flags.append(True)
            elif force is not None and force[k]:
                vals.append(batch_to_front(o, None, size))
                flags.append(True)
            else:
                vals.append(o)
                flags.append(False)
        box.append(tuple(flags))
        return vals
    avals = [batched_aval(a, d, size) for a, d in zip(graph.in_avals, dims)]
    staged, captured = stage(batched, avals)
    if captured:
        raise AssertionError("batch_graph stages closed graphs only")
    return staged, box[0]


def _named(f, name, body=None):
    f.__name__ = name
    f.body = body or f
    return f


def _batched_custom_vjp(fun, fwd, bwd, dims, size):
    """fun, fwd and bwd over whole batches (batch axis first in every output)."""
    vmap = callbacks.transformation("vmap")
    in_axes = tuple(dims)

    def b_fwd(*xs):
        return vmap(fwd, in_axes=in_axes, axis_size=size)(*xs)

    def b_bwd(residuals, cts, needed, primals):
        def one(res, ct, *p):
            return tuple(bwd(res, ct, needed, p))
        per_example = vmap(one, in_axes=(0, 0) + in_axes, axis_size=size)(
            residuals, tuple(cts), *primals)
        # a primal every example shared gets the sum of their cotangents
        return tuple(c if c is None else sum_(c, 0) if d is None else move_axis(c, 0, d)
                     for c, d in zip(per_example, dims))
    def b_body(*xs):            # what staging records: the batched body, no rules
        return vmap(fun.body, in_axes=in_axes, axis_size=size)(*xs)
    name = f"vmap({fun.__name__})"
    b_fun = _named(lambda *xs: b_fwd(*xs)[0], name, b_body)
    b_fun.reverse_only = getattr(fun, "reverse_only", None)
    b_fun.jvp_of_fun = getattr(fun, "jvp_of_fun", False)
    return b_fun, b_fwd, b_bwd


def _batched_custom_jvp(fun, rule, dims, size):
    vmap = callbacks.transformation("vmap")
    in_axes = tuple(dims)

    def b_fun(*xs):
        return vmap(fun, in_axes=in_axes, axis_size=size)(*xs)

    def b_rule(primals, tangents):
        return vmap(rule, in_axes=(in_axes, in_axes), axis_size=size)(
            tuple(primals), tuple(tangents))
    def b_body(*xs):            # what staging records: the batched body, no rules
        return vmap(fun.body, in_axes=in_axes, axis_size=size)(*xs)
    return _named(b_fun, f"vmap({fun.__name__})", b_body), b_rule


def loop_rule(prim):
    """The batching rule of a primitive that has none: it runs once per example
    in a Python loop, with a one-time warning naming how to add a real rule
    (tests check that every built-in primitive has one, not this)."""
    if not getattr(prim, "warned_loop_batching", False):
        prim.warned_loop_batching = True
        where = (f"add one in {prim.family}" if prim.family else
                 f"register one with fgrad.defbatch({prim.name.rsplit('.', 1)[-1]}, "
                 "rule)")
        warnings.warn(f"primitive {prim.name!r} has no batching rule, so vmap runs it "
                      f"once per example in a Python loop (slow): {where}.",
                      LoopBatchingWarning, stacklevel=4)

    def loop(args, dims, **params):
        size = axis_size(args, dims)
        outs = []
        for i in range(size):
            example = [x if d is None else getitem_p.bind(
                x, spec=(("slice", None, None, None),) * d + (("int", i),))
                for x, d in zip(args, dims)]
            outs.append(prim.bind(*example, **params))
        if prim.multiple_results:
            return tuple(stack(parts) for parts in zip(*outs)), (0,) * len(outs[0])
        return stack(outs), 0
    return loop
