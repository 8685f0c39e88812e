"""Compile cost of jit in fresh processes: ``python -m benchmarks.compile_cost``.

The ``jit-compile`` row of `benchmarks.run` repeats the first call in one
process, where fused kernels come from the in-memory cache after the first
time. This measures what a user meets: a fresh interpreter calling a jitted
1,000-equation program (``jit-compile``'s) and ``jit(grad)`` of the 200-op
chain (``jit-chain``'s) ten times, timed from the first call. fgrad runs a
graph it can compile whole equation by equation for its first nine calls and
compiles it at the tenth (docs/jit.md), so its figures are the first call and
the tenth:

- fgrad, empty kernel cache (a new private directory);
- fgrad, a second process on the cache the first one filled;
- fgrad with ``FGRAD_JIT_FUSE=0`` (NumPy calls, nothing to compile): first call;
- jax.jit, when jax is installed: first call (it compiles there).

Each compiler has a start-up that every process using it pays once, whatever
it compiles or loads: for numba, importing it and filling its CPU target's
registries (which import SciPy's BLAS bindings when SciPy is installed); for
JAX, importing it and starting its CPU backend. Both are measured on their
own, before the timed calls, and reported in their own columns, so the
compile and cache figures are the work of that program alone; add the
start-up column for what a fresh process pays in all.

Each figure is the best of ``--repeats`` fresh processes (default 3).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

_PROGRAMS = {
    "jit-compile": """
def program(xp, lib):
    cycle = (lambda v: xp.sin(v), lambda v: v * 1.01, lambda v: v + 0.1,
             lambda v: xp.tanh(v))
    def f(v):
        for i in range(1000):
            v = cycle[i % 4](v)
        return v
    return lib.jit(f)
""",
    "jit-chain": """
from benchmarks.bench_engine import chain_function
def program(xp, lib):
    return lib.jit(lib.grad(chain_function(xp)))
""",
}

_FGRAD = """
import os, time, numpy as np, fgrad, fgrad.numpy as fnp
{program}
start = time.perf_counter()
if os.environ["FGRAD_JIT_FUSE"] == "1":
    import numba
    from numba.core.registry import cpu_target
    cpu_target.target_context.refresh()
startup = time.perf_counter() - start
x = np.random.default_rng(0).standard_normal(16)
f = program(fnp, fgrad)
seconds = []
for _ in range(10):
    t = time.perf_counter()
    f(x)
    seconds.append(time.perf_counter() - t)
print(startup, seconds[0], seconds[-1])
"""

_JAX = """
import time, numpy as np
start = time.perf_counter()
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
x = jnp.asarray(np.random.default_rng(0).standard_normal(16))
startup = time.perf_counter() - start
{program}
f = program(jnp, jax)
t = time.perf_counter()
f(x).block_until_ready()
print(startup, time.perf_counter() - t)
"""


def _seconds(code, env):
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=600,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    return [float(word) for word in done.stdout.strip().splitlines()[-1].split()]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compile_cost",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    try:
        import jax  # noqa: F401
        have_jax = True
    except ImportError:
        have_jax = False
    print(f"{'program':12}  {'numba start':>11}  {'cold: 1st':>10}  {'10th':>7}  "
          f"{'2nd process: 1st':>16}  {'10th':>7}  {'unfused':>8}  {'jax start':>9}  "
          f"{'jax.jit':>8}")
    for name, program in _PROGRAMS.items():
        fgrad_code = _FGRAD.format(program=program)
        cold, warm = [], []
        for _ in range(args.repeats):
            cache = tempfile.mkdtemp(prefix="fgrad-kernels-")
            try:
                env = {"FGRAD_KERNEL_CACHE": os.path.join(cache, "k"), "FGRAD_JIT_FUSE": "1"}
                cold.append(_seconds(fgrad_code, env))
                warm.append(_seconds(fgrad_code, env))
            finally:
                shutil.rmtree(cache, ignore_errors=True)
        unfused = [_seconds(fgrad_code, {"FGRAD_JIT_FUSE": "0"})
                   for _ in range(args.repeats)]
        jax_runs = ([_seconds(_JAX.format(program=program), {})
                     for _ in range(args.repeats)] if have_jax else [[float("nan")] * 2])
        best = (lambda runs, k: min(r[k] for r in runs))
        print(f"{name:12}  {best(cold + warm, 0):>10.3f}s  {best(cold, 1):>9.3f}s  "
              f"{best(cold, 2):>6.3f}s  {best(warm, 1):>15.3f}s  {best(warm, 2):>6.3f}s  "
              f"{best(unfused, 1):>7.3f}s  {best(jax_runs, 0):>8.3f}s  "
              f"{best(jax_runs, 1):>7.3f}s", flush=True)


if __name__ == "__main__":
    main()
