"""fgrad's GradBench tool (benchmarks/gradbench): each eval's functions against
independent references on tiny inputs, the protocol, and the CLI's scoring.

No GradBench checkout is needed, except by the last test, which runs two small
evals end to end against GradBench's ``manual`` tool when the environment
variable GRADBENCH names a checkout where it is built (and is skipped otherwise).
"""

import doctest
import math
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp
from fgrad.testing import check_grads

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)   # benchmarks/ is not installed with fgrad

with warnings.catch_warnings():
    # benchmarks/__init__ pins threads and warns that NumPy loaded first: harmless here
    warnings.simplefilter("ignore", RuntimeWarning)
    from benchmarks.gradbench import scoring, tool  # noqa: E402
    from benchmarks.gradbench.evals import (  # noqa: E402
        ba, det, gmm, ht, kmeans, llsq, lse, lstm, ode, optimize, particle, saddle)

RNG = np.random.default_rng(0)


def runs(raw, **extra):
    """A raw eval input asking for one timed run."""
    return raw | {"min_runs": 1, "min_seconds": 0} | extra


# --- the protocol ------------------------------------------------------------------------

def test_protocol_start_define_evaluate_analysis():
    assert tool.respond({"id": 0, "kind": "start", "eval": "lse"}) == {"tool": "fgrad"}
    assert tool.respond({"id": 1, "kind": "define", "module": "lse"}) == {"success": True}
    answer = tool.respond({"id": 2, "kind": "evaluate", "module": "lse", "function": "primal",
                           "input": runs({"x": [0.0, 0.0]}, min_runs=3)})
    assert answer["success"] and math.isclose(answer["output"], math.log(2))
    assert [t["name"] for t in answer["timings"]] == ["evaluate"] * 3
    assert tool.respond({"id": 3, "kind": "analysis", "of": 2, "valid": True}) == {}


def test_protocol_unknown_eval_and_failing_function():
    answer = tool.respond({"id": 0, "kind": "define", "module": "nonesuch"})
    assert not answer["success"] and "fgrad has no 'nonesuch' eval" in answer["error"]
    answer = tool.respond({"id": 1, "kind": "evaluate", "module": "lse", "function": "primal",
                           "input": runs({})})
    assert not answer["success"] and "KeyError: 'x'" in answer["error"]


def test_tool_runs_over_stdin():
    lines = "\n".join([
        '{"id": 0, "kind": "start", "eval": "hello"}',
        '{"id": 1, "kind": "define", "module": "hello"}',
        '{"id": 2, "kind": "evaluate", "module": "hello", "function": "double", "input": 3.0}',
    ]) + "\n"
    done = subprocess.run([sys.executable, "-m", "benchmarks.gradbench.tool"], input=lines,
                          text=True, capture_output=True, cwd=REPO, check=True, timeout=120)
    answers = [eval(line.replace("true", "True")) for line in done.stdout.splitlines()]
    assert [a["id"] for a in answers] == [0, 1, 2]
    assert answers[2]["output"] == 6.0


def test_timed_repeats_for_min_runs_and_min_seconds():
    calls = []
    counted = tool.timed(prepare=lambda raw: raw["x"], output=float)(
        lambda x: calls.append(x) or x)
    assert len(counted.evaluate(runs({"x": 1.0}, min_runs=4))["timings"]) == 4
    calls.clear()
    counted.evaluate(runs({"x": 1.0}, min_seconds=0.02))
    assert len(calls) >= 1


# --- each eval against a reference ------------------------------------------------------

def test_lse_against_scipy():
    scipy = pytest.importorskip("scipy")       # the reference (an optional extra)
    x = RNG.normal(size=50) * 30
    assert math.isclose(lse.primal(x), scipy.special.logsumexp(x))
    np.testing.assert_allclose(lse.gradient(x), scipy.special.softmax(x), rtol=1e-12)


