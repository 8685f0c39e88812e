"""The reverse sweep of an eager ``grad``, staged once and run as compiled code.

Eager ``grad(f)(x)`` records a linear graph whose residuals are real arrays and
sweeps it with the VJP rules, one NumPy call per rule operation. On large
arrays that sweep is memory-bound, and what costs is every temporary it
allocates and every multiplication by the ones that ``grad`` seeds it with; on
small ones, what costs is dispatching each rule. The rules do not change
between calls that record the same graph, so the sweep is staged (the rules
run once on staging tracers standing for the residuals), optimised by the jit
compiler (the seed folded, multiplications by one dropped, intermediates
written into dead buffers) and kept, per recorded structure, on the ``grad``
function (`SweepCache`). Later calls that record the same structure run the
compiled sweep. Large gradients (`MIN_BYTES`) are compiled on their first
call; smaller ones when a structure comes back, so a one-off call never pays
for staging. When a structure of `FUSED_MIN_BYTES` or more comes back, its
sweep is compiled again with elementwise groups fused into LLVM kernels (as
under ``jit``), which read each large array once and compute sin, cos, exp and
tanh with SIMD code; a one-off call never waits for a kernel to compile.
Anything the compiler cannot stage (a rule that branches on a value, a one-off
custom rule) keeps the eager sweep.

Under ``vmap`` (``vmap(grad(f))``, per-example gradients) the residuals are
batch tracers of the vmap below: the sweep is staged on one example's shapes,
batched once by `batch_graph` and compiled, so each later call runs the whole
batch's sweep as compiled code instead of dispatching every rule operation
through the batching interpreter.
"""
import sys

import numpy as np

from fgrad.core.trace import ShapedArray, Tracer, primitive_table
from fgrad.interpreters.batching import BatchTracer, batch_graph
from fgrad.interpreters.reverse import (
    PRUNE_MIN_BYTES,
    PY_SCALARS,
    Recompute,
    ReverseTrace,
    backward_pass,
)
from fgrad.interpreters.staging import gc_paused, shaped, stage

# Differentiated inputs at least this large (in bytes, all together) get a
# compiled sweep on the first call; smaller ones on the second sighting of a
# structure. Tests set it to 0.
MIN_BYTES = 1 << 20

# Differentiated inputs at least this large (in bytes, all together) get their
# sweep recompiled with fused kernels when the structure comes back
# (`SweepCache.compile_fused`). Below it the sweep is mostly something else
# than elementwise work: mlp-grad's 1.6 MB of weights, whose sweep is matrix
# products around a small tanh, ran 1.6x slower fused (6.4 ms against 3.95 ms,
# peak memory 2.0x the input against 1.2x) with a 1 MB threshold, while the
# 8 MB elementwise gradient runs twice as fast. Independent of MIN_BYTES,
# which tests lower.
FUSED_MIN_BYTES = 4 << 20

# compiled sweeps kept per grad function (one per recorded structure)
CACHE_SIZE = 8

# a structure whose sweep cannot be staged (a rule needs values): sweep eagerly
NOT_STAGEABLE = object()
# a structure recorded once, to be compiled if it comes back
SEEN_ONCE = object()


class Replay:
    """What `backward_pass` needs of a trace: its equations."""

    __slots__ = ("eqns",)

    def __init__(self, eqns):
        self.eqns = eqns


