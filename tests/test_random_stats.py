"""fgrad.random is statistically right: every sampler against SciPy's
distribution (Kolmogorov-Smirnov for continuous ones, chi-square for
discrete ones) and its moments, and sibling streams uncorrelated.

Keys are fixed, so these tests are deterministic: a p-value here is the same
on every run, and the threshold (1e-3) only says how unlikely a correct
sampler is to land below it for the chosen keys. The default run draws
20 000 numbers per check; the slow sweeps (``pytest -m slow``) draw a million
and cover more parameters.
"""
import numpy as np
import pytest
from scipy import stats

import fgrad
from fgrad import random

N = 20_000
P_MIN = 1e-3


def _key(name):
    """A fixed key per check (so checks do not share numbers)."""
    return random.key(sum(map(ord, name)) * 7919)


def _ks(sample, cdf, *args):
    p = stats.kstest(np.asarray(sample, np.float64), cdf, args=args).pvalue
    assert p > P_MIN, f"KS p-value {p:.2e} against {cdf}{args}"


def _chi_square(counts, expected):
    counts, expected = np.asarray(counts, float), np.asarray(expected, float)
    expected = expected * counts.sum() / expected.sum()
    p = stats.chisquare(counts, expected).pvalue
    assert p > P_MIN, f"chi-square p-value {p:.2e}: {counts} against {expected}"


def _moments(sample, mean, var, n=None):
    """Mean and variance within 5 standard errors (the variance's from the
    sample's fourth moment)."""
    x = np.asarray(sample, np.float64)
    n = x.size if n is None else n
    assert abs(x.mean() - mean) < 5 * np.sqrt(var / n), (x.mean(), mean)
    m4 = np.mean((x - x.mean()) ** 4)
    assert abs(x.var() - var) < 5 * np.sqrt(max(m4 - var ** 2, 1e-300) / n), (x.var(), var)


CONTINUOUS = {  # name: (draw(key, n), scipy distribution name, its args, mean, variance)
    "uniform": (lambda k, n: random.uniform(k, (n,), minval=-1.0, maxval=3.0),
                "uniform", (-1.0, 4.0), 1.0, 16 / 12),
    "uniform32": (lambda k, n: random.uniform(k, (n,), np.float32), "uniform", (), 0.5, 1 / 12),
    "normal": (lambda k, n: random.normal(k, (n,)), "norm", (), 0.0, 1.0),
    "normal32": (lambda k, n: random.normal(k, (n,), np.float32), "norm", (), 0.0, 1.0),
    "exponential": (lambda k, n: random.exponential(k, (n,)), "expon", (), 1.0, 1.0),
    "gumbel": (lambda k, n: random.gumbel(k, (n,)), "gumbel_r", (), np.euler_gamma,
               np.pi ** 2 / 6),
    "laplace": (lambda k, n: random.laplace(k, (n,)), "laplace", (), 0.0, 2.0),
    "logistic": (lambda k, n: random.logistic(k, (n,)), "logistic", (), 0.0, np.pi ** 2 / 3),
    "cauchy": (lambda k, n: random.cauchy(k, (n,)), "cauchy", (), None, None),
    "t": (lambda k, n: random.t(k, 5.0, (n,)), "t", (5.0,), 0.0, 5 / 3),
    "truncated_normal": (lambda k, n: random.truncated_normal(k, -0.7, 1.8, (n,)),
                         "truncnorm", (-0.7, 1.8), *stats.truncnorm.stats(-0.7, 1.8)),
    "gamma_small": (lambda k, n: random.gamma(k, 0.3, (n,)), "gamma", (0.3,), 0.3, 0.3),
    "gamma_one": (lambda k, n: random.gamma(k, 1.0, (n,)), "gamma", (1.0,), 1.0, 1.0),
    "gamma_large": (lambda k, n: random.gamma(k, 7.5, (n,)), "gamma", (7.5,), 7.5, 7.5),
    "beta": (lambda k, n: random.beta(k, 2.0, 0.7, (n,)), "beta", (2.0, 0.7),
             *stats.beta.stats(2.0, 0.7)),
    "dirichlet_marginal": (lambda k, n: random.dirichlet(k, np.array([0.5, 1.5, 3.0]),
                                                         (n,))[:, 1],
                           "beta", (1.5, 3.5), *stats.beta.stats(1.5, 3.5)),
    "multivariate_normal_marginal": (
        lambda k, n: random.multivariate_normal(
            k, np.array([1.0, -2.0]), np.array([[2.0, 0.8], [0.8, 1.0]]), (n,))[:, 0],
        "norm", (1.0, np.sqrt(2.0)), 1.0, 2.0),
}


