"""debug_nans in forward mode and inside ``fgrad.lax`` control flow.

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


# ---------------------------------------------------------------------------
# Inside lax.cond / switch / scan / fori_loop / while_loop
# ---------------------------------------------------------------------------

from fgrad import lax  # noqa: E402


def _scan_log(x):
    def body(carry, xi):
        return carry + fnp.log(xi - 1.0), None           # scan-log
    return lax.scan(body, 0.0, x)[0]


def _fori_log(x):
    return fnp.sum(lax.fori_loop(0, 2, lambda i, v: v * fnp.log(x), x))  # fori-log


def _while_sqrt(x):
    def body(state):
        i, v = state
        return i + 1, fnp.sqrt(v - 2.0)                  # while-sqrt
    return fnp.sum(lax.while_loop(lambda s: s[0] < 2, body, (0, x))[1])


def _cond_log(x):
    def yes(x):
        return fnp.sum(fnp.log(x - 1.0))                 # cond-log
    return lax.cond(fnp.sum(x) > 0, yes, fnp.sum, x)


def _switch_log(x):
    def second(x):
        return fnp.sum(fnp.log(x - 1.0))                 # switch-log
    return lax.switch(fnp.argmax(x), [fnp.sum, fnp.sum, second], x)


def _scan_sqrt(x):
    def body(carry, xi):
        return carry + fnp.sqrt(xi * 1.0), None          # scan-sqrt
    return lax.scan(body, 0.0, x)[0]


def _cond_sqrt(x):
    def yes(x):
        return fnp.sum(fnp.sqrt(x))                      # cond-sqrt
    return lax.cond(fnp.sum(x) > 0, yes, fnp.sum, x)


def _scan_where(x):
    def body(carry, xi):
        return carry + fnp.where(xi > 0, fnp.sqrt(xi), 0.0), None   # scan-where
    return lax.scan(body, 0.0, x)[0]


def _jvp_of(f):
    return lambda x: fgrad.jvp(f, (x,), (np.ones_like(x),))


# eager lax under grad and jvp; staged lax under jit, inside and outside grad
CONTROL = {
    "grad": fgrad.grad,
    "jvp": _jvp_of,
    "jit": fgrad.jit,
    "jit(grad)": lambda f: fgrad.jit(fgrad.grad(f)),
    "grad(jit)": lambda f: fgrad.grad(fgrad.jit(f)),
    "jit(jvp)": lambda f: fgrad.jit(_jvp_of(f)),
}
FORWARD_NANS = {"scan": (_scan_log, "log", "scan-log"),
                "fori_loop": (_fori_log, "log", "fori-log"),
                "while_loop": (_while_sqrt, "sqrt", "while-sqrt"),
                "cond": (_cond_log, "log", "cond-log"),
                "switch": (_switch_log, "log", "switch-log")}
XC = np.array([0.0, 1.0, 4.0])


@pytest.mark.parametrize("transform", sorted(CONTROL))
@pytest.mark.parametrize("construct", sorted(FORWARD_NANS))
def test_a_nan_inside_a_body_is_blamed_on_the_line_inside_it(construct, transform):
    if construct == "while_loop" and transform == "jit(grad)":
        pytest.skip("a staged while_loop has no reverse mode")
    f, prim, marker = FORWARD_NANS[construct]
    message = _raises(CONTROL[transform](f), XC)
    assert f"the forward pass of '{prim}' produced" in message
    assert _line(marker) in message
    assert "input shapes: f64[" in message


REVERSE_NANS = {"scan": (_scan_sqrt, "scan-sqrt"), "cond": (_cond_sqrt, "cond-sqrt")}


@pytest.mark.parametrize("transform", ["grad", "jit(grad)", "grad(jit)", "jacrev(jit)"])
@pytest.mark.parametrize("construct", sorted(REVERSE_NANS))
def test_a_reverse_nan_inside_a_body_is_blamed_on_the_line_inside_it(construct,
                                                                       transform):
    f, marker = REVERSE_NANS[construct]
    assert np.isfinite(f(XC))
    transforms = dict(CONTROL, **{"jacrev(jit)": lambda f: fgrad.jacrev(fgrad.jit(f))})
    message = _raises(transforms[transform](f), XC)
    assert "the reverse pass of 'sqrt' produced inf" in message
    assert _line(marker) in message


@pytest.mark.parametrize("transform", ["jvp", "jit(jvp)"])
@pytest.mark.parametrize("construct", sorted(REVERSE_NANS))
def test_a_tangent_nan_inside_a_body_is_blamed_on_the_line_inside_it(construct,
                                                                       transform):
    f, marker = REVERSE_NANS[construct]
    message = _raises(CONTROL[transform](f), XC)
    assert "the tangent pass of 'sqrt' produced inf" in message
    assert _line(marker) in message


@pytest.mark.parametrize("transform", ["grad", "jit(grad)", "grad(jit)"])
def test_the_where_trap_is_recognised_inside_a_scan_body(transform):
    message = _raises(CONTROL[transform](_scan_where), XC)
    assert "the reverse pass of 'sqrt' produced nan" in message
    assert _line("scan-where") in message and "`where` trap" in message


@pytest.mark.parametrize("transform", sorted(CONTROL))
def test_control_flow_lets_nans_through_when_off(transform):
    for construct, (f, _, _) in sorted(FORWARD_NANS.items()):
        if construct == "while_loop" and transform in ("jit(grad)", "grad(jit)"):
            continue                # a staged while_loop has no reverse mode
        result = CONTROL[transform](f)(XC)
        leaves = fgrad.tree.tree_flatten(result)[0]
        assert not all(np.isfinite(leaf).all() for leaf in leaves), construct


def test_control_flow_under_debug_nans_computes_what_it_computes_off():
    x = np.array([0.5, 2.0, 3.0])

    def f(x):
        def body(carry, xi):
            return carry * fnp.cos(xi) + fnp.sin(carry), carry * xi
        carry, ys = lax.scan(body, 1.0, x)
        y = lax.cond(carry > 0, fnp.exp, fnp.tanh, carry)
        return y + fnp.sum(ys) + _fori_log(x + 1.0)

    def g(x):
        return f(x) + _while_sqrt(x + 20.0)
    cases = [(fgrad.jit, g), (lambda f: fgrad.jit(_jvp_of(f)), g),
             (lambda f: fgrad.jit(fgrad.grad(f)), f),
             (lambda f: fgrad.grad(fgrad.jit(f)), f)]
    expected = [t(fun)(x) for t, fun in cases]
    with fgrad.debug_nans():
        got = [t(fun)(x) for t, fun in cases]
    for a, b in zip(got, expected):
        for u, v in zip(fgrad.tree.tree_flatten(a)[0], fgrad.tree.tree_flatten(b)[0]):
            np.testing.assert_allclose(u, v)


# vmap of a cond whose examples disagree runs every branch on every example and
# selects per example: a NaN in an unselected lane is not an error (issue 19)

def _log_if_positive(x):
    return lax.cond(x > 0, fnp.log, fnp.negative, x)


@pytest.mark.parametrize("transform", [
    lambda f: fgrad.jit(fgrad.vmap(f)),
    fgrad.vmap,
    lambda f: fgrad.grad(lambda x: fnp.sum(fgrad.vmap(f)(x))),
    lambda f: fgrad.jit(fgrad.grad(lambda x: fnp.sum(fgrad.vmap(f)(x)))),
])
def test_nans_in_unselected_lanes_of_a_batched_cond_are_not_reported(transform):
    x = np.array([-1.0, 2.0])
    expected = transform(_log_if_positive)(x)
    with np.errstate(invalid="ignore"), fgrad.debug_nans():
        np.testing.assert_allclose(transform(_log_if_positive)(x), expected)


def test_a_nan_in_a_selected_lane_of_a_batched_cond_is_still_reported():
    def f(x):
        return lax.cond(x > 0, lambda v: fnp.log(v - 5.0), fnp.negative, x)  # batched-cond
    with np.errstate(invalid="ignore"), fgrad.debug_nans():
        with pytest.raises(NonFiniteError, match=r"'where' produced nan.*\n.*batched-cond"):
            fgrad.jit(fgrad.vmap(f))(np.array([-1.0, 2.0]))
