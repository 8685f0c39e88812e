"""fgrad.scipy.integrate.odeint: SciPy's values, and adjoint gradients checked
against finite differences and against differentiating a fixed-step RK4."""
import numpy as np
import pytest

scipy_integrate = pytest.importorskip("scipy.integrate")

import fgrad  # noqa: E402
import fgrad.numpy as fnp  # noqa: E402
from fgrad.scipy.integrate import odeint  # noqa: E402

TOL = dict(rtol=1e-10, atol=1e-10)
Y0, TS, K, C = np.array([1.0, 0.0]), np.array([0.0, 0.4, 1.1, 2.0, 3.0]), 2.0, 0.3


def oscillator(y, t, k, c):
    # a damped, driven oscillator: depends on t too, so dt gradients are tested
    return fnp.stack([y[1], -k * y[0] - c * y[1] + 0.5 * fnp.sin(t)])


def loss(y0, ts, k, c):
    return fnp.sum(odeint(oscillator, y0, ts, args=(k, c), **TOL) ** 2)


def _finite_difference(f, args, i, eps=1e-6):
    base = np.asarray(args[i], dtype=float)
    out = np.zeros(base.shape)
    for idx in np.ndindex(base.shape):
        step = np.zeros(base.shape)
        step[idx] = eps
        hi, lo = list(args), list(args)
        hi[i], lo[i] = base + step, base - step
        out[idx] = (f(*hi) - f(*lo)) / (2 * eps)
    return out


def _rk4(y0, ts, k, c, substeps=200):
    # discretise-then-differentiate reference: fgrad differentiates the steps
    ys, y = [y0], y0
    for t0, t1 in zip(ts[:-1], ts[1:]):
        h = (t1 - t0) / substeps
        for j in range(substeps):
            s = t0 + j * h
            k1 = oscillator(y, s, k, c)
            k2 = oscillator(y + 0.5 * h * k1, s + 0.5 * h, k, c)
            k3 = oscillator(y + 0.5 * h * k2, s + 0.5 * h, k, c)
            k4 = oscillator(y + h * k3, s + h, k, c)
            y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        ys.append(y)
    return fnp.sum(fnp.stack(ys) ** 2)


def test_values_are_scipys():
    ours = odeint(oscillator, Y0, TS, args=(K, C))
    theirs = scipy_integrate.odeint(lambda y, t: np.asarray(oscillator(y, t, K, C)), Y0, TS)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)


def test_adjoint_gradients_match_finite_differences():
    args = (Y0, TS, K, C)
    grads = fgrad.grad(loss, argnums=(0, 1, 2, 3))(*args)
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g, _finite_difference(loss, args, i), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_adjoint_gradients_match_differentiating_rk4_steps():
    adjoint = fgrad.grad(loss, argnums=(0, 2, 3))(Y0, TS, K, C)
    steps = fgrad.grad(lambda y0, k, c: _rk4(y0, TS, k, c), argnums=(0, 1, 2))(Y0, K, C)
    for a, b in zip(adjoint, steps):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)


def test_tfirst_and_scalar_state():
    ys = odeint(lambda t, y, r: -r * y + t, 1.0, np.array([0.0, 1.0]), args=(0.7,),
                tfirst=True, **TOL)
    want = scipy_integrate.odeint(lambda y, t: -0.7 * y + t, 1.0, [0.0, 1.0], **TOL)
    np.testing.assert_allclose(ys, want, rtol=1e-9)
    g = fgrad.grad(lambda r: odeint(lambda t, y, r: -r * y, 1.0, np.array([0.0, 1.0]),
                                    args=(r,), tfirst=True, **TOL)[-1, 0])(0.7)
    np.testing.assert_allclose(g, -np.exp(-0.7), rtol=1e-7)


def test_second_order_and_forward_mode_are_refused_not_zero():
    with pytest.raises(fgrad.errors.MissingRuleError, match="differentiates once"):
        fgrad.grad(fgrad.grad(lambda k: loss(Y0, TS, k, C)))(K)
    with pytest.raises(fgrad.errors.CustomRuleError, match="'odeint', which only defines a "
                                                           "reverse rule"):
        fgrad.jvp(lambda k: loss(Y0, TS, k, C), (K,), (1.0,))