def _describe(value, arrays, index, batched=False):
    """The part of the cache key for one recorded value; arrays are collected.

    An array recorded several times (``x`` in ``x * x``) is one input of the
    staged sweep, so the compiler sees that the products are the same; after
    its first description it is described by its position alone. Returns None
    for a value the sweep cannot be staged over (a tracer of an enclosing
    transformation, an object the compiler does not know). With ``batched``, a
    batch tracer holding a plain array is an input too, its batch axis part of
    the key.
    """
    i = index.get(id(value))
    if i is not None:
        return i
    kind = type(value)
    if kind in PY_SCALARS:
        return ("py", kind, value)
    if kind is ShapedArray:
        return ("aval", value.shape, value.dtype, value.weak_type)
    if kind is Recompute:
        # replayed in the staged sweep; described once, then by its place
        if primitive_table.get(value.prim.name) is not value.prim:
            return None
        operands = []
        for o in value.operands:
            d = _describe(o, arrays, index, batched)
            if d is None:
                return None
            operands.append(d)
        index[id(value)] = ("again", len(index))
        return ("recompute", value.prim, tuple(operands))
    if kind is BatchTracer and batched and not isinstance(value.val, Tracer):
        index[id(value)] = len(arrays)
        arrays.append(value)
        return ("batched", value.val.shape, value.val.dtype, value.batch_dim)
    if isinstance(value, Tracer) or not (hasattr(value, "shape") and hasattr(value, "dtype")):
        return None
    index[id(value)] = len(arrays)
    arrays.append(value)
    # its position in ``arrays`` follows from the key before it
    return (value.shape, value.dtype)


def structure(eqns, batched=False):
    """``(key, arrays)`` of a recorded graph, or ``(None, None)`` if it cannot be staged.

    ``batched`` accepts batch tracers among the recorded values (`_describe`).

    This runs on every call that may use a compiled sweep, once per equation,
    so the common cases are written out here: a value met before is a dict
    probe, a NumPy array met first is described inline; `_describe` handles
    the rest.
    """
    arrays, index = [], {}
    key = []
    add = key.append
    table_get = primitive_table.get
    index_get = index.get
    ndarray = np.ndarray
    for prim, in_nodes, out, args, ans, params in eqns:
        if table_get(prim.name) is not prim:
            return None, None               # a one-off rule (custom_vjp, ...)
        described = []
        for value in args:
            d = index_get(id(value))
            if d is None:
                if value.__class__ is ndarray:   # first seen: its place is implied
                    index[id(value)] = len(arrays)
                    arrays.append(value)
                    d = (value.shape, value.dtype)
                else:
                    d = _describe(value, arrays, index, batched)
                    if d is None:
                        return None, None
            described.append(d)
        if type(out) is tuple:
            for value in ans:
                d = _describe(value, arrays, index, batched)
                if d is None:
                    return None, None
                described.append(d)
        elif ans.__class__ is ndarray and id(ans) not in index:
            index[id(ans)] = len(arrays)
            arrays.append(ans)
            described.append((ans.shape, ans.dtype))
        else:
            d = _describe(ans, arrays, index, batched)
            if d is None:
                return None, None
            described.append(d)
        add((prim, in_nodes if type(in_nodes) is tuple else tuple(in_nodes), out,
             tuple(sorted(params.items())) if params else (), tuple(described)))
    key = tuple(key)
    try:
        hash(key)
    except TypeError:                       # a parameter the key cannot hold
        return None, None
    return key, arrays


def _references(arrays, i):
    """How many references ``arrays[i]`` has, as this very expression counts them."""
    return sys.getrefcount(arrays[i])


# `_references` of a value that only the list holds (measured, not assumed:
# Python versions count the argument of getrefcount differently)
_LIST_ONLY = _references([object()], 0)


def donatable(eqns, arrays, inputs):
    """Positions in ``arrays`` of the residuals the compiled sweep may own.

    A residual is handed to the compiled sweep, which frees it after its last
    reader and may write a result into it, when it is a large float NumPy
    array owning its memory, writeable, none of the differentiated ``inputs``,
    and held by nothing but the recorded equations and ``arrays`` (its
    reference count is exactly that: no user variable, closure, aux output or
    view can reach it). This is what keeps residuals from living to the end of
    the sweep, and what lets ``s * e`` reuse ``s`` once ``s`` is dead.
    """
    candidates = {}
    user = {id(x) for x in inputs}
    for i, a in enumerate(arrays):
        if a.__class__ is np.ndarray and a.nbytes >= PRUNE_MIN_BYTES \
                and a.base is None and a.flags.writeable and a.dtype.kind in "fc" \
                and id(a) not in user:
            candidates[id(a)] = [i, 0]
    if not candidates:
        return ()
    for _, _, out, args, ans, _ in eqns:
        for value in (*args, *(ans if type(out) is tuple else (ans,))):
            uses = candidates.get(id(value))
            if uses is not None:
                uses[1] += 1
    a = value = None                        # the loops' names hold no reference
    return tuple(i for i, uses in candidates.values()
                 if _references(arrays, i) == _LIST_ONLY + uses)


