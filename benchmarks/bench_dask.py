"""fgrad.dask: the cost of chunking, the speed-up of a second worker, memory per worker.

Run ``python -m benchmarks.bench_dask`` from the repository root (needs
``pip install -e '.[dask]'``); ``--full`` adds the out-of-core example of
docs/scaling.md: logistic regression on 10^7 rows stored in zarr, trained with
`fgrad.dask.fit` on a LocalCluster of two workers with a memory limit, with its
time and peak memory per worker. Prints a Markdown table; asserts nothing about
speed. BLAS is pinned to one thread (the benchmarks package), so the only
parallelism is Dask's: its threads, or its worker processes.

| row | what runs |
|---|---|
| `floor` | ``fgrad.value_and_grad(loss)`` on the NumPy arrays (10^6 x 64), in this process |
| `floor-jit` | the same under ``fgrad.jit`` (what each chunk task runs) |
| `threads` | ``fgrad.dask.value_and_grad``, same arrays in chunks of 10^5 rows, threads |
| `cluster-1` | a LocalCluster of 1 single-threaded worker process holding the data |
| `cluster-2` | 2 such workers |
| `mlp cluster-N` | the same with a loss of many more flops per byte (a hidden layer of 64) |
| `empty graph, cluster-N` | the gradient's graph with tasks that do nothing: Dask's cost |
| `cluster-N, back to back` | 10 calls one after another (a training loop's steps), time per call |

The data is dealt out to the workers evenly: chunk i on worker i mod N. The
rows' calls are far apart, except in the back-to-back rows.
"""
import benchmarks  # noqa: F401  (pins BLAS threads; first import)

import argparse
import collections
import contextlib
import itertools
import os
import resource
import shutil
import statistics
import tempfile
import time

import numpy as np

import fgrad
import fgrad.dask as fdask
import fgrad.numpy as fnp

try:
    import dask
    import dask.array as da
    from distributed import Client, LocalCluster, get_task_stream
except ImportError as err:      # a benchmark of fgrad.dask has nothing to run without it
    raise SystemExit(f"bench_dask needs pip install -e '.[dask]' ({err})") from err

ROWS, FEATURES, CHUNK = 10 ** 6, 64, 10 ** 5
FULL_ROWS, FULL_FEATURES, FULL_CHUNK = 10 ** 7, 16, 250_000
HIDDEN = 64
# calls made one after another in the back-to-back rows, as a training loop's steps
BACK_TO_BACK = 10


def logistic(params, X, y):
    z = X @ params["w"] + params["b"]
    return fnp.mean(fnp.logaddexp(0.0, z) - y * z)


def _params(features):
    return {"w": np.zeros(features), "b": np.zeros(())}


def mlp(params, X, y):
    """A loss with many flops per byte of data: a hidden layer of HIDDEN units."""
    h = fnp.tanh(X @ params["W"] + params["c"])
    z = h @ params["w"] + params["b"]
    return fnp.mean(fnp.logaddexp(0.0, z) - y * z)


def _interleaved_seconds(calls, repeats):
    """{name: (median, best)} seconds per call, the calls taken in turn in every
    repeat so that a busy moment of a shared machine hits them all alike."""
    for fn in calls.values():
        fn()                                # warm: compile, load, connect
    times = {name: [] for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: (statistics.median(t), min(t)) for name, t in times.items()}


def _dataset(rows, features, chunk, seed=0):
    """Random logistic-regression data as a Dask array (built where it is computed)."""
    rng = da.random.default_rng(seed)
    X = rng.standard_normal((rows, features), chunks=(chunk, features))
    w_true = np.linspace(-1.0, 1.0, features)
    y = (X @ w_true + rng.standard_normal(rows, chunks=chunk) > 0).astype(float)
    return X, y