@pytest.mark.parametrize("name", sorted(CONTINUOUS))
def test_continuous_samplers_match_scipy(name):
    draw, dist, args, mean, var = CONTINUOUS[name]
    x = draw(_key(name), N)
    assert np.isfinite(x).all()
    _ks(x, dist, *args)
    if mean is not None:
        _moments(x, float(mean), float(var))


def test_multivariate_normal_covariance():
    cov = np.array([[2.0, 0.8, 0.0], [0.8, 1.0, -0.3], [0.0, -0.3, 0.5]])
    for method in ("cholesky", "eigh", "svd"):
        x = random.multivariate_normal(_key(method), np.zeros(3), cov, (N,), method=method)
        np.testing.assert_allclose(np.cov(x.T), cov, atol=5 * np.sqrt(2 * 2.0 / N))


def _counts(x, values):
    x = np.asarray(x)
    return [int(np.sum(x == v)) for v in values]


def test_randint_is_uniform_over_its_range():
    x = random.randint(_key("randint"), (N,), -3, 4)
    assert x.min() == -3 and x.max() == 3
    _chi_square(_counts(x, range(-3, 4)), np.ones(7))


def test_bits_are_fair_coins_bit_by_bit():
    x = random.bits(_key("bits"), (N,), np.uint32)
    ones = [(x >> np.uint32(b) & np.uint32(1)).sum() for b in range(32)]
    # each bit position a Binomial(N, 1/2)
    assert max(abs(c - N / 2) for c in ones) < 5 * np.sqrt(N / 4)
    _chi_square(np.bincount((x & np.uint32(255)).astype(np.int64), minlength=256), np.ones(256))


def test_bernoulli_and_rademacher_frequencies():
    x = random.bernoulli(_key("bernoulli"), 0.3, (N,))
    assert abs(x.mean() - 0.3) < 5 * np.sqrt(0.21 / N)
    p = np.array([0.1, 0.5, 0.9])
    y = random.bernoulli(_key("bernoulli_array"), p, (N, 3))
    assert np.all(np.abs(y.mean(axis=0) - p) < 5 * np.sqrt(p * (1 - p) / N))
    r = random.rademacher(_key("rademacher"), (N,))
    _chi_square(_counts(r, (-1, 1)), np.ones(2))


def test_categorical_and_choice_with_probabilities():
    p = np.array([0.1, 0.2, 0.3, 0.4])
    x = random.categorical(_key("categorical"), np.log(p), shape=(N,))
    _chi_square(_counts(x, range(4)), p)
    logits = np.log(np.array([[0.5, 0.5, 0.0001], [0.2, 0.3, 0.5]]))
    y = random.categorical(_key("categorical_batch"), logits, axis=1, shape=(N, 2))
    _chi_square(_counts(y[:, 1], range(3)), [0.2, 0.3, 0.5])
    c = random.choice(_key("choice_p"), 4, (N,), p=p)
    _chi_square(_counts(c, range(4)), p)


