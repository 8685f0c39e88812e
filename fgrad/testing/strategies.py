"""Hypothesis strategies for the inputs of differentiable functions.

Built on ``hypothesis.extra.numpy``; they draw what derivative checks need:
finite values in a *domain* (``positive`` for logs and square roots,
``unit_interval`` for probabilities, ``away_from`` kinks such as ``abs`` at 0),
matrices that are symmetric positive definite (`spd`) or well conditioned
(`well_conditioned`), shapes that broadcast (`shapes` ``broadcastable_with=``,
`broadcasting_arrays`), pytrees of arrays (`pytrees`), and batches with a
mapped axis for vmap (`batched`, `in_axes_for`).

>>> from hypothesis import given
>>> import fgrad.numpy as fnp
>>> from fgrad.testing import check_grads
>>> @given(arrays(shapes(max_dims=2), positive()))
... def test_log(x):
...     check_grads(fnp.log, (x,))
>>> test_log()

Needs hypothesis: ``pip install 'fgrad[testing]'``.
"""
import numpy as np

try:
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
except ImportError as error:               # hypothesis is an optional dependency
    raise ImportError(
        "fgrad.testing.strategies needs hypothesis, which is not installed: "
        "pip install 'fgrad[testing]' (or pip install hypothesis). fgrad.testing's "
        "check_grads, check_jit, check_vmap and check_custom_vjp work without it."
    ) from error

__all__ = ["values", "positive", "unit_interval", "spaced", "away_from", "away_from_zero",
           "shapes", "arrays", "broadcasting_arrays", "batch_shapes", "well_conditioned",
           "spd", "pytrees", "batched", "in_axes_for", "elements_for"]


# -- element domains ------------------------------------------------------------------

def values(lo=-2.0, hi=2.0, width=64):
    """Finite floats in ``[lo, hi]`` (of ``width`` bits: 16, 32 or 64)."""
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False, width=width)


def positive(lo=0.3, hi=3.0, width=64):
    """Floats in ``[lo, hi]``, bounded away from 0 so that ``log``, ``sqrt`` and
    their derivatives stay moderate and finite differences stay accurate."""
    return values(lo, hi, width)


def unit_interval(margin=0.05, width=64):
    """Floats in ``[margin, 1 - margin]``: probabilities away from 0 and 1."""
    return values(margin, 1.0 - margin, width)


def spaced(lo=-2.0, hi=2.0):
    """Values on a grid 0.1 apart (plus a small offset): no ties, and no value
    exactly at a kink such as 0 for ``maximum`` or ``abs``."""
    n = int(round((hi - lo) * 10))
    return st.integers(0, n).map(lambda i: lo + i / 10 + 0.013)


def away_from(points, gap=0.05, lo=-2.0, hi=2.0, width=64):
    """Floats in ``[lo, hi]`` at least ``gap`` from each of ``points``: for
    functions with kinks (``abs`` at 0, ``clip`` at its bounds), where finite
    differences straddling the kink disagree with any one-sided derivative."""
    points = tuple(np.atleast_1d(points).tolist())
    return values(lo, hi, width).filter(
        lambda v: all(abs(v - p) > gap for p in points))


def away_from_zero(lo, hi, gap=0.2):
    """Floats in ``[lo, hi]`` with ``|v| > gap`` (``away_from((0.0,), ...)``)."""
    return away_from((0.0,), gap, lo, hi)