def _peak_rss_mb():
    """This process's peak resident memory (Linux: VmHWM, which exec resets,
    unlike getrusage's ru_maxrss, which a worker inherits from its parent)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _fresh_params(features, hidden=None):
    """New parameters per call: the same ones would give the same Dask keys, and
    a cluster may answer from the previous call's results. With ``hidden``, the
    parameters of `mlp`."""
    step = itertools.count()
    if hidden is None:
        return lambda: {"w": np.full(features, 1e-3 * next(step)), "b": np.zeros(())}
    W = np.random.default_rng(0).standard_normal((features, hidden)) / np.sqrt(features)
    return lambda: {"W": W * (1 + 1e-3 * next(step)), "c": np.zeros(hidden),
                    "w": np.full(hidden, 0.1), "b": np.zeros(())}


def _on_cluster(stack, n_workers, memory_limit="2GB"):
    """A gradient call on a new LocalCluster of ``n_workers`` single-threaded
    worker processes holding the data, and that cluster's client."""
    cluster = stack.enter_context(LocalCluster(
        n_workers=n_workers, threads_per_worker=1, processes=True,
        memory_limit=memory_limit, dashboard_address=None))
    client = stack.enter_context(Client(cluster, set_as_default=False))
    X, y = _persist_evenly(client, *_dataset(ROWS, FEATURES, CHUNK))

    empty_calls, blocks = itertools.count(), X.to_delayed().reshape(-1)

    def empty_graph():
        # Dask's own cost of one call: a graph of the gradient's shape (a task
        # per chunk, on the worker that holds it, and one to finish) whose
        # tasks do nothing. Tasks with no data to depend on would be queued
        # on the scheduler and sent out a few at a time, which costs more.
        token = next(empty_calls)
        parts = [dask.delayed(_nothing, pure=True)(block, dask_key_name=("empty", token, i))
                 for i, block in enumerate(blocks)]
        total = dask.delayed(_nothing, pure=True)(*parts, dask_key_name=("finish", token))
        return total.compute(scheduler=client.get)

    def caller(loss, params):
        g = fdask.value_and_grad(loss)

        def call():
            with dask.config.set(scheduler=client.get):
                return g(params(), X, y)
        return call
    return (caller(logistic, _fresh_params(FEATURES)),
            caller(mlp, _fresh_params(FEATURES, HIDDEN)), empty_graph, client)



def _persist_evenly(client, X, y):
    """``X`` and ``y`` held on the workers with their row chunks dealt out in turn.

    ``client.persist`` places a chunk on whichever worker computes it first, a
    race that left 6 chunks on one worker and 4 on the other in one run: the
    2-worker rows then measured that split, not the gradient. Each chunk of
    ``X`` and ``y`` is computed on its worker; the arrays that join them are
    persisted too, so that their graphs are the chunks alone and the
    gradient's graph has no tasks for the joining.
    """
    workers = sorted(client.scheduler_info()["workers"])
    parts = [client.persist([X.blocks[i], y.blocks[i]], workers=[workers[i % len(workers)]])
             for i in range(X.numblocks[0])]
    return client.persist([da.concatenate([X_i for X_i, _ in parts]),
                           da.concatenate([y_i for _, y_i in parts])])


def _nothing(*args):
    return 0


