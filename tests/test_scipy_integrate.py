"""fgrad.scipy.integrate: odeint and solve_ivp give SciPy's values and results;
their adjoint gradients are checked against finite differences of re-solving at
tight tolerance (an oscillator, a Lotka-Volterra system, the stiff Robertson
kinetics, a neural ODE), against differentiating a fixed-step RK4 and against
JAX's odeint; under jit and vmap, and their refusals and failures."""
import numpy as np
import pytest

scipy_integrate = pytest.importorskip("scipy.integrate")

import fgrad  # noqa: E402
import fgrad.numpy as fnp  # noqa: E402
from fgrad.scipy.integrate import odeint, solve_ivp  # noqa: E402

TOL = dict(rtol=1e-10, atol=1e-10)
Y0, TS, K, C = np.array([1.0, 0.0]), np.array([0.0, 0.4, 1.1, 2.0, 3.0]), 2.0, 0.3


def oscillator(y, t, k, c):
    # a damped, driven oscillator: depends on t too, so dt gradients are tested
    return fnp.stack([y[1], -k * y[0] - c * y[1] + 0.5 * fnp.sin(t)])


def loss(y0, ts, k, c):
    return fnp.sum(odeint(oscillator, y0, ts, args=(k, c), **TOL) ** 2)


def finite_difference(f, args, i, eps=1e-6):
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
        np.testing.assert_allclose(g, finite_difference(loss, args, i), rtol=1e-5, atol=1e-6)


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
    # advice for the caller, not for whoever wrote odeint's rule
    with pytest.raises(fgrad.errors.MissingRuleError,
                       match=r"forward mode \(jvp, jacfwd, hessian\) reached 'odeint', which "
                             r"is differentiated in reverse mode only: fgrad.scipy.integrate."
                             r"odeint is solved by SciPy and differentiated by the adjoint "
                             r"method.* Use fgrad.jacrev for its Jacobian, or fgrad.grad or "
                             r"fgrad.vjp, instead\.$"):
        fgrad.jvp(lambda k: loss(Y0, TS, k, C), (K,), (1.0,))


def test_options_it_cannot_honour_are_refused():
    with pytest.raises(fgrad.errors.ScipyArgumentError, match="full_output is not supported"):
        odeint(oscillator, Y0, TS, args=(K, C), full_output=True)


def mlp(y, layers):
    # a neural ODE's right-hand side: args holds a list of (W, b) layers
    for i, (w, b) in enumerate(layers):
        y = w @ y + b
        y = fnp.tanh(y) if i < len(layers) - 1 else y
    return y


def random_layers():
    rng = np.random.default_rng(0)
    return [(0.5 * rng.standard_normal((4, 2)), 0.1 * rng.standard_normal(4)),
            (0.5 * rng.standard_normal((2, 4)), 0.1 * rng.standard_normal(2))]


