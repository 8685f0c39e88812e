"""What jit's compiling costs, call by call, from a fresh process: ``python -m benchmarks.compile_cost``.

Each row is the program of a jit row of `benchmarks.run` (``jit-compile``: its
1,000-equation program as one jitted function), called ``--calls`` times (50)
in fresh processes:

- fgrad, ``compile="background"`` (the default), an empty kernel cache;
- fgrad, ``compile="background"``, a second process on the cache the first
  filled;
- fgrad, ``compile="sync"`` (the plotted rows, jit-rnn and jit-chain): every
  compile on the calling thread at the first call (the kernels and the
  program);
- fgrad, ``compile="never"``: NumPy calls, nothing compiled;
- jax.jit, when jax is installed.

Columns (times are the best of ``--repeats`` runs, default 3):

- ``interp``: a steady interpreted call (``compile="never"``, after the
  calls); ``compiled``: a steady call of the background process once its
  compiles under way are done (``tier``: the tier it then runs; the whole
  graph compiles only once the calls have taken as long, docs/jit.md);
- ``worst bg``: the slowest of the background process's calls from the second
  on (the first also stages the program, as every jit's first call does:
  ``1st bg`` and ``1st never`` give both first calls), and ``bound``, 2 x
  ``interp`` + 50 ms (``worst never``: the slowest interpreted call, what
  the machine alone adds);
- ``compile``: the seconds every tier's compile took, on every thread (the
  compiler's start-up apart: ``start-up``, LLVM's), in the background
  process; ``jax``: jax.jit's
  compile, its first call less a steady call (tracing, lowering and XLA's
  compile; JAX's start-up apart: ``jax start``), and the ratio;
- ``compile cpu``, ``jax cpu``, ``cpu ratio``: the same in CPU time (the
  compiling thread's; jax.jit's first call's, all threads, less a steady
  call's), which a busy machine leaves alike where it stretches times;
- ``warm: fast at``: in the second process, the seconds from its first call
  to the first call that ran the last tier; ``warm 1st``: its first call;
  ``fast at``: the same in the background (first) process;
- ``program``, ``program cpu``: the program tier's compile alone (its
  lowering included: `fgrad.compiler.program`), in time and CPU time, in
  the background process; ``warm program``: the same tier in the second
  process, which loads its machine code from the disk cache (``warm
  loaded``: "yes" where every second process did, "no" where one compiled
  it again).

``--plot DIR`` also writes ``DIR/compile_calls.svg``: the time of each of the
first calls of jit-rnn and jit-chain, background and sync against jax.jit
(`benchmarks.plot.calls_chart`), and ``--before PATH`` adds the same calls
run by the fgrad checked out at PATH (its default mode) to it. ``--json FILE``
keeps every run's figures, and ``--load FILE`` prints their table (and plot)
again without running anything.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import types

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = ("jit-chain", "jit-rnn", "jit-scan", "jit-mlp8", "jit-elem", "jit-compile")
# the rows of the plot, whose calls are also run with compile="sync" (and --before)
PLOTTED = ("jit-rnn", "jit-chain")
COMPILE_EQNS = 1000


def program(row, lib, xp, **options):
    """``(jitted function, arguments)`` of ``row`` written with ``lib`` (fgrad
    or jax) and its NumPy namespace ``xp``; ``options`` go to ``lib.jit``."""
    from benchmarks import bench_engine as engine
    from benchmarks import bench_jit as jit_rows
    rng = np.random.default_rng(engine.RNG_SEED)
    if row == "jit-chain":
        loss, args = engine.chain_function(xp), (rng.standard_normal(engine.CHAIN_SIZE),)
    elif row in ("jit-rnn", "jit-scan"):
        params = (rng.standard_normal((jit_rows.RNN_HIDDEN, jit_rows.RNN_HIDDEN))
                  / np.sqrt(jit_rows.RNN_HIDDEN),
                  rng.standard_normal((jit_rows.RNN_INPUT, jit_rows.RNN_HIDDEN))
                  / np.sqrt(jit_rows.RNN_INPUT))
        xs = rng.standard_normal((jit_rows.RNN_STEPS, jit_rows.RNN_BATCH, jit_rows.RNN_INPUT))
        loss = jit_rows.rnn_loss_function(xp) if row == "jit-rnn" else \
            jit_rows.rnn_scan_loss_function(types.SimpleNamespace(np=xp, module=lib))
        args = (params, xs)
    elif row == "jit-mlp8":
        n_in, n_hidden, n_out = engine.MLP_SIZES
        params = (rng.standard_normal((n_in, n_hidden)) / np.sqrt(n_in),
                  0.1 * rng.standard_normal(n_hidden),
                  rng.standard_normal((n_hidden, n_out)) / np.sqrt(n_hidden),
                  0.1 * rng.standard_normal(n_out))
        x = rng.standard_normal((jit_rows.MLP8_BATCH, n_in))
        onehot = np.eye(n_out)[rng.integers(0, n_out, jit_rows.MLP8_BATCH)]
        loss, args = engine.mlp_loss_function(xp), (params, x, onehot)
    elif row == "jit-elem":
        loss = engine.elementwise_function(xp)
        args = (rng.standard_normal(engine.ELEMENTWISE_SIZE),)
    elif row == "jit-compile":
        cycle = (lambda v: xp.sin(v), lambda v: v * 1.01, lambda v: v + 0.1,
                 lambda v: xp.tanh(v))

        def f(v):
            for i in range(COMPILE_EQNS):
                v = cycle[i % len(cycle)](v)
            return v
        return lib.jit(f, **options), (xp.asarray(rng.standard_normal(engine.CHAIN_SIZE)),)
    else:
        raise ValueError(f"no program {row!r}: one of {', '.join(ROWS)}")
    convert = (lambda a: a) if lib.__name__ == "fgrad" else xp.asarray
    args = tuple(tuple(map(convert, a)) if isinstance(a, tuple) else convert(a) for a in args)
    return lib.jit(lib.grad(loss), **options), args


# a fresh process: the first calls, each timed, then the steady call
_FGRAD = """
import json, statistics, sys, time
start = time.perf_counter()
import numpy as np, fgrad, fgrad.numpy as fnp
from benchmarks.compile_cost import program
row, mode, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
f, args = program(row, fgrad, fnp, **({{}} if mode == "default" else {{"compile": mode}}))
times, tiers, at = [], [], []
first = time.perf_counter()
{loop}
try:            # the compiles under way finish (none is started)
    from fgrad.compiler.tiers import wait_all
    wait_all()
