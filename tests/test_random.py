"""fgrad.random: the generator against its published vectors, the stream
pinned by golden values, the same numbers eagerly, under jit, vmap and on
another backend, keys through pytrees, loops and Dask, gradients of the
samplers, and the errors (a NumPy generator under jit or vmap, a non-key).

Statistics of the samplers are in test_random_stats.py.
"""
import numpy as np
import pytest
import scipy.special as sc

import fgrad
import fgrad.numpy as fnp
from fgrad import nn
from fgrad import random
from fgrad.compiler import native, random_kernels
from fgrad.compiler.program import PROGRAM_ENV, compile_program
from fgrad.errors import (MissingRuleError, RandomArgumentError, RandomKeyError,
                          StatefulRandomnessError)
from fgrad.primitives import random as rp
from random_specs import reference_words
from standin_backend import registered, to_numpy, to_standin

KEY = random.key(1701)


# ---------------------------------------------------------------------------
# The generator: Random123's known answers, JAX's words
# ---------------------------------------------------------------------------

# Threefry-2x32 with 20 rounds: (key, counter) -> output, from the known-answer
# vectors published with Random123 (kat_vectors, threefry2x32_20)
KNOWN_ANSWERS = [
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6b200159, 0x99ba4efe)),
    ((0xffffffff, 0xffffffff), (0xffffffff, 0xffffffff), (0x1cb996fc, 0xbb002be7)),
    ((0x13198a2e, 0x03707344), (0x243f6a88, 0x85a308d3), (0xc4923a9c, 0x483df7a0)),
]


@pytest.mark.parametrize("key, counter, expected", KNOWN_ANSWERS)
def test_threefry_matches_the_published_vectors(key, counter, expected):
    words = rp.threefry2x32(*(np.array([w], np.uint32) for w in key + counter))
    assert tuple(int(w[0]) for w in words) == expected
    # the test's scalar cipher, written from the specification, agrees too
    assert reference_words(np.array(key), 1, start=(counter[0] << 32) | counter[1]) == \
        [expected]


def test_fold_in_is_the_cipher_of_the_data_word():
    # fold_in(key, d) encrypts the counter (0, d); the kernel computes it
    key = np.array(KNOWN_ANSWERS[2][0], np.uint32)
    assert tuple(random.fold_in(key, 0x85a308d3).tolist()) == \
        reference_words(key, 1, start=0x85a308d3)[0]


@pytest.mark.slow                     # importing JAX takes seconds
def test_the_words_equal_jax_threefry():
    jax = pytest.importorskip("jax")
    jkey = jax.random.wrap_key_data(np.asarray(KEY), impl="threefry2x32")
    np.testing.assert_array_equal(random.split(KEY, 3),
                                  jax.random.key_data(jax.random.split(jkey, 3)))
    np.testing.assert_array_equal(random.fold_in(KEY, 9),
                                  jax.random.key_data(jax.random.fold_in(jkey, 9)))
    np.testing.assert_array_equal(random.bits(KEY, (5,), np.uint32),
                                  jax.random.bits(jkey, (5,), np.uint32))
    np.testing.assert_array_equal(random.uniform(KEY, (5,), np.float32),
                                  jax.random.uniform(jkey, (5,), np.float32))
    np.testing.assert_array_equal(random.key(5), jax.random.key_data(jax.random.key(5)))


# ---------------------------------------------------------------------------
# Golden values: a key's numbers do not change between releases
# ---------------------------------------------------------------------------


