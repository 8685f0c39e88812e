"""debug_nans in forward mode (jvp, linearize, jacfwd, hessian).

Each test reads the message: the primitive, the pass, the line of this file
that recorded the equation (found by a ``# marker`` comment) and the input
shapes. The reverse-mode and jit basics are in test_inspect.py.
"""
import pathlib

import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.errors import NonFiniteError

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _line(marker):
    """``file:line`` of the line of this file holding ``# marker``."""
    lines = pathlib.Path(__file__).read_text().splitlines()
    hits = [i + 1 for i, text in enumerate(lines) if text.rstrip().endswith(f"# {marker}")]
    assert len(hits) == 1, marker
    return f"{__file__}:{hits[0]}"


def _log_shifted(x):
    return fnp.log(x - 1.0)                              # fwd-log


def _sqrt(x):
    return fnp.sqrt(x * 1.0)                             # fwd-sqrt


def _power(x):
    return fnp.sum(x ** 1.5)                             # fwd-power


X = np.array([1.0, 0.0, 4.0])
ONES = np.ones(3)

FORWARD = {
    "jvp": lambda f: lambda x: fgrad.jvp(f, (x,), (ONES,)),
    "linearize": lambda f: lambda x: fgrad.linearize(f, x)[1](ONES),
    "jacfwd": fgrad.jacfwd,
    "jit(jvp)": lambda f: fgrad.jit(lambda x: fgrad.jvp(f, (x,), (ONES,))),
    "jvp(jit)": lambda f: lambda x: fgrad.jvp(fgrad.jit(f), (x,), (ONES,)),
    "grad(jvp)": lambda f: fgrad.grad(lambda x: fnp.sum(fgrad.jvp(f, (x,), (ONES,))[1])),
}


def _raises(fun, *args):
    with fgrad.debug_nans():
        with pytest.raises(NonFiniteError) as err:
            fun(*args)
    return str(err.value)


@pytest.mark.parametrize("transform", sorted(FORWARD))
def test_forward_mode_names_the_line_of_a_primal_nan(transform):
    message = _raises(FORWARD[transform](_log_shifted), X)
    assert "the forward pass of 'log' produced nan" in message
    assert _line("fwd-log") in message
    assert "input shapes: f64[3]" in message


@pytest.mark.parametrize("transform", sorted(FORWARD))
def test_forward_mode_names_the_line_of_a_tangent_only_nan(transform):
    assert np.isfinite(_sqrt(X)).all()
    message = _raises(FORWARD[transform](_sqrt), X)
    assert "the tangent pass of 'sqrt' produced" in message
    assert _line("fwd-sqrt") in message
    assert "input shapes: f64[3]" in message


def test_linearize_checks_the_primal_when_it_is_called():
    # the primal is computed once, by linearize itself, and checked there
    message = _raises(fgrad.linearize, _log_shifted, X)
    assert "the forward pass of 'log'" in message and _line("fwd-log") in message


@pytest.mark.parametrize("transform", ["hessian", "jit(hessian)"])
def test_hessian_names_the_tangent_of_the_reverse_pass(transform):
    x = np.array([0.0, 1.0])
    with fgrad.debug_nans():            # the gradient itself is finite at 0
        np.testing.assert_allclose(fgrad.grad(_power)(x), [0.0, 1.5])
    hessian = fgrad.hessian(_power)
    message = _raises(fgrad.jit(hessian) if transform == "jit(hessian)" else hessian, x)
    assert "the tangent of the reverse pass of 'power' produced" in message
    assert _line("fwd-power") in message


@fgrad.custom_jvp
def _custom_reciprocal_sin(x):
    return fnp.sin(x)


_custom_reciprocal_sin.defjvp(lambda primals, tangents: (fnp.sin(primals[0]),
                                                          tangents[0] / primals[0]))


def test_custom_jvp_tangents_are_checked():
    def f(x):
        return _custom_reciprocal_sin(x) * 2.0              # custom-call
    message = _raises(lambda x: fgrad.jvp(f, (x,), (np.ones(2),)), np.array([0.0, 1.0]))
    assert ("the tangent pass of 'custom_jvp[_custom_reciprocal_sin]' produced inf"
            in message)
    assert _line("custom-call") in message


@pytest.mark.parametrize("transform", sorted(FORWARD))
def test_forward_mode_lets_nans_through_when_off(transform):
    for f in (_log_shifted, _sqrt):
        with fgrad.debug_nans(False):
            result = FORWARD[transform](f)(X)
        leaves = fgrad.tree.tree_flatten(result)[0]
        assert not all(np.isfinite(leaf).all() for leaf in leaves)
    assert not np.isfinite(fgrad.hessian(_power)(np.array([0.0, 1.0]))).all()


def test_forward_mode_reads_the_environment(monkeypatch):
    monkeypatch.setenv("FGRAD_DEBUG_NANS", "1")
    with pytest.raises(NonFiniteError, match="the tangent pass of 'sqrt'"):
        fgrad.jvp(_sqrt, (X,), (ONES,))
    monkeypatch.setenv("FGRAD_DEBUG_NANS", "0")
    assert np.isinf(fgrad.jvp(_sqrt, (X,), (ONES,))[1][1])


def test_forward_mode_leaves_finite_programs_alone():
    x = np.array([0.5, 2.0])

    def f(x):
        return fnp.sum(fnp.tanh(x) * fnp.log(x))
    expected = [fgrad.jvp(f, (x,), (x,)), fgrad.jacfwd(fgrad.grad(f))(x),
                fgrad.hessian(f)(x), fgrad.linearize(f, x)[1](x)]
    with fgrad.debug_nans():
        got = [fgrad.jvp(f, (x,), (x,)), fgrad.jacfwd(fgrad.grad(f))(x),
               fgrad.hessian(f)(x), fgrad.linearize(f, x)[1](x)]
    for a, b in zip(got, expected):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b))
