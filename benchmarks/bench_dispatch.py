"""Where one traced operation's time goes, phase by phase, in nanoseconds.

``python -m benchmarks.bench_dispatch`` takes one elementwise operation of the
``chain-grad`` row (``sin`` on 16 float64 elements, under ``grad``) apart and
times each phase of its life on the real objects of the reverse-mode engine.
Each phase is the difference of two nested entry points, so the phases add
up to the whole:

forward (recording), per operation
  numpy           ``np.sin(x)`` itself: the floor no engine can go under
  backend lookup  ``impl``'s choice of array module around that call
  wrapper         ``fgrad.numpy.sin``'s test for a plain array before ``bind``
  inspection      ``bind`` finding the trace among the arguments
  unwrapping      the trace reading primal values and node numbers
  recording       the equation: residual pruning, the tuple, the list append
  tracer          making the output's ``ReverseTracer``

the rest of the chain-grad row, per operation
  other operations  what the chain's binary operations (``x * 1.01``) cost
                  over ``sin``'s recording
  structure       the compiled sweep's key for the recorded graph (``grad``
                  reuses a compiled sweep when the structure comes back)
  compiled sweep  the rest of the call: the compiled sweep, grad's own work

the eager sweep (graphs seen once), per equation of a chain of ``sin``
  rule call       the VJP rule, its NumPy work included
  bookkeeping     popping equations and cotangents, accumulating

and ``sin`` called as ``fgrad.numpy.sin`` (a thin wrapper) or as ``numpy.sin``
(a tracer's ``__array_ufunc__``), outside and inside ``grad``: the two ways
``fgrad.numpy`` could spell an elementwise function, measured against each
other.

``--json FILE`` writes the figures; ``--svg OUT.svg LABEL=FILE[,FILE...] ...``
draws them as stacked bars, one per label, each the phase-by-phase median of
its files (needs matplotlib): the chart in docs/changelog.md, whose figures
go to OUT.json beside it. Run it on a quiet machine, or compare runs taken
alternately: every phase is the fastest of several repeats.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time

import numpy as np

import fgrad
import fgrad.numpy as fnp
from fgrad.core.trace import new_trace
from fgrad.interpreters.compiled_sweep import structure
from fgrad.interpreters.reverse import NEEDED_ONE, ReverseTrace, ReverseTracer, backward_pass
from fgrad.primitives.elementwise import sin_p

from .bench_engine import CHAIN_OPS, CHAIN_SIZE, RNG_SEED, chain_function, chain_workload

FORWARD = ("numpy", "backend lookup", "wrapper", "inspection", "unwrapping",
           "recording", "tracer")
BACKWARD = ("other operations", "structure", "compiled sweep")
EAGER_SWEEP = ("rule call", "bookkeeping")
# recorded operations per timed loop: enough that the loop's own cost vanishes,
# few enough that the recorded graph stays small
BATCH = 200
# timed loops per figure: many short ones, so that the fastest catches a quiet
# moment of a shared machine (whose speed can change by half for seconds)
REPEATS = 40


def best_ns(fn, loops, repeats=REPEATS):
    """Fastest per-iteration time of ``fn(loops)`` over ``repeats`` calls, in ns.

    The minimum, not the median: other tenants of a shared machine only ever
    add time. The cycle collector is off while timing, as in `timeit`: when it
    runs depends on everything allocated before, not on the phase measured.
    """
    times = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            start = time.perf_counter_ns()
            fn(loops)
            times.append((time.perf_counter_ns() - start) / loops)
    finally:
        gc.enable()
    return min(times)


def loop_of(call, *args):
    """A timing loop of ``call(*args)``, its own cost measured by `empty_loop`."""
    def run(n):
        for _ in range(n):
            call(*args)
    return run


def empty_loop(n):
    for _ in range(n):
        pass


def forward_phases(x):
    """Per-operation nanoseconds of the recording phases (see the module doc)."""
    loop = best_ns(empty_loop, BATCH // 4)
    sin = np.sin
    out = {}
    with new_trace(ReverseTrace) as trace:
        t = trace.new_input(x)
        node = t.node

        def record_batch(n):
            # the trace keeps what it records: start each batch afresh
            trace.eqns.clear()
            for _ in range(n):
                trace.record(sin_p, [node], [x], ans, {})
        ans = sin(x)

        def timed(fn, *args):
            return best_ns(loop_of(fn, *args), BATCH // 4) - loop

        def cleared(fn, *args):
            def run(n):
                trace.eqns.clear()
                for _ in range(n):
                    fn(*args)
            return run
        numpy = timed(sin, x)
        impl = timed(sin_p.impl, x)
        tracer = timed(ReverseTracer, trace, ans, node)
        record = best_ns(record_batch, BATCH // 4) - loop
        process = best_ns(cleared(trace.process, sin_p, (t,), {}), BATCH // 4) - loop
        bind = best_ns(cleared(sin_p.bind, t), BATCH // 4) - loop
        wrapper = best_ns(cleared(fnp.sin, t), BATCH // 4) - loop
        trace.eqns.clear()
    out["numpy"] = numpy
    out["backend lookup"] = impl - numpy
    out["wrapper"] = wrapper - bind
    out["inspection"] = bind - process
    out["unwrapping"] = process - impl - record
    out["recording"] = record - tracer
    out["tracer"] = tracer
    return out


def recorder(f, x):
    """``record()`` -> ``(trace, output tracer)`` of ``f(x)`` under reverse mode."""
    def recorded():
        with new_trace(ReverseTrace) as trace:
            out = f(trace.new_input(x))
        return trace, out
    return recorded


def chain_phases(x, forward_total):
    """Per-operation nanoseconds of ``grad`` of the chain-grad row's chain.

    Its forward pass has binary operations too (``x * 1.01``), which cost more
    than ``sin``; that difference is its own segment. The sweep is compiled
    (the structure comes back on every call): its key, then the rest.
    """
    f = chain_function(fnp)
    g = fgrad.grad(f)
    for _ in range(5):                       # the structure comes back: compiled
        g(x)
    grad_ns = best_ns(loop_of(g, x), 4) / CHAIN_OPS
    recorded = recorder(f, x)
    trace, _ = recorded()
    n_eqns = len(trace.eqns)
    record_ns = best_ns(loop_of(recorded), 4) / n_eqns
    structure_ns = best_ns(loop_of(structure, trace.eqns), 4) / n_eqns
    return {"other operations": record_ns - forward_total,
            "structure": structure_ns,
            "compiled sweep": grad_ns - record_ns - structure_ns}, grad_ns


def eager_sweep_phases(x):
    """Per-equation nanoseconds of the eager sweep over a chain of ``sin``: the
    VJP rule, and everything around it (popping, cotangent accumulation)."""
    def sines(v):
        for _ in range(CHAIN_OPS):
            v = fnp.sin(v)
        return fnp.sum(v)
    recorded = recorder(sines, x)

    def sweeps(n):
        for _ in range(n):
            trace, out = recorded()
            backward_pass(trace, {out.node: np.ones(())})
    sweep_ns = (best_ns(sweeps, 2) - best_ns(loop_of(recorded), 2)) / (CHAIN_OPS + 1)
    ans, ct = np.sin(x), np.ones_like(x)
    rule_ns = best_ns(loop_of(sin_p.vjp, ct, ans, NEEDED_ONE, x), BATCH // 4)
    return {"rule call": rule_ns, "bookkeeping": sweep_ns - rule_ns}


def ufunc_protocol_phases(x):
    """``sin`` outside and inside ``grad``, called two ways: as
    ``fgrad.numpy.sin`` (a thin wrapper that calls ``numpy.sin`` on a NumPy
    array and binds otherwise) and as ``numpy.sin`` itself, which reaches a
    tracer's ``__array_ufunc__``. Making ``fgrad.numpy.sin`` be ``numpy.sin``
    would save the wrapper outside transformations and pay the protocol inside."""
    loop = best_ns(empty_loop, BATCH // 4)
    out = {"numpy.sin outside": best_ns(loop_of(np.sin, x), BATCH // 4) - loop,
           "fgrad.numpy.sin outside": best_ns(loop_of(fnp.sin, x), BATCH // 4) - loop}
    with new_trace(ReverseTrace) as trace:
        t = trace.new_input(x)
        for name, fn in (("fgrad.numpy.sin traced", fnp.sin), ("numpy.sin traced", np.sin)):
            def run(n, fn=fn):
                trace.eqns.clear()
                for _ in range(n):
                    fn(t)
            out[name] = best_ns(run, BATCH // 4) - loop
        trace.eqns.clear()
    return out


def measure():
    x = np.random.default_rng(RNG_SEED).standard_normal(CHAIN_SIZE)
    forward = forward_phases(x)
    backward, grad_ns = chain_phases(x, sum(forward.values()))
    floor_ns = best_ns(loop_of(chain_workload().floor), 4) / CHAIN_OPS
    return {"forward": forward, "backward": backward,
            "eager sweep": eager_sweep_phases(x), "grad per op": grad_ns,
            "numpy per op": floor_ns, "ufunc protocol": ufunc_protocol_phases(x)}


def report(figures, label=""):
    lines = [f"one traced sin on {CHAIN_SIZE} float64 elements {label}".rstrip(),
             f"{'phase':<16}{'ns':>8}"]
    for section, names in (("forward", FORWARD), ("backward", BACKWARD)):
        lines.append(f"-- {section}" + (" (the rest of the chain-grad row)"
                                         if section == "backward" else ""))
        for name in names:
            lines.append(f"{name:<16}{figures[section][name]:>8.0f}")
    lines.append("-- eager sweep of a sin chain (graphs seen once), per equation")
    for name in EAGER_SWEEP:
        lines.append(f"{name:<16}{figures['eager sweep'][name]:>8.0f}")
    lines.append("-- sin called as fgrad.numpy.sin or as numpy.sin (__array_ufunc__)")
    for name, ns in figures["ufunc protocol"].items():
        lines.append(f"{name:<26}{ns:>8.0f}")
    lines.append(f"grad of the {CHAIN_OPS}-op chain: {figures['grad per op']:.0f} ns per op, "
                 f"{figures['grad per op'] / figures['numpy per op']:.2f}x the hand-written "
                 f"NumPy gradient's {figures['numpy per op']:.0f} ns")
    return "\n".join(lines)


def median_of(runs):
    """Phase by phase, the median of several runs' figures (taken alternately
    with another checkout on a shared machine, each run's figures can be off)."""
    def median(values):
        values = sorted(values)
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
    out = {key: median([r[key] for r in runs]) for key in ("grad per op", "numpy per op")}
    for section in ("forward", "backward", "eager sweep", "ufunc protocol"):
        out[section] = {name: median([r[section][name] for r in runs])
                        for name in runs[0].get(section, {})}
    return out


