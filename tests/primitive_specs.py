"""How to test each primitive: one hypothesis strategy per primitive name.

A strategy draws a `Case`: a function written with fgrad.numpy, float64 inputs in
the primitive's domain (shapes 0-d to 3-d, broadcasting where the primitive
broadcasts), and a NumPy reference for the forward values. `test_primitives.py`
walks `fgrad.core.primitive_table` and fails for any primitive without a spec
here, so nothing is added untested.

Adding a primitive: register a strategy with ``@spec("name")`` (or use one of the
helpers: `unary`, `binary`, `reduction`), and list non-differentiable primitives
in `NONDIFF_SPECS`.
"""
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fgrad
import fgrad.numpy as fnp


@dataclass
class Case:
    fun: Callable                 # differentiated function of `args`
    args: tuple                   # float64 inputs
    reference: Callable = None    # NumPy version of `fun` for forward values
    order: int = 2
    tol: dict = field(default_factory=dict)
    float32: bool = True          # False where changing precision is the point


SPECS = {}          # primitive name -> strategy of Case
NONDIFF_SPECS = {}  # primitive name -> strategy of (fgrad function, numpy function, args)


def spec(*names):
    def register(make_strategy):
        for name in names:
            SPECS[name] = make_strategy(name)
        return make_strategy
    return register


# -- building blocks -------------------------------------------------------------

def shapes(min_dims=0, max_dims=3, min_side=1, max_side=4):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=max_side)


def values(lo=-2.0, hi=2.0):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False, width=64)


def spaced(lo=-2.0, hi=2.0):
    """Values on a grid 0.1 apart (plus an offset): no ties, no exact kinks."""
    n = int(round((hi - lo) * 10))
    return st.integers(0, n).map(lambda i: lo + i / 10 + 0.013)


def arrays(shape, elements=None, unique=False):
    return hnp.arrays(np.float64, shape,
                      elements=values() if elements is None else elements, unique=unique)


def away_from_zero(lo, hi, gap=0.2):
    return values(lo, hi).filter(lambda v: abs(v) > gap)


# -- elementwise ------------------------------------------------------------------

UNARY = {  # name: (fgrad function, numpy function, domain)
    "negative": (fnp.negative, np.negative, values()),
    "square": (fnp.square, np.square, values()),
    "sqrt": (fnp.sqrt, np.sqrt, values(0.3, 3.0)),
    "exp": (fnp.exp, np.exp, values()),
    "log": (fnp.log, np.log, values(0.3, 3.0)),
    "log1p": (fnp.log1p, np.log1p, values(-0.6, 2.0)),
    "expm1": (fnp.expm1, np.expm1, values()),
    "sin": (fnp.sin, np.sin, values(-3, 3)),
    "cos": (fnp.cos, np.cos, values(-3, 3)),
    "tan": (fnp.tan, np.tan, values(-1.2, 1.2)),
    "tanh": (fnp.tanh, np.tanh, values()),
    "sinh": (fnp.sinh, np.sinh, values()),
    "cosh": (fnp.cosh, np.cosh, values()),
    "arctan": (fnp.arctan, np.arctan, values(-3, 3)),
    "absolute": (fnp.absolute, np.absolute, away_from_zero(-2, 2)),
    "real": (fnp.real, np.real, values()),
    "conjugate": (fnp.conj, np.conj, values()),
}


def unary(name):
    f, ref, domain = UNARY[name]
    return shapes().flatmap(lambda s: arrays(s, domain)).map(
        lambda x: Case(f, (x,), ref))


for _name in UNARY:
    SPECS[_name] = unary(_name)

BINARY = {  # name: (fgrad function, numpy function, domain of x, domain of y)
    "add": (fnp.add, np.add, values(), values()),
    "subtract": (fnp.subtract, np.subtract, values(), values()),
    "multiply": (fnp.multiply, np.multiply, values(), values()),
    "divide": (fnp.divide, np.divide, values(), away_from_zero(-2, 2, 0.4)),
    "power": (fnp.power, np.power, values(0.4, 2.0), values(-1.5, 2.5)),
    "maximum": (fnp.maximum, np.maximum, spaced(), spaced(-1.95, 1.95)),
    "minimum": (fnp.minimum, np.minimum, spaced(), spaced(-1.95, 1.95)),
}


