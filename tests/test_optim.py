"""fgrad.optim: one step against updates computed by hand, convergence on a
quadratic, pytree structure, schedules and clipping."""
import math

import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad import optim
from fgrad.errors import NNArgumentError

P = {"w": np.array([1.0, -2.0]), "b": (np.array(0.5),)}
G = {"w": np.array([0.3, -0.1]), "b": (np.array(2.0),)}


def _one_step(opt, steps=1):
    state = opt.init(P)
    for _ in range(steps):
        updates, state = opt.update(G, state, P)
    return updates, state


def _leaves(tree):
    return np.concatenate([np.ravel(x) for x in fgrad.tree.tree_leaves(tree)])


g = _leaves(G)
p = _leaves(P)


@pytest.mark.parametrize("opt, expected", [
    (optim.sgd(0.1), -0.1 * g),
    (optim.momentum(0.1, 0.9), -0.1 * g),
    (optim.nesterov(0.1, 0.9), -0.1 * (g + 0.9 * g)),
    # first Adam step: m_hat = g, v_hat = g**2, so the update is -lr * sign(g)
    (optim.adam(0.1, eps=0.0), -0.1 * np.sign(g)),
    (optim.adamw(0.1, eps=0.0, weight_decay=0.01), -0.1 * np.sign(g) - 0.1 * 0.01 * p),
    (optim.rmsprop(0.1, decay=0.9, eps=0.0), -0.1 * g / np.sqrt(0.1 * g * g)),
])
def test_first_step_by_hand(opt, expected):
    updates, state = _one_step(opt)
    assert fgrad.tree.tree_structure(updates) == fgrad.tree.tree_structure(P)
    np.testing.assert_allclose(_leaves(updates), expected)
    assert state.step == 1


def test_second_steps_by_hand():
    np.testing.assert_allclose(_leaves(_one_step(optim.momentum(0.1, 0.9), 2)[0]),
                               -0.1 * (0.9 * g + g))
    v = 0.9 * g + g
    np.testing.assert_allclose(_leaves(_one_step(optim.nesterov(0.1, 0.9), 2)[0]),
                               -0.1 * (g + 0.9 * v))
    # Adam with a constant gradient keeps m_hat = g and v_hat = g**2
    np.testing.assert_allclose(_leaves(_one_step(optim.adam(0.1, eps=0.0), 2)[0]),
                               -0.1 * np.sign(g))
    nu = 0.9 * (0.1 * g * g) + 0.1 * g * g
    np.testing.assert_allclose(_leaves(_one_step(optim.rmsprop(0.1, eps=0.0), 2)[0]),
                               -0.1 * g / np.sqrt(nu))


@pytest.mark.parametrize("opt, steps", [
    (optim.sgd(0.1), 200), (optim.momentum(0.05), 300), (optim.nesterov(0.05), 300),
    (optim.adam(0.1), 500), (optim.adamw(0.1, weight_decay=1e-4), 500),
    (optim.rmsprop(0.02), 800),
    (optim.sgd(optim.exponential_decay(0.2, 0.5, 100)), 300),
    (optim.chain(optim.sgd(0.1), max_norm=1.0), 300),
])
def test_fits_a_quadratic(opt, steps):
    a = np.array([[3.0, 0.5], [0.5, 1.0]])
    target = {"x": np.array([1.0, -1.0]), "y": np.array(2.0)}

    def loss(params):
        d = params["x"] - target["x"]
        return d @ a @ d + (params["y"] - target["y"]) ** 2

    params = {"x": np.zeros(2), "y": np.array(0.0)}
    state = opt.init(params)
    step = fgrad.value_and_grad(loss)
    for _ in range(steps):
        value, grads = step(params)
        updates, state = opt.update(grads, state, params)
        params = optim.apply_updates(params, updates)
    assert loss(params) < 1e-4, f"loss {loss(params)} after {steps} steps"


def test_apply_updates_keeps_dtypes_and_inputs():
    params = (np.ones(2, np.float32),)
    out = optim.apply_updates(params, (np.array([0.5, 0.5]),))
    assert out[0].dtype == np.float32
    np.testing.assert_array_equal(params[0], 1.0)


def test_clip_by_global_norm():
    grads = {"a": np.array([3.0]), "b": np.array([[4.0]])}
    assert np.isclose(optim.global_norm(grads), 5.0)
    clipped = optim.clip_by_global_norm(grads, 2.5)
    np.testing.assert_allclose(clipped["a"], [1.5])
    np.testing.assert_allclose(clipped["b"], [[2.0]])
    same = optim.clip_by_global_norm(grads, 10.0)
    np.testing.assert_allclose(_leaves(same), _leaves(grads))
    # differentiable: it is written with fgrad.numpy
    d = fgrad.grad(lambda x: fnp.sum(optim.clip_by_global_norm([x], 1.0)[0]))(
        np.array([3.0, 4.0]))
    np.testing.assert_allclose(d, [0.2 - 0.6 * 7 / 25, 0.2 - 0.8 * 7 / 25])


def test_schedules():
    assert optim.constant_schedule(0.3)(7) == 0.3
    assert math.isclose(optim.exponential_decay(1.0, 0.1, 10)(5), 0.1 ** 0.5)
    assert optim.exponential_decay(1.0, 0.1, 10, staircase=True)(15) == 0.1
    c = optim.cosine_decay(2.0, 10, alpha=0.1)
    assert c(0) == 2.0 and math.isclose(c(10), 0.2) and math.isclose(c(50), 0.2)
    w = optim.warmup_cosine_decay(1.0, 4, 14, end_value=0.1)
    assert w(0) == 0.0 and w(2) == 0.5 and w(4) == 1.0 and math.isclose(w(14), 0.1)
    pc = optim.piecewise_constant([2, 4], [3.0, 2.0, 1.0])
    assert [pc(s) for s in range(6)] == [3.0, 3.0, 2.0, 2.0, 1.0, 1.0]


def test_schedule_is_read_at_each_step():
    opt = optim.sgd(lambda step: 1.0 / (step + 1))
    state = opt.init(np.zeros(1))
    rates = []
    for _ in range(3):
        u, state = opt.update(np.ones(1), state)
        rates.append(-float(u[0]))
    np.testing.assert_allclose(rates, [1.0, 0.5, 1 / 3])


def test_optimizer_errors():
    with pytest.raises(NNArgumentError, match="learning_rate must be a non-negative"):
        optim.adam(-1.0)
    with pytest.raises(NNArgumentError, match="weight decay needs the parameters"):
        opt = optim.adamw(0.1)
        opt.update(G, opt.init(P))
    with pytest.raises(NNArgumentError, match="max_norm must be positive"):
        optim.clip_by_global_norm(G, 0.0)
    with pytest.raises(NNArgumentError, match="need len"):
        optim.piecewise_constant([1], [1.0])
