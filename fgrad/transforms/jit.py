"""jit, make_graph and checkpoint: staging a function once and replaying it.

A jitted function keeps its own cache, on the function object: one compiled
graph per (argument pytree structure, leaf shapes, dtypes and backends, static
argument values). A call with plain arrays looks its signature up and runs the
generated code; a call with tracers (under grad, jvp, another jit) binds
`jit_call_p`, a *call* primitive whose parameter is the staged graph:

- its ``impl`` runs the compiled graph;
- its ``abstract`` rule returns the graph's output avals (so nested jit stages
  one equation, which the compiler inlines);
- its VJP and JVP rules re-evaluate the graph's equations under the current
  trace (`eval_graph` binds each primitive), so derivatives of a jitted
  function are derivatives of its graph.

`checkpoint` is the same call primitive under another name: reverse mode keeps
only its inputs and outputs, and the VJP rule recomputes the inside.
"""
import collections
import functools
import inspect
import logging
import os
import time
import warnings

import numpy as np

from fgrad.compiler.codegen import compile_graph
from fgrad.compiler.cpu_fusion import cpu_kernels
from fgrad.compiler.cpu_fusion import enabled as cpu_fusion_enabled
from fgrad.compiler.parallel import parallel_or_sequential
from fgrad.compiler.tiers import MODES, Tiers, default_mode, holders_of
from fgrad.compiler.passes import (
    effectful,
    eliminate_dead_code,
    inline_calls,
    optimize,
    substituter,
)
from fgrad.core.backend import array_module, backend_name
from fgrad.core.errors import (
    ArgnumError,
    InvalidInputError,
    RetracingWarning,
    StaticArgumentError,
    TraceLimitError,
    check_not_numpy_generator,
)
from fgrad.core.graph import Equation, Graph, Literal, Var
from fgrad.core.trace import (
    Primitive,
    Tracer,
    Zero,
    get_aval,
    nans_enabled,
    plain_array,
)
from fgrad.core.tree import tree_flatten, tree_unflatten
from fgrad.interpreters.batching import batch_graph
from fgrad.interpreters.nan_checking import run_checked
from fgrad.interpreters.reverse import ReverseTrace, ReverseTracer
from fgrad.interpreters.staging import eval_graph, gc_paused, shaped, stage
from fgrad.interpreters.sources import user_stacklevel
from fgrad.primitives.batching import axis_size
from fgrad.primitives.creation import zeros_like
from fgrad.transforms.differentiation import jvp, vjp

RETRACE_ENV = "FGRAD_LOG_RETRACE"
# signatures a jitted function keeps compiled (the oldest traced goes first)
CACHE_SIZE = 64
# traces of one jitted function after which it warns (once) that it keeps
# retracing: usually a shape or static value that changes on every call
RETRACE_WARNING_AFTER = 32
_log = logging.getLogger("fgrad.jit")

# ---------------------------------------------------------------------------
# The call primitives
# ---------------------------------------------------------------------------


def fuses(graph):
    """Whether jit compiles ``graph`` with fused CPU kernels: unless the jitted
    function said ``fuse=False`` (a mark on its graphs), when llvmlite (the
    ``jit`` extra) is installed and ``FGRAD_JIT_FUSE`` is not ``0``."""
    return graph.compiled.get(_FUSE, True) and cpu_fusion_enabled()


def compiled_for(graph, xp, parallel=False, whole=True, name="staged", start=True):
    """The graph's compiled code for backend ``xp`` (made once, kept on it).

    On NumPy that is a `fgrad.compiler.tiers.Tiers`: NumPy calls at once,
    fused kernels and the whole program built as its compile mode (the
    graph's mark, else ``FGRAD_JIT_COMPILE``) says. ``whole=False`` (a loop
    body or branch, run by its control-flow primitive) leaves out the
    program: the graph that holds the loop is compiled whole, loop
    included, when it can be. ``name`` names the graph in the log;
    ``start=False`` leaves asking for its compiles to the caller
    (`fgrad.compiler.tiers.Tiers.start`). ``parallel`` runs the code's
    independent equations on a thread pool (`fgrad.compiler.parallel`).
    """
    fuse = fuses(graph)
    key = (xp, fuse) if whole else (xp, fuse, "per equation")
    if parallel:
        key += ("parallel",)
    compiled = graph.compiled.get(key)
    if compiled is None:
        if xp is not np:
            compiled = compile_graph(graph, xp)     # another backend's: fused already
            if parallel:
                compiled = parallel_or_sequential(compiled, xp)
            graph.compiled[key] = compiled
            return compiled
        with gc_paused():
            optimized = optimize(graph, xp)
        # two threads may get here at once: one Tiers is kept, and started.
        # A parallel one goes through the sequential tiers at the same calls,
        # so that the two compute the same bits
        compiled = graph.compiled.setdefault(key, Tiers(
            optimized, xp, name, fuse, whole, graph.compiled.get(_MODE) or default_mode(),
            parallel, held_by=() if whole else holders_of(graph)))
        if start or compiled.mode == "sync":     # sync: the first call runs kernels
            compiled.start()
    return compiled


# keys of ``graph.compiled`` that mark a graph of a ``jit(fuse=False)`` and
# one of a ``jit(compile=...)``
_FUSE = "fuse"
_MODE = "compile mode"


def _graphs_in(graph):
    """``graph`` and every graph in its equations' parameters, at any depth."""
    found = [graph]
    for eqn in graph.eqns:
        for value in eqn.params.values():
            for sub in value if isinstance(value, tuple) else (value,):
                if isinstance(sub, Graph):
                    found += _graphs_in(sub)
    return found


