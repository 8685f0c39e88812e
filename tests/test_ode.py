"""fgrad.ode: solvers written with fgrad.lax. Values against closed forms and
SciPy at tight tolerances; derivatives (backsolve, through the steps, forward
mode, second order) against finite differences of tight re-solves; against
jax.experimental.ode.odeint and diffrax where installed; under jit and vmap;
failures and refusals with their messages."""
import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad import ode
from fgrad.compiler import native
from fgrad.compiler.program import PROGRAM_ENV
from fgrad.errors import IntegrationError, OdeArgumentError
from fgrad.ode.implicit import stage_solver

TIGHT = ode.PIDController(rtol=1e-11, atol=1e-11)
P_LV, Y0_LV, TS_LV = np.array([1.5, 1.0, 1.0, 3.0]), np.array([1.0, 1.0]), np.linspace(0, 2, 5)


def decay(t, y, k):
    return -k * y


def oscillator(t, y, args):
    # a damped, driven oscillator: it reads t, so time derivatives are exercised
    k, c = args
    return fnp.stack([y[1], -k * y[0] - c * y[1] + 0.5 * fnp.sin(t)])


def lotka_volterra(y, t, p):
    return fnp.stack([p[0] * y[0] - p[1] * y[0] * y[1], p[2] * y[0] * y[1] - p[3] * y[1]])


def central_difference(f, x, eps=1e-6):
    """d f / d x by central differences, entry by entry (f returns a scalar)."""
    x = np.asarray(x, dtype=float)
    out = np.zeros(x.shape)
    for idx in np.ndindex(x.shape):
        step = np.zeros(x.shape)
        step[idx] = eps
        out[idx] = (f(x + step) - f(x - step)) / (2 * eps)
    return out


def solve_decay(solver, controller, dt0=None, ts=(0.5, 1.0, 2.0), k=0.7, **kw):
    return ode.solve(decay, solver, 0.0, 2.0, dt0, np.array([1.0, -2.0]), k,
                     saveat=ode.SaveAt(ts=list(ts)), stepsize_controller=controller, **kw)


# -- values ---------------------------------------------------------------------------


@pytest.mark.parametrize("solver", [ode.Tsit5(), ode.Dopri5()])
def test_adaptive_solvers_match_the_closed_form_at_every_saved_time(solver):
    ts = np.linspace(0.0, 2.0, 23)          # many outputs per step: the dense output
    sol = solve_decay(solver, TIGHT, ts=ts)
    want = np.exp(-0.7 * ts)[:, None] * np.array([1.0, -2.0])
    np.testing.assert_allclose(sol.ys, want, rtol=1e-9, atol=1e-10)
    assert int(sol.result) == 0 and int(sol.stats["num_steps"]) < 200


@pytest.mark.parametrize("solver,order", [(ode.Euler(), 1), (ode.Heun(), 2),
                                          (ode.Midpoint(), 2), (ode.RK4(), 4)])
def test_fixed_step_solvers_converge_at_their_order(solver, order):
    def error(dt):
        sol = ode.solve(oscillator, solver, 0.0, 2.0, dt, np.array([1.0, 0.0]), (2.0, 0.3),
                        stepsize_controller=ode.ConstantStepSize())
        ref = ode.solve(oscillator, ode.Tsit5(), 0.0, 2.0, None, np.array([1.0, 0.0]),
                        (2.0, 0.3), stepsize_controller=TIGHT)
        return np.abs(sol.ys - ref.ys).max()
    rate = np.log2(error(0.02) / error(0.01))
    assert abs(rate - order) < 0.2


def test_dopri8_is_eighth_order_and_reaches_tight_tolerances_in_few_steps():
    def solve_with(dt, controller=ode.ConstantStepSize()):
        return ode.solve(oscillator, ode.Dopri8(), 0.0, 4.0, dt, np.array([1.0, 0.0]),
                         (2.0, 0.3), stepsize_controller=controller)
    ref = solve_with(0.01).ys
    coarse, fine = (np.abs(solve_with(dt).ys - ref).max() for dt in (0.8, 0.4))
    assert np.log2(coarse / fine) > 7.5
    sol = solve_with(None, ode.PIDController(1e-11, 1e-11))
    np.testing.assert_allclose(sol.ys, ref, atol=1e-10)
    assert int(sol.stats["num_steps"]) < 40


def test_harmonic_oscillator_keeps_its_closed_form_with_a_pytree_state():
    def field(t, y, omega):
        return {"x": y["v"], "v": -omega ** 2 * y["x"]}
    ts = np.linspace(0.0, 6.0, 13)
    sol = ode.solve(field, ode.Tsit5(), 0.0, 6.0, 0.1, {"x": np.array(1.0), "v": np.array(0.0)},
                    2.0, saveat=ode.SaveAt(ts=ts), stepsize_controller=TIGHT)
    np.testing.assert_allclose(sol.ys["x"], np.cos(2 * ts), atol=1e-9)
    np.testing.assert_allclose(sol.ys["v"], -2 * np.sin(2 * ts), atol=1e-9)


