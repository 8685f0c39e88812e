"""Concurrency and memory under load (issue 19): eight threads get bitwise the
results of one; fresh functions do not accumulate; a long Python loop under
grad does not recurse per operation."""
import gc
import sys
import threading

import numpy as np
import pytest

import fgrad
import fgrad.numpy as fnp


def _loss(w, x):
    return fnp.sum(fnp.tanh(x @ w) ** 2)


_per_example = fgrad.vmap(fgrad.grad(_loss), in_axes=(None, 0))
TRANSFORMS = {
    "grad": fgrad.grad(_loss),
    "jit(grad)": fgrad.jit(fgrad.grad(_loss)),
    "vmap(grad)": lambda w, x: _per_example(w, x[:, None, :]),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_eight_threads_get_bitwise_what_one_thread_gets(name):
    fun = TRANSFORMS[name]
    rng = np.random.default_rng(7)
    problems = [(rng.normal(size=(3, 2)), rng.normal(size=(4, 3))) for _ in range(8)]
    # jit's compiled tiers take over from the second call on, and from then
    # on its results may differ from the first calls' in the last bits (sums
    # in order where NumPy sums pairwise): reach the last tier before taking
    # the reference
    fun(*problems[0]), fun(*problems[0])
    if hasattr(fun, "wait_compiled"):
        assert fun.wait_compiled()
    alone = [fun(w, x) for w, x in problems]          # one thread, one at a time
    results = [[] for _ in problems]
    errors = []
    barrier = threading.Barrier(len(problems))

    def work(i):
        try:
            barrier.wait()
            for _ in range(25):                        # many interleavings
                results[i].append(fun(*problems[i]))
        except Exception as err:                     # reported in the main thread
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(problems))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for got, want in zip(results, alone):
        for g in got:
            np.testing.assert_array_equal(g, want)     # bitwise, not approximately


def test_two_thousand_fresh_functions_leave_memory_flat():
    """A new closure per call (the usual lambda in a training loop) must not be
    kept by any cache: 850 more calls after 1,150 retain no more than noise."""
    w, x = np.full((3, 2), 0.1), np.ones((4, 3))

    def call(k):
        scale = 1.0 + k * 1e-6
        fgrad.grad(lambda w: _loss(w * scale, x))(w)
        fgrad.jit(lambda w: _loss(w, x) * scale)(w)
        fgrad.vmap(lambda v: fnp.sin(v) * scale)(x)

    for k in range(300):
        call(k)                                      # warm NumPy's and fgrad's caches
    # allocated blocks, not tracemalloc: tracing every allocation of 2,000
    # traces and compilations would make this the slowest test of the suite.
    # A leak grows in both halves; the first half also sees bounded caches fill
    # and what earlier tests in this process left behind be collected, so only
    # the second half is held to a bound.
    gc.collect()
    counts = [sys.getallocatedblocks()]
    for _ in range(2):
        for k in range(850):
            call(k)
        gc.collect()
        counts.append(sys.getallocatedblocks())
    first, second = counts[1] - counts[0], counts[2] - counts[1]
    assert second < 500, (
        f"{second} more memory blocks after 850 more calls with fresh functions "
        f"({first} in the 850 before)")


def test_a_hundred_thousand_operation_loop_under_grad_does_not_recurse():
    n = 100_000

    def f(x):
        for _ in range(n):
            x = x * 1.0000001
        return fnp.sum(x)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)          # far below n: any recursion per operation fails
    try:
        g = fgrad.grad(f)(np.ones(2))
    finally:
        sys.setrecursionlimit(limit)
    np.testing.assert_allclose(g, 1.0000001 ** n * np.ones(2), rtol=1e-9)
