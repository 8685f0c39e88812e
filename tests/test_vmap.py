"""vmap: every primitive's batching rule against a Python loop over examples,
compositions with grad/jvp/vmap, the Jacobians built on vmap, and its errors."""
import warnings

import numpy as np
import pytest
from hypothesis import given, strategies as st

import fgrad
import fgrad.numpy as fnp
from fgrad.core.trace import primitive_table
from fgrad.errors import BatchAxisError, BatchedConversionError, CustomRuleError, \
    LoopBatchingWarning
from fgrad.interpreters.batching import loop_rule
from fgrad.primitives.indexing import getitem
from fgrad.testing.strategies import in_axes_for
from primitive_specs import NONDIFF_SPECS, SPECS
from sweeps import examples, sweep

RNG = np.random.default_rng(0)


def _take(x, k, axis):
    """Example ``k`` of ``x`` along ``axis`` (works on tracers too)."""
    return x[(slice(None),) * axis + (k,)]


def _examples(args, axes, n):
    """Per-example argument lists, and the batched arguments stacking them."""
    examples = [[a if ax is None else a * (1 + 0.1 * k) for a, ax in zip(args, axes)]
                for k in range(n)]
    batched = tuple(a if ax is None else
                    np.stack([ex[i] for ex in examples], axis=ax % (np.ndim(a) + 1))
                    for i, (a, ax) in enumerate(zip(args, axes)))
    return examples, batched


# ---------------------------------------------------------------------------
# The dispatch table
# ---------------------------------------------------------------------------


def test_every_builtin_primitive_has_a_batch_rule_that_is_not_a_loop():
    loop_code = loop_rule.__code__
    missing = [name for name, p in primitive_table.items() if p.family and (
        p.batch is None or getattr(p.batch, "__code__", None) is loop_code)]
    assert not missing, f"primitives without a batching rule: {sorted(missing)}"


@pytest.mark.parametrize("name, count", sweep(SPECS))
def test_vmap_matches_a_loop_over_examples(name, count):
    """vmap over drawn axes equals stacking per-example results, and the
    gradient through the batched function equals the gradient through the loop."""
    @examples(count)
    @given(SPECS[name].flatmap(lambda case: st.tuples(st.just(case),
                                                      in_axes_for(case.args))))
    def check(drawn):
        case, (n, axes) = drawn
        examples, bargs = _examples(case.args, axes, n)
        expected = np.stack([np.asarray(case.fun(*ex)) for ex in examples])
        out = fgrad.vmap(case.fun, in_axes=axes)(*bargs)
        assert np.shape(out) == expected.shape
        assert np.asarray(out).dtype == expected.dtype
        np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)
        if not case.order or expected.dtype.kind != "f":
            return
        weights = RNG.standard_normal(expected.shape)
        argnums = tuple(range(len(bargs)))

        def via_vmap(*a):
            return fnp.sum(fgrad.vmap(case.fun, in_axes=axes)(*a) * weights)

        def via_loop(*a):
            norm = [None if ax is None else ax % np.ndim(b) for ax, b in zip(axes, bargs)]
            return sum(fnp.sum(case.fun(*[x if ax is None else _take(x, k, ax)
                                          for x, ax in zip(a, norm)]) * weights[k])
                       for k in range(n))
        got = fgrad.grad(via_vmap, argnums)(*bargs)
        want = fgrad.grad(via_loop, argnums)(*bargs)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-11)
    check()


@pytest.mark.parametrize("name", sorted(NONDIFF_SPECS))
def test_vmap_of_nondifferentiable_primitives(name):
    @given(NONDIFF_SPECS[name].flatmap(lambda case: st.tuples(st.just(case),
                                                              in_axes_for(case[2]))))
    def check(drawn):
        (f, _, args), (n, axes) = drawn
        examples, bargs = _examples(args, axes, n)
        expected = np.stack([np.asarray(f(*ex)) for ex in examples])
        out = fgrad.vmap(f, in_axes=axes)(*bargs)
        assert np.asarray(out).dtype == expected.dtype
        np.testing.assert_array_equal(out, expected)
    check()


