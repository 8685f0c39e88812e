"""Entry point: ``python -m benchmarks.run [--quick] [--only NAME[,NAME]] [--libs LIB[,LIB]]
[--plot DIR]``.

Runs every workload (from every ``benchmarks/bench_*.py`` module's ``WORKLOADS``)
with the hand-written NumPy floor and each available library, in this one
process, and prints one table row per (workload, library): median time per call,
its ratio to the floor measured in the same run, and, where measured, peak memory
as a multiple of the input's size.  It asserts nothing; it measures.
"""

from __future__ import annotations

# Importing the package first pins every runtime to one thread; it must precede
# the first numpy/torch/jax import, so keep this the first import.
import benchmarks  # noqa: F401  (side effect: thread pinning)

import argparse
import importlib
import importlib.metadata
import os
import pkgutil
import platform
import sys
import time
import traceback

from . import plot
from .harness import Settings, Timing, compare, peak_memory, time_call
from .peers import ORDER, load_peers, thread_report


def discover_workloads() -> dict:
    """name -> factory, collected from each benchmarks.bench_* module in name order.

    One module per area (engine, jit, vmap, ...) keeps each file about one thing;
    adding a module with a WORKLOADS dict is all it takes to join the table.
    """
    found = {}
    for info in sorted(pkgutil.iter_modules(benchmarks.__path__), key=lambda m: m.name):
        if info.name.startswith("bench_"):
            module = importlib.import_module(f"benchmarks.{info.name}")
            for name, factory in getattr(module, "WORKLOADS", {}).items():
                if name in found:
                    raise RuntimeError(f"workload {name!r} defined twice (in {info.name})")
                found[name] = factory
    return found


def select(names: list[str], wanted: str | None, what: str) -> list[str]:
    """Names matching a comma-separated list of exact names or prefixes."""
    if not wanted:
        return names
    keys = [w.strip() for w in wanted.split(",") if w.strip()]
    chosen = [n for n in names if any(n == k or n.startswith(k) for k in keys)]
    if not chosen:
        sys.exit(f"--{what} {wanted!r} matches nothing; choose from: {', '.join(names)}")
    return chosen


# --- formatting -----------------------------------------------------------------------

def fmt_time(seconds: float) -> str:
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def fmt_ratio(r: float) -> str:
    return f"{r:.2f}x" if r < 100 else f"{r:.0f}x"