except ImportError:
    pass
steady = []
for _ in range(30):
    t = time.perf_counter()
    f(*args)
    steady.append(time.perf_counter() - t)
info = f.compile_info() if hasattr(f, "compile_info") else []
seconds, cpu = {{}}, {{}}
for record in info:
    for tier, s in record.seconds.items():
        seconds[tier] = seconds.get(tier, 0.0) + s
    for tier, s in getattr(record, "cpu_seconds", {{}}).items():
        cpu[tier] = cpu.get(tier, 0.0) + s
final = info[0].tier if info else None
fast_at = next((a for a, tier in zip(at, tiers) if tier == final), None)
# the whole program, where one was built: compiled, or loaded from the disk cache
built = getattr(f.lower(*args), "program", None) if info else None
loaded = built.native.loaded if built is not None else None
print(json.dumps({{"times": times, "steady": statistics.median(steady[10:]), "tier": final,
                  "cpu": cpu, "seconds": seconds, "tiers": tiers, "fast_at": fast_at,
                  "program loaded": loaded}}))
"""

# the calls, and more (untimed) until no compile is under way, so that the
# time to the last tier is known (at most 60 s)
_LOOP = """
def tier():
    info = f.compile_info()
    return (info[0].tier, info[0].compiling) if info else ("numpy", False)
while True:
    t = time.perf_counter()
    f(*args)
    done = time.perf_counter()
    now, compiling = tier()
    if len(times) < calls:
        times.append(done - t)
    tiers.append(now)
    at.append(t - first)
    if len(times) >= calls and (not compiling or done - first > 60):
        break
"""

# the fgrad checked out at another path (--before): no tiers, no compile_info
_LOOP_BEFORE = """
for _ in range(calls):
    t = time.perf_counter()
    f(*args)
    times.append(time.perf_counter() - t)