def test_pytree_args_forward_and_backward():
    layers = random_layers()
    ts = np.array([0.0, 0.5, 1.0])

    def loss(layers):
        return fnp.sum(odeint(lambda y, t, layers: mlp(y, layers), Y0, ts, args=(layers,),
                              **TOL) ** 2)

    flat = [p for layer in layers for p in layer]

    def flat_loss(*ps):
        return loss([(ps[0], ps[1]), (ps[2], ps[3])])
    grads = fgrad.grad(loss)(layers)
    assert isinstance(grads, list) and isinstance(grads[0], tuple)
    got = [g for layer in grads for g in layer]
    for i, g in enumerate(got):
        np.testing.assert_allclose(g, finite_difference(flat_loss, flat, i), rtol=1e-5,
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


@fgrad.custom_vjp
def nan_gradient(y):
    # the identity, whose derivative is NaN: a right-hand side fine forward
    # whose adjoint pass meets NaN
    return y


nan_gradient.defvjp(lambda y: (y, None), lambda _, ct: (ct * np.nan,))


def test_a_failed_adjoint_pass_raises():
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


# ---------------------------------------------------------------------------
# solve_ivp

TIGHT = dict(rtol=1e-11, atol=1e-12)
LV_P, LV_Y0, LV_T = np.array([1.5, 1.0, 1.0, 3.0]), np.array([1.0, 1.0]), np.linspace(0.3, 2.7, 4)
ROBER_K, ROBER_Y0 = np.array([0.04, 3e7, 1e4]), np.array([1.0, 0.0, 0.0])
ROBER_W = np.array([1.0, 1e4, 1.0])      # y2 is ~1e-5: weigh it so it counts


def lotka_volterra(t, y, p):
    prey, predator = y[0], y[1]
    return fnp.stack([p[0] * prey - p[1] * prey * predator,
                      p[2] * prey * predator - p[3] * predator])


def robertson(t, y, k):
    return fnp.stack([-k[0] * y[0] + k[2] * y[1] * y[2],
                      k[0] * y[0] - k[1] * y[1] ** 2 - k[2] * y[1] * y[2],
                      k[1] * y[1] ** 2])


def lv_reference(y0, p, t_eval):
    # the finite differences re-solve with SciPy alone, at tight tolerance
    def field(t, y):
        return np.array([p[0] * y[0] - p[1] * y[0] * y[1], p[2] * y[0] * y[1] - p[3] * y[1]])
    res = scipy_integrate.solve_ivp(field, (0.0, 3.0), y0, method="DOP853", t_eval=t_eval,
                                    **TIGHT)
    return np.sum(res.y ** 2)


def lv_loss(y0, p, t_eval, method="RK45", tol=None):
    tol = tol or dict(rtol=1e-8, atol=1e-10)
    res = solve_ivp(lotka_volterra, (0.0, 3.0), y0, method=method, t_eval=t_eval, args=(p,),
                    **tol)
    return fnp.sum(res.y ** 2)


def rober_reference(log_k):
    # SciPy alone, with the exact Jacobian, at tight tolerance
    k = np.exp(log_k)

    def field(t, y):
        return np.array([-k[0] * y[0] + k[2] * y[1] * y[2],
                         k[0] * y[0] - k[1] * y[1] ** 2 - k[2] * y[1] * y[2], k[1] * y[1] ** 2])

    def jac(t, y):
        return np.array([[-k[0], k[2] * y[2], k[2] * y[1]],
                         [k[0], -2 * k[1] * y[1] - k[2] * y[2], -k[2] * y[1]],
                         [0.0, 2 * k[1] * y[1], 0.0]])
    res = scipy_integrate.solve_ivp(field, (0.0, 2.0), ROBER_Y0, method="LSODA", jac=jac,
                                    t_eval=[0.5, 2.0], **TIGHT)
    return np.sum(res.y * ROBER_W[:, None])


def rober_loss(log_k, method, tol=None):
    tol = tol or dict(rtol=1e-7, atol=1e-11)
    res = solve_ivp(robertson, (0.0, 2.0), ROBER_Y0, method=method, t_eval=[0.5, 2.0],
                    args=(fnp.exp(log_k),), **tol)
    return fnp.sum(res.y * ROBER_W[:, None])


def check_directional(f, args, grads, rtol, eps=1e-6, seed=0):
    # one finite difference per argument, along a random direction: two solves
    rng = np.random.default_rng(seed)
    for i, g in enumerate(grads):
        leaves, tree = fgrad.tree.tree_flatten(args[i])
        dirs = [rng.standard_normal(np.shape(leaf)) for leaf in leaves]
        shifted = [list(args), list(args)]
        for sign, new in zip((1, -1), shifted):
            new[i] = fgrad.tree.tree_unflatten(
                tree, [np.asarray(leaf) + sign * eps * d for leaf, d in zip(leaves, dirs)])
        want = (f(*shifted[0]) - f(*shifted[1])) / (2 * eps)
        got = sum(np.vdot(gl, d) for gl, d in zip(fgrad.tree.tree_leaves(g), dirs))
        np.testing.assert_allclose(got, want, rtol=rtol, err_msg=f"argument {i}")


def test_solve_ivp_values_and_result_are_scipys():
    ours = solve_ivp(lotka_volterra, (0.0, 3.0), LV_Y0, args=(LV_P,), rtol=1e-8)
    theirs = scipy_integrate.solve_ivp(lambda t, y: np.asarray(lotka_volterra(t, y, LV_P)),
                                       (0.0, 3.0), LV_Y0, rtol=1e-8)
    np.testing.assert_array_equal(ours.t, theirs.t)
    np.testing.assert_array_equal(ours.y, theirs.y)
    for key in ("nfev", "njev", "nlu", "status", "message", "success"):
        assert ours[key] == theirs[key] and getattr(ours, key) == theirs[key]
    assert ours.sol is None and ours.t_events is None


@pytest.mark.parametrize("method", ["RK45", "DOP853"])
def test_lotka_volterra_gradients_match_finite_differences(method):
    args = (LV_Y0, LV_P, LV_T)
    grads = fgrad.grad(lambda *a: lv_loss(*a, method=method), argnums=(0, 1, 2))(*args)
    check_directional(lv_reference, args, grads, 1e-5)


def test_t_span_ends_without_t_eval():
    # res.t is the solver's: its ends move with t_span, y(t_end) along fun
    def final(t0, t1):
        return solve_ivp(lotka_volterra, (t0, t1), LV_Y0, method="DOP853", args=(LV_P,),
                         rtol=1e-11, atol=1e-12).y[0, -1]
    g = fgrad.grad(final, argnums=(0, 1))(0.0, 2.0)
    for i in range(2):
        np.testing.assert_allclose(g[i], finite_difference(final, (0.0, 2.0), i), rtol=1e-6)


def test_robertson_lsoda_gradient_matches_finite_differences():
    g = fgrad.grad(rober_loss)(np.log(ROBER_K), "LSODA")
    check_directional(rober_reference, (np.log(ROBER_K),), (g,), rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["Radau", "BDF", "LSODA"])
@pytest.mark.parametrize("rtol", [1e-5, 1e-7, 1e-9])
def test_robertson_stiff_sweep(method, rtol):
    g = fgrad.grad(rober_loss)(np.log(ROBER_K), method, dict(rtol=rtol, atol=rtol * 1e-4))
    want = finite_difference(rober_reference, (np.log(ROBER_K),), 0, eps=1e-5)
    # the adjoint is as accurate as the tolerances the solve was given
    np.testing.assert_allclose(g, want, rtol=300 * rtol)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["RK23", "RK45", "DOP853", "Radau", "BDF", "LSODA"])
