"""scikit-learn and SciPy, unmodified, on fgrad's traced arrays (docs/array-api.md).

SciPy reads ``SCIPY_ARRAY_API`` once, when it is first imported, and the rest of
the suite imports it without; so these cases run in a pytest process of their
own, started by tests/test_sklearn.py with ``SCIPY_ARRAY_API=1``. To run them
directly: ``SCIPY_ARRAY_API=1 pytest tests/sklearn_scipy_cases.py -n 0``.

The tables below are docs/array-api.md's table of what works: each row is
checked here, and tests/test_sklearn.py checks that the page lists the same.
"""
import os
import re

import numpy as np
import pytest

if os.environ.get("SCIPY_ARRAY_API") != "1":
    pytest.skip("SciPy's Array API support needs SCIPY_ARRAY_API=1 before SciPy is "
                "imported: tests/test_sklearn.py runs this file in such a process",
                allow_module_level=True)

sklearn = pytest.importorskip("sklearn")
scipy = pytest.importorskip("scipy")

import scipy.signal  # noqa: E402
from packaging.version import Version  # noqa: E402
import scipy.special  # noqa: E402
import scipy.stats  # noqa: E402
from sklearn import decomposition, kernel_approximation, linear_model, metrics  # noqa: E402
from sklearn import discriminant_analysis, naive_bayes, pipeline, preprocessing  # noqa: E402
from sklearn.utils import all_estimators  # noqa: E402

import fgrad  # noqa: E402
import fgrad.numpy as fnp  # noqa: E402
from fgrad.errors import (  # noqa: E402
    ArrayNamespaceError,
    BatchedConversionError,
    ConcretizationError,
    DerivativeConversionError,
    ImmutableArrayError,
    NumpyFunctionError,
)
from fgrad.testing import check_grads  # noqa: E402

RNG = np.random.default_rng(0)
X = RNG.normal(size=(30, 4))
Y_REGRESSION = np.exp(0.1 * X @ np.array([1.0, 2.0, 3.0, 4.0]))
Y_CLASSES = (X[:, 0] + 0.3 * RNG.normal(size=30) > 0).astype(int)


@pytest.fixture(autouse=True)
def _array_api_dispatch():
    with sklearn.config_context(array_api_dispatch=True):
        yield


def on(x, data):
    """``data`` as a constant of ``x``'s transformation (its namespace, fgrad.numpy)."""
    return fnp.asarray(data, device=x.device)


# -- estimators ------------------------------------------------------------------------
# name -> (the estimator, its input, True where fit, predict and transform run
# under jit and vmap, i.e. its code has no data-dependent shapes or branches on
# values; else the file of the line fgrad's error names there)
ESTIMATORS = {
    "Binarizer": (preprocessing.Binarizer(threshold=0.1), X, True),
    "GaussianNB": (naive_bayes.GaussianNB(), X, True),
    "KernelCenterer": (preprocessing.KernelCenterer(), X @ X.T, True),
    "LinearDiscriminantAnalysis": (discriminant_analysis.LinearDiscriminantAnalysis(),
                                   X, "discriminant_analysis.py"),
    "MinMaxScaler": (preprocessing.MinMaxScaler(), X, "_array_api.py"),
    "Normalizer": (preprocessing.Normalizer(), X, True),
    "Nystroem": (kernel_approximation.Nystroem(n_components=5, random_state=0), X, True),
    "PCA": (decomposition.PCA(n_components=2), X, True),
    "PolynomialFeatures": (preprocessing.PolynomialFeatures(), X, True),
    "Ridge": (linear_model.Ridge(), X, "_ridge.py"),
    "RidgeCV": (linear_model.RidgeCV(), X, "_ridge.py"),
    "RidgeClassifierCV": (linear_model.RidgeClassifierCV(), X, "_ridge.py"),
    "StandardScaler": (preprocessing.StandardScaler(), X, "extmath.py"),
}
# estimators whose tags declare Array API support but whose fit leaves the
# standard: name -> (estimator, the file of the line fgrad's error names)
LEAVES_THE_STANDARD = {
    # L-BFGS runs in SciPy's compiled code, on NumPy arrays
    "LogisticRegression": (linear_model.LogisticRegression(), "_linear_loss.py"),
    "PoissonRegressor": (linear_model.PoissonRegressor(), "_linear_loss.py"),
}
# labels in, labels out: nothing to differentiate
NOT_DIFFERENTIABLE = {"LabelEncoder"}


