"""``pure_callback``: a Python function on host arrays, as one primitive.

The callback is opaque to fgrad: it runs on NumPy arrays at run time (under
`jit`, each time the compiled code runs; the compiler never evaluates it
ahead of time), and its outputs' shapes and dtypes are what the caller
declares. It is assumed pure: fgrad may skip a call whose results nothing
reads, or merge two identical calls.

Under `vmap` the callback is called once per example (``"sequential"``), or
once on the whole batch when it says it handles a leading batch axis
(``"expand_dims"``: unbatched arguments get a leading axis of length 1;
``"broadcast_all"``: they are broadcast to the batch size). A callback has no
derivative: differentiating one raises `CallbackDerivativeError`; the function
that calls it supplies the rule with `fgrad.custom_jvp` or `fgrad.custom_vjp`.
"""
import functools

import numpy as np

from fgrad.core.backend import array_module, asarray_on, device_put
from fgrad.core.errors import CallbackDerivativeError, CallbackError, TracerLeakError
from fgrad.core.trace import Primitive, ShapedArray, Tracer, Zero, get_aval, trace_state
from fgrad.core.tree import tree_flatten, tree_unflatten
from fgrad.primitives.batching import axis_size, move_axis
from fgrad.primitives.shape import broadcast_to, expand_dims

FAMILY = "primitives/callback.py"
VMAP_METHODS = ("sequential", "expand_dims", "broadcast_all")


def _name(callback):
    return getattr(callback, "__name__", type(callback).__name__)


def _closed_over(callback, what):
    return (f"pure_callback: {_name(callback)!r} read a value that grad, jvp, jit or "
            f"vmap is tracing, closed over instead of passed in ({what}). Pass it to "
            "pure_callback as one of its *args: the callback receives it as a NumPy "
            "array.")


def _checked(outs, result_avals, callback):
    """The callback's outputs as NumPy arrays of the declared avals."""
    if len(outs) != len(result_avals):
        raise CallbackError(
            f"pure_callback: {_name(callback)!r} returned {len(outs)} arrays, but "
            f"result_shape_dtypes declares {len(result_avals)}.")
    checked = []
    for i, (out, aval) in enumerate(zip(outs, result_avals)):
        if isinstance(out, Tracer):
            raise CallbackError(_closed_over(callback, f"output {i} is a traced value"))
        out = np.asarray(device_put(out, "cpu"))
        if out.shape != aval.shape:
            raise CallbackError(
                f"pure_callback: output {i} of {_name(callback)!r} has shape "
                f"{out.shape}, but result_shape_dtypes declares {aval.shape}.")
        if out.dtype != aval.dtype:
            if not np.can_cast(out.dtype, aval.dtype, "same_kind"):
                raise CallbackError(
                    f"pure_callback: output {i} of {_name(callback)!r} has dtype "
                    f"{out.dtype}, which does not cast to the declared "
                    f"{aval.dtype}: return that dtype or declare {out.dtype}.")
            out = out.astype(aval.dtype)
        checked.append(out)
    return checked


def _impl(*args, callback, result_avals, vmap_method):
    xp = array_module(*args)
    host = [np.asarray(device_put(a, "cpu")) for a in args]
    try:
        outs = callback(*host)
    except TracerLeakError as err:      # it ran after the trace it read had ended
        raise CallbackError(_closed_over(callback, "a traced value that outlived its "
                                         f"transformation ({err})")) from None
    return tuple(asarray_on(xp, out) for out in _checked(outs, result_avals, callback))


def _abstract(*avals, callback, result_avals, vmap_method):
    return tuple(result_avals)


# Its parameter is the caller's function, new at each call: kept out of the
# dispatch table, as one-off rules are, so that compiled sweeps (which cache
# recorded structures of table primitives) do not note structures that never
# come back.
pure_callback_p = Primitive("pure_callback", _impl, _abstract, multiple_results=True,
                            family=FAMILY, register=False)
# run-time work: constant folding must leave it to the compiled code
pure_callback_p.host_callback = True


def _no_derivative(callback):
    return CallbackDerivativeError(
        f"pure_callback {_name(callback)!r} was differentiated, but a host callback "
        "has no derivative of its own. Wrap the function that calls it in "
        "fgrad.custom_jvp (or fgrad.custom_vjp) and compute the derivative there, "
        "or apply fgrad.stop_gradient to its inputs if none is wanted.")


def _jvp(tangents, ans, *args, callback, result_avals, vmap_method):
    if any(type(t) is not Zero for t in tangents):
        raise _no_derivative(callback)
    return tuple(Zero(get_aval(a)) for a in ans)


def _vjp(ct, ans, needed, *args, callback, result_avals, vmap_method):
    if any(needed):
        raise _no_derivative(callback)
    return (None,) * len(args)


pure_callback_p.jvp = _jvp
pure_callback_p.def_vjp_joint(_vjp, reads=set())