def test_every_method_on_lotka_volterra(method):
    args = (LV_Y0, LV_P, LV_T)
    grads = fgrad.grad(lambda *a: lv_loss(*a, method=method, tol=dict(rtol=1e-8, atol=1e-10)),
                       argnums=(0, 1, 2))(*args)
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g, finite_difference(lv_reference, args, i), rtol=1e-4,
                                   atol=1e-5)


@pytest.mark.slow
def test_lotka_volterra_gradients_match_jax_odeint():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    from jax.experimental.ode import odeint as jax_odeint
    jnp = jax.numpy
    ts = np.concatenate([[0.0], LV_T])

    def jax_loss(y0, p):
        def field(y, t, p):
            return jnp.stack([p[0] * y[0] - p[1] * y[0] * y[1],
                              p[2] * y[0] * y[1] - p[3] * y[1]])
        return jnp.sum(jax_odeint(field, y0, ts, p, rtol=1e-10, atol=1e-10)[1:] ** 2)
    want = jax.grad(jax_loss, argnums=(0, 1))(LV_Y0, LV_P)
    got = fgrad.grad(lambda y0, p: lv_loss(y0, p, LV_T, "DOP853"), argnums=(0, 1))(LV_Y0, LV_P)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-6)


def test_neural_ode_pytree_args():
    layers = random_layers()

    def loss(layers, tol=dict(rtol=1e-9, atol=1e-11)):
        res = solve_ivp(lambda t, y, layers: mlp(y, layers), (0.0, 1.0), LV_Y0, method="DOP853", t_eval=[0.5, 1.0],
                        args=(layers,), **tol)
        return fnp.sum(res.y ** 2)
    grads = fgrad.grad(loss)(layers)
    assert isinstance(grads, list) and isinstance(grads[1], tuple)
    check_directional(lambda layers: loss(layers, TIGHT), (layers,), (grads,), rtol=1e-6)


