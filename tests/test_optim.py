"""fgrad.optim: first steps by hand, convergence on a quadratic, every optimizer
and schedule inside jit (traced once), vmap (an ensemble) and a lax.scan
training loop, and the errors it promises. Agreement with optax, step by step,
is in test_optim_optax.py."""
import warnings

import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad import optim
from fgrad.errors import NNArgumentError
from standin_backend import StandInArray, registered, to_numpy, to_standin

P = {"w": np.array([1.0, -2.0]), "b": (np.array(0.5),)}
G = {"w": np.array([0.3, -0.1]), "b": (np.array(2.0),)}


def _leaves(tree):
    return np.concatenate([np.ravel(x) for x in fgrad.tree.tree_leaves(tree)])


g, p = _leaves(G), _leaves(P)


def _steps(opt, steps):
    state = opt.init(P)
    for _ in range(steps):
        updates, state = opt.update(G, state, P)
    return updates, state


@pytest.mark.parametrize("opt, expected", [
    (optim.sgd(0.1), -0.1 * g),
    (optim.sgd(0.1, momentum=0.9), -0.1 * g),
    (optim.sgd(0.1, momentum=0.9, nesterov=True), -0.1 * (g + 0.9 * g)),
    # first Adam step: m_hat = g, v_hat = g**2, so the update is -lr * sign(g)
    (optim.adam(0.1, eps=0.0), -0.1 * np.sign(g)),
    (optim.adamw(0.1, eps=0.0, weight_decay=0.01), -0.1 * np.sign(g) - 0.1 * 0.01 * p),
    (optim.rmsprop(0.1, decay=0.9, eps=0.0), -0.1 * g / np.sqrt(0.1 * g * g)),
    (optim.adagrad(0.1, initial_accumulator_value=0.0, eps=0.0), -0.1 * np.sign(g)),
    (optim.lion(0.1, weight_decay=0.0), -0.1 * np.sign(g)),
])
def test_first_step_by_hand(opt, expected):
    updates, state = _steps(opt, 1)
    assert fgrad.tree.tree_structure(updates) == fgrad.tree.tree_structure(P)
    np.testing.assert_allclose(_leaves(updates), expected)


def test_second_steps_by_hand():
    np.testing.assert_allclose(_leaves(_steps(optim.sgd(0.1, momentum=0.9), 2)[0]),
                               -0.1 * (0.9 * g + g))
    v = 0.9 * g + g
    np.testing.assert_allclose(
        _leaves(_steps(optim.sgd(0.1, momentum=0.9, nesterov=True), 2)[0]),
        -0.1 * (g + 0.9 * v))
    # Adam with a constant gradient keeps m_hat = g and v_hat = g**2
    np.testing.assert_allclose(_leaves(_steps(optim.adam(0.1, eps=0.0), 2)[0]),
                               -0.1 * np.sign(g))
    nu = 0.9 * (0.1 * g * g) + 0.1 * g * g
    np.testing.assert_allclose(_leaves(_steps(optim.rmsprop(0.1, eps=0.0), 2)[0]),
                               -0.1 * g / np.sqrt(nu))


def test_state_is_arrays_with_an_int32_count():
    state = optim.adam(0.1).init(P)
    count = state[0].count
    assert isinstance(count, np.ndarray) and count.dtype == np.int32 and count.shape == ()
    _, state = optim.adam(0.1).update(G, state, P)
    assert np.asarray(state[0].count).dtype == np.int32
    assert all(hasattr(leaf, "dtype") for leaf in fgrad.tree.tree_leaves(state))