def fmt_bytes(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


COLUMNS = (("workload", 12), ("library", 11), ("time/call", 10), ("spread", 7),
           ("vs floor", 9), ("peak mem", 9), ("mem/input", 9),
           ("work/input", 10), ("note", 0))


def row(*cells) -> str:
    parts = []
    for (_, width), cell in zip(COLUMNS, cells):
        parts.append(f"{cell:<{width}}" if width else str(cell))
    return "  ".join(parts).rstrip()


# --- running ----------------------------------------------------------------------------

def measure(workload, lib: str, fn, floor_result, floor_time: Timing | None, peer,
            settings: Settings, warnings: list[str]) -> tuple[str, Timing | None]:
    """Check, time and (for NumPy-based libraries) weigh one callable.

    Returns the table row and the timing (None if the callable raised).
    """
    note = ""
    try:
        result = fn()  # correctness check, outside the timing
    except Exception as exc:  # noqa: BLE001 - one library failing must not stop the table
        warnings.append(f"{workload.name} / {lib}: {type(exc).__name__}: {exc}\n"
                        + "".join(traceback.format_exception(exc)[-3:]).rstrip())
        return row(workload.name, lib, "-", "", "", "", "", "",
                   f"error: {type(exc).__name__}"), None
    if workload.unchecked:
        note = f"unchecked: {workload.unchecked}"
    elif floor_result is not None:
        mismatch = compare(result, floor_result)
        if mismatch:
            warnings.append(f"WARNING {workload.name} / {lib}: result differs from floor: "
                            f"{mismatch}")
            note = "MISMATCH vs floor"
    del result

    timing = time_call(fn, settings)
    # The floor row passes floor_time=None and is 1.00x by definition.
    ratio = fmt_ratio(timing.seconds / floor_time.seconds) if floor_time else "1.00x"
    mem = mem_ratio = work_ratio = ""
    if workload.input_nbytes:
        if peer.numpy_based:
            peak, result_bytes = peak_memory(fn)
            mem = fmt_bytes(peak)
            mem_ratio = f"{peak / workload.input_nbytes:.2f}x"
            work_ratio = f"{(peak - result_bytes) / workload.input_nbytes:.2f}x"
        else:
            mem = "n/a"  # allocates outside NumPy; tracemalloc cannot see it
    return (row(workload.name, lib, fmt_time(timing.seconds), f"±{timing.spread * 50:.0f}%",
                ratio, mem, mem_ratio, work_ratio, note), timing)


def _rows(builders):
    """(row label, builder) in library order; variants follow their library's row."""
    def rank(label):
        lib = label.split("-")[0]
        return (ORDER.index(lib) if lib in ORDER else len(ORDER), label != lib)
    return sorted(builders.items(), key=lambda item: rank(item[0]))


def run_workload(workload, peers, settings: Settings, warnings: list[str],
                 results: list | None = None) -> None:
    """Print the workload's rows; append ``(workload, library, seconds, ratio)``
    for each timed row to ``results`` (for --plot)."""
    results = [] if results is None else results
    floor_result = workload.floor()
    line, floor_time = measure(workload, "numpy", workload.floor, None, None,
                               peers["numpy"], settings, warnings)
    print(line, flush=True)
    if floor_time is None:
        return  # the floor itself failed: there is nothing to take ratios against
    results.append((workload.name, "numpy", floor_time.seconds, 1.0))
    for lib, builder in _rows(workload.builders):
        # "fgrad-eager" is a second fgrad row: the part before '-' names the library
        peer = peers.get(lib.split("-")[0])
        if peer is None or not peer.available:
            continue
        try:
            fn = builder(peer)
        except Exception as exc:  # noqa: BLE001
            warnings.append(f"{workload.name} / {lib}: building the callable failed: "
                            f"{type(exc).__name__}: {exc}")
            print(row(workload.name, lib, "-", "", "", "", "", "", f"error: {type(exc).__name__}"),
                  flush=True)
            continue
        line, timing = measure(workload, lib, fn, floor_result, floor_time, peer, settings,
                               warnings)
        print(line, flush=True)
        if timing is not None:
            results.append((workload.name, lib, timing.seconds,
                            timing.seconds / floor_time.seconds))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="shorter timing loops and fewer repeats "
                             "(whole run well under a minute)")
    parser.add_argument("--only", metavar="NAME",
                        help="comma-separated workload names or prefixes")
    parser.add_argument("--libs", metavar="LIB",
                        help="comma-separated libraries to run besides the floor "
                             f"({', '.join(ORDER[1:])})")
    parser.add_argument("--list", action="store_true", help="list workloads and exit")
    parser.add_argument("--best", action="store_true",
                        help="report each row's fastest repeat instead of the median "
                             "(steadier on a shared machine)")
    parser.add_argument("--plot", metavar="DIR",
                        help="also write DIR/benchmarks.json (the run's figures), "
                             "DIR/benchmarks.svg (a chart of the ratios to the floor, one "
                             "panel per group of workloads; needs matplotlib) and "
                             "DIR/benchmarks.md (one Markdown table per group)")
    args = parser.parse_args(argv)

    factories = discover_workloads()
    if args.list:
        for name, factory in factories.items():
            print(f"{name:14} {factory().description}")
        return
    names = select(list(factories), args.only, "only")
    libs = ["numpy"] + select(list(ORDER[1:]), args.libs, "libs")
    settings = Settings.quick() if args.quick else Settings()
    settings.best = args.best

    started = time.perf_counter()
    peers = load_peers(libs)
    header = [f"fgrad benchmarks ({'quick' if args.quick else 'full'}): "
              f"loops of ~{settings.target * 1e3:.0f} ms, "
              f"{'best' if settings.best else 'median'} of {settings.repeats}, "
              f"float64, one thread",
              f"python {platform.python_version()} on {platform.machine()} "
              f"({os.cpu_count()} cores), {thread_report(peers)}"]
    for peer in peers.values():
        status = peer.version if peer.available else peer.reason
        header.append(f"  {peer.name + ':':10} {status}")
    if "fgrad" in peers:
        try:            # fgrad.jit's compiler; read without importing it
            header.append(f"  {'llvmlite:':10} {importlib.metadata.version('llvmlite')} "
                          "(fgrad's jit extra)")
        except importlib.metadata.PackageNotFoundError:
            header.append(f"  {'llvmlite:':10} not installed: jit runs unfused")
    print("\n".join(header))
    print()

    workloads = [factories[name]() for name in names]
    print("workloads:")
    for w in workloads:
        print(f"  {w.name:12} {w.description}")
    print()
    print("floor = hand-written NumPy gradient (row 'numpy'); 'vs floor' = time / floor time;")
    print("spread = half the (max-min) range of the repeats; "
          "mem = tracemalloc peak during one call.")
    print()
    print(row(*(title for title, _ in COLUMNS)))
    print(row(*("-" * max(width, len(title)) for title, width in COLUMNS)))

    warnings: list[str] = []
    results: list = []
    for w in workloads:
        run_workload(w, peers, settings, warnings, results)
    if args.plot:
        for path in plot.write(args.plot, results, header):
            print(f"wrote {path}")

    print()
    for message in warnings:
        print(message)
    print(f"total {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