def test_golden_keys_bits_uniforms_and_normals():
    assert random.key(1701).tolist() == [0, 1701]
    assert random.key(-1).tolist() == [0xFFFFFFFF, 0xFFFFFFFF]
    assert random.split(KEY).tolist() == [[741045208, 1847055613], [85238482, 2594297577]]
    assert random.fold_in(KEY, 7).tolist() == [33961628, 564353879]
    assert random.bits(KEY, (4,), np.uint32).tolist() == \
        [1111271205, 2679469115, 974515252, 521976754]
    assert random.bits(KEY, (2,)).tolist() == [3182764935064573181, 366096495144982249]
    # bit for bit: the floats are exact functions of the bits
    assert [v.hex() for v in random.uniform(KEY, (3,)).tolist()] == \
        ["0x1.615b9ec370be8p-3", "0x1.4528b4a6a8740p-6", "0x1.acc0259ca6300p-7"]
    assert random.uniform(KEY, (3,), np.float32).tolist() == \
        [0.2587379217147827, 0.6238625049591064, 0.2268970012664795]
    assert [v.hex() for v in random.normal(KEY, (3,)).tolist()] == \
        ["0x1.3a0c657a24d05p-1", "0x1.5ceeadb373fb1p-5", "0x1.9e0789ca7e358p-5"]
    assert random.normal(KEY, (3,), np.float32).tolist() == \
        [0.6133758425712585, 0.04259428009390831, 0.050540704280138016]