def _mark_unfused(graph, like):
    if like.compiled.get(_FUSE, True) is False:
        graph.compiled[_FUSE] = False
    if _MODE in like.compiled:
        graph.compiled[_MODE] = like.compiled[_MODE]
    return graph


def _call_impl(*args, graph, name):
    if graph.sources is not None and nans_enabled():
        return tuple(run_checked(graph, args))
    return compiled_for(graph, array_module(*args), name=name)(*args)


def _call_abstract(*avals, graph, name):
    return tuple(graph.out_avals)


def _instantiate(ct, like):
    if type(ct) is Zero or ct is None:
        return zeros_like(like)          # on ``like``'s backend
    return ct


def _partial_graph(graph, args, positions):
    """``graph`` as a function of the arguments at ``positions``, the rest fixed."""
    def partial_graph(*xs):
        full = list(args)
        for i, x in zip(positions, xs):
            full[i] = x
        return tuple(eval_graph(graph, full))
    return partial_graph


def _call_vjp(ct, ans, needed, *args, graph, name):
    positions = [i for i, n in enumerate(needed) if n]
    _, pullback = vjp(_partial_graph(graph, args, positions),
                      *[args[i] for i in positions])
    cts = pullback(tuple(_instantiate(c, a) for c, a in zip(ct, ans)))
    out = [None] * len(args)
    for i, c in zip(positions, cts):
        out[i] = c
    return tuple(out)


def _call_jvp(tangents, ans, *args, graph, name):
    positions = [i for i, t in enumerate(tangents) if type(t) is not Zero]
    _, t_out = jvp(_partial_graph(graph, args, positions), tuple(args[i] for i in positions),
                   tuple(tangents[i] for i in positions))
    return tuple(t_out)


def _call_batch_rule(prim):
    # The call stays one call: its graph is batched (staged once per graph,
    # batch axes and size) and the same primitive is bound on the batched
    # graph, so vmap of a jitted function runs one compiled program, and vmap
    # of a checkpointed one is still recomputed in the reverse sweep.
    def rule(args, dims, *, graph, name):
        batched, out_batched = batch_graph(graph, tuple(dims), axis_size(args, dims))
        outs = prim.bind(*args, graph=batched, name=name)
        return outs, tuple(0 if b else None for b in out_batched)
    return rule


def _call_primitive(name):
    prim = Primitive(name, _call_impl, _call_abstract, multiple_results=True,
                     family="fgrad/transforms/jit.py")
    prim.call_param = "graph"           # the compiler inlines it
    prim.def_vjp_joint(_call_vjp)
    prim.def_jvp_joint(_call_jvp)
    prim.batch = _call_batch_rule(prim)
    return prim


jit_call_p = _call_primitive("jit_call")
checkpoint_p = _call_primitive("checkpoint")

# The identity on its first ``n`` operands; the rest it only reads. A
# checkpoint's recomputation reads its inputs through one that also reads the
# output cotangents: a staged gradient, cut into forward and backward passes
# by dependence on the cotangents, then recomputes in its backward pass, and
# common-subexpression elimination cannot take the forward pass's values for
# the recomputed ones (both kept the forward pass's intermediates alive: no
# memory saved under jit). Compiled programs read it as views.
remat_barrier_p = Primitive("remat_barrier", lambda *args, n: tuple(args[:n]),
                            lambda *avals, n: tuple(avals[:n]), multiple_results=True,
                            family="fgrad/transforms/jit.py")
remat_barrier_p.def_vjp_joint(
    lambda ct, ans, needed, *args, n: tuple(ct) + (None,) * (len(args) - n))
remat_barrier_p.def_jvp_joint(lambda tangents, ans, *args, n: tuple(tangents[:n]))
remat_barrier_p.batch = lambda args, dims, n: (remat_barrier_p.bind(*args, n=n),
                                               tuple(dims[:n]))


def _checkpoint_vjp(ct, ans, needed, *args, graph, name):
    ready = [c for c in ct if type(c) is not Zero and c is not None]
    args = remat_barrier_p.bind(*args, *ready, n=len(args))
    return _call_vjp(ct, ans, needed, *args, graph=graph, name=name)


checkpoint_p.def_vjp_joint(_checkpoint_vjp)

# ---------------------------------------------------------------------------
# grad of a jitted function: compiled forward with residuals, compiled backward
# ---------------------------------------------------------------------------
#
# Under a first-order grad (a ReverseTrace over concrete arrays) a jitted call
# is not recorded as `jit_call`, whose VJP would evaluate the graph again,
# eagerly. Its VJP is staged once, as one graph of (inputs, output cotangents),
# and cut in two by dependence on the cotangents: a forward graph that
# computes the outputs and the residuals the other half reads, and a backward
# graph from (residuals, cotangents) to input cotangents. The forward runs
# now, compiled, exactly once (so its effects, debug.print included, happen
# once); the sweep binds `jit_call` on the backward graph, which is compiled
# for concrete cotangents and, being a call primitive, still batches and
# differentiates when an outer transformation reaches it.


