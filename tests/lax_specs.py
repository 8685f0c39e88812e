"""Specs for `fgrad.lax`'s array operations (composites of primitives), keyed
``lax.<name>``, so the systematic tests (derivatives to second order, float32,
vmap, jit, the compiled sweep) reach them.

Imported at the end of `primitive_specs`, into whose `SPECS` it registers.
Dynamic start indices come in as float arguments at half-integers, turned into
integers inside the function: traced under jit, one per example under vmap
(which scales each example's arguments), and never moved across an integer by
a finite-difference step.
"""
import numpy as np
from hypothesis import strategies as st
from primitive_specs import SPECS, Case, arrays, shapes, spaced

import fgrad.numpy as fnp
from fgrad import lax

_STARTS = st.integers(-6, 6).map(lambda i: i + 0.5)


def _np_start(index, dim, size):
    # JAX's clamping: a negative start counts from the end, then into [0, dim - size]
    index = int(index)
    index = index + dim if index < 0 else index
    return min(max(index, 0), dim - size)


def _np_window(shape, starts, sizes):
    return tuple(slice(b, b + k) for b, k in
                 ((_np_start(i, d, k), k) for i, d, k in zip(starts, shape, sizes)))


def _sizes(shape):
    return st.tuples(*(st.integers(0, d) for d in shape))


def _as_int(s):
    return fnp.astype(s, np.int64)


@st.composite
def _dynamic_slice(draw):
    shape = draw(shapes(min_dims=1, max_dims=3))
    sizes = draw(_sizes(shape))
    x = draw(arrays(shape))
    s = np.array(draw(st.tuples(*[_STARTS] * len(shape))))
    return Case(lambda x, s: lax.dynamic_slice(x, _as_int(s), sizes), (x, s),
                lambda x, s: x[_np_window(shape, s, sizes)])


@st.composite
def _dynamic_update_slice(draw):
    shape = draw(shapes(min_dims=1, max_dims=3))
    sizes = draw(_sizes(shape))
    x, u = draw(arrays(shape)), draw(arrays(sizes))
    starts = draw(st.tuples(*[_STARTS] * len(shape)))

    def reference(x, u, *s):
        out = x.copy()
        out[_np_window(shape, s, sizes)] = u
        return out
    return Case(lambda x, u, *s: lax.dynamic_update_slice(x, u, [_as_int(i) for i in s]),
                (x, u) + tuple(np.float64(i) for i in starts), reference)


@st.composite
def _in_dim(draw):
    shape = draw(shapes(min_dims=1, max_dims=3))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    size = draw(st.integers(0, shape[axis]))
    x, i = draw(arrays(shape)), np.float64(draw(_STARTS))

    def reference(x, i):
        sizes = list(shape)
        sizes[axis] = size
        starts = [0] * len(shape)
        starts[axis] = i
        return x[_np_window(shape, starts, sizes)]
    return Case(lambda x, i: lax.dynamic_slice_in_dim(x, _as_int(i), size, axis), (x, i),
                reference)


@st.composite
def _index_in_dim(draw):
    shape = draw(shapes(min_dims=1, max_dims=3))
    axis, keepdims = draw(st.integers(0, len(shape) - 1)), draw(st.booleans())
    x, i = draw(arrays(shape)), np.float64(draw(_STARTS))

    def reference(x, i):
        out = np.take(x, [_np_start(i, shape[axis], 1)], axis)
        return out if keepdims else np.squeeze(out, axis)
    return Case(lambda x, i: lax.dynamic_index_in_dim(x, _as_int(i), axis, keepdims),
                (x, i), reference)


@st.composite
def _update_index_in_dim(draw):
    shape = draw(shapes(min_dims=1, max_dims=3))
    axis, drop = draw(st.integers(0, len(shape) - 1)), draw(st.booleans())
    u_shape = shape[:axis] + (() if drop else (1,)) + shape[axis + 1:]
    x, u, i = draw(arrays(shape)), draw(arrays(u_shape)), np.float64(draw(_STARTS))

    def reference(x, u, i):
        out = x.copy()
        index = [slice(None)] * len(shape)
        index[axis] = _np_start(i, shape[axis], 1)
        out[tuple(index)] = u if drop else np.squeeze(u, axis)
        return out
    return Case(lambda x, u, i: lax.dynamic_update_index_in_dim(x, u, _as_int(i), axis),
                (x, u, i), reference)


SPECS["lax.dynamic_slice"] = _dynamic_slice()
SPECS["lax.dynamic_update_slice"] = _dynamic_update_slice()
SPECS["lax.dynamic_slice_in_dim"] = _in_dim()
SPECS["lax.dynamic_index_in_dim"] = _index_in_dim()
SPECS["lax.dynamic_update_index_in_dim"] = _update_index_in_dim()


# -- selection and sorting --------------------------------------------------------------

# the mask on x's backend (the device, under the stand-in), as a user's would be
SPECS["lax.select"] = shapes().flatmap(lambda s: st.tuples(arrays(s), arrays(s), arrays(s))) \
    .map(lambda d: Case(lambda x, y: lax.select(fnp.asarray(d[2] > 0, like=x), x, y * 2.0),
                        d[:2], lambda x, y: np.where(d[2] > 0, x, y * 2.0)))


