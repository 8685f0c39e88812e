"""fgrad.testing for users: the strategies draw what they promise, the checks
catch what they promise, by name (issue 19)."""
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fgrad
import fgrad.numpy as fnp
from fgrad.testing import (
    CustomRuleMistake,
    GradientCheckError,
    check_custom_vjp,
    check_jit,
    check_vmap,
)
from fgrad.testing import strategies as fst
from fgrad.testing.properties import given_check_grads
from primitive_specs import SPECS

# -- strategies: inside their domains --------------------------------------------------


@given(fst.arrays(elements=fst.positive()), fst.arrays(elements=fst.unit_interval()),
       fst.arrays(elements=fst.away_from([-1.0, 1.0], gap=0.1)))
def test_domains(pos, unit, kinked):
    assert pos.dtype == np.float64 and np.all(pos >= 0.3)
    assert np.all((unit >= 0.05) & (unit <= 0.95))
    assert np.all(np.abs(np.abs(kinked) - 1.0) > 0.1)


@given(st.sampled_from([np.float16, np.float32, np.complex64, np.complex128, np.int32,
                        np.bool_]).flatmap(lambda d: fst.arrays(dtype=d)))
def test_arrays_of_every_dtype_are_finite(x):
    assert x.ndim <= 3
    if x.dtype.kind in "fc":
        assert np.all(np.isfinite(x))


@given(fst.spd(), fst.well_conditioned(n=3, m=2))
def test_matrices_are_spd_and_well_conditioned(a, b):
    np.testing.assert_array_equal(a, np.swapaxes(a, -1, -2))
    assert np.all(np.linalg.eigvalsh(a) > 0.9)
    assert b.shape[-2:] == (3, 2) and np.all(np.linalg.cond(b) < 5)


@given(st.data())
def test_shapes_broadcast(data):
    base = data.draw(fst.shapes())
    other = data.draw(fst.shapes(broadcastable_with=base))
    np.broadcast_shapes(base, other)
    x, y, z = data.draw(fst.broadcasting_arrays(None, fst.positive(), None))
    np.broadcast_shapes(x.shape, y.shape, z.shape)
    assert np.all(y > 0)


@given(fst.pytrees(of=fst.arrays((2,))), fst.batched((2, 3), axis=-1),
       fst.batched(size=4))
def test_pytrees_and_batches(tree, batch, four):
    assert all(leaf.shape == (2,) for leaf in fgrad.tree.tree_leaves(tree))
    array, n = batch
    assert array.shape == (2, 3, n) and 1 <= n <= 3
    assert four[0].shape[0] == 4 and four[1] == 4


@given(st.data())
def test_in_axes_map_at_least_one_argument(data):
    args = (np.ones((2, 3)), np.ones(()))
    n, axes = data.draw(fst.in_axes_for(args))
    assert any(ax is not None for ax in axes) and 1 <= n <= 3