class _VJPSplit:
    __slots__ = ("forward", "backward", "positions", "_seeded")

    def __init__(self, forward, backward, positions):
        self.forward, self.backward, self.positions = forward, backward, positions
        self._seeded = {}

    def seeded_backward(self, unit):
        """The backward graph with the cotangents marked in ``unit`` fixed to 1.

        ``grad`` seeds its sweep with a scalar one; as a literal the compiler
        folds it through ``sum``'s broadcast and drops the multiplications by
        it, as it does for ``jit(grad(f))``.
        """
        graph = self._seeded.get(unit)
        if graph is None:
            n_res = len(self.backward.invars) - len(unit)
            cts = self.backward.invars[n_res:]
            # a 0-d array, not a Python number: control-flow primitives hand
            # their operands to graphs that expect arrays
            subst = {v: Literal(np.ones((), v.aval.dtype), v.aval)
                     for v, one in zip(cts, unit) if one}
            read = substituter(subst)
            graph = Graph(self.backward.invars[:n_res] + [v for v in cts if v not in subst],
                          [Equation(e.prim, [read(v) for v in e.invars], e.outvars, e.params)
                           for e in self.backward.eqns],
                          [read(v) for v in self.backward.outvars])
            self._seeded[unit] = graph = _mark_unfused(graph, self.backward)
        return graph


def _is_scalar_one(ct):
    # grad's seed: a concrete 0-d one (checking costs nothing at that size)
    # bool(): on CuPy `ct == 1` is a 0-d device array, which no dict key can hold
    return not isinstance(ct, Tracer) and getattr(ct, "shape", None) == () and bool(ct == 1)


def _vjp_split(graph, needed):
    """The `_VJPSplit` of ``graph`` for this pattern of differentiated inputs."""
    key = ("vjp split", needed)
    split = graph.compiled.get(key)
    if split is not None:
        return split
    positions = [i for i, n in enumerate(needed) if n]
    n_args, n_out = len(graph.invars), len(graph.outvars)

    def joint(*flat):
        args, cts = flat[:n_args], flat[n_args:]
        outs, pullback = vjp(_partial_graph(graph, args, positions),
                             *[args[i] for i in positions])
        return list(outs) + list(pullback(tuple(cts)))

    with gc_paused():
        staged, _ = stage(joint, list(graph.in_avals) + list(graph.out_avals))
        # only backend-free passes here: each half is optimised again when it is
        # compiled for the backend of the arrays it runs on
        staged = eliminate_dead_code(inline_calls(staged))
    ct_vars = staged.invars[n_args:]
    # The forward half is what the outputs (and effects) need; everything else,
    # including values that do not depend on the cotangents but only feed the
    # backward half (cos(x) for sin's rule), waits for the sweep, so it is not
    # kept alive in between.
    on_cts = set(ct_vars)              # what depends on the cotangents (a tap's callback)
    for eqn in staged.eqns:
        if any(type(v) is Var and v in on_cts for v in eqn.invars):
            on_cts.update(eqn.outvars)
    needed_vars = {v for v in staged.outvars[:n_out] if type(v) is Var}
    in_forward = set()
    for eqn in reversed(staged.eqns):
        if eqn.outvars and eqn.outvars[0] in on_cts or \
                any(type(v) is Var and v in on_cts for v in eqn.invars):
            continue
        if effectful(eqn.prim) or any(v in needed_vars for v in eqn.outvars):
            in_forward.add(id(eqn))
            needed_vars.update(v for v in eqn.invars if type(v) is Var)
    forward_eqns = [e for e in staged.eqns if id(e) in in_forward]
    backward_eqns = [e for e in staged.eqns if id(e) not in in_forward]
    computed_later = {v for e in backward_eqns for v in e.outvars} | set(ct_vars)
    ct_outs = staged.outvars[n_out:]
    residuals = {}
    for v in [v for e in backward_eqns for v in e.invars] + list(ct_outs):
        if type(v) is Var and v not in computed_later:
            residuals[v] = None
    residuals = list(residuals)
    split = _VJPSplit(_mark_unfused(Graph(staged.invars[:n_args], forward_eqns,
                                          list(staged.outvars[:n_out]) + residuals), graph),
                      _mark_unfused(Graph(residuals + list(ct_vars), backward_eqns,
                                          ct_outs), graph),
                      positions)
    graph.compiled[key] = split
    return split


def _split_vjp_rule(ct, ans, needed, *args, split, residuals, name):
    cts = [_instantiate(c, a) for c, a in zip(ct, ans)]
    # a Python number given as a cotangent becomes the array the graph expects
    cts = [array_module(a).asarray(c, dtype=a.dtype) if type(c) in _PY_SCALARS else c
           for c, a in zip(cts, ans)]
    unit = tuple(_is_scalar_one(c) for c in cts)
    graph = split.seeded_backward(unit) if any(unit) else split.backward
    inputs = list(residuals) + [c for c, one in zip(cts, unit) if not one]
    if inputs:
        arg_cts = jit_call_p.bind(*inputs, graph=graph, name=name)
    else:       # a constant gradient: on the backend of the outputs
        arg_cts = compiled_for(graph, array_module(*ans), name=name)()
    out = [None] * len(args)
    for i, c in zip(split.positions, arg_cts):
        out[i] = c
    return tuple(out)


# recorded by reverse mode only, never bound: no impl, no abstract rule, and no
# row in the dispatch table
jit_forward_p = Primitive("jit_forward", None, None, multiple_results=True,
                          family="fgrad/transforms/jit.py", register=False)
jit_forward_p.def_vjp_joint(_split_vjp_rule)


def _first_order_reverse_trace(leaves):
    """The plain `ReverseTrace` all tracers among ``leaves`` belong to, if each
    wraps a concrete array (no transformation beneath it); else None."""
    trace = None
    for x in leaves:
        if isinstance(x, Tracer):
            if type(x) is not ReverseTracer or isinstance(x.primal, Tracer) \
                    or (trace is not None and x.owner is not trace):
                return None
            trace = x.owner
    if trace is None or type(trace) is not ReverseTrace or not trace.active:
        return None
    return trace