def _output(estimator, X):
    """What the fitted estimator makes of ``X``: probabilities, a transform or a
    prediction, the first it has."""
    for method in ("predict_proba", "transform", "predict"):
        if hasattr(estimator, method):
            return getattr(estimator, method)(X)
    raise AssertionError(f"{estimator!r} has none of the methods tried")


def _fit_and_apply(name):
    estimator, _, _ = ESTIMATORS[name]
    is_classifier = sklearn.base.is_classifier(estimator)

    def apply(X):
        y = Y_CLASSES if is_classifier else Y_REGRESSION
        fitted = sklearn.base.clone(estimator).fit(X, y)
        return fnp.sum(_output(fitted, X) ** 2)
    return apply


def test_the_tables_name_every_estimator_that_declares_array_api_support():
    declared = set()
    for name, cls in all_estimators():
        try:
            tags = sklearn.utils.get_tags(cls())
        except (TypeError, AttributeError):  # a meta-estimator, which needs arguments
            continue
        if tags.array_api_support:
            declared.add(name)
    listed = set(ESTIMATORS) | set(LEAVES_THE_STANDARD) | NOT_DIFFERENTIABLE
    assert declared == listed


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_estimators_fit_and_predict_under_grad_and_jvp(name):
    apply = _fit_and_apply(name)
    check_grads(apply, (ESTIMATORS[name][1],), order=1, modes=("fwd", "rev"))


