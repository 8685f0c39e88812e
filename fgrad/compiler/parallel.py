"""Running a compiled graph's independent equations on a thread pool.

``jit(f, parallel=True)`` runs each per-equation tier of a graph's
`fgrad.compiler.tiers.Tiers` (the NumPy calls, then the fused kernels) as a
`ParallelCompiled`: that tier's graph plus, per equation, its callable, the
number of inputs it waits for and the equations that read its outputs. A call
counts dependencies down as equations finish and hands each equation whose
inputs all exist to a worker thread. All bookkeeping stays on the calling
thread, so it needs no locks: workers only compute. NumPy and CuPy release the
GIL inside large kernels, so independent matmuls, reductions and elementwise
chains overlap.

Equations on small arrays (under `PARALLEL_MIN_SIZE` elements) run on the
calling thread, where a thread hop would cost more than the work; a graph with
no large equation runs the sequential generated code. An elementwise equation
writes into an operand's buffer (``out=``) only when every other reader of that
operand has finished and no view of it was ever made, decided when the
equation is dispatched: a buffer another thread may still read is never
written. Effectful equations (debug.print, taps) keep their order.

The results are the sequential code's, bit for bit: each equation is the one
the sequential tier calls, on the same operands, and a sum of cotangents is a
chain of equations whose order the graph fixes, whichever thread finishes first.
The tier matters (a fused kernel's sums and ``sin`` round otherwise than
NumPy's), so the parallel schedule follows the sequential tiers call by call,
and runs the program, one native call, once that tier is built.
"""
import collections
import concurrent.futures
import functools
import os
import weakref

from fgrad.compiler.codegen import is_fresh_elementwise
from fgrad.core.graph import Literal

# Output size (elements) from which an equation is worth a thread. Tests set
# it to 0 so every equation goes through the pool.
PARALLEL_MIN_SIZE = 1 << 14


def _callable(eqn, xp):
    ufunc = getattr(eqn.prim, "ufunc_name", None)
    if ufunc:
        return getattr(xp, ufunc)
    return functools.partial(eqn.prim.impl, **eqn.params) if eqn.params else eqn.prim.impl


def parallel_or_sequential(code, xp):
    """What runs the per-equation ``code`` (a `fgrad.compiler.codegen.Compiled`)
    with ``parallel=True``: a `ParallelCompiled` of it, or ``code`` itself
    where no equation is worth a thread."""
    compiled = ParallelCompiled(code.graph, code, xp)
    return compiled if any(compiled.big) else code


