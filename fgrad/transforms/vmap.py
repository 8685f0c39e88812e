"""`vmap`: map a per-example function over a batch axis, without a loop.

The arguments are flattened (pytrees) and each leaf gets its axis from
``in_axes``; mapped leaves become batch tracers of a new `BatchTrace`, the
function runs once, and each output leaf has its batch axis moved to the place
``out_axes`` asks for (outputs that do not depend on the batch are broadcast).
"""
import functools

from numpy import ndarray

from fgrad.core.errors import NUMPY_GENERATORS, BatchAxisError, check_not_numpy_generator
from fgrad.core.trace import Tracer, get_aval, new_trace, plain_array
from fgrad.core.tree import broadcast_prefix, tree_flatten, tree_unflatten
from fgrad.interpreters.batching import BatchTrace, BatchTracer
from fgrad.primitives.batching import move_axis
from fgrad.primitives.indexing import slice_axis
from fgrad.primitives.shape import broadcast_to, concatenate, expand_dims


def vmap(fun, in_axes=0, out_axes=0, axis_size=None, chunk_size=None):
    """Vectorize ``fun`` over a batch axis of its arguments.

    ``in_axes`` says, per positional argument, which axis holds the examples:
    an int (negative counts from the end), ``None`` for an argument every
    example shares, or a tuple with one entry per positional argument, each
    entry an int, ``None`` or a pytree prefix of that argument. Keyword
    arguments are mapped over axis 0. ``out_axes`` places the batch axis in the
    outputs the same way. ``axis_size`` gives the batch size when no argument
    is mapped. ``chunk_size`` processes at most that many examples at a time
    (bounding peak memory) with identical results.

    >>> import numpy as np, fgrad, fgrad.numpy as fnp
    >>> w = np.array([1.0, 2.0])
    >>> xs = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> fgrad.vmap(lambda w, x: fnp.dot(w, x), in_axes=(None, 0))(w, xs)
    array([1., 2., 3.])
    """
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise BatchAxisError(f"vmap's chunk_size must be a positive int, got "
                             f"{chunk_size!r}.")
    _check_axes_type(in_axes, "in_axes")
    _check_axes_type(out_axes, "out_axes")

    @functools.wraps(fun)
    def batched(*args, **kwargs):
        name = getattr(fun, "__name__", type(fun).__name__)
        if not kwargs and all(a.__class__ is ndarray for a in args):
            leaves, in_tree = list(args), None      # plain arrays: no pytree to walk
        else:
            leaves, in_tree = tree_flatten((args, kwargs))
            leaves = list(map(plain_array, leaves))     # np.matrix -> ndarray
            for j, x in enumerate(leaves):
                if isinstance(x, NUMPY_GENERATORS):
                    label = _in_axes(in_axes, args, kwargs, name)[0][j]
                    check_not_numpy_generator(x, f"vmap({name})'s {label}")
        fast = None if kwargs or axis_size is not None else _plain_axes(in_axes, args,
                                                                       leaves)
        if fast is not None:
            axes, size = fast
        else:
            labels, axes = _in_axes(in_axes, args, kwargs, name)
            axes = [_normalize_in_axis(x, ax, label, name)
                    for x, ax, label in zip(leaves, axes, labels)]
            size = _batch_size(leaves, axes, labels, axis_size, name)
        if chunk_size is None or size <= chunk_size:
            return _apply(fun, leaves, axes, in_tree, out_axes, size, name)
        return _apply_chunked(fun, leaves, axes, in_tree, out_axes, size, chunk_size,
                              name)
    return batched


# ---------------------------------------------------------------------------
# Input axes
# ---------------------------------------------------------------------------


def _check_axes_type(axes, what):
    if isinstance(axes, dict) and what == "in_axes":
        raise BatchAxisError(
            "vmap's in_axes must be an int, None, or a tuple with one entry per "
            f"positional argument, got a dict {axes!r}: wrap it as (axes_dict,) for "
            "a dict argument.")