def binary(name):
    f, ref, dx, dy = BINARY[name]
    return hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3) \
        .flatmap(lambda bs: st.tuples(arrays(bs.input_shapes[0], dx),
                                      arrays(bs.input_shapes[1], dy))) \
        .map(lambda xy: Case(f, xy, ref))


for _name in BINARY:
    SPECS[_name] = binary(_name)


@spec("where")
def _where(name):
    def case(data):
        bs, (c_seed, x, y) = data
        cond = c_seed > 0
        # asarray(like=x): the host mask goes where x is (the device, under
        # the stand-in and CuPy runs), as a user's constant mask must
        return Case(lambda x, y: fnp.where(fnp.asarray(cond, like=x), x, y), (x, y),
                    lambda x, y: np.where(cond, x, y))
    return hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3) \
        .flatmap(lambda bs: st.tuples(st.just(bs), st.tuples(
            *(arrays(s) for s in bs.input_shapes)))).map(case)


@spec("convert_element_type")
def _convert(name):
    # through complex128 and back: exact, so finite differences stay accurate
    return shapes().flatmap(lambda s: arrays(s)).map(lambda x: Case(
        lambda x: fnp.real(fnp.astype(x, np.complex128)) * x, (x,),
        lambda x: np.real(x.astype(np.complex128)) * x, float32=False))


# -- reductions ----------------------------------------------------------------------

def _axes(ndim):
    return st.one_of(st.none(), st.integers(-ndim, ndim - 1) if ndim else st.none(),
                     st.sets(st.integers(0, max(ndim - 1, 0)), max_size=ndim)
                     .map(tuple))


def reduction(fgrad_fn, np_fn, elements):
    def build(shape_axis_keep):
        shape, axis, keepdims = shape_axis_keep
        return arrays(shape, elements, unique=elements is not None).map(lambda x: Case(
            lambda x: fgrad_fn(x, axis=axis, keepdims=keepdims), (x,),
            lambda x: np_fn(x, axis=axis, keepdims=keepdims)))
    return shapes().flatmap(lambda s: st.tuples(st.just(s), _axes(len(s)),
                                                st.booleans())).flatmap(build)


SPECS["sum"] = reduction(fnp.sum, np.sum, None)
SPECS["max"] = reduction(fnp.max, np.max, spaced(-5, 5))
SPECS["min"] = reduction(fnp.min, np.min, spaced(-5, 5))
SPECS["prod"] = reduction(fnp.prod, np.prod, away_from_zero(-1.5, 1.5, 0.3)
                          .map(lambda v: v))


@spec("max_ties")
def _max_ties(name):
    # equal maxima share the cotangent evenly
    return st.just(Case(lambda x: fnp.max(x) * 1.0, (np.array([1.0, 3.0, 3.0]),),
                        np.max, order=0))


# -- shapes ----------------------------------------------------------------------------

@spec("reshape")
def _reshape(name):
    def build(x):
        target = (x.size,) if x.ndim != 1 else (1, x.size)
        return Case(lambda x: fnp.reshape(x, target), (x,),
                    lambda x: np.reshape(x, target))
    return shapes().flatmap(arrays).map(build)


@spec("transpose")
def _transpose(name):
    def build(data):
        x, perm = data
        return Case(lambda x: fnp.transpose(x, perm), (x,),
                    lambda x: np.transpose(x, perm))
    return shapes(min_dims=1).flatmap(arrays).flatmap(
        lambda x: st.tuples(st.just(x), st.permutations(range(x.ndim)).map(tuple))) \
        .map(build)


@spec("broadcast_to")
def _broadcast_to(name):
    def build(data):
        x, lead = data
        target = lead + x.shape
        return Case(lambda x: fnp.broadcast_to(x, target), (x,),
                    lambda x: np.broadcast_to(x, target))
    return shapes(max_dims=2).flatmap(arrays).flatmap(
        lambda x: st.tuples(st.just(x), st.lists(st.integers(1, 3), max_size=2)
                            .map(tuple))).map(build)


@spec("concatenate")
def _concatenate(name):
    def build(data):
        shape, axis, sizes = data
        parts = []
        for n in sizes:
            s = list(shape)
            s[axis] = n
            parts.append(tuple(s))
        return st.tuples(*(arrays(p) for p in parts)).map(lambda xs: Case(
            lambda *xs: fnp.concatenate(xs, axis=axis), xs,
            lambda *xs: np.concatenate(xs, axis=axis)))
    return shapes(min_dims=1).flatmap(lambda s: st.tuples(
        st.just(s), st.integers(0, len(s) - 1),
        st.lists(st.integers(1, 3), min_size=2, max_size=3))).flatmap(build)