def test_lotka_volterra_matches_scipys_solve_ivp():
    scipy_integrate = pytest.importorskip("scipy.integrate")
    ref = scipy_integrate.solve_ivp(lambda t, y: np.asarray(lotka_volterra(y, t, P_LV)),
                                    (0.0, 2.0), Y0_LV, t_eval=TS_LV, method="DOP853",
                                    rtol=1e-13, atol=1e-13)
    ys = ode.odeint(lotka_volterra, Y0_LV, TS_LV, P_LV, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(ys, ref.y.T, rtol=1e-8)
    sol = ode.solve(lambda t, y, p: lotka_volterra(y, t, p), ode.Tsit5(), 0.0, 2.0, None, Y0_LV,
                    P_LV, saveat=ode.SaveAt(ts=TS_LV), stepsize_controller=TIGHT)
    np.testing.assert_allclose(sol.ys, ref.y.T, rtol=1e-8)


def test_a_backward_solve_runs_from_t0_down_to_t1():
    sol = ode.solve(decay, ode.Tsit5(), 2.0, 0.0, -0.1, np.array([1.0]), 0.5,
                    saveat=ode.SaveAt(ts=[1.0, 0.0]), stepsize_controller=TIGHT)
    np.testing.assert_allclose(sol.ys[:, 0], np.exp(0.5 * np.array([1.0, 2.0])), rtol=1e-9)


def test_odeint_saves_y0_first_and_takes_pytrees():
    ys = ode.odeint(lambda y, t: {"a": -y["a"], "b": 2.0 * y["b"]},
                    {"a": np.ones(2), "b": np.array(1.0)}, np.array([0.0, 0.5, 1.0]))
    np.testing.assert_allclose(ys["a"][:, 0], np.exp(-np.array([0.0, 0.5, 1.0])), rtol=1e-7)
    np.testing.assert_allclose(ys["b"], np.exp([0.0, 1.0, 2.0]), rtol=1e-7)


# -- derivatives ----------------------------------------------------------------------


def lv_loss(y0, ts, p, rtol=1e-9):
    return fnp.sum(ode.odeint(lotka_volterra, y0, ts, p, rtol=rtol, atol=rtol) ** 2)


def test_odeint_backsolve_gradient_matches_finite_differences_eager_and_compiled():
    grad = fgrad.grad(lv_loss, argnums=(0, 1, 2))
    got = grad(Y0_LV, TS_LV, P_LV)
    compiled = fgrad.jit(grad)(Y0_LV, TS_LV, P_LV)
    loss = fgrad.jit(lambda y0, ts, p: lv_loss(y0, ts, p, 1e-12))
    fd = [central_difference(lambda x: float(loss(x, TS_LV, P_LV)), Y0_LV),
          central_difference(lambda x: float(loss(Y0_LV, x, P_LV)), TS_LV),
          central_difference(lambda x: float(loss(Y0_LV, TS_LV, x)), P_LV)]
    for g, c, want in zip(got, compiled, fd):
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(c, g, rtol=1e-10)


def test_odeint_matches_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    from jax.experimental.ode import odeint as jax_odeint

    def field(y, t, p):
        return jnp.stack([p[0] * y[0] - p[1] * y[0] * y[1], p[2] * y[0] * y[1] - p[3] * y[1]])

    def jax_loss(y0, p):
        return jnp.sum(jax_odeint(field, y0, jnp.asarray(TS_LV), p) ** 2)
    want = jax.grad(jax_loss, argnums=(0, 1))(jnp.asarray(Y0_LV), jnp.asarray(P_LV))
    ys = ode.odeint(lotka_volterra, Y0_LV, TS_LV, P_LV)
    np.testing.assert_allclose(ys, jax_odeint(field, jnp.asarray(Y0_LV), jnp.asarray(TS_LV),
                                              jnp.asarray(P_LV)), rtol=1e-6)
    got = fgrad.grad(lambda y0, p: fnp.sum(ode.odeint(lotka_volterra, y0, TS_LV, p) ** 2),
                     argnums=(0, 1))(Y0_LV, P_LV)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-5)


def oscillator_end(y0, args, adjoint=None, controller=TIGHT):
    sol = ode.solve(oscillator, ode.Tsit5(), 0.0, 3.0, None, y0, args,
                    saveat=ode.SaveAt(ts=[1.0, 3.0]), stepsize_controller=controller,
                    adjoint=adjoint)
    return fnp.sum(sol.ys ** 2)


@pytest.mark.parametrize("adjoint", [ode.DirectAdjoint(), ode.BacksolveAdjoint()])
def test_solve_gradients_match_finite_differences(adjoint):
    y0, args = np.array([1.0, 0.0]), (2.0, 0.3)
    g_y0, (g_k, g_c) = fgrad.grad(oscillator_end, argnums=(0, 1))(y0, args, adjoint)
    np.testing.assert_allclose(g_y0, central_difference(
        lambda x: float(oscillator_end(x, args)), y0), rtol=1e-6)
    fd = central_difference(lambda a: float(oscillator_end(y0, tuple(a))), np.array(args))
    np.testing.assert_allclose([g_k, g_c], fd, rtol=1e-6)


def test_backsolve_gradient_compiles_and_runs_under_jit():
    y0, args = np.array([1.0, 0.0]), (2.0, 0.3)
    grad = fgrad.grad(oscillator_end, argnums=(0, 1))
    eager = grad(y0, args, ode.BacksolveAdjoint())
    compiled = fgrad.jit(lambda y0, args: grad(y0, args, ode.BacksolveAdjoint()))(y0, args)
    np.testing.assert_allclose(compiled[0], eager[0], rtol=1e-10)
    np.testing.assert_allclose(compiled[1], eager[1], rtol=1e-10)