def _looped(callback, batched, size, result_avals):
    """``callback`` called once per example, its outputs stacked along axis 0."""
    def over_examples(*args):
        rows = [callback(*(a[i] if b else a for a, b in zip(args, batched)))
                for i in range(size)]
        if not rows:
            return [np.empty((0,) + a.shape, a.dtype) for a in result_avals]
        return [np.stack(outs) for outs in zip(*rows)]
    over_examples.__name__ = _name(callback)
    return over_examples


def _batch(args, dims, *, callback, result_avals, vmap_method):
    size = axis_size(args, dims)
    moved = [a if d is None else move_axis(a, d, 0) for a, d in zip(args, dims)]
    if vmap_method == "sequential":
        callback = _looped(callback, [d is not None for d in dims], size, result_avals)
    elif vmap_method == "expand_dims":
        moved = [expand_dims(a, 0) if d is None else a for a, d in zip(moved, dims)]
    else:
        moved = [broadcast_to(a, (size,) + get_aval(a).shape) if d is None else a
                 for a, d in zip(moved, dims)]
    avals = tuple(ShapedArray((size,) + a.shape, a.dtype) for a in result_avals)
    outs = pure_callback_p.bind(*moved, callback=callback, result_avals=avals,
                                vmap_method=vmap_method)
    return outs, (0,) * len(outs)


pure_callback_p.batch = _batch


def pure_callback(callback, result_shape_dtypes, *args, vmap_method="sequential",
                  **kwargs):
    """Call ``callback(*args, **kwargs)`` on host arrays, under any transformation.

    ``result_shape_dtypes`` is a pytree of objects with ``.shape`` and ``.dtype``
    (`fgrad.ShapeDtypeStruct`, NumPy arrays) describing what ``callback``
    returns; ``args`` may be pytrees of arrays, which ``callback`` receives as
    NumPy arrays. Under `jit` the call is staged and runs every time the
    compiled function runs. Under `vmap`, ``vmap_method`` says how a batch is
    handled: ``"sequential"`` (the default) calls ``callback`` once per example;
    ``"expand_dims"`` calls it once, batched arguments with the batch axis
    first and the others with a leading axis of length 1; ``"broadcast_all"``
    broadcasts those to the batch size too. The callback must then return
    outputs with a leading batch axis. Differentiating the call raises
    `fgrad.errors.CallbackDerivativeError`: give the derivative with
    `fgrad.custom_jvp` around it.

    >>> import numpy as np, fgrad
    >>> def host_sort(x):
    ...     return np.sort(x)
    >>> f = fgrad.jit(lambda x: fgrad.pure_callback(
    ...     host_sort, fgrad.ShapeDtypeStruct(x.shape, x.dtype), x) * 2)
    >>> f(np.array([3.0, 1.0, 2.0]))
    array([2., 4., 6.])
    """
    if vmap_method not in VMAP_METHODS:
        raise CallbackError(f"pure_callback: vmap_method must be one of {VMAP_METHODS}, "
                            f"got {vmap_method!r}.")
    _refuse_closed_over_tracers(callback, kwargs)
    leaves, in_tree = tree_flatten(args)
    result_leaves, out_tree = tree_flatten(result_shape_dtypes)
    result_avals = tuple(ShapedArray(r.shape, r.dtype) for r in result_leaves)

    def flat_callback(*host_leaves):
        out = callback(*tree_unflatten(in_tree, list(host_leaves)), **kwargs)
        out_leaves, tree = tree_flatten(out)
        if tree != out_tree:
            raise CallbackError(
                f"pure_callback: {_name(callback)!r} returned a value of structure "
                f"{tree}, but result_shape_dtypes has structure {out_tree}.")
        return out_leaves
    flat_callback.__name__ = _name(callback)
    params = dict(callback=flat_callback, result_avals=result_avals,
                  vmap_method=vmap_method)
    staging = _innermost_staging_trace()
    if staging is not None and not any(isinstance(x, Tracer) for x in leaves):
        # constants only, inside jit: still a run-time call, not a staging-time one
        outs = staging.process(pure_callback_p, leaves, params)
    else:
        outs = pure_callback_p.bind(*leaves, **params)
    return tree_unflatten(out_tree, list(outs))


def _refuse_closed_over_tracers(callback, kwargs):
    """Refuse a callback that holds a tracer (as a variable of its closure, an
    argument of a partial, or in ``kwargs``): it runs on host values, where a
    tracer means nothing, and under ``jit(grad(...))`` it may never run at all,
    leaving a zero derivative in place of the error. Containers are not looked
    into (a callback may hold traced values it reads only for their structure);
    a tracer read from one fails when the callback runs (`_checked`)."""
    held = list(kwargs.values())
    if isinstance(callback, functools.partial):
        held += list(callback.args) + list(callback.keywords.values())
    for cell in getattr(callback, "__closure__", None) or ():
        try:
            held.append(cell.cell_contents)
        except ValueError:              # a cell not filled yet
            pass
    for x in held:
        if isinstance(x, Tracer):
            raise CallbackError(_closed_over(callback, f"it holds {x.aval}"))


def _innermost_staging_trace():
    for trace in reversed(trace_state.trace_stack):
        if getattr(trace, "staging", False):
            return trace
    return None
