"""ODE workloads: ``fgrad.scipy.integrate.solve_ivp``'s adjoint gradient.

The floor of the gradient rows is the textbook alternative written by hand in
NumPy: the forward sensitivity equations ``S' = J S + F_theta`` integrated with
the state by SciPy's ``solve_ivp``, with hand-written Jacobians. The ``fgrad``
rows are ``fgrad.grad`` through ``fgrad.scipy.integrate.solve_ivp`` (the
continuous adjoint, integrated backwards by SciPy along the forward dense
output); ``fgrad-fd`` re-solves for central finite differences; ``jax`` is
``jax.grad`` of ``jax.experimental.ode.odeint`` (Dormand-Prince with its own
adjoint, at the same tolerances).

Workloads:
  ode-lv        gradient of a Lotka-Volterra fit (2 states, 4 parameters and
                y0, 40 output times, DOP853) w.r.t. (y0, parameters)
  ode-lv-fwd    the loss alone against its gradient: the forward solve with a
                NumPy right-hand side (floor), fgrad's forward solve
                (``fgrad-fwd``) and fgrad's value_and_grad (``fgrad``), whose
                ratio to ``fgrad-fwd`` is the adjoint's cost in forward solves
  ode-lv-jit    value and gradient of a Lotka-Volterra fit (2 states, 21 output
                times, rtol = atol = 1e-8, Dormand-Prince 5(4)) compiled whole:
                fgrad.ode.odeint under fgrad.jit, jax.jit of JAX's odeint, and
                jax.jit of diffrax's diffeqsolve (Dopri5, its default
                checkpointed adjoint); floor: forward sensitivities by SciPy
  ode-robertson Robertson's stiff kinetics to t = 10 (rtol 1e-8, atol 1e-12):
                fgrad.ode's Kvaerno5 under fgrad.jit against jax.jit of
                diffrax's Kvaerno5; floor: SciPy's Radau
  ode-node-batch  value and gradient of a neural ODE's loss (8-32-8 tanh
                network, a batch of 64 states solved as one, 10 output times,
                rtol 1e-6): fgrad.ode.odeint under fgrad.jit, jax.jit of JAX's
                odeint (both solve an adjoint ODE backwards) and of diffrax
                (Dopri5, differentiated through its steps), and fgrad-solve:
                fgrad.ode.solve as diffrax's row calls diffeqsolve; the rows
                return the value, the floor is SciPy's forward solve
  ode-lv-vmap   the LV fit's value and gradient vmapped over 32 parameter
                sets, under jit, each library's; floor: 32 SciPy forward solves
  ode-node      gradient of a neural ODE (8 states, an 8-32-8 tanh network:
                552 parameters, 10 output times, RK45) w.r.t. its layers; time
                and peak memory (the sensitivities are 8 x 552 more states)
  ode-node-fwd  the neural ODE's loss alone against its value_and_grad, as
                ode-lv-fwd
"""

from __future__ import annotations

import numpy as np

from .harness import Workload

LV_P, LV_Y0 = np.array([1.5, 1.0, 1.0, 3.0]), np.array([1.0, 1.0])
LV_T = np.linspace(0.25, 10.0, 40)
LV_TOL = dict(method="DOP853", rtol=1e-9, atol=1e-11)
NODE_SIZES, NODE_T = (8, 32), np.linspace(0.1, 1.0, 10)
NODE_TOL = dict(method="RK45", rtol=1e-7, atol=1e-9)


def _lv_data():
    return _lv_data_at(LV_T)


def _lv_numpy(y, p):
    return np.array([p[0] * y[0] - p[1] * y[0] * y[1], p[2] * y[0] * y[1] - p[3] * y[1]])


def _lv_fgrad(fnp):
    def field(t, y, p):
        return fnp.stack([p[0] * y[0] - p[1] * y[0] * y[1], p[2] * y[0] * y[1] - p[3] * y[1]])
    return field


def _lv_loss_of(peer, data):
    """The Lotka-Volterra fit's loss through fgrad's solve_ivp."""
    from fgrad.scipy.integrate import solve_ivp
    field = _lv_fgrad(peer.np)

    def loss(y0, p):
        res = solve_ivp(field, (0.0, 10.0), y0, t_eval=LV_T, args=(p,), **LV_TOL)
        return peer.np.sum((res.y - data) ** 2)
    return loss


