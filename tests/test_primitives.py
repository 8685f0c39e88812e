"""The systematic property test: every primitive in the dispatch table, checked
by hypothesis over shapes, broadcasting and domains against finite differences
(VJP and JVP, to second order, and against each other), for float32 as well."""
import numpy as np
import pytest
from hypothesis import given

import fgrad
from fgrad.core.trace import primitive_table
from fgrad.testing import check_grads
from primitive_specs import NONDIFF_SPECS, SPECS
from sweeps import examples, sweep


def _builtin_primitives():
    return sorted(name for name, p in primitive_table.items() if p.family)


def test_every_primitive_has_a_test_spec():
    missing = [n for n in _builtin_primitives() if n not in SPECS and n not in NONDIFF_SPECS]
    assert not missing, (f"primitives without a test spec in tests/primitive_specs.py: "
                         f"{missing}")


def test_every_rule_column_is_filled_or_declared():
    """A primitive either has VJP and JVP rules or is declared without derivative."""
    gaps = [n for n in _builtin_primitives() if not primitive_table[n].nondiff
            and (primitive_table[n].vjp is None or primitive_table[n].jvp is None)]
    assert not gaps, f"primitives missing a vjp or jvp rule: {gaps}"
    nondiff = [n for n in _builtin_primitives() if primitive_table[n].nondiff]
    assert sorted(nondiff) == sorted(NONDIFF_SPECS), "nondiff primitives and specs differ"
    for name in _builtin_primitives():
        assert primitive_table[name].abstract is not None, f"{name} has no abstract rule"


def _read_only(args):
    out = []
    for a in args:
        a = np.array(a)
        a.flags.writeable = False        # any write into an input now raises
        out.append(a)
    return tuple(out)


@pytest.mark.parametrize("name, count", sweep(SPECS, quick=2))
def test_derivatives_match_finite_differences(name, count):
    @examples(count)
    @given(SPECS[name])
    def check(case):
        args = _read_only(case.args)
        out = case.fun(*args)
        if case.reference is not None:
            expected = case.reference(*args)
            np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
            assert np.shape(out) == np.shape(expected)
            assert np.asarray(out).dtype == np.asarray(expected).dtype
        if case.order:
            check_grads(case.fun, args, order=case.order, modes=("fwd", "rev"),
                        **case.tol)
    check()


@pytest.mark.parametrize("name, count", sweep(SPECS))
def test_float32_is_preserved_and_agrees_with_float64(name, count):
    @examples(count)
    @given(SPECS[name])
    def check(case):
        if not case.float32:
            return
        args32 = _read_only([np.asarray(a, np.float32) for a in case.args])
        out32 = case.fun(*args32)
        out64 = case.fun(*[np.asarray(a, np.float64) for a in args32])
        assert np.asarray(out32).dtype == np.float32, f"{name} promoted float32"
        np.testing.assert_allclose(out32, out64, rtol=2e-4, atol=2e-4)
        if case.order:
            u = np.ones(np.shape(out32), np.float32)
            _, vjp_fn = fgrad.vjp(case.fun, *args32)
            for ct, a in zip(vjp_fn(u), args32):
                assert np.asarray(ct).dtype == np.float32
                assert np.shape(ct) == a.shape
    check()


@pytest.mark.parametrize("name", sorted(NONDIFF_SPECS))
def test_nondifferentiable_primitives(name):
    @given(NONDIFF_SPECS[name])
    def check(case):
        f, ref, args = case
        args = _read_only(args)
        np.testing.assert_array_equal(f(*args), ref(*args))
        # zero derivative, not an error: the output is a constant to grad and jvp
        g = fgrad.grad(lambda *xs: fgrad.numpy.sum(f(*xs) * 1.0))(*args)
        np.testing.assert_array_equal(g, np.zeros_like(args[0]))
        _, t = fgrad.jvp(lambda *xs: f(*xs) * 1.0, args, tuple(np.ones_like(a) for a in args))
        np.testing.assert_array_equal(t, np.zeros(np.shape(t)))
    check()


@pytest.mark.parametrize("name, count", sweep(n for n in SPECS if n not in ("max_ties",)))
def test_each_argument_alone_matches_the_joint_vjp(name, count):
    """Differentiating one argument at a time keeps fewer residuals (each rule
    declares what it reads); the result must equal the joint cotangent."""
    @examples(count)
    @given(SPECS[name])
    def check(case):
        if len(case.args) < 2 or not case.order:
            return
        args = _read_only(case.args)
        out, vjp_fn = fgrad.vjp(case.fun, *args)
        u = np.ones(np.shape(out))
        joint = vjp_fn(u)
        for i in range(len(args)):
            def only_i(a, i=i):
                return case.fun(*args[:i], a, *args[i + 1:])
            (alone,) = fgrad.vjp(only_i, args[i])[1](u)
            np.testing.assert_allclose(alone, joint[i], rtol=1e-12, atol=1e-12)
    check()
