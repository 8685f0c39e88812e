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
  gpu-pex     per-example gradients of logistic regression (batch 4096, 1024
              features): fgrad ``jit(vmap(grad))`` and eager ``vmap(grad)`` on CuPy
              against ``torch.func.vmap(grad)`` on CUDA.
  gpu-lenet   gradient of benchmarks.bench_nn's LeNet-5-style conv net (batch 256):
              fgrad ``jit(grad)`` and eager ``grad`` on CuPy against PyTorch CUDA.

Every workload also runs, where they are installed, ``jax.jit`` on JAX's GPU
backend and fgrad ``jit`` on host NumPy (the CPU, for scale). A row that fails
prints its error in place of a time, and the others still run.

Each time is the median over ``--repeat`` calls after two warm-up calls, with
the device synchronised before the clock stops.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

import fgrad
import fgrad.numpy as fnp
from benchmarks.bench_nn import fgrad_loss as lenet_fgrad_loss
from benchmarks.bench_nn import lenet_params
from benchmarks.bench_nn import torch_loss as lenet_torch_loss
from fgrad.compiler.fusion import fused_elementwise_p

# JAX takes most of the GPU's memory at its first use unless told not to; the
# workloads share one device with CuPy and PyTorch in this process
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# the benchmarks package keeps JAX on the CPU for the CPU suite (JAX_PLATFORMS=cpu);
# here jax.jit runs on the GPU
if os.environ.get("JAX_PLATFORMS") == "cpu":
    del os.environ["JAX_PLATFORMS"]

CHAIN_SIZE = 10 ** 7
MLP_BATCH, MLP_IN, MLP_HIDDEN, MLP_OUT = 1024, 4096, 4096, 10
PEX_BATCH, PEX_FEATURES = 4096, 1024
LENET_BATCH = 256
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


def _jax():
    """``(jax, None)`` with a GPU backend, or ``(None, why not)``."""
    try:
        import jax
    except ImportError as err:
        return None, f"JAX is not installed ({err})"
    try:
        devices = jax.devices()
    except Exception as err:          # a backend that fails to start
        return None, f"JAX {jax.__version__} did not start ({type(err).__name__}: {err})"
    if not any(d.platform == "gpu" for d in devices):
        return None, f"JAX {jax.__version__} has no GPU backend (devices: {devices})"
    return jax, None


def _jax_gpu(jax):
    return next(d for d in jax.devices() if d.platform == "gpu")


def _timed(rows, workload, library, fn, sync, repeat):
    """Append (workload, library, seconds or the error) for ``fn``."""
    try:
        rows.append((workload, library, _median_time(fn, sync, repeat)))
    except Exception as err:     # a benchmark reports a failing row, it does not stop
        rows.append((workload, library, f"failed: {type(err).__name__}: {err}"[:160]))


def _jax_row(rows, workload, make, repeat):
    """``make(jax)`` -> a function to time, on JAX's GPU backend."""
    jax, _ = _jax()
    if jax is None:
        return
    try:
        fn = make(jax)
    except Exception as err:
        rows.append((workload, "jax.jit (GPU)", f"failed: {type(err).__name__}: {err}"[:160]))
        return
    _timed(rows, workload, "jax.jit (GPU)", lambda: jax.block_until_ready(fn()),
           lambda: None, repeat)


