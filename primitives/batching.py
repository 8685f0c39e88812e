"""What the batching rules share: where a batch axis sits and how to move it.

A batching rule (the ``batch`` column, read by `fgrad.vmap`) receives the
operands with their batch axes, ``dims``: an int for an operand that holds one
slice per example, or `not_mapped` (``None``) for one every example shares. It
returns ``(out, out_dim)``. Rules bind primitives, so the batched computation is
differentiable and batchable again, and they move a batch axis only when the
primitive cannot take it where it is: elementwise operations broadcast it in
place, reductions shift their axes around it.
"""
import sys

from fgrad.core.trace import get_aval

not_mapped = None


def axis_size(args, dims):
    """The batch size: the length of any mapped operand's batch axis."""
    for x, d in zip(args, dims):
        if d is not None:
            return x.shape[d]           # mapped operands are arrays or tracers
    raise ValueError("a batching rule was called without a mapped operand")


def unbatched_ndim(x, d):
    ndim = getattr(x, "ndim", None)
    if ndim is None:               # a Python scalar
        return 0
    return ndim - (d is not None)


def move_axis(x, src, dst):
    """``x`` with axis ``src`` moved to position ``dst`` (a view on NumPy)."""
    if src == dst:
        return x
    perm = [i for i in range(get_aval(x).ndim) if i != src]
    perm.insert(dst, src)
    return transpose(x, tuple(perm))


def batch_to_front(x, d, size, rank=None):
    """``x`` with its batch axis first; an unmapped ``x`` is broadcast to ``size``.

    With ``rank`` (the rank of the per-example operand it must line up with),
    length-1 axes are inserted after the batch axis, so that right-aligned
    broadcasting against other per-example shapes keeps the batch axis first.
    """
    shape = get_aval(x).shape
    if d is None:
        pad = (1,) * (0 if rank is None else rank - len(shape))
        return broadcast_to(reshape(x, pad + shape), (size,) + pad + shape)
    x = move_axis(x, d, 0)
    shape = get_aval(x).shape
    if rank is not None and rank > len(shape) - 1:
        x = reshape(x, shape[:1] + (1,) * (rank - len(shape) + 1) + shape[1:])
    return x


# ---------------------------------------------------------------------------
# Generic rules used by the primitive factories
# ---------------------------------------------------------------------------


_PY_SCALARS = (int, float, complex, bool)


def broadcasting_batch_rule(prim):
    """The batching rule of an elementwise (broadcasting) primitive.

    Operands broadcast against each other right-aligned, so when every mapped
    operand's batch axis lands on the same output position, and no unmapped
    operand reaches that position, the primitive runs on the operands as they
    are. Otherwise each mapped operand's batch axis goes first, followed by
    length-1 axes up to the output's rank.
    """
    bind = prim.bind

    def rule(args, dims, **params):
        if len(args) == 1:                  # a unary op maps each element in place
            return bind(*args, **params), dims[0]
        # common case: mapped operands share their batch axis and rank, and the
        # others are Python scalars, which broadcast against anything
        d0, rank0, same = None, None, True
        for x, d in zip(args, dims):
            if d is None:
                if type(x) not in _PY_SCALARS:
                    same = False
                    break
            elif d0 is None:
                d0, rank0 = d, len(x.shape)
            elif d != d0 or len(x.shape) != rank0:
                same = False
                break
        if same:
            return bind(*args, **params), d0
        if d0 == 0:
            out = _leading_batch(args, dims, bind, params)
            if out is not None:
                return out, 0
        ranks = [unbatched_ndim(x, d) for x, d in zip(args, dims)]
        out_rank = max(ranks)
        position = None
        direct = True
        for r, d in zip(ranks, dims):
            if d is not None:
                p = d + out_rank - r
                if position is None:
                    position = p
                elif p != position:
                    direct = False
                    break
        if direct and all(d is not None or r <= out_rank - position
                          for r, d in zip(ranks, dims)):
            return bind(*args, **params), position
        size = axis_size(args, dims)
        moved = [x if d is None else batch_to_front(x, d, size, out_rank)
                 for x, d in zip(args, dims)]
        return bind(*moved, **params), 0
    return rule


