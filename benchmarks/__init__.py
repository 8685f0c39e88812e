"""fgrad benchmark suite: fgrad against a hand-written NumPy floor and its peers.

Run it with ``python -m benchmarks.run [--quick] [--only NAME]``; see README.md.

Importing this package pins every numerical library to one thread.  That has to
happen here, before anything imports NumPy, torch or jaxlib: OpenBLAS, MKL, OpenMP
and XLA read these variables once, when their shared libraries load, and ignore
later changes.  One thread everywhere is what makes the ratios comparable: a peer
that happens to parallelise a 200x200 matmul over both cores would otherwise look
faster for reasons that have nothing to do with its autodiff machinery.
"""

import os
import sys
import warnings

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")

for _name in _THREAD_VARS:
    os.environ[_name] = "1"

# XLA's CPU backend: no Eigen thread pool, one intra-op thread.  Keep any flags
# the user already set (e.g. dump options) and add ours after them.
_xla_flags = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
if _xla_flags not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _xla_flags).strip()

# This suite compares CPU implementations; skip JAX's probing for accelerators
# (slow at import, and noisy warnings) unless the user asked for something else.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

_late = [m for m in ("numpy", "torch", "jaxlib") if m in sys.modules]
if _late:
    warnings.warn(
        f"benchmarks imported after {', '.join(_late)}: thread pinning may not take "
        "effect; run `python -m benchmarks.run` in a fresh interpreter",
        RuntimeWarning, stacklevel=2)