# ---------------------------------------------------------------------------
# Batched indices and the layouts NumPy's advanced indexing produces
# ---------------------------------------------------------------------------

INDEXERS = [
    lambda x, i: x[i],
    lambda x, i: x[:, i],
    lambda x, i: x[1:, i, 0],
    lambda x, i: x[i, :, i],
    lambda x, i: x[..., i],
    lambda x, i: x[None, :, i],
    lambda x, i: x[0, :, i],
]


class _Ix:
    """``_Ix(x)[idx]`` indexes through fgrad even when ``x`` is a NumPy array and
    ``idx`` a tracer (``ndarray.__getitem__`` cannot hand a tracer index to fgrad)."""

    def __init__(self, x):
        self.x = x

    def __getitem__(self, idx):
        return getitem(self.x, idx)


def _gather(index):
    return lambda x, i: index(_Ix(x), i)


@pytest.mark.parametrize("k", range(len(INDEXERS)))
@pytest.mark.parametrize("x_axis", [None, 0, 2])
@pytest.mark.parametrize("i_axis", [None, 0, 1])
def test_gather_scatter_and_set_with_batched_indices(k, x_axis, i_axis):
    if x_axis is None and i_axis is None:
        return
    index = _gather(INDEXERS[k])
    n = 3
    xs = RNG.standard_normal((n, 3, 4, 3))
    idx = RNG.integers(0, 3, size=(n, 2, 2))
    bx = xs[0] if x_axis is None else np.moveaxis(xs, 0, x_axis)
    bi = idx[0] if i_axis is None else np.moveaxis(idx, 0, i_axis)
    ex = [(xs[0] if x_axis is None else xs[j], idx[0] if i_axis is None else idx[j])
          for j in range(n)]
    axes = (x_axis, i_axis)

    out = fgrad.vmap(index, in_axes=axes)(bx, bi)
    np.testing.assert_array_equal(out, np.stack([index(x, i) for x, i in ex]))

    def add(x, i):
        return fgrad.at(x)[INDEXERS[k](_Recorder(), i)].add(index(x, i) * 2.0)

    def put(x, i):
        return fgrad.at(x)[INDEXERS[k](_Recorder(), i)].set(index(x, i) + 1.0)
    for update in (add, put):
        got = fgrad.vmap(update, in_axes=axes)(bx, bi)
        np.testing.assert_allclose(got, np.stack([update(x, i) for x, i in ex]))

    # the scatter-add of gather's VJP, batched: per-example gradients
    w = RNG.standard_normal(np.shape(index(*ex[0])))
    g = fgrad.vmap(fgrad.grad(lambda x, i: fnp.sum(index(x, i) * w)), in_axes=axes)(bx, bi)
    want = np.stack([fgrad.grad(lambda x: fnp.sum(index(x, i) * w))(x) for x, i in ex])
    np.testing.assert_allclose(g, want)


class _Recorder:
    """Returns the index it is given: recovers an indexer's index expression."""

    def __getitem__(self, item):
        return item


def test_batched_value_in_set_broadcasts_per_example():
    x = np.zeros((4, 3))
    vs = np.arange(2.0)
    out = fgrad.vmap(lambda v: fgrad.at(x)[1:3, 0].set(v), in_axes=0)(vs)
    expected = np.stack([fgrad.at(x)[1:3, 0].set(v) for v in vs])
    np.testing.assert_array_equal(out, expected)


# ---------------------------------------------------------------------------
# Compositions, each against a Python loop over examples
# ---------------------------------------------------------------------------


def _loss(params, x, y):
    h = fnp.tanh(x @ params["w1"] + params["b1"])
    return fnp.sum((h @ params["w2"] - y) ** 2)


def _params():
    return {"w1": RNG.standard_normal((3, 4)), "b1": RNG.standard_normal(4),
            "w2": RNG.standard_normal((4, 2))}


