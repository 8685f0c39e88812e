"""What compiling an ODE row costs: ``python -m benchmarks.ode_compile [--only ROWS]``.

For each jitted row of `benchmarks.bench_ode` and each library, in a fresh
process (fgrad's kernel cache an empty directory, so nothing is loaded from
disk): the seconds from the first call until the code that the timed calls
run is ready, in time and in the process's CPU time (every thread's).
fgrad's rows build their function, call it once and wait for its compiles
(``wait_compiled``); ``compile`` is the seconds jit's compiles took
(`fgrad.jit`'s ``compile_info``: the program, its kernels and LLVM's
start-up). JAX's and diffrax's rows time the first call of their
``jax.jit``'d function (tracing, lowering and XLA's compile), less a steady
call. Every figure includes the library's own start-up (its first trace);
none includes importing it.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROWS = ("ode-lv-jit", "ode-lv-vmap", "ode-robertson", "ode-node-batch")


def _measure(row, lib):
    """One (row, library) in this process: a dict of seconds."""
    import benchmarks  # noqa: F401  (thread pinning, before numpy)
    from benchmarks import bench_ode
    from benchmarks.peers import load_peers
    workload = bench_ode.WORKLOADS[row]()
    peer = load_peers(("fgrad" if lib.startswith("fgrad") else "jax",))
    peer = next(iter(peer.values()))
    wall, cpu = time.perf_counter(), time.process_time()
    fn = workload.builders[lib](peer)
    fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    steady = min(_timed(fn) for _ in range(5))
    out = {"ready": wall - steady, "ready_cpu": cpu - steady}
    if lib.startswith("fgrad"):
        jitted = [c.cell_contents for c in fn.__closure__ or ()
                  if hasattr(c.cell_contents, "compile_info")]
        (info,) = jitted[0].compile_info()
        out["compile"] = sum(info.seconds.values())
        out["tier"] = info.tier
    return out


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(ROWS))
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_measure(*args.child)))
        return
    from benchmarks import bench_ode
    print(f"{'row':15s} {'library':12s} {'ready s':>8s} {'cpu s':>7s} {'compile s':>9s}  tier")
    for row in args.only.split(","):
        for lib in bench_ode.WORKLOADS[row]().builders:
            with tempfile.TemporaryDirectory() as cache:
                env = dict(os.environ, FGRAD_KERNEL_CACHE=cache)
                done = subprocess.run([sys.executable, "-m", "benchmarks.ode_compile", "--child",
                                       row, lib], env=env, capture_output=True, text=True)
            if done.returncode:
                print(f"{row:15s} {lib:12s} failed: {done.stderr.strip().splitlines()[-1]}")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            compile_s = f"{r['compile']:9.2f}" if "compile" in r else f"{'':9s}"
            print(f"{row:15s} {lib:12s} {r['ready']:8.2f} {r['ready_cpu']:7.2f} {compile_s}  "
                  f"{r.get('tier', '')}", flush=True)


if __name__ == "__main__":
    main()