def test_forward_mode_through_the_solver_eager_and_compiled():
    y0, args = np.array([1.0, 0.0]), (2.0, 0.3)
    fd = central_difference(lambda x: float(oscillator_end(x, args)), y0)
    np.testing.assert_allclose(fgrad.jacfwd(oscillator_end)(y0, args), fd, rtol=1e-6)
    np.testing.assert_allclose(fgrad.jit(fgrad.jacfwd(oscillator_end))(y0, args), fd, rtol=1e-6)
    _, tangent = fgrad.jit(lambda y: fgrad.jvp(oscillator_end, (y, args),
                                               (np.array([1.0, 0.0]), (0.0, 0.0))))(y0)
    np.testing.assert_allclose(tangent, fd[0], rtol=1e-6)


def test_second_order_hessian_of_a_fit_matches_the_closed_form():
    def loss(k):           # y(1) = exp(-k) (1, -2): loss = 5 exp(-2k)
        return fnp.sum(solve_decay(ode.Tsit5(), TIGHT, ts=[1.0], k=k).ys ** 2)
    want = 20.0 * np.exp(-2.0 * 0.7)
    np.testing.assert_allclose(fgrad.hessian(loss)(0.7), want, rtol=1e-8)
    np.testing.assert_allclose(fgrad.jit(fgrad.jacfwd(fgrad.jacfwd(loss)))(0.7), want,
                               rtol=1e-8)


def saved_loss(y0, k, ts, adjoint):
    sol = ode.solve(oscillator, ode.Tsit5(), 0.0, 3.0, None, y0, (k, 0.3),
                    saveat=ode.SaveAt(t0=True, ts=ts, t1=True),
                    stepsize_controller=ode.PIDController(1e-8, 1e-8), adjoint=adjoint,
                    max_steps=256)
    return fnp.sum(sol.ys ** 2)


def test_checkpointed_reverse_mode_is_the_direct_derivative_eager_and_compiled():
    y0, ts = np.array([1.0, 0.0]), np.array([0.5, 1.5])
    want = fgrad.grad(saved_loss, argnums=(0, 1, 2))(y0, 2.0, ts, ode.DirectAdjoint())
    eager = fgrad.grad(saved_loss, argnums=(0, 1, 2))(y0, 2.0, ts,
                                                      ode.RecursiveCheckpointAdjoint())
    adjoint = ode.RecursiveCheckpointAdjoint(checkpoints=4)
    compiled = fgrad.jit(fgrad.grad(lambda a, b, c: saved_loss(a, b, c, adjoint),
                                    argnums=(0, 1, 2)))(y0, 2.0, ts)
    for w, e, c in zip(want, eager, compiled):
        np.testing.assert_allclose(e, w, rtol=1e-10)
        np.testing.assert_allclose(c, w, rtol=1e-10)


def graphs_in(graph):
    """``graph`` and every graph in its equations' parameters, at any depth."""
    found = [graph]
    for eqn in graph.eqns:
        for value in eqn.params.values():
            for sub in value if isinstance(value, tuple) else (value,):
                if isinstance(sub, fgrad.core.graph.Graph):
                    found += graphs_in(sub)
    return found


def relaxation(t, y, k):
    return -k * (y - fnp.sin(t))


def relaxation_loss(k, checkpoints, calls=None, size=40):
    def field(t, y, k):
        if calls is not None:
            calls.append(t)
        return relaxation(t, y, k)
    sol = ode.solve(field, ode.Heun(), 0.0, 3.0, 0.05, np.linspace(0.0, 1.0, size), k,
                    adjoint=ode.RecursiveCheckpointAdjoint(checkpoints=checkpoints),
                    max_steps=100)
    return fnp.sum(sol.ys ** 2)


@pytest.mark.parametrize("checkpoints", [1, 2, 3, 5, None, 100])
def test_checkpointed_gradient_with_any_number_of_checkpoints(checkpoints):
    k = np.float64(1.3)
    want = fgrad.grad(lambda k: relaxation_loss(k, 1))(k)   # exact: a fixed step count
    fd = central_difference(lambda k: float(relaxation_loss(k, 1)), k)
    np.testing.assert_allclose(want, fd, rtol=1e-6)
    got = fgrad.jit(fgrad.grad(lambda k: relaxation_loss(k, checkpoints)))(k)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_checkpoints_bound_the_stored_states_and_trade_memory_for_steps():
    # 60 Heun steps of a 40-entry state: no array of the compiled gradient holds
    # more than `checkpoints` states, and fewer checkpoints replay more steps
    size = 40
    for checkpoints in (1, 3, 7):
        graph = fgrad.make_graph(fgrad.grad(lambda k: relaxation_loss(k, checkpoints)))(1.3)
        states = [v.aval.shape[0] for g in graphs_in(graph)
                  for v in [*g.invars, *(o for e in g.eqns for o in e.outvars)]
                  if len(v.aval.shape) == 2 and v.aval.shape[1] == size]
        assert max(states) == checkpoints
    forward = []
    relaxation_loss(1.3, None, forward)
    n = (len(forward) - 1) // 2
    replayed = {}
    for checkpoints in (1, 3, 7):
        calls = []
        fgrad.grad(lambda k: relaxation_loss(k, checkpoints, calls))(1.3)
        # Heun evaluates the field twice a step; the reverse pass evaluates it
        # once at the start, twice for each step's VJP and for each step replayed
        replayed[checkpoints] = (len(calls) - len(forward) - 1) // 2 - n
    assert n >= 60
    assert replayed[1] == n * (n - 1) // 2              # every step from the start
    assert replayed[7] <= n * 6 // 2                    # bisection: (n / 2) log2 n
    assert replayed[1] > replayed[3] > replayed[7]