def _lv_sensitivities(y0, p, data, ts=LV_T, tol=LV_TOL):
    """The loss gradient by the forward sensitivity equations, by hand."""
    import scipy.integrate

    def field(t, state):
        y, s = state[:2], state[2:].reshape(2, 6)
        jac = np.array([[p[0] - p[1] * y[1], -p[1] * y[0]],
                        [p[2] * y[1], p[2] * y[0] - p[3]]])
        f_p = np.array([[y[0], -y[0] * y[1], 0.0, 0.0], [0.0, 0.0, y[0] * y[1], -y[1]]])
        ds = jac @ s + np.concatenate([np.zeros((2, 2)), f_p], axis=1)
        return np.concatenate([_lv_numpy(y, p), ds.ravel()])
    state0 = np.concatenate([y0, np.eye(2, 6).ravel()])
    res = scipy.integrate.solve_ivp(field, (0.0, 10.0), state0, t_eval=ts, **tol)
    ys, ss = res.y[:2], res.y[2:].reshape(2, 6, -1)
    grad = np.einsum("it,ijt->j", 2 * (ys - data), ss)
    return grad[:2], grad[2:]


def ode_lv_workload() -> Workload:
    data = _lv_data()

    def fgrad_(peer):
        grad = peer.module.grad(_lv_loss_of(peer, data), argnums=(0, 1))
        return lambda: grad(LV_Y0, LV_P)

    def fgrad_fd(peer):
        from fgrad.scipy.integrate import solve_ivp
        field = _lv_fgrad(peer.np)

        def loss(theta):         # re-solved tighter: a difference needs the digits
            res = solve_ivp(field, (0.0, 10.0), theta[:2], t_eval=LV_T, args=(theta[2:],),
                            method="DOP853", rtol=1e-12, atol=1e-14)
            return np.sum((res.y - data) ** 2)

        def run(eps=1e-5):
            theta = np.concatenate([LV_Y0, LV_P])
            grad = np.array([(loss(theta + e) - loss(theta - e)) / (2 * eps)
                             for e in np.eye(6) * eps])
            return grad[:2], grad[2:]
        return run

    def jax_(peer):
        from jax.experimental.ode import odeint
        jnp = peer.np

        def field(y, t, p):
            return jnp.stack([p[0] * y[0] - p[1] * y[0] * y[1], p[2] * y[0] * y[1] - p[3] * y[1]])
        ts = jnp.concatenate([jnp.zeros(1), jnp.asarray(LV_T)])

        def loss(y0, p):
            ys = odeint(field, y0, ts, p, rtol=LV_TOL["rtol"], atol=LV_TOL["atol"])[1:]
            return jnp.sum((ys.T - data) ** 2)
        grad = peer.module.grad(loss, argnums=(0, 1))
        y0, p = jnp.asarray(LV_Y0), jnp.asarray(LV_P)
        return lambda: peer.module.block_until_ready(grad(y0, p))

    return Workload(
        "ode-lv", "gradient of a Lotka-Volterra fit (DOP853, 40 output times) w.r.t. (y0, p); "
        "floor: forward sensitivity equations by hand",
        lambda: _lv_sensitivities(LV_Y0, LV_P, data),
        {"fgrad": fgrad_, "fgrad-fd": fgrad_fd, "jax": jax_})


JIT_T, JIT_TOL = np.linspace(0.0, 10.0, 21), 1e-8


def _lv_data_at(ts):
    import scipy.integrate
    res = scipy.integrate.solve_ivp(lambda t, y: _lv_numpy(y, LV_P * 1.1), (0.0, 10.0), LV_Y0,
                                    t_eval=ts, **LV_TOL)
    return res.y + 0.05 * np.random.default_rng(0).standard_normal(res.y.shape)