@spec("stack")
def _stack(name):
    return shapes(max_dims=2).flatmap(lambda s: st.tuples(arrays(s), arrays(s),
                                                          st.integers(0, len(s)))) \
        .map(lambda d: Case(lambda x, y: fnp.stack([x, y], axis=d[2]), d[:2],
                            lambda x, y: np.stack([x, y], axis=d[2])))


# -- indexing ----------------------------------------------------------------------------

def _index(draw_shape):
    """An index into an array of `shape`: basic slices, ints and integer arrays."""
    shape = draw_shape

    @st.composite
    def index(draw):
        items = []
        for d in shape:
            kind = draw(st.sampled_from(["slice", "int", "array", "full"]))
            if kind == "slice":
                start = draw(st.integers(-d, d - 1))
                items.append(slice(start, None, draw(st.sampled_from([1, 2, -1]))))
            elif kind == "int":
                items.append(draw(st.integers(-d, d - 1)))
            elif kind == "array":
                # repeated indices must accumulate in the VJP (scatter-add)
                items.append(np.array(draw(st.lists(st.integers(0, d - 1), min_size=1,
                                                    max_size=4))))
            else:
                items.append(slice(None))
        if sum(isinstance(i, np.ndarray) for i in items) > 1:
            items = [slice(None) if isinstance(i, np.ndarray) and k else i
                     for k, i in enumerate(items)]
        return tuple(items)
    return index()


@spec("getitem")
def _getitem(name):
    return shapes(min_dims=1).flatmap(lambda s: st.tuples(arrays(s), _index(s))).map(
        lambda d: Case(lambda x: x[d[1]], (d[0],), lambda x: x[d[1]]))


@spec("scatter_add")
def _scatter_add(name):
    def build(d):
        x, idx, base = d
        return Case(lambda x, b: fgrad.at(b)[idx].add(x[idx] * 2.0), (x, base),
                    lambda x, b: _np_add_at(b, idx, x[idx] * 2.0))
    return shapes(min_dims=1).flatmap(lambda s: st.tuples(arrays(s), _index(s),
                                                          arrays(s))).map(build)


def _np_add_at(b, idx, v):
    out = b.copy()
    np.add.at(out, idx, v)
    return out


@spec("set")
def _set(name):
    def build(d):
        x, k = d
        def ref(x, v):
            out = x.copy()
            out[k] = v
            return out
        return Case(lambda x, v: fgrad.at(x)[k].set(v), (x, x[k] * 3.0 + 1.0), ref)
    return shapes(min_dims=1).flatmap(arrays).flatmap(
        lambda x: st.tuples(st.just(x), st.integers(0, x.shape[0] - 1))).map(build)


# -- products ----------------------------------------------------------------------------

@spec("matmul")
def _matmul(name):
    def build(d):
        (a_batch, b_batch), (n, k, m), (a_vec, b_vec) = d
        a_shape = (k,) if a_vec else a_batch + (n, k)
        b_shape = (k,) if b_vec else b_batch + (k, m)
        return st.tuples(arrays(a_shape), arrays(b_shape)).map(
            lambda ab: Case(fnp.matmul, ab, np.matmul))
    batches = hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=2) \
        .map(lambda bs: bs.input_shapes)
    return st.tuples(batches, st.tuples(*[st.integers(1, 3)] * 3),
                     st.tuples(st.booleans(), st.booleans())).flatmap(build)


@spec("dot")
def _dot(name):
    def build(d):
        a_shape, b_shape = d
        return st.tuples(arrays(a_shape), arrays(b_shape)).map(
            lambda ab: Case(fnp.dot, ab, np.dot))
    return st.sampled_from([((), (3,)), ((3,), (3,)), ((2, 3), (3,)), ((2, 3), (3, 2)),
                            ((2, 3), (2, 3, 4)), ((3,), (2, 3, 2))]).flatmap(build)


# -- composites built on the primitives above ----------------------------------------------

@spec("mean")
def _mean(name):
    return reduction(fnp.mean, np.mean, None)


# -- primitives without a derivative ---------------------------------------------------------