def _in_axes(in_axes, args, kwargs, name):
    """(label, axis) for every leaf of ``(args, kwargs)``, in flattening order."""
    labels, axes = [], []
    if isinstance(in_axes, (tuple, list)):
        if len(in_axes) != len(args):
            raise BatchAxisError(
                f"vmap({name}) got in_axes with {len(in_axes)} entries, but was "
                f"called with {len(args)} positional argument"
                f"{'s' * (len(args) != 1)}: give one entry per argument (None for an "
                "argument every example shares).")
        per_arg = list(in_axes)
    else:
        per_arg = [in_axes] * len(args)
    for i, (arg, prefix) in enumerate(zip(args, per_arg)):
        if (prefix is None or type(prefix) is int) and (
                hasattr(arg, "shape") or isinstance(arg, Tracer)):
            labels.append(f"argument {i}")           # the common case: one array
            axes.append(prefix)
            continue
        try:
            arg_axes = broadcast_prefix(prefix, arg)
        except ValueError:
            raise BatchAxisError(
                f"vmap({name}): in_axes entry {i} ({prefix!r}) does not match the "
                f"structure of argument {i} ({tree_flatten(arg)[1]}): give an int, "
                "None, or a pytree prefix of the argument.") from None
        n = len(arg_axes)
        labels.extend(f"argument {i}" + (f" (leaf {j})" if n > 1 else "")
                      for j in range(n))
        axes.extend(arg_axes)
    for key in sorted(kwargs):
        n = len(tree_flatten(kwargs[key])[0])
        labels.extend(f"keyword argument {key!r}" + (f" (leaf {j})" if n > 1 else "")
                      for j in range(n))
        axes.extend([0] * n)
    return labels, axes


def _plain_axes(in_axes, args, leaves):
    """``(axes, size)`` when every argument is one array with an in-range int or
    None axis and the mapped sizes agree; None otherwise, and the full checks
    (which name the offending argument) run instead."""
    if len(leaves) != len(args):
        return None                              # some argument is a pytree
    per_arg = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
    if len(per_arg) != len(args):
        return None
    axes, size = [], None
    for x, axis in zip(leaves, per_arg):
        if axis is None:
            axes.append(None)
            continue
        if type(axis) is not int:
            return None
        shape = getattr(x, "shape", None)
        if shape is None or not -len(shape) <= axis < len(shape):
            return None
        axis %= len(shape)
        if size is None:
            size = shape[axis]
        elif shape[axis] != size:
            return None
        axes.append(axis)
    return (axes, size) if size is not None else None


def _normalize_in_axis(x, axis, label, name):
    if axis is None:
        return None
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise BatchAxisError(f"vmap({name}): the in_axes entry for {label} must be an "
                             f"int or None, got {axis!r}.")
    if not isinstance(x, Tracer) and not hasattr(x, "shape"):
        raise BatchAxisError(
            f"vmap({name}): {label} is a {type(x).__name__}, not an array, so it "
            f"cannot be mapped over axis {axis}: pass an array, or None in in_axes "
            "to share it between examples.")
    ndim = get_aval(x).ndim
    if not -ndim <= axis < ndim:
        raise BatchAxisError(
            f"vmap({name}): in_axes={axis} is out of range for {label}, which has "
            f"rank {ndim} (shape {get_aval(x).shape}): use an axis in "
            f"[{-ndim}, {ndim}), or None to share it between examples.")
    return axis % ndim