def test_per_example_gradients():
    params, xs, ys = _params(), RNG.standard_normal((5, 3)), RNG.standard_normal((5, 2))
    got = fgrad.vmap(fgrad.grad(_loss), in_axes=(None, 0, 0))(params, xs, ys)
    for key in params:
        want = np.stack([fgrad.grad(_loss)(params, x, y)[key] for x, y in zip(xs, ys)])
        np.testing.assert_allclose(got[key], want, rtol=1e-12)


def test_grad_of_a_vmapped_loss():
    params, xs, ys = _params(), RNG.standard_normal((5, 3)), RNG.standard_normal((5, 2))
    got = fgrad.grad(lambda p: fgrad.vmap(_loss, (None, 0, 0))(p, xs, ys).sum())(params)
    want = fgrad.grad(lambda p: sum(_loss(p, x, y) for x, y in zip(xs, ys)))(params)
    for key in params:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-12)


def test_vmap_of_jvp():
    f = lambda x: fnp.sin(x) * fnp.sum(x ** 2)  # noqa: E731
    xs, vs = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 3))
    out, tan = fgrad.vmap(lambda x, v: fgrad.jvp(f, (x,), (v,)))(xs, vs)
    for k in range(4):
        o, t = fgrad.jvp(f, (xs[k],), (vs[k],))
        np.testing.assert_allclose(out[k], o)
        np.testing.assert_allclose(tan[k], t)


def test_nested_vmap_is_a_batch_of_batches():
    f = lambda a, b: fnp.dot(a, b) + fnp.max(a)  # noqa: E731
    a, b = RNG.standard_normal((2, 3, 4)), RNG.standard_normal(4)
    got = fgrad.vmap(fgrad.vmap(f, in_axes=(0, None)), in_axes=(0, None))(a, b)
    want = np.array([[f(a[i, j], b) for j in range(3)] for i in range(2)])
    np.testing.assert_allclose(got, want)
    # the outer map over the last axis of a, the inner over the first of a and b
    a, b = RNG.standard_normal((3, 4, 2)), RNG.standard_normal((3, 4))
    got = fgrad.vmap(fgrad.vmap(f, in_axes=(0, 0)), in_axes=(-1, None))(a, b)
    want = np.array([[f(a[j, :, i], b[j]) for j in range(3)] for i in range(2)])
    np.testing.assert_allclose(got, want)


def test_per_example_hessians_and_grad_of_grad_through_vmap():
    f = lambda x: fnp.sum(fnp.sin(x) * x ** 2)  # noqa: E731
    xs = RNG.standard_normal((3, 2))
    got = fgrad.vmap(fgrad.hessian(f))(xs)
    np.testing.assert_allclose(got, np.stack([fgrad.hessian(f)(x) for x in xs]))
    gg = fgrad.grad(lambda x: fgrad.vmap(fgrad.grad(f))(x).sum())(xs)
    want = np.stack([fgrad.grad(lambda x: fgrad.grad(f)(x).sum())(x) for x in xs])
    np.testing.assert_allclose(gg, want)


def _loop_jacobian(f, x):
    """Column by column, from jvp: the reference Jacobian."""
    cols = []
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = 1
        cols.append(np.asarray(fgrad.jvp(f, (x,), (e.reshape(x.shape),))[1]))
    return np.stack(cols, axis=-1).reshape(np.shape(cols[0]) + x.shape)


@pytest.mark.parametrize("jac", [fgrad.jacrev, fgrad.jacfwd])
def test_jacobians_match_a_loop_and_chunking_changes_nothing(jac):
    a = RNG.standard_normal((3, 4))
    f = lambda x: fnp.tanh(a @ x) * x[0]  # noqa: E731
    x = RNG.standard_normal((4, 2))
    want = _loop_jacobian(f, x)
    np.testing.assert_allclose(jac(f)(x), want, rtol=1e-12)
    for chunk in (1, 3, 5, 100):
        # equal up to rounding: BLAS may sum a row differently in a smaller batch
        np.testing.assert_allclose(jac(f, chunk_size=chunk)(x), jac(f)(x), rtol=1e-13,
                                   atol=1e-15)