def test_checkpointed_gradient_under_vmap():
    ts = np.array([0.5, 1.5])
    grad = fgrad.grad(lambda y0, k: saved_loss(y0, k, ts, ode.RecursiveCheckpointAdjoint()),
                      argnums=1)
    y0s, ks = np.array([[1.0, 0.0], [2.0, 0.0]]), np.array([2.0, 3.0])
    got = fgrad.jit(fgrad.vmap(grad))(y0s, ks)
    want = [fgrad.grad(saved_loss, argnums=1)(y0, k, ts, ode.DirectAdjoint())
            for y0, k in zip(y0s, ks)]
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_the_default_adjoint_under_jit_grad_replays_from_checkpoints():
    y0 = np.array([1.0, 0.0])
    grad = fgrad.grad(lambda y0, k: oscillator_end(y0, (k, 0.3)), argnums=(0, 1))
    for got, want in zip(fgrad.jit(grad)(y0, 2.0), grad(y0, 2.0)):
        np.testing.assert_allclose(got, want, rtol=1e-10)
    batched = fgrad.jit(fgrad.vmap(fgrad.grad(lambda k: oscillator_end(y0, (k, 0.3)))))
    np.testing.assert_allclose(batched(np.array([2.0])), [grad(y0, 2.0)[1]], rtol=1e-10)


def test_grad_of_a_jitted_solve_matches_finite_differences():
    # grad outside jit meets the solve staged already: the staged solve carries
    # its checkpointed reverse rule, and forward mode still goes through its steps
    y0, args = np.array([1.0, 0.0]), (2.0, 0.3)
    compiled = fgrad.jit(oscillator_end)
    g_y0, (g_k, g_c) = fgrad.grad(compiled, argnums=(0, 1))(y0, args)
    np.testing.assert_allclose(g_y0, central_difference(
        lambda x: float(oscillator_end(x, args)), y0), rtol=1e-6)
    fd = central_difference(lambda a: float(oscillator_end(y0, tuple(a))), np.array(args))
    np.testing.assert_allclose([g_k, g_c], fd, rtol=1e-6)
    eager = fgrad.grad(oscillator_end, argnums=(0, 1))(y0, args)
    np.testing.assert_allclose(g_y0, eager[0], rtol=1e-10)
    _, tangent = fgrad.jvp(lambda y: compiled(y, args), (y0,), (np.array([1.0, 0.0]),))
    np.testing.assert_allclose(tangent, eager[0][0], rtol=1e-10)


@pytest.mark.parametrize("adjoint", [ode.DirectAdjoint(), ode.RecursiveCheckpointAdjoint(),
                                     ode.BacksolveAdjoint()])
def test_an_integer_in_args_is_held_fixed_by_every_adjoint_under_jit(adjoint):
    def end_sum(k):                 # y' = -k n y, n an integer: y(1) = exp(-2k)
        sol = ode.solve(lambda t, y, a: -a[0] * a[1] * y, ode.Tsit5(), 0.0, 1.0, None,
                        np.ones(2), (k, 2), stepsize_controller=TIGHT, adjoint=adjoint)
        return fnp.sum(sol.ys)
    want = -4 * np.exp(-1.0)
    np.testing.assert_allclose(fgrad.jit(fgrad.grad(end_sum))(0.5), want, rtol=1e-8)
    if not isinstance(adjoint, ode.BacksolveAdjoint):
        np.testing.assert_allclose(fgrad.jit(fgrad.jacrev(fgrad.jacfwd(end_sum)))(0.5),
                                   8 * np.exp(-1.0), rtol=1e-8)


def fit_loss(p, solver=None, controller=TIGHT, adjoint=None):
    """A Lotka-Volterra fit's loss: squared distance to data at five times."""
    def field(t, y, p):
        return lotka_volterra(y, t, p)
    sol = ode.solve(field, solver or ode.Tsit5(), 0.0, 2.0, None, Y0_LV, p,
                    saveat=ode.SaveAt(ts=TS_LV[1:]), stepsize_controller=controller,
                    adjoint=adjoint)
    data = np.array([[1.2, 0.6], [1.1, 0.5], [0.9, 0.6], [0.8, 0.8]])
    return fnp.sum((sol.ys - data) ** 2)


def hessian_by_differences(p, eps=1e-5):
    grad = fgrad.grad(fit_loss)
    return np.stack([(grad(p + eps * e) - grad(p - eps * e)) / (2 * eps)
                     for e in np.eye(p.size)])