def _batch_size(leaves, axes, labels, axis_size, name):
    found = [(label, x.shape[ax], ax) for x, ax, label in zip(leaves, axes, labels)
             if ax is not None]
    sizes = {size for _, size, _ in found}

    def described():        # built only for an error message
        return "; ".join(f"{label} has size {size} along axis {ax}"
                         for label, size, ax in found)
    if axis_size is not None:
        if sizes and sizes != {axis_size}:
            raise BatchAxisError(f"vmap({name}) was given axis_size={axis_size}, but "
                                 f"{described()}.")
        return axis_size
    if not sizes:
        raise BatchAxisError(
            f"vmap({name}) has no mapped argument to take the batch size from (every "
            "in_axes entry is None): pass axis_size=n.")
    if len(sizes) > 1:
        raise BatchAxisError(f"vmap({name}) got inconsistent batch sizes: "
                             f"{described()}. Every mapped axis must have the same "
                             "length.")
    return sizes.pop()


# ---------------------------------------------------------------------------
# Running and output axes
# ---------------------------------------------------------------------------


def _apply(fun, leaves, axes, in_tree, out_axes, size, name):
    with new_trace(BatchTrace, size) as trace:
        inputs = [x if ax is None else BatchTracer(trace, x, ax)
                  for x, ax in zip(leaves, axes)]
        args, kwargs = (inputs, {}) if in_tree is None else tree_unflatten(in_tree, inputs)
        out = fun(*args, **kwargs)
    if type(out_axes) is int and (out.__class__ is BatchTracer or out.__class__ is ndarray):
        return _place_output(out, out_axes, trace, size, "output leaf 0", name)  # one leaf
    out_leaves, out_tree = tree_flatten(out)
    try:
        leaf_axes = broadcast_prefix(out_axes, out)
    except ValueError:
        raise BatchAxisError(f"vmap({name}): out_axes {out_axes!r} does not match the "
                             f"structure of the output ({out_tree}): give an int, "
                             "None, or a pytree prefix of the output.") from None
    results = [_place_output(x, ax, trace, size, f"output leaf {j}", name)
               for j, (x, ax) in enumerate(zip(out_leaves, leaf_axes))]
    return tree_unflatten(out_tree, results)


def _place_output(x, axis, trace, size, label, name):
    mapped = isinstance(x, BatchTracer) and x.owner is trace
    if mapped and x.batch_dim is None:     # shared by every example
        x, mapped = x.val, False
    if axis is None:
        if mapped:
            raise BatchAxisError(
                f"vmap({name}): out_axes is None for {label}, but it differs between "
                "examples: give it an axis, or return a value that does not depend "
                "on the mapped arguments.")
        return x
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise BatchAxisError(f"vmap({name}): the out_axes entry for {label} must be "
                             f"an int or None, got {axis!r}.")
    ndim = get_aval(x).ndim + 1
    if not -ndim <= axis < ndim:
        raise BatchAxisError(f"vmap({name}): out_axes={axis} is out of range for "
                             f"{label}, which has rank {ndim} with the batch axis.")
    axis %= ndim
    if mapped:
        return move_axis(x.val, x.batch_dim, axis)
    shape = get_aval(x).shape
    return broadcast_to(expand_dims(x, axis), shape[:axis] + (size,) + shape[axis:])


def _apply_chunked(fun, leaves, axes, in_tree, out_axes, size, chunk_size, name):
    pieces = []
    for start in range(0, size, chunk_size):
        stop = min(start + chunk_size, size)
        chunk = [x if ax is None else slice_axis(x, ax, start, stop)
                 for x, ax in zip(leaves, axes)]
        pieces.append(_apply(fun, chunk, axes, in_tree, out_axes, stop - start, name))
    first_leaves, out_tree = tree_flatten(pieces[0])
    leaf_axes = broadcast_prefix(out_axes, pieces[0])
    per_piece = [tree_flatten(p)[0] for p in pieces]
    results = []
    for j, ax in enumerate(leaf_axes):
        if ax is None:
            results.append(first_leaves[j])
        else:
            parts = [p[j] for p in per_piece]
            results.append(concatenate(parts, ax % get_aval(parts[0]).ndim))
    return tree_unflatten(out_tree, results)