def test_strategies_say_how_to_install_hypothesis_and_check_grads_needs_none():
    code = ("import sys; sys.modules['hypothesis'] = None\n"
            "import numpy as np, fgrad.numpy as fnp\n"
            "from fgrad.testing import check_grads\n"
            "check_grads(fnp.sin, (np.ones(2),))\n"
            "try:\n"
            "    import fgrad.testing.strategies\n"
            "except ImportError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "needs hypothesis" in out and "pip install 'fgrad[testing]'" in out


# -- given_check_grads ----------------------------------------------------------------


def test_given_check_grads_passes_correct_functions():
    given_check_grads(lambda x, y: fnp.sum(fnp.log(x) * y), fst.arrays((3,), fst.positive()),
                      fst.arrays((3,)), max_examples=5)
    given_check_grads(fnp.linalg.inv, fst.spd(), max_examples=5)
    given_check_grads(lambda a, b: fnp.sum(a * fnp.cos(b)),
                      args=fst.broadcasting_arrays(None, None), max_examples=5)


def test_given_check_grads_has_no_deadline_for_a_slow_first_call():
    """A first call that stages and compiles under jit is slow; hypothesis'
    deadline (here 10 ms) does not turn that into a failure."""
    calls = []

    def slow_at_first(x):
        if not calls:
            calls.append(1)
            time.sleep(0.1)
        return fnp.sum(fnp.sin(x))
    profile = settings.get_current_profile_name()
    settings.register_profile("ten-ms", settings.get_profile(profile), deadline=10)
    settings.load_profile("ten-ms")
    try:
        given_check_grads(slow_at_first, fst.arrays((2,)), max_examples=2)
    finally:
        settings.load_profile(profile)


@fgrad.custom_vjp
def _off_by_one_percent(x):
    return fnp.sin(x)


_off_by_one_percent.defvjp(lambda x: (fnp.sin(x), x),
                           lambda x, ct: (ct * fnp.cos(x) * 1.01,))


def test_given_check_grads_shrinks_and_prints_a_failing_input():
    with pytest.raises(GradientCheckError, match="finite-difference") as info:
        given_check_grads(_off_by_one_percent, fst.arrays(), order=1, modes=("rev",),
                          jit=False, vmap=False, max_examples=30)
    # shrunk to the simplest array that shows the bug: a 0-d zero
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "failed at the arguments (array(0.),)" in notes


def test_check_jit_and_check_vmap_catch_disagreements():
    calls = []

    def counts_calls(x):          # Python state: traced once by jit and by vmap
        calls.append(1)
        return x * float(len(calls))
    with pytest.raises(GradientCheckError, match=r"jit\(counts_calls\) vs counts_calls"):
        check_jit(counts_calls, (np.ones(2),))
    with pytest.raises(GradientCheckError, match=r"vmap\(counts_calls\) vs a loop"):
        check_vmap(counts_calls, [(np.ones(2),), (np.ones(2),)])
    check_jit(fnp.tanh, (np.array([0.1, 0.2]),))
    check_vmap(lambda x, y: fnp.sum(x * y), [(np.ones(2), np.ones(2)),
                                             (np.ones(2), np.zeros(2))])


# -- check_custom_vjp: the common mistakes, by name -----------------------------------


def _rule(bwd, fwd=None):
    @fgrad.custom_vjp
    def scale(x, y):
        return x * y
    scale.defvjp(fwd or (lambda x, y: (x * y, (x, y))), bwd)
    return scale


X, Y = np.array([1.0, 2.0]), np.linspace(0.5, 1.5, 6).reshape(3, 2)


def test_a_correct_rule_passes():
    check_custom_vjp(_rule(lambda r, ct: (fnp.sum(ct * r[1], axis=0), ct * r[0])), (X, Y))


@pytest.mark.parametrize("bwd, fwd, message", [
    (lambda r, ct: (ct * r[1], ct * r[0]), None,
     r"argument 0 has shape \(3, 2\), but the argument has shape \(2,\)\. .*forgot to "
     r"unbroadcast"),
    (lambda r, ct: (fnp.sum(ct * r[1], axis=0), (ct * r[0]).astype(np.float32)), None,
     r"argument 1 has dtype float32, but the argument has dtype float64"),
    (lambda r, ct: fnp.sum(ct * r[1], axis=0), None,
     r"bwd returned a ndarray, but scale takes 2 argument\(s\): return a tuple"),
    (lambda r, ct: (fnp.sum(ct ** 2 * r[1], axis=0), ct * r[0]), None,
     r"not linear in the output cotangent"),
    (lambda r, ct: (None, ct), lambda x, y: x * y,
     r"fwd returned ndarray, but it must return a pair \(output, residuals\)"),
    (lambda r, ct: (None, ct), lambda x, y: (x * y + 1, None),
     r"fwd's output differs"),
])
def test_each_mistake_is_named(bwd, fwd, message):
    with pytest.raises(CustomRuleMistake, match=message):
        check_custom_vjp(_rule(bwd, fwd), (X, Y))


def test_a_linear_but_wrong_rule_fails_against_finite_differences():
    with pytest.raises(GradientCheckError, match="finite-difference"):
        check_custom_vjp(_rule(lambda r, ct: (fnp.sum(ct * r[1], axis=0), 2 * ct * r[0])),
                         (X, Y))


def test_the_suites_spec_tables_refuse_a_name_registered_twice():
    with pytest.raises(KeyError, match="spec 'sum' is registered twice; give the second"):
        SPECS["sum"] = SPECS["sum"]