def test_jacobian_pytree_structure():
    def f(p):
        return {"y": p["a"] * p["b"][0], "z": fnp.sum(p["a"])}
    p = {"a": np.array([1.0, 2.0]), "b": np.array([3.0, 4.0, 5.0])}
    for jac in (fgrad.jacrev, fgrad.jacfwd):
        j = jac(f)(p)
        assert j["y"]["a"].shape == (2, 2) and j["y"]["b"].shape == (2, 3)
        assert j["z"]["a"].shape == (2,) and j["z"]["b"].shape == (3,)
        np.testing.assert_allclose(j["y"]["a"], 3.0 * np.eye(2))
        np.testing.assert_allclose(j["y"]["b"], [[1, 0, 0], [2, 0, 0]])
        np.testing.assert_allclose(j["z"]["b"], 0.0)


def test_hessian_with_chunks_and_argnums():
    f = lambda x, y: fnp.sum(x ** 2 * y[0] + fnp.sin(x) * y[1])  # noqa: E731
    x, y = RNG.standard_normal(3), RNG.standard_normal(2)
    h = fgrad.hessian(f, argnums=0, chunk_size=2)(x, y)
    np.testing.assert_allclose(h, np.diag(2 * y[0] - np.sin(x) * y[1]), atol=1e-12)


# ---------------------------------------------------------------------------
# Axes, sizes, chunks
# ---------------------------------------------------------------------------


def test_in_axes_pytree_prefix_negative_axes_and_out_axes():
    def f(p, x):
        return {"sum": p["a"] * x, "b": p["b"]}
    p = {"a": RNG.standard_normal((4, 3)), "b": np.array(2.0)}
    x = RNG.standard_normal((3, 4))
    out = fgrad.vmap(f, in_axes=({"a": 0, "b": None}, -1),
                     out_axes={"sum": 1, "b": None})(p, x)
    np.testing.assert_allclose(out["sum"], np.stack([p["a"][k] * x[:, k]
                                                     for k in range(4)], axis=1))
    np.testing.assert_allclose(out["b"], 2.0)
    out = fgrad.vmap(f, in_axes=({"a": 0, "b": None}, -1), out_axes=-1)(p, x)
    assert out["sum"].shape == (3, 4) and out["b"].shape == (4,)


def test_keyword_arguments_are_mapped_over_axis_0():
    out = fgrad.vmap(lambda x, scale: x * scale)(np.ones((2, 3)), scale=np.arange(2.0))
    np.testing.assert_allclose(out, [[0, 0, 0], [1, 1, 1]])


def test_axis_size_for_functions_without_batched_inputs():
    out = fgrad.vmap(lambda x: x * 2.0, in_axes=None, axis_size=3)(np.arange(2.0))
    np.testing.assert_allclose(out, [[0, 2]] * 3)


def test_chunk_size_gives_identical_results():
    f = lambda w, x: fnp.tanh(x @ w).sum() + fnp.max(x)  # noqa: E731
    w, xs = RNG.standard_normal(4), RNG.standard_normal((7, 4))
    full = fgrad.vmap(fgrad.grad(f), in_axes=(None, 0))(w, xs)
    for chunk in (1, 2, 3, 7, 10):
        np.testing.assert_allclose(
            fgrad.vmap(fgrad.grad(f), in_axes=(None, 0), chunk_size=chunk)(w, xs), full,
            rtol=1e-13, atol=1e-15)
    out = fgrad.vmap(lambda x: (x * 2, fnp.sum(x)), out_axes=(1, 0), chunk_size=2)(xs)
    np.testing.assert_allclose(out[0], 2 * xs.T)
    np.testing.assert_allclose(out[1], xs.sum(1))


# ---------------------------------------------------------------------------
# Custom rules and user primitives
# ---------------------------------------------------------------------------


@fgrad.custom_vjp
def _clip_gradient(x):
    return x * 1.0


