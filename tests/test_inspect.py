"""Seeing inside: gradient taps, NaN hunting, residual reports, graph export and
parallel execution of compiled graphs."""
import pathlib

import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.errors import TapError
from fgrad.core.graph import FORWARD_COLOUR, REVERSE_COLOUR


def _double(ct):
    return ct * 2.0


def _loss(x):
    return fnp.sum(fnp.sin(x) ** 2 + fnp.sin(x))


def _tapped_loss(x, fn=_double):
    y = fgrad.tap(fnp.sin(x), fn)
    # y fans out to three uses: the tap must see their sum
    return fnp.sum(y * y + y)


X = np.array([0.3, -1.2, 2.0])


# ---------------------------------------------------------------------------
# taps
# ---------------------------------------------------------------------------

def test_tap_sees_the_total_cotangent_and_its_replacement_is_used():
    seen = []

    def record(ct):
        seen.append(np.array(ct))
    plain = fgrad.grad(_tapped_loss)(X, record)
    assert len(seen) == 1
    np.testing.assert_allclose(seen[0], 2 * np.sin(X) + 1)     # d/dy (y*y + y)
    np.testing.assert_allclose(plain, fgrad.grad(_loss)(X))
    np.testing.assert_allclose(fgrad.grad(_tapped_loss)(X), 2 * fgrad.grad(_loss)(X))


@pytest.mark.parametrize("transform", ["jit(grad)", "grad(jit)", "jit(grad(jit))"])
def test_tap_doubles_the_gradient_under_jit(transform):
    g = {"jit(grad)": lambda: fgrad.jit(fgrad.grad(_tapped_loss)),
         "grad(jit)": lambda: fgrad.grad(fgrad.jit(_tapped_loss)),
         "jit(grad(jit))": lambda: fgrad.jit(fgrad.grad(fgrad.jit(_tapped_loss)))}[
        transform]()
    np.testing.assert_allclose(g(X), 2 * fgrad.grad(_loss)(X))
    np.testing.assert_allclose(g(X + 1.0), 2 * fgrad.grad(_loss)(X + 1.0))


def test_tap_runs_in_compiled_code_each_call_and_survives_cse():
    calls = []

    def count(ct):
        calls.append(1)

    def f(x):
        return fnp.sum(fgrad.tap(x, count) + fgrad.tap(x, count))
    g = fgrad.jit(fgrad.grad(f))
    g(X)
    g(X)
    assert len(calls) == 4
    assert g.lower(X).source.count("tap_cotangent") == 2


def test_tap_doubles_the_gradient_under_vmap_and_sees_the_batch():
    shapes = []

    def double(ct):
        shapes.append(ct.shape)
        return ct * 2.0
    xs = np.random.default_rng(0).normal(size=(4, 3))
    got = fgrad.vmap(fgrad.grad(lambda x: _tapped_loss(x, double)))(xs)
    np.testing.assert_allclose(got, 2 * fgrad.vmap(fgrad.grad(_loss))(xs))
    assert shapes == [(4, 3)]
    got = fgrad.grad(lambda xs: fnp.sum(fgrad.vmap(lambda x: _tapped_loss(x, double))(xs)))(xs)
    np.testing.assert_allclose(got, 2 * fgrad.vmap(fgrad.grad(_loss))(xs))


def test_tap_under_grad_of_grad():
    # the tap's cotangent is a constant here: only the inner sweep is doubled
    def cube(x):
        return fgrad.tap(x ** 3, _double)
    assert fgrad.grad(fgrad.grad(cube))(2.0) == pytest.approx(2 * 6 * 2.0)
    # here it depends on x, so fn receives a tracer, and the outer sweep passes
    # through the tap as well: 2 * 2 * d2/dx2 x**3
    seen = []

    def double(ct):
        seen.append(type(ct).__name__)
        return ct * 2.0

    def cube_of_tap(x):
        return fgrad.tap(x, double) ** 3
    assert fgrad.grad(fgrad.grad(cube_of_tap))(2.0) == pytest.approx(4 * 6 * 2.0)
    assert "ReverseTracer" in seen
    assert fgrad.jit(fgrad.grad(fgrad.grad(cube_of_tap)))(2.0) == pytest.approx(48.0)


