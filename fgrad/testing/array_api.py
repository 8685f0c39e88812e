"""`fgrad.numpy` with every call run under a transformation, for Array API suites.

``namespace("jit")``, ``namespace("vmap")`` and ``namespace("grad")`` return a
module-like object with all of `fgrad.numpy`'s names (and its ``linalg`` and
``fft``), in which each function that receives arrays runs them as traced
values:

- ``"jit"``: the call is staged by `fgrad.jit` with the arrays as its traced
  arguments and everything else (axes, dtypes, Python scalars) static, and
  replayed from jit's cache when the same statics come back;
- ``"vmap"``: every array is stacked twice along a new leading axis, the call
  runs under `fgrad.vmap`, and the two results must agree; the first is
  returned;
- ``"grad"``: the call runs under `fgrad.vjp` with its floating-point arrays
  as the differentiated inputs; where every output is floating point, the
  pullback then runs on a cotangent of ones, so every VJP rule on the way
  runs too.

Calls without array arguments (``zeros``, ``arange``, ``asarray`` of a list)
and the functions that answer questions about dtypes (`UNTRANSFORMED`) run as
they are. The arrays returned are NumPy's, as outside every transformation,
so an Array API suite (``array-api-tests``) checks the results of traced code:

>>> import numpy as np
>>> xp = namespace("vmap")
>>> xp.sum(np.arange(6.0).reshape(2, 3), axis=1)
array([ 3., 12.])
>>> xp.__array_api_version__
'2024.12'

Point array-api-tests at one with ``ARRAY_API_TESTS_MODULE`` set to
``NAMESPACES["jit"]`` (an ``exec(...)`` line that builds it); `run_suite`
and ``python -m benchmarks.array_api_conformance`` do that for each.
"""
import functools
import os
import re
import subprocess
import sys
import time
import types

import numpy as np

import fgrad.numpy as fnp
from fgrad.core.tree import tree_flatten, tree_unflatten
from fgrad.transforms.differentiation import vjp
from fgrad.transforms.jit import jit
from fgrad.transforms.vmap import vmap

TRANSFORMS = ("jit", "vmap", "grad")

# questions about dtypes and devices: their answers are not arrays, and a traced
# argument only lends them its dtype
UNTRANSFORMED = frozenset({
    "result_type", "can_cast", "isdtype", "finfo", "iinfo", "dtype",
    "__array_namespace_info__", "from_dlpack", "broadcast_shapes",
})

# a jit cache per function holds this many static signatures before it starts over
_JIT_CACHE_SIZE = 256


class TransformMismatch(AssertionError):
    """A vmapped call disagreed with itself: the two equal examples of its
    batch gave different results (a batching rule mixed the examples)."""


def namespace(transform):
    """`fgrad.numpy` with each array function run under ``transform`` (one of
    `TRANSFORMS`); its ``linalg`` and ``fft`` likewise.

    >>> import numpy as np
    >>> namespace("grad").linalg.det(np.diag([2.0, 3.0]))
    np.float64(6.0)
    """
    wrap(None, transform)                   # refuses an unknown transformation
    out = _wrap_module(fnp, transform, f"fgrad.numpy[{transform}]")
    for sub in ("linalg", "fft"):
        setattr(out, sub, _wrap_module(getattr(fnp, sub), transform,
                                       f"{out.__name__}.{sub}"))
    return out


def wrap(fn, transform):
    """``fn`` with each call that receives arrays run under ``transform``, as
    the functions of `namespace` are.

    >>> import numpy as np, fgrad.numpy as fnp
    >>> wrap(fnp.cumsum, "vmap")(np.array([1.0, 2.0, 3.0]))
    array([1., 3., 6.])
    """
    if transform not in TRANSFORMS:
        raise ValueError(f"namespace() and wrap() take one of {', '.join(TRANSFORMS)}, "
                         f"got {transform!r}")
    return _WRAPPERS[transform](fn)