def _stage_sweep(eqns, seed_node, seed_dtype, num_inputs, arrays, xp):
    """Stage the sweep of ``eqns`` seeded with a scalar one at ``seed_node``.

    The staged graph takes the recorded arrays (in `structure`'s order) and
    returns the cotangent of every input node, or None where nothing reached it.
    """
    reached = []

    index = {id(a): i for i, a in enumerate(arrays)}

    def sweep(*staged_arrays):
        made = {}

        def swap(value):
            if type(value) in PY_SCALARS or type(value) is ShapedArray:
                return value
            if type(value) is Recompute:        # its recipe, staged once
                staged = made.get(id(value))
                if staged is None:
                    staged = made[id(value)] = value.prim.bind(
                        *[swap(o) for o in value.operands])
                return staged
            return staged_arrays[index[id(value)]]
        replay = []
        for prim, in_nodes, out, args, ans, params in eqns:
            new_args = [swap(a) for a in args]
            new_ans = tuple(swap(a) for a in ans) if type(out) is tuple else swap(ans)
            replay.append((prim, in_nodes, out, new_args, new_ans, params))
        # the seed is a constant, so the compiler folds it and the ones it
        # broadcasts to away
        cts = backward_pass(Replay(replay), {seed_node: xp.ones((), seed_dtype)})
        outs = []
        for node in range(num_inputs):
            ct = cts.get(node)
            reached.append(ct is not None)
            if ct is not None:
                outs.append(ct)
        return outs
    with gc_paused():
        graph, captured = stage(sweep, [shaped(a) for a in arrays])
    if captured:
        raise ValueError("the sweep closed over a tracer")
    return graph, tuple(reached)


class SweepCache(dict):
    """A grad function's compiled sweeps, by recorded structure.

    ``compile(graph, xp) -> callable`` is the compiler the staged sweeps go
    through; the transforms layer passes the jit compiler's `compile_graph`
    (the compiler sits above the interpreters, so it is handed in).
    ``called`` turns on once the function has run: a small gradient's structure
    is looked up only from the second call on, and compiled when it comes back,
    so one-off calls (``grad(f)(x)`` written inline) pay nothing for it.

    ``compile_fused(graph, xp, donated, install)``, if given, builds a second
    form of a sweep whose elementwise work is fused into kernels that must be
    compiled themselves (LLVM's, on NumPy) and hands it to ``install``, on a
    compile thread or at once: a large gradient's sweep is recompiled so when
    its structure comes back, so a loop's sweep reads each large array once per
    fused group (and computes sin, cos, exp and tanh with SIMD code), and a
    one-off call never waits for those kernels to compile.
    """

    __slots__ = ("compile", "compile_fused", "called")

    def __init__(self, compile, compile_fused=None):
        super().__init__()
        self.compile = compile
        self.compile_fused = compile_fused
        self.called = False


def remember(cache, key, entry):
    """``cache[key] = entry``, dropping the oldest entry beyond `CACHE_SIZE`."""
    if key not in cache and len(cache) >= CACHE_SIZE:
        try:                                # the oldest; another thread may race us
            cache.pop(next(iter(cache)), None)
        except (RuntimeError, StopIteration):
            pass
    cache[key] = entry


def _batch_trace(arrays):
    """The one vmap trace whose tracers are among ``arrays``: None if there are
    none, False if there are several (nested vmaps: sweep eagerly)."""
    owner = None
    for a in arrays:
        if a.__class__ is BatchTracer:
            if owner is None:
                owner = a.owner
            elif a.owner is not owner:
                return False
    return owner