def test_tap_forward_sees_primal_values_and_may_replace_them():
    seen = []
    f = fgrad.jit(lambda x: fnp.sum(fgrad.tap_forward(x * 2.0, seen.append)))
    f(X)
    f(X + 1)
    np.testing.assert_allclose(seen[1], 2 * (X + 1))
    assert len(seen) == 2
    clip = fgrad.grad(lambda x: fnp.sum(fgrad.tap_forward(x, lambda v: fnp.clip(v, -1, 1))
                                        ** 2))
    # the value is replaced, the derivative passes straight through
    np.testing.assert_allclose(clip(X), 2 * np.clip(X, -1, 1))
    shapes = []
    fgrad.vmap(lambda x: fgrad.tap_forward(x, lambda v: shapes.append(v.shape)))(
        np.ones((5, 2)))
    assert shapes == [(5, 2)]


def test_tap_replacement_of_the_wrong_shape_is_an_error():
    with pytest.raises(TapError, match=r"returned an array of shape \(\) for a value of "
                                       r"shape \(3,\).*or None"):
        fgrad.grad(lambda x: fnp.sum(fgrad.tap(x, lambda ct: fnp.sum(ct))))(X)


# ---------------------------------------------------------------------------
# debug_nans
# ---------------------------------------------------------------------------

from fgrad.errors import NonFiniteError  # noqa: E402


def _line(marker):
    """``file:line`` of the line of this file holding ``marker`` (in a comment)."""
    lines = pathlib.Path(__file__).read_text().splitlines()
    hits = [i + 1 for i, text in enumerate(lines) if f"# {marker}" in text]
    assert len(hits) == 1
    return f"{__file__}:{hits[0]}"


def _forward_nan(x):
    y = fnp.log(x - 1.0)                        # forward-nan
    return fnp.sum(y * 2.0)


def _reverse_nan(x):
    return fnp.sum(fnp.sqrt(x * 1.0))           # reverse-nan


def _where_trap(x):
    y = fnp.where(x > 0, fnp.sqrt(x), 0.0)     # where-trap
    return fnp.sum(y * 3.0)


def _safe_where(x):
    safe = fnp.where(x > 0, x, 1.0)
    return fnp.sum(fnp.where(x > 0, fnp.sqrt(safe), 0.0) * 3.0)


XN = np.array([1.0, 0.0, 4.0])
TRANSFORMS = {"grad": fgrad.grad, "jit(grad)": lambda f: fgrad.jit(fgrad.grad(f)),
              "grad(jit)": lambda f: fgrad.grad(fgrad.jit(f))}


@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_debug_nans_names_the_line_of_a_forward_nan(transform):
    with fgrad.debug_nans():
        with pytest.raises(NonFiniteError) as err:
            TRANSFORMS[transform](_forward_nan)(XN)
    message = str(err.value)
    assert "the forward pass of 'log' produced nan" in message
    assert _line("forward-nan") in message
    assert "input shapes: f64[3]" in message
    assert "where" not in message


@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_debug_nans_names_the_line_of_a_reverse_only_nan(transform):
    assert np.isfinite(_reverse_nan(XN))
    with fgrad.debug_nans():
        with pytest.raises(NonFiniteError, match=r"the reverse pass of 'sqrt' produced inf"
                           ) as err:
            TRANSFORMS[transform](_reverse_nan)(XN)
    assert _line("reverse-nan") in str(err.value)
    assert "where" not in str(err.value)


