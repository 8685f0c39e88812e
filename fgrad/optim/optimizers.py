"""Optimizers: chains of transformations under optax's names, signatures and
defaults. Each takes a learning rate that is a number or a schedule.

>>> import numpy as np
>>> opt = sgd(0.1, momentum=0.9)
>>> params = {"w": np.array([1.0, -2.0])}
>>> updates, state = opt.update({"w": np.array([1.0, 1.0])}, opt.init(params), params)
>>> updates
{'w': array([-0.1, -0.1])}
"""
from fgrad.optim.base import check_learning_rate, identity
from fgrad.optim.combine import chain
from fgrad.optim.transforms import (add_decayed_weights, scale_by_adam, scale_by_learning_rate,
                                    scale_by_lion, scale_by_rms, scale_by_rss,
                                    scale_by_stddev, scale_by_trust_ratio, trace)

__all__ = ["sgd", "adam", "adamw", "rmsprop", "adagrad", "lion", "lamb"]


def sgd(learning_rate, momentum=None, nesterov=False, accumulator_dtype=None):
    """Stochastic gradient descent, with heavy-ball (or Nesterov) momentum when
    ``momentum`` is given: ``trace`` then ``scale_by_learning_rate``.

    >>> opt = sgd(0.5)
    >>> opt.update(np.array([2.0]), opt.init(np.zeros(1)))[0]
    array([-1.])
    """
    check_learning_rate(learning_rate, "sgd")
    return chain(identity() if momentum is None
                 else trace(momentum, nesterov, accumulator_dtype),
                 scale_by_learning_rate(learning_rate))


def adam(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, mu_dtype=None, *,
         nesterov=False):
    """Adam (Kingma & Ba): ``scale_by_adam`` then ``scale_by_learning_rate``.

    >>> opt = adam(0.1)
    >>> opt.update(np.array([3.0]), opt.init(np.zeros(1)))[0].round(6)
    array([-0.1])
    """
    check_learning_rate(learning_rate, "adam")
    return chain(scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
                 scale_by_learning_rate(learning_rate))


def adamw(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, mu_dtype=None,
          weight_decay=1e-4, mask=None, *, nesterov=False):
    """Adam with decoupled weight decay (Loshchilov & Hutter): the update adds
    ``-learning_rate * weight_decay * params`` (only where ``mask`` is True, when
    given), so ``update`` needs ``params``.

    >>> opt = adamw(0.1, weight_decay=0.5)
    >>> opt.update(np.array([0.0]), opt.init(np.ones(1)), np.ones(1))[0]
    array([-0.05])
    """
    check_learning_rate(learning_rate, "adamw")
    return chain(scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
                 add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))


def rmsprop(learning_rate, decay=0.9, eps=1e-8, initial_scale=0.0, eps_in_sqrt=True,
            centered=False, momentum=None, nesterov=False, bias_correction=False):
    """RMSProp (Tieleman & Hinton): divide by the root of a moving average of
    squared gradients (of their variance with ``centered``), optionally with
    momentum.

    >>> opt = rmsprop(0.1, decay=0.0, eps=0.0)
    >>> opt.update(np.array([-4.0]), opt.init(np.zeros(1)))[0]
    array([0.1])
    """
    check_learning_rate(learning_rate, "rmsprop")
    rescale = scale_by_stddev if centered else scale_by_rms
    return chain(rescale(decay, eps, initial_scale, eps_in_sqrt, bias_correction),
                 scale_by_learning_rate(learning_rate),
                 identity() if momentum is None else trace(momentum, nesterov))


def adagrad(learning_rate, initial_accumulator_value=0.1, eps=1e-7):
    """Adagrad (Duchi et al.): divide by the root of the sum of all squared
    gradients so far.

    >>> opt = adagrad(1.0, initial_accumulator_value=0.0, eps=0.0)
    >>> opt.update(np.array([2.0]), opt.init(np.zeros(1)))[0]
    array([-1.])
    """
    check_learning_rate(learning_rate, "adagrad")
    return chain(scale_by_rss(initial_accumulator_value, eps),
                 scale_by_learning_rate(learning_rate))


def lion(learning_rate, b1=0.9, b2=0.99, mu_dtype=None, weight_decay=1e-3, mask=None):
    """Lion (Chen et al.): a step of size ``learning_rate`` along the sign of an
    interpolated momentum, with decoupled weight decay.

    >>> opt = lion(0.1, weight_decay=0.0)
    >>> opt.update(np.array([0.3, -2.0]), opt.init(np.zeros(2)), np.zeros(2))[0]
    array([-0.1,  0.1])
    """
    check_learning_rate(learning_rate, "lion")
    return chain(scale_by_lion(b1, b2, mu_dtype), add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))


def lamb(learning_rate, b1=0.9, b2=0.999, eps=1e-6, eps_root=0.0, weight_decay=0.0,
         mask=None):
    """LAMB (You et al.): Adam's direction plus weight decay, rescaled per leaf by
    the trust ratio ``‖param‖ / ‖update‖``.

    >>> opt = lamb(0.1)
    >>> p = np.array([3.0, 4.0])
    >>> opt.update(np.array([1.0, 1.0]), opt.init(p), p)[0].round(4)
    array([-0.3536, -0.3536])
    """
    check_learning_rate(learning_rate, "lamb")
    return chain(scale_by_adam(b1, b2, eps, eps_root),
                 add_decayed_weights(weight_decay, mask), scale_by_trust_ratio(),
                 scale_by_learning_rate(learning_rate))
