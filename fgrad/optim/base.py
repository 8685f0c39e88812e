"""What every optimizer shares: the ``(init, update)`` pair, the step count, and
applying updates.

A gradient transformation is two pure functions: ``init(params) -> state`` and
``update(updates, state, params=None) -> (updates, state)``. The state is a
pytree of arrays only, so a training step that threads it through `fgrad.jit`
traces once, maps under `fgrad.vmap` and carries through `fgrad.lax.scan`.

>>> import numpy as np
>>> apply_updates({"w": np.ones(2)}, {"w": np.array([0.5, -0.5])})
{'w': array([1.5, 0.5])}
"""
from typing import Callable, NamedTuple

import numpy as np

from fgrad import numpy as fnp
from fgrad.core.errors import NNArgumentError
from fgrad.core.tree import tree_leaves, tree_map

__all__ = [
    "GradientTransformation", "EmptyState", "identity", "init_empty_state",
    "apply_updates", "global_norm", "zero_count", "on_backend_of", "safe_increment",
    "cast_like",
    "abs_sq", "check_learning_rate",
]


class GradientTransformation(NamedTuple):
    """``init(params) -> state`` and ``update(updates, state, params=None) ->
    (updates, state)``, as in optax.

    >>> t = identity()
    >>> t.update(np.ones(2), t.init(np.zeros(2)))
    (array([1., 1.]), EmptyState())
    """

    init: Callable
    update: Callable


class EmptyState(NamedTuple):
    """The state of a transformation that keeps none (a pytree with no leaves)."""


def init_empty_state(params):
    """The ``init`` of a stateless transformation.

    >>> init_empty_state({"w": np.ones(2)})
    EmptyState()
    """
    return EmptyState()


def identity():
    """The transformation that passes updates through unchanged.

    >>> identity().update(np.array([2.0]), EmptyState())[0]
    array([2.])
    """
    return GradientTransformation(init_empty_state, lambda updates, state, params=None:
                                  (updates, state))


# The step count is an int32 array from the start (as in optax), so the first
# update does not change the state's dtypes and a jitted step traces once.
_COUNT_DTYPE = np.int32
_COUNT_MAX = np.iinfo(_COUNT_DTYPE).max


def on_backend_of(value, tree):
    """``value`` as an array of the backend (NumPy, CuPy) of ``tree``'s first
    array leaf, so that a state's counters and hyperparameters meet the
    parameters on one device (CuPy refuses NumPy arrays as operands).

    >>> on_backend_of(0.5, {"w": np.ones(2)})
    array(0.5)
    """
    for leaf in tree_leaves(tree):
        if hasattr(leaf, "shape"):
            return fnp.asarray(value, like=leaf)
    return fnp.asarray(value)


def zero_count(like=None):
    """A fresh step count: a 0-d int32 array, on the backend of ``like`` (the
    parameters) when given.

    >>> zero_count()
    array(0, dtype=int32)
    """
    return on_backend_of(np.zeros((), _COUNT_DTYPE), like)


def safe_increment(count):
    """``count + 1``, staying at the largest int32 rather than wrapping round.

    >>> int(safe_increment(zero_count())), int(safe_increment(np.int32(2**31 - 1)))
    (1, 2147483647)
    """
    # adds the comparison (1 or 0), so no overflowing `count + 1` is ever computed
    return count + fnp.astype(count < _COUNT_MAX, _COUNT_DTYPE)


def cast_like(value, leaf):
    """``value`` in ``leaf``'s dtype when it is an array; a Python number is left
    alone (it takes the leaf's dtype when the two meet, as NumPy's scalars do).

    A scalar computed from the step count is float64; cast, it keeps float32
    parameters float32.

    >>> cast_like(np.float64(0.5), np.ones(2, np.float32)).dtype
    dtype('float32')
    """
    if not hasattr(value, "dtype"):     # np.float64 is a float, but has a dtype
        return value
    return fnp.astype(value, leaf.dtype)


def abs_sq(x):
    """``|x|**2`` elementwise, real for complex ``x``.

    >>> abs_sq(np.array([3 + 4j]))
    array([25.])
    """
    if np.issubdtype(x.dtype, np.complexfloating):
        return fnp.real(fnp.conj(x) * x)
    return x * x


def check_learning_rate(learning_rate, fname):
    """Refuse a negative (or non-numeric) learning rate given as a Python number;
    schedules and arrays pass (an array may be traced, its value unknown).

    >>> try:
    ...     check_learning_rate(-1.0, "sgd")
    ... except NNArgumentError as e:
    ...     print(e)
    sgd: learning_rate must be a non-negative number, an array or a schedule
    (a function of the step count), got -1.0
    """
    if callable(learning_rate) or hasattr(learning_rate, "dtype"):
        return
    if not (isinstance(learning_rate, (int, float)) and learning_rate >= 0):
        raise NNArgumentError(f"{fname}: learning_rate must be a non-negative number, an "
                              f"array or a schedule (a function of the step count), got "
                              f"{learning_rate!r}")


def apply_updates(params, updates):
    """``params + updates``, leaf by leaf, keeping each parameter's dtype.

    >>> apply_updates((np.ones(2, np.float32),), (np.array([0.5, -0.5]),))
    (array([1.5, 0.5], dtype=float32),)
    """
    def add(p, u):
        out = p + u
        dtype = getattr(p, "dtype", None)
        return fnp.astype(out, dtype) if dtype is not None and out.dtype != dtype else out
    return tree_map(add, params, updates)


def global_norm(tree):
    """The 2-norm of all leaves of ``tree`` taken together (``optax.tree.norm``).

    >>> float(global_norm({"a": np.array([3.0]), "b": np.array([4.0])}))
    5.0
    """
    # fgrad.numpy, so it stages under jit and differentiates under grad; the
    # square root of a zero sum is taken of 1 instead, so that its derivative
    # (infinite at 0) does not turn the gradient of a zero tree into NaN
    squares = sum(fnp.sum(abs_sq(fnp.asarray(leaf))) for leaf in tree_leaves(tree))
    zero = squares == 0
    return fnp.where(zero, 0.0, fnp.sqrt(fnp.where(zero, 1.0, squares)))