def ode_lv_jit_workload() -> Workload:
    """The fit's value and gradient, each library's solver compiled whole."""
    data = _lv_data_at(JIT_T)
    tol = dict(method="RK45", rtol=JIT_TOL, atol=JIT_TOL)

    def fgrad_(peer):
        from fgrad.ode import odeint
        field = _lv_fgrad(peer.np)

        def loss(y0, p):
            ys = odeint(lambda y, t, p: field(t, y, p), y0, JIT_T, p, rtol=JIT_TOL,
                        atol=JIT_TOL)
            return peer.np.sum((ys.T - data) ** 2)
        step = peer.module.jit(peer.module.value_and_grad(loss, argnums=(0, 1)))
        step(LV_Y0, LV_P)
        step.wait_compiled()       # timed compiled, as jax.jit's calls are
        return lambda: step(LV_Y0, LV_P)[1]

    def jax_(peer):
        from jax.experimental.ode import odeint
        jax, jnp = peer.module, peer.np
        field = _jax_lv(jnp)

        def loss(y0, p):
            ys = odeint(field, y0, jnp.asarray(JIT_T), p, rtol=JIT_TOL, atol=JIT_TOL)
            return jnp.sum((ys.T - data) ** 2)
        step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
        y0, p = jnp.asarray(LV_Y0), jnp.asarray(LV_P)
        return lambda: jax.block_until_ready(step(y0, p))[1]

    def diffrax_(peer):
        import diffrax
        jax, jnp = peer.module, peer.np
        field = _jax_lv(jnp)
        term = diffrax.ODETerm(lambda t, y, p: field(y, t, p))

        def loss(y0, p):
            sol = diffrax.diffeqsolve(
                term, diffrax.Dopri5(), 0.0, 10.0, None, y0, p,
                saveat=diffrax.SaveAt(ts=jnp.asarray(JIT_T)),
                stepsize_controller=diffrax.PIDController(rtol=JIT_TOL, atol=JIT_TOL))
            return jnp.sum((sol.ys.T - data) ** 2)
        step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
        y0, p = jnp.asarray(LV_Y0), jnp.asarray(LV_P)
        return lambda: jax.block_until_ready(step(y0, p))[1]

    return Workload(
        "ode-lv-jit", "value and gradient of a Lotka-Volterra fit (21 output times, "
        "rtol = atol = 1e-8), compiled whole: fgrad.ode.odeint under fgrad.jit, jax.jit of "
        "JAX's odeint and of diffrax's diffeqsolve; floor: forward sensitivities by SciPy",
        lambda: _lv_sensitivities(LV_Y0, LV_P, data, JIT_T, tol),
        {"fgrad": fgrad_, "jax": jax_, "jax-diffrax": diffrax_})


def _jax_lv(jnp):
    def field(y, t, p):
        return jnp.stack([p[0] * y[0] - p[1] * y[0] * y[1], p[2] * y[0] * y[1] - p[3] * y[1]])
    return field


def ode_robertson_workload() -> Workload:
    import scipy.integrate
    k, y0, ts = np.array([0.04, 3e7, 1e4]), np.array([1.0, 0.0, 0.0]), np.array([0.1, 1.0, 10.0])

    def numpy_field(t, y):
        return np.array([-k[0] * y[0] + k[2] * y[1] * y[2],
                         k[0] * y[0] - k[2] * y[1] * y[2] - k[1] * y[1] ** 2, k[1] * y[1] ** 2])

    def floor():
        return scipy.integrate.solve_ivp(numpy_field, (0.0, 10.0), y0, method="Radau", t_eval=ts,
                                         rtol=1e-8, atol=1e-12).y.T

    def field_of(xnp):
        def field(t, y, k):
            return xnp.stack([-k[0] * y[0] + k[2] * y[1] * y[2],
                              k[0] * y[0] - k[2] * y[1] * y[2] - k[1] * y[1] ** 2,
                              k[1] * y[1] ** 2])
        return field

    def fgrad_(peer):
        from fgrad import ode
        field = field_of(peer.np)
        run = peer.module.jit(lambda y0, k: ode.solve(
            field, ode.Kvaerno5(), 0.0, 10.0, 1e-6, y0, k, saveat=ode.SaveAt(ts=ts),
            stepsize_controller=ode.PIDController(1e-8, 1e-12, pcoeff=0.3, icoeff=0.4)).ys)
        run(y0, k)
        run.wait_compiled()
        return lambda: run(y0, k)

    def diffrax_(peer):
        import diffrax
        jax, jnp = peer.module, peer.np
        term = diffrax.ODETerm(field_of(jnp))
        run = jax.jit(lambda y0, k: diffrax.diffeqsolve(
            term, diffrax.Kvaerno5(), 0.0, 10.0, 1e-6, y0, k, saveat=diffrax.SaveAt(ts=ts),
            stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-12, pcoeff=0.3,
                                                      icoeff=0.4)).ys)
        y0_, k_ = jnp.asarray(y0), jnp.asarray(k)
        return lambda: jax.block_until_ready(run(y0_, k_))

    return Workload("ode-robertson", "Robertson's stiff kinetics to t = 10 (rtol 1e-8): "
                    "fgrad.ode.Kvaerno5 under jit, diffrax's Kvaerno5 under jax.jit; floor: "
                    "SciPy's Radau", floor, {"fgrad": fgrad_, "jax-diffrax": diffrax_})


