"""Optimizers as pure functions over pytrees, with optax's names, signatures,
argument order and defaults.

An optimizer is a `GradientTransformation`: ``init(params) -> state`` and
``update(grads, state, params=None) -> (updates, state)``; `apply_updates` adds
the updates to the parameters. The state is a pytree of arrays (its step count
an int32 array from the start), so a training step traces once under
`fgrad.jit`, maps under `fgrad.vmap` and runs inside `fgrad.lax.scan`; every
schedule is written with `fgrad.numpy` operations for the same reason.
docs/optim.md lists where fgrad differs from optax.

The modules: `fgrad.optim.base` (the pair, the step count, applying updates),
`~.schedules`, `~.transforms` (the building blocks), `~.combine` (``chain``,
``masked``, ``multi_transform``), `~.wrappers` (``MultiSteps``,
``inject_hyperparams``), `~.optimizers` (``sgd``, ``adam``, ...) and
`~.deprecated` (fgrad's names from before).

>>> import numpy as np, fgrad
>>> opt = fgrad.optim.chain(fgrad.optim.clip_by_global_norm(1.0), fgrad.optim.sgd(0.1))
>>> params = {"w": np.array([1.0, -2.0])}
>>> state = opt.init(params)
>>> updates, state = opt.update({"w": np.array([3.0, 4.0])}, state, params)
>>> fgrad.optim.apply_updates(params, updates)["w"]
array([ 0.94, -2.08])
"""
from fgrad.optim.base import EmptyState as EmptyState
from fgrad.optim.base import GradientTransformation as GradientTransformation
from fgrad.optim.base import apply_updates as apply_updates
from fgrad.optim.base import global_norm as global_norm
from fgrad.optim.base import identity as identity
from fgrad.optim.combine import MaskedNode as MaskedNode
from fgrad.optim.combine import MaskedState as MaskedState
from fgrad.optim.combine import PartitionState as PartitionState
from fgrad.optim.combine import chain as chain
from fgrad.optim.combine import masked as masked
from fgrad.optim.combine import multi_transform as multi_transform
from fgrad.optim.combine import partition as partition
from fgrad.optim.deprecated import cosine_decay as cosine_decay
from fgrad.optim.deprecated import momentum as momentum
from fgrad.optim.deprecated import nesterov as nesterov
from fgrad.optim.deprecated import piecewise_constant as piecewise_constant
from fgrad.optim.deprecated import warmup_cosine_decay as warmup_cosine_decay
from fgrad.optim.optimizers import adagrad as adagrad
from fgrad.optim.optimizers import adam as adam
from fgrad.optim.optimizers import adamw as adamw
from fgrad.optim.optimizers import lamb as lamb
from fgrad.optim.optimizers import lion as lion
from fgrad.optim.optimizers import rmsprop as rmsprop
from fgrad.optim.optimizers import sgd as sgd
from fgrad.optim.schedules import constant_schedule as constant_schedule
from fgrad.optim.schedules import cosine_decay_schedule as cosine_decay_schedule
from fgrad.optim.schedules import exponential_decay as exponential_decay
from fgrad.optim.schedules import join_schedules as join_schedules
from fgrad.optim.schedules import linear_schedule as linear_schedule
from fgrad.optim.schedules import piecewise_constant_schedule as piecewise_constant_schedule
from fgrad.optim.schedules import polynomial_schedule as polynomial_schedule
from fgrad.optim.schedules import warmup_cosine_decay_schedule as warmup_cosine_decay_schedule
from fgrad.optim.transforms import ScaleByAdamState as ScaleByAdamState
from fgrad.optim.transforms import ScaleByLionState as ScaleByLionState
from fgrad.optim.transforms import ScaleByRmsState as ScaleByRmsState
from fgrad.optim.transforms import ScaleByRssState as ScaleByRssState
from fgrad.optim.transforms import ScaleByScheduleState as ScaleByScheduleState
from fgrad.optim.transforms import TraceState as TraceState
from fgrad.optim.transforms import add_decayed_weights as add_decayed_weights
from fgrad.optim.transforms import clip as clip
from fgrad.optim.transforms import clip_by_global_norm as clip_by_global_norm
from fgrad.optim.transforms import scale as scale
from fgrad.optim.transforms import scale_by_adam as scale_by_adam
from fgrad.optim.transforms import scale_by_learning_rate as scale_by_learning_rate
from fgrad.optim.transforms import scale_by_lion as scale_by_lion
from fgrad.optim.transforms import scale_by_rms as scale_by_rms
from fgrad.optim.transforms import scale_by_rss as scale_by_rss
from fgrad.optim.transforms import scale_by_schedule as scale_by_schedule
from fgrad.optim.transforms import scale_by_stddev as scale_by_stddev
from fgrad.optim.transforms import scale_by_trust_ratio as scale_by_trust_ratio
from fgrad.optim.transforms import trace as trace
from fgrad.optim.wrappers import InjectHyperparamsState as InjectHyperparamsState
from fgrad.optim.wrappers import MultiSteps as MultiSteps
from fgrad.optim.wrappers import MultiStepsState as MultiStepsState
from fgrad.optim.wrappers import inject_hyperparams as inject_hyperparams
from fgrad.optim.wrappers import skip_not_finite as skip_not_finite

__all__ = [
    # optimizers
    "sgd", "adam", "adamw", "rmsprop", "adagrad", "lion", "lamb",
    # building blocks
    "GradientTransformation", "EmptyState", "identity", "chain", "masked", "MaskedNode",
    "multi_transform", "partition", "scale", "scale_by_schedule", "scale_by_learning_rate",
    "trace", "scale_by_adam", "scale_by_rms", "scale_by_stddev", "scale_by_rss",
    "scale_by_lion", "scale_by_trust_ratio", "add_decayed_weights", "clip",
    "clip_by_global_norm", "MultiSteps", "skip_not_finite", "inject_hyperparams",
    "apply_updates", "global_norm",
    # states
    "MaskedState", "PartitionState", "ScaleByAdamState", "ScaleByLionState",
    "ScaleByRmsState", "ScaleByRssState", "ScaleByScheduleState", "TraceState",
    "MultiStepsState", "InjectHyperparamsState",
    # schedules
    "constant_schedule", "polynomial_schedule", "linear_schedule",
    "piecewise_constant_schedule", "exponential_decay", "cosine_decay_schedule",
    "warmup_cosine_decay_schedule", "join_schedules",
    # deprecated
    "momentum", "nesterov", "cosine_decay", "warmup_cosine_decay", "piecewise_constant",
]
