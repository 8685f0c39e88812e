"""fgrad.optim against optax, the API it follows: the same constructor call on
both libraries, the same gradients, updates equal step after step (float64 on
both sides). Skips where optax is not installed (``pip install '.[bench]'``)."""
import numpy as np
import pytest

from fgrad import optim
from fgrad.tree import tree_leaves, tree_map

optax = pytest.importorskip("optax")
jax = pytest.importorskip("jax")

STEPS = 4
PARAMS = {"w": np.array([[1.0, -2.0], [0.5, 3.0]]), "b": (np.array(0.5), np.array([0.0, 1.0]))}
MASK = {"w": True, "b": (False, True)}
LABELS = {"w": "a", "b": ("s", "a")}


def _gradients():
    rng = np.random.default_rng(0)
    return [tree_map(lambda p: rng.normal(size=np.shape(p)), PARAMS) for _ in range(STEPS)]


def _sched(m):
    return m.warmup_cosine_decay_schedule(0.0, 0.2, 2, 5, end_value=0.01)


# One constructor per case, called once with fgrad.optim and once with optax:
# the names, signatures and defaults are the same, so the call is the same.
TRANSFORMS = {
    "sgd": lambda m: m.sgd(0.1),
    "sgd-momentum": lambda m: m.sgd(0.1, momentum=0.9),
    "sgd-nesterov": lambda m: m.sgd(0.1, momentum=0.9, nesterov=True),
    "sgd-schedule": lambda m: m.sgd(_sched(m)),
    "adam": lambda m: m.adam(0.1),
    "adam-nesterov-eps_root": lambda m: m.adam(_sched(m), b1=0.8, eps_root=1e-6, nesterov=True),
    "adamw": lambda m: m.adamw(0.1, weight_decay=0.1),
    "adamw-mask": lambda m: m.adamw(0.1, weight_decay=0.1, mask=MASK),
    "rmsprop": lambda m: m.rmsprop(0.1),
    "rmsprop-centered-momentum": lambda m: m.rmsprop(0.1, centered=True, momentum=0.9,
                                                     initial_scale=1.0),
    "rmsprop-bias-eps-outside": lambda m: m.rmsprop(0.1, eps_in_sqrt=False, bias_correction=True,
                                                    momentum=0.5, nesterov=True),
    "adagrad": lambda m: m.adagrad(0.1),
    "lion": lambda m: m.lion(0.1),
    "lamb": lambda m: m.lamb(0.1, weight_decay=0.01),
    "identity": lambda m: m.identity(),
    "scale": lambda m: m.scale(-0.3),
    "scale_by_schedule": lambda m: m.scale_by_schedule(_sched(m)),
    "scale_by_learning_rate": lambda m: m.scale_by_learning_rate(0.3, flip_sign=False),
    "trace": lambda m: m.trace(0.5, nesterov=True),
    "scale_by_adam": lambda m: m.scale_by_adam(b2=0.9),
    "scale_by_rms": lambda m: m.scale_by_rms(decay=0.5, bias_correction=True),
    "scale_by_stddev": lambda m: m.scale_by_stddev(decay=0.5, initial_scale=0.5),
    "scale_by_rss": lambda m: m.scale_by_rss(initial_accumulator_value=0.0),
    "scale_by_lion": lambda m: m.scale_by_lion(b1=0.5),
    "scale_by_trust_ratio": lambda m: m.scale_by_trust_ratio(min_norm=0.1, eps=1e-3),
    "add_decayed_weights": lambda m: m.add_decayed_weights(0.1),
    "add_decayed_weights-schedule": lambda m: m.add_decayed_weights(_sched(m)),
    "clip": lambda m: m.clip(0.5),
    "clip_by_global_norm": lambda m: m.clip_by_global_norm(1.0),
    "chain": lambda m: m.chain(m.clip_by_global_norm(1.0), m.adam(0.1)),
    "masked": lambda m: m.masked(m.adam(0.1), MASK),
    "masked-callable": lambda m: m.masked(m.scale(-1.0), lambda p: MASK),
    "multi_transform": lambda m: m.multi_transform({"a": m.adam(0.1), "s": m.sgd(1.0)},
                                                   LABELS),
    "MultiSteps": lambda m: m.MultiSteps(m.adam(0.1), every_k_schedule=3,
                                         accumulator_dtype=np.float64).gradient_transformation(),
    "MultiSteps-sum": lambda m: m.MultiSteps(m.sgd(0.1, momentum=0.9), 2, use_grad_mean=False,
                                             accumulator_dtype=np.float64
                                             ).gradient_transformation(),
    "inject_hyperparams": lambda m: m.inject_hyperparams(m.adam)(learning_rate=_sched(m),
                                                                 b1=0.8),
}


