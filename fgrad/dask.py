"""Exact gradients of a loss over row-chunked Dask arrays, computed where the chunks live.

A loss that is a mean (or a sum) over examples splits over the rows of its data:
the gradient of the whole is the count-weighted mean (or the sum) of the
gradients of the chunks. `grad` and `value_and_grad` build one Dask task per
row chunk (``fgrad-grad-chunk``) that runs ``fgrad.value_and_grad`` of your loss
on that chunk, on the worker that holds it, and combine the per-chunk results in
a tree of ``fgrad-grad-combine`` tasks; only the final gradient reaches the
caller. With no ``distributed.Client`` this runs on Dask's threaded scheduler in
this process; with one, on the cluster's workers. `fit` runs an `fgrad.optim`
optimizer over full batches or batches of chunks. See docs/scaling.md.

Dask is imported only when these functions are called (``pip install
'fgrad[dask]'``).

>>> import numpy as np, dask.array as da, fgrad, fgrad.dask, fgrad.numpy as fnp
>>> def loss(w, X, y):
...     return fnp.mean((X @ w - y) ** 2)
>>> X = da.ones((10, 3), chunks=(4, 3)); y = da.zeros(10, chunks=4)
>>> fgrad.dask.grad(loss)(np.ones(3), X, y)
array([6., 6., 6.])
"""
import collections
import functools
import importlib
import threading
import uuid
from typing import NamedTuple

import numpy as np

from fgrad.core.errors import ArgnumError, DaskArgumentError, OptionalDependencyError
from fgrad.optim import apply_updates
from fgrad.transforms.differentiation import value_and_grad as fgrad_value_and_grad
from fgrad.transforms.jit import jit as fgrad_jit
from fgrad.tree import tree_leaves, tree_map

__all__ = ["grad", "value_and_grad", "fit", "FitResult"]

REDUCTIONS = ("mean", "sum")
# per-chunk results one task adds up (the fan-in of the tree reduction). A result
# is the size of the parameters, so a wide fan-in costs little and keeps the
# tree shallow: up to 16 chunks need a single task after the chunk tasks, and
# every level is a scheduler round trip (and a fetch) on the critical path.
SPLIT_EVERY = 16
# the non-batch arguments ride inside every chunk task while their arrays, once
# per chunk, add up to at most this; a key of their own would cost a scheduler
# round trip (and a fetch per worker) before the first chunk could start.
# Larger ones are one key, fetched once per worker.
INLINE_BYTES = 1 << 20
# per-chunk functions a process keeps (one per grad / value_and_grad object in use)
CACHE_SIZE = 16


