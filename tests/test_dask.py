"""fgrad.dask: exact gradients over row-chunked Dask arrays.

Against ``fgrad.value_and_grad`` on the concatenated NumPy data (rtol 1e-12) on
Dask's threaded scheduler and on a real ``LocalCluster`` of two worker
processes; the per-process cache of compiled per-chunk functions; readable
task names; bad input refused before anything runs; a loss that raises on one
chunk; a worker killed mid-gradient; data on disk (zarr) several times the
workers' memory limit. Without dask installed, ``import fgrad.dask`` works and
calling it says what to install.
"""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import fgrad
import fgrad.dask as fdask
import fgrad.numpy as fnp
from fgrad import optim
from fgrad.errors import ArgnumError, DaskArgumentError, OptionalDependencyError

try:
    import cloudpickle
    import dask
    import dask.array as da
    from dask.callbacks import Callback
    from distributed import Client, LocalCluster, get_task_stream
except ImportError:          # the fallback test below still runs
    dask = None

needs_dask = pytest.mark.skipif(dask is None, reason="needs pip install 'fgrad[dask]'")

RTOL = 1e-12
ROWS, FEATURES = 53, 4
UNEVEN = (10, 20, 7, 16)          # row chunks of unequal sizes, the last one odd


def _data(rows=ROWS, features=FEATURES, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, features))
    y = (rng.random(rows) < 0.5).astype(float)
    return X, y


PARAMS = {"w": np.linspace(-0.5, 0.5, FEATURES), "b": (np.array(0.1),)}


def logistic(params, X, y):
    z = X @ params["w"] + params["b"][0]
    return fnp.mean(fnp.logaddexp(0.0, z) - y * z)


def logistic_sum(params, X, y):
    z = X @ params["w"] + params["b"][0]
    return fnp.sum(fnp.logaddexp(0.0, z) - y * z)


def logistic_with_aux(params, X, y):
    z = X @ params["w"] + params["b"][0]
    return fnp.mean(fnp.logaddexp(0.0, z) - y * z), {"mean_z": fnp.mean(z),
                                                      "sq": fnp.mean(z * z)}


def _chunked(X, y, chunks=UNEVEN):
    return da.from_array(X, chunks=(chunks, -1)), da.from_array(y, chunks=(chunks,))


def _assert_tree_close(actual, expected):
    assert fgrad.tree.tree_structure(actual) == fgrad.tree.tree_structure(expected)
    for a, e in zip(fgrad.tree.tree_leaves(actual), fgrad.tree.tree_leaves(expected)):
        np.testing.assert_allclose(a, e, rtol=RTOL, atol=0)


# ---------------------------------------------------------------------------
# Threaded scheduler (no Client): exactness, the cache, the graph
# ---------------------------------------------------------------------------


@needs_dask
@pytest.mark.parametrize("chunks", [UNEVEN, (53,), (1,) * 53, (25, 25, 3)],
                         ids=["uneven", "one", "rows", "even-plus-tail"])
@pytest.mark.parametrize("use_jit", [True, False], ids=["jit", "eager"])
def test_mean_loss_matches_the_in_memory_gradient(chunks, use_jit):
    X, y = _data()
    Xd, yd = _chunked(X, y, chunks)
    value, grads = fdask.value_and_grad(logistic, jit=use_jit)(PARAMS, Xd, yd)
    ref_value, ref_grads = fgrad.value_and_grad(logistic)(PARAMS, X, y)
    np.testing.assert_allclose(value, ref_value, rtol=RTOL)
    _assert_tree_close(grads, ref_grads)


@needs_dask
def test_sum_loss_has_aux_and_several_argnums():
    X, y = _data()
    Xd, yd = _chunked(X, y)
    g = fdask.grad(logistic_sum, reduce="sum")(PARAMS, Xd, yd)
    _assert_tree_close(g, fgrad.grad(logistic_sum)(PARAMS, X, y))

    grads, aux = fdask.grad(logistic_with_aux, has_aux=True)(PARAMS, Xd, yd)
    ref_grads, ref_aux = fgrad.grad(logistic_with_aux, has_aux=True)(PARAMS, X, y)
    _assert_tree_close(grads, ref_grads)
    _assert_tree_close(aux, ref_aux)

    # the data in the middle, two differentiated arguments around it
    def split(w, X, b, y):
        return logistic({"w": w, "b": (b,)}, X, y)
    got = fdask.grad(split, argnums=(0, 2), batch_args=(1, 3))(PARAMS["w"], Xd,
                                                                PARAMS["b"][0], yd)
    _assert_tree_close(got, fgrad.grad(split, argnums=(0, 2))(PARAMS["w"], X,
                                                              PARAMS["b"][0], y))


