"""How the systematic sweeps split between a plain `pytest` and `pytest -m slow`.

A sweep is one test per spec (`primitive_specs.SPECS`): finite differences,
float32, jit, vmap, jvp of grad, the compiled sweep, parallel execution, the
stand-in device. A plain `pytest`, which a contributor runs on every change,
takes every spec through each sweep with a few hypothesis examples; the `slow`
marker, which CI runs as well, takes each through the profile's full count.
So every primitive meets every sweep in both runs: only the depth differs, and
for jit's sweeps whether every elementwise group is compiled into a kernel
(the full run; the quick one runs the staged NumPy calls, and
test_fusion.py and test_cpu_fusion.py compile the elementwise specs).
"""
import pytest
from hypothesis import settings

# examples per spec and sweep in a plain run: enough to meet each rule with a
# couple of shapes; most of a case's cost is staging and compiling its shapes
QUICK_EXAMPLES = 2


# specs of which one example costs seconds (a scan or cond staged and
# differentiated per example, a gamma draw's rejection loop): one example each
# in the quick run
HEAVY = frozenset({"scan", "cond", "jit_call", "random_gamma"})


def sweep(names, quick=QUICK_EXAMPLES, slow_only=()):
    """``pytest.param(name, count)`` for each name: ``count`` is ``quick`` (1
    for a `HEAVY` spec) in the plain run, and ``None`` (the full count) in a
    twin case marked slow. Names in ``slow_only`` get only the slow case.

    >>> [p.id for p in sweep(["sin", "cos"], slow_only={"cos"})]
    ['cos-full', 'sin', 'sin-full']
    """
    params = []
    for name in sorted(names):
        if name not in slow_only:
            count = min(quick, 1) if name in HEAVY else quick
            params.append(pytest.param(name, count, id=name))
        params.append(pytest.param(name, None, id=f"{name}-full", marks=pytest.mark.slow))
    return params


def examples(count, full=None, **options):
    """The hypothesis settings of one sweep case, as a decorator: ``count``
    examples (at most ``full``), or with ``count=None`` the full run: ``full``
    examples where a sweep fixes its own, else the loaded profile's."""
    n = full if count is None else min(count, full or count)
    if n is None and not options:
        return lambda test: test
    return settings(max_examples=n, **options) if n else settings(**options)