def _bind_call(prim, leaves, graph, name, parallel):
    """Bind ``prim`` (a jit call) on ``leaves``, some of them tracers."""
    trace = _first_order_reverse_trace(leaves) if prim is jit_call_p else None
    if trace is None:
        return prim.bind(*leaves, graph=graph, name=name)
    primals, in_nodes = trace.unwrap(leaves)
    split = _vjp_split(graph, tuple(n is not None for n in in_nodes))
    results = compiled_for(split.forward, array_module(*primals), parallel,
                           name=name)(*primals)
    n_out = len(graph.outvars)
    outs, residuals = tuple(results[:n_out]), tuple(results[n_out:])
    # the inputs are not kept: the backward graph reads only the residuals
    return trace.record(jit_forward_p, in_nodes, [get_aval(p) for p in primals], outs,
                        {"split": split, "residuals": residuals, "name": f"{name}_vjp"})

# ---------------------------------------------------------------------------
# Signatures
# ---------------------------------------------------------------------------

_PY_SCALARS = (bool, int, float, complex)
_NDARRAY = np.ndarray
_LEAF = object()


def _leaf_signature(x):
    """(shape, dtype, weak, backend) of one argument leaf: the cache key part."""
    t = type(x)
    if t is np.ndarray or isinstance(x, np.generic):
        return (x.shape, x.dtype, False, "numpy")
    if t in _PY_SCALARS:
        return ((), t, True, "numpy")
    if isinstance(x, Tracer):
        aval = x.aval
        return (aval.shape, aval.dtype, aval.weak_type, "traced")
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return (tuple(x.shape), np.dtype(x.dtype), False, backend_name(x))
    return None


def _describe_leaf(sig):
    shape, dtype, weak, backend = sig
    dtype_name = dtype.__name__ if isinstance(dtype, type) else np.dtype(dtype).name
    if backend == "traced":
        # said apart from an array of the same shape: the two sign differently
        return f"a traced {dtype_name}{list(shape)}" + (" (weakly typed)" if weak else "")
    kind = "Python " + dtype_name if weak else f"{dtype_name}{list(shape)}"
    return kind if backend == "numpy" else f"{kind} on {backend}"


CacheInfo = collections.namedtuple("CacheInfo", "hits misses traces size")
CompileInfo = collections.namedtuple(
    "CompileInfo", "signature tier compiling seconds cpu_seconds callouts", defaults=((),))


def _tiers_of(graph):
    """The `Tiers` made for ``graph``, its loop bodies and branches, and the
    halves of its gradient."""
    found = []
    for sub in _graphs_in(graph):
        for value in list(sub.compiled.values()):
            if isinstance(value, Tiers):
                found.append(value)
            elif isinstance(value, _VJPSplit):
                for half in [value.forward, value.backward] + list(value._seeded.values()):
                    found += _tiers_of(half)
    return found


def _scalar_arguments(graph, sig):
    """For the Python-scalar arguments of signature ``sig``: ``(position,
    scalar type)`` pairs, to give ``graph``'s code each as a NumPy scalar of
    its weak dtype, which has the array methods its impls call (``reshape``,
    ``sum``, ``copy``) and, unlike a 0-d array, goes with any backend; or ``()``.

    A NumPy scalar promotes differently from a Python one under NumPy 2 (a
    float32 array times 0.7 is float32, times ``np.float64(0.7)`` float64),
    while the graph was staged with the weak type; so the scalars stay Python
    numbers where any equation, at any depth, meets a weakly typed value
    together with an operand of another dtype. Decided once per signature.
    """
    positions = [i for i, s in enumerate(sig) if s[2] and s[3] == "numpy"]
    if not positions:
        return ()
    for g in _graphs_in(graph):
        for eqn in g.eqns:
            operands = [v.aval for v in eqn.invars
                        if type(v) is not Literal or not v.aval.weak_type]
            if any(a.weak_type for a in operands) and \
                    len({a.dtype for a in operands}) > 1:
                return ()
    return tuple((i, graph.invars[i].aval.dtype.type) for i in positions)


def _as_numpy_scalars(leaves, scalars):
    leaves = list(leaves)
    for i, scalar_type in scalars:
        leaves[i] = scalar_type(leaves[i])
    return leaves


class _Entry:
    __slots__ = ("graph", "out_tree", "run", "returns_input", "record", "xp", "scalars")

    def __init__(self, graph, out_tree, record, scalars=()):
        self.graph = graph
        self.out_tree = out_tree
        self.record = record
        self.run = None
        self.returns_input = True       # until the compiled graph says otherwise
        self.xp = None
        self.scalars = scalars          # see `_scalar_arguments`


class Lowered:
    """What jit made of one call: the staged graph, the optimised one, the code.

    ``print(f_jit.lower(x).source)`` shows the generated Python;
    ``kernels`` lists the fused CPU kernels it calls (each with its
    ``source``), empty when nothing was fused. ``tier`` says which tier
    calls run now (`fgrad.compiler.tiers`); ``program`` is the whole program
    (`fgrad.compiler.program.Program`) once built (unless
    ``FGRAD_JIT_PROGRAM=0``), else None. Lowering waits for the kernels
    (built now if not yet), not for the program.
    """

    def __init__(self, graph, compiled):
        self.graph = graph
        tiers = compiled if isinstance(compiled, Tiers) else None
        if tiers is not None:
            compiled = tiers.compiled
        self.optimized = compiled.graph
        self.source = compiled.source
        self.kernels = cpu_kernels(compiled)
        self.program = tiers.program if tiers is not None else None
        self.tier = tiers.tier if tiers is not None else "numpy"

    def __str__(self):
        return self.source


