"""Products built on ``einsum_p``: einsum's full NumPy syntax, tensordot, kron, ...

Every contraction here goes through the one einsum primitive, so each gets
opt_einsum's path, einsum's derivative rules, and nothing else to maintain.
"""
import numpy as np
from opt_einsum import get_symbol
from opt_einsum import parser as _parser

from fgrad.core.trace import Tracer, get_aval
from fgrad.numpy._arrays import asarray
from fgrad.primitives import einsum as _einsum
from fgrad.primitives import elementwise as _ew
from fgrad.primitives import products as _products
from fgrad.primitives import shape as _shape
from fgrad.primitives.base import normalize_axis


# the modules of sparse matrix classes: SciPy's, CuPy's and fgrad's own
_SPARSE_MODULES = ("scipy.sparse", "cupyx.scipy.sparse", "fgrad.sparse")


def matmul(a, b):
    """NumPy's ``a @ b``; a sparse matrix on either side (a ``scipy.sparse`` or
    `fgrad.sparse` array) is multiplied by `fgrad.sparse`, which keeps it sparse.

    >>> import numpy as np
    >>> matmul(np.eye(2), np.array([1.0, 2.0]))
    array([1., 2.])
    """
    sparse = Tracer.sparse_matmul
    if sparse is not None and (type(a).__module__.startswith(_SPARSE_MODULES)
                               or type(b).__module__.startswith(_SPARSE_MODULES)):
        return sparse(a, b)
    return _products.matmul(a, b)


class _ShapeOnly:
    """What opt_einsum's parser needs of an operand: its shape (tracers stay ours)."""

    __slots__ = ("shape",)

    def __init__(self, shape):
        self.shape = shape


def _as_operand(x):
    return x if isinstance(x, Tracer) or hasattr(x, "dtype") else asarray(x)


def parse_subscripts(*args):
    """``(explicit_subscripts, operands)`` for any form NumPy's einsum accepts.

    Implicit outputs are made explicit, ellipses are spelled out as letters, and
    the interleaved form ``einsum(a, [0, 1], b, [1, 2])`` becomes a string.

    >>> import numpy as np
    >>> parse_subscripts("...ij,jk", np.ones((2, 3, 4)), np.ones((4, 5)))[0]
    'cij,jk->cik'
    """
    if isinstance(args[0], str):
        operands = [_as_operand(x) for x in args[1:]]
        stand_ins = [args[0]] + [_ShapeOnly(get_aval(x).shape) for x in operands]
    else:
        n_ops = len(args) // 2          # (op, sublist) pairs, then maybe an output
        operands = [_as_operand(args[2 * i]) for i in range(n_ops)]
        stand_ins = list(args)
        for i, x in enumerate(operands):
            stand_ins[2 * i] = _ShapeOnly(get_aval(x).shape)
    try:
        inputs, output, _ = _parser.parse_einsum_input(stand_ins)
    except (ValueError, TypeError) as err:
        raise ValueError(f"einsum: cannot parse the subscripts: {err}") from None
    return f"{inputs}->{output}", operands


def _broadcast_unit_dims(subscripts, operands):
    # NumPy's einsum broadcasts a label of size 1 against a larger one; the
    # primitive wants every label to have one size, so size-1 operands are
    # broadcast here (broadcast_to's VJP sums them back).
    inputs, _ = _einsum.split_subscripts(subscripts)
    sizes = {}
    for letters, x in zip(inputs, operands):
        for c, d in zip(letters, get_aval(x).shape):
            if d != 1:
                if sizes.setdefault(c, d) != d:
                    raise ValueError(f"einsum: label {c!r} has sizes {sizes[c]} and "
                                     f"{d} in {subscripts!r}, which do not broadcast")
    out = []
    for letters, x in zip(inputs, operands):
        shape = get_aval(x).shape
        target = tuple(sizes.get(c, 1) if d == 1 else d for c, d in zip(letters, shape))
        out.append(x if target == shape or len(set(letters)) != len(letters)
                   else _shape.broadcast_to(x, target))
    return out