@pytest.mark.parametrize("name", sorted(n for n, e in ESTIMATORS.items() if e[2] is True))
def test_estimators_without_data_dependent_shapes_run_under_jit_and_vmap(name):
    apply, x = _fit_and_apply(name), ESTIMATORS[name][1]
    expected = apply(x)
    with sklearn.config_context(assume_finite=True):     # validation reads values
        np.testing.assert_allclose(fgrad.jit(apply)(x), expected, rtol=1e-10)
        np.testing.assert_allclose(fgrad.jit(fgrad.grad(apply))(x), fgrad.grad(apply)(x),
                                   rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(fgrad.vmap(apply)(np.stack([x, 2 * x]))[0], expected,
                                   rtol=1e-10)


@pytest.mark.parametrize("name", sorted(n for n, e in ESTIMATORS.items() if e[2] is not True))
def test_estimators_with_data_dependent_code_are_refused_by_jit_naming_the_line(name):
    apply, x, filename = _fit_and_apply(name), ESTIMATORS[name][1], ESTIMATORS[name][2]
    with sklearn.config_context(assume_finite=True):
        with pytest.raises(ConcretizationError, match=rf"site-packages/sklearn/.*{filename}:\d+"):
            fgrad.jit(apply)(x)
        with pytest.raises(BatchedConversionError, match=rf"sklearn/.*{filename}:\d+"):
            fgrad.vmap(apply)(np.stack([x, 2 * x]))


def test_label_encoder_encodes_labels_on_a_traced_value_s_device_as_numpy_s():
    labels = np.array([3, 1, 3, 7, 1])
    want = preprocessing.LabelEncoder().fit(labels)

    def encode(x):
        encoder = preprocessing.LabelEncoder().fit(on(x, labels))
        codes = encoder.transform(on(x, labels))
        assert encoder.classes_.tolist() == want.classes_.tolist() == [1, 3, 7]
        assert codes.tolist() == want.transform(labels).tolist()
        assert encoder.inverse_transform(codes).tolist() == labels.tolist()
        return x * 1.0
    fgrad.grad(lambda x: fnp.sum(encode(x)))(X)
    fgrad.jvp(encode, (X,), (X,))
    fgrad.jit(encode)(X)                    # constants' values are known under jit
    fgrad.vmap(encode)(np.stack([X, X]))


@pytest.mark.parametrize("name", sorted(LEAVES_THE_STANDARD))
def test_a_fit_that_leaves_the_standard_is_refused_naming_the_line(name):
    estimator, filename = LEAVES_THE_STANDARD[name]
    y = Y_CLASSES if sklearn.base.is_classifier(estimator) else Y_REGRESSION

    def loss(X):
        return fnp.sum(estimator.fit(X, y).predict(X))
    with pytest.raises(Exception) as raised:
        fgrad.grad(loss)(X)
    # NumPy's `coef[-1] = x` asks for float(x), and raises its own ValueError
    # with fgrad's refusal as the direct cause, shown above it in the traceback
    error = raised.value if isinstance(raised.value, DerivativeConversionError) \
        else raised.value.__cause__
    assert isinstance(error, (DerivativeConversionError, NumpyFunctionError))
    assert re.search(rf"sklearn/.*{filename}:\d+.*drop", str(error))


# -- the examples the issue asks for ------------------------------------------------

X_VALID = RNG.normal(size=(10, 4))
Y_VALID = np.exp(0.1 * X_VALID @ np.array([1.0, 2.0, 3.0, 4.0]))


def _validation_loss(alpha, X_train):
    model = linear_model.Ridge(alpha=alpha).fit(X_train, on(X_train, Y_REGRESSION))
    residual = model.predict(on(X_train, X_VALID)) - on(X_train, Y_VALID)
    return fnp.mean(residual ** 2)


def test_ridge_validation_loss_in_alpha_and_in_the_training_data():
    check_grads(lambda alpha: _validation_loss(alpha, on(alpha, X)), (np.asarray(3.0),),
                order=1, modes=("fwd", "rev"))
    check_grads(lambda X_train: _validation_loss(3.0, X_train), (X,), order=1,
                modes=("fwd", "rev"))


def test_pca_reconstruction_error_in_the_data():
    def error(X):
        pca = decomposition.PCA(n_components=2).fit(X)
        return fnp.sum((pca.inverse_transform(pca.transform(X)) - X) ** 2)
    check_grads(error, (X,), order=1, modes=("fwd", "rev"))


def test_gaussian_nb_log_likelihood_in_the_data():
    def log_likelihood(X):
        model = naive_bayes.GaussianNB().fit(X, Y_CLASSES)
        return fnp.sum(model.predict_joint_log_proba(X))
    check_grads(log_likelihood, (X,), order=1, modes=("fwd", "rev"))


def test_pipeline_influence_of_each_training_point():
    def validation_loss(X_train):
        model = pipeline.make_pipeline(preprocessing.StandardScaler(),
                                       decomposition.PCA(n_components=3),
                                       linear_model.Ridge(alpha=0.5))
        model.fit(X_train, on(X_train, Y_REGRESSION))
        return fnp.mean((model.predict(on(X_train, X_VALID)) - on(X_train, Y_VALID)) ** 2)
    check_grads(validation_loss, (X,), order=1, modes=("fwd", "rev"))


# -- metrics --------------------------------------------------------------------------
# name -> (the metric of (y_true, y_pred) as an array, True where it runs under
# jit and vmap, else the file of the line fgrad's error names): sklearn's metrics
# return a Python float when they reduce to one number, so the differentiable
# form is the per-output one (multioutput="raw_values") or a distance or kernel
# matrix
Y_PRED = Y_REGRESSION + 0.1 * RNG.normal(size=30)


def per_output(metric):
    return lambda y_true, y_pred: metric(y_true, y_pred, multioutput="raw_values")


def as_matrices(metric):
    return lambda y_true, y_pred: metric(y_true.reshape(6, 5), y_pred.reshape(6, 5))


METRICS = {
    "r2_score": (per_output(metrics.r2_score), "_regression.py"),
    "explained_variance_score": (per_output(metrics.explained_variance_score), "_regression.py"),
    "d2_absolute_error_score": (per_output(metrics.d2_absolute_error_score), "_regression.py"),
    "d2_pinball_score": (per_output(metrics.d2_pinball_score), "_regression.py"),
    "mean_squared_error": (per_output(metrics.mean_squared_error), True),
    "root_mean_squared_error": (per_output(metrics.root_mean_squared_error), True),
    "mean_absolute_error": (per_output(metrics.mean_absolute_error), True),
    "median_absolute_error": (per_output(metrics.median_absolute_error), True),
    "mean_pinball_loss": (per_output(metrics.mean_pinball_loss), True),
    "mean_absolute_percentage_error": (per_output(metrics.mean_absolute_percentage_error),
                                       True),
    "mean_squared_log_error": (per_output(metrics.mean_squared_log_error), "_regression.py"),
    "root_mean_squared_log_error": (per_output(metrics.root_mean_squared_log_error),
                                    "_regression.py"),
    "cosine_similarity": (as_matrices(metrics.pairwise.cosine_similarity), True),
    "cosine_distances": (as_matrices(metrics.pairwise.cosine_distances), True),
    "euclidean_distances": (as_matrices(metrics.pairwise.euclidean_distances), True),
    "manhattan_distances": (as_matrices(metrics.pairwise.manhattan_distances), True),
    "pairwise_distances": (as_matrices(metrics.pairwise_distances), True),
    "paired_euclidean_distances": (as_matrices(metrics.pairwise.paired_euclidean_distances),
                                   True),
    "paired_cosine_distances": (as_matrices(metrics.pairwise.paired_cosine_distances), True),
    "paired_manhattan_distances": (as_matrices(metrics.pairwise.paired_manhattan_distances),
                                   True),
    "linear_kernel": (as_matrices(metrics.pairwise.linear_kernel), True),
    "polynomial_kernel": (as_matrices(metrics.pairwise.polynomial_kernel), True),
    "rbf_kernel": (as_matrices(metrics.pairwise.rbf_kernel), True),
    "laplacian_kernel": (as_matrices(metrics.pairwise.laplacian_kernel), True),
    "sigmoid_kernel": (as_matrices(metrics.pairwise.sigmoid_kernel), True),
    "pairwise_kernels": (as_matrices(metrics.pairwise.pairwise_kernels), True),
    # of non-negative data; `if xp.any(X < 0)` reads the values
    "chi2_kernel": (as_matrices(metrics.pairwise.chi2_kernel), "pairwise.py"),
    "additive_chi2_kernel": (as_matrices(metrics.pairwise.additive_chi2_kernel), "pairwise.py"),
}
# metrics that return float(...) of their result: name -> (metric, y_true, y_pred)
PROBABILITIES = 1 / (1 + np.exp(-X[:, 0]))
FLOAT_METRICS = {
    "log_loss": (metrics.log_loss, Y_CLASSES, PROBABILITIES),
    "d2_log_loss_score": (metrics.d2_log_loss_score, Y_CLASSES, PROBABILITIES),
    "brier_score_loss": (metrics.brier_score_loss, Y_CLASSES, PROBABILITIES),
    "d2_brier_score": (metrics.d2_brier_score, Y_CLASSES, PROBABILITIES),
    "mean_poisson_deviance": (metrics.mean_poisson_deviance, Y_REGRESSION, Y_PRED),
    "mean_gamma_deviance": (metrics.mean_gamma_deviance, Y_REGRESSION, Y_PRED),
    "mean_tweedie_deviance": (metrics.mean_tweedie_deviance, Y_REGRESSION, Y_PRED),
    "d2_tweedie_score": (metrics.d2_tweedie_score, Y_REGRESSION, Y_PRED),
    "max_error": (metrics.max_error, Y_REGRESSION, Y_PRED),
}


def of_labels(metric, **options):
    """``metric`` of the labels that traced probabilities predict."""
    return lambda p: metric(on(p, Y_CLASSES), fnp.astype(p > 0.5, Y_CLASSES.dtype),
                            **options)


def of_scores(metric):
    return lambda p: metric(on(p, Y_CLASSES), p)


# metrics with no derivative to give: of labels, of the order of scores (a
# curve's steps), or indices. name -> (a function of traced probabilities, True
# where it runs under jit and vmap, else the file of the line fgrad's error names)
NO_DERIVATIVE = {
    "accuracy_score": (of_labels(metrics.accuracy_score), "_unique.py"),
    "balanced_accuracy_score": (of_labels(metrics.balanced_accuracy_score), "_array_api.py"),
    "cohen_kappa_score": (of_labels(metrics.cohen_kappa_score), "_array_api.py"),
    "confusion_matrix": (of_labels(metrics.confusion_matrix), "_array_api.py"),
    "multilabel_confusion_matrix": (of_labels(metrics.multilabel_confusion_matrix), "_unique.py"),
    "f1_score": (of_labels(metrics.f1_score), "_unique.py"),
    "fbeta_score": (of_labels(metrics.fbeta_score, beta=2.0), "_unique.py"),
    "precision_score": (of_labels(metrics.precision_score), "_unique.py"),
    "recall_score": (of_labels(metrics.recall_score), "_unique.py"),
    "jaccard_score": (of_labels(metrics.jaccard_score), "_unique.py"),
    "hamming_loss": (of_labels(metrics.hamming_loss), "_unique.py"),
    "zero_one_loss": (of_labels(metrics.zero_one_loss), "_unique.py"),
    "average_precision_score": (of_scores(metrics.average_precision_score), "_ranking.py"),
    "roc_curve": (of_scores(metrics.roc_curve), "_ranking.py"),
    "det_curve": (of_scores(metrics.det_curve), "_ranking.py"),
    "precision_recall_curve": (of_scores(metrics.precision_recall_curve), "_ranking.py"),
    "pairwise_distances_argmin": (
        lambda p: metrics.pairwise_distances_argmin(p.reshape(6, 5),
                                                    on(p, Y_PRED.reshape(6, 5))), True),
}


def test_the_tables_name_every_metric_scikit_learn_tests_with_array_api():
    common = pytest.importorskip("sklearn.metrics.tests.test_common")
    tested = {getattr(m, "func", m).__name__ for m in common.array_api_metric_checkers}
    assert tested == set(METRICS) | set(FLOAT_METRICS) | set(NO_DERIVATIVE)


def _metric_of_predictions(name):
    metric = METRICS[name][0]
    return lambda p: metric(on(p, Y_REGRESSION), p)


@pytest.mark.parametrize("name", sorted(METRICS))
def test_metrics_in_the_predictions(name):
    check_grads(_metric_of_predictions(name), (Y_PRED,), order=1, modes=("fwd", "rev"))


@pytest.mark.parametrize("name", sorted(METRICS))
def test_metrics_under_jit_and_vmap_or_refused_naming_the_line(name):
    metric = _metric_of_predictions(name)
    with sklearn.config_context(assume_finite=True):
        filename = METRICS[name][1]
        if filename is not True:
            with pytest.raises(ConcretizationError, match=rf"sklearn/.*{filename}:\d+"):
                fgrad.jit(metric)(Y_PRED)
            with pytest.raises(BatchedConversionError, match=rf"sklearn/.*{filename}:\d+"):
                fgrad.vmap(metric)(np.stack([Y_PRED, 2 * Y_PRED]))
            return
        np.testing.assert_allclose(fgrad.jit(metric)(Y_PRED), metric(Y_PRED), rtol=1e-10)
        np.testing.assert_allclose(fgrad.vmap(metric)(np.stack([Y_PRED, 2 * Y_PRED]))[0],
                                   metric(Y_PRED), rtol=1e-10)


@pytest.mark.parametrize("name", sorted(FLOAT_METRICS))
def test_metrics_that_return_a_python_float_are_refused_naming_the_line(name):
    metric, y_true, y_pred = FLOAT_METRICS[name]

    def of_predictions(p):
        return metric(on(p, y_true), p)
    assert of_predictions(y_pred) == metric(y_true, y_pred)     # outside: as NumPy's
    with pytest.raises(DerivativeConversionError, match=r"sklearn/metrics/.*float\("):
        fgrad.grad(of_predictions)(y_pred)
    with pytest.raises(DerivativeConversionError, match=r"sklearn/metrics/.*float\("):
        fgrad.jvp(of_predictions, (y_pred,), (np.ones_like(y_pred),))
    with sklearn.config_context(assume_finite=True):
        with pytest.raises(ConcretizationError, match=r"sklearn/.*\.py:\d+"):
            fgrad.jit(of_predictions)(y_pred)
        with pytest.raises(BatchedConversionError, match=r"sklearn/.*\.py:\d+"):
            fgrad.vmap(of_predictions)(np.stack([y_pred, y_pred]))


def _leaves(result):
    return [np.asarray(leaf) for leaf in fgrad.tree.tree_leaves(result)]


@pytest.mark.parametrize("name", sorted(NO_DERIVATIVE))
def test_metrics_without_a_derivative_run_on_traced_values(name):
    metric, filename = NO_DERIVATIVE[name]
    want = _leaves(metric(PROBABILITIES))
    seen = []

    def loss(p):
        seen.append(_leaves(fgrad.stop_gradient(metric(p))))
        return fnp.sum(p)
    assert np.array_equal(fgrad.grad(loss)(PROBABILITIES), np.ones(30))
    for got, expected in zip(seen[0], want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12)
    with sklearn.config_context(assume_finite=True):
        if filename is True:
            for got, expected in zip(_leaves(fgrad.jit(metric)(PROBABILITIES)), want,
                                     strict=True):
                np.testing.assert_array_equal(got, expected)
            return
        with pytest.raises((ConcretizationError, NumpyFunctionError),
                           match=rf"sklearn/.*{filename}:\d+"):
            fgrad.jit(metric)(PROBABILITIES)
        with pytest.raises((BatchedConversionError, NumpyFunctionError),
                           match=rf"sklearn/.*{filename}:\d+"):
            fgrad.vmap(metric)(np.stack([PROBABILITIES, PROBABILITIES]))


# -- SciPy ----------------------------------------------------------------------------
# the rows below are SciPy 1.17's (stats.quantile is new in 1.15; earlier
# versions converted more functions with np.asarray)
needs_scipy_1_17 = pytest.mark.skipif(Version(scipy.__version__) < Version("1.17"),
                                      reason="the SciPy rows are SciPy 1.17's")
POSITIVE = RNG.uniform(0.2, 2.0, size=12)
SIGNAL = RNG.normal(size=12)

# name -> (function of one traced array, its argument); constants a function
# takes besides (filter coefficients, a population mean) are made on the traced
# argument's device, as SciPy asks of every array argument
SCIPY = {
    "special.softmax": (scipy.special.softmax, SIGNAL),
    "special.log_softmax": (scipy.special.log_softmax, SIGNAL),
    "special.logsumexp": (lambda x: scipy.special.logsumexp(x, b=x), POSITIVE),
    "special.xlogy": (lambda x: scipy.special.xlogy(x, x[::-1]), POSITIVE),
    "stats.zscore": (scipy.stats.zscore, SIGNAL),
    "stats.skew": (scipy.stats.skew, SIGNAL),
    "stats.kurtosis": (scipy.stats.kurtosis, SIGNAL),
    "stats.moment": (lambda x: scipy.stats.moment(x, order=3), SIGNAL),
    "stats.gmean": (scipy.stats.gmean, POSITIVE),
    "stats.hmean": (scipy.stats.hmean, POSITIVE),
    "stats.pmean": (lambda x: scipy.stats.pmean(x, 2.5), POSITIVE),
    "stats.sem": (scipy.stats.sem, SIGNAL),
    "stats.differential_entropy": (scipy.stats.differential_entropy, SIGNAL),
    "stats.trim_mean": (lambda x: scipy.stats.trim_mean(x, 0.1), SIGNAL),
    "stats.boxcox_llf": (lambda x: scipy.stats.boxcox_llf(0.5, x), POSITIVE),
    "stats.circmean": (scipy.stats.circmean, SIGNAL),
    "stats.circstd": (scipy.stats.circstd, SIGNAL),
    "stats.quantile": (lambda x: scipy.stats.quantile(x, on(x, 0.3)), SIGNAL),
    "stats.describe": (lambda x: scipy.stats.describe(x).variance, SIGNAL),
    # these compare traced values (n != 0) and index with the result
    "stats.variation": (scipy.stats.variation, POSITIVE),
    "stats.tmean": (lambda x: scipy.stats.tmean(x, (-1.0, 1.0)), SIGNAL),
    "stats.tvar": (scipy.stats.tvar, SIGNAL),
    "stats.tstd": (scipy.stats.tstd, SIGNAL),
    "signal.fftconvolve": (lambda x: scipy.signal.fftconvolve(x, x[:3]), SIGNAL),
    "signal.convolve(method='fft')": (
        lambda x: scipy.signal.convolve(x, x[:3], method="fft"), SIGNAL),
    "signal.hilbert": (lambda x: fnp.abs(scipy.signal.hilbert(x)), SIGNAL),
    "signal.resample": (lambda x: scipy.signal.resample(x, 8), SIGNAL),
}
# name -> (function, argument, the file of the line fgrad's error names): SciPy
# converts with np.asarray there (special's functions for array libraries it
# does not know, signal's filters) or asks for a Python number
SCIPY_LEAVES_THE_STANDARD = {
    "special.erf": (scipy.special.erf, SIGNAL, "_support_alternative_backends.py"),
    "special.gammaln": (scipy.special.gammaln, POSITIVE, "_support_alternative_backends.py"),
    "stats.entropy": (scipy.stats.entropy, POSITIVE, "_support_alternative_backends.py"),
    "signal.convolve": (lambda x: scipy.signal.convolve(x, x[:3]), SIGNAL,
                        "_signaltools.py"),
    "signal.lfilter": (lambda x: scipy.signal.lfilter(on(x, [1.0, 0.5]), on(x, [1.0, -0.2]),
                                                      x), SIGNAL, "_signaltools.py"),
    "signal.detrend": (scipy.signal.detrend, SIGNAL, "_signaltools.py"),
    "signal.welch": (lambda x: scipy.signal.welch(x, nperseg=8)[1], SIGNAL,
                     "_spectral_py.py"),
}


# name -> (function, argument, the file of the line that asks for one namespace):
# SciPy makes an array there without ``device=`` (``xp.ones(mysize)``,
# ``xp.asarray(rng)``), which fgrad.numpy makes a NumPy array, as outside every
# transformation, and then asks for the one namespace of it and a traced array
SCIPY_MAKES_NUMPY_ARRAYS = {
    "stats.iqr": (scipy.stats.iqr, SIGNAL, "_quantile.py"),
    "signal.savgol_filter": (lambda x: scipy.signal.savgol_filter(x, 5, 2), SIGNAL,
                             "_delegators.py"),
    "signal.resample_poly": (lambda x: scipy.signal.resample_poly(x, 2, 3), SIGNAL,
                             "_upfirdn.py"),
    "signal.wiener": (scipy.signal.wiener, SIGNAL, "_signaltools.py"),
}


@needs_scipy_1_17
@pytest.mark.parametrize("name", sorted(SCIPY))
def test_scipy_functions_differentiate(name):
    function, x = SCIPY[name]
    check_grads(lambda x: function(x), (x,), order=1, modes=("fwd", "rev"))


@needs_scipy_1_17
def test_scipy_oaconvolve_writing_through_a_transposed_view_is_refused():
    # NumPy would write into the array the view was made of: fgrad follows
    # that only for views of basic indexing, and refuses the rest
    with pytest.raises(ImmutableArrayError, match="copy"):
        fgrad.grad(lambda x: fnp.sum(scipy.signal.oaconvolve(x, x[:3])))(SIGNAL)


@needs_scipy_1_17
@pytest.mark.parametrize("name", sorted(SCIPY_LEAVES_THE_STANDARD))
def test_scipy_functions_that_leave_the_standard_are_refused_naming_the_line(name):
    function, x, filename = SCIPY_LEAVES_THE_STANDARD[name]
    with pytest.raises((NumpyFunctionError, DerivativeConversionError),
                       match=rf"scipy/.*{filename}:\d+"):
        fgrad.grad(lambda x: fnp.sum(function(x)))(x)


@needs_scipy_1_17
@pytest.mark.parametrize("name", sorted(SCIPY_MAKES_NUMPY_ARRAYS))
def test_scipy_functions_that_make_arrays_without_a_device_are_refused_naming_the_line(name):
    function, x, filename = SCIPY_MAKES_NUMPY_ARRAYS[name]
    # SciPy's own TypeError ("Multiple namespaces") would come next
    with pytest.raises(ArrayNamespaceError, match=rf"scipy/.*{filename}:\d+.*device="):
        fgrad.grad(lambda x: fnp.sum(function(x)))(x)