def compiled_sweep(trace, seed_node, seed_dtype, inputs, xp, cache, compile_now=True):
    """The input cotangents ``{node: ct}`` of ``trace``'s sweep, run compiled.

    ``inputs`` are the differentiated values (nodes ``0..len(inputs)-1``).
    Returns None (and leaves the trace untouched) when the sweep cannot be
    staged, or is not compiled yet; the caller then sweeps eagerly. ``cache`` is
    the `SweepCache` the grad function keeps. A structure is compiled the first
    time it is seen with ``compile_now``, else the second time. The residuals
    that only the trace holds are donated to the compiled sweep (`donatable`).
    Residuals batched by one vmap below the trace give a batched sweep, whose
    cotangents come back as that vmap's tracers.
    """
    if type(trace) is not ReverseTrace:
        return None
    key, arrays = structure(trace.eqns, batched=True)
    if key is None:
        return None
    batch = _batch_trace(arrays)
    if batch is False:
        return None
    num_inputs = len(inputs)
    # small graphs (the common case of a repeated call) have nothing to donate
    donated = donatable(trace.eqns, arrays, inputs) if trace.large and batch is None else ()
    key = (key, seed_node, seed_dtype, num_inputs, xp, donated)
    entry = cache.get(key)
    if entry is None and not compile_now:
        remember(cache, key, SEEN_ONCE)
        return None
    # a large structure that came back: recompiled once with fused kernels (an
    # entry's last field says whether that is done or never will be: its key
    # fixes the inputs' sizes, so they are summed once, when it is compiled)
    tier_up = type(entry) is tuple and not entry[3]
    if entry is None or entry is SEEN_ONCE or tier_up:
        try:
            graph, reached = _stage_sweep(trace.eqns, seed_node, seed_dtype,
                                          num_inputs, arrays, xp)
            out_batched = None
            if batch is not None:
                dims = tuple(a.batch_dim if a.__class__ is BatchTracer else None
                             for a in arrays)
                graph, out_batched = batch_graph(graph, dims, batch.axis_size)
            if tier_up:
                # asked once: this call runs the unfused sweep, and the fused
                # one replaces it when built (by `compile_fused`'s thread)
                entry = entry[:3] + (True,)
                remember(cache, key, entry)
                cache.compile_fused(graph, xp, donated, lambda fused: remember(
                    cache, key, (fused, reached, out_batched, True)))
                entry = cache.get(key, entry)   # installed already if built at once
            else:
                final = cache.compile_fused is None or \
                    sum(getattr(x, "nbytes", 0) for x in inputs
                        if not isinstance(x, Tracer)) < FUSED_MIN_BYTES
                entry = (cache.compile(graph, xp, donated=donated), reached, out_batched,
                         final)
                remember(cache, key, entry)
        except Exception:                   # a rule that needs values: sweep eagerly
            # (a fused compilation that fails keeps the unfused sweep)
            entry = entry[:3] + (True,) if tier_up else NOT_STAGEABLE
            remember(cache, key, entry)
    if entry is NOT_STAGEABLE:
        return None
    compiled, reached, out_batched, _ = entry
    trace.eqns.clear()                      # the residuals now live in ``arrays`` only
    if batch is not None:
        arrays = [a.val if a.__class__ is BatchTracer else a for a in arrays]
    if donated:
        owned = set(donated)
        recorded = {id(a) for i, a in enumerate(arrays) if i not in owned}
    else:
        recorded = {id(a) for a in arrays}
    # a donating sweep empties ``arrays``: its residuals go at their last reader
    outs = iter(compiled(arrays) if donated else compiled(*arrays))
    cts = {}
    k = 0
    for node in range(num_inputs):
        if reached[node]:
            ct = next(outs)
            # a cotangent that is a recorded array (grad of sum(x * y) in x is y)
            # is copied: the caller owns what grad returns (a donated one is
            # the caller's already)
            if id(ct) in recorded:
                ct = ct.copy()
            if out_batched is not None and out_batched[k]:
                ct = BatchTracer(batch, ct, 0)  # the batch axis first, as batched
            cts[node] = ct
            k += 1
    return cts


def large_enough(leaves):
    """Whether differentiated inputs ``leaves`` are worth a compiled sweep."""
    total = 0
    for x in leaves:
        # arrays' bytes: another transformation's tracers (which answer nbytes
        # too) are never worth compiling for here
        if not isinstance(x, Tracer):
            total += getattr(x, "nbytes", 0)
    return total >= MIN_BYTES and total > 0