def einsum(*operands, out=None, optimize=True, dtype=None, order="K", casting="safe"):
    """NumPy's ``einsum``, every subscript form; the path comes from opt_einsum.

    Implicit and explicit outputs, ``...``, repeated labels (traces and
    diagonals) and the interleaved ``(a, [0, 1], b, [1, 2])`` form are all
    accepted. ``optimize`` is accepted for compatibility: the contraction path is
    always opt_einsum's, cached per (subscripts, shapes).

    >>> import numpy as np
    >>> einsum("ii", np.arange(4.0).reshape(2, 2))
    np.float64(3.0)
    """
    if out is not None:
        raise TypeError("fgrad.numpy.einsum has no out= argument: arrays are "
                        "immutable; use the returned value")
    if not operands:
        raise ValueError("einsum needs subscripts and at least one operand")
    subscripts, ops = parse_subscripts(*operands)
    if dtype is not None:
        ops = [_ew.convert_element_type(x, dtype) for x in ops]
    ops = _broadcast_unit_dims(subscripts, ops)
    return _einsum.einsum(subscripts, *ops)


def einsum_path(*operands, optimize="greedy", einsum_call=False):
    """The contraction path fgrad uses for these operands, as ``np.einsum_path``
    returns it: ``(["einsum_path", (0, 1), ...], description)``."""
    subscripts, ops = parse_subscripts(*operands)
    shapes = tuple(get_aval(x).shape for x in ops)
    path = _einsum.contraction_path(subscripts, shapes)
    return ["einsum_path", *path], f"subscripts {subscripts}, path {path}"


def _letters(n, start=0):
    return "".join(get_symbol(i) for i in range(start, start + n))


def tensordot(a, b, axes=2):
    """Sum products over ``axes`` of ``a`` and ``b`` (NumPy's ``tensordot``).

    >>> import numpy as np
    >>> tensordot(np.ones((2, 3)), np.ones((3, 4)), axes=1).shape
    (2, 4)
    """
    a, b = _as_operand(a), _as_operand(b)
    na, nb = get_aval(a).ndim, get_aval(b).ndim
    if isinstance(axes, (int, np.integer)):
        axes_a, axes_b = list(range(na - axes, na)), list(range(axes))
    else:
        axes_a, axes_b = axes
        axes_a = [axes_a] if isinstance(axes_a, (int, np.integer)) else list(axes_a)
        axes_b = [axes_b] if isinstance(axes_b, (int, np.integer)) else list(axes_b)
    if len(axes_a) != len(axes_b):
        raise ValueError(f"tensordot: {len(axes_a)} axes of a but {len(axes_b)} of b")
    axes_a = [int(x) % na for x in axes_a]
    axes_b = [int(x) % nb for x in axes_b]
    la = list(_letters(na))
    lb = list(_letters(nb, na))
    for i, j in zip(axes_a, axes_b):
        lb[j] = la[i]
    out = [c for i, c in enumerate(la) if i not in axes_a] + \
          [c for j, c in enumerate(lb) if j not in axes_b]
    return einsum(f"{''.join(la)},{''.join(lb)}->{''.join(out)}", a, b)


def inner(a, b):
    """Inner product over the last axes (NumPy's ``inner``; scalars multiply)."""
    a, b = _as_operand(a), _as_operand(b)
    sa, sb = get_aval(a).shape, get_aval(b).shape
    if not sa or not sb:
        return _ew.multiply(a, b)
    if sa[-1] != sb[-1]:            # the contraction does not broadcast a size-1 axis
        raise ValueError(f"inner: shapes {sa} and {sb} not aligned: {sa[-1]} (last "
                         f"axis of a) != {sb[-1]} (last axis of b)")
    return tensordot(a, b, axes=([-1], [-1]))