class ParallelCompiled:
    """A compiled graph run by a dependency-counting scheduler over a thread pool."""

    def __init__(self, graph, sequential, xp, workers=None):
        self.graph = graph
        self.sequential = sequential
        self.source = sequential.source
        eqns = graph.eqns
        producer = {}
        self.fns = [_callable(e, xp) for e in eqns]
        self.multiple = [e.prim.multiple_results for e in eqns]
        self.waits = [0] * len(eqns)
        self.consumers = [[] for _ in eqns]
        self.readers = collections.Counter()
        last_effect = None
        for k, eqn in enumerate(eqns):
            deps = {producer[v] for v in eqn.invars if type(v) is not Literal
                    and v in producer}
            if getattr(eqn.prim, "effectful", False):
                if last_effect is not None:
                    deps.add(last_effect)
                last_effect = k
            self.waits[k] = len(deps)
            for d in deps:
                self.consumers[d].append(k)
            for v in eqn.invars:
                if type(v) is not Literal:
                    self.readers[v] += 1
            for v in eqn.outvars:
                producer[v] = k
        for v in graph.outvars:
            if type(v) is not Literal:
                self.readers[v] += 1            # outputs are never released
        self.big = [max([v.aval.size for v in e.outvars + [i for i in e.invars
                                                         if type(i) is not Literal]],
                        default=0) >= PARALLEL_MIN_SIZE for e in eqns]
        self.roots = [k for k, w in enumerate(self.waits) if w == 0]
        # buffers an equation may write into: made by an elementwise equation
        # (so owned by this call), never viewed, not an input or output
        fresh = {e.outvars[0] for e in eqns if is_fresh_elementwise(e)}
        viewed = {v for e in eqns if not is_fresh_elementwise(e) for v in e.invars}
        kept = set(graph.invars) | {v for v in graph.outvars if type(v) is not Literal}
        self.reusable = []
        for e in eqns:
            options = []
            if is_fresh_elementwise(e):
                out = e.outvars[0].aval
                for v in e.invars:
                    if (type(v) is not Literal and v in fresh and v not in viewed
                            and v not in kept and v.aval.shape == out.shape
                            and v.aval.dtype == out.dtype):
                        options.append((v, e.invars.count(v)))
            self.reusable.append(options)
        self._find_chains(graph, kept, viewed, fresh)
        self.workers = workers or min(8, os.cpu_count() or 1)
        self._pool = None

    def _find_chains(self, graph, kept, viewed, fresh):
        """Group equations into chains a worker runs in one go.

        A chain is a run of large single-output equations in which each link
        after the first depends on no equation but the one before it. One task
        per chain instead of per equation saves the scheduler's round trip
        between dependent equations. A link's value that other equations also
        read (a residual of the reverse sweep) is published when the chain
        ends; one that only the next link reads (``inner``) never leaves the
        worker. ``chain_of[k]`` is the chain (equation numbers) starting at ``k``.
        """
        eqns = graph.eqns
        effectful = [getattr(e.prim, "effectful", False) for e in eqns]

        def linkable(k):
            return self.big[k] and not self.multiple[k] and not effectful[k]
        follows, followed = {}, set()
        for k in range(len(eqns)):
            if not linkable(k):
                continue
            for c in self.consumers[k]:
                if linkable(c) and self.waits[c] == 1 and c not in followed:
                    follows[k] = c
                    followed.add(c)
                    break
        self.chain_of = {}
        self.inner = set()
        for head in set(follows) - followed:
            chain = [head]
            while chain[-1] in follows:
                chain.append(follows[chain[-1]])
            self.chain_of[head] = chain
            for prev, k in zip(chain, chain[1:]):
                v = eqns[prev].outvars[0]
                if self.readers[v] == eqns[k].invars.count(v):
                    self.inner.add(v)
        # inside a chain, an elementwise equation writes into the buffer of the
        # inner value it reads (made by the previous link, so owned by the call)
        self.chain_reuse = {}
        for chain in self.chain_of.values():
            for prev, k in zip(chain, chain[1:]):
                v = eqns[prev].outvars[0]
                out = eqns[k].outvars[0].aval
                if (is_fresh_elementwise(eqns[k]) and v in self.inner and v in fresh
                        and v not in viewed and v not in kept
                        and v.aval.shape == out.shape and v.aval.dtype == out.dtype):
                    self.chain_reuse[k] = v

    def _executor(self):
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                self.workers, thread_name_prefix="fgrad-parallel")
            weakref.finalize(self, self._pool.shutdown, wait=False)
        return self._pool

    @property
    def fn(self):
        """The callable (as `fgrad.compiler.codegen.Compiled.fn`)."""
        return self.__call__

    def __call__(self, *args):
        graph = self.graph
        eqns = graph.eqns
        env = dict(zip(graph.invars, args))
        readers = dict(self.readers)
        waits = list(self.waits)
        ready = collections.deque(self.roots)
        running = {}
        pool = self._executor()
        fns, big, multiple, consumers = self.fns, self.big, self.multiple, self.consumers
        reusable = self.reusable

        def call(k):
            """fn and its arguments; out= an operand's buffer if only k still reads it."""
            ops = [v.value if type(v) is Literal else env[v] for v in eqns[k].invars]
            for v, uses in reusable[k]:
                if readers[v] == uses:
                    return functools.partial(fns[k], out=env[v]), ops
            return fns[k], ops

        chain_of, inner, chain_reuse = self.chain_of, self.inner, self.chain_reuse

        def chain_task(chain):
            """The chain's work, for a worker: the value of every link."""
            first_fn, first_ops = call(chain[0])
            rest = []
            for prev, k in zip(chain, chain[1:]):
                link = eqns[prev].outvars[0]
                # None marks the previous link's value; the other operands are
                # inputs or constants, there already
                rest.append((k, [None if v is link else
                                 (v.value if type(v) is Literal else env[v])
                                 for v in eqns[k].invars]))

            # inner values are dropped as soon as the next link has read them
            kept = [eqns[k].outvars[0] not in inner for k in chain]

            def run():
                value = first_fn(*first_ops)
                values = [value if kept[0] else None]
                for (k, ops), keep in zip(rest, kept[1:]):
                    ops = [value if o is None else o for o in ops]
                    if k in chain_reuse:
                        value = fns[k](*ops, out=value)
                    else:
                        value = fns[k](*ops)
                    values.append(value if keep else None)
                return values
            return run

        def finish_chain(chain, values):
            for i, k in enumerate(chain):
                following = chain[i + 1] if i + 1 < len(chain) else None
                finish(k, values[i], skip=following)

        def finish(k, out, skip=None):
            eqn = eqns[k]
            if skip is None or eqn.outvars[0] not in inner:
                env.update(zip(eqn.outvars, out if multiple[k] else (out,)))
            for v in eqn.invars:
                if type(v) is not Literal and v not in inner:
                    left = readers[v] - 1
                    readers[v] = left
                    if left == 0 and v not in graph.invars:
                        del env[v]               # its last reader has run
            for c in consumers[k]:
                if c == skip:
                    continue                     # the next link: it ran in the chain
                waits[c] -= 1
                if waits[c] == 0:
                    ready.append(c)
        while ready or running:
            while ready:
                k = ready.popleft()
                chain = chain_of.get(k)
                if chain is not None:
                    task = chain_task(chain)
                    if ready or running:
                        running[pool.submit(task)] = chain
                    else:
                        finish_chain(chain, task())
                    continue
                fn, ops = call(k)
                if big[k] and (ready or running):
                    running[pool.submit(fn, *ops)] = k
                else:
                    finish(k, fn(*ops))
            if running:
                done, _ = concurrent.futures.wait(
                    running, return_when=concurrent.futures.FIRST_COMPLETED)
                for future in done:
                    what = running.pop(future)
                    if type(what) is list:
                        finish_chain(what, future.result())
                    else:
                        finish(what, future.result())
        return tuple(env[v] if type(v) is not Literal else
                     (v.value.copy() if hasattr(v.value, "copy") else v.value)
                     for v in graph.outvars)

    def __repr__(self):
        return f"ParallelCompiled({len(self.graph.eqns)} equations)"