def elements_for(dtype):
    """The default elements of an array of ``dtype``: moderate finite numbers
    (``[-2, 2]`` for floats, magnitude 2 for complex, small integers, booleans)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return values(width=8 * dtype.itemsize)
    if dtype.kind == "c":
        return st.complex_numbers(max_magnitude=2.0, allow_nan=False,
                                  allow_infinity=False, width=8 * dtype.itemsize)
    if dtype.kind == "b":
        return st.booleans()
    if dtype.kind in "iu":
        return st.integers(0 if dtype.kind == "u" else -5, 5)
    raise TypeError(f"elements_for: no default elements for dtype {dtype}; pass "
                    "elements= explicitly")


# -- shapes and arrays ------------------------------------------------------------------

def shapes(min_dims=0, max_dims=3, min_side=1, max_side=4, *, broadcastable_with=None):
    """Array shapes, 0-d to ``max_dims``-d; with ``broadcastable_with=shape``,
    shapes that broadcast against that shape (``hnp.broadcastable_shapes``)."""
    if broadcastable_with is not None:
        return hnp.broadcastable_shapes(tuple(broadcastable_with), min_dims=min_dims,
                                        max_dims=max_dims, min_side=min_side,
                                        max_side=max_side)
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=max_side)


def arrays(shape=None, elements=None, *, dtype=np.float64, unique=False):
    """Arrays of ``dtype`` (float64 by default) and ``shape`` (a tuple, or a
    strategy: `shapes()` when left out), with ``elements`` from a domain
    (`values`, `positive`, `unit_interval`, `away_from`, ...; `elements_for`
    ``dtype`` when left out); ``unique=True`` draws distinct elements."""
    return hnp.arrays(np.dtype(dtype), shapes() if shape is None else shape,
                      elements=elements_for(dtype) if elements is None else elements,
                      unique=unique)


def broadcasting_arrays(*elements, max_dims=3, max_side=3, dtype=np.float64):
    """A tuple of arrays, one per entry of ``elements`` (each a domain, or None
    for the default), whose shapes broadcast together
    (``hnp.mutually_broadcastable_shapes``): inputs for binary functions."""
    return hnp.mutually_broadcastable_shapes(
        num_shapes=len(elements), max_dims=max_dims, max_side=max_side).flatmap(
        lambda bs: st.tuples(*(arrays(s, e, dtype=dtype)
                               for s, e in zip(bs.input_shapes, elements))))


# -- matrices -------------------------------------------------------------------------

def batch_shapes():
    """Leading batch shapes for stacks of matrices: none, (2,), (1,), (2, 1)."""
    return st.sampled_from([(), (2,), (1,), (2, 1)])


def _orthogonal(raw):
    q, r = np.linalg.qr(raw)
    return q * np.where(np.diagonal(r, axis1=-2, axis2=-1) < 0, -1.0, 1.0)[..., None, :]


@st.composite
def well_conditioned(draw, n=None, m=None, batch=None, symmetric=False):
    """``n x m`` matrices (stacked over ``batch``) ``Q1 diag(s) Q2^T`` with distinct
    singular values in about [1, 3]: solves, inverses, eigen- and singular-value
    derivatives are all far from their singular cases. ``symmetric=True`` gives
    symmetric matrices, indefinite on some draws."""
    batch = draw(batch_shapes()) if batch is None else tuple(batch)
    n = draw(st.integers(1, 3)) if n is None else n
    m = n if m is None else m
    k = min(n, m)
    q1 = _orthogonal(draw(arrays(batch + (n, n))) + 3 * np.eye(n))
    q2 = q1 if symmetric else _orthogonal(draw(arrays(batch + (m, m))) + 3 * np.eye(m))
    # distinct singular values 1, 1.6, 2.2 (+ a drawn offset): eigh/svd
    # derivatives divide by their differences
    s = 1.0 + 0.6 * np.arange(k) + draw(st.floats(0, 0.3))
    if symmetric and draw(st.booleans()):
        s = s * np.where(np.arange(k) % 2, -1.0, 1.0)
    middle = np.zeros(batch + (n, m))
    idx = np.arange(k)
    middle[..., idx, idx] = s
    return q1[..., :, :n] @ middle @ np.swapaxes(q2, -1, -2)


@st.composite
def spd(draw, n=None, batch=None):
    """Symmetric positive definite ``n x n`` matrices (stacked over ``batch``),
    eigenvalues distinct and in about [1, 3]: inputs for cholesky, solve, sqrtm."""
    batch = draw(batch_shapes()) if batch is None else tuple(batch)
    n = draw(st.integers(1, 3)) if n is None else n
    q = _orthogonal(draw(arrays(batch + (n, n))) + 3 * np.eye(n))
    s = 1.0 + 0.6 * np.arange(n) + draw(st.floats(0, 0.3))
    a = (q * s[..., None, :]) @ np.swapaxes(q, -1, -2)
    return (a + np.swapaxes(a, -1, -2)) / 2          # exactly symmetric


# -- pytrees and batches ----------------------------------------------------------------

def pytrees(of=None, max_leaves=4):
    """Nested lists, tuples and dicts (string keys) whose leaves are drawn from
    ``of`` (`arrays()` by default): arguments of functions that take pytrees."""
    leaf = arrays() if of is None else of
    return st.recursive(
        leaf, lambda children: st.one_of(
            st.lists(children, min_size=1, max_size=3),
            st.lists(children, min_size=1, max_size=3).map(tuple),
            st.dictionaries(st.sampled_from("abcd"), children, min_size=1, max_size=3)),
        max_leaves=max_leaves)


def batched(shape=None, elements=None, *, size=None, axis=0, dtype=np.float64):
    """Arrays for `fgrad.vmap`: one example's ``shape`` with a batch axis of
    ``size`` (drawn from 1 to 3 when left out) inserted at ``axis``. Returns
    ``(array, size)``."""
    def with_batch(drawn):
        example_shape, n = drawn
        where = axis % (len(example_shape) + 1)
        full = example_shape[:where] + (n,) + example_shape[where:]
        return arrays(full, elements, dtype=dtype).map(lambda a: (a, n))
    shape_strategy = shapes() if shape is None else (
        shape if isinstance(shape, st.SearchStrategy) else st.just(tuple(shape)))
    size_strategy = st.integers(1, 3) if size is None else (
        size if isinstance(size, st.SearchStrategy) else st.just(size))
    return st.tuples(shape_strategy, size_strategy).flatmap(with_batch)


@st.composite
def in_axes_for(draw, args, max_size=3):
    """A batch size and one ``in_axes`` entry per argument of ``args`` (None, or
    any axis position, negative ones too), at least one argument mapped: to
    stack per-example ``args`` into a batch for `fgrad.vmap`. Returns
    ``(size, axes)``."""
    n = draw(st.integers(1, max_size))
    axes = [draw(st.one_of(st.none(), st.integers(-np.ndim(a) - 1, np.ndim(a))))
            for a in args]
    if all(ax is None for ax in axes):
        i = draw(st.integers(0, len(args) - 1))
        axes[i] = draw(st.integers(0, np.ndim(args[i])))
    return n, tuple(axes)