_clip_gradient.defvjp(lambda x: (x * 1.0, None),
                      lambda res, ct: (fnp.minimum(fnp.maximum(ct, -1.0), 1.0),))


@fgrad.custom_jvp
def _softplus(x):
    return fnp.log1p(fnp.exp(x))


@_softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    return _softplus(x), x_dot / (1 + fnp.exp(-x)) * 2.0   # doubled: visibly custom


def test_custom_rules_survive_vmap_in_every_nesting():
    xs = np.array([-1.0, 0.5, 2.0])
    np.testing.assert_allclose(fgrad.vmap(_clip_gradient)(xs), xs)
    g = fgrad.grad(lambda x: fgrad.vmap(lambda v: 10 * _clip_gradient(v))(x).sum())(xs)
    np.testing.assert_allclose(g, [1.0, 1.0, 1.0])
    g = fgrad.vmap(fgrad.grad(lambda v: 10 * _clip_gradient(v)))(xs)
    np.testing.assert_allclose(g, [1.0, 1.0, 1.0])

    np.testing.assert_allclose(fgrad.vmap(_softplus)(xs), np.log1p(np.exp(xs)))
    want = 2.0 / (1 + np.exp(-xs))
    g = fgrad.grad(lambda x: fgrad.vmap(_softplus)(x).sum())(xs)
    np.testing.assert_allclose(g, want)
    _, t = fgrad.jvp(fgrad.vmap(_softplus), (xs,), (np.ones(3),))
    np.testing.assert_allclose(t, want)
    np.testing.assert_allclose(fgrad.vmap(fgrad.grad(_softplus))(xs), want)


def test_custom_vjp_with_a_shared_argument_sums_its_cotangent():
    @fgrad.custom_vjp
    def scaled(w, x):
        return w * x

    scaled.defvjp(lambda w, x: (w * x, (w, x)),
                  lambda res, ct: (ct * res[1] * 3.0, ct * res[0]))
    w, xs = np.array(2.0), np.array([1.0, 2.0, 3.0])
    g = fgrad.grad(lambda w: fgrad.vmap(scaled, (None, 0))(w, xs).sum())(w)
    np.testing.assert_allclose(g, 3.0 * xs.sum())


