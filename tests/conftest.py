"""Test configuration: hypothesis profiles, graph checking, read-only inputs.

CI sets the CI environment variable, which selects a derandomized profile so a red
run reproduces exactly; locally, hypothesis explores with fresh random draws.
"""
import os
import sys

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))   # test helper modules (primitive_specs)

import fgrad  # noqa: E402
from fgrad.core import checking_graphs  # noqa: E402

_common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                     HealthCheck.data_too_large,
                                                     HealthCheck.filter_too_much])
settings.register_profile("ci", max_examples=12, derandomize=True, print_blob=True,
                          **_common)
settings.register_profile("dev", max_examples=25, **_common)
settings.load_profile("ci" if os.environ.get("CI") else
                      os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(autouse=True)
def _prune_every_residual(monkeypatch):
    """Reverse mode keeps small residuals whole; tests drop every residual the
    rules do not declare, so a wrong declaration cannot hide behind small arrays."""
    from fgrad.interpreters import reverse
    monkeypatch.setattr(reverse, "PRUNE_MIN_BYTES", 0)


@pytest.fixture(autouse=True)
def _check_every_graph():
    """Every reverse-mode graph a test records is re-checked against the
    primitives' abstract rules before it is swept."""
    with checking_graphs():
        yield