def _require(module):
    """Import an optional package of the ``dask`` extra, or say how to get it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise OptionalDependencyError(
            f"fgrad.dask needs {module.split('.')[0]}, which is not installed ({err}); "
            f"install it with pip install 'fgrad[dask]'") from err


# ---------------------------------------------------------------------------
# What runs in a task (on a worker, or on a thread of this process)
# ---------------------------------------------------------------------------


class _ChunkSpec(NamedTuple):
    """What a chunk task needs besides its data: sent once, shared by every task."""

    key: str                # identifies the transformation, for the per-process cache
    loss: object
    argnums: object
    has_aux: bool
    reduce: str
    use_jit: bool
    n_args: int
    batch_args: tuple


_functions = collections.OrderedDict()      # key -> per-chunk function (bounded)
_functions_lock = threading.Lock()


def _per_chunk_function(spec):
    """``value_and_grad`` of the loss, built once per process and reused.

    Every task of a worker gets its own unpickled copy of the loss, so the cache
    is keyed by the transformation's key, not by the function object. Under
    ``jit`` the compiled sweep is kept per chunk shape (an even split has at most
    two: the chunks and the last one).
    """
    with _functions_lock:
        fn = _functions.get(spec.key)
        if fn is not None:
            _functions.move_to_end(spec.key)
            return fn
    fn = fgrad_value_and_grad(spec.loss, argnums=spec.argnums, has_aux=spec.has_aux)
    if spec.use_jit:
        fn = fgrad_jit(fn)
    with _functions_lock:
        fn = _functions.setdefault(spec.key, fn)     # a thread that got there first wins
        while len(_functions) > CACHE_SIZE:
            _functions.popitem(last=False)
    return fn


def _chunk_value_and_grad(inputs, index, rows, *blocks):
    """``(count, value, aux, grads)`` of one row chunk, summed over its rows.

    ``inputs`` is ``(spec, fixed)``: the `_ChunkSpec` and the non-batch arguments.
    """
    spec, fixed = inputs
    args, fixed_args, block_args = [], iter(fixed), iter(blocks)
    for i in range(spec.n_args):
        args.append(next(block_args) if i in spec.batch_args else next(fixed_args))
    count = blocks[0].shape[0]
    try:
        value, grads = _per_chunk_function(spec)(*args)
    except Exception as err:
        # the same exception, so callers catch what they expect, told where
        where = f"[fgrad.dask: raised by the loss on chunk {index} (rows {rows[0]}:{rows[1]})]"
        head = err.args[0] if err.args else ""
        err.args = (f"{head} {where}".lstrip(),) + err.args[1:]
        raise
    value, aux = value if spec.has_aux else (value, None)
    if spec.reduce == "mean":      # the chunk's mean times its rows: exact for uneven chunks
        value, aux, grads = tree_map(lambda v: v * count, (value, aux, grads))
    return count, value, aux, grads


def _combine(*parts):
    count = sum(part[0] for part in parts)
    return (count,) + tree_map(lambda *xs: sum(xs[1:], xs[0]), *[part[1:] for part in parts])


def _finish(reduce, has_aux, *parts):
    """The last task: adds up the last level's results and divides by the rows."""
    count, value, aux, grads = _combine(*parts)
    if reduce == "mean":
        value, aux, grads = tree_map(lambda v: v / count, (value, aux, grads))
    return ((value, aux) if has_aux else value), grads


# ---------------------------------------------------------------------------
# Checking the arguments and building the graph (in the caller's process)
# ---------------------------------------------------------------------------


def _as_positions(positions, what, fname):
    single = isinstance(positions, int)
    positions = (positions,) if single else tuple(positions)
    if not positions or not all(isinstance(p, int) and p >= 0 for p in positions):
        raise ArgnumError(f"{fname}: {what} must be a non-negative int or a non-empty tuple "
                          f"of them, got {positions!r}")
    return positions


def _check_batch_args(args, batch_args, fname, da):
    """The row chunks the batch arguments share, or a `DaskArgumentError`."""
    if max(batch_args) >= len(args):
        raise ArgnumError(f"{fname}: batch_args={batch_args} names argument "
                          f"{max(batch_args)}, but the function was called with "
                          f"{len(args)} arguments")
    row_chunks, first = None, None
    for i in batch_args:
        x = args[i]
        if not isinstance(x, da.Array):
            raise DaskArgumentError(
                f"{fname}: argument {i} is a {type(x).__module__}.{type(x).__name__}, but "
                f"batch_args={batch_args} says it holds rows of data, which must be a "
                f"dask.array chunked along axis 0: wrap it with "
                f"dask.array.from_array(x, chunks=...) using the row chunks of the other "
                f"batch arguments, or call fgrad.grad for data held in memory")
        if x.ndim == 0:
            raise DaskArgumentError(f"{fname}: argument {i} is a 0-d dask array; batch "
                                    f"arguments need a row axis (axis 0)")
        if any(np.isnan(c) for c in x.chunks[0]):
            raise DaskArgumentError(f"{fname}: argument {i} has unknown chunk sizes; call "
                                    f"x.compute_chunk_sizes() (or persist it) first")
        for axis, chunks in enumerate(x.chunks[1:], start=1):
            if len(chunks) > 1:
                raise DaskArgumentError(
                    f"{fname}: argument {i} is chunked along axis {axis} ({len(chunks)} "
                    f"chunks); a chunk must hold whole rows: x.rechunk({{{axis}: -1}})")
        if row_chunks is None:
            row_chunks, first = x.chunks[0], i
        elif x.chunks[0] != row_chunks:
            raise DaskArgumentError(
                f"{fname}: arguments {first} and {i} are chunked differently along the "
                f"rows ({_describe(row_chunks)} vs {_describe(x.chunks[0])}); give them "
                f"the same row chunks, e.g. y.rechunk({{0: X.chunks[0]}})")
    if sum(row_chunks) == 0:
        raise DaskArgumentError(f"{fname}: the batch arguments have no rows")
    return row_chunks