GOLDEN = {
    "randint": (lambda k: random.randint(k, (6,), 0, 100), [81, 49, 43, 60, 91, 80]),
    "bernoulli": (lambda k: random.bernoulli(k, 0.5, (6,)),
                  [True, True, True, True, False, False]),
    "rademacher": (lambda k: random.rademacher(k, (6,)), [1, 1, 1, 1, -1, -1]),
    "categorical": (lambda k: random.categorical(k, np.log([0.2, 0.3, 0.5]), shape=(6,)),
                    [2, 1, 2, 2, 1, 2]),
    "choice": (lambda k: random.choice(k, 10, (4,)), [1, 9, 3, 0]),
    "choice_without": (lambda k: random.choice(k, 10, (4,), replace=False), [7, 2, 1, 0]),
    "choice_p": (lambda k: random.choice(k, 4, (5,), p=np.array([0.1, 0.2, 0.3, 0.4])),
                 [3, 3, 3, 3, 0]),
    "choice_p_without": (lambda k: random.choice(k, 4, (3,), replace=False,
                                                 p=np.array([0.1, 0.2, 0.3, 0.4])), [3, 2, 0]),
    "permutation": (lambda k: random.permutation(k, 6), [2, 1, 0, 3, 5, 4]),
    "poisson": (lambda k: random.poisson(k, np.array([0.5, 3.0, 12.0, 400.0])),
                [1, 1, 8, 391]),
    "exponential": (lambda k: random.exponential(k, (2,)),
                    [0.18939213394170878, 0.020045710222591835]),
    "gumbel": (lambda k: random.gumbel(k, (2,)), [-0.563686113761085, -1.3660269104658402]),
    "laplace": (lambda k: random.laplace(k, (2,)), [1.06399040593192, 3.226599033776405]),
    "logistic": (lambda k: random.logistic(k, (2,)),
                 [-1.567745452550157, -3.899700504113761]),
    "cauchy": (lambda k: random.cauchy(k, (2,)), [-1.6605454199582197, -16.018100676789704]),
    "gamma": (lambda k: random.gamma(k, np.array([0.3, 1.0, 5.0])),
              [0.00026227208418422255, 1.744162998545424, 6.292895166269014]),
    "beta": (lambda k: random.beta(k, 2.0, 3.0, (2,)),
             [0.5685571430349821, 0.14383472825288837]),
    "dirichlet": (lambda k: random.dirichlet(k, np.array([1.0, 2.0, 3.0])),
                  [0.0010087534092569574, 0.44563241514994173, 0.5533588314408013]),
    "t": (lambda k: random.t(k, 4.0, (2,)), [-0.5155776467679581, 0.21364697352506623]),
    "truncated_normal": (lambda k: random.truncated_normal(k, -1.0, 2.0, (2,)),
                         [-0.5247055238596049, -0.9349726793420079]),
    "multivariate_normal": (lambda k: random.multivariate_normal(
        k, np.array([1.0, -1.0]), np.array([[2.0, 0.5], [0.5, 1.0]])),
        [1.863625953857777, -0.7124907736642987]),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_samples(name):
    draw, expected = GOLDEN[name]
    got = np.asarray(draw(KEY))
    if got.dtype.kind == "f":
        # the C library's log, tan and erf may differ in the last place
        np.testing.assert_allclose(got, expected, rtol=1e-13)
    else:
        assert got.tolist() == expected


# ---------------------------------------------------------------------------
# The kernels and the array code give the same bits
# ---------------------------------------------------------------------------


def _array_code_only(fn):
    saved = dict(rp._CPU_KERNELS)
    rp._CPU_KERNELS.clear()
    try:
        return fn()
    finally:
        rp._CPU_KERNELS.update(saved)


DRAWS = [
    (rp.random_bits, np.uint8), (rp.random_bits, np.uint16), (rp.random_bits, np.uint32),
    (rp.random_bits, np.uint64), (rp.random_uniform, np.float16),
    (rp.random_uniform, np.float32), (rp.random_uniform, np.float64),
    (rp.random_normal, np.float32), (rp.random_normal, np.float64),
]


@pytest.mark.parametrize("draw, dtype", DRAWS)
@pytest.mark.parametrize("n", [0, 1, 2, 255, 256, 513])
def test_kernels_and_array_code_give_the_same_bits(draw, dtype, n):
    keys = np.array([[0, 42], [7, 9], [0xFFFFFFFF, 5]], np.uint32)
    fast = draw(keys, (n,), dtype)
    slow = _array_code_only(lambda: draw(keys, (n,), dtype))
    assert fast.dtype == slow.dtype == np.dtype(dtype) and fast.shape == (3, n)
    np.testing.assert_array_equal(fast.view(f"u{fast.dtype.itemsize}"),
                                  slow.view(f"u{slow.dtype.itemsize}"))


def test_kernels_split_and_fold_in_as_the_array_code():
    keys = np.array([[0, 42], [7, 9]], np.uint32)
    for fn in (lambda: rp.random_split(keys, (5,)),
               lambda: rp.random_fold_in(keys, np.array([3, 2**31], np.uint32))):
        np.testing.assert_array_equal(fn(), _array_code_only(fn))
    assert random_kernels.words32.__name__ == "words32"


def test_normals_match_box_muller_with_numpy_functions():
    z = random.normal(KEY, (1001,))
    pairs = 501
    bits = random.bits(KEY, (2 * pairs,))
    u = ((bits >> np.uint64(12)) | np.uint64(0x3FF0000000000000)).view(np.float64) - 1.0
    radius = np.sqrt(-2 * np.log1p(-u[:pairs]))
    angle = 2 * np.pi * u[pairs:]
    expected = np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])[:1001]
    np.testing.assert_allclose(z, expected, rtol=1e-13, atol=1e-15)


# ---------------------------------------------------------------------------
# The same numbers eagerly, under jit (every call, compiled code too) and vmap
# ---------------------------------------------------------------------------

