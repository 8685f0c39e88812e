"""Loading the libraries under comparison, each configured the same way.

Every library is loaded into one process so all of them share the interpreter,
the NumPy build and the machine state of the moment; the ratio-to-floor column is
only meaningful because the floor is measured in the same run.

A library that is missing (or, for fgrad, not importable yet) becomes a `Peer` with
`module=None` and a reason; the runner prints the reason once and skips its rows.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from importlib.metadata import version
from types import ModuleType

import numpy

#: The order rows appear in, per workload.  The floor comes first because every
#: other row's ratio is computed against it.
ORDER = ("numpy", "fgrad", "autograd", "jax", "torch")

INSTALL_HINT = "pip install -e '.[bench]'  (autograd, jax, torch==2.13.0)"


@dataclass
class Peer:
    """One library, or the reason it is absent.

    `module` is the top-level package (fgrad, autograd, jax, torch, numpy) and
    `np` its NumPy-like namespace (fgrad.numpy, autograd.numpy, jax.numpy; torch
    itself doubles as one for the elementwise functions the workloads use).
    `numpy_based` marks libraries whose arrays live in NumPy's allocator, which is
    what tracemalloc can see; JAX and torch allocate outside it, so their memory
    is not reported rather than reported wrong.
    """

    name: str
    module: ModuleType | None = None
    np: ModuleType | None = None
    version: str = ""
    numpy_based: bool = False
    reason: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def available(self) -> bool:
        return self.module is not None


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= 200 else text[:197] + "..."


def _load_numpy() -> Peer:
    return Peer("numpy", numpy, numpy, numpy.__version__, numpy_based=True)


def _load_fgrad() -> Peer:
    # fgrad is the library under development: a half-written core may raise
    # anything at import, not just ImportError, and a missing `grad` means the
    # workloads cannot run.  Either way, report it and keep the peers running.
    try:
        fgrad = importlib.import_module("fgrad")
        fnp = importlib.import_module("fgrad.numpy")
        for name in ("grad", "jvp"):
            getattr(fgrad, name)
    except Exception as exc:  # noqa: BLE001 - any failure means "not importable"
        return Peer("fgrad", reason=f"not importable ({_error_text(exc)})")
    return Peer("fgrad", fgrad, fnp, getattr(fgrad, "__version__", "dev"),
                numpy_based=True)


def _load_autograd() -> Peer:
    try:
        autograd = importlib.import_module("autograd")
        anp = importlib.import_module("autograd.numpy")
    except ImportError as exc:
        return Peer("autograd",
                    reason=f"not installed, skipped ({_error_text(exc)}); {INSTALL_HINT}")
    return Peer("autograd", autograd, anp, version("autograd"), numpy_based=True)


def _load_jax() -> Peer:
    try:
        jax = importlib.import_module("jax")
        jnp = importlib.import_module("jax.numpy")
    except ImportError as exc:
        return Peer("jax", reason=f"not installed, skipped ({_error_text(exc)}); {INSTALL_HINT}")
    # Without this JAX silently computes in float32 and every comparison with the
    # float64 floor would be both inaccurate and unfairly cheap.
    jax.config.update("jax_enable_x64", True)
    return Peer("jax", jax, jnp, jax.__version__)


def _load_torch() -> Peer:
    try:
        torch = importlib.import_module("torch")
    except ImportError as exc:
        return Peer("torch", reason=f"not installed, skipped ({_error_text(exc)}); {INSTALL_HINT}")
    # The environment variables set in benchmarks/__init__ cover OpenMP, but torch
    # sizes its own pools too; pin both.  set_num_interop_threads may only be
    # called once per process, before any inter-op work, hence the guard.
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    return Peer("torch", torch, torch, torch.__version__)


_LOADERS = {
    "numpy": _load_numpy,
    "fgrad": _load_fgrad,
    "autograd": _load_autograd,
    "jax": _load_jax,
    "torch": _load_torch,
}


def load_peers(names=ORDER) -> dict[str, Peer]:
    """Import and configure the named libraries, in `ORDER`."""
    return {name: _LOADERS[name]() for name in ORDER if name in names}


def thread_report(peers: dict[str, Peer]) -> str:
    """One line saying how many threads each runtime was actually given."""
    parts = [f"OMP/OPENBLAS/MKL_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"]
    torch = peers.get("torch")
    if torch is not None and torch.available:
        parts.append(f"torch.get_num_threads()={torch.module.get_num_threads()}")
    if "XLA_FLAGS" in os.environ:
        parts.append(f"XLA_FLAGS='{os.environ['XLA_FLAGS']}'")
    return ", ".join(parts)