def ode_node_batch_workload() -> Workload:
    import scipy.integrate
    (w1, b1), (w2, b2) = _node_params()
    layers = ((w1.T.copy(), b1), (w2.T.copy(), b2))
    y0 = np.random.default_rng(1).standard_normal((64, NODE_SIZES[0]))
    ts = np.concatenate([[0.0], NODE_T])

    def floor():
        res = scipy.integrate.solve_ivp(
            lambda t, y: (np.tanh(y.reshape(64, -1) @ layers[0][0] + layers[0][1])
                          @ layers[1][0] + layers[1][1]).ravel(),
            (0.0, 1.0), y0.ravel(), t_eval=NODE_T, rtol=1e-6, atol=1e-6)
        return np.sum(res.y ** 2)

    def field_of(xnp):
        def field(y, t, layers):
            (w1, b1), (w2, b2) = layers
            return xnp.tanh(y @ w1 + b1) @ w2 + b2
        return field

    def fgrad_(peer):
        from fgrad.ode import odeint
        field, fnp = field_of(peer.np), peer.np

        def loss(layers):
            return fnp.sum(odeint(field, y0, ts, layers, rtol=1e-6, atol=1e-6)[1:] ** 2)
        step = peer.module.jit(peer.module.value_and_grad(loss))
        step(layers)
        step.wait_compiled()
        return lambda: step(layers)[0]

    def fgrad_solve(peer):
        from fgrad import ode
        field, fnp = field_of(peer.np), peer.np
        term = ode.ODETerm(lambda t, y, layers: field(y, t, layers))

        def loss(layers):
            sol = ode.solve(term, ode.Dopri5(), 0.0, 1.0, None, y0, layers,
                            saveat=ode.SaveAt(ts=NODE_T),
                            stepsize_controller=ode.PIDController(rtol=1e-6, atol=1e-6))
            return fnp.sum(sol.ys ** 2)
        step = peer.module.jit(peer.module.value_and_grad(loss))
        step(layers)
        step.wait_compiled()
        return lambda: step(layers)[0]

    def jax_(peer):
        from jax.experimental.ode import odeint
        jax, jnp = peer.module, peer.np
        field = field_of(jnp)

        def loss(layers):
            return jnp.sum(odeint(field, jnp.asarray(y0), jnp.asarray(ts), layers, rtol=1e-6,
                                  atol=1e-6)[1:] ** 2)
        step = jax.jit(jax.value_and_grad(loss))
        params = jax.tree_util.tree_map(jnp.asarray, layers)
        return lambda: jax.block_until_ready(step(params))[0]

    def diffrax_(peer):
        import diffrax
        jax, jnp = peer.module, peer.np
        field = field_of(jnp)
        term = diffrax.ODETerm(lambda t, y, layers: field(y, t, layers))

        def loss(layers):
            sol = diffrax.diffeqsolve(
                term, diffrax.Dopri5(), 0.0, 1.0, None, jnp.asarray(y0), layers,
                saveat=diffrax.SaveAt(ts=jnp.asarray(NODE_T)),
                stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=1e-6))
            return jnp.sum(sol.ys ** 2)
        step = jax.jit(jax.value_and_grad(loss))
        params = jax.tree_util.tree_map(jnp.asarray, layers)
        return lambda: jax.block_until_ready(step(params))[0]

    return Workload("ode-node-batch", "value and gradient of a neural ODE (8-32-8 tanh, a batch "
                    "of 64 states, 10 output times, rtol 1e-6), under jit; rows return the "
                    "value; floor: SciPy's forward solve", floor,
                    {"fgrad": fgrad_, "fgrad-solve": fgrad_solve, "jax": jax_,
                     "jax-diffrax": diffrax_})


