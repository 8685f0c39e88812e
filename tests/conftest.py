"""Test configuration: hypothesis profiles, graph checking, read-only inputs.

CI sets the CI environment variable, which selects a derandomized profile so a red
run reproduces exactly; locally, hypothesis explores with fresh random draws.
"""
import os
import sys

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))   # test helper modules (primitive_specs)
# jit compiles on the calling thread in tests (the kernels and the program at
# the first call), so that a test checks the code it means to; tests of
# background compilation ask for it
os.environ.setdefault("FGRAD_JIT_COMPILE", "sync")

import fgrad  # noqa: E402
from fgrad.compiler import tiers  # noqa: E402
from fgrad.core.trace import checking_graphs  # noqa: E402
from fgrad.interpreters import reverse  # noqa: E402

_common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                     HealthCheck.data_too_large,
                                                     HealthCheck.filter_too_much])
settings.register_profile("ci", max_examples=12, derandomize=True, print_blob=True,
                          **_common)
settings.register_profile("dev", max_examples=10, **_common)
# HYPOTHESIS_PROFILE=thorough: a long local search, e.g. over the public-API fuzz test
settings.register_profile("thorough", max_examples=1000, **_common)
settings.load_profile("ci" if os.environ.get("CI") else
                      os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(autouse=True)
def _prune_every_residual(monkeypatch):
    """Reverse mode keeps small residuals whole; tests drop every residual the
    rules do not declare, so a wrong declaration cannot hide behind small arrays."""
    monkeypatch.setattr(reverse, "PRUNE_MIN_BYTES", 0)


@pytest.fixture(autouse=True)
def _no_compile_left_running():
    """A compile a test started in the background ends with the test, so that
    it neither runs into the next test nor is cut off by the process's exit."""
    yield
    assert tiers.wait_all(timeout=600), "a background compile ran for 10 minutes"


@pytest.fixture(autouse=True)
def _check_every_graph():
    """Every reverse-mode graph a test records is re-checked against the
    primitives' abstract rules before it is swept."""
    with checking_graphs():
        yield


# -- the CuPy backend: --backend=cupy and the `cupy` marker --------------------------
# Tests marked `cupy` run on a real GPU when CuPy and a CUDA device are present and
# skip cleanly otherwise (CI has no GPU). `--backend=cupy` asks for the GPU run
# explicitly: then a missing CuPy or device is a usage error, not a silent skip.


def pytest_addoption(parser):
    parser.addoption("--backend", choices=("numpy", "cupy"), default="numpy",
                     help="numpy (default): CuPy tests run only if a GPU is found; "
                          "cupy: require CuPy and a CUDA device and run them")


def cuda_unavailable_reason():
    """Why the CuPy tests cannot run here, or None when they can."""
    try:
        import cupy
    except ImportError as err:
        return f"CuPy is not installed ({err}); pip install 'fgrad[cuda]'"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:                        # no driver, no device
        return f"no usable CUDA device ({type(err).__name__}: {err})"
    return None if count > 0 else "no CUDA device"


def pytest_configure(config):
    config.addinivalue_line("markers", "cupy: needs CuPy and a CUDA device (skipped "
                                       "without one; --backend=cupy requires one)")
    if config.getoption("--backend") == "cupy":
        reason = cuda_unavailable_reason()
        if reason is not None:
            raise pytest.UsageError(f"--backend=cupy, but {reason}")


def pytest_collection_modifyitems(config, items):
    marked = [item for item in items if item.get_closest_marker("cupy")]
    if not marked:
        return
    reason = cuda_unavailable_reason()
    if reason is not None:
        skip = pytest.mark.skip(reason=reason)
        for item in marked:
            item.add_marker(skip)