@pytest.mark.slow
def test_hessian_of_a_fit_in_every_mode_eager_and_compiled():
    p = P_LV
    want = hessian_by_differences(p)
    np.testing.assert_allclose(want, want.T, atol=1e-5)
    modes = {"jacfwd(jacrev)": fgrad.hessian(fit_loss),
             "jacrev(jacrev)": fgrad.jacrev(fgrad.jacrev(fit_loss)),
             "jacfwd(jacfwd)": fgrad.jacfwd(fgrad.jacfwd(fit_loss)),
             "jacrev(jacfwd)": fgrad.jacrev(fgrad.jacfwd(fit_loss))}
    for name, h in modes.items():
        for f in (h, fgrad.jit(h)):
            np.testing.assert_allclose(f(p), want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_grad_of_grad_and_jvp_of_grad_under_jit_and_outside_it():
    # one direction of the Hessian (a Hessian-vector product) in every order of
    # the two modes, with the solve staged inside or outside the reverse passes
    p, v = P_LV, np.array([1.0, -0.5, 0.25, 2.0])
    want = hessian_by_differences(p) @ v
    hvp_rev = fgrad.grad(lambda p: fgrad.grad(fit_loss)(p) @ v)
    hvp_fwd = lambda p: fgrad.jvp(fgrad.grad(fit_loss), (p,), (v,))[1]  # noqa: E731
    outside = fgrad.grad(lambda p: fgrad.jit(fgrad.grad(fit_loss))(p) @ v)
    # reverse over forward: grad of the derivative along v, the solve staged
    # inside the forward pass, inside both, or outside them
    rev_of_fwd = fgrad.grad(lambda p: fgrad.jvp(fit_loss, (p,), (v,))[1])
    staged_fwd = fgrad.grad(lambda p: fgrad.jit(
        lambda p: fgrad.jvp(fit_loss, (p,), (v,))[1])(p))
    for f in (hvp_rev, fgrad.jit(hvp_rev), fgrad.jit(hvp_fwd), outside,
              fgrad.jit(rev_of_fwd), staged_fwd):
        np.testing.assert_allclose(f(p), want, rtol=1e-5, atol=1e-6)


# -- stiff problems -------------------------------------------------------------------


def robertson(t, y, k):
    return fnp.stack([-k[0] * y[0] + k[2] * y[1] * y[2],
                      k[0] * y[0] - k[2] * y[1] * y[2] - k[1] * y[1] ** 2, k[1] * y[1] ** 2])


def test_kvaerno5_solves_robertsons_stiff_kinetics_as_radau_does():
    scipy_integrate = pytest.importorskip("scipy.integrate")
    k, ts = np.array([0.04, 3e7, 1e4]), np.array([0.1, 1.0, 10.0])
    ref = scipy_integrate.solve_ivp(lambda t, y: np.asarray(robertson(t, y, k)), (0.0, 10.0),
                                    [1.0, 0.0, 0.0], method="Radau", t_eval=ts, rtol=1e-12,
                                    atol=1e-14)
    sol = ode.solve(robertson, ode.Kvaerno5(), 0.0, 10.0, 1e-6, np.array([1.0, 0.0, 0.0]), k,
                    saveat=ode.SaveAt(ts=ts),
                    stepsize_controller=ode.PIDController(1e-8, 1e-12, pcoeff=0.3, icoeff=0.4))
    np.testing.assert_allclose(sol.ys, ref.y.T, rtol=1e-5, atol=1e-10)
    assert int(sol.stats["num_steps"]) < 100       # an explicit solver needs ~10^5


def test_newton_iterations_stop_when_converged_and_reject_steps_that_do_not_converge():
    k, y0 = np.array([0.04, 3e7, 1e4]), np.array([1.0, 0.0, 0.0])

    def run(newton_steps, **kw):
        return ode.solve(robertson, ode.Kvaerno5(newton_steps=newton_steps), 0.0, 1e4, 1e-6,
                         y0, k, stepsize_controller=ode.PIDController(
                             1e-8, 1e-12, pcoeff=0.3, icoeff=0.4), max_steps=1000, **kw)
    adaptive, two = run(10), run(2)
    # up to ten iterations, stopping once converged: no step rejected for Newton
    assert int(adaptive.stats["num_rejected_steps"]) == 0
    # two iterations are too few for some steps: rejected and retried shorter
    assert int(two.stats["num_rejected_steps"]) > 0
    assert int(two.stats["num_steps"]) > int(adaptive.stats["num_steps"])
    np.testing.assert_allclose(two.ys, adaptive.ys, rtol=1e-6)
    # one iteration never converges: every step is rejected until max_steps
    with pytest.raises(IntegrationError, match="max_steps"):
        run(1)


def test_a_diverging_newton_iteration_is_detected():
    def cubic(t, y, args):
        return -1e3 * y ** 3
    solve = stage_solver(cubic, lambda v: v, 1.0, 10, 1e-10, 1e-12)
    one = np.ones(1)
    # the chord matrix of J = 0 (at y = 0): plain fixed-point iterations, which
    # converge for a short step and run away for a long one
    z, size = solve(one, one, 1e-5, 0.0, None, np.eye(1))
    assert float(size) <= 1.0
    np.testing.assert_allclose(z - 1.0 + 1e-5 * 1e3 * z ** 3, 0.0, atol=1e-10)
    _, size = solve(one, one, 1e-2, 0.0, None, np.eye(1))
    assert float(size) == np.inf


def stiff_relaxation(t, y, lam):
    return -lam * (y - fnp.cos(t))


def relaxed(lam, t):
    # the exact solution from y(0) = 0 of y' = -lam (y - cos t)
    a = lam ** 2 / (lam ** 2 + 1)
    return a * (np.cos(t) + np.sin(t) / lam) - a * np.exp(-lam * t)


@pytest.mark.parametrize("solver,tol", [(ode.Kvaerno3(), 1e-6), (ode.Kvaerno5(), 1e-8)])
def test_implicit_solvers_match_the_closed_form_of_a_stiff_relaxation(solver, tol):
    ts = np.array([1e-4, 0.1, 1.0])
    sol = ode.solve(stiff_relaxation, solver, 0.0, 1.0, 1e-6, np.zeros(1), 1e4,
                    saveat=ode.SaveAt(ts=ts), stepsize_controller=ode.PIDController(tol, tol))
    np.testing.assert_allclose(sol.ys[:, 0], relaxed(1e4, ts), rtol=100 * tol)


def test_implicit_solver_under_vmap_steps_each_example_on_its_own():
    def end(lam):
        sol = ode.solve(stiff_relaxation, ode.Kvaerno5(), 0.0, 1.0, 1e-6, np.zeros(1), lam,
                        stepsize_controller=ode.PIDController(1e-8, 1e-10))
        return sol.ys[0, 0]
    lams = np.array([10.0, 1e5])
    np.testing.assert_allclose(fgrad.jit(fgrad.vmap(end))(lams), relaxed(lams, 1.0), rtol=1e-6)


def test_implicit_solver_derivatives_in_every_mode():
    def end(lam, adjoint=None, rtol=1e-9):
        sol = ode.solve(stiff_relaxation, ode.Kvaerno5(), 0.0, 1.0, 1e-6, np.zeros(1), lam,
                        stepsize_controller=ode.PIDController(rtol, rtol * 1e-2),
                        adjoint=adjoint, max_steps=512)
        return sol.ys[0, 0]
    exact = (relaxed(50.0 + 1e-4, 1.0) - relaxed(50.0 - 1e-4, 1.0)) / 2e-4
    forward = fgrad.jit(fgrad.jacfwd(end))(50.0)
    reverse = fgrad.jit(fgrad.grad(lambda lam: end(lam, ode.RecursiveCheckpointAdjoint())))(50.0)
    np.testing.assert_allclose(forward, exact, rtol=1e-6)
    np.testing.assert_allclose(reverse, forward, rtol=1e-10)


# -- vmap -----------------------------------------------------------------------------


@pytest.mark.parametrize("compiled", [False, True])
def test_vmap_over_initial_conditions_and_parameters(compiled):
    y0s = np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 2.0]])
    ks = np.array([1.0, 2.0, 4.0])
    batched = fgrad.vmap(lambda y0, k: oscillator_end(y0, (k, 0.3)))
    got = (fgrad.jit(batched) if compiled else batched)(y0s, ks)
    want = [oscillator_end(y0, (k, 0.3)) for y0, k in zip(y0s, ks)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_vmap_of_the_odeint_gradient():
    grad = fgrad.grad(lambda p: lv_loss(Y0_LV, TS_LV, p, 1e-8))
    ps = np.stack([P_LV, P_LV * 1.1])
    got = fgrad.jit(fgrad.vmap(grad))(ps)
    np.testing.assert_allclose(got, [grad(p) for p in ps], rtol=1e-10)


# -- against diffrax ------------------------------------------------------------------


def test_tsit5_values_and_gradient_match_diffrax():
    diffrax = pytest.importorskip("diffrax")
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def jax_loss(y0, k):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(lambda t, y, k: jnp.stack([y[1], -k * y[0] - 0.3 * y[1]
                                                       + 0.5 * jnp.sin(t)])),
            diffrax.Tsit5(), 0.0, 3.0, None, y0, k, saveat=diffrax.SaveAt(ts=[1.0, 3.0]),
            stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=1e-6))
        return jnp.sum(sol.ys ** 2)
    ours = fgrad.value_and_grad(
        lambda y0, k: oscillator_end(y0, (k, 0.3), controller=ode.PIDController(1e-6, 1e-6)),
        argnums=(0, 1))(np.array([1.0, 0.0]), 2.0)
    theirs = jax.value_and_grad(jax_loss, argnums=(0, 1))(jnp.array([1.0, 0.0]), 2.0)
    # the same method to the same tolerance (the step sequences differ in details)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5)
    np.testing.assert_allclose(ours[1][0], theirs[1][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours[1][1], theirs[1][1], rtol=1e-5)


def test_hessian_of_a_fit_under_jit_matches_diffrax():
    diffrax = pytest.importorskip("diffrax")
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    data = jnp.array([[1.2, 0.6], [1.1, 0.5], [0.9, 0.6], [0.8, 0.8]])

    def jax_loss(p):
        field = diffrax.ODETerm(lambda t, y, p: jnp.stack(
            [p[0] * y[0] - p[1] * y[0] * y[1], p[2] * y[0] * y[1] - p[3] * y[1]]))
        sol = diffrax.diffeqsolve(field, diffrax.Tsit5(), 0.0, 2.0, None, jnp.asarray(Y0_LV),
                                  p, saveat=diffrax.SaveAt(ts=jnp.asarray(TS_LV[1:])),
                                  stepsize_controller=diffrax.PIDController(rtol=1e-9,
                                                                            atol=1e-9),
                                  adjoint=diffrax.DirectAdjoint())
        return jnp.sum((sol.ys - data) ** 2)
    theirs = jax.jit(jax.hessian(jax_loss))(jnp.asarray(P_LV))
    controller = ode.PIDController(1e-9, 1e-9)
    ours = fgrad.jit(fgrad.hessian(lambda p: fit_loss(p, controller=controller)))(P_LV)
    twice = fgrad.jit(fgrad.jacrev(fgrad.jacrev(lambda p: fit_loss(p, controller=controller))))
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(twice(P_LV), theirs, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", ["Dopri8", "Tsit5", "Dopri5"])
@pytest.mark.parametrize("backward", [False, True])
def test_dense_output_and_saved_values_match_diffrax(name, backward):
    diffrax = pytest.importorskip("diffrax")
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    # constant steps, so that both take the same steps and only the
    # interpolants are compared, between steps and at save times
    t0, t1, dt0 = (2.0, 0.0, -0.25) if backward else (0.0, 2.0, 0.25)
    ts, times = np.linspace(t0, t1, 23)[1:-1], np.linspace(t0, t1, 41)
    sol = ode.solve(lambda t, y, p: lotka_volterra(y, t, p), getattr(ode, name)(), t0, t1,
                    dt0, Y0_LV, P_LV, saveat=ode.SaveAt(ts=ts, dense=True))
    theirs = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, p: jnp.stack([p[0] * y[0] - p[1] * y[0] * y[1],
                                                   p[2] * y[0] * y[1] - p[3] * y[1]])),
        getattr(diffrax, name)(), t0, t1, dt0, jnp.asarray(Y0_LV), jnp.asarray(P_LV),
        saveat=diffrax.SaveAt(ts=ts, dense=True))
    np.testing.assert_allclose(sol.ys, theirs.ys, rtol=1e-12, atol=1e-12)
    dense = jax.vmap(theirs.evaluate)(jnp.asarray(times))
    np.testing.assert_allclose(sol.evaluate(times), dense, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sol.evaluate(times[7]), dense[7], rtol=1e-12, atol=1e-12)