def plot(svg_path, runs):
    """Stacked horizontal bars, one per labelled run, one segment per phase."""
    # optional: only the chart needs it
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    matplotlib.rcParams["svg.hashsalt"] = "fgrad"   # the same ids on every run

    names = FORWARD + BACKWARD
    colors = plt.get_cmap("tab10").colors
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.6 * len(runs)))
    for row, (label, figures) in enumerate(runs):
        left = 0.0
        for i, name in enumerate(names):
            section = "forward" if name in FORWARD else "backward"
            width = max(figures[section][name], 0.0)
            ax.barh(row, width, left=left, color=colors[i % len(colors)],
                    edgecolor="white", label=name if row == 0 else None)
            left += width
    goal = 4 * runs[-1][1]["numpy per op"]
    ax.axvline(goal, color="black", linestyle="--", linewidth=1)
    ax.text(goal, -0.6, " 4x NumPy (the goal)", fontsize="small", va="bottom")
    ax.set_yticks(range(len(runs)), [label for label, _ in runs])
    ax.invert_yaxis()
    ax.set_xlabel(f"ns per operation of grad of the chain-grad row: the phases of one "
                  f"sin on {CHAIN_SIZE} elements, then the rest")
    ax.legend(ncol=5, fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.3),
              frameon=False)
    ax.set_title("Where the time of one traced operation goes", pad=18)
    fig.savefig(svg_path, bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_dispatch",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", metavar="FILE", help="also write the figures here")
    parser.add_argument("--svg", nargs="+", metavar=("OUT", "LABEL=FILE"),
                        help="draw OUT.svg from saved runs (LABEL=FILE[,FILE...] ...), "
                             "each label the median of its files, and exit")
    args = parser.parse_args(argv)
    if args.svg:
        out, *saved = args.svg
        runs = []
        for item in saved:
            label, _, paths = item.partition("=")
            figures = []
            for path in paths.split(","):
                with open(path) as fh:
                    figures.append(json.load(fh))
            runs.append((label, median_of(figures)))
        plot(out, runs)
        with open(out.rsplit(".", 1)[0] + ".json", "w") as fh:
            json.dump(dict(runs), fh, indent=1)     # the figures drawn, for the record
        return
    figures = measure()
    print(report(figures))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(figures, fh, indent=1)


if __name__ == "__main__":
    sys.exit(main())