def _wrap_module(module, transform, name):
    out = types.ModuleType(name, module.__doc__)
    for attr, value in vars(module).items():
        if attr.startswith("_") and not attr.startswith("__array"):
            continue
        wrapped = (callable(value) and not isinstance(value, type)
                   and not isinstance(value, types.ModuleType)
                   and attr not in UNTRANSFORMED)
        setattr(out, attr, _WRAPPERS[transform](value) if wrapped else value)
    return out


# -- splitting a call into traced arrays and static rest -----------------------


def _is_array(x):
    return isinstance(x, np.ndarray)


def _split(args, kwargs):
    """The call's arrays (each positional or keyword argument that is an array,
    or a list or tuple of arrays), and a function of those arrays that makes
    the call with everything else as given; ``key`` identifies the rest."""
    leaves, tree = tree_flatten((args, kwargs), is_leaf=lambda x: not isinstance(
        x, (tuple, list, dict)) or isinstance(x, np.ndarray))
    where = [i for i, leaf in enumerate(leaves) if _is_array(leaf)]
    arrays = [leaves[i] for i in where]
    static = [None if i in where else leaf for i, leaf in enumerate(leaves)]

    def rebuild(*traced):
        filled = list(static)
        for i, t in zip(where, traced):
            filled[i] = t
        return tree_unflatten(tree, filled)

    key = repr((tree, where, static))
    return arrays, rebuild, key


# -- the three transformations -------------------------------------------------


def _under_jit(fn):
    cache = {}

    @functools.wraps(fn)
    def call(*args, **kwargs):
        arrays, rebuild, key = _split(args, kwargs)
        if not arrays:
            return fn(*args, **kwargs)
        if key not in cache:
            if len(cache) >= _JIT_CACHE_SIZE:
                cache.clear()

            def staged(*traced, _rebuild=rebuild):
                a, kw = _rebuild(*traced)
                return fn(*a, **kw)
            cache[key] = jit(staged)
        return cache[key](*arrays)
    return call


def _under_vmap(fn):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        arrays, rebuild, _ = _split(args, kwargs)
        if not arrays:
            return fn(*args, **kwargs)

        def one(*traced):
            a, kw = rebuild(*traced)
            return fn(*a, **kw)
        batch = [np.stack([x, x]) for x in arrays]
        out = vmap(one)(*batch)
        leaves, tree = tree_flatten(out)
        for i, leaf in enumerate(leaves):
            if not np.array_equal(leaf[0], leaf[1], equal_nan=leaf.dtype.kind in "fc"):
                raise TransformMismatch(
                    f"vmap({fn.__name__}) gave different results for two equal "
                    f"examples in output leaf {i}: {leaf[0]!r} and {leaf[1]!r}")
        # leaf[0, ...]: the first example as an array, also where it is 0-d
        return tree_unflatten(tree, [leaf[0, ...] for leaf in leaves])
    return call


def _floating(x):
    return x.dtype.kind in "fc"


def _under_grad(fn):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        arrays, rebuild, _ = _split(args, kwargs)
        floats = [i for i, x in enumerate(arrays) if _floating(x)]
        if not floats:
            return fn(*args, **kwargs)

        def differentiated(*traced):
            filled = list(arrays)
            for i, t in zip(floats, traced):
                filled[i] = t
            a, kw = rebuild(*filled)
            return fn(*a, **kw)
        primals = [arrays[i] for i in floats]
        out, pullback = vjp(differentiated, *primals)
        leaves, tree = tree_flatten(out)
        if leaves and all(_floating(np.asarray(leaf)) for leaf in leaves):
            # every VJP rule on the way runs (the sweep checks each cotangent's
            # shape and dtype against its input's)
            pullback(tree_unflatten(tree, [np.ones_like(x) for x in leaves]))
        return out
    return call


_WRAPPERS = {"jit": _under_jit, "vmap": _under_vmap, "grad": _under_grad}


# -- running the array-api-tests suite ---------------------------------------------