SAMPLERS = {
    "uniform": lambda k: random.uniform(k, (3,), minval=-1.0, maxval=2.0),
    "normal": lambda k: random.normal(k, (3,), np.float32),
    "bits": lambda k: random.bits(k, (3,)),
    "randint": lambda k: random.randint(k, (3,), -5, 5),
    "gamma": lambda k: random.gamma(k, np.array([0.5, 2.0, 9.0])),
    "poisson": lambda k: random.poisson(k, np.array([1.0, 30.0])),
    "categorical": lambda k: random.categorical(k, np.zeros((2, 4))),
    "permutation": lambda k: random.permutation(k, np.arange(5.0)),
    "split": lambda k: random.split(k, 3),
    "fold_in": lambda k: random.fold_in(k, 5),
    "dropout": lambda k: nn.dropout(np.ones(8), 0.5, k),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_the_same_key_gives_the_same_numbers_eagerly_jitted_and_vmapped(name):
    draw = SAMPLERS[name]
    keys = random.split(KEY, 4)
    eager = np.stack([draw(k) for k in keys])
    jitted = fgrad.jit(draw)
    # a new key on every call: the draw happens at run time
    np.testing.assert_array_equal(np.stack([jitted(k) for k in keys]), eager)
    np.testing.assert_array_equal(fgrad.vmap(draw)(keys), eager)
    np.testing.assert_array_equal(fgrad.jit(fgrad.vmap(draw))(keys), eager)


@pytest.mark.skipif(not native.available(), reason="llvmlite missing")
def test_a_jitted_program_draws_afresh_on_every_call(monkeypatch):
    monkeypatch.setenv(PROGRAM_ENV, "all")

    def step(x, key):
        noise = random.normal(key, (4,))
        return fnp.tanh(x + 0.1 * noise) * 2.0 + random.uniform(key, (4,))
    jitted = fgrad.jit(step, compile="sync")          # the program from the first call
    x = np.linspace(-1, 1, 4)
    for k in random.split(KEY, 12):
        np.testing.assert_allclose(jitted(x, k), step(x, k), rtol=1e-13)
    assert jitted.compile_info()[0].tier == "program"


@pytest.mark.skipif(not native.available(), reason="llvmlite missing")
@pytest.mark.parametrize("name", ["uniform", "normal", "bits", "split", "fold_in", "dropout",
                                  "gamma"])
def test_a_jitted_program_draws_in_its_own_code_the_bits_of_eager(monkeypatch, name):
    monkeypatch.setenv(PROGRAM_ENV, "all")
    draw = SAMPLERS[name]
    jitted = fgrad.jit(lambda k: (draw(k), random.normal(k, (5,)),
                                  random.uniform(k, (2, 3), np.float32)))
    jitted(KEY)
    assert jitted.wait_compiled()
    (info,) = jitted.compile_info()
    # every draw on keys is a loop of the program; gamma's rejection rounds
    # (a loop of their own) stay its primitive's NumPy code
    assert info.tier == "program"
    assert [c.split(": ")[1] for c in info.callouts] == (["random_gamma"] if name == "gamma"
                                                         else [])
    for k in random.split(KEY, 3):
        for got, want in zip(jitted(k), (draw(k), random.normal(k, (5,)),
                                         random.uniform(k, (2, 3), np.float32))):
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(not native.available(), reason="llvmlite missing")
@pytest.mark.parametrize("n", [1, 2, 255, 257, 513])
def test_a_programs_draws_on_a_stack_of_keys_are_the_kernels_bits(n):
    # several keys (a draw each), odd and even sizes past a block of counters,
    # every mode and dtype a program's loop writes; the graph's draws are
    # its primitives' own, so eager runs the kernels on the same keys
    keys = random.split(KEY, (2, 2))
    draws = [(rp.random_bits, np.uint32), (rp.random_bits, np.uint64),
             (rp.random_uniform, np.float32), (rp.random_uniform, np.float64),
             (rp.random_normal, np.float32), (rp.random_normal, np.float64)]

    def f(keys):
        return [draw(keys, (n,), dtype) for draw, dtype in draws] + [
            rp.random_split(keys, (3,)), rp.random_fold_in(keys, np.uint32([[1, 2], [3, 4]]))]
    compiled = compile_program(fgrad.make_graph(f)(keys))
    assert compiled.callouts == []
    for got, want in zip(compiled.call(keys), f(keys)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def test_vmap_gives_each_example_its_own_stream():
    keys = random.split(KEY, 8)
    rows = fgrad.vmap(lambda k: random.normal(k, (1000,)))(keys)
    corr = np.corrcoef(rows)
    assert np.abs(corr[np.triu_indices(8, 1)]).max() < 0.15
    # a key shared by the batch (in_axes None) is the same draw for everyone
    same = fgrad.vmap(lambda x, k: x + random.normal(k, (3,)), in_axes=(0, None))(
        np.zeros((2, 3)), KEY)
    np.testing.assert_array_equal(same[0], same[1])


def test_keys_through_pytrees_scan_fori_loop_and_dask():
    state = {"key": KEY, "x": np.zeros(3)}
    leaves, tree = fgrad.tree.tree_flatten(state)
    assert fgrad.tree.tree_unflatten(tree, leaves)["key"] is KEY

    def walk(carry, _):
        key, x = carry
        key, sub = random.split(key)
        x = x + random.normal(sub, (3,))
        return (key, x), x

    (key, x), xs = fgrad.jit(lambda c: fgrad.lax.scan(walk, c, None, length=5))(
        (KEY, np.zeros(3)))
    carry = (KEY, np.zeros(3))
    for i in range(5):
        carry, y = walk(carry, None)
        np.testing.assert_allclose(xs[i], y, rtol=1e-15)
    np.testing.assert_array_equal(key, carry[0])

    def body(i, x):
        return x + random.uniform(random.fold_in(KEY, i), (2,))
    looped = fgrad.jit(lambda: fgrad.lax.fori_loop(0, 4, body, np.zeros(2)))()
    np.testing.assert_allclose(looped, sum(random.uniform(random.fold_in(KEY, i), (2,))
                                           for i in range(4)), rtol=1e-15)

    dask = pytest.importorskip("dask")
    task = dask.delayed(random.normal)(KEY, (3,))
    np.testing.assert_array_equal(task.compute(scheduler="sync"), random.normal(KEY, (3,)))


ON_ANY_BACKEND = [
    (lambda k: random.normal(k, (5,)), ()),
    (lambda k: random.uniform(k, (5,), np.float32), ()),
    (lambda k: random.bits(k, (3,), np.uint32), ()),
    (lambda k: random.split(k), ()),
    (lambda k: random.fold_in(k, 3), ()),
    (lambda k, a: random.gamma(k, a), (np.array([0.5, 4.0]),)),
    (lambda k, lam: random.poisson(k, lam), (np.array([2.0, 50.0]),)),
    (lambda k: random.gamma(k, 2.0, (3,)), ()),
    (lambda k: random.beta(k, 2.0, 0.5, (3,)), ()),
    (lambda k: random.t(k, 3.0, (3,)), ()),
    (lambda k: random.poisson(k, 4.0, (3,)), ()),
    (lambda k: random.randint(k, (3,), 0, 9), ()),
    (lambda k: random.uniform(k, (3,), minval=-2.0, maxval=1.0), ()),
    (lambda k, p: random.choice(k, 5, (3,), p=p), (np.full(5, 0.2),)),
    (lambda k: random.permutation(k, 6), ()),
    (lambda k: random.exponential(k, (3,)), ()),
    (lambda k: random.cauchy(k, (3,), np.float32), ()),
    (lambda k: random.normal(k, (3,), np.complex128), ()),
    (lambda k: random.truncated_normal(k, -1.0, 0.5, (3,)), ()),
    (lambda k, x: nn.dropout(x, 0.5, k), (np.ones(4),)),
]


@pytest.mark.parametrize("i", range(len(ON_ANY_BACKEND)))
def test_draws_on_another_backend_equal_numpys(i):
    draw, args = ON_ANY_BACKEND[i]
    host = draw(KEY, *args)
    with registered():
        out = draw(to_standin(KEY), *map(to_standin, args))
        assert type(out).__name__ == "StandInArray"
        np.testing.assert_array_equal(to_numpy(out), host)


# ---------------------------------------------------------------------------
# Types and shapes
# ---------------------------------------------------------------------------


def test_dtypes_default_to_float64_and_float32_stays():
    for draw in (random.uniform, random.normal, random.exponential, random.gumbel,
                 random.laplace, random.logistic, random.cauchy):
        assert draw(KEY, (2,)).dtype == np.float64
        assert draw(KEY, (2,), np.float32).dtype == np.float32
    for draw in (lambda dt: random.gamma(KEY, 2.0, (2,), dt),
                 lambda dt: random.beta(KEY, 2.0, 2.0, (2,), dt),
                 lambda dt: random.t(KEY, 3.0, (2,), dt),
                 lambda dt: random.dirichlet(KEY, np.ones(3), dtype=dt),
                 lambda dt: random.truncated_normal(KEY, -1.0, 1.0, (2,), dt),
                 lambda dt: random.multivariate_normal(KEY, np.zeros(2), np.eye(2), dtype=dt)):
        assert draw(None).dtype == np.float64 and draw(np.float32).dtype == np.float32
    assert random.normal(KEY, (2,), np.complex128).dtype == np.complex128
    assert random.randint(KEY, (2,), 0, 3, np.int32).dtype == np.int32
    assert random.bits(KEY).dtype == np.uint64 and random.bits(KEY).shape == ()
    g = fgrad.grad(lambda a: fnp.sum(random.gamma(KEY, a, (3,))))(np.float32(2.0))
    assert g.dtype == np.float32


def test_choice_and_permutation_of_arrays_along_an_axis():
    x = np.arange(12.0).reshape(3, 4)
    rows = random.permutation(KEY, x)
    assert sorted(rows[:, 0].tolist()) == [0.0, 4.0, 8.0]
    cols = random.permutation(KEY, x, axis=1, independent=True)
    assert all(sorted(r) == sorted(s) for r, s in zip(cols.tolist(), x.tolist()))
    picked = random.choice(KEY, x, (2,), replace=False, axis=1)
    assert picked.shape == (3, 2) and len(set(picked[0].tolist())) == 2
    assert random.choice(KEY, 5, (2, 2)).shape == (2, 2)


# ---------------------------------------------------------------------------
# Gradients: pathwise through location and scale, implicit through shapes
# ---------------------------------------------------------------------------


def test_pathwise_gradients_through_location_scale_and_bounds():
    z = random.normal(KEY, (4,))
    g = fgrad.grad(lambda mu, s: fnp.sum(mu + s * random.normal(KEY, (4,))), (0, 1))(0.5, 2.0)
    np.testing.assert_allclose(g, (4.0, z.sum()))
    u = random.uniform(KEY, (4,))
    lo, hi = fgrad.grad(lambda a, b: fnp.sum(random.uniform(KEY, (4,), minval=a, maxval=b)),
                        (0, 1))(-1.0, 3.0)
    np.testing.assert_allclose((lo, hi), ((1 - u).sum(), u.sum()), rtol=1e-12)

    def tn(lower, upper):
        return fnp.sum(random.truncated_normal(KEY, lower, upper, (5,)))
    got = fgrad.grad(tn, (0, 1))(-0.5, 1.5)
    h = 1e-6
    fd = ((tn(-0.5 + h, 1.5) - tn(-0.5 - h, 1.5)) / (2 * h),
          (tn(-0.5, 1.5 + h) - tn(-0.5, 1.5 - h)) / (2 * h))
    np.testing.assert_allclose(got, fd, rtol=1e-6)

    cov = np.array([[2.0, 0.3], [0.3, 1.0]])
    fgrad.testing.check_grads(
        lambda m, c: random.multivariate_normal(KEY, m, c @ c.T, (3,)),
        (np.array([0.5, -1.0]), np.linalg.cholesky(cov)), order=1)


def _quantile_gradient(a, x):
    """d/da of Gamma(a)'s quantile at the probability of ``x``, by central
    differences of SciPy's inverse incomplete gamma function."""
    u = sc.gammainc(a, x)
    h = 1e-6 * a
    return (sc.gammaincinv(a + h, u) - sc.gammaincinv(a - h, u)) / (2 * h)


def test_gamma_gradient_is_the_implicit_reparameterization_gradient():
    a = np.array([0.05, 0.4, 1.0, 2.5, 8.0, 60.0, 700.0])
    x = random.gamma(KEY, a)
    grad = fgrad.vjp(lambda a: random.gamma(KEY, a), a)[1](np.ones(7))[0]
    np.testing.assert_allclose(grad, _quantile_gradient(a, x), rtol=2e-5)
    _, tangent = fgrad.jvp(lambda a: random.gamma(KEY, a), (a,), (np.ones(7),))
    np.testing.assert_allclose(tangent, grad, rtol=1e-12)
    jitted = fgrad.jit(fgrad.grad(lambda a: fnp.sum(random.gamma(KEY, a))))(a)
    np.testing.assert_allclose(jitted, grad, rtol=1e-12)


def test_beta_dirichlet_and_t_gradients_follow_their_quantiles():
    key_a, key_b = random.split(KEY)
    a, b = 2.0, 3.5
    x = random.beta(KEY, a, b, (3,))
    ga, gb = random.gamma(key_a, a, (3,)), random.gamma(key_b, b, (3,))
    s = ga + gb
    # x = ga / (ga + gb): the chain rule over the two gammas' implicit gradients
    want_a = gb / s ** 2 * _quantile_gradient(np.full(3, a), ga)
    want_b = -ga / s ** 2 * _quantile_gradient(np.full(3, b), gb)
    got = fgrad.jacrev(lambda a, b: random.beta(KEY, a, b, (3,)), (0, 1))(a, b)
    np.testing.assert_allclose(got, (want_a, want_b), rtol=1e-4)
    np.testing.assert_allclose(x, ga / s, rtol=1e-14)
    # and the beta's own quantile at fixed probability, from SciPy
    u = sc.betainc(a, b, x)
    h = 1e-6
    fd_a = (sc.betaincinv(a + h, b, u) - sc.betaincinv(a - h, b, u)) / (2 * h)
    assert np.all(np.sign(fd_a) == np.sign(got[0]))

    alpha = np.array([0.7, 2.0, 4.0])
    jac = fgrad.jacrev(lambda al: random.dirichlet(KEY, al))(alpha)
    np.testing.assert_allclose(jac.sum(axis=0), 0.0, atol=1e-12)  # stays on the simplex
    g = fgrad.grad(lambda df: fnp.sum(random.t(KEY, df, (4,))))(5.0)
    assert np.isfinite(g)


def test_gamma_gradient_has_no_second_derivative_yet():
    with pytest.raises(MissingRuleError, match="second derivatives of fgrad.random.gamma"):
        fgrad.hessian(lambda a: fnp.sum(random.gamma(KEY, a, (2,))))(2.0)


def test_dropout_in_a_jitted_training_step_draws_a_new_mask_per_key():
    def loss(w, x, key):
        h = nn.dropout(fnp.tanh(x @ w), 0.5, key)
        return fnp.mean(h ** 2)
    step = fgrad.jit(fgrad.value_and_grad(loss))
    w = np.full((3, 4), 0.5)
    x = np.ones((2, 3))
    k1, k2 = random.split(KEY)
    (v1, g1), (v2, g2) = step(w, x, k1), step(w, x, k2)
    np.testing.assert_allclose(g1, fgrad.grad(loss)(w, x, k1), rtol=1e-13)
    assert not np.array_equal(g1, g2)
    np.testing.assert_array_equal(step(w, x, k1)[1], g1)


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


def test_a_numpy_generator_under_jit_or_vmap_is_refused():
    rng = np.random.default_rng(0)
    x = np.ones((4, 6))
    with pytest.raises(StatefulRandomnessError, match=r"jit\(<lambda>\)'s argument 'r' is a "
                       r"NumPy Generator.*drawn from once, while tracing.*fgrad.random key"):
        fgrad.jit(lambda x, r: nn.dropout(x, 0.5, r))(x, rng)
    with pytest.raises(StatefulRandomnessError, match="static argument 'r' is a NumPy"):
        fgrad.jit(lambda x, r: x, static_argnums=1)(x, rng)
    with pytest.raises(StatefulRandomnessError, match=r"vmap\(<lambda>\)'s argument 1 is a "
                       "NumPy RandomState"):
        fgrad.vmap(lambda x, r: x, in_axes=(0, None))(x, np.random.RandomState(0))
    with pytest.raises(StatefulRandomnessError, match=r"dropout's random source \(used "
                       r"inside jit\) is a NumPy Generator"):
        fgrad.jit(lambda x: nn.dropout(x, 0.5, rng))(x)
    with pytest.raises(StatefulRandomnessError, match=r"\(used inside vmap\)"):
        fgrad.vmap(lambda x: nn.dropout(x, 0.5, rng))(x)
    with pytest.raises(StatefulRandomnessError, match="he_normal's random source"):
        fgrad.jit(lambda x: x @ nn.he_normal(rng, (6, 2), np.float64))(x)
    # eagerly, and under grad (which runs on real values), a Generator still works
    assert nn.dropout(x, 0.5, rng).shape == x.shape
    g = fgrad.grad(lambda x: fnp.sum(nn.dropout(x, 0.5, 3)))(x)
    np.testing.assert_array_equal(g, nn.dropout(x, 0.5, 3))
    assert nn.he_normal(rng, (3, 2)).dtype == np.float32


def test_not_a_key_is_refused_with_a_fix():
    with pytest.raises(RandomKeyError, match=r"normal: key must be a uint32 array of shape "
                       r"\(2,\), got a int .*pass fgrad.random.key\(0\)"):
        random.normal(0, (2,))
    with pytest.raises(RandomKeyError, match=r"batch of keys: draw with each by fgrad.vmap"):
        random.uniform(random.split(KEY, 3), (2,))
    with pytest.raises(RandomKeyError, match="wrap_key_data"):
        random.normal(np.array([1, 2]), (2,))
    with pytest.raises(RandomKeyError, match="not NumPy generators"):
        random.split(np.random.default_rng(0))
    with pytest.raises(RandomKeyError, match=r"keys are uint32 arrays of shape \(\.\.\., 2\)"):
        random.wrap_key_data(np.zeros(3, np.uint32))


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(RandomArgumentError, match="uniform: dtype must be a float dtype"):
        random.uniform(KEY, (2,), np.int32)
    with pytest.raises(RandomArgumentError, match=r"do not broadcast to the shape \(2,\)"):
        random.uniform(KEY, (2,), minval=np.zeros(3))
    with pytest.raises(RandomArgumentError, match="cannot take 5 draws without replacement"):
        random.choice(KEY, 3, (5,), replace=False)
    with pytest.raises(RandomArgumentError, match=r"p must have shape \(3,\)"):
        random.choice(KEY, 3, (2,), p=np.ones(4) / 4)
    with pytest.raises(RandomArgumentError, match="seed must be an integer"):
        random.key(1.5)
    with pytest.raises(RandomArgumentError, match="shape must not have negative sizes"):
        random.normal(KEY, (-1,))
    with pytest.raises(RandomArgumentError, match="method must be 'cholesky', 'eigh' or "):
        random.multivariate_normal(KEY, np.zeros(2), np.eye(2), method="qr")
    with pytest.raises(RandomArgumentError, match="the only generator is 'threefry2x32'"):
        random.key(0, impl="rbg")


def test_invalid_parameters_give_nan_or_minus_one_not_a_hang():
    assert np.isnan(random.gamma(KEY, np.array([-1.0, np.nan]))).all()
    assert random.gamma(KEY, np.inf) == np.inf
    assert random.poisson(KEY, np.array([-1.0, np.nan, np.inf, 0.0])).tolist() == [-1, -1, -1, 0]
