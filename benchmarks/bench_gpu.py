"""GPU workloads (CuPy): ``python -m benchmarks.bench_gpu [--repeat N] [--dtype float32]``.

Not part of ``benchmarks.run`` (whose floor is host NumPy): this script needs
CuPy and a CUDA device, and prints one line saying it was skipped when either
is missing. It measures, and asserts nothing; the targets below come from the
GPU issue and are printed beside the measured ratios.

Workloads:
  gpu-chain   ``jit(grad)`` of a 20-op elementwise chain over 10^7 elements, whose
              forward and backward passes jit fuses into one generated CuPy kernel,
              against eager ``fgrad.grad`` on CuPy (one kernel per op) and eager
              PyTorch CUDA autograd. Target: fused at least 3x faster than eager.
  gpu-mlp     gradient of a one-hidden-layer tanh MLP (batch 1024, 4096-4096-10,
              softmax cross-entropy): fgrad ``jit(grad)`` and eager ``grad`` on CuPy
              against PyTorch CUDA autograd. Target: within 1.3x of PyTorch.

Each time is the median over ``--repeat`` calls after two warm-up calls, with
the device synchronised before the clock stops.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

CHAIN_SIZE = 10 ** 7
MLP_BATCH, MLP_IN, MLP_HIDDEN, MLP_OUT = 1024, 4096, 4096, 10
SEED = 0


def _gpu():
    """(cupy, device name) or (None, why not)."""
    try:
        import cupy
    except ImportError as err:
        return None, f"CuPy is not installed ({err})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None, "CuPy found no CUDA device"
        props = cupy.cuda.runtime.getDeviceProperties(0)
    except Exception as err:                     # no driver, no device
        return None, f"no usable CUDA device ({type(err).__name__}: {err})"
    name = props["name"]
    return cupy, name.decode() if isinstance(name, bytes) else name


def _median_time(fn, sync, repeat):
    fn()
    fn()
    sync()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def chain(xp):
    """20 elementwise ops (4 x sin, *, *, +, tanh), then a sum."""
    def f(x):
        for k in range(4):
            x = xp.tanh(xp.sin(x) * (1.0 + 0.1 * k) + x * 0.5)
        return xp.sum(x)
    return f


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def bench_chain(cupy, dtype, repeat, rows):
    import fgrad
    import fgrad.numpy as fnp
    from fgrad.compiler.fusion import fused_elementwise_p

    host = np.random.default_rng(SEED).standard_normal(CHAIN_SIZE).astype(dtype)
    x = cupy.asarray(host)
    sync = cupy.cuda.Device().synchronize
    f = chain(fnp)
    fused = fgrad.jit(fgrad.grad(f))
    eager = fgrad.grad(f)
    n_kernels = sum(e.prim is fused_elementwise_p for e in fused.lower(x).optimized.eqns)
    diff = float(cupy.max(cupy.abs(fused(x) - eager(x))))
    t_eager = _median_time(lambda: eager(x), sync, repeat)
    t_fused = _median_time(lambda: fused(x), sync, repeat)
    rows.append(("gpu-chain", "fgrad eager grad (CuPy)", t_eager, 1.0))
    rows.append(("gpu-chain", f"fgrad jit(grad), {n_kernels} fused kernel(s)", t_fused,
                 t_eager / t_fused))
    torch = _torch()
    if torch is not None:
        xt = torch.tensor(host, device="cuda", requires_grad=True)
        ft = chain(torch)

        def torch_grad():
            (g,) = torch.autograd.grad(ft(xt), xt)
            return g
        t_torch = _median_time(torch_grad, torch.cuda.synchronize, repeat)
        rows.append(("gpu-chain", "PyTorch CUDA eager autograd", t_torch,
                     t_eager / t_torch))
    print(f"gpu-chain: max |jit - eager| = {diff:.3g}; target: jit(grad) >= 3x "
          "faster than eager fgrad on CuPy")


def bench_mlp(cupy, dtype, repeat, rows):
    import fgrad
    import fgrad.numpy as fnp

    rng = np.random.default_rng(SEED)
    host = {
        "w1": (rng.standard_normal((MLP_IN, MLP_HIDDEN)) / np.sqrt(MLP_IN)).astype(dtype),
        "b1": np.zeros(MLP_HIDDEN, dtype),
        "w2": (rng.standard_normal((MLP_HIDDEN, MLP_OUT)) / np.sqrt(MLP_HIDDEN))
        .astype(dtype),
        "b2": np.zeros(MLP_OUT, dtype),
    }
    x_host = rng.standard_normal((MLP_BATCH, MLP_IN)).astype(dtype)
    y_host = rng.integers(0, MLP_OUT, MLP_BATCH)
    params, x, y = fgrad.device_put((host, x_host, y_host), "gpu")
    sync = cupy.cuda.Device().synchronize

    def loss(p, x, y):
        h = fnp.tanh(x @ p["w1"] + p["b1"])
        return fgrad.nn.cross_entropy(h @ p["w2"] + p["b2"], y)
    jitted = fgrad.jit(fgrad.grad(loss))
    eager = fgrad.grad(loss)
    t_jit = _median_time(lambda: jitted(params, x, y), sync, repeat)
    t_eager = _median_time(lambda: eager(params, x, y), sync, repeat)
    torch = _torch()
    t_torch = None
    if torch is not None:
        tp = {k: torch.tensor(v, device="cuda", requires_grad=True)
              for k, v in host.items()}
        xt = torch.tensor(x_host, device="cuda")
        yt = torch.tensor(y_host, device="cuda")

        def torch_grad():
            h = torch.tanh(xt @ tp["w1"] + tp["b1"])
            out = torch.nn.functional.cross_entropy(h @ tp["w2"] + tp["b2"], yt)
            return torch.autograd.grad(out, list(tp.values()))
        t_torch = _median_time(torch_grad, torch.cuda.synchronize, repeat)
    base = t_torch or t_jit
    if t_torch is not None:
        rows.append(("gpu-mlp", "PyTorch CUDA eager autograd", t_torch, 1.0))
    rows.append(("gpu-mlp", "fgrad jit(grad) (CuPy)", t_jit, t_jit / base))
    rows.append(("gpu-mlp", "fgrad eager grad (CuPy)", t_eager, t_eager / base))
    print("gpu-mlp: ratios are time / PyTorch's (lower is better); target: jit(grad) "
          "within 1.3x of PyTorch" if t_torch else
          "gpu-mlp: PyTorch CUDA not available; ratios are to fgrad jit(grad)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--only", default="chain,mlp")
    args = parser.parse_args(argv)
    cupy, device = _gpu()
    if cupy is None:
        print(f"bench_gpu: skipped: {device}. These workloads need CuPy and a CUDA GPU.")
        return 0
    print(f"bench_gpu on {device}, dtype {args.dtype}, median of {args.repeat} calls")
    rows = []
    only = set(args.only.split(","))
    if "chain" in only:
        bench_chain(cupy, np.dtype(args.dtype), args.repeat, rows)
    if "mlp" in only:
        bench_mlp(cupy, np.dtype(args.dtype), args.repeat, rows)
    print("ratio: gpu-chain rows are eager fgrad's time / this row's (speedup); "
          "gpu-mlp rows are this row's time / PyTorch's")
    print(f"{'workload':<10} {'library':<44} {'ms':>10} {'ratio':>8}")
    for workload, lib, seconds, ratio in rows:
        print(f"{workload:<10} {lib:<44} {seconds * 1e3:>10.3f} {ratio:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
