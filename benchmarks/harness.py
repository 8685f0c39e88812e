"""Measurement primitives: per-call time, peak memory, result comparison.

Nothing here asserts anything about speed.  The suite is a measuring tool; its
output is a table of ratios for a person to read.

Timing method
-------------
1. Warm up: call once (first calls pay for imports, caches, JAX's per-primitive
   compilation), then keep calling until a warm-up budget is spent, which also
   gives an estimate of the per-call time.
2. Size a loop of `n` calls so that it takes about `target` seconds: long enough
   that `time.perf_counter` resolution and scheduler noise are negligible, short
   enough that the whole suite stays quick.
3. Run that loop `repeats` times and report the median per-call time: the median
   shrugs off the occasional repeat disturbed by another process.  The spread
   ((max - min) / median) is reported too, so a noisy figure is visible as such.

The cost of the timing loop itself (one Python call of a closure per iteration)
is measured once with a no-op closure and subtracted, so that for microsecond
workloads such as a single `sin` the figures are the library's cost, not ours.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
import tracemalloc
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass
class Timing:
    """Per-call time of one callable: median over repeats, and how noisy it was."""

    seconds: float       # median per-call time, loop overhead subtracted
    spread: float        # (max - min) / median over the repeats
    loops: int           # calls per repeat
    repeats: int


@dataclass
class Settings:
    """How long to spend per measurement; `quick` trades precision for time."""

    target: float = 0.2      # seconds per timed loop
    repeats: int = 7         # timed loops per measurement; the median is reported
    warmup: float = 0.1      # seconds of warm-up calls (after the first call)
    # report the fastest repeat instead of the median: on a shared machine other
    # tenants only ever add time, so the minimum is the figure that reproduces
    best: bool = False

    @classmethod
    def quick(cls) -> "Settings":
        return cls(target=0.04, repeats=3, warmup=0.02)


def _loop_seconds(fn: Callable[[], Any], n: int) -> float:
    """Wall time of `n` back-to-back calls of `fn`."""
    perf = time.perf_counter
    start = perf()
    for _ in range(n):
        fn()
    return perf() - start


_overhead: float | None = None


def loop_overhead() -> float:
    """Per-iteration cost of the timing loop around an empty closure (seconds).

    Measured once per process: it is a property of the interpreter, not of any
    workload, and it is tens of nanoseconds, so only the smallest workloads
    (a single ufunc on 8 elements) would notice it.
    """
    global _overhead
    if _overhead is None:
        noop = lambda: None  # noqa: E731 - same call shape as the workloads' closures
        n = 200_000
        _loop_seconds(noop, n)
        _overhead = min(_loop_seconds(noop, n) for _ in range(5)) / n
    return _overhead


def time_call(fn: Callable[[], Any], settings: Settings) -> Timing:
    """Median (or, with ``settings.best``, fastest) per-call wall time of `fn`."""
    fn()  # first call: caches, lazy imports, JAX compiles its per-primitive kernels
    warm_calls = []
    budget_end = time.perf_counter() + settings.warmup
    # At least two warm calls so the estimate is not the first-call outlier.
    while len(warm_calls) < 2 or time.perf_counter() < budget_end:
        t0 = time.perf_counter()
        fn()
        warm_calls.append(time.perf_counter() - t0)
    estimate = max(min(warm_calls), 1e-9)
    n = max(1, math.ceil(settings.target / estimate))

    overhead = loop_overhead()
    per_call = []
    for _ in range(settings.repeats):
        # Collect leftovers from earlier rows now, so a collection triggered by
        # someone else's garbage does not land inside this library's loop.  GC
        # stays enabled during the loop (unlike timeit): cyclic garbage a tape
        # leaves behind is a cost its users pay too.
        gc.collect()
        per_call.append(max(_loop_seconds(fn, n) / n - overhead, 0.0))
    median = statistics.median(per_call)
    spread = (max(per_call) - min(per_call)) / median if median > 0 else 0.0
    return Timing(min(per_call) if settings.best else median, spread, n, settings.repeats)


def peak_memory(fn: Callable[[], Any]) -> tuple[int, int]:
    """``(peak, result)``: peak bytes allocated during one call of `fn` (as
    tracemalloc sees them) and the bytes of the arrays it returned.

    NumPy reports its array buffers to tracemalloc, so for NumPy-based libraries
    this covers the arrays (forward values kept for the backward pass, cotangents,
    temporaries) plus the Python objects of the tape.  JAX and torch allocate
    outside it; the runner does not call this for them.  The returned result is
    alive at the peak, so the peak counts it; ``peak - result`` is the working
    memory the computation needed besides its answer.
    One untraced call first, so one-off caches are not charged to the workload.
    """
    fn()
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        result = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    result_bytes = sum(leaf.nbytes for leaf in to_leaves(result))
    del result
    return max(peak - base, 0), result_bytes


# --- comparing results across libraries ------------------------------------------

def to_leaves(tree: Any) -> list[np.ndarray]:
    """Flatten a result (tuple/list/dict of arrays) to a list of NumPy arrays.

    Each library returns its own array type (torch.Tensor, jax.Array, fgrad's
    NumPy arrays, ...); everything is converted to NumPy float64 so one
    `np.allclose` can compare it with the floor.  Dicts are walked in sorted key
    order so the same pytree flattens the same way whatever library built it.
    """
    if isinstance(tree, dict):
        return [leaf for key in sorted(tree) for leaf in to_leaves(tree[key])]
    if isinstance(tree, (tuple, list)):
        return [leaf for item in tree for leaf in to_leaves(item)]
    if hasattr(tree, "detach"):  # torch.Tensor: leave autograd, then share memory
        tree = tree.detach().cpu().numpy()
    return [np.asarray(tree, dtype=np.float64)]


def compare(result: Any, expected: Any, rtol: float = 1e-5, atol: float = 1e-8) -> str | None:
    """None if `result` matches `expected` leaf by leaf, else a short description.

    `np.allclose` with its default tolerances, except that `atol` is scaled by the
    largest magnitude in each expected leaf: gradients can be legitimately tiny
    (the 200-op chain's are ~1e-11), and an absolute 1e-8 would then accept any
    answer at all.
    """
    got, want = to_leaves(result), to_leaves(expected)
    if len(got) != len(want):
        return f"{len(got)} arrays returned, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            return f"leaf {i}: shape {g.shape}, expected {w.shape}"
        scale = float(np.max(np.abs(w))) if w.size else 0.0
        if not np.allclose(g, w, rtol=rtol, atol=atol * (scale or 1.0)):
            err = float(np.max(np.abs(g - w)))
            return f"leaf {i}: max abs difference {err:.3g} (max |expected| {scale:.3g})"
    return None


# --- workload description ---------------------------------------------------------

#: builder(peer) -> zero-argument callable that runs the whole workload once with
#: that library and returns its result.  Building happens outside the timing, so
#: converting inputs to the library's array type (jnp.asarray, torch.from_numpy)
#: and constructing `grad(f)` are not timed; calling it is.
Builder = Callable[[Any], Callable[[], Any]]


@dataclass
class Workload:
    """One benchmark: the same math as a floor and per library.

    `floor` is the hand-written NumPy version, the denominator of every ratio.
    `builders` maps library name -> Builder; a library without an entry simply
    has no row.  When `input_nbytes` is set, peak memory is measured for
    NumPy-based libraries and printed as a multiple of it.
    """

    name: str
    description: str
    floor: Callable[[], Any]
    builders: dict[str, Builder]
    input_nbytes: int | None = None
    # why results are not compared with the floor's (each library draws its
    # own random numbers; the floor computes less), or "" when they are
    unchecked: str = ""