# name -> the Python that binds the suite's ``xp`` to it
_NAMESPACE_CODE = {
    "numpy": "import numpy as xp",
    "fgrad.numpy": "import fgrad.numpy as xp",
    **{transform: f"import fgrad.testing.array_api as m; xp = m.namespace('{transform}')"
       for transform in TRANSFORMS},
}
# hypothesis's profile without shrinking: a failing test reports its first failing
# example at once (shrinking one through fgrad's deep tracebacks takes minutes)
_NO_SHRINK = ("from hypothesis import Phase, settings; settings.load_profile("
              "settings.register_profile('fgrad-no-shrink', phases=[Phase.explicit, "
              "Phase.reuse, Phase.generate]) or 'fgrad-no-shrink'); ")


def suite_module(name, shrink=True):
    """The ``ARRAY_API_TESTS_MODULE`` value that points array-api-tests at the
    namespace ``name`` (``"numpy"``, ``"fgrad.numpy"`` or one of `TRANSFORMS`);
    ``shrink=False`` also turns off hypothesis's shrinking of failures.

    >>> suite_module("jit")
    "exec('import fgrad.testing.array_api as m; xp = m.namespace('jit')')"
    """
    return f"exec('{'' if shrink else _NO_SHRINK}{_NAMESPACE_CODE[name]}')"


# name -> the ARRAY_API_TESTS_MODULE value that points the suite at it
NAMESPACES = {name: suite_module(name) for name in _NAMESPACE_CODE}
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)\b")
# a test id may hold spaces (the suite's special cases: "test_binary[x1_i is -0 and
# ...]"): a parametrized id runs to its closing bracket, any other to a space
_FAILED = re.compile(r"^(FAILED|ERROR) ([^\s\[]+(?:\[.*?\])?)(?: - (.*))?$")


def summarize(output):
    """Counts (``passed``, ``failed``, ``skipped``, ``error``, ...) and the
    failing test ids with their first error line, read from the output of
    ``pytest -q -rfE``.

    >>> summarize("FAILED a.py::t[x is -0] - ValueError: x [y]\\n1 failed, 2 passed in 3s")
    ({'failed': 1, 'passed': 2}, {'a.py::t[x is -0]': 'ValueError: x [y]'})
    """
    lines = output.splitlines()
    counts = {}
    for line in reversed(lines):
        found = _COUNT.findall(line)
        if found and " in " in line:
            counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(n)
                      for n, kind in found}
            break
    failures = {}
    for line in lines:
        match = _FAILED.match(line)
        if match:
            failures[match.group(2)] = match.group(3) or ""
    return counts, failures


def run_suite(suite, module, max_examples=10, select=None, pytest_args=(), env=None):
    """Run the array-api-tests checkout at ``suite`` against ``module`` (an
    ``ARRAY_API_TESTS_MODULE`` value, such as ``NAMESPACES["jit"]``) in a new
    process; ``select`` is pytest's ``-k``, ``env`` more environment variables
    (``{"FGRAD_JIT_COMPILE": "never"}``). Returns ``(counts, failures,
    seconds)``, counts and failures as `summarize` reads them."""
    # a wide terminal, so that each FAILED line keeps its error message whole
    env = dict(os.environ, **(env or {}), ARRAY_API_TESTS_MODULE=module, COLUMNS="1000")
    cmd = [sys.executable, "-m", "pytest", "array_api_tests", "-q", "-rfE",
           "-p", "no:cacheprovider", "-o", "addopts=",
           f"--hypothesis-max-examples={max_examples}", *pytest_args]
    if select:
        cmd += ["-k", select]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=suite, env=env, capture_output=True, text=True)
    counts, failures = summarize(done.stdout + done.stderr)
    if not counts:
        raise RuntimeError(f"the suite did not run against {module}:\n"
                           f"{(done.stdout + done.stderr)[-3000:]}")
    return counts, failures, time.perf_counter() - start
