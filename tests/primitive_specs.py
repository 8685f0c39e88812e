"""How to test each primitive: one hypothesis strategy per primitive name.

A strategy draws a `Case`: a function written with fgrad.numpy, float64 inputs in
the primitive's domain (shapes 0-d to 3-d, broadcasting where the primitive
broadcasts), and a NumPy reference for the forward values. `test_primitives.py`
walks `fgrad.core.trace.primitive_table` and fails for any primitive without a spec
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
from fgrad.ode.status import raise_if_failed
from fgrad.transforms.jit import remat_barrier_p
# the building blocks are fgrad's public strategies (one copy, exercised here);
# the spec modules import them from here (`from primitive_specs import arrays`)
from fgrad.testing.strategies import (  # noqa: F401
    arrays,
    away_from,
    away_from_zero,
    broadcasting_arrays,
    shapes,
    spaced,
    values,
)


@dataclass
class Case:
    fun: Callable                 # differentiated function of `args`
    args: tuple                   # float64 inputs
    reference: Callable = None    # NumPy version of `fun` for forward values
    order: int = 2
    tol: dict = field(default_factory=dict)
    float32: bool = True          # False where changing precision is the point


class _Specs(dict):
    """A spec table in which a name can be registered once: a second spec under
    the same name would silently replace the first, and its cases never run."""

    def __setitem__(self, name, strategy):
        if name in self:
            raise KeyError(f"spec {name!r} is registered twice; give the second a new name")
        super().__setitem__(name, strategy)


SPECS = _Specs()          # primitive name -> strategy of Case
NONDIFF_SPECS = _Specs()  # primitive name -> strategy of (fgrad function, numpy function, args)


def spec(*names):
    def register(make_strategy):
        for name in names:
            SPECS[name] = make_strategy(name)
        return make_strategy
    return register


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
    return broadcasting_arrays(dx, dy).map(lambda xy: Case(f, xy, ref))


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


@spec("scatter_min", "scatter_max")
def _scatter_extremum(name):
    # indices that may repeat a position; x's entries and the values all
    # distinct, so no position has a tie (a kink finite differences cannot see)
    which = "min" if name == "scatter_min" else "max"
    ufunc = np.minimum if which == "min" else np.maximum

    def build(d):
        shape, idx = d
        n = int(np.prod(shape))
        v_shape = np.zeros(shape)[idx].shape
        size = n + int(np.prod(v_shape))

        def split(flat):
            return flat[:n].reshape(shape), flat[n:].reshape(v_shape)

        def ref(x, v):
            out = x.copy()
            ufunc.at(out, idx, v)
            return out
        return arrays((size,), spaced(-5, 5), unique=True).map(split).map(
            lambda xv: Case(lambda x, v: getattr(fgrad.at(x)[idx], which)(v), xv, ref))
    return shapes(min_dims=1, max_dims=2).flatmap(
        lambda s: st.tuples(st.just(s), _index(s))).flatmap(build)


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


@spec("remat_barrier")
def _remat_barrier(name):
    # checkpoint's recomputation reads its inputs through it (and the
    # cotangents, for ordering only): the identity on the first n operands
    def f(x, y):
        (a,) = remat_barrier_p.bind(x, y, n=1)
        return fnp.sin(a) * y
    return shapes(max_dims=2).flatmap(lambda s: st.tuples(arrays(s), arrays(s))).map(
        lambda xy: Case(f, xy, lambda x, y: np.sin(x) * y))


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


def _checked_sign(x):
    # a solve's status check (fgrad.ode) that passes: finite x, status 0
    raise_if_failed(fnp.isnan(x).astype(np.int32), x, "the spec's solve")
    return fnp.sign(x)


NONDIFF_SPECS["ode_check"] = _nondiff(_checked_sign, np.sign)


# -- taps: identities that hand a value to a callback (here one that only looks) -------

def _observe(value):
    assert value.shape is not None


def _tap_spec(fgrad_fn):
    return shapes(max_dims=2).flatmap(arrays).map(
        lambda x: Case(lambda x: fgrad_fn(fnp.sin(x)) * x, (x,), lambda x: np.sin(x) * x))


SPECS["tap"] = _tap_spec(lambda y: fgrad.tap(y, _observe))
SPECS["tap_forward"] = _tap_spec(lambda y: fgrad.tap_forward(y, _observe))
SPECS["tap_cotangent"] = _tap_spec(
    lambda y: fgrad.debug.tap_cotangent_p.bind(y, fn=_observe))
# =====================================================================================
# fgrad.numpy beyond the engine's primitives (issue 3): more ufuncs, reductions and
# scans, shape and indexing composites. Composites get specs too (keyed by their
# fgrad.numpy name), so the coverage test can check every public function.
# =====================================================================================

UNARY.update({
    "arcsin": (fnp.arcsin, np.arcsin, values(-0.8, 0.8)),
    "arccos": (fnp.arccos, np.arccos, values(-0.8, 0.8)),
    "arcsinh": (fnp.arcsinh, np.arcsinh, values()),
    "arccosh": (fnp.arccosh, np.arccosh, values(1.2, 3.0)),
    "arctanh": (fnp.arctanh, np.arctanh, values(-0.8, 0.8)),
    "exp2": (fnp.exp2, np.exp2, values()),
    "log2": (fnp.log2, np.log2, values(0.3, 3.0)),
    "log10": (fnp.log10, np.log10, values(0.3, 3.0)),
    "cbrt": (fnp.cbrt, np.cbrt, away_from_zero(-2, 2, 0.3)),
    "reciprocal": (fnp.reciprocal, np.reciprocal, away_from_zero(-2, 2, 0.4)),
    "deg2rad": (fnp.deg2rad, np.deg2rad, values()),
    "rad2deg": (fnp.rad2deg, np.rad2deg, values()),
    "fabs": (fnp.fabs, np.fabs, away_from_zero(-2, 2)),
    "positive": (fnp.positive, np.positive, values()),
    "sinc": (fnp.sinc, np.sinc, values(-2.5, 2.5)),
    "nan_to_num": (fnp.nan_to_num, np.nan_to_num, values()),
})
for _name in ("arcsin", "arccos", "arcsinh", "arccosh", "arctanh", "exp2", "log2",
              "log10", "cbrt", "reciprocal", "deg2rad", "rad2deg", "fabs", "positive",
              "sinc", "nan_to_num"):
    SPECS[_name] = unary(_name)

BINARY.update({
    "logaddexp": (fnp.logaddexp, np.logaddexp, values(), values()),
    "logaddexp2": (fnp.logaddexp2, np.logaddexp2, values(), values()),
    # y off the real axis' cut, so arctan2 is smooth around every draw
    "arctan2": (fnp.arctan2, np.arctan2, away_from_zero(-2, 2, 0.3), values()),
    "hypot": (fnp.hypot, np.hypot, away_from_zero(-2, 2, 0.3),
              away_from_zero(-2, 2, 0.3)),
    # |x| < y keeps x / y off the integers where remainder jumps
    "remainder": (fnp.remainder, np.remainder, away_from_zero(-2, 2, 0.1),
                  values(2.5, 3.0)),
    "fmod": (fnp.fmod, np.fmod, away_from_zero(-2, 2, 0.1), values(2.5, 3.0)),
    "float_power": (fnp.float_power, np.float_power, values(0.4, 2.0), values(-1.5, 2.5)),
})
for _name in ("logaddexp", "logaddexp2", "arctan2", "hypot", "remainder", "fmod",
              "float_power"):
    SPECS[_name] = binary(_name).map(
        lambda c: Case(c.fun, c.args, c.reference, float32=c.fun is not fnp.float_power))


@spec("imag")
def _imag(name):
    # through a complex intermediate, so imag's rules see complex values
    return shapes().flatmap(arrays).map(lambda x: Case(
        lambda x: fnp.imag(x * (1.0 + 2.0j) + x * x * 1j), (x,),
        lambda x: np.imag(x * (1.0 + 2.0j) + x * x * 1j)))


@spec("angle")
def _angle(name):
    return hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3) \
        .flatmap(lambda bs: st.tuples(arrays(bs.input_shapes[0], values(0.3, 2.0)),
                                      arrays(bs.input_shapes[1], values()))) \
        .map(lambda xy: Case(lambda x, y: fnp.angle(x + y * 1j), xy,
                             lambda x, y: np.angle(x + y * 1j)))


@spec("clip")
def _clip(name):
    def build(d):
        x, lo, hi = d
        return Case(lambda x, lo, hi: fnp.clip(x, lo, hi), (x, lo, hi),
                    lambda x, lo, hi: np.clip(x, lo, hi))
    return hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=2, max_side=3) \
        .flatmap(lambda bs: st.tuples(arrays(bs.input_shapes[0], spaced(-2, 2)),
                                      arrays(bs.input_shapes[1], spaced(-1.45, -0.05)),
                                      arrays(bs.input_shapes[2], spaced(0.05, 1.45)))) \
        .map(build)


def _single_axis(ndim):
    return st.none() | st.integers(-ndim, ndim - 1) if ndim else st.none()


def axis_reduction(fgrad_fn, np_fn, elements=None, unique=False, min_side=1, **kw):
    """A reduction over None or one axis, with keepdims and extra keywords."""
    def build(d):
        shape, axis, keepdims, extra = d
        return arrays(shape, elements, unique=unique).map(lambda x: Case(
            lambda x: fgrad_fn(x, axis=axis, keepdims=keepdims, **extra), (x,),
            lambda x: np_fn(x, axis=axis, keepdims=keepdims, **extra)))
    return shapes(min_side=min_side).flatmap(lambda s: st.tuples(
        st.just(s), _single_axis(len(s)), st.booleans(),
        st.fixed_dictionaries({k: v for k, v in kw.items()}))).flatmap(build)


SPECS["var"] = reduction(fnp.var, np.var, None)
SPECS["std"] = axis_reduction(fnp.std, np.std, spaced(), unique=True, min_side=2,
                              ddof=st.sampled_from([0, 1])).filter(
    lambda c: c.args[0].ndim > 0)
SPECS["ptp"] = axis_reduction(fnp.ptp, np.ptp, spaced(), unique=True)
SPECS["logsumexp"] = reduction(fnp.logsumexp, lambda x, axis, keepdims: np.log(
    np.sum(np.exp(x), axis=axis, keepdims=keepdims)), None)
SPECS["median"] = axis_reduction(fnp.median, np.median, spaced(), unique=True)
SPECS["quantile"] = axis_reduction(
    fnp.quantile, np.quantile, spaced(), unique=True,
    q=st.sampled_from([0.0, 0.3, 0.5, 1.0]))
# array-valued q promotes float32 to float64, as NumPy does
SPECS["quantile_of_array"] = axis_reduction(
    fnp.quantile, np.quantile, spaced(), unique=True,
    q=st.sampled_from([(0.25, 0.9), np.array([[0.5], [0.1]])])).map(
    lambda c: Case(c.fun, c.args, c.reference, float32=False))
SPECS["percentile"] = axis_reduction(
    fnp.percentile, np.percentile, spaced(), unique=True,
    q=st.sampled_from([10.0, 50.0, 95.0]))


@spec("prod_with_zeros")
def _prod_zeros(name):
    # the product of the other elements, not prod / x: exact where x has zeros,
    # to second order (the Hessian of a product with two zeros is not zero)
    def build(d):
        shape, axis, keepdims = d
        # magnitudes near 1: with several zeros, finite differences of a long
        # product are only accurate when the other factors are not large
        return arrays(shape, st.sampled_from([0.0, 0.0, 0.5, -1.2, 0.9, 1.1])).map(
            lambda x: Case(lambda x: fnp.prod(x, axis=axis, keepdims=keepdims), (x,),
                           lambda x: np.prod(x, axis=axis, keepdims=keepdims)))
    return shapes(max_dims=2, max_side=3).flatmap(
        lambda s: st.tuples(st.just(s), _axes(len(s)), st.booleans())).flatmap(build)


@spec("average")
def _average(name):
    def build(d):
        shape, axis, one_d = d
        w_shape = (shape[axis],) if one_d and axis is not None else shape
        return st.tuples(arrays(shape), arrays(w_shape, values(0.5, 2.0))).map(
            lambda xw: Case(lambda x, w: fnp.average(x, axis=axis, weights=w), xw,
                            lambda x, w: np.average(x, axis=axis, weights=w)))
    return shapes(min_dims=1).flatmap(lambda s: st.tuples(
        st.just(s), _single_axis(len(s)), st.booleans())).flatmap(build)


def _scan_spec(fgrad_fn, np_fn, elements):
    def build(d):
        shape, axis = d
        return arrays(shape, elements).map(lambda x: Case(
            lambda x: fgrad_fn(x, axis=axis), (x,), lambda x: np_fn(x, axis=axis)))
    return shapes().flatmap(lambda s: st.tuples(st.just(s), _single_axis(len(s)))) \
        .flatmap(build)


SPECS["cumsum"] = _scan_spec(fnp.cumsum, np.cumsum, None)
SPECS["cumprod"] = _scan_spec(fnp.cumprod, np.cumprod, away_from_zero(-1.5, 1.5, 0.4))
# no zeros, one or several: the derivative is a product of the other entries,
# never ans / x (magnitudes near 1 keep finite differences of products accurate)
SPECS["cumprod_with_zeros"] = _scan_spec(fnp.cumprod, np.cumprod, st.sampled_from(
    [0.0, 0.0, 0.5, -1.2, 0.9, 1.1]))


# -- shape and indexing composites ---------------------------------------------------

def unary_shape(fgrad_fn, np_fn, min_dims=0, max_dims=3, **params):
    """A spec for ``fn(x, **params)`` drawn over shapes and the given parameters."""
    def build(d):
        shape, extra = d
        return arrays(shape).map(lambda x: Case(
            lambda x: fgrad_fn(x, **extra), (x,), lambda x: np_fn(x, **extra)))
    return shapes(min_dims=min_dims, max_dims=max_dims).flatmap(
        lambda s: st.tuples(st.just(s), st.fixed_dictionaries(
            {k: (v(len(s)) if callable(v) else v) for k, v in params.items()}))) \
        .flatmap(build)


def _joined(fn):
    """Functions returning several arrays, flattened and joined into one."""
    def joined(*args, **kw):
        mod = fnp if fn.__module__.startswith("fgrad") else np
        return mod.concatenate([mod.reshape(p, (-1,)) for p in fn(*args, **kw)])
    return joined


SPECS["ravel"] = unary_shape(fnp.ravel, np.ravel)
SPECS["swapaxes"] = unary_shape(fnp.swapaxes, np.swapaxes, min_dims=2,
                                axis1=lambda n: st.integers(-n, n - 1),
                                axis2=lambda n: st.integers(0, n - 1))
SPECS["moveaxis"] = unary_shape(fnp.moveaxis, np.moveaxis, min_dims=1,
                                source=lambda n: st.integers(-n, n - 1),
                                destination=lambda n: st.integers(0, n - 1))
SPECS["atleast_1d"] = unary_shape(fnp.atleast_1d, np.atleast_1d)
SPECS["atleast_2d"] = unary_shape(fnp.atleast_2d, np.atleast_2d)
SPECS["atleast_3d"] = unary_shape(fnp.atleast_3d, np.atleast_3d)
SPECS["flip"] = unary_shape(fnp.flip, np.flip, min_dims=1,
                            axis=lambda n: st.none() | st.integers(-n, n - 1))
SPECS["fliplr"] = unary_shape(fnp.fliplr, np.fliplr, min_dims=2)
SPECS["flipud"] = unary_shape(fnp.flipud, np.flipud, min_dims=1)
SPECS["roll"] = unary_shape(fnp.roll, np.roll, min_dims=1,
                            shift=lambda n: st.integers(-5, 5),
                            axis=lambda n: st.none() | st.integers(-n, n - 1))
SPECS["rot90"] = unary_shape(fnp.rot90, np.rot90, min_dims=2,
                             k=lambda n: st.integers(-1, 4))
SPECS["tile"] = unary_shape(fnp.tile, np.tile, max_dims=2,
                            reps=lambda n: st.sampled_from([2, (2, 1), (1, 2, 2)]))
SPECS["repeat"] = unary_shape(fnp.repeat, np.repeat, min_dims=1, max_dims=2,
                              repeats=lambda n: st.integers(1, 3),
                              axis=lambda n: st.none() | st.integers(0, n - 1))
SPECS["tril"] = unary_shape(fnp.tril, np.tril, min_dims=2,
                            k=lambda n: st.integers(-2, 2))
SPECS["triu"] = unary_shape(fnp.triu, np.triu, min_dims=2,
                            k=lambda n: st.integers(-2, 2))
SPECS["diagonal"] = unary_shape(fnp.diagonal, np.diagonal, min_dims=2,
                                offset=lambda n: st.integers(-2, 2),
                                axis1=lambda n: st.just(0), axis2=lambda n: st.just(-1))
SPECS["trace"] = unary_shape(fnp.trace, np.trace, min_dims=2,
                             offset=lambda n: st.integers(-1, 1))
SPECS["diag"] = unary_shape(fnp.diag, np.diag, min_dims=1, max_dims=2,
                            k=lambda n: st.integers(-2, 2))
SPECS["pad"] = unary_shape(
    fnp.pad, np.pad, min_dims=1, max_dims=2,
    pad_width=lambda n: st.sampled_from([1, (0, 2), ((1, 0),) * n]),
    mode=lambda n: st.sampled_from(["constant", "edge"]))
SPECS["split"] = unary_shape(_joined(fnp.split), _joined(np.split), min_dims=1,
                             indices_or_sections=lambda n: st.sampled_from([1, [1], [0, 2]]))
SPECS["array_split"] = unary_shape(_joined(fnp.array_split), _joined(np.array_split),
                                   min_dims=1,
                                   indices_or_sections=lambda n: st.integers(1, 3))
SPECS["hsplit"] = unary_shape(_joined(fnp.hsplit), _joined(np.hsplit), min_dims=1,
                              indices_or_sections=lambda n: st.just([1]))
SPECS["vsplit"] = unary_shape(_joined(fnp.vsplit), _joined(np.vsplit), min_dims=2,
                              indices_or_sections=lambda n: st.just([1]))
SPECS["dsplit"] = unary_shape(_joined(fnp.dsplit), _joined(np.dsplit), min_dims=3,
                              indices_or_sections=lambda n: st.just([1]))
SPECS["sort"] = unary_shape(fnp.sort, np.sort, min_dims=1,
                            axis=lambda n: st.none() | st.integers(-n, n - 1)).map(
    lambda c: Case(c.fun, (np.round(c.args[0], 1) + np.arange(c.args[0].size).reshape(
        c.args[0].shape) * 1e-3,), c.reference))


@spec("pad_reflect")
def _pad_reflect(name):
    return shapes(min_dims=1, max_dims=2, min_side=3).flatmap(arrays).map(
        lambda x: Case(lambda x: fnp.pad(x, ((1, 2),) + ((0, 1),) * (x.ndim - 1),
                                         mode="reflect"), (x,),
                       lambda x: np.pad(x, ((1, 2),) + ((0, 1),) * (x.ndim - 1),
                                        mode="reflect")))


def _several(fgrad_fn, np_fn, nargs=2, min_dims=0, max_dims=2):
    return shapes(min_dims=min_dims, max_dims=max_dims).flatmap(
        lambda s: st.tuples(*[arrays(s)] * nargs)).map(
        lambda xs: Case(lambda *xs: fgrad_fn(xs), xs, lambda *xs: np_fn(xs)))


SPECS["hstack"] = _several(fnp.hstack, np.hstack)
SPECS["vstack"] = _several(fnp.vstack, np.vstack)
SPECS["dstack"] = _several(fnp.dstack, np.dstack)
SPECS["column_stack"] = _several(fnp.column_stack, np.column_stack, min_dims=1)
SPECS["broadcast_arrays"] = hnp.mutually_broadcastable_shapes(
    num_shapes=2, max_dims=3, max_side=3).flatmap(lambda bs: st.tuples(
        *(arrays(s) for s in bs.input_shapes))).map(lambda xy: Case(
            lambda x, y: fnp.stack(fnp.broadcast_arrays(x, y)), xy,
            lambda x, y: np.stack(np.broadcast_arrays(x, y))))
SPECS["meshgrid"] = st.tuples(arrays((2,)), arrays((3,)), st.sampled_from(["xy", "ij"])) \
    .map(lambda d: Case(lambda x, y: fnp.stack(fnp.meshgrid(x, y, indexing=d[2])),
                        d[:2], lambda x, y: np.stack(np.meshgrid(x, y, indexing=d[2]))))
SPECS["append"] = _several(lambda xs: fnp.append(*xs), lambda xs: np.append(*xs))
SPECS["select"] = shapes(max_dims=2).flatmap(lambda s: st.tuples(
    arrays(s), arrays(s), arrays(s), arrays(s))).map(lambda d: Case(
        lambda a, b: fnp.select([d[2] > 0, d[3] > 0], [a, b * 2.0], 0.5), d[:2],
        lambda a, b: np.select([d[2] > 0, d[3] > 0], [a, b * 2.0], 0.5)))


@spec("take")
def _take(name):
    def build(d):
        x, axis, idx = d
        return Case(lambda x: fnp.take(x, idx, axis=axis), (x,),
                    lambda x: np.take(x, idx, axis=axis))
    return shapes(min_dims=1).flatmap(arrays).flatmap(lambda x: st.tuples(
        st.just(x), st.none() | st.integers(0, x.ndim - 1),
        st.lists(st.integers(0, 0), min_size=1, max_size=3).map(np.array)
        | st.just(0))).map(build)


@spec("take_along_axis")
def _take_along_axis(name):
    def build(d):
        x, axis, seed = d
        idx = np.random.default_rng(seed).integers(0, x.shape[axis], x.shape)
        return Case(lambda x: fnp.take_along_axis(x, idx, axis), (x,),
                    lambda x: np.take_along_axis(x, idx, axis))
    return shapes(min_dims=1).flatmap(arrays).flatmap(lambda x: st.tuples(
        st.just(x), st.integers(0, x.ndim - 1), st.integers(0, 100))).map(build)


@spec("array")
def _array_of_tracers(name):
    return shapes(max_dims=2).flatmap(lambda s: st.tuples(arrays(s), arrays(s))).map(
        lambda xy: Case(lambda x, y: fnp.array([x, y * 2.0, x * y]), xy,
                        lambda x, y: np.array([x, y * 2.0, x * y])))


@spec("asarray")
def _asarray_of_tracers(name):
    return st.tuples(values(), values()).map(lambda xy: (np.float64(xy[0]),
                                                         np.float64(xy[1]))).map(
        lambda xy: Case(lambda x, y: fnp.asarray([[x, 1.0], [y, x * y]]), xy,
                        lambda x, y: np.asarray([[x, 1.0], [y, x * y]]),
                        float32=False))     # NumPy makes a list with 1.0 float64


@spec("mask_getitem")
def _mask_getitem(name):
    # boolean masks on concrete values: the mask fixes the output's shape
    return shapes(min_dims=1).flatmap(lambda s: st.tuples(arrays(s), arrays(s))).map(
        lambda d: Case(lambda x: x[d[1] > 0] * 2.0, (d[0],),
                       lambda x: x[d[1] > 0] * 2.0))


def _at_spec(method, ref):
    def build(d):
        x, k, v = d
        def reference(x, v):
            out = x.copy()
            out[k] = ref(out[k], v)
            return out
        return Case(lambda x, v: getattr(fgrad.at(x)[k], method)(v), (x, v), reference)
    return shapes(min_dims=1).flatmap(lambda s: st.tuples(
        arrays(s, spaced()), st.integers(0, s[0] - 1), arrays(s[1:], spaced(-1.95, 1.95)))) \
        .map(build)


SPECS["at_min"] = _at_spec("min", np.minimum)
SPECS["at_max"] = _at_spec("max", np.maximum)
SPECS["at_multiply"] = _at_spec("multiply", np.multiply)
SPECS["at_add"] = _at_spec("add", np.add)


# -- numerically careful helpers, checked at their singular points ---------------------

@spec("sinc_at_zero")
def _sinc_at_zero(name):
    return st.just(Case(fnp.sinc, (np.array([0.0, 1e-4, -2e-3, 0.5]),), np.sinc))


# -- without derivative ------------------------------------------------------------------

for _name in ("floor", "ceil", "rint", "trunc", "signbit", "isnan", "isinf", "isfinite",
              "logical_not"):
    NONDIFF_SPECS[_name] = _nondiff(getattr(fnp, _name), getattr(np, _name))
for _name in ("logical_and", "logical_or", "logical_xor", "floor_divide"):
    NONDIFF_SPECS[_name] = _nondiff(getattr(fnp, _name), getattr(np, _name), 2)
NONDIFF_SPECS["round"] = _nondiff(lambda x: fnp.round(x, 1), lambda x: np.round(x, 1))
NONDIFF_SPECS["argmax"] = _nondiff(lambda x: fnp.argmax(x, keepdims=True),
                                   lambda x: np.argmax(x, keepdims=True))
NONDIFF_SPECS["argmin"] = _nondiff(lambda x: fnp.argmin(x, axis=-1) if x.ndim
                                   else fnp.argmin(x),
                                   lambda x: np.argmin(x, axis=-1) if x.ndim
                                   else np.argmin(x))
NONDIFF_SPECS["argsort"] = _nondiff(fnp.argsort, lambda x: np.argsort(x, axis=-1))
NONDIFF_SPECS["all"] = _nondiff(lambda x: fnp.all(x > 0, axis=0 if x.ndim else None),
                                lambda x: np.all(x > 0, axis=0 if x.ndim else None))
NONDIFF_SPECS["any"] = _nondiff(lambda x: fnp.any(x > 0, keepdims=True),
                                lambda x: np.any(x > 0, keepdims=True))
SPECS["expand_dims"] = unary_shape(fnp.expand_dims, np.expand_dims,
                                   axis=lambda n: st.integers(-n - 1, n))
SPECS["squeeze"] = shapes().flatmap(lambda s: arrays(s + (1,))).map(
    lambda x: Case(fnp.squeeze, (x,), np.squeeze))
SPECS["copy"] = unary_shape(lambda x: fnp.copy(x) * 1.0, lambda x: np.copy(x) * 1.0)
SPECS["astype"] = shapes().flatmap(arrays).map(lambda x: Case(
    lambda x: fnp.astype(x, np.float32) * 2.0, (x,),
    lambda x: x.astype(np.float32) * 2.0, float32=False,
    tol=dict(atol=1e-2, rtol=1e-2, eps=1e-3)))
SPECS["diff"] = unary_shape(fnp.diff, np.diff, min_dims=1,
                            n=lambda n: st.integers(1, 2),
                            axis=lambda n: st.integers(-n, n - 1))
SPECS["nansum"] = reduction(fnp.nansum, np.nansum, None)
SPECS["nanmean"] = axis_reduction(fnp.nanmean, np.nanmean)


# -- fgrad.nn: its primitives and composites, in their own module ------------------------------
import nn_specs  # noqa: E402,F401  (registers into SPECS)
import linalg_specs  # noqa: E402,F401  (einsum, products, linalg, fft: fills SPECS)
import numpy_gaps_specs  # noqa: E402,F401  (issue 3, second round: fills SPECS)
import numpy_surface_specs  # noqa: E402,F401  (issue 17, the NumPy surface: fills SPECS)


# -- a host callback, given its derivative with custom_jvp --------------------------------

@fgrad.custom_jvp
def _host_sin(x):
    return fgrad.pure_callback(np.sin, fgrad.ShapeDtypeStruct(x.shape, x.dtype), x)


@_host_sin.defjvp
def _host_sin_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    return _host_sin(x), fnp.cos(x) * x_dot


SPECS["pure_callback"] = shapes(max_dims=2).flatmap(arrays).map(
    lambda x: Case(lambda x: _host_sin(x) * x, (np.asarray(x),), lambda x: np.sin(x) * x))


# -- implicit solves: an identity on a solution whose rules solve again -------------------

def _dense(matvec, b):
    return fgrad.lax.dense_solve(matvec, b)


def _linear_solve_case(m, b):
    a = m + 3 * np.eye(m.shape[0])          # well away from singular

    def f(a, b):
        return fgrad.lax.custom_linear_solve(lambda x: a @ x, b, _dense,
                                             transpose_solve=_dense)
    return Case(f, (a, b), lambda a, b: np.linalg.solve(a, b), tol={"rtol": 1e-4})


SPECS["linear_solve"] = st.integers(1, 3).flatmap(
    lambda n: st.tuples(arrays((n, n), values(-1, 1)), arrays((n,)))).map(
    lambda ab: _linear_solve_case(*ab))


def _root_case(a):
    # x with x**3 + x = a: one real root for every a, and 3x**2 + 1 > 0
    def newton(f, x):
        for _ in range(30):
            x = x - f(x) / (3 * x ** 2 + 1)
        return x

    def f(a):
        return fgrad.lax.custom_root(lambda x: x ** 3 + x - a, fnp.zeros_like(a), newton,
                                     lambda g, y: y / g(fnp.ones_like(y)))
    return Case(f, (a,), None, tol={"rtol": 1e-4})


SPECS["implicit_root"] = shapes(max_dims=1).flatmap(arrays).map(_root_case)
import random_specs  # noqa: E402,F401  (primitives/random.py: fills both tables)


# -- fgrad.lax's array operations, in their own module --------------------------------------
import lax_specs  # noqa: E402,F401  (issue 34, fgrad.lax's array operations: fills SPECS)


# -- sparse matrices: their primitives, in their own module -------------------------------
import sparse_specs  # noqa: E402,F401  (fgrad.sparse's primitives: fills SPECS)