def test_dense_output_under_jit_and_its_derivatives():
    times = np.array([0.3, 1.1, 1.7])

    def dense_loss(p):
        sol = ode.solve(lambda t, y, p: lotka_volterra(y, t, p), ode.Tsit5(), 0.0, 2.0, None,
                        Y0_LV, p, saveat=ode.SaveAt(dense=True), stepsize_controller=TIGHT)
        assert sol.ts is None and sol.ys is None
        return fnp.sum(sol.evaluate(times) ** 2)
    at_ts = fgrad.jit(lambda p: fnp.sum(ode.solve(
        lambda t, y, p: lotka_volterra(y, t, p), ode.Tsit5(), 0.0, 2.0, None, Y0_LV, p,
        saveat=ode.SaveAt(ts=times), stepsize_controller=TIGHT).ys ** 2))
    np.testing.assert_allclose(fgrad.jit(dense_loss)(P_LV), at_ts(P_LV), rtol=1e-12)
    fd = central_difference(lambda p: float(dense_loss(p)), P_LV)
    np.testing.assert_allclose(fgrad.grad(dense_loss)(P_LV), fd, rtol=1e-6)
    np.testing.assert_allclose(fgrad.jit(fgrad.jacfwd(dense_loss))(P_LV), fd, rtol=1e-6)
    batch = np.stack([P_LV, P_LV * 1.1])
    np.testing.assert_allclose(fgrad.vmap(dense_loss)(batch), [at_ts(p) for p in batch],
                               rtol=1e-10)