def dot(a, b):
    """NumPy's ``dot``: products over the last axis of ``a`` and the second-to-last
    of ``b`` (the last if ``b`` is 1-d); scalars multiply. Python numbers and
    lists become arrays first, as NumPy's dot converts them (so a Python float
    makes the result float64, unlike ``a * 2.0``)."""
    return _products.dot(_as_operand(a), _as_operand(b))


def outer(a, b):
    """Outer product of the flattened inputs: NumPy's ``multiply.outer``, so
    the products (overflow to inf and nan included) are NumPy's own."""
    a = _shape.reshape(_as_operand(a), (-1, 1))
    b = _shape.reshape(_as_operand(b), (1, -1))
    return _ew.multiply(a, b)


def vdot(a, b):
    """``sum(conj(a) * b)`` over the flattened inputs (the first is conjugated)."""
    a = _shape.reshape(_as_operand(a), (-1,))
    b = _shape.reshape(_as_operand(b), (-1,))
    if get_aval(a).dtype.kind == "c":
        a = _ew.conj(a)
    return einsum("i,i->", a, b)


def kron(a, b):
    """Kronecker product: blocks ``a[i, j] * b``.

    >>> import numpy as np
    >>> kron(np.eye(2), np.ones((1, 2))).shape
    (2, 4)
    """
    a, b = _as_operand(a), _as_operand(b)
    sa, sb = get_aval(a).shape, get_aval(b).shape
    nd = max(len(sa), len(sb))
    sa, sb = (1,) * (nd - len(sa)) + sa, (1,) * (nd - len(sb)) + sb
    a, b = _shape.reshape(a, sa), _shape.reshape(b, sb)
    la, lb = _letters(nd), _letters(nd, nd)
    prod = einsum(f"{la},{lb}->{''.join(x + y for x, y in zip(la, lb))}", a, b)
    return _shape.reshape(prod, tuple(x * y for x, y in zip(sa, sb)))


def _component(x, i):
    return x[..., i]


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """Cross product of 2- or 3-vectors along the given axes (NumPy's ``cross``)."""
    a, b = _as_operand(a), _as_operand(b)
    if axis is not None:
        axisa = axisb = axisc = axis
    na, nb = get_aval(a).ndim, get_aval(b).ndim
    a = _shape.transpose(a, _to_last(normalize_axis(axisa, na)[0], na))
    b = _shape.transpose(b, _to_last(normalize_axis(axisb, nb)[0], nb))
    da, db = get_aval(a).shape[-1], get_aval(b).shape[-1]
    if da not in (2, 3) or db not in (2, 3):
        raise ValueError(f"cross: vectors must have 2 or 3 components, got {da} "
                         f"and {db}")
    a0, a1 = _component(a, 0), _component(a, 1)
    b0, b1 = _component(b, 0), _component(b, 1)
    z = a0 * b1 - a1 * b0
    if da == 2 and db == 2:
        return z
    if da == 3 and db == 3:
        a2, b2 = _component(a, 2), _component(b, 2)
        x, y = a1 * b2 - a2 * b1, a2 * b0 - a0 * b2
    elif da == 2:
        b2 = _component(b, 2)
        x, y = a1 * b2, -(a0 * b2)
    else:
        a2 = _component(a, 2)
        x, y = -(a2 * b1), a2 * b0
    shape = np.broadcast_shapes(get_aval(x).shape, get_aval(y).shape,
                                get_aval(z).shape)
    out = _shape.stack([_shape.broadcast_to(c, shape) for c in (x, y, z)], axis=-1)
    nc = len(shape) + 1
    c = normalize_axis(axisc, nc)[0]
    return _shape.transpose(out, _from_last(c, nc))


def _to_last(axis, ndim):
    return tuple(i for i in range(ndim) if i != axis) + (axis,)


def _from_last(axis, ndim):
    order = list(range(ndim - 1))
    order.insert(axis, ndim - 1)
    return tuple(order)