"""

_JAX = """
import json, statistics, sys, time
start = time.perf_counter()
import numpy as np, jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
jnp.zeros(2).block_until_ready()
startup = time.perf_counter() - start
from benchmarks.compile_cost import program
row, calls = sys.argv[1], int(sys.argv[2])
f, args = program(row, jax, jnp)
times, cpu = [], []
for _ in range(calls + 20):
    t, c = time.perf_counter(), time.process_time()
    jax.block_until_ready(f(*args))
    times.append(time.perf_counter() - t)
    cpu.append(time.process_time() - c)
steady = statistics.median(times[calls:])
print(json.dumps({"times": times[:calls], "steady": steady, "startup": startup,
                  "compile": times[0] - steady,
                  "compile cpu": cpu[0] - statistics.median(cpu[calls:])}))
"""

def _run(code, args, env=None, path=None):
    """Run ``code`` in a fresh interpreter; its last line of output, read as
    JSON. ``path``: import fgrad from that checkout (these benchmarks still)."""
    environment = {**os.environ, **(env or {})}
    cwd = ROOT
    if path is not None:
        cwd = tempfile.mkdtemp(prefix="fgrad-before-")
        os.symlink(os.path.join(ROOT, "benchmarks"), os.path.join(cwd, "benchmarks"))
        environment["PYTHONPATH"] = path
    try:
        done = subprocess.run([sys.executable, "-c", code, *map(str, args)],
                              env=environment, capture_output=True, text=True, timeout=900,
                              cwd=cwd)
    finally:
        if path is not None:
            shutil.rmtree(cwd, ignore_errors=True)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(row, calls, repeats, have_jax, before=None):
    """Every process of one row, ``repeats`` times: {series: [runs]}."""
    runs = {}
    loop = _FGRAD.format(loop=_LOOP)
    for _ in range(repeats):
        cache = tempfile.mkdtemp(prefix="fgrad-kernels-")
        try:
            env = {"FGRAD_KERNEL_CACHE": os.path.join(cache, "k")}
            runs.setdefault("background", []).append(_run(loop, [row, "background", calls], env))
            runs.setdefault("warm", []).append(_run(loop, [row, "background", calls], env))
            shutil.rmtree(cache, ignore_errors=True)
            if row in PLOTTED:
                runs.setdefault("sync", []).append(_run(loop, [row, "sync", calls], env))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        runs.setdefault("never", []).append(_run(loop, [row, "never", calls]))
        if have_jax:
            runs.setdefault("jax", []).append(_run(_JAX, [row, calls]))
        if before is not None:
            cache = tempfile.mkdtemp(prefix="fgrad-kernels-")
            try:
                runs.setdefault("before", []).append(_run(
                    _FGRAD.format(loop=_LOOP_BEFORE), [row, "default", calls],
                    {"FGRAD_KERNEL_CACHE": os.path.join(cache, "k")}, path=before))
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    return runs


def summary(runs):
    """The columns of one row (see the module's docstring), from `measure`'s runs."""
    def best(series, pick):
        values = [pick(r) for r in runs.get(series, [])]
        values = [v for v in values if v is not None]
        return min(values) if values else float("nan")
    interp = best("never", lambda r: r["steady"])
    # a compiler's start-up (LLVM's) is counted apart, as JAX's is
    compile_s = best("background", lambda r: sum(s for t, s in r["seconds"].items()
                                                 if not t.endswith("start-up")))
    jax_compile = best("jax", lambda r: r["compile"])
    compile_cpu = best("background", lambda r: sum(s for t, s in r.get("cpu", {}).items()
                                                   if not t.endswith("start-up")))
    jax_cpu = best("jax", lambda r: r["compile cpu"])
    tiers = [r.get("tier") for r in runs.get("background", [])]
    return {
        "tier": tiers[0] if tiers else None,
        "interp": interp,
        "compiled": best("background", lambda r: r["steady"]),
        "first bg": best("background", lambda r: r["times"][0]),
        "first never": best("never", lambda r: r["times"][0]),
        "worst bg": best("background", lambda r: max(r["times"][1:])),
        "worst never": best("never", lambda r: max(r["times"][1:])),
        "bound": 2 * interp + 0.05,
        "worst sync": best("sync", lambda r: max(r["times"][1:])),
        "fast at": best("background", lambda r: r["fast_at"]),
        "compile": compile_s,
        "start-up": best("background", lambda r: sum(s for t, s in r["seconds"].items()
                                                     if t.endswith("start-up")) or None),
        "jax": jax_compile,
        "ratio": compile_s / jax_compile if jax_compile == jax_compile else float("nan"),
        "compile cpu": compile_cpu,
        "jax cpu": jax_cpu,
        "cpu ratio": compile_cpu / jax_cpu if jax_cpu == jax_cpu else float("nan"),
        "jax start": best("jax", lambda r: r["startup"]),
        "program": best("background", lambda r: r["seconds"].get("program")),
        "program cpu": best("background", lambda r: r.get("cpu", {}).get("program")),
        "warm program": best("warm", lambda r: r["seconds"].get("program")),
        "warm loaded": _loaded(runs.get("warm", [])),
        "warm fast at": best("warm", lambda r: r["fast_at"]),
        "warm first": best("warm", lambda r: r["times"][0]),
    }


_COLUMNS = (("tier", ""), ("interp", "ms"), ("compiled", "ms"), ("first bg", "ms"),
            ("first never", "ms"), ("worst bg", "ms"), ("worst never", "ms"), ("bound", "ms"),
            ("worst sync", "s"), ("fast at", "s"), ("compile", "s"),
            ("start-up", "s"), ("jax", "s"), ("ratio", "x"), ("compile cpu", "s"),
            ("jax cpu", "s"), ("cpu ratio", "x"), ("jax start", "s"),
            ("warm fast at", "s"), ("warm first", "ms"), ("program", "s"),
            ("program cpu", "s"), ("warm program", "s"), ("warm loaded", ""))


def _loaded(warm_runs):
    """Whether the second processes loaded the program from the disk cache:
    "yes" (every one), "no" (any compiled it again), "—" (no program)."""
    loaded = [r.get("program loaded") for r in warm_runs]
    if not loaded or None in loaded:
        return "—"
    return "yes" if all(loaded) else "no"


def _cell(value, unit):
    if not unit:
        return str(value)
    if value != value:
        return "—"
    if unit == "ms":
        return f"{value * 1e3:.2f}"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:.3f}"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compile_cost",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rows", default=",".join(ROWS),
                        help="comma-separated rows (default: all)")
    parser.add_argument("--plot", metavar="DIR", help="write DIR/compile_calls.svg")
    parser.add_argument("--before", metavar="PATH",
                        help="an older fgrad checkout whose calls the plot shows too")
    parser.add_argument("--json", metavar="FILE", help="write every run's figures")
    parser.add_argument("--load", metavar="FILE",
                        help="print the table (and --plot) from a --json file, running nothing")
    args = parser.parse_args(argv)
    if args.load:
        with open(args.load, encoding="utf-8") as f:
            everything = json.load(f)
        _table(everything)
        _plot(everything, args.plot)
        return
    try:
        import jax  # noqa: F401
        have_jax = True
    except ImportError:
        have_jax = False
    everything = {}
    for row in args.rows.split(","):
        everything[row] = measure(row, args.calls, args.repeats, have_jax,
                                         args.before if row in PLOTTED else None)
        if args.json:               # after each row: a long run keeps what it measured
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(everything, f)
    _table(everything)
    _plot(everything, args.plot)


def _table(everything):
    print("| row | " + " | ".join(f"{name} ({unit})" if unit else name
                                  for name, unit in _COLUMNS) + " |")
    print("|---|" + "---:|" * len(_COLUMNS))
    for row, runs in everything.items():
        figures = summary(runs)
        print(f"| {row} | " + " | ".join(_cell(figures[name], unit)
                                         for name, unit in _COLUMNS) + " |", flush=True)


def _plot(everything, directory):
    if directory:
        from benchmarks.plot import calls_chart
        path = os.path.join(directory, "compile_calls.svg")
        calls_chart({row: runs for row, runs in everything.items() if row in PLOTTED}, path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