@pytest.mark.parametrize("opt, steps", [
    (optim.sgd(0.1), 200), (optim.sgd(0.05, momentum=0.9), 300),
    (optim.sgd(0.05, momentum=0.9, nesterov=True), 300),
    (optim.adam(0.1), 500), (optim.adamw(0.1, weight_decay=1e-4), 500),
    (optim.rmsprop(0.02, eps_in_sqrt=False), 800), (optim.adagrad(0.5), 800),
    (optim.sgd(optim.exponential_decay(0.2, transition_steps=100, decay_rate=0.5)), 300),
    (optim.chain(optim.clip_by_global_norm(1.0), optim.sgd(0.1)), 300),
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


def test_float32_parameters_stay_float32():
    params = {"w": np.ones(3, np.float32)}
    for opt in (optim.adam(optim.cosine_decay_schedule(0.1, 10)), optim.lamb(0.1),
                optim.inject_hyperparams(optim.adamw)(0.1)):
        state = opt.init(params)
        updates, state = opt.update({"w": np.ones(3, np.float32)}, state, params)
        assert updates["w"].dtype == np.float32


def test_clip_by_global_norm():
    grads = {"a": np.array([3.0]), "b": np.array([[4.0]])}
    assert np.isclose(optim.global_norm(grads), 5.0)
    clip = optim.clip_by_global_norm(2.5)
    clipped, _ = clip.update(grads, clip.init(grads))
    np.testing.assert_allclose(clipped["a"], [1.5])
    np.testing.assert_allclose(clipped["b"], [[2.0]])
    same, _ = optim.clip_by_global_norm(10.0).update(grads, optim.EmptyState())
    np.testing.assert_allclose(_leaves(same), _leaves(grads))
    # differentiable, a zero norm included: it is written with fgrad.numpy
    d = fgrad.grad(lambda x: fnp.sum(clip.update([x], ())[0][0]))(np.array([3.0, 4.0]))
    np.testing.assert_allclose(d, 2.5 * np.array([0.2 - 0.6 * 7 / 25, 0.2 - 0.8 * 7 / 25]))
    d0 = fgrad.grad(lambda x: fnp.sum(clip.update([x], ())[0][0]))(np.zeros(2))
    np.testing.assert_allclose(d0, [1.0, 1.0])


def test_masked_and_multi_transform_leave_the_rest_alone():
    opt = optim.masked(optim.sgd(1.0), {"w": False, "b": (True,)})
    updates, state = opt.update(G, opt.init(P), P)
    np.testing.assert_allclose(updates["w"], G["w"])
    np.testing.assert_allclose(updates["b"][0], -G["b"][0])
    with pytest.raises(NNArgumentError, match=r"no transformation for the labels \['c'\]"):
        optim.multi_transform({"a": optim.sgd(1.0)}, {"w": "a", "b": ("c",)}).init(P)


def test_multi_steps_accumulates_and_skips():
    opt = optim.MultiSteps(optim.sgd(1.0), 2, should_skip_update_fn=optim.skip_not_finite)
    state = opt.init(P)
    u, state = opt.update(G, state, P)
    assert not opt.has_updated(state) and np.all(_leaves(u) == 0)
    bad = fgrad.tree.tree_map(lambda x: x * np.nan, G)
    u, state = opt.update(bad, state, P)        # skipped: as if it had not happened
    assert not opt.has_updated(state) and int(state.mini_step) == 1
    u, state = opt.update(fgrad.tree.tree_map(lambda x: 3 * x, G), state, P)
    assert opt.has_updated(state)
    np.testing.assert_allclose(_leaves(u), -2 * g)      # the mean of g and 3g


def test_inject_hyperparams_reads_changed_values():
    opt = optim.inject_hyperparams(optim.sgd)(learning_rate=0.1, momentum=0.5)
    state = opt.init(P)
    state.hyperparams["learning_rate"] = np.array(1.0)
    updates, state = opt.update(G, state, P)
    np.testing.assert_allclose(_leaves(updates), -g)
    assert float(state.hyperparams["momentum"]) == 0.5


def test_schedules_at_plain_steps():
    assert optim.constant_schedule(0.3)(7) == 0.3
    assert np.isclose(optim.exponential_decay(1.0, 10, 0.1)(5), 0.1 ** 0.5)
    assert optim.exponential_decay(1.0, 10, 0.1, staircase=True)(15) == 0.1
    c = optim.cosine_decay_schedule(2.0, 10, alpha=0.1)
    assert c(0) == 2.0 and np.isclose(c(10), 0.2) and np.isclose(c(50), 0.2)
    w = optim.warmup_cosine_decay_schedule(0.0, 1.0, 4, 14, end_value=0.1)
    assert w(0) == 0.0 and w(2) == 0.5 and w(4) == 1.0 and np.isclose(w(14), 0.1)
    pc = optim.piecewise_constant_schedule(3.0, {2: 2 / 3, 4: 0.5})
    np.testing.assert_allclose([pc(s) for s in range(6)], [3.0, 3.0, 2.0, 2.0, 1.0, 1.0])


def test_deprecated_names_warn_and_keep_their_results():
    with pytest.warns(DeprecationWarning, match="use fgrad.optim.sgd"):
        nesterov = optim.nesterov(0.1, 0.9)
    np.testing.assert_allclose(_leaves(_steps(nesterov, 2)[0]),
                               -0.1 * (g + 0.9 * (0.9 * g + g)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        momentum = optim.momentum(0.1, 0.9)
        w = optim.warmup_cosine_decay(1.0, 4, 14, end_value=0.1)
        pc = optim.piecewise_constant([2, 4], [3.0, 2.0, 1.0])
        c = optim.cosine_decay(2.0, 10, alpha=0.1)
    np.testing.assert_allclose(_leaves(_steps(momentum, 2)[0]), -0.1 * (0.9 * g + g))
    assert w(2) == 0.5 and np.isclose(w(14), 0.1) and np.isclose(c(10), 0.2)
    assert [float(pc(s)) for s in range(6)] == [3.0, 3.0, 2.0, 2.0, 1.0, 1.0]


def test_optimizer_errors():
    with pytest.raises(NNArgumentError, match="learning_rate must be a non-negative"):
        optim.adam(-1.0)
    with pytest.raises(NNArgumentError, match=r"add_decayed_weights needs the parameters"):
        opt = optim.adamw(0.1)
        opt.update(G, opt.init(P))
    with pytest.raises(NNArgumentError, match="max_norm must be positive"):
        optim.clip_by_global_norm(0.0)
    with pytest.raises(NNArgumentError, match=r"write chain\(clip_by_global_norm\(1.0\), "
                                              r"optimizer\)"):
        optim.chain(optim.sgd(0.1), max_norm=1.0)
    with pytest.raises(NNArgumentError, match="one schedule more than boundaries"):
        optim.join_schedules([optim.constant_schedule(1.0)], [1])
    with pytest.raises(NNArgumentError, match="scales must be non-negative"):
        optim.piecewise_constant_schedule(1.0, {10: -0.5})
    with pytest.raises(NNArgumentError, match="decay_steps must be positive"):
        optim.cosine_decay_schedule(1.0, 0)


def test_exponential_decay_in_the_old_order_raises():
    # exponential_decay(init, decay_rate, transition_steps), fgrad's order before
    # it followed optax: the rate would grow as 100 ** (step / 0.5)
    with pytest.raises(NNArgumentError, match=r"did you mean exponential_decay\(0.2, "
                                              r"transition_steps=100, decay_rate=0.5\)"):
        optim.exponential_decay(0.2, 0.5, 100)


# ---------------------------------------------------------------------------
# Every optimizer and schedule under jit, vmap and lax.scan
# ---------------------------------------------------------------------------

def _loss(params, x, y):
    return fnp.mean((x @ params["w"] + params["b"] - y) ** 2)


SCHEDULES = {
    "constant": optim.constant_schedule(0.1),
    "polynomial": optim.polynomial_schedule(0.1, 0.01, 2, transition_steps=3),
    "linear": optim.linear_schedule(0.0, 0.1, transition_steps=2),
    "piecewise_constant": optim.piecewise_constant_schedule(0.1, {1: 0.5, 2: 0.5}),
    "exponential": optim.exponential_decay(0.1, 2, 0.5, staircase=True, end_value=0.02),
    "cosine": optim.cosine_decay_schedule(0.1, 3, alpha=0.1),
    "warmup_cosine": optim.warmup_cosine_decay_schedule(0.0, 0.1, 1, 4),
    "join": optim.join_schedules([optim.constant_schedule(0.1),
                                  optim.linear_schedule(0.1, 0.0, 4)], [2]),
}
OPTIMIZERS = {
    "sgd": optim.sgd(0.1),
    "sgd-nesterov": optim.sgd(0.1, momentum=0.9, nesterov=True),
    "adam": optim.adam(0.1),
    "adamw": optim.adamw(0.1, weight_decay=0.1),
    "rmsprop": optim.rmsprop(0.1, centered=True, momentum=0.5),
    "adagrad": optim.adagrad(0.1),
    "lion": optim.lion(0.1),
    "lamb": optim.lamb(0.1),
    "clip+adam": optim.chain(optim.clip_by_global_norm(0.5), optim.clip(0.2), optim.adam(0.1)),
    "multi_transform": optim.multi_transform({"a": optim.adam(0.1), "s": optim.sgd(0.1)},
                                             {"w": "a", "b": "s"}),
    "MultiSteps": optim.MultiSteps(optim.adam(0.1), 2).gradient_transformation(),
    "inject_hyperparams": optim.inject_hyperparams(optim.adamw)(
        SCHEDULES["cosine"], weight_decay=SCHEDULES["linear"]),
}
OPTIMIZERS.update({f"sgd({name})": optim.sgd(s) for name, s in SCHEDULES.items()})

RNG = np.random.default_rng(1)
X, Y = RNG.normal(size=(4, 8, 3)), RNG.normal(size=(4, 8))      # 4 batches of 8
PARAMS = {"w": RNG.normal(size=3), "b": np.array(0.1)}


def _train_step(opt):
    def step(params, state, x, y):
        loss, grads = fgrad.value_and_grad(_loss)(params, x, y)
        updates, state = opt.update(grads, state, params)
        return optim.apply_updates(params, updates), state, loss
    return step


def _run(step, params, state, move=lambda batch: batch):
    """``step`` over the batches; the final parameters and state, and the losses."""
    losses = []
    for x, y in zip(X, Y):
        params, state, loss = step(params, state, move(x), move(y))
        losses.append(loss)
    return params, state, losses


def _eager_losses(opt, params):
    params, _, losses = _run(_train_step(opt), params, opt.init(params))
    return params, losses


def _assert_as_eager(opt, params, losses):
    expected_params, expected_losses = _eager_losses(opt, PARAMS)
    np.testing.assert_allclose(losses, expected_losses, rtol=1e-12)
    np.testing.assert_allclose(_leaves(params), _leaves(expected_params), rtol=1e-12)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_jitted_step_traces_once(name):
    opt = OPTIMIZERS[name]
    step = fgrad.jit(_train_step(opt), max_traces=1)
    params, _, losses = _run(step, PARAMS, opt.init(PARAMS))
    assert step.cache_info().traces == 1
    _assert_as_eager(opt, params, losses)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_vmapped_ensemble_matches_each_model(name):
    opt = OPTIMIZERS[name]
    ensemble = fgrad.tree.tree_map(lambda leaf: np.stack([leaf, leaf + 1, 2 * leaf]), PARAMS)
    step = fgrad.vmap(_train_step(opt), in_axes=(0, 0, None, None))
    params, _, _ = _run(step, ensemble, fgrad.vmap(opt.init)(ensemble))
    for i in range(3):
        alone, _ = _eager_losses(opt, fgrad.tree.tree_map(lambda leaf: leaf[i], ensemble))
        np.testing.assert_allclose(_leaves(fgrad.tree.tree_map(lambda leaf: leaf[i], params)),
                                   _leaves(alone), rtol=1e-12)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_scan_training_loop_under_jit(name):
    opt = OPTIMIZERS[name]
    train_step = _train_step(opt)

    def body(carry, batch):
        params, state, loss = train_step(*carry, *batch)
        return (params, state), loss

    @fgrad.jit
    def train(params):
        (params, _), losses = fgrad.lax.scan(body, (params, opt.init(params)), (X, Y))
        return params, losses

    _assert_as_eager(opt, *train(PARAMS))


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_state_and_updates_stay_on_the_parameters_device(name):
    # the stand-in refuses NumPy arrays among device operands, as CuPy does: the
    # step count and the hyperparameters must be made on the parameters' backend
    opt = OPTIMIZERS[name]
    expected_params, _ = _eager_losses(opt, PARAMS)
    with registered():
        params, state, _ = _run(_train_step(opt), to_standin(PARAMS),
                                opt.init(to_standin(PARAMS)), move=to_standin)
        for leaf in fgrad.tree.tree_leaves((params, state)):
            assert type(leaf) is StandInArray
        np.testing.assert_allclose(_leaves(to_numpy(params)), _leaves(expected_params),
                                   rtol=1e-12)