@needs_dask
def test_the_compiled_chunk_function_is_reused_per_chunk_shape():
    traces = []

    def loss(w, X, y):
        traces.append(X.shape)          # Python runs only while jit traces
        return fnp.mean((X @ w - y) ** 2)

    X, y = _data()
    Xd, yd = _chunked(X, y, (10,) * 5 + (3,))
    g = fdask.grad(loss)
    with dask.config.set(scheduler="synchronous"):
        for _ in range(3):
            g(PARAMS["w"], Xd, yd)
    assert sorted(traces) == [(3, FEATURES), (10, FEATURES)]


def _fgrad_task_prefixes(chunks, params, **options):
    """The names of the fgrad tasks in the graph of one gradient call, after
    checking its result."""
    X, y = _data()
    Xd, yd = _chunked(X, y, chunks)
    started = []

    class Record(Callback):
        def _start(self, dsk):
            started.append(dict(dsk))
    with Record():
        g = fdask.grad(logistic)(params, Xd, yd)
    _assert_tree_close(g, fgrad.grad(logistic)(params, X, y))
    (graph,) = started
    prefixes = [(k[0] if isinstance(k, tuple) else k).rsplit("-", 1)[0] for k in graph]
    return [p for p in prefixes if p.startswith("fgrad")]


@needs_dask
def test_the_graph_has_readable_names_and_returns_only_the_result():
    prefixes = _fgrad_task_prefixes((3,) * 17 + (2,), PARAMS)
    assert prefixes.count("fgrad-grad-chunk") == 18
    # 18 chunks, 16 per combine: two combines, then the last task adds them up
    assert prefixes.count("fgrad-grad-combine") == 2
    assert prefixes.count("fgrad-grad") == 1
    # small parameters ride inside every chunk task: no key of their own
    assert len(prefixes) == 21
    # up to 16 chunks: the last task adds up the chunks' results itself
    assert sorted(set(_fgrad_task_prefixes(UNEVEN, PARAMS))) == ["fgrad-grad",
                                                                "fgrad-grad-chunk"]


@needs_dask
def test_large_parameters_are_one_key_shared_by_every_chunk(monkeypatch):
    # the parameters' arrays, once per chunk (4 x 40 bytes), exceed the limit
    monkeypatch.setattr(fdask, "INLINE_BYTES", 100)
    prefixes = _fgrad_task_prefixes(UNEVEN, PARAMS)
    assert prefixes.count("fgrad-params") == 1
    assert prefixes.count("fgrad-grad-chunk") == 4


# ---------------------------------------------------------------------------
# Bad input: a specific error, and nothing runs
# ---------------------------------------------------------------------------