def test_dense_output_is_differentiable():
    def at(p, t):
        res = solve_ivp(lotka_volterra, (0.0, 3.0), LV_Y0, method="DOP853", args=(p,),
                        dense_output=True, rtol=1e-11, atol=1e-12)
        return fnp.sum(res.sol(t) ** 2) + res.sol(1.5)[0]
    t = np.array([2.5, 0.7])
    check_directional(at, (LV_P, t), fgrad.grad(at, argnums=(0, 1))(LV_P, t), rtol=1e-6)


def test_backwards_in_time_vectorized_and_float32():
    def loss(y0, p):
        res = solve_ivp(lotka_volterra, (2.0, 0.0), y0, method="DOP853", vectorized=True,
                        t_eval=[1.5, 0.0], args=(p,), rtol=1e-10, atol=1e-12)
        return fnp.sum(res.y ** 2)
    g = fgrad.grad(loss, argnums=(0, 1))(LV_Y0.astype(np.float32), LV_P)
    assert g[0].dtype == np.float32
    check_directional(loss, (LV_Y0, LV_P), g, rtol=1e-6)


def test_fun_with_python_control_flow_on_values():
    # a fun jit cannot stage (an `if` on the state) still differentiates
    def switching(t, y, k):
        return -k * y if y[0] > 0.5 else -2.0 * k * y

    def final(k):
        return solve_ivp(switching, (0.0, 1.0), [1.0], args=(k,), rtol=1e-10,
                         atol=1e-12).y[0, -1]
    np.testing.assert_allclose(fgrad.grad(final)(0.3), finite_difference(final, (0.3,), 0),
                               rtol=1e-6)


def test_events_other_methods_and_bad_args_are_refused():
    decay = lambda t, y: -y          # noqa: E731
    with pytest.raises(fgrad.errors.ScipyArgumentError,
                       match="events are not supported by fgrad.scipy.integrate.solve_ivp"):
        solve_ivp(decay, (0.0, 1.0), [1.0], events=lambda t, y: y[0] - 0.5)
    with pytest.raises(fgrad.errors.ScipyArgumentError,
                       match="method=.*Euler.* is not one fgrad can differentiate"):
        solve_ivp(decay, (0.0, 1.0), [1.0], method="Euler")
    with pytest.raises(fgrad.errors.ScipyArgumentError, match="args must be a tuple"):
        solve_ivp(lambda t, y, k: -k * y, (0.0, 1.0), [1.0], args=0.5)
    with pytest.raises(fgrad.errors.ScipyArgumentError, match="a complex y0 is not supported"):
        solve_ivp(decay, (0.0, 1.0), [1.0 + 1.0j])


@pytest.mark.parametrize("t_eval", [None, [0.5, 1.5, 2.0], [1.5, 2.0]],
                         ids=["steps", "some t_eval reached", "before the first t_eval"])
def test_a_failed_solve_ivp_raises_and_says_where(t_eval):
    # y' = y^2 from y(0) = 1 blows up at t = 1: the message names that time, not
    # the last output time reached (none, when it fails before the first)
    with pytest.raises(fgrad.errors.IntegrationError,
                       match=r"solve_ivp's solve \(RK45\) failed near t=0.99.* of "
                             r"t_span=\(0, 2\): SciPy says 'Required step size"):
        solve_ivp(lambda t, y: y ** 2, (0.0, 2.0), [1.0], t_eval=t_eval)


def test_a_failed_solve_ivp_adjoint_pass_raises():
    with pytest.raises(fgrad.errors.IntegrationError,
                       match=r"solve_ivp's adjoint pass \(RK45: fun's vector-Jacobian "
                             r"products\) met NaN at t=1"):
        fgrad.grad(lambda k: solve_ivp(lambda t, y, k: -k * nan_gradient(y), (0.0, 1.0),
                                       [1.0], args=(k,)).y[0, -1])(0.5)