def test_options_it_cannot_honour_are_refused():
    with pytest.raises(fgrad.errors.ScipyArgumentError, match="full_output is not supported"):
        odeint(oscillator, Y0, TS, args=(K, C), full_output=True)


def _neural_field(y, t, layers):
    # a neural-ODE right-hand side: args holds a list of (W, b) layers
    for i, (w, b) in enumerate(layers):
        y = w @ y + b
        y = fnp.tanh(y) if i < len(layers) - 1 else y
    return y


def test_pytree_args_forward_and_backward():
    rng = np.random.default_rng(0)
    layers = [(0.5 * rng.standard_normal((4, 2)), 0.1 * rng.standard_normal(4)),
              (0.5 * rng.standard_normal((2, 4)), 0.1 * rng.standard_normal(2))]
    ts = np.array([0.0, 0.5, 1.0])

    def loss(layers):
        return fnp.sum(odeint(_neural_field, Y0, ts, args=(layers,), **TOL) ** 2)

    flat = [p for layer in layers for p in layer]

    def flat_loss(*ps):
        return loss([(ps[0], ps[1]), (ps[2], ps[3])])
    grads = fgrad.grad(loss)(layers)
    assert isinstance(grads, list) and isinstance(grads[0], tuple)
    got = [g for layer in grads for g in layer]
    for i, g in enumerate(got):
        np.testing.assert_allclose(g, _finite_difference(flat_loss, flat, i), rtol=1e-5,
                                   atol=1e-7)


def test_args_leaves_that_are_not_floats_pass_through_undifferentiated():
    def field(y, t, rates, power, name):
        assert isinstance(power, int) and name == "decay"
        return -rates["k"] * y ** power

    def final(k):
        return odeint(field, 1.0, np.array([0.0, 1.0]), args=({"k": k}, 1, "decay"),
                      **TOL)[-1, 0]
    np.testing.assert_allclose(fgrad.grad(final)(0.7), -np.exp(-0.7), rtol=1e-7)


def test_a_failed_solve_raises_instead_of_warning():
    blow_up = lambda y, t: y ** 2            # y = 1 / (1 - t): infinite at t = 1
    with pytest.raises(fgrad.errors.IntegrationError,
                       match="odeint's solve failed near t=1: LSODA says 'Excess work"):
        odeint(blow_up, 1.0, np.array([0.0, 2.0]))
    with pytest.raises(fgrad.errors.IntegrationError, match="odeint's solve met NaN at t=0"), \
            np.errstate(invalid="ignore"):
        odeint(lambda y, t: fnp.sqrt(-y), 1.0, np.array([0.0, 1.0]))


def test_a_failed_adjoint_pass_raises():
    @fgrad.custom_vjp
    def nan_gradient(y):
        return y

    nan_gradient.defvjp(lambda y: (y, None), lambda _, ct: (ct * np.nan,))
    with pytest.raises(fgrad.errors.IntegrationError,
                       match=r"odeint's adjoint pass \(func's vector-Jacobian products\) "
                             "met NaN at t=1"):
        fgrad.grad(lambda k: odeint(lambda y, t, k: -k * nan_gradient(y), 1.0,
                                    np.array([0.0, 1.0]), args=(k,))[-1, 0])(0.5)


def test_under_jit_and_vmap():
    def final(k):
        return fnp.sum(odeint(oscillator, Y0, TS[:3], args=(k, C))[-1])
    ks = np.array([1.5, 2.0])
    np.testing.assert_allclose(fgrad.jit(final)(K), final(K), rtol=1e-12)
    np.testing.assert_allclose(fgrad.jit(fgrad.grad(final))(K), fgrad.grad(final)(K),
                               rtol=1e-9)
    np.testing.assert_allclose(fgrad.vmap(fgrad.grad(final))(ks),
                               [fgrad.grad(final)(k) for k in ks], rtol=1e-9)
