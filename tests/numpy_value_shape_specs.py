"""Property specs for the functions whose result's shape depends on the values
(fgrad/numpy/_value_shapes.py): the ``unique`` family, the set operations and
the histograms.

They need concrete values, so they are not in `primitive_specs.SPECS` (whose
cases also run under `jit` and `vmap`): vmap is not meaningful for them (each
example would have its own result shape) and jit has no values.
`test_numpy_value_shapes.py` runs these cases under `grad`/`jvp` against
NumPy and finite differences (first and second order, forward and reverse),
and checks that `jit` and `vmap` refuse them with a message.

Finite differences move every input entry a little, so a case never relies on
two entries being equal by accident: repeated values are built inside the
function from one traced entry (``x[idx]`` beside ``x``: the copies move
together), and histogram data stays away from the bin edges and keeps a
single minimum and maximum.
"""
import numpy as np
from hypothesis import assume
from hypothesis import strategies as st
from primitive_specs import Case, arrays, spaced, values

import fgrad.numpy as fnp

VALUE_SHAPE_SPECS = {}   # fgrad.numpy name -> strategy of Case


def _with_repeats(mod, idx):
    """``x`` flattened, with the entries at ``idx`` repeated in front (so the
    first occurrence of a repeated value is the copy)."""
    def build(x):
        flat = mod.ravel(x)
        return mod.concatenate([flat[idx], flat])
    return build


@st.composite
def _repeated(draw):
    """Distinct values (a grid apart) and positions to repeat."""
    shape = draw(st.sampled_from([(1,), (4,), (2, 3)]))
    x = draw(arrays(shape, spaced(-2, 2), unique=True))
    idx = np.asarray(draw(st.lists(st.integers(0, x.size - 1), max_size=4)), np.int64)
    return x, idx


def _unique_case(name, **kw):
    @st.composite
    def case(draw):
        x, idx = draw(_repeated())

        def call(mod):
            return lambda x: getattr(mod, name)(_with_repeats(mod, idx)(x), **kw)
        return Case(call(fnp), (x,), call(np))
    return case()


VALUE_SHAPE_SPECS["unique"] = st.sampled_from([
    {}, {"return_index": True}, {"return_inverse": True, "return_counts": True},
    {"return_index": True, "return_inverse": True, "return_counts": True, "sorted": True}])\
    .flatmap(lambda kw: _unique_case("unique", **kw))
for _name in ("unique_values", "unique_counts", "unique_inverse", "unique_all"):
    VALUE_SHAPE_SPECS[_name] = _unique_case(_name)


@st.composite
def _unique_rows(draw):
    x = draw(arrays((draw(st.integers(1, 3)), 2), spaced(-2, 2), unique=True))
    rows = np.asarray(draw(st.lists(st.integers(0, len(x) - 1), max_size=2)), np.int64)
    counts = draw(st.booleans())

    def call(mod):
        return lambda x: mod.unique(mod.concatenate([x, x[rows]], 0), axis=0,
                                    return_counts=counts)
    return Case(call(fnp), (x,), call(np))


VALUE_SHAPE_SPECS["unique_axis"] = _unique_rows()


def _set_case(name, **kw):
    @st.composite
    def case(draw):
        # both arrays pick from one pool of distinct traced values: the shared
        # values move together
        pool = draw(arrays((5,), spaced(-2, 2), unique=True))
        i1 = np.asarray(draw(st.lists(st.integers(0, 4), min_size=1, max_size=5)), np.int64)
        i2 = np.asarray(draw(st.lists(st.integers(0, 4), min_size=1, max_size=5)), np.int64)
        if kw.get("assume_unique"):
            i1, i2 = np.unique(i1), np.unique(i2)

        def call(mod):
            return lambda p: getattr(mod, name)(p[i1], p[i2], **kw)
        return Case(call(fnp), (pool,), call(np))
    return case()


VALUE_SHAPE_SPECS["intersect1d"] = st.sampled_from([{}, {"return_indices": True},
                                                     {"assume_unique": True}]).flatmap(
    lambda kw: _set_case("intersect1d", **kw))