def ode_lv_vmap_workload() -> Workload:
    import scipy.integrate
    data = _lv_data_at(JIT_T)
    ps = LV_P * (1 + 0.1 * np.random.default_rng(2).standard_normal((32, 4)))

    def floor():
        return np.array([np.sum((scipy.integrate.solve_ivp(
            lambda t, y: _lv_numpy(y, p), (0.0, 10.0), LV_Y0, t_eval=JIT_T, method="RK45",
            rtol=JIT_TOL, atol=JIT_TOL).y - data) ** 2) for p in ps])

    def fgrad_(peer):
        from fgrad.ode import odeint
        field = _lv_fgrad(peer.np)

        def loss(p):
            ys = odeint(lambda y, t, p: field(t, y, p), LV_Y0, JIT_T, p, rtol=JIT_TOL,
                        atol=JIT_TOL)
            return peer.np.sum((ys.T - data) ** 2)
        step = peer.module.jit(peer.module.vmap(peer.module.value_and_grad(loss)))
        step(ps)
        step.wait_compiled()
        return lambda: step(ps)[0]

    def jax_(peer):
        from jax.experimental.ode import odeint
        jax, jnp = peer.module, peer.np
        field = _jax_lv(jnp)

        def loss(p):
            ys = odeint(field, jnp.asarray(LV_Y0), jnp.asarray(JIT_T), p, rtol=JIT_TOL,
                        atol=JIT_TOL)
            return jnp.sum((ys.T - data) ** 2)
        step = jax.jit(jax.vmap(jax.value_and_grad(loss)))
        ps_ = jnp.asarray(ps)
        return lambda: jax.block_until_ready(step(ps_))[0]

    def diffrax_(peer):
        import diffrax
        jax, jnp = peer.module, peer.np
        field = _jax_lv(jnp)
        term = diffrax.ODETerm(lambda t, y, p: field(y, t, p))

        def loss(p):
            sol = diffrax.diffeqsolve(
                term, diffrax.Dopri5(), 0.0, 10.0, None, jnp.asarray(LV_Y0), p,
                saveat=diffrax.SaveAt(ts=jnp.asarray(JIT_T)),
                stepsize_controller=diffrax.PIDController(rtol=JIT_TOL, atol=JIT_TOL))
            return jnp.sum((sol.ys.T - data) ** 2)
        step = jax.jit(jax.vmap(jax.value_and_grad(loss)))
        ps_ = jnp.asarray(ps)
        return lambda: jax.block_until_ready(step(ps_))[0]

    return Workload("ode-lv-vmap", "the LV fit's value and gradient vmapped over 32 parameter "
                    "sets, under jit (rows return the 32 values); floor: 32 SciPy solves",
                    floor, {"fgrad": fgrad_, "jax": jax_, "jax-diffrax": diffrax_})


def _forward_workload(name, description, floor, loss_of, inputs):
    """The loss alone (floor: SciPy on a NumPy right-hand side; ``fgrad-fwd``:
    fgrad's solve_ivp on the fgrad.numpy one) against fgrad's value_and_grad,
    whose row returns the value, so all three rows compare with the floor."""
    def fgrad_forward(peer):
        loss = loss_of(peer)
        return lambda: loss(*inputs)

    def fgrad_value_and_grad(peer):
        value_and_grad = peer.module.value_and_grad(loss_of(peer),
                                                    argnums=tuple(range(len(inputs))))
        return lambda: value_and_grad(*inputs)[0]
    return Workload(name, description, floor,
                    {"fgrad": fgrad_value_and_grad, "fgrad-fwd": fgrad_forward})


def ode_lv_forward_workload() -> Workload:
    import scipy.integrate
    data = _lv_data()

    def floor():
        res = scipy.integrate.solve_ivp(lambda t, y: _lv_numpy(y, LV_P), (0.0, 10.0), LV_Y0,
                                        t_eval=LV_T, **LV_TOL)
        return np.sum((res.y - data) ** 2)

    return _forward_workload(
        "ode-lv-fwd", "the Lotka-Volterra loss alone (floor: NumPy right-hand side; "
        "fgrad-fwd: fgrad.numpy's) against fgrad's value_and_grad", floor,
        lambda peer: _lv_loss_of(peer, data), (LV_Y0, LV_P))