# ---------------------------------------------------------------------------
# jit
# ---------------------------------------------------------------------------


class JitFunction:
    """A function staged once per input signature and replayed as compiled code.

    Made by `jit`; see there.
    """

    def __init__(self, fun, static_argnums=(), static_argnames=(), max_traces=None,
                 prim=jit_call_p, parallel=False, fuse=True, compile=None):
        functools.update_wrapper(self, fun)
        if compile is not None and compile not in MODES:
            raise InvalidInputError(
                f"jit(compile={compile!r}): the compile mode is one of "
                f"{', '.join(map(repr, MODES))} (or None, for FGRAD_JIT_COMPILE's default).")
        self.fun = fun
        self.parallel = parallel
        self.compile = compile
        self.fuse = bool(fuse) and compile != "never"
        self._prim = prim
        nums = (static_argnums,) if isinstance(static_argnums, int) else \
            tuple(static_argnums)
        names = (static_argnames,) if isinstance(static_argnames, str) else \
            tuple(static_argnames)
        for n in nums:
            if not isinstance(n, int):
                raise ArgnumError(f"static_argnums must be ints, got {n!r}")
        self._params = _parameter_names(fun)
        # a static argument may be named either way; accept both spellings
        names += tuple(self._params[n] for n in nums
                       if 0 <= n < len(self._params) and self._params[n] not in names)
        nums += tuple(self._params.index(n) for n in names
                      if n in self._params and self._params.index(n) not in nums)
        self.static_argnums = nums
        self.static_argnames = names
        self.max_traces = max_traces
        self._cache = {}
        self._hits = 0
        self._misses = 0
        self._traces = 0
        self._last_record = None
        # the fast path of a call with positional NumPy arrays only: (shape,
        # dtype) of each -> (entry, compiled code); None where static
        # arguments make every call take the full path
        self._fast = None if (nums or names) else {}

    def __repr__(self):
        return f"<jit of {getattr(self.fun, '__qualname__', self.fun)!r}>"

    def __get__(self, obj, objtype=None):
        # jitted methods bind like functions
        return self if obj is None else functools.partial(self, obj)

    # -- the call path ------------------------------------------------------

    def _split(self, args, kwargs):
        nargs = len(args)
        static_pos = set()
        for n in self.static_argnums:
            if -nargs <= n < nargs:
                static_pos.add(n % nargs)
            elif n >= len(self._params) or self._params[n] not in kwargs:
                raise ArgnumError(
                    f"static_argnums contains {n}, but {self.__name__} was called "
                    f"with {nargs} positional argument{'s' * (nargs != 1)}.")
        statics = []
        for i in sorted(static_pos):
            statics.append((i, args[i]))
        for name in self.static_argnames:
            if name in kwargs:
                statics.append((name, kwargs[name]))
        dyn_args = tuple(a for i, a in enumerate(args) if i not in static_pos)
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
        statics = tuple(statics)
        try:
            hash(statics)
        except TypeError:
            self._unhashable(statics)
        return dyn_args, dyn_kwargs, statics

    def _unhashable(self, statics):
        for where, value in statics:
            try:
                hash(value)
            except TypeError:
                what = (f"static argument {where} ({self._name_of(where)!r})"
                        if isinstance(where, int) else f"static argument {where!r}")
                hint = ("pass a tuple instead of a list" if isinstance(value, list)
                        else "pass a hashable value (a tuple, a number, a string)")
                raise StaticArgumentError(
                    f"{what} of {self.__name__} is a {type(value).__name__}, which is "
                    "not hashable: jit keeps one compilation per static value, so "
                    f"static values must be hashable. Either {hint}, or make it a "
                    "traced argument by leaving it out of static_argnums / "
                    "static_argnames.") from None

    def _name_of(self, where):
        if isinstance(where, str):
            return where
        return self._params[where] if where < len(self._params) else f"arg{where}"

    def __call__(self, *args, **kwargs):
        fast = self._fast
        if fast is not None and not kwargs:
            # positional NumPy arrays: their shapes and dtypes are the whole
            # signature, looked up without flattening a pytree
            key = []
            for a in args:
                if type(a) is not _NDARRAY:
                    break
                key.append(a.shape)
                key.append(a.dtype)
            else:
                hit = fast.get(tuple(key))
                if hit is not None and not nans_enabled():
                    entry, run, single = hit
                    self._hits += 1
                    outs = run.fn(*args)        # the tier running now
                    if entry.returns_input:
                        outs = _not_aliasing(outs, args)
                    return outs[0] if single else tree_unflatten(entry.out_tree, list(outs))
        return self._call(args, kwargs)

    def _call(self, args, kwargs):
        if self.static_argnums or self.static_argnames:
            dyn_args, dyn_kwargs, statics = self._split(args, kwargs)
        else:
            dyn_args, dyn_kwargs, statics = args, kwargs, ()
        leaves, tree = tree_flatten((dyn_args, dyn_kwargs))
        leaves = list(map(plain_array, leaves))     # np.matrix -> ndarray
        debug = nans_enabled()
        try:
            sig = tuple(map(_leaf_signature, leaves))
            # under debug_nans: a graph staged with source lines, kept apart
            key = (tree, sig, statics, "debug_nans") if debug else (tree, sig, statics)
            entry = self._cache.get(key)
        except TypeError:
            entry, key = None, None
        traced = any(s is not None and s[3] == "traced" for s in sig)
        captured = ()
        if entry is None:
            self._misses += 1
            entry, captured = self._trace(args, kwargs, statics, leaves, tree, sig)
            if not captured and key is not None:
                self._remember(key, entry)
        else:
            self._hits += 1
        if entry.scalars:
            leaves = _as_numpy_scalars(leaves, entry.scalars)
        if captured or traced:
            outs = _bind_call(self._prim, leaves + list(captured), entry.graph,
                              self.__name__, self.parallel)
            return tree_unflatten(entry.out_tree, list(outs))
        if debug:
            outs = _not_aliasing(run_checked(entry.graph, leaves), leaves)
            return tree_unflatten(entry.out_tree, outs)
        run = entry.run
        started = True
        if run is None:
            xp = array_module(*leaves)
            # its compiles start at the next call, not during or right after this one
            run = entry.run = compiled_for(entry.graph, xp, self.parallel, name=self.__name__,
                                           start=False)
            entry.returns_input = _returns_input(run)
            started = False
        fast = self._fast
        if fast is not None and not kwargs and key is not None and \
                all(type(a) is _NDARRAY for a in args):
            if len(fast) >= CACHE_SIZE:     # bounded like the signature cache
                fast.clear()
            # the code (whose ``fn`` is the tier running), and whether the
            # output is one array (no pytree to rebuild)
            fast[tuple(x for a in args for x in (a.shape, a.dtype))] = (
                entry, run,
                entry.out_tree.num_leaves == 1 and
                tree_unflatten(entry.out_tree, [_LEAF]) is _LEAF)
        try:
            outs = run(*leaves)
        finally:
            if not started and isinstance(run, Tiers):
                run.start_at_next_call()
        if entry.returns_input:
            outs = _not_aliasing(outs, leaves)
        return tree_unflatten(entry.out_tree, list(outs))

    def _trace(self, args, kwargs, statics, leaves, tree, sig):
        record = self._record(args, kwargs, statics, leaves, tree, sig)
        for where, value in statics:
            check_not_numpy_generator(value, f"jit({self.__name__})'s static argument "
                                             f"{self._name_of(where)!r}")
        for i, s in enumerate(sig):
            if s is None:
                check_not_numpy_generator(leaves[i], f"jit({self.__name__})'s "
                                                     f"{record['leaf_names'][i]}")
                raise InvalidInputError(
                    f"{self.__name__} received a {type(leaves[i]).__name__} "
                    f"({leaves[i]!r:.40}) as {record['leaf_names'][i]}, which is not an "
                    "array: jit traces arrays and numbers only. Mark that argument "
                    "static (static_argnums / static_argnames) to pass other values.")
        previous = self._last_record
        if previous is not None:
            change = _describe_change(previous, record)
            if self.max_traces is not None and self._traces >= self.max_traces:
                raise TraceLimitError(
                    f"{self.__name__} would be traced a {_ordinal(self._traces + 1)} "
                    f"time, past max_traces={self.max_traces}: {change}. Each new "
                    "shape, dtype, pytree structure or static value stages and "
                    "compiles the function again; keep shapes fixed (pad batches), "
                    "or raise max_traces.")
            if os.environ.get(RETRACE_ENV, "") not in ("", "0"):
                _log.warning("fgrad.jit: retracing %s (trace %d): %s", self.__name__,
                             self._traces + 1, change)
            if self._traces == RETRACE_WARNING_AFTER and self.max_traces is None:
                warnings.warn(
                    f"{self.__name__} has been traced {self._traces + 1} times (the "
                    f"latest because {change}): each new shape, dtype, pytree "
                    "structure or static value stages and compiles it again. Keep "
                    "shapes fixed (pad batches), or pass jit(f, max_traces=N) to make "
                    "retracing an error (and silence this warning).",
                    RetracingWarning, stacklevel=user_stacklevel())
        elif self.max_traces is not None and self.max_traces < 1:
            raise TraceLimitError(f"{self.__name__} has max_traces={self.max_traces}, "
                                  "so it may not be traced at all.")
        self._traces += 1
        self._last_record = record
        out_tree_box = []
        fun = self.fun
        static_pos = dict((w, v) for w, v in statics if isinstance(w, int))
        static_kw = dict((w, v) for w, v in statics if isinstance(w, str))

        def flat_fun(*xs):
            dyn_args, dyn_kwargs = tree_unflatten(tree, list(xs))
            it = iter(dyn_args)
            nargs = len(dyn_args) + len(static_pos)
            full = [static_pos[i] if i in static_pos else next(it) for i in range(nargs)]
            out = fun(*full, **dyn_kwargs, **static_kw)
            out_leaves, out_tree = tree_flatten(out)
            out_tree_box.append(out_tree)
            return out_leaves
        with gc_paused():
            graph, captured = stage(flat_fun, [shaped(x) for x in leaves])
        # on the graph and on its loop bodies and branches, which their
        # control-flow primitives compile on their own
        for sub in _graphs_in(graph):
            if not self.fuse:
                sub.compiled[_FUSE] = False
            if self.compile is not None:
                sub.compiled[_MODE] = self.compile
        return _Entry(graph, out_tree_box[0], record,
                      _scalar_arguments(graph, sig)), captured

    def _record(self, args, kwargs, statics, leaves, tree, sig):
        """Per-argument signature, for saying what changed between traces."""
        static_where = {w for w, _ in statics}
        per_arg, leaf_names = {}, []
        for i, a in enumerate(args):
            if i in static_where:
                continue
            arg_leaves, arg_tree = tree_flatten(a)
            name = repr(self._name_of(i)) if i < len(self._params) else f"{i}"
            label = f"argument {name}"
            per_arg[label] = (arg_tree, tuple(map(_leaf_signature, arg_leaves)))
            leaf_names += [label + (f" (leaf {j})" if len(arg_leaves) > 1 else "")
                           for j in range(len(arg_leaves))]
        for k, v in sorted(kwargs.items()):
            if k in static_where:
                continue
            arg_leaves, arg_tree = tree_flatten(v)
            label = f"argument {k!r}"
            per_arg[label] = (arg_tree, tuple(map(_leaf_signature, arg_leaves)))
            leaf_names += [label + (f" (leaf {j})" if len(arg_leaves) > 1 else "")
                           for j in range(len(arg_leaves))]
        static_values = {f"static argument {self._name_of(w)!r}": v for w, v in statics}
        return {"args": per_arg, "statics": static_values, "leaf_names": leaf_names}

    # -- introspection ---------------------------------------------------------

    def _remember(self, key, entry):
        # a bounded cache: past CACHE_SIZE signatures the oldest traced is
        # dropped (traced again if it comes back), so a function called with
        # ever-new shapes does not keep every graph and its code alive
        if len(self._cache) >= CACHE_SIZE:
            try:
                self._cache.pop(next(iter(self._cache)), None)
            except (RuntimeError, StopIteration):    # another thread got there first
                pass
        self._cache[key] = entry

    def cache_info(self):
        """``CacheInfo(hits, misses, traces, size)`` of this jitted function."""
        return CacheInfo(self._hits, self._misses, self._traces, len(self._cache))

    def compile_info(self):
        """One `CompileInfo` per cached signature: the tier its calls run
        (``"numpy"``, ``"kernels"`` or ``"program"``: `fgrad.compiler.tiers`),
        whether a compile is under way, and the seconds each tier's compiles
        took (its loop bodies' and its gradient's halves' included; and
        LLVM's start-up, if they paid it), in time and in the compiling
        thread's CPU time; and, where the whole program is compiled
        (jit's ``program`` tier), the equations it calls back into NumPy for
        (``callouts``: ``"index: primitive"``, `fgrad.compiler.program`)."""
        infos = []
        for entry in list(self._cache.values()):
            signature = ", ".join(_describe_leaf(leaf) for _, (_, leaves) in
                                  entry.record["args"].items() for leaf in leaves)
            run = entry.run
            seconds, cpu = collections.Counter(), collections.Counter()
            every = _tiers_of(entry.graph)
            for tiers in every:
                seconds.update(tiers.seconds)
                cpu.update(tiers.cpu_seconds)
            tier = run.tier if isinstance(run, Tiers) else None if run is None else "numpy"
            callouts = tuple(c for t in every if t.program is not None
                             for c in t.program.callouts)
            infos.append(CompileInfo(signature, tier, any(t.compiling for t in every),
                                     dict(seconds), dict(cpu), callouts))
        return infos

    def wait_compiled(self, timeout=None):
        """Build every tier left for each cached signature, and the code of
        its gradient's halves, and wait for them: the calls that follow run the
        fastest code jit has for them. Returns False if ``timeout`` seconds
        passed first.

        >>> import numpy as np, fgrad, fgrad.numpy as fnp
        >>> f = fgrad.jit(lambda x: fnp.sum(fnp.sin(x) * 2.0 + x))
        >>> float(f(np.zeros(3)))
        0.0
        >>> f.wait_compiled()
        True
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        for entry in list(self._cache.values()):
            for tiers in _tiers_of(entry.graph):
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not tiers.finish(left):
                    return False
        return True

    def clear_cache(self):
        """Forget every compilation (the counters are kept)."""
        self._cache.clear()
        if self._fast is not None:
            self._fast.clear()
        self._last_record = None

    def lower(self, *args, **kwargs):
        """The `Lowered` form (graphs and generated source) for these arguments."""
        dyn_args, dyn_kwargs, statics = self._split(args, kwargs) if (
            self.static_argnums or self.static_argnames) else (args, kwargs, ())
        leaves, tree = tree_flatten((dyn_args, dyn_kwargs))
        sig = tuple(map(_leaf_signature, leaves))
        key = (tree, sig, statics)
        entry = self._cache.get(key)
        if entry is None:
            entry, _ = self._trace(args, kwargs, statics, leaves, tree, sig)
            self._remember(key, entry)
        compiled = compiled_for(entry.graph, array_module(*leaves), self.parallel,
                                name=self.__name__)
        if isinstance(compiled, Tiers):
            # the per-equation code as it will run: its kernels built (the
            # program, if asked for, goes on compiling)
            compiled.finish(program=False)
        return Lowered(entry.graph, compiled)


def _not_aliasing(outs, inputs):
    """``outs`` with any output that is one of the ``inputs`` copied.

    A graph that returns an argument (``jit(lambda a: a)``, or ``a * 1`` once
    the compiler drops the multiplication) would hand the caller its own array,
    which it could then change through the result: NumPy users expect a new one.
    """
    outs = list(outs)
    for i, out in enumerate(outs):
        for x in inputs:
            if out is x:
                outs[i] = out.copy()
                break
    return outs


def _returns_input(compiled):
    """Whether compiled code may return one of its arguments (an output
    variable of its optimised graph is an input variable)."""
    graph = getattr(compiled, "graph", None)
    if graph is None:
        return True
    invars = set(graph.invars)
    return any(v in invars for v in graph.outvars)


def _ordinal(n):
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _parameter_names(fun):
    try:
        params = inspect.signature(fun).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _describe_change(old, new):
    changes = []
    for label in old["args"].keys() | new["args"].keys():
        if label not in new["args"]:
            changes.append(f"{label} is no longer passed")
            continue
        if label not in old["args"]:
            changes.append(f"{label} is new")
            continue
        (old_tree, old_sig), (new_tree, new_sig) = old["args"][label], new["args"][label]
        if old_tree != new_tree:
            changes.append(f"{label} changed structure from {old_tree} to {new_tree}")
            continue
        for j, (a, b) in enumerate(zip(old_sig, new_sig)):
            if a != b:
                leaf = f" (leaf {j})" if len(new_sig) > 1 else ""
                changes.append(f"{label}{leaf} changed from {_describe_leaf(a)} to "
                               f"{_describe_leaf(b)}")
                break
    for label in old["statics"].keys() | new["statics"].keys():
        a, b = old["statics"].get(label, "<absent>"), new["statics"].get(label, "<absent>")
        if a is not b and a != b:
            changes.append(f"{label} changed from {a!r} to {b!r}")
    return "; ".join(sorted(changes)) if changes else "no change in the arguments"


def jit(fun=None, static_argnums=(), static_argnames=(), max_traces=None,
        parallel=False, fuse=True, compile=None):
    """Stage ``fun`` once per input signature and replay it as compiled code.

    The signature is the arguments' pytree structure, every leaf's shape, dtype
    and backend, and the values of the static arguments (``static_argnums`` /
    ``static_argnames``, which must be hashable). ``max_traces`` raises
    `TraceLimitError` naming the argument that forced a retrace past it; set
    the environment variable ``FGRAD_LOG_RETRACE=1`` to log every retrace.
    ``f_jit.cache_info()`` counts hits, misses and traces. The last 64
    signatures traced are kept (`CACHE_SIZE`); an older one is traced again if
    it comes back.

    ``parallel=True`` runs independent equations of the compiled graph (the
    forward and reverse passes of ``jit(grad(f))`` alike) on a thread pool,
    with results identical to sequential execution; it pays off where the
    graph has independent large operations (NumPy releases the GIL in them).
    It applies to calls with arrays; a parallel jitted function called under
    another transformation runs its graph sequentially.

    With llvmlite installed (the ``jit`` extra), groups of elementwise
    operations (and a ``sum``, ``max`` or ``min`` of them over all axes) on NumPy arrays
    run as fused, compiled CPU kernels (`fgrad.compiler.cpu_fusion`; docs/jit.md).
    ``fuse=False``, or the environment variable ``FGRAD_JIT_FUSE=0``, turns
    that off: the code is then NumPy calls, one per equation.

    No call waits for a compiler: the first calls run NumPy calls while the
    kernels (and, where it pays, the whole graph as one function) compile
    on a background thread, and later calls switch to them once built
    (`fgrad.compiler.tiers`; docs/jit.md). ``compile="sync"`` compiles on the
    calling thread instead, at the call that needs it; ``compile="never"``
    keeps NumPy calls (as ``fuse=False``); None takes ``FGRAD_JIT_COMPILE``'s
    default (``background``). ``f_jit.wait_compiled()`` waits for the
    compiled code; ``f_jit.compile_info()`` says, per signature, which tier
    runs and what each compile took.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> f = fgrad.jit(lambda x: fnp.sum(fnp.sin(x) ** 2))
    >>> float(f(np.zeros(3)))
    0.0
    >>> f.cache_info()
    CacheInfo(hits=0, misses=1, traces=1, size=1)
    """
    if fun is None:
        return functools.partial(jit, static_argnums=static_argnums,
                                 static_argnames=static_argnames, max_traces=max_traces,
                                 parallel=parallel, fuse=fuse, compile=compile)
    return JitFunction(fun, static_argnums, static_argnames, max_traces,
                       parallel=parallel, fuse=fuse, compile=compile)


def make_graph(fun, static_argnums=()):
    """A function returning the staged `fgrad.core.graph.Graph` of ``fun`` at its arguments.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> g = fgrad.make_graph(lambda x, y: x * y + 1.0)(np.ones(2), np.ones(2))
    >>> len(g.eqns)
    2
    """
    nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    @functools.wraps(fun)
    def make(*args, **kwargs):
        staged = JitFunction(fun, nums)
        dyn_args, dyn_kwargs, statics = staged._split(args, kwargs) if nums else \
            (args, kwargs, ())
        leaves, tree = tree_flatten((dyn_args, dyn_kwargs))
        sig = tuple(map(_leaf_signature, leaves))
        entry, _ = staged._trace(args, kwargs, statics, leaves, tree, sig)
        return entry.graph
    return make


def checkpoint(fun):
    """``fun``, with its intermediate values recomputed in the reverse sweep.

    Reverse mode stores only the inputs and outputs of a checkpointed call; the
    VJP re-runs ``fun`` on those inputs. That trades compute for memory in deep
    chains. ``fun`` is staged like a jitted function (so value-dependent Python
    control flow needs `fgrad.lax`). Under `jit` too the recomputation runs in
    the backward pass, never merged with the original (a `remat_barrier_p`
    on its inputs).

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> layer = fgrad.checkpoint(lambda x: fnp.tanh(fnp.sin(x) * 2.0))
    >>> float(fgrad.grad(lambda x: layer(layer(x)))(0.0))
    4.0
    """
    # eager code: no kernels compiled for it
    return JitFunction(fun, prim=checkpoint_p, fuse=False)


def optimized_graph(graph, xp=np):
    """``graph`` after the compiler's passes (for inspection and tests)."""
    return optimize(graph, xp)


__all__ = ["jit", "make_graph", "checkpoint", "JitFunction", "jit_call_p",
           "checkpoint_p", "get_aval", "CompileInfo"]