def _nondiff(fgrad_fn, np_fn, nargs=1):
    return hnp.mutually_broadcastable_shapes(num_shapes=nargs, max_dims=3, max_side=3) \
        .flatmap(lambda bs: st.tuples(*(arrays(s, spaced()) for s in bs.input_shapes))) \
        .map(lambda args: (fgrad_fn, np_fn, args))


for _name, (_f, _g) in {"equal": (fnp.equal, np.equal),
                        "not_equal": (fnp.not_equal, np.not_equal),
                        "less": (fnp.less, np.less),
                        "less_equal": (fnp.less_equal, np.less_equal),
                        "greater": (fnp.greater, np.greater),
                        "greater_equal": (fnp.greater_equal, np.greater_equal)}.items():
    NONDIFF_SPECS[_name] = _nondiff(_f, _g, 2)
NONDIFF_SPECS["sign"] = _nondiff(fnp.sign, np.sign)
NONDIFF_SPECS["full_like"] = _nondiff(lambda x: fnp.full_like(x, 2.5),
                                      lambda x: np.full_like(x, 2.5))
NONDIFF_SPECS["stop_gradient"] = _nondiff(fgrad.stop_gradient, lambda x: x)


# -- call primitives: a jitted or checkpointed function inside a transformation ------

@spec("jit_call")
def _jit_call(name):
    f = fgrad.jit(lambda x, y: fnp.sin(x) * y + fnp.tanh(y))
    return hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3) \
        .flatmap(lambda bs: st.tuples(arrays(bs.input_shapes[0]),
                                      arrays(bs.input_shapes[1]))) \
        .map(lambda xy: Case(f, xy, lambda x, y: np.sin(x) * y + np.tanh(y)))


@spec("checkpoint")
def _checkpoint(name):
    f = fgrad.checkpoint(lambda x: fnp.exp(fnp.sin(x)) * x)
    return shapes(max_dims=2).flatmap(arrays).map(
        lambda x: Case(f, (x,), lambda x: np.exp(np.sin(x)) * x))


# -- structured control flow: staged under jit, so the primitives are bound -----------

def _lax_cond(x, y):
    return fgrad.lax.cond(fnp.sum(x) > 0, lambda a, b: fnp.sin(a) * b,
                          lambda a, b: a * fnp.exp(b), x, y)


@spec("cond")
def _cond(name):
    f = fgrad.jit(_lax_cond)

    def ref(x, y):
        return np.sin(x) * y if np.sum(x) > 0 else x * np.exp(y)
    return shapes(max_dims=2).flatmap(lambda s: st.tuples(arrays(s), arrays(s))) \
        .filter(lambda xy: abs(np.sum(xy[0])) > 1e-3).map(lambda xy: Case(f, xy, ref))


def _lax_scan(w, xs):
    def step(h, x):
        h = fnp.tanh(h * w + x)
        return h, h * h
    h, ys = fgrad.lax.scan(step, w * 0.5, xs)
    return h + fnp.sum(ys, axis=0)


def _np_scan(w, xs):
    h, acc = w * 0.5, 0.0
    for x in xs:
        h = np.tanh(h * w + x)
        acc = acc + h * h
    return h + acc


@spec("scan")
def _scan(name):
    f = fgrad.jit(_lax_scan)
    return st.tuples(st.integers(1, 3), st.integers(1, 3)).flatmap(
        lambda nk: st.tuples(arrays((nk[1],)), arrays(nk))).map(
        lambda wx: Case(f, wx, _np_scan))


@spec("while_loop")
def _while(name):
    # reverse mode of a staged while_loop is an error by design: forward values
    # only here; its JVP is tested in test_lax.py
    def f(x):
        return fgrad.lax.while_loop(lambda v: fnp.sum(v * v) < 50.0,
                                    lambda v: v * 1.5 + 0.1, x)

    def ref(x):
        while np.sum(x * x) < 50.0:
            x = x * 1.5 + 0.1
        return x
    return shapes(min_dims=1, max_dims=1).flatmap(lambda s: arrays(s, values(0.5, 2.0))) \
        .map(lambda x: Case(fgrad.jit(f), (x,), ref, order=0))


def _printing_sign(x):
    fgrad.debug.print("x = {}", x)
    return fnp.sign(x)


NONDIFF_SPECS["debug_print"] = _nondiff(_printing_sign, np.sign)

import linalg_specs  # noqa: E402,F401  (einsum, products, linalg, fft: fills SPECS)
