"""The inverse-conductivity example (examples/inverse_conductivity.py) on a small grid."""
import importlib.util
import pathlib

import numpy as np

import fgrad

PATH = pathlib.Path(__file__).resolve().parents[1] / "examples" / "inverse_conductivity.py"
spec = importlib.util.spec_from_file_location("inverse_conductivity", PATH)
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)


def test_the_adjoint_gradient_matches_finite_differences():
    problem = example.Problem(12, spacing=3)
    m = 0.5 * problem.m_true
    value, g = fgrad.value_and_grad(problem.loss)(m)
    direction = np.random.default_rng(1).standard_normal(m.shape)
    eps = 1e-6
    slope = (problem.loss(m + eps * direction) - problem.loss(m - eps * direction)) / (2 * eps)
    np.testing.assert_allclose(g @ direction, slope, rtol=1e-6)


def test_lbfgs_recovers_the_inclusions():
    problem = example.Problem(24, spacing=3)
    start = problem.loss(np.zeros(24 ** 2))
    result = example.recover(problem, maxiter=25)
    assert result.fun < 0.2 * start             # down to the noise level
    error = np.linalg.norm(result.x - problem.m_true) / np.linalg.norm(problem.m_true)
    assert error < 0.6
    forward, both, memory = example.measure(problem)
    assert forward > 0 and both > 0 and memory > 0