@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_debug_nans_explains_the_where_trap(transform):
    with fgrad.debug_nans():
        with pytest.raises(NonFiniteError) as err:
            TRANSFORMS[transform](_where_trap)(XN)
        message = str(err.value)
        assert "the reverse pass of 'sqrt' produced nan" in message
        assert _line("where-trap") in message
        assert "`where` trap" in message and "fnp.sqrt(safe_x)" in message
        # the fix in the message works
        np.testing.assert_allclose(TRANSFORMS[transform](_safe_where)(XN), [1.5, 0.0, 0.75])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_debug_nans_is_off_by_default_and_read_from_the_environment(monkeypatch):
    assert np.isnan(fgrad.grad(_where_trap)(XN)[1])
    monkeypatch.setenv("FGRAD_DEBUG_NANS", "1")
    with pytest.raises(NonFiniteError, match="where"):
        fgrad.grad(_where_trap)(XN)
    with fgrad.debug_nans(False):               # the context manager wins
        assert np.isnan(fgrad.grad(_where_trap)(XN)[1])
    monkeypatch.setenv("FGRAD_DEBUG_NANS", "0")
    assert np.isnan(fgrad.jit(fgrad.grad(_where_trap))(XN)[1])


def test_debug_nans_leaves_finite_programs_alone():
    x = np.array([0.5, 2.0])
    with fgrad.debug_nans():
        for transform in TRANSFORMS.values():
            np.testing.assert_allclose(transform(_safe_where)(x), fgrad.grad(_safe_where)(x))
        f = fgrad.jit(lambda x: fnp.tanh(x) * 2.0)
        np.testing.assert_allclose(f(x), np.tanh(x) * 2.0)
    np.testing.assert_allclose(f(x), np.tanh(x) * 2.0)


# ---------------------------------------------------------------------------
# residual reports
# ---------------------------------------------------------------------------

def _mlp(params, x):
    w1, w2 = params
    h = fnp.tanh(x @ w1)                                    # hidden-layer
    return fnp.sum(fnp.exp(h @ w2) * 0.5)                   # output-layer


def test_residual_total_matches_the_arrays_listed():
    rng = np.random.default_rng(1)
    params = (rng.normal(size=(40, 64)), rng.normal(size=(64, 8)))
    x = rng.normal(size=(100, 40))
    report = fgrad.residuals(_mlp)(params, x)
    counted = [e for e in report.entries if e.counted]
    assert report.total_bytes == sum(e.nbytes for e in counted) > 0
    assert all(e.nbytes == e.aval.size * e.aval.dtype.itemsize for e in report.entries)
    # x (an input) is read by the first matmul's rule but costs nothing extra
    assert any(e.primitive == "matmul" and not e.counted and e.aval.shape == (100, 40)
               for e in report.entries)
    # tanh keeps only its output, exp only its output, the sum's constant factor
    # keeps exp's output alive: what a hand-written backward pass would keep
    kinds = {(e.primitive, e.role, e.aval.shape) for e in counted}
    assert ("tanh", "ans", (100, 64)) in kinds and ("exp", "ans", (100, 8)) in kinds
    assert not any(e.primitive == "tanh" and e.role == "arg 0" for e in counted)
    by_line = report.by_line()
    assert sum(by_line.values()) == report.total_bytes
    lines = {f"{f}:{n}" for f, n in by_line}
    assert _line("hidden-layer") in lines and _line("output-layer") in lines
    text = str(report)
    assert f"{len(report.entries)} residual arrays" in text and "tanh" in text


# ---------------------------------------------------------------------------
# graph export
# ---------------------------------------------------------------------------

def test_to_dot_colours_forward_and_reverse_equations_and_labels_shapes():
    f = lambda x: fnp.sum(fnp.sin(x) * x)                            # noqa: E731
    forward_only = fgrad.make_graph(f)(np.ones(3)).to_dot()
    assert REVERSE_COLOUR not in forward_only
    assert forward_only.count(FORWARD_COLOUR) == 3
    g = fgrad.make_graph(fgrad.grad(f))(np.ones(3))
    dot = g.to_dot()
    boxes = [line for line in dot.splitlines() if "shape=box" in line]
    assert len(boxes) == len(g.eqns)
    reverse = [b for b in boxes if REVERSE_COLOUR in b]
    assert any(b.lstrip().startswith("eq") and "cos" in b for b in reverse)
    assert not any("sin" in b for b in reverse)     # sin is the forward pass
    assert '-> eq0 [label="f64[3]"]' in dot