def bench_chain(cupy, dtype, repeat, rows):
    host = np.random.default_rng(SEED).standard_normal(CHAIN_SIZE).astype(dtype)
    x = cupy.asarray(host)
    sync = cupy.cuda.Device().synchronize
    f = chain(fnp)
    fused = fgrad.jit(fgrad.grad(f))
    eager = fgrad.grad(f)
    n_kernels = sum(e.prim is fused_elementwise_p for e in fused.lower(x).optimized.eqns)
    diff = float(cupy.max(cupy.abs(fused(x) - eager(x))))
    _timed(rows, "gpu-chain", "fgrad eager grad (CuPy)", lambda: eager(x), sync, repeat)
    _timed(rows, "gpu-chain", f"fgrad jit(grad), {n_kernels} fused kernel(s)",
           lambda: fused(x), sync, repeat)
    torch = _torch()
    if torch is not None:
        xt = torch.tensor(host, device="cuda", requires_grad=True)
        ft = chain(torch)

        def torch_grad():
            (g,) = torch.autograd.grad(ft(xt), xt)
            return g
        _timed(rows, "gpu-chain", "PyTorch CUDA eager autograd", torch_grad,
               torch.cuda.synchronize, repeat)

    def jax_chain(jax):
        g, xj = jax.jit(jax.grad(chain(jax.numpy))), jax.device_put(host, _jax_gpu(jax))
        return lambda: g(xj)
    _jax_row(rows, "gpu-chain", jax_chain, repeat)
    on_host = fgrad.jit(fgrad.grad(f))
    _timed(rows, "gpu-chain", "fgrad jit(grad), host NumPy (CPU)", lambda: on_host(host),
           lambda: None, max(3, repeat // 4))
    print(f"gpu-chain: max |jit - eager| = {diff:.3g}; target: jit(grad) >= 3x "
          "faster than eager fgrad on CuPy")


def bench_mlp(cupy, dtype, repeat, rows):
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
    torch = _torch()
    if torch is not None:
        tp = {k: torch.tensor(v, device="cuda", requires_grad=True)
              for k, v in host.items()}
        xt = torch.tensor(x_host, device="cuda")
        yt = torch.tensor(y_host, device="cuda")

        def torch_grad():
            h = torch.tanh(xt @ tp["w1"] + tp["b1"])
            out = torch.nn.functional.cross_entropy(h @ tp["w2"] + tp["b2"], yt)
            return torch.autograd.grad(out, list(tp.values()))
        _timed(rows, "gpu-mlp", "PyTorch CUDA eager autograd", torch_grad,
               torch.cuda.synchronize, repeat)
    _timed(rows, "gpu-mlp", "fgrad jit(grad) (CuPy)", lambda: jitted(params, x, y), sync,
           repeat)
    _timed(rows, "gpu-mlp", "fgrad eager grad (CuPy)", lambda: eager(params, x, y), sync,
           repeat)

    def jax_mlp(jax):
        jnp = jax.numpy

        def jloss(p, x, y):
            h = jnp.tanh(x @ p["w1"] + p["b1"])
            z = h @ p["w2"] + p["b2"]
            logp = jax.nn.log_softmax(z)
            return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))
        g = jax.jit(jax.grad(jloss))
        args = jax.device_put((host, x_host, y_host), _jax_gpu(jax))
        return lambda: g(*args)
    _jax_row(rows, "gpu-mlp", jax_mlp, repeat)
    on_host = fgrad.jit(fgrad.grad(loss))
    _timed(rows, "gpu-mlp", "fgrad jit(grad), host NumPy (CPU)",
           lambda: on_host(host, x_host, y_host), lambda: None, max(3, repeat // 4))


def bench_pex(cupy, dtype, repeat, rows):
    rng = np.random.default_rng(SEED)
    w_host = (rng.standard_normal(PEX_FEATURES) * 0.1).astype(dtype)
    x_host = rng.standard_normal((PEX_BATCH, PEX_FEATURES)).astype(dtype)
    y_host = (rng.random(PEX_BATCH) > 0.5).astype(dtype)
    w, x, y = fgrad.device_put((w_host, x_host, y_host), "gpu")
    sync = cupy.cuda.Device().synchronize

    def loss(xp):
        def one(w, x, y):            # one example's logistic loss
            z = x @ w
            return xp.log1p(xp.exp(z)) - y * z
        return one
    eager = fgrad.vmap(fgrad.grad(loss(fnp)), in_axes=(None, 0, 0))
    jitted = fgrad.jit(eager)
    _timed(rows, "gpu-pex", "fgrad jit(vmap(grad)) (CuPy)", lambda: jitted(w, x, y), sync,
           repeat)
    _timed(rows, "gpu-pex", "fgrad eager vmap(grad) (CuPy)", lambda: eager(w, x, y), sync,
           repeat)
    torch = _torch()
    if torch is not None:
        try:
            from torch.func import grad as tgrad
            from torch.func import vmap as tvmap
            f = tvmap(tgrad(loss(torch)), in_dims=(None, 0, 0))
            wt, xt, yt = (torch.tensor(a, device="cuda") for a in (w_host, x_host, y_host))
            _timed(rows, "gpu-pex", "torch.func vmap(grad) (CUDA)", lambda: f(wt, xt, yt),
                   torch.cuda.synchronize, repeat)
        except ImportError:
            pass

    def jax_pex(jax):
        g = jax.jit(jax.vmap(jax.grad(loss(jax.numpy)), in_axes=(None, 0, 0)))
        args = jax.device_put((w_host, x_host, y_host), _jax_gpu(jax))
        return lambda: g(*args)
    _jax_row(rows, "gpu-pex", jax_pex, repeat)
    on_host = fgrad.jit(fgrad.vmap(fgrad.grad(loss(fnp)), in_axes=(None, 0, 0)))
    _timed(rows, "gpu-pex", "fgrad jit(vmap(grad)), host NumPy (CPU)",
           lambda: on_host(w_host, x_host, y_host), lambda: None, max(3, repeat // 4))


def bench_lenet(cupy, dtype, repeat, rows):
    rng = np.random.default_rng(SEED)
    params_host = tuple(a.astype(dtype) for a in lenet_params(rng))
    x_host = rng.standard_normal((LENET_BATCH, 1, 28, 28)).astype(dtype)
    labels_host = rng.integers(0, 10, LENET_BATCH)
    params, x, labels = fgrad.device_put((params_host, x_host, labels_host), "gpu")
    sync = cupy.cuda.Device().synchronize
    eager = fgrad.grad(lenet_fgrad_loss(fgrad))
    jitted = fgrad.jit(eager)
    _timed(rows, "gpu-lenet", "fgrad jit(grad) (CuPy)", lambda: jitted(params, x, labels),
           sync, repeat)
    _timed(rows, "gpu-lenet", "fgrad eager grad (CuPy)", lambda: eager(params, x, labels),
           sync, repeat)
    torch = _torch()
    if torch is not None:
        tloss = lenet_torch_loss(torch)
        tp = tuple(torch.tensor(a, device="cuda", requires_grad=True) for a in params_host)
        xt = torch.tensor(x_host, device="cuda")
        yt = torch.tensor(labels_host, device="cuda")
        _timed(rows, "gpu-lenet", "PyTorch CUDA eager autograd",
               lambda: torch.autograd.grad(tloss(tp, xt, yt), tp), torch.cuda.synchronize,
               repeat)
    def jax_lenet(jax):
        jnp, lax = jax.numpy, jax.lax

        def conv(x, w, b, pad):
            out = lax.conv_general_dilated(x, w, (1, 1), [(pad, pad), (pad, pad)])
            return out + b[None, :, None, None]

        def pool(x):
            return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

        def jloss(params, x, labels):
            w1, b1, w2, b2, w3, b3, w4, b4, w5, b5 = params
            h = pool(jax.nn.relu(conv(x, w1, b1, 2)))
            h = pool(jax.nn.relu(conv(h, w2, b2, 0)))
            h = h.reshape(h.shape[0], -1)
            h = jax.nn.relu(jax.nn.relu(h @ w3 + b3) @ w4 + b4)
            logp = jax.nn.log_softmax(h @ w5 + b5)
            return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))
        g = jax.jit(jax.grad(jloss))
        args = jax.device_put((params_host, x_host, labels_host), _jax_gpu(jax))
        return lambda: g(*args)
    _jax_row(rows, "gpu-lenet", jax_lenet, repeat)
    on_host = fgrad.jit(fgrad.grad(lenet_fgrad_loss(fgrad)))
    _timed(rows, "gpu-lenet", "fgrad jit(grad), host NumPy (CPU)",
           lambda: on_host(params_host, x_host, labels_host), lambda: None,
           max(3, repeat // 4))


def _print_table(rows):
    """Each row with its time over the fastest GPU peer's (jax.jit, else PyTorch)."""
    print(f"{'workload':<10} {'library':<44} {'ms':>10} {'÷ jax.jit':>10} {'÷ torch':>8}")
    for workload, lib, seconds in rows:
        if isinstance(seconds, str):
            print(f"{workload:<10} {lib:<44} {seconds}")
            continue
        peers = {name: t for w, name, t in rows if w == workload and not isinstance(t, str)}
        jax_t = peers.get("jax.jit (GPU)")
        torch_t = next((t for name, t in peers.items() if "PyTorch" in name or "torch" in name),
                       None)
        ratio = (lambda t: f"{seconds / t:.2f}" if t else "-")
        print(f"{workload:<10} {lib:<44} {seconds * 1e3:>10.3f} {ratio(jax_t):>10} "
              f"{ratio(torch_t):>8}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--only", default="chain,mlp,pex,lenet")
    args = parser.parse_args(argv)
    cupy, device = _gpu()
    if cupy is None:
        print(f"bench_gpu: skipped: {device}. These workloads need CuPy and a CUDA GPU.")
        return 0
    print(f"bench_gpu on {device}, dtype {args.dtype}, median of {args.repeat} calls")
    rows = []
    benches = {"chain": bench_chain, "mlp": bench_mlp, "pex": bench_pex,
               "lenet": bench_lenet}
    for name in args.only.split(","):
        try:
            benches[name](cupy, np.dtype(args.dtype), args.repeat, rows)
        except Exception as err:       # a workload that cannot be set up: say so, go on
            rows.append((f"gpu-{name}", "(setup)", f"failed: {type(err).__name__}: {err}"[:160]))
    _print_table(rows)
    if _jax()[0] is None:
        print(f"no jax.jit rows: {_jax()[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
