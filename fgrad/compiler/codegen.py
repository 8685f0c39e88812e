"""Code generation: a staged graph as one straight-line Python function.

`compile_graph` optimises the graph (`fgrad.compiler.passes`), then, on a
backend that builds elementwise kernels (CuPy), ``fuse_elementwise``
(`fgrad.compiler.fusion`) replaces each chain of elementwise equations by one
generated kernel; and then ``generate`` writes one Python function with one line
per remaining equation. Each line calls the backend's function directly
(``sin(a)``, not ``sin_p.bind(a)``), ``del`` releases every intermediate after
its last reader, and an elementwise equation whose operand buffer dies at that
line writes its result into that buffer (``out=``). A buffer is reused only if it
was made by an earlier elementwise equation or matmul of this same call: never a
user's input, a constant, or anything that might share memory with a live value.
"""
import functools
import linecache
import math
import weakref

import numpy as np

from fgrad.compiler.cpu_fusion import cpu_fused_p, fuse_for_cpu
from fgrad.compiler.fusion import fuse_elementwise
from fgrad.compiler.passes import on_backend, optimize
from fgrad.core.backend import elementwise_kernel_maker
from fgrad.core.graph import Var
from fgrad.interpreters.staging import gc_paused
from fgrad.primitives.products import matmul_p

# ---------------------------------------------------------------------------
# Code generation
# ---------------------------------------------------------------------------


class _Groups:
    """Union-find over variables that may share one memory buffer."""

    def __init__(self):
        self.parent = {}

    def find(self, v):
        parent = self.parent
        root = v
        while root in parent:
            root = parent[root]
        while v in parent and parent[v] is not root:
            parent[v], v = root, parent[v]
        return root

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra is not rb:
            self.parent[rb] = ra


def is_fresh_elementwise(eqn):
    """Whether ``eqn``'s output is a new buffer that later equations may write
    into (shared with `fgrad.compiler.parallel`, which must not split such reuse)."""
    # a ufunc's output owns a new, contiguous, writable buffer (0-d ones are
    # NumPy scalars, which cannot be written into)
    return bool(getattr(eqn.prim, "ufunc_name", None)) and len(eqn.outvars) == 1 \
        and eqn.outvars[0].aval.ndim > 0


# primitives whose NumPy and CuPy functions always return new arrays, sharing
# memory with no operand: an elementwise equation may write into their result
# once it dies (the bias added to a matmul's product, in place, saves a new
# array of the product's size: pages the system zeroes, written, read back).
# A fused CPU kernel's outputs are new arrays too, or rows of one.
_NEW_ARRAY = frozenset({matmul_p, cpu_fused_p})


def _returns_new_array(eqn):
    return eqn.prim in _NEW_ARRAY and all(v.aval.ndim > 0 for v in eqn.outvars)


class Compiled:
    """A compiled graph: call it with the flat inputs; ``source`` is its code."""

    __slots__ = ("fn", "source", "graph", "__weakref__")

    def __init__(self, fn, source, graph):
        self.fn = fn
        self.source = source
        self.graph = graph

    def __call__(self, *args):
        return self.fn(*args)

    def __repr__(self):
        return f"Compiled({len(self.graph.eqns)} equations)"


_INF = math.inf
_LINECACHE_LIMIT = 1 << 20
# linecache names of generated code whose `Compiled` is gone, dropped from
# linecache at the next registration (`_register_lines`), not by the
# finalizer itself: a finalizer runs inside any allocation, and one that
# removed a key while linecache.checkcache walked its list of keys made it
# raise KeyError (a doctest, pdb or traceback beside a jitted function
# being collected). Bounded: emptied at every registration.
_RETIRED_LINES = []


# ufuncs whose positional output NumPy 2.4 deprecates (it reads as a third operand)
_KEYWORD_OUT_ONLY = frozenset({"maximum", "minimum"})