def test_dense_output_refusals():
    plain = ode.solve(decay, ode.Tsit5(), 0.0, 1.0, 0.1, np.ones(1), 1.0)
    with pytest.raises(OdeArgumentError, match=r"saveat=SaveAt\(dense=True\)"):
        plain.evaluate(0.5)
    with pytest.raises(OdeArgumentError, match=r"use DirectAdjoint\(\)"):
        ode.solve(decay, ode.Tsit5(), 0.0, 1.0, 0.1, np.ones(1), 1.0,
                  saveat=ode.SaveAt(dense=True), adjoint=ode.BacksolveAdjoint())
    with pytest.raises(OdeArgumentError, match="finite max_steps"):
        ode.solve(decay, ode.Tsit5(), 0.0, 1.0, 0.1, np.ones(1), 1.0,
                  saveat=ode.SaveAt(dense=True), max_steps=None)


# -- failures are loud ----------------------------------------------------------------


def blow_up(t, y, args):
    return y ** 2                        # y = 1 / (1 - t): infinite at t = 1


@pytest.mark.parametrize("compiled", [False, True])
def test_step_size_underflow_raises_eager_and_at_run_time(compiled):
    def run(y0):
        return ode.solve(blow_up, ode.Tsit5(), 0.0, 2.0, None, y0,
                         stepsize_controller=TIGHT).ys
    with pytest.raises(IntegrationError, match=r"step size underflowed .*, at t = 0\.99999"):
        (fgrad.jit(run) if compiled else run)(np.ones(1))


@pytest.mark.parametrize("compiled", [False, True])
def test_max_steps_raises_eager_and_at_run_time(compiled):
    def run(y0):
        return ode.solve(decay, ode.RK4(), 0.0, 2.0, 0.001, y0, 1.0, max_steps=100).ys
    with pytest.raises(IntegrationError, match="took max_steps steps .* Raise max_steps"):
        (fgrad.jit(run) if compiled else run)(np.ones(1))