def _node_params():
    n, hidden = NODE_SIZES
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((hidden, n)) / np.sqrt(n), 0.1 * rng.standard_normal(hidden)),
            (rng.standard_normal((n, hidden)) / np.sqrt(hidden), 0.1 * rng.standard_normal(n))]


def _node_sensitivities(layers, y0):
    """d sum(y(t)^2) / d layers by the forward sensitivity equations, by hand."""
    import scipy.integrate
    (w1, b1), (w2, b2) = layers
    n, hidden = NODE_SIZES
    size = w1.size + b1.size + w2.size + b2.size

    def field(t, state):
        y, s = state[:n], state[n:].reshape(n, size)
        h = np.tanh(w1 @ y + b1)
        w2d = w2 * (1 - h ** 2)                      # df/d(pre-activation)
        f_theta = np.concatenate([
            (w2d[:, :, None] * y[None, None, :]).reshape(n, -1),      # W1
            w2d,                                                       # b1
            np.kron(np.eye(n), h[None, :]),                            # W2
            np.eye(n)], axis=1)                                        # b2
        ds = (w2d @ w1) @ s + f_theta
        return np.concatenate([w2 @ h + b2, ds.ravel()])
    state0 = np.concatenate([y0, np.zeros(n * size)])
    res = scipy.integrate.solve_ivp(field, (0.0, 1.0), state0, t_eval=NODE_T, **NODE_TOL)
    ys, ss = res.y[:n], res.y[n:].reshape(n, size, -1)
    grad = np.einsum("it,ijt->j", 2 * ys, ss)
    sizes = np.cumsum([w1.size, b1.size, w2.size])
    parts = np.split(grad, sizes)
    return [(parts[0].reshape(w1.shape), parts[1]), (parts[2].reshape(w2.shape), parts[3])]


def _node_loss_of(peer, y0):
    """The neural ODE's loss, sum(y(t)^2) at the output times, through fgrad's
    solve_ivp."""
    from fgrad.scipy.integrate import solve_ivp
    fnp = peer.np

    def field(t, y, layers):
        (w1, b1), (w2, b2) = layers
        return w2 @ fnp.tanh(w1 @ y + b1) + b2

    def loss(layers):
        res = solve_ivp(field, (0.0, 1.0), y0, t_eval=NODE_T, args=(layers,), **NODE_TOL)
        return fnp.sum(res.y ** 2)
    return loss


def ode_node_workload() -> Workload:
    layers = _node_params()
    y0 = np.linspace(-1.0, 1.0, NODE_SIZES[0])

    def fgrad_(peer):
        grad = peer.module.grad(_node_loss_of(peer, y0))
        return lambda: grad(layers)

    return Workload(
        "ode-node", "gradient of a neural ODE (8 states, 8-32-8 tanh, RK45) w.r.t. its 552 "
        "parameters; floor: forward sensitivity equations by hand",
        lambda: _node_sensitivities(layers, y0), {"fgrad": fgrad_},
        input_nbytes=sum(a.nbytes for layer in layers for a in layer))


def ode_node_forward_workload() -> Workload:
    import scipy.integrate
    layers = _node_params()
    y0 = np.linspace(-1.0, 1.0, NODE_SIZES[0])
    (w1, b1), (w2, b2) = layers

    def floor():
        res = scipy.integrate.solve_ivp(lambda t, y: w2 @ np.tanh(w1 @ y + b1) + b2,
                                        (0.0, 1.0), y0, t_eval=NODE_T, **NODE_TOL)
        return np.sum(res.y ** 2)

    return _forward_workload(
        "ode-node-fwd", "the neural ODE's loss alone against fgrad's value_and_grad", floor,
        lambda peer: _node_loss_of(peer, y0), (layers,))


WORKLOADS = {
    "ode-lv": ode_lv_workload,
    "ode-lv-jit": ode_lv_jit_workload,
    "ode-lv-vmap": ode_lv_vmap_workload,
    "ode-robertson": ode_robertson_workload,
    "ode-node-batch": ode_node_batch_workload,
    "ode-lv-fwd": ode_lv_forward_workload,
    "ode-node": ode_node_workload,
    "ode-node-fwd": ode_node_forward_workload,
}