def generate(graph, xp=np, name="staged", reuse_buffers=True, donated=()):
    """Write ``graph`` as one Python function over the backend module ``xp``.

    ``donated`` lists the positions of inputs whose buffers the caller hands
    over: the function then takes one list of its inputs, which it empties, so
    that each donated input is freed after its last reader, and an elementwise
    equation may write its result into it there.
    """
    names = {}
    for i, v in enumerate(graph.invars):
        names[v] = f"a{i}"
    namespace = {"__builtins__": __builtins__}
    counter = [0]

    def fresh_name(prefix):
        counter[0] += 1
        return f"{prefix}{counter[0]}"

    def var_name(v):
        n = names.get(v)
        if n is None:
            n = names[v] = fresh_name("v")
        return n

    const_names = {}

    def operand(v):
        if type(v) is Var:
            return names[v]
        value = v.value
        if type(value) in (bool, int) or (type(value) is float and math.isfinite(value)):
            return repr(value)
        key = id(value)
        n = const_names.get(key)
        if n is None:
            n = const_names[key] = fresh_name("c")
            # a host array the function closed over goes to the device once,
            # here, as JAX moves NumPy constants (eagerly, mixing is an error)
            namespace[n] = on_backend(xp, value)
        return n

    def ufunc_operands(eqn, ufunc):
        # A Python float in a ufunc call costs NumPy a scalar conversion per call
        # (about 400 ns, as much as the arithmetic on a small array).  Where the
        # ufunc computes in the output dtype D anyway (every operand of dtype D,
        # a D loop exists), the literal is the same number as a 0-d D array, so
        # it is converted once here.
        dtype = np.dtype(eqn.outvars[0].aval.dtype)
        np_ufunc = getattr(np, ufunc, None)
        if (dtype.kind not in "fc" or not isinstance(np_ufunc, np.ufunc)
                or f"{dtype.char * np_ufunc.nin}->{dtype.char}" not in np_ufunc.types
                or any(type(v) is Var and np.dtype(v.aval.dtype) != dtype
                       for v in eqn.invars)):
            return ", ".join(operand(v) for v in eqn.invars)
        parts = []
        for v in eqn.invars:
            if type(v) is not Var and type(v.value) in (int, float) \
                    and math.isfinite(v.value):
                key = ("literal", v.value, dtype.str)
                n = const_names.get(key)
                if n is None:
                    with np.errstate(over="ignore"):
                        value = np.asarray(v.value, dtype=dtype)
                    if not np.isfinite(value):      # too large for float32: keep
                        parts.append(operand(v))    # NumPy's own handling
                        continue
                    n = const_names[key] = fresh_name("c")
                    namespace[n] = xp.asarray(value)
                parts.append(n)
            else:
                parts.append(operand(v))
        return ", ".join(parts)

    fn_names = {}

    def _hashable_params(params):
        try:
            key = tuple(sorted(params.items()))
            hash(key)
            return key
        except TypeError:
            return id(params)

    # a 0-d input may arrive as a Python number (jit's `_scalar_arguments`
    # keeps weakly typed ones so; a loop's or branch's body graph gets them
    # from its caller, its own avals not weak), which has none of the array
    # methods a lowering may call (``x.reshape``): its readers run their impls
    maybe_python = {v for v in graph.invars if v.aval.shape == ()}

    def callee(eqn):
        ufunc = getattr(eqn.prim, "ufunc_name", None)
        lowering = eqn.prim.lowering
        if maybe_python.intersection(v for v in eqn.invars if type(v) is Var):
            lowering = None
        lowered = lowering(xp, **eqn.params) if lowering is not None and not ufunc \
            else None
        if ufunc:
            key = ("ufunc", ufunc)
            fn = getattr(xp, ufunc)
        elif lowered is not None:
            key = ("lowered", eqn.prim, _hashable_params(eqn.params))
            fn = lowered
        else:
            key = ("impl", id(eqn))
            fn = functools.partial(eqn.prim.impl, **eqn.params) if eqn.params \
                else eqn.prim.impl
        n = fn_names.get(key)
        if n is None:
            base = ufunc if ufunc else eqn.prim.name.replace(".", "_")
            n = fn_names[key] = f"{''.join(c if c.isalnum() else '_' for c in base)}" \
                                f"_{len(fn_names)}"
            namespace[n] = fn
        return n

    # -- liveness and aliasing ------------------------------------------------
    groups = _Groups()
    fresh = set()
    for eqn in graph.eqns:
        if is_fresh_elementwise(eqn) or _returns_new_array(eqn):
            fresh.update(eqn.outvars)
        else:
            for out in eqn.outvars:
                for v in eqn.invars:
                    if type(v) is Var:
                        groups.union(v, out)
    last_use = {}
    group_last = {}
    for k, eqn in enumerate(graph.eqns):
        for v in eqn.invars:
            if type(v) is Var:
                last_use[v] = k
        for v in eqn.outvars:
            last_use.setdefault(v, k)
    for v in graph.outvars:
        if type(v) is Var:
            last_use[v] = _INF
    for v in graph.invars:
        last_use[v] = _INF if v not in last_use else last_use[v]
    for v, k in last_use.items():
        root = groups.find(v)
        if group_last.get(root, -1) < k:
            group_last[root] = k
    donated_vars = {graph.invars[i] for i in donated}
    fresh |= donated_vars
    foreign = {groups.find(v) for v in graph.invars if v not in donated_vars}

    dying = {}
    for v, k in last_use.items():
        if k is not _INF:
            dying.setdefault(k, []).append(v)

    params = ", ".join(names[v] for v in graph.invars)
    if donated:
        # the caller's list is the only other holder of the donated buffers:
        # emptied here, the function's names are the last references
        lines = [f"def {name}(inputs):",
                 f"    {params}{',' if len(graph.invars) == 1 else ''} = inputs",
                 "    inputs.clear()"]
    else:
        lines = [f"def {name}({params}):"]
    reused = 0
    for k, eqn in enumerate(graph.eqns):
        fn = callee(eqn)
        ufunc = getattr(eqn.prim, "ufunc_name", None)
        args = ufunc_operands(eqn, ufunc) if ufunc and eqn.outvars \
            else ", ".join(operand(v) for v in eqn.invars)
        out_kw = ""
        if reuse_buffers and is_fresh_elementwise(eqn):
            candidates = eqn.invars
        elif reuse_buffers and eqn.prim is cpu_fused_p:
            candidates = [eqn.invars[j] for j in eqn.params["kernel"].overwritable]
        else:
            candidates = ()
        if candidates:
            out_aval = eqn.outvars[0].aval
            for v in candidates:
                if type(v) is Var and v in fresh:
                    root = groups.find(v)
                    if (group_last[root] == k and root not in foreign
                            and v.aval.shape == out_aval.shape
                            and v.aval.dtype == out_aval.dtype):
                        out_kw = names[v]
                        reused += 1
                        break
        outs = [var_name(v) for v in eqn.outvars]
        if not outs:
            lines.append(f"    {fn}({args})")
        else:
            target = ", ".join(outs) + ("," if eqn.prim.multiple_results and
                                        len(outs) == 1 else "")
            if out_kw and xp is np and getattr(eqn.prim, "ufunc_name", None) \
                    and eqn.prim.ufunc_name not in _KEYWORD_OUT_ONLY:
                # NumPy parses a positional output faster than out=; the comment
                # keeps the listing readable
                lines.append(f"    {target} = {fn}({args}, {out_kw})  # out={out_kw}")
            else:
                lines.append(f"    {target} = {fn}({args}{', out=' + out_kw if out_kw else ''})")
        dead = [names[v] for v in dying.get(k, ()) if v in names]
        if dead:
            lines.append(f"    del {', '.join(dead)}")
    results = []
    for v in graph.outvars:
        if type(v) is Var:
            results.append(names[v])
        elif hasattr(v.value, "shape"):
            # a constant output is copied: callers own what jit returns
            namespace["_copy"] = _copy
            results.append(f"_copy({operand(v)})")
        else:
            results.append(operand(v))
    lines.append(f"    return ({', '.join(results)}{',' if len(results) == 1 else ''})")
    source = "\n".join(lines) + "\n"
    filename = f"<fgrad.jit {name} {id(graph):x}>"
    exec(compile(source, filename, "exec"), namespace)
    compiled = Compiled(namespace[name], source, graph)
    compiled.graph = graph
    # registered with linecache so tracebacks through compiled code show the
    # line, for as long as the code lives: linecache never drops an entry it
    # cannot reload from a file, so a program jitting fresh functions would grow
    if len(source) < _LINECACHE_LIMIT:
        _register_lines(compiled, filename, source)
    return compiled