# optax reads a schedule at its int32 step count, and JAX divides an int32 in
# float32 even under x64: there the two agree to float32's precision only (fgrad
# computes in float64). The other cases agree to float64's.
SCHEDULED = {"sgd-schedule", "adam-nesterov-eps_root", "scale_by_schedule",
             "add_decayed_weights-schedule", "inject_hyperparams"}


@pytest.mark.parametrize("case", TRANSFORMS)
def test_updates_match_optax_step_by_step(case):
    make = TRANSFORMS[case]
    rtol = 1e-6 if case in SCHEDULED else 1e-10
    with jax.enable_x64(True):
        ours, theirs = make(optim), make(optax)
        params = PARAMS
        our_state, their_state = ours.init(params), theirs.init(params)
        # MultiSteps' lax.cond would compile at every step: compile it once
        their_update = jax.jit(theirs.update) if "MultiSteps" in case else theirs.update
        for step, grads in enumerate(_gradients()):
            our_updates, our_state = ours.update(grads, our_state, params)
            their_updates, their_state = their_update(grads, their_state, params)
            for a, b in zip(tree_leaves(our_updates), jax.tree.leaves(their_updates),
                            strict=True):
                np.testing.assert_allclose(a, np.asarray(b), rtol=rtol, atol=1e-14,
                                           err_msg=f"{case}, step {step}")
            params = optim.apply_updates(params, our_updates)


SCHEDULES = {
    "constant": lambda m: m.constant_schedule(0.3),
    "polynomial": lambda m: m.polynomial_schedule(1.0, 0.1, power=2, transition_steps=7,
                                                  transition_begin=2),
    "linear": lambda m: m.linear_schedule(0.0, 1.0, transition_steps=5),
    "piecewise_constant": lambda m: m.piecewise_constant_schedule(1.0, {3: 0.5, 6: 0.1}),
    "exponential": lambda m: m.exponential_decay(1.0, 3, 0.5),
    "exponential-all": lambda m: m.exponential_decay(1.0, transition_steps=2, decay_rate=0.5,
                                                     transition_begin=3, staircase=True,
                                                     end_value=0.2),
    "exponential-growth": lambda m: m.exponential_decay(0.1, 2, 2.0, end_value=0.5),
    "cosine": lambda m: m.cosine_decay_schedule(2.0, 8, alpha=0.1, exponent=2.0),
    "warmup_cosine": lambda m: m.warmup_cosine_decay_schedule(0.1, 1.0, 3, 10, end_value=0.05),
    "join": lambda m: m.join_schedules([m.constant_schedule(1.0),
                                        m.linear_schedule(1.0, 0.0, 4)], [3]),
}


@pytest.mark.parametrize("case", SCHEDULES)
def test_schedules_match_optax(case):
    with jax.enable_x64(True):
        ours, theirs = SCHEDULES[case](optim), SCHEDULES[case](optax)
        # Python ints: JAX computes in float64 then (see SCHEDULED above)
        steps = range(15)
        np.testing.assert_allclose([float(ours(s)) for s in steps],
                                   [float(theirs(s)) for s in steps], rtol=1e-12)
        # fgrad's int32 count, as its optimizers pass it
        np.testing.assert_allclose([float(ours(np.int32(s))) for s in steps],
                                   [float(ours(s)) for s in steps], rtol=1e-15)