def test_graph_summary_counts_equations_and_matmul_flops(capsys):
    a, b, c = np.ones((2, 3)), np.ones((3, 4)), np.ones((4, 5))
    summary = fgrad.graph_summary(
        lambda a, b, c: fnp.einsum("ij,jk,kl->il", a, b, c) + fnp.tanh(a @ b) @ c)(a, b, c)
    # the einsum is one equation per step of its path ((ij,jk)->ik, (ik,kl)->il)
    assert summary.counts == {"einsum": 2, "matmul": 2, "tanh": 1, "add": 1}
    assert summary.flops == 2 * (2 * 3 * 4 + 2 * 4 * 5) * 2
    printed = capsys.readouterr().out
    assert printed.startswith("6 equations, ~256 FLOPs") and "matmul  2" in printed


# ---------------------------------------------------------------------------
# parallel execution
# ---------------------------------------------------------------------------

from hypothesis import HealthCheck, assume, given  # noqa: E402

from fgrad.compiler import parallel as _parallel  # noqa: E402
from fgrad.compiler.tiers import COMPILE_ENV  # noqa: E402
from fgrad.errors import FgradError  # noqa: E402
from primitive_specs import SPECS  # noqa: E402
from sweeps import examples, sweep  # noqa: E402


def _bitwise_equal(a, b):
    a, b = fgrad.tree.tree_flatten(a)[0], fgrad.tree.tree_flatten(b)[0]
    return len(a) == len(b) and all(
        np.asarray(x).dtype == np.asarray(y).dtype
        and np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)
        for x, y in zip(a, b))


@pytest.fixture
def every_equation_on_the_pool(monkeypatch):
    monkeypatch.setattr(_parallel, "PARALLEL_MIN_SIZE", 0)


# (a gamma draw's rejection loop, each equation on the pool: seconds an example)
@pytest.mark.parametrize("name, count", sweep(SPECS, quick=1, slow_only={"random_gamma"}))
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_parallel_agrees_bit_for_bit_with_sequential(name, count, every_equation_on_the_pool,
                                                     monkeypatch):
    if count is not None:       # the quick run schedules NumPy calls; the full one kernels too
        monkeypatch.setenv(COMPILE_ENV, "never")
    @examples(count, full=2, deadline=None, suppress_health_check=list(HealthCheck))
    @given(SPECS[name])
    def check(case):
        def value_and_grad(*args):
            return fgrad.value_and_grad(lambda *a: fnp.sum(fnp.real(case.fun(*a))),
                                        argnums=tuple(range(len(args))))(*args)
        for fun in (case.fun, value_and_grad) if case.order else (case.fun,):
            try:
                expected = fgrad.jit(fun)(*case.args)
            except FgradError:               # not stageable (value-dependent code)
                assume(False)
            got = fgrad.jit(fun, parallel=True)(*case.args)
            assert _bitwise_equal(got, expected)
    check()


def test_parallel_scheduler_runs_independent_branches_and_keeps_effects_in_order(
        every_equation_on_the_pool, capsys):
    def f(a, b, c, d):
        fgrad.debug.print("first {}", fnp.sum(a))
        parts = [fnp.sum(fnp.tanh(x * 1.5 + 0.1) ** 2) for x in (a, b, c, d)]
        fgrad.debug.print("second {}", parts[3])
        return parts[0] + parts[1] + parts[2] + parts[3]
    xs = [np.linspace(-1, 1, 50) * k for k in range(1, 5)]
    g = fgrad.jit(fgrad.grad(f, argnums=(0, 1, 2, 3)), parallel=True)
    assert _bitwise_equal(g(*xs), fgrad.jit(fgrad.grad(f, argnums=(0, 1, 2, 3)))(*xs))
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == ["first", "second"] * 2