def _describe(chunks):
    shown = ", ".join(str(c) for c in chunks[:4]) + (", ..." if len(chunks) > 4 else "")
    return f"{len(chunks)} chunks: ({shown})"


def _check_in_memory(args, batch_args, fname, dask):
    for i, arg in enumerate(args):
        if i in batch_args:
            continue
        if any(dask.is_dask_collection(leaf) for leaf in tree_leaves(arg)):
            raise DaskArgumentError(
                f"{fname}: argument {i} holds a Dask collection; parameters and other "
                f"non-batch arguments are sent whole to every chunk, so they must be "
                f"in memory: compute them first (params = dask.compute(params)[0]), or "
                f"add {i} to batch_args if it holds rows of data")


def _check_reduce(reduce, fname):
    if reduce not in REDUCTIONS:
        raise DaskArgumentError(f"{fname}: reduce must be 'mean' (the loss is a mean over "
                                f"rows) or 'sum' (a sum over rows), got {reduce!r}")


def _graph(spec, args, fname):
    """The Delayed ``(value, grads)`` of the whole data, after checking ``args``."""
    dask, da = _require("dask"), _require("dask.array")
    row_chunks = _check_batch_args(args, spec.batch_args, fname, da)
    _check_in_memory(args, spec.batch_args, fname, dask)
    fixed = [a for i, a in enumerate(args) if i not in spec.batch_args]
    token = dask.base.tokenize(spec.key, fixed, *[args[i].name for i in spec.batch_args])
    n_chunks = len(row_chunks)
    if _nbytes(fixed) * n_chunks <= INLINE_BYTES:
        # inside every chunk task (a function argument, which Dask does not traverse)
        chunk = dask.delayed(functools.partial(_chunk_value_and_grad, (spec, fixed)),
                             name=f"fgrad-chunk-function-{token}", pure=True)
        shared = ()
    else:
        chunk = dask.delayed(_chunk_value_and_grad, pure=True)
        shared = (dask.delayed((spec, fixed), traverse=False, name=f"fgrad-params-{token}"),)
    blocks = [args[i].to_delayed().reshape(-1) for i in spec.batch_args]
    starts = np.concatenate([[0], np.cumsum(row_chunks)]).tolist()
    level = [chunk(*shared, i, (starts[i], starts[i + 1]), *[b[i] for b in blocks],
                   dask_key_name=(f"fgrad-grad-chunk-{token}", i))
             for i in range(n_chunks)]
    combine, depth = dask.delayed(_combine, pure=True), 0
    while len(level) > SPLIT_EVERY:
        level = [combine(*level[j:j + SPLIT_EVERY],
                         dask_key_name=(f"fgrad-grad-combine-{token}", depth, j // SPLIT_EVERY))
                 for j in range(0, len(level), SPLIT_EVERY)]
        depth += 1
    return dask.delayed(_finish, pure=True)(spec.reduce, spec.has_aux, *level,
                                            dask_key_name=f"fgrad-grad-{token}")


def _nbytes(tree):
    return sum(getattr(leaf, "nbytes", 8) for leaf in tree_leaves(tree))


class _Computer:
    """Computes the graphs of one gradient function's calls, one after another.

    On Dask's threaded scheduler it is ``dask.compute``. On a
    ``distributed.Client`` it keeps each call's result on the cluster (a
    future of the value and gradient: the size of the parameters) until the
    next call's graph has been sent. A client sends its messages to the
    scheduler at most once every 10 ms (distributed's ``BatchedSend``), and
    dropping a future is such a message: dropped at the end of a call, it
    would hold back the graph of a call that follows at once (a training
    loop's next step) by up to 10 ms, which on a LocalCluster was 7 ms of a
    70 ms gradient. Dropped after the next graph, it goes out in the batch
    after it, while the chunks compute.
    """

    def __init__(self):
        self._last = None

    def __call__(self, graph):
        dask = _require("dask")
        scheduler = dask.base.get_scheduler(collections=[graph])
        client = getattr(scheduler, "__self__", None)      # set for a Client's ``get``
        if not hasattr(client, "compute"):
            self._last = None
            (result,) = dask.compute(graph, scheduler=scheduler)
            return result
        future = client.compute(graph)
        self._last = None               # the previous result is dropped after ``graph``
        result = future.result()        # raises the loss's exception (nothing kept then)
        self._last = future
        return result


# ---------------------------------------------------------------------------
# The public functions
# ---------------------------------------------------------------------------


def value_and_grad(loss, argnums=0, has_aux=False, *, reduce="mean", batch_args=(1, 2),
                   jit=True):
    """``fgrad.value_and_grad`` of a loss over rows of data held in Dask arrays.

    ``loss(params, X_chunk, y_chunk)`` is ordinary fgrad code for one row chunk.
    With ``reduce="mean"`` it returns the mean over the chunk's rows, and the
    result is the mean over all rows (each chunk weighted by its row count, so
    an uneven last chunk is exact); with ``reduce="sum"``, sums throughout. The
    arguments at ``batch_args`` must be Dask arrays with the same row chunks and
    one chunk along every other axis; the others (the parameters at
    ``argnums``, any pytree of NumPy arrays) are sent whole to every chunk.
    With ``has_aux`` the loss returns ``(value, aux)``, and the aux pytree is
    reduced like the value. ``jit=True`` compiles the per-chunk function once
    per chunk shape in each worker process; pass ``jit=False`` for a loss with
    value-dependent Python control flow.

    Nothing is submitted until the arguments are checked (`DaskArgumentError`).
    The computation runs on the active ``distributed.Client``, or Dask's
    threaded scheduler when there is none, and returns NumPy values.

    >>> import numpy as np, dask.array as da, fgrad.numpy as fnp
    >>> def loss(w, X, y):
    ...     return fnp.sum((X @ w - y) ** 2)
    >>> X = da.ones((5, 2), chunks=2); y = da.ones(5, chunks=2)
    >>> value, g = value_and_grad(loss, reduce="sum")(np.zeros(2), X, y)
    >>> float(value), g
    (5.0, array([-10., -10.]))
    """
    fname = "fgrad.dask.value_and_grad"
    _require("dask.array")
    _check_reduce(reduce, fname)
    batch_args = _as_positions(batch_args, "batch_args", fname)
    positions = _as_positions(argnums, "argnums", fname)
    if set(positions) & set(batch_args):
        raise ArgnumError(f"{fname}: argnums={argnums!r} and batch_args={batch_args} overlap; "
                          f"the data arguments are not differentiated")
    key = f"fgrad-dask-{uuid.uuid4().hex}"
    compute = _Computer()

    def value_and_grad_over_chunks(*args):
        if max(positions) >= len(args):
            raise ArgnumError(f"{fname}: argnums={argnums!r} names argument {max(positions)}, "
                              f"but the function was called with {len(args)} arguments")
        spec = _ChunkSpec(key, loss, argnums, has_aux, reduce, jit, len(args), batch_args)
        return compute(_graph(spec, args, fname))
    value_and_grad_over_chunks.__name__ = f"value_and_grad_over_chunks({_name(loss)})"
    return value_and_grad_over_chunks


def grad(loss, argnums=0, has_aux=False, *, reduce="mean", batch_args=(1, 2), jit=True):
    """``fgrad.grad`` of a loss over rows of data held in Dask arrays.

    The same as `value_and_grad` (see it for the arguments) without the value;
    with ``has_aux`` it returns ``(grads, aux)``.

    >>> import numpy as np, dask.array as da, fgrad, fgrad.numpy as fnp
    >>> def loss(w, X, y):
    ...     return fnp.mean((X @ w - y) ** 2)
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(100, 3)), rng.normal(size=100)
    >>> g = grad(loss)(np.ones(3), da.from_array(X, chunks=30), da.from_array(y, chunks=30))
    >>> np.allclose(g, fgrad.grad(loss)(np.ones(3), X, y), rtol=1e-12)
    True
    """
    both = value_and_grad(loss, argnums, has_aux, reduce=reduce, batch_args=batch_args,
                          jit=jit)

    def grad_over_chunks(*args):
        value, grads = both(*args)
        return (grads, value[1]) if has_aux else grads
    grad_over_chunks.__name__ = f"grad_over_chunks({_name(loss)})"
    return grad_over_chunks


def _name(fun):
    return getattr(fun, "__name__", type(fun).__name__)


class FitResult(NamedTuple):
    """What `fit` returns: the trained parameters, the loss of every step (before
    its update), and the optimizer's final state."""

    params: object
    history: list
    state: object


def fit(loss, params, X, y, optimizer, *, epochs=1, batch_chunks=None, reduce="mean",
        progress=True, jit=True):
    """Train ``params`` on Dask arrays ``X``, ``y`` with an `fgrad.optim` optimizer.

    Each step takes the exact gradient (`value_and_grad`) of ``loss(params,
    X_chunk, y_chunk)`` over a batch of consecutive row chunks and applies
    ``optimizer``'s update: the whole data when ``batch_chunks`` is None (one
    step per epoch), else ``batch_chunks`` chunks at a time (ceil(chunks /
    batch_chunks) steps per epoch). ``progress`` shows a tqdm bar with the
    current loss. Persist ``X`` and ``y`` first (``X.persist()``) if they fit in
    the cluster's memory; otherwise every epoch reads them again (from zarr, say).

    >>> import numpy as np, dask.array as da, fgrad, fgrad.numpy as fnp
    >>> def loss(w, X, y):
    ...     return fnp.mean((X @ w - y) ** 2)
    >>> X = da.from_array(np.eye(4), chunks=(2, 4)); y = da.from_array(np.arange(4.0), chunks=2)
    >>> result = fit(loss, np.zeros(4), X, y, fgrad.optim.sgd(1.0), epochs=30,
    ...              batch_chunks=1, progress=False)
    >>> np.round(result.params, 6), len(result.history)
    (array([0., 1., 2., 3.]), 60)
    """
    fname = "fgrad.dask.fit"
    dask, da = _require("dask"), _require("dask.array")
    tqdm = _require("tqdm") if progress else None
    # checked now, so that a bad argument fails before the first step
    n_chunks = len(_check_batch_args((params, X, y), (1, 2), fname, da))
    _check_in_memory((params, X, y), (1, 2), fname, dask)
    if not isinstance(epochs, int) or epochs < 0:
        raise DaskArgumentError(f"{fname}: epochs must be a non-negative int, got {epochs!r}")
    if batch_chunks is not None and (not isinstance(batch_chunks, int) or batch_chunks < 1):
        raise DaskArgumentError(f"{fname}: batch_chunks must be None (full batch) or a "
                                f"positive int, got {batch_chunks!r}")
    step_chunks = batch_chunks or n_chunks
    starts = range(0, n_chunks, step_chunks)
    value_and_grad_of = value_and_grad(loss, reduce=reduce, jit=jit)
    state, history = optimizer.init(params), []
    bar = tqdm.tqdm(total=epochs * len(starts), desc=fname, unit="step") if tqdm else None
    try:
        for _ in range(epochs):
            for start in starts:
                stop = start + step_chunks
                value, grads = value_and_grad_of(params, X.blocks[start:stop],
                                                 y.blocks[start:stop])
                updates, state = optimizer.update(grads, state, params)
                params = apply_updates(params, updates)
                history.append(float(value))
                if bar is not None:
                    bar.update()
                    bar.set_postfix(loss=f"{float(value):.6g}")
    finally:
        if bar is not None:
            bar.close()
    return FitResult(params, history, state)