def test_user_primitive_without_rule_loops_with_one_warning_and_defbatch():
    @fgrad.primitive
    def cumulative(x):
        return np.cumsum(x, axis=-1)

    xs = RNG.standard_normal((3, 4))
    with pytest.warns(LoopBatchingWarning, match="cumulative.*no batching rule"):
        out = fgrad.vmap(cumulative)(xs)
    np.testing.assert_allclose(out, np.cumsum(xs, axis=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # warned once, not again
        fgrad.vmap(cumulative, in_axes=1)(xs.T)

    calls = []

    def rule(args, dims):
        (x,), (d,) = args, dims
        calls.append(d)
        return cumulative.primitive.impl(np.moveaxis(x, d, 0)), 0
    fgrad.defbatch(cumulative, rule)
    np.testing.assert_allclose(fgrad.vmap(cumulative, in_axes=1)(xs.T),
                               np.cumsum(xs, axis=1))
    assert calls == [1]


def test_defbatch_checks_what_the_rule_returns():
    @fgrad.primitive
    def double(x):
        return 2 * x

    fgrad.defbatch(double, lambda args, dims: args[0] * 2)
    with pytest.raises(CustomRuleError, match="must return a pair"):
        fgrad.vmap(double)(np.ones(3))
    fgrad.defbatch(double, lambda args, dims: (args[0] * 2, 3))
    with pytest.raises(CustomRuleError, match="out_dim=3, which is not an axis"):
        fgrad.vmap(double)(np.ones(3))


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("convert", [bool, float, int, lambda x: 1 if x > 0 else 0])
def test_python_conversions_of_batched_values_point_to_where_and_cond(convert):
    with pytest.raises(BatchedConversionError,
                       match=r"fgrad\.numpy\.where.*fgrad\.lax\.cond"):
        fgrad.vmap(lambda x: convert(fnp.sum(x)))(np.ones((2, 3)))


def test_conversion_under_grad_inside_vmap_is_reported_too():
    def f(x):
        return x * 2 if x > 0 else x
    with pytest.raises(BatchedConversionError, match="fgrad.numpy.where"):
        fgrad.vmap(fgrad.grad(f))(np.ones(3))


def test_inconsistent_batch_sizes_name_the_arguments():
    with pytest.raises(BatchAxisError, match=r"inconsistent batch sizes: argument 0 has "
                       r"size 3 along axis 0; argument 1 has size 4 along axis 1"):
        fgrad.vmap(lambda a, b: a, in_axes=(0, 1))(np.ones(3), np.ones((2, 4)))


def test_in_axes_must_match_the_arguments():
    with pytest.raises(BatchAxisError, match="in_axes with 1 entries, but was called "
                       "with 2 positional arguments"):
        fgrad.vmap(lambda a, b: a, in_axes=(0,))(np.ones(3), np.ones(3))
    with pytest.raises(BatchAxisError, match="in_axes entry 0 .* does not match the "
                       "structure of argument 0"):
        fgrad.vmap(lambda p: p, in_axes=({"a": 0},))({"b": np.ones(3)})
    with pytest.raises(BatchAxisError, match="must be an int, None, or a tuple"):
        fgrad.vmap(lambda p: p, in_axes={"a": 0})({"a": np.ones(3)})
    with pytest.raises(BatchAxisError, match="is a float, not an array"):
        fgrad.vmap(lambda a: a)(1.0)


def test_axes_out_of_range():
    with pytest.raises(BatchAxisError, match=r"in_axes=2 is out of range for argument "
                       r"0, which has rank 2 \(shape \(3, 4\)\)"):
        fgrad.vmap(lambda a: a, in_axes=2)(np.ones((3, 4)))
    with pytest.raises(BatchAxisError, match="out_axes=3 is out of range for output "
                       "leaf 0"):
        fgrad.vmap(lambda a: a, out_axes=3)(np.ones((3, 4)))


def test_out_axes_none_on_a_batched_output_and_missing_axis_size():
    with pytest.raises(BatchAxisError, match="out_axes is None for output leaf 0, but "
                       "it differs between examples"):
        fgrad.vmap(lambda a: a * 2, out_axes=None)(np.ones(3))
    with pytest.raises(BatchAxisError, match="no mapped argument.*pass axis_size"):
        fgrad.vmap(lambda a: a, in_axes=None)(np.ones(3))
    with pytest.raises(BatchAxisError, match="axis_size=2, but argument 0 has size 3"):
        fgrad.vmap(lambda a: a, axis_size=2)(np.ones(3))
    with pytest.raises(BatchAxisError, match="chunk_size must be a positive int"):
        fgrad.vmap(lambda a: a, chunk_size=0)



@pytest.mark.parametrize("jitted", [False, True])
def test_a_batched_gather_along_one_axis_is_contiguous_and_numpys(jitted):
    # vmap of x[idx] gathers along axis 1 of the batched x: NumPy's x[:, idx]
    # would lay the result out with the indexed axes first (a transposed
    # view); the gather is take's, C-contiguous, with NumPy's values
    x = RNG.standard_normal((4, 7, 3))
    idx = np.array([[0, 6, -1], [2, 2, 5]])
    f = fgrad.vmap(lambda v: v[idx] * 1.0)
    f = fgrad.jit(f) if jitted else f
    out = f(x)
    np.testing.assert_array_equal(out, x[:, idx])
    assert out.flags.c_contiguous
    g = fgrad.grad(lambda x: fnp.sum(fgrad.vmap(lambda v: v[idx] ** 2)(x)))(x)
    want = np.zeros_like(x)
    np.add.at(want, (slice(None), idx), 2 * x[:, idx])
    np.testing.assert_allclose(g, want)
    with pytest.raises(IndexError, match="out of bounds"):
        fgrad.vmap(lambda v: v[np.array([7])] * 1.0)(x)