def test_solve_ivp_forward_mode_and_second_order_are_refused_not_zero():
    final = lambda k: solve_ivp(lambda t, y, k: -k * y, (0.0, 1.0), [1.0],  # noqa: E731
                                args=(k,)).y[0, -1]
    with pytest.raises(fgrad.errors.MissingRuleError,
                       match="solve_ivp differentiates once, in reverse mode"):
        fgrad.grad(fgrad.grad(final))(0.5)
    reverse_only = (r"reached '{}', which is differentiated in reverse mode only: "
                    r"fgrad.scipy.integrate.{} is solved by SciPy .* Use fgrad.jacrev for its "
                    r"Jacobian, or fgrad.grad or fgrad.vjp, instead")
    with pytest.raises(fgrad.errors.MissingRuleError,
                       match=reverse_only.format("solve_ivp", "solve_ivp")):
        fgrad.jvp(final, (0.5,), (1.0,))
    # the same through jit's staged graph, under vmap, and from the dense output
    at_one = lambda k: solve_ivp(lambda t, y, k: -k * y, (0.0, 1.0), [1.0],  # noqa: E731
                                 t_eval=[1.0], args=(k,)).y[0]
    with pytest.raises(fgrad.errors.MissingRuleError,
                       match=reverse_only.format("solve_ivp", "solve_ivp")):
        fgrad.jacfwd(fgrad.jit(at_one))(0.5)
    with pytest.raises(fgrad.errors.MissingRuleError,
                       match=reverse_only.format(r"vmap\(solve_ivp\)", "solve_ivp")):
        fgrad.jacfwd(fgrad.vmap(at_one))(np.array([0.5, 0.6]))
    sol = solve_ivp(lambda t, y: -0.5 * y, (0.0, 1.0), [1.0], dense_output=True).sol
    with pytest.raises(fgrad.errors.MissingRuleError, match=reverse_only.format(
            "solve_ivp_solution", r"solve_ivp's dense output \(res.sol\)")):
        fgrad.jacfwd(sol)(0.5)


def _lv_final(p, y0):
    res = solve_ivp(lotka_volterra, (0.0, 1.0), y0, t_eval=[0.5, 1.0], args=(p,), rtol=1e-8,
                    atol=1e-10)
    return fnp.sum(res.y ** 2)


def test_under_jit_the_solve_is_a_host_callback_and_its_adjoint_the_derivative():
    jitted, jitted_grad = fgrad.jit(_lv_final), fgrad.jit(fgrad.grad(_lv_final, argnums=(0, 1)))
    for p in (LV_P, 1.2 * LV_P):           # run at each call, not baked in at tracing
        np.testing.assert_allclose(jitted(p, LV_Y0), _lv_final(p, LV_Y0), rtol=1e-12)
        for got, want in zip(jitted_grad(p, LV_Y0),
                             fgrad.grad(_lv_final, argnums=(0, 1))(p, LV_Y0)):
            np.testing.assert_allclose(got, want, rtol=1e-9)
    assert jitted_grad.cache_info().traces == 1


def test_vmap_solves_problems_one_by_one():
    ps = np.stack([LV_P, 1.1 * LV_P])
    y0s = np.stack([LV_Y0, 1.5 * LV_Y0])
    values = fgrad.vmap(_lv_final, in_axes=(0, None))(ps, LV_Y0)
    grads = fgrad.vmap(fgrad.grad(_lv_final), in_axes=(0, None))(ps, LV_Y0)
    for i, p in enumerate(ps):
        np.testing.assert_allclose(values[i], _lv_final(p, LV_Y0), rtol=1e-12)
        np.testing.assert_allclose(grads[i], fgrad.grad(_lv_final)(p, LV_Y0), rtol=1e-9)
    # grad of a vmapped sum: the shared parameters' cotangents add up
    total = fgrad.grad(lambda p: fnp.sum(fgrad.vmap(_lv_final, in_axes=(None, 0))(p, y0s)))(LV_P)
    want = sum(fgrad.grad(_lv_final)(LV_P, y0) for y0 in y0s)
    np.testing.assert_allclose(total, want, rtol=1e-9)


def test_under_jit_t_eval_is_needed_and_closures_over_traced_values_are_refused():
    with pytest.raises(fgrad.errors.ScipyArgumentError, match="under jit or vmap needs t_eval"):
        fgrad.jit(lambda k: solve_ivp(lambda t, y, k: -k * y, (0.0, 1.0), [1.0],
                                      args=(k,)).y)(0.5)
    with pytest.raises(fgrad.errors.ScipyArgumentError,
                       match="closed over instead of passed in args"):
        fgrad.grad(lambda k: solve_ivp(lambda t, y: -k * y, (0.0, 1.0), [1.0]).y[0, -1])(0.5)