def _register_lines(compiled, filename, source):
    while _RETIRED_LINES:
        linecache.cache.pop(_RETIRED_LINES.pop(), None)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    weakref.finalize(compiled, _RETIRED_LINES.append, filename)


def _copy(x):
    return x.copy()


def compile_graph(graph, xp=np, name="staged", optimize_graph=True, fuse=True,
                  fuse_cpu=False, donated=()):
    """Optimise ``graph`` and generate its code; returns a `Compiled` callable.

    On a backend registered with an ``elementwise_kernel`` hook (CuPy), chains
    of elementwise equations then become one generated kernel each
    (`fgrad.compiler.fusion`). On NumPy, ``fuse_cpu=True`` makes them LLVM
    kernels (`fgrad.compiler.cpu_fusion`), compiled now; otherwise the code is
    NumPy calls. (`jit` builds its code in tiers instead:
    `fgrad.compiler.tiers`.) ``donated`` is `generate`'s: the compiled
    function then takes one list.
    """
    with gc_paused():
        if optimize_graph:
            graph = optimize(graph, xp)
            make_kernel = elementwise_kernel_maker(xp) if fuse else None
            if make_kernel is not None:
                graph = fuse_elementwise(graph, make_kernel)
            elif fuse and fuse_cpu and xp is np:
                graph = fuse_for_cpu(graph)
        return generate(graph, xp, name, donated=donated)