VALUE_SHAPE_SPECS["union1d"] = _set_case("union1d")
VALUE_SHAPE_SPECS["setdiff1d"] = st.sampled_from([{}, {"assume_unique": True}]).flatmap(
    lambda kw: _set_case("setdiff1d", **kw))
VALUE_SHAPE_SPECS["setxor1d"] = st.sampled_from([{}, {"assume_unique": True}]).flatmap(
    lambda kw: _set_case("setxor1d", **kw))


# -- histograms ---------------------------------------------------------------------------

def _clear_of_edges(column, edges, limits=None):
    """No value within reach of an interior edge (or a range bound), and one
    minimum and one maximum (min / max split ties, finite differences do not)."""
    column = np.ravel(column)
    marks = np.concatenate([edges[1:-1], [] if limits is None else limits])
    gap = np.min(np.abs(column[:, None] - marks[None, :])) if marks.size else np.inf
    return gap > 1e-3 and np.sum(column == column.min()) == 1 \
        and np.sum(column == column.max()) == 1


_BINS = st.sampled_from([1, 3, 5, "auto", "sturges", [-1.5, -0.2, 0.4, 1.7]])


@st.composite
def _histogram(draw, name):
    n = draw(st.integers(2, 7))
    a = draw(arrays((n,), spaced(-2, 2), unique=True))
    bins = draw(_BINS)
    limits = draw(st.sampled_from([None, (-1.0, 1.5)]))
    edges = np.histogram_bin_edges(a, bins, limits)
    assume(_clear_of_edges(a, edges, limits))
    # an estimator's bin count ("auto") must not change under small moves
    assume(all(len(np.histogram_bin_edges(a + d, bins, limits)) == len(edges)
               for d in (1e-4 * np.linspace(-1, 1, n), -1e-4 * np.linspace(-1, 1, n))))
    if name == "histogram_bin_edges":
        return Case(lambda a: fnp.histogram_bin_edges(a, bins, limits), (a,),
                    lambda a: np.histogram_bin_edges(a, bins, limits))
    density = draw(st.sampled_from([None, True]))
    # a density of no counts at all is 0 / 0
    assume(not density or np.histogram(a, bins, limits)[0].sum() > 0)
    args = (a,)
    if not isinstance(bins, str) and draw(st.booleans()):
        args += (draw(arrays((n,), values(0.5, 2.0))),)     # weights

    def call(mod):
        return lambda a, *w: mod.histogram(a, bins, limits, density, *w)
    return Case(call(fnp), args, call(np))


VALUE_SHAPE_SPECS["histogram"] = _histogram("histogram")
VALUE_SHAPE_SPECS["histogram_bin_edges"] = _histogram("histogram_bin_edges")


@st.composite
def _histogramdd(draw, name):
    n, dims = draw(st.integers(2, 6)), 2 if name == "histogram2d" else draw(st.integers(1, 3))
    sample = draw(arrays((n, dims), spaced(-2, 2), unique=True))
    bins = draw(st.sampled_from([2, 3, "per dimension"]))
    if bins == "per dimension":
        bins = [draw(st.sampled_from([1, 2, 4, [-1.5, 0.3, 1.7]])) for _ in range(dims)]
    edges = np.histogramdd(sample, bins)[1]
    assume(all(_clear_of_edges(sample[:, i], e) for i, e in enumerate(edges)))
    density = draw(st.sampled_from([None, True]))
    args = (sample,)
    if draw(st.booleans()):
        args += (draw(arrays((n,), values(0.5, 2.0))),)     # weights
    if name == "histogram2d":
        def call(mod):
            return lambda s, *w: mod.histogram2d(s[:, 0], s[:, 1], bins, None, density, *w)
    else:
        def call(mod):
            return lambda s, *w: mod.histogramdd(s, bins, None, density, *w)
    return Case(call(fnp), args, call(np))


VALUE_SHAPE_SPECS["histogramdd"] = _histogramdd("histogramdd")
VALUE_SHAPE_SPECS["histogram2d"] = _histogramdd("histogram2d")