@needs_dask
def test_bad_input_is_refused_before_any_task_runs():
    X, y = _data()
    Xd, yd = _chunked(X, y)
    started = []

    class Record(Callback):
        def _start(self, dsk):
            started.append(dsk)

    g = fdask.grad(logistic)
    cases = [
        ((PARAMS, Xd, da.from_array(y, chunks=20)), DaskArgumentError,
         r"arguments 1 and 2 are chunked differently along the rows \(4 chunks: "
         r"\(10, 20, 7, 16\) vs 3 chunks: \(20, 20, 13\)\).*y.rechunk"),
        ((PARAMS, da.from_array(X, chunks=(UNEVEN, 2)), yd), DaskArgumentError,
         r"argument 1 is chunked along axis 1 \(2 chunks\); a chunk must hold whole rows: "
         r"x.rechunk\(\{1: -1\}\)"),
        ((PARAMS, Xd, y), DaskArgumentError,
         r"argument 2 is a numpy.ndarray.*must be a dask.array chunked along axis 0: "
         r"wrap it with dask.array.from_array"),
        (({"w": da.from_array(PARAMS["w"]), "b": PARAMS["b"]}, Xd, yd), DaskArgumentError,
         r"argument 0 holds a Dask collection; .* compute them first"),
        ((PARAMS, Xd), ArgnumError, r"batch_args=\(1, 2\) names argument 2, but the "
                                    r"function was called with 2 arguments"),
        ((PARAMS, Xd[Xd[:, 0] > 0], yd), DaskArgumentError,
         r"argument 1 has unknown chunk sizes; call x.compute_chunk_sizes\(\)"),
    ]
    with Record():
        for args, error, message in cases:
            with pytest.raises(error, match=message):
                g(*args)
        with pytest.raises(DaskArgumentError, match="fgrad.dask.fit: batch_chunks must be "
                                                    "None .* or a positive int, got 0"):
            fdask.fit(logistic, PARAMS, Xd, yd, optim.sgd(0.1), batch_chunks=0,
                      progress=False)
        with pytest.raises(DaskArgumentError, match="fgrad.dask.fit: argument 2 is a numpy"):
            fdask.fit(logistic, PARAMS, Xd, y, optim.sgd(0.1), progress=False)
    assert started == []

    with pytest.raises(DaskArgumentError, match=r"reduce must be 'mean' \(the loss is a mean "
                                                r"over rows\) or 'sum' .*, got 'avg'"):
        fdask.grad(logistic, reduce="avg")
    with pytest.raises(ArgnumError, match=r"argnums=1 and batch_args=\(1, 2\) overlap"):
        fdask.grad(logistic, argnums=1)
    with pytest.raises(ArgnumError, match=r"argnums=3 names argument 3, but the function was "
                                          r"called with 3 arguments"):
        fdask.grad(logistic, argnums=3)(PARAMS, Xd, yd)


@needs_dask
def test_a_loss_that_raises_on_one_chunk_names_the_chunk():
    X, y = _data()
    Xd, yd = _chunked(X, y)

    def fails_on_the_odd_chunk(params, X, y):
        if X.shape[0] == 7:             # chunk 2 (rows 30:37), seen while tracing
            raise ValueError("cannot fit this chunk")
        return logistic(params, X, y)

    with pytest.raises(ValueError, match=r"cannot fit this chunk \[fgrad.dask: raised by "
                                         r"the loss on chunk 2 \(rows 30:37\)\]"):
        fdask.grad(fails_on_the_odd_chunk)(PARAMS, Xd, yd)


# ---------------------------------------------------------------------------
# fit
# ---------------------------------------------------------------------------


@needs_dask
def test_fit_full_batch_takes_the_same_steps_as_the_in_memory_loop():
    X, y = _data()
    Xd, yd = _chunked(X, y)
    opt = optim.adam(0.05)
    result = fdask.fit(logistic, PARAMS, Xd, yd, opt, epochs=4, progress=False)
    params, state, history = PARAMS, opt.init(PARAMS), []
    for _ in range(4):
        value, grads = fgrad.value_and_grad(logistic)(params, X, y)
        updates, state = opt.update(grads, state, params)
        params = optim.apply_updates(params, updates)
        history.append(float(value))
    np.testing.assert_allclose(result.history, history, rtol=RTOL)
    _assert_tree_close(result.params, params)
    assert int(result.state[0].count) == 4          # adam: scale_by_adam counts the steps


@needs_dask
def test_fit_on_batches_of_chunks_with_a_progress_bar(capsys):
    X, y = _data()
    Xd, yd = _chunked(X, y)
    result = fdask.fit(logistic, PARAMS, Xd, yd, optim.sgd(0.5), epochs=3, batch_chunks=3)
    # 4 chunks, 3 at a time: rows 0:37, then 37:53, in every epoch
    assert len(result.history) == 6
    params = PARAMS
    for _ in range(3):
        for rows in (slice(0, 37), slice(37, 53)):
            grads = fgrad.grad(logistic)(params, X[rows], y[rows])
            params = optim.apply_updates(params, fgrad.tree.tree_map(lambda g: -0.5 * g, grads))
    _assert_tree_close(result.params, params)
    assert result.history[-2] < result.history[0]
    bar = capsys.readouterr().err
    assert "fgrad.dask.fit" in bar and "6/6" in bar and "loss=" in bar


