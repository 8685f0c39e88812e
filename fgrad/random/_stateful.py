"""NumPy generators where fgrad draws: eager only.

fgrad's own draws take keys. Functions that also accept a NumPy
``Generator`` (the initializers and dropout of `fgrad.nn`, which did before
keys existed) draw from it only when nothing is being staged or batched:
under `jit` or `vmap` the draw would happen once, while tracing, and be
reused for every call and every example.
"""
import numpy as np

from fgrad.core.errors import check_not_numpy_generator
from fgrad.core.trace import trace_state
from fgrad.interpreters.batching import BatchTrace
from fgrad.interpreters.staging import StagingTrace


def tracing_for_many():
    """The transformation ("jit" or "vmap") whose trace is active, that runs
    the function once for many calls or examples; None when there is none."""
    for trace in reversed(trace_state.trace_stack):
        if isinstance(trace, StagingTrace):
            return "jit"
        if isinstance(trace, BatchTrace):
            return "vmap"
    return None


def numpy_generator(rng, where):
    """The ``np.random.Generator`` to draw from eagerly: ``rng`` itself, or a
    new one seeded with the integer ``rng``. Under `jit` or `vmap`, a generator
    raises `StatefulRandomnessError` (``where`` names the argument).

    >>> numpy_generator(0, "seed").random() == np.random.default_rng(0).random()
    True
    """
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    transformation = tracing_for_many()
    if transformation is not None:
        check_not_numpy_generator(rng, f"{where} (used inside {transformation})")
    return rng
