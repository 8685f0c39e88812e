"""Derivative checks over many drawn inputs: `given_check_grads`.

Hypothesis draws the arguments, every check of `fgrad.testing` runs on them,
and a failure is shrunk to a small input: the error that is raised carries a
note naming it (``f failed at the arguments (array(0.),)``).

Needs hypothesis: ``pip install 'fgrad[testing]'``.
"""
import numpy as np

# first: without hypothesis, this import raises the error that says what to install
from fgrad.testing.strategies import st
from hypothesis import given, note, settings

from fgrad.core.tree import tree_flatten, tree_unflatten
from fgrad.testing.consistency import check_jit, check_vmap
from fgrad.testing.gradients import check_grads, to_host

# the second example of the vmap check: the drawn one scaled by this much,
# close enough to stay inside any open domain the strategies draw from
NEARBY = 1.0 + 1e-3


def _nearby(args):
    leaves, tree = tree_flatten(args)
    return tree_unflatten(tree, [np.asarray(to_host(x) * NEARBY, to_host(x).dtype)
                                 if to_host(x).dtype.kind in "fc" else x
                                 for x in leaves])


def given_check_grads(f, *strategies, args=None, order=2, modes=("fwd", "rev"),
                      jit=True, vmap=True, atol=None, rtol=None, eps=None,
                      max_examples=None):
    """Check ``f`` at many arguments, one drawn from each of ``strategies`` (or
    all of them at once from ``args``, a strategy of tuples such as
    `fgrad.testing.strategies.broadcasting_arrays`).

    On every draw: `check_grads` (``modes``, up to ``order``: forward and
    reverse against finite differences and against each other), then, unless
    turned off, `check_jit` (``jit(f)`` against ``f``, values and VJPs) and
    `check_vmap` (``vmap(f)`` over the drawn example and a nearby one, against a
    loop). Raises the first failure after hypothesis has shrunk it.
    ``max_examples`` overrides the active hypothesis profile; there is no
    deadline (the first draw stages and compiles ``f`` under jit).

    >>> import fgrad.numpy as fnp
    >>> from fgrad.testing.strategies import arrays, positive
    >>> given_check_grads(lambda x: fnp.sum(fnp.log(x) * x), arrays(elements=positive()),
    ...                   max_examples=5)
    """
    name = getattr(f, "__name__", repr(f))

    @given(st.tuples(*strategies) if args is None else args.map(tuple))
    def check(args):
        note(f"{name} failed at the arguments {args!r}")
        check_grads(f, args, order=order, modes=modes, atol=atol, rtol=rtol, eps=eps)
        if jit:
            check_jit(f, args)
        if vmap:
            check_vmap(f, [args, _nearby(args)])

    # one failure, shrunk, rather than a group of distinct ones; no deadline: the
    # first draw stages and compiles f under jit, seconds on a busy machine, and
    # hypothesis' default 200 ms would report that as a failure
    options = {"report_multiple_bugs": False, "deadline": None}
    if max_examples is not None:
        options["max_examples"] = max_examples
    settings(**options)(check)()