def _leading_batch(args, dims, bind, params):
    # Every mapped operand has its batch axis first (the usual case inside
    # vmap(grad)): pad the lower-rank ones with length-1 axes after the batch
    # axis, so right-aligned broadcasting keeps it first (an unmapped operand is
    # at most out_rank deep, so it never reaches that axis). None if some
    # operand is batched elsewhere.
    ranks = []
    out_rank = 0
    for x, d in zip(args, dims):
        r = 0 if type(x) in _PY_SCALARS else len(x.shape) - (d is not None)
        if d is not None and d != 0:
            return None
        ranks.append(r)
        if r > out_rank:
            out_rank = r
    moved = []
    for x, d, r in zip(args, dims, ranks):
        if d is not None and r < out_rank:
            shape = x.shape
            moved.append(reshape(x, shape[:1] + (1,) * (out_rank - r) + shape[1:]))
        else:
            moved.append(x)
    return bind(*moved, **params)


def reduction_batch_rule(prim):
    """The batching rule of a reduction with ``axis`` (a tuple) and ``keepdims``:
    the reduced axes shift past the batch axis, which stays where it is."""
    bind = prim.bind

    def rule(args, dims, *, axis, **params):
        (x,), (d,) = args, dims
        single = not isinstance(axis, tuple) and axis is not None
        axes = tuple(range(get_aval(x).ndim - 1)) if axis is None else \
            (axis,) if single else axis
        shifted = tuple(a + (a >= d) for a in axes)
        out_dim = d if params.get("keepdims") else d - sum(a < d for a in axes)
        return bind(x, axis=shifted[0] if single else shifted, **params), out_dim
    return rule


def unary_batch_rule(prim):
    """The rule of a primitive that acts on each element (or the whole array)
    without caring where the batch axis is: the axis passes through."""
    bind = prim.bind

    def rule(args, dims, **params):
        (x,), (d,) = args, dims
        return bind(x, **params), d
    return rule


def single_axis_batch_rule(prim, reduces=False):
    """The rule of a primitive acting along one ``axis`` parameter (an int, or
    None for the flattened array): the axis shifts past the batch axis.

    ``reduces=True`` marks an index reduction (argmax): it removes its axis
    unless ``keepdims``, and over the flattened array it sees each example
    flattened on its own.
    """
    bind = prim.bind

    def rule(args, dims, *, axis, **params):
        (x,), (d,) = args, dims
        if axis is None:
            size, rest = axis_size(args, dims), unbatched_ndim(x, d)
            flat = reshape(move_axis(x, d, 0), (size, -1))
            out = bind(flat, axis=1, **params)
            if params.get("keepdims"):
                out = reshape(out, (size,) + (1,) * rest)
            return out, 0
        if unbatched_ndim(x, d) == 0:
            # NumPy treats a 0-d operand as one element along axis 0: give each
            # example that axis explicitly
            x = reshape(move_axis(x, d, 0), (axis_size(args, dims), 1))
            d, axis = 0, 0
        shifted = axis + (axis >= d)
        out_dim = d - 1 if reduces and not params.get("keepdims") and axis < d else d
        return bind(x, axis=shifted, **params), out_dim
    return rule



def _shape_module():
    # elementwise.py imports this module before shape.py exists, so shape's
    # functions are looked up at call time (a dict lookup, not an import)
    return sys.modules[__package__ + ".shape"]


def transpose(x, axes):
    return _shape_module().transpose(x, axes)


def reshape(x, shape):
    return _shape_module().reshape(x, shape)


def broadcast_to(x, shape):
    return _shape_module().broadcast_to(x, shape)
