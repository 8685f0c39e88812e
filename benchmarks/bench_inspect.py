"""Parallel execution of compiled graphs: ``jit(f, parallel=True)`` against ``jit(f)``.

Run ``python -m benchmarks.bench_inspect`` from the repository root. Prints wall
time per call (median of repeats, since the point is overlapping work on
several cores) of the same jitted gradient run sequentially and in parallel,
and checks that both give identical results. BLAS is pinned to one thread by
the benchmarks package, so overlapping matmuls come from fgrad's scheduler.
Not part of ``benchmarks.run``'s table (no WORKLOADS): the floor here is fgrad's
own sequential code, not a hand-written NumPy gradient.

| name | graph |
|---|---|
| `branches` | grad of 4 independent branches of 5 x (multiply, add, tanh), summed; 10^6 elements |
| `matmuls` | grad of 4 independent chains of 3 matmuls of 1000x1000 with tanh between |
| `tiny` | grad of a chain of 200 elementwise equations on 16 elements |
"""
import benchmarks  # noqa: F401  (pins BLAS threads; first import)

import os
import statistics
import time

import numpy as np

import fgrad
import fgrad.numpy as fnp


def _branches():
    def branch(x):
        for _ in range(5):
            x = fnp.tanh(x * 1.01 + 0.1)
        return fnp.sum(x)
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=10 ** 6) for _ in range(4)]
    return (lambda a, b, c, d: branch(a) + branch(b) + branch(c) + branch(d)), xs


def _matmuls():
    rng = np.random.default_rng(0)
    n = 1000
    ws = [rng.normal(size=(n, n)) / np.sqrt(n) for _ in range(4)]
    x = rng.normal(size=(n, n))

    def chain(w):
        h = x
        for _ in range(3):
            h = fnp.tanh(h @ w)
        return fnp.sum(h)
    return (lambda a, b, c, d: chain(a) + chain(b) + chain(c) + chain(d)), ws


def _tiny():
    def f(x):
        for k in range(50):
            x = fnp.tanh(fnp.sin(x) * 1.01 + 0.1) - 0.01
        return fnp.sum(x)
    return (lambda a, b, c, d: f(a) + f(b) + f(c) + f(d)), [
        np.linspace(-1, 1, 16) * k for k in range(1, 5)]


WORKLOADS_PARALLEL = {"branches": (_branches, 10), "matmuls": (_matmuls, 3),
                      "tiny": (_tiny, 200)}


def _time(fn, args, number, repeat=7):
    fn(*args)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn(*args)
        times.append((time.perf_counter() - start) / number)
    return statistics.median(times)


def main():
    print(f"cores: {os.cpu_count()}, BLAS threads pinned to 1")
    print(f"{'workload':10s} {'sequential':>12s} {'parallel':>12s} {'speed-up':>9s}  same")
    for name, (make, number) in WORKLOADS_PARALLEL.items():
        f, args = make()
        grad = fgrad.grad(f, argnums=(0, 1, 2, 3))
        seq, par = fgrad.jit(grad), fgrad.jit(grad, parallel=True)
        same = all(np.array_equal(a, b) for a, b in zip(seq(*args), par(*args)))
        t_seq, t_par = _time(seq, args, number), _time(par, args, number)
        print(f"{name:10s} {t_seq * 1e3:10.2f}ms {t_par * 1e3:10.2f}ms "
              f"{t_seq / t_par:8.2f}x  {same}")


if __name__ == "__main__":
    main()