# ---------------------------------------------------------------------------
# Without dask
# ---------------------------------------------------------------------------


def test_without_dask_import_works_and_a_call_says_what_to_install():
    # a fresh interpreter in which dask cannot be imported, installed or not
    script = textwrap.dedent("""
        import sys
        class NoDask:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("dask", "distributed", "zarr", "tqdm"):
                    raise ImportError(f"No module named {name!r} (hidden by the test)")
        sys.meta_path.insert(0, NoDask())
        import numpy as np
        import fgrad.dask
        from fgrad.errors import OptionalDependencyError
        try:
            fgrad.dask.grad(lambda w, X, y: (X @ w).sum())
        except OptionalDependencyError as err:
            print(type(err).__mro__[2].__name__, err)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("ModuleNotFoundError fgrad.dask needs dask, which is not installed")
    assert "pip install 'fgrad[dask]'" in out
    assert issubclass(OptionalDependencyError, ImportError)


# ---------------------------------------------------------------------------
# A real cluster: two worker processes
# ---------------------------------------------------------------------------

MEMORY_LIMIT = 250e6               # bytes per worker; the zarr data is several times it


@pytest.fixture(scope="module")
def client():
    if dask is None:
        pytest.skip("needs pip install 'fgrad[dask]'")
    # the functions defined here travel to the workers by value: pytest imports
    # this file as ``tests.test_dask``, a name the workers cannot import
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # a compiler costs a worker memory once it compiles a fused kernel (numba's
    # took ~150 MiB), more than these deliberately small workers have: the
    # compiled path has its own tests; these are about the cluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      memory_limit=MEMORY_LIMIT, dashboard_address=None,
                      env={"FGRAD_JIT_FUSE": "0"}) as cluster, \
            Client(cluster) as client:
        yield client


class _ByValue:
    """A function of this module, pickled by value wherever it is nested.

    Dask pickles the graph with the standard pickler first, which writes a
    module-level function as a reference to its module; only a function that
    standard pickle refuses (a local one, a lambda) goes through cloudpickle. A
    loss shipped inside the graph from here goes through this wrapper instead,
    which unpickles to the bare function on the worker.
    """

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        return self.fn(*args)

    def __reduce__(self):
        return cloudpickle.loads, (cloudpickle.dumps(self.fn),)


def _count_traces(params, X, y):
    # Python runs only while jit traces: count traces in the worker's process
    from distributed import get_worker
    worker = get_worker()
    worker.fgrad_traces = getattr(worker, "fgrad_traces", 0) + 1
    return logistic(params, X, y)


def test_a_cluster_gives_the_exact_gradient_on_both_workers(client):
    X, y = _data(rows=400)
    Xd, yd = [a.persist() for a in _chunked(X, y, (30,) * 13 + (10,))]
    g = fdask.value_and_grad(_ByValue(_count_traces))
    with get_task_stream(client) as stream:
        for _ in range(3):
            value, grads = g(PARAMS, Xd, yd)
    ref_value, ref_grads = fgrad.value_and_grad(logistic)(PARAMS, X, y)
    np.testing.assert_allclose(value, ref_value, rtol=RTOL)
    _assert_tree_close(grads, ref_grads)
    chunk_workers = {t["worker"] for t in stream.data if "fgrad-grad-chunk" in str(t["key"])}
    assert len(chunk_workers) == 2
    # compiled once per chunk shape (30 rows and 10) on each worker, not per task
    traces = client.run(lambda dask_worker: getattr(dask_worker, "fgrad_traces", 0))
    assert all(1 <= n <= 2 for n in traces.values()), traces


def _results_held(client):
    """The keys of whole gradients (not chunks) the cluster's workers hold."""
    return {key for keys in client.has_what().values() for key in keys
            if str(key).startswith("fgrad-grad-") and "chunk" not in str(key)}


def _eventually(condition, timeout=10.0):
    """Wait for ``condition()`` about the cluster, which the scheduler learns
    of a little after it happens (a key released, a chunk computed)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_gradient_function_holds_only_its_last_result_on_the_cluster(client):
    # a call's result stays until the next call's graph has gone out, so that
    # dropping it does not hold that graph back in the client's message batch
    X, y = _data()
    Xd, yd = _chunked(X, y)
    before = _results_held(client)
    g = fdask.grad(_ByValue(logistic))
    held = []
    for scale in (1.0, 2.0, 2.0):
        params = fgrad.tree.tree_map(lambda p: p * scale, PARAMS)
        _assert_tree_close(g(params, Xd, yd), fgrad.grad(logistic)(params, X, y))
        _eventually(lambda: len(_results_held(client) - before) == 1)
        held.append(_results_held(client) - before)
    assert held[0] != held[1] == held[2]       # the same arguments: the same result key
    del g
    _eventually(lambda: not _results_held(client) - before)


def test_a_failing_chunk_on_a_cluster_names_it(client):
    X, y = _data()
    Xd, yd = _chunked(X, y)

    def fails_on_the_odd_chunk(params, X, y):
        if X.shape[0] == 7:
            raise ValueError("cannot fit this chunk")
        return logistic(params, X, y)

    with pytest.raises(ValueError, match=r"cannot fit this chunk \[fgrad.dask: raised by "
                                         r"the loss on chunk 2 \(rows 30:37\)\]"):
        fdask.grad(fails_on_the_odd_chunk)(PARAMS, Xd, yd)


def test_data_on_disk_larger_than_the_workers_memory(client, tmp_path):
    pytest.importorskip("zarr")
    rows, features, chunk = 2_500_000, 40, 25_000        # 0.8 GB of float64
    assert rows * features * 8 > 3 * MEMORY_LIMIT        # three times a worker's limit
    # a block of 1000 rows repeated: the mean loss over the whole equals the mean
    # over the block, an exact reference; quick to write (it compresses well)
    # and full size in memory once read
    block_X, block_y = _data(rows=1000, features=features, seed=1)
    repeats = rows // 1000
    with dask.config.set(scheduler="threads"):       # written by this process
        da.to_zarr(da.tile(da.from_array(block_X), (repeats, 1)).rechunk((chunk, -1)),
                   str(tmp_path / "X.zarr"))
        da.to_zarr(da.tile(da.from_array(block_y), repeats).rechunk(chunk),
                   str(tmp_path / "y.zarr"))
    X, y = da.from_zarr(str(tmp_path / "X.zarr")), da.from_zarr(str(tmp_path / "y.zarr"))
    pids_before = client.run(os.getpid)
    params = {"w": np.linspace(-0.1, 0.1, features), "b": (np.array(0.2),)}
    grads = fdask.grad(_ByValue(logistic))(params, X, y)
    _assert_tree_close(grads, fgrad.grad(logistic)(params, block_X, block_y))
    assert client.run(os.getpid) == pids_before           # no worker was restarted
    if not os.path.exists("/proc/self/status"):
        return                                            # no VmHWM to read (not Linux)
    peaks = client.run(_peak_rss_bytes)
    assert all(peak < MEMORY_LIMIT for peak in peaks.values()), peaks


def _peak_rss_bytes():
    # VmHWM: the peak of this process since its exec (getrusage's ru_maxrss
    # would include what the parent held when it forked the worker)
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024


def test_a_worker_killed_mid_gradient_does_not_change_it(client):
    # last in the module: the cluster's nanny replaces the killed worker
    X, y = _data(rows=600)
    Xd, yd = _chunked(X, y, (20,) * 30)
    started = threading.Event()

    def slow(params, X, y):       # eager (jit=False), so it sleeps on every chunk
        time.sleep(0.1)
        return logistic(params, X, y)

    pids = client.run(os.getpid)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(lambda: started.set() or fdask.grad(slow, jit=False)(
            PARAMS, Xd, yd))
        started.wait()
        _eventually(lambda: _chunks_done(client), timeout=30)
        victim = sorted(pids.values())[0]
        os.kill(victim, signal.SIGKILL)
        assert not running.done()                           # killed mid-computation
        grads = running.result(timeout=120)
    _assert_tree_close(grads, fgrad.grad(logistic)(PARAMS, X, y))
    assert victim not in client.run(os.getpid).values()


def _chunks_done(client):
    """Whether a worker holds a chunk's result (the gradient is under way)."""
    return any("fgrad-grad-chunk" in str(key)
               for keys in client.has_what().values() for key in keys)