def test_llsq_against_finite_differences_and_numpy():
    x, n = RNG.normal(size=6), 9
    t = np.linspace(-1, 1, n)
    expected = 0.5 * np.sum((np.sign(t) - np.vander(t, 6, increasing=True) @ x) ** 2)
    assert math.isclose(llsq.primal.evaluate(runs({"x": x.tolist(), "n": n}))["output"],
                        expected)
    check_grads(lambda x: llsq.llsq(x, n), (x,), order=1, modes=("rev",))


def test_ode_against_a_numpy_runge_kutta_and_finite_differences():
    x, s = RNG.uniform(size=5), 4
    y, h = np.zeros(5), 2.0 / s
    f = lambda y: x * np.concatenate([[1.0], y[:-1]])  # noqa: E731
    for _ in range(s):
        k1 = f(y)
        k2 = f(y + h / 2 * k1)
        k3 = f(y + h / 2 * k2)
        k4 = f(y + h * k3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    np.testing.assert_allclose(ode.solve(x, s), y, rtol=1e-12)
    check_grads(lambda x: ode.last(x, s), (x,), order=1, modes=("rev",))


def test_kmeans_direction_is_centroid_minus_cluster_mean():
    points = RNG.uniform(size=(40, 3))
    centroids = points[-4:]
    nearest = np.argmin(((points[:, None] - centroids[None]) ** 2).sum(axis=2), axis=1)
    cost = ((points - centroids[nearest]) ** 2).sum()
    assert math.isclose(kmeans.cost.evaluate(runs({"points": points.tolist(),
                                                   "centroids": centroids.tolist()}))["output"],
                        cost, rel_tol=1e-12)
    means = np.stack([points[nearest == j].mean(axis=0) for j in range(4)])
    np.testing.assert_allclose(kmeans.newton_direction(points, centroids), centroids - means,
                               atol=1e-12)


@pytest.mark.parametrize("ell", [1, 2, 4, 5])
def test_det_against_numpy(ell):
    a = RNG.normal(size=(ell, ell))
    assert math.isclose(det.det_by_minors(a), np.linalg.det(a), rel_tol=1e-10)
    # d det(A) / dA = det(A) A^-T
    np.testing.assert_allclose(fgrad.grad(det.det_by_minors)(a),
                               np.linalg.det(a) * np.linalg.inv(a).T, rtol=1e-8, atol=1e-10)


def _gmm_by_definition(params, x, gamma, m):
    """The log posterior from SciPy's densities, without the eval's simplifications."""
    scipy = pytest.importorskip("scipy")       # the reference (an optional extra)
    k, d = params["mu"].shape
    phi = scipy.special.softmax(params["alpha"])
    index, mask = gmm.lower_layout(d)
    total = 0.0
    densities = np.zeros((len(x), k))
    for j in range(k):
        lower = params["l"][j][index] * mask if d > 1 else 0.0
        q_matrix = np.diag(np.exp(params["q"][j])) + lower
        precision = q_matrix.T @ q_matrix
        densities[:, j] = phi[j] * scipy.stats.multivariate_normal.pdf(
            x, params["mu"][j], np.linalg.inv(precision))
        total += scipy.stats.wishart.logpdf(precision, df=d + m + 1,
                                            scale=np.eye(d) / gamma ** 2)
    return total + np.sum(np.log(densities.sum(axis=1)))


@pytest.mark.parametrize("d", [1, 3])
def test_gmm_against_scipy_densities_and_finite_differences(d):
    k, n, gamma, m = 3, 7, 1.3, 2
    params = {"alpha": RNG.normal(size=k), "mu": RNG.uniform(size=(k, d)),
              "q": RNG.normal(size=(k, d)) * 0.3,
              "l": RNG.normal(size=(k, d * (d - 1) // 2)) * 0.3}
    x = RNG.normal(size=(n, d))
    assert math.isclose(gmm.log_posterior(params, x, gamma, m),
                        _gmm_by_definition(params, x, gamma, m), rel_tol=1e-9)
    check_grads(lambda p: gmm.log_posterior(p, x, gamma, m), (params,), order=1,
                modes=("rev",))


def test_lstm_against_a_python_loop_and_finite_differences():
    layers, b, c = 2, 3, 5
    main, extra = RNG.uniform(size=(2 * layers, 4 * b)), RNG.uniform(size=(3, b))
    state, sequence = RNG.uniform(size=(2 * layers, b)), RNG.integers(0, 2, (c, b)) * 1.0
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    hidden, cell, total = state[0::2].copy(), state[1::2].copy(), 0.0
    for t in range(c - 1):
        value = sequence[t] * extra[0]
        for i in range(layers):
            w, bias = main[2 * i].reshape(4, b), main[2 * i + 1].reshape(4, b)
            cell[i] = (cell[i] * sigmoid(value * w[0] + bias[0])
                       + sigmoid(hidden[i] * w[1] + bias[1]) * np.tanh(hidden[i] * w[3] + bias[3]))
            hidden[i] = sigmoid(value * w[2] + bias[2]) * np.tanh(cell[i])
            value = hidden[i]
        prediction = value * extra[1] + extra[2]
        total += np.sum(sequence[t + 1] * (prediction - np.log(np.exp(prediction).sum() + 2)))
    assert math.isclose(lstm.loss(main, extra, state, sequence), -total / ((c - 1) * b),
                        rel_tol=1e-12)
    check_grads(lambda p, e: lstm.loss(p, e, state, sequence), (main, extra), order=1,
                modes=("rev",))
    flat = lstm._jacobian(main, extra, state, sequence)
    assert flat.shape == (main.size + extra.size,)


def _hand(complicated):
    """A random hand of 22 bones (what the pose layout needs) and 12 vertices."""
    bones, vertices, points = 22, 12, 5
    model = {"n_bones": bones, "parents": (-1,) + tuple(range(bones - 1)), "is_mirrored": True,
             "base_relatives": np.eye(4) + RNG.normal(size=(bones, 4, 4)) * 0.1,
             "inverse_base_absolutes": np.eye(4) + RNG.normal(size=(bones, 4, 4)) * 0.1,
             "base_positions": np.concatenate([RNG.normal(size=(vertices, 3)),
                                               np.ones((vertices, 1))], axis=1),
             "weights": RNG.uniform(size=(vertices, bones)) / bones}
    correspondences = RNG.integers(0, vertices, points)
    triangles = RNG.integers(0, vertices, (vertices, 3))[correspondences] if complicated \
        else None
    data = {"points": RNG.normal(size=(points, 3)), "correspondences": correspondences,
            "triangles": triangles}
    us = RNG.uniform(size=(points, 2)) * 0.5 if complicated else np.zeros((0, 2))
    return RNG.normal(size=26) * 0.3, us, model, data


@pytest.mark.parametrize("complicated", [False, True])
def test_ht_jacobian_columns_against_finite_differences(complicated):
    theta, us, model, data = _hand(complicated)
    columns = ht.jacobian_columns(theta, us, model, data)
    residual = lambda t, u: np.asarray(ht.residuals(t, u, model, data)).ravel()  # noqa: E731
    h, expected = 1e-6, []
    for j in range(2 if complicated else 0):      # one us coordinate of every point at once
        step = np.zeros_like(us)
        step[:, j] = h
        expected.append((residual(theta, us + step) - residual(theta, us - step)) / (2 * h))
    for j in range(26):
        step = np.eye(26)[j] * h
        expected.append((residual(theta + step, us) - residual(theta - step, us)) / (2 * h))
    expected = np.stack(expected, axis=1)
    np.testing.assert_allclose(columns, expected, rtol=1e-5, atol=1e-8 * np.abs(expected).max())


@pytest.mark.parametrize("complicated", [False, True])
def test_ht_prepared_functions_pose_only_the_vertices_used_and_agree(complicated):
    theta, us, model, data = _hand(complicated)
    table = RNG.integers(0, 6, (12, 3))         # triangles on half of the 12 vertices
    correspondences = RNG.integers(0, 6, 5)
    data = dict(data, correspondences=correspondences,
                triangles=table[correspondences] if complicated else None)
    raw = {"theta": theta, "us": us.ravel(),
           "data": {"model": dict(model, triangles=table), "points": data["points"],
                    "correspondences": correspondences}}
    theta, us, run_objective, run_jacobian = ht._prepare(raw)
    np.testing.assert_allclose(run_objective(theta, us),
                               np.asarray(ht.residuals(theta, us, model, data)).ravel(),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(run_jacobian(theta, us),
                               ht.jacobian_columns(theta, us, model, data),
                               rtol=1e-12, atol=1e-12)


def test_ht_angle_axis_rotation_is_orthogonal_and_identity_near_zero():
    rotation = np.asarray(ht.angle_axis_rotation(np.array([0.3, -0.2, 0.5])))
    np.testing.assert_allclose(rotation @ rotation.T, np.eye(3), atol=1e-12)
    np.testing.assert_array_equal(ht.angle_axis_rotation(np.array([1e-6, 0.0, 0.0])), np.eye(3))


def test_ba_sparse_jacobian_equals_the_dense_one():
    scipy = pytest.importorskip("scipy")       # the reference (an optional extra)
    camera = [0.1, -0.05, 0.02,  0.0, 0.0, -3.0,  1.2,  0.01, -0.02,  0.01, 0.001]
    raw = {"n": 2, "m": 3, "p": 5, "cam": camera, "x": [0.1, 0.2, 5.0], "w": 0.8,
           "feat": [0.1, -0.2]}
    cams, points, weights, features, obs = ba._prepare(raw)
    # make the repeated copies differ, so that a mixed-up index shows
    cams = cams + RNG.normal(size=cams.shape) * 0.01
    points = points + RNG.normal(size=points.shape) * 0.1
    weights = weights + np.arange(5) * 0.1
    problem = (cams, points, weights, features, obs)

    def errors(flat):
        c, x, w = flat[:22].reshape(2, 11), flat[22:31].reshape(3, 3), flat[31:]
        reproj = ba.reprojection_error(list(c[obs[:, 0]].T), list(x[obs[:, 1]].T), w, features)
        return fnp.concatenate([reproj.T.ravel(), ba.weight_error(w)])

    flat = np.concatenate([cams.ravel(), points.ravel(), weights])
    dense = fgrad.jacfwd(errors)(flat)
    offsets, columns, values = ba.sparse_jacobian(problem)
    sparse = scipy.sparse.csr_matrix((values, columns, offsets), shape=dense.shape).toarray()
    np.testing.assert_allclose(sparse, dense, rtol=1e-10, atol=1e-12)
    reproj, w_err = ba.objective_of(problem)
    np.testing.assert_allclose(np.concatenate([np.ravel(reproj), w_err]), errors(flat))
    check_grads(errors, (flat,), order=1, modes=("fwd",))


def test_ba_rotation_of_zero_is_the_first_order_formula():
    point = [np.array([1.0]), np.array([2.0]), np.array([3.0])]
    rotated = ba.rotate([np.zeros(1)] * 3, point)
    np.testing.assert_array_equal(np.concatenate(rotated), [1.0, 2.0, 3.0])


@pytest.mark.parametrize("gradient", [optimize.forward_gradient, optimize.reverse_gradient])
def test_gradient_descent_finds_a_quadratics_minimum(gradient):
    target = np.array([1.0, -2.0])
    found = optimize.argmin(lambda x: fnp.sum((x - target) ** 2), gradient, np.zeros(2))
    np.testing.assert_allclose(found, target, atol=1e-3)
    found = optimize.argmax(lambda x: -fnp.sum((x - target) ** 2), gradient, np.zeros(2))
    np.testing.assert_allclose(found, target, atol=1e-3)


@pytest.mark.parametrize("gradient", [optimize.forward_gradient, optimize.reverse_gradient])
def test_staged_descent_takes_the_python_loops_steps(gradient):
    def bowl(x):
        return fnp.sum((x - np.array([1.0, -2.0])) ** 2 * np.array([1.0, 3.0]))
    staged = fgrad.jit(lambda x: optimize.argmin(bowl, gradient, x, control=fgrad.lax))
    np.testing.assert_allclose(staged(np.zeros(2)), optimize.argmin(bowl, gradient, np.zeros(2)),
                               rtol=1e-12)


def test_particle_staged_flight_and_its_forward_derivative_match_the_python_loop():
    w, tangent = np.array([0.1]), np.ones(1)

    def flight(control):
        return lambda w: particle.miss_distance(w, optimize.reverse_gradient, control)
    staged = fgrad.jit(lambda w, t: fgrad.jvp(flight(fgrad.lax), (w,), (t,)))(w, tangent)
    eager = fgrad.jvp(flight(optimize.EAGER), (w,), (tangent,))
    np.testing.assert_allclose(staged, eager, rtol=1e-12)


def test_particle_miss_distance_derivative_against_finite_differences():
    w = np.array([0.1])
    exact = fgrad.grad(lambda w: particle.miss_distance(w, optimize.reverse_gradient))(w)
    h = 1e-6
    numeric = (particle.miss_distance(w + h, optimize.forward_gradient)
               - particle.miss_distance(w - h, optimize.forward_gradient)) / (2 * h)
    np.testing.assert_allclose(exact, numeric, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["ff", "fr", "rf", "rr"])
def test_saddle_matches_the_evals_expected_point(variant):
    answer = getattr(saddle, variant).evaluate(runs({"start": [1.0, 1.0]}))["output"]
    np.testing.assert_allclose(answer, [8.246324826140356e-06] * 4, rtol=1e-4)


# --- scoring ----------------------------------------------------------------------------

def test_scoring_sums_workload_means_as_the_cli_and_fastest_runs_beside():
    run = scoring.ToolRun("fgrad")
    for description, function, runs_ns in [("a", "primal", [3, 1]), ("a", "gradient", [5]),
                                           ("b", "primal", [2, 2, 8]), ("b", "gradient", [4])]:
        run.timings[(description, function)] = scoring.timed_from(
            [{"name": "evaluate", "nanoseconds": ns * 10**9} for ns in runs_ns]
            + [{"name": "prepare", "nanoseconds": 10**12}])
    assert scoring.total("lse", run, "mean") == 2 + 5 + 4 + 4
    assert scoring.total("lse", run, "fastest") == 1 + 5 + 2 + 4
    equivalent = scoring.ToolRun("fgrad")
    equivalent.timings[("w=0", "ff")] = scoring.timed_from([{"name": "evaluate",
                                                            "nanoseconds": 6}])
    equivalent.timings[("w=0", "rr")] = scoring.timed_from([{"name": "evaluate",
                                                            "nanoseconds": 2}])
    assert scoring.total("particle", equivalent, "mean") == 2e-9
    assert scoring.total("hello", run, "mean") is None


# --- end to end, with a GradBench checkout ---------------------------------------------

@pytest.mark.skipif(not os.environ.get("GRADBENCH"),
                    reason="set GRADBENCH to a GradBench checkout with its manual tool built")
def test_runner_validates_fgrad_against_manual():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gradbench", "--gradbench", os.environ["GRADBENCH"],
         "--evals", "lse,llsq", "--tools", "manual,fgrad", "--quick", "--min-runs", "1",
         "--min-seconds", "0"], cwd=REPO, text=True, capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "| fgrad | ok | 4/4 |" in done.stdout


def test_runner_without_manual_says_how_gradbench_documents_building_it(tmp_path):
    (tmp_path / "evals").mkdir()
    done = subprocess.run([sys.executable, "-m", "benchmarks.gradbench", "--gradbench",
                           str(tmp_path), "--evals", "lse"], cwd=REPO, text=True,
                          capture_output=True, timeout=120)
    assert done.returncode != 0
    assert "manual` tool is not built" in done.stderr
    assert "Running evals outside of Docker" in done.stderr


@pytest.mark.parametrize("module", [tool, optimize], ids=lambda m: m.__name__)
def test_docstring_examples(module):
    assert doctest.testmod(module).failed == 0