def speed(repeats):
    X, y = dask.compute(*_dataset(ROWS, FEATURES, CHUNK), scheduler="threads")
    params = _params(FEATURES)
    eager = fgrad.value_and_grad(logistic)
    jitted = fgrad.jit(fgrad.value_and_grad(logistic))
    Xd, yd = da.from_array(X, chunks=(CHUNK, -1)), da.from_array(y, chunks=CHUNK)
    g, fresh = fdask.value_and_grad(logistic), _fresh_params(FEATURES)

    def threads():
        with dask.config.set(scheduler="threads"):
            return g(fresh(), Xd, yd)
    with dask.config.set(scheduler="threads"):
        check = g(params, Xd, yd)
    ref = eager(params, X, y)
    assert np.allclose(check[1]["w"], ref[1]["w"], rtol=1e-12, atol=0)
    with contextlib.ExitStack() as stack:
        one, mlp_one, empty_one, client_1 = _on_cluster(stack, 1)
        two, mlp_two, empty_two, client_2 = _on_cluster(stack, 2)
        rows = _interleaved_seconds({
            "floor": lambda: eager(params, X, y), "floor-jit": lambda: jitted(params, X, y),
            "threads": threads, "cluster-1": one, "cluster-2": two,
            "mlp cluster-1": mlp_one, "mlp cluster-2": mlp_two,
            "empty graph, cluster-1": empty_one, "empty graph, cluster-2": empty_two,
            "cluster-1, back to back": lambda: [one() for _ in range(BACK_TO_BACK)],
            "cluster-2, back to back": lambda: [two() for _ in range(BACK_TO_BACK)]},
            repeats)
        for n in (1, 2):
            rows[f"cluster-{n}, back to back"] = tuple(
                t / BACK_TO_BACK for t in rows[f"cluster-{n}, back to back"])
        peaks = {1: sorted(client_1.run(_peak_rss_mb).values()),
                 2: sorted(client_2.run(_peak_rss_mb).values())}
        memory = _memory_check(client_2, repeats)
        streams = {(1, "logistic"): _task_stream_figures(client_1, one, repeats),
                   (2, "logistic"): _task_stream_figures(client_2, two, repeats),
                   (1, "mlp"): _task_stream_figures(client_1, mlp_one, repeats),
                   (2, "mlp"): _task_stream_figures(client_2, mlp_two, repeats)}
    floor = rows["floor"][0]
    print(f"\n{ROWS:.0e} x {FEATURES} float64 ({ROWS * FEATURES * 8 / 1e6:.0f} MB), "
          f"chunks of {CHUNK:.0e} rows, {os.cpu_count()} cores, {repeats} repeats "
          f"interleaved, load average {os.getloadavg()[0]:.1f}\n")
    print("| row | median | best | median vs floor |\n|---|---|---|---|")
    for name, (median, best) in rows.items():
        print(f"| {name} | {median * 1e3:.0f} ms | {best * 1e3:.0f} ms | "
              f"{median / floor:.2f}x |")
    for label, row in (("logistic", "cluster-{}"), ("mlp", "mlp cluster-{}"),
                       ("logistic, back to back", "cluster-{}, back to back")):
        one, two = rows[row.format(1)], rows[row.format(2)]
        print(f"\n{label}: 2 workers vs 1: {one[0] / two[0]:.2f}x faster "
              f"(best: {one[1] / two[1]:.2f}x)")
    for n, p in peaks.items():
        print(f"peak RSS per worker, {n} worker(s) holding the data: "
              + ", ".join(f"{mb:.0f} MB" for mb in p))
    print(f"\nThe task stream of {repeats} more calls per cluster (medians over the calls):\n")
    print("| loss | workers | chunk tasks per worker | compute per chunk | overlap | "
          "CPU / chunk time | page faults per chunk | before the first chunk | "
          "after the last chunk | bytes between workers |\n"
          "|---|---|---|---|---|---|---|---|---|---|")
    for (n, loss), f in streams.items():
        print(f"| {loss} | {n} | {f['per_worker']} | {f['per_chunk'] * 1e3:.1f} ms | "
              f"{f['overlap']:.2f} | {f['on_core']:.2f} | {f['faults']:.0f} | "
              f"{f['head'] * 1e3:.1f} ms | {f['tail'] * 1e3:.1f} ms | "
              f"{f['transferred']:.0f} |")
    print("\nThe same arithmetic outside Dask, on the 2-worker cluster's workers: one "
          "worker alone, then both at once:\n")
    for kernel, (alone, both) in memory.items():
        print(f"{kernel}: {alone * 1e3:.1f} ms alone, {both * 1e3:.1f} ms each with both "
              f"({both / alone:.2f}x; together {2 * alone / both:.2f}x the work of one)")
    # Amdahl: the chunks' compute divides among the workers, the time outside
    # the chunk tasks does not; with each chunk at its 1-worker speed
    n_chunks = ROWS // CHUNK
    for loss in ("logistic", "mlp"):
        one, two = streams[1, loss], streams[2, loss]
        ideal_1 = one["head"] + one["tail"] + n_chunks * one["per_chunk"]
        ideal_2 = two["head"] + two["tail"] + -(-n_chunks // 2) * one["per_chunk"]
        print(f"{loss}, if two workers computed a chunk as fast as one does: "
              f"{ideal_1 * 1e3:.0f} ms vs {ideal_2 * 1e3:.0f} ms, {ideal_1 / ideal_2:.2f}x")


def _memory_check(client, repeats):
    """{kernel: (seconds alone, seconds with both workers at once)}, medians over
    ``repeats`` turns of `_kernel_seconds` on one worker, then on both."""
    first = min(client.scheduler_info()["workers"])
    alone, both = [], []
    for _ in range(repeats):
        alone.append(client.run(_kernel_seconds, workers=[first])[first])
        both.extend(client.run(_kernel_seconds).values())
    return {kernel: (statistics.median(a[kernel] for a in alone),
                     statistics.median(b[kernel] for b in both))
            for kernel in ("streaming", "in cache", "new chunk-sized array", "reused array")}


def _kernel_seconds(seconds=1.0):
    """Median seconds of kernels taken in turn for ``seconds``, so that any
    load hits them alike: a chunk's gradient arithmetic (``X.T @ tanh(X @ w)``)
    streaming a chunk of the benchmark's size from memory, the same flops on a
    block that stays in the core's cache, and one multiplication of a chunk
    written to a new array (as every NumPy temporary is: its pages are mapped
    and zeroed by the kernel at first touch) and to one written before."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal(FEATURES)
    big, small = rng.standard_normal((CHUNK, FEATURES)), rng.standard_normal((500, FEATURES))
    written = np.empty_like(big)
    kernels = {"streaming": lambda: big.T @ np.tanh(big @ w),
               "in cache": lambda: [small.T @ np.tanh(small @ w) for _ in range(CHUNK // 500)],
               "new chunk-sized array": lambda: np.multiply(big, 2.0),
               "reused array": lambda: np.multiply(big, 2.0, out=written)}
    times = {name: [] for name in kernels}
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop:
        for name, kernel in kernels.items():
            start = time.perf_counter()
            kernel()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def _task_stream_figures(client, call, repeats):
    """What the task stream says of ``repeats`` calls, each figure the median
    over the calls: chunk tasks per worker, compute seconds per chunk task, the
    overlap (compute seconds of all chunk tasks over the time from the first
    one's start to the last one's end: 2.0 is two workers always busy), the
    workers' CPU seconds over their chunk tasks' seconds (near 1: a worker in a
    chunk task held a core, stalled on memory or not; well below 1: it waited
    for a core), the workers' minor page faults per chunk task, the seconds
    from the call to the first chunk task and from the last one to the result,
    and the bytes fetched from worker to worker."""
    figures = collections.defaultdict(list)
    for _ in range(repeats):
        cpu_before, faults_before = client.run(time.process_time), client.run(_minor_faults)
        with get_task_stream(client) as stream:
            start = time.time()
            call()
            stop = time.time()
        cpu = sum(client.run(time.process_time).values()) - sum(cpu_before.values())
        faults = sum(client.run(_minor_faults).values()) - sum(faults_before.values())
        computes = [(task["worker"], s["start"], s["stop"]) for task in stream.data
                    if "fgrad-grad-chunk" in str(task["key"])
                    for s in task["startstops"] if s["action"] == "compute"]
        first, last = min(c[1] for c in computes), max(c[2] for c in computes)
        figures["per_worker"].append(tuple(sorted(
            collections.Counter(c[0] for c in computes).values(), reverse=True)))
        figures["per_chunk"].append(statistics.median(c[2] - c[1] for c in computes))
        figures["overlap"].append(sum(c[2] - c[1] for c in computes) / (last - first))
        figures["on_core"].append(cpu / sum(c[2] - c[1] for c in computes))
        figures["faults"].append(faults / len(computes))
        figures["head"].append(first - start)
        figures["tail"].append(stop - last)
        figures["transferred"].append(sum(client.run(_bytes_fetched_since, start).values()))
    per_worker = collections.Counter(figures.pop("per_worker")).most_common(1)[0][0]
    return {"per_worker": "/".join(map(str, per_worker)),
            **{name: statistics.median(v) for name, v in figures.items()}}


def _minor_faults():
    """Page faults this process took without reading from disk: each a page
    mapped and zeroed at its first touch."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _bytes_fetched_since(start, dask_worker):
    return sum(t["total"] for t in dask_worker.transfer_incoming_log if t["start"] >= start)


def full(epochs, batch_chunks, memory_limit):
    """Logistic regression on 10^7 rows in zarr, trained on two workers."""
    path = tempfile.mkdtemp(prefix="fgrad-bench-dask-")
    try:
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          memory_limit=memory_limit, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            start = time.perf_counter()
            X, y = _dataset(FULL_ROWS, FULL_FEATURES, FULL_CHUNK)
            da.to_zarr(X, os.path.join(path, "X.zarr"))
            da.to_zarr(y, os.path.join(path, "y.zarr"))
            written = time.perf_counter() - start
            X = da.from_zarr(os.path.join(path, "X.zarr"))
            y = da.from_zarr(os.path.join(path, "y.zarr"))
            client.restart()            # peak memory of the training alone
            pids = client.run(os.getpid)
            start = time.perf_counter()
            result = fdask.fit(logistic, _params(FULL_FEATURES), X, y,
                               fgrad.optim.adam(0.1), epochs=epochs,
                               batch_chunks=batch_chunks)
            trained = time.perf_counter() - start
            peaks = sorted(client.run(_peak_rss_mb).values())
            restarted = len(set(pids.values()) - set(client.run(os.getpid).values()))
        size = FULL_ROWS * FULL_FEATURES * 8 / 1e9
        steps = len(result.history)
        print(f"\n{FULL_ROWS:.0e} x {FULL_FEATURES} float64 in zarr ({size:.2f} GB), chunks of "
              f"{FULL_CHUNK} rows, 2 workers x 1 thread, memory_limit={memory_limit}")
        print(f"written in {written:.1f} s; trained {epochs} epochs ({steps} steps of "
              f"{batch_chunks} chunks) in {trained:.1f} s ({trained / epochs:.1f} s per pass "
              f"over the data)")
        print(f"loss {result.history[0]:.4f} -> {result.history[-1]:.4f}; peak RSS per "
              f"worker: " + ", ".join(f"{mb:.0f} MB" for mb in peaks)
              + f"; workers restarted: {restarted}")
    finally:
        shutil.rmtree(path, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--full", action="store_true",
                        help="also train on 10^7 rows in zarr (minutes)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-chunks", type=int, default=10)
    parser.add_argument("--memory-limit", default="400MB")
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args()
    if not args.skip_speed:
        speed(args.repeats)
    if args.full:
        full(args.epochs, args.batch_chunks, args.memory_limit)


if __name__ == "__main__":
    main()
