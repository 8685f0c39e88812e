"""fgrad.scipy.integrate.solve_ivp: SciPy's values and result, and adjoint
gradients checked against finite differences of re-solving at tight tolerance
(a Lotka-Volterra system and the stiff Robertson kinetics) and against JAX."""
import numpy as np
import pytest

scipy_integrate = pytest.importorskip("scipy.integrate")

import fgrad  # noqa: E402
import fgrad.numpy as fnp  # noqa: E402
from fgrad.scipy.integrate import solve_ivp  # noqa: E402

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


def test_values_and_result_are_scipys():
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


def _mlp_field(t, y, layers):
    for i, (w, b) in enumerate(layers):
        y = w @ y + b
        y = fnp.tanh(y) if i < len(layers) - 1 else y
    return y


def test_neural_ode_pytree_args():
    rng = np.random.default_rng(0)
    layers = [(0.5 * rng.standard_normal((4, 2)), 0.1 * rng.standard_normal(4)),
              (0.5 * rng.standard_normal((2, 4)), 0.1 * rng.standard_normal(2))]

    def loss(layers, tol=dict(rtol=1e-9, atol=1e-11)):
        res = solve_ivp(_mlp_field, (0.0, 1.0), LV_Y0, method="DOP853", t_eval=[0.5, 1.0],
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


def test_a_failed_solve_raises():
    with pytest.raises(fgrad.errors.IntegrationError,
                       match=r"solve_ivp's solve \(RK45\) failed at t=0.99.* SciPy says "
                             "'Required step size"):
        solve_ivp(lambda t, y: y ** 2, (0.0, 2.0), [1.0])


def test_a_failed_adjoint_pass_raises():
    @fgrad.custom_vjp
    def nan_gradient(y):
        return y

    nan_gradient.defvjp(lambda y: (y, None), lambda _, ct: (ct * np.nan,))
    with pytest.raises(fgrad.errors.IntegrationError,
                       match=r"solve_ivp's adjoint pass \(RK45: fun's vector-Jacobian "
                             r"products\) met NaN at t=1"):
        fgrad.grad(lambda k: solve_ivp(lambda t, y, k: -k * nan_gradient(y), (0.0, 1.0),
                                       [1.0], args=(k,)).y[0, -1])(0.5)


def test_forward_mode_and_second_order_are_refused_not_zero():
    final = lambda k: solve_ivp(lambda t, y, k: -k * y, (0.0, 1.0), [1.0],  # noqa: E731
                                args=(k,)).y[0, -1]
    with pytest.raises(fgrad.errors.MissingRuleError,
                       match="solve_ivp differentiates once, in reverse mode"):
        fgrad.grad(fgrad.grad(final))(0.5)
    with pytest.raises(fgrad.errors.CustomRuleError, match="'solve_ivp', which only defines"):
        fgrad.jvp(final, (0.5,), (1.0,))


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