@pytest.mark.parametrize("compiled", [False, True])
def test_nan_in_the_state_raises(compiled):
    def run(y0):
        return ode.solve(lambda t, y, a: fnp.log(y - 2.0), ode.Tsit5(), 0.0, 1.0, 0.1, y0,
                         stepsize_controller=TIGHT).ys
    with pytest.raises(IntegrationError, match="became NaN or infinite, at t = 0.0"):
        with np.errstate(invalid="ignore"):
            (fgrad.jit(run) if compiled else run)(np.ones(1))


@pytest.mark.skipif(not native.available(), reason="llvmlite missing")
def test_a_compiled_solve_checks_its_status_without_calling_back(monkeypatch):
    # the status check is a compare in the compiled program: no callout while
    # the solves succeed (odeint's adjoint checks once per output interval),
    # and the error still raised from the program when one fails
    monkeypatch.setenv(PROGRAM_ENV, "all")

    def run(y0):
        return ode.solve(blow_up, ode.Tsit5(), 0.0, 2.0, None, y0, stepsize_controller=TIGHT).ys

    def fit(y0):
        return fnp.sum(ode.odeint(lambda y, t: -y, y0, np.linspace(0.0, 1.0, 5)) ** 2)
    cases = [(fgrad.jit(run), -np.ones(1), np.ones(1), r"underflowed .*, at t = 0\.99999"),
             (fgrad.jit(fgrad.vmap(run)), -np.ones((2, 1)), np.array([[-1.0], [1.0]]),
              "example 1 of the batch"),
             (fgrad.jit(fgrad.value_and_grad(fit)), np.ones(2), np.array([1.0, np.nan]),
              "NaN or infinite")]
    for f, good, bad, message in cases:
        f(good)
        assert f.wait_compiled()
        (info,) = f.compile_info()
        assert info.tier == "program" and not [c for c in info.callouts if "ode_check" in c]
        with pytest.raises(IntegrationError, match=message):
            f(bad)


def test_odeint_mxstep_counts_steps_between_output_times():
    with pytest.raises(IntegrationError, match="fgrad.ode.odeint: the solve took max_steps"):
        ode.odeint(lambda y, t: -y, np.ones(1), np.array([0.0, 100.0]), mxstep=5)


def test_throw_false_returns_the_status_under_vmap_and_jit():
    def run(y0):
        sol = ode.solve(blow_up, ode.Tsit5(), 0.0, 2.0, None, y0, stepsize_controller=TIGHT,
                        throw=False)
        return sol.result, sol.ys
    result, ys = fgrad.jit(fgrad.vmap(run))(np.array([[1.0], [-1.0]]))
    assert list(result) == [ode.RESULTS.DT_UNDERFLOW, ode.RESULTS.SUCCESSFUL]
    assert np.isinf(ys[0, 0, 0]) and np.isclose(ys[1, 0, 0], -1.0 / 3.0)


def test_a_batch_with_one_failure_names_the_example():
    def run(y0):
        return ode.solve(blow_up, ode.Tsit5(), 0.0, 2.0, None, y0, stepsize_controller=TIGHT).ys
    with pytest.raises(IntegrationError, match="example 1 of the batch"):
        fgrad.jit(fgrad.vmap(run))(np.array([[-1.0], [1.0]]))


def test_refusals_say_what_to_pass():
    with pytest.raises(OdeArgumentError, match="no error estimate.*ConstantStepSize"):
        ode.solve(decay, ode.RK4(), 0.0, 1.0, None, np.ones(1), 1.0,
                  stepsize_controller=ode.PIDController(1e-6, 1e-6))
    with pytest.raises(OdeArgumentError, match="ConstantStepSize needs a step: pass dt0"):
        ode.solve(decay, ode.RK4(), 0.0, 1.0, None, np.ones(1), 1.0)
    with pytest.raises(OdeArgumentError, match=r"must lie in \[0.0, 1.0\]"):
        ode.solve(decay, ode.Tsit5(), 0.0, 1.0, 0.1, np.ones(1), 1.0,
                  saveat=ode.SaveAt(ts=[0.5, 2.0]), stepsize_controller=TIGHT)
    with pytest.raises(OdeArgumentError, match="in order"):
        ode.solve(decay, ode.Tsit5(), 0.0, 1.0, 0.1, np.ones(1), 1.0,
                  saveat=ode.SaveAt(ts=[0.5, 0.2]), stepsize_controller=TIGHT)
    with pytest.raises(OdeArgumentError, match="SaveAt saves nothing"):
        ode.SaveAt()
    with pytest.raises(OdeArgumentError, match="t must be an array of floats"):
        ode.odeint(lambda y, t: -y, np.ones(1), np.arange(3))
    with pytest.raises(OdeArgumentError, match="RecursiveCheckpointAdjoint needs a finite"):
        ode.solve(decay, ode.Tsit5(), 0.0, 1.0, 0.1, np.ones(1), 1.0, max_steps=None,
                  adjoint=ode.RecursiveCheckpointAdjoint())
    with pytest.raises(OdeArgumentError, match="adjoint must be DirectAdjoint"):
        ode.solve(decay, ode.Tsit5(), 0.0, 1.0, 0.1, np.ones(1), 1.0, adjoint="backsolve")
    with pytest.raises(OdeArgumentError, match="rtol=0.0 and atol=0.0"):
        ode.PIDController(0.0, 0.0)