def _np_clamp(lo, x, hi):
    return np.minimum(np.maximum(x, lo), hi)


# grids apart, so x never ties with a bound; min < max (where min > max, JAX's
# derivative, which fgrad keeps, is not the slope of the value)
SPECS["lax.clamp"] = shapes().flatmap(lambda s: st.tuples(
    arrays(s, spaced(-2.0, 0.0)), arrays(s, spaced(-1.95, 1.95)), arrays(s, spaced(0.02, 2.0)))) \
    .map(lambda d: Case(lax.clamp, (d[0], d[1], d[2]), _np_clamp))


@st.composite
def _top_k(draw):
    x = draw(shapes(min_dims=1).flatmap(lambda s: arrays(s, spaced(), unique=True)))
    k = draw(st.integers(0, x.shape[-1]))

    def reference(x):
        order = np.argsort(-x, axis=-1, kind="stable")[..., :k]
        return np.take_along_axis(x, order, -1) + order.astype(x.dtype)

    def fun(x):
        values, indices = lax.top_k(x, k)
        return values + fnp.astype(indices, x.dtype)
    return Case(fun, (x,), reference)


SPECS["lax.top_k"] = _top_k()


@st.composite
def _sort_by_keys(draw):
    # the first key has ties (rounded), so the second one decides between them
    shape = draw(shapes(min_dims=1, max_dims=2))
    dimension = draw(st.integers(-len(shape), len(shape) - 1))
    x, y = draw(arrays(shape, spaced(), unique=True)), draw(arrays(shape))

    def fun(mod, sort):
        def sorted_by_keys(x, y):
            return mod.stack(sort((mod.round(x), x, y), dimension, 2))
        return sorted_by_keys

    def np_sort(ops, dimension, num_keys):
        order = np.lexsort(ops[:num_keys][::-1], axis=dimension)
        return tuple(np.take_along_axis(a, order, dimension) for a in ops)
    return Case(fun(fnp, lambda ops, d, k: lax.sort(ops, dimension=d, num_keys=k)), (x, y),
                fun(np, np_sort))


SPECS["lax.sort"] = _sort_by_keys()


# -- cumulative reductions and scans ---------------------------------------------------------

def _cumulative(name, np_fn, elements=None):
    def reference(x, axis, reverse):
        if reverse:
            return np.flip(np_fn(np.flip(x, axis), axis=axis), axis)
        return np_fn(x, axis=axis)

    def build(d):
        shape, axis, reverse, x = d
        return Case(lambda x: getattr(lax, name)(x, axis, reverse), (x,),
                    lambda x: reference(x, axis, reverse))
    return shapes(min_dims=1).flatmap(lambda s: st.tuples(
        st.just(s), st.integers(-len(s), len(s) - 1), st.booleans(),
        arrays(s, elements, unique=elements is not None))).map(build)


def _np_logcumsumexp(x, axis):
    return np.logaddexp.accumulate(x, axis=axis)


SPECS["lax.cumsum"] = _cumulative("cumsum", np.cumsum)
SPECS["lax.cumprod"] = _cumulative("cumprod", np.cumprod)
SPECS["lax.cummax"] = _cumulative("cummax", np.maximum.accumulate, spaced())
SPECS["lax.cummin"] = _cumulative("cummin", np.minimum.accumulate, spaced())
SPECS["lax.cumlogsumexp"] = _cumulative("cumlogsumexp", _np_logcumsumexp)


@st.composite
def _associative_scan(draw):
    # composing affine maps v -> a v + b: associative, not commutative
    shape = draw(shapes(min_dims=1, max_dims=2))
    axis, reverse = draw(st.integers(0, len(shape) - 1)), draw(st.booleans())
    a, b = draw(arrays(shape)), draw(arrays(shape))

    def compose(mod):
        def fn(first, then):
            return first[0] * then[0], then[0] * first[1] + then[1]
        return fn

    def reference(a, b):
        a, b = (np.moveaxis(v, axis, 0) for v in (a, b))
        order = range(a.shape[0] - 1, -1, -1) if reverse else range(a.shape[0])
        outs, acc = {}, None
        for k in order:
            acc = (a[k], b[k]) if acc is None else compose(np)(acc, (a[k], b[k]))
            outs[k] = acc
        stacked = [np.stack([outs[k][j] for k in range(a.shape[0])]) for j in (0, 1)]
        return np.stack([np.moveaxis(v, 0, axis) for v in stacked])
    return Case(lambda a, b: fnp.stack(lax.associative_scan(compose(fnp), (a, b), reverse,
                                                            axis)), (a, b), reference)


SPECS["lax.associative_scan"] = _associative_scan()


@st.composite
def _map(draw):
    shape = draw(shapes(min_dims=1, max_dims=3))
    batch_size = draw(st.none() | st.integers(1, 4))
    x = draw(arrays(shape))

    def row(mod):
        return lambda r: mod.sin(r) * mod.sum(r)
    return Case(lambda x: lax.map(row(fnp), x, batch_size=batch_size), (x,),
                lambda x: np.stack([row(np)(r) for r in x]))


SPECS["lax.map"] = _map()