def test_choice_without_replacement_and_permutations_are_uniform():
    rounds = 4000
    keys = random.split(_key("choice_without"), rounds)
    picks = fgrad.vmap(lambda k: random.choice(k, 6, (2,), replace=False))(keys)
    assert all(len(set(p)) == 2 for p in picks.tolist())
    _chi_square(np.bincount(picks.ravel(), minlength=6), np.ones(6))
    # with p: the first pick follows p, every pick is distinct
    p = np.array([0.1, 0.2, 0.3, 0.4])
    firsts = fgrad.vmap(lambda k: random.choice(k, 4, (2,), replace=False, p=p))(keys)
    _chi_square(np.bincount(firsts[:, 0], minlength=4), p)
    assert np.all(firsts[:, 0] != firsts[:, 1])
    # where item 0 lands in a permutation of 5: uniform over the positions
    orders = fgrad.vmap(lambda k: random.permutation(k, 5))(keys)
    _chi_square(np.bincount(np.argmax(orders == 0, axis=1), minlength=5), np.ones(5))


@pytest.mark.parametrize("lam", [0.7, 6.0, 25.0, 900.0])
def test_poisson_matches_scipy(lam):
    x = random.poisson(_key(f"poisson{lam}"), lam, (N,))
    lo, hi = (int(v) for v in stats.poisson.ppf([0.001, 0.999], lam))
    edges = np.arange(lo, hi + 2)
    counts = [int(np.sum(x < lo))] + [int(np.sum(x == v)) for v in edges[:-1]] + \
        [int(np.sum(x > hi))]
    probs = [stats.poisson.cdf(lo - 1, lam)] + list(stats.poisson.pmf(edges[:-1], lam)) + \
        [stats.poisson.sf(hi, lam)]
    # merge sparse bins (expected count under 5) into their neighbours
    merged_c, merged_p, acc_c, acc_p = [], [], 0, 0.0
    for c, q in zip(counts, probs):
        acc_c, acc_p = acc_c + c, acc_p + q
        if acc_p * N >= 5:
            merged_c.append(acc_c)
            merged_p.append(acc_p)
            acc_c, acc_p = 0, 0.0
    merged_c[-1] += acc_c
    merged_p[-1] += acc_p
    _chi_square(merged_c, merged_p)
    _moments(x, lam, lam)


def test_sibling_streams_are_uncorrelated():
    bound = 4 / np.sqrt(N)       # |r| of independent streams: about 1/sqrt(N)
    key = _key("siblings")
    children = random.split(key, 4)
    streams = [random.normal(k, (N,)) for k in children]
    streams += [random.normal(random.fold_in(key, i), (N,)) for i in range(4, 8)]
    streams.append(random.normal(key, (N,)))          # the parent's own
    corr = np.corrcoef(streams)
    assert np.abs(corr[np.triu_indices(len(streams), 1)]).max() < bound
    # and within one stream, neighbours are uncorrelated
    x = streams[0]
    assert abs(np.corrcoef(x[:-1], x[1:])[0, 1]) < bound
    # the halves of a draw of normals (cos and sin of one Box-Muller pair)
    z = random.normal(key, (2 * N,))
    assert abs(np.corrcoef(z[:N], z[N:])[0, 1]) < bound


# ---------------------------------------------------------------------------
# Slow sweeps: a million draws, more parameters
# ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONTINUOUS))
def test_continuous_samplers_at_a_million(name):
    draw, dist, args, mean, var = CONTINUOUS[name]
    x = draw(_key(name + "big"), 1_000_000)
    _ks(x, dist, *args)
    if mean is not None:
        _moments(x, float(mean), float(var))


@pytest.mark.slow
@pytest.mark.parametrize("a", [0.01, 0.1, 0.5, 0.999, 1.0, 1.001, 3.0, 30.0, 1000.0])
def test_gamma_sweep(a):
    x = random.gamma(_key(f"gamma{a}"), a, (200_000,))
    _ks(x, "gamma", a)
    _moments(x, a, a)


@pytest.mark.slow
@pytest.mark.parametrize("lam", [0.01, 1.0, 9.99, 10.0, 10.01, 100.0, 1e5])
def test_poisson_sweep(lam):
    x = random.poisson(_key(f"poisson{lam}big"), lam, (200_000,))
    _moments(x, lam, lam)
